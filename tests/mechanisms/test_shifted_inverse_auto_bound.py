"""Private clamp choice for ``bound = "auto"``: grid, buckets, sensitivity (brute force), χ²."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter
from fractions import Fraction

import pytest
from scipy import stats

from tests.stats_helpers import P_MIN, TEST_SECRET
from userdp.transforms.mechanisms.accounting import PureDP
from userdp.transforms.mechanisms.auto_bound import (
    ClampChoiceParams,
    ceil_root_of_power_of_two,
    clamp_grid,
    grid_height,
    target_clipped_for_noise,
)
from userdp.transforms.mechanisms.rng import KeyedRng

# powers of two (p = 1) in units of 1/2: the hand-computed cases below
PARAMS = ClampChoiceParams(
    epsilon=1, min_exponent=-1, max_exponent=4, target_clipped=2, per_octave=1, unit_exponent=-1
)
# the job layer's form: four per octave, m = 0 (monotone), the default prior
JOB = ClampChoiceParams(epsilon=1, min_exponent=0, max_exponent=3, target_clipped=0)


def _histogram(totals: list[Fraction | int], params: ClampChoiceParams = PARAMS) -> list[int]:
    h = [0] * params.histogram_size
    for t in totals:
        h[params.bucket(t)] += 1
    return h


def test_buckets_are_exact_powers_of_two() -> None:
    # Buckets: (−∞, 1/2], (1/2, 1], (1, 2], (2, 4], (4, 8], (8, 16], (16, ∞).
    cases = {
        0: 0, Fraction(1, 2): 0, Fraction(3, 4): 1, 1: 1, Fraction(5, 4): 2, 2: 2, 3: 3,
        4: 3, 5: 4, 8: 4, 16: 5, 17: 6, 10**9: 6, 2.5: 3,
    }  # fmt: skip
    assert {t: PARAMS.bucket(t) for t in cases} == cases
    assert PARAMS.histogram_size == 7


def test_the_grid_is_four_per_octave_in_whole_units() -> None:
    assert [int(c) for c in JOB.candidates] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert JOB.heights == tuple(grid_height(c, 4) for c in JOB.candidates)
    assert JOB.heights[1] == 4 and JOB.heights[7] == 12  # 2 and 8: one and three octaves up
    # ⌈2^(k/4)⌉ exactly: 2^(1/4) = 1.189… → 2 at unit 1; at unit 2^-3: 1.25 (10/8)
    grid = clamp_grid(0, 1, 4, -3)
    assert grid == (1, Fraction(5, 4), Fraction(3, 2), Fraction(7, 4), 2)
    assert [ceil_root_of_power_of_two(a, 4) for a in (0, 1, 4, 5, 9)] == [1, 2, 2, 3, 5]
    for r, p in ((Fraction(3), 4), (Fraction(7, 5), 3), (Fraction(1000), 4)):
        h = grid_height(r, p)
        assert h.denominator in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
        assert 0 <= p * math.log2(r) - h < Fraction(1, 1024) + 1e-12


def test_scores_hand_computed() -> None:
    # Totals 1, 3, 3, 9, 40: persons above 2^e for e = −1 … 4 are 5, 4, 4, 2, 2, 1; m = 2.
    assert PARAMS.scores(_histogram([1, 3, 3, 9, 40])) == [-3, -2, -2, 0, 0, -1]


def test_utility_has_sensitivity_one() -> None:
    # Every multiset of up to 4 totals from an alphabet straddling each bucket edge, plus any one
    # more person: no candidate's score moves by more than 1 (Δ = 1 in the exponential mechanism).
    alphabet = [0, Fraction(1, 2), 1, Fraction(3, 2), 2, 3, 4, 7, 16, 100]
    worst = 0
    for n in range(5):
        for totals in itertools.combinations_with_replacement(alphabet, n):
            base = PARAMS.scores(_histogram(list(totals)))
            for extra in alphabet:
                moved = PARAMS.scores(_histogram([*totals, extra]))
                worst = max(worst, *(abs(a - b) for a, b in zip(base, moved, strict=True)))
    assert worst == 1


@pytest.mark.parametrize("params", [PARAMS, JOB], ids=["m=2,p=1", "job: m=0,p=4"])
def test_choice_frequencies_match_the_exact_formula(params: ClampChoiceParams) -> None:
    # P[k] ∝ exp(ε·u(k)/d − κ·h_k) (d = 1 when m = 0, else 2), u = −|A(c_k) − m|, written out
    # here from the definition, not from the code's exponents. χ² from 2·10^4 seeded draws (false
    # rejection ≤ P_MIN); the same draws against ε ×0.7 and ×1.3 are rejected.
    totals = [1, 3, 3, 9, 40, 40, 2, 2, 5, 6, 6, 6, 7]
    hist = _histogram(totals, params)
    m = float(params.target_clipped)
    d = 1 if m == 0 else 2
    kappa = float(params.step_prior)
    heights = [params.per_octave * math.log2(c / params.candidates[0]) for c in params.candidates]
    utility = [-abs(sum(t > c for t in totals) - m) for c in params.candidates]
    rng = KeyedRng(TEST_SECRET, "auto-bound", params.per_octave)
    n = 20_000
    counts = Counter(params.choose(hist, rng) for _ in range(n))
    observed = [counts.get(k, 0) for k in range(len(params.candidates))]
    for factor, fits in ((1.0, True), (0.7, False), (1.3, False)):
        w = [math.exp(factor * u / d - kappa * h) for u, h in zip(utility, heights, strict=True)]
        expected = [n * x / sum(w) for x in w]
        assert (stats.chisquare(observed, expected).pvalue > P_MIN) == fits, factor


def test_the_prior_breaks_the_tie_above_the_data() -> None:
    # Every candidate above the largest total (5) clips nobody: without the prior they tie; with
    # it each is e^−κ·Δh as likely as the one below, so the smallest wins and the mode is it.
    hist = _histogram([5] * 50, JOB)
    assert JOB.mode(hist) == JOB.candidates.index(5)
    flat = dataclasses.replace(JOB, step_prior=0)
    lam = flat.exponents(hist)
    assert lam[JOB.candidates.index(5) :] == [0, 0, 0, 0]


def test_guarantee_manifest_and_target() -> None:
    assert PARAMS.guarantee == PureDP(1)
    assert PARAMS.to_manifest()["candidates"] == [-1, 4]
    assert JOB.to_manifest()["step_prior"] == "1/2" and JOB.to_manifest()["per_octave"] == 4
    assert target_clipped_for_noise(Fraction(3, 2)) == Fraction(3, 2)


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"epsilon": 0}, ValueError, "epsilon must be positive"),
        ({"min_exponent": 5}, ValueError, "min_exponent ≤ max_exponent"),
        ({"max_exponent": 5000}, ValueError, "at most 2048"),
        ({"per_octave": 0}, ValueError, r"per_octave must lie in \[1, 64\]"),
        ({"step_prior": -1}, ValueError, "step_prior must be ≥ 0"),
        ({"target_clipped": -1}, ValueError, "target_clipped must be ≥ 0"),
        ({"min_exponent": 1.5}, TypeError, "min_exponent must be an int"),
    ],
)
def test_misuse_is_refused(kw: dict[str, object], error: type, match: str) -> None:
    base: dict[str, object] = {
        "epsilon": 1, "min_exponent": 0, "max_exponent": 4, "target_clipped": 1,
    }  # fmt: skip
    with pytest.raises(error, match=match):
        ClampChoiceParams(**{**base, **kw})  # type: ignore[arg-type]


def test_histogram_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match="histogram of 7 buckets"):
        PARAMS.scores([0] * 6)
    with pytest.raises(ValueError, match="non-negative integers"):
        PARAMS.scores([0, 0, 0, -1, 0, 0, 0])
    with pytest.raises(ValueError, match="std_per_unit must be positive"):
        target_clipped_for_noise(0)


def test_monotone_choice_is_epsilon_dp_by_brute_force() -> None:
    # m = 0 uses weights exp(ε·u) (not ε·u/2), which is ε-DP only because u = −A is monotone.
    # Over every multiset of up to 4 totals and any one more person: every score moves the same
    # way, and the exact output probabilities differ by a factor of at most e^ε.
    alphabet = [1, 2, 3, 5, 7, 8, 100]
    eps = float(JOB.epsilon)
    worst = 0.0

    def probabilities(totals: list[int]) -> list[float]:
        lam = [float(x) for x in JOB.exponents(_histogram(totals, JOB))]
        w = [math.exp(-x) for x in lam]
        return [x / sum(w) for x in w]

    for n in range(5):
        for totals in itertools.combinations_with_replacement(alphabet, n):
            base = JOB.scores(_histogram(list(totals), JOB))
            p = probabilities(list(totals))
            for extra in alphabet:
                moved = JOB.scores(_histogram([*totals, extra], JOB))
                assert all(b >= a for a, b in zip(moved, base, strict=True))  # all down or equal
                q = probabilities([*totals, extra])
                worst = max(worst, *(abs(math.log(a / b)) for a, b in zip(p, q, strict=True)))
    assert 0.5 * eps < worst <= eps + 1e-12
