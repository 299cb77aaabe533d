"""Exact distances for the stable bucketed quantile when q's fraction has a large denominator.

q = 0.3333333333333333 is read as 3333333333333333/10^16 (``as_quantile``); the closed forms
multiply counts by 10^16, which wrapped int64 silently (or raised OverflowError, depending on the
counts) from a few thousand values on. The oracle moves values one way at a time with exact
integer ranks: remove the R largest values ≥ e_j (or smallest < e_{j+1}) and add the fewest A at
lo (or hi) that move the ⌈q·n'⌉-th value out of the bucket, A found by bisection (the condition is
monotone in A), minimised over R — no closed form, no numpy.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from userdp.transforms.mechanisms import stability as st
from userdp.transforms.mechanisms.quantile_sensitivity import as_quantile, quantile_rank

EDGES = (-4.0, -1.0, 0.0, 1.0, 4.0)


def fewest(ok: object, top: int) -> int:
    """The least A in [0, top] with ok(A) (ok monotone, ok(top) true)."""
    assert callable(ok) and ok(top)
    lo, hi = 0, top
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


def distance_by_moves(xs: np.ndarray, q: Fraction, edges: tuple[float, ...]) -> tuple[int, int]:
    n = len(xs)
    r = quantile_rank(n, q)
    value = float(xs[r - 1]) if r >= 1 else edges[0]
    j = sum(1 for e in edges[1:-1] if value >= e)
    best = n + 2
    top = 10 * n + 10
    if j >= 1:  # down: the ⌈q·n'⌉-th value must fall below e_j
        m = int(np.searchsorted(xs, edges[j], side="left"))
        for R in range(n - m + 1):
            a = fewest(lambda A, R=R: quantile_rank(n - R + A, q) <= m + A, top)
            best = min(best, R + a)
    if j <= len(edges) - 3:  # up: it must reach e_{j+1}
        m2 = int(np.searchsorted(xs, edges[j + 1], side="left"))
        for R in range(m2 + 1):
            a = fewest(lambda A, R=R: quantile_rank(n - R + A, q) > m2 - R, top)
            best = min(best, R + a)
    return j, best


@pytest.mark.parametrize("q", [0.3333333333333333, 0.6666666666666666, 0.30000000000000004])
@pytest.mark.parametrize("shift", [0.0, 0.45])
def test_bucketed_quantile_distance_is_exact(q: float, shift: float) -> None:
    """Both directions (the quantile sits in an inner bucket) at n = 20,000, where the products
    reach 10^16·20,000 > 2^63 (the old code raised OverflowError here: an exit code set by the
    data)."""
    gen = np.random.default_rng(13)  # data generation only
    xs = np.sort(np.clip(gen.normal(shift, 1.0, size=20_000), EDGES[0], EDGES[-1]))
    qf = as_quantile(q)
    j, dist = st.bucketed_quantile_distance(xs, qf, EDGES)
    assert 1 <= j <= len(EDGES) - 3
    assert (j, dist) == distance_by_moves(xs, qf, EDGES)
    mech = st.StableBucketedQuantile(q, EDGES, 1, 1e-6)
    assert mech.bucket_and_distance(xs) == (j, dist)


@pytest.mark.parametrize(
    ("q", "counts", "expected"),
    [
        (0.6666666666666666, (1000, 3500, 1500), (1, 751)),
        (0.3333333333333333, (900, 1500, 3600), (1, 601)),
        (0.6666666666666666, (1800, 3000, 1200), (1, 1201)),
    ],
)
def test_silent_wraparound_is_gone(
    q: float, counts: tuple[int, ...], expected: tuple[int, int]
) -> None:
    """Counts at −2, −0.5 and 0.5 chosen so that b·m still fits int64 but a·(n − R) and
    b·(m' − R) wrap: the old code returned distance 0 without any error."""
    xs = np.repeat([-2.0, -0.5, 0.5], counts)
    qf = as_quantile(q)
    assert distance_by_moves(xs, qf, EDGES) == expected
    assert st.bucketed_quantile_distance(xs, qf, EDGES) == expected
