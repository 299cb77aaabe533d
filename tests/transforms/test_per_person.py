"""Per-person reductions: the exact multiset of per-person values, on one table and on Beam."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
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
    clamped = [{**r, "v": min(hi, max(lo, r["v"]))} for r in data]
    return sorted(min(hi, max(lo, x)) for x in expected(clamped, reduction, "v"))


@pytest.mark.parametrize("reduction", ["sum", "mean", "max", "min"])
def test_bounds_clamp_each_row_before_the_rows_are_combined(reduction: str) -> None:
    data = rows(3, 300)  # values in [-5, 50): bounds (0, 20) bind on both sides
    got = reduce_per_person(pa.Table.from_pylist(data), reduction, "v", bounds=(0.0, 20.0))
    assert sorted(got.tolist()) == pytest.approx(_clamped_python(data, reduction, 0.0, 20.0))
    # the clamp is per row: a person with rows 30 and -5 sums to 20 + 0 = 20, not clamp(25) = 20
    # and a person with rows 15 and -5 sums to 15 (clamp(10) = 10 without the row clamp)
    two = pa.table({PERSON_COLUMN: ["a", "a"], "v": [15.0, -5.0]})
    assert reduce_per_person(two, "sum", "v", bounds=(0.0, 20.0)).tolist() == [15.0]
    assert reduce_per_person(two, "sum", "v").tolist() == [10.0]  # without bounds: raw sum


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
