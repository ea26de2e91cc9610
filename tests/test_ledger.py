"""The load ledger, readable: `warehouse sources` and `warehouse loads [SOURCE]` (the canned
queries `sources` and `loads`), checked against the ledger's tables counted independently, on
a real SQLite file and a real PostgreSQL database."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import text

from helpers import hub_row, write_shard
from procs import run_cli
from warehouse.db.schema import head_revision
from warehouse.version import __version__

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "sample"
JOB = ROOT / "tests" / "fixtures" / "harbor" / "jobs" / "pinchbench-147-kimi2.6"
JOB_RUN = "6a29732a-c34a-4f7e-85bd-ee65fb2d2604"


def cli_json(db_url: str, *args: str) -> list[dict]:
    done = run_cli(db_url, *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def loaded(db_url, tmp_path) -> str:
    """Three sources: the sample (one shard, two runs), a trace job (two trial folders), and a
    shard whose middle row is rejected (--keep-going)."""
    shutil.copytree(JOB, tmp_path / JOB.name)
    odd = tmp_path / "odd"
    rows = [hub_row(f"odd__r{i}", 0, [("user", f"q {i}"), ("assistant", f"a {i}")]) for i in range(3)]
    rows[1] = dict(hub_row("odd__bad", 0, [("user", "bad")]), episode="final")
    write_shard(odd / "data" / "train-00000-of-00001.parquet", rows)
    for source, *flags in ((SAMPLE,), (tmp_path / JOB.name,), (odd, "--keep-going")):
        done = run_cli(db_url, "ingest", str(source), *flags)
        assert done.returncode == 0, done.stderr
    return db_url


def test_sources_counts_what_each_source_brought(loaded, engine):
    listed = {row["source"]: row for row in cli_json(loaded, "sources")}
    assert sorted(listed) == ["odd", "pinchbench-147-kimi2.6", "sample"]
    with engine.connect() as conn:
        for name, row in listed.items():
            source_id = conn.execute(text("SELECT id FROM sources WHERE name = :n"), {"n": name}).scalar()
            units, rows, rejected, conflicts = conn.execute(text(
                "SELECT count(*), sum(n_rows), sum(n_rejected), sum(n_conflicts) FROM loads WHERE source_id = :s"),
                {"s": source_id}).one()
            trials, runs = conn.execute(text(
                "SELECT count(DISTINCT t.id), count(DISTINCT t.run_id) FROM loads l "
                "JOIN trial_loads tl ON tl.load_id = l.id JOIN trials t ON t.id = tl.trial_id WHERE l.source_id = :s"),
                {"s": source_id}).one()
            assert (row["units"], row["rows"], row["rows_rejected"], row["conflicts"], row["trials"], row["runs"]) == (
                units, rows, rejected, conflicts, trials, runs), name
            assert row["first_load"] <= row["last_load"] and row["first_load"].endswith("+00:00")
    assert (listed["sample"]["trials"], listed["sample"]["runs"]) == (36, 2)
    assert (listed["pinchbench-147-kimi2.6"]["units"], listed["pinchbench-147-kimi2.6"]["kind"]) == (2, "traces")
    assert (listed["odd"]["rows"], listed["odd"]["rows_rejected"]) == (2, 1)  # rows: those stored
    # `warehouse sources` is `warehouse query sources`.
    assert cli_json(loaded, "query", "sources") == list(listed.values())


def test_the_filters_keep_the_sources_that_brought_what_they_keep(loaded):
    assert [row["source"] for row in cli_json(loaded, "sources", "--run", JOB_RUN)] == ["pinchbench-147-kimi2.6"]
    tasks = cli_json(loaded, "sources", "--task", "odd")
    assert [(row["source"], row["trials"]) for row in tasks] == [("odd", 2)]


def test_loads_lists_each_unit_with_the_code_that_loaded_it(loaded, engine):
    loads = cli_json(loaded, "loads")
    with engine.connect() as conn:
        ledger = conn.execute(text("SELECT id, unit, content_hash, n_rows, n_trials FROM loads ORDER BY id")).all()
    assert [(r["load_id"], r["unit"], r["content_hash"], r["rows"], r["trials"]) for r in loads] == [tuple(r) for r in ledger]
    assert {(r["tool_version"], r["schema_revision"], r["status"]) for r in loads} == {(__version__, head_revision(), "loaded")}
    assert all(r["seconds"] >= 0 for r in loads)
    job = cli_json(loaded, "loads", "pinchbench-147-kimi2.6")
    assert sorted(r["unit"] for r in job) == ["task-calendar__8A83BnJ", "task-session-chain-analysis__UGpJKzs"]
    # By its URI too.
    assert cli_json(loaded, "loads", str(SAMPLE)) == [r for r in loads if r["source"] == "sample"]


def test_an_unknown_source_is_one_line(loaded):
    done = run_cli(loaded, "loads", "nope")
    assert done.returncode == 1 and done.stderr == "Error: no source 'nope' (`warehouse sources` lists them)\n"


def test_an_empty_warehouse_has_an_empty_ledger(db_url):
    assert cli_json(db_url, "sources") == [] and cli_json(db_url, "loads") == []


def test_loads_finds_each_loads_links_by_their_index_however_many_came_before(engine):
    """A load's links (trial_loads) lie together, in the order the loads wrote them. Asked for by
    `load_id = l.id`, PostgreSQL expected them spread evenly and scanned the table from its start
    for each load's first: past every earlier load's links, a cost of loads × links (math×20: 133
    ms for 16 loads; this test's 16 loads of 20,000 links were planned so). The query must take
    the index on load_id, on both backends."""
    loads, per_load = 16, 20_000
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO sources (id, kind, uri, name) VALUES (1, 'parquet', '/s', 's')"))
        conn.execute(text("INSERT INTO runs (id, run_key) VALUES (1, 'r')"))
        conn.execute(text(
            "INSERT INTO loads (id, source_id, unit, content_hash, status, started_at, finished_at, tool_version, "
            "n_rows, n_trials, n_episodes_new, n_episodes_duplicate, n_conflicts, n_rejected, n_turns, n_bytes) "
            "SELECT i, 1, 'u' || CAST(i AS TEXT), 'h', 'loaded', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 'v', "
            "0, 0, 0, 0, 0, 0, 0, 0 FROM (" + _numbers(loads) + ") n"))
        conn.execute(text("INSERT INTO trials (id, run_id, trial_name, status) "
                          "SELECT i, 1, 't' || CAST(i AS TEXT), 'completed' FROM (" + _numbers(loads * per_load) + ") n"))
        conn.execute(text("INSERT INTO trial_loads (trial_id, load_id) "
                          f"SELECT i, (i - 1) / {per_load} + 1 FROM (" + _numbers(loads * per_load) + ") n"))
        conn.execute(text("ANALYZE"))
    from warehouse.filters import Filters
    from warehouse.queries.catalog import QUERIES
    from warehouse.queries.registry import narrow

    query = QUERIES["loads"]
    sql, binds = narrow(query.plan(query.values({}), True, Filters())[0], query.filter_slots, Filters(), None)
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            plan = [line for (line,) in conn.execute(text("EXPLAIN " + sql), {"source": None, **binds})]
            assert not [line for line in plan if "Seq Scan on trial_loads" in line], "\n".join(plan)
            assert [line for line in plan if "ix_trial_loads_load_id" in line], "\n".join(plan)
        else:
            plan = [row[-1] for row in conn.execute(text("EXPLAIN QUERY PLAN " + sql), {"source": None, **binds})]
            assert [p for p in plan if p.startswith("SEARCH tl USING")] and not [p for p in plan if p.startswith("SCAN tl")]
        listed = conn.execute(text(sql), {"source": None, **binds}).all()
    assert [row[0] for row in listed] == list(range(1, loads + 1))


def _numbers(n: int) -> str:
    """1..n as rows of one column `i`, in SQL both backends run."""
    return f"WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {n}) SELECT i FROM c"


def test_a_source_none_of_whose_units_loads_is_not_recorded(db_url, engine, tmp_path):
    """A mistyped or corrupt file, a folder whose one trial is broken: the ingest fails in one
    line and the ledger gains no source (its row is written with its first unit that loads). A
    source with a bad shard and a good one is recorded once, by the good one."""
    (tmp_path / "bad.parquet").write_bytes(b"")
    (tmp_path / "bad.jsonl").write_text("not json\n")
    trial = tmp_path / "broken-trial"
    trial.mkdir()
    (trial / "result.json").write_text("")
    for source in ("bad.parquet", "bad.jsonl", "broken-trial"):
        done = run_cli(db_url, "ingest", str(tmp_path / source))
        assert done.returncode == 1 and str(tmp_path / source) in done.stderr.splitlines()[0], done.stderr
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sources")).scalar() == 0
    assert cli_json(db_url, "sources") == []
    mixed = tmp_path / "mixed" / "data"
    (mixed / "train-00000-of-00002.parquet").parent.mkdir(parents=True)
    (mixed / "train-00000-of-00002.parquet").write_bytes(b"PAR1 not really")
    write_shard(mixed / "train-00001-of-00002.parquet", [hub_row("m__1", 0, [("user", "q"), ("assistant", "a")])])
    done = run_cli(db_url, "ingest", str(tmp_path / "mixed"), "--keep-going")
    assert "1 loaded" in done.stderr and "1 failed" in done.stderr, done.stderr
    [source] = cli_json(db_url, "sources")
    assert (source["source"], source["units"], source["trials"]) == ("mixed", 1, 1)
