"""The hostile person: one adversarial person never changes what an observer sees outside the
released values (issue 12, item 2).

A release whose run crashes, warns or changes its output schema or file set when one person is
added leaks that person's presence with no noise at all. Here every metric kind of the job file —
each method and noise of the order statistics, the bounded aggregates with fixed and private
bounds, the shifted inverse mechanism, PTR, the stability-based release, sample-and-aggregate with
a user function that does not defend itself — is released (noise on, as in production) from

- a base data set of 60 ordinary persons, and the same set plus one hostile person: rows of ±inf;
  rows of ±1e308 (whose sums overflow), −0.0, values at and far outside the bounds; or 10^6 rows;
- no person at all, and one hostile person alone.

Each run must succeed with no warning (pytest turns warnings into errors), every released number
must be finite, and the output schemas, the set of files and the manifest's keys must be the same
as without the person. Values themselves may differ: they are the DP part.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from userdp.pipelines.config import parse_job
from userdp.pipelines.job import run_release
from userdp.pipelines.kinds import METRIC_KINDS
from userdp.pipelines.kinds.quantile import METHODS
from userdp.transforms.mechanisms.rng import ReleaseKey

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

KEY = ReleaseKey(bytes(range(32)))
DOMAINS = ["a.example", "b.example", "c.example", "d.example"]
SCHEMA = pa.schema(
    [("person_id", pa.int64()), ("domain", pa.string()), ("url", pa.string()),
     ("timestamp", pa.float64()), ("duration_s", pa.float64())]
)  # fmt: skip
HOSTILE_ID = 10**6
HEAVY_ROWS = 10**6


def raw_mean_duration(table: pa.Table) -> float:
    """A sample-and-aggregate function that does not defend itself: the plain mean of the
    durations, NaN or ±inf on hostile rows. The framework must cope."""
    return float(np.mean(np.asarray(table.column("duration_s").to_numpy(), dtype=np.float64)))


def _queries() -> list[dict[str, Any]]:
    by = {"by": ["domain"], "max_partitions_per_person": 2, "max_rows_per_partition": 3}
    fn = "tests.pipelines.test_hostile_person:raw_mean_duration"
    return [
        {"name": "count", "metric": "count", **by},
        {"name": "persons", "metric": "persons", "by": ["domain"], "max_partitions_per_person": 2},
        {"name": "sum", "metric": "sum", "value": "duration_s", "bounds": [-100.0, 600.0], **by},
        {"name": "mean", "metric": "mean", "value": "duration_s", "bounds": [0.0, 600.0], **by},
        {"name": "count_auto", "metric": "count", "bound": "auto", "bound_range": [1, 1024]},
        {"name": "sum_auto", "metric": "sum", "value": "duration_s", "bound": "auto",
         "bound_range": [1, 2**20]},
        {"name": "median_smooth", "metric": "median", "per_person": "sum", "value": "duration_s",
         "bounds": [-100.0, 600.0], "noise": "cauchy"},
        {"name": "p90_smooth", "metric": "quantile", "q": 0.9, "per_person": "mean",
         "value": "duration_s", "bounds": [0.0, 600.0], "noise": "laplace"},
        {"name": "median_lln", "metric": "median", "per_person": "max", "value": "duration_s",
         "bounds": [0.0, 600.0], "noise": "lln"},
        {"name": "median_em", "metric": "median", "per_person": "mean", "value": "duration_s",
         "bounds": [0.0, 600.0]},
        {"name": "p10_em", "metric": "quantile", "q": 0.1, "per_person": "count",
         "bounds": [0.0, 50.0], "grid_bits": 12},
        {"name": "median_shifted", "metric": "median", "method": "shifted_inverse",
         "value": "duration_s", "upper": 100000, "resolution": 0.5},
        {"name": "total_rows", "metric": "total", "upper": 2**21},
        {"name": "total_duration", "metric": "total", "value": "duration_s", "upper": 2**30},
        {"name": "max_rows", "metric": "max", "upper": 2**21},
        {"name": "distinct_urls", "metric": "distinct", "value": "url", "upper": 2**21},
        {"name": "ptr_mean", "metric": "ptr_mean", "per_person": "sum", "value": "duration_s",
         "bounds": [0.0, 600.0], "bound": 0.05},
        {"name": "ptr_mean_ladder", "metric": "ptr_mean", "per_person": "min",
         "value": "duration_s", "bounds": [-100.0, 600.0]},
        {"name": "ptr_median", "metric": "ptr_median", "per_person": "mean",
         "value": "duration_s", "bounds": [0.0, 600.0]},
        {"name": "trimmed", "metric": "trimmed_mean", "per_person": "mean", "value": "duration_s",
         "bounds": [-100.0, 600.0], "trim": 0.2},
        {"name": "top_domain", "metric": "top_partition", "by": ["domain"]},
        {"name": "saa_mean", "metric": "sample_aggregate", "function": fn,
         "columns": ["duration_s"], "range": [0.0, 600.0], "chunks": 10, "aggregator": "mean"},
        {"name": "saa_median", "metric": "sample_aggregate",
         "function": "userdp.pipelines.example_functions:visit_duration_p90",
         "columns": ["duration_s"], "range": [0.0, 1000.0], "chunks": 10, "aggregator": "median"},
    ]  # fmt: skip


def _base_rows(persons: int = 60) -> list[dict[str, Any]]:
    gen = np.random.default_rng(5)  # test data, not noise
    rows = []
    for p in range(persons):
        for _ in range(int(gen.integers(1, 8))):
            rows.append(
                {"person_id": p, "domain": DOMAINS[int(gen.integers(0, 4))],
                 "url": f"u{int(gen.integers(0, 40))}", "timestamp": float(gen.uniform(0, 1e6)),
                 "duration_s": float(gen.uniform(0, 600))}
            )  # fmt: skip
    return rows


def _hostile_rows(kind: str) -> pa.Table:
    """The adversarial person's rows, in every domain."""
    if kind == "heavy":
        n = HEAVY_ROWS
        values = np.where(np.arange(n) % 2 == 0, 1e308, -math.inf)
        return pa.table(
            {"person_id": np.full(n, HOSTILE_ID, dtype=np.int64),
             "domain": pa.array([DOMAINS[i % 4] for i in range(4)] * (n // 4)),
             "url": pa.array([f"h{i % 1000}" for i in range(n)]),
             "timestamp": np.arange(n, dtype=np.float64), "duration_s": values},
            schema=SCHEMA,
        )  # fmt: skip
    values = {
        "infinities": [math.inf, -math.inf] * 4,
        "extremes": [1e308, 1e308, -1e308, -0.0, 0.0, 600.0, -100.0, 1e6, -5.0, 5e307],
    }[kind]
    rows = [
        {"person_id": HOSTILE_ID, "domain": DOMAINS[i % 4], "url": f"h{i}",
         "timestamp": float(i), "duration_s": v}
        for i, v in enumerate(values)
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _data(with_base: bool, hostile: str | None) -> pa.Table:
    tables = [pa.Table.from_pylist(_base_rows() if with_base else [], schema=SCHEMA)]
    if hostile is not None:
        tables.append(_hostile_rows(hostile))
    return pa.concat_tables(tables)


def _release(tmp: Path, name: str, data: pa.Table) -> dict[str, Any]:
    """Runs the job on ``data``; returns its observables: files, schemas, manifest keys, rows."""
    root = tmp / name
    (root / "data").mkdir(parents=True)
    pq.write_table(data, root / "data" / "logs.parquet")
    job = parse_job(
        {
            "input": {"path": "data/*.parquet", "person": "person_id"},
            "budget": {"epsilon": 100.0, "delta": 1e-5},  # 5 per query: partitions released
            "output": {"path": "release/"},
            "queries": _queries(),
        },
        base_dir=root,
    )
    result = run_release(job, release_key=KEY)
    release = root / "release"
    manifest = json.loads(Path(result.manifest).read_text())
    return {
        "files": sorted(p.name for p in release.iterdir()),
        "schemas": {n: pq.read_schema(p) for n, p in sorted(result.outputs.items())},
        "manifest_keys": _shape(manifest),
        "tables": {n: pq.read_table(p) for n, p in sorted(result.outputs.items())},
    }


def _shape(obj: Any) -> Any:
    """The manifest's structure: its keys at every level, lists by their items' structure."""
    if isinstance(obj, dict):
        return {k: _shape(v) for k, v in sorted(obj.items()) if k not in ("files",)}
    if isinstance(obj, list):
        return [_shape(v) for v in obj[:1]]
    return type(obj).__name__ if obj is not None else "null"


def _non_finite(tables: dict[str, pa.Table]) -> list[str]:
    bad = []
    for name, table in tables.items():
        for column in table.column_names:
            col = table.column(column)
            if pa.types.is_floating(col.type):
                values = np.asarray(col.drop_null().to_numpy(), dtype=np.float64)
                if not np.isfinite(values).all():
                    bad.append(f"{name}.{column}")
    return bad


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _release(tmp_path_factory.mktemp("hostile"), "base", _data(True, None))


def _same_observables(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["files"] == b["files"]
    assert a["schemas"] == b["schemas"]
    assert a["manifest_keys"] == b["manifest_keys"]
    assert not _non_finite(a["tables"]) and not _non_finite(b["tables"])


def test_every_metric_kind_is_in_the_job() -> None:
    """A kind added later must be added here too: every kind and every method is exercised."""
    metrics = {q["metric"] for q in _queries()}
    assert set(METRIC_KINDS) <= metrics
    assert {"count", "persons", "sum", "mean"} <= metrics
    order = [q for q in _queries() if q["metric"] in ("median", "quantile")]
    smooth = {"smooth_sensitivity" for q in order if "noise" in q or "gamma" in q}
    methods = smooth | {q.get("method", "exponential") for q in order if "noise" not in q}
    methods |= {q["method"] for q in _queries() if "method" in q}
    assert set(METHODS) <= methods
    assert any(q.get("bound") == "auto" for q in _queries())  # the one variant of count/sum
    assert {q.get("noise") for q in _queries()} >= {"cauchy", "laplace", "lln"}


@pytest.mark.parametrize("hostile", ["infinities", "extremes", "heavy"])
def test_one_hostile_person_changes_no_observable(
    hostile: str, base: dict[str, Any], tmp_path: Path
) -> None:
    with_person = _release(tmp_path, hostile, _data(True, hostile))
    _same_observables(base, with_person)


def test_zero_persons_and_one_hostile_person_alone(tmp_path: Path) -> None:
    empty = _release(tmp_path, "empty", _data(False, None))
    alone = _release(tmp_path, "alone", _data(False, "infinities"))
    _same_observables(empty, alone)


def test_the_finiteness_check_catches_a_non_finite_value() -> None:
    """Negative control: the check above would see an inf or NaN in any float column."""
    ok = pa.table({"value": pa.array([1.0, None]), "released": [True, False]})
    assert _non_finite({"q": ok}) == []
    assert _non_finite({"q": pa.table({"value": [1.0, math.inf]})}) == ["q.value"]
    assert _non_finite({"q": pa.table({"value": [math.nan]})}) == ["q.value"]
