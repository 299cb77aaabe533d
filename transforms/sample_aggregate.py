"""Beam transforms for sample-and-aggregate: person chunks, a user function per chunk, the release.

Input: clean ``pa.Table`` elements (``ValidateRows(...).clean``; ``docs/release-job-contracts.md``
§3). :class:`SampleAndAggregate` wires the steps in their only safe order:

1. **Chunk by person.** chunk = keyed hash of the canonical person id mod k — the same keyed
   BLAKE2b hash as :class:`transforms.aggregate.ShardByPerson` (:func:`split_by_shard`), keyed by
   :func:`chunk_key`, a subkey of the release secret for this query. All rows of a person land in
   one chunk and the assignment does not depend on the data. Never chunk by rows: a person with
   many rows would then move every chunk's answer.
2. **One element per chunk.** The k chunk ids are created with ``beam.Create`` and joined to the
   rows (``CoGroupByKey``), so every chunk — empty or not — yields exactly one answer.
3. **Answer per chunk.** The rows of a chunk are concatenated and sorted by all columns
   (:func:`canonical_chunk`), so the table the function sees depends only on the chunk's multiset
   of rows — not on input batching or shuffle order, which another person's rows could change.
   The function (an import path, resolved on the worker) gets that table, or a pandas DataFrame.
   If it raises, or returns NaN, ±inf, a non-number or the wrong shape, or the chunk is empty, the
   answer is the public default (the range midpoints): still a function of that chunk alone, so
   adding or removing a person still changes only one answer (``docs/sample_aggregate.md``).
4. **Release.** The k answers are collected on one worker and released by the aggregator of
   :mod:`transforms.mechanisms.sample_aggregate` — the only step that draws noise, from
   the query's noise key, ``key.rng("sample_aggregate", "value")``.

Steps 1–3 are not private on their own; only the output of :class:`SampleAndAggregate` may leave.
Failures of the function are silent by design: which chunk failed is a fact about the data.
The function is trusted operator code: its own prints, logs or side effects are not covered.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.pvalue import AsSingleton, PCollection
from apache_beam.transforms import combiners

from .aggregate import split_by_shard
from .bounding import check_bounding_key
from .columns import PERSON_COLUMN
from .keys import KeySource, NoiseKey
from .mechanisms.additive import LaplaceMechanism
from .mechanisms.chunk_functions import (
    Answer,
    ChunkFunction,
    check_input_kind,
    default_chunks,
    resolve_function,
    sanitize_answer,
)
from .mechanisms.sample_aggregate import SampleAggregateParams
from .person_hashing import person_shards
from .quiet import quiet

NOISE_LABEL = "sample_aggregate"


def chunk_key(keys: KeySource, name: str) -> bytes:
    """The 32-byte key of a query's person → chunk hash, derived from the release secret.

    A subkey per query: distinct from the bounding key and every noise stream (labels differ).
    """
    return keys.subkey("chunks", name)


def chunk_ids(persons: pa.ChunkedArray | pa.Array, chunks: int, key: bytes) -> np.ndarray:
    """Per row, its person's chunk in [0, chunks): keyed hash of the person id mod k."""
    return person_shards(persons, chunks, key)


def canonical_chunk(tables: Iterable[pa.Table]) -> pa.Table | None:
    """The rows of one chunk as one table sorted by every column, or None if it has no rows.

    The sort makes the table a function of the chunk's multiset of rows: input batching and
    shuffle order (which depend on other persons' rows too) cannot reach the function. Float
    columns get +0.0 added, turning −0.0 into 0.0, so rows that sort as equal are identical.
    """
    parts = [t.replace_schema_metadata(None) for t in tables if t.num_rows]
    if not parts:
        return None
    table = pa.concat_tables(parts)
    for i, column in enumerate(table.columns):
        if pa.types.is_floating(column.type):
            table = table.set_column(i, table.field(i), pc.add(column, 0.0))
    order = pc.sort_indices(table, sort_keys=[(c, "ascending") for c in table.column_names])
    return table.take(order).combine_chunks()


def answer_chunk(
    tables: Iterable[pa.Table],
    function: ChunkFunction,
    params: SampleAggregateParams,
) -> Answer:
    """The sanitised answer of ``function`` on one chunk; the default if it fails or is empty."""
    default = params.default
    table = canonical_chunk(tables)
    if table is None:
        return default
    try:
        # Silenced (.quiet): a warning the function raises on some data (NumPy's "overflow
        # encountered" on huge values, say), its prints (they could quote the chunk's rows) and
        # its log records ("fit did not converge") would appear only when those data are there.
        # A non-finite answer becomes the default below, as a failure does. The answer is read
        # inside the same guard: reading it runs its own code (__float__, …).
        with np.errstate(all="ignore"), quiet():  # errstate is per thread; quiet counts them
            raw = function(table.to_pandas() if params.input_kind == "pandas" else table)
            return sanitize_answer(raw, params.dimension, default)
    # The function's failure is replaced, never reported (it is data) — whatever it raises:
    # SystemExit (sys.exit() on some chunks), asyncio.CancelledError and other BaseExceptions
    # would otherwise end the run, print their text, on those data only. KeyboardInterrupt alone
    # propagates: Ctrl-C or SIGTERM from the operator lands wherever the code is running.
    except KeyboardInterrupt:
        raise
    except BaseException:
        return default


def chunk_answers(
    table: pa.Table, params: SampleAggregateParams, key: bytes, chunks: int
) -> list[Answer]:
    """All k answers for one table holding the whole data set, without Beam.

    The reference for :class:`AnswerPerChunk` (tests, audits and benchmarks use it): the same
    split, canonical chunk and sanitising.
    """
    function = resolve_function(params.function)
    parts: dict[int, list[pa.Table]] = {}
    for chunk, part in split_by_shard(table, chunks, key):
        parts.setdefault(chunk, []).append(part)
    return [answer_chunk(parts.get(c, []), function, params) for c in range(chunks)]


def _chunk_id_keys(chunks: int) -> Iterator[tuple[int, None]]:
    return ((c, None) for c in range(chunks))


class _AnswerChunk(beam.DoFn):
    """(chunk, {"ids": [None], "tables": [pa.Table, ...]}) → (chunk, answer)."""

    def __init__(self, params: SampleAggregateParams) -> None:
        self._params = params
        self._function: ChunkFunction | None = None

    def setup(self) -> None:
        self._function = resolve_function(self._params.function)

    def process(self, element: tuple[int, dict[str, Iterable[Any]]]) -> Iterator[Any]:
        chunk, grouped = element
        if not list(grouped["ids"]):
            raise RuntimeError(
                "internal error in userdp: rows were routed to a chunk id outside [0, k)"
            )
        assert self._function is not None  # set in setup
        yield chunk, answer_chunk(grouped["tables"], self._function, self._params)


class AnswerPerChunk(beam.PTransform[Any, Any]):
    """PCollection[pa.Table] → PCollection[(chunk, answer)]: exactly one answer per chunk.

    Not private on its own (answers are exact): feed it only to the release in
    :class:`SampleAndAggregate`.

    Args:
      params: the query (function, dimension, ranges for the default answer, input kind).
      key: the 32-byte chunk key (:func:`chunk_key`).
      chunks: a singleton PCollection holding k, or None to use ``params.chunks``.
    """

    def __init__(
        self,
        params: SampleAggregateParams,
        key: bytes,
        chunks: PCollection[int] | None = None,
    ) -> None:
        super().__init__()
        check_bounding_key(key)
        if chunks is None and params.chunks is None:
            raise ValueError(
                f"query {params.name!r} chooses k from a person count: pass that k as a "
                "singleton PCollection (SampleAndAggregate does)"
            )
        resolve_function(params.function)  # fail at pipeline construction, not on the workers
        check_input_kind(params.input_kind)
        self._params = params
        self._key = key
        self._chunks = chunks

    def expand(self, tables: PCollection[Any]) -> PCollection[Any]:
        chunks = self._chunks
        if chunks is None:
            chunks = tables.pipeline | "CreateK" >> beam.Create([self._params.chunks])
        k = AsSingleton(chunks)
        ids = chunks | "ChunkIds" >> beam.FlatMap(_chunk_id_keys)  # (chunk, None) for c < k
        parts = (
            tables
            # (chunk, pa.Table): the rows of each input table whose person hashes to that chunk
            | "SplitByChunk" >> beam.FlatMap(split_by_shard, k, self._key)
        )
        out: PCollection[Any] = (
            {"ids": ids, "tables": parts}
            # (chunk, {"ids": [None], "tables": [pa.Table, ...]}): every chunk, rows or not
            | "GroupByChunk" >> beam.CoGroupByKey()
            # (chunk, answer): a tuple of `dimension` floats
            | "AnswerChunk" >> beam.ParDo(_AnswerChunk(self._params))
        )
        return out


_COUNT_BUCKETS = 64
"""The exact person count for k is made per bucket of a keyed hash of the person id: a few Arrow
arrays per input table go through the shuffle, not one element per person."""


def _distinct_persons(table: pa.Table, key: bytes) -> Iterator[tuple[int, pa.Array]]:
    """(bucket, the table's distinct person ids in that bucket): every row of one person, in any
    table, goes to the same bucket, so the buckets' distinct counts add up to the person count."""
    ids = pc.unique(table.column(PERSON_COLUMN))
    if len(ids) == 0:
        return
    bucket = person_shards(ids, _COUNT_BUCKETS, key)
    for b in np.unique(bucket).tolist():
        yield b, ids.filter(pa.array(bucket == b))


def _count_bucket(element: tuple[int, Iterable[pa.Array]]) -> int:
    _, parts = element
    return len(pc.unique(pa.concat_arrays(list(parts))))


class CountDistinctPersons(beam.PTransform[Any, Any]):
    """Clean tables → one int, the exact number of distinct persons (never released: k's
    input). Per table, its distinct ids go out as one Arrow array per bucket of a keyed hash
    (``key``); a bucket's arrays meet in one place, where their distinct ids are counted. One
    Python element per person through ``Distinct`` cost about 10 µs a person
    (``benchmarks/sample_aggregate.py --count``)."""

    def __init__(self, key: bytes) -> None:
        super().__init__()
        self._key = key

    def expand(self, tables: PCollection[Any]) -> PCollection[Any]:
        count: PCollection[Any] = (
            tables
            | "PersonsPerTable" >> beam.FlatMap(_distinct_persons, self._key)
            | "GroupByBucket" >> beam.GroupByKey()
            | "DistinctPersons" >> beam.Map(_count_bucket)
            | "CountPersons" >> beam.CombineGlobally(sum)
        )
        return count


class _ChooseChunks:
    """Exact person count → k = default_chunks(Laplace-noised count); the count never leaves."""

    def __init__(self, params: SampleAggregateParams, key: NoiseKey, noise: bool):
        assert params.count_epsilon is not None  # SampleAggregateParams guarantees it
        self._mechanism = LaplaceMechanism(1.0, params.count_epsilon)
        self._rng_label = (NOISE_LABEL, "persons")
        self._key = key
        self._noise = noise

    def __call__(self, persons: int) -> int:
        if not self._noise:
            return default_chunks(float(persons))
        noisy = self._mechanism.release(persons, self._key.rng(*self._rng_label))
        return default_chunks(noisy)


class _ReleaseAnswers:
    """The k (chunk, answer) pairs → one output row per coordinate of the private aggregate."""

    def __init__(self, params: SampleAggregateParams, key: NoiseKey, noise: bool):
        self._params = params
        self._key = key
        self._noise = noise

    def rows(self, answers: list[tuple[int, Answer]], chunks: int) -> Iterator[dict[str, Any]]:
        """A bound method, not ``__call__``: Beam passes side inputs only to functions/methods."""
        answers = sorted(answers)
        if [c for c, _ in answers] != list(range(chunks)):
            raise RuntimeError(
                f"internal error in userdp: expected one answer for each of {chunks} chunks, got "
                f"{len(answers)}"
            )
        aggregator = self._params.aggregator_for(chunks)
        values = [a for _, a in answers]
        if self._noise:
            rng = self._key.rng(NOISE_LABEL, "value")
            released: tuple[Any, ...] = aggregator.release(values, rng)
        else:
            released = aggregator.statistic(values)
        for j, v in enumerate(released):
            yield {
                "coordinate": j,
                "value": float(v),
                "stddev": aggregator.noise_std,
                "chunks": chunks,
            }


class SampleAndAggregate(beam.PTransform[Any, Any]):
    """Clean tables → PCollection[dict]: the private sample-and-aggregate release of one query.

    One row per coordinate j of the answer: ``{"coordinate": j, "value": float, "stddev": float or
    None, "chunks": k}`` (``stddev``: the Laplace or Gaussian noise's for ``mean``, None for
    ``median``; k is public or differentially private). Guarantee: ``params.guarantee()`` — pure
    ε-DP, or ρ-zCDP when the params carry ``rho``, for adding or removing all rows of one person
    (:mod:`transforms.mechanisms.sample_aggregate`).

    Args:
      params: the query.
      keys: the source of the query's noise key (``keys.for_query(name)``) and chunk key
        (``chunk_key``), both derived here: the steps hold only these, never the release secret.
      noise: **test hook only**, never set from a job file: ``False`` releases the exact
        aggregate (clipped mean / median of the chunk answers) and takes k from the exact person
        count. Outputs with ``noise=False`` are not private.
    """

    def __init__(
        self, params: SampleAggregateParams, keys: KeySource, *, noise: bool = True
    ) -> None:
        super().__init__()
        if not hasattr(keys, "for_query"):
            raise TypeError(f"keys must be a ReleaseKey or ReleaseKeys, got {type(keys).__name__}")
        resolve_function(params.function)
        check_input_kind(params.input_kind)
        self._params = params
        self._key = keys.for_query(params.name)
        self._chunk_key = chunk_key(keys, params.name)
        self._noise = noise

    def expand(self, tables: PCollection[Any]) -> PCollection[Any]:
        p = self._params
        if p.chunks is None:
            chunks = (
                tables
                | "CountPersons" >> CountDistinctPersons(self._chunk_key)
                # k from the Laplace-noised count (the count itself never leaves)
                | "ChooseK" >> beam.Map(_ChooseChunks(p, self._key, self._noise))
            )
        else:
            chunks = tables.pipeline | "CreateK" >> beam.Create([p.chunks])
        key = self._chunk_key
        release = _ReleaseAnswers(p, self._key, self._noise)
        rows: PCollection[Any] = (
            tables
            # (chunk, answer) for every chunk in [0, k)
            | "AnswerPerChunk" >> AnswerPerChunk(p, key, chunks)
            # [(chunk, answer)] * k, on one worker
            | "CollectAnswers" >> combiners.ToList()
            # {"coordinate", "value", "stddev", "chunks"} per coordinate
            | "Release" >> beam.FlatMap(release.rows, AsSingleton(chunks))
        )
        return rows
