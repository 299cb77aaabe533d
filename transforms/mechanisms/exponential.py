"""The exponential mechanism over a finite candidate set, sampled exactly.

Sampling index i with probability ∝ m_i·exp(−q_i) for rational q_i is done exactly, with no
floating-point weights:

* every weight is bracketed, w_i ∈ [lo_i, hi_i], at P decimal digits using :mod:`decimal`, whose
  ``exp`` is correctly rounded (so one step outward with ``next_minus``/``next_plus`` gives a
  rigorous bound), with the exponent itself rounded outward first;
* cumulative sums are accumulated with directed rounding (floor for lower, ceiling for upper);
* a uniform U ∈ [0, 1) is drawn lazily as a dyadic interval [a/2^b, (a+1)/2^b) from the keyed
  stream, and the index i is returned only when the whole interval U·W provably lies in the i-th
  cumulative cell, checked in exact rational arithmetic; otherwise b and P grow and it tries again.

This is inverse-CDF sampling with certified comparisons, so the returned index has exactly the
target distribution (a comparison is undecided with probability about n·10^−P, and each retry
halves nothing it already decided). Cost: O(n) correctly rounded exps at 30 digits per draw.

Far candidates are never bracketed. A weight e^(−q) with q ~ 10^7 is a decimal with an exponent
of ~10^7 and, as an exact rational, an integer of millions of digits: bracketing it cost seconds
to hours, growing with q — and exponents grow with the data (the clamp choice's utility is a
person count), so the cost of a draw would depend on the data. Candidates with q_i above a
threshold T are drawn by rejection instead (:func:`_sample_with_far_block`); the law is still
exactly the target, and the cost no longer depends on how far the far candidates are.

The piecewise-constant variant for the shifted inverse mechanism (intervals of many outputs sharing
one score) is the same call with the multiplicities m_i set to the interval sizes.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Context, Decimal
from fractions import Fraction
from functools import lru_cache

from .checks import as_fraction
from .discrete import bernoulli_exp_neg
from .rng import KeyedRng

_START_DIGITS = 30
_START_BITS = 128
_MAX_ROUNDS = 12
_EXP_RANGE = 10**9  # decimal exponent range: weights down to exp(−10^9) stay representable
TAIL = Fraction(80)
"""Exponents above this (above the smallest) are drawn by rejection, with T raised by the
multiplicities' size so that the far block's bound M·e^(−T) stays below e^(−80)·2^48 < 10^-20."""
_TAIL_FREE_BITS = 48


def tail_for(total_multiplicity: int) -> Fraction:
    """T for candidates of this total multiplicity (:data:`TAIL`, raised by its bits past 48)."""
    return TAIL + max(0, total_multiplicity.bit_length() - _TAIL_FREE_BITS)


@lru_cache(maxsize=16)
def _contexts(digits: int) -> tuple[Context, Context, Context]:
    """(nearest, floor, ceiling) contexts at ``digits`` significant digits."""
    return tuple(  # type: ignore[return-value]
        Context(prec=digits, rounding=r, Emin=-_EXP_RANGE, Emax=_EXP_RANGE)
        for r in (ROUND_HALF_EVEN, ROUND_FLOOR, ROUND_CEILING)
    )


def _to_decimal(q: Fraction, ctx: Context) -> Decimal:
    return ctx.divide(Decimal(q.numerator), Decimal(q.denominator))


@lru_cache(maxsize=8)
def _cumulative_bounds(
    exponents: tuple[Fraction, ...], multiplicities: tuple[int, ...], digits: int
) -> tuple[list[Fraction], list[Fraction]]:
    """Rigorous lower and upper cumulative sums of m_i·exp(−q_i) at ``digits`` digits.

    They depend only on the public-parameterised weights, never on the randomness, so repeated
    draws over one candidate set (audits, vectors of selections) reuse them.
    """
    near, floor_ctx, ceil_ctx = _contexts(digits)
    c_lo: list[Fraction] = []
    c_hi: list[Fraction] = []
    s_lo = s_hi = Decimal(0)
    for m, q in zip(multiplicities, exponents, strict=True):
        # exp is decreasing and correctly rounded (error ≤ ½ ulp): exponent rounded outward,
        # then one more ulp outward, bounds the true weight rigorously.
        # −q is negated exactly (a Fraction) before it is rounded: a Decimal's unary minus
        # rounds in the caller's ambient context (28 digits by default, or fewer), which made
        # the bracket miss e^(−q) by up to 5e−27 relative — and by 5e−5 under prec = 6
        e_lo = near.next_minus(near.exp(_to_decimal(-q, floor_ctx)))
        e_hi = near.next_plus(near.exp(_to_decimal(-q, ceil_ctx)))
        if m != 1:
            e_lo = floor_ctx.multiply(e_lo, Decimal(m))
            e_hi = ceil_ctx.multiply(e_hi, Decimal(m))
        s_lo = floor_ctx.add(s_lo, e_lo)
        s_hi = ceil_ctx.add(s_hi, e_hi)
        c_lo.append(Fraction(s_lo))  # exact: a decimal is a rational
        c_hi.append(Fraction(s_hi))
    return c_lo, c_hi


def _locate(c_lo: list[Fraction], c_hi: list[Fraction], a: int, bits: int) -> int | None:
    """The cell holding U·W for U ∈ [a/2^b, (a+1)/2^b), or None if the bounds cannot decide.

    U·W lies in [t_lo, t_hi) with t_lo = a·W_lo/2^b and t_hi = (a+1)·W_hi/2^b. The first cell
    whose lower cumulative bound reaches t_hi holds U·W if the previous cell's upper bound is at
    most t_lo. Comparisons are exact, done on integers by cross-multiplication (c < t_hi ⇔
    c.num·2^b·W_hi.den < (a+1)·W_hi.num·c.den), since Fraction arithmetic dominated the cost.
    """
    w_lo, w_hi = c_lo[-1], c_hi[-1]
    hi_num, hi_den = (a + 1) * w_hi.numerator, w_hi.denominator << bits
    left, right = 0, len(c_lo)
    while left < right:  # bisect_left(c_lo, t_hi)
        mid = (left + right) // 2
        c = c_lo[mid]
        if c.numerator * hi_den < hi_num * c.denominator:
            left = mid + 1
        else:
            right = mid
    if left == len(c_lo):
        return None
    if left == 0:
        return 0
    prev = c_hi[left - 1]  # need prev ≤ t_lo = a·W_lo/2^b
    if prev.numerator * (w_lo.denominator << bits) <= a * w_lo.numerator * prev.denominator:
        return left
    return None


def _checked_multiplicities(n: int, multiplicities: Sequence[int] | None) -> tuple[int, ...]:
    """The multiplicities of n ≥ 1 candidates (default all 1), checked."""
    if n == 0:
        raise ValueError("the exponential mechanism needs at least one candidate")
    mult = (1,) * n if multiplicities is None else tuple(multiplicities)
    if len(mult) != n:
        raise ValueError(f"got {len(mult)} multiplicities for {n} candidates")
    if any(isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in mult):
        raise ValueError("multiplicities must be positive integers")
    return mult


def sample_exp_weights(
    rng: KeyedRng, exponents: Sequence[Fraction], multiplicities: Sequence[int] | None = None
) -> int:
    """Index i with probability m_i·exp(−q_i) / Σ_j m_j·exp(−q_j), exactly.

    Args:
      rng: the keyed stream for this release.
      exponents: rational q_i (any sign; they are shifted so the smallest is 0).
      multiplicities: positive integers m_i (default all 1), e.g. sizes of output intervals.
    """
    n = len(exponents)
    mult = _checked_multiplicities(n, multiplicities)
    if n == 1:
        return 0
    shift = min(exponents)
    qs = tuple(q - shift for q in exponents) if shift else tuple(exponents)
    # T grows with log2 of the total multiplicity, so the far block's upper bound M·e^(−T) is
    # below 2^48·e^(−80) < 10^-20 of the near weight (which holds the q = 0 candidate, ≥ 1)
    tail = tail_for(sum(mult))
    if max(qs) <= tail:
        return _sample_near(rng, qs, mult)
    return _sample_with_far_block(rng, qs, mult, tail)


def _sample_with_far_block(
    rng: KeyedRng, qs: tuple[Fraction, ...], mult: tuple[int, ...], tail: Fraction
) -> int:
    """Index i with probability ∝ m_i·e^(−q_i), exactly, without bracketing far weights.

    The candidates with q_i > T together enter the exact draw as one candidate of weight
    M·e^(−T) (M: their total multiplicity), an upper bound of their true weight. When that block
    is drawn, a far candidate j is picked with probability ∝ m_j and kept with probability
    e^(−(q_j − T)) (exact, ``bernoulli_exp_neg``, O(1) expected steps however large q_j);
    otherwise the whole draw starts again. Each attempt returns i with probability ∝ m_i·e^(−q_i)
    (near: directly; far: M·e^(−T)·(m_j/M)·e^(−(q_j − T))), so, conditioned on returning, the
    law is exactly the target. A restart needs the far block drawn, probability < 10^-20.
    """
    near = [i for i, q in enumerate(qs) if q <= tail]
    far = [i for i, q in enumerate(qs) if q > tail]
    return _draw_with_far_block(rng, near, far, exponent=qs.__getitem__, mult=mult, tail=tail)


def _draw_with_far_block(
    rng: KeyedRng,
    near: list[int],
    far: list[int],
    *,
    exponent: Callable[[int], Fraction],
    mult: Sequence[int],
    tail: Fraction,
) -> int:
    """:func:`sample_near_or_far` over a precomputed split: ``near`` (q_i ≤ T) and ``far``
    (q_i > T), candidate indices with multiplicities; a far draw u (by multiplicity) is the far
    candidate whose multiplicities cover it. ``exponent(i)`` gives q_i; it is asked for every
    near candidate and, of the far ones, only for the candidates a rejection step tests."""
    ends = list(itertools.accumulate(mult[i] for i in far))  # far draws below each end

    def far_candidate(u: int) -> int:
        return far[bisect.bisect_right(ends, u)]

    t = sample_near_or_far(
        rng,
        [exponent(i) for i in near],
        [mult[i] for i in near],
        ends[-1] if ends else 0,
        far_exponent=lambda u: exponent(far_candidate(u)),
        tail=tail,
    )
    return near[t] if t < len(near) else far_candidate(t - len(near))


def sample_near_or_far(
    rng: KeyedRng,
    near: Sequence[Fraction],
    multiplicities: Sequence[int],
    far: int,
    *,
    far_exponent: Callable[[int], Fraction],
    tail: Fraction,
) -> int:
    """An index t < len(near) with probability ∝ multiplicities[t]·e^(−near[t]), or
    len(near) + u for one of ``far`` further candidates u with probability ∝
    e^(−far_exponent(u)) — exactly, for candidates too many to list (``split_quantile``).

    Every near exponent must be in [0, ``tail``] and every far one above it: the far block is
    drawn as one candidate of exponent ``tail`` and multiplicity ``far``, then a uniform far u
    is accepted with probability e^(−(q_u − tail)), so
    P(u) ∝ e^(−tail)·e^(−(q_u − tail)) = e^(−q_u). ``far_exponent`` is asked only for the
    candidates a rejection step tests.
    """
    mult = _checked_multiplicities(len(near), multiplicities)
    if not near or any(not 0 <= q <= tail for q in near):
        raise ValueError("near exponents must be in [0, tail], and at least one")
    if far == 0:
        return _sample_near(rng, tuple(near), mult)
    qs, ms = (*near, tail), (*mult, far)
    while True:
        t = _sample_near(rng, qs, ms)
        if t < len(near):
            return t
        u = rng.randbelow(far)
        q = far_exponent(u)
        if q <= tail:
            raise ValueError(f"far candidate {u} has exponent {q} ≤ tail {tail}")
        if bernoulli_exp_neg(rng, q - tail):
            return len(near) + u


def sample_exp_weights_of_int_scores(
    rng: KeyedRng, scores: Sequence[int], factor: Fraction, multiplicities: Sequence[int]
) -> int:
    """``sample_exp_weights(rng, [factor·(max u − u_i)], multiplicities)`` for integer scores u_i
    and a rational factor > 0 — the same draws from the same stream, index for index — without
    building a Fraction per candidate: the near/far split is an integer comparison of the gap
    max u − u_i with ⌊T/factor⌋ (factor·g ≤ T ⇔ g ≤ ⌊T/factor⌋ for integer g), and Fractions are
    made only for the near candidates (a few hundred) and for a far candidate a rejection tests.
    The smallest exponent is 0 (the top score's), so no shift is applied, as in the general path.
    """
    n = len(scores)
    mult = _checked_multiplicities(n, multiplicities)
    # Python ints only: a NumPy integer times a Fraction is a float, and its gaps could wrap
    if any(type(u) is not int for u in scores):
        raise TypeError("scores must be Python ints")
    if not isinstance(factor, Fraction) or factor <= 0:
        raise ValueError(f"factor must be a positive Fraction, got {factor!r}")
    if n == 1:
        return 0
    top = max(scores)
    gaps = [top - u for u in scores]
    tail = tail_for(sum(mult))
    cut = math.floor(tail / factor)  # g ≤ cut ⇔ factor·g ≤ tail
    if max(gaps) <= cut:
        return _sample_near(rng, tuple(factor * g for g in gaps), mult)
    near = [i for i, g in enumerate(gaps) if g <= cut]
    far = [i for i, g in enumerate(gaps) if g > cut]
    return _draw_with_far_block(
        rng, near, far, exponent=lambda j: factor * gaps[j], mult=mult, tail=tail
    )


def _sample_near(rng: KeyedRng, qs: tuple[Fraction, ...], mult: tuple[int, ...]) -> int:
    """Inverse-CDF sampling with certified comparisons (module docstring); every q_i ≥ 0 and
    small enough (≤ T plus the multiplicities' bits) to bracket at 30 digits."""
    digits, bits = _START_DIGITS, _START_BITS
    a = rng.randbits(bits)
    for _ in range(_MAX_ROUNDS):
        c_lo, c_hi = _cumulative_bounds(qs, mult, digits)
        i = _locate(c_lo, c_hi, a, bits)
        if i is not None:
            return i
        # Undecided: refine the uniform by 64 more bits and double the precision.
        a = (a << 64) | rng.randbits(64)
        bits += 64
        digits *= 2
    raise RuntimeError(  # probability below 10^-(30·2^11): a bug, not bad luck
        "exponential mechanism sampling did not converge; this is a bug in userdp"
    )


@lru_cache(maxsize=8)
def _exponents(
    scores: tuple[float, ...], epsilon: float, sensitivity: float, monotone: bool
) -> tuple[Fraction, ...]:
    for i, u in enumerate(scores):
        if isinstance(u, float) and not math.isfinite(u):
            raise ValueError(f"score {i} is {u!r}; scores must be finite")
    us = [as_fraction(u, f"score {i}") for i, u in enumerate(scores)]
    top = max(us)
    factor = exponent_factor(epsilon, sensitivity, monotone)
    return tuple(factor * (top - u) for u in us)


def exponent_factor(epsilon: float, sensitivity: float, monotone: bool) -> Fraction:
    """ε/(c·Δ), c = 1 if monotone else 2: exponent q_i = factor·(max u − u_i), exactly."""
    return Fraction(epsilon) / (Fraction(sensitivity) * (1 if monotone else 2))


@dataclass(frozen=True)
class ExponentialMechanism:
    """Selects one of finitely many candidates with probability ∝ exp(ε·u/(2Δ)).

    Guarantee: pure ε-DP for add/remove one person, provided the candidate set does not depend on
    the data and no candidate's score changes by more than ``sensitivity`` (Δ) between neighbouring
    data sets (McSherry & Talwar, FOCS 2007; Dwork & Roth 2014, Theorem 3.10). With
    ``monotone=True`` the weights are exp(ε·u/Δ): still ε-DP when, for every pair of neighbours,
    all scores move in the same direction (Dwork & Roth 2014, remark after Theorem 3.10), as for
    counts of persons. Sampling is exact (:func:`sample_exp_weights`).
    """

    epsilon: float
    sensitivity: float
    monotone: bool = False

    def __post_init__(self) -> None:
        eps = as_fraction(self.epsilon, "epsilon")
        if eps <= 0:
            raise ValueError(f"epsilon must be positive, got {self.epsilon!r}")
        delta = as_fraction(self.sensitivity, "sensitivity")
        if delta <= 0:
            raise ValueError(
                f"sensitivity must be positive, got {self.sensitivity!r}: it is the most one "
                "person can change any candidate's score"
            )

    def exponents(self, scores: Sequence[float]) -> tuple[Fraction, ...]:
        """q_i = ε·(max u − u_i)/(c·Δ), c = 1 if monotone else 2, as exact rationals."""
        return _exponents(tuple(scores), self.epsilon, self.sensitivity, self.monotone)

    def select(self, scores: Sequence[float], rng: KeyedRng) -> int:
        """The index of the selected candidate."""
        if len(scores) == 0:
            raise ValueError("the exponential mechanism needs at least one candidate")
        return sample_exp_weights(rng, self.exponents(scores))


def exponential_mechanism(
    scores: Sequence[float],
    *,
    epsilon: float,
    sensitivity: float,
    rng: KeyedRng,
    monotone: bool = False,
) -> int:
    """One selection through :class:`ExponentialMechanism` (pure ε-DP; see there)."""
    return ExponentialMechanism(epsilon, sensitivity, monotone).select(scores, rng)
