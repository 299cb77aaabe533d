"""The release job end to end on the Direct (FnApiRunner) runner, on small generated logs."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from userdp.pipelines.config import parse_job
from userdp.pipelines.generate import generate
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

KEY = ReleaseKey(bytes(range(32)))


def job_dict(tmp: Path, data: str, fmt: str, partitions: str = "private") -> dict[str, Any]:
    return {
        # JSON carries value types: its integer person ids are declared (types never come from
        # the data; a JSON number in a string column would be a dead letter)
        "input": {"path": data, "format": fmt, "person": "person_id", "dead_letter": "ops/"}
        | ({"person_type": "int"} if fmt == "jsonl" else {}),
        "budget": {"epsilon": 1.0, "delta": 1e-6},
        "output": {"path": "release/", "format": "parquet"},
        "queries": [
            {
                "name": "visits_per_domain",
                "metric": "count",
                "by": ["domain"],
                "max_partitions_per_person": 5,
                "max_rows_per_partition": 3,
                "partitions": partitions,
            },
            {
                "name": "persons_total",
                "metric": "persons",
            },
            {
                "name": "mean_duration",
                "metric": "mean",
                "by": ["domain"],
                "value": "duration_s",
                "bounds": [0.0, 600.0],
                "max_partitions_per_person": 5,
                "max_rows_per_partition": 3,
                "partitions": partitions,
            },
        ],
    }


def read(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("logs") / "logs.parquet"
    generate(300, str(out), seed=3)
    return out


def test_noise_off_counts_are_the_bounded_exact_values(logs: Path, tmp_path: Path) -> None:
    keys = tmp_path / "domains.csv"
    table = pq.read_table(logs, columns=["person_id", "domain"])
    domains = sorted(set(table.column("domain").to_pylist()))
    pacsv.write_csv(pa.table({"domain": domains}), keys)
    job = parse_job(job_dict(tmp_path, str(logs), "parquet", str(keys)), base_dir=tmp_path)
    result = run_release(job, release_key=KEY, noise=False)
    rows = {r["domain"]: r["value"] for r in read(Path(result.outputs["visits_per_domain"]))}
    assert set(rows) == set(domains)  # public keys: every listed key is released
    # Independent check of the bounds L = 5 domains per person, C = 3 rows per (person, domain):
    # a person with ≤ 5 domains keeps all of them; one with more keeps 5 chosen by a keyed hash.
    per_person: dict[object, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for p, d in zip(table.column("person_id").to_pylist(), domains_of(table), strict=True):
        per_person[p][d] += 1
    for d in domains:
        upper = sum(min(3, c.get(d, 0)) for c in per_person.values())
        exact_part = sum(min(3, c.get(d, 0)) for c in per_person.values() if len(c) <= 5)
        assert exact_part <= rows[d] <= upper, d
    capped = [sorted(min(3, n) for n in c.values()) for c in per_person.values()]
    assert sum(sum(x[:5]) for x in capped) <= sum(rows.values()) <= sum(sum(x[-5:]) for x in capped)
    assert any(len(c) > 5 for c in per_person.values())  # the keyed choice is exercised
    persons = read(Path(result.outputs["persons_total"]))
    assert persons == [{"value": float(len(per_person)), "stddev": persons[0]["stddev"]}]


def domains_of(table: pa.Table) -> list[str]:
    return [str(d) for d in table.column("domain").to_pylist()]


def test_release_is_complete_finite_and_reproducible(logs: Path, tmp_path: Path) -> None:
    job = parse_job(job_dict(tmp_path, str(logs), "parquet"), base_dir=tmp_path)
    first = run_release(job, release_key=KEY)
    outputs = {n: Path(p).read_bytes() for n, p in first.outputs.items()}
    for name, path in first.outputs.items():
        for row in read(Path(path)):
            assert math.isfinite(row["value"]) and math.isfinite(row["stddev"]), name
    manifest = json.loads(Path(first.manifest).read_text())
    assert manifest["total"] == manifest["spent"]
    assert manifest["privacy_unit"]["person_column"] == job.input.person  # who is protected
    second = run_release(job, release_key=KEY)  # a re-run of the same release: same bytes
    assert {n: Path(p).read_bytes() for n, p in second.outputs.items()} == outputs


@pytest.mark.parametrize("fmt", ["avro", "csv", "jsonl"])
def test_every_input_format_gives_the_same_release(logs: Path, tmp_path: Path, fmt: str) -> None:
    other = tmp_path / f"logs.{fmt}"
    generate(300, str(other), seed=3)  # the same rows, written in another format
    base = parse_job(job_dict(tmp_path / "a", str(logs), "parquet"), base_dir=tmp_path / "a")
    alt = parse_job(job_dict(tmp_path / "b", str(other), fmt), base_dir=tmp_path / "b")
    a = run_release(base, release_key=KEY, noise=False)
    b = run_release(alt, release_key=KEY, noise=False)
    for name in a.outputs:
        assert read(Path(a.outputs[name])) == read(Path(b.outputs[name])), name
