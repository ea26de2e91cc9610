"""One warehouse, any backend: `warehouse db copy SOURCE TARGET` copies every table, ids and all, from
one database into an empty one at the same schema revision (SQLite to PostgreSQL, back, or to a
new file), and proves the copy by a checksum of each table computed the same way on both.

- The source is read in one snapshot (SQLite's read transaction; PostgreSQL's REPEATABLE READ)
  through a read-only connection, table after table, rows streamed in batches: memory is bounded
  by a batch, not the warehouse.
- The target is written in one transaction: a copy that fails or is stopped leaves no row in it
  (an empty database keeps the schema the copy first gave it). Its checksums are compared before
  the commit.
- Values cross exactly: JSON as its stored text (an SQL NULL stays NULL, a JSON null stays
  null; PostgreSQL's JSONB may reorder keys, which the checksum reads past), timestamps as UTC,
  bytes as bytes. Generated columns (trials.model_name) are the target's own.
- A table's checksum (table_digests) is an order-free sum of one SHA-256 per row over its texts
  and the repr of its other values made canonical (timestamps in UTC, JSON with sorted keys), so it needs no ORDER BY (whose text order would differ by collation)
  and reads as a stream. `db check --against OTHER` compares two warehouses this way.

The optional search index (SQLite's FTS tables, PostgreSQL's trigram index) is not data: build
it again on the copy (`warehouse index build`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, Engine, Table, cast, func, select, text
from sqlalchemy.types import LargeBinary, String, Text

from warehouse.db import integrity, models, schema
from warehouse.db.engine import make_engine, make_read_engine, redact
from warehouse.db.session import write_transaction
from warehouse.db.types import Json, UtcDateTime
from warehouse.errors import WarehouseError

TABLES: tuple[Table, ...] = tuple(models.metadata.sorted_tables)  # parents before children
BATCH = 2_000  # rows read and written at a time
_MOD = 2**256

# (table, rows copied so far, rows in the table)
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Digest:
    rows: int
    checksum: str

    def __str__(self) -> str:
        return f"{self.rows:,} rows, sha256-sum {self.checksum[:16]}"


def _columns(table: Table) -> list:
    """What is copied of a table: every stored column (a generated one is the target's own)."""
    return [c for c in table.columns if c.computed is None]


def _kind(column) -> str | None:
    """How a column's values cross and are compared: "json" (its stored text), "time" (a UTC
    timestamp), "bytes", or as the driver gives them."""
    if isinstance(column.type, Json):
        return "json"
    if isinstance(column.type, UtcDateTime):
        return "time"
    if isinstance(column.type, LargeBinary) or isinstance(getattr(column.type, "impl", None), LargeBinary):
        return "bytes"
    return None


def _read_statement(table: Table, dialect: str):
    """JSON as its stored text (exact, NULL and null apart); on SQLite a timestamp as its stored
    text too, which a SQLite target keeps byte for byte."""
    def read(c):
        kind = _kind(c)
        if kind == "json" or (kind == "time" and dialect == "sqlite"):
            return cast(c, Text).label(c.name)
        return c

    return select(*[read(c) for c in _columns(table)])


# --- checksums ---------------------------------------------------------------------------------

def _utc_text(value: datetime | str) -> str:
    """A timestamp (a datetime, or SQLite's stored text) as ISO 8601 in UTC."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    utc = value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
    return utc.isoformat()


def _json_text(value: Any) -> str:
    """JSON (its text, or the value) as one canonical text: keys sorted, no spaces."""
    parsed = json.loads(value) if isinstance(value, str) else value
    return json.dumps(parsed, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


# What makes a value the same whichever backend gave it, by column kind. Every other column holds
# ints, floats, texts or bytes, which both drivers give as the same Python values.
_CANONICAL = {"time": _utc_text, "json": _json_text, "bytes": bytes}


def _row_hash(row: tuple, fixes: list[tuple[int, Any]], texts: tuple[int, ...]) -> int:
    """One row's SHA-256: of its texts' UTF-8, each with its length, then of the repr of its
    other values made canonical (repr is exact for each Python type here: a float's is the
    shortest that reads back as itself). Texts are not repr'd: a message may be megabytes."""
    row = list(row)
    for i, fix in fixes:
        if row[i] is not None:
            row[i] = fix(row[i])
    h = hashlib.sha256()
    for i in texts:
        value = row[i]
        if value is not None:
            data = value.encode("utf-8", "surrogatepass")
            h.update(b"%d:" % len(data))
            h.update(data)
            row[i] = True  # present; None stays None in the repr below
    h.update(repr(row).encode())
    return int.from_bytes(h.digest(), "big")


def _digest_rows(batches: Iterator[list[tuple]], table: Table) -> Digest:
    columns = _columns(table)
    fixes = [(i, _CANONICAL[kind]) for i, c in enumerate(columns) if (kind := _kind(c)) in _CANONICAL]
    texts = tuple(i for i, c in enumerate(columns) if _kind(c) is None and isinstance(c.type, String))
    total, rows = 0, 0
    for batch in batches:
        for row in batch:
            total += _row_hash(row, fixes, texts)
        rows += len(batch)
    return Digest(rows, f"{total % _MOD:064x}")


def _batches(conn: Connection, table: Table) -> Iterator[list[tuple]]:
    statement = _read_statement(table, conn.dialect.name)
    result = conn.execution_options(stream_results=True, yield_per=BATCH).execute(statement)
    for partition in result.partitions(BATCH):
        yield partition


def table_digests(conn: Connection) -> dict[str, Digest]:
    """Every table's row count and checksum (module docstring), read on `conn`."""
    return {table.name: _digest_rows(_batches(conn, table), table) for table in TABLES}


def compare(source: dict[str, Digest], target: dict[str, Digest]) -> list[str]:
    """One line per table whose rows or checksum differ."""
    return [f"{name}: {source[name]} against {target.get(name)}" for name in source if source[name] != target.get(name)]


# --- the copy ----------------------------------------------------------------------------------

@contextmanager
def snapshot(engine: Engine) -> Iterator[Connection]:
    """A read transaction seeing one state of the whole database."""
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn


def _check_target(engine: Engine, source_revision: str) -> None:
    """TARGET must be an empty database, or an empty warehouse at the source's revision."""
    where = redact(engine.url)
    revision = schema.current_revision(engine)
    if revision is None:
        if not schema.is_empty(engine):
            raise WarehouseError(f"{where} holds tables but no warehouse: copy into an empty database")
        schema.upgrade(engine, source_revision)
        return
    if revision != source_revision:
        raise WarehouseError(f"{where} is a warehouse at revision {revision}, the source at {source_revision}: "
                             "upgrade both to the same revision (warehouse db upgrade)")
    with engine.connect() as conn:
        for table in TABLES:
            if conn.execute(select(1).select_from(table).limit(1)).first() is not None:
                raise WarehouseError(f"{where} is not empty (its {table.name} has rows): copy into an empty warehouse")


def copy(source_url, target_url, *, progress: Progress | None = None) -> dict[str, Digest]:
    """Copy the warehouse at source_url into the empty one at target_url (created if it is a
    new SQLite file); the tables' digests, equal on both sides, once committed."""
    source = make_read_engine(source_url)
    schema.ensure_current(source)
    target = make_engine(target_url)
    if redact(source.url) == redact(target.url):
        raise WarehouseError("SOURCE and TARGET are the same database")
    _check_target(target, schema.head_revision())
    dialect = target.dialect.name
    # References are checked once at the end, not per row (PostgreSQL checks the few it declares).
    with snapshot(source) as reading, write_transaction(target, check_references=False) as writing:
        digests: dict[str, Digest] = {}
        for table in TABLES:
            total = reading.execute(select(func.count()).select_from(table)).scalar_one()
            names = [c.name for c in _columns(table)]

            def copied(table=table, total=total, names=names):
                done = 0
                with _writer(writing, table, names) as write:
                    for batch in _batches(reading, table):
                        write(batch)
                        done += len(batch)
                        if progress:
                            progress(table.name, done, total)
                        yield batch

            digests[table.name] = _digest_rows(copied(), table)
        if dialect == "postgresql":
            _reset_sequences(writing)
        broken = integrity.broken_references(writing)
        if broken:
            raise WarehouseError(f"the copy breaks a reference ({broken[0]}): nothing written")
        written = {table.name: _digest_rows(_batches(writing, table), table) for table in TABLES}
        differ = compare(digests, written)
        if differ:
            raise WarehouseError(f"the copy does not read back as the source ({differ[0]}): nothing written")
    source.dispose()
    target.dispose()
    return digests


@contextmanager
def _writer(conn: Connection, table: Table, names: list[str]) -> Iterator[Callable[[list], None]]:
    """A function writing batches of rows into `table`: on PostgreSQL one COPY for the table
    (the rows as read: JSON as its text, which COPY hands to JSONB's parser), on SQLite the
    driver's executemany."""
    if conn.dialect.name == "postgresql":
        # A SQLite source's timestamps come as their text, which is UTC without an offset.
        conn.exec_driver_sql("SET LOCAL TIME ZONE 'UTC'")
        columns = ", ".join(f'"{name}"' for name in names)
        cursor = conn.connection.driver_connection.cursor()
        with cursor.copy(f'COPY "{table.name}" ({columns}) FROM STDIN') as copying:
            def write(batch: list) -> None:
                for row in batch:
                    copying.write_row(row)

            yield write
        return

    # SQLite: the driver's executemany, each value as SQLAlchemy's types store it (a timestamp as
    # its UTC text, JSON as the text read), without a bind processor per value.
    columns = {c.name: c for c in table.columns}
    convert = [_sqlite_datetime if _kind(columns[name]) == "time" else None for name in names]
    sql = (f'INSERT INTO "{table.name}" ({", ".join(chr(34) + n + chr(34) for n in names)}) '
           f'VALUES ({", ".join("?" * len(names))})')
    cursor = conn.connection.driver_connection.cursor()

    def write(batch: list) -> None:
        if any(convert):
            batch = [tuple(f(v) if f and v is not None else v for f, v in zip(convert, row)) for row in batch]
        cursor.executemany(sql, batch)

    yield write


def _sqlite_datetime(value: datetime | str) -> str:
    """A timestamp as SQLAlchemy's SQLite DATETIME stores it (UtcDateTime: in UTC, no offset);
    a SQLite source's own text as it is."""
    if isinstance(value, str):
        return value
    utc = value.astimezone(timezone.utc) if value.tzinfo else value
    return f"{utc:%Y-%m-%d %H:%M:%S}.{utc.microsecond:06d}"


def _reset_sequences(conn: Connection) -> None:
    """Each id sequence past the ids copied, so the next ingest allocates new ones."""
    for table in TABLES:
        pk = list(table.primary_key.columns)
        if len(pk) == 1 and pk[0].name == "id" and pk[0].autoincrement is not False:
            conn.execute(text(
                f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), max(id)) FROM {table.name} "
                "HAVING max(id) IS NOT NULL"))
