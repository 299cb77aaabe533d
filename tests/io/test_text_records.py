"""CSV and JSONL are read one record per line: no row changes how another row is read.

The property under test (issue 12 item 7, issue 13 item 1): for every line, the reader's result —
a row with these values, or one malformed record — depends on that line alone. Checked by reading
files in which a hostile line sits among ordinary ones, in chunks of many sizes, and comparing with
each line read alone.
"""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.io import run_read_validate
from userdp.pipelines.raw_records import records_to_table
from userdp.pipelines.sources import InputSchema, _ReadFile, inspect_inputs
from userdp.pipelines.text_records import (
    MAX_LINE_BYTES,
    CsvLines,
    JsonLines,
    escape_utf8,
    line_chunks,
    unescape_utf8,
)

HOSTILE_CSV = [
    b'7,"unterminated,1',  # pyarrow would join every following line up to the next quote
    b"7,caf\xe9SECRET-ROW",  # ragged and not UTF-8: pyarrow's row handler itself fails on it
    b'7,"a""b",2',
    b"7,\xff\xfe,3",  # not UTF-8, right width
    b'7,"x\xe9',  # both
    b"7,a,b,c,d",  # too many fields
    b"\xef\xbb\xbf7,a,1",
]


def _csv_rows(lines: list[bytes], chunk: int = 1 << 20) -> tuple[list[tuple[str, ...]], int]:
    """(readable rows as text with invalid bytes escaped, malformed count) of the CSV lines."""
    parser = CsvLines(3, [0, 1, 2])
    rows: list[tuple[str, ...]] = []
    malformed = 0
    for chunk_lines, overlong in line_chunks(io.BytesIO(b"\n".join(lines) + b"\n"), chunk):
        data, escaped = escape_utf8(b"\n".join(chunk_lines))
        tables, bad = parser.parse(data.split(b"\n") if chunk_lines else [])
        malformed += len(bad) + overlong
        for t in tables:
            for r in t.to_pylist():
                values = [None if r[c] is None else r[c].decode() for c in ("f0", "f1", "f2")]
                rows.append(
                    tuple(v if v is None or not escaped else unescape_utf8(v)[0] for v in values)
                )  # type: ignore[misc]
    return rows, malformed


def test_a_hostile_csv_line_affects_only_itself() -> None:
    rng = random.Random(5)  # test data, not noise
    ordinary = [f"{i},d{rng.randrange(9)},{rng.randrange(100)}".encode() for i in range(200)]
    alone = {line: _csv_rows([line]) for line in [*HOSTILE_CSV, *ordinary[:5]]}
    for hostile in HOSTILE_CSV:
        for at in (0, 1, 57, 199):
            lines = [*ordinary[:at], hostile, *ordinary[at:]]
            for chunk in (64, 1000, 1 << 20):  # chunk boundaries land anywhere
                rows, malformed = _csv_rows(lines, chunk)
                expected_rows, expected_bad = _csv_rows(ordinary, chunk)
                hostile_rows, hostile_bad = alone[hostile]
                assert malformed == expected_bad + hostile_bad, (hostile, at, chunk)
                assert sorted(rows, key=repr) == sorted(expected_rows + hostile_rows, key=repr), (
                    hostile,
                    at,
                    chunk,
                )
    # and the ordinary lines are all read
    assert _csv_rows(ordinary) == ([tuple(x.decode().split(",")) for x in ordinary], 0)


def test_invalid_utf8_is_escaped_reversibly() -> None:
    data = b"a\xe9b \xee\x80\x80 ok \xff"
    escaped, changed = escape_utf8(data)
    assert changed
    escaped.decode("utf-8")  # valid text for the parser
    text, bad = unescape_utf8(escaped.decode())
    assert bad
    assert text == "a\\xe9b \ue000 ok \\xff"
    assert escape_utf8(b"plain \xee\x80\x80") == (b"plain \xee\x80\x80", False)
    assert unescape_utf8(escape_utf8(b"\xee\x80\x80\xff")[0].decode()) == ("\ue000\\xff", True)


def test_overlong_lines_are_malformed_and_never_held_whole() -> None:
    long = b"1,a," + b"9" * (MAX_LINE_BYTES + 10)
    data = b"1,a,1\n" + long + b"\n2,b,2\n"
    lines, overlong = [], 0
    for chunk, n in line_chunks(io.BytesIO(data), chunk_bytes=1 << 16):
        lines += chunk
        overlong += n
    assert lines == [b"1,a,1", b"2,b,2"]
    assert overlong == 1


def test_line_terminators_and_blank_lines() -> None:
    data = b"1,a,1\r\n\r\n2,b,2\r3,c,3\n\n"
    lines = [x for chunk, _ in line_chunks(io.BytesIO(data), 4) for x in chunk]
    assert lines == [b"1,a,1", b"2,b,2", b"3,c,3"]


JSON_SCHEMA = InputSchema(
    fmt="jsonl",
    files=(),
    person="p",
    person_type="string",
    keys=(("k", pa.string()),),
    numbers=("v",),
)
HOSTILE_JSON = [
    b'{"p": "1", "k": "a", "v": 1}{"p": "2", "k": "b", "v": 2}',  # two values on one line
    b'{"p": "1", "p": "2", "k": "a", "v": 1}',  # duplicate keys
    b'{"p": "\\ud800", "k": "a", "v": 1}',  # a lone surrogate
    b'{"p": 7, "k": "a", "v": 1}',  # a number in a string column
    b'{"p": "1", "k": "a", "v": "1"}',  # a string in a number column
    b'{"p": "\xff", "k": "a", "v": 1}',  # not UTF-8
    b"[" * 5000 + b"]" * 5000,
    b'{"p": "1", "k": "a", "v": 1e999}',
    b"\xef\xbb\xbf" + b'{"p": "9", "k": "z", "v": 9}',
]


def _json_rows(lines: list[bytes]) -> list[dict[str, object]]:
    parser = JsonLines(JSON_SCHEMA.arrow_schema(), lambda r, x: records_to_table(r, JSON_SCHEMA, x))
    out = []
    for t in parser.parse(lines):
        for r in t.to_pylist():
            # fast-path rows are typed; slow-path rows are text: compare as text
            out.append({k: None if v is None else json.dumps(v) if not isinstance(v, str) else v
                        for k, v in r.items()})  # fmt: skip
    return out


def _canon(rows: list[dict[str, object]]) -> list[str]:
    def one(r: dict[str, object]) -> str:
        marks = ("__reject__", "__raw_line__")  # a null mark is no mark
        r = {k: v for k, v in r.items() if not (k in marks and v is None)}
        v = r.get("v")
        number = float(str(v)) if v is not None and r.get("__reject__") is None else v
        return json.dumps({**r, "v": repr(number)}, sort_keys=True)

    return sorted(one(r) for r in rows)


@pytest.mark.parametrize("hostile", HOSTILE_JSON, ids=range(len(HOSTILE_JSON)))
def test_a_hostile_json_line_affects_only_itself(hostile: bytes) -> None:
    ordinary = [json.dumps({"p": str(i), "k": "d", "v": i / 4}).encode() for i in range(300)]
    expected = _canon(_json_rows(ordinary) + _json_rows([hostile]))
    for at in (0, 150, 300):
        got = _canon(_json_rows([*ordinary[:at], hostile, *ordinary[at:]]))
        assert got == expected, at


# Lines pyarrow reads alone (the odd field is not a column it reads) and Python's json refuses
# whole: read by pyarrow in a group, they must not become malformed records in a group a hostile
# neighbour sent down the slow path.
QUIET_ODDITIES = [
    b'{"p": "%d", "k": "d", "v": 1, "note": "caf\xe9"}',  # an unread field, not UTF-8
    b'{"p": "%d", "k": "d", "v": 1, "tag": 1, "tag": 2}',  # an unread key, twice
    b'{"p": "%d", "k": "d", "v": 1, "n": ' + b"9" * 5000 + b"}",  # beyond int() digit limits
    b'{"p": "%d", "k": "d", "v": ' + b"9" * 5000 + b"}",  # the same, read: a float (inf)
    b'{"p": "%d", "k": "d", "v": 1, "deep": ' + b"[" * 5000 + b"]" * 5000 + b"}",  # recursion
    b'{"p": "%d", "k": "d", "v": -0}',  # pyarrow: -0.0 (int("-0") alone would give 0.0)
]


@pytest.mark.parametrize("odd", QUIET_ODDITIES, ids=range(len(QUIET_ODDITIES)))
@pytest.mark.parametrize("hostile", HOSTILE_JSON, ids=range(len(HOSTILE_JSON)))
def test_a_hostile_json_line_leaves_quietly_odd_neighbours_as_they_were(
    odd: bytes, hostile: bytes
) -> None:
    neighbours = [odd % i for i in range(40)]
    expected = _canon(_json_rows(neighbours) + _json_rows([hostile]))
    assert _canon(_json_rows([*neighbours[:20], hostile, *neighbours[20:]])) == expected


def test_a_json_line_that_is_not_an_object_is_malformed_wherever_it_stands() -> None:
    """pyarrow 25 reads a `null` line as a row of nulls after another line and crashes the
    process (SIGSEGV) when a group starts with one: run in a child process, so a crash fails this
    test rather than the suite."""
    code = """if True:
        import json, sys
        from tests.io.test_text_records import _json_rows
        ordinary = [json.dumps({"p": str(i), "k": "d", "v": 1}).encode() for i in range(100)]
        for odd in (b"null", b" null", b"[1]", b"5", b'"x"', b"true"):
            for lines in ([odd, *ordinary], [*ordinary[:50], odd, *ordinary[50:]], [odd]):
                rows = _json_rows(lines)
                bad = [r for r in rows if r.get("__reject__") is not None]
                assert [r["__reject__"] for r in bad] == ["malformed record"], (odd, rows)
                assert len(rows) == len(lines), odd
        print("read")
    """
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0 and run.stdout.strip() == "read", run.stderr[-2000:]


def test_csv_through_the_pipeline_keeps_every_other_row(tmp_path: Path) -> None:
    """The issue-13 repro: a ragged row with non-UTF-8 bytes after the first MiB, and an open
    quote that would have swallowed the rest of the file, among 40,000 ordinary rows."""
    from userdp.pipelines.input_files import inspect_inputs  # noqa: PLC0415

    body = [f"{i},d{i % 7},{i % 100}".encode() for i in range(40_000)]
    body.insert(30_000, b"7,caf\xe9SECRET-ROW")  # past the first MiB
    body.insert(20_000, b'8,"open quote,1')
    (tmp_path / "x.csv").write_bytes(b"person_id,domain,duration_s\n" + b"\n".join(body) + b"\n")
    cols = {"person_id": "person", "domain": "key", "duration_s": "number"}
    schema = inspect_inputs(str(tmp_path / "x.csv"), "csv", cols)
    clean, dead = run_read_validate(schema, str(tmp_path / "run"))
    assert clean.num_rows == 40_000
    assert sorted(d["reason"] for d in dead) == ["malformed record", "malformed record"]
    # the row of a malformed line is all null: its text is what the operator can act on
    assert sorted(d["line"] for d in dead) == ["7,caf\\xe9SECRET-ROW", '8,"open quote,1']
    assert all(set(d["row"].values()) == {None} for d in dead)


def test_a_malformed_json_line_keeps_its_text_in_its_dead_letter(tmp_path: Path) -> None:
    from userdp.pipelines.input_files import inspect_inputs  # noqa: PLC0415

    body = [b'{"p": "1", "k": "a", "v": 1}', b'{"p": "2", "k": "a"', b"[1, 2]", b'{"p": "\xff"}']
    (tmp_path / "x.jsonl").write_bytes(b"\n".join(body) + b"\n")
    schema = inspect_inputs(str(tmp_path / "x.jsonl"), "jsonl", {"p": "person", "k": "key"})
    clean, dead = run_read_validate(schema, str(tmp_path / "run"))
    assert clean.num_rows == 1
    assert sorted(d.get("line", "") for d in dead) == ["", "[1, 2]", '{"p": "2", "k": "a"']
    # not UTF-8: a JSON object all the same, so its reason and its row say where
    (utf8,) = [d for d in dead if "line" not in d]
    assert utf8["reason"] == "invalid UTF-8 text in p" and utf8["row"]["p"] == "\\xff"


@pytest.mark.parametrize("ending", [b"", b"\n", b"\r\n", b"\r"])
def test_a_csv_holding_only_its_header_has_no_rows(tmp_path: Path, ending: bytes) -> None:
    """Found by the full malformed-input corpus: a header without a line break came first as an
    empty chunk, then as a data line (one spurious dead letter)."""
    path = tmp_path / "x.csv"
    path.write_bytes(b"person_id,domain,duration_s" + ending)
    columns = {"person_id": "person", "domain": "key", "duration_s": "number"}
    schema = inspect_inputs(str(path), "csv", columns, {"person_id": "int"})
    tables = list(_ReadFile(schema).process(str(path)))
    assert sum(t.num_rows for t in tables) == 0


def test_lines_that_only_parse_together_are_each_malformed() -> None:
    """A line that does not close its object, a line that closes one too many, and a line of two
    objects: pyarrow read the first two as one row across the newline and the third as two, so
    the group's row count matched its line count and three lines no parser accepts alone became
    three rows (an audit: a person could shape the group check). Each is a dead letter, alone or
    among others, in any order."""
    tricks = [
        b'{"p": "999", "k": "a", "v": 1, "j": ',
        b'{"x": 1}}',
        b'{"p": "998", "k": "b", "v": 2}{"p": "997", "k": "c", "v": 3}',
    ]
    ordinary = [json.dumps({"p": str(i), "k": "d", "v": i}).encode() for i in range(200)]
    for lines in ([*ordinary[:100], *tricks, *ordinary[100:]], [*tricks, *ordinary], tricks):
        rows = _json_rows(lines)
        bad = [r for r in rows if r.get("__reject__") is not None]
        assert len(bad) == 3 and len(rows) == len(lines), bad
        assert _canon([r for r in rows if r.get("__reject__") is None]) == _canon(
            _json_rows(ordinary) if len(lines) > 3 else []
        )
