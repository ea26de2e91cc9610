"""`warehouse runs delete`: a deleted run leaves the warehouse that never loading it leaves (the
query fixture built without the run's trials), every canned answer included; it asks first,
refuses off a terminal without --yes, changes nothing on a bad argument, takes its texts out of
the search index, and a killed delete leaves the warehouse as it was before or after; on both
backends."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import canonical
import query_fixture
from conftest import another_warehouse, copied_warehouse
from ingest.shape.records import Episode, Trial, Turn
from ingest.write import writer
from procs import run_cli
from warehouse.db.engine import make_engine, resolve_url
from warehouse.queries import QUERIES, run_canned
from warehouse.queries.catalog import LEDGER
from warehouse.search import build_index, search

RUNS = ["run-a", "run-b", "run-c"]
SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sample"
JOB = Path(__file__).resolve().parent / "fixtures" / "harbor" / "jobs" / "pinchbench-147-kimi2.6"
RUNS_OF_SAMPLE = ("9f8c2915-4688-461a-8cba-3901225a1cb2", "b421acf4-22ff-44ae-abea-d6ef824bc737")
LOAD_KEY = ("source", "unit", "content_hash")


@pytest.fixture
def url(db_url, engine):
    query_fixture.build(engine)
    return db_url


def _state(url: str, pair: tuple[str, str] = ("run-a", "run-c")) -> dict[str, list[str]]:
    """Every table (a ledger unit by its source, name and hash: its counts are what it loaded
    then) and every canned answer (the comparisons of two runs: of `pair`)."""
    engine = make_engine(resolve_url(url))
    try:
        state = canonical.dump(engine)
    finally:
        engine.dispose()
    state["loads"] = sorted(canonical._line({k: v for k, v in json.loads(line).items() if k in LOAD_KEY})
                            for line in state["loads"])
    for name, query in QUERIES.items():
        if name not in LEDGER:
            params = {"a": pair[0], "b": pair[1]} if name in ("compare", "compare-test") else {}
            state[f"query {name}"] = [repr(row) for row in run_canned(url, query, params).rows]
    return state


@pytest.mark.parametrize("run", RUNS)
def test_a_deleted_run_is_as_if_never_loaded(url, backend, tmp_path, request, run):
    done = run_cli(url, "runs", "delete", run, "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"deleted run {run}: ") and "trials" in done.stderr
    with another_warehouse(backend, tmp_path / "without", request,
                           lambda engine: query_fixture.build(engine, keep=lambda t: t.run_key != run)) as without:
        pair = tuple(r for r in RUNS if r != run)
        assert canonical.differences(_state(without, pair), _state(url, pair)) == []


def test_it_asks_and_refuses_off_a_terminal(url):
    before = _state(url)
    done = run_cli(url, "runs", "delete", "run-b")  # stdin is not a terminal
    assert done.returncode == 1
    assert done.stderr.startswith("Error: delete run run-b: ") and "(pass --yes to go ahead)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    unknown = run_cli(url, "runs", "delete", "no-such-run", "--yes")
    assert unknown.returncode == 1 and unknown.stderr.strip() == "Error: no run 'no-such-run' (`warehouse runs` lists them)"
    assert _state(url) == before


def test_a_deleted_runs_texts_leave_the_search_index(url, engine):
    build_index(engine)
    assert [row[1] for row in search(url, "needle-xyz").rows] == ["c2"]
    assert run_cli(url, "runs", "delete", "run-c", "--yes").returncode == 0
    assert search(url, "needle-xyz").rows == []
    # New texts, whose ids SQLite may take from the deleted ones: found, indexed or not.
    source = writer.ensure_source(engine, "parquet", "/fixture/late", "late")
    with writer.unit(engine, source, "unit-late", "hash-late") as u:
        u.add_trials([Trial(run_key="run-late", trial_name=f"late__{i}", task_name="task1", reward=1.0, result="1.0",
                            episodes=[Episode(0, [Turn("user", f"a fresh text number {i}")])]) for i in range(30)])
    assert len(search(url, "fresh text").rows) == 30
    build_index(engine)
    assert len(search(url, "fresh text").rows) == 30
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
            assert conn.exec_driver_sql(
                "INSERT INTO search_fts_messages(search_fts_messages) VALUES('integrity-check')").rowcount != 0


def _with_sample(engine) -> None:
    from ingest.pipeline import ingest

    query_fixture.build(engine)
    ingest(engine, [str(SAMPLE)])


KILLED = {  # the delete, what the warehouse holds before it, and what it holds after
    "runs delete": (["runs", "delete", "run-b", "--yes"], query_fixture.build,
                    lambda engine: query_fixture.build(engine, keep=lambda t: t.run_key != "run-b")),
    "sources delete": (["sources", "delete", "sample", "--yes"], _with_sample, query_fixture.build),
}


@pytest.mark.parametrize("delete", KILLED)
def test_a_killed_delete_leaves_before_or_after(backend, tmp_path, request, delete):
    args, fill, fill_after = KILLED[delete]
    with another_warehouse(backend, tmp_path / "before", request, fill) as url:
        before = _state(url)
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "warehouse", "--db", url, *args], capture_output=True, check=True,
                       timeout=120)
        window = time.monotonic() - started
    with another_warehouse(backend, tmp_path / "after", request, fill_after) as done:
        after = _state(done)
    # Deletes killed at moments drawn across a whole delete's span, each in a warehouse of its own.
    rng = random.Random(29)
    for attempt in range(4):
        with another_warehouse(backend, tmp_path / f"k{attempt}", request, fill) as killed:
            proc = subprocess.Popen([sys.executable, "-m", "warehouse", "--db", killed, *args],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            time.sleep(rng.uniform(0.3, 1.0) * window)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            assert _state(killed) in (before, after), f"kill {attempt}: a state between before and after"


# --- sources delete --------------------------------------------------------------------------

def test_a_duplicated_source_taken_back_leaves_the_other_alone(db_url, engine, tmp_path, backend, request):
    """The same dataset loaded from two places: either taken back leaves the warehouse one load
    of it makes (the ledger aside)."""
    from ingest.pipeline import ingest

    copy = tmp_path / "copy"
    shutil.copytree(SAMPLE, copy)
    ingest(engine, [str(SAMPLE)])
    ingest(engine, [str(copy)])
    done = run_cli(db_url, "sources", "delete", str(copy), "--yes")
    assert done.returncode == 0, done.stderr
    assert "36 trials shared with other sources" in done.stderr
    with another_warehouse(backend, tmp_path / "once", request, lambda e: ingest(e, [str(SAMPLE)])) as once:
        assert canonical.differences(_state(once, RUNS_OF_SAMPLE), _state(db_url, RUNS_OF_SAMPLE)) == []


def test_a_job_loaded_from_two_places_taken_back_once(db_url, engine, tmp_path, backend, request):
    """The same trace job at two paths (two sources whose trial folders hash alike), then a
    dataset of another run: taking back either copy of the job leaves what one load of it makes."""
    from ingest.pipeline import ingest

    first, second = tmp_path / "a" / JOB.name, tmp_path / "b" / JOB.name
    for where in (first, second):
        shutil.copytree(JOB, where)

    for gone, kept in ((second, first), (first, second)):
        with another_warehouse(backend, tmp_path / f"both-{gone.parent.name}", request,
                               lambda e: [ingest(e, [str(p)]) for p in (first, second, SAMPLE)]) as both:
            done = run_cli(both, "sources", "delete", str(gone), "--yes")
            assert done.returncode == 0, done.stderr
            with another_warehouse(backend, tmp_path / f"once-{kept.parent.name}", request,
                                   lambda e: [ingest(e, [str(p)]) for p in (kept, SAMPLE)]) as alone:
                assert canonical.differences(_state(alone, RUNS_OF_SAMPLE), _state(both, RUNS_OF_SAMPLE)) == []


def test_a_source_of_its_own_goes_whole(url, engine, backend, tmp_path, request):
    """The sample (two runs no other source holds) loaded beside the query fixture, then taken
    back: the query fixture alone."""
    from ingest.pipeline import ingest

    ingest(engine, [str(SAMPLE)])
    done = run_cli(url, "sources", "delete", "sample", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "deleted source 'sample': 1 unit, 36 trials only it holds; 2 runs left with no trial"
    with another_warehouse(backend, tmp_path / "fixture", request, query_fixture.build) as alone:
        assert canonical.differences(_state(alone), _state(url)) == []


def test_a_trial_of_two_trace_directories_is_refused_and_nothing_changes(url):
    """fixture-b's units are trace-directory units (the fixture writes no Arrow schema), and one
    of its trials fixture-a's trace units hold too: what fixture-a alone gives cannot be told."""
    before = _state(url)
    done = run_cli(url, "sources", "delete", "fixture-b", "--yes")
    assert done.returncode == 1
    assert done.stderr.strip() == ("Error: source 'fixture-b' cannot be taken back: 1 trial of its trace directories "
                                   "is also held, as another version, by another source's trace directory; nothing done")
    assert run_cli(url, "sources", "delete", "no-such-source", "--yes").stderr.strip() == \
        "Error: no source 'no-such-source' (`warehouse sources` lists them)"
    assert _state(url) == before


@pytest.fixture(scope="module")
def order_sources(tmp_path_factory):
    from order_sources import make_sources

    return make_sources(tmp_path_factory.mktemp("order-sources"))


@pytest.mark.parametrize("traces", [True, False], ids=["with-traces", "datasets-alone"])
def test_every_source_taken_back_leaves_what_the_others_give(order_sources, backend, tmp_path, request, traces):
    """Each source of one set of trials in every shape (order_sources), taken back from a
    warehouse of them all: the warehouse then is a fresh ingest of the others (the canonical
    state of the order-independence test: tables, canned answers, every source's export), or
    the delete is refused and nothing changed."""
    from ingest.pipeline import ingest
    from test_load_order import _state as canonical_state

    names = [n for n in order_sources if traces or n != "traces"]
    pair = ("6a29732a-c34a-4f7e-85bd-ee65fb2d2604", "0b1c2d3e-0000-4000-8000-0000000000f1")
    taken_back = []
    # The warehouse of them all is made once; each source is taken back from a copy of it.
    with another_warehouse(backend, tmp_path / "everything", request,
                           lambda e: [ingest(e, [str(order_sources[n])]) for n in names]) as everything:
        before = _state(everything, pair)
        for gone in names:
            rest = {n: order_sources[n] for n in names if n != gone}
            with copied_warehouse(backend, everything, tmp_path / gone) as copy:
                done = run_cli(copy, "sources", "delete", str(order_sources[gone]), "--yes")
                if done.returncode != 0:
                    assert "cannot be taken back" in done.stderr and len(done.stderr.strip().splitlines()) == 1
                    assert _state(copy, pair) == before
                    continue
                taken_back.append(gone)
                with another_warehouse(backend, tmp_path / f"{gone}-rest", request,
                                       lambda e: [ingest(e, [str(p)]) for p in rest.values()]) as others:
                    engines = [make_engine(resolve_url(u)) for u in (others, copy)]
                    try:
                        expected, got = (canonical_state(e, rest, tmp_path / f"{gone}-{i}")
                                         for i, e in enumerate(engines))
                    finally:
                        for e in engines:
                            e.dispose()
                    assert canonical.differences(expected, got) == [], f"{gone} taken back"
    assert taken_back == names, taken_back  # (none is refused)
