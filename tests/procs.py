"""Running the `warehouse` CLI in child processes, and the databases those tests need: a
second (or third) fresh database per test on either backend, and a cheap way to watch how
many units a running ingest has committed."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

import forked_cli

CLI = [sys.executable, "-m", "warehouse"]
SUMMARY_RE = re.compile(r"units: (\d+) loaded, (\d+) skipped \(already loaded\), (\d+) failed")


def run_cli(db_url: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return forked_cli.run(["--db", db_url, *args], timeout=timeout)


def start_cli(db_url: str, *args: str, new_session: bool = False) -> subprocess.Popen:
    """new_session: in a process group of its own, which a test can signal as a terminal's
    Ctrl-C does (os.killpg)."""
    return subprocess.Popen([*CLI, "--db", db_url, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=new_session)


def units(stderr: str) -> tuple[int, int, int]:
    """(loaded, skipped, failed) from an ingest's summary on stderr."""
    match = SUMMARY_RE.search(stderr)
    assert match, f"no summary line in:\n{stderr}"
    return tuple(int(g) for g in match.groups())  # type: ignore[return-value]


@contextmanager
def fresh_database(backend: str, tmp_path: Path, name: str) -> Iterator[str]:
    """A URL to a new, empty database (no schema): a file in tmp_path, or a PostgreSQL
    database created for the test and dropped after it."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / f'{name}.db'}"
        return
    from conftest import _fresh_pg  # the same server and cleanup as the `empty_db_url` fixture

    with contextmanager(_fresh_pg)(None) as url:
        yield url


class LoadCounter:
    """How many units the ledger holds right now, read without disturbing the writer: a SQLite
    connection that never creates the file (mode=rw) nor changes its journal mode, or an
    autocommit PostgreSQL one. -1 while there is no schema yet."""

    def __init__(self, db_url: str):
        self.url = db_url
        self._pg = None
        if db_url.startswith("sqlite:///"):
            self.path = Path(db_url[len("sqlite:///"):])
        else:
            self.path = None
            self._pg = psycopg.connect(db_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)

    def _query(self, sql: str, strict: bool = False):
        if self.path is not None:
            if not self.path.exists():
                return None
            conn = sqlite3.connect(f"file:{self.path}?mode=rw", uri=True, timeout=30)
            try:
                return conn.execute(sql).fetchone()
            except sqlite3.OperationalError:
                if strict:
                    raise
                return None
            finally:
                conn.close()
        try:
            return self._pg.execute(sql).fetchone()
        except psycopg.Error:
            if strict:
                raise
            return None

    def count(self) -> int:
        row = self._query("SELECT count(*) FROM loads")
        return -1 if row is None else row[0]

    def ledger_matches_tables(self) -> list[str]:
        """What the ledger's counters say the tables hold, against what they hold, read in one
        snapshot. Empty when they agree, as they must whenever units are all-or-nothing."""
        if self.count() < 0:
            return []  # no schema yet: nothing to disagree
        row = self._query(strict=True, sql="""
            SELECT (SELECT count(*) FROM loads WHERE status <> 'loaded'),
                   (SELECT coalesce(sum(n_episodes_new), 0) FROM loads), (SELECT count(*) FROM episodes),
                   (SELECT coalesce(sum(n_turns), 0) FROM loads), (SELECT count(*) FROM turns),
                   (SELECT coalesce(sum(n_rows), 0) FROM loads),  -- every accepted row, conflicting ones too
                   (SELECT count(*) FROM episode_loads),
                   (SELECT coalesce(sum(n_trials), 0) FROM loads), (SELECT count(*) FROM trial_loads),
                   (SELECT coalesce(sum(n_conflicts), 0) FROM loads), (SELECT count(*) FROM conflicts)""")
        bad = []
        if row[0]:
            bad.append(f"{row[0]} ledger rows not 'loaded'")
        for name, (claimed, held) in zip(("episodes", "turns", "episode_loads", "trial_loads", "conflicts"),
                                         zip(row[1::2], row[2::2])):
            if claimed != held:
                bad.append(f"{name}: ledger says {claimed}, table holds {held}")
        return bad

    def close(self) -> None:
        if self._pg is not None:
            self._pg.close()


# Runs a command and writes its peak resident memory (KB) to the descriptor its first argument
# names. A child's ru_maxrss starts at its parent's resident size when it was forked (Linux keeps
# the high-water mark across exec), so the command is forked from this small process rather than
# from the test worker, whose own size would be all the test saw.
_PEAK_OF = """
import os, signal, sys
report, command = int(sys.argv[1]), sys.argv[2:]
pid = os.fork()
if pid == 0:
    os.close(report)
    os.execv(command[0], command)
_, status, usage = os.wait4(pid, 0)
os.write(report, str(usage.ru_maxrss).encode())
code = os.waitstatus_to_exitcode(status)
if code < 0:
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def run_with_peak(args: list[str], **run) -> tuple[subprocess.CompletedProcess, int]:
    """subprocess.run(args, capture_output=True, text=True, **run) and the command's own peak
    resident memory in KB, read as it is reaped. A `warehouse` command (args start with CLI,
    stdin /dev/null) runs forked (forked_cli.run_with_peak); anything else (a command behind
    setpriv) as a process of its own."""
    if forked_cli.ENABLED and args[:len(CLI)] == CLI and run.get("stdin", subprocess.DEVNULL) == subprocess.DEVNULL:
        return forked_cli.run_with_peak(args[len(CLI):], **{k: v for k, v in run.items() if k != "stdin"})
    peak_r, peak_w = os.pipe()
    try:
        done = subprocess.run([sys.executable, "-c", _PEAK_OF, str(peak_w), *args], capture_output=True, text=True,
                              pass_fds=(peak_w,), **run)
        os.close(peak_w)
        peak_w = -1
        peak = os.read(peak_r, 64)
    finally:
        if peak_w >= 0:
            os.close(peak_w)
        os.close(peak_r)
    done.args = args
    return done, int(peak or 0)
