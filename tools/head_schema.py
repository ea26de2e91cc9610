"""Write migrations/head/<backend>.sql, the schema the migrations leave at head, from which a
new warehouse is created (warehouse.db.head). Run it after adding a migration:

    python -m tools.head_schema --pg postgresql://USER@HOST/SCRATCH_DB

Each backend's file comes from a database made by the migrations, here and now: SQLite's from
a scratch file, PostgreSQL's from the empty database --pg names (its tables are created, read
by pg_dump, and dropped again). The tests hold a warehouse made from the files equal to one
made by the migrations, on both backends.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import URL, make_url

from warehouse.db import head, schema
from warehouse.db.engine import make_engine, resolve_url

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
    target = head.path(backend)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(head.render(backend, ddl(url)), encoding="utf-8")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", help="an empty PostgreSQL database to make the PostgreSQL file in")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(write("sqlite", resolve_url(f"sqlite:///{tmp}/head.db")))
    if args.pg:
        url = make_url(args.pg)
        print(write("postgresql", url))
        engine = make_engine(url)
        schema.downgrade(engine, "base")
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
        engine.dispose()


if __name__ == "__main__":
    main()
