"""The schema's version: upgrading it, reading it, and refusing to work on the wrong one."""

from __future__ import annotations

import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError

from warehouse.db.engine import make_engine, not_a_warehouse, redact
from warehouse.errors import SchemaError, first_line

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
# Migrations are serialized across processes (several `warehouse ingest` started at once on a new
# database all try to create it): PostgreSQL takes this transaction-scoped advisory lock first;
# SQLite begins the migration with BEGIN IMMEDIATE, its write lock, waited for via busy_timeout.
MIGRATION_LOCK = 0x77686462  # "whdb"; distinct from the ingest write lock (ingest.write.bulk)

# The newest revision in migrations/versions. Every command checks the database against it, so
# it is a constant rather than read from the scripts: importing Alembic costs a tenth of a
# second that a re-ingest or a query should not pay. test_migrations keeps it honest.
HEAD_REVISION = "0016"

ROLE_RACE_TRIES = 6  # runs of one migration transaction that another database's raced (_role_race)


def alembic_config(engine: Engine) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


def _config_on(conn) -> Config:
    """Alembic's configuration, its migrations to run on `conn` (in _run's transaction)."""
    cfg = alembic_config(conn.engine)
    cfg.attributes["connection"] = conn
    return cfg


def script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS_DIR))


def head_revision() -> str:
    return HEAD_REVISION


def current_revision(engine: Engine) -> str | None:
    """The revision recorded in the database; None for an empty or foreign one."""
    with engine.connect() as conn:
        try:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except ProgrammingError as exc:
            if getattr(exc.orig, "sqlstate", None) == "42501":  # insufficient_privilege
                conn.rollback()
                raise _may_not_read(conn) from None
            return None  # no version table
        except OperationalError:
            return None


def _may_not_read(conn) -> SchemaError:
    """A PostgreSQL user refused the warehouse's tables: said as such (not as a database that
    holds no warehouse), with the grant that gives read access."""
    from warehouse.db.roles import reader_role

    database, user = conn.exec_driver_sql("SELECT current_database(), quote_ident(current_user)").one()
    return SchemaError(f"{redact(conn.engine.url)}: permission denied: {user} may not read this warehouse; "
                       f"its owner can give read access with GRANT {reader_role(database)} TO {user}")


def is_empty(engine: Engine) -> bool:
    with engine.connect() as conn:
        return _is_empty(conn)


def _is_empty(conn) -> bool:
    """No tables but, at most, the version table a full downgrade leaves behind. Inspected
    rather than SELECTed: a failed statement would abort PostgreSQL's transaction."""
    return not set(inspect(conn).get_table_names()) - {"alembic_version"}


def _run(engine: Engine, fn) -> None:
    """fn(connection) in one transaction that holds the migration lock."""
    # Migrations run on their own engine: SQLite's batch mode must not enforce foreign keys
    # while it rebuilds tables.
    migration_engine = make_engine(engine.url, for_migrations=True)
    try:
        for attempt in range(ROLE_RACE_TRIES):
            try:
                with migration_engine.connect() as conn, conn.execution_options(sqlite_write=True).begin():
                    if conn.dialect.name == "postgresql":
                        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
                    fn(conn)
                return
            except DBAPIError as exc:
                if not _role_race(exc) or attempt == ROLE_RACE_TRIES - 1:
                    raise
                time.sleep(random.uniform(0.02, 0.1) * (attempt + 1))
    finally:
        migration_engine.dispose()


def _role_race(exc: DBAPIError) -> bool:
    """A failure that says another database's migration changed the server's roles meanwhile
    (the advisory lock is per database; roles are not): a deadlock on them, or a role this
    transaction had looked up and another dropped (0011 drops 0007's role; a warehouse dropped
    takes its reader with it). The transaction was rolled back whole, so it may simply run again."""
    state = getattr(exc.orig, "sqlstate", None)
    return state == "40P01" or (state == "42704" and "role" in str(exc.orig))


def upgrade(engine: Engine, revision: str = "head") -> None:
    _step(engine, "upgrade", revision)
    if engine.dialect.name == "postgresql" and current_revision(engine) == head_revision():
        # The database's read role, granted again: a database copied from a warehouse (CREATE
        # DATABASE … TEMPLATE) is at head with its template's grants, not its own (roles.grant).
        from warehouse.db import roles

        _run(engine, roles.grant)


def downgrade(engine: Engine, revision: str) -> None:
    _step(engine, "downgrade", revision)


def _step(engine: Engine, direction: str, revision: str) -> None:
    """Alembic's upgrade or downgrade, with a revision it cannot reach (unknown, ambiguous,
    below base, beyond head) refused in one line."""
    from alembic import command
    from alembic.util import CommandError

    if not revision.strip():
        raise SchemaError(f"no revision to {direction} to: give a revision id, head, base or a step such as -1")
    before = current_revision(engine)
    try:
        _run(engine, lambda conn: getattr(command, direction)(_config_on(conn), revision))
    except (CommandError, AssertionError) as exc:
        # Alembic refuses most revisions it cannot reach with a CommandError, and a few
        # malformed ones (`@`, `head+1`) with a bare assert.
        why = first_line(exc) if isinstance(exc, CommandError) else "no such revision"
        at = current_revision(engine) or "base"
        raise SchemaError(f"cannot {direction} from {at} to {revision!r}: {why}") from None
    if current_revision(engine) != before:
        # A migration may have rebuilt any table (0009 rewrites the summaries' lengths and
        # counts): every table holding rows gets fresh planner statistics.
        from warehouse.db import statistics  # (the models: not for every command's schema check)

        statistics.refresh(engine, every_table=True)


@dataclass
class Losses:
    """What a downgrade would delete: the rows of the tables it drops and the values (not NULL)
    of the columns it drops from tables it keeps. Empty when nothing held data."""

    rows: dict[str, int] = field(default_factory=dict)
    values: dict[str, int] = field(default_factory=dict)  # "table.column" -> values

    def __bool__(self) -> bool:
        return any(self.rows.values()) or any(self.values.values())

    def __str__(self) -> str:
        parts = []
        if self.rows.get("trials"):
            parts.append(_count(self.rows["trials"], "trial"))
        tables = {name: n for name, n in self.rows.items() if n}
        if tables:
            parts.append(f"{_count(sum(tables.values()), 'row')} in {_count(len(tables), 'table')} "
                         f"({', '.join(f'{name} {n}' for name, n in sorted(tables.items()))})")
        parts += [f"{_count(n, 'value')} of {column}" for column, n in sorted(self.values.items()) if n]
        return ", ".join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def downgrade_losses(engine: Engine, revision: str) -> Losses:
    """What `downgrade(engine, revision)` would delete, found without touching the database:
    the same migrations are run on an empty scratch SQLite file, from the database's revision
    to `revision`, and the tables and columns that disappear there are counted here. (Tables
    and columns are the same on both backends; test_migrations checks the models against both.)
    A revision the downgrade cannot reach is refused here, as downgrade() would refuse it."""
    current = current_revision(engine)
    if current is not None and current not in _known_revisions():
        raise _unknown_revision(engine, current)
    with tempfile.TemporaryDirectory(prefix="warehouse-scratch-") as tmp:
        scratch = make_engine(URL.create("sqlite+pysqlite", database=str(Path(tmp) / "scratch.db")))
        try:
            if current is not None:
                upgrade(scratch, current)
            before = _layout(scratch)
            downgrade(scratch, revision)  # refused as it would be on the database: same revision
            after = _layout(scratch)
        finally:
            scratch.dispose()
    losses = Losses()
    if "turns" in after and "turns" not in before:
        # Below 0014 an episode's turns are rows of `turns` again: the conversations move there.
        for table, columns in _MOVED_TO_TURNS.items():
            if columns is None:
                before.pop(table, None)
            else:
                before.get(table, set()).difference_update(columns)
    with engine.connect() as conn:
        present = _layout_of(conn)
        for table, columns in before.items():
            if table not in present:
                continue
            if table not in after:
                losses.rows[table] = conn.execute(text(f"SELECT count(*) FROM {_quote(conn, table)}")).scalar()
                continue
            for column in sorted((columns - after[table]) & present[table]):
                losses.values[f"{table}.{column}"] = conn.execute(text(
                    f"SELECT count({_quote(conn, column)}) FROM {_quote(conn, table)}")).scalar()
    return losses


# What a downgrade below 0014 writes back into the table `turns` rather than deletes.
_MOVED_TO_TURNS: dict[str, set[str] | None] = {"conversations": None, "conversation_turns": None,
                                               "episodes": {"conversation_id"}}


def _layout(engine: Engine) -> dict[str, set[str]]:
    with engine.connect() as conn:
        return _layout_of(conn)


def _layout_of(conn) -> dict[str, set[str]]:
    """Each table's columns that hold data: not the version table, nor generated columns (the
    database derives them from others)."""
    inspector = inspect(conn)
    return {table: {c["name"] for c in inspector.get_columns(table) if not c.get("computed")}
            for table in inspector.get_table_names() if table != "alembic_version"}


def _quote(conn, name: str) -> str:
    return conn.dialect.identifier_preparer.quote(name)


def _create_if_still_empty(conn) -> None:
    """Create the schema at head unless another process did while this one waited for the
    lock: from the head schema's own statements (warehouse.db.head), not migration by migration."""
    if not _is_empty(conn):
        return  # made meanwhile (or not ours to touch): ensure_current decides below
    from warehouse.db import head

    head.create(conn)


def ensure_current(engine: Engine, *, create: bool = False) -> None:
    """Refuse a stale, newer or foreign schema with one line naming the fix.

    An empty database is not stale: with `create` it is brought to head (what `ingest` does);
    without it, it is refused with the command that creates it. Concurrent creators are safe:
    the creation is serialized and re-checked under the migration lock."""
    head = head_revision()
    current = current_revision(engine)
    where = redact(engine.url)
    if current is None and create:
        # Decided under the migration lock: a process creating the schema right now may commit
        # between the version read above and a look for tables here.
        _run(engine, _create_if_still_empty)
        current = current_revision(engine)
    if current == head:
        return
    if current is None:
        if is_empty(engine):
            raise SchemaError(
                f"{where} holds no warehouse yet: run `warehouse ingest …` or `warehouse db upgrade`"
            )
        raise not_a_warehouse(where)
    if current not in _known_revisions():
        raise _unknown_revision(engine, current)
    raise SchemaError(f"{where} is at schema {current}, this tool needs {head}: run `warehouse db upgrade`")


def _known_revisions() -> set[str]:
    return {rev.revision for rev in script().walk_revisions()}


def _unknown_revision(engine: Engine, current: str) -> SchemaError:
    return SchemaError(f"{redact(engine.url)} is at schema {current}, which this version of warehouse does "
                       f"not know (newer or foreign): upgrade the warehouse tool")
