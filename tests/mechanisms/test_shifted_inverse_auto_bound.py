"""Private clamp choice for ``bound = "auto"``: buckets, utility sensitivity (brute force), χ²."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import pytest
from scipy import stats

from tests.stats_helpers import P_MIN, TEST_SECRET
from userdp.transforms.mechanisms.accounting import PureDP
from userdp.transforms.mechanisms.auto_bound import ClampChoiceParams, target_clipped_for_noise
from userdp.transforms.mechanisms.rng import KeyedRng

PARAMS = ClampChoiceParams(epsilon=1, min_exponent=-1, max_exponent=4, target_clipped=2)


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


def test_choice_frequencies_match_the_exponential_mechanism() -> None:
    # χ² over the 6 candidates from 2·10^4 seeded draws (false rejection ≤ P_MIN); the same draws
    # against ε ×0.7 and ×1.3 are rejected.
    hist = _histogram([1, 3, 3, 9, 40, 40, 2, 2])
    scores = [float(s) for s in PARAMS.scores(hist)]
    rng = KeyedRng(TEST_SECRET, "auto-bound")
    n = 20_000
    counts = Counter(PARAMS.choose(hist, rng) for _ in range(n))
    observed = [counts.get(e, 0) for e in range(-1, 5)]
    for factor, fits in ((1.0, True), (0.7, False), (1.3, False)):
        w = [math.exp(factor * s / 2) for s in scores]
        expected = [n * x / sum(w) for x in w]
        assert (stats.chisquare(observed, expected).pvalue > P_MIN) == fits, factor


def test_guarantee_manifest_and_target() -> None:
    assert PARAMS.guarantee == PureDP(1)
    assert PARAMS.to_manifest()["candidates"] == [-1, 4]
    assert target_clipped_for_noise(Fraction(3, 2)) == Fraction(3, 2)


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"epsilon": 0}, ValueError, "epsilon must be positive"),
        ({"min_exponent": 5}, ValueError, "min_exponent ≤ max_exponent"),
        ({"max_exponent": 5000}, ValueError, "at most 2048"),
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
