"""The statistics proved by simulation (tools/simulate_stats.py, which writes STATISTICS.md): tasks
of varied difficulty (p ~ Beta(0.5, 0.5)) attempted k = 1, 5 and 10 times, 1000 seeded runs or
pairs of runs per case, through the library's functions. Then the same on a warehouse, on both
backends: the queries give these intervals and this test on simulated runs stored for real."""

from __future__ import annotations

import random

import pytest

from ingest.write import writer
from query_fixture import _trial
from tools.simulate_stats import (NEAR_ZERO, clustered_wald_t, compare_test, coverage, mcnemar_solved_once, rejections, reward_coverage,
                                  simulated_run, wilson_over_attempts)
from warehouse.queries import QUERIES, run_canned
from warehouse.queries.catalog import paired_test
from warehouse.queries.stats import clustered_rate_interval

RUNS = 1000
# The tolerance (two standard errors of a share near 0.95 over 200 runs); over 1000
# runs the Monte Carlo error is half that (±0.014), so a case passes by its method, not by chance.
WITHIN = 0.03


@pytest.mark.parametrize("k", [1, 5, 10])
def test_pass_rate_interval_covers_the_true_rate(k):
    held = coverage(clustered_rate_interval, k, tasks=40, runs=RUNS)
    assert abs(held - 0.95) <= WITHIN, held
    if k > 1:  # the old interval, over attempts as if independent, held it far less often
        assert coverage(wilson_over_attempts, k, tasks=40, runs=RUNS) < 0.8


def test_pass_rate_interval_near_zero():
    """A rate near 0 (p ~ Beta(0.2, 2), 0.09), where p ± t·se under-covers: the Wilson form holds."""
    held = coverage(clustered_rate_interval, 5, tasks=40, runs=RUNS, shape=NEAR_ZERO)
    assert abs(held - 0.95) <= WITHIN, held
    assert coverage(clustered_wald_t, 5, tasks=40, runs=RUNS, shape=NEAR_ZERO) < held - 0.03


@pytest.mark.parametrize("k", [1, 5, 10])
def test_mean_reward_interval_covers_the_true_mean(k):
    held = reward_coverage(k, tasks=40, runs=RUNS)
    assert abs(held - 0.95) <= WITHIN, held


@pytest.mark.parametrize("k", [1, 5, 10])
def test_compare_test_false_positives_and_power(k):
    false_positives = rejections(compare_test, k, lift=0.0, tasks=40, pairs=RUNS)
    assert false_positives <= 0.05 + WITHIN, false_positives
    power, old_power = (rejections(test, k, lift=0.15, tasks=40, pairs=RUNS) for test in (compare_test, mcnemar_solved_once))
    if k == 1:  # one attempt per task: the same test, McNemar's
        assert power == old_power
    else:  # STATISTICS.md: 0.92 against 0.40 at k = 5, 1.00 against 0.48 at k = 10
        assert power >= 0.85 and power - old_power >= 0.4, (power, old_power)


# --- on a warehouse ------------------------------------------------------------------------------

def _store(engine, runs: dict[str, list[tuple[int, int]]]) -> None:
    """Each run's tasks (successes, attempts) as trials: task t{i}, its successes first."""
    trials = [_trial(run, f"{run}-t{i:02d}-{j}", f"t{i:02d}", float(j < successes))
              for run, clusters in runs.items() for i, (successes, attempts) in enumerate(clusters)
              for j in range(attempts)]
    source = writer.ensure_source(engine, "parquet", "/simulated", "simulated")
    with writer.unit(engine, source, "unit", "hash-simulated") as unit:
        unit.add_trials(trials)


def _both_paths(db_url: str, name: str, **given) -> list[dict]:
    """The query's rows from the summaries, checked equal to those from the base tables."""
    summarized = run_canned(db_url, QUERIES[name], given)
    assert summarized.rows == run_canned(db_url, QUERIES[name], given, summaries=False).rows
    return [dict(zip(summarized.columns, row)) for row in summarized.rows]


def test_queries_give_the_simulated_intervals_and_test(engine, db_url):
    rng = random.Random(27)
    chances = [rng.betavariate(0.5, 0.5) for _ in range(40)]
    runs = {"sim-a": simulated_run(rng, 40, 5, chances=chances),
            "sim-b": simulated_run(rng, 40, 5, lift=0.15, chances=chances),
            "sim-one": simulated_run(rng, 40, 1, chances=chances)}
    _store(engine, runs)
    rows = {row["run_key"]: row for row in _both_paths(db_url, "pass-rate")}
    for run, clusters in runs.items():
        row = rows[run]
        assert (row["n_tasks"], row["n_attempts"]) == (40, sum(n for _, n in clusters))
        assert (row["pass_rate_low"], row["pass_rate_high"]) == tuple(
            pytest.approx(v, rel=1e-9) for v in clustered_rate_interval(clusters))
    assert rows["sim-a"]["pass_rate_high"] - rows["sim-a"]["pass_rate_low"] > 1.3 * (
        wilson_over_attempts(runs["sim-a"], 0.95)[1] - wilson_over_attempts(runs["sim-a"], 0.95)[0])
    [row] = _both_paths(db_url, "compare-test", a="sim-a", b="sim-b")
    test, p_value, verdict = paired_test([(na, sa, nb, sb) for (sa, na), (sb, nb) in zip(runs["sim-a"], runs["sim-b"])],
                                         0.95)
    assert (row["test"], row["verdict"]) == (test, verdict) == ("paired t", verdict)
    assert row["p_value"] == pytest.approx(p_value, rel=1e-9)
    [one] = _both_paths(db_url, "compare-test", a="sim-one", b="sim-one")
    assert one["test"] == "mcnemar"
