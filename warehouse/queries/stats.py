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
    pos = p * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    low, high = sorted_values[lo], sorted_values[hi]
    return low + (high - low) * (pos - lo)
