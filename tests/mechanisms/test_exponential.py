"""Exact exponential mechanism: selection probabilities, the refinement path, misuse."""

from __future__ import annotations

import decimal
import math
from collections import Counter
from decimal import Decimal
from fractions import Fraction

import pytest
from scipy import stats

from tests.stats_helpers import N_DRAWS, P_MIN, TEST_SECRET
from userdp.transforms.mechanisms import exponential
from userdp.transforms.mechanisms.exponential import (
    ExponentialMechanism,
    exponential_mechanism,
    sample_exp_weights,
)
from userdp.transforms.mechanisms.rng import KeyedRng

SCORES = [3.0, 1.0, 0.0, 2.5, -4.0, 3.0]


def _probabilities(scores: list[float], epsilon: float, sensitivity: float, c: int) -> list[float]:
    w = [math.exp(epsilon * u / (c * sensitivity)) for u in scores]
    return [x / sum(w) for x in w]


def _pvalue(samples: list[int], probs: list[float]) -> float:
    counts = Counter(samples)
    observed = [counts.get(i, 0) for i in range(len(probs))]
    return float(stats.chisquare(observed, [p * len(samples) for p in probs]).pvalue)


@pytest.mark.parametrize("monotone", [False, True])
def test_selection_frequencies_match_with_controls(monotone: bool) -> None:
    # χ² over the 6 candidates from 10^5 seeded draws (false rejection ≤ P_MIN); controls: the
    # same draws against the distribution at ε ×0.7 and ×1.3 must be rejected.
    eps, sens, c = 1.0, 1.0, (1 if monotone else 2)
    rng = KeyedRng(TEST_SECRET, "expmech", str(monotone))
    mech = ExponentialMechanism(eps, sens, monotone=monotone)
    samples = [mech.select(SCORES, rng) for _ in range(N_DRAWS)]
    assert _pvalue(samples, _probabilities(SCORES, eps, sens, c)) > P_MIN
    for f in (0.7, 1.3):
        assert _pvalue(samples, _probabilities(SCORES, eps * f, sens, c)) < P_MIN


def test_refinement_path_keeps_the_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    # With 2 digits and 2 bits most first rounds are undecided, so the refinement loop runs.
    monkeypatch.setattr(exponential, "_START_DIGITS", 2)
    monkeypatch.setattr(exponential, "_START_BITS", 2)
    exponential._cumulative_bounds.cache_clear()
    rng = KeyedRng(TEST_SECRET, "refine")
    qs = [Fraction(0), Fraction(1, 3), Fraction(1, 3), Fraction(2)]
    samples = [sample_exp_weights(rng, qs) for _ in range(20_000)]
    w = [math.exp(-float(q)) for q in qs]
    assert _pvalue(samples, [x / sum(w) for x in w]) > P_MIN
    exponential._cumulative_bounds.cache_clear()


def test_huge_multiplicities_and_exponents_are_exact() -> None:
    # Weights 1 and 10^2172·e^-5000 ≈ e^1.2: far outside float range, exact here.
    rng = KeyedRng(TEST_SECRET, "huge")
    samples = [
        sample_exp_weights(rng, [Fraction(0), Fraction(5000)], [1, 10**2172]) for _ in range(20_000)
    ]
    log_w1 = 2172 * math.log(10) - 5000
    p1 = 1 / (1 + math.exp(-log_w1))
    assert _pvalue(samples, [1 - p1, p1]) > P_MIN


@pytest.mark.parametrize("ambient_digits", [28, 6])
def test_every_bracket_holds_its_true_weight_whatever_the_callers_context(
    ambient_digits: int,
) -> None:
    """The exponent was negated as a Decimal, which rounds in the caller's ambient context:
    98.65% of brackets missed e^(−q) (by up to 5e−27 relative at 28 digits, 5e−5 at 6), so the
    draw was exact for a slightly different law (review). Each bracket is checked against e^(−q)
    at 100 digits, exactly, for exponents of every kind the mechanisms form."""
    gen = [Fraction(n, d) for n, d in ((617, 30), (1, 3), (123456789, 10**7), (7999, 100))]
    qs = [*gen, *(Fraction(k * 104729 % 8000, 97) for k in range(1, 60))]
    exponential._cumulative_bounds.cache_clear()
    try:
        with decimal.localcontext() as ambient:
            ambient.prec = ambient_digits
            for q in qs:
                (lo,), (hi,) = exponential._cumulative_bounds((q,), (1,), 30)
                with decimal.localcontext() as exact:
                    exact.prec = 100
                    true = Fraction((-(Decimal(q.numerator) / Decimal(q.denominator))).exp())
                assert lo <= true <= hi, q
    finally:
        exponential._cumulative_bounds.cache_clear()


def test_far_weights_are_never_bracketed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bracketing e^(−q) costs time and memory growing with q (an integer of ~0.43·q digits),
    and the clamp choice's exponents grow with the person count: 10^8 persons took minutes per
    draw. Candidates more than TAIL above the best go through the rejection block instead."""
    seen: list[Fraction] = []
    bracket = exponential._cumulative_bounds

    def recording(qs: tuple[Fraction, ...], mult: tuple[int, ...], digits: int) -> object:
        seen.extend(qs)
        return bracket(qs, mult, digits)

    monkeypatch.setattr(exponential, "_cumulative_bounds", recording)
    rng = KeyedRng(TEST_SECRET, "far")
    qs = [Fraction(0), Fraction(1), Fraction(10**4), Fraction(3 * 10**9, 7)]
    picks = {sample_exp_weights(rng, qs) for _ in range(200)}
    assert picks == {0, 1}  # the far ones have probability below e^-9999
    assert max(seen) <= exponential.TAIL


def test_far_candidates_drawn_by_rejection_keep_the_exact_law(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the threshold lowered to 1/2, most mass is in the far block: the frequencies must fit
    the exact law (χ², false rejection ≤ P_MIN), and the law at the wrong multiplicities fails."""
    monkeypatch.setattr(exponential, "TAIL", Fraction(1, 2))
    rng = KeyedRng(TEST_SECRET, "far-law")
    qs = [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(3, 2), Fraction(5, 2)]
    mult = [1, 2, 3, 1, 4]
    samples = [sample_exp_weights(rng, qs, mult) for _ in range(50_000)]
    w = [m * math.exp(-float(q)) for q, m in zip(qs, mult, strict=True)]
    assert _pvalue(samples, [x / sum(w) for x in w]) > P_MIN
    flat = [math.exp(-float(q)) for q in qs]  # the multiplicities ignored: must be rejected
    assert _pvalue(samples, [x / sum(flat) for x in flat]) < P_MIN


def test_huge_multiplicities_raise_the_rejection_threshold() -> None:
    """A far candidate of multiplicity 2^200 at q = 100 weighs ~e^38.6: with the threshold at 80
    its block would be drawn nearly always and kept with probability e^-20 (a loop of ~10^9
    rounds). The threshold grows with the multiplicities' bits, so it is bracketed exactly."""
    rng = KeyedRng(TEST_SECRET, "far-mult")
    picks = [sample_exp_weights(rng, [Fraction(0), Fraction(100)], [1, 2**200]) for _ in range(50)]
    assert set(picks) == {1}  # the other candidate has probability ~e^-38.6


@pytest.mark.parametrize("tail", [None, Fraction(1, 2)])
def test_integer_scores_draw_exactly_what_the_general_path_draws(
    monkeypatch: pytest.MonkeyPatch, tail: Fraction | None
) -> None:
    """``sample_exp_weights_of_int_scores`` (the quantile's fast path: no Fraction per far
    candidate) returns the same index from the same stream, and leaves the stream where the
    general path leaves it, for every draw: near only, far blocks, huge gaps, multiplicities.
    ``tail`` 1/2 puts most candidates in the far block, so rejections are exercised."""
    if tail is not None:
        monkeypatch.setattr(exponential, "TAIL", tail)
    cases = [
        ([0, -1, -2, -3], Fraction(1, 2), [1, 1, 1, 1]),
        ([5, 3, -400, -(10**6), 5], Fraction(3, 7), [2, 1, 5, 1, 3]),
        ([-7, -9, -7, -8], Fraction(2), [1, 10**6, 3, 1]),
        ([0, -(10**9), -200, -161, -160], Fraction(1, 2), [1, 1, 3, 1, 1]),
    ]
    for i, (scores, factor, mult) in enumerate(cases):
        top = max(scores)
        exponents = [factor * (top - u) for u in scores]
        fast, slow = KeyedRng(TEST_SECRET, "int", str(i)), KeyedRng(TEST_SECRET, "int", str(i))
        for _ in range(300):
            assert exponential.sample_exp_weights_of_int_scores(
                fast, scores, factor, mult
            ) == sample_exp_weights(slow, exponents, mult)
        assert fast.randbelow(2**64) == slow.randbelow(2**64)  # the same bits consumed
    with pytest.raises(TypeError, match="scores must be Python ints"):
        exponential.sample_exp_weights_of_int_scores(fast, [0, 1.0], Fraction(1), [1, 1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="factor must be a positive Fraction"):
        exponential.sample_exp_weights_of_int_scores(fast, [0, 1], Fraction(0), [1, 1])


def test_single_candidate_and_a_dominant_candidate() -> None:
    rng = KeyedRng(TEST_SECRET, "edge")
    assert exponential_mechanism([5.0], epsilon=1.0, sensitivity=1.0, rng=rng) == 0
    picks = {
        exponential_mechanism([0.0, 1e6], epsilon=1.0, sensitivity=1.0, rng=rng) for _ in range(50)
    }
    assert picks == {1}  # the other candidate has probability e^-500000


def test_same_label_same_choice() -> None:
    def pick(label: str) -> list[int]:
        rng = KeyedRng(TEST_SECRET, label)
        return [
            exponential_mechanism(SCORES, epsilon=0.3, sensitivity=1.0, rng=rng) for _ in range(50)
        ]

    assert pick("x") == pick("x")
    assert pick("x") != pick("y")


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda r: exponential_mechanism([], epsilon=1.0, sensitivity=1.0, rng=r), "at least one"),
        (
            lambda r: exponential_mechanism([1.0], epsilon=0.0, sensitivity=1.0, rng=r),
            "epsilon must be positive",
        ),
        (
            lambda r: exponential_mechanism([1.0], epsilon=1.0, sensitivity=0, rng=r),
            "sensitivity must be positive",
        ),
        (
            lambda r: exponential_mechanism([1.0, math.nan], epsilon=1.0, sensitivity=1.0, rng=r),
            "score 1 is nan",
        ),
        (lambda r: sample_exp_weights(r, [Fraction(0)] * 2, [1]), "got 1 multiplicities for 2"),
        (lambda r: sample_exp_weights(r, [Fraction(0)] * 2, [1, 0]), "positive integers"),
    ],
)
def test_misuse_is_refused(call: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(KeyedRng(TEST_SECRET, "misuse"))  # type: ignore[operator]
