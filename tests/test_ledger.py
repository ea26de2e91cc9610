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
