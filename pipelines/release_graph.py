"""The release's Beam pipeline: read → validate → one shuffle by person → per query, bound and
aggregate or a kind's steps → the noisy combine (the only noise) → one output file per query.

:func:`build_pipeline` adds these steps to a pipeline; the launcher (:mod:`.job`) checks inputs,
charges the ledger and publishes what the pipeline wrote. Steps get only the keys they need from
the launcher's :class:`~transforms.keys.ReleaseKeys`: a query's noise key, the bounding subkey.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
from apache_beam.pvalue import PCollection
from apache_beam.transforms import combiners

from transforms.aggregate import BoundAndAggregate, ShardByPerson
from transforms.keys import ReleaseKeys
from transforms.mechanisms.rng import ReleaseKey
from transforms.noisy_combine import ReleaseNoisily, canonical_key_string
from transforms.params import ReleaseParams
from transforms.validate import ValidateRows

from .config import JobConfig
from .kinds import kind_of
from .kinds.base import BuildContext
from .plan import QueryPlan, ReleasePlan
from .public_keys import typed_public_keys
from .sinks import WriteDeadLetters, write_release
from .sources import InputSchema, ReadArrowTables

DEFAULT_SHARDS = 64  # person shards; each is bounded in memory on one worker (DESIGN "Scale")


def default_shards(runner: str, options: PipelineOptions) -> int:
    """Person shards when the caller names none: 64 on clusters, max(8, 4 × workers) on direct.

    The direct runner holds all data in its worker processes anyway, and each shard costs a fixed
    overhead (a table through the shuffle, a bounding call): a few shards per worker keep every
    worker busy. Measured with benchmarks/throughput.py (one in-memory worker, 2.24M rows): 8
    shards took ~15% less CPU than 64. Shard counts never change released values.
    """
    if runner != "direct":
        return DEFAULT_SHARDS
    return max(8, 4 * (options.view_as(DirectOptions).direct_num_workers or 1))


def required_columns(job: JobConfig) -> dict[str, str]:
    """Column → kind ("person", "key", "number") for every column a query reads."""
    columns = {job.input.person: "person"}
    for q in job.queries:
        query_kind = kind_of(q)
        if query_kind is not None:
            for col, kind in query_kind.required_columns(q).items():
                columns.setdefault(col, kind)
            continue
        for col in q.by:
            columns.setdefault(col, "key")
        if q.value is not None:
            columns.setdefault(q.value, "number")
    return columns


def _typed_public_keys(params: ReleaseParams, schema: InputSchema) -> ReleaseParams:
    """Public keys read as text are converted to the ``by`` columns' types, so they can match."""
    if params.public_partitions is None:
        return params
    keys = typed_public_keys(params.public_partitions, params.bounding.by, schema)
    return dataclasses.replace(params, public_partitions=keys)


AGGREGATE_COLUMNS = (("value", "float64"), ("stddev", "float64"))
_ARROW_TYPES = {
    "float64": pa.float64(),
    "int64": pa.int64(),
    "string": pa.string(),
    "bool": pa.bool_(),
}


def _write_query_output(
    rows: list[dict[str, Any]],
    by: pa.Schema,
    columns: Sequence[tuple[str, str]],
    path_without_ext: str,
    fmt: str,
) -> str:
    """One query's released rows → one file, sorted by partition key so the bytes are stable.

    Every column has a declared type — the ``by`` columns their input types, the released columns
    the kind's — never one inferred from the values, so an output's schema does not depend on the
    data: not on which partitions survived selection, nor on whether a value is missing (⊥).
    """
    names = by.names
    # sorted by partition key, then by the released columns (kinds with several rows and no
    # partition key, e.g. one row per coordinate), so the bytes never depend on element order
    order = [*names, *(c for c, _ in columns)]
    rows = sorted(rows, key=lambda r: canonical_key_string(tuple(r[c] for c in order)))
    fields = [*by, *(pa.field(c, _ARROW_TYPES[t]) for c, t in columns)]
    schema = pa.schema(fields)
    table = pa.table({f.name: pa.array([r[f.name] for r in rows], f.type) for f in fields}, schema)
    return write_release(table, path_without_ext, fmt)


def build_pipeline(
    pipeline: beam.Pipeline,
    job: JobConfig,
    plan: ReleasePlan,
    schema: InputSchema,
    keys: ReleaseKeys | ReleaseKey,
    *,
    out_dir: str | None = None,
    noise: bool = True,
    num_shards: int | None = None,
) -> None:
    """Adds the release's steps to ``pipeline``; ``noise=False`` is a test hook, not config.

    ``keys``: the launcher's keys; steps get only what they need from them (a query's noise key,
    the bounding subkey), never the release secret. ``out_dir``: where the outputs are written
    (the staging directory; default ``output.path``). ``num_shards`` None:
    :func:`default_shards` for the job's runner and the pipeline's options.
    """
    if isinstance(keys, ReleaseKey):
        keys = ReleaseKeys(keys)
    if num_shards is None:
        num_shards = default_shards(job.runner.name, pipeline.options)
    tables = pipeline | "Read" >> ReadArrowTables(schema)  # pa.Table of the needed columns
    validated = tables | "Validate" >> ValidateRows(
        schema.person,
        schema.person_type,
        dict(schema.keys),
        list(schema.numbers),
    )
    clean = validated.clean  # pa.Table: __person__ (string), keys, numbers (float64)
    if job.input.dead_letter:
        _ = validated.dead_letter | "WriteDeadLetters" >> WriteDeadLetters(job.input.dead_letter)
    bounding_key = keys.subkey("bounding")
    out_dir = out_dir or job.output.path
    shuffle: list[PCollection[Any]] = []  # built on first use: an unused branch would still run

    def shards() -> PCollection[Any]:
        """(shard, pa.Table): the release's one shuffle by person, shared by all its queries."""
        if not shuffle:
            shuffle.append(clean | "ShardByPerson" >> ShardByPerson(num_shards, bounding_key))
        return shuffle[0]

    ctx = BuildContext(schema, keys, noise, num_shards, shards)
    key_types = dict(schema.keys)
    for q in plan.queries:
        if isinstance(q, QueryPlan):
            params = _typed_public_keys(q.params, schema)
            name, by = params.name, params.bounding.by
            columns: tuple[tuple[str, str], ...] = AGGREGATE_COLUMNS
            released = (
                shards()
                | f"{name}/BoundAndAggregate" >> BoundAndAggregate(params.bounding, bounding_key)
                # (partition_key, PartitionStats)
                | f"{name}/Release" >> ReleaseNoisily(params, keys, noise=noise)
            )  # {by..., value, stddev}
        else:
            name, by, columns = q.name, q.by, q.output_columns
            kind = kind_of(job.queries[plan.queries.index(q)])
            assert kind is not None  # a plan that is not a QueryPlan comes from a kind
            released = kind.expand(clean, q, ctx)  # {by..., *output_columns}
        _ = (
            released
            | f"{name}/Collect" >> combiners.ToList()
            | f"{name}/Write"
            >> beam.Map(
                _write_query_output,
                pa.schema([pa.field(c, key_types[c]) for c in by]),
                columns,
                FileSystems.join(out_dir, name),
                job.output.format,
            )
        )
