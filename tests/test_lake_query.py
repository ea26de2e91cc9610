"""Every canned query answered on a lake (`query NAME --lake OUT`), by DuckDB and by Spark in local
mode, equals the warehouse's own answer (run_canned on the database), query by query, on the
lakes `export tables` writes from both backends.

The warehouse is tests/query_fixture.py's, its runs named and labelled as the filter tests name
them (test_query_filters._decorate), and its trials given rewards with a dotted key and an odd
one (a quote and a backslash) for --metric. Every query of the catalog is asked (a query added
later is asked too) with its parameters varied and with every filter of test_query_filters.

Spark needs pyspark and Java: missing, its tests are skipped locally, and fail under CI or with
WAREHOUSE_REQUIRE_SPARK=1 (.ci/run installs Java). One Spark session serves the whole module."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest
from sqlalchemy import select, update

import forked_cli
import query_fixture
from conftest import BACKENDS, REQUIRE_SPARK, fresh_warehouse
from query_fixture import cli
from test_query_filters import CASES, _decorate
from warehouse.db import models
from warehouse.db.engine import make_engine, resolve_url
from warehouse.errors import WarehouseError
from warehouse.export_tables import export_tables
from warehouse.filters import Filters
from warehouse.lake import Lake
from warehouse.queries import QUERIES, run_canned

KEY = "clawbench.accuracy"  # dotted: one key, not a path
ODD = 'odd "key\\'


def _rewards(engine) -> None:
    """Two keys in most trials' rewards (the third trial of every three has none)."""
    trials = models.metadata.tables["trials"]
    with engine.begin() as conn:
        ids = conn.execute(select(trials.c.id).order_by(trials.c.id)).scalars().all()
        for i, trial_id in enumerate(ids):
            rewards = None if i % 3 == 2 else {KEY: (i % 5) / 4, ODD: float(i % 2)}
            conn.execute(update(trials).where(trials.c.id == trial_id).values(rewards=rewards))


@pytest.fixture(scope="module", params=BACKENDS)
def exported(request, tmp_path_factory):
    """(the warehouse's URL, its lake), per backend."""
    folder = tmp_path_factory.mktemp(f"lake-{request.param}")
    maker = fresh_warehouse(request.param, folder, request)
    url = next(maker)
    engine = make_engine(resolve_url(url))
    query_fixture.build(engine)
    _decorate(engine)
    _rewards(engine)
    export_tables(engine, folder / "lake")
    engine.dispose()
    yield url, folder / "lake"
    next(maker, None)


@pytest.fixture(scope="module")
def spark():
    """Spark, started once for the module (warehouse.lake.engines keeps it for the process)."""
    from warehouse.lake.engines import spark_session

    try:
        spark_session()
    except WarehouseError as exc:
        if REQUIRE_SPARK:
            pytest.fail(f"Spark is required here but {exc}")
        pytest.skip(str(exc))


def _given(name: str) -> list[dict[str, Any]]:
    """Parameter values to ask `name` with: its defaults, then each kind of choice it takes."""
    params = {p.name: p for p in QUERIES[name].params}
    base = {"a": "run-a", "b": "beta"} if "a" in params else {}  # a key and a name
    variants = [base]
    if "by" in params:
        variants += [dict(base, by=by) for by in (*params["by"].choices[1:], "label:kind")]
    if "threshold" in params:
        variants.append(dict(base, threshold=0.5))
    if "errors" in params:
        variants += [dict(base, errors="exclude"), dict(base, metric=KEY), dict(base, metric=ODD, errors="exclude")]
    for flag in ("unsolved", "solved_by_all", "per_task", "flipped", "tasks"):
        if flag in params:
            variants.append(dict(base, **{flag: True}))
    if "source" in params:
        variants.append({"source": "fixture-b"})
    return variants


# Every kind of filter at once: run-a's task1 trials from 11:00 (a key and a name for the runs).
EVERY_FILTER = Filters.of(run=["run-a", "beta"], task="task?", model="m1", agent="term*", label="kind=y",
                          since="2024-01-01T11:00Z", until="2024-01-02")


def _cases(name: str) -> list[tuple[dict[str, Any], Filters]]:
    """Every variant unfiltered, and the defaults under every filter of test_query_filters."""
    variants = _given(name)
    return ([(given, Filters()) for given in variants] + [(variants[0], filters) for filters, _ in CASES.values()]
            + [(variants[-1], EVERY_FILTER)])


def _spark_case(name: str, url: str) -> tuple[dict[str, Any], Filters]:
    """One case per lake for Spark (a second or so a statement, and filters take several): on
    SQLite's lake the defaults, on PostgreSQL's the last variant (a flag, --metric) under every
    filter at once. DuckDB asks both lakes everything: they hold the same rows."""
    variants = _given(name)
    return (variants[0], Filters()) if url.startswith("sqlite") else (variants[-1], EVERY_FILTER)


def _close(got: Any, want: Any) -> bool:
    """Equal, a float within a tight relative tolerance (sums in another order) and only to a float."""
    if isinstance(want, float) or isinstance(got, float):
        return isinstance(got, float) and isinstance(want, float) and (
            math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(got) and math.isnan(want)))
    return got == want


def _answer(target: Any, name: str, given: dict[str, Any], filters: Filters) -> Any:
    """The answer (columns, rows, note), or the one-line error, of `name`."""
    try:
        # A generous time limit: a loaded machine's first Spark statements (its JIT cold) take seconds.
        result = run_canned(target, QUERIES[name], dict(given), filters=filters, summaries=False, timeout=600)
    except WarehouseError as exc:
        return f"error: {exc}"
    return result


def _assert_same(got: Any, want: Any, what: str) -> None:
    if isinstance(want, str) or isinstance(got, str):
        assert got == want, what
        return
    assert got.columns == want.columns, what
    assert got.note == want.note, what
    assert len(got.rows) == len(want.rows), f"{what}: {got.rows} != {want.rows}"
    for got_row, want_row in zip(got.rows, want.rows):
        assert len(got_row) == len(want_row) and all(map(_close, got_row, want_row)), \
            f"{what}: {got_row} != {want_row}"


def _check(lake: Lake, url: str, cases: list[tuple[dict[str, Any], Filters]], name: str) -> int:
    answered = 0
    for given, filters in cases:
        want = _answer(url, name, given, filters)
        got = _answer(lake, name, given, filters)
        _assert_same(got, want, f"{name} {given} {filters} on {lake.engine}")
        answered += not isinstance(want, str)
    return answered


@pytest.mark.parametrize("name", list(QUERIES))
def test_duckdb_answers_every_query_as_the_warehouse(exported, name):
    url, out = exported
    cases = _cases(name)
    answered = _check(Lake(out, "duckdb"), url, cases, name)
    assert answered >= len(cases) - 1  # the cases are answers, not errors alike (the ledger's --task may be one)


@pytest.mark.parametrize("name", list(QUERIES))
def test_spark_answers_every_query_as_the_warehouse(exported, spark, name):
    url, out = exported
    assert _check(Lake(out, "spark"), url, [_spark_case(name, url)], name) == 1


def _lake_cli(out, *args: str, engine: str = "duckdb") -> subprocess.CompletedProcess:
    return forked_cli.run([*args, "--lake", str(out), "--engine", engine], timeout=600)


@pytest.mark.parametrize("args", [("query", "pass-rate", "--by", "model", "--format", "csv"),
                                  ("query", "compare", "run-a", "beta", "--task", "task*"),
                                  ("query", "runs", "--format", "json", "--label", "kind=x"),
                                  ("loads", "fixture-b", "--format", "jsonl")])
def test_cli_answers_from_the_lake_as_from_the_database(exported, args):
    # Tables name runs and carry compare's verdict on stderr; JSON keeps types and times.
    url, out = exported
    want = cli(url, *args)
    got = _lake_cli(out, *args)
    assert want.returncode == 0 and got.returncode == 0, got.stderr
    assert (got.stdout, got.stderr) == (want.stdout, want.stderr)


def test_cli_answers_from_the_lake_with_spark(exported, spark):
    url, out = exported
    args = ("query", "compare-test", "run-a", "beta", "--format", "json")
    got = _lake_cli(out, *args, engine="spark")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == json.loads(cli(url, *args).stdout)
    assert got.stderr == "note: errors: counted as failures (--errors exclude leaves them out)\n"  # Spark says nothing


def test_bad_lake_input_is_one_line(exported, tmp_path):
    url, out = exported
    twice = "Error: --lake and --db name two places to answer from: give one\n"
    both = forked_cli.run(["--db", url, "query", "runs", "--lake", str(out)])
    assert (both.returncode, both.stderr) == (1, twice)
    inner = forked_cli.run(["query", "runs", "--lake", str(out), "--db", url])
    assert (inner.returncode, inner.stderr) == (1, twice)
    # $WAREHOUSE_DB is only a default, not a second place to answer from.
    env_default = subprocess.run([sys.executable, "-m", "warehouse", "query", "runs", "--lake", str(out)],
                                 capture_output=True, text=True, env={**os.environ, "WAREHOUSE_DB": url}, timeout=120)
    assert env_default.returncode == 0 and "run-a" in env_default.stdout
    missing = _lake_cli(tmp_path / "nowhere", "query", "runs")
    assert (missing.returncode, missing.stderr) == (1, f"Error: {tmp_path / 'nowhere'}: no such lake folder\n")
    (tmp_path / "empty").mkdir()
    empty = _lake_cli(tmp_path / "empty", "query", "runs")
    assert empty.returncode == 1 and empty.stderr.startswith(f"Error: {tmp_path / 'empty'}: not a lake")
    (tmp_path / "other" / "things").mkdir(parents=True)
    shutil.copy(next((out / "tasks").glob("*.parquet")), tmp_path / "other" / "things")
    other = _lake_cli(tmp_path / "other", "query", "runs")
    assert (other.returncode, other.stderr) == (
        1, f"Error: {tmp_path / 'other'}: not a warehouse's lake (no runs or trials table): "
           "`warehouse export tables OUT` writes one\n")
    engine = _lake_cli(out, "query", "runs", engine="sqlite")
    assert engine.returncode == 2 and "'sqlite' is not one of 'duckdb', 'spark'" in engine.stderr
    unknown = _lake_cli(out, "query", "compare", "run-a", "nosuch")
    assert (unknown.returncode, unknown.stderr) == (1, "Error: no run 'nosuch' (`warehouse runs` lists them)\n")
    for text in (both.stderr, missing.stderr, other.stderr, unknown.stderr):
        assert "Traceback" not in text and text.count("\n") == 1


def test_missing_spark_or_java_says_what_to_install(exported, tmp_path):
    """pyspark that cannot be imported, and no java on the PATH (nor JAVA_HOME): one line each."""
    _, out = exported
    run = ("import sys; {hide}sys.argv = ['warehouse', 'query', 'runs', '--lake', sys.argv[1], '--engine', 'spark']; "
           "from warehouse.cli.app import main; main()")
    no_pyspark = subprocess.run([sys.executable, "-c", run.format(hide="sys.modules['pyspark'] = None; "), str(out)],
                                capture_output=True, text=True, timeout=120)
    assert (no_pyspark.returncode, no_pyspark.stderr) == (
        1, "Error: --engine spark needs pyspark: pip install 'trajectory-warehouse[lake]'\n")
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java there
    no_java = subprocess.run([sys.executable, "-c", run.format(hide=""), str(out)], capture_output=True, text=True,
                             timeout=120, env=env)
    assert (no_java.returncode, no_java.stderr) == (
        1, "Error: --engine spark needs Java 17 or later: apt-get install openjdk-17-jre-headless (or set JAVA_HOME)\n")


def test_the_api_answers_from_a_lake(exported):
    import warehouse

    url, out = exported
    lake = warehouse.open_lake(out)
    got = lake.query("pass_at_k", k=[1, 2], run=["run-a", "beta"], per_task=True)
    with warehouse.open(url) as wh:
        want = wh.query("pass-at-k", k=[1, 2], run=["run-a", "beta"], per_task=True)
    assert (got.columns, got.rows, got.note) == (want.columns, want.rows, want.note)
    # By hand (query_fixture): run-a task1 5 attempts, 2 successes: pass@1 = 2/5.
    assert got.rows[0][:4] == ("run-a", "task1", 5, 2) and got.rows[0][4] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="engine must be one of duckdb, spark, not 'trino'"):
        warehouse.open_lake(out, engine="trino")
    with pytest.raises(WarehouseError, match="no canned query 'nosuch'"):
        lake.query("nosuch")


def test_a_manifests_lake_is_its_manifests_files(exported, tmp_path):
    """A file a sync has written but its manifest does not list yet is not read: a copy of a
    run's trials beside them would count each twice."""
    url, out = exported
    lake = tmp_path / "synced"
    shutil.copytree(out, lake)
    files = sorted(p for p in lake.rglob("*.parquet"))
    (lake / "manifest.json").write_text(json.dumps({
        "format": "trajectory-warehouse-lake", "version": 1, "sync": 1, "synced_at": "2026-12-03T10:00:00+00:00",
        "files": [{"path": p.relative_to(lake).as_posix(), "table": p.relative_to(lake).parts[0],
                   "run_id": None} for p in files]}))
    first = sorted((lake / "trials").glob("run_id=*/*.parquet"))[0]
    shutil.copy(first, first.with_name("part-s2-00000.parquet"))  # the next sync's, not listed yet
    want = run_canned(url, QUERIES["runs"], summaries=False)
    assert _answer(Lake(lake), "runs", {}, Filters()).rows == want.rows
    (lake / "manifest.json").unlink()  # globbed now: the stray file counts
    doubled = _answer(Lake(lake), "runs", {}, Filters()).rows
    assert doubled != want.rows and sum(row[2] for row in doubled) > sum(row[2] for row in want.rows)


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_values_are_written_in_as_what_they_are(exported, engine, request):
    """Binds become literals that each engine reads back as the value (Spark reads `\\` in a
    string as an escape; a float is a DOUBLE, not a DECIMAL; a time is a moment in UTC)."""
    from datetime import datetime, timedelta, timezone

    from warehouse.lake.engines import lake_session

    if engine == "spark":
        request.getfixturevalue("spark")
    _, out = exported
    values = {"s": 'a\\b "c" \'d\' 100% _x_ Déjà', "f": 0.1, "i": -7, "n": None,
              "t": datetime(2024, 1, 1, 12, 30, tzinfo=timezone(timedelta(hours=2))),
              "p": "a\\\\b %", "q": "a\\_%"}  # LIKE patterns: `\\` a backslash, `\_` an underscore
    with lake_session(Lake(out, engine), timeout=600) as session:
        row = session.fetch("SELECT :s AS s, :f AS f, :i AS i, :n AS n, :t AS t, "
                            "CASE WHEN :s LIKE :p ESCAPE '\\' THEN 1 ELSE 0 END AS backslash, "
                            "CASE WHEN :s LIKE :q ESCAPE '\\' THEN 1 ELSE 0 END AS underscore", values).rows[0]
    assert row[:4] == (values["s"], 0.1, -7, None) and isinstance(row[1], float)
    assert row[4] == datetime(2024, 1, 1, 10, 30, tzinfo=timezone.utc)
    assert row[5:] == (1, 0)  # the value has a backslash after `a`, not an underscore
