"""What every query, export and report can be narrowed to: some runs, tasks, models, agents, or
the runs carrying some labels. One `Filters` value, turned into one SQL predicate over whichever
columns the caller's statement has.

Meanings (the same everywhere):
- `runs`: run specs (warehouse.runs.resolve_run: a key, a unique prefix of it, or a name);
- `labels`: `(key, value)` pairs; a run must carry every one;
- `tasks`, `models`, `agents`: globs (`*` any text, `?` one character). Without a wildcard a
  glob is an exact, case-sensitive match; with one it matches ignoring ASCII case, on both
  backends alike. A model matches by its full name (`anthropic/kimi-k2.6`) or by its name
  without the provider (`kimi-k2.6`, the `model_name` column).
Several values of one filter are alternatives (OR); different filters all apply (AND).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Connection

from warehouse.errors import WarehouseError
from warehouse.runs import label_pairs, resolve_runs, runs_with_labels

# The model column's name without its provider prefix (warehouse.db.models.MODEL_NAME_SQL,
# over any expression).
_MODEL_NAME = "substr({m}, length(rtrim({m}, replace({m}, '/', ''))) + 1)"


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


@dataclass(frozen=True)
class Filters:
    runs: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, *, run=None, task=None, model=None, agent=None, label=None) -> "Filters":
        """From options as typed or passed to the API: each a value or a list of values;
        labels as `key=value` text, `(key, value)` pairs or a mapping."""
        return cls(_as_tuple(run), _as_tuple(task), _as_tuple(model), _as_tuple(agent), label_pairs(label))

    def __bool__(self) -> bool:
        return bool(self.runs or self.tasks or self.models or self.agents or self.labels)

    @property
    def narrows_trials(self) -> bool:
        """Whether these filters pick trials within a run (by task, model or agent), not only runs."""
        return bool(self.tasks or self.models or self.agents)

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
            run_ids: set[int] | None | object = _UNRESOLVED) -> tuple[str, dict[str, str]]:
        """A predicate over the column expressions named (e.g. `run_id="b.run_id"`), and its
        binds, named `f_…` so as not to meet the statement's own. `1=1` when nothing filters.
        A table with a task's id but not its name gives `task_id`: the globs are then matched
        in `tasks`, once, not once per row. `run_ids`: what run_ids(conn) gave, for a caller
        making several predicates from these filters (the runs resolved once, not per slot)."""
        binds: dict[str, str] = {}
        terms: list[str] = []

        def need(column: str | None, option: str) -> str:
            if column is None:
                raise WarehouseError(f"this query cannot be narrowed by {option}")
            return column

        def globs(kind: str, column: str, values: tuple[str, ...], *, model_names: bool = False) -> str:
            alternatives = []
            for i, glob in enumerate(values):
                # Named by filter and position, so every predicate made from one Filters (a
                # statement may need several, over different tables) binds a name to one value.
                name = f"f_{kind}_{i}"
                exprs = [column, _MODEL_NAME.format(m=column)] if model_names else [column]
                if has_wildcard(glob):
                    binds[name] = _like(glob).lower()
                    alternatives += [f"lower({e}) LIKE :{name} ESCAPE '\\'" for e in exprs]
                else:
                    binds[name] = glob
                    alternatives += [f"{e} = :{name}" for e in exprs]
            return "(" + " OR ".join(alternatives) + ")"

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
            terms.append(globs("model", need(model, "--model"), self.models, model_names=True))
        if self.agents:
            terms.append(globs("agent", need(agent, "--agent"), self.agents))
        return (" AND ".join(terms) if terms else "1=1"), binds
