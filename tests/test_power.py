"""`query power` (warehouse/queries/power.py): its variance components against a one-way ANOVA
(statsmodels) and a direct computation on the same trials, on SQLite and PostgreSQL; and its
tasks_needed and mde proved by simulation: paired runs drawn with the design's N tasks reach
the power asked for under the paired t-test (scipy)."""

from __future__ import annotations

import json
import math
import random
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats
from statsmodels.formula.api import ols
from statsmodels.stats.anova import anova_lm

from ingest.write import writer
from query_fixture import _trial, cli
from warehouse.errors import ArgumentValueError
from warehouse.queries import QUERIES, run_canned
from warehouse.queries.power import detectable_difference, paired_sd, tasks_needed, variance_components

Z = scipy_stats.norm.ppf(0.975) + scipy_stats.norm.ppf(0.8)  # 95 % two-sided, 80 % power


def _cells(successes: np.ndarray, attempts: int) -> list[tuple[int, int, int]]:
    """Tasks of `attempts` attempts each, counted per (n, c) as power.sql counts them."""
    return [(attempts, int(c), tasks) for c, tasks in sorted(Counter(successes.tolist()).items())]


# --- the arithmetic ------------------------------------------------------------------------------


def test_variance_components_by_hand():
    # Four tasks: 2 of 2, 0 of 2, 1 of 2, 1 of 4. Shares 1, 0, 1/2, 1/4: mean 7/16.
    # within: n/(n-1) m(1-m) = 0, 0, 1/2, 4/3 · 3/16 = 1/4 -> mean 3/16.
    # between: the shares' sample variance (0.546875 / 3) less within · mean(1/n) = 3/16 · 7/16.
    tasks, attempts, rate, between, within = variance_components([(2, 2, 1), (2, 0, 1), (2, 1, 1), (4, 1, 1)])
    assert (tasks, attempts, rate, within) == (4, 2.5, 7 / 16, pytest.approx(3 / 16))
    shares = [1, 0, 0.5, 0.25]
    assert np.var(shares, ddof=1) == pytest.approx(0.546875 / 3)
    assert between == pytest.approx(0.546875 / 3 - 3 / 16 * 7 / 16)
    # One attempt a task: nothing separates the attempts' noise from the tasks'.
    assert variance_components([(1, 1, 3), (1, 0, 2)])[3:] == (None, None)
    # One task: no spread of tasks.
    assert variance_components([(5, 2, 1)])[3:] == (None, pytest.approx(5 / 4 * 0.4 * 0.6))
    # Tasks alike beyond what the attempts explain: between is 0, not negative.
    assert variance_components([(4, 2, 10)])[3] == 0.0


def test_design_formulas():
    # sd of a task's difference: 2 within / K, plus 2 (1 - rho) between.
    assert paired_sd(0.1, 0.2, 4, 1.0) == pytest.approx(math.sqrt(0.1))
    assert paired_sd(0.1, 0.2, 4, 0.5) == pytest.approx(math.sqrt(0.1 + 0.1))
    assert paired_sd(None, 0.2, 4, 1.0) == pytest.approx(math.sqrt(0.1))  # between not needed at rho 1
    assert paired_sd(None, 0.2, 4, 0.9) is None and paired_sd(0.1, None, 4, 1.0) is None
    assert paired_sd(0.0, 0.0, 4, 0.5) is None  # nothing varies: no test has anything to go on
    # N = ((z_.975 + z_.8) sd / delta)^2 rounded up; mde = (z_.975 + z_.8) sd / sqrt(N).
    assert tasks_needed(0.05, 0.2, 0.95, 0.8) == math.ceil((Z * 0.2 / 0.05) ** 2) == 126
    assert detectable_difference(126, 0.2, 0.95, 0.8) == pytest.approx(Z * 0.2 / math.sqrt(126))
    assert detectable_difference(126, 0.2, 0.95, 0.8) <= 0.05 < detectable_difference(125, 0.2, 0.95, 0.8)
    assert tasks_needed(0.9, 0.01, 0.95, 0.8) == 2


# --- proved by simulation ------------------------------------------------------------------------

PAIRS = 400  # the power's Monte Carlo sd at 0.8: 0.02


def _difficulties(rng: np.random.Generator, tasks: int, low: float, width: float) -> np.ndarray:
    """Task success shares low + width · Beta(0.5, 0.5): many tasks near the ends of their range."""
    return low + width * rng.beta(0.5, 0.5, tasks)


def _estimated(rng: np.random.Generator, low: float, width: float, attempts: int) -> tuple[float, float]:
    """(between, within) as the query estimates them from a past run of 4000 tasks."""
    shares = _difficulties(rng, 4000, low, width)
    _, _, _, between, within = variance_components(_cells(rng.binomial(attempts, shares), attempts))
    return between, within


def _power(rng: np.random.Generator, tasks: int, attempts: int, low: float, width: float,
           effect: float, spread: float = 0.0) -> float:
    """The share of PAIRS simulated paired runs in which the paired t-test over the tasks' success
    shares rejects at 0.05: A's task shares drawn by _difficulties, B's A's plus `effect`, plus or
    minus `spread` (each task's effect differs: its variance is spread²)."""
    rejected = 0
    for _ in range(PAIRS):
        a = _difficulties(rng, tasks, low, width)
        b = a + effect + spread * rng.choice([-1.0, 1.0], tasks)
        assert 0 <= b.min() and b.max() <= 1  # no clipping: the mean effect is exactly `effect`
        differences = (rng.binomial(attempts, b) - rng.binomial(attempts, a)) / attempts
        rejected += scipy_stats.ttest_1samp(differences, 0.0).pvalue < 0.05
    return rejected / PAIRS


def test_tasks_needed_reach_the_power_asked_for():
    """B shifts every task by delta (the query's default rho = 1). Task shares 0.95 · Beta(0.5, 0.5),
    so that a shift of 0.05 never passes 1."""
    rng = np.random.default_rng(27)
    delta, attempts = 0.05, 5
    between, within = _estimated(rng, 0.0, 1 - delta, attempts)
    assert within == pytest.approx(0.475 - 0.9025 * 0.375, abs=0.005)  # E[p(1-p)] of 0.95 · Beta(.5, .5)
    n = tasks_needed(delta, paired_sd(between, within, attempts, 1.0), 0.95, 0.8)
    assert 160 <= n <= 185
    power = _power(rng, n, attempts, 0.0, 1 - delta, delta)
    assert power == pytest.approx(0.80, abs=0.06)
    # Half the tasks see it far less often: the figure is not generous by construction.
    assert _power(rng, n // 2, attempts, 0.0, 1 - delta, delta) < 0.6


def test_the_mde_of_a_design_with_varied_effects_is_seen_at_the_power_asked_for():
    """B's effect differs by task (mde ± 0.15), which --rho states: 2 (1 - rho) between = 0.15².
    Task shares 0.15 + 0.5 · Beta(0.5, 0.5), ten attempts each, 150 tasks."""
    rng = np.random.default_rng(5)
    attempts, tasks, spread = 10, 150, 0.15
    between, within = _estimated(rng, 0.15, 0.5, attempts)
    rho = 1 - spread ** 2 / (2 * between)
    mde = detectable_difference(tasks, paired_sd(between, within, attempts, rho), 0.95, 0.8)
    assert 0.05 < mde < 0.065
    assert _power(rng, tasks, attempts, 0.15, 0.5, mde, spread) == pytest.approx(0.80, abs=0.06)
    # Taken for a uniform shift (rho 1), the design would promise a difference it sees far less often.
    hopeful = detectable_difference(tasks, paired_sd(between, within, attempts, 1.0), 0.95, 0.8)
    assert hopeful < 0.85 * mde
    assert _power(rng, tasks, attempts, 0.15, 0.5, hopeful, spread) < 0.7


# --- on a warehouse ------------------------------------------------------------------------------


def _load(engine, seed: int = 1) -> dict[str, np.ndarray]:
    """run-a: 40 tasks × 4 attempts (model m1); run-b: the same tasks, 1 to 3 attempts (model m2);
    run-c: 10 of the tasks × 2 attempts (model m1). Each task's share is drawn once from
    Beta(0.5, 0.5) and each attempt's reward from it (1, or 0.5 or 0: the threshold matters)."""
    rng = random.Random(seed)
    shares = [rng.betavariate(0.5, 0.5) for _ in range(40)]
    attempts = {"run-a": [4] * 40, "run-b": [1 + t % 3 for t in range(40)], "run-c": [2] * 10}
    outcomes: dict[str, list[list[float]]] = {}
    trials = []
    for run, counts in attempts.items():
        model = "m2" if run == "run-b" else "m1"
        outcomes[run] = []
        for t, n in enumerate(counts):
            rewards = [1.0 if rng.random() < shares[t] else rng.choice([0.5, 0.0]) for _ in range(n)]
            outcomes[run].append(rewards)
            trials += [_trial(run, f"t{t:02d}__{run}{i}", f"t{t:02d}", r, model=model) for i, r in enumerate(rewards)]
    source = writer.ensure_source(engine, "parquet", "/power", "power")
    with writer.unit(engine, source, "unit", "hash") as u:
        u.add_trials(trials)
    return outcomes


def _direct(per_task: list[list[int]], confidence: float = 0.95, power: float = 0.8, delta: float = 0.05,
            attempts: float | None = None) -> tuple:
    """The row computed straight from each task's 0/1 outcomes with numpy."""
    n = np.array([len(o) for o in per_task], dtype=float)
    m = np.array([np.mean(o) for o in per_task])
    repeated = n > 1
    within = np.mean([np.var(o, ddof=1) for o, r in zip(per_task, repeated) if r])  # unbiased per task
    between = max(0.0, np.var(m, ddof=1) - within * np.mean(1 / n))
    k = attempts or n.mean()
    sd = math.sqrt(2 * within / k)
    z = scipy_stats.norm.ppf(1 - (1 - confidence) / 2) + scipy_stats.norm.ppf(power)
    return (len(per_task), n.mean(), m.mean(), math.sqrt(between), math.sqrt(within), k,
            max(2, math.ceil((z * sd / delta) ** 2)), z * sd / math.sqrt(len(per_task)))


def _power_rows(db_url: str, **given) -> dict:
    """power's rows by group, the same from the summaries as from the base tables."""
    summarized = run_canned(db_url, QUERIES["power"], given)
    defined = run_canned(db_url, QUERIES["power"], given, summaries=False)
    assert summarized.columns == defined.columns
    assert summarized.rows == [tuple(pytest.approx(v) if isinstance(v, float) else v for v in row)
                               for row in defined.rows]
    return {row[0]: row[1:] for row in summarized.rows}


def _approx(row: tuple) -> tuple:
    return tuple(pytest.approx(v, rel=1e-9) if isinstance(v, float) else v for v in row)


def test_power_on_a_warehouse_is_the_direct_computation(engine, db_url):
    outcomes = _load(engine)
    successes = {run: [[int(r >= 1.0) for r in task] for task in tasks] for run, tasks in outcomes.items()}
    rows = _power_rows(db_url)
    assert rows["run-a"] == _approx(_direct(successes["run-a"]))
    assert rows["run-b"] == _approx(_direct(successes["run-b"]))  # 1 to 3 attempts a task
    # With every task attempted alike the components are the one-way ANOVA's: within is the
    # residual mean square, between (MSB - MSW) / K.
    frame = pd.DataFrame([(t, y) for t, task in enumerate(successes["run-a"]) for y in task], columns=["task", "y"])
    anova = anova_lm(ols("y ~ C(task)", data=frame).fit())
    msb, msw = anova["mean_sq"]
    assert rows["run-a"][4] == pytest.approx(math.sqrt(msw))
    assert rows["run-a"][3] == pytest.approx(math.sqrt(max(0.0, (msb - msw) / 4)))
    # By model: m1's tasks pool run-a's and run-c's attempts (6 at the first 10 tasks).
    by_model = _power_rows(db_url, by="model", attempts=3, tasks=100, confidence=0.9, power=0.9, delta=0.1)
    pooled = [a + c for a, c in zip(successes["run-a"], successes["run-c"])] + successes["run-a"][10:]
    want = _direct(pooled, confidence=0.9, power=0.9, delta=0.1, attempts=3)
    assert by_model["m1"][:7] == _approx(want[:7])
    assert by_model["m1"][7] == pytest.approx(want[7] * math.sqrt(40 / 100))  # the mde of 100 tasks
    # At another threshold (from the trials): a reward of 0.5 succeeds too.
    half = _power_rows(db_url, threshold=0.5)
    assert half["run-a"] == _approx(_direct([[int(r >= 0.5) for r in task] for task in outcomes["run-a"]]))


def test_power_as_json_and_bad_input(engine, db_url):
    _load(engine)
    done = cli(db_url, "query", "power", "--delta", "0.1", "--attempts", "5", "--format", "json")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    want = run_canned(db_url, QUERIES["power"], {"delta": 0.1, "attempts": 5})
    got = json.loads(done.stdout)
    assert got == [dict(zip(want.columns, row)) for row in want.rows]
    assert list(got[0]) == ["run_key", "n_tasks", "mean_attempts", "pass_rate", "between_sd", "within_sd",
                            "attempts_used", "tasks_needed", "mde"]
    assert [row["run_key"] for row in got] == ["run-a", "run-b", "run-c"]
    assert all(row["attempts_used"] == 5 for row in got)
    for name, value, message in [
            ("delta", 0.0, "--delta must lie strictly between 0 and 1, not 0.0"),
            ("delta", 1.0, "--delta must lie strictly between 0 and 1, not 1.0"),
            ("power", 1.5, "--power must lie strictly between 0 and 1, not 1.5"),
            ("attempts", 0, "--attempts must be at least 1, not 0"),
            ("tasks", -3, "--tasks must be at least 1, not -3"),
            ("rho", 1.2, "--rho must lie between 0 and 1, not 1.2"),
            ("confidence", 1.0, "--confidence must lie strictly between 0 and 1, not 1.0")]:
        bad = cli(db_url, "query", "power", f"--{name}", str(value))
        assert bad.returncode == 1 and bad.stdout == "", (name, bad.stdout)
        assert bad.stderr.splitlines() == [f"Error: {message}"], name
        with pytest.raises(ArgumentValueError, match=f"^{message}$"):
            run_canned(db_url, QUERIES["power"], {name: value})
