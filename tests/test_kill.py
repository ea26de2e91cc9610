"""Stopping an ingest: SIGKILL, SIGTERM, or Ctrl-C (SIGINT to its whole process group), at
spread moments (while it waits for the write lock another writer holds; after 0 or 2 units
committed by the run), must leave no process of it alive (its reader process included), none
of its pipes open, no half-written unit, and the write lock free: the next ingest starts at
once. SIGTERM and Ctrl-C end it with one line on stderr and exit 143 / 130, and they do so
while it waits for the lock. On both backends; and on PostgreSQL a writer's session idle in its
transaction far longer than a writer ever is loses the lock.

Each shard of the dataset is 7 prepared batches: a reader working ahead of a writer that waits
for the lock (on PostgreSQL, at a new source's first shard) fills its ring and is left with its
read-ahead thread holding the shard's end.
That is where a killed ingest's reader used to wait for ever, holding the ingest's stdout and
stderr open and, on PostgreSQL, its database session (and so the write lock) alive.

Only safety timeouts: a process that has not ended within TIMEOUT is hung."""

from __future__ import annotations

import logging
import os
import random
import signal
import statistics
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.exc import DBAPIError, OperationalError

from helpers import TABLES
from ingest.write import bulk
from ingest.write.bulk import PG_WRITE_LOCK
from procs import CLI, LoadCounter, fresh_database, run_cli, start_cli, units
from tools.generate import generate_dataset

# Enough shards that the six stops while loading (each after k units, and a moment later) leave
# some to load even where units commit fast.
N_SHARDS = 16
SCALE = 0.106 * N_SHARDS  # of the math profile: shards of about 1,650 rows, 7 batches each
TIMEOUT = 60  # seconds
POLL = 0.05
EXIT_CODES = {signal.SIGKILL: -signal.SIGKILL, signal.SIGTERM: 143, signal.SIGINT: 130}
STOPS = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT]


def _until(condition: Callable[[], object], what: str, poll: float = POLL) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"not within {TIMEOUT}s: {what}"
        time.sleep(poll)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name, or None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and int(stat[1]) == pid:
                found.add(int(entry.name))
    return found


class Ingest:
    """A `warehouse ingest` in a process group of its own, and every child it was seen with."""

    def __init__(self, url: str, source: str):
        self.url = url
        self.proc = start_cli(url, "ingest", source, new_session=True)
        self.seen: set[int] = set()

    def watch(self) -> bool:
        """Note its children; whether it still runs."""
        self.seen |= _children(self.proc.pid)
        return self.proc.poll() is None

    def wait_for(self, condition: Callable[[], object], what: str) -> None:
        def done() -> bool:
            assert self.watch(), f"the ingest ended before {what}:\n{self.proc.communicate()[1]}"
            return bool(condition())

        _until(done, what)

    def wait_until_idle(self) -> None:
        """Until it and its reader, if it has one, have done all they can (their CPU times hold
        still): the writer waits for the lock, the reader for room in its ring."""
        pids = [self.proc.pid, *self.seen]
        last = [None]

        def idle() -> bool:
            time.sleep(0.2)
            ticks = [None if stat is None else int(stat[11]) + int(stat[12])  # utime + stime
                     for stat in map(_stat, pids)]
            still, last[0] = ticks == last[0], ticks
            return still

        self.wait_for(idle, "the ingest and its reader waiting")

    def stop(self, how: signal.Signals) -> str:
        """Signal it as `how` says (SIGINT as a terminal's Ctrl-C does, to the whole group) and
        check how it ended; its stderr."""
        assert self.watch(), "the ingest ended before it could be stopped"
        if how == signal.SIGINT:
            os.killpg(self.proc.pid, signal.SIGINT)
        else:
            self.proc.send_signal(how)
        try:
            _, err = self.proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{how.name}: the ingest still runs, or a process of it holds its stdout or "
                                 f"stderr open, after {TIMEOUT}s") from None
        assert self.proc.returncode == EXIT_CODES[how], f"{how.name}: exit {self.proc.returncode}\n{err}"
        if how != signal.SIGKILL:
            assert err.splitlines() == [
                f"Error: interrupted ({how.name}): finished units kept, the current one rolled back"], err
        return err

    def survivors(self) -> list[int]:
        """Its processes still running: not gone, not zombies, and still this ingest (a fork
        keeps its parent's command line, a reused pid would not)."""
        alive = []
        for pid in self.seen | {self.proc.pid}:
            stat = _stat(pid)
            try:
                ours = self.url.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                ours = False
            if stat is not None and stat[0] not in ("Z", "X") and ours:
                alive.append(pid)
        return alive

    def kill_survivors(self) -> None:
        for pid in self.survivors():
            os.kill(pid, signal.SIGKILL)


def _no_survivor(ingest: Ingest) -> None:
    _until(lambda: not ingest.survivors(), f"every process of the ingest gone (alive: {ingest.survivors()})")


def _pg_conninfo(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _write_lock_free(url: str) -> bool:
    """Whether a writer would get the write lock at once: SQLite's BEGIN IMMEDIATE without a
    wait; on PostgreSQL the advisory lock tried (and released), and no session of the database
    left idle in a transaction."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///"):], timeout=0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            conn.close()
    with psycopg.connect(_pg_conninfo(url)) as conn:
        free = conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (PG_WRITE_LOCK,)).fetchone()[0]
        idle = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                            "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'").fetchone()[0]
        return free and idle == 0


@contextmanager
def _holding_the_write_lock(url: str) -> Iterator[None]:
    """Another writer, holding the write lock until the block ends."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///"):], isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    with psycopg.connect(_pg_conninfo(url)) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (PG_WRITE_LOCK,))
        try:
            yield
        finally:
            conn.rollback()


def _waiting_for_the_lock(url: str) -> bool:
    """Whether a writer waits for the lock, as pg_locks shows on PostgreSQL. SQLite shows no
    waiter: an ingest idle there (Ingest.wait_until_idle) is one."""
    if url.startswith("sqlite:///"):
        return True
    with psycopg.connect(_pg_conninfo(url), autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            (PG_WRITE_LOCK,)).fetchone()[0] > 0


@pytest.fixture(scope="module")
def stopped_sources(tmp_path_factory) -> tuple[Path, str]:
    """A first unit, and the dataset the stopped ingests load: made once for both backends (the
    dataset takes seconds to write)."""
    folder = tmp_path_factory.mktemp("stopped")
    generate_dataset(folder / "first", "tiny", shards=1, seed=1)
    generate_dataset(folder / "ds", "math", shards=N_SHARDS, seed=3, scale=SCALE)
    return folder / "first", str(folder / "ds")


def test_a_stopped_ingest_leaves_no_process_no_lock_and_no_half_unit(backend, tmp_path, stopped_sources):
    first, dataset = stopped_sources
    rng = random.Random(14)
    ingests: list[Ingest] = []
    with fresh_database(backend, tmp_path, "killed") as url:
        done = run_cli(url, "ingest", str(first))  # the schema, and a unit
        assert done.returncode == 0, done.stderr
        counter = LoadCounter(url)
        try:
            def after_stop(ingest: Ingest, committed_before: int) -> None:
                _no_survivor(ingest)
                _until(lambda: _write_lock_free(url), "the write lock free, no session idle in a transaction")
                assert counter.ledger_matches_tables() == []
                assert counter.count() >= committed_before  # finished units kept

            # Stopped while waiting for the lock: SIGTERM and Ctrl-C end it before the lock is
            # released. Its reader is ahead of it, reading the first shard (started before the
            # writer asked for anything: warehouse.api's _reading_ahead), on both backends.
            for how in STOPS:
                with _holding_the_write_lock(url):
                    ingest = Ingest(url, dataset)
                    ingests.append(ingest)
                    ingest.wait_for(lambda: _waiting_for_the_lock(url), "the ingest waiting for the lock")
                    ingest.wait_until_idle()
                    assert ingest.seen  # its reader
                    ingest.stop(how)
                    _no_survivor(ingest)  # the lock still held
                after_stop(ingest, 1)
                assert counter.count() == 1

            # Stopped while loading, after 0 or 2 units of this run, a random moment later.
            for k in (0, 2):
                for how in STOPS:
                    before = counter.count()
                    ingest = Ingest(url, dataset)
                    ingests.append(ingest)
                    ingest.wait_for(lambda: ingest.seen and counter.count() >= before + k,
                                    f"{k} units committed and a reader started")
                    time.sleep(rng.uniform(0, 0.15))
                    ingest.stop(how)
                    after_stop(ingest, before + k)
            assert 1 + 2 * len(STOPS) <= counter.count() < 1 + N_SHARDS, "the kills left nothing to load"

            # The next ingest finishes the job.
            done = run_cli(url, "ingest", dataset, str(first), timeout=3 * TIMEOUT)
            assert done.returncode == 0, done.stderr
            loaded, skipped, failed = units(done.stderr)
            assert failed == 0 and loaded > 0 and loaded + skipped == N_SHARDS + 1
            assert counter.count() == N_SHARDS + 1
            assert counter.ledger_matches_tables() == []
        finally:
            counter.close()
            for ingest in ingests:  # (after a failure: leave nothing running)
                if ingest.proc.poll() is None:
                    ingest.proc.kill()
                ingest.kill_survivors()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_postgresql_writer_idle_in_its_transaction_loses_its_session_and_the_lock(engine, db_url, monkeypatch):
    # The guard for a writer whose process is gone while its session lives on (a host cut off):
    # 60 s in use, 1 s here.
    monkeypatch.setitem(bulk.PG_WRITER_SETTINGS, "idle_in_transaction_session_timeout", "1s")
    with engine.connect() as conn:
        transaction = conn.begin()
        bulk.lock_for_writing(conn)
        assert conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar() == "1s"
        if conn.exec_driver_sql("SELECT inet_server_addr() IS NOT NULL").scalar():  # TCP, not a Unix socket
            assert conn.exec_driver_sql("SHOW tcp_keepalives_idle").scalar() == "30"
        assert not _write_lock_free(db_url)
        _until(lambda: _write_lock_free(db_url), "the idle writer's lock released")
        with pytest.raises(DBAPIError, match="idle-in-transaction timeout"):
            conn.exec_driver_sql("SELECT 1")
        transaction.rollback()
    # Only a writer's transaction has them: every other session keeps the server's defaults.
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar() == "0"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_sqlite_writer_waits_for_the_lock_in_steps_and_still_gives_up_at_the_busy_timeout(db_url, monkeypatch):
    from warehouse.db import engine as engine_module
    from warehouse.db.session import write_transaction

    monkeypatch.setattr(engine_module, "SQLITE_BUSY_TIMEOUT_MS", 500)
    engine = engine_module.make_engine(engine_module.resolve_url(db_url))
    try:
        with _holding_the_write_lock(db_url):
            with pytest.raises(OperationalError, match="database is locked"):
                with write_transaction(engine):
                    pass
        with write_transaction(engine) as conn:  # the lock free: at once
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 500  # restored after the steps
    finally:
        engine.dispose()


def test_an_error_raised_while_unwinding_from_an_interrupt_is_the_interrupt():
    """psycopg interrupted mid-statement may fail the rollback that follows ("another command is
    already in progress"): that error must end the ingest as the interrupt it came from, not
    count as a failed unit or a lost database (which would go on, or print more lines)."""
    import psycopg

    from ingest.report import IngestStopped, Summary, one_unit

    def interrupted_then_rollback_fails():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise psycopg.OperationalError("sending query failed: another command is already in progress")

    lines: list[str] = []
    summary = Summary()
    with pytest.raises(KeyboardInterrupt):
        with one_unit(summary, lines.append, "unit", lambda exc: None):
            interrupted_then_rollback_fails()
    assert lines == [] and not summary.errors
    # The same error with no interrupt behind it is a lost connection: one line, the ingest stops.
    with pytest.raises(IngestStopped):
        with one_unit(summary, lines.append, "unit", lambda exc: None):
            raise psycopg.OperationalError("sending query failed: another command is already in progress")
    assert len(lines) == 1 and "the connection to the database was lost" in lines[0]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_an_interrupt_that_leaves_a_statement_unread_ends_the_unit_in_silence(engine, caplog, capfd):
    """Ctrl-C landing in psycopg just after it sent a statement (in its Python code, past the
    wait that cancels and drains it) leaves the result unread: the rollback that followed failed
    with "another command is already in progress", and the pool logged the same as a traceback
    of about a hundred lines when it reset the connection. The window is a few instructions wide
    (the stress test below meets it by chance); here it is made to happen, on the unit's
    connection and on the one ids are fetched on."""
    from ingest.write import writer

    source_id = writer.ensure_source(engine, "parquet", "/nowhere", "nowhere", None, None)
    with pytest.raises(KeyboardInterrupt):
        with writer.unit(engine, source_id, "unit", "hash") as unit:
            unit.bulk.allocate_ids(writer.T["runs"], 1)  # the side connection opened
            unit.bulk.raw.pgconn.send_query(b"SELECT pg_sleep(0.2)")
            unit.bulk._side.driver_connection.pgconn.send_query(b"SELECT pg_sleep(0.2)")
            raise KeyboardInterrupt
    assert [r.getMessage() for r in caplog.records if r.levelname in ("WARNING", "ERROR", "CRITICAL")] == []
    assert capfd.readouterr().err == ""
    with engine.connect() as conn:  # nothing of the unit kept, and the lock is free
        assert conn.exec_driver_sql("SELECT count(*) FROM loads").scalar() == 0
    with writer.unit(engine, source_id, "unit", "hash"):
        pass


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_rollback_a_stop_made_fail_is_said_by_the_stop_alone(db_url):
    """A stop landing in psycopg's own transaction (SQLAlchemy's first connect fetches type
    information in one) with a statement unread makes its rollback fail, and psycopg logs
    "error ignored in rollback" with no traceback (1 in 900 stops in CI): the CLI's filter keeps
    that off stderr, where the stop's one line is all. The same failure with no stop behind it
    is still said. In a process of its own, where logging is left as the CLI leaves it."""
    script = f"""
import logging, psycopg
from warehouse.__main__ import _not_said_by_a_stop
logging.lastResort.addFilter(_not_said_by_a_stop)
conn = psycopg.connect({_pg_conninfo(db_url)!r})
try:
    with conn.transaction():
        conn.pgconn.send_query(b"SELECT pg_sleep(0.1)")
        raise {{error}}
except {{error}}:
    pass
"""
    for error, said in (("KeyboardInterrupt", False), ("ValueError", True)):
        run = subprocess.run([sys.executable, "-c", script.format(error=error)], capture_output=True, text=True,
                             timeout=TIMEOUT)
        assert run.returncode == 0, run.stderr
        assert ("error ignored in rollback" in run.stderr) == said, (error, run.stderr)


# Stops at random moments: how many (half by Ctrl-C, half by SIGTERM). $WAREHOUSE_TEST_STOP_TRIES
# sets another number (a quick local run).
STOP_TRIES = int(os.environ.get("WAREHOUSE_TEST_STOP_TRIES", "100"))
_SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def _handles_sigterm(pid: int) -> bool:
    """Whether the process has installed its SIGTERM handler (the CLI's first act; before it,
    the interpreter starts up, and a stop there is the interpreter's, not the command's)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & _SIGTERM_BIT)


def _default_sigint() -> None:
    """A child started where SIGINT is ignored (a CI runner's background job) would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_postgresql_ingest_stopped_at_any_moment_says_one_line(db_url, tmp_path):
    """STOP_TRIES ingests, each stopped by Ctrl-C (SIGINT to its process group) or SIGTERM at a
    random moment of its life, from its first instruction (its SIGTERM handler installed) to its
    end: each prints exactly one line and exits 130 or 143 (or, stopped too late, finished with
    its report and exit 0); none leaves a process, a half unit or the write lock behind."""
    source = tmp_path / "ds"
    generate_dataset(source, "math", shards=2, seed=3, scale=0.106 * 2 * 0.3)  # 2 shards, ~500 rows each
    counter = LoadCounter(db_url)
    tables = ", ".join(TABLES)

    def start() -> tuple[Ingest, float]:
        ingest = Ingest.__new__(Ingest)
        ingest.url, ingest.seen = db_url, set()
        ingest.proc = subprocess.Popen([*CLI, "--db", db_url, "ingest", str(source)], stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                       start_new_session=True, preexec_fn=_default_sigint)
        # (its start is a moment the stops are drawn from: seen within a few ms, not POLL's 50)
        _until(lambda: _handles_sigterm(ingest.proc.pid) or ingest.proc.poll() is not None, "the CLI started",
               poll=0.002)
        return ingest, time.monotonic()

    def whole_run() -> float:
        counter._pg.execute(f"TRUNCATE {tables}")  # (autocommit) every unit to load again
        whole, began = start()
        assert whole.proc.wait(timeout=TIMEOUT) == 0, whole.proc.communicate()[1]
        life = time.monotonic() - began
        whole.proc.communicate()
        return life

    try:
        # How long a whole ingest lives: the span the stops are drawn from. The first run lives
        # longest (a cold server and page cache: 15% longer here, and stops drawn past a try's end
        # are spent on nothing): the span is the median of the three runs after it (the longer of
        # two was once twice the usual, a busy moment of a parallel test run, and half the stops
        # landed after the end).
        whole_run()
        life = statistics.median(whole_run() for _ in range(3))
        rng = random.Random(24)
        stopped = {signal.SIGINT: 0, signal.SIGTERM: 0}
        for i in range(STOP_TRIES):
            counter._pg.execute(f"TRUNCATE {tables}")  # (autocommit) every unit to load again
            how = (signal.SIGINT, signal.SIGTERM)[i % 2]
            ingest, began = start()
            try:  # until the moment drawn, unless it ends before
                ingest.proc.wait(timeout=max(0.0, began + rng.uniform(0, life) - time.monotonic()))
            except subprocess.TimeoutExpired:
                ingest.watch()
                try:
                    if how == signal.SIGINT:
                        os.killpg(ingest.proc.pid, how)
                    else:
                        os.kill(ingest.proc.pid, how)
                except ProcessLookupError:  # it has ended since (and was reaped): finished before the stop
                    pass
            try:
                _, err = ingest.proc.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"try {i}, {how.name}: the ingest still runs after {TIMEOUT}s") from None
            code = ingest.proc.returncode
            if code == 0:  # finished before the stop reached it: its whole report
                assert "units: 2 loaded" in err, err
            else:
                assert code == EXIT_CODES[how], f"try {i}, {how.name}: exit {code}\n{err}"
                lines = err.splitlines()
                assert len(lines) == 1 and lines[0].startswith(f"Error: interrupted ({how.name})"), \
                    f"try {i}, {how.name}: {len(lines)} lines\n{err}"
                stopped[how] += 1
            _no_survivor(ingest)
            _until(lambda: _write_lock_free(db_url), "the write lock free, no session idle in a transaction")
            assert counter.ledger_matches_tables() == [], f"try {i}, {how.name}"
        # Most stops land while it runs (the rest after its report: the span is measured, not known).
        assert min(stopped.values()) >= STOP_TRIES // 4, stopped
    finally:
        counter.close()
