"""`query leaderboard`'s arithmetic: groups (runs, models, label values) ranked by pass rate, and
which of them the data cannot tell apart from the best, or from a baseline, with the p-values
adjusted for the many comparisons (stats.holm, stats.benjamini_hochberg).

Each comparison is compare-test's paired test (catalog.paired_test) over the tasks both groups
attempted. Against a baseline named beforehand the family is the k - 1 comparisons with it. The
best, though, is chosen by the data: under the null the best of 20 equal runs is simply the
luckiest, and comparing it with the others as if it had been named beforehand calls false winners
(STATISTICS.md measures how often). So ties with the best are read from the family of every
pair, k (k - 1) / 2 comparisons, adjusted together: a group is worse than another only where that
pair's adjusted p-value says so, whichever group turned out best.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from warehouse.queries.stats import ADJUSTMENTS

Tasks = Mapping[str, tuple[int, int]]  # a group's known tasks: task -> (attempts, successes)


@dataclass(frozen=True)
class Comparison:
    """Group `other` against group `versus` on their shared tasks."""

    shared: int
    test: str  # "mcnemar" or "paired t" (catalog.paired_test)
    p_value: float
    direction: float  # the sum over shared tasks of other's success share minus versus's
    enough: bool  # False where paired_test says "too few shared/discordant tasks": it calls nothing
    p_adjusted: float = math.nan

    def differs(self, level: float) -> bool:
        return self.enough and self.p_adjusted < level


def compare(versus: Tasks, other: Tasks, confidence: float) -> Comparison:
    """compare-test's paired test of `other` (B) against `versus` (A), not yet adjusted."""
    from warehouse.queries.catalog import paired_test  # catalog imports this module

    shared = [(*versus[task], *other[task]) for task in versus.keys() & other.keys()]
    test, p_value, verdict = paired_test(shared, confidence)
    direction = math.fsum(b_c / b_n - a_c / a_n for a_n, a_c, b_n, b_c in shared)
    return Comparison(len(shared), test, p_value, direction, not verdict.startswith("too few"))


def adjusted(comparisons: Sequence[Comparison], adjust: str) -> list[Comparison]:
    """The comparisons with their p-values adjusted together, as one family."""
    p_adjusted = ADJUSTMENTS[adjust]([c.p_value for c in comparisons])
    return [Comparison(c.shared, c.test, c.p_value, c.direction, c.enough, p) for c, p in zip(comparisons, p_adjusted)]


def against_baseline(groups: Sequence[Tasks], baseline: int, confidence: float, adjust: str
                     ) -> list[Comparison | None]:
    """Each group against groups[baseline] (None for the baseline itself), adjusted as one family."""
    others = [j for j in range(len(groups)) if j != baseline]
    found = adjusted([compare(groups[baseline], groups[j], confidence) for j in others], adjust)
    out: list[Comparison | None] = [None] * len(groups)
    for j, comparison in zip(others, found):
        out[j] = comparison
    return out


def verdict(comparison: Comparison, level: float) -> str:
    """A group's verdict against the baseline, after adjustment."""
    if not comparison.enough:
        return "too few shared tasks" if comparison.shared < 10 else "too few discordant tasks"
    if not comparison.differs(level):
        return "no significant difference"
    return "better" if comparison.direction > 0 else "worse"


@dataclass(frozen=True)
class Standing:
    tie: int  # 1: the best and the groups tied with it; 2: the best of the rest and its ties; ...
    versus: int | None  # the group it was compared with: its tie group's leader (None: the leader)
    comparison: Comparison | None


def tie_groups(groups: Sequence[Tasks], confidence: float, adjust: str) -> list[Standing]:
    """For groups ordered best first: tie group 1 is the best and every group not significantly
    worse than it; tie group 2 the best of the rest and those not worse than it; and so on. Every
    pair is compared, and adjusted as one family (module docstring)."""
    level = 1 - confidence
    pairs = list(combinations(range(len(groups)), 2))
    found = dict(zip(pairs, adjusted([compare(groups[i], groups[j], confidence) for i, j in pairs], adjust)))
    standings: list[Standing | None] = [None] * len(groups)
    left, tie = list(range(len(groups))), 0
    while left:
        tie += 1
        leader, *rest = left
        standings[leader] = Standing(tie, None, None)
        left = []
        for j in rest:
            comparison = found[(leader, j)]
            if comparison.differs(level) and comparison.direction < 0:
                left.append(j)
            else:
                standings[j] = Standing(tie, leader, comparison)
    return standings  # type: ignore[return-value]
