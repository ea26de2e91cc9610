"""What a canned query is, and how one runs.

A canned query is data: a name, a description, its parameters, one portable SQL statement
(a file beside this module) and, where SQL alone cannot finish the job portably, a function
that post-processes the rows. It runs through the same read-only path as `warehouse sql`.

The statement over the base tables is the query's definition. Most queries also have a second
statement answering the same from the summary tables (warehouse.summaries), which hold only what
the default --threshold needs: that one runs whenever the threshold is the default (or the query
has none), the definition for any other threshold. Both must give the same columns and rows; the
tests compare them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import URL

from warehouse.errors import WarehouseError
from warehouse.readonly import DEFAULT_TIMEOUT, ReadResult, ReadSession, readonly_session
from warehouse.summaries import SUCCESS_THRESHOLD


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
    names_run: bool = False  # the value is a run_key, checked to exist before the query runs

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

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
        value = self.type(getattr(value, "value", value))  # Enum members from the CLI
        if self.choices and value not in self.choices:
            raise WarehouseError(f"{self.option} must be one of {', '.join(self.choices)}, not {value!r}")
        return value


Rows = list[tuple[Any, ...]]
# (sql, binds) -> rows: a further statement, read in the same snapshot as the query's own.
Read = Callable[[str, Mapping[str, Any]], Rows]
# (columns, rows, parameter values, read) -> (columns, rows), for what SQL cannot do portably.
PostProcess = Callable[[list[str], Rows, Mapping[str, Any], Read], tuple[list[str], Rows]]


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

    @property
    def summary(self) -> str:
        return self.description.strip().splitlines()[0]

    def values(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every parameter's value: given, else its default; converted and checked."""
        unknown = set(given) - {p.name for p in self.params}
        if unknown:
            raise WarehouseError(f"query {self.name} has no parameter {', '.join(sorted(unknown))}")
        return {p.name: p.convert(given.get(p.name, p.default)) for p in self.params}

    def plan(self, values: Mapping[str, Any], summaries: bool = True) -> tuple[str, PostProcess | None]:
        """The statement that answers these values, and its post-processing."""
        summarized = values.get("threshold", SUCCESS_THRESHOLD) == SUCCESS_THRESHOLD
        if summaries and summarized and self.summary_sql is not None:
            return self.summary_sql, self.summary_post or self.post
        return self.sql, self.post


def sql_file(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.sql").read_text(encoding="utf-8")


@lru_cache(maxsize=64)
def bind_names(sql: str) -> frozenset[str]:
    """The `:name` parameters SQLAlchemy will see in this SQL."""
    return frozenset(text(sql).compile().params)


def run_canned(url: URL | str, query: CannedQuery, given: Mapping[str, Any] | None = None, *,
               timeout: float = DEFAULT_TIMEOUT, summaries: bool = True, filters: Any = None) -> ReadResult:
    """Run a canned query, read-only. `summaries=False` answers from the base tables even where
    the summary tables could: the definition, which the tests hold the summaries to."""
    if filters:  # placeholder for the merge: the `runs` branch's run_canned applies them
        raise WarehouseError("canned queries cannot be narrowed yet (the runs branch adds it)")
    values = query.values(given or {})
    sql, post = query.plan(values, summaries)
    with readonly_session(url, timeout=timeout) as session:
        for param in query.params:
            if param.names_run and values[param.name] is not None:
                _check_run_exists(session, values[param.name])
        binds = {name: values[name] for name in bind_names(sql)}
        # Canned results are aggregates (at most tasks x runs rows), so they are not capped.
        result = session.fetch(sql, binds, max_rows=None)
        if post is None:
            return result
        columns, rows = post(result.columns, result.rows, values,
                             lambda more, more_binds: session.fetch(more, more_binds, max_rows=None).rows)
    return ReadResult(columns, rows)


def _check_run_exists(session: ReadSession, run_key: str) -> None:
    found = session.fetch("SELECT count(*) FROM runs WHERE run_key = :k", {"k": run_key}, max_rows=1)
    if not found.rows[0][0]:
        raise WarehouseError(f"no run {run_key!r} (warehouse query runs lists them)")
