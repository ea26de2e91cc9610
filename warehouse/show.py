"""One trajectory: a trial with its episodes and turns, exact, as a dict or as terminal text."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, select

from warehouse.db import models
from warehouse.db.session import read_transaction
from warehouse.display import printable
from warehouse.errors import WarehouseError
from warehouse.runs import resolve_run
from warehouse.texts import exact_column, join_text

RUNS, TASKS, TRIALS = models.Run.__table__, models.Task.__table__, models.Trial.__table__
EPISODES, TURNS, MESSAGES = models.Episode.__table__, models.Turn.__table__, models.Message.__table__
TRIAL_LOADS, LOADS, SOURCES = models.TrialLoad.__table__, models.Load.__table__, models.Source.__table__

MAIN = "main"

# Trial columns shown as they are; texts the writer may have made display-safe are added apart.
_TRIAL_FIELDS = (
    "status", "agent", "agent_version", "model", "model_provider", "reward",
    "rewards", "result", "exception_type", "started_at", "finished_at", "n_input_tokens",
    "n_cache_tokens", "n_output_tokens", "cost_usd",
)


def load_trajectory(engine: Engine, ref: str, *, episode: int | None = None,
                    all_episodes: bool = False) -> dict[str, Any]:
    """The trial `ref` names (see find_trial) with the chosen episodes, every text exact.

    By default one episode: the longest of trace_source "main" (its whole trajectory: the
    exporter's episodes are prefixes of one another); `episode` picks one by index, and
    `all_episodes` takes every episode of every trace source."""
    with read_transaction(engine) as conn:
        trial_id = find_trial(conn, ref)
        trial = conn.execute(
            select(TRIALS, RUNS.c.run_key, TASKS.c.name.label("task"),
                   MESSAGES.c.content.label("instruction"), MESSAGES.c.content_raw.label("instruction_raw"))
            .join(RUNS, RUNS.c.id == TRIALS.c.run_id)
            .outerjoin(TASKS, TASKS.c.id == TRIALS.c.task_id)
            .outerjoin(MESSAGES, MESSAGES.c.id == TRIALS.c.instruction_id)
            .where(TRIALS.c.id == trial_id)
        ).one()._mapping
        out: dict[str, Any] = {"id": trial["id"], "run_key": trial["run_key"],
                               "trial_name": trial["trial_name"], "task": trial["task"]}
        out.update({name: trial[name] for name in _TRIAL_FIELDS})
        for name in ("exception_message", "verifier_output"):
            out[name] = exact_column(trial["detail"], name, trial[name])
        out["instruction"] = join_text(trial["instruction"], trial["instruction_raw"])
        out["sources"] = list(conn.execute(
            select(SOURCES.c.name).distinct()
            .join(LOADS, LOADS.c.source_id == SOURCES.c.id)
            .join(TRIAL_LOADS, TRIAL_LOADS.c.load_id == LOADS.c.id)
            .where(TRIAL_LOADS.c.trial_id == trial_id).order_by(SOURCES.c.name)
        ).scalars())
        available = conn.execute(
            select(EPISODES.c.id, EPISODES.c.trace_source, EPISODES.c.episode_index,
                   EPISODES.c.n_turns, EPISODES.c.n_chars, EPISODES.c.extra)
            .where(EPISODES.c.trial_id == trial_id)
        ).all()
        out["n_episodes"] = len(available)
        out["episodes"] = [_episode(conn, ep) for ep in _choose(available, episode, all_episodes)]
    return out


MAX_ID = 2**63 - 1  # the largest id a BIGINT (SQLite's INTEGER) holds


def find_trial(conn: Connection, ref: str) -> int:
    """A trial id from a trial id (digits), a trial name, or RUN/TRIAL when the name is in
    several runs (RUN: a key, a unique prefix of it, or a name). Run keys may hold slashes (Hub
    dataset names), so RUN/TRIAL splits at the last."""
    # An id is ASCII digits ("²" and "١٢" pass isdigit()) within the id column's 64 bits.
    if ref.isascii() and ref.isdigit() and int(ref) <= MAX_ID:
        found = conn.execute(select(TRIALS.c.id).where(TRIALS.c.id == int(ref))).scalar()
        if found is not None:
            return found
    named = conn.execute(
        select(TRIALS.c.id, RUNS.c.run_key).join(RUNS, RUNS.c.id == TRIALS.c.run_id)
        .where(TRIALS.c.trial_name == ref).order_by(RUNS.c.run_key)
    ).all()
    if len(named) == 1:
        return named[0].id
    if len(named) > 1:
        runs = ", ".join(row.run_key for row in named)
        raise WarehouseError(f"trial {ref!r} is in {len(named)} runs ({runs}): name it as RUN/{ref}")
    if "/" in ref:
        run, name = ref.rsplit("/", 1)
        found = conn.execute(
            select(TRIALS.c.id).where(TRIALS.c.run_id == resolve_run(conn, run).id, TRIALS.c.trial_name == name)
        ).scalar()
        if found is not None:
            return found
    raise WarehouseError(f"no trial {ref!r} (give a trial name, RUN/TRIAL, or a trial id)")


def _choose(available, episode: int | None, all_episodes: bool) -> list:
    if all_episodes:
        return sorted(available, key=lambda ep: (ep.trace_source != MAIN, ep.trace_source, ep.episode_index))
    main = [ep for ep in available if ep.trace_source == MAIN] or list(available)
    if episode is None:
        return [max(main, key=lambda ep: (ep.n_turns, ep.episode_index))] if main else []
    chosen = [ep for ep in main if ep.episode_index == episode]
    if not chosen:
        have = ", ".join(str(ep.episode_index) for ep in sorted(main, key=lambda ep: ep.episode_index))
        raise WarehouseError(f"no episode {episode} (this trial has: {have or 'none'})")
    return chosen[:1]


def _episode(conn: Connection, ep) -> dict[str, Any]:
    turns = conn.execute(
        select(TURNS.c.idx, TURNS.c.role, TURNS.c.extra, MESSAGES.c.content, MESSAGES.c.content_raw)
        .outerjoin(MESSAGES, MESSAGES.c.id == TURNS.c.message_id)
        .where(TURNS.c.episode_id == ep.id).order_by(TURNS.c.idx)
    ).all()
    return {
        "trace_source": ep.trace_source, "episode_index": ep.episode_index,
        "n_turns": ep.n_turns, "n_chars": ep.n_chars, "extra": ep.extra,
        "turns": [{"idx": t.idx, "role": t.role, "content": join_text(t.content, t.content_raw),
                   "extra": t.extra} for t in turns],
    }


# --- output ------------------------------------------------------------------------------

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def to_json(trajectory: dict[str, Any]) -> str:
    """One JSON object. Texts stay exact: a lone surrogate (which UTF-8 cannot carry) is
    written as its \\uXXXX escape, which JSON readers turn back into the same string."""
    text = json.dumps(trajectory, ensure_ascii=False, indent=2, default=_json_default)
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def to_text(trajectory: dict[str, Any]) -> str:
    """The trajectory for a person at a terminal: a header, then each turn, then the verifier.
    Control characters (escape sequences, carriage returns) are shown, not obeyed."""
    t = trajectory
    lines = []

    def field(label: str, value: Any) -> None:
        if value not in (None, "", []):
            lines.append(f"{label:<10}{printable(str(value))}")

    field("trial", f"{t['trial_name']}  (id {t['id']})")
    field("run", t["run_key"])
    field("task", t["task"])
    field("agent", " ".join(v for v in (t["agent"], t["agent_version"]) if v))
    field("model", t["model"])
    field("reward", t["reward"])
    field("result", t["result"])
    field("status", t["status"])
    field("exception", ": ".join(v for v in (t["exception_type"], t["exception_message"]) if v))
    tokens = {"in": t["n_input_tokens"], "cache": t["n_cache_tokens"], "out": t["n_output_tokens"]}
    field("tokens", ", ".join(f"{k} {v}" for k, v in tokens.items() if v is not None))
    field("sources", ", ".join(t["sources"]))
    shown = len(t["episodes"])
    field("episodes", f"{t['n_episodes']} (showing {shown}; --episode N or --all for others)"
          if shown < t["n_episodes"] else t["n_episodes"])
    for ep in t["episodes"]:
        lines.append("")
        lines.append(f"── episode {ep['episode_index']} ({ep['trace_source']}): {ep['n_turns']} turns ──")
        for turn in ep["turns"]:
            lines.append("")
            lines.append(f"[{turn['idx']}] {turn['role']}")
            lines.extend("    " + line for line in printable(turn["content"] or "").split("\n"))
            lines.extend("    " + line for line in _kept_in_turn(turn["extra"] or {}))
        extra = ep["extra"] or {}
        for step in extra.get("later_steps") or []:
            lines.append("")
            lines.append(f"[after] {step.get('source')} step {step.get('step_id')} (in no conversation)")
            lines.extend("    " + line for line in _text_lines(step.get("message")))
            lines.extend("    " + line for line in _kept_in_turn(step))
        for kept in extra.get("stepless_files") or []:
            for step in kept.get("steps") or []:
                lines.append("")
                lines.append(printable(f"[{kept.get('trajectory_file')}] {step.get('source')} step "
                                       f"{step.get('step_id')} (in no conversation)"))
                lines.extend("    " + line for line in _text_lines(step.get("message")))
                lines.extend("    " + line for line in _kept_in_turn(step))
        if extra.get("continued_trajectory_ref"):
            lines.append("")
            lines.append(printable(f"(continued in {extra['continued_trajectory_ref']})"))
    if t["verifier_output"]:
        lines.append("")
        lines.append("── verifier output ──")
        lines.extend("    " + line for line in printable(t["verifier_output"]).split("\n"))
    return "\n".join(lines) + "\n"


def _kept_in_turn(extra: dict[str, Any]) -> list[str]:
    """What a trace directory's turn keeps beside its text (see ingest.read.atif): an observation that
    no turn of the conversation holds, and subagent trajectories an observation points to."""
    lines = []
    observation = extra.get("observation")
    results = observation.get("results") if isinstance(observation, dict) else None
    if isinstance(results, list):
        lines.append("⋯ observation (in no conversation)")
        for result in results:
            if isinstance(result, dict):
                lines.extend("  " + line for line in _text_lines(result.get("content")))
                lines.extend(_subagent_lines(result.get("subagent_trajectory_ref")))
    for refs in extra.get("subagent_trajectory_refs") or []:
        lines.extend(_subagent_lines(refs))
    return lines


def _subagent_lines(refs: Any) -> list[str]:
    if not isinstance(refs, list):
        return []
    labels = [ref.get("trajectory_path") or ref.get("trajectory_id") if isinstance(ref, dict) else None for ref in refs]
    return [printable(f"→ subagent {label or json.dumps(ref, ensure_ascii=False)}") for label, ref in zip(labels, refs)]


def _text_lines(content: Any) -> list[str]:
    """A message or observation content (text, content parts, or anything) as printable lines."""
    if content is None or content == "":
        return []
    if isinstance(content, list) and all(isinstance(part, dict) and "text" in part for part in content):
        content = "\n".join(str(part["text"]) for part in content)
    if not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False)
    return printable(content).split("\n")
