"""Read-only SQL on either backend, by construction rather than by inspecting the SQL.

Every query a user can aim at the warehouse (`warehouse sql`, the canned queries, search)
runs through run_readonly, or readonly_session for an answer that takes several statements:

- SQLite: a connection of its own (pooled for reuse, see _engine) that opens the file as every
  reader does (warehouse.db.engine.sqlite_read_connection: `PRAGMA query_only`, and `mode=ro`
  unless that would leave files behind), so the library itself refuses every write; an
  authorizer also refuses what those two let through (ATTACH, DETACH, PRAGMAs that set
  something, transaction control); a progress handler enforces the time limit.
- PostgreSQL: a fresh connection whose only transaction is `READ ONLY`, with
  `SET LOCAL statement_timeout`; it is rolled back and closed at the end, so even session
  settings a statement changed do not outlive it.

One statement per call: text holding a second statement is refused before anything runs. The
statements of one session read one snapshot (a read transaction on SQLite, REPEATABLE READ on
PostgreSQL).
"""

from __future__ import annotations

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
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.pool import NullPool, QueuePool

from warehouse.db.engine import resolve_url, sqlite_path, sqlite_read_connection
from warehouse.errors import WarehouseError, first_line

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_ROWS = 10_000


@dataclass
class ReadResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool = False  # more rows existed than max_rows


def run_readonly(
    url: URL | str,
    sql: str,
    params: Mapping[str, Any] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    max_rows: int | None = DEFAULT_MAX_ROWS,
) -> ReadResult:
    """Run one statement read-only. Named parameters are written `:name` in the SQL.

    Returns at most `max_rows` rows (None: all of them) and whether there were more. Raises
    WarehouseError, with a one-line message, for a write, a second statement, a statement
    that outlives `timeout` seconds, or anything the database rejects."""
    if isinstance(url, str):
        url = resolve_url(url)
    _check_timeout(timeout)
    _check_one_statement(sql)  # before the database is opened: a typo costs no connection
    with _session(url, timeout, snapshot=False) as session:
        return session.fetch(sql, params, max_rows=max_rows)


@contextmanager
def readonly_session(url: URL | str, *, timeout: float = DEFAULT_TIMEOUT) -> Iterator["ReadSession"]:
    """A read-only connection for several statements that all see the same snapshot of the
    database: what a canned query needs when its answer takes more than one read."""
    if isinstance(url, str):
        url = resolve_url(url)
    _check_timeout(timeout)
    with _session(url, timeout, snapshot=True) as session:
        yield session


@contextmanager
def _session(url: URL, timeout: float, *, snapshot: bool) -> Iterator["ReadSession"]:
    opener = _sqlite_readonly if url.get_backend_name() == "sqlite" else _postgres_readonly
    with opener(url, timeout, snapshot) as (conn, describe_error):
        yield ReadSession(conn, describe_error)


class ReadSession:
    """Statements on one read-only connection (see readonly_session)."""

    def __init__(self, conn: Connection, describe_error: Any):
        self._conn = conn
        self._describe_error = describe_error

    def fetch(self, sql: str, params: Mapping[str, Any] | None = None, *,
              max_rows: int | None = DEFAULT_MAX_ROWS) -> ReadResult:
        """One statement, as run_readonly runs it."""
        _check_one_statement(sql)
        try:
            # Under a row cap, stream rows from PostgreSQL (a server-side cursor) so the cap never
            # pulls a whole table into memory. Only a query can be a cursor; anything else
            # (EXPLAIN, SHOW) answers in a few rows and is fetched normally.
            stream = max_rows is not None and self._conn.dialect.name == "postgresql" and _is_query(sql)
            result = self._conn.execution_options(stream_results=stream).execute(text(sql), dict(params or {}))
            if not result.returns_rows:
                return ReadResult([], [])
            columns = list(result.keys())
            if stream:
                rows = [tuple(r) for r in result.fetchmany(max_rows + 1)]
            else:
                # The driver's own tuples: a textual statement's values need no processing, and
                # making a Row of each costs a third of a large fetch. (A streamed result has
                # already buffered a row, so it is read through SQLAlchemy.)
                cursor = result.cursor
                rows = cursor.fetchall() if max_rows is None else cursor.fetchmany(max_rows + 1)
            result.close()
            if max_rows is None:
                return ReadResult(columns, rows)
            return ReadResult(columns, rows[:max_rows], len(rows) > max_rows)
        except DBAPIError as exc:
            raise WarehouseError(self._describe_error(exc.orig)) from None
        except StatementError as exc:  # raised before reaching the database
            missing = re.search(r"value is required for bind parameter '(\w+)'", str(exc))
            if missing:
                name = missing.group(1)
                raise WarehouseError(f"no value for :{name} (give -p {name} VALUE; "
                                     f"write \\: for a colon that is not a parameter)") from None
            raise WarehouseError(first_line(exc.orig or exc)) from None


def _check_timeout(timeout: float) -> None:
    if timeout <= 0:
        raise WarehouseError("the time limit must be more than 0 seconds")


def _check_one_statement(sql: str) -> None:
    count = _count_statements(sql)
    if count == 0:
        raise WarehouseError("no SQL statement given")
    if count > 1:
        raise WarehouseError(
            f"one statement at a time: this text holds {count} (nothing was run)")


# --- one statement -----------------------------------------------------------------------

@lru_cache(maxsize=256)
def _count_statements(sql: str) -> int:
    # Cached: the canned queries send the same few texts again and again.
    return len(split_statements(sql))


_DOLLAR_QUOTE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def split_statements(sql: str) -> list[str]:
    """The statements in `sql`, split at semicolons outside quotes, quoted names and comments
    (PostgreSQL dollar quotes and E'' strings included). Empty statements are dropped."""
    statements: list[str] = []
    start = i = 0
    has_code = False  # the current statement holds something other than blanks and comments
    n = len(sql)
    while i < n:
        ch = sql[i]
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        if ch == ";":
            if has_code:
                statements.append(sql[start:i].strip())
            start, has_code = i + 1, False
            i += 1
            continue
        if not ch.isspace():
            has_code = True
        if ch in "'\"`[":
            i = _end_of_quoted(sql, i)
        elif ch == "$" and (m := _DOLLAR_QUOTE.match(sql, i)):
            end = sql.find(m.group(0), m.end())
            i = n if end < 0 else end + len(m.group(0))
        else:
            i += 1
    if has_code:
        statements.append(sql[start:].strip())
    return statements


def _end_of_quoted(sql: str, i: int) -> int:
    """The index just past the quoted string or name that starts at sql[i]."""
    opener = sql[i]
    closer = "]" if opener == "[" else opener
    # PostgreSQL's E'…' strings escape with backslashes; everywhere else a quote is doubled.
    backslashes = opener == "'" and i > 0 and sql[i - 1] in "eE" and (i < 2 or not (sql[i - 2].isalnum() or sql[i - 2] == "_"))
    j = i + 1
    while j < len(sql):
        if backslashes and sql[j] == "\\":
            j += 2
            continue
        if sql[j] == closer:
            if closer != "]" and sql.startswith(closer, j + 1):  # a doubled quote
                j += 2
                continue
            return j + 1
        j += 1
    return len(sql)


_QUERY_START = re.compile(r"\s*\(*\s*(select|with|values|table)\b", re.IGNORECASE)


def _is_query(sql: str) -> bool:
    body = re.sub(r"(--[^\n]*\n?|/\*.*?\*/)", " ", sql, flags=re.DOTALL)
    return bool(_QUERY_START.match(body))


# --- SQLite ----------------------------------------------------------------------------

# Progress-handler granularity: SQLite VM instructions between two looks at the clock.
_SQLITE_TICKS = 10_000

# PRAGMAs that take an argument without changing anything: they only name what to describe.
_SQLITE_PRAGMAS_WITH_ARGUMENT = {
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
    "foreign_key_list", "foreign_key_check", "integrity_check", "quick_check",
}

_DENIED = {
    sqlite3.SQLITE_ATTACH: "ATTACH", sqlite3.SQLITE_DETACH: "DETACH",
    sqlite3.SQLITE_TRANSACTION: "transaction control", sqlite3.SQLITE_SAVEPOINT: "SAVEPOINT",
}


@contextmanager
def _sqlite_readonly(url: URL, timeout: float, snapshot: bool) -> Iterator[tuple[Connection, Any]]:
    path = sqlite_path(url)
    if path is None:
        raise WarehouseError("read-only queries need a SQLite file, not an in-memory database")
    if not path.exists():
        raise WarehouseError(f"{path}: no such database file")
    refused: list[str] = []  # why the authorizer said no, for the error message
    deadline = time.monotonic() + timeout
    timed_out: list[bool] = []

    def authorize(action: int, arg1: str | None, arg2: str | None, _db, _trigger) -> int:
        if action in _DENIED:
            refused.append(f"{_DENIED[action]} is not allowed")
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA and arg2 is not None and arg1 not in _SQLITE_PRAGMAS_WITH_ARGUMENT:
            refused.append(f"PRAGMA {arg1} = … would change a setting")
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def past_deadline() -> int:
        if time.monotonic() > deadline:
            timed_out.append(True)
            return 1  # non-zero interrupts the statement
        return 0

    def describe(exc: BaseException) -> str:
        if timed_out:
            return f"the query ran longer than the time limit ({timeout:g} s; see --timeout)"
        if refused:
            return f"read-only: {refused[0]}"
        message = first_line(exc)
        if "readonly database" in message:
            return f"read-only: the statement would write ({message})"
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
        try:
            yield conn, describe
        finally:
            # Down again for closing, which rolls a read transaction back; the connection goes
            # back to its pool as it came.
            raw.set_authorizer(None)
            raw.set_progress_handler(None, 0)


# Read-only engines of the last few databases, kept: making one costs about as much as a canned
# query (for PostgreSQL several times as much). SQLite's also pool their connections, as a fresh
# one parses the schema again and starts with a cold page cache; reuse is safe because such a
# connection holds nothing a statement could change: the file is opened read-only with
# query_only set (TEMP objects included), the authorizer refuses every setting, and the guards
# are per session. A SQLite engine is keyed by the file's inode, so a file replaced under the
# same name gets new connections rather than the old file's.
_KEEP_ENGINES = 4
_engines: OrderedDict[tuple, Engine] = OrderedDict()
_engines_lock = threading.Lock()


def _engine(key: tuple, make: Callable[[], Engine]) -> Engine:
    with _engines_lock:
        engine = _engines.pop(key, None) or make()
        _engines[key] = engine
        while len(_engines) > _KEEP_ENGINES:
            _engines.popitem(last=False)[1].dispose()
    return engine


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

@contextmanager
def _postgres_readonly(url: URL, timeout: float, snapshot: bool) -> Iterator[tuple[Connection, Any]]:
    def describe(exc: BaseException) -> str:
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate == "57014":  # query_canceled: the statement_timeout fired
            return f"the query ran longer than the time limit ({timeout:g} s; see --timeout)"
        # 25006 read_only_sql_transaction; a write inside WITH is refused earlier, when the
        # query is declared as a cursor.
        if sqlstate == "25006" or "data-modifying" in str(exc):
            return f"read-only: {first_line(exc)}"
        return f"database error: {first_line(exc)}"

    # A connection of its own (no pool) so nothing a statement does to the session survives it.
    # The engine is kept: its first connection inspects the server, which costs more than a query.
    key = ("postgresql", url.render_as_string(hide_password=False))
    with _connect(_engine(key, lambda: create_engine(url, poolclass=NullPool)), describe) as conn:
        transaction = conn.begin()
        try:
            # REPEATABLE READ: every statement of the transaction sees the same snapshot.
            isolation = "ISOLATION LEVEL REPEATABLE READ, " if snapshot else ""
            conn.exec_driver_sql(f"SET TRANSACTION {isolation}READ ONLY")
            conn.exec_driver_sql(f"SET LOCAL statement_timeout = {max(1, int(timeout * 1000))}")
            yield conn, describe
        finally:
            transaction.rollback()


def _connect(engine, describe) -> Connection:
    try:
        return engine.connect()
    except DBAPIError as exc:
        raise WarehouseError(describe(exc.orig)) from None
