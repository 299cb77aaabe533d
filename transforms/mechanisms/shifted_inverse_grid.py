"""The public output grid Y of the shifted inverse mechanism (:mod:`.shifted_inverse`).

Y = {y_0 = 0 < y_1 < … < y_{N−1} = D} is fixed by public parameters before any data is read.
The mechanism releases f'(x) = min(D, ⌈f(x)⌉_Y): the statistic rounded *up* to the grid and capped
at D. Both maps are non-decreasing, so f' is monotone whenever f is, and the seed's lemmas apply to
f' as they stand (``docs/shifted_inverse.md`` §1). A geometric grid (``kind="log"``) has steps of a
constant factor, for statistics spanning orders of magnitude: N, and with it τ, grows with
log(D/d) instead of D/d.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from .checks import Rational, as_fraction, positive

GridKind = Literal["linear", "log"]

MAX_LOG_GRID_POINTS = 1_000_000  # a geometric grid is enumerated; this keeps it small


@dataclass(frozen=True)
class OutputGrid:
    """The public output set Y = {y_0 = 0 < y_1 < … < y_{N−1} = upper}.

    ``kind="linear"``: y_k = k·resolution, so N = upper/resolution + 1 (an integer ratio is
    required). ``kind="log"``: y_k = resolution·m_{k−1} for k ≥ 1 with integer multipliers
    m_0 = 1, m_{i+1} = min(M, max(m_i + 1, ⌈m_i·growth⌉)), M = upper/resolution: steps of
    ``resolution`` near zero and of a factor ≤ growth (plus one step) above resolution/(growth−1),
    so relative error replaces absolute error. Points are exact rationals; never built from data.
    """

    upper: Fraction
    resolution: Fraction
    kind: GridKind = "linear"
    growth: Fraction | None = None
    _multipliers: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _size: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        upper = positive(self.upper, "upper", "it is D, the largest value the grid can release")
        res = positive(self.resolution, "resolution", "it is d, the grid step near zero")
        ratio = upper / res
        if ratio.denominator != 1:
            raise ValueError(
                f"upper / resolution must be a whole number, got {upper} / {res}; pick D as a "
                "multiple of d"
            )
        object.__setattr__(self, "upper", upper)
        object.__setattr__(self, "resolution", res)
        mult: tuple[int, ...] = ()
        if self.kind == "log":
            if self.growth is None:
                raise ValueError("a log grid needs growth > 1, e.g. growth=1.01 for 1% steps")
            g = as_fraction(self.growth, "growth")
            if g <= 1:
                raise ValueError(f"growth must be > 1, got {g}")
            object.__setattr__(self, "growth", g)
            mult = _geometric_multipliers(ratio.numerator, g)
        elif self.kind == "linear":
            if self.growth is not None:
                raise ValueError("growth applies to grid='log' only; drop it for a linear grid")
        else:
            raise ValueError(f"grid must be 'linear' or 'log', got {self.kind!r}")
        object.__setattr__(self, "_multipliers", mult)
        object.__setattr__(self, "_size", len(mult) + 1 if mult else ratio.numerator + 1)

    @property
    def size(self) -> int:
        """|Y| = N."""
        return self._size

    def value(self, index: int) -> Fraction:
        """y_index, exactly."""
        if not 0 <= index < self.size:
            raise IndexError(f"grid index {index} outside [0, {self.size})")
        if self.kind == "log":
            return self.resolution * (self._multipliers[index - 1] if index else 0)
        return self.resolution * index

    def ceil_index(self, v: Rational) -> int:
        """The index of min(D, smallest grid point ≥ v); 0 for v ≤ 0. Exact comparisons."""
        f = as_fraction(v, "value")
        return self.ceil_index_ratio(f.numerator, f.denominator)

    def ceil_index_ratio(self, num: int, den: int) -> int:
        """:meth:`ceil_index` of num/den (den > 0), in integer arithmetic: the hot path."""
        if num <= 0:
            return 0
        res = self.resolution
        if self._multipliers:
            u = Fraction(num * res.denominator, den * res.numerator)
            if u >= self._multipliers[-1]:
                return self._size - 1
            return 1 + bisect_left(self._multipliers, u)
        return min(self._size - 1, -(-num * res.denominator // (den * res.numerator)))


def _geometric_multipliers(top: int, growth: Fraction) -> tuple[int, ...]:
    # Unit steps while m < 1/(growth − 1), then factor-growth steps: bound the count first.
    g = float(growth)
    bound = 2 + min(top, math.ceil(1 / (g - 1)) + math.ceil(math.log(top) / math.log(g)))
    if bound > MAX_LOG_GRID_POINTS:
        raise ValueError(
            f"the log grid could have up to {bound} points, over the limit of "
            f"{MAX_LOG_GRID_POINTS}; raise growth or resolution, or lower upper"
        )
    m = [1]
    while m[-1] < top:
        m.append(min(top, max(m[-1] + 1, math.ceil(m[-1] * growth))))
    return tuple(m)
