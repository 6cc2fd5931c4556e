"""Statistics the benchmarks report beside their figures."""

import math


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test p-value of ``wins`` against ``losses`` (ties excluded)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)
