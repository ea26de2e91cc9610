"""One trajectory: a trial with its episodes and turns, exact, as a dict or as terminal text."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, select

from warehouse.db import models
from warehouse.db.session import read_transaction
from warehouse.db.stored import jsonb_order
from warehouse.display import printable
from warehouse.errors import WarehouseError
from warehouse.runs import resolve_run
from warehouse.texts import exact_column, join_text
from warehouse.turn_parts import Part, split_turn

RUNS, TASKS, TRIALS = models.runs, models.tasks, models.trials
EPISODES, TURNS, MESSAGES = models.episodes, models.turns, models.messages
TRIAL_LOADS, LOADS, SOURCES = models.trial_loads, models.loads, models.sources

MAIN = "main"

# Trial columns shown as they are; texts the writer may have made display-safe are added apart.
_TRIAL_FIELDS = (
    "status", "agent", "agent_version", "model", "model_provider", "reward",
    "rewards", "result", "exception_type", "started_at", "finished_at", "n_input_tokens",
    "n_cache_tokens", "n_output_tokens", "cost_usd",
)


def load_trajectory(engine: Engine, ref: str, *, episode: int | None = None, trace: str | None = None,
                    all_episodes: bool = False, turns: str | None = None) -> dict[str, Any]:
    """trajectory_on in a read transaction of its own."""
    with read_transaction(engine) as conn:
        return trajectory_on(conn, ref, episode=episode, trace=trace, all_episodes=all_episodes, turns=turns)


def trajectory_on(conn: Connection, ref: str, *, episode: int | None = None, trace: str | None = None,
                  all_episodes: bool = False, turns: str | None = None) -> dict[str, Any]:
    """The trial `ref` names (see find_trial) with the chosen episodes, every text exact, read on
    `conn` (a read transaction, or a warehouse.readonly session's connection).

    By default every one of the trial's own conversations (its main trajectory; each step of a
    multi-step trial), the longest episode of each (the whole conversation: the exporter's
    episodes are prefixes of one another), in step order. `trace` picks one trace source (a
    subagent's, say) and `episode` one episode by index (of `trace`, else of the main trace);
    `all_episodes` takes every episode of every trace source. The episodes not shown are listed
    under "others". `turns` ("A:B", as a Python slice) keeps the shown turns A to B, numbered
    consecutively across the shown episodes (each turn's "number")."""
    trial_id = find_trial(conn, ref)
    trial = conn.execute(
        select(TRIALS, RUNS.c.run_key, RUNS.c.name.label("run_name"), TASKS.c.name.label("task"),
               MESSAGES.c.content.label("instruction"), MESSAGES.c.content_raw.label("instruction_raw"))
        .join(RUNS, RUNS.c.id == TRIALS.c.run_id)
        .outerjoin(TASKS, TASKS.c.id == TRIALS.c.task_id)
        .outerjoin(MESSAGES, MESSAGES.c.id == TRIALS.c.instruction_id)
        .where(TRIALS.c.id == trial_id)
    ).one()._mapping
    detail = trial["detail"] if isinstance(trial["detail"], dict) else {}
    steps = [s for s in detail.get("steps") or [] if isinstance(s, dict)]
    out: dict[str, Any] = {"id": trial["id"], "run_key": trial["run_key"], "run_name": trial["run_name"],
                           "trial_name": trial["trial_name"], "task": trial["task"]}
    out.update({name: trial[name] for name in _TRIAL_FIELDS})
    for name in ("exception_message", "verifier_output"):
        out[name] = exact_column(trial["detail"], name, trial[name])
    out["instruction"] = join_text(trial["instruction"], trial["instruction_raw"])
    out["multi_step"] = bool(detail.get("multi_step") or steps)
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
    order = _step_order(steps)
    chosen = _choose(available, order, episode=episode, trace=trace, all_episodes=all_episodes)
    step_of = {s.get("name"): s for s in steps if isinstance(s.get("name"), str)}
    out["episodes"] = [_episode(conn, ep, step_of) for ep in chosen]
    shown = {ep.id for ep in chosen}
    out["others"] = [{"trace_source": ep.trace_source, "episode_index": ep.episode_index, "n_turns": ep.n_turns}
                     for ep in sorted(available, key=lambda ep: (_source_key(ep.trace_source, order), ep.episode_index))
                     if ep.id not in shown]
    _number_turns(out, turns)
    return out


MAX_ID = 2**63 - 1  # the largest id a BIGINT (SQLite's INTEGER) holds
# How many candidates an ambiguous trial prefix lists before "…".
_CANDIDATES_SHOWN = 5


def find_trial(conn: Connection, ref: str) -> int:
    """A trial id from a trial id (digits), a trial name, RUN/TRIAL when the name is in several
    runs (RUN: a key, a unique prefix of it, or a name), or a unique prefix of a trial name (alone
    or as RUN/PREFIX), as runs take key prefixes. Run keys may hold slashes (Hub dataset names),
    so RUN/TRIAL splits at the last. Exact matches come before prefixes."""
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
    run = None
    if "/" in ref:
        # Trial names may hold slashes too (a task's): RUN/TRIAL names a trial exactly at any
        # slash, the last first; a prefix (below) splits at the last.
        for at in [i for i, c in enumerate(ref) if c == "/"][::-1]:
            found = _in_run(conn, ref[:at], ref[at + 1:])
            if found is not None:
                return found
        run_spec, name = ref.rsplit("/", 1)
        try:
            run = resolve_run(conn, run_spec)
        except WarehouseError:
            if not _prefixed(conn, ref):  # no such run, and no trial name starts so either
                raise
    within = None  # the run of RUN/START, once the start is looked for in it
    candidates = _prefixed(conn, ref)
    if not candidates and run is not None and name:
        candidates, ref, within = _prefixed(conn, name, run.id), name, run.id
    if not candidates and "…" in ref:
        # A name as a fitted table cut it (`task-log-hdfs…E2du`): its start and its end.
        start, _, end = ref.partition("…")
        candidates = _prefixed(conn, start, within, end)
    if len(candidates) == 1:
        return candidates[0].id
    if candidates:
        # A name in several runs is shown as RUN/TRIAL, which is what picks one (candidates come
        # by name, so one's namesakes follow it).
        counts = Counter(row.trial_name for row in candidates)
        shown = ", ".join(f"{row.run_key}/{row.trial_name}" if counts[row.trial_name] > 1 else row.trial_name
                          for row in candidates[:_CANDIDATES_SHOWN])
        more = ", …" if len(candidates) > _CANDIDATES_SHOWN else ""
        raise WarehouseError(f"trial {ref!r} is ambiguous: it could be {shown}{more}")
    raise WarehouseError(f"no trial {ref!r} (give a trial name or a unique start of one, RUN/TRIAL, or a trial id)")


def _in_run(conn: Connection, run_spec: str, name: str) -> int | None:
    """The id of the trial `name` of the run `run_spec` names, if both are there."""
    try:
        run = resolve_run(conn, run_spec)
    except WarehouseError:
        return None
    return conn.execute(select(TRIALS.c.id).where(TRIALS.c.run_id == run.id, TRIALS.c.trial_name == name)).scalar()


def _prefixed(conn: Connection, prefix: str, run_id: int | None = None, suffix: str = "") -> list:
    """The trials whose name starts with `prefix` (and ends with `suffix`; in the run `run_id`,
    else any), by name and run, a few more than an error lists. Literal: substr, not LIKE (no
    wildcards, and case counts on both backends, as runs.py's key prefixes); lengths are in
    characters, as both backends' substr and length count."""
    name = TRIALS.c.trial_name
    where = [func.substr(name, 1, len(prefix)) == prefix]
    if suffix:
        where += [func.length(name) >= len(prefix) + len(suffix),
                  func.substr(name, func.length(name) - len(suffix) + 1) == suffix]
    if run_id is not None:
        where.append(TRIALS.c.run_id == run_id)
    return conn.execute(
        select(TRIALS.c.id, TRIALS.c.trial_name, RUNS.c.run_key).join(RUNS, RUNS.c.id == TRIALS.c.run_id)
        .where(*where).order_by(TRIALS.c.trial_name, RUNS.c.run_key).limit(_CANDIDATES_SHOWN + 1)
    ).all() if prefix else []


def is_own_trace(trace_source: str) -> bool:
    """Whether an episode of this trace source is one of its trial's own conversations: Python's
    reading of warehouse.summaries.own_trace_sql (main, main#<n>, step:<name>; not a subagent)."""
    return (trace_source == MAIN or trace_source.startswith("main#")
            or (trace_source.startswith("step:") and "/" not in trace_source))


def _step_order(steps: list[dict[str, Any]]) -> dict[str, int]:
    """{trace source: position} of a multi-step trial's steps, in the order its detail lists them."""
    return {f"step:{s['name']}": i for i, s in enumerate(steps) if isinstance(s.get("name"), str)}


def _source_key(trace_source: str, order: dict[str, int]) -> tuple:
    """Trace sources in reading order: the main trace, its further parts (main#2 before main#10),
    the steps in the trial's order, then the rest by name; each conversation's subagents after it."""
    own = trace_source.split("/", 1)[0] if trace_source.startswith("step:") else trace_source
    if own == MAIN or own.startswith("main#"):
        number = own[len("main#"):]
        rank: tuple = (0, int(number) if number.isdigit() else -1, own)
    elif own in order:
        rank = (1, order[own], own)
    else:
        rank = (2, 0, own)
    return (*rank, trace_source != own, trace_source)


def _choose(available, order: dict[str, int], *, episode: int | None, trace: str | None,
            all_episodes: bool) -> list:
    def ordered(episodes):
        return sorted(episodes, key=lambda ep: (_source_key(ep.trace_source, order), ep.episode_index))

    def longest(episodes):
        return max(episodes, key=lambda ep: (ep.n_turns, ep.episode_index))

    if all_episodes:
        return ordered(available)
    if trace is not None:
        pool = [ep for ep in available if ep.trace_source == trace]
        if not pool:
            have = ", ".join(dict.fromkeys(ep.trace_source for ep in ordered(available)))
            raise WarehouseError(f"no trace {trace!r} in this trial (it has: {have or 'none'})")
    elif episode is not None:
        pool = ([ep for ep in available if ep.trace_source == MAIN]
                or [ep for ep in available if is_own_trace(ep.trace_source)] or list(available))
    else:
        by_source: dict[str, list] = {}
        for ep in available:
            if is_own_trace(ep.trace_source):
                by_source.setdefault(ep.trace_source, []).append(ep)
        return ordered(longest(eps) for eps in by_source.values())
    if episode is None:
        return [longest(pool)]
    chosen = [ep for ep in ordered(pool) if ep.episode_index == episode]
    if not chosen:
        have = ", ".join(str(i) for i in sorted({ep.episode_index for ep in pool}))
        raise WarehouseError(f"no episode {episode} (this trial has: {have or 'none'})")
    return chosen[:1]


def parse_turns(spec: str) -> slice:
    """`--turns A:B` as a Python slice (either end may be left out or negative); `N` alone is
    turn N. A one-line WarehouseError for anything else."""
    start, colon, stop = str(spec).partition(":")

    def bound(value: str) -> int | None:
        value = value.strip()
        if not value:
            return None
        try:
            return int(value)
        except ValueError:
            raise WarehouseError(f"--turns is A:B (turn numbers, as a Python slice), not {spec!r}") from None

    if not colon:
        first = bound(start)
        if first is None:
            raise WarehouseError(f"--turns is A:B (turn numbers, as a Python slice), not {spec!r}")
        return slice(first, first + 1 if first != -1 else None)
    return slice(bound(start), bound(stop))


def _number_turns(trajectory: dict[str, Any], turns: str | None) -> None:
    """Number the shown turns consecutively across the shown episodes (each turn's "number", the
    web page's #turn-N) and keep only those `turns` selects; "turn_range" says which were kept."""
    every = [turn for ep in trajectory["episodes"] for turn in ep["turns"]]
    for number, turn in enumerate(every):
        turn["number"] = number
    start, stop, _ = (parse_turns(turns) if turns is not None else slice(None)).indices(len(every))
    stop = max(start, stop)
    trajectory["turn_range"] = {"start": start, "stop": stop, "of": len(every)}
    if turns is not None:
        for ep in trajectory["episodes"]:
            ep["turns"] = [turn for turn in ep["turns"] if start <= turn["number"] < stop]


def _episode(conn: Connection, ep, step_of: dict[str, dict[str, Any]]) -> dict[str, Any]:
    turns = conn.execute(
        select(TURNS.c.idx, TURNS.c.role, TURNS.c.extra, MESSAGES.c.content, MESSAGES.c.content_raw)
        .outerjoin(MESSAGES, MESSAGES.c.id == TURNS.c.message_id)
        .where(TURNS.c.episode_id == ep.id).order_by(TURNS.c.idx)
    ).all()
    name = ep.trace_source[len("step:"):].split("/", 1)[0] if ep.trace_source.startswith("step:") else None
    # A step's reward and exception are its own conversation's, not its subagents'.
    step = (step_of.get(name) or {}) if is_own_trace(ep.trace_source) else {}
    return {
        "trace_source": ep.trace_source, "episode_index": ep.episode_index,
        "n_turns": ep.n_turns, "n_chars": ep.n_chars, "extra": ep.extra,
        "step": name, "rewards": step.get("rewards"), "exception": step.get("exception"),
        "turns": [{"idx": t.idx, "role": t.role, "content": join_text(t.content, t.content_raw),
                   "extra": t.extra} for t in turns],
    }


# --- output ------------------------------------------------------------------------------

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def to_json(trajectory: dict[str, Any]) -> str:
    """One JSON object. Texts stay exact: a lone surrogate (which UTF-8 cannot carry) is
    written as its \\uXXXX escape, which JSON readers turn back into the same string."""
    text = json.dumps(_in_one_order(trajectory), ensure_ascii=False, indent=2, default=_json_default)
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _in_one_order(trajectory: dict[str, Any]) -> dict[str, Any]:
    """The trajectory with the objects read from JSON columns (rewards, exceptions, extra
    fields) in jsonb's key order, which PostgreSQL gives them in: printed the same from SQLite.
    Here, at printing, not in load_trajectory: on a 1,000-turn trial the viewer would pay a
    tenth of its page for an order no page shows."""
    episodes = [{**ep, "extra": jsonb_order(ep["extra"]), "rewards": jsonb_order(ep["rewards"]),
                 "exception": jsonb_order(ep["exception"]),
                 "turns": [{**turn, "extra": jsonb_order(turn["extra"])} for turn in ep["turns"]]}
                for ep in trajectory["episodes"]]
    return {**trajectory, "rewards": jsonb_order(trajectory["rewards"]), "episodes": episodes}


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def run_label(run_key: str, name: str | None) -> str:
    """A run as answers name it: `name (key)`, or the key alone when it has no other name."""
    return run_key if not name or name == run_key else f"{name} ({run_key})"


# Dim (SGR 2) for thinking when colour is on; the reset after it.
_DIM, _RESET = "\x1b[2m", "\x1b[0m"


def to_text(trajectory: dict[str, Any], *, color: bool = False) -> str:
    """The trajectory for a person at a terminal: a header, then each shown episode (a step of a
    multi-step trial under its name and reward) and its turns, tool calls as calls, then the
    verifier. Control characters (escape sequences, carriage returns) in the data are shown, not
    obeyed; `color` dims thinking (the only escapes written are this module's own)."""
    t = trajectory
    lines = []

    def field(label: str, value: Any) -> None:
        if value not in (None, "", []):
            lines.append(f"{label:<10}{printable(str(value))}")

    field("trial", f"{t['trial_name']}  (id {t['id']})")
    field("run", run_label(t["run_key"], t.get("run_name")))
    field("task", t["task"])
    field("agent", " ".join(v for v in (t["agent"], t["agent_version"]) if v))
    field("model", t["model"])
    field("reward", t["reward"])
    if t["rewards"] and set(t["rewards"]) != {"reward"}:
        field("rewards", _rewards(t["rewards"]))
    field("result", t["result"])
    field("status", t["status"])
    field("exception", ": ".join(v for v in (t["exception_type"], t["exception_message"]) if v))
    tokens = {"in": t["n_input_tokens"], "cache": t["n_cache_tokens"], "out": t["n_output_tokens"]}
    field("tokens", ", ".join(f"{k} {v}" for k, v in tokens.items() if v is not None))
    field("sources", ", ".join(t["sources"]))
    shown = len(t["episodes"])
    field("episodes", f"{t['n_episodes']} (showing {shown}; the others are listed at the end)"
          if shown < t["n_episodes"] else t["n_episodes"])
    span = t.get("turn_range") or {}
    if span and (span["start"], span["stop"]) != (0, span["of"]):
        field("turns", f"{span['start']}:{span['stop']} of {span['of']} (--turns)")
    for ep in t["episodes"]:
        if span and not ep["turns"] and ep["n_turns"]:
            continue  # --turns left none of this episode's turns
        lines.append("")
        lines.extend(_episode_header(ep))
        if ep.get("exception"):
            lines.extend(printable(f"exception {_exception(ep['exception'])}").split("\n"))
        for turn in ep["turns"]:
            lines.append("")
            lines.append(f"[{turn.get('number', turn['idx'])}] {turn['role']}")
            lines.extend(_turn_lines(turn["content"], color))
            lines.extend("    " + line for line in _kept_in_turn(turn["extra"] or {}))
        if ep["turns"] and ep["turns"][-1]["idx"] != ep["n_turns"] - 1:
            continue  # --turns ends before this episode does: what comes after its turns is not shown
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
    lines.extend(_others_lines(t))
    return "\n".join(lines) + "\n"


def _rewards(rewards: Any) -> str:
    """Rewards for reading: "reward" first, then by name (PostgreSQL's JSONB keeps keys in an
    order of its own), floats to 4 significant digits (--format json has them exact)."""
    if not isinstance(rewards, dict):
        return json.dumps(rewards, ensure_ascii=False)
    keys = sorted(rewards, key=lambda key: (key != "reward", key))
    return " · ".join(f"{key} {_number(rewards[key])}" for key in keys)


def _number(value: Any) -> str:
    if isinstance(value, float):  # 1.0 and 0.5 as they are, 0.4523809523809524 as 0.4524
        return repr(value) if len(repr(value)) <= 8 else f"{value:.4g}"
    return json.dumps(value, ensure_ascii=False)


def _exception(exception: Any) -> str:
    if isinstance(exception, dict):
        return ": ".join(str(exception[k]) for k in ("exception_type", "exception_message", "type", "message")
                         if exception.get(k)) or json.dumps(exception, ensure_ascii=False)
    return str(exception)


def _episode_header(ep: dict[str, Any]) -> list[str]:
    """An episode's header line; a step's names its reward (every reward key on a line below,
    when it has others)."""
    if ep.get("step") is None or not is_own_trace(ep["trace_source"]):
        return [printable(f"── episode {ep['episode_index']} ({ep['trace_source']}): {ep['n_turns']} turns ──")]
    rewards = ep.get("rewards")
    if not rewards:
        reward = "no reward"
    elif isinstance(rewards, dict) and "reward" in rewards:
        reward = f"reward {_number(rewards['reward'])}"
    else:
        reward = _rewards(rewards) if not isinstance(rewards, dict) or len(rewards) == 1 else f"{len(rewards)} rewards"
    lines = [printable(f"── step {ep['step']} · {reward} · {ep['n_turns']} turns ──")]
    if isinstance(rewards, dict) and set(rewards) - {"reward"} and len(rewards) > 1:
        lines.append(printable(f"rewards   {_rewards(rewards)}"))
    return lines


def _others_lines(t: dict[str, Any]) -> list[str]:
    """The episodes not shown, by trace source, and how to show one."""
    others = t.get("others") or []
    if not others:
        return []
    shown = {ep["trace_source"] for ep in t["episodes"]}
    by_source: dict[str, list[dict[str, Any]]] = {}
    for other in others:
        by_source.setdefault(other["trace_source"], []).append(other)
    lines = ["", "── other episodes (show one with --trace SOURCE [--episode N]; --all shows every one) ──"]
    for source, eps in by_source.items():
        if source in shown:
            what = (f"{len(eps)} shorter episodes (prefixes of the one shown)" if len(eps) > 1
                    else "1 shorter episode (a prefix of the one shown)")
        else:
            listed = ", ".join(f"episode {ep['episode_index']} ({ep['n_turns']} turns)" for ep in eps[:4])
            what = listed + (f", … ({len(eps)} in all)" if len(eps) > 4 else "")
        lines.append(printable(f"    {source}: {what}"))
    return lines


# How much of a tool call's argument the text shows: a line's characters, a value's lines.
_ARG_CHARS, _ARG_LINES = 200, 40
_INDENT = "    "


def _turn_lines(content: str | None, color: bool) -> list[str]:
    """A turn's text as indented lines: text as it is, thinking as a marked (and, in colour,
    dimmed) block, each tool call as `→ call NAME(arg=value, …)`."""
    lines: list[str] = []
    for part in split_turn(content):
        if part.kind == "text":
            if part.text.strip():
                lines.extend(_INDENT + line for line in printable(part.text.strip("\n")).split("\n"))
        elif part.kind == "thinking":
            body = [_INDENT + "│ " + line for line in printable(part.text.strip("\n")).split("\n")]
            block = [_INDENT + "[thinking]", *body]
            lines.extend(f"{_DIM}{line}{_RESET}" for line in block) if color else lines.extend(block)
        else:
            lines.extend(_INDENT + line for line in _call_lines(part))
    return lines


def _call_lines(part: Part) -> list[str]:
    if part.name is None:  # not a call the JSON names: as it was written
        return ["→ call (unparsed)", *("  " + line for line in printable(part.text).split("\n"))]
    arguments = part.arguments
    if arguments is None or arguments == {}:
        return [printable(f"→ call {part.name}()")]
    if not isinstance(arguments, dict):
        return [printable(f"→ call {part.name}({_value(arguments)})")]
    values = {key: _value(value) for key, value in arguments.items()}
    one_line = f"→ call {part.name}(" + ", ".join(f"{key}={value}" for key, value in values.items()) + ")"
    if "\n" not in one_line and len(one_line) <= 100:
        return [printable(one_line)]
    lines = [printable(f"→ call {part.name}(")]
    for key, value in values.items():
        first, *rest = value.split("\n")
        lines.append(printable(f"      {key}={first}"))
        lines.extend(printable("        " + line) for line in rest)
    lines.append(")")
    return lines


def _value(value: Any) -> str:
    """An argument's value for reading: a string quoted, on its own lines when it has several
    (code, a file's text), else JSON; cut past _ARG_CHARS characters a line or _ARG_LINES lines,
    saying how much more there is (--format json has it all)."""
    if isinstance(value, str) and "\n" in value:
        lines = value.split("\n")
        shown = [_cut(line) for line in lines[:_ARG_LINES]]
        if len(lines) > _ARG_LINES:
            shown.append(f"… {len(lines) - _ARG_LINES} more lines")
        return '"""\n' + "\n".join(shown) + '\n"""'
    return _cut(json.dumps(value, ensure_ascii=False))


def _cut(line: str) -> str:
    return line if len(line) <= _ARG_CHARS else f"{line[:_ARG_CHARS]}… ({len(line) - _ARG_CHARS} more characters)"


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
