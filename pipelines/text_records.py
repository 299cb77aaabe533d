"""CSV and JSON Lines, read one record per line, so that no row can change how another is read.

Why this module exists. A CSV reader that honours quotes across newlines lets one person's row
with an unterminated quote (``1,"abc``) swallow every following line up to the next quote — other
persons' rows vanish into one malformed record, so one person changes everyone's contribution. And
a reader that falls back to a slower path for a whole chunk when one row is odd would let that row
change how its neighbours are parsed. Here every record is one physical line (``\\n``, ``\\r\\n`` or
``\\r``), and each line's result depends on that line alone:

- **CSV**: pyarrow parses the line with the file's header and every column read as bytes (no type
  inference). A line that pyarrow would join to the next one (it ends inside a quoted value) or
  that has the wrong number of fields is a malformed record. Quoted values may therefore not
  contain line breaks. Bytes that are not UTF-8 are escaped before parsing (:func:`escape_utf8`),
  reversibly, and flagged per value after it, so the parser never sees invalid text.
- **JSONL**: a line is one JSON object; blank lines are skipped. Parsed by pyarrow with the
  declared schema; a line pyarrow refuses (a value of another type, invalid UTF-8, a lone
  surrogate, duplicate keys, several values on one line …) is parsed alone by Python's ``json``
  and becomes a typed raw row or a malformed record (``raw_records.records_to_table``).
  Python never reads a line more strictly than pyarrow: what pyarrow does not read (a field that
  is not UTF-8 or repeated) it ignores too, and a line past Python's own limits (an integer past
  ``int``'s digits, deep nesting) gets pyarrow's row when pyarrow reads it alone.
- A line longer than ``MAX_LINE_BYTES`` is a malformed record (it is never held in memory whole).

Speed. Lines are parsed in groups (a chunk of up to ``CHUNK_BYTES``); a group is accepted when
pyarrow returns exactly one row or one malformed record per line — then no line was joined to
another, and each line was parsed exactly as it would be alone. (For JSONL that count alone is
not proof: a line left open could join the next into one row while a line of two objects
balances the count. So only lines that open *and* close an object reach pyarrow; between a
line's closing ``}`` and the next line's ``{`` no JSON text continues.) Otherwise the group is
halved and each half tried again (:func:`bisect_groups`), down to single lines for CSV and to
small groups parsed line by line in Python for JSONL (pyarrow alone for a line past Python's
limits), whose parse agrees with pyarrow's on every line pyarrow reads alone — so a line's result
is the one it has alone, whichever group it fell in (tested against hostile neighbours in
``tests/io/test_text_records.py``). Clean files take one pyarrow call per chunk.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson

CHUNK_BYTES = 16 << 20
MAX_LINE_BYTES = 8 << 20
JSON_PYTHON_GROUP = 64  # a failing JSONL group this small is parsed line by line in Python
_TERMINATORS = re.compile(rb"[\r\n]")
_UTF8_BOM = b"\xef\xbb\xbf"

# Reversible escape of invalid UTF-8: U+E000 (a private-use character) is doubled, and each byte
# that is not part of valid UTF-8 becomes U+E000 followed by U+E100 + the byte. Only bytes ≥ 0x80
# change, so commas, quotes and line breaks — the CSV structure — are untouched.
ESCAPE = "\ue000"
_ESCAPED = re.compile("\ue000([\ue000\ue180-\ue1ff])")
_LONE = re.compile("[\udc80-\udcff]")

T = TypeVar("T")


def line_chunks(f: Any, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[list[bytes], int]]:
    """The lines of a binary stream in chunks: (non-empty lines without terminators, number of
    lines longer than ``MAX_LINE_BYTES``, which are dropped). Never holds an overlong line."""
    rest, skipping = b"", False
    while True:
        block = f.read(chunk_bytes)
        overlong = 0
        if skipping:  # inside an overlong line: drop bytes up to its end
            m = _TERMINATORS.search(block)
            if m is None:
                if block:
                    continue
                return
            block, skipping = block[m.end() :], False
        data = rest + block
        if not block:
            lines = data.splitlines()
            yield _keep(lines), sum(len(x) > MAX_LINE_BYTES for x in lines)
            return
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        chunk, rest = data[:cut], data[cut:]
        if len(rest) > MAX_LINE_BYTES:
            rest, skipping, overlong = b"", True, 1
        lines = chunk.splitlines()
        overlong += sum(len(x) > MAX_LINE_BYTES for x in lines)
        yield _keep(lines), overlong


def _keep(lines: list[bytes]) -> list[bytes]:
    return [x for x in lines if x and len(x) <= MAX_LINE_BYTES]


def bisect_groups(
    lines: Sequence[bytes],
    parse: Callable[[Sequence[bytes]], T | None],
    leaf: Callable[[Sequence[bytes]], list[T]],
    leaf_size: int,
) -> list[T]:
    """Parse ``lines`` with ``parse`` (None: the group failed), halving failing groups; groups of
    at most ``leaf_size`` lines that fail go to ``leaf``. Iterative, so no recursion limit."""
    out: list[T] = []
    todo: list[Sequence[bytes]] = [lines] if lines else []
    while todo:
        group = todo.pop()
        result = parse(group)
        if result is not None:
            out.append(result)
        elif len(group) <= leaf_size:
            out.extend(leaf(group))
        else:
            mid = len(group) // 2
            todo += [group[mid:], group[:mid]]
    return out


# --- CSV --------------------------------------------------------------------------------------


def escape_utf8(data: bytes) -> tuple[bytes, bool]:
    """``data`` with invalid UTF-8 escaped (module docstring), and whether anything was escaped."""
    try:
        data.decode("utf-8")
        return data, False
    except UnicodeDecodeError:
        pass
    text = data.decode("utf-8", "surrogateescape").replace(ESCAPE, ESCAPE + ESCAPE)
    text = _LONE.sub(lambda m: ESCAPE + chr(0xE100 + ord(m.group()) - 0xDC00), text)
    return text.encode("utf-8"), True


def unescape_utf8(value: str) -> tuple[str, bool]:
    """An escaped value → (text with invalid bytes shown as ``\\xNN``, whether it had any)."""
    bad = False

    def one(m: re.Match[str]) -> str:
        nonlocal bad
        c = m.group(1)
        if c == ESCAPE:
            return ESCAPE
        bad = True
        return f"\\x{ord(c) - 0xE100:02x}"

    return _ESCAPED.sub(one, value), bad


class CsvLines:
    """Parses CSV lines of one file: ``positions`` are the 0-based header positions to read."""

    def __init__(self, width: int, positions: Sequence[int]) -> None:
        names = [f"f{i}" for i in range(width)]
        self._read = pcsv.ReadOptions(column_names=names, use_threads=False)
        self._convert = pcsv.ConvertOptions(
            include_columns=[names[i] for i in positions],
            column_types={n: pa.binary() for n in names},  # bytes: no inference from values
            strings_can_be_null=True,
            null_values=[""],  # only an empty field is null; "NA" or "nan" stay text
        )

    def _parse(self, group: Sequence[bytes]) -> tuple[pa.Table, list[str]] | None:
        malformed: list[str] = []

        def skip(row: Any) -> str:
            malformed.append(row.text)  # one whole line: the count check below ensures it
            return "skip"

        data = b"\n".join(group) + b"\n"
        read = pcsv.ReadOptions(
            column_names=self._read.column_names, use_threads=False, block_size=len(data) + 1
        )
        try:
            table = pcsv.read_csv(
                io.BytesIO(data),
                read_options=read,
                parse_options=pcsv.ParseOptions(invalid_row_handler=skip),
                convert_options=self._convert,
            )
        except (pa.ArrowInvalid, ValueError):  # the message may quote the row: never shown
            return None
        return (table, malformed) if table.num_rows + len(malformed) == len(group) else None

    def _single(self, group: Sequence[bytes]) -> list[tuple[pa.Table, list[str]]]:
        """A line that fails alone (or is joined to nothing) is one malformed record."""
        return [(self._empty(), [line.decode("utf-8") for line in group])]  # escaped: valid

    def _empty(self) -> pa.Table:
        names = self._convert.include_columns
        return pa.table({n: pa.array([], pa.binary()) for n in names})

    def parse(self, lines: Sequence[bytes]) -> tuple[list[pa.Table], list[str]]:
        """(tables of the readable lines' byte columns, the malformed lines' text, escaped as
        the input was: :func:`unescape_utf8` shows invalid bytes as ``\\xNN``)."""
        # pyarrow drops a byte-order mark only at the start of its input: drop it from every line
        # so that a line reads the same wherever it stands
        lines = [x.removeprefix(_UTF8_BOM) for x in lines]
        parts = bisect_groups(lines, self._parse, self._single, leaf_size=1)
        return [t for t, _ in parts if t.num_rows], [line for _, m in parts for line in m]


# --- JSON Lines -------------------------------------------------------------------------------


def is_blank_json(line: bytes) -> bool:
    return not line.removeprefix(_UTF8_BOM).strip(b" \t\r\n")


class JsonLines:
    """Parses JSON lines against ``schema`` (the declared column types)."""

    def __init__(
        self, schema: pa.Schema, python_rows: Callable[[list[Any], Sequence[bytes]], pa.Table]
    ) -> None:
        self._options = pjson.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="ignore"
        )
        self._names = schema.names
        self._python_rows = python_rows

    def _parse(self, group: Sequence[bytes]) -> pa.Table | None:
        data = b"\n".join(group) + b"\n"
        read = pjson.ReadOptions(use_threads=False, block_size=len(data) + 1)
        try:
            table = pjson.read_json(io.BytesIO(data), read_options=read,
                                    parse_options=self._options)  # fmt: skip
            table.validate(full=True)  # the JSON reader lets invalid UTF-8 through
        except (pa.ArrowInvalid, ValueError):  # the message may quote the row: never shown
            return None
        return table.select(self._names) if table.num_rows == len(group) else None

    def _python(self, group: Sequence[bytes]) -> list[pa.Table]:
        """A failing small group, line by line in Python — except a line Python's own limits
        refuse (an integer past ``int``'s digit limit, nesting past the recursion limit), which
        pyarrow may read: it gets pyarrow's row when pyarrow reads it alone, as in any accepted
        group. A line is never read by Python more strictly than by pyarrow, or a hostile
        neighbour that sent its group here would turn it into a dead letter."""
        out, records, lines = [], [], []
        for line in group:
            try:
                record = loads_record(line, self._names)
            except json.JSONDecodeError:  # not JSON: pyarrow refuses it too
                record = None
            except (ValueError, RecursionError):
                alone = self._parse([line])
                if alone is not None:
                    out.append(alone)
                    continue
                record = None
            records.append(record)
            lines.append(line)
        if lines:
            out.append(self._python_rows(records, lines))
        return out

    def parse(self, lines: Sequence[bytes]) -> list[pa.Table]:
        # A leading byte-order mark is dropped from every line, so both parsers see the same text.
        lines = [x.removeprefix(_UTF8_BOM) for x in lines if not is_blank_json(x)]
        # Only a line that opens and closes an object can be a record; the others (null, arrays,
        # strings, numbers, garbage, an object left open) are malformed records without asking
        # pyarrow, which reads a `null` line as a row of nulls — and crashes the process
        # (SIGSEGV, pyarrow 25) when a group starts with one. Closing matters too: pyarrow reads
        # an object across a newline, so a line left open and the next line could make one row
        # and balance a line of two objects in the group's row count. Between a line's final
        # `}` and the next line's `{` no JSON text continues, so no row spans two lines.
        objects: list[bytes] = []
        others: list[bytes] = []
        for x in lines:  # one look at each line
            (objects if _is_object_line(x) else others).append(x)
        parts = bisect_groups(objects, self._parse, self._python, leaf_size=JSON_PYTHON_GROUP)
        if others:
            parts.append(self._python_rows([None] * len(others), others))
        return [t for t in parts if t.num_rows]


def _is_object_line(line: bytes) -> bool:
    """Whether the line, without surrounding JSON whitespace, starts with ``{`` and ends with
    ``}`` (every JSON object line does)."""
    text = line.strip(b" \t\r\n")
    return text.startswith(b"{") and text.endswith(b"}")


def loads_record(line: bytes, read: Sequence[str]) -> Any:
    """One JSON line → its value; raises ``json.JSONDecodeError`` for a line that is not JSON,
    ``ValueError`` for a column in ``read`` given twice (pyarrow refuses both), and
    ``ValueError``/``RecursionError`` past Python's own limits (an integer of more digits than
    ``int`` converts — then read as a float, as pyarrow reads it, unless ``float`` fails too —
    or nesting too deep).

    Read as leniently as pyarrow reads what it does not use: bytes that are not UTF-8 become
    lone surrogates (a read column holding one is a dead letter, ``records_to_table``), and an
    unread key may repeat."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)
        if len(out) != len(items) and any(sum(k == name for k, _ in items) > 1 for name in read):
            raise ValueError("a column given twice")
        return out

    return json.loads(
        line.decode("utf-8", "surrogateescape"), object_pairs_hook=pairs, parse_int=_int_or_float
    )


class _NegativeZero(int):
    """JSON's ``-0``: the integer 0, but -0.0 as a float, as pyarrow reads it into a float column
    (``int("-0")`` alone is 0, and would turn a person's -0.0 into 0.0 whenever a hostile line
    sent their line group down this path)."""

    def __float__(self) -> float:
        return -0.0


def _int_or_float(text: str) -> int | float:
    if text == "-0":
        return _NegativeZero(0)
    try:
        return int(text)
    except ValueError:  # more digits than int() converts: pyarrow reads a huge number as a float
        return float(text)
