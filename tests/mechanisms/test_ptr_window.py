"""PTR reads a window, not every value: its capped distance, exact sums, and the window release.

(1) the cap C = T + R: R is the smallest with a tail ≤ 2^−64 (one bound and the ladder);
(2) exact sums: ``exact_sum`` against Fractions on adversarial floats, and ``ClampedSum`` merges;
(3) the claim the Beam side relies on: min(D, C) on the window of reach C − 1 is min(D, C) on all
values, and the release on the window is the release on all values, bit for bit — with a
negative control (a window one unit of reach shorter changes some capped distance);
(4) a mean's release from its count and sum is its release on the values; (5) misuse.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from tests.stats_helpers import TEST_SECRET
from userdp.transforms.mechanisms import ptr, ptr_ladder
from userdp.transforms.mechanisms import quantile_sensitivity as qs
from userdp.transforms.mechanisms import quantile_window as qw
from userdp.transforms.mechanisms.rng import KeyedRng

LO, HI = -1.0, 3.0
QUANTILES = [Fraction(1, 2), Fraction(1, 3), Fraction(9, 10), Fraction(3, 4)]


# ------------------------------------------------------------------------------- (1) the cap


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [(1, 1e-6), (8, 1e-3), (0.1, 1e-9), (Fraction(1, 3), Fraction(1, 10**5))],
)
def test_the_cap_is_the_threshold_plus_the_smallest_negligible_tail(
    epsilon: float, delta: float
) -> None:
    cal = ptr.PTRCalibration.build(epsilon, delta, 1)
    half, r = cal.epsilon / 2, cal.cap - cal.threshold
    assert r >= 1
    assert ptr.laplace_tail(half, r) <= ptr.CAP_SLACK  # P(Z ≤ −R) = P(Z ≥ R)
    assert r == 1 or ptr.laplace_tail(half, r - 1) > ptr.CAP_SLACK
    e = float(half)  # in floats: e^(−εR)/(1 + e^(−ε)) ≤ 2^−64
    assert r == math.ceil((64 * math.log(2) - math.log1p(math.exp(-e))) / e)

    ladder = ptr_ladder.LadderPTR("quantile", LO, HI, epsilon, delta, q=0.5)
    r = ladder.cap - ladder.threshold
    assert ptr_ladder.svt_failure_bound(ladder.epsilon / 2, r) <= ptr.CAP_SLACK
    assert ptr_ladder.svt_failure_bound(ladder.epsilon / 2, r - 1) > ptr.CAP_SLACK
    assert ladder.reach == ladder.cap - 1


def test_the_cap_is_in_the_manifest_and_capping_keeps_none() -> None:
    cal = ptr.PTRCalibration.build(1, 1e-6, 1)
    assert cal.to_manifest()["distance_cap"] == cal.cap
    # the ladder caps every rung, a mean's too, as its plan and manifest say (review, stop 42)
    ladder = ptr_ladder.LadderPTR("mean", 0, 1, 1, 1e-6)
    assert ladder.to_manifest()["distance_cap"] == ladder.cap
    assert ladder._mean_distance(10**7, 0) == ladder.cap
    assert ptr.capped(None, 5) is None
    assert ptr.capped(3, 5) == 3 and ptr.capped(9, 5) == 5


# -------------------------------------------------------------------------- (2) exact sums


def adversarial_floats(gen: np.random.Generator) -> np.ndarray:
    spread = gen.normal(size=3000) * 10.0 ** gen.integers(-300, 300, size=3000)
    fixed = [0.0, -0.0, 5e-324, -5e-324, 2.2e-308, 1.7976931348623157e308, -1e308, 1.0, -1.0]
    ints = gen.integers(-(2**53), 2**53, size=2000).astype(np.float64)
    return np.concatenate([spread, fixed, ints, np.full(5000, 0.1)])


def test_exact_sum_is_the_sum_of_the_floats_as_fractions() -> None:
    gen = np.random.default_rng(11)  # data, not noise
    x = adversarial_floats(gen)
    want = sum(map(Fraction, x.tolist()), Fraction(0))
    assert ptr.exact_sum(x) == want
    assert ptr.exact_sum(gen.permutation(x)) == want  # order does not matter
    assert ptr.exact_sum(x[:0]) == 0
    # one exponent, many large mantissas: the int64 halves must not overflow
    big = np.full(200_000, np.nextafter(2.0, 0.0))
    assert ptr.exact_sum(big) == 200_000 * Fraction(np.nextafter(2.0, 0.0))


def test_clamped_sums_merge_to_the_sum_of_everything() -> None:
    gen = np.random.default_rng(12)
    x = np.concatenate([adversarial_floats(gen), [np.inf, -np.inf]])
    whole = ptr.ClampedSum.of(x, LO, HI)
    parts = [ptr.ClampedSum.of(p, LO, HI) for p in np.array_split(gen.permutation(x), 7)]
    merged = parts[0]
    for p in parts[1:]:
        merged = merged.merge(p)
    assert merged == whole
    assert whole.count == len(x)
    assert whole.total == sum(map(Fraction, np.clip(x, LO, HI).tolist()), Fraction(0))
    assert ptr.ClampedSum(0, Fraction(0)).mean(LO, HI) == Fraction(1)  # the midpoint
    assert ptr.exact_mean(np.clip(x, LO, HI), LO, HI) == whole.total / len(x)


# --------------------------------------------------------------- (3) the window, bit for bit


def stepped(n: int, at: int, jump: float = 1.0) -> np.ndarray:
    """n values crowded in [0, 10^−3] (gaps far below any bound here) with one gap of ``jump``
    after the first ``at`` of them: its cost grows with its distance from the rank."""
    xs = np.linspace(0.0, 1e-3, n)
    xs[at:] += jump
    return xs


def window_values(values: np.ndarray, q: Fraction, reach: int) -> np.ndarray:
    xs = qs.sorted_clamped(values, LO, HI)
    w = qw.QuantileWindow.for_reach(len(xs), q, reach)
    return xs[w.first - 1 : w.last]


@pytest.mark.parametrize("q", QUANTILES, ids=str)
def test_the_capped_distance_on_the_window_is_the_capped_distance_on_all_values(
    q: Fraction,
) -> None:
    """A small cap (ε = 8): the step's gap sweeps from the rank outwards, so D takes every value
    from 0 past C; min(D, C) must agree on every data set, and a window of reach C − 2 must
    disagree on some (a gap of cost C − 1 it cannot see)."""
    mech = ptr.PTRQuantile(q, LO, HI, bound=0.5, epsilon=8, delta=1e-3)
    cap = mech.calibration.cap
    seen, short_differs = set(), 0
    for n in (60, 61, 200, 513):
        for at in range(1, n):
            values = stepped(n, at)
            full = ptr.capped(mech.distance(values), cap)
            assert ptr.capped(mech.distance(window_values(values, q, mech.reach)), cap) == full
            short = ptr.capped(mech.distance(window_values(values, q, mech.reach - 1)), cap)
            short_differs += short != full
            seen.add(full)
    assert set(range(cap + 1)) <= seen  # every capped distance occurred
    assert short_differs > 0  # the negative control: reach C − 1 is needed


def families(gen: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {
        "normal": gen.normal(1.0, 0.5, n),
        "ties": gen.integers(0, 3, n).astype(np.float64),
        "bounds": gen.choice([LO - 1, HI + 1, 0.25, 0.5], n),
        "step": stepped(n, int(gen.integers(0, n + 1))),
    }


def mechanisms(q: Fraction) -> list[object]:
    return [
        ptr.PTRQuantile(q, LO, HI, bound=0.5, epsilon=8, delta=1e-3),
        ptr.PTRQuantile(q, LO, HI, bound=0.05, epsilon=1, delta=1e-6),
        ptr_ladder.LadderPTR("quantile", LO, HI, 4, 1e-6, q=q),
        ptr_ladder.LadderPTR("quantile", LO, HI, 1, 1e-6, q=q, rungs=8, ratio=3),
    ]


@pytest.mark.parametrize("q", QUANTILES, ids=str)
def test_the_release_on_the_window_is_the_release_on_all_values(q: Fraction) -> None:
    gen = np.random.default_rng(20261128)  # data, not noise
    dropped = outcomes = 0
    for mech in mechanisms(q):
        assert isinstance(mech, (ptr.PTRQuantile, ptr_ladder.LadderPTR))
        for n in (0, 1, 30, 700, 6000):
            for family, values in families(gen, n).items():
                label = (str(q), type(mech).__name__, str(mech.reach), family, str(n))
                part = window_values(values, q, mech.reach)
                full = mech.release(values, KeyedRng(TEST_SECRET, *label))
                assert mech.release(part, KeyedRng(TEST_SECRET, *label)) == full, label
                dropped += n - len(part)
                outcomes += full is not None and getattr(full, "value", full) is not None
    assert dropped > 50_000  # the windows left most values out
    assert outcomes > 20  # and releases (not only ⊥) were compared


# ------------------------------------------------------------------------ (4) means from sums


def test_a_means_release_from_its_count_and_sum_is_its_release_on_the_values() -> None:
    gen = np.random.default_rng(5)
    bounded = ptr.PTRMean(LO, HI, bound=0.01, epsilon=1, delta=1e-6)
    ladder = ptr_ladder.LadderPTR("mean", LO, HI, 1, 1e-6)
    for n in (0, 3, 500, 4000):
        values = gen.normal(1.0, 2.0, n)
        summed = ptr.ClampedSum.of(values, LO, HI)
        for i, mech in enumerate((bounded, ladder)):
            a = mech.release(values, KeyedRng(TEST_SECRET, "sum", str(n), str(i)))
            b = mech.release_sum(summed, KeyedRng(TEST_SECRET, "sum", str(n), str(i)))
            assert a == b, (n, i)


# ----------------------------------------------------------------------------- (5) misuse


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ptr.ClampedSum.of([1.0, math.nan], LO, HI), "values contain NaN"),
        (lambda: ptr.exact_sum([math.inf, 1.0]), "exact_sum takes finite values"),
        (lambda: ptr.exact_sum([math.nan]), "exact_sum takes finite values"),
        (
            lambda: ptr_ladder.LadderPTR("quantile", LO, HI, 1, 1e-6, q=0.5).release_sum(
                ptr.ClampedSum(0, Fraction(0)), KeyedRng(TEST_SECRET, "x")
            ),
            "release_sum is for statistic='mean'",
        ),
        (lambda: qw.QuantileWindow.for_reach(10, 0.5, -1), "reach must be a gap cost"),
        (lambda: qw.QuantileWindow.for_reach(10, 0.5, 2.5), "reach must be a gap cost"),
        (lambda: qw.window_bound_for_reach(0.5, True), "reach must be a gap cost"),
    ],
)
def test_misuse(call: object, match: str) -> None:
    assert callable(call)
    with pytest.raises(ValueError, match=match):
        call()
