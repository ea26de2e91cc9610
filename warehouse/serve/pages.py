"""What each page of `warehouse serve` shows, as plain data: every statement read-only through
warehouse.readonly (the read path of every read command: a connection that cannot write, the
page's time limit), every list capped (a page of trials, a canned query's rows).

The functions take a `Viewer` (the database and the limits) and the page's query parameters, and
return dicts the templates render; a value a user typed that is wrong raises WarehouseError,
which the app shows as a 400 page with its one line."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import Any

from sqlalchemy.engine import URL

from warehouse.errors import WarehouseError
from warehouse.filters import Filters
from warehouse.queries import QUERIES, run_canned
from warehouse.queries.catalog import as_utc
from warehouse.readonly import readonly_session
from warehouse.report import run_titles
from warehouse.runs import labels_of, natural_key, resolve_run
from warehouse.texts import join_text, json_from_db
from warehouse.turn_parts import Part, split_turn

PAGE_SIZE = 100  # trials on one page of a run
MAX_PAGE_SIZE = 1000
SUCCESS = 1.0  # the canned queries' default threshold: a trial is solved at reward >= 1


class NotFound(WarehouseError):
    """What a page names is not in the warehouse (a 404, where other refusals are a 400)."""


def _run(conn, spec: str):
    with _missing("no run "):
        return resolve_run(conn, spec)


@contextmanager
def _missing(start: str):
    """A WarehouseError that says nothing is named so (its message starts with `start`) as NotFound."""
    try:
        yield
    except WarehouseError as exc:
        if str(exc).startswith(start) and not isinstance(exc, NotFound):
            raise NotFound(str(exc)) from None
        raise


@dataclass(frozen=True)
class Viewer:
    url: URL
    timeout: float  # seconds, for each page's reads
    max_rows: int  # rows a canned query's page shows (and downloads)

    def session(self):
        return readonly_session(self.url, timeout=self.timeout, own_text=True)


# --- filters, as query parameters ------------------------------------------------------------

# The filters' query parameters, the CLI's options' names; since and until take one value.
FILTER_PARAMS = ("run", "task", "model", "agent", "label", "since", "until")
_ONE_VALUE = ("since", "until")


def filters_from(args: Mapping[str, Sequence[str]]) -> Filters:
    """The canned queries' filters (--run, --task, --model, --agent, --label, --since, --until)
    from query parameters, each repeatable but since and until; empty values are no filter."""
    values = {name: [v for v in args.get(name, ()) if v] for name in FILTER_PARAMS}
    return Filters.of(**{name: (v[-1] if name in _ONE_VALUE else v) if v else None for name, v in values.items()})


def _dicts(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(columns, row)) for row in rows]


def _json(value: Any) -> Any:
    """A JSON column read raw: SQLite gives its text, PostgreSQL the value; either as the Json
    column type hands it back (warehouse.texts)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json_from_db(value)


# --- runs ------------------------------------------------------------------------------------

RUN_SORTS = ("name", "trials", "pass_rate", "mean_reward", "errors", "first_started")


def runs_page(viewer: Viewer, filters: Filters, sort: str = "name", desc: bool = False) -> dict[str, Any]:
    """Every run the filters keep: name, key, labels, trials, pass rate with its interval."""
    if sort not in RUN_SORTS:
        raise WarehouseError(f"sort must be one of {', '.join(RUN_SORTS)}, not {sort!r}")
    runs = run_canned(viewer.url, QUERIES["runs"], {}, filters=filters, timeout=viewer.timeout)
    rates = run_canned(viewer.url, QUERIES["pass-rate"], {"by": "run"}, filters=filters, timeout=viewer.timeout)
    rows = _dicts(runs.columns, runs.rows)
    interval = {r["run_key"]: r for r in _dicts(rates.columns, rates.rows)}
    with viewer.session() as session:
        conn = session.connection
        ids = dict(conn.exec_driver_sql("SELECT run_key, id FROM runs").all())
        labels = labels_of(conn, [ids[r["run_key"]] for r in rows if r["run_key"] in ids])
    titles = run_titles(rows)
    for row in rows:
        rate = interval.get(row["run_key"], {})
        row["title"] = titles[row["run_key"]]
        row["labels"] = labels.get(ids.get(row["run_key"]), {})
        row["pass_rate_low"], row["pass_rate_high"] = rate.get("pass_rate_low"), rate.get("pass_rate_high")
        row["n_tasks"] = rate.get("n_tasks")

    def key(row):
        value = row["title"] if sort == "name" else row.get(sort)
        if sort == "name":
            return (0, natural_key(value))
        return (value is None, value if value is not None else 0)

    rows.sort(key=key, reverse=desc)
    if desc:  # runs without a value stay last
        rows.sort(key=lambda row: sort != "name" and row.get(sort) is None)
    return {"runs": rows, "note": "\n".join(n for n in (runs.note, rates.note) if n) or None}


# --- a run's trials --------------------------------------------------------------------------

TRIAL_SORTS = {
    "trial": "t.trial_name", "task": "k.name", "reward": "t.reward", "status": "t.status",
    "exception": "t.exception_type", "turns": "l.turns", "input_tokens": "t.n_input_tokens",
    "output_tokens": "t.n_output_tokens", "cost": "t.cost_usd", "started": "t.started_at",
    "time": None,  # the backend's own arithmetic: _DURATION
}
NOT_NULL_SORTS = ("trial", "status")  # trials.trial_name and trials.status are NOT NULL
_DURATION = {
    # In milliseconds: a difference of julian days carries float noise, which would order equal
    # durations by their start rather than by name.
    "sqlite": "round((julianday(t.finished_at) - julianday(t.started_at)) * 86400000)",
    "postgresql": "(t.finished_at - t.started_at)",
}
OUTCOMES = ("solved", "unsolved", "error")
_OUTCOME_SQL = {
    "solved": "t.reward >= :success",
    "unsolved": "(t.reward IS NULL OR t.reward < :success)",
    "error": "t.exception_type IS NOT NULL",
}

_TRIALS_FROM = """
FROM trials t
LEFT JOIN tasks k ON k.id = t.task_id
LEFT JOIN trial_lengths l ON l.trial_id = t.id
WHERE t.run_id = :run_id AND {where}
"""
_TRIAL_COLUMNS = """
SELECT t.id, t.trial_name, k.name AS task, t.reward, t.rewards, t.status, t.exception_type,
       l.turns, t.n_input_tokens, t.n_output_tokens, t.cost_usd, t.started_at, t.finished_at
"""


def trials_page(viewer: Viewer, run: str, filters: Filters, *, outcome: str | None = None,
                sort: str = "trial", desc: bool = False, page: int = 1,
                size: int = PAGE_SIZE) -> dict[str, Any]:
    """One page of a run's trials, filtered (task, model, agent globs; solved, unsolved or
    error) and sorted; with the count of all that match."""
    if sort not in TRIAL_SORTS:
        raise WarehouseError(f"sort must be one of {', '.join(TRIAL_SORTS)}, not {sort!r}")
    if outcome not in (None, *OUTCOMES):
        raise WarehouseError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise WarehouseError(f"size must be from 1 to {MAX_PAGE_SIZE}, not {size}")
    if page < 1:
        raise WarehouseError(f"page must be 1 or more, not {page}")
    backend = viewer.url.get_backend_name()
    column = TRIAL_SORTS[sort] or _DURATION[backend]
    with viewer.session() as session:
        conn = session.connection
        ref = _run(conn, run)
        where, binds = filters.sql(conn, task="k.name", model="t.model", agent="t.agent", started_at="t.started_at",
                                   run_ids=None)
        if outcome:
            where = f"{where} AND {_OUTCOME_SQL[outcome]}"
            binds["success"] = SUCCESS
        binds["run_id"] = ref.id
        body = _TRIALS_FROM.format(where=where)
        total = session.fetch(f"SELECT count(*) {body}", binds).rows[0][0]
        direction = "DESC" if desc else "ASC"
        # NULLs last either way, then the name: a stable order for paging. A column that is never
        # NULL is ordered by itself, which lets the name's order be read off the run's index of
        # (run_id, trial_name), a page at a time, rather than sorting the whole run.
        nulls_last = "" if sort in NOT_NULL_SORTS else f"CASE WHEN {column} IS NULL THEN 1 ELSE 0 END, "
        order = f"{nulls_last}{column} {direction}, t.trial_name"
        result = session.fetch(f"{_TRIAL_COLUMNS} {body} ORDER BY {order} LIMIT :limit OFFSET :offset",
                               {**binds, "limit": size, "offset": (page - 1) * size}, max_rows=size, last=True)
    trials = _dicts(result.columns, result.rows)
    keys: dict[str, None] = {}
    for trial in trials:
        trial["rewards"] = _json(trial["rewards"])
        if isinstance(trial["rewards"], dict):
            keys.update(dict.fromkeys(k for k in trial["rewards"] if k != "reward"))
        started, finished = as_utc(trial.pop("started_at")), as_utc(trial.pop("finished_at"))
        trial["started"] = started
        trial["seconds"] = (finished - started).total_seconds() if started and finished else None
    return {"run": ref, "trials": trials, "reward_keys": list(keys), "total": total, "page": page,
            "pages": max(1, math.ceil(total / size)), "size": size}


# --- the canned queries ----------------------------------------------------------------------

def query_page(viewer: Viewer, name: str, params: Mapping[str, str], filters: Filters) -> dict[str, Any]:
    """A canned query's answer, its parameters from query parameters (as their CLI options name
    them, without the dashes: `by`, `per_task`, `k`), at most viewer.max_rows rows."""
    canned = QUERIES.get(name)
    if canned is None:
        raise WarehouseError(f"no canned query {name!r}: the queries are {', '.join(QUERIES)}")
    given: dict[str, Any] = {}
    for param in canned.params:
        raw = params.get(param.name)
        if raw in (None, ""):
            continue
        if param.type is bool:
            given[param.name] = raw not in ("0", "false", "off", "no")
        else:
            given[param.name] = raw
    missing = [p.option for p in canned.params if p.required and p.name not in given]
    if missing:
        return {"query": canned, "given": given, "columns": [], "rows": [], "raw": [], "truncated": False,
                "note": f"give {' and '.join(missing)} to run this query", "missing": True}
    result = run_canned(viewer.url, canned, given, filters=filters, timeout=viewer.timeout)
    rows = result.rows
    truncated = len(rows) > viewer.max_rows
    kept = rows[:viewer.max_rows]
    # `raw`: the rows as the database gave them, for a download that must equal `warehouse
    # query NAME --format csv/json`; `rows`: as the page shows them.
    return {"query": canned, "given": given, "columns": list(result.columns), "raw": kept,
            "rows": [list(row) for row in kept],
            "truncated": truncated, "note": result.note, "missing": False}


def matrix_page(viewer: Viewer, filters: Filters) -> dict[str, Any]:
    """The solve matrix: tasks down, runs across, attempts and successes in each cell."""
    result = run_canned(viewer.url, QUERIES["solve-matrix"], {}, filters=filters, timeout=viewer.timeout)
    runs_result = run_canned(viewer.url, QUERIES["runs"], {}, filters=filters.runs_only(), timeout=viewer.timeout)
    titles = run_titles(_dicts(runs_result.columns, runs_result.rows))
    # Thousands of rows (tasks × runs): read by position, each cell made once, in the runs'
    # order (None where a run has no attempt), so the page looks nothing up while it renders.
    task_at, run_at, attempts_at, successes_at = (result.columns.index(c)
                                                   for c in ("task", "run_key", "attempts", "successes"))
    keys = sorted({row[run_at] for row in result.rows}, key=lambda k: natural_key(titles.get(k, k)))
    column = {key: i for i, key in enumerate(keys)}
    cells: dict[str, list[tuple[str, str] | None]] = {}
    # The rows come a task at a time (ordered by task): each task's row of cells is made once.
    for task, rows in groupby(result.rows, key=itemgetter(task_at)):
        row_cells = cells.setdefault(task or "", [None] * len(keys))
        for row in rows:
            successes, attempts = row[successes_at], row[attempts_at]
            how = "all" if successes == attempts else "none" if successes == 0 else "some"
            row_cells[column[row[run_at]]] = (how, f"{successes}/{attempts}")
    tasks = sorted(cells, key=natural_key)
    return {"runs": [(key, titles.get(key, key)) for key in keys], "tasks": tasks,
            "grid": [(task, cells[task]) for task in tasks], "note": result.note}


def search_page(viewer: Viewer, text: str, *, filters: Filters, role: str | None, limit: int,
                regex: bool = False) -> dict[str, Any]:
    from warehouse.search import search

    found = search(viewer.url, text, filters=filters, role=role, limit=limit, regex=regex, timeout=viewer.timeout)
    return {"hits": _dicts(found.columns, found.rows), "truncated": found.truncated, "note": found.note}


# --- a trial ---------------------------------------------------------------------------------

# Characters of one turn's text a page shows; the rest is a link to the whole text (text/plain).
TURN_CHARS = 20_000


def trial_page(viewer: Viewer, run: str, name: str, *, source: str | None = None,
               episode: int | None = None) -> dict[str, Any]:
    """A trial's trajectory: its own conversations (every step of a multi-step trial, each
    with its reward), or the one episode `source` and `episode` pick; turns numbered from 0
    down the page, which is what #turn-N names."""
    from warehouse.show import trajectory_on

    with viewer.session() as session:
        conn = session.connection
        ref = _run(conn, run)
        with _missing("no trial "):
            trajectory = trajectory_on(conn, f"{ref.run_key}/{name}", trace=source, episode=episode)
    return {"trial": trajectory, "run": ref, "steps": _steps(trajectory), "fields": _fields(trajectory),
            "others": trajectory.get("others") or []}


def _steps(trajectory: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The shown episodes, each with its turns made ready for the page, numbered down the page."""
    steps, number = [], 0
    for ep in trajectory["episodes"]:
        turns = []
        for turn in ep["turns"]:
            turns.append(turn_view(number, turn, ep))
            number += 1
        steps.append({**{k: v for k, v in ep.items() if k != "turns"}, "turns": turns})
    return steps


def turn_view(number: int, turn: Mapping[str, Any], ep: Mapping[str, Any]) -> dict[str, Any]:
    """One turn as the page shows it: its text in parts (prose and code blocks, thinking, tool
    calls with their arguments), cut at TURN_CHARS, and what the trace kept beside it."""
    content = turn["content"] or ""
    cut = len(content) > TURN_CHARS
    # Harbor joins a step's parts with newlines: text parts of whitespace alone are not shown.
    parts = [_part_view(part) for part in split_turn(content[:TURN_CHARS] if cut else content)
             if part.kind != "text" or part.text.strip()]
    extra = turn.get("extra") or {}
    if not any(p["kind"] == "tool_call" for p in parts):
        for call in extra.get("tool_calls") or []:
            if isinstance(call, dict):
                parts.append({"kind": "tool_call", "name": call.get("function_name"),
                              "arguments": _arguments(call.get("arguments")), "text": None, "from_trace": True})
    observation = extra.get("observation")
    results = observation.get("results") if isinstance(observation, dict) else None
    kept = [r.get("content") for r in results if isinstance(r, dict)] if isinstance(results, list) else []
    return {"number": number, "idx": turn["idx"], "role": turn["role"], "parts": parts, "cut": cut,
            "length": len(content), "source": ep["trace_source"], "episode": ep["episode_index"],
            "observations": [_plain_text(c) for c in kept if c not in (None, "")],
            "timestamp": extra.get("timestamp"), "metrics": extra.get("metrics")}


def _part_view(part: Part) -> dict[str, Any]:
    if part.kind == "tool_call":
        return {"kind": "tool_call", "name": part.name, "text": part.text,
                "arguments": _arguments(part.arguments) if part.name is not None else None}
    return {"kind": part.kind, "blocks": blocks(part.text)}


def _arguments(arguments: Any) -> list[tuple[str, str, bool]] | None:
    """A call's arguments as (name, value, is_long) for the page: a mapping's items, each value
    as its text (a string as it is, anything else as JSON)."""
    if arguments is None:
        return None
    if not isinstance(arguments, dict):
        return [("", json.dumps(arguments, ensure_ascii=False, indent=2), True)]
    out = []
    for key, value in arguments.items():
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
        out.append((str(key), shown, "\n" in shown or len(shown) > 80))
    return out


def _plain_text(content: Any) -> str:
    if isinstance(content, list) and all(isinstance(p, dict) and "text" in p for p in content):
        return "\n".join(str(p["text"]) for p in content)
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, indent=2)


def blocks(text: str) -> list[tuple[str, str, str]]:
    """Text as (kind, text, language) blocks: "code" for each ``` fenced block (kept whole, its
    fences dropped), "prose" for the rest. An unclosed fence runs to the end."""
    out: list[tuple[str, str, str]] = []
    lines = text.split("\n")
    prose: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            if prose:
                out.append(("prose", "\n".join(prose), ""))
                prose = []
            language = line.lstrip()[3:].strip()
            code: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith("```"):
                code.append(lines[i])
                i += 1
            out.append(("code", "\n".join(code), language))
        else:
            prose.append(line)
        i += 1
    if prose and any(prose):
        out.append(("prose", "\n".join(prose), ""))
    return out


_FIELD_NAMES = (
    ("task", "task"), ("status", "status"), ("reward", "reward"), ("rewards", "rewards"), ("result", "result"),
    ("agent", "agent"), ("agent_version", "agent version"), ("model", "model"), ("model_provider", "provider"),
    ("exception_type", "exception"), ("started_at", "started"), ("finished_at", "finished"),
    ("n_input_tokens", "tokens in"), ("n_cache_tokens", "tokens cached"), ("n_output_tokens", "tokens out"),
    ("cost_usd", "cost $"), ("sources", "sources"),
)


def _fields(trajectory: Mapping[str, Any]) -> list[tuple[str, Any]]:
    out = []
    for key, label in _FIELD_NAMES:
        value = trajectory.get(key)
        if value in (None, "", [], {}):
            continue
        if isinstance(value, (dict, list)):
            value = json.dumps(value, ensure_ascii=False) if key != "sources" else ", ".join(value)
        out.append((label, value))
    return out


def turn_text(viewer: Viewer, trial_id: int, *, source: str, episode: int, turn: int) -> str:
    """One turn's whole text (what a page cut at TURN_CHARS links to)."""
    sql = ("SELECT m.content, m.content_raw FROM episodes e "
           "JOIN conversation_turns ct ON ct.conversation_id = e.conversation_id AND ct.idx = :turn "
           "AND ct.idx < e.n_turns LEFT JOIN messages m ON m.id = ct.message_id "
           "WHERE e.trial_id = :trial AND e.trace_source = :source AND e.episode_index = :episode")
    with viewer.session() as session:
        rows = session.fetch(sql, {"trial": trial_id, "source": source, "episode": episode, "turn": turn},
                             max_rows=1, last=True).rows
    if not rows:
        raise WarehouseError(f"no turn {turn} in episode {episode} ({source}) of trial {trial_id}")
    return join_text(*rows[0]) or ""


# --- two trials side by side -----------------------------------------------------------------

def diff_page(viewer: Viewer, a: str, b: str) -> dict[str, Any]:
    """Trials `a` and `b` (RUN/TRIAL, a trial name, or an id), their turns aligned (equal
    turns opposite each other, a turn only one has opposite a gap), the first row where they
    differ marked."""
    from warehouse.show import trajectory_on

    with viewer.session() as session:
        conn = session.connection
        with _missing("no trial "):
            left = trajectory_on(conn, a)
            right = trajectory_on(conn, b)
    left_turns = [t for s in _steps(left) for t in s["turns"]]
    right_turns = [t for s in _steps(right) for t in s["turns"]]
    rows = align(left_turns, right_turns)
    first = next((i for i, row in enumerate(rows) if not row["same"]), None)
    return {"a": left, "b": right, "rows": rows, "first": first,
            "a_url": (left["run_key"], left["trial_name"]), "b_url": (right["run_key"], right["trial_name"])}


def align(left: Sequence[Mapping[str, Any]], right: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows of (left turn or None, right turn or None, same): a longest common subsequence of
    the turns by role and text (difflib's, with its junk heuristic off: every turn counts)."""
    from difflib import SequenceMatcher

    def key(turn):
        return (turn["role"], json.dumps(turn["parts"], sort_keys=True, default=str))

    lk, rk = [key(t) for t in left], [key(t) for t in right]
    rows: list[dict[str, Any]] = []
    for op, i1, i2, j1, j2 in SequenceMatcher(None, lk, rk, autojunk=False).get_opcodes():
        if op == "equal":
            rows.extend({"a": left[i], "b": right[j], "same": True} for i, j in zip(range(i1, i2), range(j1, j2)))
            continue
        # A replaced run: paired up turn by turn, the longer side's rest opposite gaps.
        for k in range(max(i2 - i1, j2 - j1)):
            rows.append({"a": left[i1 + k] if i1 + k < i2 else None,
                         "b": right[j1 + k] if j1 + k < j2 else None, "same": False})
    return rows
