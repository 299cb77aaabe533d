"""Exact integer samplers against their pmfs, with ×0.7 and ×1.3 scale negative controls.

Each test draws 10^5 values from a fixed secret (so it is deterministic) and applies a χ²
goodness-of-fit test; a correct sampler would fail it with probability P_MIN = 10^-6 under a fresh
secret. The negative controls test the *same* samples against the distribution at scale ×0.7 and
×1.3 and must reject: they show the test has the power to catch a mis-scaled sampler.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import pytest

from tests.stats_helpers import N_DRAWS, P_MIN, TEST_SECRET, chisquare_pvalue
from userdp.transforms.mechanisms.discrete import (
    bernoulli_exp_neg,
    bernoulli_rational,
    discrete_gaussian,
    discrete_laplace,
    discrete_laplace_error95,
    geometric_exp,
)
from userdp.transforms.mechanisms.rng import KeyedRng

CONTROLS = (0.7, 1.3)


def laplace_pmf(scale: float) -> Callable[[int], float]:
    q = math.exp(-1.0 / scale)
    return lambda k: (1 - q) / (1 + q) * q ** abs(k)


def gaussian_pmf(sigma2: float) -> Callable[[int], float]:
    width = int(60 * math.sqrt(sigma2)) + 60
    norm = sum(math.exp(-(k * k) / (2 * sigma2)) for k in range(-width, width + 1))
    return lambda k: math.exp(-(k * k) / (2 * sigma2)) / norm


def geometric_pmf(scale: float) -> Callable[[int], float]:
    rate = 1.0 / scale
    return lambda k: (1 - math.exp(-rate)) * math.exp(-k * rate) if k >= 0 else 0.0


def _check(samples: list[int], pmf_at_scale: Callable[[float], Callable[[int], float]], s: float):
    assert chisquare_pvalue(samples, pmf_at_scale(s)) > P_MIN
    for factor in CONTROLS:
        assert chisquare_pvalue(samples, pmf_at_scale(s * factor)) < P_MIN, factor


@pytest.mark.parametrize("scale", [Fraction(1), Fraction(7, 2), 10.0, 0.6])
def test_discrete_laplace_matches_pmf(scale: Fraction | float) -> None:
    rng = KeyedRng(TEST_SECRET, "dlap", str(scale))
    samples = [discrete_laplace(rng, scale) for _ in range(N_DRAWS)]
    _check(samples, laplace_pmf, float(scale))


@pytest.mark.parametrize("sigma", [1.0, 3.0, 12.5])
def test_discrete_gaussian_matches_pmf(sigma: float) -> None:
    rng = KeyedRng(TEST_SECRET, "dgauss", str(sigma))
    samples = [discrete_gaussian(rng, sigma * sigma) for _ in range(N_DRAWS)]
    _check(samples, lambda s: gaussian_pmf(s * s), sigma)


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(5)])
def test_geometric_matches_pmf(scale: Fraction) -> None:
    rng = KeyedRng(TEST_SECRET, "geom", str(scale))
    samples = [geometric_exp(rng, 1 / scale) for _ in range(N_DRAWS)]
    _check(samples, geometric_pmf, float(scale))


def _bernoulli_pmf(p: float) -> Callable[[int], float]:
    return lambda k: p if k == 1 else (1 - p if k == 0 else 0.0)


@pytest.mark.parametrize("gamma", [Fraction(1, 3), Fraction(1), Fraction(5, 2)])
def test_bernoulli_exp_neg_matches(gamma: Fraction) -> None:
    rng = KeyedRng(TEST_SECRET, "bexp", str(gamma))
    samples = [int(bernoulli_exp_neg(rng, gamma)) for _ in range(N_DRAWS)]
    pvalue = chisquare_pvalue(samples, _bernoulli_pmf(math.exp(-gamma)), min_expected=1)
    assert pvalue > P_MIN
    for factor in CONTROLS:
        control = _bernoulli_pmf(math.exp(-float(gamma) * factor))
        assert chisquare_pvalue(samples, control, min_expected=1) < P_MIN


def test_bernoulli_rational_matches() -> None:
    rng = KeyedRng(TEST_SECRET, "brat")
    p = Fraction(2, 7)
    samples = [int(bernoulli_rational(rng, p)) for _ in range(N_DRAWS)]
    assert chisquare_pvalue(samples, _bernoulli_pmf(float(p)), min_expected=1) > P_MIN
    for factor in CONTROLS:
        control = _bernoulli_pmf(float(p) * factor)
        assert chisquare_pvalue(samples, control, min_expected=1) < P_MIN
    assert bernoulli_rational(rng, 0) is False
    assert bernoulli_rational(rng, 1) is True


def test_samplers_are_deterministic_per_label() -> None:
    def draw(label: str) -> list[int]:
        rng = KeyedRng(TEST_SECRET, label)
        return [discrete_laplace(rng, 3) + discrete_gaussian(rng, 2) for _ in range(100)]

    assert draw("a") == draw("a")
    assert draw("a") != draw("b")


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda r: discrete_laplace(r, 0), "scale must be positive"),
        (lambda r: discrete_laplace(r, -1.5), "scale must be positive"),
        (lambda r: discrete_laplace(r, float("nan")), "scale must be finite"),
        (lambda r: discrete_laplace(r, float("inf")), "scale must be finite"),
        (lambda r: discrete_gaussian(r, 0), "sigma2 must be positive"),
        (lambda r: geometric_exp(r, 0), "rate must be positive"),
        (lambda r: bernoulli_exp_neg(r, -1), "gamma must be non-negative"),
        (lambda r: bernoulli_rational(r, Fraction(3, 2)), r"p must lie in \[0, 1\]"),
    ],
)
def test_bad_parameters_are_refused(call: Callable[[KeyedRng], object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(KeyedRng(TEST_SECRET, "misuse"))


def test_bool_and_string_parameters_are_refused() -> None:
    rng = KeyedRng(TEST_SECRET, "misuse")
    with pytest.raises(TypeError, match="scale must be a number, got bool"):
        discrete_laplace(rng, True)
    with pytest.raises(TypeError, match="scale must be int, Fraction or float"):
        discrete_laplace(rng, "1")  # type: ignore[arg-type]


@pytest.mark.parametrize("scale", [0.3, 1, 2, Fraction(8, 3), 10, 250])
def test_discrete_laplace_error95_is_the_least_integer_covering_95_percent(scale: object) -> None:
    """Against the pmf summed term by term, (1 − q)/(1 + q)·q^|x|: not the continuous b·ln 20,
    which at scale 2 (±5.99, i.e. ±5) covers 93.8%."""
    m = discrete_laplace_error95(scale)  # type: ignore[arg-type]
    q = math.exp(-1 / float(scale))  # type: ignore[arg-type]

    def outside(m: int) -> float:  # P(|X| > m) by summing the pmf
        return 1 - sum((1 - q) / (1 + q) * q ** abs(x) for x in range(-m, m + 1))

    assert outside(m) <= 0.05 + 1e-12 and (m == 0 or outside(m - 1) > 0.05)
    if scale == 2:
        assert m == 6 and outside(5) == pytest.approx(0.0620, abs=1e-4)
