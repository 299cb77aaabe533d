"""The shifted inverse mechanism's loss: how many persons must go before f drops below a grid point.

From the down values f(x, 0) ≥ f(x, 1) ≥ … (f with the j heaviest persons removed) and the output
grid, :func:`down_indices` finds for each j the grid index where f(x, j) lands; the loss of grid
point y, ℓ(x, y) = the fewest removals that take f to y or below, is then constant on runs of the
grid (:func:`loss_runs`, :func:`loss_at`). Exact integer and rational arithmetic; no noise here:
the searches of :mod:`.shifted_inverse` draw it. Derivation: ``docs/shifted_inverse.md`` §2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from itertools import groupby
from typing import TYPE_CHECKING, NamedTuple

from .checks import Rational, as_fraction

if TYPE_CHECKING:
    from .shifted_inverse import ShiftedInverseParams


class LossRun(NamedTuple):
    """Grid indices start … start + length − 1, all with losses ℓ = ``loss``, ℓ̄ = ``loss_bar``."""

    start: int
    length: int
    loss: int
    loss_bar: int

    def shifted(self, tau: int) -> int:
        """ℓ* = max(ℓ − τ, τ − ℓ̄)."""
        return max(self.loss - tau, tau - self.loss_bar)


def down_indices(down_values: Sequence[Rational], params: ShiftedInverseParams) -> list[int]:
    """c_j = grid index of f'(x, j) for j < C, checked to be non-increasing. Not private.

    ``down_values`` are f(x, 0), f(x, 1), … (at least C of them; later ones are ignored),
    non-negative and non-increasing, as exact rationals (int, Fraction, or a float taken exactly).
    Error messages never show the values: they are data.
    """
    cap = params.loss_cap
    if len(down_values) < cap:
        raise ValueError(
            f"need the first {cap} down values f(x, 0 … {cap - 1}) (C = 2τ + 2), got fewer; "
            "pad with f(∅) when there are fewer persons"
        )
    grid = params.output_grid
    out: list[int] = []
    prev_num, prev_den = 1, 0  # +∞
    for j in range(cap):
        num, den = _ratio(down_values[j], j)
        if num < 0:
            raise ValueError(f"down value {j} is negative; the statistic must be non-negative")
        if num * prev_den > prev_num * den:
            raise ValueError(
                f"down values must be non-increasing in j (f(x, j) removes more persons); "
                f"value {j} exceeds value {j - 1}"
            )
        prev_num, prev_den = num, den
        out.append(grid.ceil_index_ratio(num, den))
    return out


def _ratio(v: Rational, j: int) -> tuple[int, int]:
    """v as (numerator, denominator > 0), exactly; no Fraction on the hot path."""
    if type(v) is int:
        return v, 1
    if isinstance(v, Fraction):
        return v.numerator, v.denominator
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"down value {j} is not finite")
        return v.as_integer_ratio()
    f = as_fraction(v, f"down value {j}")  # other ints (numpy), or a clear TypeError
    return f.numerator, f.denominator


def loss_runs(indices: Sequence[int], size: int) -> list[LossRun]:
    """The grid split into maximal runs of constant (ℓ, ℓ̄), from the top index down. Not private.

    With c = ``indices`` non-increasing (C of them): above c_0 both losses are 0; at a value u
    taken by m of the c_j, ℓ = #{c_j > u} and ℓ̄ = ℓ + m; strictly between two consecutive values
    both equal #{c_j > k}; below the last value both are C. At most 2C + 1 runs.
    """
    runs: list[LossRun] = []
    hi, above = size - 1, 0
    for u, group in groupby(indices):
        m = sum(1 for _ in group)
        if hi > u:
            runs.append(LossRun(u + 1, hi - u, above, above))
        runs.append(LossRun(u, 1, above, above + m))
        above += m
        hi = u - 1
    if hi >= 0:
        runs.append(LossRun(0, hi + 1, above, above))
    return runs


def loss_at(indices: Sequence[int], k: int) -> int:
    """ℓ(x, y_k) = #{j : c_j > k} for non-increasing c (clamped at C = len(c)). Not private."""
    lo, hi = 0, len(indices)
    while lo < hi:  # first j with c_j ≤ k
        mid = (lo + hi) // 2
        if indices[mid] > k:
            lo = mid + 1
        else:
            hi = mid
    return lo
