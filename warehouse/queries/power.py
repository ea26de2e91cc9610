"""`query power`'s arithmetic: how noisy a group's tasks and attempts are, and what that means
for a paired comparison of two runs before it is run.

The model (a one-way random-effects model over tasks, for success or failure): task t has a
true success share p_t, drawn from the population of tasks; its n_t attempts are independent
Bernoulli(p_t) draws. Two variances describe a group's data:

- between: Var(p_t) over tasks, how much the tasks differ in difficulty;
- within: the mean over tasks of p_t(1 - p_t), the variance of one attempt at a task.

The design they are used for: runs A and B attempt the same N tasks, K times each, and are
compared by a paired test over the tasks (the mean of d_t = B's share of task t minus A's). If B
moves each task's p_t by delta_t, Var(d_t) = Var(delta_t) + 2 within / K (A's and B's attempt
noise; B's tasks are taken to be as noisy as A's). Var(delta_t) is the assumption: with
`rho` the correlation over tasks of A's and B's true shares (each with variance between), it is
2 (1 - rho) between. rho = 1: B shifts every task alike, and the tasks' differences in difficulty
cancel in the pairs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from warehouse.errors import ArgumentValueError
from warehouse.queries.stats import normal_quantile


def check_design(values: Mapping[str, Any]) -> None:
    """--delta, --power, --attempts, --tasks and --rho, checked (--confidence is the catalog's)."""
    for name in ("delta", "power"):
        if not 0 < values[name] < 1:
            raise ArgumentValueError(f"--{name} must lie strictly between 0 and 1, not {values[name]}")
    for name in ("attempts", "tasks"):
        if values[name] is not None and values[name] < 1:
            raise ArgumentValueError(f"--{name} must be at least 1, not {values[name]}")
    if not 0 <= values["rho"] <= 1:
        raise ArgumentValueError(f"--rho must lie between 0 and 1, not {values['rho']}")


def variance_components(cells: Sequence[tuple[int, int, int]]
                        ) -> tuple[int, float, float, float | None, float | None]:
    """For a group's tasks, counted in cells of `tasks` tasks with n attempts and c successes
    each: (tasks, mean attempts, pass rate, between, within), the moment (ANOVA) estimators.

    A task's share m = c/n. within is the mean over the tasks with two attempts or more of the
    unbiased n/(n-1) m(1-m); None if there are none. between is the tasks' sample variance of m,
    less the part the attempts explain (within times the mean of 1/n over the tasks), at least 0;
    None under two tasks. With K attempts at every task this is (MSB - MSW) / K. The pass rate is
    the mean of the tasks' shares."""
    tasks = sum(t for _, _, t in cells)
    rate = sum(c / n * t for n, c, t in cells) / tasks
    repeated = [(n, c, t) for n, c, t in cells if n > 1]
    within = None
    if repeated:
        within = sum(n / (n - 1) * (c / n) * (1 - c / n) * t for n, c, t in repeated) / sum(t for *_, t in repeated)
    between = None
    if tasks > 1 and within is not None:
        spread = sum((c / n - rate) ** 2 * t for n, c, t in cells) / (tasks - 1)
        between = max(0.0, spread - within * sum(t / n for n, _, t in cells) / tasks)
    return tasks, sum(n * t for n, _, t in cells) / tasks, rate, between, within


def paired_sd(between: float | None, within: float | None, attempts: float, rho: float) -> float | None:
    """The sd of one task's difference d_t at `attempts` attempts a run (module docstring), or
    None when the data cannot say (no within; no between, and rho < 1), or it is 0 (nothing in
    the data varies: no test has anything to go on)."""
    if within is None or (rho < 1 and between is None):
        return None
    sd = math.sqrt(2 * within / attempts + (2 * (1 - rho) * between if rho < 1 else 0.0))
    return sd or None


def _z_sum(confidence: float, power: float) -> float:
    """z_{1 - alpha/2} + z_power: a two-sided test at this confidence, with this power."""
    return normal_quantile(1 - (1 - confidence) / 2) + normal_quantile(power)


def tasks_needed(delta: float, sd: float, confidence: float, power: float) -> int:
    """The fewest tasks at which the paired test (normal approximation) sees a mean difference of
    delta with this power: N = ((z_{1-alpha/2} + z_power) sd / delta)^2, rounded up; at least 2,
    which a test of a mean over tasks needs."""
    return max(2, math.ceil((_z_sum(confidence, power) * sd / delta) ** 2))


def detectable_difference(tasks: int, sd: float, confidence: float, power: float) -> float:
    """The smallest mean difference the paired test sees with this power over `tasks` tasks:
    (z_{1-alpha/2} + z_power) sd / sqrt(N)."""
    return _z_sum(confidence, power) * sd / math.sqrt(tasks)


COLUMNS = ["n_tasks", "mean_attempts", "pass_rate", "between_sd", "within_sd", "attempts_used", "tasks_needed", "mde"]


def power_row(cells: Sequence[tuple[int, int, int]], values: Mapping[str, Any], confidence: float
              ) -> tuple[Any, ...]:
    """One group's row of COLUMNS: its components, and the design's figures at --attempts (else
    the group's mean attempts) and, for the mde, --tasks (else the group's tasks)."""
    tasks, mean_attempts, rate, between, within = variance_components(cells)
    attempts = float(values["attempts"] or mean_attempts)
    sd = paired_sd(between, within, attempts, values["rho"])
    needed = mde = None
    if sd is not None:
        needed = tasks_needed(values["delta"], sd, confidence, values["power"])
        mde = detectable_difference(values["tasks"] or tasks, sd, confidence, values["power"])
    return (tasks, mean_attempts, rate, _root(between), _root(within), attempts, needed, mde)


def _root(variance: float | None) -> float | None:
    return None if variance is None else math.sqrt(variance)
