"""Observables outside the released values, through ``userdp run``: the same with and without one
person (issue 12, items 1 and 7).

Item 1 is the neighbouring pair of the audit: a CSV of 100 persons whose ``domain`` is ``123`` or
``site.example`` half and half, and the same file with one more person whose domain is
``other.example``. When types were inferred from the values, that one person flipped the column
from integer to string: the output schema and which *other* persons' rows were dead letters
changed. Types now come from the job file, so the output schema, the set of files and the dead
letters of the other persons are the same. Item 7: the bytes of each output do not depend on the
order of the input rows or the number of person shards (sorted rows, one file per query).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from userdp.pipelines.config import parse_job
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

KEY = ReleaseKey(bytes(range(32)))


def write_csv(path: Path, rows: list[tuple[int, str, float]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("person_id,domain,duration_s\n" + "".join(f"{p},{d},{v}\n" for p, d, v in rows))


def release(root: Path, rows: list[tuple[int, str, float]], **run: int) -> dict[str, object]:
    write_csv(root / "data" / "logs.csv", rows)
    job = parse_job(
        {
            "input": {"path": "data/*.csv", "format": "csv", "person": "person_id",
                      "person_type": "int", "dead_letter": "ops/"},
            "budget": {"epsilon": 1.0, "delta": 1e-6},
            "output": {"path": "release/"},
            "queries": [
                {"name": "visits", "metric": "count", "by": ["domain"],
                 "max_partitions_per_person": 2, "max_rows_per_partition": 5},
                {"name": "total", "metric": "sum", "value": "duration_s", "bounds": [0.0, 10.0],
                 "max_rows_per_partition": 5},
            ],
        },
        base_dir=root,
    )  # fmt: skip
    result = run_release(job, release_key=KEY, noise=False, **run)
    dead = sorted(
        line for f in sorted((root / "ops").glob("*")) for line in f.read_text().splitlines()
    )
    return {
        "files": sorted(p.name for p in (root / "release").iterdir()),
        "schemas": {n: pq.read_schema(p) for n, p in result.outputs.items()},
        "bytes": {n: Path(p).read_bytes() for n, p in result.outputs.items()},
        "dead": [json.loads(d)["row"] for d in dead],
        "visits": pq.read_table(result.outputs["visits"]).to_pylist(),
    }


BASE = [(i, "123" if i % 2 else "site.example", 1.0) for i in range(100)]


def test_one_person_cannot_flip_a_column_type(tmp_path: Path) -> None:
    without = release(tmp_path / "without", BASE)
    with_person = release(tmp_path / "with", BASE + [(100, "other.example", 1.0)] * 3)
    assert without["files"] == with_person["files"]
    assert without["schemas"] == with_person["schemas"]
    assert str(with_person["schemas"]["visits"].field("domain").type) == "string"  # the default
    assert without["dead"] == with_person["dead"] == []  # "123" is a string key, not a bad row
    domains = {r["domain"]: r["value"] for r in with_person["visits"]}
    assert domains == {"123": 50.0, "site.example": 50.0, "other.example": 3.0}


@pytest.mark.parametrize("shards", [1, 7])
def test_output_bytes_do_not_depend_on_row_order_or_shards(tmp_path: Path, shards: int) -> None:
    rows = BASE + [(100 + i, f"d{i % 5}.example", float(i % 11)) for i in range(200)]
    first = release(tmp_path / "a", rows, num_shards=3)
    other = release(tmp_path / "b", list(reversed(rows)), num_shards=shards)
    assert first["bytes"] == other["bytes"] and first["files"] == other["files"]


def test_a_mean_whose_bounds_sum_past_the_float_range_is_still_the_mean(tmp_path: Path) -> None:
    """bounds [1e307, 1.7e308]: (lower + upper)/2 overflowed, so the centre was inf and every
    partition released the upper bound whatever the data. lower/2 + upper/2 is the same float
    wherever the sum was finite. Noise off: the released mean is the data's, 1e308."""
    (tmp_path / "data").mkdir()
    ids = [f"p{i}" for i in range(8)]  # 8·(1e308 − centre) stays a float: noise off is exact
    pq.write_table(pa.table({"person_id": ids, "v": [1e308] * 8}), tmp_path / "data" / "d.parquet")
    cfg = parse_job({
        "input": {"path": str(tmp_path / "data" / "*.parquet"), "person": "person_id"},
        "budget": {"epsilon": 1.0},
        "output": {"path": str(tmp_path / "release")},
        "queries": [{"name": "m", "metric": "mean", "value": "v", "bounds": [1e307, 1.7e308],
                     "max_partitions_per_person": 1, "max_rows_per_partition": 1}],
    })  # fmt: skip
    result = run_release(cfg, release_key=ReleaseKey(bytes(32)), noise=False, num_shards=1)
    [row] = pq.read_table(result.outputs["m"]).to_pylist()
    assert row["value"] == pytest.approx(1e308, rel=1e-9)


def test_a_mean_whose_noisy_row_count_is_huge_releases_instead_of_crashing(
    tmp_path: Path,
) -> None:
    """ε = 1e-150: the row count's noise has scale ~1e150, and the mean's stated stddev squared
    the noisy count — an OverflowError once it passed 1.34e154, i.e. for keys 0, 1 and 2 here
    (a crash set by the noise draw). The stddev now divides twice instead of squaring."""
    (tmp_path / "data").mkdir()
    table = pa.table({"person_id": [f"p{i}" for i in range(10)], "v": [0.5] * 10})
    pq.write_table(table, tmp_path / "data" / "d.parquet")
    cfg = parse_job({
        "input": {"path": str(tmp_path / "data" / "*.parquet"), "person": "person_id"},
        "budget": {"epsilon": 1e-150},
        "output": {"path": str(tmp_path / "release")},
        "queries": [{"name": "m", "metric": "mean", "value": "v", "bounds": [0.0, 1.0],
                     "max_partitions_per_person": 1, "max_rows_per_partition": 1}],
    })  # fmt: skip
    for seed in range(3):
        result = run_release(cfg, release_key=ReleaseKey(bytes([seed]) * 32), num_shards=1)
        [row] = pq.read_table(result.outputs["m"]).to_pylist()
        assert 0.0 <= row["value"] <= 1.0 and 0.0 <= row["stddev"] <= 0.5


EVERY_KIND = [
    {"name": "visits", "metric": "count", "by": ["domain"], "max_partitions_per_person": 3,
     "max_rows_per_partition": 3},
    {"name": "mean", "metric": "mean", "by": ["domain"], "value": "duration_s",
     "bounds": [0.0, 600.0], "max_partitions_per_person": 3, "max_rows_per_partition": 3},
    {"name": "med", "metric": "median", "per_person": "mean", "value": "duration_s",
     "bounds": [0.0, 600.0]},
    {"name": "smooth", "metric": "quantile", "q": 0.9, "method": "smooth_sensitivity",
     "per_person": "sum", "value": "duration_s", "bounds": [0.0, 3000.0]},
    {"name": "trim", "metric": "trimmed_mean", "per_person": "mean", "value": "duration_s",
     "bounds": [0.0, 600.0]},
    {"name": "ptr", "metric": "ptr_mean", "per_person": "count", "bounds": [0.0, 50.0],
     "bound": 0.5},
    {"name": "ladder", "metric": "ptr_median", "per_person": "mean", "value": "duration_s",
     "bounds": [0.0, 600.0]},
    {"name": "top", "metric": "top_partition", "by": ["domain"]},
    {"name": "rows", "metric": "total"},
    {"name": "seconds", "metric": "total", "value": "duration_s", "upper": 2**20},
    {"name": "urls", "metric": "distinct", "value": "url", "upper": 2**20},
    {"name": "auto", "metric": "sum", "value": "duration_s", "bound": "auto"},
    {"name": "p90", "metric": "sample_aggregate",
     "function": "userdp.pipelines.example_functions:visit_duration_p90",
     "columns": ["duration_s"], "range": [0.0, 1000.0], "chunks": 20, "aggregator": "median"},
]  # fmt: skip


def test_noisy_outputs_do_not_depend_on_row_order_files_or_shards(tmp_path: Path) -> None:
    """The person-shard count follows the input's size (pipelines/release_graph.py), which one
    person changes; so no released byte may depend on it, nor on how rows are ordered or split
    into files — with the noise on, for every kind, including those that gather per-person
    values, windows or chunks on one worker."""
    from userdp.pipelines.generate import generate  # noqa: PLC0415

    (tmp_path / "a").mkdir()
    generate(400, str(tmp_path / "a" / "logs.parquet"), seed=21)
    table = pq.read_table(tmp_path / "a" / "logs.parquet")
    (tmp_path / "b").mkdir()
    flipped = table.take(pa.array(range(table.num_rows - 1, -1, -1)))
    third = table.num_rows // 3
    for i, start in enumerate((0, third, 2 * third)):
        stop = table.num_rows if i == 2 else start + third
        pq.write_table(flipped.slice(start, stop - start), tmp_path / "b" / f"part{i}.parquet")

    def run(data: str, shards: int) -> dict[str, bytes]:
        cfg = parse_job({
            "input": {"path": str(tmp_path / data / "*.parquet"), "person": "person_id"},
            "budget": {"epsilon": 26.0, "delta": 1e-5},
            "output": {"path": str(tmp_path / f"out-{data}-{shards}")},
            "queries": EVERY_KIND,
        })  # fmt: skip
        result = run_release(cfg, release_key=KEY, num_shards=shards)
        return {n: Path(p).read_bytes() for n, p in result.outputs.items()}

    first = run("a", 3)
    assert len(first) == len(EVERY_KIND)
    assert run("b", 7) == first
