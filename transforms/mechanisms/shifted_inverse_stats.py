"""Down values f(x, j) of the statistics the shifted inverse mechanism releases. No noise here.

f(x, j) is the statistic after removing the j persons whose removal lowers it most; the mechanism
(:mod:`.shifted_inverse`) reads j = 0 … C − 1, C = ``params.down_values_needed``. Everything here
is a deterministic, exact function of the data, so nothing returned may be published; error
messages never show data values. Derivations: ``docs/shifted_inverse.md`` §3.

* Totals (rows, or a sum of non-negative values): f(x, j) = total − (sum of the j largest
  per-person totals). Only the C − 1 largest per-person totals matter, so the Beam side combines
  (total, top-K) before the shuffle (:func:`sum_down_values`).
* Maximum: f(x, j) = the (j+1)-th largest per-person maximum (:func:`max_down_values`).
* k-th largest row value (selection; quantiles after a private count): f(x, j) = min over j
  removed persons of the k-th largest remaining value; removing, at every threshold, the persons
  with the most rows above it is optimal, which gives a one-pass algorithm
  (:func:`kth_largest_down_values`).
* Distinct values: exact f(x, j) is a coverage problem; :func:`distinct_down_values` uses the LP
  relaxation of FDY22's approximate version, rounded down so that its loss keeps sensitivity 1;
  the floor is computed exactly as a concave envelope by max flows (:mod:`.distinct_envelope`,
  ``docs/shifted_inverse.md`` §4), so it never fails on data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from itertools import pairwise

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .checks import Rational, as_fraction
from .distinct_envelope import holder_classes, lp_values


def _check_count(count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count (how many down values) must be a positive integer, got {count!r}")


def sum_down_values(total: int | Fraction, top: Sequence[Rational], count: int) -> list[Fraction]:
    """f(x, j) = total − top_1 − … − top_j for j < ``count``, for a sum of non-negative
    per-person totals (rows per person, or sums of non-negative values).

    Args:
      total: the exact sum of all per-person totals (``int`` or ``Fraction``; a float total
        would be a rounded sum, and the loss's sensitivity proof needs the exact one — sum
        fixed-point integers, as the release job does).
      top: the largest per-person totals, non-increasing: at least ``count − 1`` of them, or all
        of them when there are fewer persons (then they must add up to ``total``).
      count: how many down values, ``params.down_values_needed``.
    """
    _check_count(count)
    if isinstance(total, bool) or not isinstance(total, (int, Fraction)):
        raise TypeError(
            f"total must be an exact int or Fraction, got {type(total).__name__}; sum per-person "
            "totals as fixed-point integers (a float sum is rounded)"
        )
    tops = [as_fraction(t, f"top value {i}") for i, t in enumerate(top[: count - 1])]
    if any(t < 0 for t in tops):
        raise ValueError("per-person totals must be non-negative: the sum must be monotone")
    if any(a < b for a, b in pairwise(tops)):
        raise ValueError("top per-person totals must be sorted in non-increasing order")
    if len(tops) < count - 1 and sum(tops) != total:
        raise ValueError(
            f"got fewer top per-person totals than the {count - 1} needed, and they do not add "
            "up to the total: pass at least the top count − 1 totals"
        )
    out, rest = [], Fraction(total)
    if rest < sum(tops):
        raise ValueError("the total is smaller than the sum of the top per-person totals")
    for j in range(count):
        out.append(rest)
        if j < len(tops):
            rest -= tops[j]
    return out


def max_down_values(top_maxima: Sequence[Rational], count: int) -> list[Rational]:
    """f(x, j) = the (j+1)-th largest per-person maximum (0 past the last person), j < ``count``.

    ``top_maxima``: the largest per-person maxima of non-negative values, non-increasing, at
    least ``count`` of them or all persons'. (The maximum is the k = 1 case of
    :func:`kth_largest_down_values`.)
    """
    _check_count(count)
    tops = list(top_maxima[:count])
    if any(as_fraction(t, "maximum") < 0 for t in tops):
        raise ValueError("values must be non-negative (clamp at 0 first)")
    if any(a < b for a, b in pairwise(tops)):
        raise ValueError("top per-person maxima must be sorted in non-increasing order")
    return tops + [0] * (count - len(tops))


def _dense_codes(keys: ArrayLike) -> tuple[NDArray[np.int64], int]:
    uniq, codes = np.unique(np.asarray(keys), return_inverse=True)
    return codes.astype(np.int64).reshape(-1), len(uniq)


def kth_largest_down_values(
    values: ArrayLike, persons: ArrayLike, k: int, count: int
) -> list[float]:
    """f(x, j), j < ``count``, for f = the k-th largest row value (0 with fewer than k rows).

    At a threshold y, removing j persons leaves ≤ k − 1 rows above y iff removing the j persons
    with the most rows above y does; so f(x, j) = v_t for the first distinct value v_t (scanning
    down) at which the rows ≥ v_t outside the j heaviest persons reach k. One pass in descending
    order keeps persons sorted by their count so far (an increment moves a person to the front of
    its count block), so the sum of the j largest counts updates in O(1) per row. Stops as soon as
    all ``count`` values are found. Values must be finite and ≥ 0; ``persons`` any sortable ids.
    """
    _check_count(count)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    vals = np.asarray(values, dtype=np.float64).reshape(-1)
    if len(np.asarray(persons).reshape(-1)) != len(vals):
        raise ValueError("values and persons must have the same length")
    if not np.all(np.isfinite(vals)) or np.any(vals < 0):
        raise ValueError("values must be finite and non-negative (clamp at 0 first)")
    if len(vals) == 0:
        return [0.0] * count
    pid, n_persons = _dense_codes(persons)
    order = np.argsort(-vals, kind="stable")
    sorted_vals, sorted_pid = vals[order], pid[order].tolist()
    ends = [*(np.flatnonzero(np.diff(sorted_vals) != 0) + 1).tolist(), len(vals)]
    cnt = [0] * n_persons
    pos = list(range(n_persons))  # position of each person in `ranked`
    ranked = list(range(n_persons))  # persons by count, non-increasing
    first = {0: 0}  # leftmost position of each count's block
    size = {0: n_persons}
    out: list[float] = []
    j = top = start = 0  # top = sum of the counts at positions < j
    for end in ends:
        for r in range(start, end):
            p = sorted_pid[r]
            c, i = cnt[p], pos[p]
            f = first[c]
            q = ranked[f]
            ranked[f], ranked[i], pos[p], pos[q] = p, q, f, i
            cnt[p] = c + 1
            size[c] -= 1
            first[c] = f + 1
            if size.get(c + 1, 0) == 0:
                first[c + 1] = f
            size[c + 1] = size.get(c + 1, 0) + 1
            if f < j:
                top += 1
        while j < count and end - top >= k:
            out.append(float(sorted_vals[start]))
            top += cnt[ranked[j]] if j < n_persons else 0
            j += 1
        if j == count:
            break
        start = end
    return out + [0.0] * (count - len(out))


def quantile_k(q: Rational, n: int) -> int:
    """The rank from the top of the q-quantile among n values: the ⌈q·n⌉-th smallest is the
    (n − ⌈q·n⌉ + 1)-th largest; clamped to [1, max(n, 1)]. ``n`` should be a noisy count."""
    qf = as_fraction(q, "q")
    if not 0 <= qf <= 1:
        raise ValueError(f"q must lie in [0, 1], got {q!r}")
    if n < 1:
        return 1
    return min(n, max(1, n - math.ceil(qf * n) + 1))


def rank_error(values: ArrayLike, k: int, y: float) -> int:
    """How many ranks y is from the k-th largest value: 0 if some rank of y's tie block (or its
    insertion point) is k. For evaluating releases only: it reads the data and is not private."""
    vals = np.asarray(values, dtype=np.float64)
    above = int(np.count_nonzero(vals > y))
    at_or_above = max(int(np.count_nonzero(vals >= y)), above + 1)
    lo, hi = above + 1, at_or_above
    return 0 if lo <= k <= hi else (lo - k if k < lo else k - hi)


# --- Distinct values: the LP relaxation ------------------------------------------------------


def distinct_down_values(values: ArrayLike, persons: ArrayLike, count: int) -> list[int]:
    """f̃(x, j) = D − ⌊LP(x, j)⌋ for j < ``count``: the number of distinct ``values`` minus the LP
    bound on how many values j removed persons can take away entirely.

    LP(x, j) = max Σ_v z_v s.t. z_v ≤ u_p for every holder p of v, Σ_p u_p ≤ j, 0 ≤ u, z ≤ 1
    (FDY22's approximate shifted inverse). f̃ is non-increasing in j, f̃(x, 0) = D, f̃ ≤ the exact
    f(x, j), and f̃(x', j+1) ≤ f̃(x, j) ≤ f̃(x', j) when x' adds one person: exactly what keeps the
    loss's sensitivity at 1, so the shifted inverse mechanism stays pure ε-DP (or ρ-zCDP) under
    adding or removing one person (proof in docs §4).

    ⌊LP(x, j)⌋ is computed exactly, in integer arithmetic, as the concave envelope of
    (|S|, F(S)) (:mod:`.distinct_envelope`, derivation in docs §4). It never fails on data: no
    solver tolerance, certificate or size limit decides whether a release happens. The max flows
    inside run on scipy (int32) or in pure Python (larger capacities); both give the same exact
    minimum cut, so which one ran is not observable in the output (only in the running time).
    """
    _check_count(count)
    if np.asarray(values).size == 0:
        return [0] * count
    n_distinct, n_persons, weights, inc_class, inc_person = holder_classes(values, persons)
    lp = lp_values(n_persons, weights, inc_class, inc_person, count)
    return [n_distinct - v.numerator // v.denominator for v in lp]
