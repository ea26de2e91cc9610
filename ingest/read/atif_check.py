"""Strict ATIF validation, reported rather than enforced: the problems Harbor's pydantic models
(`src/harbor/models/trajectories/*.py`, every model `extra="forbid"`) would raise on a parsed
trajectory, each as {"step", "field", "problem"}, by the rules of the file's `schema_version`
(harbor-formats.md §3):

- v1.0: root {schema_version, session_id (required), agent, steps, notes, final_metrics}; steps
  {step_id, timestamp, source, model_name, reasoning_effort, message, reasoning_content,
  tool_calls, observation, metrics, extra}; observations on agent steps only; metrics
  {prompt_tokens, completion_tokens, cached_tokens, cost_usd, logprobs, extra};
- v1.1 root `extra`; v1.2 observations on system and user steps too; v1.3 metrics
  `completion_token_ids`; v1.4 `prompt_token_ids`; v1.5 agent `tool_definitions`, step
  `is_copied_context`, root `continued_trajectory_ref` (linear history); v1.6 content parts
  (a message or an observation's content may be a list of {type: text|image, ...});
- v1.7: `trajectory_id` (required on an embedded subagent), `subagent_trajectories`,
  `llm_call_count` (0 on an agent step: no metrics and no reasoning_content), `extra` on tool
  calls and observation results, subagent refs by trajectory_id or trajectory_path;
  `session_id` optional.

A version past v1.7 (ATIF-v1.8, v2.0) is checked by v1.7's rules, its unknown fields allowed and
listed once (`Checked.unknown_fields`); a missing `schema_version` is Harbor's default, v1.7.
`step` is the step's index in `steps` (0-based, as in `field`), None for the root; `field` is a
dotted path (`steps[3].tool_calls[0].arguments`). Embedded subagents are checked as trajectories
of their own (`check(sub, embedded=True)`), not as part of their parent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

LATEST = 7  # ATIF-v1.<LATEST>: the newest version whose rules are known

# Each model's fields and the minor version that added each.
_ROOT = {"schema_version": 0, "session_id": 0, "agent": 0, "steps": 0, "notes": 0, "final_metrics": 0,
         "extra": 1, "continued_trajectory_ref": 5, "trajectory_id": 7, "subagent_trajectories": 7}
_AGENT = {"name": 0, "version": 0, "model_name": 0, "extra": 0, "tool_definitions": 5}
_STEP = {"step_id": 0, "timestamp": 0, "source": 0, "model_name": 0, "reasoning_effort": 0, "message": 0,
         "reasoning_content": 0, "tool_calls": 0, "observation": 0, "metrics": 0, "extra": 0,
         "is_copied_context": 5, "llm_call_count": 7}
_TOOL_CALL = {"tool_call_id": 0, "function_name": 0, "arguments": 0, "extra": 7}
_OBSERVATION = {"results": 0}
_RESULT = {"source_call_id": 0, "content": 0, "subagent_trajectory_ref": 0, "extra": 7}
_REF = {"session_id": 0, "trajectory_path": 0, "extra": 0, "trajectory_id": 7}
_METRICS = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0, "cost_usd": 0, "logprobs": 0,
            "extra": 0, "completion_token_ids": 3, "prompt_token_ids": 4}
_FINAL = {"total_prompt_tokens": 0, "total_completion_tokens": 0, "total_cached_tokens": 0,
          "total_cost_usd": 0, "total_steps": 0, "extra": 0}
_PART = {"type": 6, "text": 6, "source": 6}
_IMAGE = {"media_type": 6, "path": 6}

_AGENT_ONLY = ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics")
_SOURCES = ("system", "user", "agent")
_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_VERSION_RE = re.compile(r"ATIF-v(\d+)\.(\d+)")


@dataclass
class Checked:
    """What `check` found: the problems, and for a version later than the rules it knows, that
    version and the fields v1.7 does not have (generic paths: `steps[].foo`)."""

    problems: list[dict[str, Any]] = field(default_factory=list)
    later_version: str | None = None
    unknown_fields: list[str] = field(default_factory=list)


# The step fields of every version: what the reader renders or keeps by name (ingest.read.atif);
# anything else on a step it keeps as the step's unknown fields.
STEP_FIELDS = frozenset(_STEP)
ROOT_FIELDS = frozenset(_ROOT)
OBSERVATION_FIELDS = frozenset(_OBSERVATION)
RESULT_FIELDS = frozenset(_RESULT)


def check(data: dict[str, Any], *, embedded: bool = False) -> Checked:
    """The problems of one parsed trajectory (a JSON object); see the module docstring."""
    return _Checker(data, embedded).run()


def _is_int(value: Any) -> bool:
    # pydantic's lax mode takes a float with no fraction for an int, never a bool
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and value.is_integer())


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_timestamp(value: str) -> bool:
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


class _Checker:
    def __init__(self, data: dict[str, Any], embedded: bool) -> None:
        self.data = data
        self.embedded = embedded
        self.out = Checked()
        self.minor = LATEST
        self.unknown: set[str] = set()

    def run(self) -> Checked:
        self._version()
        self._root()
        if self.out.later_version is not None:
            self.out.unknown_fields = sorted(self.unknown)
        return self.out

    # ---- reporting ----

    def problem(self, step: int | None, path: str, what: str) -> None:
        self.out.problems.append({"step": step, "field": path, "problem": what})

    def fields(self, obj: dict[str, Any], model: dict[str, int], path: str, step: int | None) -> None:
        """Keys the model (at this version) does not have."""
        for key in obj:
            added = model.get(key)
            if added is not None and added <= self.minor:
                continue
            where = f"{path}.{key}" if path else str(key)
            if self.out.later_version is not None and added is None:
                self.unknown.add(re.sub(r"\[\d+\]", "[]", where))
            elif added is None:
                self.problem(step, where, "unknown field")
            else:
                self.problem(step, where, f"not in ATIF-v1.{self.minor} (added in v1.{added})")

    def object(self, parent: dict[str, Any], key: str, path: str, step: int | None, *,
               required: bool = False) -> dict[str, Any] | None:
        """parent[key] when it is an object; a problem when it is missing (and required) or is
        something else; None (JSON null) passes for an optional field."""
        where = f"{path}.{key}" if path else key
        if key not in parent:
            if required:
                self.problem(step, where, "missing")
            return None
        value = parent[key]
        if isinstance(value, dict):
            return value
        if value is not None or required:
            self.problem(step, where, "expected an object")
        return None

    def typed(self, parent: dict[str, Any], key: str, path: str, step: int | None, test, expected: str, *,
              required: bool = False) -> None:
        where = f"{path}.{key}" if path else key
        if key not in parent:
            if required:
                self.problem(step, where, "missing")
        elif parent[key] is None:
            if required:
                self.problem(step, where, f"expected {expected}, got null")
        elif not test(parent[key]):
            self.problem(step, where, f"expected {expected}")

    def string(self, parent, key, path, step, *, required=False) -> None:
        self.typed(parent, key, path, step, lambda v: isinstance(v, str), "a string", required=required)

    def count(self, parent, key, path, step) -> None:
        self.typed(parent, key, path, step, lambda v: _is_int(v) and v >= 0, "an integer ≥ 0")

    def number(self, parent, key, path, step) -> None:
        self.typed(parent, key, path, step, _is_number, "a number")

    def extra(self, parent, path, step) -> None:
        self.object(parent, "extra", path, step)

    def objects(self, value: Any, where: str, step: int | None) -> list[tuple[str, dict[str, Any]]]:
        """A list's objects with their paths (`where[n]`); a problem for a value that is not a
        list and for each item that is not an object."""
        if not isinstance(value, list):
            self.problem(step, where, "expected a list")
            return []
        out = []
        for n, item in enumerate(value):
            if isinstance(item, dict):
                out.append((f"{where}[{n}]", item))
            else:
                self.problem(step, f"{where}[{n}]", "expected an object")
        return out

    # ---- the models ----

    def _version(self) -> None:
        version = self.data.get("schema_version")
        if version is None:
            if "schema_version" in self.data:
                self.problem(None, "schema_version", "expected a string, got null")
            return  # Harbor's default: the latest version
        match = _VERSION_RE.fullmatch(version) if isinstance(version, str) else None
        if match is None:
            self.problem(None, "schema_version", "not an ATIF version (ATIF-v1.0 … ATIF-v1.7); checked as v1.7")
            return
        major, minor = int(match[1]), int(match[2])
        if major == 1 and minor <= LATEST:
            self.minor = minor
        elif major >= 1:
            self.out.later_version = version
        else:
            self.problem(None, "schema_version", "not an ATIF version (ATIF-v1.0 … ATIF-v1.7); checked as v1.7")

    def _root(self) -> None:
        data = self.data
        self.fields(data, _ROOT, "", None)
        self.string(data, "session_id", "", None, required=self.minor < 7)
        self.string(data, "trajectory_id", "", None, required=self.embedded and self.minor >= 7)
        for key in ("notes", "continued_trajectory_ref"):
            self.string(data, key, "", None)
        self.extra(data, "", None)
        agent = self.object(data, "agent", "", None, required=True)
        if agent is not None:
            self._agent(agent)
        final = self.object(data, "final_metrics", "", None)
        if final is not None:
            self.fields(final, _FINAL, "final_metrics", None)
            for key in ("total_prompt_tokens", "total_completion_tokens", "total_cached_tokens", "total_steps"):
                self.count(final, key, "final_metrics", None)
            self.number(final, "total_cost_usd", "final_metrics", None)
            self.extra(final, "final_metrics", None)
        subs = data.get("subagent_trajectories")
        if subs is not None and self.minor >= 7:
            self.objects(subs, "subagent_trajectories", None)  # each checked as a trajectory of its own
        self._steps()

    def _agent(self, agent: dict[str, Any]) -> None:
        self.fields(agent, _AGENT, "agent", None)
        self.string(agent, "name", "agent", None, required=True)
        self.string(agent, "version", "agent", None, required=True)
        self.string(agent, "model_name", "agent", None)
        self.extra(agent, "agent", None)
        tools = agent.get("tool_definitions")
        if tools is not None and self.minor >= 5:
            self.objects(tools, "agent.tool_definitions", None)

    def _steps(self) -> None:
        if "steps" not in self.data:
            self.problem(None, "steps", "missing")
            return
        steps = self.data["steps"]
        if not isinstance(steps, list):
            self.problem(None, "steps", "expected a list")
            return
        if not steps:
            self.problem(None, "steps", "empty: a trajectory has at least one step")
        previous: Any = 0
        for i, step in enumerate(steps):
            path = f"steps[{i}]"
            if not isinstance(step, dict):
                self.problem(i, path, "expected an object")
                previous = None
                continue
            step_id = step.get("step_id")
            if "step_id" not in step:
                self.problem(i, f"{path}.step_id", "missing")
            elif not (_is_int(step_id) and step_id >= 1):
                self.problem(i, f"{path}.step_id", "expected an integer ≥ 1")
            elif _is_int(previous) and step_id != previous + 1:
                # reported where the sequence breaks, not at every step after it
                self.problem(i, f"{path}.step_id", f"expected {int(previous) + 1} (step ids run 1, 2, 3, …)")
            previous = step_id
            self._step(i, step, path)

    def _step(self, i: int, step: dict[str, Any], path: str) -> None:
        self.fields(step, _STEP, path, i)
        source = step.get("source")
        if "source" not in step:
            self.problem(i, f"{path}.source", "missing")
        elif source not in _SOURCES:
            self.problem(i, f"{path}.source", "expected 'system', 'user' or 'agent'")
        agent = source == "agent"
        if source in _SOURCES and not agent:
            for key in _AGENT_ONLY:
                if step.get(key) is not None:
                    self.problem(i, f"{path}.{key}", "only on agent steps")
            if step.get("observation") is not None and self.minor < 2:
                self.problem(i, f"{path}.observation", "only on agent steps before ATIF-v1.2")
        timestamp = step.get("timestamp")
        if isinstance(timestamp, str):
            if not _is_timestamp(timestamp):
                self.problem(i, f"{path}.timestamp", "not an ISO 8601 timestamp")
        else:
            self.string(step, "timestamp", path, i)
        self.string(step, "model_name", path, i)
        self.string(step, "reasoning_content", path, i)
        self.typed(step, "reasoning_effort", path, i, lambda v: isinstance(v, str) or _is_number(v),
                   "a string or a number")
        self._content(step, "message", path, i, required=True)
        if self.minor >= 5:
            self.typed(step, "is_copied_context", path, i, lambda v: isinstance(v, bool), "true or false")
        if self.minor >= 7:
            self.count(step, "llm_call_count", path, i)
            if agent and step.get("llm_call_count") == 0:
                for key in ("metrics", "reasoning_content"):
                    if step.get(key) is not None:
                        self.problem(i, f"{path}.{key}", "must be absent when llm_call_count is 0")
        self.extra(step, path, i)
        call_ids = self._tool_calls(i, step, path)
        observation = self.object(step, "observation", path, i)
        if observation is not None:
            self._observation(i, observation, f"{path}.observation", call_ids)
        metrics = self.object(step, "metrics", path, i)
        if metrics is not None:
            self._metrics(i, metrics, f"{path}.metrics")

    def _content(self, parent: dict[str, Any], key: str, path: str, step: int, *, required: bool = False) -> None:
        """A message or an observation's content: a string, or (v1.6) a list of content parts."""
        value = parent.get(key)
        if self.minor < 6 or not isinstance(value, list):
            expected = "a string" if self.minor < 6 else "a string or a list of content parts"
            self.typed(parent, key, path, step, lambda v: isinstance(v, str), expected, required=required)
            return
        for n, part in enumerate(value):
            where = f"{path}.{key}[{n}]"
            if not isinstance(part, dict):
                self.problem(step, where, "expected a content part (an object)")
                continue
            self.fields(part, _PART, where, step)
            kind = part.get("type")
            if kind == "text":
                self.string(part, "text", where, step, required=True)
            elif kind == "image":
                image = self.object(part, "source", where, step, required=True)
                if image is not None:
                    self.fields(image, _IMAGE, f"{where}.source", step)
                    if image.get("media_type") not in _MEDIA_TYPES:
                        self.problem(step, f"{where}.source.media_type", "expected image/jpeg, png, gif or webp")
                    self.string(image, "path", f"{where}.source", step, required=True)
            else:
                self.problem(step, f"{where}.type", "expected 'text' or 'image'")

    def _tool_calls(self, i: int, step: dict[str, Any], path: str) -> set[str]:
        calls = step.get("tool_calls")
        ids: set[str] = set()
        if calls is None:
            return ids
        for where, call in self.objects(calls, f"{path}.tool_calls", i):
            self.fields(call, _TOOL_CALL, where, i)
            self.string(call, "tool_call_id", where, i, required=True)
            self.string(call, "function_name", where, i, required=True)
            self.object(call, "arguments", where, i, required=True)
            if self.minor >= 7:
                self.extra(call, where, i)
            if isinstance(call.get("tool_call_id"), str):
                ids.add(call["tool_call_id"])
        return ids

    def _observation(self, i: int, observation: dict[str, Any], path: str, call_ids: set[str]) -> None:
        self.fields(observation, _OBSERVATION, path, i)
        results = observation.get("results")
        if "results" not in observation:
            self.problem(i, f"{path}.results", "missing")
            return
        for where, result in self.objects(results, f"{path}.results", i):
            self.fields(result, _RESULT, where, i)
            call_id = result.get("source_call_id")
            if isinstance(call_id, str):
                if call_id not in call_ids:
                    self.problem(i, f"{where}.source_call_id", "no tool call of this step has this id")
            else:
                self.string(result, "source_call_id", where, i)
            self._content(result, "content", where, i)
            if self.minor >= 7:
                self.extra(result, where, i)
            refs = result.get("subagent_trajectory_ref")
            if refs is None:
                continue
            if not isinstance(refs, list):
                self.problem(i, f"{where}.subagent_trajectory_ref", "expected a list")
                continue
            for r, ref in enumerate(refs):
                self._ref(i, ref, f"{where}.subagent_trajectory_ref[{r}]")

    def _ref(self, i: int, ref: Any, path: str) -> None:
        if not isinstance(ref, dict):
            self.problem(i, path, "expected an object")
            return
        self.fields(ref, _REF, path, i)
        self.string(ref, "session_id", path, i, required=self.minor < 7)
        self.string(ref, "trajectory_path", path, i)
        self.extra(ref, path, i)
        if self.minor >= 7:
            self.string(ref, "trajectory_id", path, i)
            if ref.get("trajectory_id") is None and ref.get("trajectory_path") is None:
                self.problem(i, path, "needs a trajectory_id or a trajectory_path")

    def _metrics(self, i: int, metrics: dict[str, Any], path: str) -> None:
        self.fields(metrics, _METRICS, path, i)
        for key in ("prompt_tokens", "completion_tokens", "cached_tokens"):
            self.count(metrics, key, path, i)
        self.number(metrics, "cost_usd", path, i)
        self.extra(metrics, path, i)
        lists = {"logprobs": (_is_number, "a list of numbers"),
                 "completion_token_ids": (_is_int, "a list of integers"),
                 "prompt_token_ids": (_is_int, "a list of integers")}
        for key, (test, expected) in lists.items():
            if _METRICS[key] <= self.minor:
                self.typed(metrics, key, path, i, lambda v, t=test: isinstance(v, list) and all(map(t, v)), expected)
