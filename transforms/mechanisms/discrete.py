"""Exact samplers on the integers, driven only by a :class:`~.rng.KeyedRng`.

The algorithms are those of Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential
Privacy" (NeurIPS 2020), Algorithms 1–3: every probability they use is either a rational number
(sampled as ``randbelow(den) < num``) or exp(−γ) for a rational γ (sampled by Algorithm 1 with
rational Bernoulli trials only). No floating-point number is involved, so the output distribution is
exactly the stated one — the property that rules out the floating-point attacks on textbook
Laplace noise (Mironov, CCS 2012).

Parameters are exact rationals: pass ``int`` or :class:`fractions.Fraction`; a ``float`` is
converted with ``Fraction(x)``, which is exact (every finite float is a dyadic rational).

The hot paths work on integer numerator/denominator pairs, not ``Fraction`` objects, because the
benchmark target (≥ 10^5 discrete Laplace draws per second on one core) leaves no room for
``Fraction``'s gcd on every operation.
"""

from __future__ import annotations

import math
from fractions import Fraction
from math import isqrt

from .checks import Rational, as_fraction, positive
from .rng import KeyedRng


def _ratio(f: Fraction) -> tuple[int, int]:
    return f.numerator, f.denominator


def _bern_exp_neg_le1(rng: KeyedRng, num: int, den: int) -> bool:
    """Bernoulli(exp(−num/den)) for 0 ≤ num ≤ den (CKS Algorithm 1, first branch).

    Draw Bernoulli(γ/1), Bernoulli(γ/2), … until the first failure at trial K; K is odd with
    probability exactly Σ_k (−γ)^k / k! = exp(−γ).
    """
    k = 2 if num == den else 1  # γ = 1: the first trial, Bernoulli(1), always succeeds
    randbelow = rng.randbelow
    while randbelow(den * k) < num:
        k += 1
    return bool(k & 1)


def _bern_exp_neg(rng: KeyedRng, num: int, den: int) -> bool:
    """Bernoulli(exp(−num/den)) for any num ≥ 0: exp(−γ) = exp(−1)^⌊γ⌋ · exp(−(γ − ⌊γ⌋))."""
    while num > den:
        if not _bern_exp_neg_le1(rng, 1, 1):
            return False
        num -= den
    return _bern_exp_neg_le1(rng, num, den)


def bernoulli_rational(rng: KeyedRng, p: Rational) -> bool:
    """Bernoulli(p) for a rational p in [0, 1], exactly."""
    f = as_fraction(p, "p")
    if not 0 <= f <= 1:
        raise ValueError(f"p must lie in [0, 1], got {p!r}")
    return rng.randbelow(f.denominator) < f.numerator


def bernoulli_exp_neg(rng: KeyedRng, gamma: Rational) -> bool:
    """Bernoulli(exp(−γ)) for a rational γ ≥ 0, exactly (CKS Algorithm 1)."""
    f = as_fraction(gamma, "gamma")
    if f < 0:
        raise ValueError(f"gamma must be non-negative, got {gamma!r}")
    return _bern_exp_neg(rng, f.numerator, f.denominator)


def _geometric_exp(rng: KeyedRng, s: int, t: int) -> int:
    """Y ≥ 0 with P(Y = y) ∝ exp(−y·s/t) (the inner loop of CKS Algorithm 2).

    U uniform on [0, t) accepted with probability exp(−U/t), plus t·V for V with P(V = v) ∝ e^−v,
    gives X with P(X = x) ∝ exp(−x/t) on all of ℕ; then ⌊X/s⌋ has ratio exp(−s/t).
    """
    randbelow = rng.randbelow
    while True:
        u = randbelow(t)
        if _bern_exp_neg_le1(rng, u, t):
            break
    v = 0
    while _bern_exp_neg_le1(rng, 1, 1):
        v += 1
    return (u + t * v) // s


def geometric_exp(rng: KeyedRng, rate: Rational) -> int:
    """The geometric distribution on {0, 1, 2, …} with P(G = k) = (1 − e^−r)·e^(−k·r), r = rate.

    This is the number of failures before the first success with success probability 1 − e^−r,
    parameterised by the rate r > 0 so that it stays exact (CKS Algorithm 2's inner loop).
    """
    s, t = _ratio(positive(rate, "rate"))
    return _geometric_exp(rng, s, t)


def discrete_laplace(rng: KeyedRng, scale: Rational) -> int:
    """X ∈ ℤ with P(X = x) ∝ exp(−|x|/scale) for a rational scale > 0 (CKS Algorithm 2).

    Adding it to an integer statistic of L1 sensitivity Δ with scale = Δ/ε is ε-DP (CKS 2020,
    Fact 1; the discrete analogue of Dwork–McSherry–Nissim–Smith 2006, seed
    ``calibrating-noise-dmns06.txt``).
    """
    t, s = _ratio(positive(scale, "scale"))  # scale = t/s, so the rate is s/t
    randbits = rng.randbits
    while True:
        y = _geometric_exp(rng, s, t)
        negative = randbits(1)
        if negative and y == 0:  # reject −0 so that 0 is not counted twice
            continue
        return -y if negative else y


def discrete_laplace_std(scale: Rational) -> float:
    """Standard deviation of :func:`discrete_laplace` at ``scale``: √(2q)/(1 − q), q = e^(−1/scale).

    ``-expm1`` keeps 1 − q accurate when the scale is large (q → 1).
    """
    rate = 1.0 / float(as_fraction(scale, "scale"))
    return math.sqrt(2.0 * math.exp(-rate)) / -math.expm1(-rate)


def discrete_laplace_error95(scale: Rational) -> int:
    """The 95% error of :func:`discrete_laplace` at ``scale``: the least integer m with
    P(|X| > m) = 2q^(m+1)/(1 + q) ≤ 0.05, q = e^(−1/scale). The noise is an integer, so the
    continuous b·ln 20 overstates what it covers at small scales (at scale 2 it is ±5.99, which
    is ±5: 93.8%)."""
    rate = 1.0 / float(as_fraction(scale, "scale"))
    q = math.exp(-rate)

    def tail(m: int) -> float:  # P(|X| > m)
        return 2.0 * math.exp(-rate * (m + 1)) / (1.0 + q)

    m = max(0, math.ceil(math.log(0.025 * (1.0 + q)) / -rate) - 1)
    while m > 0 and tail(m - 1) <= 0.05:
        m -= 1
    while tail(m) > 0.05:
        m += 1
    return m


def discrete_gaussian(rng: KeyedRng, sigma2: Rational) -> int:
    """X ∈ ℤ with P(X = x) ∝ exp(−x²/(2σ²)) for a rational variance parameter σ² > 0.

    CKS Algorithm 3: propose discrete Laplace with scale t = ⌊σ⌋ + 1 and accept with probability
    exp(−(|Y| − σ²/t)² / (2σ²)). Adding it to an integer statistic of L2 sensitivity Δ is
    (Δ²/(2σ²))-zCDP (CKS 2020, Theorem 4), exactly as for the continuous Gaussian.
    """
    n, d = _ratio(positive(sigma2, "sigma2"))
    t = isqrt(n // d) + 1  # ⌊√(n/d)⌋ = isqrt(⌊n/d⌋)
    two_t2_nd = 2 * t * t * n * d
    randbits = rng.randbits
    while True:
        y = _geometric_exp(rng, 1, t)
        negative = randbits(1)
        if negative and y == 0:
            continue
        # γ = (|y| − σ²/t)² / (2σ²) = (|y|·t·d − n)² / (2·t²·n·d)
        gap = y * t * d - n
        if _bern_exp_neg(rng, gap * gap, two_t2_nd):
            return -y if negative else y
