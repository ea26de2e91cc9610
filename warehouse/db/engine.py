"""Choosing the database and opening it. The only module besides ingest.bulk that knows
which backend it is talking to."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from warehouse.errors import WarehouseError

DEFAULT_DB = "warehouse.db"
ENV_VAR = "WAREHOUSE_DB"

# A second writer on SQLite waits this long for the lock instead of failing at once.
SQLITE_BUSY_TIMEOUT_MS = 60_000
# ... in steps this long, between which a signal (SIGTERM, Ctrl-C) is handled: SQLite's own wait
# is one call into C, during which Python runs no signal handler.
SQLITE_LOCK_STEP_MS = 100
SQLITE_CACHE_KIB = 16 * 1024
SQLITE_PAGE_BYTES = 16384


def resolve_url(db: str | None = None) -> URL:
    """A SQLAlchemy URL from `--db`, else $WAREHOUSE_DB, else ./warehouse.db.

    A plain path means a SQLite file; `postgresql://` is read as psycopg 3."""
    spec = db or os.environ.get(ENV_VAR) or DEFAULT_DB
    if "://" not in spec:
        return URL.create("sqlite+pysqlite", database=str(Path(spec).expanduser()))
    try:
        url = make_url(spec)
    except ArgumentError as exc:
        raise WarehouseError(f"not a database URL or path: {redact(spec)}") from exc
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    if url.drivername == "sqlite":
        url = url.set(drivername="sqlite+pysqlite")
    if url.get_backend_name() not in ("sqlite", "postgresql"):
        raise WarehouseError(f"unsupported database {url.get_backend_name()!r}: use SQLite or PostgreSQL")
    return url


def redact(url: URL | str) -> str:
    """The database as it may be shown: a SQLite file by its path, a server URL never with
    its password."""
    if isinstance(url, str):
        try:
            url = make_url(url)
        except ArgumentError:
            return url
    if url.get_backend_name() == "sqlite" and url.database:
        return url.database
    return url.render_as_string(hide_password=True)


def sqlite_path(url: URL) -> Path | None:
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database)


def make_engine(url: URL, *, for_migrations: bool = False) -> Engine:
    if url.get_backend_name() == "sqlite":
        return _sqlite_engine(url, for_migrations)
    return create_engine(url, pool_pre_ping=True)


def _sqlite_engine(url: URL, for_migrations: bool) -> Engine:
    path = sqlite_path(url)
    if path is not None and not path.parent.exists():
        raise WarehouseError(f"{path.parent}: directory does not exist")
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
        _switch_to_wal(cur)
        cur.execute("PRAGMA synchronous = NORMAL")
        # Batch migrations rebuild tables; with enforcement on, a rebuild would cascade.
        cur.execute(f"PRAGMA foreign_keys = {'OFF' if for_migrations else 'ON'}")
        # Pages a unit's lookups and index inserts revisit stay in memory instead of being
        # spilled to the WAL and read back (the default cache is 2 MB).
        cur.execute(f"PRAGMA cache_size = {-SQLITE_CACHE_KIB}")
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
            _begin_immediate(conn)
        else:
            conn.exec_driver_sql("BEGIN DEFERRED")

    return engine


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
