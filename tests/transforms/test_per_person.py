"""Per-person reductions: the exact multiset of per-person values, on one table and on Beam."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from userdp.transforms.columns import PERSON_COLUMN
from userdp.transforms.per_person import PerPersonValues, reduce_per_person

KEY = b"s" * 32


def rows(seed: int, n: int) -> list[dict[str, Any]]:
    gen = np.random.default_rng(seed)  # not noise: test data
    return [
        {
            PERSON_COLUMN: f"p{int(gen.integers(0, 20))}",
            "v": float(gen.integers(-5, 50)),
            "url": f"u{int(gen.integers(0, 6))}",
        }
        for _ in range(n)
    ]


def expected(data: list[dict[str, Any]], reduction: str, col: str) -> list[float]:
    per: dict[str, list[Any]] = defaultdict(list)
    for r in data:
        per[r[PERSON_COLUMN]].append(r[col])
    fns = {
        "count": len,
        "sum": sum,
        "mean": lambda xs: sum(xs) / len(xs),
        "max": max,
        "min": min,
        "distinct": lambda xs: len(set(xs)),
    }
    return sorted(float(fns[reduction](xs)) for xs in per.values())


@pytest.mark.parametrize("reduction", ["count", "sum", "mean", "max", "min", "distinct"])
def test_reduce_per_person_matches_python(reduction: str) -> None:
    data = rows(1, 300)
    col = {"count": PERSON_COLUMN, "distinct": "url"}.get(reduction, "v")
    value = None if reduction == "count" else col
    got = reduce_per_person(pa.Table.from_pylist(data), reduction, value)
    assert sorted(got.tolist()) == pytest.approx(expected(data, reduction, col), abs=1e-12)


def test_empty_table_has_no_values() -> None:
    empty = pa.table({PERSON_COLUMN: pa.array([], pa.string()), "v": pa.array([], pa.float64())})
    assert reduce_per_person(empty, "sum", "v").size == 0


def test_beam_values_span_tables_and_shards() -> None:
    data = rows(2, 400)
    # a person's rows are split over several input tables: the shard step must reunite them
    tables = [pa.Table.from_pylist(data[i : i + 37]) for i in range(0, len(data), 37)]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        values = (
            p
            | beam.Create(tables)
            | PerPersonValues("sum", "v", KEY, num_shards=5)
            | beam.FlatMap(lambda a: a.tolist())
        )
        assert_that(values, equal_to(expected(data, "sum", "v")))


@pytest.mark.parametrize(
    ("reduction", "value", "match"),
    [
        ("median", "v", "must be one of"),
        ("count", "v", "takes no value column"),
        ("sum", None, "needs a value column"),
    ],
)
def test_misuse(reduction: str, value: str | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PerPersonValues(reduction, value, KEY, 4)


def _clamped_python(
    data: list[dict[str, Any]], reduction: str, lo: float, hi: float
) -> list[float]:
    return sorted(min(hi, max(lo, x)) for x in expected(data, reduction, "v"))


@pytest.mark.parametrize("reduction", ["sum", "mean", "max", "min"])
def test_bounds_clamp_the_per_person_value_not_each_row(reduction: str) -> None:
    data = rows(3, 300)  # values in [-5, 50): bounds (0, 20) bind on both sides
    got = reduce_per_person(pa.Table.from_pylist(data), reduction, "v", bounds=(0.0, 20.0))
    assert sorted(got.tolist()) == pytest.approx(_clamped_python(data, reduction, 0.0, 20.0))
    # rows 15 and -5 sum to clamp(10) = 10 (a row clamp gave 15 + 0 = 15)
    two = pa.table({PERSON_COLUMN: ["a", "a"], "v": [15.0, -5.0]})
    assert reduce_per_person(two, "sum", "v", bounds=(0.0, 20.0)).tolist() == [10.0]
    # ten rows of 5 with bounds [100, 20000]: clamp(50) = 100 (a row clamp gave 10 × 100 = 1,000)
    ten = pa.table({PERSON_COLUMN: ["a"] * 10, "v": [5.0] * 10})
    assert reduce_per_person(ten, "sum", "v", bounds=(100.0, 2e4)).tolist() == [100.0]
    # a mean of rows 0 and 1,000 under an upper bound of 600: clamp(500) = 500, not mean(0, 600)
    capped = pa.table({PERSON_COLUMN: ["a", "a"], "v": [0.0, 1000.0]})
    assert reduce_per_person(capped, "mean", "v", bounds=(0.0, 600.0)).tolist() == [500.0]


def test_infinite_and_nan_results_map_into_the_bounds() -> None:
    """+inf → upper, −inf → lower, NaN (inf rows of both signs) → clamp(0): fixed points, so the
    value is a function of the person's rows alone and never non-finite."""
    table = pa.table({
        PERSON_COLUMN: ["up", "down", "both", "both", "over", "over"],
        "v": [math.inf, -math.inf, math.inf, -math.inf, 1e308, 1e308],
    })  # fmt: skip
    got = dict(zip(["both", "down", "over", "up"], sorted_by_person(table, (-3.0, 7.0)),
                   strict=True))  # fmt: skip
    assert got == {"up": 7.0, "down": -3.0, "both": 0.0, "over": 7.0}
    got = dict(zip(["both", "down", "over", "up"], sorted_by_person(table, (2.0, 7.0)),
                   strict=True))  # fmt: skip
    assert got["both"] == 2.0  # clamp(0) into [2, 7]


def sorted_by_person(table: pa.Table, bounds: tuple[float, float]) -> list[float]:
    """The per-person sums, in the order of the sorted person ids (the reduction's own order is
    unspecified): each person reduced alone."""
    people = sorted(set(table.column(PERSON_COLUMN).to_pylist()))
    out = []
    for p in people:
        mine = table.filter(pc.equal(table.column(PERSON_COLUMN), p))
        out.extend(reduce_per_person(mine, "sum", "v", bounds=bounds).tolist())
    return out


HOSTILE = [math.inf, -math.inf, 1e308, -1e308, -0.0, 0.0, 5.0]


@pytest.mark.parametrize("reduction", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("bounds", [(0.0, 10.0), (-1e308, 1e308), (-1.0, -1.0)])
def test_hostile_rows_give_finite_values_in_the_bounds(
    reduction: str, bounds: tuple[float, float]
) -> None:
    """±inf, ±1e308 (whose sum overflows), −0.0: never NaN or ±inf, always inside the bounds."""
    persons = [f"p{i}" for i in range(len(HOSTILE)) for _ in range(i + 1)]
    values = [
        HOSTILE[(i * 3 + j) % len(HOSTILE)] for i in range(len(HOSTILE)) for j in range(i + 1)
    ]
    table = pa.table({PERSON_COLUMN: persons + ["big"] * 1000, "v": values + [1e308] * 1000})
    got = reduce_per_person(table, reduction, "v", bounds=bounds)
    assert got.size == len(HOSTILE) + 1
    assert np.isfinite(got).all() and (got >= bounds[0]).all() and (got <= bounds[1]).all()


def test_bounds_misuse() -> None:
    table = pa.table({PERSON_COLUMN: ["a"], "v": [1.0]})
    with pytest.raises(ValueError, match="bounds must be finite with lower <= upper"):
        reduce_per_person(table, "sum", "v", bounds=(1.0, 0.0))
    with pytest.raises(ValueError, match="bounds must be finite with lower <= upper"):
        PerPersonValues("sum", "v", KEY, 4, bounds=(0.0, math.inf))  # checked when built


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_a_float_sum_does_not_depend_on_the_order_of_rows_or_chunks(reduction: str) -> None:
    """The same bits for every order of a person's rows and every chunking of the shard's table
    (the shuffle's batching, which other persons move): float addition is not associative, so
    [1e16, 1, 1] and [1, 1, 1e16] summed as they come differ in the last place."""
    gen = np.random.default_rng(7)  # not noise: test data (row orders and chunk sizes)
    magnitudes = [1e16, 1.0, 1.0, 3.0, 1e-3, 7e15, 0.5]
    persons = [f"p{i % 40}" for i in range(4000)]
    values = [magnitudes[int(gen.integers(0, len(magnitudes)))] for _ in persons]
    outcomes = set()
    for trial in range(6):
        order = gen.permutation(len(persons)) if trial else np.arange(len(persons))
        table = pa.table(
            {PERSON_COLUMN: [persons[i] for i in order], "v": [values[i] for i in order]}
        )
        cuts = sorted({0, len(persons), *gen.integers(1, len(persons), trial * 8).tolist()})
        chunked = pa.concat_tables(table.slice(a, b - a) for a, b in itertools.pairwise(cuts))
        got = reduce_per_person(chunked, reduction, "v", bounds=(0.0, 1e18))
        outcomes.add(tuple(sorted(got.tolist())))
    assert len(outcomes) == 1
    small = pa.table({PERSON_COLUMN: ["a"] * 3, "v": [1e16, 1.0, 1.0]})
    flipped = pa.table({PERSON_COLUMN: ["a"] * 3, "v": [1.0, 1.0, 1e16]})
    bounds = (0.0, 1e17)
    assert (
        reduce_per_person(small, reduction, "v", bounds).tolist()
        == reduce_per_person(flipped, reduction, "v", bounds).tolist()
    )
