"""Grid Laplace and Gaussian mechanisms: exact grid arithmetic, noise distribution, misuse."""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from tests.stats_helpers import N_DRAWS, P_MIN, TEST_SECRET, ks_pvalue
from userdp.transforms.mechanisms.additive import (
    GaussianMechanism,
    LaplaceMechanism,
    gaussian_mechanism,
    granularity_exponent,
    laplace_mechanism,
)
from userdp.transforms.mechanisms.checks import NoiseScaleOverflowError
from userdp.transforms.mechanisms.rng import KeyedRng

CONTROLS = (0.7, 1.3)


@pytest.mark.parametrize(
    ("scale", "k"),
    [(1.0, -40), (1.5, -39), (0.75, -40), (2.0**-3, -43), (1e6, -20), (3.0 * 2**50, 12)],
)
def test_granularity_is_the_smallest_power_of_two_above_scale_times_2_pow_minus_40(
    scale: float, k: int
) -> None:
    assert granularity_exponent(scale) == k
    assert 2.0**k >= scale * 2.0**-40 > 2.0 ** (k - 1)


def test_laplace_scale_is_inflated_by_one_grid_step() -> None:
    mech = LaplaceMechanism(l1_sensitivity=3.0, epsilon=0.5)
    g = mech.granularity
    assert mech.scale == pytest.approx((3.0 + g) / 0.5, rel=1e-15)
    assert mech.scale > 3.0 / 0.5
    vec = LaplaceMechanism(l1_sensitivity=3.0, epsilon=0.5, dimension=4)
    assert vec.scale == pytest.approx((3.0 + 4 * vec.granularity) / 0.5, rel=1e-15)


def test_gaussian_sigma_is_inflated_by_sqrt_d_grid_steps() -> None:
    mech = GaussianMechanism(l2_sensitivity=2.0, rho=0.125, dimension=5)
    g = mech.granularity
    expected = (2.0 + 3 * g) / math.sqrt(2 * 0.125)  # ⌈√5⌉ = 3 grid steps
    assert mech.std == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("value", [0.0, 12.345, -7.5e8, 1e300])
def test_release_is_the_rounded_value_plus_whole_grid_steps(value: float) -> None:
    mech = LaplaceMechanism(1.0, 1.0)
    out = mech.release(value, KeyedRng(TEST_SECRET, "grid", str(value)))
    g = Fraction(mech.granularity)
    exact = round(Fraction(value) / g) * g
    steps = (Fraction(out) - exact) / g
    if abs(value) < 2**53 * mech.granularity:  # below that the float sum is exact
        assert steps.denominator == 1
        assert abs(steps) < 60 * mech.scale / mech.granularity  # P(|Lap| > 60b) = e^-60
    else:  # huge values: the exact noisy grid point, correctly rounded to a float
        assert abs(out - value) <= 60 * mech.scale + abs(value) * 2.0**-52


def test_laplace_noise_matches_laplace_cdf_with_controls() -> None:
    # The grid is 2^-40 of the scale, so the discrete noise is indistinguishable from continuous
    # Laplace at 10^5 draws; KS false rejection ≤ P_MIN under a fresh secret.
    mech = LaplaceMechanism(l1_sensitivity=2.0, epsilon=0.8)
    rng = KeyedRng(TEST_SECRET, "laplace-mech")
    noise = np.array([mech.release(100.0, rng) - 100.0 for _ in range(N_DRAWS)])
    b = mech.scale
    assert ks_pvalue(noise, lambda x: stats.laplace.cdf(x, scale=b)) > P_MIN
    for f in CONTROLS:
        assert ks_pvalue(noise, lambda x, f=f: stats.laplace.cdf(x, scale=b * f)) < P_MIN
    assert mech.std == pytest.approx(math.sqrt(2) * b, rel=1e-6)


def test_gaussian_noise_matches_normal_cdf_with_controls() -> None:
    mech = GaussianMechanism(l2_sensitivity=1.0, rho=0.5)
    rng = KeyedRng(TEST_SECRET, "gauss-mech")
    noise = np.array([mech.release(-3.25, rng) + 3.25 for _ in range(N_DRAWS)])
    sigma = mech.std
    assert ks_pvalue(noise, lambda x: stats.norm.cdf(x, scale=sigma)) > P_MIN
    for f in CONTROLS:
        assert ks_pvalue(noise, lambda x, f=f: stats.norm.cdf(x, scale=sigma * f)) < P_MIN


def test_vector_release_draws_independent_coordinates() -> None:
    mech = LaplaceMechanism(l1_sensitivity=1.0, epsilon=1.0, dimension=3)
    rng = KeyedRng(TEST_SECRET, "vector")
    rows = np.array([mech.release_vector([0.0, 10.0, -10.0], rng) for _ in range(20_000)])
    assert rows.mean(axis=0) == pytest.approx([0.0, 10.0, -10.0], abs=0.1)  # 6σ: σ≈0.03
    corr = np.corrcoef(rows.T)
    assert np.all(np.abs(corr[np.triu_indices(3, 1)]) < 0.05)  # 7σ for independent coords


def test_functional_wrappers_match_the_classes() -> None:
    a = laplace_mechanism(5.0, sensitivity=1.0, epsilon=1.0, rng=KeyedRng(TEST_SECRET, "w"))
    b = LaplaceMechanism(1.0, 1.0).release(5.0, KeyedRng(TEST_SECRET, "w"))
    assert a == b
    c = gaussian_mechanism(5.0, sensitivity=1.0, rho=1.0, rng=KeyedRng(TEST_SECRET, "w"))
    d = GaussianMechanism(1.0, 1.0).release(5.0, KeyedRng(TEST_SECRET, "w"))
    assert c == d


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: LaplaceMechanism(0.0, 1.0), ValueError, "l1_sensitivity must be positive"),
        (lambda: LaplaceMechanism(1.0, -1.0), ValueError, "epsilon must be positive"),
        (lambda: LaplaceMechanism(1.0, float("nan")), ValueError, "epsilon must be finite"),
        (lambda: LaplaceMechanism(1.0, 1.0, 0), ValueError, "dimension must be ≥ 1"),
        (lambda: LaplaceMechanism(1.0, 1.0, 1.5), TypeError, "dimension must be an int"),
        (lambda: GaussianMechanism(-2.0, 1.0), ValueError, "l2_sensitivity must be positive"),
        (lambda: GaussianMechanism(1.0, 0.0), ValueError, "rho must be positive"),
    ],
)
def test_bad_parameters_are_refused(make: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        make()  # type: ignore[operator]


def test_bad_values_are_refused() -> None:
    rng = KeyedRng(TEST_SECRET, "misuse")
    with pytest.raises(ValueError, match="non-finite value"):
        LaplaceMechanism(1.0, 1.0).release(float("inf"), rng)
    with pytest.raises(ValueError, match="use release_vector"):
        LaplaceMechanism(1.0, 1.0, dimension=2).release(1.0, rng)
    with pytest.raises(ValueError, match="expected a vector of 2 values, got 3"):
        GaussianMechanism(1.0, 1.0, dimension=2).release_vector([1.0, 2.0, 3.0], rng)


@pytest.mark.parametrize("gaussian", [False, True])
def test_a_release_beyond_the_float_range_saturates_instead_of_raising(gaussian: bool) -> None:
    """Noise of scale 1e307 on a value at the top of the float range: about half the draws
    overflow. Each must give ±max float — an OverflowError would make the job's failure depend
    on the value (the data)."""
    mech = GaussianMechanism(1e307, 0.5) if gaussian else LaplaceMechanism(1e307, 1.0)
    top = sys.float_info.max
    out = [mech.release(top, KeyedRng(TEST_SECRET, "saturate", i)) for i in range(200)]
    assert all(-top <= v <= top for v in out)
    assert out.count(top) > 50  # the overflow is exercised
    low = [mech.release(-top, KeyedRng(TEST_SECRET, "saturate", i)) for i in range(200)]
    assert low.count(-top) > 50


@pytest.mark.parametrize(
    "build",
    [
        lambda: GaussianMechanism(1e308, 1e-4),  # σ = Δ/√(2ρ) ≈ 7e309: the scale itself
        lambda: GaussianMechanism(10**400, 1.0),  # a sensitivity past the float range
        lambda: LaplaceMechanism(1e308, 1e-3),  # b = Δ/ε = 1e311
        lambda: LaplaceMechanism(sys.float_info.max, 1.0),  # Δ/ε fits, b = (Δ + g)/ε not
        lambda: GaussianMechanism(sys.float_info.max, 0.5),  # Δ/√(2ρ) fits, σ with Δ + g not
    ],
)
def test_a_noise_scale_past_the_float_range_is_refused_when_built(build: object) -> None:
    """A mechanism whose noise scale (Laplace b, Gaussian σ) passes the largest float is refused by
    its constructor — at planning, with public numbers — not when a release meets it. The
    Gaussian used to accept Δ/√(2ρ) = inf silently (grid 2^−40) and raise OverflowError at
    release, on whichever candidate the data selected."""
    with pytest.raises(
        NoiseScaleOverflowError, match=r"overflows a float.*narrow the bounds or raise"
    ):
        build()  # type: ignore[operator]


def test_the_largest_scales_that_fit_are_built_and_stated_finite() -> None:
    for mech in (LaplaceMechanism(1.2e308, 1.0), GaussianMechanism(1e308, 0.5)):
        assert math.isfinite(mech.scale if isinstance(mech, LaplaceMechanism) else mech.std)
        assert math.isfinite(mech.std)
        assert (
            -sys.float_info.max
            <= mech.release(0.0, KeyedRng(TEST_SECRET, "fits"))
            <= (sys.float_info.max)
        )


def test_rounded_quotient_is_exact_round_half_even() -> None:
    from userdp.transforms.mechanisms.additive import rounded_quotient  # noqa: PLC0415

    gen = np.random.default_rng(5)  # not noise: test inputs
    cases = [(int(gen.integers(-10**12, 10**12)), int(gen.integers(1, 10**4)),
              int(gen.integers(-40, 8))) for _ in range(3000)]  # fmt: skip
    cases += [(1, 2, 0), (3, 2, 0), (5, 2, 0), (0, 7, -3), (6, 4, -1), (10, 8, 0)]  # ties
    cases += [(-1, 2, 0), (-3, 2, 0), (-5, 2, 0), (-6, 4, -1)]  # negative ties
    for num, den, k in cases:
        assert rounded_quotient(num, den, k) == round(Fraction(num, den) / Fraction(2) ** k)
