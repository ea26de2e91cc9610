"""What a canned query is, and how one runs.

A canned query is data: a name, a description, its parameters, one portable SQL statement
(a file beside this module) and, where SQL alone cannot finish the job portably, a function
that post-processes the rows. It runs through the same read-only path as `warehouse sql`.

It runs on a database or on a lake (warehouse.lake: the tables' Parquet files, read by DuckDB
or Spark), through one path (run_canned, _answer): on a lake the statements are rendered for the
engine (warehouse.lake.render), and the lake answers with the definition.

The statement over the base tables is the query's definition. Most queries also have a second
statement answering the same from the summary tables (warehouse.summaries), which hold only what
the default --threshold needs: that one runs whenever the threshold is the default (or the query
has none), the definition for any other threshold. Both must give the same columns and rows; the
tests compare them.

Every query can be narrowed (warehouse.filters: --run, --task, --model, --agent, --label, --since,
--until). Its
statements say where: a slot `{name}` in the SQL is filled with the filters' predicate over the
column expressions the query declares for that slot (`filter_slots`, `summary_filter_slots`); a
slot whose name ends in `_runs` takes only the filters that pick runs. The summary statements read
`{outcomes}` instead of run_task_outcomes: the table itself when nothing narrows, else its rows
narrowed, or, for --model or --agent (which it does not hold), the same sums from
run_task_breakdown's rows of those models and agents. So filters keep the summaries' speed.
`{trials_narrowed}` is 1 when the filters pick trials within runs. A query whose summaries
cannot narrow by task, model or agent (lengths) has a third statement for that (`narrowed_sql`).
The summaries hold no trial's start: a window on it (--since, --until) answers from the
definition.

A query with --metric and --errors (warehouse.queries.outcome) reads a trial's value as `{reward}`
(its reward, or the key --metric names in its rewards) and keeps the trials `{kept}` allows (all,
or, --errors exclude, not those with an exception and no value). The summary tables hold only the
reward with errors counted as failures: any other choice answers from the base tables.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from sqlalchemy import Connection, text
from sqlalchemy.engine import URL

from warehouse.numbers import rows_without_noise
from warehouse.errors import ArgumentTypeError, ArgumentValueError, WarehouseError
from warehouse.filters import Filters
from warehouse.lake import Lake
from warehouse.queries import outcome
from warehouse.readonly import DEFAULT_TIMEOUT, ReadResult, readonly_session
from warehouse.runs import resolve_run
from warehouse.summaries import SUCCESS_THRESHOLD, check_threshold


class IntList(tuple):
    """A parameter holding positive integers, written "1,5,10" on the command line."""

    @classmethod
    def parse(cls, value: str | Sequence[int]) -> "IntList":
        items = value.split(",") if isinstance(value, str) else list(value)
        try:
            numbers = [int(item) for item in items if str(item).strip()]
        except ValueError:
            raise WarehouseError(f"expected integers separated by commas, got {value!r}") from None
        if not numbers or min(numbers) < 1:
            raise WarehouseError(f"expected positive integers separated by commas, got {value!r}")
        return cls(dict.fromkeys(numbers))  # keep the order given, drop repeats


@dataclass(frozen=True)
class Param:
    """One parameter. `name` is the SQL bind name (`:name`) and, with dashes for
    underscores, the command-line option (`--name`)."""

    name: str
    type: type  # int, float, str, bool (a flag), or IntList
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    required: bool = False
    # The value names a run (a key, a unique prefix, a name: warehouse.runs.resolve_run), which
    # becomes its run_key before the query runs.
    names_run: bool = False
    positional: bool = False  # on the command line an argument (`compare A B`); --name still works
    # Also `label:KEY` (`--by label:step`): group by a run label.
    by_label: bool = False

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def allowed(self) -> tuple[str, ...]:
        """The values it takes, as told to a user: its choices, and label:KEY where it takes one."""
        return (*self.choices, "label:KEY") if self.by_label else self.choices

    def convert(self, value: Any) -> Any:
        """A value from the CLI or a library caller, as the SQL and post-processing expect it:
        flags become 0/1 (PostgreSQL will not compare a boolean with an integer)."""
        if value is None:
            if self.required:
                raise WarehouseError(f"{self.option} is required")
            return None
        if self.type is bool:
            return int(bool(value))
        if self.type is IntList:
            return IntList.parse(value)
        try:
            value = self.type(getattr(value, "value", value))  # Enum members from the CLI
        except (TypeError, ValueError):  # an API caller's value ("x" for a number)
            raise ArgumentTypeError(f"{self.option} must be a {self.type.__name__}, not {value!r}") from None
        if self.type is float and not math.isfinite(value):
            raise ArgumentValueError(f"{self.option} must be a finite number, not {value}")
        if self.by_label and str(value).startswith("label:"):
            if not value[len("label:"):]:
                raise WarehouseError(f"{self.option} label:KEY needs a label key")
            return value
        if self.choices and value not in self.choices:
            allowed = ", ".join(self.allowed)
            raise WarehouseError(f"{self.option} must be one of {allowed}, not {value!r}")
        return value


Rows = list[tuple[Any, ...]]
# (sql, binds) -> rows: a further statement, read in the same snapshot as the query's own.
Read = Callable[[str, Mapping[str, Any]], Rows]
# (columns, rows, parameter values, read) -> (columns, rows), for what SQL cannot do portably.
PostProcess = Callable[[list[str], Rows, Mapping[str, Any], Read], tuple[list[str], Rows]]
# (database URL or lake, parameter values, filters, timeout) -> one line the CLI prints on stderr after a table.
Footnote = Callable[[URL | str | Lake, Mapping[str, Any], "Filters", float], str]


def reads_more(post: PostProcess) -> PostProcess:
    """Marks a post-processing that reads further statements (through its Read): the query's
    own statement is then not the last of its session, which stays open for them."""
    post.reads_more = True  # type: ignore[attr-defined]
    return post


@dataclass(frozen=True)
class CannedQuery:
    name: str
    description: str  # first line: the summary `query list` shows; the rest: --help
    params: tuple[Param, ...]
    sql: str  # over the base tables: the definition, right for every parameter value
    post: PostProcess | None = field(default=None, compare=False)
    # The same answer from the summary tables, run instead of `sql` when they hold it.
    summary_sql: str | None = None
    # How summary_sql's rows are finished, where that differs from `post`.
    summary_post: PostProcess | None = field(default=None, compare=False)
    # Per slot of `sql` / `summary_sql` (module docstring), the column expressions a filter may
    # use: run_id, task, model, agent (warehouse.filters.Filters.sql).
    filter_slots: Mapping[str, Mapping[str, str]] = field(default_factory=dict, compare=False)
    summary_filter_slots: Mapping[str, Mapping[str, str]] = field(default_factory=dict, compare=False)
    # Where summary_sql cannot narrow by task, model or agent: a statement that can, from the
    # summaries and the trials' own columns (no episode read); filled as `sql` and finished by `post`.
    narrowed_sql: str | None = None
    # What a reader of the table should know besides its rows (compare: its test's verdict).
    footnote: Footnote | None = field(default=None, compare=False)

    @property
    def summary(self) -> str:
        return self.description.strip().splitlines()[0]

    def values(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every parameter's value: given, else its default; converted and checked."""
        unknown = set(given) - {p.name for p in self.params}
        if unknown:
            raise WarehouseError(f"query {self.name} has no parameter {', '.join(sorted(unknown))}")
        return {p.name: p.convert(given.get(p.name, p.default)) for p in self.params}

    def plan(self, values: Mapping[str, Any], summaries: bool = True, filters: Filters | None = None
             ) -> tuple[str, PostProcess | None]:
        """The statement that answers these values (and filters), and its post-processing."""
        # The summaries hold no trial's start: a window on it (--since, --until) reads the trials.
        summarized = (values.get("threshold", SUCCESS_THRESHOLD) == SUCCESS_THRESHOLD
                      and not outcome.chosen(values) and not (filters and filters.times))
        if summaries and summarized and filters and filters.narrows_trials and self.narrowed_sql is not None:
            return self.narrowed_sql, self.post
        if summaries and summarized and self.summary_sql is not None:
            return self.summary_sql, self.summary_post or self.post
        return self.sql, self.post


def sql_file(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.sql").read_text(encoding="utf-8")


@lru_cache(maxsize=64)
def bind_names(sql: str) -> frozenset[str]:
    """The `:name` parameters SQLAlchemy will see in this SQL."""
    return frozenset(text(sql).compile().params)


def run_canned(target: URL | str | Lake, query: CannedQuery, given: Mapping[str, Any] | None = None, *,
               filters: Filters | None = None, timeout: float = DEFAULT_TIMEOUT,
               summaries: bool = True) -> CannedResult:
    """Run a canned query, read-only, narrowed by `filters`, on a database (its URL) or a lake
    (warehouse.lake.Lake: its tables' files, read by DuckDB or Spark). `summaries=False` answers
    from the base tables even where the summary tables could: the definition, which the tests
    hold the summaries to, and what a lake answers with."""
    values = query.values(given or {})
    filters = filters or Filters()
    if isinstance(target, Lake):
        from warehouse.lake.engines import lake_session  # duckdb, pyspark, sqlglot: the lake's path alone

        with lake_session(target, timeout=timeout) as session:
            return _answer(session, query, values, filters, summaries=False)
    # The statements are all the library's own text (the values are bound), which lets the
    # session end with its statement's round trip (readonly_session, own_text).
    with readonly_session(target, timeout=timeout, own_text=True) as session:
        return _answer(session, query, values, filters, summaries)


def _answer(session: Any, query: CannedQuery, values: dict[str, Any], filters: Filters,
            summaries: bool) -> CannedResult:
    """The query's answer through one session: a database's (warehouse.readonly.ReadSession) or a
    lake's (warehouse.lake.engines.LakeSession), which offer the same `connection` and `fetch`."""
    sql, post = query.plan(values, summaries, filters)
    slots = query.summary_filter_slots if sql is query.summary_sql else query.filter_slots
    if values.get("threshold", SUCCESS_THRESHOLD) != SUCCESS_THRESHOLD:
        check_threshold(values["threshold"], session.connection)  # outside [0, 1]: the rewards' range
    # A value of a filter that matches nothing: said beside the (empty) answer, which stands.
    note = filters.unmatched(session.connection) if filters.narrows_trials or filters.labels else None
    for param in query.params:
        if param.names_run and values[param.name] is not None:
            values[param.name] = resolve_run(session.connection, values[param.name]).run_key
    # Asked for only when the filters need it (Filters.needs_connection): the session's
    # connection begins its transaction, a round trip the canned statement otherwise carries.
    sql, filter_binds = narrow(sql, slots, filters, session.connection if filters.needs_connection else None)
    sql = _flags_written_in(sql, query, values)
    sql, outcome_binds, outcome_note = outcome.fill(sql, values, session.connection, filters)
    filter_binds.update(outcome_binds)
    note = "\n".join(line for line in (note, outcome_note) if line) or None
    binds = {name: filter_binds[name] if name in filter_binds else values[name] for name in bind_names(sql)}
    # Canned results are aggregates (at most tasks x runs rows), so they are not capped.
    result = session.fetch(sql, binds, max_rows=None, last=not getattr(post, "reads_more", False))
    columns, rows = result.columns, result.rows
    if post is not None:
        columns, rows = post(columns, rows, values,
                             lambda more, more_binds: session.fetch(more, more_binds, max_rows=None).rows)
    return CannedResult(columns, rows_without_noise(rows), note=note)


@dataclass
class CannedResult(ReadResult):
    # A filter value that matched nothing (Filters.unmatched); the choice of --errors and --metric
    # (warehouse.queries.outcome). One line each.
    note: str | None = None


def _flags_written_in(sql: str, query: CannedQuery, values: Mapping[str, Any]) -> str:
    """`sql` with its flags' binds (`:unsolved`) written in as the 0 or 1 they hold. A flag
    switches a clause on or off (`:unsolved = 0 OR ...`), and PostgreSQL plans a prepared
    statement once for any value it may be given (its generic plan, kept from the sixth run on):
    for a bind it guesses the clause is selective, and solve-matrix's plan turned to nested loops
    over thousands of rows (20 ms against 12). Written in, each combination has a plan of its own."""
    for param in query.params:
        if param.type is bool:
            sql = re.sub(rf"(?<![:\w\\]):{param.name}\b(?!:)", str(int(values[param.name])), sql)
    return sql


# run_task_outcomes' rows from run_task_breakdown's, which hold agent and model: exact for any
# subset of agents and models, since the outcomes are the breakdown summed over them. Each count
# cast to the table's INTEGER: PostgreSQL sums integers as bigint, and a sum of those as numeric,
# which reached the answer as a float (928.0) where SQLite and the table itself give ints.
_OUTCOMES_FROM_BREAKDOWN = """(SELECT b.run_id, b.task_id, CAST(sum(b.n_trials) AS INTEGER) AS n_trials,
        CAST(sum(b.n_complete) AS INTEGER) AS n_complete, CAST(sum(b.n_incomplete) AS INTEGER) AS n_incomplete,
        CAST(sum(b.n_successes) AS INTEGER) AS n_successes, CAST(sum(b.n_rewards) AS INTEGER) AS n_rewards,
        sum(b.reward_sum) AS reward_sum,
        CAST(sum(CASE WHEN b.exception_type IS NOT NULL THEN b.n_trials ELSE 0 END) AS INTEGER) AS n_errors,
        min(b.first_started) AS first_started, max(b.last_started) AS last_started,
        CAST(sum(b.n_with_trajectory) AS INTEGER) AS n_with_trajectory,
        CAST(sum(b.n_with_input_tokens) AS INTEGER) AS n_with_input_tokens,
        CAST(sum(b.n_with_output_tokens) AS INTEGER) AS n_with_output_tokens
    FROM run_task_breakdown b WHERE {predicate} GROUP BY b.run_id, b.task_id)"""


def breakdown_columns(t: str) -> dict[str, str]:
    """What the filters compare in run_task_breakdown (alias `t`): a trial's run_id, task_id,
    model and agent, summed over its trials (so no start)."""
    return {"run_id": f"{t}.run_id", "task_id": f"{t}.task_id", "model": f"{t}.model", "agent": f"{t}.agent"}


def trial_columns(t: str) -> dict[str, str]:
    """What the filters compare in trials (alias `t`): breakdown_columns' and the start."""
    return {**breakdown_columns(t), "started_at": f"{t}.started_at"}


def narrow(sql: str, slots: Mapping[str, Mapping[str, str]], filters: Filters, conn: Connection | None
           ) -> tuple[str, dict[str, Any]]:
    """`sql` with its filter slots filled (module docstring), and the binds they need. `conn`
    resolves the runs and labels the filters name and binds their times (None: they need
    neither, Filters.needs_connection)."""
    binds: dict[str, Any] = {}
    # The runs a slot allows depend on the runs and labels alone: asked once for every slot.
    run_ids = filters.run_ids(conn)

    def predicate(part: Filters, columns: Mapping[str, str]) -> str:
        where, more = part.sql(conn, run_ids=run_ids, **columns)
        binds.update(more)
        return where

    for slot, columns in slots.items():
        part = filters.runs_only() if slot.endswith("_runs") else filters
        sql = sql.replace("{" + slot + "}", predicate(part, columns))
    if "{outcomes}" in sql:
        sql = sql.replace("{outcomes}", _outcomes(filters, predicate))
    return sql.replace("{trials_narrowed}", "1" if filters.narrows_trials else "0"), binds


def _outcomes(filters: Filters, predicate: Callable[[Filters, Mapping[str, str]], str]) -> str:
    """What a summary statement reads for run_task_outcomes under these filters."""
    if not filters:
        return "run_task_outcomes"
    if filters.models or filters.agents:
        return _OUTCOMES_FROM_BREAKDOWN.format(predicate=predicate(filters, breakdown_columns("b")))
    where = predicate(filters, {"run_id": "o_f.run_id", "task_id": "o_f.task_id"})
    return f"(SELECT * FROM run_task_outcomes o_f WHERE {where})"
