"""Reference implementations of the clustered intervals (warehouse.queries.stats), from
statsmodels and scipy: an intercept-only regression with cluster-robust errors is the mean of the
attempts with its clustered standard error (statsmodels' small-sample factor G/(G-1)·(N-1)/(N-K)
is G/(G-1) at K = 1), and use_t gives Student's t at G - 1 degrees of freedom."""

from __future__ import annotations

import numpy as np
import statsmodels.api as sm
from scipy import stats as scipy_stats
from statsmodels.stats.proportion import proportion_confint


def clustered_fit(clusters: list[list[float]]):
    """statsmodels' fit of the values (one list per cluster) on a constant, clustered."""
    values = np.array([v for cluster in clusters for v in cluster], dtype=float)
    groups = np.array([g for g, cluster in enumerate(clusters) for _ in cluster])
    return sm.OLS(values, np.ones_like(values)).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)


def mean_interval(clusters: list[list[float]], confidence: float = 0.95) -> tuple[float, float]:
    """The clustered t interval of the mean of the values."""
    low, high = clustered_fit(clusters).conf_int(alpha=1 - confidence)[0]
    return low, high


def rate_interval(clusters: list[tuple[int, int]], confidence: float = 0.95) -> tuple[float, float]:
    """pass-rate's interval for clusters of (successes, attempts): Wilson's with one attempt per
    cluster; else Wilson's at the effective size p(1-p)/se² (at most the attempts) with the
    t quantile at G - 1 in place of the normal one."""
    successes, attempts = sum(s for s, _ in clusters), sum(n for _, n in clusters)
    if all(n == 1 for _, n in clusters):
        return proportion_confint(successes, attempts, alpha=1 - confidence, method="wilson")
    fit = clustered_fit([[1.0] * s + [0.0] * (n - s) for s, n in clusters])
    rate, se = fit.params[0], fit.bse[0]
    n_eff = min(attempts, rate * (1 - rate) / se ** 2) if se > 0 else (len(clusters) if rate in (0, 1) else attempts)
    return wilson_at(rate, n_eff, scipy_stats.t.ppf(1 - (1 - confidence) / 2, len(clusters) - 1))


def wilson_at(rate: float, n: float, z: float) -> tuple[float, float]:
    """The Wilson score interval, the textbook formula (Wilson 1927), at quantile z."""
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)
