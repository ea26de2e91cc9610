"""Bulk statements for both backends: the only ingest module that knows which database it is
talking to. Everything else hands rows here as tuples in a declared column order.

One writer at a time: a unit's transaction first takes the warehouse's write lock (SQLite's
own lock through BEGIN IMMEDIATE; a transaction-scoped advisory lock on PostgreSQL), so what
a unit looked up cannot change under it. That is what makes the fast paths safe: rows are
queued and flushed straight to the DB-API cursor (executemany on SQLite, COPY on PostgreSQL)
with no ON CONFLICT and no RETURNING, and new rows get ids allocated up front so children can
be queued at once. Concurrent ingests queue for the lock instead of racing (no duplicates, no
deadlocks); readers are never blocked.

Each column's SQLAlchemy bind processor is applied once per value, so rows are stored exactly
as the ORM types would store them.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from itertools import chain
from typing import Any, Callable

from sqlalchemy import Connection, LargeBinary, Table
from sqlalchemy.dialects import postgresql, sqlite

from warehouse.db import models
from warehouse.db.types import UtcDateTime

# Keys per lookup statement: well under SQLite's 32,766 and PostgreSQL's 65,535 parameters
# even for three-column keys.
LOOKUP_CHUNK = 900
# Keys per PostgreSQL lookup: arrays, so no parameter limit applies; this bounds a round trip.
PG_LOOKUP_CHUNK = 20_000
# Rows per executemany call; bounds the memory of one statement's parameters.
WRITE_CHUNK = 5000
# Queued rows (and bytes of their text) that make a PostgreSQL flush.
PG_FLUSH_ROWS = 50_000
PG_FLUSH_BYTES = 16 << 20
# Rows from which a PostgreSQL COPY is sent from a thread of its own.
QUEUED_COPY_ROWS = 1000
# Ids fetched from a PostgreSQL sequence in one round trip.
PG_ID_BLOCK = 10_000
# The advisory lock key every PostgreSQL writer takes (any constant unique to this tool).
PG_WRITE_LOCK = 0x7472616A  # "traj"
# What the server applies to a writer's session while it holds the write lock (for the rest of
# that transaction only; see lock_for_writing).
PG_WRITER_SETTINGS = {
    # A writer is idle in its transaction only between statements: while it waits for its
    # reader's next batch or prepares one, well under a second each. A session idle far longer
    # has lost its process, and the server ends it, which releases the lock.
    "idle_in_transaction_session_timeout": "60s",
    # A writer's host gone silent (crashed, cut off) leaves no process to close the socket; the
    # server's keepalive probes find it out within about a minute.
    "tcp_keepalives_idle": "30",
    "tcp_keepalives_interval": "10",
    "tcp_keepalives_count": "3",
}

# Long texts (over about 2 KB, stored out of line) compressed with LZ4 rather than the server's
# default pglz, where the server was built with it (PostgreSQL 14 and later, as Debian's is):
# several times faster to compress, a little larger. Math 1×: the messages' COPY 2.0 s → 1.45 s.
# A value keeps the method it was written with, and every reader decompresses either.
_LZ4_WHERE_BUILT = ("SELECT set_config('default_toast_compression', 'lz4', true) FROM pg_settings "
                    "WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)")

# PostgreSQL: rows written in the order of a randomly keyed unique index (a message's hash), so
# its inserts go through the index from one end to the other, each page once a flush, instead of
# at random: with the index larger than the server's buffers, pages were read back and written
# out again and again. Math×20, in process: 62.9 s → 46.6 s; the messages' COPY per unit
# 1.3-2.2 s → 1.1-1.8 s. Not on SQLite: its table is itself a B-tree on the id, which rows in
# hash order enter out of order (math×20 took 37.7 s instead of 32.9).
_WRITE_ORDER = {"messages": "content_hash"}

# The PostgreSQL type of each SQLAlchemy column type, for binary COPY (which sends each value
# in its column's own binary form, so the types must be named exactly).
_PG_BINARY_TYPES = {"BIGINT": "int8", "INTEGER": "int4", "TEXT": "text", "BYTEA": "bytea", "JSONB": "jsonb",
                    "TIMESTAMP WITH TIME ZONE": "timestamptz", "FLOAT": "float8"}

_INT4_MIN, _INT4_MAX = -(2**31), 2**31 - 1

# Text columns whose values arrive as their UTF-8 bytes (a message's text: see
# ingest.shape.prepare.message_row), never decoded on the way in. SQLite stores the bytes as text with
# a CAST, which takes them as they are. PostgreSQL's binary COPY sends a text value as its raw
# bytes, as it sends a bytea: the bytes go with psycopg's bytea dumper, and the server reads
# them by the column's type, checking they are valid UTF-8.
UTF8_COLUMNS = {("messages", "content")}

Processor = Callable[[Any], Any] | None

# PostgreSQL ids reserved from a sequence and not used yet, per engine and table (see
# Bulk.allocate_ids).
_SPARE_IDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# Tables in foreign-key order (referenced tables first), for writing queued rows.
_DEPENDENCY_ORDER = {table.name: i for i, table in enumerate(models.metadata.sorted_tables)}


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Bulk:
    """Bulk reads and writes on one connection, inside the caller's transaction."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.dialect = conn.dialect
        self.is_sqlite = conn.dialect.name == "sqlite"
        self.raw = conn.connection.driver_connection
        self._bind: dict[tuple[str, tuple[str, ...]], list[Processor]] = {}
        self._result: dict[tuple[str, tuple[str, ...]], list[Processor]] = {}
        self._next_id: dict[str, int] = {}
        self._spare_ids: dict[str, range] = _SPARE_IDS.setdefault(conn.engine, {})
        self._side = None  # PostgreSQL: see _side_connection
        self._copier: ThreadPoolExecutor | None = None  # PostgreSQL: the thread flushes are written in
        self._flushing: Future | None = None
        self._pending: dict[tuple[str, tuple[str, ...]], tuple[Table, Sequence[str], list]] = {}
        self.pending_rows = 0

    # -- values in and out -------------------------------------------------------------------

    def _encode(self, table: Table, cols: Sequence[str], columns: Sequence[Sequence[Any]]) -> list[Sequence[Any]]:
        """The columns with each value as its column type stores it."""
        key = (table.name, tuple(cols))
        if key not in self._bind:
            self._bind[key] = [self._bind_processor(table, c) for c in cols]
        columns = list(columns)
        for i, proc in enumerate(self._bind[key]):
            column = columns[i]
            # Most processed columns (JSON extras, timestamps) are NULL throughout.
            if proc is None or _all_null(column):
                continue
            if proc is bytearray and None not in column:
                columns[i] = list(map(bytearray, column))  # a column of hashes: one C loop
            else:
                columns[i] = [None if value is None else proc(value) for value in column]
        return columns

    def _bind_processor(self, table: Table, col: str) -> Processor:
        column_type = table.c[col].type
        # SQLAlchemy's Binary wrapper only costs time. psycopg takes bytes as they are; sqlite3
        # looks for an adapter for each bytes value first (a dictionary miss and two attribute
        # lookups) but binds a bytearray at once, so bytes go to SQLite as bytearrays, made in
        # one C loop per column (the math profile's messages: inserted 17 % faster). Message
        # texts are bytearrays already (ingest.shape.prepare.message_row).
        if (table.name, col) in UTF8_COLUMNS:
            return None
        if isinstance(column_type, LargeBinary):
            return bytearray if self.is_sqlite else None
        # A timestamp on SQLite is the text UtcDateTime and SQLite's DATETIME make together,
        # made here in one C call (a test holds the two equal).
        if self.is_sqlite and isinstance(column_type, UtcDateTime):
            return sqlite_timestamp
        return column_type._cached_bind_processor(self.dialect)

    def _decoder(self, table: Table, cols: Sequence[str], description) -> Callable[[Sequence[Any]], tuple]:
        key = (table.name, tuple(cols))
        if key not in self._result:
            # The driver's type codes pick the processor (psycopg already returns floats and
            # datetimes; SQLite returns JSON and timestamps as text).
            self._result[key] = [table.c[c].type._cached_result_processor(self.dialect, d[1])
                                 for c, d in zip(cols, description)]
        procs = self._result[key]
        return lambda row: tuple(p(v) if p is not None and v is not None else v for p, v in zip(procs, row))

    # -- reads -------------------------------------------------------------------------------

    def lookup(self, table: Table, key_cols: Sequence[str], keys: Iterable[tuple],
               value_cols: Sequence[str], *, committed: bool = False) -> dict[tuple, tuple]:
        """{key: values} for the keys that exist.

        committed=True: the rows earlier transactions committed, for a caller that keeps every
        row its own transaction wrote to `table` (it looks up only keys it has not written). On
        PostgreSQL they are asked on the side connection, so the lookup never waits for the
        flush in flight: a unit's lookups and its COPY run at once instead of taking turns
        (measured on math×5: a unit's lookups waited 3.3 s for 0.8 s of their own). What that
        connection sees cannot change under the unit: every writer holds the write lock."""
        keys = list(dict.fromkeys(keys))
        if committed and not self.is_sqlite:
            raw = self._side_connection()
        else:
            self.wait()
            raw = self.raw
        found: dict[tuple, tuple] = {}
        width = len(key_cols)
        cols = [*key_cols, *value_cols]
        cur = raw.cursor()
        for sql, params in self._lookup_statements(table, key_cols, cols, keys):
            cur.execute(sql, params)
            decode = self._decoder(table, cols, cur.description)
            for row in cur.fetchall():
                row = decode(row)
                found[tuple(row[:width])] = tuple(row[width:])
        cur.close()
        return found

    def _lookup_statements(self, table: Table, key_cols: Sequence[str], cols: Sequence[str], keys: list[tuple]):
        width = len(key_cols)
        columns = ", ".join("t." + c for c in cols)
        join = " AND ".join(f"t.{c} = k.{c}" for c in key_cols)
        if self.is_sqlite:
            # SQLite runs in-process: many small statements cost nothing but their parameters.
            # A composite key is matched by a join that starts from the keys (CROSS JOIN fixes
            # the order), so each one is an index search: `(a, b) IN (VALUES ...)` would scan
            # the whole index once per statement, however few the keys.
            one = "(" + ", ".join("?" * width) + ")"
            for chunk in chunks(keys, max(1, LOOKUP_CHUNK // width)):
                params = [v for key in zip(*self._encode(table, key_cols, list(zip(*chunk)))) for v in key]
                if width == 1:
                    yield (f"SELECT {columns} FROM {table.name} t WHERE t.{key_cols[0]} IN "
                           f"({', '.join(['?'] * len(chunk))})"), params
                else:
                    yield (f"WITH k({', '.join(key_cols)}) AS (VALUES {', '.join([one] * len(chunk))}) "
                           f"SELECT {columns} FROM k CROSS JOIN {table.name} t WHERE {join}"), params
            return
        # PostgreSQL: one array per key column, so the statement text never changes (parsed and
        # planned once) and a round trip carries thousands of keys.
        types = [table.c[c].type.compile(dialect=self.dialect) for c in key_cols]
        arrays = ", ".join(f"%s::{t}[]" for t in types)
        sql = f"SELECT {columns} FROM {table.name} t JOIN unnest({arrays}) AS k({', '.join(key_cols)}) ON {join}"
        for chunk in chunks(keys, PG_LOOKUP_CHUNK):
            yield sql, [list(column) for column in self._encode(table, key_cols, list(zip(*chunk)))]

    def empty_tables(self, tables: Sequence[Table]) -> set[str]:
        """The names of the tables that hold no row, asked in one statement."""
        self.wait()
        cur = self.raw.cursor()
        cur.execute("SELECT " + ", ".join(f"NOT EXISTS (SELECT 1 FROM {t.name})" for t in tables))
        empty = cur.fetchone()
        cur.close()
        return {t.name for t, is_empty in zip(tables, empty) if is_empty}

    # -- writes ------------------------------------------------------------------------------

    def allocate_ids(self, table: Table, n: int) -> list[int]:
        """n fresh primary-key values for `table`."""
        if n == 0:
            return []
        if self.is_sqlite:
            if table.name not in self._next_id:
                cur = self.raw.cursor()
                cur.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {table.name}")
                self._next_id[table.name] = cur.fetchone()[0]
                cur.close()
            start = self._next_id[table.name]
            self._next_id[table.name] = start + n
            return list(range(start, start + n))
        # PostgreSQL: ids come from the table's sequence, a block at a time, on the side
        # connection so they never wait for a flush in flight (sequences are not transactional:
        # another connection's values are as good). A block is reserved in one statement by
        # moving the sequence past it; that is safe because every writer of these tables holds
        # the write lock (see the module docstring). Ids left over when the unit ends are kept
        # for the next unit of this process (a trace directory needs a handful per table, and
        # would otherwise pay a round trip for each); those the process never uses are gaps,
        # as after any rollback.
        spare = self._spare_ids.get(table.name, range(0))
        if len(spare) < n:
            block = max(n - len(spare), PG_ID_BLOCK)
            cur = self._side_connection().cursor()
            cur.execute("SELECT setval(s, nextval(s) + %s - 1) FROM pg_get_serial_sequence(%s, 'id') AS s",
                        (block, table.name))
            last = cur.fetchone()[0]
            cur.close()
            fresh = range(last - block + 1, last + 1)
            taken = n - len(spare)
            self._spare_ids[table.name] = fresh[taken:]
            return [*spare, *fresh[:taken]]
        self._spare_ids[table.name] = spare[n:]
        return list(spare[:n])

    def _side_connection(self):
        """PostgreSQL: a second connection of the unit's, outside its transaction, for what
        must not wait for the flush in flight (ids, committed rows)."""
        if self._side is None:
            self._side = self.conn.engine.raw_connection()
        return self._side

    def insert(self, table: Table, cols: Sequence[str], columns: Sequence[Sequence[Any]]) -> None:
        """Queue rows the caller knows are new (it holds the write lock and looked them up),
        given as columns (one sequence of values per column of `cols`, none of them changed
        afterwards). flush() writes them; until then lookups do not see them, so the caller
        must keep every queued key in its own cache (ingest.write.writer does)."""
        n = len(columns[0])
        if not n:
            return
        key = (table.name, tuple(cols))
        if key not in self._pending:
            self._pending[key] = (table, cols, [])
        self._pending[key][2].append(columns)
        self.pending_rows += n

    def should_flush(self, queued_text_bytes: int) -> bool:
        """Whether the queued rows should be written now. SQLite writes in process, so each
        batch's rows go at once. PostgreSQL's server is the slower side: the queued rows go
        as soon as it has finished the previous flush, so it never idles while rows wait, and
        otherwise wait for it, within a bound on the memory they hold."""
        if self.is_sqlite or self._flushing is None or self._flushing.done():
            return True
        return self.pending_rows >= PG_FLUSH_ROWS or queued_text_bytes >= PG_FLUSH_BYTES

    def flush(self, wait: bool = True) -> None:
        """Write the queued rows, parents before children: executemany on SQLite; on
        PostgreSQL one COPY per table, in a thread. With wait=False the call returns while the
        server works through them and the caller prepares more; the next flush, lookup or
        wait() waits for them first (one flush in flight at a time keeps the order)."""
        work = []
        for key in sorted(self._pending, key=lambda k: _DEPENDENCY_ORDER[k[0]]):
            table, cols, parts = self._pending[key]
            columns = _concatenated(parts)
            if not self.is_sqlite:
                columns = _in_write_order(table, cols, columns)
            work.append((table, cols, self._encode(table, cols, columns)))
        self._pending.clear()
        self.pending_rows = 0
        if self.is_sqlite:
            for table, cols, data in work:
                self._write(table, cols, data)
            return
        self.wait()
        if work:
            if self._copier is None:
                self._copier = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-copy")
            self._flushing = self._copier.submit(lambda: [self._write(*args) for args in work])
        if wait:
            self.wait()

    @staticmethod
    @functools.lru_cache(maxsize=256)
    def _insert_sql(table: Table, cols: tuple[str, ...], null: tuple[bool, ...]) -> str:
        """SQLite's INSERT of `cols`, with a NULL literal for each column `null` marks."""
        values = ", ".join("NULL" if is_null else "CAST(? AS TEXT)" if (table.name, c) in UTF8_COLUMNS else "?"
                           for c, is_null in zip(cols, null))
        return f"INSERT INTO {table.name} ({', '.join(cols)}) VALUES ({values})"

    def wait(self) -> None:
        """Until the flush in flight is written; its error, if it failed, is raised here."""
        if self._flushing is not None:
            flushing, self._flushing = self._flushing, None
            flushing.result()

    def close(self, discard: bool = False) -> None:
        """Release the flush thread and the side connection. After an error a flush in flight
        is waited for but its own error dropped: the transaction is rolled back anyway.
        `discard` (the unit failed or was stopped): the side connection is closed rather than
        returned to the pool, whose reset of it fails where the server cut it or a statement of
        it was left unread."""
        try:
            self.wait()
        except Exception:
            pass
        if self._copier is not None:
            self._copier.shutdown()
            self._copier = None
        if self._side is not None:
            if discard:
                self._side.invalidate()
            else:
                self._side.close()
            self._side = None

    def _write(self, table: Table, cols: Sequence[str], columns: list[Sequence[Any]]) -> None:
        """Insert rows given as encoded columns (see _encode)."""
        if self.is_sqlite:
            cur = self.raw.cursor()
            for start in range(0, len(columns[0]), WRITE_CHUNK):
                chunk = [column[start:start + WRITE_CHUNK] for column in columns]
                # sqlite3 binds a None parameter the slow way (it first looks for an adapter for
                # it), and most rows leave many columns NULL (a Hub trial has no token counts, a
                # Hub turn no extra): a column NULL in every row is written as a NULL literal.
                # Measured on the math profile: trials 25 % and turns 15 % faster to insert.
                null = tuple(map(_all_null, chunk))
                rows = zip(*(column for column, is_null in zip(chunk, null) if not is_null))
                cur.executemany(self._insert_sql(table, tuple(cols), null), rows)
            cur.close()
            return
        import psycopg
        from psycopg.copy import QueuedLibpqWriter

        types = [_pg_binary_type(table, c, self.dialect) for c in cols]
        _check_int4(table, cols, types, columns)
        with self.raw.cursor() as cur:
            # The queued writer sends from a thread while rows are still being formatted here;
            # for a few rows (a trace directory's), starting that thread costs more than it saves.
            # Binary rows spare the server parsing and unescaping every text.
            writer = QueuedLibpqWriter(cur) if len(columns[0]) >= QUEUED_COPY_ROWS else None
            with cur.copy(f"COPY {table.name} ({', '.join(cols)}) FROM STDIN (FORMAT BINARY)", writer=writer) as copy:
                copy.set_types(types)
                try:
                    for row in zip(*columns):
                        copy.write_row(row)
                except OverflowError as exc:  # a number too large for its 64-bit column
                    raise psycopg.DataError(f"{table.name}: {exc}") from exc


def _all_null(column: Sequence[Any]) -> bool:
    # The first value decides at once for most columns; count() compares every value.
    return not column or (column[0] is None and column.count(None) == len(column))


def _concatenated(parts: list[Sequence[Sequence[Any]]]) -> Sequence[Sequence[Any]]:
    """The columns of several queued inserts as one set of columns."""
    if len(parts) == 1:
        return parts[0]
    return [list(chain.from_iterable(column)) for column in zip(*parts)]


def _in_write_order(table: Table, cols: Sequence[str], columns: Sequence[Sequence[Any]]) -> Sequence[Sequence[Any]]:
    """The columns' rows sorted by the table's _WRITE_ORDER column, if it has one."""
    key = _WRITE_ORDER.get(table.name)
    if key not in cols or len(columns[0]) < 2:
        return columns
    at = list(cols).index(key)
    order = sorted(range(len(columns[0])), key=columns[at].__getitem__)
    return [list(map(column.__getitem__, order)) for column in columns]


def _pg_binary_type(table: Table, col: str, dialect) -> str:
    """The type binary COPY sends a column's values as (see _PG_BINARY_TYPES, UTF8_COLUMNS)."""
    if (table.name, col) in UTF8_COLUMNS:
        return "bytea"
    return _PG_BINARY_TYPES[table.c[col].type.compile(dialect=dialect)]


def _check_int4(table: Table, cols: Sequence[str], types: list[str], columns: list[Sequence[Any]]) -> None:
    """Refuse a value a 32-bit column cannot hold. Text COPY had the server refuse it; binary
    COPY would store it wrapped around, silently."""
    import psycopg

    for col, pg_type, values in zip(cols, types, columns):
        if pg_type != "int4":
            continue
        if None in values:
            values = [v for v in values if v is not None]
        if values and (min(values) < _INT4_MIN or max(values) > _INT4_MAX):
            bad = next(v for v in values if not _INT4_MIN <= v <= _INT4_MAX)
            raise psycopg.DataError(f"{table.name}.{col}: {bad} is out of range for a 32-bit integer")


def sqlite_timestamp(value: datetime) -> str:
    """A datetime as stored on SQLite: in UTC (naive taken as UTC), 'YYYY-MM-DD HH:MM:SS.ffffff'."""
    if value.tzinfo is not None and value.tzinfo is not timezone.utc:
        value = value.astimezone(timezone.utc)
    # Cut off the "+00:00" of a UTC value rather than make a naive copy of it.
    return value.isoformat(" ", "microseconds")[:26]


def lock_for_writing(conn: Connection) -> None:
    """Take the warehouse's write lock for the rest of this transaction.

    On PostgreSQL the lock is the transaction's, so it ends with the session; a dead writer's
    session ends as soon as the server sees its socket close (its reader process holds no copy:
    ingest.process.worker), and PG_WRITER_SETTINGS end it where that never happens."""
    if conn.dialect.name == "postgresql":
        settings = ", ".join(f"set_config('{name}', '{value}', true)" for name, value in PG_WRITER_SETTINGS.items())
        conn.exec_driver_sql(f"SELECT {settings}, ({_LZ4_WHERE_BUILT}), pg_advisory_xact_lock({PG_WRITE_LOCK})")
    # SQLite: the transaction began with BEGIN IMMEDIATE (warehouse.db.engine), which is the lock.


def insert_one_or_skip(conn: Connection, table: Table, values: dict[str, Any], conflict_cols: Sequence[str]) -> int | None:
    """Insert one row unless its key exists: the new id, or None when it was already there.
    On PostgreSQL a concurrent insert of the same key waits for the other transaction, so a
    None here means the other writer committed it."""
    dialect = sqlite if conn.dialect.name == "sqlite" else postgresql
    stmt = (dialect.insert(table).values(**values).on_conflict_do_nothing(index_elements=list(conflict_cols))
            .returning(table.c.id))
    return conn.execute(stmt).scalar()
