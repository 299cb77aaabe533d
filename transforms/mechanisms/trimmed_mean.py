"""The trimmed mean of one value per person: the mean of the values between two private quantiles.

For a trim τ ∈ (0, 1/2) (public), the release

1. draws two positions by the exponential mechanism (:class:`~.split_quantile.SplitQuantile`):
   one for the τ-quantile and one for the (1 − τ)-quantile, each with 5/16 of the budget. A
   position (k, j) is a grid point k of [lower, upper] and a split j ∈ {0, …, J} of its cell:
   ⌊j·c_k/J⌋ of the c_k persons at k lie below it, so a threshold can fall *inside* a group of
   tied persons. The lower position is the smaller draw, (a, j_a), the upper the larger, (b, j_b);
2. keeps the persons at or above the lower position and below the upper one — every person
   with grid index strictly between a and b, the c_a − ⌊j_a·c_a/J⌋ highest of those at a, the
   ⌊j_b·c_b/J⌋ lowest of those at b (when a = b, ⌊j_b·c/J⌋ − ⌊j_a·c/J⌋ of them) — and adds
   integer noise to two integers of them: the count C and the centred sum S = Σ (2k − a − b),
   in half grid cells, with 9/32 of the budget on S and 3/32 on C;
3. releases the grid position (a + b)/2 + S̃ / (2·max(1, C̃)), clamped to [a, b], as a value.

**Guarantee: pure ε-DP under an ε budget, ρ-zCDP under a ρ budget, add/remove one person** (one
value per person: the job's ``per_person`` reduction). Step 1's two draws are 5ε/16-DP each
(5ε/16-bounded-range, so (5ε/16)²/8-zCDP; with 5ρ/16 each under ρ). Given the two positions,
which step 2 depends on (adaptive composition, Dwork & Roth 2014 Thm. 3.16; Bun & Steinke 2016
Lemma 2.3), adding or removing one person's value moves C by at most 1 and S by at most b − a:
it changes the kept number of one grid point k ∈ [a, b] by at most one (at a threshold's point,
⌊j·(c + 1)/J⌋ − ⌊j·c/J⌋ ∈ {0, 1} as j ≤ J), and every kept term 2k − a − b lies in
[−(b − a), b − a]. So discrete Laplace noise of scale (b − a)/(9ε/32) on S and 1/(3ε/32) on C
is 9ε/32- and 3ε/32-DP (Canonne, Kamath & Steinke 2020, the discrete form of the seed
``calibrating-noise-dmns06.txt``), and discrete Gaussian noise of σ² = (b − a)²/(2·9ρ/32) and
1/(2·3ρ/32) is 9ρ/32- and 3ρ/32-zCDP (CKS 2020 Thm. 4).
The parts add up to ε (or ρ); step 3 is post-processing. When a = b, S is 0 on every data set:
no noise on it, and the release is that grid point. Derivation, and the brute-force check of the
whole mechanism's privacy loss on small inputs: ``docs/trimmed_mean.md``,
``tests/mechanisms/test_trimmed_mean.py``.

Why not smooth sensitivity (Bun & Steinke 2019): under add/remove the trimming count ⌊τn⌋
moves with n, and that smooth sensitivity is not derived here (``docs/local_sensitivity.md``
§11). Thresholds from the exponential mechanism need no derivation beyond the two facts above,
and read the data only through its grid histogram, so the pipeline combines shards as for the
median (no per-person values on one worker).

What it estimates: the mean of the grid-rounded values of the persons between the released
positions — close to the classical τ-trimmed mean when the positions land near their quantiles
(each is off by at most the exponential quantile's rank error, stated by ``userdp plan``, plus
c/J persons in a cell of c tied persons). Tied persons are split at a threshold as the classical
trimmed mean splits them (it drops exactly ⌊τn⌋ of each end; which of the tied persons does not
matter, their grid values are equal). Arithmetic is exact: S̃, C̃ are integers and the position a
rational.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from .accounting import ZCDP, PureDP, bounded_range_epsilon_within_rho
from .checks import Rational, positive
from .discrete import discrete_gaussian, discrete_laplace
from .exponential_quantile import DEFAULT_GRID_BITS, GridHistogram
from .rng import KeyedRng
from .split_quantile import SPLIT_BITS, Position, SplitQuantile

DEFAULT_TRIM = Fraction(1, 10)
# The budget split (of ε, or of ρ): each threshold, the centred sum, the count. The thresholds'
# rank error is most of the error, so they get 5/8 together: the split with the lowest error over
# the accuracy benchmark's families (docs/trimmed_mean.md §4). The count's noise reaches the mean
# only multiplied by the kept values' offset from the thresholds' middle, so the sum gets three
# times its share.
THRESHOLD_PART = Fraction(5, 16)
SUM_PART = Fraction(9, 32)
COUNT_PART = Fraction(3, 32)
DEFAULT_PARTS = (THRESHOLD_PART, SUM_PART, COUNT_PART)


class TrimmedRelease(NamedTuple):
    """The release's noisy integers (what the privacy proof is about) and the value from them."""

    low: int  # a: the lower threshold's grid index (of the smaller position drawn)
    high: int  # b
    noisy_sum: int  # S̃: Σ (2k − a − b) over kept persons, plus noise (exactly S when a = b)
    noisy_count: int  # C̃
    value: float
    low_split: int  # j_a: ⌊j_a·c_a/J⌋ of the persons at a are below the lower threshold
    high_split: int  # j_b: ⌊j_b·c_b/J⌋ of the persons at b are below the upper one (kept)

    @property
    def positions(self) -> tuple[Position, Position]:
        return (self.low, self.low_split), (self.high, self.high_split)


def as_trim(trim: object) -> Fraction:
    """τ as an exact rational in (0, 1/2): 0.1 is 1/10, as for ``q``."""
    if isinstance(trim, bool) or not isinstance(trim, (int, float, Fraction)):
        raise TypeError(f"trim must be a number in (0, 1/2), got {type(trim).__name__} {trim!r}")
    if isinstance(trim, float) and not math.isfinite(trim):
        raise ValueError(f"trim must lie strictly between 0 and 1/2, got {trim!r}")
    t = Fraction(repr(trim)) if isinstance(trim, float) else Fraction(trim)
    if not 0 < t < Fraction(1, 2):
        raise ValueError(
            f"trim must lie strictly between 0 and 1/2, got {trim!r}: the share of persons "
            "trimmed from each end (0.1 keeps the middle 80%)"
        )
    return t


def kept_sum_and_count(
    histogram: GridHistogram, low: Position, high: Position, split_bits: int = SPLIT_BITS
) -> tuple[int, int]:
    """(S, C) of the persons at or above position ``low`` = (a, j_a) and below ``high`` =
    (b, j_b), low ≤ high: S = Σ (2k − a − b) over them, exactly (module docstring, step 2)."""
    (a, ja), (b, jb) = low, high
    if not (low <= high and min(ja, jb) >= 0 and max(ja, jb) <= 1 << split_bits):
        raise ValueError(f"positions {low}, {high} are not ordered splits of 2^{split_bits}")
    idx, counts = np.asarray(histogram[0]), np.asarray(histogram[1])

    def at(k: int) -> int:  # the persons at grid point k
        i = int(np.searchsorted(idx, k, "left"))
        return int(counts[i]) if i < len(idx) and int(idx[i]) == k else 0

    if a == b:  # S = 0: every kept term is 2a − a − a
        tied = at(a)
        return 0, ((jb * tied) >> split_bits) - ((ja * tied) >> split_bits)
    at_a = at(a)
    kept_a = at_a - ((ja * at_a) >> split_bits)
    kept_b = (jb * at(b)) >> split_bits
    lo, hi = np.searchsorted(idx, a, "right"), np.searchsorted(idx, b, "left")
    k, c = idx[lo:hi], counts[lo:hi]  # strictly between a and b: all kept
    count = int(c.sum(dtype=np.int64)) if len(c) else 0
    # Σ c·k in int64 while it cannot overflow (count·k ≤ count·2^40), else in Python integers
    if count and count < (1 << 62) // max(1, int(k[-1]) + 1):
        weighted = int(np.dot(c, k))
    else:
        weighted = sum(int(x) * int(y) for x, y in zip(c.tolist(), k.tolist(), strict=True))
    inside = 2 * weighted - (a + b) * count
    return inside + (kept_b - kept_a) * (b - a), count + kept_a + kept_b


@dataclass(frozen=True)
class TrimmedMean:
    """The mean of the per-person values between their private τ- and (1 − τ)-quantiles.

    Guarantee: pure ε-DP (an ε budget) or ρ-zCDP (a ρ budget) for adding or removing one person's
    value; proof in the module docstring and ``docs/trimmed_mean.md``.

    Args:
      trim: τ, the share of persons trimmed from each end, in (0, 1/2).
      lower, upper: public bounds; values are clamped to them and rounded to the grid.
      budget: ``PureDP(ε)`` or ``ZCDP(ρ)``, split as the module's ``*_PART`` constants.
      grid_bits: the thresholds' grid has 2^grid_bits cells of [lower, upper].
      split_bits: a threshold can split the persons tied at its grid point in J = 2^split_bits
        ways (:class:`~.split_quantile.SplitQuantile`).
      parts: (each threshold's, the sum's, the count's) share of the budget, adding up to one
        with the threshold's twice; the default is the module's split (benchmarks compare others).
    """

    trim: Fraction
    lower: float
    upper: float
    budget: PureDP | ZCDP
    grid_bits: int
    parts: tuple[Fraction, Fraction, Fraction]
    low_quantile: SplitQuantile = field(repr=False)
    high_quantile: SplitQuantile = field(repr=False)

    def __init__(
        self,
        trim: Rational,
        lower: float,
        upper: float,
        budget: PureDP | ZCDP,
        *,
        grid_bits: int = DEFAULT_GRID_BITS,
        parts: tuple[Rational, Rational, Rational] = DEFAULT_PARTS,
        split_bits: int = SPLIT_BITS,
    ) -> None:
        tau = as_trim(trim)
        shares = tuple(positive(p, "part", "each part of the split is > 0") for p in parts)
        if len(shares) != 3 or 2 * shares[0] + shares[1] + shares[2] != 1:
            raise ValueError(f"parts {parts} must be 3 shares with 2·threshold + sum + count = 1")
        threshold_part = shares[0]
        if not isinstance(budget, (PureDP, ZCDP)):
            raise TypeError(
                f"budget must be PureDP(epsilon) or ZCDP(rho), got {type(budget).__name__}"
            )
        if isinstance(budget, ZCDP):  # each threshold is ε-bounded-range: ε²/8 ≤ threshold_part·ρ
            eps_q = Fraction(bounded_range_epsilon_within_rho(budget.rho * threshold_part))
            if eps_q == 0:
                raise ValueError(f"rho = {float(budget.rho):.3g} is too small to split")
        else:
            eps_q = budget.epsilon * threshold_part
        low = SplitQuantile(tau, lower, upper, eps_q, grid_bits=grid_bits, split_bits=split_bits)
        high = SplitQuantile(
            1 - tau, lower, upper, eps_q, grid_bits=grid_bits, split_bits=split_bits
        )
        for name, value in (("trim", tau), ("lower", low.grid.lower), ("upper", low.grid.upper),
                            ("budget", budget), ("grid_bits", grid_bits), ("parts", shares),
                            ("low_quantile", low), ("high_quantile", high)):  # fmt: skip
            object.__setattr__(self, name, value)
        try:  # the widest thresholds' noise (b − a = G) must be a float, as additive noise's
            if not all(math.isfinite(float(x)) for x in self.noise_scales(self.cells)):
                raise OverflowError
        except OverflowError:
            raise ValueError(
                f"the budget {budget} is too small for a trimmed mean: its noise scale passes "
                "the float range"
            ) from None

    @property
    def guarantee(self) -> PureDP | ZCDP:
        return self.budget

    @property
    def cells(self) -> int:
        return self.low_quantile.grid.cells

    @property
    def split_bits(self) -> int:
        return self.low_quantile.split_bits

    @property
    def dense_counts(self) -> bool:
        return self.low_quantile.grid.dense_counts

    def grid_histogram(self, values: npt.ArrayLike) -> GridHistogram:
        """The values' grid histogram, as the median's: all the release reads of the data (the
        splits count persons at a grid point; which persons they are does not matter)."""
        return self.low_quantile.grid.grid_histogram(values)

    def grid_position_value(self, position: Fraction) -> float:
        """lower + position·(upper − lower)/G for a rational position in [0, G], correctly
        rounded (exact arithmetic: no overflow for bounds near ±1e308)."""
        lo, hi = Fraction(self.lower), Fraction(self.upper)
        return min(max(float(lo + (hi - lo) * position / self.cells), self.lower), self.upper)

    def _noise(self, scale: Fraction, rng: KeyedRng) -> int:
        """Integer noise at a scale of :meth:`noise_scales`: discrete Gaussian of that σ² under
        a ρ budget, else discrete Laplace of that scale (the module docstring's)."""
        if isinstance(self.budget, ZCDP):
            return discrete_gaussian(rng, scale)
        return discrete_laplace(rng, scale)

    def noise_scales(self, span: int) -> tuple[Fraction, Fraction]:
        """(sum's, count's) discrete Laplace scale, or discrete Gaussian σ², for thresholds
        ``span`` = b − a grid cells apart: the one source the release, the plan and the tests
        read."""
        if isinstance(self.budget, ZCDP):
            rho = self.budget.rho
            return Fraction(span**2) / (2 * rho * self.parts[1]), 1 / (2 * rho * self.parts[2])
        eps = self.budget.epsilon
        return Fraction(span) / (eps * self.parts[1]), 1 / (eps * self.parts[2])

    def value_of(self, a: int, b: int, noisy_sum: int, noisy_count: int) -> float:
        """The released value from the noisy integers (post-processing): the grid position
        (a + b)/2 + S̃/(2·max(1, C̃)), clamped to [a, b]."""
        position = Fraction(a + b, 2) + Fraction(noisy_sum, 2 * max(1, noisy_count))
        return self.grid_position_value(min(max(position, Fraction(a)), Fraction(b)))

    def release_parts(self, histogram: GridHistogram, rng: KeyedRng) -> TrimmedRelease:
        """The release from the values' grid histogram (merged over shards), with its integers."""
        histogram = (np.asarray(histogram[0]), np.asarray(histogram[1]))
        ranks = self.low_quantile.ranks(histogram)  # the histogram checked once, for both draws
        first = self.low_quantile.draw(ranks, rng)
        second = self.high_quantile.draw(ranks, rng)
        low, high = min(first, second), max(first, second)  # post-processing of the two draws
        s, c = kept_sum_and_count(histogram, low, high, self.split_bits)
        (a, _), (b, _) = low, high
        sum_scale, count_scale = self.noise_scales(b - a)
        if b > a:  # a = b: S = 0 on every data set, nothing to hide
            s += self._noise(sum_scale, rng)
        c += self._noise(count_scale, rng)
        return TrimmedRelease(a, b, s, c, self.value_of(a, b, s, c), low[1], high[1])

    def release_histogram(self, histogram: GridHistogram, rng: KeyedRng) -> float:
        return self.release_parts(histogram, rng).value

    def release(self, values: npt.ArrayLike, rng: KeyedRng) -> float:
        """One draw from the values, one per person."""
        return self.release_histogram(self.grid_histogram(values), rng)

    def exact_parts(self, histogram: GridHistogram) -> TrimmedRelease:
        """The statistic without noise (the pipeline's ``noise=False`` test hook): thresholds at
        the first best-scoring positions, the kept persons' exact mean grid position."""
        histogram = (np.asarray(histogram[0]), np.asarray(histogram[1]))
        ranks = self.low_quantile.ranks(histogram)
        low, high = sorted((self.low_quantile.best(ranks), self.high_quantile.best(ranks)))
        s, c = kept_sum_and_count(histogram, low, high, self.split_bits)
        (a, _), (b, _) = low, high
        return TrimmedRelease(a, b, s, c, self.value_of(a, b, s, c), low[1], high[1])

    def threshold_values(self, parts: TrimmedRelease) -> tuple[float, float]:
        """The released thresholds as values (grid points a and b): outputs of the two threshold
        draws, already counted in the guarantee (composition releases every part's output), so
        publishing them beside the mean costs nothing. Rounded as the value is, so the value lies
        between them (rounding is monotone)."""
        return self.grid_position_value(Fraction(parts.low)), self.grid_position_value(
            Fraction(parts.high)
        )

    def exact(self, values: npt.ArrayLike) -> float:
        return self.exact_parts(self.grid_histogram(values)).value

    def to_manifest(self) -> dict[str, Any]:
        q = self.low_quantile
        parts = {
            "each_threshold": str(self.parts[0]),
            "centred_sum": str(self.parts[1]),
            "count": str(self.parts[2]),
        }
        noise = "discrete_gaussian" if isinstance(self.budget, ZCDP) else "discrete_laplace"
        return {
            "kind": "trimmed_mean",
            "trim": str(self.trim),
            "kept": f"values between the private {self.trim} and {1 - self.trim} quantiles",
            "budget_parts": parts,
            "threshold": "exponential mechanism on (grid point, split of its tied persons)",
            "threshold_epsilon": float(q.epsilon),
            "threshold_epsilon_exact": str(q.epsilon),
            "grid_cells": self.cells,
            "splits_per_cell": 1 << self.split_bits,
            "noise": noise,
            "sum_sensitivity": "b - a half cells: |2k - a - b| <= b - a for kept k",
        }
