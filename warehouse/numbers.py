"""Computed numbers as every command prints them: a ratio, a mean or a sum of floats to 12
significant digits, the same from either backend and in every command (the canned queries, the
runs listing, the report). `sql` prints what the database computed, unrounded."""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from itertools import chain
from typing import Any


def rows_without_noise(rows: Sequence[tuple]) -> list[tuple]:
    """The rows with without_noise applied, where a value could need it: an answer holding no
    float or Decimal at all (found in one pass in C) is returned as it is. A call per value cost
    solve-matrix, thousands of rows of counts and names, half its time."""
    kinds = set(map(type, chain.from_iterable(rows)))
    if float not in kinds and Decimal not in kinds:
        return list(rows)
    return [tuple(map(without_noise, row)) for row in rows]


def without_noise(value: Any) -> Any:
    """A computed ratio to 12 significant digits, as a float on both backends: the arithmetic
    leaves noise in the last bits (pass@k's 1 - 0.6 is 0.4000000000000001), and PostgreSQL
    divides in numeric (Decimal)."""
    if isinstance(value, (float, Decimal)) and math.isfinite(value):
        return float(f"{value:.12g}")
    return value
