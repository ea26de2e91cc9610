"""Choosing the database and opening it. The only module besides ingest.bulk that knows
which backend it is talking to."""

from __future__ import annotations

import os
import re
import sqlite3
import time
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from warehouse.errors import WarehouseError, first_line

DEFAULT_DB = "warehouse.db"
ENV_VAR = "WAREHOUSE_DB"

# A second writer on SQLite waits this long for the lock instead of failing at once.
SQLITE_BUSY_TIMEOUT_MS = 60_000
SQLITE_CACHE_KIB = 16 * 1024
SQLITE_PAGE_BYTES = 16384

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
        mode = "IMMEDIATE" if options.get("sqlite_write") else "DEFERRED"
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


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
