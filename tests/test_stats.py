"""Answers with their uncertainty (warehouse/queries/stats.py and the queries that use it):
hand-worked values, scipy and statsmodels as reference implementations, and compare-test on
seeded runs that differ by chance and by construction, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from itertools import product

import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.contingency_tables import mcnemar as statsmodels_mcnemar
from statsmodels.stats.proportion import proportion_confint

from ingest.write import writer
from query_fixture import _trial, cli
from warehouse.queries import QUERIES, run_canned
from warehouse.queries.outcome import DEFAULT_NOTE as ERRORS_NOTE
from warehouse.queries.stats import (_Binomial, bootstrap_counts, clustered_mean_interval, clustered_rate_interval,
                                     expanded_confidence, mcnemar_exact, normal_quantile, paired_t_test,
                                     percentile_interval, t_quantile, t_sf, wilson_interval)

# --- Wilson ------------------------------------------------------------------------------------


def test_wilson_by_hand():
    # 8 of 10 at 95%: z = 1.959964, z² = 3.841459, rate 0.8.
    #   centre = (0.8 + z²/20) / (1 + z²/10) = 0.992073 / 1.384146 = 0.7167
    #   half   = z / 1.384146 · sqrt(0.8·0.2/10 + z²/400) = 1.4160 · sqrt(0.025604) = 0.2266
    #   -> 0.7167 ∓ 0.2266 = (0.4902, 0.9433)
    low, high = wilson_interval(8, 10)
    assert (low, high) == (pytest.approx(0.4902, abs=1e-4), pytest.approx(0.9433, abs=1e-4))
    # 0 of 10: the low end is 0, the high end z² / (n + z²) = 3.8415 / 13.8415 = 0.2775;
    # 10 of 10 mirrors it.
    assert wilson_interval(0, 10) == (0.0, pytest.approx(0.2775, abs=1e-4))
    assert wilson_interval(10, 10) == (pytest.approx(1 - 0.2775, abs=1e-4), 1.0)
    # Half the trials: symmetric about 1/2.
    low, high = wilson_interval(5, 10, 0.9)
    assert low + high == pytest.approx(1.0)
    assert wilson_interval(0, 0) == (None, None)


@pytest.mark.parametrize("confidence", [0.5, 0.8, 0.9, 0.95, 0.99, 0.999])
def test_wilson_matches_statsmodels(confidence):
    compared = 0
    for trials in (1, 2, 3, 5, 10, 17, 50, 100, 1000, 100_000):
        for successes in sorted({*range(0, trials + 1, max(1, trials // 23)), trials - 1, trials}):
            if successes < 0:
                continue
            want = proportion_confint(successes, trials, alpha=1 - confidence, method="wilson")
            got = wilson_interval(successes, trials, confidence)
            assert got == (pytest.approx(want[0], abs=1e-12), pytest.approx(want[1], abs=1e-12)), \
                (successes, trials)
            compared += 1
    assert compared >= 150


def test_normal_quantile_matches_scipy():
    for p in (1e-9, 0.001, 0.025, 0.05, 0.1, 0.5, 0.8, 0.95, 0.975, 0.995, 1 - 1e-9):
        assert normal_quantile(p) == pytest.approx(scipy_stats.norm.ppf(p), rel=1e-9)


# --- McNemar -------------------------------------------------------------------------------------


def test_mcnemar_by_hand():
    # p = 2 · sum_{i <= min} C(d, i) / 2^d, d = gained + lost, at most 1.
    assert mcnemar_exact(0, 6) == 2 * 1 / 64  # 0.03125: the fewest discordant tasks that reach 0.05
    assert mcnemar_exact(6, 0) == 2 * 1 / 64
    assert mcnemar_exact(0, 5) == 2 * 1 / 32  # 0.0625: never significant at 0.05
    assert mcnemar_exact(1, 5) == 2 * (1 + 6) / 64  # 0.21875
    assert mcnemar_exact(2, 8) == 2 * (1 + 10 + 45) / 1024  # 0.109375
    assert mcnemar_exact(9, 1) == 2 * (1 + 10) / 1024  # 0.021484375
    assert mcnemar_exact(2, 3) == 1.0  # 2 · (1 + 5 + 10) / 32 = 1
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(0, 0) == 1.0  # no discordant task: no evidence either way


def test_mcnemar_matches_scipy_and_statsmodels():
    for gained, lost in product(range(31), range(31)):
        got = mcnemar_exact(gained, lost)
        table = [[7, lost], [gained, 4]]  # rows A solved/unsolved, columns B solved/unsolved
        assert got == pytest.approx(statsmodels_mcnemar(table, exact=True).pvalue, rel=1e-12), (gained, lost)
        if gained + lost:
            assert got == pytest.approx(scipy_stats.binomtest(gained, gained + lost, 0.5).pvalue, rel=1e-12)
    # Past 1000 discordant tasks the tail is summed in log space.
    for gained, lost in [(480, 520), (500, 501), (450, 560), (700, 900), (1000, 1250), (5000, 5300)]:
        want = scipy_stats.binomtest(gained, gained + lost, 0.5).pvalue
        assert mcnemar_exact(gained, lost) == pytest.approx(want, rel=1e-9), (gained, lost)
        assert mcnemar_exact(lost, gained) == mcnemar_exact(gained, lost)


# --- Student's t and the clustered intervals ----------------------------------------------------


def test_t_distribution_matches_scipy():
    for df in (1, 2, 3, 4, 9, 19, 39, 199, 5000):
        for p in (1e-6, 0.005, 0.025, 0.1, 0.5, 0.8, 0.975, 0.995):
            assert t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-9, abs=1e-12), (p, df)
        for t in (-4.0, -1.0, 0.0, 0.5, 2.0, 2.5, 12.0):
            assert t_sf(t, df) == pytest.approx(scipy_stats.t.sf(t, df), rel=1e-9, abs=1e-15), (t, df)


def _random_clusters(rng: random.Random, tasks: int, k_max: int) -> list[tuple[int, int]]:
    sizes = [rng.randint(1, k_max) for _ in range(tasks)]
    return [(sum(rng.random() < p for _ in range(n)), n) for n, p in zip(sizes, (rng.random() for _ in sizes))]


@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99])
def test_clustered_intervals_match_statsmodels(confidence):
    from stats_reference import mean_interval, rate_interval

    rng = random.Random(7)
    for tasks, k_max in [(2, 3), (3, 5), (10, 1), (10, 4), (40, 10), (200, 2)]:
        for _ in range(5):
            clusters = _random_clusters(rng, tasks, k_max)
            want = rate_interval(clusters, confidence)
            got = clustered_rate_interval(clusters, confidence)
            assert got == (pytest.approx(want[0], abs=1e-9), pytest.approx(want[1], abs=1e-9)), clusters
            rewards = [[rng.random() for _ in range(n)] for _, n in clusters]
            want = mean_interval(rewards, confidence)
            got = clustered_mean_interval([(math.fsum(r), len(r)) for r in rewards], confidence)
            assert got == (pytest.approx(want[0], rel=1e-9), pytest.approx(want[1], rel=1e-9))
    # One attempt per task: Wilson's interval, exactly.
    assert clustered_rate_interval([(1, 1), (0, 1), (1, 1)]) == wilson_interval(2, 3)
    # Every attempt failed: no spread to measure, so Wilson's for 0 of the 3 tasks, not of 12 attempts.
    from stats_reference import wilson_at

    z = scipy_stats.t.ppf(0.975, 2)
    assert clustered_rate_interval([(0, 4)] * 3) == (0.0, pytest.approx(wilson_at(0.0, 3, z)[1]))
    assert clustered_mean_interval([(0.5, 1)]) == (None, None)  # one task: no spread between tasks


@pytest.mark.filterwarnings("ignore:Precision loss occurred")  # scipy, on shares that are nearly equal
def test_paired_t_test_matches_scipy():
    rng = random.Random(3)
    for tasks in (2, 3, 10, 80):
        for _ in range(10):
            a, b = [rng.randint(0, 5) / 5 for _ in range(tasks)], [rng.randint(0, 5) / 5 for _ in range(tasks)]
            want = scipy_stats.ttest_rel(b, a).pvalue
            got = paired_t_test([y - x for x, y in zip(a, b)])
            assert got == (1.0 if math.isnan(want) else pytest.approx(want, rel=1e-9)), (a, b)
    assert paired_t_test([0.0] * 10) == 1.0  # no difference at all (scipy: nan)


# --- the bootstrap's draws -----------------------------------------------------------------------


@pytest.mark.parametrize("n, p", [(1, 0.5), (3, 0.5), (10, 0.3), (9, 0.95), (40, 0.02), (1739, 0.1), (500, 0.5)])
def test_binomial_draws_invert_the_distribution(n, p):
    # Inversion maps [0, 1) onto the outcomes in pieces as long as their probabilities: of M
    # evenly spaced u, each outcome gets M · pmf(k) of them, give or take one.
    binomial, m = _Binomial(n, p), 200_000
    drawn = Counter(binomial.draw((i + 0.5) / m) for i in range(m))
    for k in range(n + 1):
        assert abs(drawn[k] - m * scipy_stats.binom.pmf(k, n, p)) <= 1.001, k


def test_bootstrap_counts_are_multinomial_and_seeded():
    weights = [1, 2, 1]  # four tasks in three cells
    draws = list(bootstrap_counts(weights, 20_000, random.Random(11)))
    assert all(sum(counts) == 4 for counts in draws)
    assert draws[:50] == list(bootstrap_counts(weights, 50, random.Random(11)))
    assert draws[:50] != list(bootstrap_counts(weights, 50, random.Random(12)))
    # Resampling 4 tasks with replacement puts Multinomial(4; 1/4, 1/2, 1/4) draws in the cells.
    seen = Counter(map(tuple, draws))
    outcomes = [c for c in product(range(5), repeat=3) if sum(c) == 4]
    expected = [20_000 * scipy_stats.multinomial.pmf(c, 4, [0.25, 0.5, 0.25]) for c in outcomes]
    assert scipy_stats.chisquare([seen[c] for c in outcomes], expected).pvalue > 0.001
    assert list(bootstrap_counts([0, 3, 0], 2, random.Random(1))) == [[0, 3, 0], [0, 3, 0]]


def test_percentile_interval():
    assert percentile_interval(list(range(100, 0, -1)), 0.9) == (pytest.approx(5.95), pytest.approx(95.05))
    assert percentile_interval([0.5], 0.95) == (0.5, 0.5)
    assert percentile_interval([], 0.95) == (None, None)


# --- seeded runs: by chance and by construction ----------------------------------------------------

TASKS, ATTEMPTS = 80, 2
SHARES = "paired t-test on the tasks' success shares"


def paired_runs(engine, seed: int, lift: float, attempts: int = ATTEMPTS) -> None:
    """Runs "run-a" and "run-b" over the same TASKS tasks, `attempts` attempts each: every task's
    chance of success drawn once (its difficulty, 0.1 to 0.7), and each attempt's outcome drawn
    with it, by random.Random(seed). B's chance is A's plus `lift`: with 0 the runs differ by
    chance alone."""
    rng = random.Random(seed)
    difficulty = [rng.uniform(0.1, 0.7) for _ in range(TASKS)]
    trials = [_trial(run, f"t{t:03d}__{run}{i}", f"t{t:03d}", float(rng.random() < chance + extra))
              for run, extra in (("run-a", 0.0), ("run-b", lift))
              for t, chance in enumerate(difficulty) for i in range(attempts)]
    source = writer.ensure_source(engine, "parquet", f"/paired/{seed}", f"paired-{seed}")
    with writer.unit(engine, source, "unit", f"hash-{seed}") as u:
        u.add_trials(trials)


def compare_test(db_url: str, a: str = "run-a", b: str = "run-b", **given) -> dict:
    """compare-test's row, the same from the summaries as from the base tables."""
    query = QUERIES["compare-test"]
    summarized = run_canned(db_url, query, dict(a=a, b=b, **given))
    assert summarized.rows == run_canned(db_url, query, dict(a=a, b=b, **given), summaries=False).rows
    return dict(zip(summarized.columns, summarized.rows[0]))


def task_shares(db_url: str) -> tuple[list[float], list[float]]:
    """Each shared task's share of successful attempts in run-a and in run-b."""
    rows = run_canned(db_url, QUERIES["compare"], {"a": "run-a", "b": "run-b"}).rows
    return [a_c / a_n for _, a_n, a_c, _, _, _ in rows], [b_c / b_n for _, _, _, b_n, b_c, _ in rows]


def test_compare_by_chance_is_not_significant(engine, db_url):
    paired_runs(engine, seed=3, lift=0.0)
    row = compare_test(db_url)
    assert row["shared"] == TASKS and row["gained"] + row["lost"] >= 6
    assert row["test"] == "paired t" and row["discordant"] >= 6 and (row["only_a"], row["only_b"]) == (0, 0)
    assert row["p_value"] == pytest.approx(scipy_stats.ttest_rel(*reversed(task_shares(db_url))).pvalue, rel=1e-9)
    assert row["p_value"] > 0.05
    assert row["verdict"] == f"no significant difference ({SHARES})"
    assert row["diff_low"] < 0 < row["diff_high"]  # the interval holds no difference


def test_compare_by_construction_is_significant(engine, db_url):
    paired_runs(engine, seed=3, lift=0.3)
    row = compare_test(db_url)
    assert row["p_value"] == pytest.approx(scipy_stats.ttest_rel(*reversed(task_shares(db_url))).pvalue, rel=1e-9)
    assert row["p_value"] < 0.05 and row["gained"] > row["lost"]
    assert row["verdict"] == f"B better ({SHARES})"
    assert 0 < row["diff_low"] < row["diff"] < row["diff_high"]
    swapped = compare_test(db_url, a="run-b", b="run-a")
    assert (swapped["gained"], swapped["lost"]) == (row["lost"], row["gained"])
    assert swapped["p_value"] == row["p_value"] and swapped["verdict"] == f"A better ({SHARES})"
    assert swapped["diff"] == pytest.approx(-row["diff"])
    # The CLI's table of compare ends with the verdict on stderr, in one line.
    done = cli(db_url, "query", "compare", "--a", "run-a", "--b", "run-b", "--flipped")
    assert done.returncode == 0, done.stderr
    note, line = done.stderr.splitlines()
    assert note == f"note: {ERRORS_NOTE}"
    assert line.startswith(f"compare: B better ({SHARES}): {TASKS} shared tasks (0 only in A, 0 only in B), "
                           f"{row['discordant']} differ, B gained {row['gained']} and lost ")
    assert f"(paired t p = {row['p_value']:.3g})" in line and "2000 resamples, seed 0" in line
    as_json = cli(db_url, "query", "compare", "--a", "run-a", "--b", "run-b", "--format", "json")
    # For a program, the rows alone on stdout; on stderr what they count (warehouse.queries.outcome).
    assert as_json.returncode == 0 and as_json.stderr.splitlines() == [f"note: {ERRORS_NOTE}"]
    assert len(json.loads(as_json.stdout)) == TASKS


@pytest.mark.parametrize("lift", [0.0, 0.3])
def test_compare_with_one_attempt_per_task_is_mcnemar(engine, db_url, lift):
    """One attempt per task in both runs: McNemar's exact test on gained against lost."""
    paired_runs(engine, seed=5, lift=lift, attempts=1)
    row = compare_test(db_url)
    assert row["test"] == "mcnemar" and row["discordant"] == row["gained"] + row["lost"]
    assert row["p_value"] == pytest.approx(mcnemar_exact(row["gained"], row["lost"]), rel=1e-9)
    verdict = "B better" if lift else "no significant difference"
    assert (row["p_value"] < 0.05) == bool(lift) and row["verdict"] == f"{verdict} (McNemar on the tasks solved)"


def test_compare_a_run_with_itself(engine, db_url):
    paired_runs(engine, seed=3, lift=0.0)
    row = compare_test(db_url, a="run-a", b="run-a")
    assert (row["shared"], row["gained"], row["lost"], row["discordant"], row["p_value"]) == (TASKS, 0, 0, 0, 1.0)
    assert (row["diff"], row["diff_low"], row["diff_high"]) == (0.0, 0.0, 0.0)
    assert row["verdict"] == f"too few discordant tasks ({SHARES})"


def _naive_interval(values: list[float], resamples: int, confidence: float, seed: int) -> tuple[float, float]:
    """The textbook bootstrap, one draw per task, its percentiles widened for the number of tasks
    as the queries' are (expanded_confidence): the reference for the cell-wise one."""
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=len(values))) / len(values) for _ in range(resamples))
    return percentile_interval(means, expanded_confidence(confidence, len(values)))


def test_bootstrap_intervals_match_the_textbook_bootstrap(engine, db_url):
    # Not the same draws, so the same interval up to the Monte Carlo error of 2000 resamples
    # (about 0.004 on these 80 tasks).
    paired_runs(engine, seed=3, lift=0.3)
    per_task = run_canned(db_url, QUERIES["pass-at-k"], {"k": "1,2", "per_task": True})
    scores = {}
    for row in per_task.rows:
        scores.setdefault(row[0], []).append(row[4:6])
    result = run_canned(db_url, QUERIES["pass-at-k"], {"k": "1,2", "confidence": 0.9})
    assert result.columns == ["run_key", "tasks", "min_attempts", "pass@1", "pass@1_low", "pass@1_high",
                              "pass@2", "pass@2_low", "pass@2_high"]
    for run, tasks, _, *estimates in result.rows:
        assert tasks == TASKS
        for j in range(2):
            values = [s[j] for s in scores[run]]
            mean, low, high = estimates[3 * j:3 * j + 3]
            assert mean == pytest.approx(sum(values) / TASKS)
            assert low < mean < high
            want_low, want_high = _naive_interval(values, 4000, 0.9, seed=1)
            assert (low, high) == (pytest.approx(want_low, abs=0.015), pytest.approx(want_high, abs=0.015))
    row = compare_test(db_url)
    rows = run_canned(db_url, QUERIES["compare"], {"a": "run-a", "b": "run-b"}).rows
    differences = [b_c / b_n - a_c / a_n for _, a_n, a_c, b_n, b_c, _ in rows]
    want_low, want_high = _naive_interval(differences, 4000, 0.95, seed=1)
    assert (row["diff_low"], row["diff_high"]) == (pytest.approx(want_low, abs=0.015),
                                                   pytest.approx(want_high, abs=0.015))
    # The normal approximation agrees too: mean ± 1.96 · sd / sqrt(n).
    mean = sum(differences) / TASKS
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (TASKS - 1))
    assert row["diff_high"] - row["diff_low"] == pytest.approx(2 * 1.96 * sd / math.sqrt(TASKS), rel=0.1)


def test_seed_resamples_and_confidence(engine, db_url):
    paired_runs(engine, seed=4, lift=0.1)
    again = compare_test(db_url)
    assert compare_test(db_url) == again  # seeded: the same every time
    other = compare_test(db_url, seed=1)
    assert (other["diff_low"], other["diff_high"]) != (again["diff_low"], again["diff_high"])
    wider = compare_test(db_url, confidence=0.99)
    assert wider["diff_low"] < again["diff_low"] and wider["diff_high"] > again["diff_high"]
    few = compare_test(db_url, resamples=1)
    assert few["diff_low"] == few["diff_high"]  # one resample: one mean
