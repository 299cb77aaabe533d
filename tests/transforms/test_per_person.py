"""Per-person reductions: the exact multiset of per-person values, on one table and on Beam."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from transforms.bounding import PERSON_COLUMN
from transforms.per_person import PerPersonValues, reduce_per_person

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
