"""One warehouse, any backend: `warehouse db copy FROM TO` copies every table, ids and all, from
one database into an empty one at the same schema revision (SQLite to PostgreSQL, back, or to a
new file), and proves the copy by a checksum of each table computed the same way on both.

- The source is read in one snapshot (SQLite's read transaction; PostgreSQL's REPEATABLE READ)
  through a read-only connection, table after table, rows streamed in batches: memory is bounded
  by a batch, not the warehouse.
- The target is written in one transaction: a copy that fails or is stopped leaves it as empty as
  it was. Its checksums are compared before the commit.
- Values cross exactly: JSON as its stored text (an SQL NULL stays NULL, a JSON null stays
  null; PostgreSQL's JSONB may reorder keys, which the checksum reads past), timestamps as UTC,
  bytes as bytes. Generated columns (trials.model_name) are the target's own.
- A table's checksum (table_digests) is an order-free sum of one SHA-256 per row over a canonical
  encoding of its values, so it needs no ORDER BY (whose text order would differ by collation)
  and reads as a stream. `db check --against OTHER` compares two warehouses this way.

The optional search index (SQLite's FTS tables, PostgreSQL's trigram index) is not data: build
it again on the copy (`warehouse index build`)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Engine, Table, bindparam, cast, func, insert, select, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import Text

from warehouse.db import models, schema
from warehouse.db.engine import make_engine, make_read_engine, redact
from warehouse.db.session import write_transaction
from warehouse.db.types import Json
from warehouse.errors import WarehouseError

TABLES: tuple[Table, ...] = tuple(models.Base.metadata.sorted_tables)  # parents before children
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


def _is_json(column) -> bool:
    return isinstance(column.type, Json)


def _read_statement(table: Table):
    # JSON as its stored text: exact, NULL and null apart.
    return select(*[cast(c, Text).label(c.name) if _is_json(c) else c for c in _columns(table)])


def _write_statement(table: Table, dialect: str):
    values = {}
    for c in _columns(table):
        if _is_json(c):
            bound = bindparam(c.name, type_=Text)
            values[c.name] = cast(bound, JSONB) if dialect == "postgresql" else bound
        else:
            values[c.name] = bindparam(c.name, type_=c.type)
    return insert(table).values(values)


# --- checksums ---------------------------------------------------------------------------------

def _canonical(value: Any, json_text: bool) -> bytes:
    """One value as bytes that are the same whichever backend gave it."""
    if value is None:
        return b"N"
    if json_text:
        parsed = json.loads(value) if isinstance(value, str) else value
        return b"j" + json.dumps(parsed, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8", "surrogatepass")
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, Decimal):
        value = int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, int):
        return b"i%d" % value
    if isinstance(value, float):
        return b"f" + (value.hex() if math.isfinite(value) else repr(value)).encode()
    if isinstance(value, datetime):
        utc = value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
        return b"t" + utc.isoformat().encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"b" + bytes(value)
    return b"s" + str(value).encode("utf-8", "surrogatepass")


def _row_hash(row: tuple, json_columns: tuple[bool, ...]) -> int:
    h = hashlib.sha256()
    for value, is_json in zip(row, json_columns):
        part = _canonical(value, is_json)
        h.update(b"%d:" % len(part))
        h.update(part)
    return int.from_bytes(h.digest(), "big")


def _digest_rows(batches: Iterator[list[tuple]], table: Table) -> Digest:
    json_columns = tuple(_is_json(c) for c in _columns(table))
    total, rows = 0, 0
    for batch in batches:
        for row in batch:
            total = (total + _row_hash(tuple(row), json_columns)) % _MOD
        rows += len(batch)
    return Digest(rows, f"{total:064x}")


def _batches(conn: Connection, table: Table) -> Iterator[list[tuple]]:
    result = conn.execution_options(stream_results=True, yield_per=BATCH).execute(_read_statement(table))
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
    """TO must be an empty database, or an empty warehouse at the source's revision."""
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
        raise WarehouseError("FROM and TO are the same database")
    _check_target(target, schema.head_revision())
    dialect = target.dialect.name
    with snapshot(source) as reading, write_transaction(target) as writing:
        digests: dict[str, Digest] = {}
        for table in TABLES:
            total = reading.execute(select(func.count()).select_from(table)).scalar_one()
            statement = _write_statement(table, dialect)
            names = [c.name for c in _columns(table)]

            def copied(table=table, total=total, statement=statement, names=names):
                done = 0
                with _writer(writing, table, names, statement) as write:
                    for batch in _batches(reading, table):
                        write(batch)
                        done += len(batch)
                        if progress:
                            progress(table.name, done, total)
                        yield batch

            digests[table.name] = _digest_rows(copied(), table)
        if dialect == "postgresql":
            _reset_sequences(writing)
        written = {table.name: _digest_rows(_batches(writing, table), table) for table in TABLES}
        differ = compare(digests, written)
        if differ:
            raise WarehouseError(f"the copy does not read back as the source ({differ[0]}): nothing written")
    source.dispose()
    target.dispose()
    return digests


@contextmanager
def _writer(conn: Connection, table: Table, names: list[str], statement) -> Iterator[Callable[[list], None]]:
    """A function writing batches of rows into `table`: on PostgreSQL one COPY for the table
    (the rows as read: JSON as its text, which COPY hands to JSONB's parser); elsewhere the
    insert statement, executed many."""
    if conn.dialect.name == "postgresql":
        columns = ", ".join(f'"{name}"' for name in names)
        cursor = conn.connection.driver_connection.cursor()
        with cursor.copy(f'COPY "{table.name}" ({columns}) FROM STDIN') as copying:
            def write(batch: list) -> None:
                for row in batch:
                    copying.write_row(row)

            yield write
        return

    def write(batch: list) -> None:
        conn.execute(statement, [dict(zip(names, row)) for row in batch])

    yield write


def _reset_sequences(conn: Connection) -> None:
    """Each id sequence past the ids copied, so the next ingest allocates new ones."""
    for table in TABLES:
        pk = list(table.primary_key.columns)
        if len(pk) == 1 and pk[0].name == "id" and pk[0].autoincrement is not False:
            conn.execute(text(
                f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), max(id)) FROM {table.name} "
                "HAVING max(id) IS NOT NULL"))
