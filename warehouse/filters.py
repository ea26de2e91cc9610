"""What every query, export and report can be narrowed to: some runs, tasks, models, agents, or
the runs carrying some labels. One `Filters` value, turned into one SQL predicate over whichever
columns the caller's statement has.

Meanings (the same everywhere):
- `runs`: run specs (warehouse.runs.resolve_run: a key, a unique prefix of it, or a name);
- `labels`: `(key, value)` pairs; a run must carry every one;
- `tasks`, `models`, `agents`: globs (`*` any text, `?` one character). Without a wildcard a
  glob is an exact, case-sensitive match; with one it matches ignoring ASCII case, on both
  backends alike. A model matches when it is the value, or either one is the other with a
  provider prefix in front (whole `/` segments): `--model anthropic/kimi-k2.6` matches trials
  stored as `anthropic/kimi-k2.6` (single-step trials, Hub rows) and as `kimi-k2.6` (Harbor's
  multi-step trials, which record the model without its provider), not `openai/kimi-k2.6`;
  `--model kimi-k2.6` matches all three. A glob likewise (model_terms).
- `since`, `until`: a window on the trials' start (`started_at`): at or after `since`, before
  `until` (parse_when: a date, a time, or an age such as 7d). A trial whose start is unknown is
  in no window.
Several values of one filter are alternatives (OR); different filters all apply (AND).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Connection, text

from warehouse.errors import WarehouseError
from warehouse.runs import label_pairs, resolve_runs, runs_with_labels

# How many `/` an expression holds.
_SLASHES = "(length({m}) - length(replace({m}, '/', '')))"


# Filters.sql's run_ids when the caller has not resolved them.
_UNRESOLVED = object()


def _as_tuple(values: str | Iterable[str] | None) -> tuple[str, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        return (values,)
    return tuple(str(v) for v in values)


def _like(glob: str) -> str:
    """A glob as a LIKE pattern with `\\` as the escape character."""
    escaped = glob.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")


def has_wildcard(glob: str) -> bool:
    return "*" in glob or "?" in glob


# An age, back from now: 12h, 7d, 2w.
_AGE = re.compile(r"(\d+)\s*([hdw])")
_AGE_UNITS = {"h": "hours", "d": "days", "w": "weeks"}
WHEN_FORMS = "a date (2026-06-04), a time (2026-06-04T13:00, UTC unless it names its zone) or an age (12h, 7d, 2w)"
# Where a window past the calendar's ends stops: an age older than year 1, the day after
# 9999-12-31, a time whose zone puts it outside the range in UTC.
_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)
_LATEST = datetime.max.replace(tzinfo=timezone.utc)


def parse_when(value: str | date | datetime | None, option: str, *, end: bool = False) -> datetime | None:
    """A --since or --until value as an aware UTC datetime. A date alone is its midnight (UTC),
    or with `end` (--until) the next one, so that the day itself is in the window; a time
    without a zone is UTC, as the warehouse stores times; an age is that long before now."""
    if value is None or isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        try:
            moment = datetime(value.year, value.month, value.day) + timedelta(days=1 if end else 0)
        except OverflowError:
            moment = _LATEST
    else:
        given = str(value).strip()
        if age := _AGE.fullmatch(given):
            try:
                moment = datetime.now(timezone.utc) - timedelta(**{_AGE_UNITS[age[2]]: int(age[1])})
            except OverflowError:
                moment = _EARLIEST
        else:
            try:
                if re.fullmatch(r"\d{4}-\d{2}-\d{2}", given):
                    return parse_when(date.fromisoformat(given), option, end=end)
                moment = datetime.fromisoformat(given)
            except ValueError:
                raise WarehouseError(f"{option} takes {WHEN_FORMS}, not {given!r}") from None
    if moment is None:
        return None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=timezone.utc)
    try:
        return moment.astimezone(timezone.utc)
    except OverflowError:
        return _EARLIEST if moment.year == datetime.min.year else _LATEST


def when_text(moment: datetime) -> str:
    """A window's end as the warehouse shows times: ISO 8601 in UTC, with its zone."""
    return moment.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Filters:
    runs: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    since: datetime | None = None
    until: datetime | None = None

    @classmethod
    def of(cls, *, run=None, task=None, model=None, agent=None, label=None, since=None, until=None) -> "Filters":
        """From options as typed or passed to the API: each a value or a list of values;
        labels as `key=value` text, `(key, value)` pairs or a mapping; since and until as
        parse_when takes them."""
        start, end = parse_when(since, "--since"), parse_when(until, "--until", end=True)
        if start is not None and end is not None and start >= end:
            raise WarehouseError(f"--since {since} is not before --until {until}")
        return cls(_as_tuple(run), _as_tuple(task), _as_tuple(model), _as_tuple(agent), label_pairs(label),
                   start, end)

    def keywords(self) -> dict[str, Any]:
        """These filters as the keywords of Filters.of (and of the API's query and search), which
        give them back the same."""
        return {"run": self.runs or None, "task": self.tasks or None, "model": self.models or None,
                "agent": self.agents or None, "label": list(self.labels) or None, "since": self.since, "until": self.until}

    def __bool__(self) -> bool:
        return bool(self.runs or self.tasks or self.models or self.agents or self.labels or self.times)

    @property
    def times(self) -> bool:
        """Whether these filters hold a window on the trials' start (--since, --until)."""
        return self.since is not None or self.until is not None

    @property
    def narrows_trials(self) -> bool:
        """Whether these filters pick trials within a run (by task, model, agent or start), not only runs."""
        return bool(self.tasks or self.models or self.agents or self.times)

    @property
    def needs_connection(self) -> bool:
        """Whether sql() needs the connection: to resolve runs and labels, or for its dialect
        (a time is bound as each backend stores it)."""
        return self.names_runs or self.times

    @property
    def names_runs(self) -> bool:
        """Whether these filters name runs or labels, which run_ids resolves in the database."""
        return bool(self.runs or self.labels)

    def runs_only(self) -> "Filters":
        """The part of these filters that picks runs (runs and labels)."""
        return Filters(runs=self.runs, labels=self.labels)

    def run_ids(self, conn: Connection) -> set[int] | None:
        """The runs these filters allow, or None when they do not restrict runs. An unknown
        or ambiguous run spec is an error here, before any query runs."""
        ids: set[int] | None = None
        if self.runs:
            ids = {ref.id for ref in resolve_runs(conn, self.runs)}
        if self.labels:
            labelled = runs_with_labels(conn, self.labels)
            ids = labelled if ids is None else ids & labelled
        return ids

    def sql(self, conn: Connection, *, run_id: str | None = None, task: str | None = None,
            model: str | None = None, agent: str | None = None, task_id: str | None = None,
            started_at: str | None = None,
            run_ids: set[int] | None | object = _UNRESOLVED) -> tuple[str, dict[str, Any]]:
        """A predicate over the column expressions named (e.g. `run_id="b.run_id"`), and its
        binds, named `f_…` so as not to meet the statement's own. `1=1` when nothing filters.
        A table with a task's id but not its name gives `task_id`: the globs are then matched
        in `tasks`, once, not once per row. `run_ids`: what run_ids(conn) gave, for a caller
        making several predicates from these filters (the runs resolved once, not per slot)."""
        binds: dict[str, Any] = {}
        terms: list[str] = []

        def need(column: str | None, option: str) -> str:
            if column is None:
                raise WarehouseError(f"this query cannot be narrowed by {option}")
            return column

        def globs(kind: str, column: str, values: tuple[str, ...]) -> str:
            # Named by filter and position, so every predicate made from one Filters (a
            # statement may need several, over different tables) binds a name to one value.
            return "(" + " OR ".join(_matching(kind, column, glob, f"f_{kind}_{i}", binds)
                                     for i, glob in enumerate(values)) + ")"

        ids = self.run_ids(conn) if run_ids is _UNRESOLVED else run_ids
        if ids is not None:
            # Integers the database gave: written in, so callers need no expanding binds.
            column = need(run_id, "--run or --label")
            terms.append(f"{column} IN ({', '.join(str(i) for i in sorted(ids))})" if ids else "1=0")
        if self.tasks and task is None and task_id is not None:
            terms.append(f"{task_id} IN (SELECT tk_f.id FROM tasks tk_f WHERE {globs('task', 'tk_f.name', self.tasks)})")
        elif self.tasks:
            terms.append(globs("task", need(task, "--task"), self.tasks))
        if self.models:
            terms.append(globs("model", need(model, "--model"), self.models))
        if self.agents:
            terms.append(globs("agent", need(agent, "--agent"), self.agents))
        if self.times:
            terms.append(self._window(conn, need(started_at, "--since or --until"), "f_", binds))
        return (" AND ".join(terms) if terms else "1=1"), binds

    def _window(self, conn: Connection, column: str, name: str, binds: dict[str, Any]) -> str:
        """`column` (a trial's start) is within --since and --until, binding their values as
        the backend stores times: SQLite as text in UTC (which compares in time order), and
        PostgreSQL as aware datetimes."""
        terms = []
        for end, value, test in (("since", self.since, ">="), ("until", self.until, "<")):
            if value is not None:
                binds[f"{name}{end}"] = (value.strftime("%Y-%m-%d %H:%M:%S.%f") if conn.dialect.name == "sqlite"
                                         else value)
                terms.append(f"{column} {test} :{name}{end}")
        return " AND ".join(terms)

    def unmatched(self, conn: Connection) -> str | None:
        """One line naming each value of these filters that matches nothing in the warehouse (a
        task glob no task's name matches, a model or agent no trial has, a label no run
        carries), with the tasks a task value names as the end of theirs (`task-calendar`:
        `pinchbench/task-calendar`); None when each matches something. An answer narrowed to
        nothing is still an answer: callers show this beside it (stderr, Result.note). Runs
        need none: an unknown one is an error (run_ids)."""
        misses = []
        for kind, table, column, values in (("task", "tasks tk_f", "tk_f.name", self.tasks),
                                            ("model", "run_task_breakdown b_f", "b_f.model", self.models),
                                            ("agent", "run_task_breakdown b_f", "b_f.agent", self.agents)):
            for glob in values:
                binds: dict[str, str] = {}
                where = _matching(kind, column, glob, "u", binds)
                if _exists(conn, f"SELECT 1 FROM {table} WHERE {where}", binds):
                    continue
                miss = f"--{kind} {glob!r} matches no {_WHAT[kind]}"
                if kind == "task":
                    binds = {}
                    names = conn.execute(text(
                        f"SELECT tk_f.name FROM tasks tk_f WHERE {_ends_with(column, glob, 'u', binds)} "
                        f"ORDER BY tk_f.name LIMIT {_HINTS + 1}"), binds).scalars().all()
                    if names:
                        shown = " or ".join(repr(n) for n in names[:_HINTS]) + (", …" if len(names) > _HINTS else "")
                        miss += f" (did you mean {shown}?)"
                misses.append(miss)
        for key, value in self.labels:
            if not _exists(conn, "SELECT 1 FROM run_labels WHERE key = :k AND value = :v", {"k": key, "v": value}):
                misses.append(f"--label {key}={value} is on no run")
        if self.times:
            binds: dict[str, Any] = {}
            if not _exists(conn, f"SELECT 1 FROM trials t_f WHERE {self._window(conn, 't_f.started_at', 'u', binds)}",
                           binds):
                misses.append(f"no trial started {self.window_text()}")
        return "; ".join(misses) if misses else None

    def window_text(self) -> str:
        """The window on the trials' start, in words: `since 2026-06-04T00:00:00Z`."""
        parts = [f"{word} {when_text(value)}" for word, value in (("since", self.since), ("before", self.until))
                 if value is not None]
        return " and ".join(parts)


# How many tasks a "did you mean" names.
_HINTS = 3
_WHAT = {"task": "task", "model": "trial's model", "agent": "trial's agent"}


def _exists(conn: Connection, sql: str, binds: dict[str, str]) -> bool:
    return conn.execute(text(f"{sql} LIMIT 1"), binds).first() is not None


def _matching(kind: str, column: str, glob: str, name: str, binds: dict[str, str]) -> str:
    """The predicate by which `column` matches one value of a filter (module docstring), its
    binds named from `name`."""
    if kind == "model":
        return "(" + " OR ".join(model_terms(column, glob, name, binds)) + ")"
    if has_wildcard(glob):
        binds[name] = _like(glob).lower()
        return f"lower({column}) LIKE :{name} ESCAPE '\\'"
    binds[name] = glob
    return f"{column} = :{name}"


def _ends_with(m: str, value: str, name: str, binds: dict[str, str]) -> str:
    """`m` is `PREFIX/value` (whole `/` segments before the value; a glob as globs match)."""
    if has_wildcard(value):
        binds[f"{name}_p"] = "%/" + _like(value).lower()
        return f"lower({m}) LIKE :{name}_p ESCAPE '\\'"
    binds[f"{name}_p"] = "/" + value
    # The last len(value) + 1 characters (substr's start is 1-based; a shorter `m` gives a shorter
    # text on both backends, never equal), written in: an integer the statement may not bind (on
    # PostgreSQL a bound int is a bigint, which substr does not take).
    return f"substr({m}, length({m}) - {len(value)}) = :{name}_p"


def model_terms(m: str, value: str, name: str, binds: dict[str, str]) -> list[str]:
    """The alternatives (OR) by which the model expression `m` matches `value` (module
    docstring), binding what they need under names starting with `name`:
    - `m` is the value;
    - `m` is `PROVIDER/value` (it ends with `/value`);
    - the value is `PROVIDER/m`: `m` is one of the value's tails after a `/`, with as many `/`
      in it as that tail has (so the glob `anthropic/*` does not take `openai/gpt-4o` for a tail).
    Exact values compare exactly (no LIKE, which ignores case on SQLite), globs as other globs."""
    tails = [value[i + 1:] for i, char in enumerate(value) if char == "/" and value[i + 1:]]
    terms = [_matching("", m, value, name, binds), _ends_with(m, value, name, binds)]
    for j, tail in enumerate(tails):
        if not has_wildcard(value):
            binds[f"{name}_t{j}"] = tail
            terms.append(f"{m} = :{name}_t{j}")
            continue
        # A glob's tail, as a glob (ignoring case), where `*` could take in more `/` than it has.
        binds[f"{name}_t{j}"] = _like(tail).lower()
        terms.append(f"(lower({m}) LIKE :{name}_t{j} ESCAPE '\\' AND {_SLASHES.format(m=m)} = {tail.count('/')})")
    return terms
