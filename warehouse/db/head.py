"""A new warehouse's schema in one step: the schema the migrations leave at head, as each
backend's own DDL (migrations/head/<backend>.sql), run in one transaction.

A first `warehouse ingest` creates its database. Run one by one, the sixteen migrations and
Alembic's import took 0.3 s of a SQLite math ingest's 2.9 s and 0.6 s of PostgreSQL's (the
issue 31 measurements), for a result that is always the same. The files are that result,
written by `python -m tools.head_schema` from databases the migrations made; the tests make a
warehouse both ways on both backends and require the two to be identical (tables, columns,
indexes, views, constraints, grants). `warehouse db upgrade` still runs the migrations: an
existing warehouse is upgraded, never re-created.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection

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
              f"-- is created from (warehouse.db.head). Written by `python -m tools.head_schema`; do not edit.")
    version = f"INSERT INTO alembic_version (version_num) VALUES ('{HEAD_REVISION}')"
    return header + END + END.join([*ddl, version]) + END
