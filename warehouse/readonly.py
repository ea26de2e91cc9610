"""Read-only SQL on either backend, by construction rather than by trusting the SQL.

Every query a user can aim at the warehouse (`warehouse sql`, the canned queries, search)
runs through run_readonly, stream_readonly, or readonly_session for an answer that takes several
statements. Layers, each stopping what the ones before it let through (README, "Ad-hoc SQL"):

- One statement, a query, as the backend's own grammar reads it. PostgreSQL: its own parser
  (warehouse.sqlcheck) before anything is sent, which also refuses the functions that reach
  beyond the tables. SQLite: the driver compiles one statement only, and an authorizer allows
  reading and nothing else (SELECT, reading tables, functions but a few, reading PRAGMAs).
- Sent so the server could not run a second statement: PostgreSQL's extended protocol (a
  server-side cursor for a stream, a prepared statement for a whole answer), never the simple
  protocol.
- PostgreSQL: a connection whose only transaction is `READ ONLY`, run as the database's own
  reader role (warehouse.db.roles; SET LOCAL ROLE; it may only read this warehouse's tables)
  where it exists, may read here, and the connecting user may take it on; its session reset at the
  end (all DISCARD ALL resets but the prepared statements, see _END_SESSION) before it is pooled
  for the next, so nothing a statement changed in the session outlives it. (A session of the
  library's own text alone, a canned query's, could change nothing: its COMMIT ends it.)
- SQLite: a connection of its own (pooled for reuse, see _engine) that opens the file as every
  reader does (warehouse.db.engine.sqlite_read_connection: `PRAGMA query_only`, and `mode=ro`
  unless that would leave files behind), so the library itself refuses every write.
- Limits: a deadline over the whole session (SQLite's progress handler, PostgreSQL's
  statement_timeout, a look at the clock for every row handed out, so printing counts too, and
  a watchdog thread that interrupts the statement should none of those be reached); rows
  handed out one at a time under a row cap, fetched no more at a time than are still wanted
  (and fewer when rows are large: _BATCH_BYTES); a cap on the size of any one value and of any
  one row (on SQLite the value cap is SQLITE_LIMIT_LENGTH as well, which bounds what a statement
  can build in memory before it reaches Python). On PostgreSQL the server is held too:
  work_mem, hash_mem_multiplier and temp_file_limit (where this user may set it) for the
  transaction, and client_connection_check_interval so that a statement whose client is gone
  stops (_server_limits).

The statements of one session read one snapshot (a read transaction on SQLite, REPEATABLE READ
on PostgreSQL).
"""

from __future__ import annotations

import atexit
import logging
import math
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import QueuePool

from warehouse.db.engine import no_warehouse, read_only_connect_args, resolve_url, sqlite_path, sqlite_read_connection
from warehouse.db.roles import READS_HERE, reader_role
from warehouse.db.stored import as_declared
from warehouse.errors import WarehouseError, first_line
from warehouse.sqlcheck import ONLY_QUERIES, SQLITE_DENIED_FUNCTIONS

DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 86_400.0  # a day: past that a limit is a typo, and PostgreSQL's would overflow
DEFAULT_MAX_ROWS = 10_000
# The caps on what one value and one row may hold (bytes; a text's characters), where a caller
# gives none (the API); `warehouse sql` gives its own. None lifts a cap.
DEFAULT_MAX_VALUE_BYTES = 100_000_000
DEFAULT_MAX_ROW_BYTES = 200_000_000

# Rows fetched from the driver at a time: large enough to cost nothing per row, small enough
# that a streamed result never holds much (on PostgreSQL each batch is a round trip). Never more
# than are still wanted; the first fetch takes one row, and each next one as many as fit
# _BATCH_BYTES at the size of the largest row of the fetch before.
_BATCH = 500
_BATCH_BYTES = 8 << 20
# The watchdog's margin past the time limit: the database's own limits report first.
_WATCHDOG_GRACE = 0.5

# PostgreSQL's limits on the server's resources for a read transaction (README, "Ad-hoc SQL").
PG_WORK_MEM = "16MB"  # each sort or hash before it spills to temporary files
PG_TEMP_FILE_LIMIT = "512MB"  # the temporary files of one session, where this user may set it
PG_CLIENT_CHECK_MS = 1000  # how often a running statement looks whether its client is still there


@dataclass
class ReadResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool = False  # more rows existed than max_rows


class RowStream:
    """The rows of one statement, handed out as they arrive: iterate it once, inside its
    session. `truncated` is known once the iteration has ended."""

    def __init__(self, columns: list[str], fetch: Callable[[int], list[tuple]], more: Callable[[], bool],
                 max_rows: int | None, session: "ReadSession", *, max_value_bytes: int | None = None,
                 max_row_bytes: int | None = None):
        self.columns = columns
        self.truncated = False  # more rows existed than max_rows
        self._fetch = fetch  # up to n more rows
        self._more = more  # whether another row exists (PostgreSQL: without sending it)
        self._max_rows = max_rows
        self._session = session
        self._max_value_bytes = max_value_bytes
        self._max_row_bytes = max_row_bytes

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        left = self._max_rows
        size = 1
        with self._session.errors():
            while True:
                n = size if left is None else min(size, left)
                if n == 0:
                    self.truncated = self._more()
                    return
                rows = self._fetch(n)
                largest = 1
                for row in rows:
                    # The clock is read for every row: whoever consumes the rows (a printer)
                    # is held to the same deadline as the database.
                    self._session.check_deadline()
                    largest = max(largest, self._check_size(row))
                    yield row
                if len(rows) < n:
                    return
                if left is not None:
                    left -= len(rows)
                size = max(1, min(_BATCH, _BATCH_BYTES // largest))
                del rows

    def _check_size(self, row: tuple) -> int:
        total = 0
        for value in row:
            bytes_ = _size(value)
            if self._max_value_bytes is not None and bytes_ > self._max_value_bytes:
                raise WarehouseError(too_big("a value", self._max_value_bytes))
            total += bytes_
        if self._max_row_bytes is not None and total > self._max_row_bytes:
            raise WarehouseError(too_big("a row", self._max_row_bytes))
        return total


def _size(value: Any) -> int:
    """What a value weighs for the caps: a text's characters, a blob's bytes, a number 8; anything
    else (PostgreSQL's JSON, arrays, dates) the length of its text."""
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        return len(value)
    if value is None or isinstance(value, (bool, int, float)):
        return 8
    return len(str(value))


def too_big(what: str, cap: int) -> str:
    """The one line a value or row over its cap ends with."""
    option = "--max-cell-bytes (max_value_bytes in the API)" if what == "a value" else \
        "--max-row-bytes (max_row_bytes in the API)"
    return (f"{what} would be larger than {cap:,} bytes, more than this command reads: raise {option}, "
            f"or cut it in SQL (substr, fewer columns)")


def check_timeout(timeout: float) -> None:
    """A time limit must be a finite number of seconds, more than 0 and at most a day."""
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT):
        raise WarehouseError(f"the time limit must be a number of seconds more than 0 and at most "
                             f"{MAX_TIMEOUT:g}, not {timeout}")


def run_readonly(
    url: URL | str,
    sql: str,
    params: Mapping[str, Any] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    max_rows: int | None = DEFAULT_MAX_ROWS,
    max_value_bytes: int | None = DEFAULT_MAX_VALUE_BYTES,
    max_row_bytes: int | None = DEFAULT_MAX_ROW_BYTES,
) -> ReadResult:
    """Run one statement read-only. Named parameters are written `:name` in the SQL.

    Returns at most `max_rows` rows (None: all of them) and whether there were more. Raises
    WarehouseError, with a one-line message, for a write, a second statement, a statement
    that outlives `timeout` seconds, a value or row over its cap, or anything the database
    rejects."""
    with stream_readonly(url, sql, params, timeout=timeout, max_rows=max_rows, max_value_bytes=max_value_bytes,
                         max_row_bytes=max_row_bytes) as rows:
        return ReadResult(rows.columns, list(rows), rows.truncated)


@contextmanager
def stream_readonly(
    url: URL | str,
    sql: str,
    params: Mapping[str, Any] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    max_rows: int | None = DEFAULT_MAX_ROWS,
    max_value_bytes: int | None = DEFAULT_MAX_VALUE_BYTES,
    max_row_bytes: int | None = DEFAULT_MAX_ROW_BYTES,
) -> Iterator[RowStream]:
    """run_readonly's statement, its rows streamed: consume them inside the `with`, where the
    time limit covers the consuming too. `max_value_bytes` caps any one value (a larger one is
    refused as too big: on SQLite as the statement builds or reads it, on PostgreSQL as it
    arrives, the server's own cap being 1 GB), `max_row_bytes` the values of one row together."""
    if isinstance(url, str):
        url = resolve_url(url)
    check_timeout(timeout)
    check_caps(max_value_bytes, max_row_bytes)
    _check_statement(url, sql)  # before the database is opened: a typo costs no connection
    with _session(url, timeout, snapshot=False, max_value_bytes=max_value_bytes) as session:
        yield session.stream(sql, params, max_rows=max_rows, max_row_bytes=max_row_bytes)


@contextmanager
def readonly_session(url: URL | str, *, timeout: float = DEFAULT_TIMEOUT, own_text: bool = False,
                     max_value_bytes: int | None = None) -> Iterator["ReadSession"]:
    """A read-only connection for several statements that all see the same snapshot of the
    database: what a canned query needs when its answer takes more than one read.

    `own_text`: every statement's text is the library's own (a canned query's; values bound),
    never a caller's. Such statements cannot leave anything in the session, so on PostgreSQL the
    session ends with its COMMIT alone, not with the reset of all a caller's text could have left
    (_END_SESSION); and a fetch(..., last=True) carries that COMMIT in its own round trip.
    `max_value_bytes`: as stream_readonly's, for every statement of the session."""
    if isinstance(url, str):
        url = resolve_url(url)
    check_timeout(timeout)
    check_caps(max_value_bytes, None)
    with _session(url, timeout, snapshot=True, own_text=own_text, max_value_bytes=max_value_bytes) as session:
        yield session


@contextmanager
def _session(url: URL, timeout: float, *, snapshot: bool, max_value_bytes: int | None = None,
             own_text: bool = False) -> Iterator["ReadSession"]:
    deadline = time.monotonic() + timeout
    if url.get_backend_name() == "sqlite":
        opener = _sqlite_readonly(url, timeout, deadline, snapshot, max_value_bytes)
    else:
        opener = _postgres_readonly(url, timeout, snapshot, own_text)
    with opener as (transaction, describe, driver_error):
        session = ReadSession(transaction, describe, driver_error, deadline, timeout, own_text, max_value_bytes)
        # The watchdog: should the statement be stuck where no limit is looked at (one long step
        # of SQLite's, a server that does not answer), it is interrupted a little after the
        # deadline, and the session ends as one past its time limit.
        watchdog = threading.Timer(timeout + _WATCHDOG_GRACE, session.interrupt)
        watchdog.daemon = True
        watchdog.start()
        try:
            yield session
        finally:
            watchdog.cancel()
            session.disarm()


def check_caps(max_value_bytes: int | None, max_row_bytes: int | None) -> None:
    """A cap is a whole number of bytes more than 0, or None for none."""
    for name, cap in (("max_value_bytes", max_value_bytes), ("max_row_bytes", max_row_bytes)):
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise WarehouseError(f"{name} must be a whole number of bytes more than 0, or None for no cap, "
                                 f"not {cap!r}")


def schema_revision(url: URL) -> str | None:
    """The schema revision the database records (alembic_version), read the way the queries read:
    on PostgreSQL on the pooled read connection, which the query after it then reuses (rather
    than a connection of its own for the check). None when it cannot be read (no such table, no
    database): the caller's own check then says why."""
    try:
        with readonly_session(url, own_text=True) as session:
            rows = session.fetch("SELECT version_num FROM alembic_version", max_rows=1, last=True).rows
    except WarehouseError:
        return None
    return rows[0][0] if rows else None


def _check_statement(url: URL, sql: str) -> str:
    """What kind of statement `sql` is ("query" or "explain"), checked by the backend's own
    grammar where that can be done before connecting (PostgreSQL). SQLite's check happens as the
    statement compiles (the authorizer); "query" stands for it here."""
    if url.get_backend_name() == "sqlite":
        return "query"
    return _check_postgres(sql)


@lru_cache(maxsize=256)
def _check_postgres(sql: str) -> str:
    # The grammar check reads the text as the server will: its `:name` parameters as $1, $2.
    from sqlalchemy.dialects.postgresql.psycopg import dialect

    from warehouse.sqlcheck import check_postgres

    return check_postgres(text(sql).compile(dialect=dialect(paramstyle="numeric_dollar")).string)


class ReadSession:
    """Statements on one read-only connection (see readonly_session)."""

    def __init__(self, transaction: "_Begun | _PostgresTransaction", describe_error: Callable[[BaseException], str],
                 driver_error: type[BaseException], deadline: float, timeout: float, own_text: bool = False,
                 max_value_bytes: int | None = None):
        self._transaction = transaction
        self._max_value_bytes = max_value_bytes
        self._interrupted = False  # by the watchdog
        self._armed = True  # the watchdog may still interrupt (see disarm)
        self._watchdog_lock = threading.Lock()
        self._own_text = own_text  # every statement the library's (readonly_session)
        self._describe_error = describe_error
        self._driver_error = driver_error  # the base class of the driver's own errors
        self._cursors = 0  # server-side cursors opened, for their names
        self._deadline = deadline
        self._timeout = timeout

    @property
    def connection(self) -> Connection:
        """The session's connection, in its transaction, for the library's own statements
        (resolving run names)."""
        with self.errors():
            self._transaction.run()
        return self._transaction.conn

    def fetch(self, sql: str, params: Mapping[str, Any] | None = None, *,
              max_rows: int | None = DEFAULT_MAX_ROWS, last: bool = False) -> ReadResult:
        """One statement whose whole answer is wanted at once (a canned query's: aggregates, at
        most tasks x runs rows), as run_readonly runs it. On PostgreSQL a prepared statement
        rather than stream's cursor: the rows come back with the statement, one round trip, and
        the pooled connection keeps the plan for the next time it is asked. The time limit is
        the database's alone here (nothing consumes the rows meanwhile), looked at once after.
        `last`: no statement follows in this session, whose transaction may end in the same
        round trip (PostgreSQL; a statement after it would begin another)."""
        cursor, columns = self._execute(sql, params, whole=True, last=last)
        with self.errors():
            rows = cursor.fetchall() if max_rows is None else cursor.fetchmany(max_rows + 1)
        self.check_deadline()
        truncated = max_rows is not None and len(rows) > max_rows
        return ReadResult(columns, rows[:max_rows] if truncated else rows, truncated)

    def stream(self, sql: str, params: Mapping[str, Any] | None = None, *,
               max_rows: int | None = DEFAULT_MAX_ROWS, max_row_bytes: int | None = None) -> RowStream:
        """One statement, its rows streamed (see stream_readonly), under the session's value cap
        and `max_row_bytes`."""
        cursor, columns = self._execute(sql, params, whole=False, last=False)
        if getattr(cursor, "name", None):  # PostgreSQL's server-side cursor
            raw = self._transaction.conn.connection.driver_connection

            def more() -> bool:
                # MOVE: the server says whether a row is there without sending it.
                return raw.execute(f'MOVE FORWARD 1 IN "{cursor.name}"', prepare=False).rowcount > 0
        else:
            def more() -> bool:
                return cursor.fetchone() is not None
        fetch = cursor.fetchmany
        if not self._own_text and self._transaction.conn.dialect.name == "sqlite":
            def fetch(n: int) -> list[tuple]:  # a caller's SQL: its values as PostgreSQL's would be
                return list(map(as_declared, cursor.fetchmany(n)))
        return RowStream(columns, fetch, more, max_rows, self,
                         max_value_bytes=self._max_value_bytes, max_row_bytes=max_row_bytes)

    def _execute(self, sql: str, params: Mapping[str, Any] | None, *, whole: bool,
                 last: bool) -> tuple[Any, list[str]]:
        """The driver's cursor with `sql` executed on it, and its columns' names."""
        conn = self._transaction.conn
        # The library's own text is a query by construction (every canned query is run by the
        # tests on both backends): not parsed again, nor PostgreSQL's parser loaded for it.
        kind = "query" if self._own_text else _check_statement(conn.engine.url, sql)
        statement, values = _compile(sql, params or {}, conn.dialect)

        def sqlite(raw):
            cursor = raw.cursor()
            try:
                cursor.execute(statement, values)
            except sqlite3.DatabaseError as exc:
                # The authorizer sees what a statement does (VACUUM attaches, ANALYZE inserts
                # into sqlite_master); the user wrote the statement, which is what is named.
                word = _leading_word(statement)
                if any(said in str(exc) for said in _SQLITE_DENIALS) and word not in _SQLITE_QUERY_WORDS:
                    raise WarehouseError(f"read-only: {word} is not allowed; {ONLY_QUERIES}") from None
                raise
            if cursor.description is None:  # the authorizer let only queries compile
                raise WarehouseError("no SQL statement given")
            return cursor

        def prepared(raw):
            # A prepared statement, which is one statement too (and the only way for EXPLAIN,
            # which cannot be a cursor): its rows arrive whole.
            cursor = raw.cursor()
            cursor.execute(statement, values, prepare=True)
            return cursor

        with self.errors():
            if conn.dialect.name == "sqlite":
                cursor = self._transaction.run(sqlite)
            elif kind == "query" and not whole:
                # A server-side cursor: DECLARE goes out by the extended protocol (one
                # statement, whatever the text holds), and rows come in batches. (Not in a
                # pipeline: the transaction is begun first.)
                self._transaction.run()
                self._cursors += 1
                raw = self._transaction.conn.connection.driver_connection  # (a stale one replaced)
                cursor = raw.cursor(name=f"warehouse_read_{self._cursors}")
                cursor.execute(statement, values)
            else:
                cursor = self._transaction.run(prepared, last=last)
            if not cursor.description:  # PostgreSQL's `SELECT FROM t`: rows of no columns
                raise WarehouseError("the query returns no columns: name at least one")
            return cursor, [d[0] for d in cursor.description]

    @property
    def deadline(self) -> float:
        """When the session's time is up (time.monotonic())."""
        return self._deadline

    def check_deadline(self) -> None:
        if time.monotonic() > self._deadline:
            raise WarehouseError(too_long(self._timeout))

    def interrupt(self) -> None:
        """Stop the statement running, from another thread (the watchdog's)."""
        with self._watchdog_lock:
            if not self._armed:
                return
            self._interrupted = True
            try:
                raw = self._transaction.conn.connection.driver_connection
                if isinstance(raw, sqlite3.Connection):
                    raw.interrupt()
                else:
                    raw.cancel_safe(timeout=5)
            except Exception:  # a connection closing meanwhile: nothing left to stop
                pass

    def disarm(self) -> None:
        """No interrupt after this returns, nor one still on its way: the connection goes back to
        the pool next, and a cancel meant for this session must not reach the next one's
        statement. (A cancel delivered while the connection is idle is discarded by the server.)"""
        with self._watchdog_lock:
            self._armed = False

    @contextmanager
    def errors(self) -> Iterator[None]:
        """Driver errors, as one-line WarehouseErrors."""
        try:
            yield
        except self._driver_error as exc:
            if self._interrupted:
                raise WarehouseError(too_long(self._timeout)) from None
            raise WarehouseError(self._describe_error(exc)) from None


# The first words of SQLite statements that may be queries (whose refusals the authorizer's
# message explains), and of those whose own refusal says more (PRAGMA's setting).
_SQLITE_QUERY_WORDS = frozenset({None, "SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA"})
# SQLite's words for a statement its authorizer denied: as it compiles, and as it runs (VACUUM).
_SQLITE_DENIALS = ("not authorized", "authorization denied")
_LEADING = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?(?:\*/|$)|\()*([A-Za-z]+)", re.S)


def _leading_word(sql: str) -> str | None:
    """A statement's first keyword in capitals, past blanks, comments and parentheses."""
    found = _LEADING.match(sql)
    return found[1].upper() if found else None


def _compile(sql: str, params: Mapping[str, Any], dialect) -> tuple[str, Any]:
    """`sql` with its `:name` parameters (SQLAlchemy's text() rules: `\\:` is a colon) in the
    driver's own style, and their values."""
    string, names, positional = _compiled(sql, dialect)
    for name in names:
        if name not in params:
            raise WarehouseError(f"no value for :{name} (give -p {name} VALUE; "
                                 f"write \\: for a colon that is not a parameter)")
    if positional:
        return string, tuple(params[name] for name in names)
    return string, {name: params[name] for name in names}


@lru_cache(maxsize=256)
def _compiled(sql: str, dialect) -> tuple[str, tuple[str, ...], bool]:
    # Kept: a canned query asks the same statements again, and compiling one costs about as much
    # as running a small one on PostgreSQL. (A dialect is one engine's: the key is its identity.)
    compiled = text(sql).compile(dialect=dialect)
    if compiled.positional:
        return compiled.string, tuple(compiled.positiontup), True
    return compiled.string, tuple(compiled.params), False


def too_long(timeout: float) -> str:
    """The one line a statement past its time limit ends with."""
    return f"the query ran longer than the time limit ({timeout:g} s; see --timeout)"


# --- SQLite ----------------------------------------------------------------------------

# Progress-handler granularity: SQLite VM instructions between two looks at the clock.
_SQLITE_TICKS = 10_000

# PRAGMAs that take an argument without changing anything: they only name what to describe.
_SQLITE_PRAGMAS_WITH_ARGUMENT = {
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
    "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check",
}

# What a statement may do while it compiles: read, and nothing else. Each action SQLite's
# authorizer reports that is not here (INSERT, CREATE …, ATTACH, BEGIN, SAVEPOINT, ANALYZE, …)
# is refused, so the kind of statement is decided by SQLite's own grammar.
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
            sqlite3.SQLITE_RECURSIVE, sqlite3.SQLITE_PRAGMA}
_ACTIONS = {getattr(sqlite3, f"SQLITE_{name.replace(' ', '_')}"): name for name in (
    "CREATE INDEX", "CREATE TABLE", "CREATE TEMP INDEX", "CREATE TEMP TABLE", "CREATE TEMP TRIGGER",
    "CREATE TEMP VIEW", "CREATE TRIGGER", "CREATE VIEW", "CREATE VTABLE", "DELETE", "DROP INDEX",
    "DROP TABLE", "DROP TEMP INDEX", "DROP TEMP TABLE", "DROP TEMP TRIGGER", "DROP TEMP VIEW",
    "DROP TRIGGER", "DROP VIEW", "DROP VTABLE", "INSERT", "UPDATE", "ATTACH", "DETACH", "ALTER TABLE",
    "REINDEX", "ANALYZE", "SAVEPOINT")}
_ACTIONS[sqlite3.SQLITE_TRANSACTION] = "transaction control (BEGIN, COMMIT, ROLLBACK)"


@contextmanager
def _sqlite_readonly(url: URL, timeout: float, deadline: float, snapshot: bool,
                     max_value_bytes: int | None) -> Iterator[tuple[Connection, Any, type[BaseException]]]:
    path = sqlite_path(url)
    if path is None:
        raise WarehouseError("read-only queries need a SQLite file, not an in-memory database")
    if not path.exists():  # (before _sqlite_engine, which stats it) the message every reader gives
        raise no_warehouse(path)
    refused: list[str] = []  # why the authorizer said no, for the error message
    timed_out: list[bool] = []

    def authorize(action: int, arg1: str | None, arg2: str | None, _db, _trigger) -> int:
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master":
            # SQLite's own, as a virtual table (the search index) is first opened on a
            # connection; SQLite refuses any statement that would update its schema table.
            return sqlite3.SQLITE_OK
        if action not in _ALLOWED:
            what = _ACTIONS.get(action, f"action {action}")
            refused.append(f"{what}{f' ({arg1})' if arg1 else ''} is not allowed; {ONLY_QUERIES}")
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA and arg2 is not None and arg1 not in _SQLITE_PRAGMAS_WITH_ARGUMENT:
            refused.append(f"PRAGMA {arg1} = … would change a setting")
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and arg2 is not None and arg2.lower() in SQLITE_DENIED_FUNCTIONS:
            refused.append(f"the function {arg2} is not allowed")
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def past_deadline() -> int:
        if time.monotonic() > deadline:
            timed_out.append(True)
            return 1  # non-zero interrupts the statement
        return 0

    def describe(exc: BaseException) -> str:
        if timed_out:
            return too_long(timeout)
        if refused:
            return f"read-only: {refused[0]}"
        message = first_line(exc)
        if "readonly database" in message:
            return f"read-only: the statement would write ({message})"
        if "one statement at a time" in message:
            return "one statement at a time: this text holds more than one (nothing was run)"
        if "too big" in message and max_value_bytes is not None:
            return too_big("a value", max_value_bytes)
        return f"database error: {message}"

    with _connect(_sqlite_engine(path), describe) as conn:
        raw = conn.connection.driver_connection
        if snapshot:
            # One read transaction, so every statement reads the same snapshot however many
            # ingests commit meanwhile; begun before the guards, which refuse transaction
            # control. (Not for a lone statement: VACUUM, say, must be refused as a write.)
            raw.execute("BEGIN")
        raw.set_authorizer(authorize)
        raw.set_progress_handler(past_deadline, _SQLITE_TICKS)
        # A cap on any one string or blob a statement builds or reads: randomblob(1e9) is
        # refused at once instead of taking seconds in one VM step and a gigabyte of memory.
        # (The limit is a C int, and SQLite lowers any value to its own build's maximum.)
        length = raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, min(max_value_bytes, 2**31 - 1) if max_value_bytes else -1)
        try:
            yield _Begun(conn), describe, sqlite3.Error
        finally:
            # Down again for closing, which rolls a read transaction back; the connection goes
            # back to its pool as it came.
            raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, length)
            raw.set_authorizer(None)
            raw.set_progress_handler(None, 0)


class _Begun:
    """A session's connection whose transaction, if any, the opener began (SQLite's)."""

    def __init__(self, conn: Connection):
        self.conn = conn

    def run(self, send: Callable[[Any], Any] | None = None, *, last: bool = False) -> Any:
        return send(self.conn.connection.driver_connection) if send else None


# Read-only engines of the last few databases, kept: making one costs about as much as a canned
# query (for PostgreSQL several times as much). Both pool their connections (PostgreSQL's: see
# _postgres_readonly). SQLite's as a fresh one parses the schema again and starts with a cold
# page cache; reuse is safe because such a
# connection holds nothing a statement could change: the file is opened read-only with
# query_only set (TEMP objects included), the authorizer refuses every setting, and the guards
# are per session. A SQLite engine is keyed by the file's inode, so a file replaced under the
# same name gets new connections rather than the old file's.
_KEEP_ENGINES = 4
_engines: OrderedDict[tuple, Engine] = OrderedDict()
_engines_lock = threading.Lock()


@atexit.register
def _dispose_engines() -> None:
    # Pooled PostgreSQL connections say goodbye to the server rather than vanish at exit.
    with _engines_lock:
        while _engines:
            _engines.popitem()[1].dispose()


def _engine(key: tuple, make: Callable[[], Engine]) -> Engine:
    with _engines_lock:
        engine = _engines.pop(key, None) or make()
        _engines[key] = engine
        while len(_engines) > _KEEP_ENGINES:
            _engines.popitem(last=False)[1].dispose()
    return engine


def release(url: URL) -> None:
    """Close the engines kept for this database (warehouse.api's close: a SQLite reader's
    connections hold the file, and its -wal/-shm, open until then)."""
    if url.get_backend_name() == "sqlite":
        def ours(key: tuple) -> bool:
            return key[0] == "sqlite" and key[1] == str(sqlite_path(url))
    else:
        def ours(key: tuple) -> bool:
            return key == ("postgresql", url.render_as_string(hide_password=False))
    with _engines_lock:
        for key in [key for key in _engines if ours(key)]:
            _engines.pop(key).dispose()


def _sqlite_engine(path: Path) -> Engine:
    stat = path.stat()
    return _engine(("sqlite", str(path), stat.st_dev, stat.st_ino),
                   lambda: create_engine("sqlite+pysqlite://", creator=lambda: _sqlite_connect(path),
                                         poolclass=QueuePool, pool_size=2))


def _sqlite_connect(path: Path) -> sqlite3.Connection:
    raw = sqlite_read_connection(path)  # the way every reader opens the file (query_only)
    if sqlite3.sqlite_version_info < (3, 44):
        # string_agg arrived in SQLite 3.44; the canned queries use PostgreSQL's spelling.
        raw.create_aggregate("string_agg", 2, _StringAgg)
    return raw


class _StringAgg:
    """string_agg(value, separator) for SQLite before 3.44: the non-NULL values, joined."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.sep = ","

    def step(self, value: Any, sep: str) -> None:
        if value is not None:
            self.parts.append(str(value))
            self.sep = sep

    def finalize(self) -> str | None:
        return self.sep.join(self.parts) if self.parts else None


# --- PostgreSQL ------------------------------------------------------------------------

# What ends every session, in one round trip: the transaction, then DISCARD ALL's parts
# (DISCARD ALL itself cannot share a message with another statement) but for two: the prepared
# statements and their plans stay. Those are the driver's own, made from statements that passed
# the checks above; kept, a pooled connection answers a query it has answered before in one round
# trip, without parsing or planning it again. The transaction ends by COMMIT, not ROLLBACK: it
# is READ ONLY, so the two are the same to the server (one that failed is rolled back either
# way), but psycopg forgets every prepared statement on a ROLLBACK.
_END_SESSION = ("COMMIT; CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; "
                "SELECT pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES")


# psycopg logs a warning ("error ignored terminating <psycopg.Pipeline …>: pipeline aborted") when
# a pipeline a failed statement aborted is closed, some of the time (it races the server's reply):
# the statement's own error is the one raised and said; the warning would be a second line on stderr.
logging.getLogger("psycopg").addFilter(
    lambda record: not record.getMessage().startswith("error ignored terminating <psycopg.Pipeline"))


@contextmanager
def _postgres_readonly(url: URL, timeout: float, snapshot: bool,
                       own_text: bool) -> Iterator[tuple[Any, Any, type[BaseException]]]:
    import psycopg

    def describe(exc: BaseException) -> str:
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate == "57014":  # query_canceled: the statement_timeout fired
            return too_long(timeout)
        # 25006 read_only_sql_transaction, 42501 insufficient_privilege (the reader role).
        if sqlstate in ("25006", "42501"):
            return f"read-only: {first_line(exc)}"
        if "multiple commands" in str(exc):  # cannot happen past sqlcheck; said plainly if it does
            return "one statement at a time: this text holds more than one (nothing was run)"
        return f"database error: {first_line(exc)}"

    # Connections are pooled (a new one costs more than most canned queries: about 8 ms, a forked
    # server process) and kept clean: each session's transaction is ended and what else a
    # statement could leave in the session (cursors, settings, the role, advisory locks,
    # temporary tables) is discarded before the next session may use it (_END_SESSION).
    # The engine is kept too: its first connection inspects the server, which costs more still.
    # Each round trip counts here (a canned query's statement takes a fraction of a millisecond
    # on the server): a session costs one besides its statements, its end, as the BEGIN travels
    # with the first statement (_PostgresTransaction); a canned query's, none.
    engine = _engine(("postgresql", url.render_as_string(hide_password=False)), lambda: _postgres_engine(url))
    transaction = _PostgresTransaction(engine, describe, timeout, snapshot)
    try:
        yield transaction, describe, psycopg.Error
    finally:
        conn = transaction.conn
        try:
            end = transaction.end(own_text)
            if end:
                conn.connection.driver_connection.execute(end)
        except BaseException:
            conn.invalidate()  # never back to the pool as it was left
            raise
        finally:
            conn.close()


class _PostgresTransaction:
    """A read session's pooled connection and its transaction: READ ONLY (REPEATABLE READ for a
    `snapshot`: every statement sees the same one), with the time limit, as the reader role where
    this user may take it on (for the rest of the transaction: the statements that could change
    it back, SET, RESET and set_config, are refused by sqlcheck).

    The transaction begins with the session's first statement: BEGIN and the settings are sent
    with it in one pipeline, one round trip for all (and a statement prepared for the first time
    is parsed in the same one), rather than a round trip of their own before it. The server runs
    nothing of a pipeline after a command that failed, so the statement never runs outside the
    transaction. That round trip is also what finds a pooled connection the server has since
    closed (a restart, a terminated backend), instead of a ping before every session: nothing has
    run on it, so it is dropped and the round trip sent again on a new one. A new connection that
    fails is an error."""

    def __init__(self, engine: Engine, describe: Callable[[BaseException], str], timeout: float,
                 snapshot: bool):
        self._engine, self._describe = engine, describe
        self._begin = f"BEGIN{' ISOLATION LEVEL REPEATABLE READ' if snapshot else ''} READ ONLY"
        self._timeout_ms = max(1, int(timeout * 1000))
        self.conn = _connect(engine, describe)
        self._sent = False  # a round trip went out: the session has something to end
        self._begun = False
        self._committed = False  # by a last statement

    def end(self, own_text: bool) -> str | None:
        """What the session ends with: nothing if nothing was sent. Its COMMIT, unless a last
        statement carried it and nothing began since (a pipeline that failed may have left its
        transaction open, aborted: COMMIT rolls that back); then, for a session that ran a
        caller's text, the rest of _END_SESSION."""
        if not self._sent:
            return None
        open_ = self._begun or not self._committed
        if own_text:
            return "COMMIT" if open_ else None
        return _END_SESSION if open_ else _END_SESSION.removeprefix("COMMIT; ")

    def run(self, send: Callable[[Any], Any] | None = None, *, last: bool = False) -> Any:
        """`send(driver_connection)`'s result (a cursor it executed), inside the transaction; with
        no `send`, the transaction begun (for statements the caller runs itself). `last`: the
        transaction is committed after it, in the same round trip."""
        if self._begun and not last:
            return send(self.conn.connection.driver_connection) if send else None
        while True:
            raw = self.conn.connection.driver_connection
            reused = "reader_role" in self.conn.connection.info
            begin = [] if self._begun else [self._begin, self._settings()]
            self._sent = True
            try:
                with raw.pipeline():
                    for statement in begin:
                        raw.execute(statement)
                    result = send(raw) if send else None
                    if last:
                        raw.execute("COMMIT")
            except Exception:
                if self._begun or not (reused and raw.broken):
                    raise
                self.conn.invalidate()
                self.conn.close()
                self.conn = _connect(self._engine, self._describe)
                continue
            self._begun, self._committed = not last, last
            return result

    def _settings(self) -> str:
        """The time limit, the server's limits and the reader role, for the transaction only:
        set_config(..., true) is SET LOCAL (the role's checked as SET ROLE's is), all settings in
        one statement. The role comes last: a setting only this user may make (temp_file_limit)
        is made before it is taken on."""
        role = _reader_role(self.conn)
        return f"SELECT set_config('statement_timeout', '{self._timeout_ms}', true)" + _server_limits(self.conn) + (
            f", set_config('role', '{role}', true)" if role else "")


def _server_limits(conn: Connection) -> str:
    """The read transaction's limits on the server's resources, as more set_config terms: memory
    per sort or hash (work_mem; hash_mem_multiplier 1, so a hash takes no more than a sort),
    temporary files (temp_file_limit: a superuser's setting, made where this user may make it:
    a superuser, or one granted SET on it), and a look every PG_CLIENT_CHECK_MS at whether the
    client is still connected, so a statement whose client was killed stops (PostgreSQL 14+).
    What a statement takes beyond these (a recursive UNION's table, an aggregate's state) only
    the time limit bounds (README, "Ad-hoc SQL")."""
    info = conn.connection.info
    if "server_limits" not in info:
        version = conn.connection.driver_connection.info.server_version
        may_limit_temp = conn.connection.driver_connection.execute(
            "SELECT has_parameter_privilege('temp_file_limit', 'SET')" if version >= 150000 else
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]
        terms = [f"set_config('work_mem', '{PG_WORK_MEM}', true)", "set_config('hash_mem_multiplier', '1', true)"]
        if may_limit_temp:
            terms.append(f"set_config('temp_file_limit', '{PG_TEMP_FILE_LIMIT}', true)")
        if version >= 140000:
            terms.append(f"set_config('client_connection_check_interval', '{PG_CLIENT_CHECK_MS}', true)")
        info["server_limits"] = "".join(f", {term}" for term in terms)
    return info["server_limits"]


def _reader_role(conn: Connection) -> str | None:
    """The database's reader role (named for current_database()) if it may read the warehouse
    here and this connection's user may take it on, else None: the statements then run as the
    user (as on a copy of another warehouse that `db upgrade` has not given its own role yet:
    its tables are granted to the template's). Asked once per connection (remembered in its pool
    record), as roles and grants change only by a migration or an administrator."""
    info = conn.connection.info
    if "reader_role" not in info:
        raw = conn.connection.driver_connection
        [(database,)] = raw.execute("SELECT current_database()").fetchall()
        role = reader_role(database)
        [(ok,)] = raw.execute(f"SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = %s AND pg_has_role(oid, "
                              f"'MEMBER') AND {READS_HERE.format(role='oid')})", [role]).fetchall()
        info["reader_role"] = role if ok else None
    return info["reader_role"]


def _postgres_engine(url: URL) -> Engine:
    # Autocommit at the driver: _begin writes the transaction's BEGIN itself, with its settings,
    # rather than the driver sending a bare one first (a round trip of its own). Should any
    # statement ever run outside that transaction, the session's own default makes it READ ONLY
    # too. One connection kept; more are opened only for sessions running at the same time, and
    # closed after.
    return create_engine(url, poolclass=QueuePool, pool_size=1, isolation_level="AUTOCOMMIT",
                         connect_args=read_only_connect_args(url))


def reader_role_note(engine: Engine) -> str | None:
    """Why ad-hoc SQL on this PostgreSQL database would not run as its reader role, if it would
    not: for `db upgrade` to say."""
    if engine.dialect.name != "postgresql":
        return None
    with engine.connect() as conn:
        role = reader_role(conn.exec_driver_sql("SELECT current_database()").scalar())
        exists, member, reads, user = conn.exec_driver_sql(
            "SELECT r.oid IS NOT NULL, coalesce(pg_has_role(r.oid, 'MEMBER'), false), "
            f"{READS_HERE.format(role='r.oid')}, quote_ident(current_user) "
            "FROM (SELECT) AS one LEFT JOIN pg_roles r ON r.rolname = %(role)s", {"role": role}).one()
    if exists and member and reads:
        return None
    if not exists:
        fix = (f"a superuser can: CREATE ROLE {role} NOLOGIN; GRANT {role} TO {user}; then run "
               f"`warehouse db upgrade` again")
    elif not member:
        fix = f"a superuser can: GRANT {role} TO {user}"
    else:
        fix = f"the tables' owner can run `warehouse db upgrade`, which grants them to {role}"
    return (f"`warehouse sql` will run as {user}, not as this warehouse's read-only role {role} "
            f"(guarded by its grammar check and function denylist only); {fix}")


def _connect(engine, describe) -> Connection:
    try:
        return engine.connect()
    except DBAPIError as exc:
        raise WarehouseError(describe(exc.orig)) from None
