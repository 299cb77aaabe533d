"""Release sinks round-trip in every format and are byte-identical on a re-write."""

from __future__ import annotations

import json
from pathlib import Path

import apache_beam as beam
import fastavro
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from userdp.pipelines.sinks import WriteDeadLetters, write_release

TABLE = pa.table(
    {
        "domain": ["a.example", "b.example", "ü.example"],
        "value": [12.5, -3.0, 1e-9],
        "stddev": [1.4142135623730951, 1.4142135623730951, 1.4142135623730951],
        "n": pa.array([1, 2, 3], pa.int64()),
        "flag": [True, False, True],
    }
)


@pytest.mark.parametrize("fmt", ["parquet", "avro", "csv", "json"])
def test_round_trip_and_deterministic_bytes(tmp_path: Path, fmt: str) -> None:
    path = write_release(TABLE, str(tmp_path / "out" / "visits"), fmt)
    ext = {"parquet": ".parquet", "avro": ".avro", "csv": ".csv", "json": ".jsonl"}[fmt]
    assert path == str(tmp_path / "out" / f"visits{ext}")
    if fmt == "parquet":
        back = pq.read_table(path)
    elif fmt == "avro":
        with open(path, "rb") as f:
            back = pa.Table.from_pylist(list(fastavro.reader(f)), schema=TABLE.schema)
    elif fmt == "csv":
        back = pcsv.read_csv(path)
    else:
        back = pjson.read_json(path)
    assert back.equals(TABLE), back
    first = Path(path).read_bytes()
    again = write_release(TABLE, str(tmp_path / "again" / "visits"), fmt)
    assert Path(again).read_bytes() == first


def test_bad_format_and_non_finite_json(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="format 'xlsx' is not supported; allowed: parquet"):
        write_release(TABLE, str(tmp_path / "x"), "xlsx")
    inf = pa.table({"value": [float("inf")]})
    with pytest.raises(ValueError, match="column 'value' has a non-finite value"):
        write_release(inf, str(tmp_path / "x"), "json")
    with pytest.raises(ValueError, match="non-empty operator path"):
        WriteDeadLetters("")


def test_dead_letters_are_json_lines(tmp_path: Path) -> None:
    rows = [
        {
            "reason": "null key in domain",
            "file": "f.csv",
            "row": {"person_id": "1", "domain": None},
        },
        {"reason": "person id type mismatch", "file": "f.csv", "row": {"person_id": "x"}},
    ]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = p | beam.Create(rows) | WriteDeadLetters(str(tmp_path / "ops"))
    files = sorted((tmp_path / "ops").glob("dead_letter-*.jsonl"))
    assert files
    back = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    assert sorted(back, key=lambda r: r["reason"]) == rows
