"""Render ATIF trajectories (Harbor `agent/trajectory*.json`) into episodes.

The rules copy Harbor's trace exporter (`src/harbor/utils/traces_utils.py`,
`extract_conversations_from_trajectory`, `_extract_single_episode_conversation`,
`_extract_complete_subagent_conversation`, `normalize_message_content`) so that an episode read
from a trace directory has the same keys, roles and texts as the Hub row Harbor exports from it
(harbor-formats.md §4.4):

- the k-th agent step that is not `is_copied_context` (counted across `trajectory.json` and its
  `continued_trajectory_ref` chain) ends episode k, which holds every step of *its own file* up to
  and including that agent step (Harbor slices each file separately);
- `system` and `user` steps become role "user"; the first `system` step of a file gets the
  `<tools>` block when the file's `agent.tool_definitions` is set;
- an `agent` step becomes role "assistant": `<think>reasoning</think>`, the message, then one
  `<tool_call>` block per tool call, joined with "\\n";
- after every agent step except the last of the slice, its observation contents joined with "\\n"
  become a "user" message; consecutive same-role messages are never merged;
- a subagent trajectory is one complete conversation (episode 0) in which every agent step,
  the last one included, is followed by its observation, and no `<tools>` block is embedded.

What Harbor's rows leave out is kept beside them, since the trace directory is its only copy: an
observation that is no turn of its own (on a system or user step, one with no content, e.g. only
`subagent_trajectory_ref`s, and the last agent step's of each file) goes raw into its step's
turn extra as "observation"; steps after a file's last episode go raw into that episode's extra
as "later_steps"; a file's `continued_trajectory_ref` into its episodes' extra. Nothing a file
holds is dropped, whatever its ATIF version: a step's, an observation's or a result's unknown
fields go into the turn's extra as "unknown_fields" (keyed by their path from the step), the
root's into the file's summary, content parts whole beside the text Harbor takes from them, and
a step of no known source (which Harbor drops) raw onto the next turn as "skipped_steps".
Whether the file is valid ATIF is `ingest.read.atif_check`'s question, not this module's.

Everything here works on parsed JSON values; reading files is `ingest.read.traces`' job. Steps are
read with `.get()` and anything of an unexpected type is skipped or normalised rather than raised,
because Harbor's exporter reads trajectories unvalidated too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ingest.read.atif_check import OBSERVATION_FIELDS, RESULT_FIELDS, ROOT_FIELDS, STEP_FIELDS
from ingest.shape.records import Episode, Prefix, Turn

# Per-step token data that would make every turn as large as the rollout; the Hub rows never
# carry it either (it only appears in the separate literal-token columns).
_DROPPED_METRIC_KEYS = ("prompt_token_ids", "completion_token_ids", "logprobs")

# Step keys copied verbatim into Turn.extra (when present and not None).
_STEP_EXTRA_KEYS = (
    "step_id",
    "source",
    "timestamp",
    "model_name",
    "reasoning_effort",
    "llm_call_count",
    "is_copied_context",
    "tool_calls",
)


def normalize_message_content(content: Any) -> str:
    """Harbor's `normalize_message_content`: text of a message or observation content.

    None -> "", str -> itself, a non-empty list whose first element is a dict with "text" ->
    that text, anything else -> its JSON (ensure_ascii=False).
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        first = content[0]
        if isinstance(first, dict) and "text" in first:
            val = first.get("text")
            return val if isinstance(val, str) else json.dumps(val, ensure_ascii=False)
    try:
        return json.dumps(content, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(content)


def has_images(content: Any) -> bool:
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") == "image" for part in content
    )


def step_is_multimodal(step: dict[str, Any]) -> bool:
    if has_images(step.get("message")):
        return True
    observation = step.get("observation")
    if isinstance(observation, dict):
        for result in observation.get("results") or []:
            if isinstance(result, dict) and has_images(result.get("content")):
                return True
    return False


def _steps(trajectory: dict[str, Any]) -> list[dict[str, Any]]:
    steps = trajectory.get("steps")
    if not isinstance(steps, list):
        return []
    return [s for s in steps if isinstance(s, dict)]


def tool_definitions(trajectory: dict[str, Any]) -> Any:
    agent = trajectory.get("agent")
    return agent.get("tool_definitions") if isinstance(agent, dict) else None


def _clean_metrics(metrics: Any) -> Any:
    if not isinstance(metrics, dict):
        return metrics
    return {k: v for k, v in metrics.items() if k not in _DROPPED_METRIC_KEYS}


def _text_for_turn(message: Any) -> str | None:
    """Turn.content for a system/user message: Harbor writes the value as is; records hold text."""
    if message is None or isinstance(message, str):
        return message
    return normalize_message_content(message)


def _step_extra(step: dict[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    for key in _STEP_EXTRA_KEYS:
        value = step.get(key)
        if value is not None:
            extra[key] = value
    metrics = step.get("metrics")
    if metrics is not None:
        extra["metrics"] = _clean_metrics(metrics)
    if step.get("extra") is not None:
        extra["step_extra"] = step["extra"]
    if step.get("source") != "agent" and step.get("reasoning_content") is not None:
        extra["reasoning_content"] = step["reasoning_content"]  # rendered on agent steps only
    unknown = {k: v for k, v in step.items() if k not in STEP_FIELDS}
    if unknown:
        # A later version's fields (or a producer's own): kept, under the names the step gave them.
        extra["unknown_fields"] = unknown
    message = step.get("message")
    if message is not None and not isinstance(message, str):
        # ATIF v1.6 content parts: the turn text is the first part's text (Harbor's rule);
        # keep the parts so nothing is lost.
        extra["content_parts"] = message
    if step_is_multimodal(step):
        extra["multimodal"] = True
    return extra


def _assistant_content(step: dict[str, Any]) -> str:
    parts: list[str] = []
    reasoning = step.get("reasoning_content")
    if reasoning:
        parts.append(f"<think>{reasoning}</think>")
    message = step.get("message", "")
    if message:
        if not isinstance(message, str):
            # Harbor would fail joining a list here (multimodal aborts its export earlier);
            # use the same text rule as for observations.
            message = normalize_message_content(message)
        # Harbor: restore an opening tag vLLM left in the prompt.
        if "</think>" in message and "<think>" not in message:
            message = "<think>" + message
        parts.append(message)
    tool_calls = step.get("tool_calls")
    if tool_calls and isinstance(tool_calls, list):
        for call in tool_calls:
            if not isinstance(call, dict):
                continue
            obj = {"name": call.get("function_name"), "arguments": call.get("arguments", {})}
            parts.append(f"<tool_call>\n{json.dumps(obj, ensure_ascii=False)}\n</tool_call>")
    return "\n".join(parts) if parts else ""


def _raw_step(step: dict[str, Any]) -> dict[str, Any]:
    """A step as the file has it, less the per-token data (see _DROPPED_METRIC_KEYS)."""
    if "metrics" not in step:
        return step
    return {**step, "metrics": _clean_metrics(step["metrics"])}


def _keep_observation(turn: Turn | None, step: dict[str, Any]) -> None:
    """Keep a step's raw observation on its turn when no turn of its own carries it."""
    observation = step.get("observation")
    if turn is not None and observation is not None:
        turn.extra = {**(turn.extra or {}), "observation": observation}


def _observation_turn(step: dict[str, Any]) -> Turn | None:
    observation = step.get("observation")
    if not observation or not isinstance(observation, dict):
        return None
    results = observation.get("results") or []
    if not isinstance(results, list):
        return None
    contents: list[str] = []
    call_ids: list[Any] = []
    result_extras: list[Any] = []
    subagent_refs: list[Any] = []
    unknown = {f"observation.{k}": v for k, v in observation.items() if k not in OBSERVATION_FIELDS}
    for n, result in enumerate(results):
        if isinstance(result, dict) and "content" in result:
            contents.append(normalize_message_content(result["content"]))
        if isinstance(result, dict):
            unknown.update((f"observation.results[{n}].{k}", v) for k, v in result.items() if k not in RESULT_FIELDS)
            if result.get("source_call_id") is not None:
                call_ids.append(result["source_call_id"])
            if result.get("extra") is not None:
                result_extras.append(result["extra"])
            if result.get("subagent_trajectory_ref") is not None:
                subagent_refs.append(result["subagent_trajectory_ref"])
    if not contents:
        return None
    extra: dict[str, Any] = {"observation_of_step": step.get("step_id")}
    if call_ids:
        extra["source_call_ids"] = call_ids
    if result_extras:
        extra["result_extras"] = result_extras
    if subagent_refs:
        extra["subagent_trajectory_refs"] = subagent_refs
    if any(isinstance(r, dict) and has_images(r.get("content")) for r in results):
        extra["multimodal"] = True
    if any(isinstance(r, dict) and isinstance(r.get("content"), list) for r in results):
        # ATIF v1.6 content parts: the text is each result's first part's (Harbor's rule); keep
        # every result's parts, in the results' order (None for a result with a string).
        extra["content_parts"] = [r.get("content") if isinstance(r, dict) and isinstance(r.get("content"), list)
                                  else None for r in results]
    if unknown:
        extra["unknown_fields"] = unknown  # keyed by their path from the step
    return Turn(role="user", content="\n".join(contents), extra=extra)


@dataclass
class _StepTurns:
    source: Any
    copied: bool
    main: Turn | None
    observation: Turn | None


def _build_step_turns(
    steps: list[dict[str, Any]], tools: Any, embed_tools: bool, *, keep_trailing: bool = False
) -> list[_StepTurns]:
    """The turns of each step. A step of no known source makes none (Harbor's exporter drops
    it); it is kept raw on the next step's turn as "skipped_steps", and with `keep_trailing`
    those after the last turn on that one (a main trajectory keeps them in "later_steps")."""
    out: list[_StepTurns] = []
    tools_added = False
    skipped: list[dict[str, Any]] = []
    last_main: Turn | None = None
    for step in steps:
        source = step.get("source")
        message = step.get("message", "")
        main: Turn | None = None
        observation: Turn | None = None
        if source == "system":
            content = _text_for_turn(message)
            if embed_tools and not tools_added and tools:
                tools_json = json.dumps(tools, ensure_ascii=False, indent=2)
                body = content if content is not None else ""
                content = f"<tools>\n{tools_json}\n</tools>\n\n{body}"
                tools_added = True
            main = Turn(role="user", content=content, extra=_step_extra(step))
            _keep_observation(main, step)  # ATIF v1.2+: e.g. the summarization's subagent refs
        elif source == "user":
            main = Turn(role="user", content=_text_for_turn(message), extra=_step_extra(step))
            _keep_observation(main, step)
        elif source == "agent":
            main = Turn(role="assistant", content=_assistant_content(step), extra=_step_extra(step))
            observation = _observation_turn(step)
            if observation is None:
                _keep_observation(main, step)
        else:
            skipped.append(_raw_step(step))
        if main is not None:
            if skipped:
                main.extra = {**main.extra, "skipped_steps": skipped}
                skipped = []
            last_main = main
        out.append(_StepTurns(source, bool(step.get("is_copied_context")), main, observation))
    if skipped and keep_trailing and last_main is not None:
        last_main.extra = {**last_main.extra, "skipped_steps": last_main.extra.get("skipped_steps", []) + skipped}
    return out


@dataclass
class TrajectoryFile:
    """One parsed trajectory file and where it came from (a path relative to the trial dir)."""

    relpath: str
    data: dict[str, Any]


class TooLarge(Exception):
    """A trajectory past a bound of RenderContext: `relpath` is its file (with a `#...` suffix
    for one embedded in it), `message` says which bound."""

    def __init__(self, relpath: str, message: str) -> None:
        self.relpath = relpath
        self.message = message
        super().__init__(f"{relpath}: {message}")


@dataclass
class RenderContext:
    """Run-level values Harbor puts on every row (used for Episode.extra), and the bounds on
    what one trial's trajectories may make (None: unbounded)."""

    agent: str | None = None  # Harbor's run agent: config.agent.name -> agent_info.name
    model: str | None = None  # agent_info.model_info.name -> config.agent.model_name
    embed_tools: bool = True
    max_steps: int | None = None  # steps of one trajectory
    max_turn_rows: int | None = None  # turn rows of all the trial's episodes
    turn_rows: int = 0  # made so far

    def check_steps(self, file: TrajectoryFile, steps: list[dict[str, Any]]) -> None:
        """Before a trajectory's steps become turns."""
        if self.max_steps is not None and len(steps) > self.max_steps:
            raise TooLarge(file.relpath, f"{len(steps):,} steps, more than the {self.max_steps:,} a trajectory "
                                         f"may have (WAREHOUSE_MAX_STEPS)")

    def spend(self, file: TrajectoryFile, n_turns: int) -> None:
        """Before n_turns more turns are made (an episode's turns past the one before it in the
        same file, which it shares): what the trial stores, counted as it comes."""
        self.turn_rows += n_turns
        if self.max_turn_rows is not None and self.turn_rows > self.max_turn_rows:
            raise TooLarge(file.relpath, f"the trial's conversations would hold more than {self.max_turn_rows:,} "
                                         f"turn rows (WAREHOUSE_MAX_TURN_ROWS)")


def _episode_extra(file: TrajectoryFile, ctx: RenderContext, *, subagent: bool) -> dict[str, Any]:
    agent = file.data.get("agent") if isinstance(file.data.get("agent"), dict) else {}
    extra: dict[str, Any] = {"trajectory_file": file.relpath}
    # The Hub `agent` column: the trajectory's agent name, except on subagent rows, which carry
    # the main agent's name.
    extra["agent"] = ctx.agent if subagent else (agent.get("name") or ctx.agent)
    extra["model"] = agent.get("model_name") or ctx.model
    tools = agent.get("tool_definitions")
    if tools and not subagent:
        # As JSON text: the keys' order is the field order of the Arrow structs Harbor's export
        # writes, and PostgreSQL's jsonb would sort them.
        extra["tool_definitions"] = json.dumps(tools, ensure_ascii=False)
    if file.data.get("continued_trajectory_ref") is not None:
        extra["continued_trajectory_ref"] = file.data["continued_trajectory_ref"]
    return extra


def render_main_episodes(
    files: list[TrajectoryFile], ctx: RenderContext, trace_source: str
) -> list[Episode]:
    """Episodes of a main trajectory and its continuation chain, in order (`--episodes all`).

    The episodes of one file are Prefixes of one list of turns (each is a prefix of the next), so
    they take memory in proportion to the file's steps: treat the turns as read-only.
    """
    episodes: list[Episode] = []
    offset = 0
    stepless: list[dict[str, Any]] = []  # files with no episode of their own, not yet kept
    for file in files:
        steps = _steps(file.data)
        ctx.check_steps(file, steps)
        step_turns = _build_step_turns(steps, tool_definitions(file.data), ctx.embed_tools)
        prefix: list[Turn] = []  # only grows: the file's episodes are prefixes of it
        spent = 0  # its turns counted against the trial's bound
        count = 0
        multimodal = False
        last_end = -1  # index of the step that ends the file's last episode
        for i, st in enumerate(step_turns):
            if st.main is not None:
                prefix.append(st.main)
                multimodal = multimodal or bool(st.main.extra and st.main.extra.get("multimodal"))
            if st.source == "agent" and not st.copied:
                extra = _episode_extra(file, ctx, subagent=False)
                if multimodal:
                    extra["multimodal"] = True
                ctx.spend(file, len(prefix) - spent)
                spent = len(prefix)
                episodes.append(
                    Episode(
                        episode_index=offset + count,
                        turns=Prefix(prefix, len(prefix)),
                        trace_source=trace_source,
                        extra=extra,
                    )
                )
                count += 1
                last_end = i
            if st.source == "agent" and st.observation is not None:
                prefix.append(st.observation)
                multimodal = multimodal or bool(st.observation.extra.get("multimodal"))
        if count:
            # What no episode of this file holds: the last episode's own observation and any
            # later steps.
            if step_turns[last_end].observation is not None:
                _keep_observation(step_turns[last_end].main, steps[last_end])
            later = steps[last_end + 1:]
            if later:
                episodes[-1].extra["later_steps"] = [_raw_step(s) for s in later]
        elif steps:
            # A file with no agent step of its own (a continuation that only says something to
            # the agent) is in no conversation: kept whole with the episode before it, or else
            # with the first one after it.
            stepless.append({"trajectory_file": file.relpath, "steps": [_raw_step(s) for s in steps]})
        if stepless and episodes:
            episodes[-1 if not count else offset].extra.setdefault("stepless_files", []).extend(stepless)
            stepless = []
        offset += count
    return episodes


def render_subagent_episode(
    file: TrajectoryFile, ctx: RenderContext, trace_source: str
) -> Episode | None:
    """A subagent trajectory as one complete conversation (episode 0), or None when it has no
    assistant turn (Harbor drops those)."""
    steps = _steps(file.data)
    if not steps:
        return None
    ctx.check_steps(file, steps)
    turns: list[Turn] = []
    for st in _build_step_turns(steps, None, embed_tools=False, keep_trailing=True):
        if st.main is not None:
            turns.append(st.main)
        if st.source == "agent" and st.observation is not None:
            turns.append(st.observation)
    if not any(t.role == "assistant" for t in turns):
        return None
    ctx.spend(file, len(turns))
    extra = _episode_extra(file, ctx, subagent=True)
    if any(t.extra and t.extra.get("multimodal") for t in turns):
        extra["multimodal"] = True
    return Episode(episode_index=0, turns=turns, trace_source=trace_source, extra=extra)


def embedded_subagents(data: dict[str, Any]) -> list[dict[str, Any]]:
    """ATIF v1.7 `subagent_trajectories` embedded in a trajectory (dicts only)."""
    subs = data.get("subagent_trajectories")
    if not isinstance(subs, list):
        return []
    return [s for s in subs if isinstance(s, dict)]


def embedded_label(sub: dict[str, Any], position: int) -> str:
    """trace_source for an embedded subagent: its trajectory_id, else a label in its extra,
    else its position."""
    tid = sub.get("trajectory_id")
    if isinstance(tid, str) and tid:
        return tid
    extra = sub.get("extra")
    if isinstance(extra, dict):
        for key in ("label", "name", "subagent_type"):
            if isinstance(extra.get(key), str) and extra[key]:
                return extra[key]
    return f"subagent-{position}"


def _unread(data: dict[str, Any]) -> dict[str, Any]:
    """What no episode can hold, by its path: `steps` that is not a list, a step or an embedded
    subagent that is not an object (kept, as the reader skips them)."""
    out: dict[str, Any] = {}
    for key in ("steps", "subagent_trajectories"):
        value = data.get(key)
        if isinstance(value, list):
            out.update((f"{key}[{i}]", item) for i, item in enumerate(value) if not isinstance(item, dict))
        elif value is not None:
            out[key] = value
    return out


def first_instruction(data: dict[str, Any]) -> str | None:
    """Harbor's `_extract_instruction` on one trajectory: the stripped message of the first step
    (any source) whose message is a non-empty string."""
    for step in _steps(data):
        message = step.get("message")
        if isinstance(message, str) and message.strip():
            return message.strip()
    return None


def trajectory_summary(file: TrajectoryFile) -> dict[str, Any]:
    """The file-level facts rows do not carry (kept in Trial.detail)."""
    data = file.data
    agent = data.get("agent") if isinstance(data.get("agent"), dict) else {}
    steps = _steps(data)
    summary: dict[str, Any] = {
        "file": file.relpath,
        "schema_version": data.get("schema_version"),
        "session_id": data.get("session_id"),
        "n_steps": len(steps),
        "n_agent_steps": sum(1 for s in steps if s.get("source") == "agent"),
        "n_copied_steps": sum(1 for s in steps if s.get("is_copied_context")),
        "agent": {k: v for k, v in agent.items() if k != "tool_definitions"},
    }
    for key in ("trajectory_id", "notes", "final_metrics", "continued_trajectory_ref", "extra"):
        if data.get(key) is not None:
            summary[key] = data[key]
    unknown = {k: v for k, v in data.items() if k not in ROOT_FIELDS}
    if unknown:
        summary["unknown_fields"] = unknown  # a later version's root fields, or a producer's own
    unread = _unread(data)
    if unread:
        summary["unread"] = unread
    tools = agent.get("tool_definitions")
    if tools:
        summary["n_tool_definitions"] = len(tools) if isinstance(tools, list) else None
    if embedded_subagents(data):
        summary["n_embedded_subagents"] = len(embedded_subagents(data))
    if any(step_is_multimodal(s) for s in steps):
        summary["multimodal"] = True
    return summary
