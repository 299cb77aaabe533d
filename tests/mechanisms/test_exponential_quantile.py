"""The exponential-mechanism quantile: its scores, its exact law, its privacy and its misuse."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from userdp.transforms.mechanisms import exponential
from userdp.transforms.mechanisms.exponential_quantile import (
    ExponentialQuantile,
    merge_grid_histograms,
)
from userdp.transforms.mechanisms.rng import KeyedRng

SECRET = bytes(range(32))


def naive_scores(mech: ExponentialQuantile, values: list[float]) -> list[int]:
    """u(k) = −|(d − a)·#below − a·#above| at every grid point, straight from the definition."""
    idx = mech.grid_indices(values).tolist()
    a, d = mech.q.numerator, mech.q.denominator
    return [
        -abs((d - a) * sum(i < k for i in idx) - a * sum(i > k for i in idx))
        for k in range(mech.cells + 1)
    ]


def law(mech: ExponentialQuantile, values: list[float]) -> list[float]:
    """P[output index = k], exactly from the definition (floats are enough for these sizes)."""
    delta = max(mech.q.numerator, mech.q.denominator - mech.q.numerator)
    w = [math.exp(float(mech.epsilon) * u / (2 * delta)) for u in naive_scores(mech, values)]
    return [x / sum(w) for x in w]


@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(1, 3), Fraction(9, 10)])
def test_runs_are_the_scores_at_every_grid_point(q: Fraction) -> None:
    mech = ExponentialQuantile(q, 0.0, 1.0, 1, grid_bits=4)
    gen = np.random.default_rng(0)  # test data
    for n in (0, 1, 2, 5, 9):
        values = gen.uniform(-0.2, 1.2, n).round(2).tolist()
        scores, lengths, starts = mech.runs(values)
        expanded = [s for s, m in zip(scores, lengths, strict=True) for _ in range(m)]
        assert expanded == naive_scores(mech, values)
        assert starts[0] == 0 and sum(lengths) == mech.cells + 1


@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(1, 4), Fraction(2, 3)])
def test_brute_force_epsilon_dp_for_add_remove_one_value(q: Fraction) -> None:
    """Every multiset of ≤ 3 values on a 5-point grid, plus one more value: every output's
    probability ratio is at most e^ε (both directions)."""
    eps = Fraction(7, 10)
    mech = ExponentialQuantile(q, 0.0, 4.0, eps, grid_bits=2)
    points = [0.0, 1.0, 2.0, 3.0, 4.0]
    worst = 0.0
    for n in range(4):
        for x in itertools.combinations_with_replacement(points, n):
            px = law(mech, list(x))
            for extra in points:
                py = law(mech, [*x, extra])
                worst = max(worst, *(abs(math.log(a / b)) for a, b in zip(px, py, strict=True)))
    assert worst <= float(eps) + 1e-12
    assert worst > 0.5 * float(eps)  # not vacuous: the pairs move the law


def test_release_frequencies_match_the_exact_law() -> None:
    """χ² goodness of fit of 20,000 seeded releases; a correct sampler fails w.p. 10^-6."""
    mech = ExponentialQuantile(Fraction(1, 2), 0.0, 1.0, 1, grid_bits=3)
    values = [0.1, 0.3, 0.3, 0.6, 0.9, 0.95]
    p = law(mech, values)
    n = 20_000
    counts = [0] * (mech.cells + 1)
    for i in range(n):
        out = mech.release(values, KeyedRng(SECRET, "eq", i))
        counts[round(out * mech.cells)] += 1
    expected = [n * x for x in p]
    chi2 = sum((c - e) ** 2 / e for c, e in zip(counts, expected, strict=True))
    assert chi2 < stats.chi2.ppf(1 - 1e-6, mech.cells)
    # power: the law of the claim ε × 1.5 is rejected by the same test
    wrong = law(ExponentialQuantile(Fraction(1, 2), 0.0, 1.0, 1.5, grid_bits=3), values)
    chi2_wrong = sum((c - n * e) ** 2 / (n * e) for c, e in zip(counts, wrong, strict=True))
    assert chi2_wrong > stats.chi2.ppf(1 - 1e-6, mech.cells)


def test_the_far_runs_drawn_by_rejection_keep_the_exact_law(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the rejection threshold lowered to 1/2, most draws go through the far block; the
    frequencies must still fit the exact law (χ², failure probability 10^-6)."""
    monkeypatch.setattr(exponential, "TAIL", Fraction(1, 2))
    mech = ExponentialQuantile(Fraction(1, 2), 0.0, 1.0, 2, grid_bits=3)
    values = [0.1, 0.3, 0.3, 0.6, 0.9, 0.95]
    exps = mech.mechanism.exponents(mech.runs(values)[0])
    assert sum(q > exponential.TAIL for q in exps) >= 3  # not vacuous: several runs are far
    p = law(mech, values)
    n = 20_000
    counts = [0] * (mech.cells + 1)
    for i in range(n):
        counts[round(mech.release(values, KeyedRng(SECRET, "tail", i)) * mech.cells)] += 1
    chi2 = sum((c - n * e) ** 2 / (n * e) for c, e in zip(counts, p, strict=True))
    assert chi2 < stats.chi2.ppf(1 - 1e-6, mech.cells)


def test_accuracy_on_dense_data() -> None:
    """The median of 1,001 N(0, 1) draws on [−10, 10] at ε = 1 lands within 0.05 (95% of runs)."""
    gen = np.random.default_rng(3)
    mech = ExponentialQuantile(Fraction(1, 2), -10.0, 10.0, 1)
    errors = []
    for i in range(40):
        x = gen.standard_normal(1001)
        errors.append(abs(mech.release(x, KeyedRng(SECRET, "acc", i)) - float(np.median(x))))
    assert sorted(errors)[37] < 0.05


def test_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        ExponentialQuantile(1, 0.0, 1.0, 1)
    with pytest.raises(ValueError, match="lower < upper"):
        ExponentialQuantile(Fraction(1, 2), 1.0, 1.0, 1)
    with pytest.raises(ValueError, match="epsilon must be positive"):
        ExponentialQuantile(Fraction(1, 2), 0.0, 1.0, 0)
    with pytest.raises(ValueError, match="grid_bits must be in"):
        ExponentialQuantile(Fraction(1, 2), 0.0, 1.0, 1, grid_bits=41)
    with pytest.raises(ValueError, match="NaN"):
        ExponentialQuantile(Fraction(1, 2), 0.0, 1.0, 1).release([math.nan], KeyedRng(SECRET, "x"))


@pytest.mark.parametrize(
    ("lower", "upper", "data"),
    [(-1e306, 1e306, 0.0), (0.0, 1e303, 1.8e302), (-1.7e308, 1.7e308, 1.7e308)],
)
def test_bounds_near_the_float_range_release_finite_values_inside_them(
    lower: float, upper: float, data: float
) -> None:
    """k·(upper − lower) passes the float range for such bounds: the release was inf for data
    in the upper part of the range (and NaN indices with a warning when upper − lower itself
    overflowed) — an outcome decided by the data. Now every release lies in [lower, upper]."""
    mech = ExponentialQuantile(Fraction(1, 2), lower, upper, 2.0)
    values = np.full(500, data)
    idx = mech.grid_indices(values)
    want = round(
        (Fraction(data) - Fraction(lower)) / (Fraction(upper) - Fraction(lower)) * mech.cells
    )
    assert idx.tolist() == [want] * 500  # exact index, no NaN
    out = [mech.release(values, KeyedRng(SECRET, "wide", i)) for i in range(50)]
    assert all(lower <= v <= upper for v in out)
    assert mech.grid_value(mech.cells) == upper and mech.grid_value(0) == lower


def test_grid_values_are_unchanged_for_ordinary_bounds() -> None:
    """The exact fallback is taken only where the float formula overflows; the clamp moves only
    a value that rounding put outside the bounds (here the top point: 12.900000000000002)."""
    mech = ExponentialQuantile(Fraction(1, 3), -3.7, 12.9, 1.0, grid_bits=12)
    for k in (0, 1, 7, 1000, 2049, 4095, 4096):
        assert mech.grid_value(k) == min(12.9, -3.7 + k * (12.9 - -3.7) / 4096)
    assert -3.7 + 4096 * (12.9 - -3.7) / 4096 > 12.9  # the old formula left the range


def test_bounds_too_close_for_a_grid_are_refused() -> None:
    """±5e-324: the halves the indices divide by round to 0 (every datum gave NaN, warning)."""
    with pytest.raises(ValueError, match="too close to tell apart"):
        ExponentialQuantile(Fraction(1, 2), -5e-324, 5e-324, 1.0)


# ------------------------------------------------------------- shards send grid histograms


def test_merged_shard_histograms_are_the_histogram_of_all_values() -> None:
    """Any split of the values into parts (empty ones included) merges to the histogram of the
    whole, counts added exactly; a merge that kept one count per index would fail this (the
    same values in two parts must double)."""
    mech = ExponentialQuantile(Fraction(1, 2), 0.0, 100.0, 1, grid_bits=6)
    rng = np.random.default_rng(5)
    for trial in range(50):
        values = rng.choice([0.0, 1.5, 50.0, 99.9, 100.0, 250.0, -3.0], size=trial * 3)
        values = np.concatenate((values, rng.uniform(-10, 110, trial)))
        cuts = np.sort(rng.integers(0, len(values) + 1, size=rng.integers(0, 5)))
        parts = [mech.grid_histogram(p) for p in np.split(values, cuts)]
        uniq, counts = merge_grid_histograms(parts)
        want_idx, want_counts = np.unique(mech.grid_indices(values), return_counts=True)
        assert uniq.tolist() == want_idx.tolist() and counts.tolist() == want_counts.tolist()
        assert uniq.dtype == counts.dtype == np.int64
    twice = merge_grid_histograms([mech.grid_histogram([1.5, 50.0])] * 2)
    assert twice[1].tolist() == [2, 2]
    empty = merge_grid_histograms([])
    assert len(empty[0]) == len(empty[1]) == 0


def test_the_release_from_merged_histograms_is_the_release_from_the_values() -> None:
    """Draw for draw, from the same stream: what lets the pipeline skip gathering values."""
    mech = ExponentialQuantile(Fraction(9, 10), 0.0, 600.0, Fraction(1, 2))
    values = np.random.default_rng(8).lognormal(3, 1.5, 5_000)
    for seed in range(20):
        parts = [mech.grid_histogram(values[i::7]) for i in range(7)]
        via_histograms = mech.release_histogram(
            merge_grid_histograms(parts), KeyedRng(SECRET, "merge", seed)
        )
        assert via_histograms == mech.release(values, KeyedRng(SECRET, "merge", seed))
    nothing = merge_grid_histograms([mech.grid_histogram([])])
    assert mech.release_histogram(nothing, KeyedRng(SECRET, "empty")) == mech.release(
        [], KeyedRng(SECRET, "empty")
    )


def test_a_histogram_that_is_not_one_is_refused() -> None:
    mech = ExponentialQuantile(Fraction(1, 2), 0.0, 1.0, 1, grid_bits=4)
    rng = KeyedRng(SECRET, "bad")
    i64 = np.int64
    bad = [
        (np.array([3, 2], i64), np.array([1, 1], i64)),  # not increasing
        (np.array([2, 2], i64), np.array([1, 1], i64)),  # repeated
        (np.array([-1], i64), np.array([1], i64)),  # off the grid, below
        (np.array([17], i64), np.array([1], i64)),  # off the grid: G = 16
        (np.array([4], i64), np.array([0], i64)),  # a count below one
    ]
    for histogram in bad:
        with pytest.raises(ValueError, match="increasing indices in"):
            mech.release_histogram(histogram, rng)
    with pytest.raises(ValueError, match="indices and counts are integer arrays"):
        mech.release_histogram((np.array([1, 2], i64), np.array([1.5, 1.0])), rng)
    with pytest.raises(ValueError, match="indices and counts are integer arrays"):
        mech.release_histogram((np.array([False, True]), np.array([1, 1], i64)), rng)
    with pytest.raises(ValueError, match="two 1-d arrays of one length"):
        mech.release_histogram((np.array([1, 2], i64), np.array([1], i64)), rng)
    edges = (np.array([0, 16], i64), np.array([2, 1], i64))  # both ends of the grid: accepted
    assert 0.0 <= mech.release_histogram(edges, rng) <= 1.0
