"""The trimmed mean of one value per person: the mean of the values between two private quantiles.

For a trim τ ∈ (0, 1/2) (public), the release

1. draws two grid points of [lower, upper] by the exponential mechanism
   (:class:`~.exponential_quantile.ExponentialQuantile`): k_lo for the τ-quantile and k_hi for
   the (1 − τ)-quantile, each with 5/16 of the budget; a = min, b = max of the two;
2. keeps the persons whose value's grid index k lies in [a, b] and adds integer noise to two
   integers of them — the count C and the centred sum S = Σ (2k − a − b), in half grid cells —
   with 9/32 of the budget on S and 3/32 on C;
3. releases the grid position (a + b)/2 + S̃ / (2·max(1, C̃)), clamped to [a, b], as a value.

**Guarantee: pure ε-DP under an ε budget, ρ-zCDP under a ρ budget, add/remove one person** (one
value per person: the job's ``per_person`` reduction). Step 1's two draws are 5ε/16-DP each
(5ε/16-bounded-range, so (5ε/16)²/8-zCDP; with 5ρ/16 each under ρ). Given (a, b), which step 2 may
depend on (adaptive composition, Dwork & Roth 2014 Thm. 3.16; Bun & Steinke 2016 Lemma 2.3),
adding or removing one person's value moves C by at most 1 and S by at most b − a, because
every kept term 2k − a − b lies in [−(b − a), b − a]. So discrete Laplace noise of scale
(b − a)/(9ε/32) on S and 1/(3ε/32) on C is 9ε/32- and 3ε/32-DP (Canonne, Kamath & Steinke
2020, the discrete form of the seed ``calibrating-noise-dmns06.txt``), and discrete Gaussian
noise of σ² = (b − a)²/(2·9ρ/32) and 1/(2·3ρ/32) is 9ρ/32- and 3ρ/32-zCDP (CKS 2020 Thm. 4).
The parts add up to ε (or ρ); step 3 is post-processing. When a = b, S is 0 on every data set:
no noise on it, and the release is that grid point. Derivation, and the brute-force check of the
whole mechanism's privacy loss on small inputs: ``docs/trimmed_mean.md``,
``tests/mechanisms/test_trimmed_mean.py``.

Why not smooth sensitivity (Bun & Steinke 2019): under add/remove the trimming count ⌊τn⌋
moves with n, and that smooth sensitivity is not derived here (``docs/local_sensitivity.md``
§11). Thresholds from the exponential mechanism need no derivation beyond the two facts above,
and read the data only through its grid histogram, so the pipeline combines shards as for the
median (no per-person values on one worker).

What it estimates: the mean of the grid-rounded values lying between the released thresholds —
close to the classical τ-trimmed mean when the thresholds land near their quantiles (each is off
by at most the exponential quantile's rank error, stated by ``userdp plan``). Values tied with a
threshold are all kept. Arithmetic is exact: S̃, C̃ are integers and the position a rational.
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
from .exponential_quantile import DEFAULT_GRID_BITS, ExponentialQuantile, GridHistogram
from .rng import KeyedRng

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

    low: int  # a: the lower threshold's grid index (the smaller draw)
    high: int  # b
    noisy_sum: int  # S̃: Σ (2k − a − b) over kept persons, plus noise (exactly S when a = b)
    noisy_count: int  # C̃
    value: float


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


def kept_sum_and_count(histogram: GridHistogram, a: int, b: int) -> tuple[int, int]:
    """(S, C) of the persons whose grid index is in [a, b]: S = Σ (2k − a − b), exactly."""
    idx, counts = histogram
    lo, hi = np.searchsorted(idx, a, "left"), np.searchsorted(idx, b, "right")
    k, c = idx[lo:hi], counts[lo:hi]
    count = int(c.sum(dtype=np.int64)) if len(c) else 0
    # Σ c·k in int64 while it cannot overflow (count·k ≤ count·2^40), else in Python integers
    if count and count < (1 << 62) // max(1, int(k[-1]) + 1):
        weighted = int(np.dot(c, k))
    else:
        weighted = sum(int(x) * int(y) for x, y in zip(c.tolist(), k.tolist(), strict=True))
    return 2 * weighted - (a + b) * count, count


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
      parts: (each threshold's, the sum's, the count's) share of the budget, adding up to one
        with the threshold's twice; the default is the module's split (benchmarks compare others).
    """

    trim: Fraction
    lower: float
    upper: float
    budget: PureDP | ZCDP
    grid_bits: int
    parts: tuple[Fraction, Fraction, Fraction]
    low_quantile: ExponentialQuantile = field(repr=False)
    high_quantile: ExponentialQuantile = field(repr=False)

    def __init__(
        self,
        trim: Rational,
        lower: float,
        upper: float,
        budget: PureDP | ZCDP,
        *,
        grid_bits: int = DEFAULT_GRID_BITS,
        parts: tuple[Rational, Rational, Rational] = DEFAULT_PARTS,
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
        low = ExponentialQuantile(tau, lower, upper, eps_q, grid_bits)
        high = ExponentialQuantile(1 - tau, lower, upper, eps_q, grid_bits)
        for name, value in (("trim", tau), ("lower", low.lower), ("upper", low.upper),
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
        return self.low_quantile.cells

    @property
    def dense_counts(self) -> bool:
        return self.low_quantile.dense_counts

    def grid_histogram(self, values: npt.ArrayLike) -> GridHistogram:
        """The values' grid histogram, as the median's: all the release reads of the data."""
        return self.low_quantile.grid_histogram(values)

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
        k_lo = self.low_quantile.release_index(histogram, rng)
        k_hi = self.high_quantile.release_index(histogram, rng)
        a, b = min(k_lo, k_hi), max(k_lo, k_hi)  # post-processing of the two draws
        s, c = kept_sum_and_count(histogram, a, b)
        sum_scale, count_scale = self.noise_scales(b - a)
        if b > a:  # a = b: S = 0 on every data set, nothing to hide
            s += self._noise(sum_scale, rng)
        c += self._noise(count_scale, rng)
        return TrimmedRelease(a, b, s, c, self.value_of(a, b, s, c))

    def release_histogram(self, histogram: GridHistogram, rng: KeyedRng) -> float:
        return self.release_parts(histogram, rng).value

    def release(self, values: npt.ArrayLike, rng: KeyedRng) -> float:
        """One draw from the values, one per person."""
        return self.release_histogram(self.grid_histogram(values), rng)

    def exact_parts(self, histogram: GridHistogram) -> TrimmedRelease:
        """The statistic without noise (the pipeline's ``noise=False`` test hook): thresholds at
        the best-scoring grid points, the kept persons' exact mean grid position."""
        histogram = (np.asarray(histogram[0]), np.asarray(histogram[1]))
        self.low_quantile.check_histogram(histogram)
        a, b = sorted(
            (self.low_quantile.best_index(histogram), self.high_quantile.best_index(histogram))
        )
        s, c = kept_sum_and_count(histogram, a, b)
        return TrimmedRelease(a, b, s, c, self.value_of(a, b, s, c))

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
            "threshold_epsilon": float(q.epsilon),
            "threshold_epsilon_exact": str(q.epsilon),
            "grid_cells": self.cells,
            "noise": noise,
            "sum_sensitivity": "b - a half cells: |2k - a - b| <= b - a for kept k",
        }
