"""What ends an ingest early: a database that can take nothing more. A full disk (a real small
tmpfs under SQLite) and a PostgreSQL connection cut mid-ingest (`pg_terminate_backend`) each give
one `Error: …` line and exit 1, with no traceback; the ingest stops there (every later unit would
fail the same way) and the units loaded before it stay whole."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from helpers import counts, hub_row, write_shard
from procs import run_cli, start_cli, units
from warehouse.db.engine import make_engine, resolve_url

ROWS = 2000


def _dataset(root: Path, n_shards: int, text_chars: int) -> Path:
    """n_shards shards of ROWS distinct episodes each, every message about text_chars long."""
    for s in range(n_shards):
        rows = [hub_row(f"s{s}r{i}__abcdefg", 0, [("user", f"question {s} {i} " + "q" * text_chars),
                                                  ("assistant", f"answer {s} {i} " + "a" * text_chars)])
                for i in range(ROWS)]
        write_shard(root / "data" / f"train-{s:05d}-of-{n_shards:05d}.parquet", rows)
    return root


def _one_error(done: subprocess.CompletedProcess | tuple) -> str:
    stderr = done.stderr if hasattr(done, "stderr") else done[1]
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, stderr
    return errors[0]


def _whole_units_only(engine, loaded: int, in_doubt: int = 0) -> None:
    """The ledger holds the units the summary says loaded, each with all its rows, and at most
    `in_doubt` more (a unit whose commit went through but whose reply was cut off)."""
    with engine.connect() as conn:
        ledger = [tuple(r) for r in conn.execute(text("SELECT n_rows, n_episodes_new FROM loads"))]
    assert loaded <= len(ledger) <= loaded + in_doubt and set(ledger) == {(ROWS, ROWS)}
    assert counts(engine)["episodes"] == ROWS * len(ledger)


@pytest.fixture
def small_disk(tmp_path):
    """A 6 MB tmpfs: a real file system that fills up. Mounting needs root (CI runs as root);
    where it cannot be mounted the test is skipped, except under CI, where it fails."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        message = f"cannot mount a small tmpfs: {done.stderr.strip()}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_disk_stops_the_ingest_in_one_line(small_disk, tmp_path):
    # About 2 MB of text a shard: the first units fit on the 6 MB disk, a later one cannot.
    n_shards = 8
    src = _dataset(tmp_path / "ds", n_shards, text_chars=500)
    url = f"sqlite:///{small_disk / 'warehouse.db'}"
    done = run_cli(url, "ingest", str(src), timeout=300)
    assert done.returncode == 1, done.stderr
    error = _one_error(done)
    loaded, skipped, failed = units(done.stderr)
    assert (skipped, failed) == (0, 1) and 1 <= loaded < n_shards - 1, done.stderr  # it stopped
    shard = src / "data" / f"train-{loaded:05d}-of-{n_shards:05d}.parquet"
    assert error == (f"Error: {shard}: the database or its disk is full (database or disk is full); the ingest "
                     f"stopped, the {loaded} units loaded before it are kept"), error
    engine = make_engine(resolve_url(url))
    try:
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA integrity_check")).scalar() == "ok"
        _whole_units_only(engine, loaded)
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_lost_postgresql_connection_stops_the_ingest_in_one_line(backend, db_url, engine, tmp_path):
    n_shards = 30
    src = _dataset(tmp_path / "ds", n_shards, text_chars=300)
    import psycopg

    database = engine.url.database
    proc = start_cli(db_url, "ingest", str(src))
    from conftest import _pg_admin_conninfo  # the server of WAREHOUSE_TEST_PG_URL, however it is written

    admin = psycopg.connect(_pg_admin_conninfo(), autocommit=True)
    try:
        while True:  # until a unit is in
            with engine.connect() as conn:
                if conn.execute(text("SELECT count(*) FROM loads")).scalar():
                    break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        engine.dispose()
        # Then every connection to the warehouse is cut until the ingest exits: a cut that lands
        # on an idle pooled connection is healed by the pool's ping, one inside a unit is not.
        while proc.poll() is None:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
                          "AND pid <> pg_backend_pid()", (database,))
            time.sleep(0.05)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        admin.close()
    assert proc.returncode == 1, err
    error = _one_error((out, err))
    loaded, skipped, failed = units(err)
    assert (skipped, failed) == (0, 1) and 1 <= loaded < n_shards, err
    assert "the connection to the database was lost" in error and "the ingest stopped" in error, error
    _whole_units_only(engine, loaded, in_doubt=1)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_unit_whose_side_connection_was_cut_fails_without_a_logged_traceback(backend, engine, caplog):
    """A unit's lookups of committed rows run on a second connection (ingest.write.bulk). The
    server cutting it fails the unit; the connection is thrown away, not handed back to the pool,
    whose reset of it would fail and log a traceback (found by the test above, in CI)."""
    import logging

    import psycopg

    from conftest import _pg_admin_conninfo
    from ingest.write import writer

    source = writer.ensure_source(engine, "parquet", "/src/cut", "cut")
    caplog.set_level(logging.WARNING)
    with pytest.raises(psycopg.OperationalError):
        with writer.unit(engine, source, "shard-0", "hash-0", columns=frozenset()) as unit:
            messages = writer.T["messages"]
            unit.bulk.lookup(messages, ["content_hash"], [(b"x" * 32,)], ["id"], committed=True)
            pid = unit.bulk._side.driver_connection.info.backend_pid
            with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            unit.bulk.lookup(messages, ["content_hash"], [(b"y" * 32,)], ["id"], committed=True)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    with engine.connect() as conn:  # the unit left nothing, and the pool's connections work
        assert conn.execute(text("SELECT count(*) FROM loads")).scalar() == 0
