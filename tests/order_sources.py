"""One set of sources of the same trials in every shape teams load them: the trace directories,
and what `harbor traces export` makes of them with its options (harbor-formats.md §4).

The trace root holds the real fixture job (a single-step trial and a four-step trial) and a
trial with a context-summarization subagent and a continuation file. The Hub datasets are made
from a warehouse that loaded only the trace root, shaped as Harbor writes them:

- `all`: `--episodes all`, subagents merged (a `trace_source` column: "main" or the subagent's
  kind; a step of a multi-step trial is a trial of its own to Harbor, so its rows are "main"
  episode-0… again, under the same trial_name);
- `steps`: the same rows, one shard per step (a dataset split across units);
- `last`: `--episodes last`: each trajectory's last episode, subagent rows whatever the option;
- `solved`: `--filter success`, the trials whose result is above 0;
- `summary`: the per-subagent dataset (`merge_subagents=False`): the subagent's rows alone, with
  no `trace_source` column, always episode-0;
- `meta`: `--instruction-metadata --verifier-metadata`: each step's rows with the step's own
  instruction and verifier output (they differ within the multi-step trial);
- `regraded`: a dataset that disagrees: the last rows with another result for one trial.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from warehouse.db import schema
from warehouse.db.engine import make_engine, resolve_url
from warehouse.export import export_hub
from warehouse.harbor_rows import Columns
from warehouse.selection import Pick

FIXTURES = Path(__file__).parent / "fixtures" / "harbor"
SUMMARY_REF = [{"trajectory_path": "trajectory.summarization-1-summary.json", "session_id": "s1"}]
SUBAGENT = "summarization-1-summary"


def write_json(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")


def agent_step(step_id: int, message: str, observation: dict | None) -> dict:
    step = {"step_id": step_id, "source": "agent", "message": message,
            "tool_calls": [{"tool_call_id": f"c{step_id}", "function_name": "bash", "arguments": {"cmd": "ls"}}],
            "metrics": {"prompt_tokens": 10 * step_id, "completion_tokens": step_id}}
    if observation is not None:
        step["observation"] = observation
    return step


def subagent_trial(job: Path) -> Path:
    """A finished trial with a summarization subagent, a continuation file and an observation
    no exported row carries."""
    trial = job / "keep__1234567"
    config = {"trial_name": trial.name, "job_id": "0b1c2d3e-0000-4000-8000-0000000000f1",
              "agent": {"name": "terminus-2", "model_name": "openai/gpt-4o"}}
    write_json(trial / "config.json", config)
    write_json(trial / "result.json", {
        "task_name": "demo/keep", "trial_name": trial.name, "config": config,
        "agent_info": {"name": "terminus-2", "model_info": {"name": "gpt-4o", "provider": "openai"}},
        "verifier_result": {"rewards": {"reward": 1.0}}, "started_at": "2026-02-01T10:00:00Z"})
    main = {"schema_version": "ATIF-v1.7", "session_id": "s1", "agent": {"name": "terminus-2", "version": "2"},
            "continued_trajectory_ref": "trajectory.cont-1.json", "steps": [
                {"step_id": 1, "source": "user", "message": "Do the task"},
                agent_step(2, "first", {"results": [{"source_call_id": "c2", "content": "out-2"}]}),
                {"step_id": 3, "source": "system", "message": "Performed context summarization",
                 "observation": {"results": [{"subagent_trajectory_ref": SUMMARY_REF}]}},
                agent_step(4, "second", {"results": [{"source_call_id": "c4", "subagent_trajectory_ref": SUMMARY_REF}]}),
                agent_step(5, "third", {"results": [{"source_call_id": "c5", "content": "FINAL-OBSERVATION"}]}),
            ]}
    cont = {"schema_version": "ATIF-v1.7", "session_id": "s1", "agent": {"name": "terminus-2", "version": "2"},
            "steps": [{"step_id": 1, "source": "user", "message": "Do the task", "is_copied_context": True},
                      agent_step(2, "fourth", {"results": [{"source_call_id": "c2", "content": "CONT-FINAL"}]})]}
    write_json(trial / "agent" / "trajectory.json", main)
    write_json(trial / "agent" / "trajectory.cont-1.json", cont)
    write_json(trial / "agent" / f"trajectory.{SUBAGENT}.json", {
        "schema_version": "ATIF-v1.7", "session_id": "s1",
        "agent": {"name": "terminus-2-summarization", "version": "2"},
        "steps": [{"step_id": 1, "source": "user", "message": "Summarize"}, agent_step(2, "summary", None)]})
    return trial


def _shard(path: Path, table: pa.Table) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def _steps(rows: list[dict]) -> list[int]:
    """Each row's step within its trial: Harbor writes a multi-step trial's steps one after the
    other, each from episode-0 again (a subagent's rows count as its trial's first step)."""
    step: dict[str, int] = {}
    last: dict[str, int] = {}
    out = []
    for row in rows:
        name, index = row["trial_name"], int(row["episode"].removeprefix("episode-"))
        if (row.get("trace_source") or "main") == "main":
            if name in last and index <= last[name]:
                step[name] = step.get(name, 0) + 1
            last[name] = index
            out.append(step.get(name, 0))
        else:
            out.append(0)
    return out


def make_sources(tmp_path: Path) -> dict[str, Path]:
    """{name: path} of the trace root and the Hub datasets made from it (see the module)."""
    traces = tmp_path / "traces"
    shutil.copytree(FIXTURES / "jobs", traces)
    subagent_trial(traces / "summarized-job")
    maker = make_engine(resolve_url(f"sqlite:///{tmp_path / 'maker.db'}"))
    schema.upgrade(maker)
    from ingest.pipeline import ingest
    assert ingest(maker, [str(traces)]).errors == []
    sources = {"traces": traces}
    (tmp_path / "made").mkdir()

    def export(name: str, **options) -> pa.Table:
        info = export_hub(maker, tmp_path / "made" / name, **options)
        return pa.concat_tables([pq.read_table(f) for f in info.files])

    def dataset(name: str, shards: dict[str, pa.Table]) -> None:
        for shard, table in shards.items():
            _shard(tmp_path / "hub" / name / "data" / shard, table)
        sources[name] = tmp_path / "hub" / name

    one = "train-00000-of-00001.parquet"
    everything = export("all")
    dataset("all", {one: everything})
    steps = _steps(everything.to_pylist())
    dataset("steps", {f"train-{i:05d}.parquet": everything.filter(pa.array([s == i for s in steps]))
                      for i in sorted(set(steps))})
    last = export("last", pick=Pick(episodes="last"))
    dataset("last", {one: last})
    dataset("solved", {one: export("solved", pick=Pick(solved=True))})
    subagent = everything.filter(pc.equal(everything["trace_source"], SUBAGENT))
    dataset(SUBAGENT, {one: subagent.drop_columns(["trace_source"])})
    dataset("meta", {one: export("meta", columns=Columns(instruction=True, verifier_output=True))})
    regraded = pc.if_else(pc.equal(last["trial_name"], "keep__1234567"), "0.0", last["result"])
    dataset("regraded", {one: last.set_column(last.schema.get_field_index("result"), "result", regraded)})
    maker.dispose()
    return sources


def _positive(result: str) -> bool:
    try:
        return float(result) > 0
    except ValueError:
        return False
