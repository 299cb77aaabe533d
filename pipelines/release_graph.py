"""The release's Beam pipeline: read → validate → one shuffle by person → per query, bound and
aggregate or a kind's steps → the noisy combine (the only noise) → each query's output files
(:mod:`.query_output`: one file, or shards of a partitioned query).

:func:`build_pipeline` adds these steps to a pipeline; the launcher (:mod:`.job`) checks inputs,
charges the ledger and publishes what the pipeline wrote. Steps get only the keys they need from
the launcher's :class:`~transforms.keys.ReleaseKeys`: a query's noise key, the bounding subkey.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import apache_beam as beam
import pyarrow as pa
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

from userdp.transforms.by_person import ByPerson
from userdp.transforms.keys import ReleaseKeys
from userdp.transforms.mechanisms.rng import ReleaseKey
from userdp.transforms.metrics import PlannedQuery, query_columns
from userdp.transforms.person_hashing import MAX_PERSON_SHARDS
from userdp.transforms.release import Budget, Release
from userdp.transforms.select_partitions import PlannedSelection

from .config import JobConfig
from .output_layout import RELEASE_FORMATS, QueryFiles
from .plan import ReleasePlan
from .query_output import WriteQueryOutput
from .sinks import WriteDeadLetters
from .sources import InputSchema, ReadArrowTables

DEFAULT_SHARDS = 64  # person shards; each is bounded in memory on one worker (DESIGN "Scale")
INPUT_BYTES_PER_PERSON_SHARD = 64 << 20  # input on disk per person shard, at most


def default_shards(runner: str, options: PipelineOptions, input_bytes: int = 0) -> int:
    """Person shards when the caller names none: enough that no shard holds more than
    ``INPUT_BYTES_PER_PERSON_SHARD`` of input files on disk (public file metadata, so the count
    never depends on a value), and at least 64 on clusters or max(8, 4 × workers) on direct.

    A shard's rows are one table on one worker, so its memory follows input / shards; more shards
    bound it on every runner. The direct runner's floor is small because each shard costs a fixed
    overhead (a table through the shuffle, a bounding call): measured with
    benchmarks/throughput.py (one in-memory worker, 2.24M rows), 8 shards took ~15% less CPU than
    64. Shard counts never change released values.
    """
    by_size = -(-input_bytes // INPUT_BYTES_PER_PERSON_SHARD)
    if runner != "direct":
        return min(MAX_PERSON_SHARDS, max(DEFAULT_SHARDS, by_size))
    workers = options.view_as(DirectOptions).direct_num_workers or 1
    return min(MAX_PERSON_SHARDS, max(8, 4 * workers, by_size))


def required_columns(job: JobConfig) -> dict[str, str]:
    """Column → kind ("person", "key", "number") for every column a query reads."""
    columns = {job.input.person: "person"}
    for q in job.queries:
        for col, kind in query_columns(q).items():
            columns.setdefault(col, kind)
    return columns


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
    files: Mapping[str, QueryFiles] | None = None,
) -> None:
    """Adds the release's steps to ``pipeline``; ``noise=False`` is a test hook, not config.

    The job file is a client of the library: the files are read as raw tables, then the same
    ``ByPerson`` and metric steps a Beam user applies (:class:`~userdp.transforms.metrics.
    PlannedQuery`, with the plans the job's budget split made), then one file per query.

    ``keys``: the launcher's keys; steps get only what they need from them (a query's noise key,
    the bounding subkey), never the release secret. ``out_dir``: where the outputs are written
    (the staging directory; default ``output.path``). ``num_shards`` None:
    :func:`default_shards` for the job's runner and the pipeline's options. ``files``: each
    query's output files (:mod:`.output_layout`; default: one file per query).
    """
    if num_shards is None:
        num_shards = default_shards(job.runner.name, pipeline.options, schema.total_bytes)
    release = Release._for_launcher(_budget(job), keys, noise=noise)
    tables = pipeline | "Read" >> ReadArrowTables(schema)  # raw pa.Table of the needed columns
    people = tables | "ByPerson" >> ByPerson(
        release, schema.person, keys={}, values=(), num_shards=num_shards, schema=schema
    )
    if job.input.dead_letter:
        _ = people.dead_letter | "WriteDeadLetters" >> WriteDeadLetters(job.input.dead_letter)
    out_dir = out_dir or job.output.path
    fmt = job.output.format
    key_types = dict(schema.keys)
    selected = {  # one selection per group of queries that share it (shared_selection.py)
        s.name: people | s.name >> PlannedSelection(s) for s in plan.selections
    }
    for i, (q, planned) in enumerate(zip(job.queries, plan.queries, strict=True)):
        shared = getattr(planned, "shared_selection", None)
        kept = selected[shared] if shared is not None else None
        delta = plan.selection_deltas.get(q.name, Fraction(0))  # δ beside a ρ total
        released = people | q.name >> PlannedQuery(q, planned, f"queries[{i}]", kept, delta=delta)
        columns = planned.output_columns
        by = pa.schema([pa.field(c, key_types[c]) for c in q.by])
        layout = (files or {}).get(q.name) or QueryFiles(q.name, RELEASE_FORMATS[fmt], 1)
        write = WriteQueryOutput(by, columns, out_dir, layout, fmt)
        _ = released | f"{q.name}/Write" >> write


def _budget(job: JobConfig) -> Budget:
    b = job.budget
    return Budget(epsilon=b.epsilon, delta=b.delta, rho=b.rho)
