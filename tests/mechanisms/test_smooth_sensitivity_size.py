"""Smooth sensitivity at any data size: no exception depends on n.

It used to refuse β·(2n + 2) > 2^30, so at ε = 10^4 (Cauchy: β ≈ 1000) one person more turned a
release into a ValueError. Now terms below K = (hi − lo)·e^(−C), C = 2000, are replaced by K:
Ŝ = max(S*_{β'}, K)·(1 + η). Checked here: Ŝ ≥ the exact smooth sensitivity (the privacy-critical
direction), Ŝ equals the old formula wherever that is above K, releases are identical to the old
formula's stream by stream (the release floors S at 2^−20·(hi − lo) ≫ K), and n just past the old
limit releases.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from tests.mechanisms import local_bruteforce as bf
from tests.stats_helpers import TEST_SECRET
from userdp.transforms.mechanisms import quantile_sensitivity as qs
from userdp.transforms.mechanisms import smooth_sensitivity as ss
from userdp.transforms.mechanisms.rng import KeyedRng

LOG_ETA = math.log1p(qs.ROUNDING_MARGIN)
NOISE = ss.CauchyNoise(1e4)  # β = ε/10 ≈ 1000
QUANTILES = [Fraction(1, 2), Fraction(1, 3), Fraction(3, 4), Fraction(1, 10), Fraction(9, 10)]


def old_limit(beta: float) -> int:
    """The largest n the removed check accepted: β·(2n + 2) ≤ 2^30."""
    n = int(2.0**29 / beta)
    while beta * (2 * n + 2) > 2.0**30:
        n -= 1
    while beta * (2 * (n + 1) + 2) <= 2.0**30:
        n += 1
    return n


def log_floor(lower: float, upper: float) -> float:
    return math.log(upper - lower) - qs.LOG_TERM_FLOOR + LOG_ETA


def log_exact(x: np.ndarray, q: Fraction, beta: float) -> float:
    """ln S*_β(x) = max_k ln A⁽ᵏ⁾(x) − βk, from the definition-level oracle, in log space."""
    a = bf.sensitivity_at_distance(x, q)
    return max((math.log(v) - beta * k for k, v in enumerate(a) if v > 0), default=-math.inf)


def test_the_old_limit_sat_between_536_000_and_537_000() -> None:
    assert old_limit(NOISE.beta) == 536_869


@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(9, 10)], ids=str)
@pytest.mark.parametrize("data", ["spread", "equal"])
def test_release_just_past_the_old_limit(q: Fraction, data: str) -> None:
    """At n = limit (old code released) and limit + 1 (old code raised): Ŝ is the old formula,
    or K where that formula is below K (equal values: S ≈ e^(−10^8)), and the release is the one
    the old formula gives on the same stream."""
    lo, hi = -1.0, 1.0
    mech = ss.SmoothQuantile(q, lo, hi, NOISE)
    limit = old_limit(NOISE.beta)
    for n in (limit, limit + 1):
        x = np.linspace(lo, hi, n) if data == "spread" else np.zeros(n)
        xp = qs.padded(x, lo, hi)
        old = qs._raw_fast(xp, q, NOISE.beta - 2 * LOG_ETA) + LOG_ETA
        log_s = mech.log_sensitivity(x)
        if data == "spread":
            assert log_floor(lo, hi) < old == log_s
        else:
            assert old < log_floor(lo, hi) == log_s
        rng_args = (TEST_SECRET, "size", n)
        expected = ss.release_with_log_scale(
            qs.quantile_of_sorted(x, q, lo), old, NOISE, lower=lo, upper=hi, rng=KeyedRng(*rng_args)
        )
        assert mech.release(x, KeyedRng(*rng_args)) == expected


@pytest.mark.parametrize("beta", [300.0, 1000.0, 1e6])
@pytest.mark.parametrize("q", QUANTILES, ids=str)
def test_floor_keeps_an_upper_bound_and_the_old_values(q: Fraction, beta: float) -> None:
    """Every data set of ≤ 6 values on {0, …, 4}: Ŝ = max(old formula, K)·(1 + η) exactly, Ŝ ≥ S*_β
    (merely dropping the terms below K would fall under S*_β for equal values), Ŝ is β-smooth, and
    releases match the old formula's."""
    floor = log_floor(bf.LO, bf.HI)
    log_s = {}
    below = 0
    for x in bf.universe(6):
        values = bf.values_of(x)
        s = qs.log_smooth_sensitivity(values, q=q, lower=bf.LO, upper=bf.HI, beta=beta)
        assert s == qs.log_smooth_sensitivity_naive(
            values, q=q, lower=bf.LO, upper=bf.HI, beta=beta
        )
        old = qs._raw_naive(qs.padded(values, bf.LO, bf.HI), q, beta - 2 * LOG_ETA) + LOG_ETA
        assert s == max(old, floor), x
        assert s >= log_exact(x, q, beta), x
        below += old < floor
        log_s[x.tobytes()] = s
        value = qs.quantile_of_sorted(values, q, bf.LO)
        y_new, y_old = (
            ss.release_with_log_scale(
                value, v, NOISE, lower=bf.LO, upper=bf.HI, rng=KeyedRng(TEST_SECRET, "floor")
            )
            for v in (s, old)
        )
        assert y_new == y_old, x
    assert (below > 0) == (beta > 300)  # at β = 300 every S ≥ e^(−300·6) > K; above, K is used
    for x in bf.universe(5):
        for y in bf.neighbours(x):
            assert log_s[x.tobytes()] <= beta + log_s[y.tobytes()]
