"""The CLI and the library are one path: the same release, built both ways under the same secret
(noise on), writes byte-identical outputs for every metric, and the same manifest entries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import userdp.transforms as dp
from userdp.pipelines.config import parse_job
from userdp.pipelines.config_fields import ConfigError
from userdp.pipelines.job import run_release
from userdp.pipelines.kinds import METRIC_KINDS
from userdp.pipelines.output_layout import QueryFiles
from userdp.pipelines.plan import plan_release
from userdp.pipelines.query_output import WriteQueryOutput
from userdp.transforms.mechanisms.chunk_functions import resolve_function
from userdp.transforms.mechanisms.rng import ReleaseKey

from .test_hostile_person import SCHEMA, _base_rows, _queries

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

KEY = ReleaseKey(bytes(range(7, 39)))  # a fixed test secret
SHARDS = 8
TRANSFORMS = {
    "count": dp.Count, "persons": dp.Persons, "sum": dp.Sum, "mean": dp.Mean,
    "median": dp.Median, "quantile": dp.Quantile, "total": dp.Total, "max": dp.Max,
    "distinct": dp.Distinct, "ptr_mean": dp.PtrMean, "ptr_median": dp.PtrMedian,
    "top_partition": dp.TopPartition, "sample_aggregate": dp.SampleAggregate,
    "trimmed_mean": dp.TrimmedMean,
}  # fmt: skip


def _job_table(tmp: Path) -> dict[str, Any]:
    """Every metric (and every method of the order statistics), each with an explicit share."""
    queries = _queries()
    raw = {
        "input": {"path": "data/*.parquet", "person": "person_id"},
        "budget": {"epsilon": float(len(queries)), "delta": 1e-5},
        "output": {"path": "release/"},
        "queries": queries,
    }
    for table in queries:  # a δ share where the query takes one (some refuse it)
        table["epsilon"], table["delta"] = 1.0, 1e-7
        try:
            parse_job({**raw, "queries": [table]}, base_dir=tmp)
        except ConfigError:
            del table["delta"]
    return raw


def test_every_metric_is_byte_identical_through_the_cli_and_the_library(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    rows = pa.Table.from_pylist(_base_rows(persons=400), schema=SCHEMA)
    pq.write_table(rows, tmp_path / "data/l.parquet")
    raw = _job_table(tmp_path)
    job = parse_job(raw, base_dir=tmp_path)
    assert {q.metric for q in job.queries} == set(TRANSFORMS) == {
        "count", "persons", "sum", "mean", *METRIC_KINDS}  # fmt: skip

    result = run_release(job, release_key=KEY, num_shards=SHARDS)
    cli_plan = plan_release(job)
    cli_manifest = json.loads(Path(result.manifest).read_text())

    release = dp.Release._for_launcher(dp.Budget(epsilon=len(job.queries), delta=1e-5), KEY,
                                       noise=True)  # fmt: skip
    lib_dir = tmp_path / "library"
    lib_dir.mkdir()
    with beam.Pipeline() as p:
        tables = p | beam.io.ReadFromParquetBatched(str(tmp_path / "data/*.parquet"))
        people = tables | release.ByPerson(
            "person_id", keys={"domain": "string", "url": "string"}, values=["duration_s"],
            person_type="int", num_shards=SHARDS,
        )  # fmt: skip
        outputs: dict[str, Any] = {}
        for selection in cli_plan.selections:  # queries sharing a selection: one Aggregate
            members = {
                q.name: TRANSFORMS[q.metric](**_params(t, drop=("by", "max_partitions_per_person")))
                for q, t in zip(job.queries, raw["queries"], strict=True)
                if q.name in selection.members
            }
            outputs |= people | selection.name >> dp.Aggregate(
                by=list(selection.by),
                max_partitions_per_person=selection.max_partitions_per_person,
                metrics=members,
            )
        for q, table in zip(job.queries, raw["queries"], strict=True):
            released = outputs.get(q.name)
            if released is None:
                released = people | q.name >> TRANSFORMS[q.metric](**_params(table))
            planned = release._state.queries[q.name].plan
            by = pa.schema([pa.field(c, pa.string()) for c in q.by])
            files = QueryFiles(q.name, ".parquet", 1)
            _ = released | f"{q.name}/write" >> WriteQueryOutput(
                by, planned.output_columns, str(lib_dir), files, "parquet"
            )

    assert cli_plan.selections  # not vacuous: the job has queries that share a selection
    assert release.manifest()["queries"] == cli_manifest["queries"]
    assert release.manifest()["selections"] == cli_manifest["selections"]
    for q in job.queries:
        cli_bytes = (tmp_path / "release" / f"{q.name}.parquet").read_bytes()
        lib_bytes = (lib_dir / f"{q.name}.parquet").read_bytes()
        assert lib_bytes == cli_bytes, q.name
    # not vacuous: every output holds released rows (400 persons, ε = 1 per query)
    empty = [q.name for q in job.queries if not pq.read_table(lib_dir / f"{q.name}.parquet")]
    assert not empty


def _params(table: dict[str, Any], drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """A job file's query table → the metric transform's keyword arguments."""
    params = {k: v for k, v in table.items() if k not in ("name", "metric", *drop)}
    if "function" in params:  # the library takes the callable itself
        params["function"] = resolve_function(params["function"])
    if "partitions" in params:
        params["public_partitions"] = params.pop("partitions")
    return params


@pytest.mark.parametrize("metric", sorted(TRANSFORMS))
def test_each_metric_transform_is_the_job_files_metric(metric: str) -> None:
    assert TRANSFORMS[metric].metric == metric
