"""The schema's version: upgrading it, reading it, and refusing to work on the wrong one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import OperationalError, ProgrammingError

from warehouse.db.engine import make_engine, redact
from warehouse.errors import SchemaError

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
# Migrations are serialized across processes (several `warehouse ingest` started at once on a new
# database all try to create it): PostgreSQL takes this transaction-scoped advisory lock first;
# SQLite begins the migration with BEGIN IMMEDIATE, its write lock, waited for via busy_timeout.
MIGRATION_LOCK = 0x77686462  # "whdb"; distinct from the ingest write lock (ingest.bulk)

# The newest revision in migrations/versions. Every command checks the database against it, so
# it is a constant rather than read from the scripts: importing Alembic costs a tenth of a
# second that a re-ingest or a query should not pay. test_migrations keeps it honest.
HEAD_REVISION = "0006"


def alembic_config(engine: Engine) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
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
        except (OperationalError, ProgrammingError):
            return None  # no version table


def is_empty(engine: Engine) -> bool:
    with engine.connect() as conn:
        return _is_empty(conn)


def _is_empty(conn) -> bool:
    """No tables but, at most, the version table a full downgrade leaves behind. Inspected
    rather than SELECTed: a failed statement would abort PostgreSQL's transaction."""
    return not set(inspect(conn).get_table_names()) - {"alembic_version"}


def _run(engine: Engine, fn, *args) -> None:
    # Migrations run on their own engine: SQLite's batch mode must not enforce foreign keys
    # while it rebuilds tables.
    migration_engine = make_engine(engine.url, for_migrations=True)
    try:
        with migration_engine.connect() as conn, conn.execution_options(sqlite_write=True).begin():
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
            cfg = alembic_config(migration_engine)
            cfg.attributes["connection"] = conn
            fn(cfg, *args)
    finally:
        migration_engine.dispose()


def upgrade(engine: Engine, revision: str = "head") -> None:
    from alembic import command

    _run(engine, command.upgrade, revision)


def downgrade(engine: Engine, revision: str) -> None:
    from alembic import command

    _run(engine, command.downgrade, revision)


def _upgrade_if_still_empty(cfg: Config) -> None:
    """Create the schema unless another process did while this one waited for the lock."""
    from alembic import command

    if not _is_empty(cfg.attributes["connection"]):
        return  # made meanwhile (or not ours to touch): ensure_current decides below
    command.upgrade(cfg, "head")


def ensure_current(engine: Engine, *, create: bool = False) -> None:
    """Refuse a stale, newer or foreign schema with one line naming the fix.

    An empty database is not stale: with `create` it is brought to head (what `ingest` does);
    without it, it is refused with the command that creates it. Concurrent creators are safe:
    the creation is serialized and re-checked under the migration lock."""
    head = head_revision()
    current = current_revision(engine)
    where = redact(engine.url)
    if current is None and create and is_empty(engine):
        _run(engine, _upgrade_if_still_empty)
        current = current_revision(engine)
    if current == head:
        return
    if current is None:
        if is_empty(engine):
            raise SchemaError(
                f"{where} holds no warehouse yet: run `warehouse ingest …` or `warehouse db upgrade`"
            )
        raise SchemaError(f"{where} holds tables but no warehouse schema version: point --db at a warehouse")
    known = {rev.revision for rev in script().walk_revisions()}
    if current not in known:
        raise SchemaError(
            f"{where} is at schema {current}, which this version of warehouse does not know "
            f"(newer or foreign): upgrade the warehouse tool"
        )
    raise SchemaError(f"{where} is at schema {current}, this tool needs {head}: run `warehouse db upgrade`")
