"""Validation and canonicalisation of raw input tables into the release job's clean tables.

Input: raw ``pa.Table`` elements from ``pipelines.sources.ReadArrowTables`` — the configured
columns in their canonical type or as text, an optional ``__reject__`` reason column, and the
source file in the schema metadata. Output (``docs/release-job-contracts.md`` section 3):

- ``clean``: ``pa.Table`` with ``__person__`` (``pa.large_string()``), the key columns in their
  declared type (text as ``large_string``) and the number columns as ``float64``; no nulls, no
  NaN; ±inf kept (clamped later). Text is ``large_string`` (64-bit offsets) because later steps
  combine a shard's chunks into one array, and ``string``'s 32-bit offsets cap that at 2 GiB of
  text: past it the step raised, so a shard near the cap — or one person's long values — would
  decide whether the run fails. The cost is 4 bytes more per text value: peak RSS of
  ``userdp run`` on 2.24M rows went from 397 to 427 MiB, its CPU time did not grow
  (``benchmarks/throughput.py --people 100000 --repeat 2``, one machine, before and after).
- ``dead_letter``: dicts ``{"reason": str, "file": str, "row": {column: raw value as str or
  None}}``, and ``"line": str`` for a malformed CSV/JSONL line (its fields are unknown, so the
  row is all null: the line's text is what the operator can fix; invalid bytes as ``\\xNN``;
  absent for a line too long to hold). These are raw private data for the operator only; never
  write them near the release.

Person-id rule (the canonical person is a string):

- integer ids become their decimal string (``1`` → ``"1"``; in CSV text, ``"01"`` and ``"+1"`` are
  integers too → ``"1"``); int ids are int64: a uint64 id past it is a dead letter unless
  ``person_type = "string"``, which reads every uint64 id as its decimal string;
- string ids are kept exactly as they are — no trimming, no case folding;
- float ids are refused at schema time (``SchemaError``: cast person ids to int or string);
- a value whose type differs from the column's declared type (the JSON string ``"1"`` or float
  ``1.0`` in an integer column, the number ``1`` in a string column, non-integer text in an integer
  CSV column) goes to dead letter as ``"person id type mismatch"`` — so ``1``, ``1.0`` and ``"1"``
  never silently become one person, nor three;
- a null or empty id goes to dead letter.

Other rows to dead letter: a null key (or key text not of the key's type), a null, NaN or
non-numeric number. All checks are vectorised with ``pyarrow.compute`` masks; only dead-letter
rows are turned into Python dicts. A table that cannot be processed at all (a reader bug) fails
loudly rather than being dropped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .columns import PERSON_COLUMN, RAW_LINE_COLUMN, REJECT_COLUMN, is_reserved_column
from .person_hashing import is_text_type

CLEAN = "clean"
DEAD_LETTER = "dead_letter"
FILE_METADATA_KEY = b"userdp.file"
# A uint64 id past int64 under person_type "int" (hashed 64-bit ids fill the whole range). The
# remedy differs: a job file reads a uint64 column as decimal strings under person_type
# "string"; a library pipeline converts its ids to str itself (ByPerson never converts a type).
PAST_INT64 = (
    'person id past int64 (hashed 64-bit ids: read them as text — person_type = "string" in '
    "a job file; in a library pipeline pass the ids as str)"
)


INT_TEXT = r"^[+-]?[0-9]{1,19}$"
FLOAT_TEXT = r"^[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)$"
_BOOL_TEXT = {"true": True, "false": False, "1": True, "0": False}
"""A declared ``bool`` column's text, in any case (TRUE/FALSE is Excel's and pyarrow's spelling;
the public-key reader takes the same)."""


CLEAN_TEXT = pa.large_string()  # text in clean tables (module docstring)


def decoded(column: Any) -> Any:
    """A dictionary-encoded column as plain values; text and bytes as their large types: a
    dictionary of one long value repeated decodes past 32-bit offsets (pyarrow then built a
    corrupt array instead of raising)."""
    value = column.type.value_type
    if pa.types.is_string(value) or pa.types.is_large_string(value):
        value = pa.large_string()
    elif pa.types.is_binary(value) or pa.types.is_large_binary(value):
        value = pa.large_binary()
    else:
        return pc.cast(column, value)
    # the dictionary widened first, then decoded: a direct cast to the large type still goes
    # through the small one and overflows
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    wide = [
        pa.DictionaryArray.from_arrays(c.indices, c.dictionary.cast(value)).dictionary_decode()
        for c in chunks
    ]
    return pa.chunked_array(wide, type=value)


def _is_text(array: pa.ChunkedArray) -> bool:
    return is_text_type(array.type)


def _mask(array: Any) -> np.ndarray:
    """A boolean Arrow array (nulls as False) → numpy bool array."""
    return np.asarray(pc.fill_null(array, False).to_numpy(zero_copy_only=False), dtype=bool)


def _parse_text(text: pa.ChunkedArray, target: pa.DataType) -> tuple[pa.ChunkedArray, np.ndarray]:
    """Text → ``target``; returns the values (garbage where invalid) and the valid mask."""
    if pa.types.is_boolean(target):
        lower = pc.utf8_lower(text)
        valid = _mask(pc.is_in(lower, value_set=pa.array(list(_BOOL_TEXT))))
        values = pa.array([_BOOL_TEXT.get(v) for v in lower.to_pylist()], type=pa.bool_())
        return pa.chunked_array([values]), valid
    pattern = INT_TEXT if pa.types.is_integer(target) else FLOAT_TEXT
    valid = _mask(pc.match_substring_regex(text, pattern, ignore_case=True))
    filler = pa.scalar("0", pa.string())
    unsigned = pc.replace_substring_regex(text, r"^\+", "")  # Arrow's parser refuses "+1"
    safe = pc.if_else(pa.array(valid), unsigned, filler)
    try:
        return pc.cast(safe, target), valid
    except pa.ArrowInvalid:  # e.g. an integer beyond int64: find the offenders one by one
        out: list[Any] = []
        for i, v in enumerate(safe.to_pylist()):
            try:
                out.append(pc.cast(pa.array([v]), target)[0].as_py())
            except pa.ArrowInvalid:
                out.append(0)
                valid[i] = False
        return pa.chunked_array([pa.array(out, type=target)]), valid


class _Validate(beam.DoFn):
    def __init__(
        self,
        person: str,
        person_type: str,
        keys: Mapping[str, pa.DataType],
        numbers: Sequence[str],
    ) -> None:
        self._person = person
        self._person_type = person_type
        self._keys = dict(keys)
        self._numbers = list(numbers)

    def process(self, table: pa.Table) -> Iterator[Any]:
        clean, dead = split_table(table, self._person, self._person_type, self._keys, self._numbers)
        if clean.num_rows:
            yield clean
        for row in dead:
            yield beam.pvalue.TaggedOutput(DEAD_LETTER, row)


def _canonical_person(
    table: pa.Table, person: str, person_type: str, reasons: list[tuple[np.ndarray, str]]
) -> pa.ChunkedArray:
    """The person-id rule (module docstring); appends the rows it rejects to ``reasons``."""
    ids = table.column(person)
    reasons.append((~_mask(pc.is_valid(ids)), "null or empty person id"))
    if pa.types.is_uint64(ids.type) and person_type != "string":
        # past int64: not an int id, as the same id in text is not; with person_type "string"
        # every uint64 id is its decimal string (hashed 64-bit ids fill the whole range)
        big = pc.greater(ids, pa.scalar(2**63 - 1, pa.uint64()))
        reasons.append((_mask(big), PAST_INT64))
        return pc.cast(ids, CLEAN_TEXT)
    if pa.types.is_integer(ids.type):
        return pc.cast(ids, CLEAN_TEXT)
    if pa.types.is_null(ids.type):  # a file whose ids are all null (pyarrow typed it null)
        return pc.cast(ids, CLEAN_TEXT)
    if not _is_text(ids):
        raise TypeError(f"person column {person!r} has type {ids.type}; the schema check missed it")
    reasons.append((_mask(pc.equal(pc.binary_length(ids), 0)), "null or empty person id"))
    if person_type == "string":
        return pc.cast(ids, CLEAN_TEXT)
    parsed, ok = _parse_text(ids, pa.int64())
    reasons.append((~ok, "person id type mismatch"))
    return pc.cast(parsed, CLEAN_TEXT)


def split_table(
    table: pa.Table,
    person: str,
    person_type: str,
    keys: Mapping[str, pa.DataType],
    numbers: Sequence[str],
) -> tuple[pa.Table, list[dict[str, Any]]]:
    """One raw table → (clean table, dead-letter dicts); pure, ``ValidateRows`` wraps it."""
    n = table.num_rows
    for i, field in enumerate(table.schema):  # dictionary-encoded columns: decode first
        if pa.types.is_dictionary(field.type):
            table = table.set_column(i, field.name, decoded(table[i]))
    reasons: list[tuple[np.ndarray, str]] = []  # (bad mask, reason), first match wins
    if REJECT_COLUMN in table.column_names:
        reject = table.column(REJECT_COLUMN)
        marked = _mask(pc.is_valid(reject))
        if marked.any():
            texts = reject.to_pylist()
            for reason in sorted({texts[i] for i in np.flatnonzero(marked)}):
                reasons.append((_mask(pc.equal(reject, reason)), reason))

    canonical = _canonical_person(table, person, person_type, reasons)
    out: dict[str, Any] = {PERSON_COLUMN: canonical}
    for name, target in keys.items():
        col = table.column(name)
        reasons.append((~_mask(pc.is_valid(col)), f"null key in {name}"))
        if _is_text(col) and not pa.types.is_string(target):
            col, ok = _parse_text(col, target)
            reasons.append((~ok, f"key type mismatch in {name}"))
        elif pa.types.is_uint64(col.type) and pa.types.is_integer(target):  # past int64: its row
            big = pc.greater(col, pa.scalar(2**63 - 1, pa.uint64()))
            reasons.append((_mask(big), f"key type mismatch in {name}"))
            col = pc.if_else(big, pa.scalar(0, pa.uint64()), col)
        out[name] = pc.cast(col, CLEAN_TEXT if pa.types.is_string(target) else target)
    for name in numbers:
        col = table.column(name)
        reasons.append((~_mask(pc.is_valid(col)), f"null value in {name}"))
        if _is_text(col):
            col, ok = _parse_text(col, pa.float64())
            reasons.append((~ok, f"non-numeric value in {name}"))
        else:
            col = pc.cast(col, pa.float64(), safe=False)
        reasons.append((_mask(pc.is_nan(col)), f"NaN value in {name}"))
        out[name] = col

    bad = np.zeros(n, dtype=bool)
    for mask, _ in reasons:
        bad |= mask
    clean = pa.table(out).filter(pa.array(~bad)) if bad.any() else pa.table(out)
    return clean, _dead_letters(table, bad, reasons)


def _dead_letters(
    table: pa.Table, bad: np.ndarray, reasons: list[tuple[np.ndarray, str]]
) -> list[dict[str, Any]]:
    if not bad.any():
        return []
    meta = table.schema.metadata or {}
    file = meta.get(FILE_METADATA_KEY, b"").decode()
    index = np.flatnonzero(bad)
    marks = (REJECT_COLUMN, RAW_LINE_COLUMN)
    raw = table.drop_columns([c for c in table.column_names if c in marks]).take(index)
    columns = {c: pc.cast(raw.column(c), pa.string()).to_pylist() for c in raw.column_names}
    lines: list[str | None] = [None] * len(index)
    if RAW_LINE_COLUMN in table.column_names:
        lines = table.column(RAW_LINE_COLUMN).take(index).to_pylist()
    labels = np.empty(len(table), dtype=object)
    for mask, reason in reversed(reasons):  # first listed reason wins
        labels[mask] = reason
    out = []
    for j, i in enumerate(index):
        letter: dict[str, Any] = {
            "reason": str(labels[i]),
            "file": file,
            "row": {c: values[j] for c, values in columns.items()},
        }
        if lines[j] is not None:
            letter["line"] = lines[j]
        out.append(letter)
    return out


class ValidateRows(beam.PTransform[Any, Any]):
    """Raw tables → tagged outputs ``clean`` (tables) and ``dead_letter`` (dicts).

    ``person``: the person column; ``person_type``: ``"int"`` or ``"string"`` (the column's
    declared type from ``inspect_inputs``); ``keys``: key column → Arrow type (``int64``,
    ``string`` or ``bool``); ``numbers``: value columns, read as ``float64``. See the module
    docstring for the person-id rule and the dead-letter reasons. Dead-letter rows are raw private
    data: route them only to the operator path.
    """

    def __init__(
        self,
        person: str,
        person_type: str,
        keys: Mapping[str, pa.DataType] | None = None,
        numbers: Sequence[str] = (),
    ) -> None:
        super().__init__()
        if person_type not in ("int", "string"):
            raise ValueError(f"person_type must be 'int' or 'string', received {person_type!r}")
        keys = dict(keys or {})
        for name, target in keys.items():
            if not isinstance(target, pa.DataType) or not (
                pa.types.is_integer(target)
                or pa.types.is_string(target)
                or pa.types.is_boolean(target)
            ):
                raise ValueError(f"key {name!r}: type must be int64, string or bool, got {target}")
        overlap = {person, *keys} & set(numbers) or ({person} & set(keys))
        if overlap:
            raise ValueError(f"columns {sorted(overlap)} are used in two roles")
        reserved = [c for c in (person, *keys, *numbers) if is_reserved_column(c)]
        if reserved:  # ByPerson and the job file refuse them first, with their own words
            raise ValueError(f"columns {reserved} have the form of userdp's own (__name__)")
        self._fn = _Validate(person, person_type, keys, numbers)

    def expand(self, tables: Any) -> Any:
        validate = beam.ParDo(self._fn)  # Beam is unannotated
        tagged = validate.with_outputs(DEAD_LETTER, main=CLEAN)
        return tables | "Validate" >> tagged  # .clean: pa.Table, .dead_letter: dict
