"""`--db` wherever a user puts it: before the subcommand, after it, between a group and its
command; the innermost one given wins, and WAREHOUSE_DB applies when none is. On every command
(the list comes from the real CLI's tree) and both backends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import cli_tree
import forked_cli
from ingest.pipeline import ingest

REPO = Path(__file__).resolve().parent.parent
SAMPLE = str(REPO / "examples" / "sample")
RUN_A, RUN_B = "9f8c2915-4688-461a-8cba-3901225a1cb2", "b421acf4-22ff-44ae-abea-d6ef824bc737"

# For each command, arguments that make it succeed on a warehouse holding examples/sample.
# "{out}" is a fresh folder.
ARGS: dict[tuple[str, ...], list[str]] = {
    ("ingest",): [SAMPLE],
    ("db", "upgrade"): [],
    ("db", "downgrade"): ["-1", "--yes"],
    ("db", "current"): [],
    ("db", "check"): [],
    ("db", "copy"): ["{db}", "{out}.db"],
    ("db", "archive"): ["{out}.db"],
    ("query", "list"): [],
    ("query", "runs"): [],
    ("query", "pass-rate"): ["--by", "model"],
    ("query", "solve-matrix"): [],
    ("query", "pass-at-k"): ["--k", "1,3"],
    ("query", "compare"): [RUN_A, RUN_B],
    ("query", "compare-test"): ["--a", RUN_A, "--b", RUN_B],
    ("query", "failures"): [],
    ("query", "lengths"): [],
    ("query", "costs"): ["--by", "model"],
    ("query", "sources"): [],
    ("query", "loads"): ["sample"],
    ("sources",): [],
    ("sources", "delete"): ["sample", "--yes"],
    ("loads",): [],
    ("query", "leaderboard"): [],
    ("query", "power"): ["--delta", "0.1"],
    ("sql",): ["SELECT count(*) FROM trials"],
    ("search",): ["error", "--limit", "3"],
    ("show",): ["debug-csv__XM5Mqch"],
    ("index", "build"): [],
    ("index", "drop"): [],
    ("export", "hub"): ["{out}", "--source", "sample"],
    ("export", "tables"): ["{out}"],
    ("lake", "sync"): ["{out}"],
    ("runs",): [],
    ("runs", "rename"): [RUN_A, "baseline"],
    ("runs", "label"): [RUN_A, "step=1"],
    ("runs", "delete"): [RUN_A, "--yes"],
    ("report",): ["{out}.html"],
}

# Commands that run until stopped: test_db_after_serve starts and stops them.
SERVERS = [("serve",)]


def _cli(*args: str, env_db: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "WAREHOUSE_DB"}
    if env_db is not None:
        env["WAREHOUSE_DB"] = env_db
    return forked_cli.run(list(args), env=env, timeout=180)


@pytest.fixture
def sample_url(db_url, engine):
    ingest(engine, [SAMPLE])
    return db_url


def test_every_command_is_covered():
    runnable_groups = [path for path, command in cli_tree.commands().items()
                       if path and getattr(command, "invoke_without_command", False)]  # `warehouse runs`
    assert sorted([*ARGS, *SERVERS]) == sorted(cli_tree.leaves() + runnable_groups)


@pytest.mark.parametrize("path", sorted(ARGS), ids=" ".join)
def test_db_after_the_command(path, sample_url, tmp_path):
    """`warehouse PATH ARGS --db URL` uses URL, although WAREHOUSE_DB names a file that does
    not exist (a reader would say `no warehouse at …`)."""
    args = [a.replace("{out}", str(tmp_path / "out")).replace("{db}", sample_url) for a in ARGS[path]]
    done = _cli(*path, *args, "--db", sample_url, env_db=str(tmp_path / "missing.db"))
    assert done.returncode == 0, done.stderr
    assert "missing.db" not in done.stderr


def test_db_anywhere_and_the_innermost_wins(sample_url, tmp_path):
    missing = str(tmp_path / "missing.db")
    count = ["sql", "-f", "csv", "SELECT count(*) AS n FROM trials"]
    for args in ([ "--db", sample_url, *count],  # before
                 [*count, "--db", sample_url],  # after
                 [*count, f"--db={sample_url}"],  # as --db=URL
                 ["--db", missing, *count, "--db", sample_url],  # both: the innermost
                 ["--db", missing, "query", "--db", sample_url, "runs", "-f", "csv"]):  # on a group
        done = _cli(*args, env_db=missing)
        assert done.returncode == 0, (args, done.stderr)
    assert _cli(*count, env_db=sample_url).stdout == "n\n36\n"  # the variable, when no --db
    # The innermost wins the other way round too: it names the missing file, which is reported.
    wrong = _cli("--db", sample_url, "db", "current", "--db", missing, env_db=None)
    assert wrong.returncode == 1 and wrong.stderr.startswith(f"Error: no warehouse at {missing}")


def test_db_after_serve(sample_url, tmp_path):
    """`warehouse serve --db URL` serves URL, although WAREHOUSE_DB names a missing file."""
    env = {k: v for k, v in os.environ.items() if k != "WAREHOUSE_DB"}
    env["WAREHOUSE_DB"] = str(tmp_path / "missing.db")
    proc = subprocess.Popen([sys.executable, "-m", "warehouse", "serve", "--port", "0", "--db", sample_url],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=60)[1]
    finally:
        proc.kill()
    assert first.startswith("Serving ") and " at http://127.0.0.1:" in first, first + rest
    assert "missing.db" not in first + rest and proc.returncode == 0


# The commands that make a warehouse where there is none, and those that never open one.
CREATORS = {("ingest",), ("db", "upgrade")}
NO_DATABASE = {("query", "list")}


def _tables(url: str) -> list[str] | None:
    """The database's tables; None for a SQLite file that is not there."""
    from sqlalchemy import create_engine, inspect

    if url.startswith("sqlite:///"):
        if not Path(url.removeprefix("sqlite:///")).exists():
            return None
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        return inspect(engine).get_table_names()
    finally:
        engine.dispose()


@pytest.mark.parametrize("path", sorted(set(ARGS) - CREATORS - NO_DATABASE), ids=" ".join)
def test_a_command_given_no_warehouse_refuses_and_creates_nothing(path, empty_db_url, backend, tmp_path):
    """A mistyped --db: every command but ingest and db upgrade says there is no warehouse, in one
    line, and leaves no file (SQLite) and no table (PostgreSQL) behind."""
    args = [a.replace("{out}", str(tmp_path / "out")).replace("{db}", empty_db_url) for a in ARGS[path]]
    done = _cli(*path, *args, "--db", empty_db_url, env_db=None)
    if path == ("db", "current") and backend == "postgresql":
        assert (done.returncode, done.stdout) == (0, "none\n")  # a database that exists, empty
    else:
        assert done.returncode == 1, (done.stdout, done.stderr)
        said = done.stderr.splitlines()
        # (a downgrade of an empty database is Alembic's below base)
        why = ("no warehouse at", "holds no warehouse yet", "cannot downgrade from base")
        assert len(said) == 1 and any(w in said[0] for w in why), said
    assert _tables(empty_db_url) == (None if backend == "sqlite" else [])
    assert not list(tmp_path.glob("warehouse.db*"))


def test_an_empty_db_is_refused_not_taken_for_the_default_file(tmp_path):
    """`--db "$DB"` with DB unset names no database: refused in one line, where it would have
    made ./warehouse.db. (An empty WAREHOUSE_DB is unset, as shells treat it.)"""
    env = {k: v for k, v in os.environ.items() if k != "WAREHOUSE_DB"}
    for args in (["--db", "", "db", "upgrade"], ["db", "upgrade", "--db", " "], ["--db", "", "query", "runs"]):
        done = forked_cli.run(args, cwd=str(tmp_path), env=env)
        assert done.returncode == 1
        assert done.stderr.splitlines() == [
            "Error: the database given is empty: give postgresql://USER:PASSWORD@HOST:PORT/DATABASE or "
            "sqlite:///PATH"], args
    assert list(tmp_path.iterdir()) == []
    made = forked_cli.run(["db", "upgrade"], cwd=str(tmp_path), env={**env, "WAREHOUSE_DB": ""})
    assert made.returncode == 0 and (tmp_path / "warehouse.db").exists()
