"""Public partition keys: read from the job's key file, and typed like the ``by`` columns.

A query with ``partitions = "keys.csv"`` releases exactly the listed keys (absent ones as noise
only). The file is public, so the launcher reads it while planning; keys read as text are then
converted to the ``by`` columns' input types (from the schema check) so they match the data.
Every kind with public partitions uses these two functions.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .config import ConfigError, JobConfig, QueryConfig

if TYPE_CHECKING:
    import pyarrow as pa

    from .sources import InputSchema

Keys = tuple[tuple[object, ...], ...]


def read_public_keys(job: JobConfig, i: int, q: QueryConfig) -> Keys:
    """The distinct keys of ``q.partitions`` (CSV with a header of the by columns, or JSON)."""
    path, key = str(q.partitions), f"queries[{i}].partitions"
    try:
        with open(path, encoding="utf-8", newline="") as f:
            if path.lower().endswith(".json"):
                raw = json.load(f)
                rows = [_json_key(r, q.by) for r in raw] if isinstance(raw, list) else None
            else:
                reader = csv.DictReader(f)
                if reader.fieldnames is None or set(q.by) - set(reader.fieldnames):
                    raise ConfigError(
                        key,
                        path,
                        f"a CSV whose header has the by columns {list(q.by)}",
                        f"its header is {reader.fieldnames}",
                        job.source,
                    )
                rows = [tuple(r[c] for c in q.by) for r in reader]
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(
            key, path, "a readable CSV or JSON file of public keys", str(e), job.source
        ) from e
    if not rows or any(r is None for r in rows):
        raise ConfigError(
            key,
            path,
            f"a non-empty list of keys for by = {list(q.by)}",
            "JSON: a list of values, lists or objects; CSV: a header row of the by "
            "columns, then one key per row",
            job.source,
        )
    return tuple(dict.fromkeys(r for r in rows if r is not None))


def _json_key(r: Any, by: tuple[str, ...]) -> tuple[object, ...] | None:
    if isinstance(r, dict) and set(r) == set(by):
        return tuple(r[c] for c in by)
    if isinstance(r, list) and len(r) == len(by):
        return tuple(r)
    return (r,) if len(by) == 1 and isinstance(r, (str, int, float)) else None


def typed_public_keys(keys: Keys, by: Sequence[str], schema: InputSchema) -> Keys:
    """``keys`` converted to the input types of the ``by`` columns, duplicates removed.

    Integers and floats are parsed from their text; booleans accept true/false (any case) or
    1/0; other text stays text and then matches no row (the key is released as noise only).
    """
    types = dict(schema.keys)
    return tuple(
        dict.fromkeys(
            tuple(_typed(types[c], v) for c, v in zip(by, key, strict=True)) for key in keys
        )
    )


def _typed(t: pa.DataType, v: Any) -> object:
    import pyarrow as pa  # noqa: PLC0415 (planning never needs it)

    if pa.types.is_boolean(t):
        text = str(v).strip().lower()
        return True if text in ("true", "1") else False if text in ("false", "0") else str(v)
    if pa.types.is_integer(t):
        return int(str(v))
    return float(str(v)) if pa.types.is_floating(t) else str(v)
