"""The arithmetic the canned queries finish in Python: where portable SQL cannot do it
(pass@k's products, percentiles) or cannot do it readably."""

from __future__ import annotations

import math
from collections.abc import Sequence


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
