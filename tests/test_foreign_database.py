"""Write commands pointed at a database that is not theirs to write (another program's tables, a
SQLite file or folder this user may not write) refuse it in one line and change nothing: not a
byte, the mode or the mtime of the file (no switch to WAL, no -wal or -shm beside it), nor, on
PostgreSQL, a table (no version table added)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
from pathlib import Path

import psycopg
import pytest

from procs import CLI, run_cli

WRITES = [
    ("ingest", "examples/sample"),
    ("db", "upgrade"),
    ("db", "downgrade", "base", "--yes"),
    ("runs", "rename", "x", "y"),
    ("runs", "label", "x", "k=v"),
    ("index", "build"),
    ("index", "drop"),
]
# ... and a reader that says what the database is, which refuses it as they do.
REFUSING = [*WRITES, ("db", "current")]
FOREIGN = "holds tables but no warehouse schema version"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
# As root, permissions stop nothing: the command runs without the capabilities that bypass them.
DROP_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


def _file_state(folder: Path) -> dict[str, tuple]:
    """Every file in the folder: its bytes' hash, mode and mtime."""
    return {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode, p.stat().st_mtime_ns)
            for p in sorted(folder.iterdir())}


def _pg(url: str) -> psycopg.Connection:
    return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)


def _pg_state(url: str) -> tuple:
    with _pg(url) as conn:
        tables = conn.execute("SELECT table_name FROM information_schema.tables "
                              "WHERE table_schema = 'public' ORDER BY 1").fetchall()
        return tables, conn.execute("SELECT * FROM foo ORDER BY x").fetchall()


@pytest.mark.parametrize("command", REFUSING, ids=[" ".join(c[:2]) for c in REFUSING])
def test_a_write_command_refuses_another_programs_database(backend, empty_db_url, tmp_path, command):
    if backend == "sqlite":
        path = Path(empty_db_url.removeprefix("sqlite:///"))
        with sqlite3.connect(path) as conn:  # a rollback-journal file, as most programs leave theirs
            conn.execute("CREATE TABLE foo (x INTEGER)")
            conn.execute("INSERT INTO foo VALUES (1), (2)")
        conn.close()
        before = _file_state(path.parent)
    else:
        with _pg(empty_db_url) as conn:
            conn.execute("CREATE TABLE foo (x INTEGER)")
            conn.execute("INSERT INTO foo VALUES (1), (2)")
        before = _pg_state(empty_db_url)
    done = run_cli(empty_db_url, *command)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and FOREIGN in lines[0], done.stderr
    if backend == "sqlite":
        assert _file_state(path.parent) == before  # the file as it was, and nothing beside it
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        conn.close()
    else:
        assert _pg_state(empty_db_url) == before


def _warehouse_in_rollback_mode(folder: Path) -> Path:
    """A warehouse (the sample loaded) switched to rollback-journal mode, as its owner would
    share it."""
    folder.mkdir()
    path = folder / "theirs.db"
    done = run_cli(str(path), "ingest", "examples/sample")
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    return path


@pytest.mark.parametrize("backend", ["sqlite"])  # files and folders: SQLite's alone
@pytest.mark.parametrize("unwritable", ["file", "folder"])
def test_a_write_command_refuses_a_file_this_user_may_not_write(backend, tmp_path, unwritable):
    path = _warehouse_in_rollback_mode(tmp_path / "shared")
    target = path if unwritable == "file" else path.parent
    target.chmod(0o444 if unwritable == "file" else 0o555)
    try:
        before = _file_state(path.parent)
        for command in [*WRITES, ("runs", "rename", "9f8c2915", "y")]:
            done = subprocess.run([*(DROP_DAC if IS_ROOT else []), *CLI, "--db", str(path), *command],
                                  capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
            assert done.returncode == 1, (command, done.stderr)
            what = "it" if unwritable == "file" else "in its folder"
            assert done.stderr.splitlines() == [
                f"Error: {path}: this user may not write {what}: a warehouse to write must be yours (copy it "
                f"to a folder you can write, or ask its owner)"], command
            assert _file_state(path.parent) == before, command
        # Reading it is still fine.
        read = subprocess.run([*(DROP_DAC if IS_ROOT else []), *CLI, "--db", str(path), "query", "runs"],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert read.returncode == 0 and "sample-9f8c2915" in read.stdout, read.stderr
        assert _file_state(path.parent) == before
    finally:
        target.chmod(0o755 if unwritable == "folder" else 0o644)
