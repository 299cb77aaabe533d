"""Reading the release job's input as raw Arrow tables in Beam, whatever the files hold.

The files and their column types are found first, on the launcher (:mod:`.input_files`).
``ReadArrowTables`` then yields *raw tables*: exactly the configured columns, each either in its
canonical type (``int64``, ``float64``, ``string``, ``bool``) or as ``pa.string()`` text still to
be parsed (CSV, and JSONL/Avro rows with values of another type), plus an optional ``__reject__``
string column holding a reason for rows the reader already knows are bad:

- ``"malformed record"``: a CSV line with the wrong number of fields or an open quote at its end, a
  JSON line that is not one object, nested too deeply or with duplicate keys, a line longer than
  ``text_records.MAX_LINE_BYTES`` (all fields null);
- ``"invalid UTF-8 text in <column>"``: bytes that are not UTF-8 in a text column of any format,
  or a JSON string holding a lone surrogate (``"\\ud800"``), which no UTF-8 text can hold (kept
  escaped as ``\\xNN`` / ``\\udNNN`` for the operator's dead letter);
- ``"person id type mismatch"``, ``"key type mismatch in <column>"``, ``"non-numeric value in
  <column>"``: a JSON/Avro value of another type than the column's (never coerced).

**No row stops the read, and no row changes how another is read** (:mod:`.text_records`). A fault
of the *file* found while reading it — a truncated or corrupt Avro block, a Parquet page that does
not decode — raises :class:`InputFileError` naming the file and the kind of fault, never a value:
the run stops (exit 2) and publishes nothing. Library exceptions are never passed on as they are:
their messages may quote the data.

Each table's schema metadata holds the source file under ``FILE_METADATA_KEY``, so dead-letter rows
can name their file without a per-row column. ``transforms.validate.ValidateRows`` turns raw tables
into the clean tables of ``docs/release-job-contracts.md`` section 3.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import apache_beam as beam
import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from userdp.transforms.validate import FILE_METADATA_KEY

from .avro_schema import avro_families, projection, row_record
from .avro_schema import refusal as avro_refusal
from .compression import open_input
from .input_files import (
    FORMATS,
    InputSchema,
    csv_header,
    error_kind,
    inspect_inputs,
)
from .input_listing import SchemaError
from .raw_records import bytes_to_text, checked_text, malformed_rows, records_to_table
from .text_records import CsvLines, JsonLines, escape_utf8, line_chunks, unescape_utf8

__all__ = [
    "FORMATS",
    "InputFileError",
    "InputSchema",
    "ReadArrowTables",
    "SchemaError",
    "inspect_inputs",
]

CHUNK_ROWS = 100_000
INPUT_ERROR_MARK = "[userdp input file] "
INPUT_ERROR_END = " [end]"  # the sentence's end, whatever quoting a runner wraps it in


class InputFileError(RuntimeError):
    """A file that turned out unreadable while the pipeline read it; the message names the file and
    the kind of fault only. It starts with ``INPUT_ERROR_MARK`` so that the launcher can find it
    inside whatever a runner wraps it in (:func:`input_error_message`)."""

    def __init__(self, path: str, what: str, error: BaseException | None = None) -> None:
        kind = f" ({error_kind(error)})" if error is not None else ""
        super().__init__(f"{INPUT_ERROR_MARK}input file {path}: {what}{kind}{INPUT_ERROR_END}")


def input_error_message(error: BaseException) -> str | None:
    """The :class:`InputFileError` sentence inside a pipeline failure, or None if there is none.

    Runners re-raise worker errors as their own exceptions whose text embeds the original one (and
    its traceback); only our marked sentence is taken from it, up to its end mark (a file name may
    hold a quote, so the runner's quoting cannot mark the end).
    """
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e)
        at = text.find(INPUT_ERROR_MARK)
        if at >= 0:
            rest = text[at + len(INPUT_ERROR_MARK) :]
            end = rest.find(INPUT_ERROR_END)
            return rest[:end] if end >= 0 else rest.split("\n", 1)[0]
        e = e.__cause__ or e.__context__
    return None


def _with_file(table: pa.Table, path: str) -> pa.Table:
    return table.replace_schema_metadata({FILE_METADATA_KEY: path.encode()})


class _ReadFile(beam.DoFn):
    """One Avro / CSV / JSONL file → raw Arrow tables of at most about ``CHUNK_ROWS`` rows."""

    def __init__(self, schema: InputSchema) -> None:
        self._schema = schema

    def process(self, path: str) -> Iterator[pa.Table]:
        reader = {"avro": self._avro, "csv": self._csv, "jsonl": self._jsonl}[self._schema.fmt]
        try:
            with open_input(path, self._schema.compression) as f:
                for table in reader(f, path):
                    if table.num_rows:
                        yield _with_file(table, path)
        except InputFileError:
            raise
        except Exception as e:
            raise InputFileError(path, f"cannot be read as {self._schema.fmt}", e) from None

    def _csv(self, f: Any, path: str) -> Iterator[pa.Table]:
        names = list(self._schema.columns)
        header = csv_header(path, self._schema.compression)
        if header is None:
            return  # a file with no bytes has no rows
        positions = [header.index(n) for n in names]
        parser = CsvLines(len(header), positions)
        rename = {f"f{p}": n for p, n in zip(positions, names, strict=True)}
        first = True
        for chunk, overlong in line_chunks(f):
            lines = chunk
            if first and lines:  # the header (inspected on the launcher) is the first line; a
                lines, first = lines[1:], False  # chunk may be empty when it has no line break
            data, escaped = escape_utf8(b"\n".join(lines))
            tables, malformed = parser.parse(data.split(b"\n") if lines else [])
            for table in tables:
                raw = table.rename_columns([rename[c] for c in table.column_names])
                yield bytes_to_text(raw.select(names), escaped)
            if malformed or overlong:
                texts = [unescape_utf8(x)[0] if escaped else x for x in malformed]
                yield malformed_rows([*texts, *[None] * overlong], names)

    def _jsonl(self, f: Any, path: str) -> Iterator[pa.Table]:
        names = list(self._schema.columns)
        parser = JsonLines(
            self._schema.arrow_schema(), lambda r, x: records_to_table(r, self._schema, x)
        )
        for lines, overlong in line_chunks(f):
            yield from parser.parse(lines)
            if overlong:
                yield malformed_rows([None] * overlong, names)

    def _avro(self, f: Any, path: str) -> Iterator[pa.Table]:
        with open_input(path, self._schema.compression) as head:  # the header alone
            writer_schema: Any = fastavro.reader(head).writer_schema
        if (refused := avro_refusal(writer_schema, self._schema.columns)) is not None:
            raise InputFileError(path, refused, None)  # inspected before: the file changed since
        # Only the job's columns, without logical types (avro_schema.py): no value is converted.
        # surrogateescape: a string that is not UTF-8 decodes with lone surrogates, which
        # records_to_table turns into a dead letter, instead of stopping the read mid-block.
        reader = fastavro.reader(
            f,
            reader_schema=projection(writer_schema, self._schema.columns),
            handle_unicode_errors="surrogateescape",
        )
        rows = row_record(writer_schema)
        assert rows is not None  # refusal() refused any other schema above
        row_type, nullable = rows
        fields = {fd["name"]: avro_families(fd["type"]) for fd in row_type["fields"]}
        single = all(len(fields[c]) == 1 for c in self._schema.columns)
        target = self._schema.arrow_schema()
        # The person column is read in the file's own type, as from Parquet: the declared
        # person_type says only how text ids are canonicalised (validate.py), so long ids under
        # person_type "string" (or text ids under "int") are ids, not type mismatches.
        person = self._schema.person
        own = fields[person][0] if fields[person] else None
        if own in ("integer", "string"):
            i = target.get_field_index(person)
            target = target.set(
                i, pa.field(person, pa.int64() if own == "integer" else pa.string())
            )
        chunk: list[Any] = []
        for record in reader:
            chunk.append(record)
            if len(chunk) >= CHUNK_ROWS:
                yield self._avro_table(chunk, single, nullable, target)
                chunk = []
        if chunk:
            yield self._avro_table(chunk, single, nullable, target)

    def _avro_table(
        self, records: list[Any], single: bool, nullable: bool, target: pa.Schema
    ) -> pa.Table:
        # A null row of a ["null", record] file is a dead letter: the slow path says so.
        if single and not (nullable and any(r is None for r in records)):
            # one type per column: fast, unless a string holds bytes that are not UTF-8
            try:
                return pa.table(
                    {fd.name: pa.array([r[fd.name] for r in records], fd.type) for fd in target}
                )
            except (pa.ArrowException, UnicodeEncodeError):
                pass  # the same rows, value by value: the same result for every valid row
        return records_to_table(records, self._schema, target=target)


class _ReadParquetRowGroups(beam.DoFn):
    """(file, first row group, stop) → one raw table of those row groups, the footer read once
    (a span holds at most ``SPAN_ROWS`` rows, or one larger group: ``row_group_spans``); text
    columns checked for valid UTF-8 per value. One table per span, not per group: every table
    costs each later step a fixed price, which 2,000 groups of 100 rows made 20× the reading."""

    def __init__(self, schema: InputSchema) -> None:
        self._names = list(schema.columns)

    def process(self, element: tuple[str, int, int]) -> Iterator[pa.Table]:
        path, first, stop = element
        try:
            with FileSystems.open(path) as f:
                footer = pq.ParquetFile(f)
                table = footer.read_row_groups(range(first, stop), columns=self._names)
            table = table.select(self._names)
        except Exception as e:
            raise InputFileError(path, self._fault(path, first, stop), e) from None
        if table.num_rows:
            yield _with_file(checked_text(table), path)

    def _fault(self, path: str, first: int, stop: int) -> str:
        """Which part of a span failed (the error path only): the file changed since it was
        inspected, or the first of its row groups that does not decode on its own."""
        try:
            with FileSystems.open(path) as f:
                footer = pq.ParquetFile(f)
                if footer.metadata.num_row_groups < stop:
                    return "changed since it was inspected (it has fewer row groups now)"
                for group in range(first, stop):
                    try:
                        footer.read_row_group(group, columns=self._names)
                    except Exception:
                        return f"row group {group} cannot be decoded"
        except Exception:
            return "its footer cannot be read (the file changed since it was inspected?)"
        return f"row groups {first}–{stop - 1} cannot be decoded together"


class ReadArrowTables(beam.PTransform[Any, Any]):
    """PBegin → raw ``pa.Table`` elements of the inspected files, only the configured columns.

    Parquet is split into spans of row groups (``InputSchema.row_group_spans``, from each file's
    footer, read by ``inspect_inputs``);
    Avro, CSV and JSONL are read file by file, in chunks. Only the files ``inspect_inputs``
    checked are read. See the module docstring for the raw-table contract.
    """

    def __init__(self, schema: InputSchema) -> None:
        super().__init__()
        self._schema = schema

    def expand(self, pbegin: Any) -> Any:
        s = self._schema
        if s.fmt == "parquet":
            return (
                pbegin
                | "ListRowGroups" >> beam.Create(list(s.row_group_spans))
                | "Spread" >> beam.Reshuffle()
                | "ReadParquet" >> beam.ParDo(_ReadParquetRowGroups(s))
            )
        return (
            pbegin
            | "ListFiles" >> beam.Create(list(s.files))
            | "Spread" >> beam.Reshuffle()
            | "ReadChunks" >> beam.ParDo(_ReadFile(s))
        )
