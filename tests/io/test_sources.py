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

from tests.io import run_read_validate
from userdp.pipelines import input_files
from userdp.pipelines.input_listing import list_input_files
from userdp.pipelines.sources import SchemaError, inspect_inputs

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
        # CSV and JSONL carry no schema: their types come from the job file
        declared = {"person_id": "int"} if fmt in ("csv", "jsonl") else {}
        schema = inspect_inputs(str(d / f"*.{fmt}"), fmt, COLUMNS, declared)
        assert schema.person_type == "int"
        assert len(schema.files) == 2
        clean, dead = run_read_validate(schema, str(tmp_path / f"run-{fmt}"))
        assert dead == []
        results.append(clean)
    text = pa.large_string()  # clean tables hold text with 64-bit offsets (validate.py)
    expected = pa.table(
        {
            "__person__": pa.array(["12", "12", "3", "7", "7"], text),
            "domain": pa.array(
                ["a.example", "c.example", "c.example", "a.example", "b.example"], text
            ),
            "duration_s": [0.25, 42.0, 600.0, 1.5, 2.0],
        }
    )
    for clean in results:
        assert clean.equals(expected), clean


def test_no_files_matched(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="matched no files"):
        inspect_inputs(str(tmp_path / "*.parquet"), "parquet", COLUMNS)


def test_a_file_name_that_is_not_utf8_is_refused_when_listed(tmp_path: Path) -> None:
    """Beam encodes each path as UTF-8 when it ships the reads: such a name failed on a worker
    after the charge (exit 1). Refused at listing, its bytes escaped."""
    write_rows(tmp_path / "good.csv", ROWS, "csv")
    os.rename(tmp_path / "good.csv", os.fsdecode(os.fsencode(str(tmp_path)) + b"/a\xff.csv"))
    with pytest.raises(SchemaError, match=r"a\\xff\.csv': its name is not UTF-8 text"):
        inspect_inputs(str(tmp_path / "*.csv"), "csv", COLUMNS)


@pytest.mark.parametrize(
    "path", ["gcs://bucket/logs/*.parquet", "foo://host/x/*.parquet", "hdfs://nn/logs/*.parquet"]
)
def test_a_scheme_no_installed_filesystem_serves_is_an_input_error(path: str) -> None:
    """A misspelt scheme (gcs:// for gs://) or one whose library is not installed (hdfs://
    here) was Beam's ValueError or BeamIOError: exit 1, "a bug in userdp" (CLI audit)."""
    with pytest.raises(SchemaError, match=r"no Beam filesystem for this scheme here — install"):
        inspect_inputs(path, "parquet", COLUMNS)


def test_a_file_url_is_a_local_input(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="matched no files"):
        inspect_inputs(f"file://{tmp_path}/*.parquet", "parquet", COLUMNS)


def test_unknown_format_and_kinds(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="format 'orc' is not supported; allowed: parquet"):
        inspect_inputs(str(tmp_path / "*"), "orc", COLUMNS)
    with pytest.raises(SchemaError, match=r"kinds .* not supported"):
        inspect_inputs(str(tmp_path / "*"), "csv", {"a": "person", "b": "label"})
    with pytest.raises(SchemaError, match="exactly one person column"):
        inspect_inputs(str(tmp_path / "*"), "csv", {"a": "key"})


@pytest.mark.parametrize("fmt", ["parquet", "avro", "csv"])
def test_missing_column(tmp_path: Path, fmt: str) -> None:
    """The message names the file's own columns (schema metadata) and the closest spelling."""
    write_rows(tmp_path / f"x.{fmt}", [{"person_id": 1, "domain": "a", "duration": 2.0}], fmt)
    with pytest.raises(
        SchemaError,
        match=r"x\.\w+: column 'duration_s' \(named in the job file\) is missing; the file's "
        r"columns are 'person_id', 'domain', 'duration' — did you mean 'duration'\?",
    ):
        inspect_inputs(str(tmp_path / f"x.{fmt}"), fmt, COLUMNS)


@pytest.mark.parametrize(
    ("name", "meant"),
    [("dur", "duration_s"), ("Dom", "domain"), ("duraton_s", "duration_s"), ("zzz", None)],
)
def test_the_suggested_column_prefers_one_the_name_abbreviates(
    name: str, meant: str | None
) -> None:
    """``dur`` is closer to ``url`` by spelling; the column it abbreviates is what was meant."""
    present = ["person_id", "url", "duration_s", "domain", "duration_s_total"]
    assert input_files._closest(name, present) == ([meant] if meant else [])


def test_a_csv_without_its_header_never_shows_its_first_row(tmp_path: Path) -> None:
    """A first line naming none of the job's columns may be a person's row: never echoed."""
    secret = "alice.smith@example.com"
    (tmp_path / "x.csv").write_text(f"{secret},a.example,1.0\nbob,b.example,2.0\n")
    with pytest.raises(SchemaError, match=r"its first line \(3 fields\) names none") as e:
        inspect_inputs(str(tmp_path / "x.csv"), "csv", COLUMNS)
    assert secret not in str(e.value) and "a.example" not in str(e.value)


@pytest.mark.parametrize("fmt", ["parquet", "avro"])
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


def test_csv_and_jsonl_types_come_from_the_job_file_never_from_values(tmp_path: Path) -> None:
    """Issue 12, item 1: one person's values cannot flip a column's type (and with it the output
    schema and which other rows are dead letters). The repro: 100 persons whose domain is "123" or
    "site.example" half and half, then one more person with "other.example" — or with "456"."""
    rows = [{"person_id": i, "domain": "123" if i % 2 else "site.example", "duration_s": 1.0}
            for i in range(100)]  # fmt: skip
    for fmt in ("csv", "jsonl"):
        base = tmp_path / fmt / "base"
        more = tmp_path / fmt / "more"
        for d, extra in ((base, []), (more, [{"person_id": 100, "domain": "456",
                                               "duration_s": 1.0}] * 60)):  # fmt: skip
            d.mkdir(parents=True)
            write_rows(d / f"x.{fmt}", extra + rows, fmt)
        declared = {"person_id": "int"}
        a = inspect_inputs(str(base / f"*.{fmt}"), fmt, COLUMNS, declared)
        b = inspect_inputs(str(more / f"*.{fmt}"), fmt, COLUMNS, declared)
        assert a.arrow_schema() == b.arrow_schema()
        assert dict(a.keys) == {"domain": pa.string()}  # the documented default for keys
        typed = inspect_inputs(str(base / f"*.{fmt}"), fmt, COLUMNS, {**declared, "domain": "int"})
        assert dict(typed.keys) == {"domain": pa.int64()}


def test_a_declared_type_must_match_a_parquet_schema(tmp_path: Path) -> None:
    write_rows(tmp_path / "x.parquet", ROWS, "parquet")
    with pytest.raises(SchemaError, match=r"'domain' has type string, but \[input\] columns "
                       r"declares it 'int'"):  # fmt: skip
        inspect_inputs(str(tmp_path / "x.parquet"), "parquet", COLUMNS, {"domain": "int"})
    with pytest.raises(SchemaError, match=r"'duration_s' \(number\) is declared 'string'"):
        inspect_inputs(str(tmp_path / "x.parquet"), "parquet", COLUMNS, {"duration_s": "string"})


def test_only_the_csv_header_is_read(tmp_path: Path) -> None:
    """A data row that is not UTF-8, or ragged, in the first MiB is a row problem, not a file one:
    the schema check reads the header line only (issue 13, item 6)."""
    (tmp_path / "x.csv").write_bytes(b"person_id,domain,duration_s\n1,caf\xe9,2\n3,b\n")
    schema = inspect_inputs(str(tmp_path / "x.csv"), "csv", COLUMNS)
    assert schema.person_type == "string"
    (tmp_path / "y.csv").write_bytes(b"person_id,domain,duration_s\n")  # header only: no rows
    (tmp_path / "z.csv").write_bytes(b"")  # no bytes: no rows
    (tmp_path / "w.jsonl").write_bytes(b"")
    inspect_inputs(str(tmp_path / "[yz].csv"), "csv", COLUMNS)
    inspect_inputs(str(tmp_path / "w.jsonl"), "jsonl", COLUMNS)
    (tmp_path / "v.csv").write_bytes(b"person_id,dom\xe9in\n")
    with pytest.raises(SchemaError, match=r"v\.csv: the CSV header \(first line\) is not UTF-8"):
        inspect_inputs(str(tmp_path / "v.csv"), "csv", COLUMNS)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_duplicate_column_names_are_refused_by_name(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"x.{fmt}"
    if fmt == "csv":
        path.write_text("person_id,domain,domain,duration_s\n1,a,b,2\n")
    else:
        names = ["person_id", "domain", "domain", "duration_s"]
        t = pa.Table.from_arrays([pa.array([1]), pa.array(["a"]), pa.array(["b"]),
                                  pa.array([2.0])], names)  # fmt: skip
        pq.write_table(t, path)
    with pytest.raises(SchemaError, match=r"x\.\w+: column 'domain' appears 2 times"):
        inspect_inputs(str(path), fmt, COLUMNS)


def test_non_regular_files_in_the_glob_are_refused_by_name(tmp_path: Path) -> None:
    write_rows(tmp_path / "a.csv", ROWS, "csv")
    os.mkfifo(tmp_path / "b.csv")  # reading it would block forever
    with pytest.raises(SchemaError, match=r"b\.csv: not a regular file \(a FIFO"):
        inspect_inputs(str(tmp_path / "*.csv"), "csv", COLUMNS)
    os.remove(tmp_path / "b.csv")
    (tmp_path / "c.csv").mkdir()
    with pytest.raises(SchemaError, match=r"c\.csv: a directory"):
        inspect_inputs(str(tmp_path / "*.csv"), "csv", COLUMNS)
    (tmp_path / "c.csv").rmdir()
    os.symlink(tmp_path / "gone.csv", tmp_path / "d.csv")
    with pytest.raises(SchemaError, match=r"d\.csv: a symbolic link to a missing file"):
        inspect_inputs(str(tmp_path / "*.csv"), "csv", COLUMNS)


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
    write_rows(tmp_path / "x.avro", [{"person_id": secret, "domain": 3.25, "duration_s": 1.0}],
               "avro")  # fmt: skip
    with pytest.raises(SchemaError) as info:
        inspect_inputs(str(tmp_path / "x.avro"), "avro", COLUMNS)
    assert secret not in str(info.value)
    assert "3.25" not in str(info.value)
    assert os.path.basename(str(tmp_path / "x.avro")) in str(info.value)


def test_an_input_error_is_found_whole_inside_a_runners_wrapping() -> None:
    """Runners re-raise a worker's error inside their own, quoting it: the file's name may hold
    a quote itself, so the sentence ends at its own mark, not at the first quote."""
    import zlib  # noqa: PLC0415

    from userdp.pipelines.sources import InputFileError, input_error_message  # noqa: PLC0415

    inner = InputFileError("/data/o'brien logs.jsonl.gz", "truncated", zlib.error("x"))
    wrapped = RuntimeError(f"Error while running {inner!r} [while running 'Read']\nTraceback")
    assert input_error_message(wrapped) == (
        "input file /data/o'brien logs.jsonl.gz: truncated (zlib.error)"
    )


def test_a_parquet_codec_this_pyarrow_cannot_decode_is_refused_before_the_charge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A column chunk compressed with LZO (or a codec left out of a pyarrow build) passed the
    check and failed on a worker after the charge; the footer names it, so it is refused at
    inspection. Simulated: snappy made unavailable; a column the job does not read is not asked."""
    table = pa.table({"person_id": [1, 2], "domain": ["a", "b"], "other": [1.0, 2.0]})
    pq.write_table(table, tmp_path / "x.parquet", compression="snappy")
    columns = {"person_id": "person", "domain": "key"}
    available = input_files.codec_available
    monkeypatch.setattr(input_files, "codec_available", lambda c: c != "snappy" and available(c))
    assert not input_files.codec_available("lzo")  # what the simulation stands for
    with pytest.raises(
        SchemaError, match=r"x\.parquet: column 'person_id' is compressed with SNAPPY, which this "
        r"pyarrow cannot decompress"
    ):  # fmt: skip
        inspect_inputs(str(tmp_path / "x.parquet"), "parquet", columns)
    pq.write_table(table, tmp_path / "x.parquet", compression={"person_id": "none",
                   "domain": "none", "other": "snappy"})  # fmt: skip
    assert inspect_inputs(str(tmp_path / "x.parquet"), "parquet", columns) is not None


def test_a_double_star_glob_spans_directories_as_beam_matches_it(tmp_path: Path) -> None:
    """`data/**/*.parquet` read only one level of directories locally, while Beam's matcher
    (object stores) spans any depth: the same job read different files depending on where the
    data lived. Locally `**` also matches no directory (Python's glob)."""
    for sub in ("y=2024", "y=2024/m=01", "y=2024/m=01/d=02"):
        (tmp_path / "data" / sub).mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / sub / "part.parquet").write_bytes(b"x")
    files, _ = list_input_files(str(tmp_path / "data" / "**" / "*.parquet"))
    depth = sorted(f.count("=") for f in files)
    assert depth == [1, 2, 3]
    # `data/**` names every file under data/ (Beam lists no directories); it refused them all
    (tmp_path / "data" / "top.parquet").write_bytes(b"x")
    files, _ = list_input_files(str(tmp_path / "data" / "**"))
    assert sorted(f.count("=") for f in files) == [0, 1, 2, 3]


def test_row_groups_are_joined_into_reads_of_at_most_span_rows() -> None:
    """Each read opens the file and its footer once; small groups share a read, a large one
    has its own, and every group is read exactly once, in order."""
    span = input_files.SPAN_ROWS
    assert input_files.row_group_spans([]) == []
    assert input_files.row_group_spans([100] * 5) == [(0, 5)]
    assert input_files.row_group_spans([span, 1, span - 1, 1]) == [(0, 1), (1, 3), (3, 4)]
    assert input_files.row_group_spans([2 * span, 5]) == [(0, 1), (1, 2)]
    # the read columns' bytes cap a span too: wide rows make big groups of few rows
    big = input_files.SPAN_BYTES // 2
    assert input_files.row_group_spans([10] * 4, [big] * 4) == [(0, 2), (2, 4)]
    assert input_files.row_group_spans([10] * 3, [3 * big, 1, 1]) == [(0, 1), (1, 3)]
    sizes = [7, span // 2, span // 2, 9, 0, span + 3, 1]
    spans = input_files.row_group_spans(sizes)
    assert [g for a, b in spans for g in range(a, b)] == list(range(len(sizes)))
    for a, b in spans:
        assert b - a == 1 or sum(sizes[a:b]) <= span


def test_a_parquet_file_of_many_small_row_groups_reads_every_row_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads span several row groups (and a file several reads): the same rows as one group."""
    monkeypatch.setattr(input_files, "SPAN_ROWS", 4)
    rows = [{**r, "person_id": r["person_id"] + 100 * i} for i in range(3) for r in ROWS]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x.parquet", row_group_size=2)
    s = inspect_inputs(str(tmp_path / "x.parquet"), "parquet", COLUMNS)
    assert [(a, b) for _, a, b in s.row_group_spans] == [(0, 2), (2, 4), (4, 6), (6, 8)]
    clean, dead = run_read_validate(s, str(tmp_path / "run"))
    want = sorted(str(r["person_id"]) for r in rows)
    assert sorted(clean.column("__person__").to_pylist()) == want and dead == []


def test_a_span_that_fails_names_its_row_group_or_a_file_changed_since(tmp_path: Path) -> None:
    """A span reads many groups at once; its error still names the group that does not decode,
    or says the file changed since it was inspected (not "row groups 0–7")."""
    from userdp.pipelines.sources import InputFileError, _ReadParquetRowGroups  # noqa: PLC0415

    rows = [{**r, "person_id": r["person_id"] + 100 * i} for i in range(8) for r in ROWS]
    path = tmp_path / "x.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=5, compression="snappy")
    s = inspect_inputs(str(path), "parquet", COLUMNS)
    (span,) = s.row_group_spans
    assert span[1:] == (0, 8)
    reader = _ReadParquetRowGroups(s)
    assert sum(t.num_rows for t in reader.process(span)) == 40
    # garbage over group 3's domain column: that group alone does not decode
    chunk = pq.read_metadata(path).row_group(3).column(1)
    raw = bytearray(path.read_bytes())
    start = chunk.data_page_offset
    raw[start + 8 : start + chunk.total_compressed_size] = b"\xff" * (
        chunk.total_compressed_size - 8
    )
    path.write_bytes(bytes(raw))
    with pytest.raises(InputFileError, match=r"x\.parquet: row group 3 cannot be decoded"):
        list(reader.process(span))
    # the file rewritten with fewer groups since it was inspected
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=20)
    with pytest.raises(InputFileError, match=r"changed since it was inspected"):
        list(reader.process(span))
