"""Propose-test-release (PTR) for a quantile and for the bounded mean of per-person values.

PTR (Dwork & Lei 2009; seed ``lecture-ptr-lln-stability.txt`` §15.2, and
``local-sensitivity-ptr-saa.txt``): for a proposed bound b on the local sensitivity,

1. D(x, b) = the fewest add/remove-one-person steps from x to a data set whose local sensitivity
   reaches b. D changes by at most 1 between neighbours.
2. Test: pass iff min(D(x, b), C) + Z ≥ T, Z exact discrete Laplace of scale 1/ε_test; T is the
   smallest integer with P(Z ≥ T) = e^(−ε_test·T)/(1 + e^(−ε_test)) ≤ δ (the seed's continuous
   test with threshold ln(1/δ)/ε, made exact: D is an integer). The public cap C = T + R, with
   P(Z ≤ −R) ≤ 2^−64 (:func:`distance_cap`), changes a pass's probability by at most 2^−64, and
   lets the release read only the order statistics near the quantile's rank
   (:mod:`.quantile_window`; docs/local_sensitivity.md §6).
3. On a pass release f(x) + Laplace(b/ε_release) (:class:`~.additive.LaplaceMechanism`, exact);
   otherwise ⊥ (``None``).

Guarantee: (ε_test + ε_release, δ)-DP for add/remove one person (seed, Proposition 15.5: if
D(x) ≥ 1 then LS(x) < b and both steps are DP; if D(x) = 0 a release happens w.p. ≤ δ). The cap
keeps both premises: min(D, C) changes by at most 1 between neighbours (the minimum of a
1-Lipschitz function and a constant), and min(D, C) ≥ 1 exactly when D ≥ 1 (C ≥ T ≥ 1). The
budget is spent whether or not ⊥ comes out; ⊥ is an ordinary, private outcome.

:class:`.ptr_ladder.LadderPTR` needs no hand-picked b: it tests a geometric ladder of bounds with
the sparse vector technique (docs/local_sensitivity.md §6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike

from .accounting import ApproxDP, float_down, float_up
from .additive import LaplaceMechanism
from .checks import Rational, as_fraction
from .discrete import discrete_laplace
from .quantile_sensitivity import (
    as_quantile,
    check_bounds,
    distance_to_sensitivity,
    quantile_of_sorted,
    sorted_clamped,
)
from .rng import KeyedRng
from .threshold_search import first_threshold

INFINITE_DISTANCE = 1 << 62
"""Stands for D = ∞ (no data set reaches the bound): a constant, so its sensitivity is 0."""

CAP_SLACK = Fraction(1, 1 << 64)
"""How much capping the distance may change a test's pass probability (:func:`distance_cap`)."""

_BUDGET_HINT = "every query needs a positive share of the budget"


# ------------------------------------------------------------------------------- shared pieces


def check_epsilon(x: Rational, name: str = "epsilon") -> Fraction:
    f = as_fraction(x, name)
    if f <= 0:
        raise ValueError(f"{name} must be positive, got {x!r}; {_BUDGET_HINT}")
    return f


def check_delta(x: Rational) -> Fraction:
    f = as_fraction(x, "delta")
    if not 0 < f < 1:
        raise ValueError(
            f"delta must lie in (0, 1), got {x!r}; a distance test fails with probability δ, "
            "so it needs δ > 0"
        )
    return f


def laplace_tail(epsilon: Fraction, t: int) -> Decimal:
    """P(Z ≥ t) for t ≥ 1, Z discrete Laplace with P(Z = z) ∝ e^(−ε|z|): e^(−εt)/(1 + e^(−ε)),
    in 50-digit decimals, rounded up by 10^−40 relative."""
    with localcontext() as ctx:
        ctx.prec = 50
        e = Decimal(epsilon.numerator) / Decimal(epsilon.denominator)
        p = (-e * t).exp() / (1 + (-e).exp())
        return p * (1 + Decimal(10) ** -40)


def distance_threshold(epsilon: Fraction, delta: Fraction) -> int:
    """The smallest integer T ≥ 1 with P(Z ≥ T) ≤ δ, Z ~ discrete Laplace of scale 1/ε."""
    # Decimal vs Fraction compares exactly (a δ divided in the ambient 28-digit context could
    # round up, past laplace_tail's 10^−40 margin)
    return first_threshold(lambda t: laplace_tail(epsilon, t) <= delta)


def distance_cap(threshold: int, epsilon: Fraction) -> int:
    """C = T + R, R the smallest integer ≥ 1 with P(Z ≤ −R) ≤ 2^−64 for Z ~ discrete Laplace of
    scale 1/ε: a test of min(D, C) passes whenever the test of D does, except with probability
    ≤ 2^−64 (both pass when D < C; when D ≥ C, the capped test fails only if Z < T − C = −R).

    Public (ε and T are), so the window of order statistics the capped distance reads is public
    too: every gap of cost ≤ C − 1 (:meth:`.quantile_window.QuantileWindow.for_reach`)."""
    slack = first_threshold(lambda r: laplace_tail(epsilon, r) <= CAP_SLACK)  # Z symmetric
    return threshold + slack


def capped(distance: int | None, cap: int) -> int | None:
    """min(D, C); None (D = ∞, the same for every data set) stays None."""
    return None if distance is None else min(distance, cap)


def passes_test(distance: int | None, epsilon: Fraction, threshold: int, rng: KeyedRng) -> bool:
    """D + Z ≥ T for Z ~ discrete Laplace(1/ε) (ε-DP in D, whose sensitivity is 1). A distance of
    None (∞) passes without drawing: it is the same for every data set."""
    if distance is None:
        return True
    return distance + discrete_laplace(rng, 1 / epsilon) >= threshold


def exact_sum(values: ArrayLike) -> Fraction:
    """Σ values exactly, as a Fraction (finite float64 values; order does not matter).

    Each float is m·2^s with an integer |m| < 2^53 (``frexp``); values sharing s are summed in
    int64 as two halves of m, m = high·2^27 + low (|high| ≤ 2^26, 0 ≤ low < 2^27: sums of fewer
    than 2^36 values cannot overflow), and the at most ~2,100 exponents' sums are combined in
    Python integers. Vectorised: a Python loop over 10^7 values took seconds.
    """
    xs = np.asarray(values, dtype=np.float64).ravel()
    if len(xs) == 0:
        return Fraction(0)
    if not np.isfinite(xs).all():  # frexp gives ±inf and NaN garbage mantissas
        raise ValueError("exact_sum takes finite values; clamp them first (ClampedSum.of)")
    mant, expo = np.frexp(xs)
    ints = (mant * 2.0**53).astype(np.int64)  # exact: |mant| < 1
    shifts = expo.astype(np.int64) - 53
    order = np.argsort(shifts, kind="stable")
    ints, shifts = ints[order], shifts[order]
    starts = np.flatnonzero(np.concatenate(([True], shifts[1:] != shifts[:-1])))
    high = np.add.reduceat(ints >> 27, starts)  # floor division: ints = high·2^27 + low
    low = np.add.reduceat(ints & ((1 << 27) - 1), starts)
    base = int(shifts[0])
    total = sum(
        ((int(h) << 27) + int(lo)) << (int(s) - base)
        for h, lo, s in zip(high, low, shifts[starts], strict=True)
    )
    return Fraction(total) * Fraction(2) ** base


def exact_mean(xs: np.ndarray, lower: float, upper: float) -> Fraction:
    """The exact mean of clamped float values as a Fraction; (lower + upper)/2 for none.

    Exact, so two neighbouring means differ by exactly what the sensitivity analysis says (a
    rounded float sum could differ by a few more ulps).
    """
    return ClampedSum.of(xs, lower, upper).mean(lower, upper)


@dataclass(frozen=True)
class ClampedSum:
    """All a mean's release reads: the count n and the exact sum of the values clamped to
    [lower, upper]. Mergeable (a Beam accumulator), and exact, so the result does not depend on
    how the values are split."""

    count: int
    total: Fraction

    @classmethod
    def of(cls, values: ArrayLike, lower: float, upper: float) -> ClampedSum:
        xs = np.asarray(values, dtype=np.float64).ravel()
        if np.isnan(xs).any():
            raise ValueError("values contain NaN; drop or replace them before the release")
        return cls(len(xs), exact_sum(np.clip(xs, lower, upper)))

    def merge(self, other: ClampedSum) -> ClampedSum:
        return ClampedSum(self.count + other.count, self.total + other.total)

    def mean(self, lower: float, upper: float) -> Fraction:
        if self.count == 0:
            return (Fraction(lower) + Fraction(upper)) / 2
        return self.total / self.count


def mean_distance(n: int, lower: float, upper: float, bound: Fraction) -> int | None:
    """D(x, b) for the mean of n values in [lo, hi]: max(0, n − ⌊(hi − lo)/b⌋), None if b > hi − lo.

    It is the distance to a data set where the upper bound L̃S(m) = (hi − lo)/max(m, 1) on the
    mean's local sensitivity reaches b (docs §6: L̃S ≥ LS; the smallest reachable size is n − k).
    """
    span = Fraction(upper) - Fraction(lower)
    if bound > span:
        return None
    return max(0, n - math.floor(span / bound))


# --------------------------------------------------------------------------------- one bound


@dataclass(frozen=True)
class PTRCalibration:
    """The public numbers of one PTR release: ε split evenly between test and release.

    ``threshold`` is T for the test at ε/2 and δ; ``cap`` is C, the distance's public cap
    (:func:`distance_cap`); ``mechanism`` adds Laplace(b/(ε/2)) exactly; ``test_bound`` is b
    rounded down to a float, for comparing float gaps (so a gap that passes as < test_bound is
    < b exactly).

    Guarantee of a release made with it: (ε, δ)-DP for add/remove one person (seed
    ``lecture-ptr-lln-stability.txt``, Proposition 15.5; module docstring).
    """

    epsilon: Fraction
    delta: Fraction
    bound: Fraction
    threshold: int
    cap: int
    test_bound: float
    mechanism: LaplaceMechanism = field(repr=False)

    @classmethod
    def build(cls, epsilon: Rational, delta: Rational, bound: Rational) -> PTRCalibration:
        eps, d = check_epsilon(epsilon), check_delta(delta)
        b = as_fraction(bound, "bound")
        if b <= 0:
            raise ValueError(
                f"bound must be positive, got {bound!r}: it is the proposed bound on the local "
                "sensitivity (or use LadderPTR, which needs none)"
            )
        half = eps / 2
        mechanism = LaplaceMechanism(float_up(b), float_down(half))  # more noise, never less
        threshold = distance_threshold(half, d)
        cap = distance_cap(threshold, half)
        return cls(eps, d, b, threshold, cap, float_down(b), mechanism)

    def finish(self, distance: int | None, value: float | Fraction, rng: KeyedRng) -> float | None:
        """Test min(D, C), then release or ⊥; the test's noise is drawn first, from the same
        stream."""
        if not passes_test(capped(distance, self.cap), self.epsilon / 2, self.threshold, rng):
            return None
        return self.mechanism.release(value, rng)

    def to_manifest(self) -> dict[str, object]:
        return {
            "bound": float(self.bound),
            "epsilon_test": float(self.epsilon / 2),
            "epsilon_release": float(self.epsilon / 2),
            "threshold": self.threshold,
            "distance_cap": self.cap,
            "guarantee": ApproxDP(self.epsilon, self.delta).to_manifest(),
        }


def _set_common(obj: object, lower: float, upper: float, cal: PTRCalibration) -> None:
    for name, v in (("lower", lower), ("upper", upper), ("calibration", cal)):
        object.__setattr__(obj, name, v)
    for name in ("bound", "epsilon", "delta"):
        object.__setattr__(obj, name, getattr(cal, name))


@dataclass(frozen=True, init=False)
class PTRQuantile:
    """PTR for the q-quantile (median: q = 1/2) of per-person values clamped to [lower, upper].

    Guarantee: (ε, δ)-DP for add/remove one person, ε split evenly between the test and the
    Laplace(b/(ε/2)) release (module docstring; distance: docs/local_sensitivity.md §6).
    ``release`` returns None (⊥) when the test fails. It reads the gaps of cost < C only, so the
    release on ``QuantileWindow.for_reach(n, q, reach)``'s values is the release on all values,
    bit for bit (:mod:`.quantile_window`).
    """

    q: Fraction
    lower: float
    upper: float
    bound: Fraction
    epsilon: Fraction
    delta: Fraction
    calibration: PTRCalibration = field(repr=False)

    def __init__(
        self,
        q: Rational,
        lower: float,
        upper: float,
        *,
        bound: Rational,
        epsilon: Rational,
        delta: Rational,
    ) -> None:
        lo, hi = check_bounds(lower, upper)
        cal = PTRCalibration.build(epsilon, delta, bound)
        object.__setattr__(self, "q", as_quantile(q))
        _set_common(self, lo, hi, cal)

    @property
    def guarantee(self) -> ApproxDP:
        return ApproxDP(self.epsilon, self.delta)

    @property
    def reach(self) -> int:
        """The largest gap cost the capped test reads: C − 1 (a distance ≥ C counts as C)."""
        return self.calibration.cap - 1

    def distance(self, xs: np.ndarray) -> int | None:
        """D(x, b), uncapped (not private)."""
        b = self.calibration.test_bound
        return distance_to_sensitivity(xs, q=self.q, lower=self.lower, upper=self.upper, bound=b)

    def release(self, values: ArrayLike, rng: KeyedRng) -> float | None:
        xs = sorted_clamped(values, self.lower, self.upper)
        value = quantile_of_sorted(xs, self.q, self.lower)
        return self.calibration.finish(self.distance(xs), value, rng)

    def to_manifest(self) -> dict[str, object]:
        return {
            "mechanism": "propose_test_release",
            "statistic": "median" if self.q == Fraction(1, 2) else "quantile",
            "q": str(self.q),
            "bounds": [self.lower, self.upper],
            "neighbouring": "add/remove one person",
            **self.calibration.to_manifest(),
        }


@dataclass(frozen=True, init=False)
class PTRMean:
    """PTR for the mean of per-person values clamped to [lower, upper] ((lo + hi)/2 if none).

    Guarantee: (ε, δ)-DP for add/remove one person as :class:`PTRQuantile`; the distance uses the
    bound (hi − lo)/max(n, 1) on the mean's local sensitivity, so the test asks, noisily, whether
    n ≥ (hi − lo)/b + T (docs/local_sensitivity.md §6).
    """

    lower: float
    upper: float
    bound: Fraction
    epsilon: Fraction
    delta: Fraction
    calibration: PTRCalibration = field(repr=False)

    def __init__(
        self, lower: float, upper: float, *, bound: Rational, epsilon: Rational, delta: Rational
    ) -> None:
        lo, hi = check_bounds(lower, upper)
        _set_common(self, lo, hi, PTRCalibration.build(epsilon, delta, bound))

    @property
    def guarantee(self) -> ApproxDP:
        return ApproxDP(self.epsilon, self.delta)

    def release(self, values: ArrayLike, rng: KeyedRng) -> float | None:
        return self.release_sum(ClampedSum.of(values, self.lower, self.upper), rng)

    def release_sum(self, clamped: ClampedSum, rng: KeyedRng) -> float | None:
        """The release from the count and exact clamped sum alone (all it reads): a Beam
        pipeline combines those instead of gathering the values."""
        d = mean_distance(clamped.count, self.lower, self.upper, self.bound)
        return self.calibration.finish(d, clamped.mean(self.lower, self.upper), rng)

    def to_manifest(self) -> dict[str, object]:
        return {
            "mechanism": "propose_test_release",
            "statistic": "mean",
            "bounds": [self.lower, self.upper],
            "neighbouring": "add/remove one person",
            **self.calibration.to_manifest(),
        }
