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
