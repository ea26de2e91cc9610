"""Simulated sweeps whose truth is known, through the library's own statistics
(warehouse.queries.stats): how often pass-rate's intervals hold the true rate, and how often
compare-test's tests call a difference under the null and against a real one. tests/test_simulation.py
asserts the figures; `python -m tools.simulate_stats [STATISTICS.md]` prints them, or writes that file.

A run attempts T tasks k times each. A task's chance of success p_t is drawn from Beta(0.5, 0.5)
(many tasks nearly always or nearly never solved, as agent benchmarks have), so the population's
rate, the estimand, is 0.5; each attempt succeeds with chance p_t. A run's rewards for the mean
reward are partial: a task's mean m_t ~ Beta(0.5, 0.5), each attempt's reward ~ Beta(2 m_t, 2 - 2 m_t).
A pair of runs shares its tasks; B's chance on a task is A's plus a lift (at most 1)."""

from __future__ import annotations

import math
import random
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from warehouse.queries import leaderboard
from warehouse.queries.catalog import _bootstrap_means, paired_test
from warehouse.queries.stats import (_Binomial, clustered_mean, clustered_mean_interval, clustered_rate_interval,
                                     mcnemar_exact, normal_quantile, paired_t_test, pass_at_k, percentile_interval,
                                     t_quantile,
                                     wilson_interval)

SHAPE = (0.5, 0.5)  # Beta(a, b) of the tasks' chances: its mean a / (a + b) is the true rate
TRUTH = SHAPE[0] / sum(SHAPE)
CONFIDENCE = 0.95

Cluster = tuple[int, int]  # a task's (successes, attempts)


def simulated_run(rng: random.Random, tasks: int, k: int, lift: float = 0.0,
                  chances: Sequence[float] | None = None, shape: tuple[float, float] = SHAPE) -> list[Cluster]:
    """One run's (successes, attempts) per task: the tasks' chances drawn from Beta(*shape) (or
    given, for a pair)."""
    chances = chances if chances is not None else [rng.betavariate(*shape) for _ in range(tasks)]
    return [(sum(rng.random() < min(1.0, p + lift) for _ in range(k)), k) for p in chances]


def simulated_rewards(rng: random.Random, tasks: int, k: int) -> list[tuple[float, int]]:
    """One run's (reward sum, attempts) per task, with partial rewards (module docstring)."""
    means = [min(max(rng.betavariate(*SHAPE), 1e-3), 1 - 1e-3) for _ in range(tasks)]
    return [(math.fsum(rng.betavariate(2 * m, 2 - 2 * m) for _ in range(k)), k) for m in means]


# --- intervals: each (clusters, confidence) -> (low, high) ----------------------------------------

def wilson_over_attempts(clusters: Sequence[Cluster], confidence: float) -> tuple[float, float]:
    """The old pass-rate interval: every attempt an independent draw."""
    return wilson_interval(sum(s for s, _ in clusters), sum(n for _, n in clusters), confidence)


def _wald(clusters: Sequence[Cluster], z: float) -> tuple[float, float]:
    mean, se = clustered_mean(clusters)
    return mean - z * se, mean + z * se


def clustered_wald_normal(clusters: Sequence[Cluster], confidence: float) -> tuple[float, float]:
    return _wald(clusters, normal_quantile(1 - (1 - confidence) / 2))


def clustered_wald_t(clusters: Sequence[Cluster], confidence: float) -> tuple[float, float]:
    return _wald(clusters, t_quantile(1 - (1 - confidence) / 2, len(clusters) - 1))


def cluster_bootstrap(clusters: Sequence[Cluster], confidence: float, resamples: int = 1000,
                      seed: int = 0) -> tuple[float, float]:
    """The percentile interval of the rate over resamples of the tasks (all attempts of a task drawn together)."""
    rng = random.Random(seed)
    means = []
    for _ in range(resamples):
        drawn = rng.choices(clusters, k=len(clusters))
        means.append(sum(s for s, _ in drawn) / sum(n for _, n in drawn))
    return percentile_interval(means, confidence)


RATE_INTERVALS: dict[str, Callable] = {
    "Wilson over attempts (the old interval)": wilson_over_attempts,
    "clustered Wilson, t (pass-rate's)": clustered_rate_interval,
    "clustered Wald, t": clustered_wald_t,
    "clustered Wald, normal": clustered_wald_normal,
    "cluster bootstrap, percentile": cluster_bootstrap,
}


def coverage(interval: Callable, k: int, tasks: int = 40, runs: int = 200, seed: int = 0,
             confidence: float = CONFIDENCE, shape: tuple[float, float] = SHAPE) -> float:
    """The share of `runs` simulated runs whose interval holds the true rate."""
    rng = random.Random(f"coverage:{seed}:{k}:{tasks}" + ("" if shape == SHAPE else f":{shape}"))
    truth = shape[0] / sum(shape)
    held = 0
    for _ in range(runs):
        low, high = interval(simulated_run(rng, tasks, k, shape=shape), confidence)
        held += low <= truth <= high
    return held / runs


def reward_coverage(k: int, tasks: int = 40, runs: int = 200, seed: int = 0, confidence: float = CONFIDENCE) -> float:
    """coverage() of pass-rate's mean_reward interval (clustered_mean_interval) with partial rewards."""
    rng = random.Random(f"rewards:{seed}:{k}:{tasks}")
    held = 0
    for _ in range(runs):
        low, high = clustered_mean_interval(simulated_rewards(rng, tasks, k), confidence)
        held += low <= TRUTH <= high
    return held / runs


def _bootstrap_interval(scores: list[float], confidence: float, resamples: int, rng: random.Random
                        ) -> tuple[float, float]:
    """The queries' bootstrap over tasks (catalog._bootstrap_means, as pass-at-k and compare-test
    call it) of the mean of one score per task."""
    cells = Counter(scores)
    values = {"confidence": confidence, "resamples": resamples}
    [(low, high)] = _bootstrap_means([list(cells)], list(cells.values()), values, rng)
    return low, high


def pass_at_k_coverage(at: int, k: int, tasks: int = 40, runs: int = 200, seed: int = 0, resamples: int = 500,
                       confidence: float = CONFIDENCE) -> float:
    """coverage() of pass-at-k's interval of pass@`at` from k attempts per task: the true pass@at
    of the population is 1 - E[(1 - p)^at] = 1 - B(a, b + at) / B(a, b) for p ~ Beta(a, b)."""
    a, b = SHAPE
    truth = 1 - math.exp(math.lgamma(b + at) + math.lgamma(a + b) - math.lgamma(a + b + at) - math.lgamma(b))
    rng = random.Random(f"pass-at-k:{seed}:{at}:{k}:{tasks}")
    held = 0
    for _ in range(runs):
        scores = [pass_at_k(n, s, at) for s, n in simulated_run(rng, tasks, k)]
        low, high = _bootstrap_interval(scores, confidence, resamples, rng)
        held += low <= truth <= high
    return held / runs


def difference_coverage(k: int, tasks: int = 40, runs: int = 200, seed: int = 0, resamples: int = 500,
                        confidence: float = CONFIDENCE) -> float:
    """coverage() of compare-test's interval of B - A (the paired bootstrap over the shared tasks'
    differences) when B = A: the true difference is 0."""
    rng = random.Random(f"difference:{seed}:{k}:{tasks}")
    held = 0
    for _ in range(runs):
        chances = [rng.betavariate(*SHAPE) for _ in range(tasks)]
        a, b = simulated_run(rng, tasks, k, chances=chances), simulated_run(rng, tasks, k, chances=chances)
        low, high = _bootstrap_interval(_differences(a, b), confidence, resamples, rng)
        held += low <= 0 <= high
    return held / runs


# --- paired tests: each (a's clusters, b's clusters, rng) -> p-value -----------------------------

def mcnemar_solved_once(a: Sequence[Cluster], b: Sequence[Cluster], rng: random.Random) -> float:
    """The old compare-test: McNemar's test on "solved at least once" per task."""
    gained = sum(1 for (sa, _), (sb, _) in zip(a, b) if sa == 0 and sb > 0)
    lost = sum(1 for (sa, _), (sb, _) in zip(a, b) if sa > 0 and sb == 0)
    return mcnemar_exact(gained, lost)


def _differences(a: Sequence[Cluster], b: Sequence[Cluster]) -> list[float]:
    return [sb / nb - sa / na for (sa, na), (sb, nb) in zip(a, b)]


def sign_flip_test(differences: Sequence[float], weights: Sequence[int], resamples: int,
                   rng: random.Random) -> float:
    """The paired sign-flip permutation test of "no difference": under the null each task's
    difference d_t is as likely -d_t, so the sum of the d_t is compared with the sums under random
    signs. `weights[j]` tasks have the difference `differences[j]`: the flips within a cell are
    one Binomial(weights[j], 1/2) draw (as in bootstrap_counts). The two-sided Monte Carlo p-value
    is (1 + resamples at least as far from 0) / (1 + resamples), which rejects at most as often as
    its level (Phipson & Smyth 2010). With one attempt per task it is McNemar's test."""
    by_size = Counter()
    for d, w in zip(differences, weights):
        if d and w:
            by_size[abs(d)] += w
    cells = sorted(by_size.items())
    observed = abs(math.fsum(d * w for d, w in zip(differences, weights)))
    binomials = [_Binomial(w, 0.5) for _, w in cells]
    draw = rng.random
    # A relative tolerance: a sum of the same values in another order may differ in its last bits.
    bar = observed * (1 - 1e-9)
    extreme = 0
    for _ in range(resamples):
        total = math.fsum(d * (w - 2 * b.draw(draw())) for (d, w), b in zip(cells, binomials))
        extreme += abs(total) >= bar
    return (1 + extreme) / (1 + resamples)


def sign_flip(a: Sequence[Cluster], b: Sequence[Cluster], rng: random.Random, resamples: int = 2000) -> float:
    """The sign-flip permutation test of the task shares."""
    cells = Counter(_differences(a, b))
    return sign_flip_test(list(cells), list(cells.values()), resamples, rng)


def paired_t(a: Sequence[Cluster], b: Sequence[Cluster], rng: random.Random) -> float:
    """The paired t-test of the task shares, alone."""
    return paired_t_test(_differences(a, b))


def compare_test(a: Sequence[Cluster], b: Sequence[Cluster], rng: random.Random) -> float:
    """compare-test's verdict as a p-value: 0 when it names a winner, else 1 (its paired t-test,
    or McNemar's with one attempt per task, and its "too few discordant tasks" rule)."""
    _, _, verdict = paired_test([(na, sa, nb, sb) for (sa, na), (sb, nb) in zip(a, b)], CONFIDENCE)
    return 0.0 if verdict.startswith(("A better", "B better")) else 1.0


PAIRED_TESTS: dict[str, Callable] = {
    "McNemar on solved once (the old test)": mcnemar_solved_once,
    "sign-flip permutation": sign_flip,
    "paired t": paired_t,
    "compare-test's verdict": compare_test,
}


def rejections(test: Callable, k: int, lift: float, tasks: int = 40, pairs: int = 200, seed: int = 0,
               level: float = 1 - CONFIDENCE) -> float:
    """The share of `pairs` simulated pairs of runs on which `test` rejects "no difference"."""
    rng = random.Random(f"pairs:{seed}:{k}:{tasks}:{lift}")
    rejected = 0
    for _ in range(pairs):
        chances = [rng.betavariate(*SHAPE) for _ in range(tasks)]
        a = simulated_run(rng, tasks, k, chances=chances)
        b = simulated_run(rng, tasks, k, lift, chances=chances)
        rejected += test(a, b, rng) < level
    return rejected / pairs


# --- sweeps: many equal runs, how often one is called different ---------------------------------

def _baseline_holm(groups, level):
    return any(c is not None and c.differs(level) for c in leaderboard.against_baseline(groups, 0, 1 - level, "holm"))


def _best_every_pair(adjust: str):
    def called(groups, level):
        return any(s.tie != 1 for s in leaderboard.tie_groups(groups, 1 - level, adjust))
    return called


def _best_as_baseline_holm(groups, level):
    """The best compared with the others as if it had been named beforehand: k - 1 comparisons."""
    return any(c is not None and c.differs(level) and c.direction < 0
               for c in leaderboard.against_baseline(groups, 0, 1 - level, "holm"))


def _unadjusted(against: int):
    def called(groups, level):
        return any(c.enough and c.p_value < level
                   for c in (leaderboard.compare(groups[against], other, 1 - level) for other in groups[1:]))
    return called


# Each: (whether it sees the runs best first, (runs, level) -> whether some run was called
# different from the first). Without the sort the first run is a baseline named beforehand.
SWEEP_RULES: dict[str, tuple[bool, Callable]] = {
    "against a baseline, Holm over k - 1 (leaderboard --baseline)": (False, _baseline_holm),
    "against a baseline, unadjusted": (False, _unadjusted(0)),
    "against the best, Holm over every pair (leaderboard's tie groups)": (True, _best_every_pair("holm")),
    "against the best, BH over every pair (leaderboard --adjust bh)": (True, _best_every_pair("bh")),
    "against the best, Holm over k - 1, as if named beforehand": (True, _best_as_baseline_holm),
    "against the best, unadjusted": (True, _unadjusted(0)),
}


def false_winners(rule: str, runs: int = 20, tasks: int = 40, k: int = 5, sweeps: int = 200, seed: int = 0,
                  level: float = 1 - CONFIDENCE) -> float:
    """The share of `sweeps` simulated sweeps of `runs` equal runs in which `rule` calls some run
    significantly different (the family-wise error). The rules against the best see the runs
    best first; those against a baseline take the first run as simulated (named beforehand)."""
    rng = random.Random(f"sweeps:{seed}:{runs}:{tasks}:{k}")
    best_first, called = SWEEP_RULES[rule]
    hits = 0
    for _ in range(sweeps):
        chances = [rng.betavariate(*SHAPE) for _ in range(tasks)]
        groups = [{f"t{i}": (n, s) for i, (s, n) in enumerate(simulated_run(rng, tasks, k, chances=chances))}
                  for _ in range(runs)]
        if best_first:
            groups.sort(key=lambda run: -sum(s for _, s in run.values()))
        hits += called(groups, level)
    return hits / sweeps


# --- the figures -----------------------------------------------------------------------------

RUNS, KS, TASKS = 1000, (1, 5, 10), (10, 20, 40)
# Tasks mostly failed: Beta(0.2, 2), a true rate of 0.09 (the edge where intervals misbehave).
NEAR_ZERO = (0.2, 2.0)
# The slow ones (a resampling per run) over fewer runs: their Monte Carlo error is ±0.03.
FEWER = {cluster_bootstrap: 200, sign_flip: 200}
LIFT = 0.15
SWEEP_RUNS, SWEEPS = 20, 200
BOOTSTRAP_RUNS = 600  # the queries' bootstraps (500 resamples each): Monte Carlo error ±0.018


def report() -> str:
    columns = [(t, k) for t in TASKS for k in KS]
    header = ["| " + " | ".join(["", *(f"T={t}, k={k}" for t, k in columns)]) + " |", "|---|" + "---:|" * len(columns)]

    def row(name: str, figure: Callable[[int, int], float]) -> str:
        return f"| {name} | " + " | ".join(f"{figure(t, k):.3f}" for t, k in columns) + " |"

    lines = [
        "# Statistics, measured by simulation",
        "",
        "Written by `python -m tools.simulate_stats STATISTICS.md` (seeded: the same figures every time);",
        "tests/test_simulation.py asserts them at T=40. T tasks whose chances of success are p ~ Beta(0.5, 0.5),",
        f"so the true rate is {TRUTH}; k attempts per task; {RUNS} simulated runs (or pairs of runs) per cell, Monte",
        f"Carlo error about ±0.014 (two standard errors near 0.95), except where a row says 200 (±0.03). Level {CONFIDENCE:.0%}.",
        "",
        f"## Coverage of the {CONFIDENCE:.0%} interval (target {CONFIDENCE})",
        "",
        *header,
    ]
    for name, interval in RATE_INTERVALS.items():
        runs = FEWER.get(interval, RUNS)
        lines.append(row(name + ("" if runs == RUNS else f" ({runs} runs)"),
                         lambda t, k: coverage(interval, k, t, runs=runs)))
    lines.append(row("mean reward, partial rewards: clustered t (pass-rate's)", lambda t, k: reward_coverage(k, t, RUNS)))
    lines.append(row(f"pass@1, expanded bootstrap over tasks (pass-at-k's; {BOOTSTRAP_RUNS} runs)",
                     lambda t, k: pass_at_k_coverage(1, k, t, runs=BOOTSTRAP_RUNS)))
    lines.append(row(f"pass@5, expanded bootstrap over tasks (pass-at-k's; {BOOTSTRAP_RUNS} runs; k ≥ 5)",
                     lambda t, k: pass_at_k_coverage(5, k, t, runs=BOOTSTRAP_RUNS) if k >= 5 else math.nan))
    lines.append(row(f"B - A when equal, expanded paired bootstrap (compare-test's; {BOOTSTRAP_RUNS} pairs)",
                     lambda t, k: difference_coverage(k, t, runs=BOOTSTRAP_RUNS)))
    lines += ["", f"## Coverage near 0: p ~ Beta{NEAR_ZERO}, a true rate of {NEAR_ZERO[0] / sum(NEAR_ZERO):.3f}", "",
              *header]
    for name, interval in RATE_INTERVALS.items():
        runs = FEWER.get(interval, RUNS)
        lines.append(row(name + ("" if runs == RUNS else f" ({runs} runs)"),
                         lambda t, k: coverage(interval, k, t, runs=runs, shape=NEAR_ZERO)))
    for lift, title in ((0.0, "False positives under the null (B = A; target at most 0.05)"),
                        (LIFT, f"Power against B = A + {LIFT} on every task (at most 1)")):
        lines += ["", f"## {title}", "", *header]
        for name, test in PAIRED_TESTS.items():
            pairs = FEWER.get(test, RUNS)
            lines.append(row(name + ("" if pairs == RUNS else f" ({pairs} pairs)"),
                             lambda t, k: rejections(test, k, lift, t, pairs=pairs)))
    lines += ["", f"## False winners: {SWEEP_RUNS} equal runs, T=40, {SWEEPS} sweeps (target at most 0.05, ±0.03)", "",
              "The share of sweeps in which some run was called significantly different (the family-wise error);",
              "every run attempts the same tasks with the same chances.", "",
              "| | " + " | ".join(f"k={k}" for k in KS) + " |", "|---|" + "---:|" * len(KS)]
    for rule in SWEEP_RULES:
        lines.append(f"| {rule} | " + " | ".join(f"{false_winners(rule, SWEEP_RUNS, 40, k, SWEEPS):.3f}" for k in KS) + " |")
    lines += ["", "README.md's Uncertainty section says which interval and test the queries use, and why."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = report()
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text, encoding="utf-8")
    print(text, end="")
