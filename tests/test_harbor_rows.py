"""`export hub` of trace directories writes the rows Harbor's own exporter writes, option by
option: compared with Parquet files that `harbor traces export`'s code wrote from the same trial
directories (fixtures/harbor/golden/export/), schema and `huggingface` metadata included, and
concatenated with them by pyarrow; on both backends."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harbor_jobs import FIXTURES, build_job
from ingest.pipeline import ingest
from query_fixture import cli
from warehouse.export import export_hub
from warehouse.harbor_rows import Columns
from warehouse.selection import Pick

GOLDEN = FIXTURES / "golden" / "export"
PINCHBENCH = FIXTURES / "jobs" / "pinchbench-147-kimi2.6"
MULTI_STEP = PINCHBENCH / "task-session-chain-analysis__UGpJKzs"

# golden file: (the job it was written from, Harbor's options as export_hub takes them)
CASES = {
    "summaries": ("built", Pick(), Columns()),
    "summaries-last-instruction-verifier": ("built", Pick(episodes="last"), Columns(instruction=True, verifier_output=True)),
    "summaries-no-subagents-verifier": ("built", Pick(subagents=False), Columns(verifier_output=True)),
    "pinchbench-instruction-verifier": ("pinchbench", Pick(), Columns(instruction=True, verifier_output=True)),
    "pinchbench-last": ("pinchbench", Pick(episodes="last"), Columns()),
}


def _job(which: str, tmp_path: Path) -> Path:
    return build_job(tmp_path / "built") if which == "built" else PINCHBENCH


@pytest.mark.parametrize("golden", list(CASES))
def test_rows_schema_and_order_are_harbors(engine, tmp_path, golden):
    which, pick, columns = CASES[golden]
    job = _job(which, tmp_path)
    assert ingest(engine, [str(job)]).errors == []
    info = export_hub(engine, tmp_path / "out", sources=[str(job)], pick=pick, columns=columns)
    ours = pq.read_table(info.files[0])
    harbors = pq.read_table(GOLDEN / f"{golden}.parquet")
    # Harbor's columns in Harbor's order and types, with the metadata `datasets` writes.
    assert ours.schema.equals(harbors.schema, check_metadata=True), (ours.schema, harbors.schema)
    # The same rows in the same order: main rows (each step's own, no step marker), then the
    # subagent kinds.
    assert ours.to_pylist() == harbors.to_pylist()
    both = pa.concat_tables([ours, harbors])
    assert both.num_rows == 2 * harbors.num_rows


def test_each_step_has_its_own_instruction_and_verifier_output(engine, tmp_path):
    assert ingest(engine, [str(PINCHBENCH)]).errors == []
    info = export_hub(engine, tmp_path / "out", sources=[str(PINCHBENCH)],
                      columns=Columns(instruction=True, verifier_output=True))
    rows = [r for r in pq.read_table(info.files[0]).to_pylist() if r["trial_name"] == MULTI_STEP.name]
    assert "trace_source" not in rows[0]  # no step marker, no subagent: no such column
    by_step: dict[str, list[dict]] = {}
    for step in ("fixed-design", "final-summary"):  # the steps with a trajectory, in step_results order
        trajectory = json.loads((MULTI_STEP / "steps" / step / "agent" / "trajectory.json").read_text())
        instruction = next(s["message"].strip() for s in trajectory["steps"] if (s.get("message") or "").strip())
        by_step[step] = [r for r in rows if r["instruction"] == instruction]
        verifier = (MULTI_STEP / "steps" / step / "verifier" / "test-stdout.txt").read_text()
        assert {r["verifier_output"] for r in by_step[step]} == {verifier}
        # Episodes counted within the step.
        assert [r["episode"] for r in by_step[step]] == [f"episode-{i}" for i in range(len(by_step[step]))]
    assert [len(v) for v in by_step.values()] == [20, 1] and len(rows) == 21
    assert rows == by_step["fixed-design"] + by_step["final-summary"]


def test_a_harbor_export_loaded_alone_gives_one_last_row_per_step(engine, tmp_path):
    # Harbor's own --episodes all shard as a Hub dataset: its steps carry no marker.
    shard = tmp_path / "hub" / "train-00000-of-00001.parquet"
    shard.parent.mkdir()
    shutil.copy(GOLDEN / "pinchbench-instruction-verifier.parquet", shard)
    assert ingest(engine, [str(shard.parent)]).errors == []
    info = export_hub(engine, tmp_path / "out", pick=Pick(episodes="last"))
    key = lambda r: (r["trial_name"], r["episode"], json.dumps(r["conversations"]))  # noqa: E731
    got = sorted(map(key, pq.read_table(info.files[0]).to_pylist()))
    # Harbor's --episodes last rows: one per step (and one for the single-step trial).
    assert got == sorted(map(key, pq.read_table(GOLDEN / "pinchbench-last.parquet").to_pylist()))
    assert len(got) == 3


@pytest.mark.parametrize("trace_first", [False, True], ids=["alone", "after-its-trace-directory"])
def test_harbors_export_with_metadata_comes_back_exactly_and_agrees_with_its_trace(engine, tmp_path, trace_first):
    """Harbor's export of a multi-step trial with each step's own instruction and verifier output:
    loaded alone or after its trace directory, no conflict, and `export hub --source` gives back
    every row as it was."""
    shard = tmp_path / "hub" / "data" / "train-00000-of-00001.parquet"
    shard.parent.mkdir(parents=True)
    shutil.copy(GOLDEN / "pinchbench-instruction-verifier.parquet", shard)
    if trace_first:
        assert ingest(engine, [str(PINCHBENCH)]).errors == []
    summary = ingest(engine, [str(shard.parents[1])])
    assert (summary.errors, summary.conflicts, summary.trial_conflicts, summary.notes) == ([], 0, 0, [])
    info = export_hub(engine, tmp_path / "out", sources=[str(shard.parents[1])])
    assert pq.read_table(info.files[0]).to_pylist() == pq.read_table(shard).to_pylist()


def test_a_running_trial_is_not_written_and_the_export_says_so(engine, tmp_path):
    job = build_job(tmp_path / "built")
    assert ingest(engine, [str(job)]).errors == []
    info = export_hub(engine, tmp_path / "out", sources=[str(job)])
    assert "zz-running__4444444" not in {r["trial_name"] for r in pq.read_table(info.files[0]).to_pylist()}
    assert any("1 trial without result.json" in note for note in info.notes)


def test_cli_takes_harbors_options(engine, db_url, tmp_path):
    job = build_job(tmp_path / "built")
    assert ingest(engine, [str(job)]).errors == []
    out = tmp_path / "out"
    done = cli(db_url, "export", "hub", str(out), "--source", str(job), "--episodes", "last",
               "--instruction-metadata", "--verifier-metadata")
    assert done.returncode == 0, done.stderr
    harbors = pq.read_table(GOLDEN / "summaries-last-instruction-verifier.parquet")
    assert pq.read_table(out / "data" / "train-00000-of-00001.parquet").equals(harbors)
    done = cli(db_url, "export", "hub", str(tmp_path / "main"), "--source", str(job), "--no-subagents")
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(tmp_path / "main" / "data" / "train-00000-of-00001.parquet").to_pylist()
    assert len(rows) == 10 and "trace_source" not in rows[0] and "verifier_output" not in rows[0]
