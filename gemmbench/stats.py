"""The gate's statistics: the Mann-Whitney U test, exact for small tie-free samples, else normal.

Written out here rather than imported from scipy so the gate depends on nothing the GPU machine
might lack. tests/test_gate.py checks it against values scipy.stats.mannwhitneyu gives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

ALTERNATIVES = ("greater", "less", "two-sided")

# The exact null distribution costs O(n1 · n1·n2) integer additions; past this many pairs the
# normal approximation is already accurate to well under the alphas the gate uses.
_EXACT_MAX_PAIRS = 2500


@dataclass(frozen=True)
class MannWhitney:
    """U counts the pairs (x_i, y_j) with x_i > y_j, ties counting one half."""

    u: float
    p: float
    method: str  # "exact" or "normal"


def _u_statistic(x: Sequence[float], y: Sequence[float]) -> float:
    u = 0.0
    for xi in x:
        for yj in y:
            u += 1.0 if xi > yj else 0.5 if xi == yj else 0.0
    return u


def _null_counts(n1: int, n2: int) -> list[int]:
    """counts[u] = number of the C(n1+n2, n1) orderings whose U equals u, with no ties.

    Their generating function is the Gaussian binomial prod_{i=1..n1} (1 - q^(n2+i)) / (1 - q^i):
    divide by (1 - q^i) with a running sum, multiply by (1 - q^(n2+i)) with a shifted difference.
    """
    size = n1 * n2 + 1
    counts = [0] * size
    counts[0] = 1
    for i in range(1, n1 + 1):
        for u in range(i, size):  # · 1/(1 - q^i)
            counts[u] += counts[u - i]
        shift = n2 + i
        for u in range(size - 1, shift - 1, -1):  # · (1 - q^(n2+i))
            counts[u] -= counts[u - shift]
    return counts


def _exact_tail(u: float, n1: int, n2: int) -> float:
    """P(U >= u) under the null hypothesis, for tie-free samples."""
    counts = _null_counts(min(n1, n2), max(n1, n2))  # the distribution is symmetric in n1, n2
    return sum(counts[math.ceil(u) :]) / math.comb(n1 + n2, n1)


def _normal_tail(u: float, n1: int, n2: int, tie_sizes: Sequence[int]) -> float:
    """P(U >= u) by the normal approximation, with tie and continuity corrections."""
    n = n1 + n2
    mean = n1 * n2 / 2
    tie_term = sum(t**3 - t for t in tie_sizes) / (n * (n - 1))
    variance = n1 * n2 / 12 * ((n + 1) - tie_term)
    if variance <= 0:  # every value equal: no evidence either way
        return 1.0
    z = (u - mean - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def mann_whitney_u(
    x: Sequence[float], y: Sequence[float], alternative: str = "greater"
) -> MannWhitney:
    """Test whether ``x`` tends to be larger ("greater"), smaller ("less") or either ("two-sided").

    Exact when there are no ties and at most 2,500 pairs; otherwise the normal approximation
    with tie and continuity corrections (the same choices as scipy's ``method="exact"`` and
    ``method="asymptotic"``). Returns U of ``x`` and the p-value.
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("both samples need at least one value")
    if not all(math.isfinite(v) for v in (*x, *y)):
        raise ValueError("samples must be finite numbers")
    u_x = _u_statistic(x, y)
    u_y = n1 * n2 - u_x

    values = sorted((*x, *y))
    tie_sizes = []
    run = 1
    for previous, current in zip(values, values[1:], strict=False):
        if current == previous:
            run += 1
        else:
            if run > 1:
                tie_sizes.append(run)
            run = 1
    if run > 1:
        tie_sizes.append(run)

    if not tie_sizes and n1 * n2 <= _EXACT_MAX_PAIRS:
        method = "exact"

        def tail(u: float) -> float:
            return _exact_tail(u, n1, n2)
    else:
        method = "normal"

        def tail(u: float) -> float:
            return _normal_tail(u, n1, n2, tie_sizes)

    if alternative == "greater":
        p = tail(u_x)
    elif alternative == "less":
        p = tail(u_y)
    else:
        p = 2 * tail(max(u_x, u_y))
    return MannWhitney(u=u_x, p=min(1.0, p), method=method)


def smallest_p(n1: int, n2: int) -> float:
    """The smallest one-sided p-value the exact test can give: 1 / C(n1 + n2, n1).

    With too few rounds even complete separation cannot reach the configured alpha, so the gate
    could never fail; the thresholds loader refuses such a configuration.
    """
    return 1 / math.comb(n1 + n2, n1)
