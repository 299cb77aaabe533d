"""Heavy-tailed noise for smooth sensitivity, sampled in log space, and its safe release.

Two noise families, both driven only by a :class:`~.rng.KeyedRng`:

* **Cauchy-type**, density h(z) = 1/(C_γ·(1 + |z|^γ)) on ℝ for γ > 1, C_γ = 2π/(γ·sin(π/γ)).
  Nissim, Raskhodnikova and Smith (STOC 2007; seed ``smooth-sensitivity-nrs07.txt``): if S is a
  β-smooth upper bound on the local sensitivity of f with β ≤ ε/(2(γ+1)), then
  x ↦ f(x) + (2(γ+1)·S(x)/ε)·Z is ε-differentially private (pure, δ = 0).
* **Laplace-log-normal** LLN(σ): Z = X·e^{σY} with X ~ Laplace(1) (density e^{−|x|}/2) and
  Y ~ N(0, 1) independent, σ > 0. Bun and Steinke, "Average-Case Averages: Private Algorithms
  for Smooth Sensitivity and Mean Estimation" (NeurIPS 2019): f(x) + (S(x)/s)·Z is ½ε²-zCDP
  for a t-smooth bound S, with ε = t/σ + e^{3σ²/2}·s as we read their LLN theorem (the
  mechanism that uses it must cite and check the exact statement).

The neighbouring relation for those guarantees is userdp's: data sets differ by adding or
removing all rows of one person, and S must be smooth with respect to that relation. Choosing
S, β and the scale is the mechanism's job; this module only samples Z and releases
``value + scale·Z``.

Log space. A sample is a :class:`LogNoise` (sign, log|z|): Cauchy-type tails reach |z| = e^700
with positive probability (γ near 1), so |z| is never formed as a float.
:func:`release_heavy_tailed` adds ``scale·z`` to the value in log space, clamps to the declared
range without forming astronomically large floats, and snaps to a power-of-two grid.

Residual floating-point risk — these samplers are **not** exact, unlike :mod:`.discrete`:

* What a release resolves is |z| *relative to itself* (a cell spans ≥ 2^−21 of the noise,
  below), at every magnitude: smooth sensitivity at small ε reads |z| ~ 2^−17 in cells of
  2^−38. So every value of z comes from *fine* uniforms 2^−K·V (:func:`fine_open01`), K exactly
  geometric (leading zero bits of the stream) and V a 51-bit midpoint uniform on (1/2, 1): ~2^−52
  relative resolution from 1 down to 2^−1000. Exponentials are E = K·ln 2 − ln(1 − W), W a fine
  uniform on (0, 1/2), so E keeps it near 0 as well as in the tail (a plain −ln U leaves the far
  tail on a few hundred coarse points). Plain midpoint uniforms (2m+1)/2^53
  (``KeyedRng.uniform_open01``) only pick branches and accept proposals, where what matters is a
  probability's absolute error (2^−53). Until stop 36 the Cauchy body's t and E near 0 were
  plain uniforms, with absolute spacing 2^−52: at ε = 3.8·10^−5 a cell near the value held
  ~2^14 of them, and the measured privacy loss was 1.6·ε (a review's finding; the test
  ``test_cells_near_the_value_hold_enough_draws`` counts them).
* log, exp, pow and ``NormalDist.inv_cdf`` come from the platform's libm and CPython: accurate
  to a few ulp, not correctly rounded. The sampled law is therefore a discrete law on floats
  whose probabilities of intervals wider than its resolution deviate from the ideal density's
  by a relative error of order 2^−50 (order |log|z||·2^−52 when |z| is huge); in the extreme
  tails it differs outright: the 2^−1000 cut leaves no mass beyond |z| = e^(693/(γ−1))
  (Cauchy-type; ideal mass there < 2^−1000) or |Y| ≈ 37.3 (LLN), and none below |z| ≈ 2^−1001
  (no cell is that narrow in z: a cell is ≥ 2^−20 of the span, and smooth sensitivity's noise
  scale at most 2(γ+1)/ε spans with ε ≥ 2^−16, so a cell is ≥ ~2^−37/(γ+1) wide in z).
* The float sum value + scale·z leaks low-order bits in general (Mironov, CCS 2012, recovered
  inputs from textbook Laplace noise this way). Snapping the sum to a power-of-two grid
  (2^−20 of the scale, coarser in proportion where |x| is larger) and clamping are
  post-processing that remove those bits. What is left is how far a released cell's
  probability is from the ideal mechanism's (exact noise, then the same snap and clamp). The
  noise is formed as (scale/2)·e^(log|z|) (a few ulp relative) and added to the value with one
  rounding; with |value| ≲ scale (smooth sensitivity centres it: |value| ≤ scale/2) and the
  noise below the gap to the bound (≤ 2·scale; beyond it the release is the bound), each moves
  a cell's boundaries by ~2^−51 of the scale, 2^−31 of a cell; and a cell spans a relative
  2^−20·scale/|noise| ≥ 2^−21 of the noise, so ≥ 2^30 of the floats log|z| takes. So a cell's
  probability is the ideal one to a relative error of order 2^−30 — measured at most 2^−32
  at value offsets 0 and −0.3 of the scale and bounds from [0, 1] to ±8e307
  (``tests/mechanisms/test_heavy_tailed_cells.py``): an ε slack of about twice that, 2^−29,
  which the Cauchy and Laplace smooth-sensitivity noises set aside (``FLOAT_SLACK`` = 2^−26 in
  :mod:`.smooth_sensitivity`; the LLN noise sets aside ρ by ``zcdp_float_slack``). (Until
  stop 33 the noise was exp(ln scale + log|z|), whose rounding grows with ln scale, and the grid
  2^−30 of the scale: up to 2^−15 for bounds ±8e307.) A value far from zero relative to the
  scale (not how smooth sensitivity calls this) weakens the argument near zero, where a large
  noise nearly cancels it.
* Rejection counts depend only on the random stream, never on the data.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import NamedTuple

from .checks import finite_real, positive_real
from .rng import KeyedRng

GRID_BITS = 20
"""The release grid is 2^−GRID_BITS of the scale (and of |result|), rounded down to 2^k: coarse
enough that a cell spans ≥ 2^30 float sums, so float rounding moves a cell's probability by
≲ 2^−28 of itself (module docstring), and fine enough to cost nothing (a release moves by
≤ 2^−21 of the scale; the smooth-sensitivity noise is ≥ 2^−20 of it, times 2(γ+1)/ε)."""

_MIN_NORMAL_EXP = -1022  # 2^−1022, the smallest normal float: the grid never goes below it
_MIN_NORMAL = math.ldexp(1.0, _MIN_NORMAL_EXP)
_LN2 = math.log(2.0)
_EXP_FINITE = 709.0  # exp(709) ≈ 8.2e307 is a float
_MAX_ZERO_BITS = 1000  # fine uniforms below 2^−1000 are redrawn (probability 2^−1000)
_STD_NORMAL = NormalDist()


class LogNoise(NamedTuple):
    """A noise sample z as (sign, log|z|): sign is +1 or −1; log_abs may exceed 709."""

    sign: int
    log_abs: float


def _fine_uniform(rng: KeyedRng) -> tuple[int, float]:
    """(K, V) with U = 2^−K·V uniform on (0, 1), at ~2^−51 relative resolution even near 0.

    K = the number of leading zero bits of the stream, so P(K = k) = 2^−(k+1) exactly; V =
    (2^52 + 2m + 1)/2^53 for a uniform 51-bit m, a midpoint uniform on (1/2, 1) independent of
    K. The bits below the stream's first one are still uniform, so V reuses them when 51 remain.
    Streams of more than 1000 leading zeros are redrawn (probability 2^−1000).
    """
    randbits = rng.randbits
    k = 0
    while True:
        r = randbits(64)
        if r == 0:
            k += 64
            if k > _MAX_ZERO_BITS:
                k = 0
            continue
        n = r.bit_length()
        k += 64 - n
        if k > _MAX_ZERO_BITS:
            k = 0
            continue
        m = (r >> (n - 52)) & ((1 << 51) - 1) if n >= 52 else randbits(51)
        return k, ((1 << 52) | (m << 1) | 1) * (1.0 / (1 << 53))


def fine_open01(rng: KeyedRng) -> float:
    """U uniform on (0, 1) as 2^−K·V (``_fine_uniform``): ~2^−52 relative resolution at every
    magnitude down to 2^−1000, where a plain (2m + 1)/2^53 has absolute spacing 2^−52, so near
    2^−30 only ~2^22 values per octave."""
    k, v = _fine_uniform(rng)
    return math.ldexp(v, -k)  # ≥ 2^−1001: a normal float, exact


def exponential_noise(rng: KeyedRng) -> float:
    """E ~ Exp(1) as −ln U = K·ln 2 − ln(1 − W), always > 0; ±E is Laplace(1).

    U = 2^−K·(1 − W) with K geometric (``_fine_uniform``'s leading zeros) and W uniform on
    (0, 1/2), so 1 − W is uniform on (1/2, 1) as V is. Resolution, at both ends: K reaches 1000,
    so the tail of E is not truncated at ~37 as with a 53-bit uniform; and near E = 0 (K = 0,
    E = −ln(1 − W) ≈ W) W is drawn at fine relative resolution (:func:`fine_open01`) and
    ``log1p`` keeps it, so E has ~2^−52 relative resolution there too. With −ln V instead, E
    near 0 took values on a lattice of spacing 2^−52: a smooth-sensitivity release at small ε
    reads the noise's cells near 0 so finely that a cell held only ~2^14 of them, and its
    probability was off by ~2^−14 (a review's finding; ``test_heavy_tailed_cells.py``)."""
    k, _ = _fine_uniform(rng)
    w = 0.5 * fine_open01(rng)  # exact halving: W uniform on (0, 1/2)
    return k * _LN2 - math.log1p(-w)


def _check_gamma(gamma: float) -> float:
    g = finite_real(gamma, "gamma")
    if not g > 1.0:
        raise ValueError(
            f"gamma must be a finite number > 1, got {gamma!r}: the density 1/(1+|z|^gamma) "
            "is not integrable for gamma <= 1 (larger gamma gives lighter tails)."
        )
    return g


def cauchy_type_noise(rng: KeyedRng, gamma: float) -> LogNoise:
    """Z with density h(z) = 1/(C_γ·(1 + |z|^γ)), C_γ = 2π/(γ·sin(π/γ)), as (sign, log|z|).

    Used with smooth sensitivity (NRS07): scale 2(γ+1)·S/ε with a β-smooth bound S,
    β ≤ ε/(2(γ+1)), gives ε-DP; see the module docstring for the floating-point caveats.
    """
    g = _check_gamma(gamma)
    # Rejection sampling of T = |Z| (density f(t) ∝ 1/(1 + t^γ) on t > 0), then a fair sign.
    # Envelope g(t) = min(1, t^−γ), total mass 1 + 1/(γ−1) = γ/(γ−1); as a mixture:
    #   w.p. (γ−1)/γ: T = U uniform on (0, 1);
    #   w.p. 1/γ:     T Pareto on (1, ∞) with density (γ−1)·t^−γ, i.e. ln T = E/(γ−1), E ~ Exp(1).
    # f/g = 1/(1 + t^γ) on (0, 1] and t^γ/(1 + t^γ) = 1/(1 + t^−γ) on (1, ∞): both are
    # 1/(1 + s^γ) with s = min(t, 1/t) ∈ (0, 1], so they lie in [1/2, 1]; accept with that
    # probability. Overall acceptance = ∫f/∫g = (π/(γ sin(π/γ)))·(γ−1)/γ ≥ 1/2 (0.785 at γ = 2).
    body = (g - 1.0) / g
    randbits = rng.randbits
    while True:
        if rng.uniform_open01() < body:
            # fine, not (2m + 1)/2^53: near t = 0 that lattice has spacing 2^−52, and at small ε
            # the release resolves |z| ~ 2^−17 into cells of 2^−38 (exponential_noise's note)
            t = fine_open01(rng)
            log_t = math.log(t)
            s_pow = t**g
        else:
            log_t = exponential_noise(rng) / (g - 1.0)
            s_pow = math.exp(-g * log_t)
        if rng.uniform_open01() * (1.0 + s_pow) < 1.0:
            return LogNoise(1 if randbits(1) else -1, log_t)


def laplace_log_normal_noise(rng: KeyedRng, sigma: float) -> LogNoise:
    """Z = X·e^{σY}, X ~ Laplace(1), Y ~ N(0, 1) independent (LLN(σ)), as (sign, log|z|).

    log|Z| = ln|X| + σY with |X| = E ~ Exp(1) and the sign of X. Y = ±Φ^−1(W) with W uniform on
    (0, 1/2) drawn at fine relative resolution (so Y's tails are not stair-stepped) and a fair
    sign; Φ^−1 is ``statistics.NormalDist().inv_cdf`` (Wichura's AS241, ~1e−16 relative).
    Used with smooth sensitivity for ½ε²-zCDP (Bun–Steinke 2019; module docstring).
    """
    s = positive_real(sigma, "sigma")
    e = exponential_noise(rng)
    k, v = _fine_uniform(rng)
    y = _STD_NORMAL.inv_cdf(math.ldexp(v, -k - 1))  # W = 2^−(K+1)·V, Y ≤ 0
    signs = rng.randbits(2)
    if signs & 2:
        y = -y
    return LogNoise(1 if signs & 1 else -1, math.log(e) + s * y)


def noise_to_float(noise: LogNoise) -> float:
    """sign·exp(log_abs) as a float, ±∞ beyond the float range. For tests and diagnostics."""
    if noise.log_abs > 709.0:
        return math.copysign(math.inf, noise.sign)
    return math.copysign(math.exp(noise.log_abs), noise.sign)


def cauchy_type_sample(rng: KeyedRng, gamma: float) -> float:
    """:func:`cauchy_type_noise` as a float (±∞ past the float range); for tests."""
    return noise_to_float(cauchy_type_noise(rng, gamma))


def laplace_log_normal_sample(rng: KeyedRng, sigma: float) -> float:
    """:func:`laplace_log_normal_noise` as a float; for tests."""
    return noise_to_float(laplace_log_normal_noise(rng, sigma))


def _grid_exponent(scale: float) -> int:
    _, e = math.frexp(scale)  # 2^(e−1) ≤ scale < 2^e
    return max(e - 1 - GRID_BITS, _MIN_NORMAL_EXP)


def release_grid(scale: float) -> float:
    """g = the largest power of two ≤ scale·2^−20, but never below 2^−1022 (smallest normal).

    Rounding to g moves a release by at most scale·2^−21, far below the noise.
    """
    return math.ldexp(1.0, _grid_exponent(positive_real(scale, "scale")))


def _snap(x: float, grid_exp: int) -> float:
    """x rounded (half to even) to a multiple of 2^k, k = max(grid_exp, ⌊log2|x|⌋ − 20).

    The second term keeps at most 21 significant bits when |x| is large, so a cell always holds
    many attainable sums even where the noise is far larger than the scale. Both steps are
    powers of two ≥ 2^grid_exp, so the result is a multiple of the grid g = 2^grid_exp.
    """
    _, e = math.frexp(x)
    k = max(grid_exp, e - 1 - GRID_BITS)
    q = round(math.ldexp(x, -k))  # |q| ≤ 2^21: exact
    try:
        return math.ldexp(float(q), k)
    except OverflowError:  # only when rounding up past the float maximum; the clamp follows
        return math.copysign(math.inf, x)


def _half_noise(scale: float, log_abs: float) -> float:
    """|noise|/2 = (scale/2)·e^(log|z|) as a float; +inf past the float range.

    Formed as a product, whose relative error is a few units in the last place — not as
    exp(ln scale + log|z|): rounding that sum loses up to ulp(ln scale) ≈ 2^−43 absolutely when
    the scale nears the float range, a relative error of the noise that moved release cells'
    boundaries by up to 2^−14 of a cell (module docstring, "Residual floating-point risk")."""
    try:
        if log_abs <= _EXP_FINITE and scale >= _MIN_NORMAL * 2.0:  # halving the scale is exact
            return (scale * 0.5) * math.exp(log_abs)  # +inf past the range: the bound is reached
        if log_abs <= _EXP_FINITE:  # a subnormal scale: halve the product, not the scale
            return scale * math.exp(log_abs) * 0.5
        return math.exp(math.log(scale) + log_abs - _LN2)  # e^(log|z|) overflows: a tiny scale
    except OverflowError:  # math.exp past the float range
        return math.inf


def release_heavy_tailed(
    value: float,
    *,
    scale: float,
    noise: tuple[int, float],
    lower: float,
    upper: float,
) -> float:
    """value + scale·z for a log-space noise z = (sign, log|z|), snapped and clamped.

    Steps: (1) |noise|/2 = (scale/2)·e^(log|z|) (:func:`_half_noise`); if the noise reaches
    the bound on its side, return that bound; (2) otherwise x = value + sign·|noise|, added in
    halves so nothing overflows; (3) snap x to the grid of :func:`release_grid` (coarser,
    2^−20·|x| rounded down to a power of two, when |x| is large); (4) clamp to [lower, upper].
    Steps 3–4 are post-processing; they discard the low-order bits of the float sum (module
    docstring). The result is a multiple of ``release_grid(scale)`` or one of the bounds, and
    never −0.0. ``value`` may lie outside [lower, upper]; it is not clamped before the noise.

    **The output grid is a function of** ``scale``: pass a public scale. With a data-dependent
    scale (smooth sensitivity S(x)), the grid of the output would reveal which power of two S(x)
    falls in; fold S(x) into the noise's log|z| and pass a public scale (the width of the bounds,
    say) instead, as :mod:`transforms.mechanisms.smooth_sensitivity` does.

    Args:
      value: the statistic, finite.
      scale: the noise multiplier, finite, > 0 and public (e.g. 2(γ+1)·b/ε for a public b).
      noise: (sign, log|z|) from :func:`cauchy_type_noise` or :func:`laplace_log_normal_noise`;
        log|z| = −∞ means z = 0 and +∞ sends the result to the bound.
      lower, upper: the declared output range, finite, lower < upper.
    """
    v = finite_real(value, "value")
    lo = finite_real(lower, "lower")
    hi = finite_real(upper, "upper")
    if not lo < hi:
        raise ValueError(f"lower must be < upper, got lower={lower!r}, upper={upper!r}")
    s = positive_real(scale, "scale")
    sign, log_abs = noise
    if isinstance(sign, bool) or sign not in (1, -1):
        raise ValueError(f"noise sign must be +1 or -1, got {sign!r}")
    if not isinstance(log_abs, (int, float)) or math.isnan(log_abs):
        raise ValueError(f"noise log|z| must be a float (±inf allowed), got {log_abs!r}")

    half = _half_noise(s, log_abs)
    bound = hi if sign > 0 else lo
    half_gap = (hi * 0.5 - v * 0.5) if sign > 0 else (v * 0.5 - lo * 0.5)  # no overflow
    if half_gap <= 0.0 or half >= half_gap:
        return bound + 0.0
    # |noise| < 2·half_gap: add the halves, then double (exact), so nothing overflows; the
    # bits are those of v + sign·|noise| rounded once
    x = 2.0 * (v * 0.5 + sign * half)
    if math.isfinite(x):
        x = _snap(x, _grid_exponent(s))
    return min(max(x, lo), hi) + 0.0  # + 0.0 turns −0.0 into 0.0
