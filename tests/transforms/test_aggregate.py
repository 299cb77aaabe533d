"""Wiring tests of the Beam aggregation (transforms.aggregate) on the FnApiRunner."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from userdp.transforms.aggregate import (
    AggregatePerPartition,
    CombinePartitionStats,
    ShardByPerson,
    split_by_shard,
)
from userdp.transforms.bounding import PartitionStats, bound_and_aggregate
from userdp.transforms.columns import PERSON_COLUMN
from userdp.transforms.params import BoundingParams

KEY = bytes(range(32))


def tables(seed: int = 0, count: int = 4, rows: int = 150) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        out.append(
            pa.table(
                {
                    PERSON_COLUMN: pa.array([f"p{i}" for i in rng.integers(0, 25, rows)]),
                    "domain": pa.array([f"d{i}" for i in rng.integers(0, 6, rows)]),
                    "d": pa.array(rng.uniform(-10.0, 700.0, rows)),
                }
            )
        )
    return out


def test_split_by_shard_keeps_every_row_once_and_persons_whole() -> None:
    t = pa.concat_tables(tables())
    parts = list(split_by_shard(t, 5, KEY))
    assert sum(p.num_rows for _, p in parts) == t.num_rows
    seen: dict[str, int] = {}
    for shard, part in parts:
        for pid in part.column(PERSON_COLUMN).to_pylist():
            assert seen.setdefault(pid, shard) == shard


def test_combine_fn_sums_exactly_beyond_64_bits() -> None:
    big = PartitionStats(1, 2, 2**70, -(2**70))
    fn = CombinePartitionStats()
    acc = fn.merge_accumulators([fn.add_input(fn.create_accumulator(), big)] * 3)
    assert fn.extract_output(acc) == PartitionStats(3, 6, 3 * 2**70, -3 * 2**70)


@pytest.mark.parametrize(
    "params",
    [
        BoundingParams(("domain",), "d", 0.0, 600.0, 2, 3),
        BoundingParams((), None, 0.0, 0.0, 1, 2),
    ],
)
def test_pipeline_matches_pure_core_on_concatenated_table(params: BoundingParams) -> None:
    inputs = tables()
    expected = sorted(bound_and_aggregate(pa.concat_tables(inputs), params, KEY).items())
    with beam.Pipeline(runner=FnApiRunner()) as p:
        out = (
            p
            | "CreateTables" >> beam.Create(inputs)
            | "Aggregate" >> AggregatePerPartition(params, KEY, num_shards=3)
        )
        assert_that(out, equal_to(expected))


def test_big_sums_survive_the_shuffle() -> None:
    with beam.Pipeline(runner=FnApiRunner()) as p:
        out = (
            p
            | "Create" >> beam.Create([(("x",), PartitionStats(1, 1, 2**70, 5))] * 2)
            | "Combine" >> beam.CombinePerKey(CombinePartitionStats())
        )
        assert_that(out, equal_to([(("x",), PartitionStats(2, 2, 2**71, 10))]))


def test_shard_by_person_groups_each_person_in_one_shard() -> None:
    def persons(shard_table: tuple[int, pa.Table]) -> list[tuple[str, int]]:
        shard, t = shard_table
        return [(pid, shard) for pid in set(t.column(PERSON_COLUMN).to_pylist())]

    with beam.Pipeline(runner=FnApiRunner()) as p:
        out = (
            p
            | "Create" >> beam.Create(tables())
            | "Shard" >> ShardByPerson(4, KEY)
            | "Persons" >> beam.FlatMap(persons)
            | "Count" >> beam.combiners.Count.PerKey()
        )
        assert_that(out, equal_to([(f"p{i}", 1) for i in range(25)]))


def test_constructor_validation() -> None:
    for bad in (0, True, 2**20 + 1, 2**63):  # 2^63 overflowed on a worker, once rows came
        with pytest.raises(ValueError, match=r"num_shards must be an integer in \[1, 1048576\]"):
            ShardByPerson(bad, KEY)
    with pytest.raises(ValueError, match="bounding key must be 32 bytes"):
        ShardByPerson(2, b"x")
