"""Avro: only the job's columns are decoded, without logical-type conversion, and schemas with a
recursive type are refused at inspection — so no single row can fail or crash a whole file."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest

from tests.io import run_read_validate
from userdp.pipelines import input_files
from userdp.pipelines.avro_schema import logical_types, projection, recursive_type
from userdp.pipelines.sources import SchemaError, inspect_inputs

COLUMNS = {"person_id": "person", "domain": "key", "duration_s": "number"}
YEAR_10000_MS = 253_402_300_800_000  # a legal long, past what datetime holds


def schema(*extra: dict[str, Any], domain: Any = ("null", "string")) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "Row",
        "namespace": "ns",
        "fields": [
            {"name": "person_id", "type": "long"},
            {"name": "domain", "type": list(domain)},
            {"name": "duration_s", "type": "double"},
            *extra,
        ],
    }


def write(path: Path, s: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    with open(path, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(s), rows)


EVENT = {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}}
ID = {"name": "request", "type": {"type": "string", "logicalType": "uuid"}}


def test_a_value_no_logical_type_can_hold_in_an_unread_column_is_never_converted(
    tmp_path: Path,
) -> None:
    """An unread timestamp in the year 10000 and a malformed uuid used to fail the whole file
    (OverflowError / ValueError in fastavro's conversion): they are skipped now."""
    rows = [
        {"person_id": 1, "domain": "a.example", "duration_s": 1.0, "event_time": 0,
         "request": "00000000-0000-0000-0000-000000000000"},
        {"person_id": 2, "domain": "a.example", "duration_s": 2.0, "event_time": YEAR_10000_MS,
         "request": "not a uuid"},
    ]  # fmt: skip
    write(tmp_path / "x.avro", schema(EVENT, ID), rows)
    # the conversion userdp no longer runs
    with pytest.raises((OverflowError, ValueError)), open(tmp_path / "x.avro", "rb") as f:
        list(fastavro.reader(f))
    s = inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS)
    clean, dead = run_read_validate(s, str(tmp_path / "run"))
    assert clean.column("__person__").to_pylist() == ["1", "2"] and dead == []


def test_a_read_column_with_a_logical_type_branch_is_refused_at_inspection(
    tmp_path: Path,
) -> None:
    """fastavro converts by the writer's schema whatever the reader's says: a read column's
    timestamp past year 9999 would still stop the file, so such a column is refused up front."""
    ts = {"type": "long", "logicalType": "timestamp-millis"}
    write(tmp_path / "x.avro", schema(domain=("null", "string", ts)), [
        {"person_id": 1, "domain": "a.example", "duration_s": 1.0},
        {"person_id": 2, "domain": YEAR_10000_MS, "duration_s": 1.0},
    ])  # fmt: skip
    with pytest.raises(SchemaError, match=r"column 'domain' has the Avro logical type 'timestamp"):
        inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS)


@pytest.mark.parametrize("column", ["domain", "person_id"])
@pytest.mark.parametrize("branches", [("string", "bytes"), ("null", "bytes", {"type": "string"})])
def test_a_read_column_of_string_and_bytes_is_refused_at_inspection(
    tmp_path: Path, column: str, branches: tuple[Any, ...]
) -> None:
    """Schema resolution read b"a" as "a" (one key; b"u1" and "u1" one person) and failed on
    bytes that are not UTF-8 — after the charge, on one person's value. Refused up front; an
    unread such column is fine."""
    s = schema(domain=("null", "string"))
    for fd in s["fields"]:
        if fd["name"] == column:
            fd["type"] = list(branches)
    write(tmp_path / "x.avro", s, [
        {"person_id": b"\xffsecret" if column == "person_id" else 1,
         "domain": "a.example" if column == "person_id" else b"\xffsecret", "duration_s": 1.0},
    ])  # fmt: skip
    with pytest.raises(
        SchemaError, match=rf"column '{column}' is a union of string and bytes"
    ) as e:
        inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS)
    assert "secret" not in str(e.value)
    inspect_inputs(
        str(tmp_path / "x.avro"),
        "avro",
        {
            "duration_s": "number",
            **({"domain": "person"} if column == "person_id" else {"person_id": "person"}),
        },
    )


def test_a_logical_type_a_read_column_uses_by_name_is_refused_at_inspection(
    tmp_path: Path,
) -> None:
    """A ``fixed`` decimal defined by an unread column and used *by name* in a read column's
    union is converted by fastavro all the same (below: the projection's reader returns a
    Decimal), and a row's 500,000-byte value overflows Python's decimal context (raised
    ``decimal.Overflow`` mid-file when tried by hand; too slow to convert here). The named type
    is followed, and the column refused."""
    dec = {"type": "fixed", "name": "Dec", "size": 8, "logicalType": "decimal", "precision": 3}
    s = schema(domain=("null", "string", "ns.Dec"))
    s["fields"].insert(1, {"name": "amount", "type": ["null", dec]})  # defined before its use
    write(tmp_path / "x.avro", s, [
        {"person_id": 1, "domain": "a.example", "duration_s": 1.0, "amount": None},
        {"person_id": 2, "domain": bytes(7) + b"\x05", "duration_s": 1.0, "amount": None},
    ])  # fmt: skip
    with open(tmp_path / "x.avro", "rb") as f:  # the conversion the refusal keeps away
        writer = fastavro.reader(f).writer_schema
        f.seek(0)
        rows = list(fastavro.reader(f, reader_schema=projection(writer, list(COLUMNS))))
    assert rows[1]["domain"] == Decimal(5)
    with pytest.raises(SchemaError, match=r"column 'domain' has the Avro logical type 'decimal'"):
        inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS)
    assert logical_types("ns.Dec") == []  # without the schema's definitions, a name is opaque


def test_a_named_type_defined_in_an_unread_column_is_read_where_a_read_one_uses_it(
    tmp_path: Path,
) -> None:
    """T (with U inside) is defined by an unread column; a read column uses U, another T: the
    reader schema defines each once."""
    t = {"type": "record", "name": "T", "fields": [
        {"name": "u", "type": {"type": "record", "name": "U", "fields": [
            {"name": "x", "type": "long"}]}}]}  # fmt: skip
    s = {"type": "record", "name": "Row", "namespace": "ns", "fields": [
        {"name": "person_id", "type": "long"},
        {"name": "extra", "type": ["null", t]},  # unread: defines T and U
        {"name": "domain", "type": ["null", "string", "U"]},
        {"name": "duration_s", "type": "double"},
        {"name": "site", "type": ["null", "T"]},
    ]}  # fmt: skip
    write(tmp_path / "x.avro", s, [
        {"person_id": i, "domain": "a.example", "duration_s": 1.0, "extra": None, "site": None}
        for i in range(5)
    ])  # fmt: skip
    columns = {**COLUMNS, "site": "key"}
    with open(tmp_path / "x.avro", "rb") as f:
        p = projection(fastavro.reader(f).writer_schema, list(columns))
    fastavro.parse_schema(p)  # each named type defined once
    with pytest.raises(SchemaError, match="column 'site'"):  # a record is no key type: refused
        inspect_inputs(str(tmp_path / "x.avro"), "avro", columns)
    clean, dead = run_read_validate(
        inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS), str(tmp_path / "run")
    )
    assert len(clean) == 5 and dead == []


def test_a_recursive_type_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    node = {"name": "extra", "type": ["null", {"type": "record", "name": "Node",
            "fields": [{"name": "next", "type": ["null", "Node"]}]}]}  # fmt: skip
    write(tmp_path / "x.avro", schema(node), [
        {"person_id": 1, "domain": "a.example", "duration_s": 1.0, "extra": None}
    ])  # fmt: skip
    with pytest.raises(
        SchemaError, match=r"x\.avro: its Avro schema has a recursive type 'ns\.Node'"
    ):
        inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS)


def test_recursion_and_projection_on_schemas() -> None:
    node = {"type": "record", "name": "ns.N", "fields": [{"name": "n", "type": ["null", "ns.N"]}]}
    assert recursive_type(schema({"name": "e", "type": node})) == "ns.N"
    # a type used twice (defined, then referenced) is not a recursion
    twice = schema(
        {"name": "a", "type": {"type": "record", "name": "ns.P", "fields": [
            {"name": "x", "type": "long"}]}},
        {"name": "b", "type": ["null", "ns.P"]},
        domain=("null", "string", {"type": "long", "logicalType": "date"}),
    )  # fmt: skip
    assert recursive_type(twice) is None
    arr = schema({"name": "t", "type": {"type": "array", "items": {
        "type": "record", "name": "ns.T", "fields": [{"name": "c", "type": {
            "type": "map", "values": "ns.T"}}]}}})  # fmt: skip
    assert recursive_type(arr) == "ns.T"
    # the projection keeps the job's columns, drops logical types, and defines a named type a
    # kept column references where it is first used
    p = projection({**twice, "fields": [*twice["fields"][:3], *twice["fields"][3:]]},
                   ["person_id", "domain", "b"])  # fmt: skip
    assert [f["name"] for f in p["fields"]] == ["person_id", "domain", "b"]
    assert p["fields"][1]["type"] == ["null", "string", "long"]
    assert p["fields"][2]["type"][1]["name"] == "ns.P"  # defined here: field a is dropped
    fastavro.parse_schema(p)  # a valid schema


ROW = {"person_id": 1, "domain": "a.example", "duration_s": 1.0}


TWO_RECORDS = [
    {"type": "record", "name": "A", "fields": [{"name": "person_id", "type": "long"}]},
    {"type": "record", "name": "B", "fields": [{"name": "person_id", "type": "long"}]},
]


@pytest.mark.parametrize(
    "top", ["TWO_RECORDS", "long", {"type": "array", "items": "long"}], ids=str
)
def test_an_avro_file_whose_schema_is_not_a_record_is_refused_not_a_crash(
    tmp_path: Path, top: Any
) -> None:
    """A union of two records, a primitive or an array at the top crashed the check with an
    AttributeError (exit 1); now a job error naming the file."""
    s = TWO_RECORDS if top == "TWO_RECORDS" else top
    rows: list[Any] = (
        [{"person_id": 1}] if top == "TWO_RECORDS" else [7] if top == "long" else [[7]]
    )
    with open(tmp_path / "x.avro", "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(s), rows)
    with pytest.raises(SchemaError, match=r"x\.avro: its Avro schema is not a record"):
        inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS)


@pytest.mark.parametrize("null_first", [True, False])
def test_a_nullable_record_file_is_read_and_its_null_rows_are_dead_letters(
    tmp_path: Path, null_first: bool
) -> None:
    """Kafka Connect's Avro converter writes an optional value schema, ``["null", record]``.
    Such files were refused; their records are rows now, a null one a dead letter (on the fast
    path's chunk and on one without nulls alike), and an unread column's logical type is still
    never converted (the projection is a ``["null", record]`` union too)."""
    record = schema(EVENT)
    top = ["null", record] if null_first else [record, "null"]
    rows: list[Any] = [
        {**ROW, "person_id": 1, "event_time": YEAR_10000_MS},
        None,
        {**ROW, "person_id": 2, "event_time": 0},
    ]
    with open(tmp_path / "x.avro", "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(top), rows)
    s = inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS)
    clean, dead = run_read_validate(s, str(tmp_path / "run"))
    assert clean.column("__person__").to_pylist() == ["1", "2"]
    assert [(d["reason"], d["line"]) for d in dead] == [("malformed record", "null")]
    # without a null row the chunk takes the fast path: the same rows
    with open(tmp_path / "y.avro", "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(top), [rows[0], rows[2]])
    s = inspect_inputs(str(tmp_path / "y.avro"), "avro", COLUMNS)
    clean, dead = run_read_validate(s, str(tmp_path / "run2"))
    assert clean.column("__person__").to_pylist() == ["1", "2"] and dead == []


def test_a_nullable_record_files_read_column_is_checked_like_a_records(tmp_path: Path) -> None:
    """The column checks look inside the union: a read column's logical type is refused."""
    ts = {"type": "long", "logicalType": "timestamp-millis"}
    top = ["null", schema(domain=("null", "string", ts))]
    with open(tmp_path / "x.avro", "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(top), [ROW])
    with pytest.raises(SchemaError, match=r"column 'domain' has the Avro logical type"):
        inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS)
    with open(tmp_path / "x.avro", "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(["null", schema()]), [ROW])
    with pytest.raises(SchemaError, match=r"column 'missing' \(named in the job file\) is missing"):
        inspect_inputs(str(tmp_path / "x.avro"), "avro", {**COLUMNS, "missing": "key"})


def test_an_avro_header_fastavro_cannot_parse_is_unreadable_not_a_crash(tmp_path: Path) -> None:
    """Older Java Avro wrote "default": null on non-null fields; fastavro's SchemaParseException
    is not a ValueError, and crashed the check (exit 1)."""
    extra = {"name": "note", "type": "string", "default": "abcd"}
    write(tmp_path / "x.avro", schema(extra), [{**ROW, "note": "x"}])
    raw = (tmp_path / "x.avro").read_bytes()
    (tmp_path / "x.avro").write_bytes(raw.replace(b'"default": "abcd"', b'"default": null  ', 1))
    with pytest.raises(SchemaError, match=r"x\.avro: cannot be read as avro"):
        inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS)


def test_an_avro_codec_without_its_library_is_refused_before_the_charge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark writes Avro with snappy; fastavro decodes it only with cramjam. Without it the file
    passed the check and failed after the ledger's charge, as if it were corrupt. The header
    names the codec, so it is refused at inspection, naming what to install."""
    write(tmp_path / "x.avro", schema(), [ROW])
    with open(tmp_path / "x.avro", "rb") as f:
        assert fastavro.reader(f).metadata["avro.codec"] == "null"

    def missing(*_: Any) -> None:  # what fastavro registers for a codec whose library is absent
        raise ValueError("null codec is supported but you need to install one of the following "
                         "libraries: ('somelib',)")  # fmt: skip

    monkeypatch.setitem(fastavro.read.BLOCK_READERS, "null", missing)
    with pytest.raises(
        SchemaError, match=r"x\.avro: its Avro blocks are compressed with 'null', which this "
        r"installation cannot decompress \(fastavro: .*\('somelib',\)\); install that library"
    ):  # fmt: skip
        inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS)
    monkeypatch.undo()
    assert inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS) is not None
    # the real registry: the library named is fastavro's own (backports.zstd for zstandard on
    # this Python, not the zstandard package a user would guess)
    for codec, stub in fastavro.read.BLOCK_READERS.items():
        if getattr(stub, "__name__", "") == "missing":
            with pytest.raises(SchemaError, match=r"you need to install one of the following"):
                input_files._avro_codec_readable(codec, "x.avro")
