"""The Python API (warehouse.api) on both backends: each method answers what its CLI command
prints, results convert to dicts, Arrow and pandas with their types, reads leave a read-only
file as they found it, opening creates nothing, and errors are one-line WarehouseErrors."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from datetime import date, datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

import warehouse
from procs import CLI, run_cli
from test_read_never_writes import _READONLY_VIEW, _UNSHARE, readonly_mounts, snapshot  # noqa: F401
from warehouse.api import IngestError, Result, _filters
from warehouse.db.engine import redact, resolve_url
from warehouse.filters import Filters
from warehouse import show as show_lib
from warehouse.search import COLUMNS as SEARCH_COLUMNS

SAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sample"
SAMPLE_TRIALS, SAMPLE_EPISODES = 36, 36


@pytest.fixture
def wh(db_url):
    """The sample, ingested through the API."""
    with warehouse.open(db_url) as opened:
        opened.ingest([SAMPLE])
        yield opened


def _cli_json(db_url: str, *args: str) -> list[dict]:
    done = run_cli(db_url, *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _jsonable(result: Result) -> list[dict]:
    """The result as the CLI's JSON writes it (timestamps as ISO text)."""
    return json.loads(json.dumps(result.to_dicts(), default=lambda v: v.isoformat()))


# --- ingest ------------------------------------------------------------------------------------

def test_ingest_reports_what_it_loaded_and_skips_it_the_second_time(db_url):
    with warehouse.open(db_url) as wh:
        first = wh.ingest(str(SAMPLE))  # one source as a string, or several in a list
        again = wh.ingest([SAMPLE])
        (n,), = wh.sql("SELECT count(*) FROM trials").rows
    assert (first.units_loaded, first.units_skipped, first.units_failed) == (1, 0, 0)
    assert (first.episodes_new, first.episodes_duplicate, first.conflicts, first.rows_rejected) == (
        SAMPLE_EPISODES, 0, 0, 0)
    assert first.trials == SAMPLE_TRIALS == n
    assert first.database == redact(resolve_url(db_url)) and "database: " + first.database in first.lines()
    assert (again.units_loaded, again.units_skipped, again.episodes_new) == (0, 1, 0)


def test_a_failed_unit_raises_with_the_report_and_keep_going_returns_it(db_url, tmp_path):
    missing = tmp_path / "no-such-source"
    with warehouse.open(db_url) as wh:
        with pytest.raises(IngestError, match="no-such-source: no such file") as caught:
            wh.ingest([SAMPLE, missing])
        report = caught.value.report
        assert isinstance(caught.value, warehouse.WarehouseError)
        assert (report.units_loaded, report.units_failed) == (1, 1)
        assert len(wh.sql("SELECT id FROM trials", max_rows=None)) == SAMPLE_TRIALS  # the good unit is kept
        heard: list[str] = []
        kept = wh.ingest([missing, SAMPLE], keep_going=True, warn=heard.append)
    assert (kept.units_skipped, kept.units_failed) == (1, 1)
    assert len(heard) == 1 and "no-such-source" in heard[0] and kept.errors == heard


def test_opening_creates_nothing_reads_refuse_a_missing_file_and_ingest_creates_it(tmp_path):
    path = tmp_path / "new.db"
    wh = warehouse.open(path)
    for read in (lambda: wh.sql("SELECT 1"), lambda: wh.query("runs"), lambda: wh.search("x"),
                 lambda: wh.show("t")):
        with pytest.raises(warehouse.WarehouseError, match=f"no warehouse at {path}"):
            read()
    assert list(tmp_path.iterdir()) == []
    wh.ingest([SAMPLE])
    assert len(wh.query("runs")) == 2
    wh.close()


# --- reads ---------------------------------------------------------------------------------------

def test_query_answers_what_the_cli_prints(wh, db_url):
    per_run = wh.query("pass-at-k", k=[1, 2])
    assert per_run.columns == ["run_key", "tasks", "min_attempts", "pass@1", "pass@1_low", "pass@1_high",
                               "pass@2", "pass@2_low", "pass@2_high"]
    assert _jsonable(per_run) == _cli_json(db_url, "query", "pass-at-k", "--k", "1,2")
    per_task = wh.query("pass_at_k", k="1,2", per_task=True)  # the name with _ too, k as the CLI writes it
    assert _jsonable(per_task) == _cli_json(db_url, "query", "pass-at-k", "--k", "1,2", "--per-task")
    by_model = wh.query("pass-rate", by="model", threshold=0.5)
    assert _jsonable(by_model) == _cli_json(db_url, "query", "pass-rate", "--by", "model", "--threshold", "0.5")
    runs = wh.query("runs")
    a, b = sorted(r["run_key"] for r in runs.to_dicts())
    assert _jsonable(wh.query("compare", a=a, b=b)) == _cli_json(db_url, "query", "compare", "--a", a, "--b", b)


def test_query_refuses_what_the_cli_refuses(wh):
    for call, message in [
        (lambda: wh.query("no-such"), "no canned query 'no-such': the queries are runs, pass-rate"),
        (lambda: wh.query("runs", per_task=True), "query runs has no parameter per_task"),
        (lambda: wh.query("pass-rate", by="colour"), "--by must be one of run, model, agent"),
        (lambda: wh.query("pass-at-k", k=[0]), "positive integers"),
        (lambda: wh.query("compare", a="x"), "--b is required"),
        (lambda: wh.query("compare", a="nope", b="nope"), "no run 'nope'"),
    ]:
        with pytest.raises(warehouse.WarehouseError, match=message):
            call()


def test_query_filter_keywords_become_filters():
    none = dict.fromkeys(("run", "task", "model", "agent", "label", "since", "until"))
    assert _filters(**none) is None
    assert _filters(**{**none, "run": "5de746de", "task": ["fix-*", "debug-?"], "model": "kimi-k2.6",
                       "label": {"step": "13"}}) == Filters(runs=("5de746de",), tasks=("fix-*", "debug-?"),
                                                            models=("kimi-k2.6",), labels=(("step", "13"),))
    assert _filters(**{**none, "agent": ["a", "b"], "label": ["step=13", "lr=3e-5"]}) == Filters(
        agents=("a", "b"), labels=(("step", "13"), ("lr", "3e-5")))
    # A date is its midnight in UTC; --until's date takes in the whole day.
    assert _filters(**{**none, "since": date(2026, 6, 4), "until": "2026-06-04"}) == Filters(
        since=datetime(2026, 6, 4, tzinfo=timezone.utc), until=datetime(2026, 6, 5, tzinfo=timezone.utc))
    with pytest.raises(warehouse.WarehouseError, match="a label is key=value"):
        _filters(**{**none, "label": "step"})
    with pytest.raises(warehouse.WarehouseError, match="since must be a str, a date or a datetime, not int"):
        _filters(**{**none, "since": 20260604})


def test_query_filters_narrow_it(wh):
    a, b = sorted(key for key, *_ in wh.query("runs").rows)
    try:
        only_a = wh.query("pass-rate", run=a)
    except warehouse.WarehouseError as exc:
        if "runs branch" in str(exc):
            pytest.skip("canned queries take filters once the runs branch is merged")
        raise
    assert [row[0] for row in only_a.rows] == [a]
    assert [row[0] for row in wh.query("pass-rate", run=[a, b]).rows] == [a, b]
    with pytest.raises(warehouse.WarehouseError, match="no run 'nope'"):
        wh.query("runs", run="nope")


def test_sql_binds_python_values_and_caps_the_rows(wh):
    (passed,), = wh.sql("SELECT count(*) FROM trials WHERE reward >= :r", r=1.0).rows
    (all_of_them,), = wh.sql("SELECT count(*) FROM trials").rows
    assert 0 < passed < all_of_them == SAMPLE_TRIALS
    # A bind named like a keyword of sql() goes in the mapping.
    assert wh.sql("SELECT :timeout AS t, :max_rows AS m", {"timeout": "x", "max_rows": "y"}).rows == [("x", "y")]
    capped = wh.sql("SELECT id FROM trials ORDER BY id", max_rows=5)
    assert (len(capped), capped.truncated) == (5, True)
    whole = wh.sql("SELECT id FROM trials ORDER BY id", max_rows=None)
    assert (len(whole), whole.truncated) == (SAMPLE_TRIALS, False)
    assert list(whole)[:5] == capped.rows and whole.rows[0] == (whole.to_dicts()[0]["id"],)
    assert repr(capped) == "Result(columns=['id'], 5 rows, truncated)"


def test_sql_stream_hands_out_rows_as_they_come(wh):
    with wh.sql_stream("SELECT id FROM trials ORDER BY id", max_rows=7) as rows:
        assert rows.columns == ["id"]
        seen = [row for row in rows]
    assert len(seen) == 7 and rows.truncated
    with wh.sql_stream("SELECT trial_name FROM trials WHERE trial_name = :t", t="nope") as rows:
        assert list(rows) == [] and not rows.truncated


def test_sql_refuses_writes_and_bad_limits(wh):
    for call, message in [
        (lambda: wh.sql("DELETE FROM trials"), "read-only|one query"),
        (lambda: wh.sql("SELECT 1; SELECT 2"), "one statement|one query"),
        (lambda: wh.sql("SELECT :x"), "no value for :x"),
        (lambda: wh.sql("SELECT 1", timeout=0), "time limit must be"),
        (lambda: wh.sql("SELECT nonsense FROM nowhere"), "database error"),
    ]:
        with pytest.raises(warehouse.WarehouseError, match=message):
            call()
    (n,), = wh.sql("SELECT count(*) FROM trials").rows
    assert n == SAMPLE_TRIALS


def test_search_answers_what_the_cli_prints(wh, db_url):
    hits = wh.search("error", limit=3)
    assert hits.columns == SEARCH_COLUMNS and len(hits) == 3 and hits.truncated
    assert _jsonable(hits) == _cli_json(db_url, "search", "error", "--limit", "3")
    run = hits.rows[0][0]
    assert {row[0] for row in wh.search("error", run=run, limit=500)} == {run}
    assert wh.search("no such text anywhere 0x1f").rows == []
    with pytest.raises(warehouse.WarehouseError, match="empty"):
        wh.search("")


def test_show_gives_the_trajectory(wh, db_url):
    (trial,), = wh.sql("SELECT trial_name FROM trials ORDER BY trial_name LIMIT 1").rows
    shown = wh.show(trial)
    assert shown["trial_name"] == trial and shown["episodes"] and shown["episodes"][0]["turns"]
    done = run_cli(db_url, "show", trial, "--format", "json")
    assert json.loads(done.stdout) == json.loads(show_lib.to_json(shown))
    with pytest.raises(warehouse.WarehouseError, match="no trial 'nope'"):
        wh.show("nope")


# --- results -------------------------------------------------------------------------------------

def test_lake_sync_writes_what_the_cli_writes(wh, db_url, tmp_path):
    first = wh.lake_sync(tmp_path / "lake")
    assert first.changed and first.sync == 1 and len(first.runs_new) == 2  # the sample's two runs
    done = run_cli(db_url, "lake", "sync", str(tmp_path / "by-cli"))
    assert done.returncode == 0 and done.stderr == first.line().replace(str(tmp_path / "lake"), str(tmp_path / "by-cli")) + "\n"
    again = wh.lake_sync(tmp_path / "lake")
    assert not again.changed and again.line() == f"Synced {tmp_path / 'lake'}: nothing changed (2 runs, sync 1)"


def test_to_arrow_keeps_the_types_and_the_values(wh):
    runs = wh.query("runs")
    table = runs.to_arrow()
    types = dict(zip(table.schema.names, table.schema.types))
    assert types["run_key"] == pa.string() and types["trials"] == pa.int64()
    assert types["pass_rate"] == pa.float64()
    # Aware timestamps, in the zone the driver gave (PostgreSQL's session zone: Etc/UTC).
    assert pa.types.is_timestamp(types["first_started"]) and types["first_started"].tz in ("UTC", "Etc/UTC")
    assert isinstance(runs.rows[0][runs.columns.index("first_started")], datetime)
    assert table.num_rows == len(runs) and table.to_pylist() == runs.to_dicts()
    # An integer column with a NULL stays integer; a text column with one stays text.
    rows = wh.sql("SELECT CASE WHEN id % 2 = 0 THEN id END AS id, CASE WHEN id % 2 = 1 THEN trial_name END AS name "
                  "FROM trials ORDER BY 1", max_rows=None)
    mixed = rows.to_arrow()
    assert mixed.schema.types == [pa.int64(), pa.string()]
    assert 0 < mixed.column("id").null_count == sum(row[0] is None for row in rows) < len(rows)
    assert mixed.to_pylist() == rows.to_dicts()
    empty = wh.sql("SELECT id FROM trials WHERE id < 0").to_arrow()
    assert (empty.num_rows, empty.schema.names) == (0, ["id"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # a PostgreSQL column has one type
def test_to_arrow_refuses_a_column_of_mixed_types_naming_it(wh, backend):
    mixed = wh.sql("SELECT 1 AS x UNION ALL SELECT 'one'")
    with pytest.raises(warehouse.WarehouseError, match="column x: .*CAST it in the SQL"):
        mixed.to_arrow()


def test_to_pandas(wh):
    pd = pytest.importorskip("pandas")
    runs = wh.query("runs")
    frame = runs.to_pandas()
    assert isinstance(frame, pd.DataFrame) and list(frame.columns) == runs.columns and len(frame) == len(runs)
    assert frame["trials"].sum() == SAMPLE_TRIALS
    assert list(frame["run_key"]) == [row[0] for row in runs.rows]
    assert str(frame["first_started"].dtype).startswith("datetime64") and str(frame["first_started"].dt.tz) in ("UTC", "Etc/UTC")


def test_to_pandas_without_pandas_names_the_fix(wh, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # what `import pandas` meets where it is missing
    with pytest.raises(warehouse.WarehouseError, match="pip install pandas"):
        wh.query("runs").to_pandas()


# --- read-only files and errors ------------------------------------------------------------------

def _rollback_copy(wh: warehouse.Warehouse, folder: Path) -> Path:
    """The SQLite warehouse copied into `folder` in rollback-journal mode, file and folder made
    read-only."""
    folder.mkdir()
    path = folder / "warehouse.db"
    wh.close()  # its last connection closed: the -wal folded in and gone
    assert not Path(f"{wh.url.database}-wal").exists()
    shutil.copy2(wh.url.database, path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    path.chmod(0o444)
    folder.chmod(0o555)
    return path


def _reads(wh: warehouse.Warehouse) -> list:
    (trial,), = wh.sql("SELECT trial_name FROM trials LIMIT 1").rows
    return [wh.sql("SELECT count(*) AS n FROM trials").rows, wh.query("runs").to_arrow().num_rows,
            wh.query("pass-at-k", k=[1]).rows, len(wh.search("error", limit=5)), wh.show(trial)["trial_name"]]


def test_reads_leave_a_read_only_file_as_they_found_it(wh, backend, tmp_path):
    if backend != "sqlite":
        pytest.skip("a SQLite file")
    folder = tmp_path / "archive"
    path = _rollback_copy(wh, folder)
    before = snapshot(folder)
    try:
        with warehouse.open(path) as archived:
            answers = _reads(archived)
        assert answers[0] == [(SAMPLE_TRIALS,)] and answers[1] == 2
        assert snapshot(folder) == before
    finally:
        folder.chmod(0o755)


_MOUNTED_READS = """
import sys, warehouse
with warehouse.open(sys.argv[1]) as wh:
    print(wh.sql("SELECT count(*) FROM trials").rows[0][0], wh.query("runs").to_arrow().num_rows,
          len(wh.search("error", limit=5)))
"""


@pytest.mark.parametrize("mode", ["wal", "rollback"])
def test_reads_answer_from_a_read_only_mount(wh, backend, mode, readonly_mounts, tmp_path):  # noqa: F811
    if backend != "sqlite":
        pytest.skip("a SQLite file")
    source, view = tmp_path / "archive", tmp_path / "view"
    source.mkdir()
    view.mkdir()
    wh.close()
    shutil.copy2(wh.url.database, source / "warehouse.db")
    if mode == "rollback":
        conn = sqlite3.connect(source / "warehouse.db")
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.close()
    before = snapshot(source)
    done = subprocess.run([*_UNSHARE, "sh", "-c", _READONLY_VIEW, "sh", str(source), str(view),
                           sys.executable, "-c", _MOUNTED_READS, str(view / "warehouse.db")],
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(SAMPLE_TRIALS), "2", "5"]
    assert snapshot(source) == before


def test_errors_are_one_line_warehouse_errors(tmp_path):
    with pytest.raises(warehouse.WarehouseError, match="unsupported database 'postgresql\\+asyncpg'"):
        warehouse.open("postgresql+asyncpg://u@localhost/db")
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()
    with pytest.raises(warehouse.WarehouseError, match="holds tables but no warehouse schema version"):
        warehouse.open(foreign).query("runs")
    not_sqlite = tmp_path / "notes.txt"
    not_sqlite.write_text("hello " * 1000)
    with pytest.raises(warehouse.WarehouseError, match="is not a SQLite database"):
        warehouse.open(not_sqlite).sql("SELECT 1")
    nobody = warehouse.open("postgresql://nobody@127.0.0.1:1/none")  # nothing listens on port 1
    with pytest.raises(warehouse.WarehouseError) as caught:
        nobody.query("runs")
    assert "\n" not in str(caught.value) and "127.0.0.1" in str(caught.value)
    assert repr(nobody) == "Warehouse('postgresql+psycopg://nobody@127.0.0.1:1/none')"


def test_close_lets_go_and_the_warehouse_still_answers(wh):
    wh.query("runs")
    wh.close()
    assert wh._read_engine is None and wh._write_engine is None
    assert len(wh.query("runs")) == 2  # opened again when needed


def test_import_warehouse_stays_cheap():
    done = subprocess.run([sys.executable, "-c", "import sys, warehouse; print(sorted(m for m in "
                           "('sqlalchemy', 'pyarrow', 'pandas', 'warehouse.api', 'ingest.pipeline') "
                           "if m in sys.modules)); print(warehouse.open.__module__)"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "warehouse.api"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        warehouse.nope  # noqa: B018


def test_the_readme_example_runs(tmp_path):
    """README's "Python API" example, as written, in a folder holding examples/sample."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    example = readme.split("## Python API", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    shutil.copytree(SAMPLE, tmp_path / "examples" / "sample")
    env = {k: v for k, v in os.environ.items() if k != "WAREHOUSE_DB"}
    done = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True,
                          timeout=180, env={**env, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"1 {SAMPLE_EPISODES} warehouse.db"
    assert lines[1].startswith("['model', 'trials', 'successes', 'pass_rate'")
    with warehouse.open(tmp_path / "warehouse.db") as wh:
        expected = wh.sql("SELECT r.run_key, count(*) FROM trials t JOIN runs r ON r.id = t.run_id "
                          "WHERE t.reward >= 1 GROUP BY r.run_key ORDER BY 1").rows
    assert lines[2:] == [f"{run_key} {n}" for run_key, n in expected]


# Every argument of every public call, given a value of the wrong type or out of range: a
# UsageError (a WarehouseError) in one line naming the argument, still a TypeError or a
# ValueError for code written against the built-in errors. Nothing is opened first.
MISUSES = [
    (lambda wh: warehouse.open(5), TypeError, "db must be a str or a path"),
    (lambda wh: warehouse.open(b"w.db"), TypeError, "db must be a str or a path"),
    (lambda wh: wh.ingest(5), TypeError, "sources must be a path or a list of paths"),
    (lambda wh: wh.ingest(None), TypeError, "sources must be"),
    (lambda wh: wh.ingest([5]), TypeError, "each of sources"),
    (lambda wh: wh.ingest([], run=5), TypeError, "run must be a str"),
    (lambda wh: wh.ingest([], label=5), TypeError, "label must be"),
    (lambda wh: wh.ingest([], label=[5]), TypeError, "each label must be a str"),
    (lambda wh: wh.ingest([], label={1: 2}), TypeError, "each key of label"),
    (lambda wh: wh.ingest([], keep_going="yes"), TypeError, "keep_going must be True or False"),
    (lambda wh: wh.ingest([], progress=5), TypeError, "progress must implement ingest.report.Progress"),
    (lambda wh: wh.ingest([], warn=5), TypeError, "warn must be callable"),
    (lambda wh: wh.query(5), TypeError, "the query's name must be a str"),
    (lambda wh: wh.query("runs", run=5), TypeError, "run must be a str or a list of str"),
    (lambda wh: wh.query("runs", task=[5]), TypeError, "each of task"),
    (lambda wh: wh.query("runs", model=3.5), TypeError, "model must be"),
    (lambda wh: wh.query("runs", agent=[None]), TypeError, "each of agent"),
    (lambda wh: wh.query("runs", label=5), TypeError, "label must be"),
    (lambda wh: wh.query("pass-rate", threshold="x"), TypeError, "--threshold must be a float"),
    (lambda wh: wh.sql(5), TypeError, "the SQL must be a str"),
    (lambda wh: wh.sql(b"SELECT 1"), TypeError, "the SQL must be a str"),
    (lambda wh: wh.sql("SELECT :a", [1]), TypeError, "params must be a dict"),
    (lambda wh: wh.sql("SELECT 1", max_rows="x"), TypeError, "max_rows must be an int"),
    (lambda wh: wh.sql("SELECT 1", max_rows=1.5), TypeError, "max_rows must be an int"),
    (lambda wh: wh.sql("SELECT 1", max_rows=-1), ValueError, "max_rows must be from 0"),
    (lambda wh: wh.sql_stream("SELECT 1", max_value_bytes="x").__enter__(), TypeError, "max_value_bytes must be an int"),
    (lambda wh: wh.search(5), TypeError, "the search text must be a str"),
    (lambda wh: wh.search("a", limit="x"), TypeError, "limit must be an int"),
    (lambda wh: wh.search("a", limit=0), ValueError, "limit must be from 1"),
    (lambda wh: wh.search("a", run=5), TypeError, "run must be a str"),
    (lambda wh: wh.search("a", role=5), TypeError, "role must be a str"),
    (lambda wh: wh.show(None), TypeError, "trial must be a str or an int"),
    (lambda wh: wh.show(1.5), TypeError, "trial must be a str or an int"),
    (lambda wh: wh.show(10**30), ValueError, "trial must be from 0"),
    (lambda wh: wh.show("x", episode="1"), TypeError, "episode must be an int"),
    (lambda wh: wh.show("x", all_episodes="yes"), TypeError, "all_episodes must be True or False"),
    (lambda wh: wh.lake_sync(5), TypeError, "out must be a str or a path"),
    (lambda wh: wh.lake_sync("lake", full="yes"), TypeError, "full must be True or False"),
]


@pytest.mark.parametrize("call,builtin,says", MISUSES, ids=[says for _, _, says in MISUSES])
def test_every_misuse_is_a_one_line_warehouse_error(call, builtin, says, db_url):
    from warehouse.errors import UsageError

    with warehouse.open(db_url) as opened:
        with pytest.raises(UsageError) as raised:
            call(opened)
    assert isinstance(raised.value, (warehouse.WarehouseError, builtin))
    assert isinstance(raised.value, builtin) and says in str(raised.value)
    assert len(str(raised.value).splitlines()) == 1


def test_an_int_the_database_cannot_hold_is_a_usage_error(wh, backend):
    from warehouse.errors import ArgumentValueError

    if backend == "sqlite":  # 64-bit integers only
        with pytest.raises(ArgumentValueError, match="does not fit the database's integers"):
            wh.sql("SELECT :a AS a", a=10**30)
    else:  # sent as a numeric
        assert int(wh.sql("SELECT :a AS a", a=10**30).rows[0][0]) == 10**30
