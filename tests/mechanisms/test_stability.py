"""Stability-based release: distances to instability against brute force, exact release
probabilities, and misuse.

Top partition, brute force: a person is a set of ≤ L = 2 partition keys from {"0", "a", "b"}; a
data set is a multiset of persons (a count vector over the 6 person types); adding or removing one
person is an L1 step. Every data set with ≤ 4 persons is checked against all data sets with ≤ 9
(enough: the distance to instability is at most c₁ + 1 ≤ 5).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from tests.mechanisms import local_bruteforce as bf
from tests.stats_helpers import P_MIN, TEST_SECRET
from userdp.transforms.mechanisms import stability as st
from userdp.transforms.mechanisms.rng import KeyedRng

KEYS = ("0", "a", "b")
TYPES = [frozenset(c) for r in (1, 2) for c in itertools.combinations(KEYS, r)]
INCIDENCE = np.array([[k in t for k in KEYS] for t in TYPES], dtype=np.int64)  # type × key


def person_multisets(max_persons: int) -> np.ndarray:
    rows = []
    for size in range(max_persons + 1):
        for combo in itertools.combinations_with_replacement(range(len(TYPES)), size):
            v = [0] * len(TYPES)
            for j in combo:
                v[j] += 1
            rows.append(v)
    return np.array(rows, dtype=np.int64)


def argmax_keys(counts: np.ndarray) -> np.ndarray:
    """The top key's index per row (first index among ties: key order), −1 when all zero."""
    return np.where(counts.max(axis=1) > 0, counts.argmax(axis=1), -1)


def test_top_partition_distance_matches_brute_force() -> None:
    small, big = person_multisets(4), person_multisets(9)
    big_counts = big @ INCIDENCE
    big_top = argmax_keys(big_counts)
    formula = {}
    for x in small:
        counts = dict(zip(KEYS, (x @ INCIDENCE).tolist(), strict=True))
        top, dist = st.top_partition_distance(counts)
        top_idx = -1 if top is None else KEYS.index(top)
        assert top_idx == argmax_keys((x @ INCIDENCE)[None, :])[0]
        d = np.abs(big - x).sum(axis=1)
        true = int(d[big_top != top_idx].min())
        # Exact unless the top key is "0": then no absent key sorts before it, and the formula's
        # c₁ term (an absent rival that wins ties) undershoots the true c₁ + 1 — a safe bound.
        if top != "0":
            assert dist == true, (counts, dist, true)
        assert dist <= true
        formula[x.tobytes()] = (top, dist)
    # d = dist − 1 is 1-Lipschitz, and d ≥ 1 means no neighbour changes the answer.
    for x in small:
        top, dist = formula[x.tobytes()]
        for j in range(len(TYPES)):
            for sign in (1, -1):
                y = x.copy()
                y[j] += sign
                if y[j] < 0 or y.sum() > 4:
                    continue
                top_y, dist_y = formula[y.tobytes()]
                assert abs(dist - dist_y) <= 1
                if dist >= 2:
                    assert top_y == top


@pytest.mark.parametrize("edges", [(0, 1.5, 2.5, 4), (0, 2, 4), (0, 0.5, 1, 3.5, 4)], ids=str)
@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(1, 3), Fraction(9, 10)], ids=str)
def test_bucketed_quantile_distance_matches_brute_force(
    edges: tuple[float, ...], q: Fraction
) -> None:
    u = bf.universe(12)
    e = np.array(edges, dtype=float)
    buckets = np.searchsorted(e[1:-1], bf.quantiles(u, q), side="right")
    for x in bf.universe(6):
        xs = bf.values_of(x)
        j, dist = st.bucketed_quantile_distance(xs, q, edges)
        d = np.abs(u - x).sum(axis=1)
        assert j == buckets[np.flatnonzero(d == 0)[0]]
        other = d[buckets != j]
        if dist <= 6:  # data sets within 6 steps of x are all in the universe
            assert dist == other.min(), (x, edges, q)
        else:
            assert other.min() > 6


# ------------------------------------------------------------------------------- releases

DRAWS = 20_000


def test_top_partition_release_probability_is_exact() -> None:
    """{a: 20, b: 7}: dist = 13 + 1 (b sorts after a), d = 13; with ε = 1, δ = 1e-6, T = 14, so
    the answer comes out with probability P(Z ≥ 1) = e^(−1)/(1 + e^(−1)); ⊥ otherwise."""
    mech = st.StableTopPartition(Fraction(1), Fraction(1, 10**6))
    assert mech.threshold == 14
    outs = [mech.release({"a": 20, "b": 7}, KeyedRng(TEST_SECRET, "top", i)) for i in range(DRAWS)]
    assert set(outs) <= {"a", None}
    hits = outs.count("a")
    p = math.exp(-1) / (1 + math.exp(-1))
    assert stats.binomtest(hits, DRAWS, p).pvalue > P_MIN
    assert stats.binomtest(hits, DRAWS, math.exp(-2) / (1 + math.exp(-1))).pvalue < P_MIN


def test_top_partition_unstable_and_empty_give_bottom() -> None:
    mech = st.StableTopPartition(Fraction(1), Fraction(1, 10**6))
    for counts in ({"a": 5, "b": 5}, {}, {"a": 0}):
        outs = [mech.release(counts, KeyedRng(TEST_SECRET, "unstable", i)) for i in range(300)]
        assert outs == [None] * 300
    big = [mech.release({"x": 500, "y": 3}, KeyedRng(TEST_SECRET, "big", i)) for i in range(50)]
    assert big == ["x"] * 50
    assert st.top_partition_distance({"b": 4, "a": 4}) == ("a", 1)  # ties: key order
    assert st.top_partition_distance({3: 1}) == (3, 1)


def test_bucketed_median_release() -> None:
    mech = st.StableBucketedQuantile(0.5, (0.0, 1.0, 2.0, 3.0), 1.0, 1e-6)
    data = np.concatenate([np.full(100, 1.5), np.full(10, 0.5), np.full(10, 2.5)])
    assert mech.bucket_and_distance(data) == (1, 100)  # 100 values must go, or 100 come below
    outs = [mech.release(data, KeyedRng(TEST_SECRET, "bucket", i)) for i in range(100)]
    assert outs == [1] * 100
    edge = [0.5, 1.5]  # lower median 0.5 in bucket 0; one more value ≥ 1 moves it
    assert mech.bucket_and_distance(edge) == (0, 1)
    outs = [mech.release(edge, KeyedRng(TEST_SECRET, "edge", i)) for i in range(300)]
    assert outs == [None] * 300
    m = mech.to_manifest()
    assert m["statistic"] == "bucketed_quantile" and m["threshold"] == mech.threshold


# ------------------------------------------------------------------------------------ misuse


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: st.top_partition_distance({"a": -1}), ValueError, "non-negative ints"),
        (lambda: st.top_partition_distance({"a": 1.5}), ValueError, "non-negative ints"),
        (lambda: st.top_partition_distance({"a": True}), ValueError, "non-negative ints"),
        (lambda: st.top_partition_distance({"a": 1, 2: 1}), TypeError, "mutually comparable"),
        (lambda: st.StableTopPartition(0, 1e-6), ValueError, "epsilon must be positive"),
        (lambda: st.StableTopPartition(1, 0), ValueError, "delta must lie in \\(0, 1\\)"),
        (lambda: st.StableBucketedQuantile(0.5, (0, 1), 1, 1e-6), ValueError, "at least 3"),
        (lambda: st.StableBucketedQuantile(0.5, (0, 2, 1), 1, 1e-6), ValueError, "increasing"),
        (
            lambda: st.StableBucketedQuantile(0.5, (0, 1, math.inf), 1, 1e-6),
            ValueError,
            "finite numbers",
        ),
        (lambda: st.StableBucketedQuantile(1.5, (0, 1, 2), 1, 1e-6), ValueError, "between 0"),
    ],
)
def test_misuse_is_refused(call: object, error: type[Exception], match: str) -> None:
    assert callable(call)
    with pytest.raises(error, match=match):
        call()
