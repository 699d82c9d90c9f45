"""Confidence intervals and paired tests for evaluation tables (standard library only, so
the report can use them without importing torch or numpy)."""

from __future__ import annotations

import math


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate (sensible at 0/n and n/n)."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mcnemar_exact(won: int, lost: int) -> float:
    """Two-sided exact McNemar p of two policies on the same goals: ``won`` goals solved by
    one only, ``lost`` by the other only (a binomial test of won against n = won + lost)."""
    n = won + lost
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(won, lost) + 1)) / 2**n)
