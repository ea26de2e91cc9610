"""`Pick`: which trials and episodes a dataset built by query holds (`warehouse export hub` with
--solved/--unsolved, --where, --per-task and --episodes, beside the filters): the trials picked
by one SQL statement over `trial_summary`, run once through the guarded read path
(warehouse.readonly: the reader role, READ ONLY, the time limit, the server's limits), and the
episodes of those trials.

Meanings:
- A trial is SOLVED when its reward is at least the threshold (default 1.0); a trial without a
  reward is unsolved: the canned queries' meaning (warehouse.queries.catalog).
- `--where` is a predicate over the columns of the `trial_summary` view, written into the
  statement as `… FROM trial_summary WHERE (<predicate>)`. It is checked as `warehouse sql`
  checks a query (warehouse.readonly: PostgreSQL's grammar and function denylist, SQLite's
  authorizer), and must be one expression: text that closes the parenthesis it sits in (to
  reach the statement around it) or adds a statement is refused. It takes no parameters: a
  colon in it is a colon. It runs once, in the statement that picks the trials, as `warehouse
  sql` runs a query, within the export's time limit; the export's own statements then read the
  trials picked, never the predicate again.
- `--per-task` picks among the trials the filters, --solved and --where kept: `all` keeps them
  all; `best` the highest reward, then the shortest; `shortest` the fewest turns (the
  `lengths` query's measure, `trial_lengths.turns`), then the fewest characters; `first` the
  earliest started. Remaining ties go to the smallest trial name, then run key (byte order on
  both backends). Only trials with an episode to write are candidates, and trials whose task is
  unknown have no task to be picked for, so a pick other than `all` leaves them out.
- `--episodes all` writes every episode of the trials (subagent and step episodes included);
  `last` the last episode of each main trajectory (`main`, or each step's `step:<name>` in a
  multi-step trial) and every subagent episode, the rows `harbor traces export --episodes last`
  writes (it ignores --episodes for subagents); `--no-subagents` leaves the subagents' out, as
  Harbor's does (warehouse.summaries.own_trace_sql says which episodes are a main trajectory's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import URL

from warehouse.errors import WarehouseError
from warehouse.summaries import check_threshold, own_trace_sql

if TYPE_CHECKING:
    from warehouse.readonly import ReadSession

PER_TASK = ("all", "best", "shortest", "first")
# The time limit of the statement that picks the trials (the one holding --where): longer than
# `warehouse sql`'s, as an export is not interactive and reads every trial.
DEFAULT_PICK_TIMEOUT = 300.0
EPISODES = ("all", "last")

# The trial_summary columns a pick reads; the --where predicate sees every column of the view.
_SUMMARY_COLUMNS = "trial_id, run_key, task, trial_name, agent, model, reward, started_at"

# An episode of a main trajectory (subagents' are "summarization-…" or "step:<name>/…"), and
# the last of one: no later episode of its trace source.
_MAIN = own_trace_sql("e")
_LAST = (f"{_MAIN} AND NOT EXISTS (SELECT 1 FROM episodes later WHERE later.trial_id = e.trial_id "
         "AND later.trace_source = e.trace_source AND later.episode_index > e.episode_index)")


@dataclass(frozen=True)
class Pick:
    solved: bool | None = None  # True: solved trials only; False: unsolved only; None: both
    threshold: float = 1.0
    where: str | None = None
    per_task: str = "all"
    episodes: str = "all"
    subagents: bool = True  # the subagents' episodes too (Harbor's --subagents/--no-subagents)

    def __post_init__(self) -> None:
        check_threshold(self.threshold)  # finite; its range is checked against the rewards (export)
        if self.per_task not in PER_TASK:
            raise WarehouseError(f"--per-task is one of {', '.join(PER_TASK)}, not {self.per_task!r}")
        if self.episodes not in EPISODES:
            raise WarehouseError(f"--episodes is one of {', '.join(EPISODES)}, not {self.episodes!r}")
        if self.where is not None and not self.where.strip():
            raise WarehouseError("--where is empty: give a predicate over trial_summary, or leave it out")

    def __bool__(self) -> bool:
        """Whether it narrows anything."""
        return (self.solved is not None or self.where is not None or self.per_task != "all"
                or self.episodes != "all" or not self.subagents)

    def describe(self) -> list[str]:
        """What it keeps, one line each, for the dataset card."""
        lines = []
        if self.solved is not None:
            op = ">=" if self.solved else "< (or no reward)"
            lines.append(f"{'solved' if self.solved else 'unsolved'} trials: reward {op} {self.threshold:g}")
        if self.where is not None:
            lines.append(f"where: `{self.where}`")
        lines.append(f"per task: {self.per_task}")
        lines.append(f"episodes: {self.episodes}")
        if not self.subagents:
            lines.append("subagents: left out")
        return lines


def trial_ids_sql(dialect: str, pick: Pick, filters: tuple[str, Mapping[str, Any]]) -> tuple[str, dict[str, Any]]:
    """One statement yielding the `trial_id` of every trial the pick keeps, and its binds.
    `filters` is a predicate over `s.run_id`, `s.task`, `s.model`, `s.agent` (the shape of
    warehouse.filters.Filters.sql) and its binds."""
    predicate, binds = filters
    binds = {**binds, **({} if pick.solved is None else {"pick_threshold": pick.threshold})}
    where = "1=1" if pick.where is None else _colons(pick.where)
    solved = {True: "s.reward >= :pick_threshold",
              False: "(s.reward IS NULL OR s.reward < :pick_threshold)",
              None: "1=1"}[pick.solved]
    # The predicate sees trial_summary alone; the filters name s.run_id etc., one level out.
    summary = (f"SELECT s.*, tr.run_id AS run_id FROM (SELECT {_SUMMARY_COLUMNS} FROM trial_summary "
               f"WHERE ({where})) s JOIN trials tr ON tr.id = s.trial_id")
    candidates = (f"SELECT s.*, l.turns, l.chars FROM ({summary}) s "
                  f"LEFT JOIN trial_lengths l ON l.trial_id = s.trial_id "
                  f"WHERE ({predicate}) AND {solved} "
                  f"AND EXISTS (SELECT 1 FROM episodes e WHERE e.trial_id = s.trial_id AND {episodes_sql(pick)})")
    if pick.per_task == "all":
        return f"SELECT c.trial_id FROM ({candidates}) c", binds
    by_name = ' COLLATE "C"' if dialect == "postgresql" else ""  # byte order, as SQLite's BINARY
    ties = f"c.trial_name{by_name}, c.run_key{by_name}"
    shortest = "(c.turns IS NULL), c.turns, (c.chars IS NULL), c.chars"
    order = {
        "best": f"(c.reward IS NULL), c.reward DESC, {shortest}, {ties}",
        "shortest": f"{shortest}, {ties}",
        "first": f"(c.started_at IS NULL), c.started_at, {ties}",
    }[pick.per_task]
    return (f"SELECT trial_id FROM (SELECT c.trial_id, row_number() OVER (PARTITION BY c.task ORDER BY {order}) "
            f"AS pick FROM ({candidates}) c WHERE c.task IS NOT NULL) ranked WHERE pick = 1"), binds


def episodes_sql(pick: Pick) -> str:
    """The condition on an episode `e` of a picked trial that --episodes and --no-subagents set."""
    if pick.episodes == "last":
        return f"({_LAST} OR NOT {_MAIN})" if pick.subagents else _LAST
    return "1=1" if pick.subagents else _MAIN


def _colons(predicate: str) -> str:
    """The predicate as SQLAlchemy text() without parameters: every colon a colon (`\\:`), so that
    it can name none of the statement's binds."""
    return predicate.replace(":", "\\:")


def picked_trials(url: URL, pick: Pick, filters: tuple[str, Mapping[str, Any]], *, timeout: float) -> list[int]:
    """The ids of the trials the pick keeps: its statement (trial_ids_sql) run once, read-only, as
    `warehouse sql` runs a query (warehouse.readonly), within `timeout` seconds. A --where that
    `warehouse sql` would refuse, or that is not one expression, is refused first (check_where)."""
    from warehouse.readonly import readonly_session  # its import is only needed here

    sql, binds = trial_ids_sql(url.get_backend_name(), pick, filters)
    # A trial id is a number: no value of the statement's needs more than this.
    with readonly_session(url, timeout=timeout, max_value_bytes=_PICK_VALUE_BYTES) as session:
        check_where(session, pick, sql, binds)
        try:
            return [trial_id for (trial_id,) in session.stream(sql, binds, max_rows=None)]
        except WarehouseError as exc:
            raise WarehouseError(f"--where: {exc}" if pick.where is not None else str(exc)) from None


# The largest value the pick's statement may build (SQLite: SQLITE_LIMIT_LENGTH): far more than
# any column of trial_summary holds, far less than memory.
_PICK_VALUE_BYTES = 100_000_000


def check_where(session: ReadSession, pick: Pick, sql: str, binds: Mapping[str, Any]) -> None:
    """Refuse a --where that `warehouse sql` would refuse inside the whole statement, or that is
    not one expression. Both checks read the statement as the backend's own grammar does: the
    whole statement, with the predicate in its parentheses, must be one harmless query; and the
    predicate bare (`… WHERE <predicate>`) must parse too, which it cannot when it closes a
    parenthesis it did not open (nor, wrapped, when it leaves one open or comments out what
    follows). EXPLAIN plans each without reading any rows."""
    if pick.where is None:
        return
    bare = f"SELECT trial_id FROM trial_summary WHERE {_colons(pick.where)}"
    try:
        session.fetch(f"EXPLAIN {sql}", binds, max_rows=None)
    except WarehouseError as exc:
        raise WarehouseError(f"--where: {exc}") from None
    try:
        session.fetch(f"EXPLAIN {bare}", {}, max_rows=None)
    except WarehouseError:
        raise WarehouseError("--where must be one predicate over trial_summary's columns: this one "
                             "closes a parenthesis it did not open") from None
