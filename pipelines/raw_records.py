"""Python records and undecoded bytes → *raw tables* of text with a reject reason per row.

The slow paths of :mod:`.sources` (JSON lines, Avro records, CSV fields that are not UTF-8) and
the library's Python rows (``transforms.by_person``) all come here, so a value is judged the same
way whichever path its row took: a value of another type than the column's is never coerced
(the row gets a reason and its text, for the operator's dead letter only), and nothing here
raises on a value — which rows hold an odd value is data.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from userdp.transforms.columns import RAW_LINE_COLUMN, REJECT_COLUMN
from userdp.transforms.validate import decoded

from .input_files import InputSchema, arrow_family
from .text_records import ESCAPE, unescape_utf8

__all__ = ["bytes_to_text", "checked_text", "malformed_rows", "records_to_table"]


def _text(value: Any) -> str:
    """A value's text for its dead letter (the operator's only): JSON where the value has one,
    else its repr. Never raises: which rows hold a bytes, Decimal or date value is data, so
    failing on one would make the run's outcome depend on a person. (``type(value)``, never
    ``isinstance``: that reads ``value.__class__``, which a user's object may raise in.)"""
    if issubclass(type(value), str):
        text: str = value  # as it is: a subclass's __str__ is the user's code
        return text
    try:
        return json.dumps(value)
    except KeyboardInterrupt:
        raise
    except RecursionError:
        return "<too deeply nested>"
    except ValueError:  # an int past Python's 4,300-digit text limit (or one inside), a cycle
        if issubclass(type(value), int):  # no int64 holds it: its row is a dead letter anyway
            return f"<an integer of {value.bit_length()} bits>"
    except BaseException:  # no JSON form (bytes, Decimal, dates, sets), or a user's object
        pass  # whose conversion raised — even SystemExit
    try:
        return repr(value)
    except KeyboardInterrupt:
        raise
    except BaseException:  # a user's __repr__ that raises, a cycle holding a huge int
        return f"<{type(value).__name__}>"


def _plain(value: Any) -> Any:
    """A NumPy scalar as the Python value it holds (``np.int64(3)`` → ``3``, ``np.bool_`` →
    ``bool``), so a library row's numbers are read, and its person ids canonicalised, exactly
    as Python's; anything else unchanged."""
    return value.item() if isinstance(value, np.generic) else value


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


def _shown(text: str) -> str:
    """Text that is not UTF-8, for its dead letter: a byte JSONL held (decoded with
    ``surrogateescape``) as ``\\xNN``, as CSV shows it; another lone surrogate as ``\\uNNNN``."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate from a JSON escape such as \ud800
        return text.encode("utf-8", "backslashreplace").decode()


def _family_of(value: Any) -> str | None:
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


def bytes_to_text(table: pa.Table, escaped: bool) -> pa.Table:
    """Binary columns → text; a value that is not UTF-8 gets ``invalid UTF-8 text in <column>``.

    ``escaped``: the bytes went through :func:`text_records.escape_utf8`, so invalid bytes show as
    escape sequences rather than failing the UTF-8 check. Vectorised: only a column that fails the
    check (or holds the escape character) is decoded value by value.
    """
    reasons: list[str | None] | None = None
    columns: dict[str, Any] = {}
    for name in table.column_names:
        if name == REJECT_COLUMN:
            continue
        col = table.column(name)
        try:
            text = pc.cast(col, pa.string())
            if not escaped or not pc.any(pc.match_substring(text, ESCAPE)).as_py():
                columns[name] = text
                continue
        except pa.ArrowInvalid:
            pass
        values: list[str | None] = []
        for i, raw in enumerate(col.to_pylist()):
            if raw is None:
                values.append(None)
                continue
            try:
                value, bad = unescape_utf8(raw.decode("utf-8")) if escaped else (
                    raw.decode("utf-8"), False)  # fmt: skip
            except UnicodeDecodeError:
                value, bad = raw.decode("utf-8", "backslashreplace"), True
            values.append(value)
            if bad:
                reasons = reasons or [None] * table.num_rows
                reasons[i] = reasons[i] or f"invalid UTF-8 text in {name}"
        columns[name] = pa.array(values, pa.string())
    out = pa.table(columns, schema=pa.schema([(n, pa.string()) for n in columns]))
    if REJECT_COLUMN in table.column_names:
        earlier = table.column(REJECT_COLUMN).to_pylist()
        reasons = [a or b for a, b in zip(earlier, reasons or earlier, strict=True)]
    if reasons is not None:
        out = out.append_column(REJECT_COLUMN, pa.array(reasons, pa.string()))
    return out


def records_to_table(
    records: list[Any],
    schema: InputSchema,
    lines: Sequence[bytes] | None = None,
    *,
    absent_is_named: bool = False,
    target: pa.Schema | None = None,
) -> pa.Table:
    """Slow path: Python records (JSON/Avro) → a text raw table with a ``__reject__`` column.

    ``lines``: the JSON lines the records came from; a malformed one's text goes with its dead
    letter (``__raw_line__``), invalid UTF-8 shown as ``\\xNN`` (without ``lines``: the
    record's own text, e.g. a library row sent as a tuple). ``absent_is_named``: a column
    missing from a record (not null) is its own reason, ``no column 'x' in the row`` — for the
    library's Python rows, where a misspelt column name would otherwise read as null ids. (Not
    for JSONL: its fast path reads a missing key as null, and a line's reason must not depend on
    which path its neighbours sent it down.)

    A value whose JSON/Avro type is not the column's declared type is never coerced: the row gets
    a reject reason and its raw text (``json.dumps`` for non-strings, so ``1`` and ``"1"`` stay
    distinguishable for the operator). ``target``: the columns' types when not the schema's
    (an Avro file's own type for the person column).
    """
    target = target or schema.arrow_schema()
    cols: dict[str, list[str | None]] = {c: [] for c in schema.columns}
    rejects: list[str | None] = []
    unreadable: set[int] = set()  # rows whose objects raised when read: malformed records
    for i, record in enumerate(records):
        try:
            values, reason = _record_values(record, schema, target, absent_is_named)
        except KeyboardInterrupt:
            raise
        # A user's object whose float(), str, … raises (even SystemExit): its row only. A
        # MemoryError too, deliberately: re-raised, whether the step fails would follow the
        # size of one person's values; caught, the row is a dead letter for the operator.
        except BaseException:
            values, reason = [None] * len(schema.columns), "malformed record"
            unreadable.add(i)
        for name, value in zip(schema.columns, values, strict=True):
            cols[name].append(value)
        rejects.append(reason)
    arrays = {c: pa.array(v, type=pa.string()) for c, v in cols.items()}
    arrays[REJECT_COLUMN] = pa.array(rejects, type=pa.string())
    # type(r), not isinstance: isinstance reads r.__class__, which a user's object may raise in
    mapped = [issubclass(type(r), dict) for r in records]
    if unreadable or not all(mapped):  # their text goes with their dead letters
        raw = lines if lines is not None else [None] * len(records)
        texts = [
            None
            if mapped[i] and i not in unreadable
            else _text(r)  # a library row that is not a mapping (or not readable): as sent
            if x is None
            else x.decode("utf-8", "backslashreplace")
            for i, (r, x) in enumerate(zip(records, raw, strict=True))
        ]
        arrays[RAW_LINE_COLUMN] = pa.array(texts, type=pa.string())
    return pa.table(arrays)


def _record_values(
    record: Any, schema: InputSchema, target: pa.Schema, absent_is_named: bool
) -> tuple[list[str | None], str | None]:
    """One record's column texts and its reject reason (None: a good row), by the rules of
    :func:`records_to_table`. May raise on a user's object; the caller catches it."""
    mapped = issubclass(type(record), dict)
    reason: str | None = None if mapped else "malformed record"
    row = record if mapped else {}
    out: list[str | None] = []
    for name in schema.columns:
        if absent_is_named and reason is None and name not in row:
            reason = f"no column {name!r} in the row"
        value: Any = _plain(row.get(name))
        family = _family_of(value)
        want = arrow_family(target.field(name).type)
        if family is None:
            out.append(None)
        elif isinstance(value, str) and not _is_utf8(value):
            out.append(_shown(value))
            reason = reason or f"invalid UTF-8 text in {name}"
        elif want == "float" and family in ("integer", "float"):
            out.append(_float_text(value))
        elif family == want:
            out.append(value if family == "string" else _text(value))
        else:
            out.append(_text(value))
            if reason is None:
                reason = (
                    "person id type mismatch"
                    if name == schema.person
                    else f"non-numeric value in {name}"
                    if want == "float"
                    else f"key type mismatch in {name}"
                )
    return out, reason


def malformed_rows(lines: list[str | None], names: list[str]) -> pa.Table:
    """One malformed record per line: its fields are unknown, so all null, and the line's own
    text (None for a line too long to hold) goes with its dead letter, for the operator only."""
    n = len(lines)
    rows = {c: pa.nulls(n, pa.string()) for c in names}
    reject = pa.array(["malformed record"] * n, pa.string())
    return pa.table({**rows, REJECT_COLUMN: reject, RAW_LINE_COLUMN: pa.array(lines, pa.string())})


def checked_text(table: pa.Table) -> pa.Table:
    """Arrow string columns (Parquet's, a library user's tables) may hold bytes that are not UTF-8
    (writers do not all check): such a value becomes a dead letter instead of failing a later
    step — one person's bytes must not stop the run."""
    text = [
        i for i, fd in enumerate(table.schema) if arrow_family(fd.type) == "string"
    ]  # fmt: skip
    if not text:
        return table
    as_bytes = {}
    for i in text:
        col = table.column(i)
        if pa.types.is_dictionary(col.type):
            col = decoded(col)
        try:
            col.validate(full=True)
            continue
        except pa.ArrowInvalid:
            as_bytes[table.column_names[i]] = col.cast(pa.large_binary())
    if not as_bytes:
        return table
    fixed = bytes_to_text(pa.table(as_bytes), escaped=False)
    for name in as_bytes:
        table = table.set_column(table.column_names.index(name), name, fixed.column(name))
    if REJECT_COLUMN in fixed.column_names:
        table = table.append_column(REJECT_COLUMN, fixed.column(REJECT_COLUMN))
    return table
