"""Concurrent ingests: several `warehouse ingest` processes loading overlapping datasets into
one database at once must neither duplicate rows, deadlock nor fail.

PostgreSQL: four processes, three rounds, each round on a new EMPTY database, so every round
also races the schema creation (`ensure_current(create=True)`). SQLite: two processes on one
file, three rounds, the first starting before the file exists; the second writer waits for
the lock (busy timeout) instead of failing. In every round all processes exit 0, each unit is
loaded by exactly one of them (the others report it skipped), and the contents equal those of
one process ingesting the same sources in turn, compared through the canonical dump (less the
per-load counters that depend on which unit committed first)."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from canonical import differences, dump
from procs import fresh_database, run_cli, start_cli, units
from tools.generate import generate_dataset
from trace_trees import make_trace_tree
from warehouse.db.engine import make_engine, resolve_url

TIMEOUT = 120  # a process still running by then is deadlocked or hung


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, tuple[str, int]]:
    """{name: (path, units)}: a Hub dataset, a success-only subset of it sharded differently
    (every one of its episodes is also in the full one), and a trace tree; made once for both
    backends."""
    tmp_path = tmp_path_factory.mktemp("concurrency-sources")
    full = tmp_path / "full"
    generate_dataset(full, "tiny", episodes="all", shards=6, seed=3)
    table = pa.concat_tables(pq.read_table(p) for p in sorted((full / "data").glob("*.parquet")))
    success = table.filter(pc.equal(table["result"], "1.0"))
    assert 0 < success.num_rows < table.num_rows
    subset = tmp_path / "subset" / "data"
    subset.mkdir(parents=True)
    half = success.num_rows // 2
    pq.write_table(success.slice(0, half), subset / "train-00000-of-00002.parquet")
    pq.write_table(success.slice(half), subset / "train-00001-of-00002.parquet")
    make_trace_tree(tmp_path / "traces", seed=9, job_trials=6, rl_trials=4, n_agent_steps=4, words=40)
    return {"full": (str(full), 6), "subset": (str(tmp_path / "subset"), 2), "traces": (str(tmp_path / "traces"), 12)}


def _dump(url: str):
    engine = make_engine(resolve_url(url))
    try:
        return dump(engine, order_independent=True)
    finally:
        engine.dispose()


def _race(url: str, plan: list[list[str]], data: dict[str, tuple[str, int]]) -> None:
    """Start one process per entry of `plan` at once and check what each reports."""
    procs = [start_cli(url, "ingest", *(data[name][0] for name in names)) for names in plan]
    deadline = time.monotonic() + TIMEOUT
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    loaded_total = 0
    for names, (code, out, err) in zip(plan, results):
        assert code == 0, f"{names} exited {code}:\n{err}"
        assert "Error" not in err and "Traceback" not in err, err
        loaded, skipped, failed = units(err)
        assert failed == 0 and loaded + skipped == sum(data[n][1] for n in names), err
        loaded_total += loaded
    # Every distinct unit was written by exactly one process.
    assert loaded_total == sum(n for _, n in data.values())


def _reference(backend: str, tmp_path: Path, data) -> dict:
    with fresh_database(backend, tmp_path, "sequential") as url:
        done = run_cli(url, "ingest", *(path for path, _ in data.values()))
        assert done.returncode == 0, done.stderr
        return _dump(url)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_four_processes_on_postgresql(backend, tmp_path, data):
    reference = _reference(backend, tmp_path, data)
    plans = [
        [["full", "traces"], ["subset", "full"], ["traces", "subset"], ["full", "subset", "traces"]],
        [["traces", "full", "subset"], ["full"], ["subset", "traces", "full"], ["traces"]],
        [["subset", "full", "traces"], ["subset", "full", "traces"], ["full", "traces", "subset"],
         ["traces", "subset", "full"]],
    ]
    for round_number, plan in enumerate(plans):
        with fresh_database(backend, tmp_path, f"round{round_number}") as url:  # empty: no schema
            _race(url, plan, data)
            got = _dump(url)
            assert differences(got, reference) == [], f"round {round_number}"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_two_processes_on_one_sqlite_file(backend, tmp_path, data):
    reference = _reference(backend, tmp_path, data)
    plans = [
        [["full", "subset", "traces"], ["traces", "subset", "full"]],
        [["subset", "full", "traces"], ["full", "traces", "subset"]],
        [["traces", "full", "subset"], ["subset", "traces", "full"]],
    ]
    for round_number, plan in enumerate(plans):
        url = f"sqlite:///{tmp_path / f'round{round_number}.db'}"
        assert not Path(url[len("sqlite:///"):]).exists()  # both start before the file exists
        _race(url, plan, data)
        assert differences(_dump(url), reference) == [], f"round {round_number}"
