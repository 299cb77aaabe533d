"""``benchmarks/exact_error.py``: the benchmarks' error measure computed from a law, not samples.

The measure is the mean of the middle 60% of |X| (FDY22). Checked against closed forms where
there is one (a centred Laplace: |X| is exponential; a centred normal: |X| is half-normal), against
a large seeded sample for a mixture (failure probability of the 2% tolerance below 1e-9: the
trimmed mean of 400,000 draws has a relative standard error near 0.3%), and on the clamp choice
against the choice's own mode when its weight is all on one candidate.
"""

from __future__ import annotations

import math
from fractions import Fraction
from types import ModuleType

import numpy as np
import pytest
from scipy import integrate, stats

from tests.benchmark_scripts import load_benchmark
from userdp.transforms.mechanisms.auto_bound import ClampChoiceParams


@pytest.fixture(scope="module")
def exact() -> ModuleType:
    return load_benchmark("exact_error")


def _band_mean(quantile) -> float:  # type: ignore[no-untyped-def]
    return integrate.quad(quantile, 0.2, 0.8)[0] / 0.6


def test_centred_laplace_matches_the_exponential_closed_form(exact: ModuleType) -> None:
    b = 3.0  # |X| ~ Exponential(scale b): Q(q) = −b·ln(1 − q)
    want = _band_mean(lambda q: -b * math.log(1 - q))
    got = exact.trimmed_abs_error(np.ones(1), np.zeros(1), np.array([b]))
    assert got == pytest.approx(want, rel=1e-5)


def test_centred_normal_matches_the_half_normal_closed_form(exact: ModuleType) -> None:
    s = 2.5  # |X| half-normal: Q(q) = s·Φ⁻¹((1 + q)/2)
    want = _band_mean(lambda q: s * stats.norm.ppf((1 + q) / 2))
    got = exact.trimmed_abs_error(np.ones(1), np.zeros(1), np.array([s]), "gaussian")
    assert got == pytest.approx(want, rel=1e-5)


def test_a_shifted_mixture_matches_a_large_sample(exact: ModuleType) -> None:
    p, a, b = np.array([0.3, 0.7]), np.array([-5.0, 2.0]), np.array([1.0, 3.0])
    gen = np.random.default_rng(7)  # data for the check, not noise of a release
    k = gen.choice(2, size=400_000, p=p)
    e = np.sort(np.abs(a[k] + b[k] * gen.laplace(size=k.size)))
    sampled = e[80_000:320_000].mean()
    assert exact.trimmed_abs_error(p, a, b) == pytest.approx(sampled, rel=0.02)
    # a negative control: the same components with the weights swapped are not within 2%
    assert exact.trimmed_abs_error(p[::-1], a, b) != pytest.approx(sampled, rel=0.02)


def test_a_choice_sure_of_one_clamp_scores_that_clamp(exact: ModuleType) -> None:
    """1,000 persons at 5 and a sharp prior: the choice is 5 (mode, weight ~1), so its error is
    pure noise at B = 5 — the centred-Laplace closed form at scale 5/ε."""
    totals = np.full(1000, 5.0)
    choice = ClampChoiceParams(
        epsilon=Fraction(50), min_exponent=0, max_exponent=10, target_clipped=0,
        step_prior=Fraction(40),
    )  # fmt: skip
    cands = [float(c) for c in choice.candidates]
    hist = np.bincount(np.searchsorted(cands, totals, side="left"), minlength=len(cands) + 1)
    assert cands[choice.mode(hist.tolist())] == 5.0
    want = exact.trimmed_abs_error(np.ones(1), np.zeros(1), np.array([5.0 / 2]))
    assert exact.choice_error(totals, choice, 1 / 2) == pytest.approx(want, rel=1e-9)
    # and the best clamp in hindsight on this data is 5 as well (no bias, least noise)
    assert exact.best_clamp_error(totals, 1 / 2) == pytest.approx(want, rel=1e-9)


def test_the_clamp_curve_and_the_choice_law_agree_with_their_summaries(exact: ModuleType) -> None:
    """``clamp_errors`` is the curve whose minimum ``best_clamp_error`` reports, and
    ``choice_law`` is the law ``choice_error`` integrates: a distribution whose most likely
    candidate is the choice's own mode."""
    gen = np.random.default_rng(3)  # data for the check
    totals = gen.integers(1, 8, 2000).astype(np.float64)
    grid = exact.clamp_grid(totals)
    curve = exact.clamp_errors(totals, grid, 1.0)
    assert curve.min() == exact.best_clamp_error(totals, 1.0)
    assert grid[curve.argmin()] == 7.0  # no bias at the top, least noise there
    choice = ClampChoiceParams(
        epsilon=Fraction(1, 4), min_exponent=0, max_exponent=20, target_clipped=0,
        step_prior=Fraction(1, 2),
    )  # fmt: skip
    cands, p, bias = exact.choice_law(totals, choice)
    hist = np.bincount(np.searchsorted(cands, totals, side="left"), minlength=len(cands) + 1)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert p.argmax() == choice.mode(hist.tolist())
    assert bias[cands >= 7].max() == 0.0 and (bias[cands < 7] < 0).all()
    assert exact.choice_error(totals, choice, 1.0) == exact.trimmed_abs_error(p, bias, cands)
