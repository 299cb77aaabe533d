"""Beam transforms from clean Arrow tables to bounded per-partition sufficient statistics.

Rows travel as Arrow tables (ordinary Beam elements; see DESIGN "Scale"):
:class:`ShardByPerson` routes each person's rows to one shard by a keyed hash of ``__person__``, so
that a shard holds *all* rows of its persons; :class:`BoundAndAggregate` bounds contributions per
shard with the vectorised :func:`transforms.bounding.bound_and_aggregate` and combines the exact
integer statistics per partition. None of these steps is private on its own: their output is the
input of the noisy combine (:mod:`transforms.noisy_combine`) and must never be written out.

The fixed-point quantum of the value sums is ``BoundingParams.quantum`` (2^q with
q = ``params.quantum_exponent(lower, upper)``), so |v/2^q| ≤ 2^40 and sums combine exactly in any
order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam import coders
from apache_beam.coders import typecoders
from apache_beam.pvalue import PCollection

from .bounding import (
    PERSON_COLUMN,
    ZERO_STATS,
    PartitionKey,
    PartitionStats,
    bound_and_aggregate,
    check_bounding_key,
    person_shards,
)
from .params import BoundingParams


class _PartitionStatsCoder(coders.Coder):
    """Encodes PartitionStats as a plain tuple of Python ints (of any size), deterministically.

    Registered so that Beam never infers a schema (RowCoder, INT64 fields) from the NamedTuple's
    annotations: value sums are exact Python ints and may exceed 64 bits.
    """

    def __init__(self) -> None:
        self._tuple = coders.TupleCoder([coders.FastPrimitivesCoder()] * 4)

    def encode(self, value: PartitionStats) -> bytes:
        encoded: bytes = self._tuple.encode(tuple(value))
        return encoded

    def decode(self, encoded: bytes) -> PartitionStats:
        return PartitionStats(*self._tuple.decode(encoded))

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> type[PartitionStats]:
        return PartitionStats


typecoders.registry.register_coder(PartitionStats, _PartitionStatsCoder)


def _check_num_shards(num_shards: int) -> None:
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(
            f"num_shards must be a positive integer, got {num_shards!r}; each shard is processed "
            "in memory, so use more shards for more input"
        )


def split_by_shard(table: pa.Table, num_shards: int, key: bytes) -> Iterator[tuple[int, pa.Table]]:
    """(shard, rows of ``table`` whose person hashes to that shard), for each non-empty shard."""
    if table.num_rows == 0:
        return
    shard = person_shards(table.column(PERSON_COLUMN), num_shards, key)
    order = np.argsort(shard, kind="stable")
    counts = np.bincount(shard, minlength=num_shards)
    ends = np.cumsum(counts)
    for s in np.flatnonzero(counts).tolist():
        yield s, table.take(pa.array(order[ends[s] - counts[s] : ends[s]]))


def _concatenate(shard: int, tables: Iterable[pa.Table]) -> tuple[int, pa.Table]:
    return shard, pa.concat_tables(list(tables))


class ShardByPerson(beam.PTransform[Any, Any]):
    """PCollection[pa.Table] → PCollection[(shard, pa.Table)]: all rows of a person in one table.

    shard = keyed BLAKE2b hash of the person id mod ``num_shards``; one table per non-empty shard.

    Args:
      num_shards: S, the number of person shards (each is held in memory by one worker).
      key: the 32-byte bounding key derived by the launcher from the release secret.
    """

    def __init__(self, num_shards: int, key: bytes) -> None:
        super().__init__()
        _check_num_shards(num_shards)
        check_bounding_key(key)
        self._num_shards = num_shards
        self._key = key

    def expand(self, tables: PCollection[Any]) -> PCollection[Any]:
        out: PCollection[Any] = (
            tables
            # (shard, pa.Table) per non-empty shard of each input table
            | "SplitByShard" >> beam.FlatMap(split_by_shard, self._num_shards, self._key)
            # (shard, Iterable[pa.Table])
            | "GroupByShard" >> beam.GroupByKey()
            # (shard, pa.Table): every row of the shard's persons
            | "ConcatenateShard" >> beam.MapTuple(_concatenate)
        )
        return out


class CombinePartitionStats(beam.CombineFn):
    """Sums PartitionStats exactly; thin over ``PartitionStats.add`` (the math lives there)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Beam is unannotated

    def create_accumulator(self) -> PartitionStats:
        return ZERO_STATS

    def add_input(self, acc: PartitionStats, stats: PartitionStats) -> PartitionStats:
        return acc.add(stats)

    def merge_accumulators(self, accs: Iterable[PartitionStats]) -> PartitionStats:
        total = ZERO_STATS
        for acc in accs:
            total = total.add(acc)
        return total

    def extract_output(self, acc: PartitionStats) -> PartitionStats:
        return acc


class _AggregateShard:
    """(shard, table) → its bounded (partition_key, PartitionStats); picklable parameters only."""

    def __init__(self, params: BoundingParams, key: bytes) -> None:
        self._params = params
        self._key = key

    def __call__(
        self, shard: int, table: pa.Table
    ) -> Iterator[tuple[PartitionKey, PartitionStats]]:
        del shard  # the shard's rows are all that matter
        yield from bound_and_aggregate(table, self._params, self._key).items()


class BoundAndAggregate(beam.PTransform[Any, Any]):
    """PCollection[(shard, pa.Table)] → PCollection[(partition_key, PartitionStats)].

    Bounds each person's contribution inside its shard (≤ L partitions, ≤ C rows per partition,
    values clamped; see :mod:`transforms.bounding`) and sums the exact statistics per partition.
    Takes sharded tables so that several queries can share one :class:`ShardByPerson`.
    """

    def __init__(self, params: BoundingParams, key: bytes) -> None:
        super().__init__()
        check_bounding_key(key)
        self._params = params
        self._key = key

    def expand(self, shards: PCollection[Any]) -> PCollection[Any]:
        out: PCollection[Any] = (
            shards
            # (partition_key, PartitionStats) per partition of each shard
            | "BoundShard"
            >> beam.FlatMapTuple(_AggregateShard(self._params, self._key)).with_output_types(
                tuple[Any, PartitionStats]
            )
            # (partition_key, PartitionStats) summed over shards
            | "CombinePerPartition" >> beam.CombinePerKey(CombinePartitionStats())
        )
        return out


class AggregatePerPartition(beam.PTransform[Any, Any]):
    """Clean tables → PCollection[(partition_key, PartitionStats)], contributions bounded.

    ``partition_key`` is the tuple of the ``by`` values (``()`` without ``by``). Not private on its
    own: feed it to :class:`transforms.noisy_combine.ReleaseNoisily`.

    Args:
      params: the query's contribution bounds.
      key: the 32-byte bounding key (from the launcher, derived from the release secret).
      num_shards: the number of person shards.
    """

    def __init__(self, params: BoundingParams, key: bytes, num_shards: int) -> None:
        super().__init__()
        _check_num_shards(num_shards)
        check_bounding_key(key)
        self._params = params
        self._key = key
        self._num_shards = num_shards

    def expand(self, tables: PCollection[Any]) -> PCollection[Any]:
        out: PCollection[Any] = (
            tables
            # (shard, pa.Table)
            | "ShardByPerson" >> ShardByPerson(self._num_shards, self._key)
            # (partition_key, PartitionStats)
            | "BoundAndAggregate" >> BoundAndAggregate(self._params, self._key)
        )
        return out
