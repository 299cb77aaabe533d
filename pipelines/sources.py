"""Reading the release job's input: schema inspection before planning, then Arrow tables in Beam.

``inspect_inputs`` runs in the launcher, before the job is planned: it expands the glob through
Beam's ``FileSystems`` (local paths, globs, and any filesystem Beam knows), reads only each file's
schema and stops with a :class:`SchemaError` naming the file, the column, the type found and the
types allowed. Messages never contain data values.

How the type of a column is found, per format:

- Parquet: the footer (``pyarrow.parquet.read_schema``).
- Avro: the writer schema in the header (fastavro). A union with ``null`` is that branch; a union of
  several branches (``["long", "string"]``) is declared as its first non-null branch, and rows of
  another branch are dead-lettered by validation.
- CSV (all text): the first block (``HEAD_BYTES``) of each file is read as text and each column's
  values are tallied as integer, float, bool or string text; the majority is the declared type.
- JSONL: the JSON types of the first ``HEAD_LINES`` lines (at most ``HEAD_BYTES``) of each file,
  tallied per column; the majority type is the declared one. Rows of another type later in the
  file are dead-lettered, never coerced.

Types are compared by family (integer, float, string, bool): ``int32`` in one file and ``int64``
in another is fine (both read as ``int64``); ``int64`` and ``string`` is a mixed-schema error.

``ReadArrowTables`` then yields *raw tables*: exactly the configured columns, each either in its
canonical type (``int64``, ``float64``, ``string``, ``bool``) or as ``pa.string()`` text still to
be parsed (CSV, and JSONL/Avro chunks with mixed types), plus an optional ``__reject__`` string
column holding a reason for rows the reader already knows are bad: a JSON/Avro value of another
type than the column's (a JSON string in an integer person column), ``"malformed record"`` (a line
that is not a JSON object, nested too deeply or holding a lone surrogate; a CSV row with the wrong
number of fields, whose fields are then all null) and ``"invalid UTF-8 text in <column>"`` (CSV
bytes that are not UTF-8, kept escaped). No malformed row stops the read. Each table's schema
metadata holds the source file under ``FILE_METADATA_KEY``, so dead-letter rows can name their
file without a per-row column. ``transforms.validate.ValidateRows`` turns raw tables into the
clean tables of ``docs/release-job-contracts.md`` section 3.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.parquetio import ReadAllFromParquetBatched

from transforms.validate import FILE_METADATA_KEY, FLOAT_TEXT, INT_TEXT, REJECT_COLUMN

FORMATS: tuple[str, ...] = ("parquet", "avro", "csv", "jsonl")
KINDS: tuple[str, ...] = ("person", "key", "number")
HEAD_BYTES = 1 << 20
HEAD_LINES = 10_000
CHUNK_BYTES = 16 << 20
CHUNK_ROWS = 100_000

_ALLOWED: dict[str, tuple[str, ...]] = {
    "person": ("integer", "string"),
    "key": ("integer", "string", "bool"),
    "number": ("integer", "float"),
}
_CANONICAL: dict[str, pa.DataType] = {
    "integer": pa.int64(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "float": pa.float64(),
}
_AVRO_FAMILY = {
    "int": "integer",
    "long": "integer",
    "float": "float",
    "double": "float",
    "string": "string",
    "boolean": "bool",
    "null": "null",
}


class SchemaError(ValueError):
    """An input file's schema does not fit the job: names file, column, found type, allowed."""


@dataclass(frozen=True)
class InputSchema:
    """What ``inspect_inputs`` found: the files and the canonical Arrow type of every column."""

    fmt: str
    files: tuple[str, ...]
    person: str
    person_type: str  # "int" | "string"
    keys: tuple[tuple[str, pa.DataType], ...]
    numbers: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        """All columns to read, person first."""
        return (self.person, *(k for k, _ in self.keys), *self.numbers)

    def arrow_schema(self) -> pa.Schema:
        """The canonical (clean) type of each input column."""
        person = pa.int64() if self.person_type == "int" else pa.string()
        fields = [(self.person, person), *self.keys, *((n, pa.float64()) for n in self.numbers)]
        return pa.schema(fields)


_ARROW_FAMILY = (
    (pa.types.is_integer, "integer"),
    (pa.types.is_floating, "float"),
    (pa.types.is_string, "string"),
    (pa.types.is_large_string, "string"),
    (pa.types.is_boolean, "bool"),
    (pa.types.is_null, "null"),
)


def _family(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return _family(t.value_type)
    return next((family for test, family in _ARROW_FAMILY if test(t)), str(t))


def _avro_family(avro_type: Any) -> tuple[str, ...]:
    """Families of an Avro field type, in declaration order, without ``null``."""
    if isinstance(avro_type, list):
        out: list[str] = []
        for branch in avro_type:
            out.extend(f for f in _avro_family(branch) if f not in out)
        return tuple(out)
    if isinstance(avro_type, dict):
        if "logicalType" in avro_type:
            return (str(avro_type["logicalType"]),)
        return _avro_family(avro_type.get("type"))
    family = _AVRO_FAMILY.get(str(avro_type), str(avro_type))
    return () if family == "null" else (family,)


def _json_family(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


def _file_families(path: str, fmt: str, names: list[str]) -> dict[str, str]:
    """Declared family of each requested column present in one file (missing ones are absent)."""
    if fmt == "parquet":
        with FileSystems.open(path) as f:
            schema = pq.read_schema(f)
        return {n: _family(schema.field(n).type) for n in names if n in schema.names}
    if fmt == "avro":
        with FileSystems.open(path) as f:
            writer_schema: Any = fastavro.reader(f).writer_schema
        fields = writer_schema.get("fields", [])
        found = {fd["name"]: _avro_family(fd["type"]) for fd in fields}
        return {n: (found[n][0] if found[n] else "null") for n in names if n in found}
    tallies: dict[str, Counter[str]] = {n: Counter() for n in names}
    if fmt == "csv":
        return _csv_families(path, names, tallies)
    with FileSystems.open(path) as f:
        head = f.read(HEAD_BYTES).splitlines()[:HEAD_LINES]
    for line in head:
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a malformed line is a row problem (dead letter), not a schema problem
        if not isinstance(record, dict):
            continue
        for n in names:
            if n in record:
                tallies[n][_json_family(record[n]) or "null"] += 1
    return _majority(tallies)


def _csv_families(path: str, names: list[str], tallies: dict[str, Counter[str]]) -> dict[str, str]:
    """CSV is text: tally which values of the head parse as integer, float or bool.

    Rows with the wrong number of fields and values that are not UTF-8 are row problems (dead
    letters when the file is read), so the head skips them.
    """
    with FileSystems.open(path) as f:
        reader = pcsv.open_csv(
            f,
            read_options=pcsv.ReadOptions(block_size=HEAD_BYTES),
            parse_options=pcsv.ParseOptions(invalid_row_handler=lambda row: "skip"),
            convert_options=_csv_convert(names, only=False),
        )
        present = [n for n in names if n in reader.schema.names]
        try:
            head, _ = _csv_text(pa.Table.from_batches([reader.read_next_batch()]).select(present))
        except StopIteration:
            head = pa.table({n: pa.array([], pa.string()) for n in present})
    for n in present:
        col = head.column(n)
        is_int = pc.match_substring_regex(col, INT_TEXT)
        is_float = pc.and_not(pc.match_substring_regex(col, FLOAT_TEXT, ignore_case=True), is_int)
        is_bool = pc.is_in(pc.utf8_lower(col), value_set=pa.array(["true", "false"]))
        valid = pc.sum(pc.is_valid(col)).as_py() or 0
        counts = {f: pc.sum(m).as_py() or 0 for f, m in
                  (("integer", is_int), ("float", is_float), ("bool", is_bool))}  # fmt: skip
        tallies[n].update({**counts, "string": valid - sum(counts.values())})
        tallies[n]["null"] += 1
    return {n: f for n, f in _majority(tallies).items() if n in present}


def _majority(tallies: dict[str, Counter[str]]) -> dict[str, str]:
    order = ("integer", "string", "float", "bool")
    out: dict[str, str] = {}
    for n, tally in tallies.items():
        if not tally:
            continue
        typed = {k: v for k, v in tally.items() if k != "null" and v} or {"null": 1}
        out[n] = max(typed, key=lambda k: (typed[k], -order.index(k) if k in order else -9))
    return out


def _check(path: str, fmt: str, column: str, kind: str, family: str) -> None:
    allowed = _ALLOWED[kind]
    if kind == "person" and family == "float":
        raise SchemaError(
            f"input file {path}: person column {column!r} has type float; "
            f"allowed: {', '.join(allowed)} — cast person ids to int or string"
        )
    if family == "null" and kind != "number":
        raise SchemaError(
            f"input file {path}: column {column!r} ({kind}) has no non-null values to infer a "
            f"type from; allowed: {', '.join(allowed)}"
        )
    if family not in (*allowed, "null"):
        raise SchemaError(
            f"input file {path}: column {column!r} ({kind}) has type {family}; "
            f"allowed: {', '.join(allowed)}"
        )


def inspect_inputs(path_glob: str, fmt: str, columns: Mapping[str, str]) -> InputSchema:
    """Check every file matching ``path_glob`` against ``columns`` (name → kind); no data read.

    Kinds: ``"person"`` (exactly one; integer or string — float ids are refused, cast them to int
    or string), ``"key"`` (integer, string or bool), ``"number"`` (integer or float). Raises
    :class:`SchemaError` for no matching file, a missing column, a disallowed type or one column
    with different type families in different files.
    """
    if fmt not in FORMATS:
        raise SchemaError(f"input format {fmt!r} is not supported; allowed: {', '.join(FORMATS)}")
    bad = {c: k for c, k in columns.items() if k not in KINDS}
    if bad:
        raise SchemaError(f"column kinds {bad} are not supported; allowed: {', '.join(KINDS)}")
    persons = [c for c, k in columns.items() if k == "person"]
    if len(persons) != 1:
        raise SchemaError(f"exactly one person column is needed, got {persons}")
    matches = FileSystems.match([path_glob])
    files = sorted(m.path for r in matches for m in r.metadata_list)
    if not files:
        raise SchemaError(f"input path {path_glob!r} matched no files")
    names = list(columns)
    seen: dict[str, tuple[str, str]] = {}  # column -> (family, first file)
    for path in files:
        try:
            families = _file_families(path, fmt, names)
        except (pa.ArrowException, ValueError, EOFError) as e:
            # The reader's own message may quote data: only its type is shown.
            raise SchemaError(
                f"input file {path}: cannot be read as {fmt} ({type(e).__name__}); "
                f"allowed: a readable {fmt} file with the columns {', '.join(names)}"
            ) from e
        for column, kind in columns.items():
            if column not in families:
                raise SchemaError(
                    f"input file {path}: column {column!r} ({kind}) is missing; "
                    f"allowed types: {', '.join(_ALLOWED[kind])}"
                )
            family = families[column]
            _check(path, fmt, column, kind, family)
            if kind == "number" or family == "null":
                continue
            first = seen.setdefault(column, (family, path))
            if first[0] != family:
                raise SchemaError(
                    f"input files have mixed types for column {column!r} ({kind}): "
                    f"{first[0]} in {first[1]} but {family} in {path}; "
                    "allowed: one type family across all files"
                )
    person = persons[0]
    return InputSchema(
        fmt=fmt,
        files=tuple(files),
        person=person,
        person_type="int" if seen[person][0] == "integer" else "string",
        keys=tuple((c, _CANONICAL[seen[c][0]]) for c, k in columns.items() if k == "key"),
        numbers=tuple(c for c, k in columns.items() if k == "number"),
    )


def _with_file(table: pa.Table, path: str) -> pa.Table:
    return table.replace_schema_metadata({FILE_METADATA_KEY: path.encode()})


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except RecursionError:
        return "<too deeply nested>"


def _float_text(value: int | float) -> str:
    try:
        return repr(float(value))
    except OverflowError:  # an integer beyond the float range is ±inf, clamped like any other
        return "inf" if value > 0 else "-inf"


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, e.g. from the JSON escape \ud800
        return False
    return True


def _csv_convert(names: list[str], *, only: bool = True) -> pcsv.ConvertOptions:
    """CSV columns as bytes (UTF-8 is checked per value by ``_csv_text``); "" is null.

    ``only``: read only ``names`` (they must all exist; the schema check has made sure).
    """
    return pcsv.ConvertOptions(
        include_columns=names if only else [],
        column_types={n: pa.binary() for n in names},
        strings_can_be_null=True,
        null_values=[""],  # only an empty field is null; "NA" or "nan" stay text
    )


def _csv_text(table: pa.Table) -> tuple[pa.Table, list[str | None] | None]:
    """Binary CSV columns → text, and per row a reject reason where a value is not UTF-8.

    Such a value is kept with its bad bytes escaped (``\\xff``) for the operator's dead letter.
    Vectorised: only a column that fails the UTF-8 check is decoded value by value.
    """
    reasons: list[str | None] | None = None
    columns: dict[str, Any] = {}
    for name in table.column_names:
        col = table.column(name)
        try:
            columns[name] = pc.cast(col, pa.string())
            continue
        except pa.ArrowInvalid:
            pass
        texts: list[str | None] = []
        for i, raw in enumerate(col.to_pylist()):
            try:
                texts.append(None if raw is None else raw.decode("utf-8"))
            except UnicodeDecodeError:
                texts.append(raw.decode("utf-8", "backslashreplace"))
                reasons = reasons or [None] * table.num_rows
                reasons[i] = reasons[i] or f"invalid UTF-8 text in {name}"
        columns[name] = pa.array(texts, pa.string())
    return pa.table(columns, schema=pa.schema([(n, pa.string()) for n in columns])), reasons


def records_to_table(records: list[Any], schema: InputSchema) -> pa.Table:
    """Slow path: Python records (JSON/Avro) → a text raw table with a ``__reject__`` column.

    A value whose JSON/Avro type is not the column's declared type is never coerced: the row gets
    a reject reason and its raw text (``json.dumps`` for non-strings, so ``1`` and ``"1"`` stay
    distinguishable for the operator).
    """
    target = schema.arrow_schema()
    cols: dict[str, list[str | None]] = {c: [] for c in schema.columns}
    rejects: list[str | None] = []
    for record in records:
        reason: str | None = None if isinstance(record, dict) else "malformed record"
        row = record if isinstance(record, dict) else {}
        for name in schema.columns:
            value: Any = row.get(name)
            family = _json_family(value)
            want = _family(target.field(name).type)
            if family is None:
                cols[name].append(None)
            elif isinstance(value, str) and not _is_utf8(value):
                cols[name].append(value.encode("utf-8", "backslashreplace").decode())
                reason = reason or "malformed record"
            elif want == "float" and family in ("integer", "float"):
                cols[name].append(_float_text(value))
            elif family == want:
                cols[name].append(value if family == "string" else json.dumps(value))
            else:
                cols[name].append(_text(value))
                if reason is None:
                    reason = (
                        "person id type mismatch"
                        if name == schema.person
                        else f"non-numeric value in {name}"
                        if want == "float"
                        else f"key type mismatch in {name}"
                    )
        rejects.append(reason)
    arrays = {c: pa.array(v, type=pa.string()) for c, v in cols.items()}
    arrays[REJECT_COLUMN] = pa.array(rejects, type=pa.string())
    return pa.table(arrays)


class _ReadFile(beam.DoFn):
    """One Avro / CSV / JSONL file → raw Arrow tables of at most about ``CHUNK_ROWS`` rows."""

    def __init__(self, schema: InputSchema) -> None:
        self._schema = schema

    def process(self, readable: Any) -> Iterator[pa.Table]:
        path = readable.metadata.path
        reader = {"avro": self._avro, "csv": self._csv, "jsonl": self._jsonl}[self._schema.fmt]
        with readable.open() as f:
            for table in reader(f):
                if table.num_rows:
                    yield _with_file(table, path)

    def _csv(self, f: Any) -> Iterator[pa.Table]:
        names = list(self._schema.columns)
        malformed: list[int] = []  # rows with the wrong number of fields, skipped by the parser

        def skip(row: Any) -> str:
            malformed.append(1)
            return "skip"

        stream = pcsv.open_csv(
            f,
            read_options=pcsv.ReadOptions(block_size=CHUNK_BYTES),
            parse_options=pcsv.ParseOptions(invalid_row_handler=skip),
            convert_options=_csv_convert(names),
        )
        for batch in stream:
            table, reasons = _csv_text(pa.Table.from_batches([batch]).select(names))
            if reasons is not None:
                table = table.append_column(REJECT_COLUMN, pa.array(reasons, pa.string()))
            yield table
        if malformed:  # their fields are unknown: all null, one dead letter each
            n = len(malformed)
            rows = {c: pa.nulls(n, pa.string()) for c in names}
            yield pa.table({**rows, REJECT_COLUMN: pa.array(["malformed record"] * n)})

    def _jsonl(self, f: Any) -> Iterator[pa.Table]:
        options = pjson.ParseOptions(
            explicit_schema=self._schema.arrow_schema(), unexpected_field_behavior="ignore"
        )
        rest = b""
        while True:
            block = f.read(CHUNK_BYTES)
            data = rest + block
            cut = data.rfind(b"\n") + 1 if block else len(data)
            chunk, rest = data[:cut], data[cut:]
            if chunk.strip():
                try:  # fast path: every value already has its declared JSON type
                    table = pjson.read_json(io.BytesIO(chunk), parse_options=options)
                    table.validate(full=True)  # the JSON reader lets invalid UTF-8 through
                    yield table.select(list(self._schema.columns))
                except pa.ArrowInvalid:
                    records = [_loads(line) for line in chunk.splitlines() if line.strip()]
                    yield records_to_table(records, self._schema)
            if not block:
                return

    def _avro(self, f: Any) -> Iterator[pa.Table]:
        reader = fastavro.reader(f)
        writer_schema: Any = reader.writer_schema
        fields = {fd["name"]: _avro_family(fd["type"]) for fd in writer_schema["fields"]}
        single = all(len(fields[c]) == 1 for c in self._schema.columns)
        target = self._schema.arrow_schema()
        chunk: list[Any] = []
        for record in reader:
            chunk.append(record)
            if len(chunk) >= CHUNK_ROWS:
                yield self._avro_table(chunk, single, target)
                chunk = []
        if chunk:
            yield self._avro_table(chunk, single, target)

    def _avro_table(self, records: list[Any], single: bool, target: pa.Schema) -> pa.Table:
        if not single:  # a union of several types: check every value's type
            return records_to_table(records, self._schema)
        return pa.table(
            {f.name: pa.array([r[f.name] for r in records], type=f.type) for f in target}
        )


def _loads(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None  # becomes a "malformed record" dead letter


class ReadArrowTables(beam.PTransform[Any, Any]):
    """PBegin → raw ``pa.Table`` elements of the inspected files, only the configured columns.

    Parquet goes through ``ReadAllFromParquetBatched`` (split by row group, one table per row
    group); Avro, CSV and JSONL through ``fileio.MatchAll | ReadMatches`` and a DoFn reading each
    file in chunks. Only the files ``inspect_inputs`` checked are read. See the module docstring
    for the raw-table contract.
    """

    def __init__(self, schema: InputSchema) -> None:
        super().__init__()
        self._schema = schema

    def expand(self, pbegin: Any) -> Any:
        # Beam's constructors are unannotated: each call below needs the no-untyped-call ignore.
        names = list(self._schema.columns)
        files = pbegin | "ListFiles" >> beam.Create(list(self._schema.files))
        if self._schema.fmt == "parquet":
            read = ReadAllFromParquetBatched(columns=names, with_filename=True)
            tag = beam.MapTuple(lambda path, t: _with_file(t.select(names), path))
            return files | "ReadParquet" >> read | "TagFile" >> tag  # (file, table) → table
        match = fileio.MatchAll()
        readable = fileio.ReadMatches()
        chunks = beam.ParDo(_ReadFile(self._schema))
        return files | "MatchFiles" >> match | "ReadMatches" >> readable | "ReadChunks" >> chunks
