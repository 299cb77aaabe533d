"""Exact integer costs for quantiles whose fraction has a large denominator.

A float q is read as its decimal (``as_quantile``): 0.3333333333333333 is 3333333333333333/10^16,
so (1 − q)·B·10^16 passes 2^63 once B is a few thousand. numpy's int64 wrapped silently:
s(100000, 3) came out 386 instead of 99998, and the smooth sensitivity indexed out of range.

Oracles: (1) s(B, T) from its definition (docs §2) in exact Fractions; (2) the small fraction with
the same answers: for n, B, T < 10^15, q = 0.3333333333333333 and 1/3 (likewise 0.6666666666666666
and 2/3) give the same ranks ⌈qn⌉ and costs — q·n, ρ·B sit within n·10^−16 below (or above) the
values for 1/3, which are integers or halves, so no floor or ceiling moves — and 1/3 takes the
int64 path, itself checked against brute force in test_smooth_sensitivity.py.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from userdp.transforms.mechanisms import quantile_sensitivity as qs

THIRD = 0.3333333333333333
TWO_THIRDS = 0.6666666666666666
LARGE_DENOMINATORS = [
    qs.as_quantile(THIRD),
    qs.as_quantile(TWO_THIRDS),
    qs.as_quantile(0.1 + 0.2),  # 0.30000000000000004 = 7500000000000001/25000000000000000
    Fraction(1, 3) + Fraction(1, 10**40),  # beyond int64 altogether
    Fraction(10**30 - 1, 10**30),
]


def shift_cost_by_definition(B: int, T: int, q: Fraction) -> int:
    """s = ⌊D/M⌋ if D ≥ 0, else max(0, ⌈−D/M⌉ − 1), D = (1 − q)B − qT, M = max(q, 1 − q)."""
    d = (1 - q) * B - q * T
    m = max(q, 1 - q)
    return math.floor(d / m) if d >= 0 else max(0, math.ceil(-d / m) - 1)


def test_the_reported_case() -> None:
    q = qs.as_quantile(THIRD)
    assert q == Fraction(3333333333333333, 10**16)
    assert qs.shift_cost(np.array([100_000]), np.array([3]), q).tolist() == [99_998]


@pytest.mark.parametrize("q", LARGE_DENOMINATORS, ids=str)
def test_shift_and_pair_costs_match_exact_fractions(q: Fraction) -> None:
    gen = np.random.default_rng(11)  # data generation only
    B = np.concatenate([gen.integers(0, 10**6, 300), [100_000, 0, 3, 10**6]])
    T = np.concatenate([gen.integers(0, 10**6, 300), [3, 10**6, 100_000, 0]])
    got = qs.shift_cost(B, T, q)
    assert got.dtype == np.int64
    assert got.tolist() == [shift_cost_by_definition(b, t, q) for b, t in zip(B, T, strict=True)]
    n = 10**6
    i = gen.integers(0, n + 1, 300)
    j = np.minimum(i + 1 + gen.integers(0, 50, 300), n + 1)
    expected = [
        (jj - ii - 1) + shift_cost_by_definition(ii, n + 1 - jj, q)
        for ii, jj in zip(i.tolist(), j.tolist(), strict=True)
    ]
    assert qs.pair_cost(i, j, n, q).tolist() == expected


@pytest.mark.parametrize(
    ("q_float", "q_small"), [(THIRD, Fraction(1, 3)), (TWO_THIRDS, Fraction(2, 3))], ids=str
)
def test_statistics_agree_with_the_equivalent_small_fraction(
    q_float: float, q_small: Fraction
) -> None:
    gen = np.random.default_rng(12)  # data generation only
    lo, hi = -4.0, 4.0
    for n in (3_000, 100_000):
        for x in (gen.normal(size=n), gen.integers(-3, 4, size=n) / 2.0):
            xs = qs.sorted_clamped(x, lo, hi)
            assert qs.quantile_of_sorted(xs, qs.as_quantile(q_float), lo) == qs.quantile_of_sorted(
                xs, q_small, lo
            )
            for beta in (0.01, 1.0):
                assert qs.log_smooth_sensitivity(
                    x, q=q_float, lower=lo, upper=hi, beta=beta
                ) == qs.log_smooth_sensitivity(x, q=q_small, lower=lo, upper=hi, beta=beta)
            assert qs.local_sensitivity(x, q=q_float, lower=lo, upper=hi) == qs.local_sensitivity(
                x, q=q_small, lower=lo, upper=hi
            )
            for bound in (0.01, 1.0, 7.0):
                assert qs.distance_to_sensitivity(
                    x, q=q_float, lower=lo, upper=hi, bound=bound
                ) == qs.distance_to_sensitivity(x, q=q_small, lower=lo, upper=hi, bound=bound)
