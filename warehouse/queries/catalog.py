"""The canned queries: `warehouse query list` shows them, `warehouse query NAME` runs one.

Shared meanings: a trial SUCCEEDS when its reward is at least --threshold (default 1.0); a
trial without a reward (an exception, or not finished) is an attempt that failed. Every
trial counts as an attempt, complete or not. Task-level queries leave out trials whose task
is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from functools import lru_cache
from itertools import groupby
from typing import Any

from warehouse.queries.registry import CannedQuery, IntList, Param, Read, Rows, sql_file
from warehouse.queries.stats import interpolate, pass_at_k, percentile, percentile_ranks

THRESHOLD = Param(
    "threshold", float, 1.0,
    "A trial succeeds when its reward is at least this; a trial without a reward fails.",
)


# --- post-processing -------------------------------------------------------------------------

def _as_utc(value: Any) -> datetime | None:
    """SQLite hands back stored timestamps as text (no column types reach a raw query);
    PostgreSQL as datetimes. Both become aware UTC datetimes, so outputs match."""
    if value is None or isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(str(value))
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed


def _runs_post(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
               ) -> tuple[list[str], Rows]:
    dates = [columns.index("first_started"), columns.index("last_started")]
    return columns, [tuple(_as_utc(v) if i in dates else v for i, v in enumerate(row)) for row in rows]


def _pass_rate_post(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
                    ) -> tuple[list[str], Rows]:
    name = {"run": "run_key"}.get(values["by"], values["by"])
    return [name if c == "grp" else c for c in columns], rows


def _pass_at_k_post(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
                    ) -> tuple[list[str], Rows]:
    ks: IntList = values["k"]
    k_columns = [f"pass@{k}" for k in ks]
    if values["per_task"]:  # one row per task: its (n, c) counted once
        return ["run_key", "task", "n", "c", *k_columns], [
            (run, task, n, c, *(pass_at_k(n, c, k) for k in ks)) for run, task, n, c, _ in rows]
    per_run = []
    for run, group in groupby(rows, key=lambda row: row[0]):
        cells = [(n, c, tasks) for _, _, n, c, tasks in group]
        means = []
        for k in ks:
            known = [(p, tasks) for n, c, tasks in cells if (p := pass_at_k(n, c, k)) is not None]
            covered = sum(tasks for _, tasks in known)
            means.append(sum(p * tasks for p, tasks in known) / covered if covered else None)
        per_run.append((run, sum(tasks for *_, tasks in cells), min(n for n, _, _ in cells), *means))
    return ["run_key", "tasks", "min_attempts", *k_columns], per_run


_LENGTH_MEASURES = ("turns", "chars", "input_tokens", "output_tokens")


def _round(value: float | None) -> float | None:
    # Interpolation leaves float noise (2.4000000000000004) in values that count things.
    return None if value is None else round(value, 6)


_LENGTH_COLUMNS = ["run_key", "measure", "n", "median", "p90", "max"]


def _lengths_post(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
                  ) -> tuple[list[str], Rows]:
    out = []
    for run, group in groupby(rows, key=lambda row: row[0]):
        trials = list(group)
        for j, measure in enumerate(_LENGTH_MEASURES, start=1):
            known = sorted(row[j] for row in trials if row[j] is not None)
            out.append((run, measure, len(known), _round(percentile(known, 0.5)),
                        _round(percentile(known, 0.9)), known[-1] if known else None))
    return _LENGTH_COLUMNS, out


# One measure's ranks for one run (its comment lines left out: the text is repeated per measure).
_LENGTH_RANKS = "\n".join(line for line in sql_file("lengths_ranks").splitlines() if not line.startswith("--"))


@lru_cache(maxsize=16)
def _ranks_statement(measures: tuple[str, ...]) -> str:
    """One statement for the ranks of every measure given, for one run: a row of five values
    per measure (one statement per run rather than per measure: on PostgreSQL each statement
    costs round trips)."""
    return "SELECT * FROM " + " CROSS JOIN ".join(
        f"({_LENGTH_RANKS.format(measure=measure)}) {measure}" for measure in measures)


def _lengths_by_rank(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
                     ) -> tuple[list[str], Rows]:
    """_lengths_post's rows from the summaries: lengths_summary.sql counts each run's trials
    per measure, lengths_ranks.sql reads the values at the ranks the percentiles lie between,
    and the interpolation is percentile()'s own, so the numbers are the same to the last bit."""
    out = []
    for run, run_id, *counts in rows:
        known = [(measure, n) for measure, n in zip(_LENGTH_MEASURES, counts) if n]
        binds: dict[str, Any] = {"run": run_id}
        for measure, n in known:
            binds[f"{measure}_median"] = percentile_ranks(n, 0.5)[0]
            binds[f"{measure}_p90_from_top"] = n - 1 - percentile_ranks(n, 0.9)[1]
        found = iter(read(_ranks_statement(tuple(m for m, _ in known)), binds)[0] if known else ())
        for measure, n in zip(_LENGTH_MEASURES, counts):
            if not n:
                out.append((run, measure, 0, None, None, None))
                continue
            median_low, median_high, p90_low, p90_high, top = (next(found) for _ in range(5))
            median_at, p90_at = percentile_ranks(n, 0.5)[2], percentile_ranks(n, 0.9)[2]
            out.append((run, measure, n, _round(interpolate(median_low, median_high, median_at)),
                        _round(interpolate(p90_low, p90_high, p90_at)), top))
    return _LENGTH_COLUMNS, out


# --- the catalog -------------------------------------------------------------------------------

QUERIES: dict[str, CannedQuery] = {q.name: q for q in (
    CannedQuery(
        name="runs",
        description=(
            "One row per run: trials, complete/incomplete, pass rate, mean reward, errors, agents, "
            "models, dates, sources.\n\n"
            "pass_rate is successes over all trials; mean_reward averages the trials that have a "
            "reward; errors counts trials with an exception; first/last_started span the trials' "
            "start times; sources are the datasets or trace roots the trials were loaded from."
        ),
        params=(THRESHOLD,),
        sql=sql_file("runs"),
        post=_runs_post,
        summary_sql=sql_file("runs_summary"),
    ),
    CannedQuery(
        name="pass-rate",
        description=(
            "Trials, successes, pass rate, mean reward and errors, grouped by run, model or agent."
        ),
        params=(
            Param("by", str, "run", "Group by run, model or agent.", choices=("run", "model", "agent")),
            THRESHOLD,
        ),
        sql=sql_file("pass_rate"),
        post=_pass_rate_post,
        summary_sql=sql_file("pass_rate_summary"),
    ),
    CannedQuery(
        name="solve-matrix",
        description=(
            "Attempts and successes of every task in every run that attempted it.\n\n"
            "A run solves a task when at least one attempt succeeded. runs_solved / runs_attempted "
            "count, per task, the runs that solved it / attempted it. The filters combine."
        ),
        params=(
            Param("unsolved", bool, False, "Only tasks that no run solved."),
            Param("solved_by_all", bool, False, "Only tasks that every run attempting them solved."),
            THRESHOLD,
        ),
        sql=sql_file("solve_matrix"),
        summary_sql=sql_file("solve_matrix_summary"),
    ),
    CannedQuery(
        name="pass-at-k",
        description=(
            "Unbiased pass@k per run (the mean over its tasks), or per task and run with --per-task.\n\n"
            "pass@k = 1 - C(n-c, k) / C(n, k) for a task attempted n times with c successes. It is "
            "empty (NULL) for a task with fewer than k attempts, and a run's mean covers only the "
            "tasks with at least k attempts: min_attempts shows when some were left out."
        ),
        params=(
            Param("k", IntList, "1,5,10", "The k values, separated by commas."),
            Param("per_task", bool, False, "One row per run and task, with n and c, instead of per run."),
            THRESHOLD,
        ),
        sql=sql_file("pass_at_k"),
        post=_pass_at_k_post,
        summary_sql=sql_file("pass_at_k_summary"),
    ),
    CannedQuery(
        name="compare",
        description=(
            "Two runs side by side per task: attempts and successes in --a and --b.\n\n"
            "A run solves a task when at least one attempt succeeded. flip is 'gained' (unsolved in "
            "A, solved in B), 'lost' (the reverse) or empty; tasks only one run attempted never flip."
        ),
        params=(
            Param("a", str, None, "The run_key of the first run.", required=True, names_run=True),
            Param("b", str, None, "The run_key of the second run.", required=True, names_run=True),
            Param("flipped", bool, False, "Only the tasks that flipped, either way."),
            THRESHOLD,
        ),
        sql=sql_file("compare"),
        summary_sql=sql_file("compare_summary"),
    ),
    CannedQuery(
        name="failures",
        description=(
            "Exception types by run: trials and tasks each one hit, and its share of the run's "
            "trials."
        ),
        params=(),
        sql=sql_file("failures"),
        summary_sql=sql_file("failures_summary"),
    ),
    CannedQuery(
        name="lengths",
        description=(
            "Trajectory lengths by run: median, p90 and max of turns, characters and tokens.\n\n"
            "turns and chars measure each trial's longest main episode (its whole trajectory), or "
            "for a multi-step trial the sum of each step's longest; subagents do not count. "
            "input_tokens and output_tokens are the trials' token counts where known. n is how many "
            "trials had the measure. Percentiles interpolate linearly between ranks."
        ),
        params=(),
        sql=sql_file("lengths"),
        post=_lengths_post,
        summary_sql=sql_file("lengths_summary"),
        summary_post=_lengths_by_rank,
    ),
)}
