"""Bulk statements for both backends. The only ingest module that knows which database it is
talking to: everything else hands rows here."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, Table, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite

# Keys per `IN (...)` lookup: far below SQLite's 32,766 and PostgreSQL's 65,535 bound
# parameters even for three-column keys.
LOOKUP_CHUNK = 500


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _insert(conn: Connection, table: Table):
    dialect = sqlite if conn.dialect.name == "sqlite" else postgresql
    return dialect.insert(table)


def insert_ignore(
    conn: Connection,
    table: Table,
    rows: list[dict[str, Any]],
    conflict_cols: Sequence[str],
    returning: Sequence[str] = (),
) -> list[tuple]:
    """INSERT … ON CONFLICT (conflict_cols) DO NOTHING; with `returning`, the named columns of
    the rows actually inserted (rows that already existed return nothing)."""
    if not rows:
        return []
    stmt = _insert(conn, table).on_conflict_do_nothing(index_elements=list(conflict_cols))
    if not returning:
        conn.execute(stmt, rows)
        return []
    stmt = stmt.returning(*(table.c[name] for name in returning))
    out: list[tuple] = []
    # insertmanyvalues batches by the driver's parameter limit; one statement per chunk keeps
    # each RETURNING result small.
    for chunk in chunks(rows, 1000):
        out.extend(tuple(r) for r in conn.execute(stmt, list(chunk)))
    return out


def insert_rows(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Plain executemany for rows known to be new (their parent was inserted just now)."""
    if rows:
        conn.execute(table.insert(), rows)


def lookup(
    conn: Connection,
    table: Table,
    key_cols: Sequence[str],
    keys: Iterable[tuple],
    value_cols: Sequence[str],
) -> dict[tuple, tuple]:
    """{key: values} for the keys that exist, looked up in parameter-bounded chunks."""
    keys = list(dict.fromkeys(keys))
    found: dict[tuple, tuple] = {}
    key_exprs = [table.c[name] for name in key_cols]
    cols = key_exprs + [table.c[name] for name in value_cols]
    width = len(key_cols)
    for chunk in chunks(keys, LOOKUP_CHUNK):
        if width == 1:
            cond = key_exprs[0].in_([k[0] for k in chunk])
        else:
            cond = tuple_(*key_exprs).in_(list(chunk))
        for row in conn.execute(select(*cols).where(cond)):
            found[tuple(row[:width])] = tuple(row[width:])
    return found
