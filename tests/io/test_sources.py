"""Schema inspection errors, and identical clean tables from all four input formats."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from pipelines.sources import SchemaError, inspect_inputs
from tests.io import run_read_validate

COLUMNS = {"person_id": "person", "domain": "key", "duration_s": "number"}
ROWS: list[dict[str, Any]] = [
    {"person_id": 7, "domain": "a.example", "duration_s": 1.5},
    {"person_id": 7, "domain": "b.example", "duration_s": 2.0},
    {"person_id": 12, "domain": "a.example", "duration_s": 0.25},
    {"person_id": 3, "domain": "c.example", "duration_s": 600.0},
    {"person_id": 12, "domain": "c.example", "duration_s": 42.0},
]


def write_rows(path: Path, rows: list[dict[str, Any]], fmt: str, avro_types: Any = None) -> None:
    """Write ``rows`` (homogeneous types) in ``fmt``; extra columns are kept."""
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return
    if fmt == "avro":
        types = avro_types or {
            k: {int: "long", float: "double", str: "string", bool: "boolean"}[type(v)]
            for k, v in rows[0].items()
        }
        schema = {"type": "record", "name": "r",
                  "fields": [{"name": k, "type": t} for k, t in types.items()]}  # fmt: skip
        with open(path, "wb") as f:
            fastavro.writer(f, fastavro.parse_schema(schema), rows)
        return
    table = pa.Table.from_pylist(rows)
    if fmt == "parquet":
        pq.write_table(table, path)
    else:
        pcsv.write_csv(table, path)


def test_same_rows_give_identical_clean_tables_in_all_formats(tmp_path: Path) -> None:
    rows = [{**r, "url": "https://x/p"} for r in ROWS]  # an unread extra column
    results = []
    for fmt in ("parquet", "avro", "csv", "jsonl"):
        d = tmp_path / fmt
        d.mkdir()
        write_rows(d / f"part-0.{fmt}", rows[:3], fmt)
        write_rows(d / f"part-1.{fmt}", rows[3:], fmt)
        schema = inspect_inputs(str(d / f"*.{fmt}"), fmt, COLUMNS)
        assert schema.person_type == "int"
        assert len(schema.files) == 2
        clean, dead = run_read_validate(schema, str(tmp_path / f"run-{fmt}"))
        assert dead == []
        results.append(clean)
    expected = pa.table(
        {
            "__person__": ["12", "12", "3", "7", "7"],
            "domain": ["a.example", "c.example", "c.example", "a.example", "b.example"],
            "duration_s": [0.25, 42.0, 600.0, 1.5, 2.0],
        }
    )
    for clean in results:
        assert clean.equals(expected), clean


def test_no_files_matched(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="matched no files"):
        inspect_inputs(str(tmp_path / "*.parquet"), "parquet", COLUMNS)


def test_unknown_format_and_kinds(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="format 'orc' is not supported; allowed: parquet"):
        inspect_inputs(str(tmp_path / "*"), "orc", COLUMNS)
    with pytest.raises(SchemaError, match=r"kinds .* not supported"):
        inspect_inputs(str(tmp_path / "*"), "csv", {"a": "person", "b": "label"})
    with pytest.raises(SchemaError, match="exactly one person column"):
        inspect_inputs(str(tmp_path / "*"), "csv", {"a": "key"})


@pytest.mark.parametrize("fmt", ["parquet", "avro", "csv", "jsonl"])
def test_missing_column(tmp_path: Path, fmt: str) -> None:
    write_rows(tmp_path / f"x.{fmt}", [{"person_id": 1, "domain": "a"}], fmt)
    with pytest.raises(SchemaError, match=r"x\.\w+: column 'duration_s' \(number\) is missing"):
        inspect_inputs(str(tmp_path / f"x.{fmt}"), fmt, COLUMNS)


@pytest.mark.parametrize("fmt", ["parquet", "avro", "csv", "jsonl"])
def test_float_person_ids_are_refused(tmp_path: Path, fmt: str) -> None:
    write_rows(tmp_path / f"x.{fmt}", [{**r, "person_id": r["person_id"] + 0.5} for r in ROWS], fmt)
    with pytest.raises(SchemaError, match=r"person column 'person_id' has type float.*cast person"):
        inspect_inputs(str(tmp_path / f"x.{fmt}"), fmt, COLUMNS)


def test_wrong_types(tmp_path: Path) -> None:
    write_rows(tmp_path / "x.parquet", [{**r, "duration_s": "long"} for r in ROWS], "parquet")
    with pytest.raises(
        SchemaError,
        match=r"column 'duration_s' \(number\) has type string; allowed: integer, float",
    ):
        inspect_inputs(str(tmp_path / "x.parquet"), "parquet", COLUMNS)
    write_rows(tmp_path / "y.avro", [{**r, "domain": 1.5} for r in ROWS], "avro")
    with pytest.raises(SchemaError, match=r"'domain' \(key\) has type float; allowed: integer"):
        inspect_inputs(str(tmp_path / "y.avro"), "avro", COLUMNS)
    ts = pa.table({"person_id": pa.array([1], pa.timestamp("us")), "domain": ["a"],
                   "duration_s": [1.0]})  # fmt: skip
    pq.write_table(ts, tmp_path / "z.parquet")
    with pytest.raises(
        SchemaError,
        match=r"column .person_id. \(person\) has type timestamp\[us\]; allowed: integer, string",
    ):
        inspect_inputs(str(tmp_path / "z.parquet"), "parquet", COLUMNS)


def test_empty_key_column_in_csv_head(tmp_path: Path) -> None:
    (tmp_path / "x.csv").write_text("person_id,domain,duration_s\n1,,2.0\n")
    with pytest.raises(SchemaError, match="'domain' \\(key\\) has no non-null values"):
        inspect_inputs(str(tmp_path / "x.csv"), "csv", COLUMNS)


def test_mixed_types_across_files(tmp_path: Path) -> None:
    write_rows(tmp_path / "a.parquet", ROWS, "parquet")
    write_rows(tmp_path / "b.parquet", [{**r, "person_id": str(r["person_id"])} for r in ROWS],
               "parquet")  # fmt: skip
    with pytest.raises(
        SchemaError,
        match=r"mixed types for column 'person_id' \(person\): integer in .*a\.parquet but "
        r"string in .*b\.parquet",
    ):
        inspect_inputs(str(tmp_path / "*.parquet"), "parquet", COLUMNS)


def test_int_widths_and_number_types_may_differ_across_files(tmp_path: Path) -> None:
    a = pa.table({"person_id": pa.array([1], pa.int32()), "domain": ["a"], "duration_s": [1]})
    b = pa.table({"person_id": pa.array([2], pa.int64()), "domain": ["b"], "duration_s": [2.5]})
    pq.write_table(a, tmp_path / "a.parquet")
    pq.write_table(b, tmp_path / "b.parquet")
    schema = inspect_inputs(str(tmp_path / "*.parquet"), "parquet", COLUMNS)
    clean, dead = run_read_validate(schema, str(tmp_path / "run"))
    assert dead == []
    assert clean.to_pylist() == [
        {"__person__": "1", "domain": "a", "duration_s": 1.0},
        {"__person__": "2", "domain": "b", "duration_s": 2.5},
    ]


def test_messages_hold_no_data_values(tmp_path: Path) -> None:
    secret = "alice@example.com"
    write_rows(tmp_path / "x.jsonl", [{"person_id": secret, "domain": 3.25, "duration_s": 1}],
               "jsonl")  # fmt: skip
    with pytest.raises(SchemaError) as info:
        inspect_inputs(str(tmp_path / "x.jsonl"), "jsonl", COLUMNS)
    assert secret not in str(info.value)
    assert "3.25" not in str(info.value)
    assert os.path.basename(str(tmp_path / "x.jsonl")) in str(info.value)
