"""The window of order statistics a smooth-sensitivity quantile release reads.

(1) the derivation: every gap of cost ≤ K lies in [i_low, j_high], by brute force over all gaps;
(2) the claim the Beam side relies on: the release on the window's values is the release on all
values, bit for bit, for the same rng, on 4 data families × 7 quantiles × 3 noise rules;
(3) negative controls: a window one step narrower, or a wrong reach, changes some release;
(4) the size bound of the plan's memory line; (5) misuse.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from tests.stats_helpers import TEST_SECRET
from userdp.transforms.mechanisms import quantile_sensitivity as qs
from userdp.transforms.mechanisms import quantile_window as qw
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.smooth_sensitivity import SmoothQuantile, make_smooth_noise

QUANTILES = [
    Fraction(1, 2),
    Fraction(1, 3),
    Fraction(3, 4),
    Fraction(1, 10),
    Fraction(9, 10),
    Fraction(123, 1000),
    Fraction(99, 100),
]
LO, HI = -5.0, 20.0


def data(family: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Per-person values of four shapes: spread, tied, piled on the bounds, and one cluster."""
    if family == "normal":
        return rng.normal(5, 4, n)
    if family == "ties":
        return rng.integers(0, 6, n).astype(np.float64)
    if family == "bounds":
        return rng.choice([LO - 1, HI + 1, 3.0, 3.5], n)
    return 7.0 + rng.normal(0, 1e-3, n)  # "cluster": gaps far below the floor F


def kept(values: np.ndarray, window: qw.QuantileWindow) -> np.ndarray:
    xs = qs.sorted_clamped(values, LO, HI)
    return xs[window.first - 1 : window.last]


# --------------------------------------------------------------------- (1) the derivation


@pytest.mark.parametrize("q", QUANTILES, ids=str)
def test_every_gap_within_reach_lies_in_the_window(q: Fraction) -> None:
    """Brute force over all gaps (i, j) of n values: c(i, j) ≤ K ⇒ i_low ≤ i < j ≤ j_high, and
    the window keeps them (m·a < i, j < n + 1 − m·(b − a)) whenever it drops anything."""
    for beta in (0.9, 0.35):
        k = qw.cost_reach(beta)
        for n in range(0, 260, 7):
            i, j = np.triu_indices(n + 2, k=1)
            near = qs.pair_cost(i, j, n, q) <= k
            w = qw.QuantileWindow.for_release(n, q, beta)
            assert w.first >= 1 and w.last <= n and w.drop_below % q.numerator == 0
            if w.drop_below or w.drop_above:
                assert (i[near] > w.drop_below).all(), (n, beta)
                assert (j[near] < n + 1 - w.drop_above).all(), (n, beta)


def test_the_reach_is_where_terms_fall_below_the_floor() -> None:
    for beta in (4e-6, 1e-3, 0.05, 0.5, 3.0, 5000.0):
        k = qw.cost_reach(beta)
        inner = qs._inner_beta(beta)
        assert (k + 1) * inner >= qw.FLOOR_MARGIN_BITS * math.log(2)
        assert k == 0 or k * inner < qw.FLOOR_MARGIN_BITS * math.log(2)


# ------------------------------------------------------------ (2) the same release, bit for bit


def noises() -> list[object]:
    return [
        make_smooth_noise("cauchy", epsilon=4.0),
        make_smooth_noise("laplace", epsilon=8.0, delta=1e-6),
        make_smooth_noise("lln", rho=2.0),
    ]


@pytest.mark.parametrize("family", ["normal", "ties", "bounds", "cluster"])
def test_the_release_on_the_window_is_the_release_on_all_values(family: str) -> None:
    gen = np.random.default_rng(20261127)
    dropped = 0
    for noise in noises():
        for q in QUANTILES:
            mech = SmoothQuantile(q, LO, HI, noise)  # type: ignore[arg-type]
            for n in (0, 1, 40, 333, 2000):
                values = data(family, n, gen)
                w = qw.QuantileWindow.for_release(n, q, mech.beta)
                label = (family, str(q), n, type(noise).__name__)
                full = mech.release(values, KeyedRng(TEST_SECRET, *map(str, label)))
                part = mech.release(kept(values, w), KeyedRng(TEST_SECRET, *map(str, label)))
                assert part == full, label
                dropped += n - w.size
    assert dropped > 10_000  # the windows did leave values out


def test_the_bound_itself_is_the_same_where_it_is_above_the_floor() -> None:
    gen = np.random.default_rng(7)
    beta, above = 0.4, 0
    for q in QUANTILES:
        for _ in range(30):
            values = gen.standard_cauchy(1500) * 3
            w = qw.QuantileWindow.for_release(1500, q, beta)
            full = qs.log_smooth_sensitivity(values, q=q, lower=LO, upper=HI, beta=beta)
            part = qs.log_smooth_sensitivity(kept(values, w), q=q, lower=LO, upper=HI, beta=beta)
            if full >= math.log(HI - LO) - 20 * math.log(2):
                assert part == full
                above += 1
    assert above > 100


# ---------------------------------------------------------------------- (3) negative controls


def test_a_narrower_window_changes_some_release() -> None:
    """Dropping two more units m (two values each side of the median) loses gaps that set Ŝ.
    (One unit loses only gaps of cost K, whose terms lie in [2^−21, 2^−21·e^β')·(hi − lo):
    below the floor F = 2^−20·(hi − lo) while β' < ln 2 — the margin bit of the reach.)"""
    gen = np.random.default_rng(3)
    q, noise = Fraction(1, 2), make_smooth_noise("cauchy", epsilon=4.0)
    mech = SmoothQuantile(q, LO, HI, noise)  # type: ignore[arg-type]
    changed = 0
    for t in range(60):
        values = data("ties", 400, gen)
        w = qw.QuantileWindow.for_release(400, q, mech.beta)
        narrower = qw.QuantileWindow(400, w.drop_below + 2, w.drop_above + 2)
        rng = (TEST_SECRET, "narrow", str(t))
        if mech.release(kept(values, narrower), KeyedRng(*rng)) != mech.release(
            values, KeyedRng(*rng)
        ):
            changed += 1
    assert changed >= 5  # 11 of 60 when written


def test_a_reach_too_short_changes_some_bound() -> None:
    """A window computed for a larger β (a shorter reach) misses gaps that matter at this β."""
    gen = np.random.default_rng(4)
    q, beta = Fraction(1, 2), 0.3
    changed = 0
    for _ in range(60):
        values = data("normal", 600, gen)
        w = qw.QuantileWindow.for_release(600, q, 3 * beta)
        full = qs.log_smooth_sensitivity(values, q=q, lower=LO, upper=HI, beta=beta)
        part = qs.log_smooth_sensitivity(kept(values, w), q=q, lower=LO, upper=HI, beta=beta)
        changed += part != full and full >= math.log(HI - LO) - 20 * math.log(2)
    assert changed > 0


# --------------------------------------------------------------------------- (4) the size bound


@pytest.mark.parametrize("q", QUANTILES, ids=str)
def test_the_window_never_exceeds_its_public_bound(q: Fraction) -> None:
    for beta in (0.02, 0.5, 2.0):
        bound = qw.window_bound(q, beta)
        sizes = [qw.QuantileWindow.for_release(n, q, beta).size for n in range(0, 50_000, 97)]
        sizes += [qw.QuantileWindow.for_release(10**12 + t, q, beta).size for t in range(200)]
        assert max(sizes) <= bound, (q, beta)


def test_the_median_window_follows_beta_not_n() -> None:
    k = qw.cost_reach(0.1)
    for n in (10**4, 10**6, 10**9):
        assert qw.QuantileWindow.for_release(n, Fraction(1, 2), 0.1).size <= k + 3


# --------------------------------------------------------------------------------- (5) misuse


@pytest.mark.parametrize(
    ("n", "q", "beta", "error", "match"),
    [
        (-1, 0.5, 0.1, ValueError, r"n must be a count"),
        (True, 0.5, 0.1, ValueError, r"n must be a count"),
        (10, 1.5, 0.1, ValueError, r"q must lie strictly between 0 and 1"),
        (10, 0.5, 0.0, ValueError, r"beta must be finite and > 4"),
        (10, 0.5, "x", TypeError, r"beta must be a real number"),
    ],
)
def test_misuse(n: object, q: object, beta: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        qw.QuantileWindow.for_release(n, q, beta)  # type: ignore[arg-type]
