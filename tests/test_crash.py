"""Crash safety: `kill -9` an ingest at many moments, then let the next run finish the job.

One database takes every kill in turn (each run resumes where the last one was killed), from
before the schema exists through every Parquet shard and trial directory, and then one run
to completion; its contents must equal those of a clean ingest into a fresh database,
compared through the canonical dump. After every kill the ledger must agree with the tables:
no half-written unit. On both backends.

Kill points come from timing and from watching the ledger, not from a hook in the code. A
clean run is timed first (when its first unit commits, how long a unit takes). The first kills
fall at fractions of the start-up time (imports, schema creation, the source row). Each later
run is watched until the ledger reaches its target, targets spread evenly over all the units,
and killed a random moment up to one unit's time after that, so kills land while the next
unit is hashed, read, written or committed. The test asserts that the kills did land at
different progress points (different `loads` counts), inside both the Parquet shards and the
trial directories."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from canonical import differences, dump
from procs import LoadCounter, fresh_database, run_cli, start_cli, units
from tools.generate import generate_dataset
from trace_trees import make_trace_tree
from warehouse.db.engine import make_engine, resolve_url

N_SHARDS = 32
EARLY_KILLS = (0.15, 0.45, 0.75, 0.95)  # fractions of the time to the first commit
PROGRESS_KILLS = 22
MIN_PROGRESS_KILLS = 20
POLL = 0.002


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> list[str]:
    """A Hub dataset and a trace tree, made once for both backends."""
    folder = tmp_path_factory.mktemp("crash-sources")
    generate_dataset(folder / "hub-ds", "tb", shards=N_SHARDS, seed=11, scale=0.5)
    make_trace_tree(folder / "traces", seed=5, job_trials=12, rl_trials=10, n_agent_steps=10, words=120)
    return [str(folder / "hub-ds"), str(folder / "traces")]


def _wait_for_count(proc, counter: LoadCounter, above: int, deadline: float) -> float | None:
    """Poll until the ledger holds more than `above` units; the time it did, or None if the
    process ended first."""
    while time.monotonic() < deadline:
        if counter.count() > above:
            return time.monotonic()
        if proc.poll() is not None:
            return None
        time.sleep(POLL)
    raise AssertionError("the ingest made no progress within the deadline")


def _kill(proc) -> bool:
    """SIGKILL; False when the process had already finished on its own."""
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    if proc.returncode == 0:
        return False
    assert proc.returncode == -signal.SIGKILL, err
    return True


def _dump(url: str):
    engine = make_engine(resolve_url(url))
    try:
        return dump(engine)
    finally:
        engine.dispose()


def test_kill_9_at_many_points_then_resume(backend, tmp_path, sources):
    rng = random.Random(20260527)
    with fresh_database(backend, tmp_path, "clean") as clean_url, \
            fresh_database(backend, tmp_path, "crashed") as crash_url:
        # The reference: a clean run, timed.
        clean_counter = LoadCounter(clean_url)
        started = time.monotonic()
        proc = start_cli(clean_url, "ingest", *sources)
        first_commit = _wait_for_count(proc, clean_counter, 0, started + 120)
        out, err = proc.communicate(timeout=120)
        ended = time.monotonic()
        clean_counter.close()
        assert proc.returncode == 0, err
        loaded, _, failed = units(err)
        assert failed == 0 and loaded == N_SHARDS + 24  # 24 trial directories
        assert first_commit is not None
        startup = first_commit - started
        per_unit = (ended - first_commit) / loaded
        reference = _dump(clean_url)

        counter = LoadCounter(crash_url)
        kills: list[int] = []
        try:
            # Before any unit can commit: interpreter start, schema creation, source rows.
            for fraction in EARLY_KILLS:
                proc = start_cli(crash_url, "ingest", *sources)
                deadline = time.monotonic() + fraction * startup
                # (a run faster than the clean one must still be killed before its first commit)
                while time.monotonic() < deadline and counter.count() < 1 and proc.poll() is None:
                    time.sleep(POLL)
                if _kill(proc):
                    kills.append(counter.count())
                    assert counter.ledger_matches_tables() == []
            # During the units: run k is killed a random moment (up to one unit's time) after the
            # ledger reaches target k; the targets are spread evenly over all the units.
            n_units = loaded
            # (the last targets leave a few units to go: a run that finishes them before its kill
            # lands would end the series early)
            targets = [round(1 + k * (n_units - 6) / (PROGRESS_KILLS - 1)) for k in range(PROGRESS_KILLS)]
            progress_kills: list[int] = []
            for target in targets:
                before = counter.count()
                proc = start_cli(crash_url, "ingest", *sources)
                if _wait_for_count(proc, counter, max(target, before + 1) - 1, time.monotonic() + 120) is None:
                    out, err = proc.communicate()
                    assert proc.returncode == 0, err
                    break  # it finished before it could be killed: the last units went in
                time.sleep(rng.uniform(0, per_unit))
                if not _kill(proc):
                    break
                progress_kills.append(counter.count())
                problems = counter.ledger_matches_tables()
                assert problems == [], f"after a kill at {progress_kills[-1]} units: {problems}"
            kills += progress_kills

            # The next run finishes the job.
            done = run_cli(crash_url, "ingest", *sources)
            assert done.returncode == 0, done.stderr
            assert "Traceback" not in done.stderr
        finally:
            counter.close()

        # Kills landed at many different points, inside shards and inside trial directories.
        assert len(progress_kills) >= MIN_PROGRESS_KILLS, (
            f"only {len(progress_kills)} kills before the ingest finished (per unit {per_unit:.3f}s)")
        assert len(set(progress_kills)) >= MIN_PROGRESS_KILLS, progress_kills
        assert any(k < N_SHARDS for k in progress_kills) and any(k > N_SHARDS for k in progress_kills), progress_kills
        assert len(kills) >= MIN_PROGRESS_KILLS + 2

        crashed = _dump(crash_url)
        assert differences(crashed, reference) == []
        assert crashed == reference

        # And it stays done: one more run adds nothing.
        again = run_cli(crash_url, "ingest", *sources)
        assert again.returncode == 0 and units(again.stderr) == (0, N_SHARDS + 24, 0)
        assert _dump(crash_url) == reference
        engine = make_engine(resolve_url(crash_url))
        try:
            with engine.connect() as conn:
                assert conn.execute(text("SELECT count(*) FROM loads")).scalar() == N_SHARDS + 24
        finally:
            engine.dispose()
