"""Harbor's exporter rules: the rows, columns, Arrow schema and row order that `harbor traces
export` writes, which `export hub` follows for every trial read from a trace directory.

They follow Harbor at harbor@eb165d99 (2026-06-17; `src/harbor/utils/traces_utils.py`, last
changed there by harbor@15309cf8 and a65746e5, 2026-06), the ATIF exporter of harbor@b6c9ef26
(2025-12-11) with `result` (2fab1ef6), `instruction` and `verifier_output` (224a0f87),
`tool_definitions` (c573843e) and lenient metadata (a85628c8, 2026-04-20), made into a dataset by
`datasets` 4.5.0 (Harbor's uv.lock), whose Parquet files carry the `huggingface` schema
metadata. What they say, as this module applies it:

- Options (`harbor traces export` flags): `--episodes all|last` and `--subagents/--no-subagents`
  choose episodes (warehouse.selection: `last` keeps the last episode of each main trajectory
  and every subagent row, as Harbor ignores `--episodes` for subagents);
  `--instruction-metadata` and `--verifier-metadata` add the `instruction` and
  `verifier_output` columns (Columns).
- A multi-step trial is, to Harbor's exporter, one trial per `steps/<name>/` (each has `agent/`),
  all with the trial's result.json: the warehouse's `step:<name>` episodes are written as main
  rows (`trace_source` "main", episodes counted within the step) and `step:<name>/<kind>` as
  the subagent kind, each with that step's own instruction (the first non-empty step message of
  its trajectory, stripped) and verifier output (its verifier/test-stdout.txt + test-stderr.txt).
- Row order: every main row first (trial by trial, a trial's steps in their order, episodes in
  order), then each subagent kind in the order it first appears, its rows trial by trial.
  Harbor visits trial directories in the file system's order, which no reader can repeat: the
  warehouse's is load order (a job's trials by name) and, within a multi-step trial, the order
  of its `step_results`.
- Columns, in `Dataset.from_list`'s order (the first row's keys): conversations (a list of
  `{role, content}` structs), agent, model, model_provider, date, task, episode, run_id,
  trial_name, tool_definitions (when the first main row has any), result, instruction,
  verifier_output (when asked for), trace_source (when any subagent row is written: added last
  by the merge).
- Values: the trajectory's agent and model names (a subagent row carries the main agent's),
  "unknown-model" / "unknown-provider" when there is none, the trial name as run_id when the
  trial has no job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
CONVERSATIONS = pa.list_(MESSAGE)
# Every row's keys up to trial_name, in the order Harbor's rows have them.
LEADING = ("agent", "model", "model_provider", "date", "task", "episode", "run_id", "trial_name")
MAIN = "main"
STEP = "step:"



@dataclass(frozen=True)
class Columns:
    """The optional metadata columns: `--instruction-metadata`, `--verifier-metadata`."""

    instruction: bool = False
    verifier_output: bool = False


def is_main_trajectory(trace_source: str) -> bool:
    """Whether an episode of this trace source is a main row (warehouse.summaries.own_trace_sql in Python)."""
    return (trace_source == MAIN or trace_source.startswith(MAIN + "#")
            or (trace_source.startswith(STEP) and "/" not in trace_source))


def step_of(trace_source: str) -> str | None:
    """The step a trace source belongs to (`step:<name>` or `step:<name>/<kind>`), or None."""
    if not trace_source.startswith(STEP):
        return None
    return trace_source[len(STEP):].split("/", 1)[0]


def harbor_trace_source(trace_source: str) -> str:
    """The `trace_source` value Harbor writes: "main" for main rows (no step marker), else the
    subagent kind ("summarization-1-summary"), a step's included."""
    if is_main_trajectory(trace_source):
        return MAIN
    if trace_source.startswith(STEP):
        return trace_source.split("/", 1)[1]
    return trace_source


def columns(*, tool_definitions: bool, columns: Columns, trace_source: bool) -> list[str]:
    names = ["conversations", *LEADING]
    if tool_definitions:
        names.append("tool_definitions")
    names.append("result")
    if columns.instruction:
        names.append("instruction")
    if columns.verifier_output:
        names.append("verifier_output")
    if trace_source:
        names.append("trace_source")
    return names


def schema(*, tool_definitions: pa.DataType | None, columns_: Columns, trace_source: bool) -> pa.Schema:
    """Harbor's Arrow schema for these columns, with the `huggingface` metadata `datasets`
    writes into every Parquet file."""
    types = {"conversations": CONVERSATIONS, "tool_definitions": tool_definitions}
    fields = [pa.field(name, types.get(name) or pa.string())
              for name in columns(tool_definitions=tool_definitions is not None, columns=columns_,
                                  trace_source=trace_source)]
    return with_features(pa.schema(fields))


def with_features(schema: pa.Schema) -> pa.Schema:
    """The schema with the metadata `datasets` gives it: `{"info": {"features": {...}}}`, the
    Features of `datasets` 4.x (`List` for lists, a dict for structs, `Value` with its dtype)."""
    features = {f.name: _feature(f.type) for f in schema}
    return schema.with_metadata({"huggingface": json.dumps({"info": {"features": features}})})


_DTYPES = {"double": "float64", "float": "float32", "halffloat": "float16"}


def _feature(type: pa.DataType) -> dict[str, Any]:
    if pa.types.is_struct(type):
        return {f.name: _feature(f.type) for f in type}
    if pa.types.is_list(type):
        return {"feature": _feature(type.value_type), "_type": "List"}
    if pa.types.is_large_list(type):
        return {"feature": _feature(type.value_type), "_type": "LargeList"}
    return {"dtype": _DTYPES.get(str(type), str(type)), "_type": "Value"}


def tool_definitions(value: Any) -> Any:
    """A trajectory's tool definitions as episodes.extra keeps them: JSON text, which keeps the
    keys' order (loads before 2026-12-01 kept the parsed list)."""
    return json.loads(value) if isinstance(value, str) else value


def row(values: dict[str, Any], extra: dict[str, Any] | None,
        texts_of_step: dict[str, tuple[str | None, str | None]], columns_: Columns) -> dict[str, Any]:
    """Harbor's row for one episode of a trace directory. `values`: the trial's stored values
    (conversations, agent, model, …, instruction, verifier_output) and the episode's key;
    `extra`: the row's own extra (a row that landed on an episode stored under another key is
    written under its own) or the episode's; `texts_of_step`: {step: (instruction,
    verifier_output)}, from the trial's detail (step_texts); `columns_`: the metadata columns
    asked for (the others are left out, also where a Hub shard's schema has them)."""
    extra = extra or {}
    source = extra.get("trace_source", values["trace_source"])
    values["episode"] = extra.get("episode", values["episode"])
    values["trace_source"] = harbor_trace_source(source)
    step = step_of(source)
    if step is not None and step in texts_of_step:
        values["instruction"], values["verifier_output"] = texts_of_step[step]
    values["agent"] = extra.get("agent") or values["agent"]
    values["model"] = extra.get("model") or values["model"] or "unknown-model"
    values["model_provider"] = values["model_provider"] or "unknown-provider"
    values["run_id"] = values["run_id"] or values["trial_name"]
    values["tool_definitions"] = tool_definitions(extra.get("tool_definitions"))
    if not columns_.instruction:
        del values["instruction"]
    if not columns_.verifier_output:
        del values["verifier_output"]
    return values


def kind(trace_source: str, extra: dict[str, Any] | None) -> str | None:
    """The subagent kind a trace directory's row is written under (None: a main row), from the
    row's own key when it has one."""
    source = (extra or {}).get("trace_source", trace_source)
    return None if is_main_trajectory(source) else harbor_trace_source(source)


def step_texts(detail: dict[str, Any] | None) -> dict[str, tuple[str | None, str | None]]:
    """{step name: (instruction, verifier_output)} of a multi-step trial, as the trace reader
    kept them in trials.detail["steps"]."""
    steps = (detail or {}).get("steps") or []
    return {s["name"]: (s.get("instruction"), s.get("verifier_output"))
            for s in steps if isinstance(s, dict) and isinstance(s.get("name"), str)}
