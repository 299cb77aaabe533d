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
import pyarrow.compute as pc
from apache_beam import coders
from apache_beam.coders import typecoders
from apache_beam.pvalue import PCollection

from .bounding import (
    ZERO_STATS,
    PartitionKey,
    PartitionStats,
    bound_and_aggregate,
    check_bounding_key,
    rows_of_listed_keys,
)
from .columns import PERSON_COLUMN, PERSON_HASH_COLUMN
from .params import BoundingParams
from .person_hashing import (
    I64,
    MAX_PERSON_SHARDS,
    PERSON_HASH_KEY,
    U64,
    is_text_type,
    person_hash_fingerprint,
    person_rank_hashes,
    person_shards,
    rank_hash_shards,
)


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


def check_num_shards(num_shards: int) -> None:
    """Refuses, while the pipeline is built, a shard count the shard steps cannot hold."""
    if (
        isinstance(num_shards, bool)
        or not isinstance(num_shards, int)
        or not 1 <= num_shards <= MAX_PERSON_SHARDS
    ):
        raise ValueError(
            f"num_shards must be an integer in [1, {MAX_PERSON_SHARDS}], got {num_shards!r}; "
            "each shard is processed in memory, so use more shards for more input"
        )


def _by_shard(shard: I64, num_shards: int) -> tuple[I64, I64, I64]:
    """(stable order grouping the elements by shard, per shard: start, end in that order)."""
    # A stable sort of small ints is a radix sort: 16-bit shard numbers sort several times faster.
    order = np.argsort(shard.astype(np.int16) if num_shards <= 1 << 15 else shard, kind="stable")
    ends = np.cumsum(np.bincount(shard, minlength=num_shards))
    starts = np.concatenate(([0], ends[:-1]))
    return order, starts, ends


def split_by_shard(
    table: pa.Table, num_shards: int, key: bytes, *, packed: bool = False
) -> Iterator[tuple[int, Any]]:
    """(shard, rows of ``table`` whose person hashes to that shard), for each non-empty shard.

    By default: shard = :func:`transforms.person_hashing.person_shards`, parts are plain tables
    with the input's columns (sample-and-aggregate chunks rely on both). With ``packed`` (the
    shuffle of :class:`ShardByPerson`): shard = :func:`transforms.person_hashing.rank_hash_shards`
    of the person's ranking hash, and each part is a :data:`ShardPart` for :func:`_concatenate` to
    unpack.
    """
    if table.num_rows == 0:
        return
    if packed:
        yield from _packed_parts(table, num_shards, key)
        return
    shard = person_shards(table.column(PERSON_COLUMN), num_shards, key)
    order, starts, ends = _by_shard(shard, num_shards)
    for s in np.flatnonzero(ends - starts).tolist():
        yield s, table.take(pa.array(order[starts[s] : ends[s]]))


# One input table's rows of one shard, packed for the shuffle, and its persons' ranking hashes.
# The person column, and string columns with few distinct values, travel dictionary-encoded with
# small integer indices (marked by _PACKED in their field metadata); a person's ranking hash
# travels once per part, not once per row. Arrow tables cross the shuffle pickled, and fewer bytes
# there is most of the saving: ~9 instead of ~29 bytes per row of the throughput benchmark.
ShardPart = tuple[pa.Table, U64]
_PACKED = {b"userdp.packed": b"dictionary"}


def _numpy(array: pa.Array) -> I64:
    out: I64 = array.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return out


def _small_indices(indices: I64, size: int) -> pa.Array:
    """Indices into a dictionary of ``size`` values, as the narrowest signed Arrow integer."""
    dtype = np.int8 if size <= 1 << 7 else np.int16 if size <= 1 << 15 else np.int32
    return pa.array(indices.astype(dtype))


def _packed_parts(table: pa.Table, num_shards: int, key: bytes) -> Iterator[tuple[int, ShardPart]]:
    """The packed form of :func:`split_by_shard` (see :data:`ShardPart`)."""
    if PERSON_HASH_COLUMN in table.column_names:
        table = table.drop_columns([PERSON_HASH_COLUMN])
    person_column = table.column(PERSON_COLUMN).combine_chunks()
    if person_column.null_count:
        raise ValueError(
            f"{PERSON_COLUMN} has null ids: shard only validated tables (ValidateRows.clean)"
        )
    persons = pc.dictionary_encode(person_column)
    ids = persons.dictionary  # distinct person ids of this table
    id_hash = person_rank_hashes(ids, key)
    id_shard = rank_hash_shards(id_hash, num_shards)
    id_order, id_starts, id_ends = _by_shard(id_shard, num_shards)
    local = np.empty(len(ids), dtype=np.int64)  # id → its index among its shard's ids
    local[id_order] = np.arange(len(ids)) - np.repeat(id_starts, id_ends - id_starts)
    row_id = _numpy(persons.indices)
    order, starts, ends = _by_shard(id_shard[row_id], num_shards)
    shards = np.flatnonzero(ends - starts).tolist()

    # String columns worth sending as dictionaries: name → (distinct values, per row: index).
    encoded: dict[str, tuple[pa.Array, I64]] = {}
    for field in table.schema:
        if field.name != PERSON_COLUMN and is_text_type(field.type):
            column = table.column(field.name).combine_chunks()
            if column.null_count:  # indices would have to carry nulls: send the column plain
                continue
            enc = pc.dictionary_encode(column)
            if enc.dictionary.nbytes * len(shards) <= column.nbytes // 2:
                encoded[field.name] = (enc.dictionary, _numpy(enc.indices))
    plain = table.drop_columns([PERSON_COLUMN, *encoded])
    metadata = {**(table.schema.metadata or {}), PERSON_HASH_KEY: person_hash_fingerprint(key)}
    for s in shards:
        rows, part_ids = order[starts[s] : ends[s]], id_order[id_starts[s] : id_ends[s]]
        taken = plain.take(pa.array(rows))
        fields, columns = [], []
        for field in table.schema:
            if field.name == PERSON_COLUMN:
                dictionary = ids.take(pa.array(part_ids))
                indices = _small_indices(local[row_id[rows]], len(part_ids))
            elif field.name in encoded:
                dictionary, index = encoded[field.name]
                indices = _small_indices(index[rows], len(dictionary))
            else:
                fields.append(field)
                columns.append(taken.column(field.name))
                continue
            column = pa.DictionaryArray.from_arrays(indices, dictionary)
            fields.append(pa.field(field.name, column.type, metadata=_PACKED))
            columns.append(column)
        part = pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=metadata))
        yield s, (part, id_hash[part_ids])


def _unpack(part: pa.Table, hashes: U64 | None) -> pa.Table:
    """A :data:`ShardPart` → a plain table: the input's columns, then ``__person_hash__``.

    ``hashes`` None: the input's columns only (and the input's schema metadata).
    """
    fields, columns = [], []
    for field, column in zip(part.schema, part.columns, strict=True):
        packed = field.metadata == _PACKED
        value_type = field.type.value_type if packed else field.type
        fields.append(pa.field(field.name, value_type) if packed else field)
        columns.append(pc.cast(column, value_type) if packed else column)
    if hashes is None:
        metadata = dict(part.schema.metadata or {})
        metadata.pop(PERSON_HASH_KEY, None)
        return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=metadata or None))
    person_index = _numpy(part.column(PERSON_COLUMN).combine_chunks().indices)
    fields.append(pa.field(PERSON_HASH_COLUMN, pa.uint64()))
    columns.append(pa.array(hashes[person_index], pa.uint64()))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=part.schema.metadata))


def _concatenate(
    shard: int, parts: Iterable[pa.Table | ShardPart], person_hashes: bool = True
) -> tuple[int, pa.Table]:
    """(shard, its parts) → (shard, one plain table), with ``__person_hash__`` if asked."""
    tables = [
        p if isinstance(p, pa.Table) else _unpack(p[0], p[1] if person_hashes else None)
        for p in parts
    ]
    return shard, pa.concat_tables(tables)


class ShardByPerson(beam.PTransform[Any, Any]):
    """PCollection[pa.Table] → PCollection[(shard, pa.Table)]: all rows of a person in one table.

    shard = a function of the person's keyed BLAKE2b ranking hash, mod ``num_shards``; one table
    per non-empty shard, with the input's columns and ``__person_hash__``, that hash per row, which
    :class:`BoundAndAggregate` with the same key reuses instead of hashing every person a second
    time (see :mod:`transforms.bounding`). Rows cross the shuffle packed (:data:`ShardPart`).

    Args:
      num_shards: S, the number of person shards (each is held in memory by one worker).
      key: the 32-byte bounding key derived by the launcher from the release secret.
      person_hashes: add ``__person_hash__`` (False: exactly the input's columns).
    """

    def __init__(self, num_shards: int, key: bytes, *, person_hashes: bool = True) -> None:
        super().__init__()
        check_num_shards(num_shards)
        check_bounding_key(key)
        self._num_shards = num_shards
        self._key = key
        self._person_hashes = person_hashes

    def expand(self, tables: PCollection[Any]) -> PCollection[Any]:
        split = beam.FlatMap(split_by_shard, self._num_shards, self._key, packed=True)
        out: PCollection[Any] = (
            tables
            # (shard, ShardPart) per non-empty shard of each input table
            | "SplitByShard" >> split
            # (shard, Iterable[ShardPart])
            | "GroupByShard" >> beam.GroupByKey()
            # (shard, pa.Table): every row of the shard's persons (+ __person_hash__)
            | "ConcatenateShard" >> beam.MapTuple(_concatenate, self._person_hashes)
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

    def __init__(
        self, params: BoundingParams, key: bytes, listed: tuple[PartitionKey, ...] | None
    ) -> None:
        self._params = params
        self._key = key
        self._listed = listed

    def __call__(
        self, shard: int, table: pa.Table
    ) -> Iterator[tuple[PartitionKey, PartitionStats]]:
        del shard  # the shard's rows are all that matter
        if self._listed is not None:  # public partitions: rows of other keys never count
            table = rows_of_listed_keys(table, self._params.by, self._listed)
        yield from bound_and_aggregate(table, self._params, self._key).items()


class BoundAndAggregate(beam.PTransform[Any, Any]):
    """PCollection[(shard, pa.Table)] → PCollection[(partition_key, PartitionStats)].

    Bounds each person's contribution inside its shard (≤ L partitions, ≤ C rows per partition,
    values clamped; see :mod:`transforms.bounding`) and sums the exact statistics per partition.
    Takes sharded tables so that several queries can share one :class:`ShardByPerson`.

    ``listed``: with public partitions, the listed keys (tuples of the ``by`` values in their
    input types). Rows of other keys are dropped *before* bounding, as PipelineDP does: a person's
    L partitions are then picked among the listed ones only. (Picked among all, then dropped, a
    person with 20 partitions of which 2 are listed kept L = 2 of the 20 and lost ~90% of the
    rows the release could count.) A public list is data-independent, so this changes no bound.
    """

    def __init__(
        self, params: BoundingParams, key: bytes, listed: tuple[PartitionKey, ...] | None = None
    ) -> None:
        super().__init__()
        check_bounding_key(key)
        if listed is not None and any(len(k) != len(params.by) for k in listed):
            raise ValueError(f"listed keys must hold one value per `by` column {params.by}")
        self._params = params
        self._key = key
        self._listed = listed

    def expand(self, shards: PCollection[Any]) -> PCollection[Any]:
        out: PCollection[Any] = (
            shards
            # (partition_key, PartitionStats) per partition of each shard
            | "BoundShard"
            >> beam.FlatMapTuple(
                _AggregateShard(self._params, self._key, self._listed)
            ).with_output_types(tuple[Any, PartitionStats])
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
        check_num_shards(num_shards)
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
