"""The release's input files and their column types, found before anything is planned or charged.

``inspect_inputs`` runs on the launcher. It lists the files of ``input.path`` and reads only what is
public about them — never a data row — then stops with a :class:`SchemaError` naming the file, the
column, the type found and the types allowed. Messages never contain data values.

**Types never come from values.** Whether a column is an integer, a string or a float decides which
rows are dead-lettered and the type of the output's key columns; if one person's rows could change
it, that person would change what every reader sees (issue 12). So:

- Parquet: the footer's schema (``pyarrow.parquet.read_schema``); Avro: the writer schema in the
  header. A union with ``null`` is that branch; a union of several branches (``["long",
  "string"]``) is declared as its first non-null branch (rows of another branch are dead letters).
- CSV and JSONL carry no types: each column's type is the job file's ``[input] columns`` entry, or
  the default — person ids ``string`` (``input.person_type`` may say ``int``), keys ``string``,
  values ``float``. Only the CSV header (the column names) is read; a JSONL file has no header, so
  nothing of it is read here (a row without a column is a dead letter).
- A declared type that contradicts a Parquet/Avro schema is an error; for the person column the
  declared type only says how text ids are canonicalised (``int``: "01" and "1" are one person).

**Which files**: :mod:`.input_listing` (every match a readable regular file). **Compressed
files**: :mod:`.compression` (CSV and JSONL only; the codec from ``[input] compression`` or each
file's extension).

Column types are compared by family (integer, float, string, bool): ``int32`` in one file and
``int64`` in another is fine; ``int64`` and ``string`` is a mixed-schema error.
"""

from __future__ import annotations

import csv
import difflib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from fastavro.schema import SchemaParseException

from .avro_schema import avro_families, row_record
from .avro_schema import refusal as avro_refusal
from .compression import CODEC_ERRORS, codec_of, open_input, refusal
from .input_listing import SchemaError, list_input_files

FORMATS: tuple[str, ...] = ("parquet", "avro", "csv", "jsonl")
KINDS: tuple[str, ...] = ("person", "key", "number")
COLUMN_TYPES: tuple[str, ...] = ("string", "int", "float", "bool")  # [input] columns values
HEADER_BYTES = 1 << 20  # a CSV header longer than this is refused
_UTF8_BOM = b"\xef\xbb\xbf"

_ALLOWED: dict[str, tuple[str, ...]] = {
    "person": ("integer", "string"),
    "key": ("integer", "string", "bool"),
    "number": ("integer", "float"),
}
_DECLARED_FAMILY = {"string": "string", "int": "integer", "float": "float", "bool": "bool"}
_DEFAULT_FAMILY = {"person": "string", "key": "string", "number": "float"}
_CANONICAL: dict[str, pa.DataType] = {
    "integer": pa.int64(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "float": pa.float64(),
}
_ARROW_FAMILY = (
    (pa.types.is_integer, "integer"),
    (pa.types.is_floating, "float"),
    (pa.types.is_string, "string"),
    (pa.types.is_large_string, "string"),
    (pa.types.is_boolean, "bool"),
    (pa.types.is_null, "null"),
)


# What one Parquet read covers at most when it joins consecutive row groups (a row group larger
# than either is one read of its own). Reads are Beam's unit of parallelism for Parquet; each
# opens the file and parses its footer, which lists every row group, and passes one table to
# every later step at a fixed cost per table — so 2,000 groups of 100 rows, read one at a time,
# took 33 s against 1 s for the same rows in one group (benchmarks/row_groups.py). Rows: about
# DuckDB's default row group (122,880); Spark's and pyarrow's are larger. Bytes: the read
# columns' uncompressed size in the footer, so that joining never makes one read hold more than
# a large row group would (Spark's and parquet-mr's are 128 MiB, sized in bytes).
SPAN_ROWS = 1 << 17
SPAN_BYTES = 128 << 20


def row_group_spans(
    group_rows: Sequence[int], group_bytes: Sequence[int] | None = None
) -> list[tuple[int, int]]:
    """Consecutive row groups joined into reads ``(first, stop)`` of at most :data:`SPAN_ROWS`
    rows and :data:`SPAN_BYTES` uncompressed bytes of the read columns, or one group each where
    a group alone holds more. Footer metadata only: the spans change how the input is read in
    parallel, never what is read."""
    sizes = group_bytes if group_bytes is not None else [0] * len(group_rows)
    spans: list[tuple[int, int]] = []
    first, rows, size = 0, 0, 0
    for g, (n, b) in enumerate(zip(group_rows, sizes, strict=True)):
        if g > first and (rows + n > SPAN_ROWS or size + b > SPAN_BYTES):
            spans.append((first, g))
            first, rows, size = g, 0, 0
        rows, size = rows + n, size + b
    if len(group_rows) > first:
        spans.append((first, len(group_rows)))
    return spans


@dataclass(frozen=True)
class InputSchema:
    """What ``inspect_inputs`` found: the files and the canonical Arrow type of every column.

    ``row_group_spans``: for Parquet, the reads the input is split into, ``(file, first row
    group, stop)``: consecutive row groups of one file up to :data:`SPAN_ROWS` rows and
    :data:`SPAN_BYTES` together (public footer metadata; empty for other formats), so a file of
    many small row groups is not one read — each reading the whole footer again — per group.
    ``compression``: the job's ``[input] compression`` (:mod:`.compression`; ``"auto"``: from
    each file's extension).
    """

    fmt: str
    files: tuple[str, ...]
    person: str
    person_type: str  # "int" | "string"
    keys: tuple[tuple[str, pa.DataType], ...]
    numbers: tuple[str, ...]
    row_group_spans: tuple[tuple[str, int, int], ...] = field(default=())
    compression: str = "auto"
    sizes: tuple[int, ...] = field(default=())  # bytes of each file (public metadata)

    @property
    def total_bytes(self) -> int:
        """The input's size on disk (compressed files count as stored): it sizes shards."""
        return sum(self.sizes)

    @property
    def columns(self) -> tuple[str, ...]:
        """All columns to read, person first."""
        return (self.person, *(k for k, _ in self.keys), *self.numbers)

    def arrow_schema(self) -> pa.Schema:
        """The canonical (clean) type of each input column."""
        person = pa.int64() if self.person_type == "int" else pa.string()
        fields = [(self.person, person), *self.keys, *((n, pa.float64()) for n in self.numbers)]
        return pa.schema(fields)


def arrow_family(t: pa.DataType) -> str:
    """integer | float | string | bool | null, or the type's name for anything else."""
    if pa.types.is_dictionary(t):
        return arrow_family(t.value_type)
    return next((family for test, family in _ARROW_FAMILY if test(t)), str(t))


# --- per-file schema --------------------------------------------------------------------------


def csv_header(path: str, compression: str = "auto") -> list[str] | None:
    """The column names of a CSV file (its first record), or None for a file with no bytes.

    Only the header is read: it is metadata of the file, not a data row. A UTF-8 byte-order mark
    is dropped. Raises :class:`SchemaError` for a header that is not UTF-8 or longer than
    ``HEADER_BYTES``.
    """
    with open_input(path, compression) as f:
        head = f.read(HEADER_BYTES + 1)
    if not head:
        return None
    end = min((i for i in (head.find(b"\n"), head.find(b"\r")) if i >= 0), default=-1)
    if end < 0 and len(head) > HEADER_BYTES:
        raise SchemaError(f"input file {path}: the CSV header is longer than {HEADER_BYTES} bytes")
    line = head[: end if end >= 0 else len(head)].removeprefix(_UTF8_BOM)
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise SchemaError(
            f"input file {path}: the CSV header (first line) is not UTF-8 text"
        ) from None
    try:
        return next(csv.reader(io.StringIO(text)), [])
    except csv.Error:
        raise SchemaError(f"input file {path}: the CSV header (first line) is malformed") from None


def _duplicated(names: list[str], wanted: list[str], path: str) -> None:
    for n in wanted:
        if names.count(n) > 1:
            raise SchemaError(
                f"input file {path}: column {n!r} appears {names.count(n)} times; allowed: "
                "one column of each name the job reads"
            )


def _metadata_families(
    path: str, fmt: str, names: list[str], compression: str
) -> tuple[dict[str, str] | None, tuple[tuple[int, ...], ...]]:
    """(family of each requested column in a Parquet/Avro file's schema — CSV: the header's
    names as "declared", types come from the job file; JSONL: None, no metadata — and the rows
    and read bytes of each Parquet row group, none for the other formats)."""
    if fmt == "parquet":
        with FileSystems.open(path) as f:
            footer = pq.ParquetFile(f)  # the footer: schema and column chunks
            schema, meta = footer.schema_arrow, footer.metadata
        _duplicated(schema.names, names, path)
        _all_present(schema.names, names, path)
        _parquet_codecs_readable(meta, names, path)
        return {n: arrow_family(schema.field(n).type) for n in names}, _group_sizes(meta, names)
    if fmt == "avro":
        with FileSystems.open(path) as f:
            reader = fastavro.reader(f)
            writer_schema: Any = reader.writer_schema
            codec = str(reader.metadata.get("avro.codec", "null"))
        found_record = row_record(writer_schema)
        if found_record is None:  # refusal() words it
            raise SchemaError(f"input file {path}: {avro_refusal(writer_schema, names)}")
        record = found_record[0]
        _avro_codec_readable(codec, path)
        fields = [fd["name"] for fd in record.get("fields", [])]
        _duplicated(fields, names, path)
        _all_present(fields, names, path)
        if (refused := avro_refusal(writer_schema, names)) is not None:
            raise SchemaError(f"input file {path}: {refused}")
        found = {fd["name"]: avro_families(fd["type"]) for fd in record["fields"]}
        return {n: (found[n][0] if found[n] else "null") for n in names}, ()
    if fmt == "csv":
        header = csv_header(path, compression)
        if header is None:
            return None, ()  # a file with no bytes has no rows
        _duplicated(header, names, path)
        # A first line naming none of the job's columns may be a data row (a file without a
        # header): its fields are then never shown.
        _all_present(header, names, path, shown=any(n in header for n in names))
        return {n: "declared" for n in names}, ()
    if codec_of(path, compression) != "none":  # JSONL: no header, but a compressed file whose
        with open_input(path, compression) as f:  # start does not decompress is refused now,
            f.read(1)  # before the charge, as a CSV's header is (nothing read is shown)
    return None, ()


def _avro_codec_readable(codec: str, path: str) -> None:
    """Refuses, before the charge, an Avro file whose blocks this installation cannot decompress
    (the codec is in the header). fastavro registers snappy, zstandard and lz4 readers that
    raise when their optional library is missing (which one depends on fastavro's version and
    Python's); it names them ``missing``, and their message names the library."""
    block_reader = fastavro.read.BLOCK_READERS.get(codec)
    if block_reader is None or getattr(block_reader, "__name__", "") == "missing":
        need = "fastavro knows no such codec"
        if block_reader is not None:
            try:  # the stub raises at once, naming the library it needs (its text, not data)
                block_reader(None)
            except ValueError as e:
                need = f"fastavro: {e}"
        raise SchemaError(
            f"input file {path}: its Avro blocks are compressed with {codec!r}, which this "
            f"installation cannot decompress ({need}); install that library, or rewrite the "
            "file with deflate, bzip2, xz or no compression"
        )


def codec_available(codec: str) -> bool:
    """Whether this pyarrow decodes Parquet's ``codec`` (lower case; LZO never)."""
    try:
        return codec == "uncompressed" or bool(pa.Codec.is_available(codec))
    except (ValueError, pa.ArrowException):  # a codec pyarrow does not even name
        return False


def _read_leaves(meta: pq.FileMetaData, names: list[str]) -> list[int]:
    """The footer's column chunks (leaves) of the columns ``names``."""
    wanted = set(names)
    return [
        i
        for i in range(meta.num_columns)
        if {(p := meta.schema.column(i).path), p.split(".")[0]} & wanted
    ]


def _group_sizes(meta: pq.FileMetaData, names: list[str]) -> tuple[tuple[int, ...], ...]:
    """(rows, uncompressed bytes of the read columns) of each row group: what
    :func:`row_group_spans` joins groups by."""
    leaves = _read_leaves(meta, names)
    out = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        out.append((group.num_rows, sum(group.column(i).total_uncompressed_size for i in leaves)))
    return tuple(out)


def _parquet_codecs_readable(meta: pq.FileMetaData, names: list[str], path: str) -> None:
    """Refuses, before the charge, a Parquet file whose requested columns are compressed with a
    codec this pyarrow cannot decode (LZO; a build without one) — the footer says so."""
    leaves = _read_leaves(meta, names)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for i in leaves:
            column = group.column(i)
            if not codec_available(str(column.compression).lower()):
                raise SchemaError(
                    f"input file {path}: column {column.path_in_schema!r} is compressed with "
                    f"{column.compression}, which this pyarrow cannot decompress; rewrite the "
                    "file with snappy, gzip, zstd, lz4 or brotli"
                )


def _all_present(present: list[str], names: list[str], path: str, *, shown: bool = True) -> None:
    """A column the job file names but the file lacks: refused naming the file's own columns
    (schema metadata, never values), at most 30 of them, and the closest spelling — unless not
    ``shown`` (a CSV first line that may be data): then only how many fields it has."""
    missing = [n for n in names if n not in present]
    if not missing:
        return
    if not shown:
        raise SchemaError(
            f"input file {path}: its first line ({len(present)} fields) names none of the job "
            f"file's columns ({', '.join(map(repr, names))}); a CSV file's first line must be "
            "its header (the fields are not shown: without a header they would be a row's values)"
        )
    listed = ", ".join(map(repr, present[:30])) + (
        f" … ({len(present)} in all)" * (len(present) > 30)
    )
    near = _closest(missing[0], present)
    raise SchemaError(
        f"input file {path}: column {missing[0]!r} (named in the job file) is missing; the file's "
        f"columns are {listed or '(none)'}" + (f" — did you mean {near[0]!r}?" if near else "")
    )


def _closest(name: str, present: list[str]) -> list[str]:
    """The file's column a misspelt ``name`` most likely meant: one it abbreviates (``dur`` →
    ``duration_s``, the closest such by length) before the closest spelling, which would rank
    ``url`` above ``duration_s`` for ``dur``."""
    low = name.lower()
    prefixed = [p for p in present if p.lower().startswith(low)] if low else []
    if prefixed:
        return [min(prefixed, key=len)]
    return difflib.get_close_matches(name, present, n=1)


def _check(path: str, column: str, kind: str, family: str) -> None:
    allowed = _ALLOWED[kind]
    if kind == "person" and family == "float":
        raise SchemaError(
            f"input file {path}: person column {column!r} has type float; "
            f"allowed: {', '.join(allowed)} — cast person ids to int or string"
        )
    if family not in (*allowed, "null"):
        raise SchemaError(
            f"input file {path}: column {column!r} ({kind}) has type {family}; "
            f"allowed: {', '.join(allowed)}"
        )


def _declared_family(column: str, kind: str, declared: Mapping[str, str]) -> str:
    family = _DECLARED_FAMILY[declared[column]] if column in declared else _DEFAULT_FAMILY[kind]
    if family not in _ALLOWED[kind] and not (kind == "number" and family == "integer"):
        raise SchemaError(
            f"[input] columns: {column!r} ({kind}) is declared {declared[column]!r}; allowed: "
            + ", ".join(t for t, f in _DECLARED_FAMILY.items() if f in _ALLOWED[kind])
        )
    return family


def _check_arguments(columns: Mapping[str, str], declared: Mapping[str, str], fmt: str) -> str:
    """The person column; SchemaError for an unknown format, kind or declared type."""
    if fmt not in FORMATS:
        raise SchemaError(f"input format {fmt!r} is not supported; allowed: {', '.join(FORMATS)}")
    bad = {c: k for c, k in columns.items() if k not in KINDS}
    if bad:
        raise SchemaError(f"column kinds {bad} are not supported; allowed: {', '.join(KINDS)}")
    persons = [c for c, k in columns.items() if k == "person"]
    if len(persons) != 1:
        raise SchemaError(f"exactly one person column is needed, got {persons}")
    bad_types = {c: t for c, t in declared.items() if t not in COLUMN_TYPES}
    if bad_types:
        raise SchemaError(f"[input] columns {bad_types}: allowed types {', '.join(COLUMN_TYPES)}")
    return persons[0]


def _read_file_metadata(
    path: str, fmt: str, names: list[str], compression: str
) -> tuple[dict[str, str] | None, tuple[tuple[int, ...], ...]]:
    """(column families from the file's metadata, (rows, read bytes) of each Parquet row group);
    SchemaError if unreadable."""
    refused = refusal(path, fmt, compression)
    if refused is not None:
        raise SchemaError(f"input file {path}: {refused}")
    try:
        families, groups = _metadata_families(path, fmt, names, compression)
    except SchemaError:
        raise
    except (pa.ArrowException, ValueError, EOFError, OSError, KeyError, TypeError) as e:
        raise _unreadable(path, fmt, names, compression, e) from None
    except SchemaParseException as e:  # an Avro header fastavro cannot parse (not a ValueError)
        raise _unreadable(path, fmt, names, compression, e) from None
    except CODEC_ERRORS as e:
        raise _unreadable(path, fmt, names, compression, e) from None
    return families, groups


def error_kind(e: BaseException) -> str:
    """An exception's type, qualified where its bare name says little (``zlib.error``)."""
    kind, module = type(e).__name__, type(e).__module__
    return kind if module in ("builtins", "pyarrow.lib") else f"{module}.{kind}"


def _unreadable(
    path: str, fmt: str, names: list[str], compression: str, e: BaseException
) -> SchemaError:
    # The reader's own message may quote data: only its type is shown.
    codec = codec_of(path, compression)
    kind = error_kind(e)
    return SchemaError(
        f"input file {path}: cannot be read as {fmt}"
        + ("" if codec == "none" else f" compressed with {codec}")
        + f" ({kind}); allowed: a readable {fmt} file with the columns "
        + ", ".join(names)
    )


class _Families:
    """Each column's family across files: the first file's, and a mixed-types check."""

    def __init__(self, columns: Mapping[str, str], declared: Mapping[str, str]) -> None:
        self.columns, self.declared = columns, declared
        self.typed = {c: _declared_family(c, k, declared) for c, k in columns.items()}
        self.seen: dict[str, tuple[str, str]] = {}  # column -> (family, first file)

    def add(self, path: str, families: Mapping[str, str]) -> None:
        for column, kind in self.columns.items():
            if column not in families:
                raise SchemaError(
                    f"input file {path}: column {column!r} ({kind}) is missing; "
                    f"allowed types: {', '.join(_ALLOWED[kind])}"
                )
            family = families[column]
            if family == "declared":
                continue  # CSV: the job file (or the default) gives the type
            _check(path, column, kind, family)
            if family == "null" or kind == "number":
                continue  # numbers are read as float64 whatever their family
            if kind != "person" and column in self.declared and family != self.typed[column]:
                raise SchemaError(
                    f"input file {path}: column {column!r} has type {family}, but [input] "
                    f"columns declares it {self.declared[column]!r}; allowed: the file's own type"
                )
            first = self.seen.setdefault(column, (family, path))
            if first[0] != family:
                raise SchemaError(
                    f"input files have mixed types for column {column!r} ({kind}): "
                    f"{first[0]} in {first[1]} but {family} in {path}; "
                    "allowed: one type family across all files"
                )

    def family(self, column: str, fmt: str) -> str:
        """The declared type wins for the person column (it says how text ids are read) and
        where nothing was seen; otherwise the files' type."""
        kind = self.columns[column]
        if column in self.seen and not (kind == "person" and column in self.declared):
            return self.seen[column][0]
        if fmt in ("parquet", "avro") and kind != "number" and column not in self.declared:
            raise SchemaError(
                f"input files: column {column!r} ({kind}) has only the null type in every file's "
                f"schema; allowed: {', '.join(_ALLOWED[kind])} — declare its type in "
                "[input] columns"
            )
        return self.typed[column]


def inspect_inputs(
    path_glob: str,
    fmt: str,
    columns: Mapping[str, str],
    declared: Mapping[str, str] | None = None,
    compression: str = "auto",
    *,
    listed: tuple[tuple[str, ...], tuple[int, ...]] | None = None,
) -> InputSchema:
    """Check every file of ``path_glob`` against ``columns`` (name → kind); no data row is read.

    Kinds: ``"person"`` (exactly one; integer or string — float ids are refused, cast them to int
    or string), ``"key"`` (integer, string or bool), ``"number"`` (integer or float).
    ``declared``: the job file's column types (``string``, ``int``, ``float``, ``bool``), which
    are the types of CSV/JSONL columns and must agree with Parquet/Avro schemas. Raises
    :class:`SchemaError` for no matching file, a file that is not a readable regular file, a
    missing or duplicated column, a disallowed type or one column with different type families in
    different files. ``compression``: ``[input] compression`` (:mod:`.compression`); a whole-file
    codec on a Parquet or Avro file is refused. ``listed``: the files and sizes of
    :func:`list_input_files` when the caller has listed them already (one listing per run).
    """
    declared = dict(declared or {})
    person = _check_arguments(columns, declared, fmt)
    files, sizes = listed if listed is not None else list_input_files(path_glob)
    families = _Families(columns, declared)
    spans: list[tuple[str, int, int]] = []
    for path in files:
        found, groups = _read_file_metadata(path, fmt, list(columns), compression)
        rows, size = [n for n, _ in groups], [b for _, b in groups]
        spans += [(path, first, stop) for first, stop in row_group_spans(rows, size)]
        if found is not None:  # None: JSONL, or an empty CSV file — nothing to check
            families.add(path, found)
    family_of = {c: families.family(c, fmt) for c in columns}
    return InputSchema(
        fmt=fmt,
        files=files,
        person=person,
        person_type="int" if family_of[person] == "integer" else "string",
        keys=tuple((c, _CANONICAL[family_of[c]]) for c, k in columns.items() if k == "key"),
        numbers=tuple(c for c, k in columns.items() if k == "number"),
        row_group_spans=tuple(spans),
        compression=compression,
        sizes=sizes,
    )
