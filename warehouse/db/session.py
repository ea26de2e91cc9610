"""Units of work: one place commits or rolls back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in one write transaction: committed if the block completes, rolled back
    (leaving nothing behind) if it raises."""
    with engine.connect() as conn:
        conn = conn.execution_options(sqlite_write=True)
        with conn.begin():
            yield conn


@contextmanager
def read_transaction(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn:
        with conn.begin():
            yield conn
