"""The value histogram for tuning bounds (transforms/mechanisms/value_histogram.py) and the sum /
mean model on it: buckets (scalar and the Beam side's vectorised form agree), L1 sensitivity 1 by
brute force, the noise's law, clamped means against brute force, misuse."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from userdp.transforms.mechanisms.additive import LaplaceMechanism
from userdp.transforms.mechanisms.bound_recommendation import (
    ContributionModel,
    ValueModel,
    value_setting,
    value_settings,
)
from userdp.transforms.mechanisms.contribution_histogram import ContributionHistograms
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.value_histogram import ValueHistogram

SECRET = bytes(range(32))
V = ValueHistogram(epsilon=1, min_exponent=0, max_exponent=3)  # ±1, ±2, ±4, ±8


def test_buckets_are_signed_octaves_and_the_vectorised_form_agrees() -> None:
    assert V.edges == (-8, -4, -2, -1, 1, 2, 4, 8)
    xs = [-math.inf, -100, -8, -7.9, -4, -1.5, -1, -0.5, 0, 1, 1.5, 2, 3, 8, 9, math.inf]
    want = [0, 0, 1, 1, 2, 3, 4, 4, 4, 4, 5, 5, 6, 7, 8, 8]
    assert [V.bucket(x) for x in xs] == want
    assert V.buckets(np.array(xs)).tolist() == want
    assert [V.representative(b) for b in range(V.size)] == [-16, -6, -3, -1.5, 0, 1.5, 3, 6, 16]
    assert V.bound_candidates() == ([0.0, -1.0, -2.0, -4.0, -8.0], [0.0, 1.0, 2.0, 4.0, 8.0])


def test_one_person_moves_the_histogram_by_at_most_one_in_l1() -> None:
    people = [p for k in (1, 2, 3) for p in itertools.product((-5.0, 0.0, 3.0, 50.0), repeat=k)]
    worst = 0.0
    for base in itertools.combinations_with_replacement(people[:6], 2):
        before = V.exact(base)
        for extra in people:
            after = V.exact((*base, extra))
            worst = max(worst, sum(abs(a - b) for a, b in zip(after, before, strict=True)))
    assert worst == pytest.approx(1.0)


def test_the_noise_is_laplace_of_scale_one_over_epsilon() -> None:
    """KS test of 4,500 bucket noises against Laplace(1/ε); seeded, false alarm ≤ 10^-3."""
    h = ValueHistogram(epsilon=0.5, min_exponent=0, max_exponent=3)
    exact = h.exact([(3.0,)])
    noise = []
    for i in range(500):
        noisy = h.release([(3.0,)], KeyedRng(SECRET, "values", i))
        noise += [v - e for v, e in zip(noisy, exact, strict=True)]
    assert stats.kstest(np.array(noise), stats.laplace(scale=2.0).cdf).pvalue > 1e-3


def test_clamped_means_and_the_sum_model_match_brute_force() -> None:
    """Values at bucket representatives: the model is exact. Persons each with 1–2 partitions."""
    values = [(1.5, 3.0), (6.0,), (3.0, 3.0, 6.0)]
    vm = ValueModel(V, V.exact(values))
    weights = [1 / len(v) for v in values for _ in v]
    flat = [x for v in values for x in v]
    for lo, hi in [(0.0, 2.0), (0.0, 4.0), (-1.0, 8.0)]:
        brute = sum(w * min(max(x, lo), hi) for w, x in zip(weights, flat, strict=True))
        assert vm.clamped_mean(lo, hi) == pytest.approx(brute / len(values))
    assert vm.mean() == pytest.approx(vm.clamped_mean(-8, 8))
    grid = vm.clamped_means(np.array([[0.0], [-1.0]]), np.array([[2.0, 4.0, 8.0]]))
    want = [[vm.clamped_mean(lo, hi) for hi in (2.0, 4.0, 8.0)] for lo in (0.0, -1.0)]
    assert np.allclose(grid, want, rtol=1e-12)
    h = ContributionHistograms(epsilon=1, max_exponent=3, per_octave=4)
    model = ContributionModel(h, h.exact([(2,), (1, 3)]))
    kw = {"metric": "sum", "bounds0": (0.0, 8.0)}
    one = value_setting(model, vm, 2, lambda L, C: 1.0, at=(1, 2, (0.0, 4.0)), **kw)
    kept = model.kept_rows(1, 2)  # (2 rows of 2) + ½(1 + 2) = 3.5
    assert kept == pytest.approx(3.5)
    assert one.bias == pytest.approx(
        abs(model.rows() * vm.mean() - kept * vm.clamped_mean(0, 4)) / 2
    )
    assert one.noise == pytest.approx(0.5)  # max(|0|, |4|) / max(|0|, |8|)
    settings, along = value_settings(model, vm, 2, lambda L, C: 1.0, **kw)
    assert min(s.error for s in settings) <= one.error
    assert all(s.bounds is not None and s.bounds[0] <= 0 <= s.bounds[1] for s in settings)
    assert along and all((s.L, s.C) == (along[0].L, along[0].C) for s in along)


def test_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match=r"need -60 ≤ min_exponent < max_exponent ≤ 60"):
        ValueHistogram(epsilon=1, min_exponent=3, max_exponent=3)
    with pytest.raises(ValueError, match=r"a value is a number, got NaN"):
        V.bucket(math.nan)
    with pytest.raises(ValueError, match=r"every person has at least one value"):
        V.exact([()])
    with pytest.raises(ValueError, match=r"expected a histogram of 9 buckets, got 1"):
        V.add_noise([0.0], KeyedRng(SECRET, "x"))
    vm = ValueModel(V, [0.0] * V.size)
    h = ContributionHistograms(epsilon=1, max_exponent=3)
    model = ContributionModel(h, h.exact([(1,)]))
    with pytest.raises(ValueError, match=r"value bounds are tuned for sum and mean, not 'count'"):
        value_settings(model, vm, 1, lambda L, C: 1.0, metric="count", bounds0=(0, 1))


def test_the_noise_allows_one_rounding_per_bucket() -> None:
    """A person's L1 of 1 spreads over several buckets, each rounded to the noise grid alone:
    the buckets are one vector mechanism, inflated by size·g (docs/noise.md §1), not g."""
    h = ValueHistogram(epsilon=Fraction(1, 10))
    exact = h.exact([(3.0, -2.0, 700.0)])
    noisy = h.add_noise(exact, KeyedRng(SECRET, "grid"))
    vector = LaplaceMechanism(1.0, 0.1, dimension=h.size)
    assert noisy == vector.release_vector(exact, KeyedRng(SECRET, "grid"))
    assert vector.scale > LaplaceMechanism(1.0, 0.1).scale  # the size·g inflation


def test_what_the_noise_is_added_to_moves_by_no_more_than_it_allows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Float sums of c/n round once a bucket is large: one person with 9 values in a bucket
    near 2^31 moved the float histogram by 1 + 2^-22 in L1, beyond the 1 + d·g the noise
    allows. Each c/n is now rounded once to the noise's grid."""
    seen: list[list[float | Fraction]] = []

    def capture(self: LaplaceMechanism, values: list[float | Fraction], rng: KeyedRng) -> list:
        seen.append(list(values))
        return [0.0] * len(values)

    monkeypatch.setattr(LaplaceMechanism, "release_vector", capture)
    h = ValueHistogram(epsilon=Fraction(1, 40))
    g = Fraction(h.mechanism().granularity)
    b = h.bucket(3.0)
    base = {(3, b): 1_610_612_739, (9, b): 14_495_514_610, (3, b + 1): 1}
    for counts in (base, {**base, (9, b): base[9, b] + 9}):
        h.release_counts(counts, KeyedRng(SECRET, "big"))
    change = sum(abs(Fraction(x) - Fraction(y)) for x, y in zip(*seen, strict=True))
    assert abs(change - 1) <= g


def test_grid_sums_brute_force_on_a_coarse_grid() -> None:
    """Persons with 1–3 values among ±1, 3, 100 (several buckets), rounded to a grid of 1/4:
    one more person moves the histogram by at most 1 + (buckets touched)/4."""
    values = (1.0, -1.0, 3.0, 100.0)
    people = [p for n in (1, 2, 3) for p in itertools.product(values, repeat=n)]
    k, g = -2, Fraction(1, 4)
    for base in itertools.combinations_with_replacement(people[:10], 2):
        before = V.grid_sums(V.counts(base), k)
        for extra in people:
            after = V.grid_sums(V.counts((*base, extra)), k)
            touched = {V.bucket(x) for x in extra}
            change = sum(abs(a - c) for a, c in zip(after, before, strict=True))
            assert change <= 1 + len(touched) * g, (base, extra)


@pytest.mark.parametrize("share", [Fraction(1, 5), Fraction(1, 10), Fraction(2, 3), Fraction(7, 9)])
def test_histogram_noise_never_runs_above_the_booked_share(share: Fraction) -> None:
    """The tuning command books ε/(groups + columns) exactly (1/5 for 5 measurements); its
    histograms ran at float(1/5), which rounds up (+1.1e-17): noise calibrated to more ε than
    was booked. Every histogram mechanism now rounds its ε down."""
    for mech in (
        ValueHistogram(epsilon=share).mechanism(),
        ContributionHistograms(epsilon=share, max_exponent=3, per_octave=4).mechanism(),
    ):
        assert Fraction(mech.epsilon) <= share
        assert Fraction(mech.epsilon) > share * (1 - Fraction(1, 2**50))  # not needlessly low
