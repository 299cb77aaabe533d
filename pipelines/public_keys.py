"""Public partition keys: read from the job's key file, and typed like the ``by`` columns.

A query with ``partitions = "keys.csv"`` releases exactly the listed keys (absent ones as noise
only). The file is public, so the launcher reads it while planning, and every key is converted to
its ``by`` column's type (from the schema check) *before* the ledger is charged
(:func:`check_public_keys`): a key that cannot have that type is a :class:`ConfigError` naming the
file, the row and the column, never something found on a worker after noise was drawn.

Accepted files: CSV (UTF-8, an optional byte-order mark, a header row naming the ``by`` columns,
then one key per row) or JSON (a list of values, of lists, or of objects keyed by the ``by``
columns). Key values by column type:

- string: any text (a JSON string; a CSV field);
- int: an integer in the int64 range (a JSON integer, or CSV text of digits with an optional sign);
- bool: ``true``/``false`` in any case, or ``1``/``0`` (JSON booleans too).

NaN, infinities, objects or lists as key values, numbers for string columns, fields over the CSV
module's limit, deeply nested JSON and integers of thousands of digits are refused.
"""

from __future__ import annotations

import csv
import json
import os
import re
import stat
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .config import ConfigError, JobConfig, QueryConfig

if TYPE_CHECKING:
    import pyarrow as pa

    from .sources import InputSchema

Keys = tuple[tuple[object, ...], ...]
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,19}")
_INT64 = (-(2**63), 2**63 - 1)
_BOOL_TEXT = {"true": True, "false": False, "1": True, "0": False}


class _BadKeysError(ValueError):
    """Why a key file is refused (no key values in the message)."""


def _json_rows(text: str, by: tuple[str, ...]) -> list[tuple[object, ...]]:
    def no_constants(name: str) -> Any:  # NaN, Infinity, -Infinity: not JSON values, not keys
        raise _BadKeysError(f"{name} is not a key value for by = {list(by)}")

    try:
        raw = json.loads(text, parse_constant=no_constants)
    except _BadKeysError:
        raise
    except RecursionError:
        raise _BadKeysError("JSON nested too deeply") from None
    except ValueError as e:  # JSON syntax, or an integer beyond Python's digit limit
        raise _BadKeysError(f"not valid JSON ({type(e).__name__})") from None
    if not isinstance(raw, list):
        raise _BadKeysError("the JSON value is not a list")
    rows = []
    for i, r in enumerate(raw):
        if isinstance(r, dict) and set(r) == set(by):
            key = tuple(r[c] for c in by)
        elif isinstance(r, list) and len(r) == len(by):
            key = tuple(r)
        elif len(by) == 1 and not isinstance(r, (dict, list)):
            key = (r,)
        else:
            raise _BadKeysError(f"item {i} is not a key for by = {list(by)}")
        for c, v in zip(by, key, strict=True):
            if v is None or isinstance(v, (dict, list)):
                raise _BadKeysError(f"item {i}, column {c!r}: not a string, integer or boolean")
        rows.append(key)
    return rows


def _csv_rows(text: str, by: tuple[str, ...]) -> list[tuple[object, ...]]:
    try:
        reader = csv.reader(text.splitlines())
        header = next(reader, None)
        if header is None or set(by) - set(header):
            raise _BadKeysError(f"its header is {header}, not one naming the by columns {list(by)}")
        if any(header.count(c) > 1 for c in by):
            raise _BadKeysError("a by column appears twice in the header")
        at = [header.index(c) for c in by]
        rows: list[tuple[object, ...]] = []
        for n, fields in enumerate(reader, start=2):
            if not fields:
                continue  # a blank line
            if len(fields) != len(header):
                raise _BadKeysError(f"row {n} has {len(fields)} fields, the header {len(header)}")
            rows.append(tuple(fields[i] for i in at))
    except csv.Error as e:  # e.g. a field over the csv module's size limit
        raise _BadKeysError(f"malformed CSV ({type(e).__name__})") from None
    return rows


def read_public_keys(q: QueryConfig, key: str, source: str) -> Keys:
    """The distinct keys of ``q.partitions``, as written (typed later by ``typed_public_keys``).

    ``key``: how errors name the setting (``queries[i].partitions``); ``source``: the job file.
    """
    path = str(q.partitions)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO blocked open() forever, and
            raise ConfigError(  # /dev/zero was read until the process was killed
                key, path, "a regular file of public keys", "not a regular file", source
            )
        with open(path, "rb") as f:
            text = f.read().decode("utf-8-sig")  # a byte-order mark is allowed
        parse = _json_rows if path.lower().endswith(".json") else _csv_rows
        rows = parse(text, q.by)
    except OSError as e:
        raise ConfigError(key, path, "a readable CSV or JSON file of public keys",
                          e.strerror or type(e).__name__, source) from None  # fmt: skip
    except UnicodeDecodeError:
        raise ConfigError(key, path, "a UTF-8 file of public keys", "it is not UTF-8",
                          source) from None  # fmt: skip
    except _BadKeysError as e:
        raise ConfigError(key, path, "a CSV or JSON file of public keys", str(e),
                          source) from None  # fmt: skip
    if not rows:
        raise ConfigError(
            key,
            path,
            f"a non-empty list of keys for by = {list(q.by)}",
            "JSON: a list of values, lists or objects; CSV: a header row of the by "
            "columns, then one key per row",
            source,
        )
    try:
        return tuple(dict.fromkeys(rows))
    except TypeError:  # unreachable after the checks above; kept as a clear message
        raise ConfigError(key, path, "hashable key values", "", source) from None


def typed_public_keys(
    keys: Keys, by: Sequence[str], schema: InputSchema, *, strict: bool = False
) -> Keys:
    """``keys`` converted to the input types of the ``by`` columns, duplicates removed; two keys
    written differently that type alike (``"1"`` and ``"01"`` for an int column) are refused.

    A key file's values are text, so text is read as the column's type (``"02"`` → 2, ``"1"`` →
    True). ``strict``: the library's Python values, which are never converted — an int column
    takes ints, a bool column bools, a string column strs (ByPerson converts no row either).

    Raises ``ValueError`` (``"key N, column C: …"``, or ``"public_partitions[i], …"`` when
    strict; no value) for a key that cannot have its column's type; :func:`check_public_keys`
    turns it into a ConfigError before the charge.
    """
    types = dict(schema.keys)
    seen: dict[tuple[object, ...], int] = {}
    for n, key in enumerate(keys, start=1):
        where = f"public_partitions[{n - 1}]" if strict else f"key {n}"
        typed = tuple(
            _typed(types[c], v, f"{where}, column {c!r}", strict)
            for c, v in zip(by, key, strict=True)
        )
        if typed in seen and keys[seen[typed] - 1] != key:  # "1" and "01" for an int column
            raise ValueError(
                f"key {n}: the same key as key {seen[typed]} once typed as the columns are "
                "(the plan counts the keys as written: list each key once)"
            )
        seen.setdefault(typed, n)
    return tuple(seen)


def _typed(t: pa.DataType, v: Any, where: str, strict: bool) -> object:
    import pyarrow as pa  # noqa: PLC0415 (planning never needs it)

    if pa.types.is_boolean(t):
        if isinstance(v, bool):
            return v
        if not strict and isinstance(v, str) and v.strip().lower() in _BOOL_TEXT:
            return _BOOL_TEXT[v.strip().lower()]
        raise ValueError(
            f"{where}: not a bool (True or False)"
            if strict
            else f"{where}: not a boolean (true/false or 1/0)"
        )
    if pa.types.is_integer(t):
        if not strict and isinstance(v, str) and _INT_TEXT.fullmatch(v.strip()):
            v = int(v.strip())
        if isinstance(v, bool) or not isinstance(v, int) or not _INT64[0] <= v <= _INT64[1]:
            text = " (an int, not text)" if strict and isinstance(v, str) else ""
            raise ValueError(f"{where}: not an integer in the int64 range{text}")
        return v
    if not isinstance(v, str):
        raise ValueError(f"{where}: not a string (the column is text)")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\ud800" in JSON): Beam's coder raised
        raise ValueError(f"{where}: not UTF-8 text (a lone surrogate)") from None
    return v[:]  # a plain str: a str subclass of the caller's may not pickle to workers


def check_public_keys(job: JobConfig, schema: InputSchema) -> None:
    """Reads and types every query's key file now, so a bad key stops the run before the charge."""
    for i, q in enumerate(job.queries):
        if q.partitions in (None, "private"):
            continue
        try:
            typed_public_keys(
                read_public_keys(q, f"queries[{i}].partitions", job.source), q.by, schema
            )
        except ValueError as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(
                f"queries[{i}].partitions", q.partitions,
                f"keys of the by columns' input types ({_types(q.by, schema)})", str(e),
                job.source,
            ) from None  # fmt: skip


def _types(by: Sequence[str], schema: InputSchema) -> str:
    types = dict(schema.keys)
    return ", ".join(f"{c}: {types[c]}" for c in by)
