"""Units of work: one place commits or rolls back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine


@contextmanager
def write_transaction(engine: Engine, *, check_references: bool = True) -> Iterator[Connection]:
    """A connection in one write transaction: committed if the block completes, rolled back
    (leaving nothing behind) if it raises.

    `check_references=False` turns off SQLite's per-row foreign-key checks, for a writer that
    only writes ids it allocated or looked up under the write lock (the ingest writer; its
    tests check every reference of what it wrote: warehouse.db.integrity). PostgreSQL checks
    the references it declares, which are not the bulk tables' (migration 0016)."""
    with engine.connect() as conn:
        conn = conn.execution_options(sqlite_write=True, foreign_keys=check_references)
        with conn.begin():
            yield conn


@contextmanager
def read_transaction(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn:
        with conn.begin():
            yield conn
