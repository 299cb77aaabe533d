"""Tests of the heavy-tailed samplers and the release arithmetic.

Distribution tests draw N_DRAWS samples with the fixed TEST_SECRET (deterministic, cannot flake)
and require a KS p-value above P_MIN = 1e-6 against the exact CDF; the negative controls test the
same samples against the distribution at scale ×0.7 and ×1.3 and must fall below P_MIN.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import numpy as np
import pytest
from scipy import integrate, interpolate, special, stats

from tests.stats_helpers import N_DRAWS, P_MIN, TEST_SECRET, ks_pvalue
from userdp.transforms.mechanisms import heavy_tailed as ht
from userdp.transforms.mechanisms.rng import KeyedRng

GAMMAS = (1.5, 2.0, 4.0)
SIGMAS = (0.5, 1.0)
CONTROL_SCALES = (0.7, 1.3)

Cdf = Callable[[np.ndarray], np.ndarray]


# --- exact CDFs ---------------------------------------------------------------------------------


def cauchy_norm(gamma: float) -> float:
    """C_γ = ∫ dz/(1+|z|^γ) over ℝ = 2π/(γ sin(π/γ))."""
    return 2.0 * math.pi / (gamma * math.sin(math.pi / gamma))


def cauchy_tail_integral(t: np.ndarray, gamma: float) -> np.ndarray:
    """∫_t^∞ ds/(1+s^γ) for t ≥ 0.

    For t ≤ 1: C_γ/2 − t·₂F₁(1, 1/γ; 1+1/γ; −t^γ). For t > 1, where ₂F₁ at −t^γ loses accuracy
    (relative error 7e−7 at γ = 4, t = 1000; garbage at t = 10^6), the series in 1/t instead:
    t^(1−γ)/(γ−1)·₂F₁(1, a; 1+a; −t^−γ), a = (γ−1)/γ — both arguments stay in [−1, 0].
    """
    t = np.asarray(t, dtype=float)
    out = np.empty_like(t)
    small = t <= 1.0
    ts, tl = t[small], t[~small]
    out[small] = cauchy_norm(gamma) / 2 - ts * special.hyp2f1(
        1, 1 / gamma, 1 + 1 / gamma, -(ts**gamma)
    )
    a = (gamma - 1) / gamma
    with np.errstate(over="ignore", divide="ignore"):
        out[~small] = tl ** (1 - gamma) / (gamma - 1) * special.hyp2f1(1, a, 1 + a, -(tl**-gamma))
    return out


def cauchy_cdf(gamma: float, scale: float = 1.0) -> Cdf:
    c = cauchy_norm(gamma)

    def cdf(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float) / scale
        tail = cauchy_tail_integral(np.abs(x), gamma) / c  # P(Z > |x|)
        return np.where(x < 0, tail, 1.0 - tail)

    return cdf


@cache
def _lln_survival(sigma: float) -> interpolate.CubicSpline:
    """G(u) = E_Y[exp(−e^(u − σY))] = P(|Z| > e^u), as a cubic spline in u = ln|z|.

    Nodes every 0.025 on u ∈ [−50, 25] (every sample lies inside: ln|X| ≥ ln(2^−52) ≈ −36 and
    σ|Y| < 9); each node by Simpson's rule over y ∈ [−12, 12] (φ(12) ≈ 1e−32) with 2401 points.
    The integrand is smooth in y and G smooth in u, so both errors are ≲ 1e−9 (checked
    against adaptive quadrature below).
    """
    y = np.linspace(-12.0, 12.0, 2401)
    u = np.arange(-50.0, 25.0 + 1e-9, 0.025)
    vals = np.exp(-np.exp(u[:, None] - sigma * y[None, :])) * stats.norm.pdf(y)[None, :]
    return interpolate.CubicSpline(u, integrate.simpson(vals, x=y, axis=1))


def lln_cdf(sigma: float, scale: float = 1.0) -> Cdf:
    surv = _lln_survival(sigma)

    def cdf(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float) / scale
        with np.errstate(divide="ignore"):
            u = np.clip(np.log(np.abs(x)), -50.0, 25.0)
        g: np.ndarray = surv(u)  # P(|Z| > |x|)
        return np.where(x < 0, g / 2, 1.0 - g / 2)

    return cdf


def lln_survival_quad(t: float, sigma: float) -> float:
    """P(|Z| > t) by adaptive quadrature: ∫ φ(y)·exp(−t·e^(−σy)) dy."""
    val, _ = integrate.quad(
        lambda y: stats.norm.pdf(y) * math.exp(-t * math.exp(min(-sigma * y, 700.0))),
        -np.inf,
        np.inf,
        epsabs=1e-13,
        epsrel=1e-11,
        limit=200,
    )
    return float(val)


def test_cauchy_tail_integral_matches_quadrature() -> None:
    for gamma in GAMMAS:
        for t in (0.0, 0.1, 0.5, 1.0, 1.5, 3.0, 30.0, 1e3, 1e6, 1e12):
            # ∫_t^∞ ds/(1+s^γ) = ∫_0^{1/t} r^(γ−2)/(1+r^γ) dr  (s = 1/r); the algebraic weight
            # r^(γ−2) handles the integrable singularity at 0 when γ < 2.
            if t == 0.0:
                ref = cauchy_norm(gamma) / 2
            elif t <= 1.0:
                ref = (
                    cauchy_norm(gamma) / 2
                    - integrate.quad(lambda s, g=gamma: 1 / (1 + s**g), 0, t)[0]
                )
            else:
                ref = integrate.quad(
                    lambda r, g=gamma: 1 / (1 + r**g),
                    0,
                    1 / t,
                    weight="alg",
                    wvar=(gamma - 2, 0),
                    epsabs=0,
                    epsrel=1e-12,
                )[0]
            got = float(cauchy_tail_integral(np.array([t]), gamma)[0])
            assert got == pytest.approx(ref, rel=1e-10, abs=1e-300), (gamma, t)


def test_cauchy_cdf_is_a_cdf() -> None:
    for gamma in GAMMAS:
        cdf = cauchy_cdf(gamma)
        x = np.array([-1e9, -2.0, -0.3, 0.0, 0.3, 2.0, 1e9])
        f = cdf(x)
        assert np.all(np.diff(f) > 0)
        assert f[3] == pytest.approx(0.5)
        np.testing.assert_allclose(f + cdf(-x), 1.0, rtol=0, atol=1e-14)


def test_lln_cdf_matches_quadrature() -> None:
    for sigma in SIGMAS:
        surv = _lln_survival(sigma)
        for t in (1e-12, 1e-6, 0.01, 0.3, 1.0, 2.5, 10.0, 100.0, 1e4):
            ref = lln_survival_quad(t, sigma)
            assert float(surv(math.log(t))) == pytest.approx(ref, rel=1e-7, abs=1e-9), (sigma, t)


# --- samples ------------------------------------------------------------------------------------


@cache
def cauchy_samples(gamma: float) -> tuple[float, ...]:
    rng = KeyedRng(TEST_SECRET, "test_heavy_tailed", "cauchy", str(gamma))
    return tuple(ht.cauchy_type_sample(rng, gamma) for _ in range(N_DRAWS))


@cache
def lln_samples(sigma: float) -> tuple[float, ...]:
    rng = KeyedRng(TEST_SECRET, "test_heavy_tailed", "lln", str(sigma))
    return tuple(ht.laplace_log_normal_sample(rng, sigma) for _ in range(N_DRAWS))


@pytest.mark.parametrize("gamma", GAMMAS)
def test_cauchy_type_ks(gamma: float) -> None:
    assert ks_pvalue(cauchy_samples(gamma), cauchy_cdf(gamma)) > P_MIN


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("factor", CONTROL_SCALES)
def test_cauchy_type_ks_negative_control(gamma: float, factor: float) -> None:
    assert ks_pvalue(cauchy_samples(gamma), cauchy_cdf(gamma, scale=factor)) < P_MIN


@pytest.mark.parametrize("sigma", SIGMAS)
def test_laplace_log_normal_ks(sigma: float) -> None:
    assert ks_pvalue(lln_samples(sigma), lln_cdf(sigma)) > P_MIN


@pytest.mark.parametrize("sigma", SIGMAS)
@pytest.mark.parametrize("factor", CONTROL_SCALES)
def test_laplace_log_normal_ks_negative_control(sigma: float, factor: float) -> None:
    assert ks_pvalue(lln_samples(sigma), lln_cdf(sigma, scale=factor)) < P_MIN


def test_cauchy_far_tail_ks() -> None:
    """The Pareto branch far out: log|z| given |z| > 10 for γ = 1.5, against the exact tail law."""
    gamma = 1.5
    rng = KeyedRng(TEST_SECRET, "test_heavy_tailed", "far_tail")
    logs: list[float] = []
    while len(logs) < 20_000:
        z = ht.cauchy_type_noise(rng, gamma)
        if z.log_abs > math.log(10.0):
            logs.append(z.log_abs)
    t0 = float(cauchy_tail_integral(np.array([10.0]), gamma)[0])

    def cdf(u: np.ndarray) -> np.ndarray:
        return 1.0 - cauchy_tail_integral(np.exp(u), gamma) / t0

    assert ks_pvalue(logs, cdf) > P_MIN
    assert max(logs) > math.log(1e6)  # the tail really is explored


def test_exponential_helper_ks() -> None:
    rng = KeyedRng(TEST_SECRET, "test_heavy_tailed", "exp")
    e = [ht.exponential_noise(rng) for _ in range(N_DRAWS)]
    assert min(e) > 0
    assert ks_pvalue(e, stats.expon.cdf) > P_MIN
    assert ks_pvalue(e, stats.expon(scale=1.3).cdf) < P_MIN


# --- determinism --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("draw", "param"),
    [(ht.cauchy_type_noise, 2.0), (ht.laplace_log_normal_noise, 1.0)],
)
def test_determinism(draw: Callable[[KeyedRng, float], ht.LogNoise], param: float) -> None:
    def draws(*label: str) -> list[ht.LogNoise]:
        rng = KeyedRng(TEST_SECRET, *label)
        return [draw(rng, param) for _ in range(200)]

    assert draws("q", "a") == draws("q", "a")
    assert draws("q", "a") != draws("q", "b")
    assert all(isinstance(z, ht.LogNoise) and z.sign in (1, -1) for z in draws("q", "a"))


# --- release ------------------------------------------------------------------------------------


def release(value: float, sign: int, log_abs: float, **kw: float) -> float:
    args: dict[str, float] = {"scale": 1.0, "lower": -100.0, "upper": 100.0, **kw}
    return ht.release_heavy_tailed(value, noise=(sign, log_abs), **args)


def test_release_grid() -> None:
    assert ht.release_grid(1.0) == 2.0**-20
    assert ht.release_grid(3.0) == 2.0**-19
    assert ht.release_grid(0.999) == 2.0**-21
    assert ht.release_grid(2.0**-1010) == 2.0**-1022
    assert ht.release_grid(5e-324) == 2.0**-1022
    assert ht.release_grid(1e300) == 2.0 ** (math.frexp(1e300)[1] - 21)


def test_release_exact_small_case() -> None:
    assert release(1.0, 1, math.log(0.25)) == 1.25
    assert release(1.0, -1, math.log(0.25)) == 0.75
    assert release(3.0, 1, -math.inf) == 3.0


def test_release_snaps_to_grid() -> None:
    rng = KeyedRng(TEST_SECRET, "test_heavy_tailed", "snap")
    for scale in (1.0, 0.37, 1e-5, 3e7):
        g = ht.release_grid(scale)
        lo, hi = -1e6 * scale, 1e6 * scale
        for i in range(2000):
            noise = (
                ht.cauchy_type_noise(rng, 2.0) if i % 2 else ht.laplace_log_normal_noise(rng, 1.0)
            )
            r = ht.release_heavy_tailed(
                0.1234567 * scale, scale=scale, noise=noise, lower=lo, upper=hi
            )
            assert lo <= r <= hi
            if lo < r < hi:
                assert math.fmod(r, g) == 0.0, (scale, r, g)
                mantissa = abs(math.frexp(r)[0])
                assert math.ldexp(mantissa, 21) == int(math.ldexp(mantissa, 21))  # ≤ 21 bits


def test_release_rounds_tiny_noise_away_and_never_returns_negative_zero() -> None:
    r = release(0.0, -1, math.log(1e-12))  # |noise| < g/2 = 2^−21
    assert r == 0.0
    assert math.copysign(1.0, r) == 1.0
    assert math.copysign(1.0, release(-50.0, 1, math.log(150.0), lower=0.0)) == 1.0


def test_release_huge_noise_clamps_without_overflow() -> None:
    assert release(0.0, 1, 1e6) == 100.0
    assert release(0.0, -1, 1e6) == -100.0
    assert release(0.0, 1, math.inf) == 100.0
    assert release(0.0, 1, 1e6, scale=1e300) == 100.0


def test_release_clamps() -> None:
    assert release(99.0, 1, math.log(5.0)) == 100.0
    assert release(-99.0, -1, math.log(5.0)) == -100.0
    assert release(99.0, -1, math.log(5.0)) == 94.0
    assert release(150.0, 1, math.log(1.0)) == 100.0  # value beyond the range, noise outward
    assert release(150.0, -1, math.log(10.0)) == 100.0  # noise inward, not enough
    assert release(150.0, -1, math.log(100.0)) == 50.0


def test_release_near_the_float_range() -> None:
    big = 1.7e308
    # Noise of ~1.5e308 from −1e308: the gap 2.7e308 exceeds the float maximum.
    r = release(-1e308, 1, math.log(1.5e308), lower=-big, upper=big)
    assert math.isfinite(r)
    assert r == pytest.approx(0.5e308, rel=2.0**-20)  # snapped to 21 significant bits
    assert release(-1e308, 1, math.log(3e308), lower=-big, upper=big) == big
    assert release(big, 1, 0.0, lower=-big, upper=big) == big
    top = 1.7976931348623157e308
    assert release(top * 0.75, 1, math.log(top * 0.25), lower=-top, upper=top) <= top


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [1.0, 0.5, -2.0])
def test_gamma_must_exceed_one(gamma: float) -> None:
    with pytest.raises(ValueError, match=r"gamma must be a finite number > 1, got"):
        ht.cauchy_type_noise(KeyedRng(TEST_SECRET), gamma)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_gamma_must_be_finite(bad: float) -> None:
    with pytest.raises(ValueError, match=r"gamma must be finite, got (nan|inf)"):
        ht.cauchy_type_noise(KeyedRng(TEST_SECRET), bad)


def test_gamma_type() -> None:
    with pytest.raises(TypeError, match=r"gamma must be a real number, got bool True"):
        ht.cauchy_type_noise(KeyedRng(TEST_SECRET), True)
    with pytest.raises(TypeError, match=r"gamma must be a real number, got str"):
        ht.cauchy_type_noise(KeyedRng(TEST_SECRET), "2")  # type: ignore[arg-type]


@pytest.mark.parametrize("sigma", [0.0, -1.0])
def test_sigma_must_be_positive(sigma: float) -> None:
    with pytest.raises(ValueError, match=r"sigma must be finite and > 0, got -?[01]\.0"):
        ht.laplace_log_normal_noise(KeyedRng(TEST_SECRET), sigma)


def test_sigma_must_be_finite() -> None:
    with pytest.raises(ValueError, match=r"sigma must be finite, got nan"):
        ht.laplace_log_normal_noise(KeyedRng(TEST_SECRET), math.nan)


@pytest.mark.parametrize("scale", [0.0, -1.0])
def test_scale_must_be_positive(scale: float) -> None:
    with pytest.raises(ValueError, match=r"scale must be finite and > 0, got -?[01]\.0"):
        release(0.0, 1, 0.0, scale=scale)
    with pytest.raises(ValueError, match=r"scale must be finite and > 0"):
        ht.release_grid(scale)


def test_scale_must_be_finite() -> None:
    with pytest.raises(ValueError, match=r"scale must be finite, got inf"):
        release(0.0, 1, 0.0, scale=math.inf)


@pytest.mark.parametrize(("lo", "hi"), [(1.0, 1.0), (2.0, -2.0)])
def test_lower_below_upper(lo: float, hi: float) -> None:
    with pytest.raises(ValueError, match=r"lower must be < upper, got lower=.*, upper="):
        release(0.0, 1, 0.0, lower=lo, upper=hi)


@pytest.mark.parametrize("name", ["lower", "upper"])
def test_bounds_must_be_finite(name: str) -> None:
    with pytest.raises(ValueError, match=rf"{name} must be finite, got -?inf"):
        release(0.0, 1, 0.0, **{name: math.inf if name == "upper" else -math.inf})


def test_value_must_be_finite() -> None:
    with pytest.raises(ValueError, match=r"value must be finite, got nan"):
        release(math.nan, 1, 0.0)


@pytest.mark.parametrize("sign", [0, 2, True])
def test_noise_sign(sign: int) -> None:
    with pytest.raises(ValueError, match=r"noise sign must be \+1 or -1, got"):
        release(0.0, sign, 0.0)


def test_noise_log_abs_not_nan() -> None:
    with pytest.raises(ValueError, match=r"noise log\|z\| must be a float .*got nan"):
        release(0.0, 1, math.nan)


@pytest.mark.parametrize("scale", [5e-324, 3 * 5e-324, 2.0**-1022, 1.0])
@pytest.mark.parametrize("log_abs", [-50.0, 0.0, 700.0, 709.5, 712.0, 745.0])
def test_tiny_and_subnormal_scales_release_without_error(scale: float, log_abs: float) -> None:
    """A review: scale 5e-324 halved to 0.0 and log(0) raised; 3·2^-1074 halved with a 33%
    error. The noise (scale/2)·e^(log|z|) is now formed without halving a subnormal scale."""
    r = release(0.0, 1, log_abs, scale=scale, lower=-1e10, upper=1e10)
    assert -1e10 <= r <= 1e10
    if scale == 3 * 5e-324 and log_abs == 700.0:  # 3·2^-1074·e^700, ≈ 1.5e-19: exact enough
        assert r == pytest.approx(scale * math.exp(700.0), rel=2.0**-20)
