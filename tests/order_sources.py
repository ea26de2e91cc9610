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
import pyarrow.parquet as pq

from warehouse.db import schema
from warehouse.db.engine import make_engine, resolve_url
from warehouse.export import export_hub

FIXTURES = Path(__file__).parent / "fixtures" / "harbor"
SUMMARY_REF = [{"trajectory_path": "trajectory.summarization-1-summary.json", "session_id": "s1"}]
SUBAGENT = "summarization-1-summary"


def _write(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")


def _agent(step_id: int, message: str, observation: dict | None) -> dict:
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
    _write(trial / "config.json", config)
    _write(trial / "result.json", {
        "task_name": "demo/keep", "trial_name": trial.name, "config": config,
        "agent_info": {"name": "terminus-2", "model_info": {"name": "gpt-4o", "provider": "openai"}},
        "verifier_result": {"rewards": {"reward": 1.0}}, "started_at": "2026-02-01T10:00:00Z"})
    main = {"schema_version": "ATIF-v1.7", "session_id": "s1", "agent": {"name": "terminus-2", "version": "2"},
            "continued_trajectory_ref": "trajectory.cont-1.json", "steps": [
                {"step_id": 1, "source": "user", "message": "Do the task"},
                _agent(2, "first", {"results": [{"source_call_id": "c2", "content": "out-2"}]}),
                {"step_id": 3, "source": "system", "message": "Performed context summarization",
                 "observation": {"results": [{"subagent_trajectory_ref": SUMMARY_REF}]}},
                _agent(4, "second", {"results": [{"source_call_id": "c4", "subagent_trajectory_ref": SUMMARY_REF}]}),
                _agent(5, "third", {"results": [{"source_call_id": "c5", "content": "FINAL-OBSERVATION"}]}),
            ]}
    cont = {"schema_version": "ATIF-v1.7", "session_id": "s1", "agent": {"name": "terminus-2", "version": "2"},
            "steps": [{"step_id": 1, "source": "user", "message": "Do the task", "is_copied_context": True},
                      _agent(2, "fourth", {"results": [{"source_call_id": "c2", "content": "CONT-FINAL"}]})]}
    _write(trial / "agent" / "trajectory.json", main)
    _write(trial / "agent" / "trajectory.cont-1.json", cont)
    _write(trial / "agent" / f"trajectory.{SUBAGENT}.json", {
        "schema_version": "ATIF-v1.7", "session_id": "s1",
        "agent": {"name": "terminus-2-summarization", "version": "2"},
        "steps": [{"step_id": 1, "source": "user", "message": "Summarize"}, _agent(2, "summary", None)]})
    return trial


def _harbor_rows(rows: list[dict]) -> list[dict]:
    """Our export's rows as Harbor writes them: a step is a trial of its own (its rows and its
    subagents' carry the step's name nowhere)."""
    out = []
    for row in rows:
        row = dict(row)
        source = row.get("trace_source") or "main"
        step, _, kind = source.partition("/")
        if step.startswith("step:"):
            row["trace_source"] = kind or "main"
        row["_step"] = step if step.startswith("step:") else ""
        out.append(row)
    return out


def _shard(path: Path, rows: list[dict], columns: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([{c: r[c] for c in columns} for r in rows]), path)


def make_sources(tmp_path: Path) -> dict[str, Path]:
    """{name: path} of the trace root and the Hub datasets made from it (see the module)."""
    traces = tmp_path / "traces"
    shutil.copytree(FIXTURES / "jobs", traces)
    subagent_trial(traces / "summarized-job")
    maker = make_engine(resolve_url(f"sqlite:///{tmp_path / 'maker.db'}"))
    schema.upgrade(maker)
    from ingest.pipeline import ingest
    assert ingest(maker, [str(traces)]).errors == []
    export_hub(maker, tmp_path / "maker-export")
    maker.dispose()
    table = pq.read_table(next((tmp_path / "maker-export").rglob("*.parquet")))
    rows = _harbor_rows(table.to_pylist())
    columns = [c for c in table.column_names]
    sources = {"traces": traces}

    def dataset(name: str, shards: dict[str, list[dict]], cols: list[str] | None = None) -> None:
        root = tmp_path / "hub" / name
        for shard, shard_rows in shards.items():
            _shard(root / "data" / shard, shard_rows, cols or columns)
        sources[name] = root

    dataset("all", {"train-00000-of-00001.parquet": rows})
    steps = sorted({r["_step"] for r in rows})
    dataset("steps", {f"train-{i:05d}.parquet": [r for r in rows if r["_step"] == step]
                      for i, step in enumerate(steps)})
    last: dict[tuple, dict] = {}
    for row in rows:
        key = (row["trial_name"], row["_step"], row["trace_source"])
        index = int(row["episode"].removeprefix("episode-"))
        if key not in last or index > int(last[key]["episode"].removeprefix("episode-")):
            last[key] = row
    dataset("last", {"train-00000-of-00001.parquet": [r for r in rows if last.get(
        (r["trial_name"], r["_step"], r["trace_source"])) is r]})
    dataset("solved", {"train-00000-of-00001.parquet": [
        r for r in rows if r["result"] is not None and _positive(r["result"])]})
    dataset(SUBAGENT, {"train-00000-of-00001.parquet": [r for r in rows if r["trace_source"] == SUBAGENT]},
            [c for c in columns if c != "trace_source"])
    meta = [dict(r, instruction=r["conversations"][0]["content"].strip(),
                 verifier_output=f"tests of {r['_step'] or 'the trial'} of {r['trial_name']}\n") for r in rows]
    dataset("meta", {"train-00000-of-00001.parquet": meta},
            [*(c for c in columns if c not in ("instruction", "verifier_output")), "instruction", "verifier_output"])
    regraded = [dict(r, result="0.0") if r["trial_name"] == "keep__1234567" else r
                for r in rows if last.get((r["trial_name"], r["_step"], r["trace_source"])) is r]
    dataset("regraded", {"train-00000-of-00001.parquet": regraded})
    return sources


def _positive(result: str) -> bool:
    try:
        return float(result) > 0
    except ValueError:
        return False
