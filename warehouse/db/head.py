"""A new warehouse's schema in one step: the schema the migrations leave at head, as each
backend's own DDL (migrations/head/<backend>.sql), run in one transaction.

A first `warehouse ingest` creates its database. Run one by one, the sixteen migrations and
Alembic's import took 0.3 s of a SQLite math ingest's 2.9 s and 0.6 s of PostgreSQL's (the
issue 31 measurements), for a result that is always the same. The files are that result,
written by `python -m warehouse.db.head` from databases the migrations made (after a migration
is added: `python -m warehouse.db.head --pg postgresql://USER@HOST/SCRATCH_DB`, an empty
database whose tables it creates, dumps with pg_dump and drops again); the tests make a
warehouse both ways on both backends and require the two to be identical (tables, columns,
indexes, views, constraints, grants). `warehouse db upgrade` still runs the migrations: an
existing warehouse is upgraded, never re-created.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from sqlalchemy import Connection, text
from sqlalchemy.engine import URL

from warehouse.db import schema
from warehouse.db.engine import make_engine, resolve_url
from warehouse.db.schema import HEAD_REVISION, MIGRATIONS_DIR

HEAD_DIR = MIGRATIONS_DIR / "head"
# Each statement of a file ends with this: its last line is ";" (none holds one of its own).
END = "\n;\n"


def path(backend: str) -> Path:
    return HEAD_DIR / f"{backend}.sql"


def statements(backend: str) -> list[str]:
    """The file's statements, which end with the version row of HEAD_REVISION."""
    text = path(backend).read_text(encoding="utf-8")
    return [s for s in text.split(END) if s.strip() and not s.lstrip().startswith("--")]


def create(conn: Connection) -> None:
    """Create the head schema on `conn`, in its transaction, which holds the migration lock
    and found the database empty (schema.ensure_current). On PostgreSQL, the database's read
    role gets its grants as migration 0011 and `db upgrade` give them (roles.grant)."""
    backend = conn.dialect.name
    for statement in statements(backend):
        conn.exec_driver_sql(statement)
    if backend == "postgresql":
        from warehouse.db import roles

        roles.grant(conn)


def render(backend: str, ddl: list[str]) -> str:
    """A file's text: a header, then `ddl`, then the version row; each statement ended by END."""
    assert not any(END.strip() == line.strip() for s in ddl for line in s.splitlines()), "a ; alone on a line"
    header = (f"-- The {backend} schema at revision {HEAD_REVISION}, as the migrations leave it: what a new warehouse\n"
              f"-- is created from (warehouse.db.head). Written by `python -m warehouse.db.head`; do not edit.")
    version = f"INSERT INTO alembic_version (version_num) VALUES ('{HEAD_REVISION}')"
    return header + END + END.join([*ddl, version]) + END


# --- writing the files ---------------------------------------------------------------------------

# sqlite_master's statements in the order that creates them: tables before what reads them.
_SQLITE_ORDER = {"table": 0, "index": 1, "view": 2, "trigger": 3}


def ddl(url: URL) -> list[str]:
    """The schema statements of the warehouse at `url`, but for its version row: SQLite's as it
    stored them, PostgreSQL's as pg_dump writes them (no owner, no grants: roles.grant's)."""
    if url.get_backend_name() == "sqlite":
        engine = make_engine(url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(text("SELECT type, sql FROM sqlite_master WHERE sql IS NOT NULL "
                                         "AND name NOT LIKE 'sqlite_%' ORDER BY rowid")).all()
        finally:
            engine.dispose()
        return [sql for kind, sql in sorted(rows, key=lambda row: _SQLITE_ORDER[row[0]])]
    return pg_dump(url, privileges=False)


def pg_dump(url: URL, *, privileges: bool) -> list[str]:
    """pg_dump's schema-only statements for the database at `url`, without its settings and
    comments; with `privileges`, its grants too."""
    dumper = shutil.which("pg_dump") or sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_dump"))[-1]
    plain = url.set(drivername="postgresql").render_as_string(hide_password=False)
    flags = ["--schema-only", "--no-owner", "--no-comments", "--no-tablespaces"]
    out = subprocess.run([str(dumper), *flags, *([] if privileges else ["--no-privileges"]), plain],
                         check=True, capture_output=True, text=True).stdout
    # Settings (SET …, the search_path it empties) and psql's meta-commands are the dump's
    # session, not the schema; its statements name every object with its schema.
    lines = [line for line in out.splitlines() if line and not line.startswith(("--", "SET ", "\\"))
             and "pg_catalog.set_config" not in line]
    return [s.strip() for s in re.split(r";\n", "\n".join(lines) + "\n") if s.strip()]


def write(backend: str, url: URL) -> Path:
    schema.upgrade(make_engine(url))
    target = path(backend)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(backend, ddl(url)), encoding="utf-8")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", help="an empty PostgreSQL database to make the PostgreSQL file in")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(write("sqlite", resolve_url(f"sqlite:///{tmp}/head.db")))
    if args.pg:
        url = resolve_url(args.pg)
        print(write("postgresql", url))
        engine = make_engine(url)
        schema.downgrade(engine, "base")
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
        engine.dispose()


if __name__ == "__main__":
    main()
