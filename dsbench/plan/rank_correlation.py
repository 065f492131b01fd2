"""How well predictions order what was measured: Spearman's rank correlation (the replay's, the CPU time model's
benchmarks and tests read it)."""

from __future__ import annotations

import statistics


def ranks(values: list[float]) -> list[float]:
    """0-based ranks, ties sharing their mean rank (as Spearman's coefficient takes them)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2
        i = j + 1
    return out


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation: Pearson's of the ranks, exact with ties (the shortcut 1 - 6·Σd²/(n(n²-1))
    holds only without them); None for fewer than 3 pairs or a constant side."""
    if len(xs) < 3:
        return None
    try:
        return statistics.correlation(ranks(xs), ranks(ys))
    except statistics.StatisticsError:  # a constant side
        return None
