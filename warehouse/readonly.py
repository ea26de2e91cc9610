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
  statement_timeout, and a look at the clock for every row handed out, so printing counts
  too); rows handed out one at a time under a row cap; on SQLite, optionally a cap on the size
  of any one value (SQLITE_LIMIT_LENGTH), which bounds what a statement can build in memory.

The statements of one session read one snapshot (a read transaction on SQLite, REPEATABLE READ
on PostgreSQL).
"""

from __future__ import annotations

import atexit
import logging
import math
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
from warehouse.errors import WarehouseError, first_line
from warehouse.sqlcheck import ONLY_QUERIES, SQLITE_DENIED_FUNCTIONS

DEFAULT_TIMEOUT = 30.0
MAX_TIMEOUT = 86_400.0  # a day: past that a limit is a typo, and PostgreSQL's would overflow
DEFAULT_MAX_ROWS = 10_000

# Rows fetched from the driver at a time: large enough to cost nothing per row, small enough
# that a streamed result never holds much (on PostgreSQL each batch is a round trip).
_BATCH = 500


@dataclass
class ReadResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool = False  # more rows existed than max_rows


class RowStream:
    """The rows of one statement, handed out as they arrive: iterate it once, inside its
    session. `truncated` is known once the iteration has ended."""

    def __init__(self, columns: list[str], batches: Iterator[list[tuple]], max_rows: int | None,
                 session: "ReadSession"):
        self.columns = columns
        self.truncated = False  # more rows existed than max_rows
        self._batches = batches
        self._max_rows = max_rows
        self._session = session

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        left = self._max_rows
        with self._session.errors():
            for batch in self._batches:
                for row in batch:
                    # The clock is read for every row: whoever consumes the rows (a printer)
                    # is held to the same deadline as the database.
                    self._session.check_deadline()
                    if left is not None:
                        if left == 0:
                            self.truncated = True
                            return
                        left -= 1
                    yield row


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
) -> ReadResult:
    """Run one statement read-only. Named parameters are written `:name` in the SQL.

    Returns at most `max_rows` rows (None: all of them) and whether there were more. Raises
    WarehouseError, with a one-line message, for a write, a second statement, a statement
    that outlives `timeout` seconds, or anything the database rejects."""
    with stream_readonly(url, sql, params, timeout=timeout, max_rows=max_rows) as rows:
        return ReadResult(rows.columns, list(rows), rows.truncated)


@contextmanager
def stream_readonly(
    url: URL | str,
    sql: str,
    params: Mapping[str, Any] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    max_rows: int | None = DEFAULT_MAX_ROWS,
    max_value_bytes: int | None = None,
) -> Iterator[RowStream]:
    """run_readonly's statement, its rows streamed: consume them inside the `with`, where the
    time limit covers the consuming too. `max_value_bytes` caps any one value a SQLite statement
    may build or read (a larger one is refused as too big); PostgreSQL's are capped by the server
    (1 GB)."""
    if isinstance(url, str):
        url = resolve_url(url)
    check_timeout(timeout)
    _check_statement(url, sql)  # before the database is opened: a typo costs no connection
    with _session(url, timeout, snapshot=False, max_value_bytes=max_value_bytes) as session:
        yield session.stream(sql, params, max_rows=max_rows)


@contextmanager
def readonly_session(url: URL | str, *, timeout: float = DEFAULT_TIMEOUT,
                     own_text: bool = False) -> Iterator["ReadSession"]:
    """A read-only connection for several statements that all see the same snapshot of the
    database: what a canned query needs when its answer takes more than one read.

    `own_text`: every statement's text is the library's own (a canned query's; values bound),
    never a caller's. Such statements cannot leave anything in the session, so on PostgreSQL the
    session ends with its COMMIT alone, not with the reset of all a caller's text could have left
    (_END_SESSION); and a fetch(..., last=True) carries that COMMIT in its own round trip."""
    if isinstance(url, str):
        url = resolve_url(url)
    check_timeout(timeout)
    with _session(url, timeout, snapshot=True, own_text=own_text) as session:
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
        yield ReadSession(transaction, describe, driver_error, deadline, timeout, own_text)


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
                 driver_error: type[BaseException], deadline: float, timeout: float, own_text: bool = False):
        self._transaction = transaction
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
               max_rows: int | None = DEFAULT_MAX_ROWS, batch: int = _BATCH) -> RowStream:
        """One statement, its rows streamed (see stream_readonly), `batch` rows at a time."""
        cursor, columns = self._execute(sql, params, whole=False, last=False)
        return RowStream(columns, _batches(cursor, batch), max_rows, self)

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
            cursor.execute(statement, values)
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
            return cursor, [d[0] for d in cursor.description]

    def check_deadline(self) -> None:
        if time.monotonic() > self._deadline:
            raise WarehouseError(too_long(self._timeout))

    @contextmanager
    def errors(self) -> Iterator[None]:
        """Driver errors, as one-line WarehouseErrors."""
        try:
            yield
        except self._driver_error as exc:
            raise WarehouseError(self._describe_error(exc)) from None


def _batches(cursor, size: int) -> Iterator[list[tuple]]:
    while True:
        batch = cursor.fetchmany(size)
        yield batch
        if len(batch) < size:  # the last one: no further round trip to learn there is none
            return


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
            return (f"a value would be larger than {max_value_bytes:,} bytes, more than this command "
                    f"reads: raise --max-cell-bytes, or cut it in SQL (substr)")
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
        length = raw.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes or -1)
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
        """The time limit and the reader role, for the transaction only: set_config(..., true) is
        SET LOCAL (the role's checked as SET ROLE's is), two settings in one statement."""
        role = _reader_role(self.conn)
        return f"SELECT set_config('statement_timeout', '{self._timeout_ms}', true)" + (
            f", set_config('role', '{role}', true)" if role else "")


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
