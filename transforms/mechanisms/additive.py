"""Laplace and Gaussian mechanisms on global sensitivity, with exact noise on a power-of-two grid.

Real-valued noise is never drawn as a float. Following Google's secure-noise approach
("Secure Noise Generation", Google differential-privacy library, 2020), a release

1. picks a granularity g = 2^k from the *public* noise scale only (the smallest power of two
   ≥ scale·2^−40, so the noise keeps about 40 bits of resolution);
2. rounds the statistic to the grid: k_x = round(x/g), computed exactly in rationals;
3. adds g·Z for an integer Z from an exact discrete sampler (:mod:`.discrete`), whose scale is
   computed for the *inflated* sensitivity Δ + g (rounding can move two neighbouring statistics
   apart by at most one grid step more than Δ: |round(a) − round(b)| ≤ |a − b| + g);
4. returns (k_x + Z)·g as a float — post-processing of an exact integer.

So the output is exactly distributed as g·(k_x + Z), and the privacy proof is the one for the
discrete mechanisms (Canonne–Kamath–Steinke 2020), with no floating-point gap.

A vector of d coordinates is rounded coordinate-wise, so its inflation is d·g (L1) or ⌈√d⌉·g
(L2). The same holds when the coordinates are released one at a time by scalar mechanisms whose
sensitivity covers all of them — one partition's value each, a person changing up to L of them:
``spans = L`` inflates a scalar mechanism for the L roundings (docs/noise.md §1).

Neighbouring relation: add or remove all rows of one person. The caller declares the sensitivity of
the statistic under that relation (the Beam layer derives it from the contribution bounds).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from .checks import NoiseScaleOverflowError, positive
from .discrete import discrete_gaussian, discrete_laplace, discrete_laplace_std
from .rng import KeyedRng

_RESOLUTION_BITS = 40
_PLAN_HINT = "the sensitivity follows from the contribution bounds in the query's plan"
_BUDGET_HINT = "every query needs a positive share of the budget"


def granularity_exponent(scale: float) -> int:
    """k such that g = 2^k is the smallest power of two ≥ scale·2^−40 (scale > 0, public)."""
    mantissa, exponent = math.frexp(scale)  # scale = mantissa·2^exponent, mantissa in [0.5, 1)
    k = exponent - _RESOLUTION_BITS
    if mantissa == 0.5:  # scale is itself a power of two: 2^(exponent−1)
        k -= 1
    return k


def rounded_quotient(num: int, den: int, k: int) -> int:
    """round(num / (den·2^k)) exactly, ties to even, in integers (den ≥ 1; divmod floors, so a
    negative num rounds alike): the one rounding rule onto the noise grid 2^k, used by
    :func:`_round_to_grid` and by sums of many terms (no Fraction whose denominator grows)."""
    if k <= 0:
        q, r = divmod(num << -k, den)
        d = den
    else:
        d = den << k
        q, r = divmod(num, d)
    if 2 * r > d or (2 * r == d and q % 2 == 1):
        q += 1
    return q


def _round_to_grid(x: float | Fraction, k: int) -> int:
    """round(x / 2^k) exactly (ties to even), for a finite float, an int or a Fraction.

    Exact statistics (e.g. fixed-point sums as Fractions) are rounded without passing through a
    float, so two neighbouring statistics are never moved apart by a float rounding step.
    """
    if isinstance(x, float):
        if not math.isfinite(x):
            raise ValueError(f"cannot add noise to a non-finite value {x!r}; clamp values first")
        if k <= 0 and math.frexp(x)[1] - k < 1024:
            return round(math.ldexp(x, -k))  # scaling by 2^−k ≥ 1 without overflow is exact
    elif isinstance(x, bool) or not isinstance(x, (int, Fraction)):
        raise TypeError(f"the value must be a float, int or Fraction, got {type(x).__name__}")
    exact = Fraction(x)
    return rounded_quotient(exact.numerator, exact.denominator, k)


def _noisy(value: float | Fraction, k: int, noise: int) -> float:
    """(round(value/2^k) + noise)·2^k as a float: post-processing of an exact integer.

    Beyond the float range the result saturates at ±max float. Raising instead would make a
    crash depend on the data: with a range near 1e308 the noisy value overflows in a share of runs
    that moves with the statistic (a reviewer measured 35% vs 50%), and whether a job fails is
    observable. Saturating is a fixed function of the exact noisy integer, so it is safe."""
    n = _round_to_grid(value, k) + noise
    try:
        if k < 0 and abs(n) >= 1 << 53:
            return n / (1 << -k)  # correctly rounded int division; float(n) could overflow
        return math.ldexp(float(n), k)
    except OverflowError:
        return math.copysign(sys.float_info.max, n)


def _finite(x: float | Fraction) -> float:
    """``x`` as a finite float, or OverflowError (float() of a huge Fraction raises; of a float
    product it is inf)."""
    f = float(x)
    if not math.isfinite(f):
        raise OverflowError(f"{x!r} is past the float range")
    return f


def _shown(x: Fraction) -> str:
    try:
        return f"{float(x):.4g}"
    except OverflowError:
        return f"> {sys.float_info.max:.4g}"


def _overflow(kind: str, sensitivity: Fraction, budget: str) -> NoiseScaleOverflowError:
    return NoiseScaleOverflowError(
        f"the {kind} noise for sensitivity {_shown(sensitivity)} at {budget} has a scale that "
        f"overflows a float (largest {sys.float_info.max:.4g}); "
        "narrow the bounds or raise the budget"
    )


def _check_dimension(dimension: int, name: str = "dimension") -> None:
    if isinstance(dimension, bool) or not isinstance(dimension, int):
        raise TypeError(f"{name} must be an int, got {dimension!r}")
    if dimension < 1:
        raise ValueError(f"{name} must be ≥ 1, got {dimension}")


def _check_spans(dimension: int, spans: int) -> None:
    if dimension > 1 and spans > 1:  # a vector per partition would need dimension·spans
        raise ValueError(
            f"a vector of {dimension} values released in each of {spans} partitions: give "
            "dimension = their product, not both"
        )


def _check_scalar(dimension: int) -> None:
    if dimension != 1:
        raise ValueError(f"this mechanism is for vectors of {dimension} values; use release_vector")


def _check_vector(dimension: int, values: Sequence[float | Fraction]) -> None:
    if len(values) != dimension:
        raise ValueError(f"expected a vector of {dimension} values, got {len(values)}")


def _ceil_sqrt(d: int) -> int:
    r = math.isqrt(d)
    return r if r * r == d else r + 1


@dataclass(frozen=True)
class LaplaceMechanism:
    """Adds Laplace noise of scale Δ₁/ε to each coordinate of a vector of dimension ``dimension``.

    Guarantee: pure ε-DP for add/remove one person, provided the L1 distance between the statistic
    vectors of any two neighbouring data sets is at most ``l1_sensitivity``
    (Dwork–McSherry–Nissim–Smith 2006, seed ``calibrating-noise-dmns06.txt``, Proposition
    "Non-interactive Output Perturbation"; here in its exact discrete form, CKS 2020).
    Noise is discrete Laplace on the grid g with scale (Δ₁ + n·g)/ε, n = max(d, ``spans``), the
    number of rounded coordinates one person can move (see module docstring).
    A scale past the largest float is refused here (:class:`NoiseScaleOverflowError`), from Δ₁
    and ε alone, so planners that build their mechanisms never meet it at release.
    """

    l1_sensitivity: float
    epsilon: float
    dimension: int = 1
    spans: int = 1  # separately released coordinates Δ₁ covers (per-partition releases: L)
    _k: int = field(init=False, repr=False)
    _grid_scale: Fraction = field(init=False, repr=False)

    def __post_init__(self) -> None:
        delta = positive(self.l1_sensitivity, "l1_sensitivity", _PLAN_HINT)
        eps = positive(self.epsilon, "epsilon", _BUDGET_HINT)
        _check_dimension(self.dimension)
        _check_dimension(self.spans, "spans")
        _check_spans(self.dimension, self.spans)
        rounded = max(self.dimension, self.spans)
        # The effective scale b = (Δ₁ + d·g)/ε ≥ Δ₁/ε must be a finite float, checked here from
        # Δ and ε alone. (Its std √2·b may still pass the float range: it is then stated as inf,
        # a public fact; the release saturates, see _noisy.)
        try:
            k = granularity_exponent(_finite(delta / eps))
            g = Fraction(2) ** k
            object.__setattr__(self, "_k", k)
            # Discrete scale in grid units: (Δ₁ + n·g) / (ε·g).
            object.__setattr__(self, "_grid_scale", (delta + rounded * g) / (eps * g))
            _finite(self.scale)
        except OverflowError as e:
            raise _overflow("Laplace", delta, f"ε = {float(eps):.4g}") from e

    @property
    def granularity(self) -> float:
        return math.ldexp(1.0, self._k)

    @property
    def grid_exponent(self) -> int:
        """k of the noise grid g = 2^k every release is rounded to."""
        return self._k

    @property
    def scale(self) -> float:
        """The effective Laplace scale b in value units, (Δ₁ + n·g)/ε (slightly above Δ₁/ε)."""
        return float(self._grid_scale) * self.granularity

    @property
    def std(self) -> float:
        """Standard deviation of the noise on one coordinate (≈ √2·b)."""
        return discrete_laplace_std(self._grid_scale) * self.granularity

    def release(self, value: float | Fraction, rng: KeyedRng) -> float:
        _check_scalar(self.dimension)
        return _noisy(value, self._k, discrete_laplace(rng, self._grid_scale))

    def release_vector(self, values: Sequence[float | Fraction], rng: KeyedRng) -> list[float]:
        _check_vector(self.dimension, values)
        return [_noisy(v, self._k, discrete_laplace(rng, self._grid_scale)) for v in values]


@dataclass(frozen=True)
class GaussianMechanism:
    """Adds Gaussian noise of standard deviation Δ₂/√(2ρ) to each coordinate of a vector.

    Guarantee: ρ-zCDP for add/remove one person, provided the L2 distance between the statistic
    vectors of any two neighbouring data sets is at most ``l2_sensitivity`` (Bun–Steinke 2016,
    Prop. 1.6; exact discrete form: Canonne–Kamath–Steinke 2020, Theorem 4). Convert to (ε, δ)
    with :mod:`.accounting`. Noise is discrete Gaussian on the grid g with σ² = (Δ₂ + ⌈√n⌉·g)²/(2ρ),
    n = max(d, ``spans``) (rounding moves each coordinate by < g more, so the L2 distance grows
    by at most √n·g).
    A σ past the largest float is refused here (:class:`NoiseScaleOverflowError`), from Δ₂ and ρ
    alone.
    """

    l2_sensitivity: float
    rho: float
    dimension: int = 1
    spans: int = 1  # separately released coordinates Δ₂ covers (per-partition releases: L)
    _k: int = field(init=False, repr=False)
    _grid_sigma2: Fraction = field(init=False, repr=False)

    def __post_init__(self) -> None:
        delta = positive(self.l2_sensitivity, "l2_sensitivity", _PLAN_HINT)
        rho = positive(self.rho, "rho", _BUDGET_HINT)
        _check_dimension(self.dimension)
        _check_dimension(self.spans, "spans")
        _check_spans(self.dimension, self.spans)
        # Δ/√(2ρ) is a float quotient: past the float range it is inf, not an error, and would
        # give the grid 2^−40 and an OverflowError at release — so both numbers are checked here.
        try:
            k = granularity_exponent(_finite(_finite(delta) / math.sqrt(2.0 * float(rho))))
            g = Fraction(2) ** k
            inflated = delta + _ceil_sqrt(max(self.dimension, self.spans)) * g
            object.__setattr__(self, "_k", k)
            object.__setattr__(self, "_grid_sigma2", inflated * inflated / (2 * rho * g * g))
            _finite(self.std)
        except OverflowError as e:
            raise _overflow("Gaussian", delta, f"ρ = {float(rho):.4g}") from e

    @property
    def granularity(self) -> float:
        return math.ldexp(1.0, self._k)

    @property
    def std(self) -> float:
        """σ of the noise on one coordinate in value units (the discrete Gaussian's is ≤ σ)."""
        return math.sqrt(float(self._grid_sigma2)) * self.granularity

    def release(self, value: float | Fraction, rng: KeyedRng) -> float:
        _check_scalar(self.dimension)
        return _noisy(value, self._k, discrete_gaussian(rng, self._grid_sigma2))

    def release_vector(self, values: Sequence[float | Fraction], rng: KeyedRng) -> list[float]:
        _check_vector(self.dimension, values)
        return [_noisy(v, self._k, discrete_gaussian(rng, self._grid_sigma2)) for v in values]


def laplace_mechanism(value: float, *, sensitivity: float, epsilon: float, rng: KeyedRng) -> float:
    """One scalar through :class:`LaplaceMechanism`: pure ε-DP for sensitivity ``sensitivity``."""
    return LaplaceMechanism(sensitivity, epsilon).release(value, rng)


def gaussian_mechanism(value: float, *, sensitivity: float, rho: float, rng: KeyedRng) -> float:
    """One scalar through :class:`GaussianMechanism`: ρ-zCDP for sensitivity ``sensitivity``."""
    return GaussianMechanism(sensitivity, rho).release(value, rng)
