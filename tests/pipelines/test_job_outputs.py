"""Release outputs in every format (parquet, avro, csv, json) read back with pyarrow and fastavro.

One input (1,500 persons, 5 domains, 7 weekdays) and one job with four queries: a count by
(``domain``, ``weekday``) over public keys (a string and an integer key column, one listed key
absent from the data), persons and a mean by ``domain`` with private partitions, and a sum over
everything.

- ``userdp run`` (the CLI, a fresh release secret each run) in each format: the release directory
  holds exactly the files the manifest's ``outputs`` names plus ``manifest.json`` and
  ``report.html``; each output has
  the columns ``by..., value, stddev`` in that order with the key columns' types (string, int64)
  and float64 values, every value and stddev finite, and exactly the public keys for the public
  query. The count, persons and sum queries' stddev is public (from the plan), so it is the same
  in every format. (Private partitions here hold ~900 persons each against a threshold of ~200,
  so with a fresh secret one is dropped with probability below 10^-30.)
- ``run_release`` with one fixed release key and noise on, in each format: every output holds the
  same rows with bit-identical values, so no format loses precision or reorders columns.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq
import pytest

from userdp.pipelines.cli import main
from userdp.pipelines.config import load_job
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

KEY = ReleaseKey(bytes(range(32)))
FORMATS = {"parquet": ".parquet", "avro": ".avro", "csv": ".csv", "json": ".jsonl"}
DOMAINS = [f"site{i}.example" for i in range(5)]
PUBLIC_KEYS = [(d, w) for d in DOMAINS for w in range(7)] + [("absent.example", 3)]
BY = {
    "visits_by_domain_weekday": ["domain", "weekday"],
    "persons_by_domain": ["domain"],
    "mean_duration": ["domain"],
    "total_duration": [],
}
KEY_TYPES = {"domain": pa.string(), "weekday": pa.int64()}

JOB = """
[input]
path = "logs/*.parquet"
person = "person_id"

[budget]
epsilon = 2.0
delta = 1e-6

[output]
path = "release/"
format = "{fmt}"

[[queries]]
name = "visits_by_domain_weekday"
metric = "count"
by = ["domain", "weekday"]
max_partitions_per_person = 5
max_rows_per_partition = 2
partitions = "keys.csv"

[[queries]]
name = "persons_by_domain"
metric = "persons"
by = ["domain"]
max_partitions_per_person = 3

[[queries]]
name = "mean_duration"
metric = "mean"
by = ["domain"]
value = "duration_s"
bounds = [0.0, 600.0]
max_partitions_per_person = 3
max_rows_per_partition = 2

[[queries]]
name = "total_duration"
metric = "sum"
value = "duration_s"
bounds = [0.0, 600.0]
max_rows_per_partition = 5
"""


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Test data, not noise: a seeded numpy generator."""
    rng = np.random.default_rng(5)
    persons = np.repeat(np.arange(1500), rng.integers(1, 9, 1500))
    n = len(persons)
    table = pa.table(
        {
            "person_id": pa.array(persons, pa.int64()),
            "domain": pa.array(np.array(DOMAINS)[rng.integers(0, 5, n)]),
            "weekday": pa.array(rng.integers(0, 7, n), pa.int64()),
            "duration_s": pa.array(rng.lognormal(3.5, 1.0, n)),
        }
    )
    directory = tmp_path_factory.mktemp("logs")
    pq.write_table(table, directory / "logs.parquet")
    return directory


def make_job(root: Path, logs: Path, fmt: str) -> Path:
    root.mkdir(parents=True)
    (root / "logs").symlink_to(logs, target_is_directory=True)
    pcsv.write_csv(
        pa.table({"domain": [d for d, _ in PUBLIC_KEYS], "weekday": [w for _, w in PUBLIC_KEYS]}),
        root / "keys.csv",
    )
    (root / "job.toml").write_text(JOB.format(fmt=fmt))
    return root / "job.toml"


def read_back(path: Path, fmt: str) -> tuple[list[str], list[dict[str, Any]], pa.Schema | None]:
    """(column names in file order, rows, Arrow schema or None for Avro)."""
    if fmt == "avro":
        with path.open("rb") as f:
            reader = fastavro.reader(f)
            schema: Any = reader.writer_schema
            rows: list[dict[str, Any]] = [dict(r) for r in reader if isinstance(r, dict)]
        return [fd["name"] for fd in schema["fields"]], rows, None
    if fmt == "parquet":
        table = pq.read_table(path)
    elif fmt == "csv":
        table = pcsv.read_csv(path)
    else:
        table = pjson.read_json(path)
    return table.column_names, table.to_pylist(), table.schema


def avro_types(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        schema: Any = fastavro.reader(f).writer_schema
    return {fd["name"]: fd["type"] for fd in schema["fields"]}


Outputs = dict[str, dict[str, list[dict[str, Any]]]]  # format → query → rows


@pytest.fixture(scope="module")
def cli_outputs(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Outputs:
    root = tmp_path_factory.mktemp("cli")
    out: Outputs = {}
    for fmt, ext in FORMATS.items():
        job = make_job(root / fmt, logs, fmt)
        assert main(["run", str(job)]) == 0, fmt
        release = root / fmt / "release"
        manifest = json.loads((release / "manifest.json").read_text())
        assert manifest["outputs"] == {name: name + ext for name in BY}, fmt
        files = {p.name for p in release.iterdir()}
        assert files == {*manifest["outputs"].values(), "manifest.json", "report.html"}, fmt
        out[fmt] = {}
        for name, by in BY.items():
            path = release / manifest["outputs"][name]
            columns, rows, schema = read_back(path, fmt)
            assert columns == [*by, "value", "stddev"], (fmt, name)
            if schema is not None:
                for c in by:
                    assert schema.field(c).type == KEY_TYPES[c], (fmt, name, c)
                assert schema.field("value").type == schema.field("stddev").type == pa.float64()
            else:
                types = avro_types(path)
                assert [types[c] for c in by] == [
                    ["null", "string" if c == "domain" else "long"] for c in by
                ]
                assert types["value"] == types["stddev"] == ["null", "double"]
            out[fmt][name] = rows
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_cli_outputs_are_complete_and_finite(cli_outputs: Outputs, fmt: str) -> None:
    outputs = cli_outputs[fmt]
    for name, rows in outputs.items():
        assert rows, name
        for row in rows:
            assert isinstance(row["value"], float) and math.isfinite(row["value"]), (name, row)
            assert isinstance(row["stddev"], float), (name, row)
            assert math.isfinite(row["stddev"]) and row["stddev"] > 0, (name, row)
    keys = sorted((r["domain"], r["weekday"]) for r in outputs["visits_by_domain_weekday"])
    assert keys == sorted(PUBLIC_KEYS)
    assert sorted(r["domain"] for r in outputs["persons_by_domain"]) == DOMAINS
    assert sorted(r["domain"] for r in outputs["mean_duration"]) == DOMAINS
    assert len(outputs["total_duration"]) == 1
    for row in outputs["mean_duration"]:
        assert 0.0 <= row["value"] <= 600.0


def test_cli_public_stddev_is_the_same_in_every_format(cli_outputs: Outputs) -> None:
    """The stddev of count, persons and sum comes from the plan: one value per query."""
    for name in ("visits_by_domain_weekday", "persons_by_domain", "total_duration"):
        stddevs = {row["stddev"] for fmt in FORMATS for row in cli_outputs[fmt][name]}
        assert len(stddevs) == 1, (name, stddevs)


def test_fixed_key_release_is_identical_in_every_format(logs: Path, tmp_path: Path) -> None:
    released: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for fmt in FORMATS:
        job = load_job(make_job(tmp_path / fmt, logs, fmt))
        result = run_release(job, release_key=KEY, num_shards=4)
        released[fmt] = {}
        for name, by in BY.items():
            columns, rows, _ = read_back(Path(result.outputs[name]), fmt)
            assert columns == [*by, "value", "stddev"], (fmt, name)
            released[fmt][name] = rows
    reference = released["parquet"]
    assert any(  # noise really is on: the count is not an integer
        r["value"] != round(r["value"]) for r in reference["visits_by_domain_weekday"]
    )
    for fmt in FORMATS:
        assert released[fmt] == reference, fmt
