"""Validation: the person-id rule, dead-letter reasons, a malformed corpus that never crashes."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.io import run_read_validate
from userdp.pipelines.public_keys import _typed
from userdp.pipelines.sources import inspect_inputs
from userdp.transforms.validate import (
    FILE_METADATA_KEY,
    PAST_INT64,
    ValidateRows,
    _parse_text,
    split_table,
)

COLUMNS = {"person_id": "person", "domain": "key", "duration_s": "number"}


def _split(table: pa.Table, person_type: str = "int") -> tuple[pa.Table, list[dict[str, Any]]]:
    return split_table(table, "person_id", person_type, {"domain": pa.string()}, ["duration_s"])


def test_integer_ids_become_decimal_strings_and_strings_stay_as_they_are() -> None:
    ints = pa.table({"person_id": pa.array([1, -2, 2**62], pa.int64()),
                     "domain": ["a"] * 3, "duration_s": [1.0] * 3})  # fmt: skip
    clean, dead = _split(ints)
    assert dead == []
    assert clean.column("__person__").to_pylist() == ["1", "-2", str(2**62)]
    strings = pa.table({"person_id": [" 1", "Alice", "alice", "1"],
                        "domain": ["a"] * 4, "duration_s": [1.0] * 4})  # fmt: skip
    clean, dead = _split(strings, "string")
    assert dead == []
    assert clean.column("__person__").to_pylist() == [" 1", "Alice", "alice", "1"]


def test_integer_text_ids_from_csv() -> None:
    text = ["01", "+1", "1", "1.0", " 1", "99999999999999999999", "x", None, ""]
    table = pa.table({"person_id": text, "domain": ["a"] * 9, "duration_s": ["1"] * 9})
    clean, dead = _split(table)
    assert clean.column("__person__").to_pylist() == ["1", "1", "1"]
    reasons = [d["reason"] for d in dead]
    assert reasons == ["person id type mismatch"] * 4 + ["null or empty person id"] * 2
    assert [d["row"]["person_id"] for d in dead][:4] == ["1.0", " 1", "99999999999999999999", "x"]


def test_one_one_point_zero_and_string_one_are_never_merged(tmp_path: Path) -> None:
    lines = [1, 1, 1, 1.0, "1"]
    (tmp_path / "a.jsonl").write_text(
        "".join(json.dumps({"person_id": v, "domain": "d", "duration_s": 2}) + "\n" for v in lines)
    )
    schema = inspect_inputs(str(tmp_path / "a.jsonl"), "jsonl", COLUMNS, {"person_id": "int"})
    assert schema.person_type == "int"  # declared in the job file
    clean, dead = run_read_validate(schema, str(tmp_path / "run"))
    assert clean.column("__person__").to_pylist() == ["1", "1", "1"]
    assert sorted(d["row"]["person_id"] for d in dead) == [
        "1",
        "1.0",
    ]  # raw text; the reason tells them apart
    assert {d["reason"] for d in dead} == {"person id type mismatch"}
    assert all(d["file"].endswith("a.jsonl") for d in dead)

    # the same file with the default person type (string): the integers are the mismatches
    schema = inspect_inputs(str(tmp_path / "a.jsonl"), "jsonl", COLUMNS)
    assert schema.person_type == "string"
    clean, dead = run_read_validate(schema, str(tmp_path / "run-b"))
    assert clean.column("__person__").to_pylist() == ["1"]
    assert sorted((d["reason"], d["row"]["person_id"]) for d in dead) == [
        ("person id type mismatch", "1"), ("person id type mismatch", "1"),
        ("person id type mismatch", "1"), ("person id type mismatch", "1.0"),
    ]  # fmt: skip


def test_numbers_nan_null_inf_and_keys() -> None:
    table = pa.table(
        {
            "person_id": pa.array([1, 2, 3, 4, 5, 6], pa.int64()),
            "domain": ["a", None, "c", "d", "e", "f"],
            "duration_s": [1.0, 2.0, float("nan"), None, math.inf, -math.inf],
        }
    ).replace_schema_metadata({FILE_METADATA_KEY: b"logs/x.parquet"})
    clean, dead = _split(table)
    assert clean.to_pylist() == [
        {"__person__": "1", "domain": "a", "duration_s": 1.0},
        {"__person__": "5", "domain": "e", "duration_s": math.inf},
        {"__person__": "6", "domain": "f", "duration_s": -math.inf},
    ]
    assert dead == [
        {"reason": "null key in domain", "file": "logs/x.parquet",
         "row": {"person_id": "2", "domain": None, "duration_s": "2"}},
        {"reason": "NaN value in duration_s", "file": "logs/x.parquet",
         "row": {"person_id": "3", "domain": "c", "duration_s": "nan"}},
        {"reason": "null value in duration_s", "file": "logs/x.parquet",
         "row": {"person_id": "4", "domain": "d", "duration_s": None}},
    ]  # fmt: skip


def test_a_uint64_key_past_int64_and_an_all_null_person_column_are_dead_letters() -> None:
    """Parquet holds both (uint64 keys; a column pyarrow typed null because every id was null):
    one row's value must make a dead letter, not a crash of the run."""
    big = pa.array([2**64 - 1, 5], pa.uint64())
    keys = pa.table({"person_id": pa.array([1, 2], pa.int64()), "k": big, "duration_s": [1.0, 2.0]})
    clean, dead = split_table(keys, "person_id", "int", {"k": pa.int64()}, ["duration_s"])
    assert clean.column("k").to_pylist() == [5]
    assert [d["reason"] for d in dead] == ["key type mismatch in k"]
    nulls = pa.table({"person_id": pa.nulls(3), "domain": ["a"] * 3, "duration_s": [1.0] * 3})
    for person_type in ("int", "string"):
        clean, dead = _split(nulls, person_type)
        assert clean.num_rows == 0
        assert [d["reason"] for d in dead] == ["null or empty person id"] * 3


def test_a_uint64_person_id_past_int64_is_a_dead_letter_unless_ids_are_strings() -> None:
    """The rule for int person ids is int64 (text ids of 20 digits are mismatches): a Parquet
    or Arrow uint64 id above 2^63 - 1 is the same dead letter, not a person."""
    ids = pa.array([2**64 - 1, 5, 2**63 - 1], pa.uint64())
    table = pa.table({"person_id": ids, "domain": ["a"] * 3, "duration_s": [1.0] * 3})
    clean, dead = _split(table, "int")
    assert clean.column("__person__").to_pylist() == ["5", str(2**63 - 1)]
    assert [d["reason"] for d in dead] == [PAST_INT64]
    text = pa.table({"person_id": [str(2**64 - 1)], "domain": ["a"], "duration_s": [1.0]})
    assert [d["reason"] for d in _split(text, "int")[1]] == ["person id type mismatch"]
    # hashed 64-bit ids (ClickHouse's UInt64) fill the range: person_type "string" reads them all,
    # as the same ids in text are read
    clean, dead = _split(table, "string")
    assert clean.column("__person__").to_pylist() == [str(2**64 - 1), "5", str(2**63 - 1)]
    assert dead == []
    assert _split(text, "string")[0].column("__person__").to_pylist() == [str(2**64 - 1)]


def test_constructor_validates() -> None:
    with pytest.raises(ValueError, match="person_type must be 'int' or 'string', received 'float'"):
        ValidateRows("p", "float")
    with pytest.raises(ValueError, match="key 'k': type must be int64, string or bool"):
        ValidateRows("p", "int", {"k": pa.float64()})
    with pytest.raises(ValueError, match=r"columns \['p'\] are used in two roles"):
        ValidateRows("p", "int", {}, ["p"])
    with pytest.raises(ValueError, match=r"columns \['__person__'\] have the form of userdp's"):
        ValidateRows("p", "int", {"__person__": pa.string()})


def _corpus(rng: random.Random, n: int) -> tuple[list[str], list[dict[str, Any]], Counter[str]]:
    """JSONL lines, the expected clean rows and the expected dead-letter reasons."""
    lines: list[str] = []
    good: list[dict[str, Any]] = []
    bad: Counter[str] = Counter()
    cases = [
        ("person_id", None, "null or empty person id"),
        ("person_id", "7", "person id type mismatch"),
        ("person_id", 7.0, "person id type mismatch"),
        ("person_id", True, "person id type mismatch"),
        ("domain", None, "null key in domain"),
        ("domain", 5, "key type mismatch in domain"),
        ("duration_s", math.nan, "NaN value in duration_s"),
        ("duration_s", None, "null value in duration_s"),
        ("duration_s", "abc", "non-numeric value in duration_s"),
        ("duration_s", "1.5", "non-numeric value in duration_s"),
        ("duration_s", [1], "non-numeric value in duration_s"),
    ]
    for _ in range(n):
        row: dict[str, Any] = {
            "person_id": rng.randrange(50),
            "domain": rng.choice(["a", "b", "c"]),
            "duration_s": rng.choice([rng.uniform(0, 100), math.inf, -math.inf, rng.randrange(9)]),
        }
        u = rng.random()
        if u < 0.5:
            good.append({"__person__": str(row["person_id"]), "domain": row["domain"],
                         "duration_s": float(row["duration_s"])})  # fmt: skip
            lines.append(json.dumps(row))
        elif u < 0.53:
            lines.append(rng.choice(["{not json", "[1, 2]", '"x"', "{"]))
            bad["malformed record"] += 1
        elif u < 0.55:
            del row["person_id"]
            lines.append(json.dumps(row))
            bad["null or empty person id"] += 1
        else:
            column, value, reason = rng.choice(cases)
            row[column] = value
            lines.append(json.dumps(row))
            bad[reason] += 1
    return lines, good, bad


def test_malformed_corpus_never_crashes_and_every_bad_row_is_dead_lettered(tmp_path: Path) -> None:
    rng = random.Random(20240101)  # test data, not noise
    lines, good, bad = _corpus(rng, 2000)
    assert sum(bad.values()) >= 1000
    head = json.dumps({"person_id": 1, "domain": "a", "duration_s": 1.0})
    (tmp_path / "bad.jsonl").write_text(head + "\n" + "\n".join(lines) + "\n")
    (tmp_path / "good.jsonl").write_text(head + "\n")  # this file takes the fast path
    good += [{"__person__": "1", "domain": "a", "duration_s": 1.0}] * 2
    schema = inspect_inputs(str(tmp_path / "*.jsonl"), "jsonl", COLUMNS, {"person_id": "int"})
    clean, dead = run_read_validate(schema, str(tmp_path / "run"))
    key = ("__person__", "domain", "duration_s")
    assert sorted(clean.to_pylist(), key=lambda r: [r[k] for k in key]) == sorted(
        good, key=lambda r: [r[k] for k in key]
    )
    assert Counter(d["reason"] for d in dead) == bad
    assert all(d["file"].endswith("bad.jsonl") for d in dead)


def test_malformed_csv_corpus(tmp_path: Path) -> None:
    rng = random.Random(7)  # test data, not noise
    ids = ["12", "01", "", "abc", "1.0", "99999999999999999999"]
    values = ["1.5", "inf", "-inf", "", "abc", "nan", "1e5", "NaN", "--1"]
    rows = [(rng.choice(ids), rng.choice(["a", "b"]), rng.choice(values)) for _ in range(1500)]
    text = "person_id,domain,duration_s\n12,a,1\n" + "".join(f"{p},{d},{v}\n" for p, d, v in rows)
    (tmp_path / "x.csv").write_text(text)
    schema = inspect_inputs(str(tmp_path / "x.csv"), "csv", COLUMNS, {"person_id": "int"})
    assert schema.person_type == "int"
    clean, dead = run_read_validate(schema, str(tmp_path / "run"))
    assert clean.num_rows + len(dead) == len(rows) + 1
    assert set(clean.column("__person__").to_pylist()) <= {"12", "1"}
    ok_values = {"1.5": 1.5, "inf": math.inf, "-inf": -math.inf, "1e5": 1e5}
    expected_clean = sum(1 for p, _, v in rows if p in ("12", "01") and v in ok_values) + 1
    assert clean.num_rows == expected_clean
    assert set(clean.column("duration_s").to_pylist()) <= {*ok_values.values(), 1.0}
    reasons = Counter(d["reason"] for d in dead)
    assert set(reasons) == {
        "null or empty person id",
        "person id type mismatch",
        "null value in duration_s",
        "non-numeric value in duration_s",
        "NaN value in duration_s",
    }


AVRO_IDS = [([1, 2, 2], "long", "string"), (["1", "02", "2"], "string", "int")]


@pytest.mark.parametrize(("ids", "avro", "declared"), AVRO_IDS)
def test_avro_ids_under_a_declared_person_type_read_as_parquet_ids(
    tmp_path: Path, ids: list[Any], avro: str, declared: str
) -> None:
    """The declared person_type only says how text ids are canonicalised: long ids under
    "string" (text ids under "int") are ids, as from Parquet — not a release of dead letters."""
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "person_id", "type": avro}, {"name": "domain", "type": "string"},
        {"name": "duration_s", "type": "double"}]}  # fmt: skip
    rows = [{"person_id": p, "domain": "a", "duration_s": 1.0} for p in ids]
    with open(tmp_path / "x.avro", "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(schema), rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x.parquet")
    people = {}
    for fmt in ("avro", "parquet"):
        found = inspect_inputs(str(tmp_path / f"x.{fmt}"), fmt, COLUMNS, {"person_id": declared})
        clean, dead = run_read_validate(found, str(tmp_path / f"run-{fmt}"))
        assert dead == [], fmt
        people[fmt] = sorted(clean.column("__person__").to_pylist())
    assert people["avro"] == people["parquet"] == ["1", "2", "2"]


def test_avro_union_ids_and_dictionary_parquet(tmp_path: Path) -> None:
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "person_id", "type": ["long", "string", "null"]},
            {"name": "domain", "type": "string"},
            {"name": "duration_s", "type": ["null", "double"]},
        ],
    }
    rows = [
        {"person_id": 1, "domain": "a", "duration_s": 1.0},
        {"person_id": "1", "domain": "a", "duration_s": 2.0},
        {"person_id": None, "domain": "a", "duration_s": 3.0},
        {"person_id": 2, "domain": "b", "duration_s": None},
    ]
    with open(tmp_path / "x.avro", "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(schema), rows)
    found = inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS)
    assert found.person_type == "int"  # the first non-null branch of the union
    clean, dead = run_read_validate(found, str(tmp_path / "run"))
    assert clean.to_pylist() == [{"__person__": "1", "domain": "a", "duration_s": 1.0}]
    assert sorted(d["reason"] for d in dead) == [
        "null or empty person id",
        "null value in duration_s",
        "person id type mismatch",
    ]

    table = pa.table(
        {
            "person_id": pa.array(["u1", "u2", "u1"]).dictionary_encode(),
            "domain": pa.array(["a", "b", "a"]).dictionary_encode(),
            "duration_s": pa.array([1.0, 2.0, 3.0], pa.float32()),
        }
    )
    pq.write_table(table, tmp_path / "d.parquet")
    found = inspect_inputs(str(tmp_path / "d.parquet"), "parquet", COLUMNS)
    assert found.person_type == "string"
    clean, dead = run_read_validate(found, str(tmp_path / "run-d"))
    assert dead == []
    assert clean.column("__person__").to_pylist() == ["u1", "u1", "u2"]
    assert clean.schema.field("domain").type == pa.large_string()  # text in clean tables


def test_a_declared_bool_reads_true_and_false_in_any_case_as_key_files_do() -> None:
    """Excel and pyarrow write TRUE/FALSE; rows so spelled were all dead letters while the
    public-key reader took them, so a count by such a column released only noise."""
    words = ["TRUE", "false", "True", "fAlSe", "1", "0", "yes", " true", ""]
    values, valid = _parse_text(pa.chunked_array([words]), pa.bool_())
    read = [v if ok else None for v, ok in zip(values.to_pylist(), valid, strict=True)]
    assert read == [True, False, True, False, True, False, None, None, None]
    for word, expected in zip(words[:6], read, strict=False):
        assert _typed(pa.bool_(), word, "key 1", strict=False) is expected  # one rule for both
