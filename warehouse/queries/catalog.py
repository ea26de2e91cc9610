"""The canned queries: `warehouse query list` shows them, `warehouse query NAME` runs one.

Shared meanings: a trial SUCCEEDS when its reward is at least --threshold (default 1.0); a
trial without a reward (an exception, or not finished) is an attempt that failed. Every
trial counts as an attempt, complete or not. Task-level queries leave out trials whose task
is unknown. Every query can be narrowed by --run, --task, --model, --agent and --label
(warehouse.filters); the slots its SQL fills with them are declared here, per statement.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from itertools import compress, groupby
from operator import itemgetter, mul
from typing import Any

from sqlalchemy.engine import URL

from warehouse.errors import ArgumentValueError, WarehouseError
from warehouse.filters import Filters
from warehouse.queries import leaderboard, outcome
from warehouse.queries.power import COLUMNS as POWER_COLUMNS, check_design, power_row
from warehouse.queries.registry import (CannedQuery, IntList, Param, PostProcess, Read, Rows, breakdown_columns,
                                        reads_more, run_canned, sql_file, trial_columns)
from warehouse.queries.stats import (bootstrap_counts, expanded_confidence, interpolate, mcnemar_exact,
                                     mean_and_interval_of, paired_t_test, pass_at_k, percentile, percentile_interval,
                                     percentile_ranks, rate_interval_of)
from warehouse.runs import label_sort_key

THRESHOLD = Param(
    "threshold", float, 1.0,
    "A trial succeeds when its reward is at least this; a trial without a reward fails.",
)
ERRORS = Param("errors", str, "fail", "Trials with an exception and no reward: fail (attempts that failed) or "
               "exclude (left out, as if never run).", choices=outcome.ERRORS)
METRIC = Param("metric", str, None, "Succeed on this key of the trials' rewards (one key, dots and all) "
               "instead of the reward.")
CONFIDENCE = Param("confidence", float, 0.95, "The confidence level of the intervals (0 to 1).")
RESAMPLES = Param("resamples", int, 2000, "Bootstrap resamples of the tasks.")
SEED = Param("seed", int, 0, "Seed of the bootstrap's random draws: the same seed, the same interval.")
BY_GROUP = Param("by", str, "run", "Group by run, model, agent or label:KEY.", choices=("run", "model", "agent"),
                 by_label=True)
RUN_A = Param("a", str, None, "The first run.", required=True, names_run=True, positional=True)
RUN_B = Param("b", str, None, "The second run.", required=True, names_run=True, positional=True)

# The ledger's queries: they read `sources` and `loads` (a row per unit), which need no summary,
# and count loads, which a warehouse of fewer trials does not share.
LEDGER = ("sources", "loads")

# The queries no summary table answers: costs reads the trials' own cost and token columns,
# which no summary holds (on 78,255 trials, about 150 ms in SQLite where lengths takes 12).
UNSUMMARIZED = ("costs",)

# Fewer shared tasks than this, and compare-test says it cannot tell.
MIN_SHARED_TASKS = 10



_RUN_COLUMNS = {"run_id": "r.id"}


# --- post-processing -------------------------------------------------------------------------

def as_utc(value: Any) -> datetime | None:
    """SQLite hands back stored timestamps as text (no column types reach a raw query);
    PostgreSQL as datetimes. Both become aware UTC datetimes, so outputs match."""
    if value is None or isinstance(value, datetime):
        return value
    parsed = datetime.fromisoformat(str(value))
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed


def _dates_in_utc(*names: str) -> PostProcess:
    """A post-processing that makes the timestamp columns `names` aware UTC datetimes (as_utc)."""
    def post(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read) -> tuple[list[str], Rows]:
        dates = [columns.index(name) for name in names]
        return columns, [tuple(as_utc(v) if i in dates else v for i, v in enumerate(row)) for row in rows]

    return post


LOADS_COLUMNS = ["load_id", "source", "unit", "content_hash", "status", "rows", "trials", "episodes_new",
                 "episodes_duplicate", "turns", "bytes", "rows_rejected", "conflicts", "started_at", "seconds",
                 "tool_version", "schema_revision"]


@reads_more
def _loads_post(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
                ) -> tuple[list[str], Rows]:
    """Each load's duration, and the schema revision its detail records (loads before 0016's
    code recorded none); an unknown --source said as such rather than as an empty ledger."""
    source = values.get("source")
    if source is not None and not rows and not read(
            "SELECT 1 FROM sources WHERE name = :s OR uri = :s", {"s": source}):
        raise WarehouseError(f"no source {source!r} (`warehouse sources` lists them)")
    out = []
    for row in rows:
        item = dict(zip(columns, row))
        started, finished = as_utc(item.pop("started_at")), as_utc(item.pop("finished_at"))
        detail = item.pop("detail")
        detail = json.loads(detail) if isinstance(detail, str) else detail
        item["started_at"] = started
        item["seconds"] = round((finished - started).total_seconds(), 3) if started and finished else None
        item["schema_revision"] = detail.get("schema_revision") if isinstance(detail, dict) else None
        out.append(tuple(item[c] for c in LOADS_COLUMNS))
    return list(LOADS_COLUMNS), out


def _uncertainty(values: Mapping[str, Any]) -> tuple[float, int]:
    """--confidence and --resamples, checked: (confidence, resamples)."""
    confidence, resamples = values["confidence"], values.get("resamples", 1)
    if not 0 < confidence < 1:
        raise ArgumentValueError(f"--confidence must lie strictly between 0 and 1, not {confidence}")
    if resamples < 1:
        raise ArgumentValueError(f"--resamples must be at least 1, not {resamples}")
    return confidence, resamples


def _grouped(by: str, rows: Rows) -> tuple[str, Rows]:
    """The name of the column a `--by` groups by (run_key, model, agent, or the label's key),
    and the rows (the group first) in the groups' order: a label's as a sweep is read, step 2
    before step 10 (warehouse.runs.label_sort_key); SQL's otherwise."""
    if by.startswith("label:"):
        return by[len("label:"):], sorted(rows, key=lambda row: label_sort_key(row[0]))
    return {"run": "run_key"}.get(by, by), rows


def _pass_rate_post(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
                    ) -> tuple[list[str], Rows]:
    """pass_rate.sql's rows, one per group and task (a cluster), as one row per group with its
    intervals: clustered by task (stats.rate_interval_of, mean_and_interval_of)."""
    confidence, _ = _uncertainty(values)
    name, rows = _grouped(values["by"], rows)
    out = []
    for group, cells in groupby(rows, key=itemgetter(0)):
        # Column by column (a run has thousands of tasks): C loops, no tuple per task.
        # PostgreSQL sums bigints as numeric: counts come as Decimals there.
        _, tasks, trials, successes, reward_sums, rewards, errors = zip(*cells)
        trials, successes, rewards = list(map(int, trials)), list(map(int, successes)), list(map(int, rewards))
        n_trials, n_successes = sum(trials), sum(successes)
        # A cluster without rewards has a NULL sum: left out, as it has no units.
        mean_reward, low, high = mean_and_interval_of(list(map(float, compress(reward_sums, rewards))),
                                                      list(compress(rewards, rewards)), confidence)
        out.append((group, n_trials, n_successes, n_successes / n_trials,
                    *rate_interval_of(successes, trials, confidence),
                    mean_reward, sum(map(int, errors)), low, high,
                    len(tasks) - tasks.count(None), n_trials))
    return [name, "trials", "successes", "pass_rate", "pass_rate_low", "pass_rate_high", "mean_reward", "errors",
            "mean_reward_low", "mean_reward_high", "n_tasks", "n_attempts"], out


def _mean(scores: list[float | None], weights: Sequence[int]) -> float | None:
    """The mean over tasks grouped in cells, `weights[j]` tasks of score `scores[j]` each,
    leaving out the cells scored None."""
    known = [(score, weight) for score, weight in zip(scores, weights) if score is not None]
    total = sum(weight for _, weight in known)
    return sum(score * weight for score, weight in known) / total if total else None


def _bootstrap_means(scores: list[list[float | None]], weights: list[int], values: Mapping[str, Any],
                     rng: random.Random) -> list[tuple[float, float] | tuple[None, None]]:
    """For each list of cell scores, the (expanded) percentile interval of _mean over resamples of the
    tasks with replacement (bootstrap_counts: one draw shared by every list). A resample that
    draws only cells scored None gives that list no mean."""
    confidence, resamples = _uncertainty(values)
    # Per list: the cells scored, and their scores, so a resample costs one sum of products.
    known = [[j for j, score in enumerate(cell_scores) if score is not None] for cell_scores in scores]
    known_scores = [[cell_scores[j] for j in cells] for cell_scores, cells in zip(scores, known)]
    means: list[list[float]] = [[] for _ in scores]
    for counts in bootstrap_counts(weights, resamples, rng):
        for cells, cell_scores, out in zip(known, known_scores, means):
            drawn = counts if len(cells) == len(counts) else [counts[j] for j in cells]
            total = sum(drawn)
            if total:
                out.append(sum(map(mul, cell_scores, drawn)) / total)
    # Percentiles at the level that widens them for the number of tasks (stats.expanded_confidence).
    level = expanded_confidence(confidence, sum(weights))
    return [percentile_interval(out, level) for out in means]


def _pass_at_k_post(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
                    ) -> tuple[list[str], Rows]:
    ks: IntList = values["k"]
    _uncertainty(values)  # checked with --per-task too, which has no interval
    group_column, rows = _grouped(values["by"], rows)
    if values["per_task"]:  # one row per task: its (n, c) counted once
        return [group_column, "task", "n", "c", *(f"pass@{k}" for k in ks)], [
            (group, task, n, c, *(pass_at_k(int(n), int(c), k) for k in ks)) for group, task, n, c, _ in rows]
    per_group = []
    for group, cells_of in groupby(rows, key=lambda row: row[0]):
        cells = [(int(n), int(c), int(tasks)) for _, _, n, c, tasks in cells_of]  # a task's pass@k is its cell's
        weights = [tasks for *_, tasks in cells]
        scores = [[pass_at_k(n, c, k) for n, c, _ in cells] for k in ks]
        # Seeded per group (a run's key, a label's value), so that its interval is the same
        # whichever other groups are shown.
        intervals = _bootstrap_means(scores, weights, values, random.Random(f"{values['seed']}:{group}"))
        estimates = [value for score, interval in zip(scores, intervals)
                     for value in (_mean(score, weights), *interval)]
        per_group.append((group, sum(weights), min(n for n, _, _ in cells), *estimates))
    k_columns = [column for k in ks for column in (f"pass@{k}", f"pass@{k}_low", f"pass@{k}_high")]
    return [group_column, "tasks", "min_attempts", *k_columns], per_group


def _compare_post(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
                  ) -> tuple[list[str], Rows]:
    if values["flipped"]:
        flip = columns.index("flip")
        rows = [row for row in rows if row[flip] is not None]
    return columns, rows


_COMPARE_TEST_COLUMNS = ["a", "b", "shared", "gained", "lost", "p_value", "pass_rate_a", "pass_rate_b",
                         "diff", "diff_low", "diff_high", "verdict", "test", "discordant", "only_a", "only_b"]
_COMPARE_TASKS_COLUMNS = ["task", "a_attempts", "a_successes", "b_attempts", "b_successes", "diff", "kind"]

# What each test compares, for the verdict.
_TESTED = {"mcnemar": "McNemar on the tasks solved", "paired t": "paired t-test on the tasks' success shares"}


def paired_test(shared: Sequence[tuple[int, int, int, int]], confidence: float) -> tuple[str, float, str]:
    """compare-test's test of B against A on the shared tasks, each (a_attempts, a_successes,
    b_attempts, b_successes): the test's name, its p-value and the verdict. McNemar's exact test
    on the tasks solved (an attempt succeeded) when every task has one attempt in both runs (then
    a task's share is whether it was solved); else the paired t-test on the tasks' shares of
    successful attempts, B's minus A's (STATISTICS.md measures both tests' error rates)."""
    level = 1 - confidence
    if all(a_n == 1 and b_n == 1 for a_n, _, b_n, _ in shared):
        test = "mcnemar"
        gained = sum(1 for _, a_c, _, b_c in shared if a_c == 0 and b_c > 0)
        lost = sum(1 for _, a_c, _, b_c in shared if a_c > 0 and b_c == 0)
        p_value, direction = mcnemar_exact(gained, lost), gained - lost
        discordant = gained + lost
    else:
        test = "paired t"
        differences = [b_c / b_n - a_c / a_n for a_n, a_c, b_n, b_c in shared]
        discordant = sum(1 for d in differences if d)
        p_value = paired_t_test(differences) if len(shared) > 1 else 1.0
        direction = math.fsum(differences)
    if len(shared) < MIN_SHARED_TASKS:
        return test, p_value, "too few shared tasks"
    # Even every discordant task going one way would not be significant by the sign test: with
    # so few, a t statistic rests on the tasks that did not differ.
    if mcnemar_exact(discordant, 0) > level:
        outcome = "too few discordant tasks"
    elif p_value < level:
        outcome = "B better" if direction > 0 else "A better"
    else:
        outcome = "no significant difference"
    return test, p_value, f"{outcome} ({_TESTED[test]})"


def _compare_test_post(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
                       ) -> tuple[list[str], Rows]:
    """compare's per-task rows as one row: paired_test and the paired bootstrap (or, --tasks,
    the tasks that differ)."""
    confidence, _ = _uncertainty(values)
    # PostgreSQL sums bigints as numeric: counts come as Decimals there.
    cells = [(task, int(a_n), int(a_c), int(b_n), int(b_c)) for task, a_n, a_c, b_n, b_c, _ in rows]
    if values["tasks"]:
        return _COMPARE_TASKS_COLUMNS, [_task_difference(*cell) for cell in cells
                                        if not (cell[1] and cell[3]) or cell[4] / cell[3] != cell[2] / cell[1]]
    shared = [(a_n, a_c, b_n, b_c) for _, a_n, a_c, b_n, b_c in cells if a_n and b_n]
    only_a = sum(1 for _, a_n, _, b_n, _ in cells if a_n and not b_n)
    only_b = sum(1 for _, a_n, _, b_n, _ in cells if b_n and not a_n)
    gained = sum(1 for _, a_c, _, b_c in shared if a_c == 0 and b_c > 0)
    lost = sum(1 for _, a_c, _, b_c in shared if a_c > 0 and b_c == 0)
    test, p_value, verdict = paired_test(shared, confidence)
    # A task's pass rate is its share of successful attempts; a run's, their mean over the
    # shared tasks. The difference B - A is resampled over the tasks, as pairs, from the cells of
    # tasks with one difference (sorted, so the draws do not depend on the tasks' order).
    counted = Counter(b_c / b_n - a_c / a_n for a_n, a_c, b_n, b_c in shared)
    differences, weights = sorted(counted), [counted[d] for d in sorted(counted)]
    rate_a = sum(a_c / a_n for a_n, a_c, _, _ in shared) / len(shared) if shared else None
    rate_b = sum(b_c / b_n for _, _, b_n, b_c in shared) / len(shared) if shared else None
    [(low, high)] = _bootstrap_means([differences], weights, values, random.Random(values["seed"]))
    discordant = sum(weight for d, weight in zip(differences, weights) if d)
    return _COMPARE_TEST_COLUMNS, [(values["a"], values["b"], len(shared), gained, lost, p_value,
                                    rate_a, rate_b, _mean(differences, weights), low, high, verdict,
                                    test, discordant, only_a, only_b)]


def _task_difference(task: str, a_n: int, a_c: int, b_n: int, b_c: int) -> tuple[Any, ...]:
    """compare-test --tasks: a task whose share of successful attempts differs, or that one run
    alone attempted."""
    if not b_n:
        return task, a_n, a_c, b_n, b_c, None, "only A"
    if not a_n:
        return task, a_n, a_c, b_n, b_c, None, "only B"
    diff = b_c / b_n - a_c / a_n
    return task, a_n, a_c, b_n, b_c, diff, "B higher" if diff > 0 else "A higher"


def _compare_footnote(url: URL | str, values: Mapping[str, Any], filters: Filters, timeout: float) -> str:
    """compare-test's row in one line, for a reader of compare's table (narrowed alike)."""
    test = QUERIES["compare-test"]
    given = test.values({p.name: values[p.name] for p in test.params if p.name in values})
    result = run_canned(url, test, given, filters=filters, timeout=timeout)
    row = dict(zip(result.columns, result.rows[0]))
    if not row["shared"]:
        return "compare: the runs share no task"
    name = {"mcnemar": "McNemar exact", "paired t": "paired t"}[row["test"]]
    return (f"compare: {row['verdict']}: {row['shared']} shared tasks ({row['only_a']} only in A, "
            f"{row['only_b']} only in B), {row['discordant']} differ, B gained {row['gained']} and lost "
            f"{row['lost']} ({name} p = {row['p_value']:.3g}); pass rate B - A = {row['diff']:+.3f}, "
            f"{given['confidence'] * 100:g}% interval {row['diff_low']:+.3f} to {row['diff_high']:+.3f} "
            f"(paired bootstrap, {given['resamples']} resamples, seed {given['seed']})")


def _power_post(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
                ) -> tuple[list[str], Rows]:
    """power's cells (group, n, c, tasks) as one row per group (warehouse.queries.power)."""
    confidence, _ = _uncertainty(values)
    check_design(values)
    name, rows = _grouped(values["by"], rows)
    return [name, *POWER_COLUMNS], [
        (group, *power_row([(int(n), int(c), int(tasks)) for _, n, c, tasks in cells], values, confidence))
        for group, cells in groupby(rows, key=lambda row: row[0])]


_LEADERBOARD_COLUMNS = ["rank", "pass_rate", "pass_rate_low", "pass_rate_high", "n_tasks", "n_attempts"]


def _leaderboard_post(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
                      ) -> tuple[list[str], Rows]:
    """pass_rate.sql's rows (one per group and task) as pass-rate's groups, ranked, with their
    tie groups or their verdicts against --baseline (warehouse.queries.leaderboard)."""
    confidence, _ = _uncertainty(values)
    name_columns, rates = _pass_rate_post(columns, rows, values, read)
    at = {column: i for i, column in enumerate(name_columns)}
    # Best first; equal rates keep pass-rate's order of the groups.
    rates = sorted(rates, key=lambda row: -row[at["pass_rate"]])
    tasks: dict[Any, dict[str, tuple[int, int]]] = {row[0]: {} for row in rates}
    for group, task, trials, successes, *_ in rows:
        if task is not None:  # a trial of unknown task pairs with nothing
            tasks[group][task] = (int(trials), int(successes))
    groups = [tasks[row[0]] for row in rates]
    shown = [(rank, row[0], *(row[at[c]] for c in _LEADERBOARD_COLUMNS[1:])) for rank, row in enumerate(rates, 1)]
    head = ["rank", name_columns[0], *_LEADERBOARD_COLUMNS[1:]]
    keys = [row[0] for row in rates]
    adjust, level = values["adjust"], 1 - confidence

    def tested(versus: int | None, comparison: leaderboard.Comparison | None) -> tuple[Any, ...]:
        if comparison is None:
            return None, None, None, None, None, adjust
        return (keys[versus], comparison.shared, comparison.test, comparison.p_value, comparison.p_adjusted,
                adjust)

    tested_columns = ["versus", "shared", "test", "p_value", "p_adjusted", "adjust"]
    if values["baseline"] is not None:
        base = _baseline(values["baseline"], keys, values["by"])
        found = leaderboard.against_baseline(groups, base, confidence, adjust)
        return [*head, *tested_columns, "verdict"], [
            (*row, *tested(base, c), "baseline" if c is None else leaderboard.verdict(c, level))
            for row, c in zip(shown, found)]
    standings = leaderboard.tie_groups(groups, confidence, adjust)
    return [*head, "group_tie", "tied_with_best", *tested_columns], [
        (*row, s.tie, s.tie == 1, *tested(s.versus, s.comparison)) for row, s in zip(shown, standings)]


def _baseline(given: str, keys: Sequence[Any], by: str) -> int:
    """The index among the groups' keys of --baseline: a key itself, else the one it begins."""
    found = [i for i, key in enumerate(keys) if key == given] or [
        i for i, key in enumerate(keys) if key is not None and str(key).startswith(given)]
    if len(found) != 1:
        what = "is no" if not found else "begins more than one"
        raise ArgumentValueError(f"--baseline {given!r} {what} group of --by {by}")
    return found[0]


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


def _ranks_statement(run_id: int, ranks: list[tuple[str, int, int]]) -> str:
    """One statement for the ranks of every measure given (its name, the median's rank and the
    p90's from the top), for one run: a row of five values per measure (one statement per run
    rather than per measure: on PostgreSQL each statement costs a round trip)."""
    return "SELECT * FROM " + " CROSS JOIN ".join(
        f"({_LENGTH_RANKS.format(measure=measure, run=int(run_id), median=int(median), p90_from_top=int(top))}) {measure}"
        for measure, median, top in ranks)


@reads_more
def _lengths_by_rank(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
                     ) -> tuple[list[str], Rows]:
    """_lengths_post's rows from the summaries: lengths_summary.sql counts each run's trials
    per measure, lengths_ranks.sql reads the values at the ranks the percentiles lie between,
    and the interpolation is percentile()'s own, so the numbers are the same to the last bit."""
    out = []
    for run, run_id, *counts in rows:
        ranks = [(measure, percentile_ranks(n, 0.5)[0], n - 1 - percentile_ranks(n, 0.9)[1])
                 for measure, n in zip(_LENGTH_MEASURES, counts) if n]
        found = iter(read(_ranks_statement(run_id, ranks), {})[0] if ranks else ())
        for measure, n in zip(_LENGTH_MEASURES, counts):
            if not n:
                out.append((run, measure, 0, None, None, None))
                continue
            median_low, median_high, p90_low, p90_high, top = (next(found) for _ in range(5))
            median_at, p90_at = percentile_ranks(n, 0.5)[2], percentile_ranks(n, 0.9)[2]
            out.append((run, measure, n, _round(interpolate(median_low, median_high, median_at)),
                        _round(interpolate(p90_low, p90_high, p90_at)), top))
    return _LENGTH_COLUMNS, out


# In costs.sql's order; the cost first, so that a table narrowed to the terminal keeps it.
_COST_MEASURES = ("cost_usd", "input_tokens", "output_tokens", "cache_tokens")
_COST_FIGURES = ("n", "sum", "mean", "p90")


def _costs_post(columns: list[str], rows: Rows, values: Mapping[str, Any], read: Read
                ) -> tuple[list[str], Rows]:
    """costs.sql's trials (group, then one value per measure) as one row per group: per measure
    how many trials have it (n), and their sum, mean and p90. A trial without the value is left
    out of its figures, never counted as 0: a group none of whose trials has it gets n 0 and
    the rest empty."""
    name, rows = _grouped(values["by"], rows)
    out = []
    for group, cells in groupby(rows, key=lambda row: row[0]):
        trials = list(cells)
        row: list[Any] = [group, len(trials)]
        for j, measure in enumerate(_COST_MEASURES, start=1):
            known = sorted(trial[j] for trial in trials if trial[j] is not None)
            # Token counts are ints, summed exactly; costs are floats, summed without rounding error.
            total = (math.fsum(known) if measure == "cost_usd" else sum(known)) if known else None
            row += [len(known), total, total / len(known) if known else None, percentile(known, 0.9)]
        out.append(tuple(row))
    return [name, "trials", *(f"{m}_{f}" for m in _COST_MEASURES for f in _COST_FIGURES)], out


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
        post=_dates_in_utc("first_started", "last_started"),
        summary_sql=sql_file("runs_summary"),
        filter_slots={"filters": trial_columns("tr"), "filters_t2": trial_columns("t2"),
                      "filters_runs": _RUN_COLUMNS},
        summary_filter_slots={"filters_b": breakdown_columns("b"), "filters_runs": _RUN_COLUMNS},
    ),
    CannedQuery(
        name="pass-rate",
        description=(
            "Trials, successes, pass rate with its confidence interval, mean reward and errors, "
            "grouped by run, model, agent or a run label.\n\n"
            "--by label:KEY groups the runs by their label KEY (a sweep's step=…), in the label's "
            "order, numbers as numbers; runs without the label make the last group (empty).\n\n"
            "pass_rate is successes over attempts (trials). n_tasks counts the group's tasks, "
            "n_attempts its trials. pass_rate_low and pass_rate_high bound it at --confidence "
            "(default 0.95) for tasks like these: a task's attempts are one cluster (a trial whose "
            "task is unknown, one of its own). With one attempt per task, the Wilson score "
            "interval; else Wilson's at the effective number of attempts p(1-p)/se², se the "
            "cluster-robust standard error, with Student's t at (tasks - 1) degrees of freedom. "
            "mean_reward_low/_high bound mean_reward: mean ± t · se, se clustered alike (empty "
            "under two tasks with a reward)."
        ),
        params=(
            BY_GROUP,
            THRESHOLD, ERRORS, METRIC,
            CONFIDENCE,
        ),
        sql=sql_file("pass_rate"),
        post=_pass_rate_post,
        summary_sql=sql_file("pass_rate_summary"),
        filter_slots={"filters": trial_columns("tr")},
        summary_filter_slots={"filters": breakdown_columns("b"), "filters_trials": trial_columns("tr")},
    ),
    CannedQuery(
        name="leaderboard",
        description=(
            "Groups (runs, models, agents, label values) ranked by pass rate, each with its interval, "
            "and which of them are statistically tied with the best, or differ from a baseline.\n\n"
            "pass_rate, pass_rate_low/_high, n_tasks and n_attempts are pass-rate's. rank orders the "
            "groups best first. Two groups are compared as compare-test compares two runs, over the "
            "tasks both attempted (shared): test is 'mcnemar' or 'paired t', p_value its two-sided "
            "p-value. The p-values are adjusted for the number of comparisons by --adjust (named in "
            "the column adjust): 'holm' (default; the chance of any false call at most 1 - "
            "confidence) or 'bh' (Benjamini-Hochberg: the expected share of false calls among the "
            "calls at most that); p_adjusted is the adjusted p-value.\n\n"
            "By default every pair of groups is compared, adjusted as one family, since the best is "
            "picked by the data. group_tie 1 holds the best and the groups not significantly worse "
            "than it (p_adjusted >= 1 - confidence, or too few shared or discordant tasks to call "
            "it): tied_with_best; group_tie 2 the best of the rest and those not worse than it; and "
            "so on. versus names the group a row was compared with, its tie group's first.\n\n"
            "--baseline GROUP (a group's value; a run's key or a unique prefix of it) compares every "
            "group with that one instead, the k - 1 comparisons adjusted as one family: verdict is "
            "'better', 'worse', 'no significant difference', 'too few shared tasks' (under 10) or "
            "'too few discordant tasks', and 'baseline' on its own row."
        ),
        params=(
            BY_GROUP,
            Param("baseline", str, None, "Compare every group with this one (its value; a run's key or its prefix)."),
            Param("adjust", str, "holm", "How the p-values are adjusted: holm (family-wise) or bh (false discovery).",
                  choices=("holm", "bh")),
            THRESHOLD, ERRORS, METRIC,
            CONFIDENCE,
        ),
        sql=sql_file("pass_rate"),
        post=_leaderboard_post,
        summary_sql=sql_file("pass_rate_summary"),
        filter_slots={"filters": trial_columns("tr")},
        summary_filter_slots={"filters": breakdown_columns("b"), "filters_trials": trial_columns("tr")},
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
            THRESHOLD, ERRORS, METRIC,
        ),
        sql=sql_file("solve_matrix"),
        summary_sql=sql_file("solve_matrix_summary"),
        filter_slots={"filters": trial_columns("tr")},
    ),
    CannedQuery(
        name="pass-at-k",
        description=(
            "Unbiased pass@k per run (the mean over its tasks) with its bootstrap interval, or per "
            "task and run with --per-task.\n\n"
            "--by label:KEY groups by a run label instead (a sweep's step, say): a task's attempts "
            "in all the runs that carry the same value are pooled into one n and c; runs without "
            "the label make one group, shown empty.\n\n"
            "pass@k = 1 - C(n-c, k) / C(n, k) for a task attempted n times with c successes. It is "
            "empty (NULL) for a task with fewer than k attempts, and a run's mean covers only the "
            "tasks with at least k attempts: min_attempts shows when some were left out.\n\n"
            "pass@k_low and pass@k_high bound a run's mean at --confidence (default 0.95): the "
            "percentile interval of the mean over --resamples (default 2000) resamples of the run's "
            "tasks with replacement, its percentiles widened for the number of tasks (expanded "
            "percentile), drawn from a generator seeded with --seed (default 0) and the "
            "run's key (or the label's value), so the same command gives the same interval. "
            "--per-task rows have none."
        ),
        params=(
            Param("k", IntList, "1,5,10", "The k values, separated by commas."),
            Param("by", str, "run", "Group by run or label:KEY.", choices=("run",), by_label=True),
            Param("per_task", bool, False, "One row per run (or group) and task, with n and c, instead of per run."),
            THRESHOLD, ERRORS, METRIC,
            CONFIDENCE,
            RESAMPLES,
            SEED,
        ),
        sql=sql_file("pass_at_k"),
        post=_pass_at_k_post,
        summary_sql=sql_file("pass_at_k_summary"),
        filter_slots={"filters": trial_columns("tr")},
    ),
    CannedQuery(
        name="compare",
        description=(
            "Two runs side by side per task: attempts and successes in A and B.\n\n"
            "A run is its key, a unique prefix of the key, or its name.\n\n"
            "A run solves a task when at least one attempt succeeded. flip is 'gained' (unsolved in "
            "A, solved in B), 'lost' (the reverse) or empty; tasks only one run attempted never flip. "
            "As a table, compare-test's verdict follows on stderr, in one line."
        ),
        params=(
            RUN_A,
            RUN_B,
            Param("flipped", bool, False, "Only the tasks that flipped, either way."),
            THRESHOLD, ERRORS, METRIC,
            CONFIDENCE,
            RESAMPLES,
            SEED,
        ),
        sql=sql_file("compare"),
        post=_compare_post,
        summary_sql=sql_file("compare_summary"),
        filter_slots={"filters": trial_columns("tr")},
        footnote=_compare_footnote,
    ),
    CannedQuery(
        name="compare-test",
        description=(
            "Is B better than A, or is the gap noise? A paired test over the tasks both runs "
            "attempted, in one row.\n\n"
            "shared counts those tasks, only_a and only_b the tasks one run alone attempted (left "
            "out of the test); gained and lost the shared ones B solved and A did not, and the "
            "reverse (a run solves a task when an attempt succeeded); discordant the shared tasks "
            "whose share of successful attempts differs. test names the test p_value is of: "
            "'mcnemar' when every shared task has one attempt in both runs (McNemar's exact test on "
            "gained against lost, two-sided), else 'paired t' (the paired t-test of the tasks' "
            "shares, B's minus A's, two-sided, T - 1 degrees of freedom). pass_rate_a/_b are the "
            "runs' mean share of successful attempts over the shared tasks; diff is B - A, and "
            "diff_low/diff_high its interval at --confidence (default 0.95): the paired bootstrap, the "
            "shared tasks resampled with replacement --resamples times (default 2000) from a "
            "generator seeded with --seed (default 0), its percentiles widened for the number of "
            "tasks (as pass-at-k's).\n\n"
            "verdict: 'too few shared tasks' under 10; 'too few discordant tasks' when even every "
            "discordant task going one way would not be significant (under 6 at 0.95); else 'B "
            "better' or 'A better' when p_value < 1 - confidence, or 'no significant difference'; "
            "followed by what was tested, e.g. '(paired t-test on the tasks' success shares)'.\n\n"
            "--tasks lists the tasks instead: each whose share differs (kind 'B higher' or 'A "
            "higher', diff B's share minus A's) and each one run alone attempted ('only A', 'only B')."
        ),
        params=(RUN_A, RUN_B, Param("tasks", bool, False, "List the tasks that differ or one run alone attempted."),
                THRESHOLD, ERRORS, METRIC, CONFIDENCE, RESAMPLES, SEED),
        sql=sql_file("compare"),
        post=_compare_test_post,
        summary_sql=sql_file("compare_summary"),
        filter_slots={"filters": trial_columns("tr")},
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
        filter_slots={"filters": trial_columns("tr"), "filters_t2": trial_columns("t2")},
        summary_filter_slots={"filters": breakdown_columns("b")},
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
        filter_slots={"filters": trial_columns("tr")},
        summary_filter_slots={"filters_runs": _RUN_COLUMNS},
        narrowed_sql=sql_file("lengths_narrowed"),  # trial_lengths has no task, model or agent
    ),
    CannedQuery(
        name="costs",
        description=(
            "Cost in USD and input, output and cache tokens per run (or --by model, agent, "
            "label:KEY): summed, and per trial their mean and p90.\n\n"
            "For each measure (cost_usd, input_tokens, output_tokens, cache_tokens): _n counts the "
            "trials that have it, and _sum, _mean and _p90 are over those trials alone. A trial "
            "without a value (its source recorded none) is not counted as 0: trials minus _n is "
            "how many lack it, and a group where none has it shows _n 0 and the rest empty. The "
            "p90 interpolates linearly between ranks, as lengths' percentiles do.\n\n"
            "Groups as pass-rate's: a model is its model_name (without its provider prefix); "
            "--by label:KEY in the label's order, runs without the label the last group (empty)."
        ),
        params=(BY_GROUP,),
        sql=sql_file("costs"),
        post=_costs_post,
        filter_slots={"filters": trial_columns("tr")},
    ),
    CannedQuery(
        name="power",
        description=(
            "How many tasks a paired comparison of two runs needs to see a difference, and the "
            "smallest difference a design can see, from each group's own task and attempt noise.\n\n"
            "Per run (or --by model, agent, label:KEY; a task's attempts in a group's runs pooled): "
            "n_tasks, mean_attempts per task, pass_rate (the mean of the tasks' success shares), "
            "between_sd (how much the tasks' true success shares differ) and within_sd (the sd of "
            "one attempt at a task, sqrt of the mean p(1-p)), the moment estimators of a one-way "
            "random-effects model over tasks. between_sd is empty under two tasks, within_sd when "
            "no task has two attempts.\n\n"
            "The design: runs A and B attempt the same tasks, --attempts times each (default: the "
            "group's mean_attempts), compared by a paired test over the tasks' success shares, "
            "two-sided at --confidence (default 0.95) with --power (default 0.8). A task's "
            "difference has variance 2 within / attempts + 2 (1 - rho) between: --rho (default 1) "
            "is how alike A's and B's task shares are; 1 means B shifts every task alike. "
            "tasks_needed is the fewest tasks that see a difference of --delta (default 0.05); mde "
            "the smallest difference --tasks tasks (default: the group's n_tasks) can see. Both are "
            "empty where the data cannot say (or nothing in it varies)."
        ),
        params=(
            Param("delta", float, 0.05, "The difference in pass rate to detect (0 to 1)."),
            Param("attempts", int, None, "Attempts per task in each run (default: the group's mean)."),
            Param("tasks", int, None, "Tasks in the design, for the mde (default: the group's)."),
            BY_GROUP,
            Param("confidence", float, 0.95, "The test's confidence level (0 to 1): it rejects at 1 - confidence."),
            Param("power", float, 0.8, "The chance of seeing a true difference of --delta (0 to 1)."),
            Param("rho", float, 1.0,
                  "How alike the runs' task success shares are (0 to 1; 1: B shifts every task alike)."),
            THRESHOLD,
        ),
        sql=sql_file("power"),
        post=_power_post,
        summary_sql=sql_file("power_summary"),
        filter_slots={"filters": trial_columns("tr")},
        summary_filter_slots={"filters": breakdown_columns("b")},
    ),
    CannedQuery(
        name="sources",
        description=(
            "The ledger by source: units loaded, rows, episodes new and duplicate, trials, runs, "
            "first and last load, rows rejected, conflicts.\n\n"
            "A source is a Hub dataset, a Parquet file or folder, or a trace directory, as ingest was "
            "given it. trials and runs count what its loads brought (a trial two sources share counts "
            "in both); the filters keep the sources that brought a trial they keep, and a source that "
            "brought no trial at all is always listed. `warehouse loads SOURCE` lists its units."
        ),
        params=(),
        sql=sql_file("sources"),
        post=_dates_in_utc("first_load", "last_load"),
        filter_slots={"filters": trial_columns("t")},
    ),
    CannedQuery(
        name="loads",
        description=(
            "The ledger by unit: each load (a shard, a trial folder) with its content hash, rows, "
            "trials, episodes, turns, bytes, rejections, conflicts, start, duration, and the code "
            "that loaded it.\n\n"
            "SOURCE (a source's name or URI, as `warehouse sources` lists it) keeps that source's. "
            "A unit is loaded once per content: a unit changed on disk loads again as a new row. "
            "bytes is the UTF-8 of the texts the unit stored new (0 for a unit whose texts were "
            "all stored already), not the file's size. tool_version is the warehouse's version "
            "and schema_revision the schema it wrote (empty for loads by code before it recorded "
            "one)."
        ),
        params=(Param("source", str, None, "Only this source (its name or URI).", positional=True),),
        sql=sql_file("loads"),
        post=_loads_post,
        filter_slots={"filters": trial_columns("t")},
    ),
)}
