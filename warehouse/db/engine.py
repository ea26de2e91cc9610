"""Choosing the database and opening it, for writing (make_engine) or only for reading
(make_read_engine). The only module besides ingest.write.bulk that knows which backend it is talking
to."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import sqlite3
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from warehouse.db import DEFAULT_DB, ENV_VAR  # noqa: F401  (ENV_VAR: part of this module's interface)
from warehouse.db.stored import StoredJson, StoredTime, stored
from warehouse.errors import SchemaError, WarehouseError, first_line

# A second writer on SQLite waits this long for the lock instead of failing at once.
SQLITE_BUSY_TIMEOUT_MS = 60_000
# ... in steps this long, between which a signal (SIGTERM, Ctrl-C) is handled: SQLite's own wait
# is one call into C, during which Python runs no signal handler.
SQLITE_LOCK_STEP_MS = 100
# A writer's page cache: a sixteenth of the file, within these bounds (see _cache_kib).
SQLITE_CACHE_KIB = 16 * 1024
SQLITE_CACHE_MAX_KIB = 1024 * 1024
SQLITE_PAGE_BYTES = 16384
# A reader waits less: a query's own time limit (warehouse.readonly) must not be spent waiting.
SQLITE_READ_BUSY_TIMEOUT_MS = 5_000

# Driver spellings taken as psycopg 3 (the psycopg 2 one names the same server the same way) and
# as the standard library's sqlite3; every other driver (asyncpg, pg8000, …) and backend is refused.
PSYCOPG_SPELLINGS = ("postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2")
SQLITE_SPELLINGS = ("sqlite", "sqlite+pysqlite")
URL_FORM = "postgresql://USER:PASSWORD@HOST:PORT/DATABASE or sqlite:///PATH"
SUPPORTED = ("a SQLite file (a path or sqlite:///PATH) or PostgreSQL through psycopg 3 "
             "(postgresql://, postgresql+psycopg:// or postgresql+psycopg2://)")
# Query parameters holding a secret: libpq's password and sslpassword, and any token or key.
_SECRET_PARAM = re.compile(r"(?i)([?&][^=&#]*(?:pass|pwd|secret|token|key)[^=&#]*=)[^&#]*")
# Everything between the scheme and the last '@': the user and password of a URL that does not parse.
_USERINFO = re.compile(r"^([^:/?#]*://).*@")


def resolve_url(db: str | None = None) -> URL:
    """A SQLAlchemy URL from `--db`, else $WAREHOUSE_DB, else ./warehouse.db.

    A plain path means a SQLite file. `postgresql://` is read as psycopg 3, and so is the
    psycopg 2 spelling `postgresql+psycopg2://` (the same server and URL; psycopg 2 itself is not
    a dependency). Anything else is refused in one line, as is a URL that cannot be read."""
    if db is not None and not db.strip():  # `--db "$DB"` with DB unset: not the default file
        raise WarehouseError(f"the database given is empty: give {URL_FORM}")
    spec = db or os.environ.get(ENV_VAR) or DEFAULT_DB
    if "://" not in spec:
        return URL.create("sqlite+pysqlite", database=str(Path(spec).expanduser()))
    try:
        url = make_url(spec)
    except ArgumentError:
        raise WarehouseError(f"not a database URL: {redact(spec)} (expected {URL_FORM})") from None
    except ValueError:  # SQLAlchemy's int() of what it took for the port
        raise WarehouseError(f"not a database URL: {redact(spec)} (the port must be a number; "
                             f"an IPv6 host goes in brackets, [::1]:5432)") from None
    if "@" in (url.host or ""):
        raise WarehouseError(f"not a database URL: {redact(spec)} (an '@' in a user name or password "
                             f"must be written %40)")
    if url.drivername in PSYCOPG_SPELLINGS:
        url = url.set(drivername="postgresql+psycopg")
    elif url.drivername in SQLITE_SPELLINGS:
        url = url.set(drivername="sqlite+pysqlite")
        if sqlite_path(url) is None:  # each connection would get a database of its own, lost at once
            raise WarehouseError(f"{redact(url)}: an in-memory SQLite database keeps nothing: "
                                 f"give a file (sqlite:///PATH)")
    else:
        raise WarehouseError(f"unsupported database {url.drivername!r}: use {SUPPORTED}")
    if url.get_backend_name() == "postgresql":
        try:  # the driver's own reading of ports and hosts in the query string, before connecting
            url.get_dialect()().create_connect_args(url)
        except ArgumentError as exc:
            raise WarehouseError(f"{redact(url)}: {first_line(exc)}") from None
    return url


def redact(url: URL | str) -> str:
    """The database as it may be shown: a SQLite file by its path, a server URL without its
    password, wherever it was given (after the user name, in the query string), even when the URL
    does not parse."""
    if isinstance(url, str):
        try:
            url = make_url(url)
        except (ArgumentError, ValueError):
            return _USERINFO.sub(r"\1***@", _hide_secret_params(url))
    if url.get_backend_name() == "sqlite" and url.database:
        return url.database
    shown = _hide_secret_params(url.render_as_string(hide_password=True))
    if "@" in (url.host or ""):  # an unescaped '@' left part of the password in the host
        shown = _USERINFO.sub(r"\1***@", shown)
    return shown


def _hide_secret_params(url: str) -> str:
    return _SECRET_PARAM.sub(r"\1***", url)


def sqlite_path(url: URL) -> Path | None:
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database)


def no_warehouse(path: Path) -> WarehouseError:
    return WarehouseError(f"no warehouse at {path}: `warehouse ingest …` or `warehouse db upgrade` creates one")


def not_a_warehouse(where: str | Path) -> SchemaError:
    """The one line for a database of another program's tables (no schema version)."""
    return SchemaError(f"{where} holds tables but no warehouse schema version: point --db at a warehouse")


def refuse_missing(url: URL) -> None:
    """A command that works on a warehouse, given a SQLite file that is not there: refused
    before connecting, which would create it (only ingest and db upgrade create one)."""
    path = sqlite_path(url)
    if path is not None and not path.exists():
        raise no_warehouse(path)


def make_engine(url: URL, *, for_migrations: bool = False) -> Engine:
    """The engine of the commands that write (ingest, db upgrade|downgrade, index build|drop).
    A SQLite file is created if missing and switched to WAL."""
    if url.get_backend_name() == "sqlite":
        return _sqlite_engine(url, for_migrations)
    return create_engine(url, pool_pre_ping=True)


# SQLite files a first ingest of this process is creating (first_load): written under a rollback
# journal, switched to WAL when it ends.
_FIRST_LOADS: set[Path] = set()


@contextlib.contextmanager
def first_load(engine: Engine) -> Iterator[None]:
    """Around the ingest that creates a SQLite file: its pages are written once, into the file,
    under a rollback journal (which a new file's pages never enter), as any loader writes a new
    file; WAL would write each page twice, to the log and then, at the checkpoint, to the file
    (on the math profile, the ingest's whole write again). When it ends the file is switched to
    WAL, which readers beside later writers need; should another process hold the file then, its
    next writer switches it. A crash meanwhile leaves the journal, which the next writer rolls
    back, so no half unit is ever read. Anything else: no-op."""
    path = sqlite_path(engine.url)
    if path is None or path.exists():
        yield
        return
    path = path.resolve()
    _FIRST_LOADS.add(path)
    try:
        yield
    finally:
        _FIRST_LOADS.discard(path)
        if path.exists():
            engine.dispose()  # its connections were opened under the rollback journal
            try:
                with engine.connect():  # _on_connect switches the file to WAL
                    pass
            except DBAPIError:
                pass  # held by another process all along: its next writer switches it
            engine.dispose()


def _cache_kib(path: Path | None) -> int:
    """The writer's page cache for this file: a sixteenth of its size, at least
    SQLITE_CACHE_KIB, at most SQLITE_CACHE_MAX_KIB. Dedup looks every message up by its hash, a
    random key, and inserts the new ones likewise: the whole hash index is hot, about 2 % of
    the file on the math profile, and each unit's text pages pass through the cache beside it.
    A fixed 16 MB cache held it at 1× but not at 20×, where every lookup and insert read it
    back: a unit's message writes took 2.5 times as long at the end of a math×20 load as at its
    start (1.4 s against 0.56, CPU time). A thirty-second of the file held it until about the
    tenth of 16 units (a unit's lookups then went from 0.12 s to 0.5 s; math×20 in process
    32.9 s, against 29.7 s with a sixteenth). A page is only held once it is read, so a small
    load uses no more memory than before."""
    try:
        size = path.stat().st_size if path is not None else 0
    except OSError:
        size = 0
    return max(SQLITE_CACHE_KIB, min(SQLITE_CACHE_MAX_KIB, size // 16 // 1024))


def _sqlite_engine(url: URL, for_migrations: bool) -> Engine:
    path = sqlite_path(url)
    if path is not None and not path.parent.exists():
        raise WarehouseError(f"{path.parent}: directory does not exist")
    if path is not None:
        _refuse_foreign(path)
    # The driver's own transaction handling issues BEGIN lazily and only before DML, which
    # breaks read consistency and savepoints; take control and emit BEGIN ourselves.
    engine = create_engine(url, connect_args={"isolation_level": None, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        # Large pages hold a typical message without overflow pages: loads are faster and files
        # smaller. Only a new, empty file takes it (before WAL, which fixes the page size).
        cur.execute(f"PRAGMA page_size = {SQLITE_PAGE_BYTES}")
        # WAL lets readers work while an ingest writes; NORMAL is durable across application
        # crashes (the only kind the ledger must survive) and much faster than FULL.
        try:
            if path is None or path.resolve() not in _FIRST_LOADS:
                _switch_to_wal(cur)
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc):
                raise _unreadable(path, exc) from None
            raise
        cur.execute("PRAGMA synchronous = NORMAL")
        # Batch migrations rebuild tables; with enforcement on, a rebuild would cascade.
        cur.execute(f"PRAGMA foreign_keys = {'OFF' if for_migrations else 'ON'}")
        # Pages a unit's lookups and index inserts revisit stay in memory instead of being
        # spilled to the WAL and read back (the default cache is 2 MB); sized again at each
        # write, as the file grows.
        cur.execute(f"PRAGMA cache_size = {-_cache_kib(path)}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        options = conn.get_execution_options()
        # The pragma only takes effect outside a transaction, so it is set for each one: off
        # for a writer that vouches for its own references (see session.write_transaction).
        checked = options.get("foreign_keys", True) and not for_migrations
        conn.exec_driver_sql(f"PRAGMA foreign_keys = {'ON' if checked else 'OFF'}")
        # Writers take the write lock up front so two ingests queue on busy_timeout instead of
        # deadlocking on a read-to-write upgrade.
        if options.get("sqlite_write"):
            conn.exec_driver_sql(f"PRAGMA cache_size = {-_cache_kib(path)}")
            _begin_immediate(conn)
        else:
            conn.exec_driver_sql("BEGIN DEFERRED")

    return engine


def _refuse_foreign(path: Path) -> None:
    """Before a writer's first connection, which switches the file to WAL (a change to its
    header, and a -wal and -shm beside it): refuse, changing nothing, a file that is not this
    user's to write (the file or its folder, where SQLite writes its journal) or that is not a
    warehouse (another program's SQLite database: tables, but no schema version). A missing or
    empty file is made a warehouse; a warehouse's schema is checked later (schema.ensure_current).
    It is read as a reader reads it (sqlite_read_connection), which leaves it as it was."""
    try:
        if path.stat().st_size == 0:
            return
    except FileNotFoundError:
        return
    for what, where in (("it", path), ("in its folder", path.parent)):
        if not os.access(where, os.W_OK):
            raise WarehouseError(f"{path}: this user may not write {what}: a warehouse to write must be "
                                 f"yours (copy it to a folder you can write, or ask its owner)")
    conn = sqlite_read_connection(path)  # "is not a SQLite database" for anything else
    try:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise _unreadable(path, exc) from None
    finally:
        conn.close()
    if tables and "alembic_version" not in tables:
        raise not_a_warehouse(path)


def _begin_immediate(conn) -> None:
    """BEGIN IMMEDIATE, waiting for another writer up to the busy timeout in short steps (see
    SQLITE_LOCK_STEP_MS)."""
    raw = conn.connection.driver_connection
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    raw.execute(f"PRAGMA busy_timeout = {SQLITE_LOCK_STEP_MS}")
    try:
        while time.monotonic() < deadline:
            try:
                raw.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc):
                    break
        # Once more, to raise its error as any statement's (the lock still held at the deadline).
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    finally:
        raw.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")


def _switch_to_wal(cur) -> None:
    """`PRAGMA journal_mode = WAL`, waiting while another process holds the file.

    SQLite answers "database is locked" to this pragma at once, without busy_timeout's wait,
    while another process is creating the file or switching it to WAL (two ingests started
    together on a new warehouse); so the wait is done here, up to the same timeout."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# --- reading ---------------------------------------------------------------------------

def read_only_connect_args(url: URL) -> dict[str, str]:
    """A PostgreSQL connection's startup options that make every transaction of its session READ
    ONLY, whoever begins it: a setting the server applies, rather than a statement per
    transaction; and its time zone UTC, so that timestamps (and `now()`) read as SQLite's do
    whatever the server's default. The URL's own options are kept."""
    return {"options": " ".join(filter(None, [url.query.get("options"), "-c default_transaction_read_only=on",
                                              "-c TimeZone=UTC"]))}


def make_read_engine(url: URL) -> Engine:
    """The engine of the commands that only read. It cannot write, and it leaves the database as
    it found it: a SQLite file keeps its bytes, mtime and journal mode, a missing one is not
    created (WarehouseError), and no -wal/-shm is left where there was none; every PostgreSQL
    transaction is READ ONLY."""
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, connect_args=read_only_connect_args(url))
    path = sqlite_path(url)
    if path is None:
        raise WarehouseError("reading needs a SQLite file, not an in-memory database")
    sqlite_read_uri(path)  # a missing file or an unreadable WAL is reported now, in one line
    engine = create_engine(url, creator=lambda: sqlite_read_connection(path))

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        # As for writers (see _sqlite_engine): BEGIN now, so a transaction's reads share a snapshot.
        conn.exec_driver_sql("BEGIN")

    return engine


def sqlite_read_connection(path: Path) -> sqlite3.Connection:
    """A connection that reads the SQLite file at `path` and refuses every write (query_only),
    with the driver's implicit transactions off (the caller begins its own)."""
    uri = sqlite_read_uri(path)
    raw = None
    try:
        raw = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                              factory=_ReadConnection, detect_types=sqlite3.PARSE_DECLTYPES)
        _open_readers.add(raw)
        raw.execute("PRAGMA query_only = 1")
        raw.execute(f"PRAGMA busy_timeout = {SQLITE_READ_BUSY_TIMEOUT_MS}")
        raw.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the header, read now
    except sqlite3.DatabaseError as exc:
        if raw is not None:
            raw.close()
        raise _unreadable(path, exc) from None
    return raw


def _unreadable(path: Path | None, exc: sqlite3.DatabaseError) -> WarehouseError:
    if "not a database" in str(exc):
        return WarehouseError(f"{path} is not a SQLite database: point --db at a warehouse")
    return WarehouseError(f"cannot read {path}: {first_line(exc)}")


# A reader's values of the columns declared DATETIME and JSON, marked (see warehouse.db.stored).
# Converters are the driver's, process-wide, and apply only to connections opened with
# detect_types, which only readers are.
sqlite3.register_converter("DATETIME", lambda raw: stored(raw, StoredTime))
sqlite3.register_converter("JSON", lambda raw: stored(raw, StoredJson))


class _ReadConnection(sqlite3.Connection):
    """A reader's connection; a subclass only so that _open_readers can hold it weakly."""


# Every reader's connection still open, closed when the process exits: pools keep connections
# open, and only closing them lets SQLite delete the -wal/-shm a `mode=rw` reader created (the
# interpreter does not reliably close them at exit).
_open_readers: weakref.WeakSet[_ReadConnection] = weakref.WeakSet()


@atexit.register
def _close_readers() -> None:
    for conn in list(_open_readers):
        conn.close()


# How each file is opened for reading, decided once per process (keyed by device and inode) so
# that every connection to it opens it the same way: see _read_mode.
_read_modes: dict[tuple[int, int], str] = {}


def sqlite_read_uri(path: Path) -> str:
    """The `file:` URI that opens `path` for reading without changing anything on disk."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise no_warehouse(path) from None
    key = (stat.st_dev, stat.st_ino)
    if key not in _read_modes:
        _read_modes[key] = _read_mode(path)
    return f"file:{quote(str(path))}?{_read_modes[key]}"


def _read_mode(path: Path) -> str:
    """`mode=ro` (for a WAL file, possible only once its -shm exists or can be created), except:

    - where this process may write the file and its folder and there is no -shm, `mode=rw` (with
      query_only): on a WAL file a read-only connection would create the -wal and -shm and,
      unable to checkpoint, leave them behind, where the last read-write connection to close
      deletes them, as every SQLite client does;
    - a WAL file on a read-only mount with no -shm and no commit waiting in a -wal:
      `immutable=1`. The file is all there is, and nothing on this mount can change it;
    - any other WAL file with no -shm (another user's file or folder, a -wal that holds commits):
      one line naming the fix, rather than SQLite's "unable to open database file". (Where only
      the folder is writable, `mode=ro` would work but leave a -shm of this user's that the
      owner's writers could not write.)"""
    shm, wal = Path(f"{path}-shm"), Path(f"{path}-wal")
    if shm.exists():
        return "mode=ro"
    folder = path.parent
    if os.access(path, os.W_OK) and os.access(folder, os.W_OK):
        return "mode=rw"
    if not _in_wal_mode(path):
        return "mode=ro"
    wal_empty = not wal.exists() or wal.stat().st_size == 0
    if wal_empty and os.statvfs(folder).f_flag & os.ST_RDONLY:
        return "mode=ro&immutable=1"
    raise WarehouseError(
        f"{path} is in WAL mode with no {shm.name} beside it, and this user may not write there to "
        f"create one: ask the owner to run `sqlite3 {path} 'PRAGMA journal_mode=DELETE'`, or copy the "
        f"file{'' if wal_empty else ' and its -wal'} to a folder you can write")


def _in_wal_mode(path: Path) -> bool:
    """The header says WAL (read and write versions 2).

    Read only for a file this process cannot write, and before its first connection to it:
    closing a descriptor drops every POSIX lock the process holds on the file, SQLite's
    included (sqlite.org/howtocorrupt.html, 2.2), which would let another process delete the
    -wal under a writer of this one."""
    try:
        with path.open("rb") as f:
            header = f.read(20)
    except OSError as exc:
        raise WarehouseError(f"cannot read {path}: {exc.strerror}") from None
    return header[:16] == b"SQLite format 3\0" and header[18:20] == b"\x02\x02"
