"""The arithmetic the canned queries finish in Python: where portable SQL cannot do it
(pass@k's products, percentiles, confidence intervals, tests) or cannot do it readably."""

from __future__ import annotations

import math
import random
from bisect import bisect
from functools import lru_cache
from collections.abc import Iterator, Sequence
from itertools import accumulate


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """The unbiased pass@k estimator 1 - C(n-c, k) / C(n, k) for n attempts of which c
    succeeded (Chen et al. 2021): the chance that k attempts drawn without replacement from
    the n include a success.

    None when n < k: k distinct attempts cannot be drawn, and rather than extrapolate we
    say "not enough attempts". The ratio of binomials is evaluated as the product
    prod_{i=n-c+1..n} (1 - k/i), which never forms the huge binomials themselves."""
    if k < 1:
        raise ValueError("k must be at least 1")
    if n < k:
        return None
    if n - c < k:  # every draw of k includes a success
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """The p-th quantile (0..1) by linear interpolation between the closest ranks: the same as
    PostgreSQL's percentile_cont and numpy's default. `sorted_values` must be sorted."""
    if not sorted_values:
        return None
    lo, hi, fraction = percentile_ranks(len(sorted_values), p)
    return interpolate(sorted_values[lo], sorted_values[hi], fraction)


def percentile_ranks(n: int, p: float) -> tuple[int, int, float]:
    """For n > 0 sorted values: the ranks (0-based) of the two the p-th quantile lies between,
    and how far it lies from the first towards the second."""
    pos = p * (n - 1)
    lo = math.floor(pos)
    return lo, min(lo + 1, n - 1), pos - lo


def interpolate(low: float, high: float, fraction: float) -> float:
    return low + (high - low) * fraction


# --- uncertainty -------------------------------------------------------------------------------
# No numpy or scipy at run time: the normal quantile is the stdlib's, the binomial tail is summed
# exactly, and the bootstrap draws with random.Random(seed), so every answer is reproducible.

def normal_quantile(p: float) -> float:
    """The standard normal distribution's p-quantile (0 < p < 1)."""
    from statistics import NormalDist  # imported here: most queries never need it

    return NormalDist().inv_cdf(p)


def wilson_interval(successes: int, trials: int, confidence: float = 0.95
                    ) -> tuple[float, float] | tuple[None, None]:
    """The Wilson score interval for a rate of successes out of trials: the rates p whose
    normal test |successes/trials - p| / sqrt(p(1-p)/trials) does not reject at this confidence.
    Unlike the textbook p ± z·se it stays inside [0, 1] and is not zero-width at 0 or 1.
    (None, None) with no trials."""
    if trials == 0:
        return None, None
    return _wilson(successes / trials, trials, normal_quantile(1 - (1 - confidence) / 2))


def _wilson(rate: float, n: float, z: float) -> tuple[float, float]:
    """wilson_interval for a rate seen over n (which may be an effective size, not a count),
    at the quantile z."""
    z2 = z * z
    scale = 1 + z2 / n
    centre = (rate + z2 / (2 * n)) / scale
    half = z / scale * math.sqrt(rate * (1 - rate) / n + z2 / (4 * n * n))
    # At a rate of 0 or 1 the bound is exactly the rate; arithmetic would leave a hair off.
    low = 0.0 if rate == 0 else max(0.0, centre - half)
    high = 1.0 if rate == 1 else min(1.0, centre + half)
    return low, high


# Up to here binomial tails are summed in exact integers; past it in log space (fast, and
# exact to float precision either way).
_EXACT_BINOMIAL_MAX = 1000


def mcnemar_exact(gained: int, lost: int) -> float:
    """McNemar's exact test of paired solved/unsolved outcomes: the two-sided p-value of
    `gained` tasks solved only by B against `lost` solved only by A, under the null that each
    such discordant task goes either way with chance 1/2 (the tasks both or neither solved
    carry no information). p = min(1, 2 · sum_{i <= min(gained, lost)} C(d, i) / 2^d), d their sum."""
    d, m = gained + lost, min(gained, lost)
    if 2 * m >= d:  # gained == lost (or d = 0): no split is more even than this one
        return 1.0
    if d <= _EXACT_BINOMIAL_MAX:
        return min(1.0, 2 * sum(math.comb(d, i) for i in range(m + 1)) / 2 ** d)
    log_terms = [math.lgamma(d + 1) - math.lgamma(i + 1) - math.lgamma(d - i + 1) - d * math.log(2)
                 for i in range(m + 1)]
    top = max(log_terms)
    return min(1.0, 2 * math.exp(top) * math.fsum(math.exp(t - top) for t in log_terms))


class _Binomial:
    """Binomial(n, p), drawn by inversion: its outcomes are laid out from the mode outwards,
    one below and one above in turn (Kemp's alternating search), with their running total of
    probability, and a draw u in [0, 1) is the outcome where that total first passes u. The
    layout is extended only as far as the draws so far have reached, a few standard deviations,
    and kept, so that many draws cost one bisection each."""

    def __init__(self, n: int, p: float):
        self.n, self.odds = n, p / (1.0 - p)
        mode = min(n, int((n + 1) * p))
        at_mode = math.exp(math.lgamma(n + 1) - math.lgamma(mode + 1) - math.lgamma(n - mode + 1)
                           + mode * math.log(p) + (n - mode) * math.log1p(-p))
        self.outcomes, self.totals = [mode], [at_mode]
        self.low = self.high = mode
        self.at_low = self.at_high = at_mode

    def draw(self, u: float) -> int:
        while u >= self.totals[-1] and (self.low > 0 or self.high < self.n):
            self._extend()
        return self.outcomes[min(bisect(self.totals, u), len(self.outcomes) - 1)]

    def _extend(self) -> None:
        n, odds = self.n, self.odds
        if self.low > 0:  # pmf(k - 1) = pmf(k) · k / ((n - k + 1) · odds)
            self.at_low *= self.low / ((n - self.low + 1) * odds)
            self.low -= 1
            self.outcomes.append(self.low)
            self.totals.append(self.totals[-1] + self.at_low)
        if self.high < n:  # pmf(k + 1) = pmf(k) · (n - k) · odds / (k + 1)
            self.at_high *= (n - self.high) * odds / (self.high + 1)
            self.high += 1
            self.outcomes.append(self.high)
            self.totals.append(self.totals[-1] + self.at_high)


def bootstrap_counts(weights: Sequence[int], resamples: int, rng: random.Random) -> Iterator[list[int]]:
    """Resamples of sum(weights) items drawn with replacement from cells holding weights[j]
    items each: how many draws fell in each cell, for each resample.

    A statistic of tasks that depends only on each task's cell (its (n, c), its difference)
    needs no more than these counts: a multinomial draw over the few cells, as conditional
    binomials (cell j gets Binomial(draws left, its share of the items left)), instead of one
    draw per task. Each (cell, draws left) keeps its _Binomial for the next resample."""
    total = sum(weights)
    in_and_after = list(accumulate(reversed(weights)))[::-1]  # items in cell j and the cells after it
    shares = [weight / mass if mass else 0.0 for weight, mass in zip(weights, in_and_after)]
    binomials: list[dict[int, _Binomial]] = [{} for _ in weights]  # per cell, by draws left
    draw = rng.random
    for _ in range(resamples):
        left, counts = total, []
        for share, known in zip(shares, binomials):
            if left == 0 or share <= 0.0:
                drawn = 0
            elif share >= 1.0:
                drawn = left
            else:
                binomial = known.get(left)
                if binomial is None:
                    binomial = known[left] = _Binomial(left, share)
                u = draw()
                # Most draws land in what is laid out already: one bisection (this loop is the
                # bootstrap's whole cost, so it skips the method call then).
                drawn = (binomial.outcomes[bisect(binomial.totals, u)] if u < binomial.totals[-1]
                         else binomial.draw(u))
            counts.append(drawn)
            left -= drawn
        yield counts


def percentile_interval(statistics: Sequence[float], confidence: float
                        ) -> tuple[float, float] | tuple[None, None]:
    """The bootstrap percentile interval: the (1-confidence)/2 and (1+confidence)/2 quantiles of
    the resampled statistics (interpolated as percentile() does). (None, None) with none."""
    ordered = sorted(statistics)
    if not ordered:
        return None, None
    return (percentile(ordered, (1 - confidence) / 2),  # type: ignore[return-value]
            percentile(ordered, (1 + confidence) / 2))


def expanded_confidence(confidence: float, n: int) -> float:
    """The level to take a bootstrap's percentiles at, for a mean over n tasks, so that the
    interval is as wide as a t interval's: the percentile interval is too narrow in small samples
    (it ignores the (n - 1) / n of the plug-in variance and t's heavier tails), and covers 0.90 to
    0.93 at 40 tasks where it should cover 0.95 (STATISTICS.md). Hesterberg's expanded percentile
    interval (2015): alpha' / 2 = Phi(-sqrt(n / (n - 1)) t_{1 - alpha/2, n - 1})."""
    if n < 2:
        return confidence
    q = math.sqrt(n / (n - 1)) * t_quantile(1 - (1 - confidence) / 2, n - 1)
    return math.erf(q / math.sqrt(2))  # 1 - 2 Phi(-q)


# --- tasks as clusters ---------------------------------------------------------------------------
# A task's attempts share its difficulty: they are one cluster, not independent draws. The
# intervals below are for the super-population (tasks drawn like these, attempts drawn at each),
# from the cluster-robust standard error of a ratio estimator (Cameron & Miller 2015), with
# Student's t at G - 1 degrees of freedom for G clusters; STATISTICS.md measures their coverage.

def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (modified
    Lentz; Numerical Recipes' betacf), on the side of x where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 1000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f


def t_sf(t: float, df: float) -> float:
    """Student's t distribution's upper tail, P(T > t), with df degrees of freedom."""
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


@lru_cache(maxsize=256)
def t_quantile(p: float, df: float) -> float:
    """Student's t distribution's p-quantile (0 < p < 1), by bisection of t_sf to float precision."""
    if p < 0.5:
        return -t_quantile(1 - p, df)
    low, high = 0.0, max(1.0, normal_quantile(p))
    while t_sf(high, df) > 1 - p:
        low, high = high, 2 * high
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if t_sf(middle, df) > 1 - p else (low, middle)
    return (low + high) / 2


def clustered_mean(clusters: Sequence[tuple[float, float]]) -> tuple[float, float] | tuple[None, None]:
    """The mean of y per unit over clusters given as (y summed, units): sum y / sum units (a
    task's successes and attempts, say), and its cluster-robust standard error,
    sqrt(G / (G - 1) · sum_g (y_g - units_g · mean)² ) / sum units, for G >= 2 clusters.
    (None, None) without units; the error is None with one cluster."""
    return _clustered_mean([y for y, _ in clusters], [n for _, n in clusters])


def _clustered_mean(ys: Sequence[float], ns: Sequence[float]) -> tuple[float, float] | tuple[None, None]:
    """clustered_mean of the clusters given as two columns, y summed and units."""
    units = math.fsum(ns)
    if not units:
        return None, None
    mean = math.fsum(ys) / units
    g = len(ns) - ns.count(0)
    if g < 2:
        return mean, None  # type: ignore[return-value]
    # fsum: exact, so the answer does not depend on the clusters' order (order never matters).
    spread = math.fsum([(y - n * mean) ** 2 for y, n in zip(ys, ns)])
    return mean, math.sqrt(g / (g - 1) * spread) / units


def _with_units(ys: Sequence[float], ns: Sequence[float]) -> tuple[Sequence[float], Sequence[float]]:
    """The clusters (two columns) that have units; a cluster without any says nothing."""
    if 0 not in ns:
        return ys, ns
    kept = [(y, n) for y, n in zip(ys, ns) if n]
    return [y for y, _ in kept], [n for _, n in kept]


def clustered_rate_interval(clusters: Sequence[tuple[int, int]], confidence: float = 0.95
                            ) -> tuple[float, float] | tuple[None, None]:
    """An interval for a rate of successes over attempts in clusters of (successes, attempts).
    With one attempt per cluster, the Wilson interval. Otherwise the Wilson interval at the
    effective sample size p(1 - p) / se² (se clustered, at most the attempts; where se is 0, the
    attempts, or the clusters at a rate of 0 or 1, whose spread is unknown) and Student's t at
    G - 1 degrees of freedom: the clustering's width, Wilson's behaviour near 0 and 1."""
    return rate_interval_of([s for s, _ in clusters], [n for _, n in clusters], confidence)


def rate_interval_of(successes: Sequence[int], attempts: Sequence[int], confidence: float = 0.95
                     ) -> tuple[float, float] | tuple[None, None]:
    """clustered_rate_interval of the clusters given as two columns: a page of thousands of
    tasks per run reads them so, without a tuple per task."""
    successes, attempts = _with_units(successes, attempts)
    total = sum(attempts)
    if total == len(attempts):  # one attempt per cluster (none has fewer)
        return wilson_interval(sum(successes), total, confidence)
    rate, se = _clustered_mean(successes, attempts)
    g = len(attempts)
    if g < 2:  # one task: no spread between tasks to measure; as wide as one attempt's
        return _wilson(rate, 1, normal_quantile(1 - (1 - confidence) / 2))
    if se:
        n_eff = min(total, rate * (1 - rate) / (se * se))
    else:
        n_eff = g if rate in (0.0, 1.0) else total
    return _wilson(rate, n_eff, t_quantile(1 - (1 - confidence) / 2, g - 1))


def clustered_mean_interval(clusters: Sequence[tuple[float, int]], confidence: float = 0.95
                            ) -> tuple[float, float] | tuple[None, None]:
    """mean ± t · se for a mean of values (rewards) over clusters of (sum, count): se clustered,
    Student's t at G - 1 degrees of freedom. With one value per cluster this is the textbook
    t interval of a mean. (None, None) under two clusters."""
    _, low, high = clustered_mean_and_interval(clusters, confidence)
    return low, high  # type: ignore[return-value]


def clustered_mean_and_interval(clusters: Sequence[tuple[float, int]], confidence: float = 0.95
                                ) -> tuple[float | None, float | None, float | None]:
    """clustered_mean's mean and clustered_mean_interval's interval, from one pass over the
    clusters (a page of thousands of tasks asks for both)."""
    return mean_and_interval_of([y for y, _ in clusters], [n for _, n in clusters], confidence)


def mean_and_interval_of(ys: Sequence[float], ns: Sequence[int], confidence: float = 0.95
                         ) -> tuple[float | None, float | None, float | None]:
    """clustered_mean_and_interval of the clusters given as two columns, y summed and units."""
    ys, ns = _with_units(ys, ns)
    mean, se = _clustered_mean(ys, ns)
    if se is None:
        return mean, None, None
    half = t_quantile(1 - (1 - confidence) / 2, len(ns) - 1) * se
    return mean, mean - half, mean + half


def paired_t_test(differences: Sequence[float]) -> float:
    """The two-sided p-value of the paired t-test of "no difference" on per-task differences
    d_t (B's share of successful attempts minus A's): t = mean / (sd / sqrt(T)), Student's t at
    T - 1 degrees of freedom; needs T >= 2. Where every d_t is the same (no spread) t is
    infinite, p = 0, unless they are all 0: then p = 1."""
    t_count = len(differences)
    mean = math.fsum(differences) / t_count
    spread = math.fsum((d - mean) ** 2 for d in differences)
    if not spread:
        return 1.0 if mean == 0 else 0.0
    t = mean / math.sqrt(spread / (t_count - 1) / t_count)
    return min(1.0, 2 * t_sf(abs(t), t_count - 1))


# --- many comparisons at once ------------------------------------------------------------------

def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of m p-values (family-wise error): sorted ascending, the i-th
    (from 1) becomes min(1, max over j <= i of (m - j + 1) p_(j)); in the order given. Rejecting
    where the adjusted p < alpha keeps the chance of any false rejection at most alpha."""
    m = len(p_values)
    adjusted, running = [0.0] * m, 0.0
    for i, j in enumerate(sorted(range(m), key=lambda j: p_values[j])):
        running = max(running, min(1.0, (m - i) * p_values[j]))
        adjusted[j] = running
    return adjusted


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """The Benjamini-Hochberg step-up adjustment (false discovery rate): sorted ascending, the i-th
    (from 1) becomes min over j >= i of min(1, m p_(j) / j); in the order given. Rejecting where
    the adjusted p < alpha keeps the expected share of false rejections among them at most alpha
    (for independent or positively dependent tests)."""
    m = len(p_values)
    adjusted, running = [0.0] * m, 1.0
    for i, j in reversed(list(enumerate(sorted(range(m), key=lambda j: p_values[j]), start=1))):
        running = min(running, m * p_values[j] / i)
        adjusted[j] = running
    return adjusted


ADJUSTMENTS = {"holm": holm, "bh": benjamini_hochberg}
