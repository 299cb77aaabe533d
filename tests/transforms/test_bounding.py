"""Exact and property tests of the pure bounding core (transforms.bounding)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest

from userdp.transforms.bounding import (
    ZERO_STATS,
    PartitionStats,
    bound_and_aggregate,
)
from userdp.transforms.columns import PERSON_COLUMN
from userdp.transforms.params import BoundingParams
from userdp.transforms.person_hashing import person_shards

KEY = bytes(range(32))


def params(
    *,
    by: tuple[str, ...] = ("domain",),
    value: str | None = "d",
    L: int = 2,
    C: int = 2,
    lower: float = 0.0,
    upper: float = 10.0,
) -> BoundingParams:
    return BoundingParams(by, value, lower, upper, L, C)


def table(persons: list[str], domains: list[object], values: list[float]) -> pa.Table:
    return pa.table(
        {PERSON_COLUMN: persons, "domain": domains, "d": pa.array(values, pa.float64())}
    )


def random_table(seed: int, n: int = 400, persons: int = 30, domains: int = 8) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            PERSON_COLUMN: pa.array([f"p{i}" for i in rng.integers(0, persons, n)]),
            "domain": pa.array([f"d{i}" for i in rng.integers(0, domains, n)]),
            "hour": pa.array(rng.integers(0, 3, n)),
            "d": pa.array(rng.choice([-50.0, 0.0, 1.5, 7.25, 10.0, 99.0, math.inf, -math.inf], n)),
        }
    )


def total(stats: dict[tuple[object, ...], PartitionStats]) -> PartitionStats:
    out = ZERO_STATS
    for s in stats.values():
        out = out.add(s)
    return out


def per_person(
    t: pa.Table, p: BoundingParams
) -> dict[str, dict[tuple[object, ...], PartitionStats]]:
    ids = t.column(PERSON_COLUMN).to_pylist()
    return {
        pid: bound_and_aggregate(t.filter(pa.array([x == pid for x in ids])), p, KEY)
        for pid in sorted(set(ids))
    }


def test_empty_table_gives_no_partitions() -> None:
    assert bound_and_aggregate(table([], [], []), params(), KEY) == {}


def test_exact_small_table_rows_capped_and_values_clamped() -> None:
    p = params(L=1, C=2, lower=0.0, upper=10.0)
    t = table(["a", "a", "a", "b"], ["x", "x", "x", "x"], [math.inf, math.inf, math.inf, -3.0])
    q = p.quantum
    # a: 2 of its 3 rows, each clamped to 10; b: one row clamped to 0; mid = 5.
    assert bound_and_aggregate(t, p, KEY) == {
        ("x",): PartitionStats(2, 3, round(20 / 2**q), round((5 + 5 - 5) / 2**q))
    }


def test_count_query_without_value_or_by() -> None:
    p = params(by=(), value=None, L=1, C=3)
    t = table(["a"] * 5 + ["b"], ["x", "y", "x", "z", "x", "y"], [0.0] * 6)
    assert bound_and_aggregate(t, p, KEY) == {(): PartitionStats(2, 4, 0, 0)}


def test_partitions_per_person_capped() -> None:
    p = params(L=2, C=1)
    t = table(["a"] * 5, ["u", "v", "w", "x", "y"], [1.0] * 5)
    stats = bound_and_aggregate(t, p, KEY)
    assert len(stats) == 2
    assert all(
        s == PartitionStats(1, 1, round(1 / 2**p.quantum), round(-4 / 2**p.quantum))
        for s in stats.values()
    )


def test_heavy_person_contributes_at_most_l_times_c_rows() -> None:
    rng = np.random.default_rng(1)
    n = 100_000
    p = params(L=3, C=4)
    t = table(
        ["heavy"] * n, [f"d{i}" for i in rng.integers(0, 50, n)], list(rng.uniform(-5, 20, n))
    )
    stats = bound_and_aggregate(t, p, KEY)
    assert len(stats) == 3
    assert total(stats).rows == 12
    assert all(s.persons == 1 and s.rows == 4 for s in stats.values())


def test_multi_column_keys_are_python_values() -> None:
    p = params(by=("domain", "hour"), L=10, C=10)
    t = pa.table(
        {
            PERSON_COLUMN: ["a", "a", "b"],
            "domain": ["x", "x", "y"],
            "hour": [1, 2, 1],
            "d": [1.0, 2.0, 3.0],
        }
    )
    assert set(bound_and_aggregate(t, p, KEY)) == {("x", 1), ("x", 2), ("y", 1)}


@pytest.mark.parametrize("seed", range(3))
def test_same_stats_for_any_row_order_or_table_split(seed: int) -> None:
    p = params(by=("domain", "hour"), L=2, C=2)
    t = random_table(seed)
    expected = bound_and_aggregate(t, p, KEY)
    rng = np.random.default_rng(100 + seed)
    shuffled = t.take(pa.array(rng.permutation(t.num_rows)))
    assert bound_and_aggregate(shuffled, p, KEY) == expected
    chunked = pa.concat_tables(
        [shuffled.slice(0, 17), shuffled.slice(17, 200), shuffled.slice(217)]
    )
    assert bound_and_aggregate(chunked, p, KEY) == expected


@pytest.mark.parametrize("seed", range(3))
def test_each_person_choice_depends_only_on_own_rows(seed: int) -> None:
    """Stats of the whole table = Σ of each person's stats computed alone."""
    p = params(L=2, C=2)
    t = random_table(seed)
    expected: dict[tuple[object, ...], PartitionStats] = {}
    for stats in per_person(t, p).values():
        for k, s in stats.items():
            expected[k] = expected.get(k, ZERO_STATS).add(s)
    assert bound_and_aggregate(t, p, KEY) == expected


def test_different_key_can_choose_different_rows() -> None:
    p = params(L=1, C=1)
    t = table(["a"] * 20, [f"d{i}" for i in range(20)], [float(i % 10) for i in range(20)])
    choices = {tuple(bound_and_aggregate(t, p, bytes([i]) * 32)) for i in range(8)}
    assert len(choices) > 1


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("L", "C"), [(1, 1), (2, 3), (4, 2)])
def test_removing_one_person_respects_sensitivities(seed: int, L: int, C: int) -> None:
    lower, upper = -2.0, 10.0
    p = params(L=L, C=C, lower=lower, upper=upper)
    t = random_table(seed, n=300, persons=12, domains=6)
    full = bound_and_aggregate(t, p, KEY)
    q = Fraction(2) ** p.quantum
    m, half = max(abs(lower), abs(upper)), (upper - lower) / 2
    ids = t.column(PERSON_COLUMN).to_pylist()
    for pid in sorted(set(ids)):
        rest = bound_and_aggregate(t.filter(pa.array([x != pid for x in ids])), p, KEY)
        diffs = [(full.get(k, ZERO_STATS), rest.get(k, ZERO_STATS)) for k in set(full) | set(rest)]
        changed = [(a, b) for a, b in diffs if a != b]
        assert len(changed) <= L
        assert sum(a.rows - b.rows for a, b in changed) <= L * C
        for a, b in changed:
            assert a.persons - b.persons == 1
            assert 0 <= a.rows - b.rows <= C
            assert abs(a.sum_q - b.sum_q) * q <= C * m
            assert abs(a.centred_sum_q - b.centred_sum_q) * q <= C * half


def test_fixed_point_sums_match_float_sums() -> None:
    rng = np.random.default_rng(5)
    vals = list(rng.uniform(-1, 600, 50))
    p = params(L=1, C=50, lower=0.0, upper=600.0)
    s = bound_and_aggregate(table(["a"] * 50, ["x"] * 50, vals), p, KEY)[("x",)]
    clamped = np.clip(vals, 0.0, 600.0)
    q = 2.0**p.quantum
    assert abs(s.sum_q * q - clamped.sum()) <= 50 * q
    assert abs(s.centred_sum_q * q - (clamped - 300.0).sum()) <= 50 * q


def test_rejects_a_bad_key() -> None:
    with pytest.raises(ValueError, match="bounding key must be 32 bytes"):
        bound_and_aggregate(table(["a"], ["x"], [1.0]), params(), b"short")


def test_person_shards_in_range_and_content_based() -> None:
    persons = pa.array([f"p{i}" for i in range(1000)])
    shards = person_shards(persons, 7, KEY)
    assert shards.min() >= 0 and shards.max() < 7 and len(set(shards.tolist())) == 7
    again = person_shards(persons.take(pa.array(np.arange(999, -1, -1))), 7, KEY)
    assert again.tolist() == shards.tolist()[::-1]
