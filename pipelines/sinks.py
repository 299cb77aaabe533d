"""Writing the release tables and the operator-only dead-letter rows.

``write_release`` writes one small, already-noisy table per query through Beam's ``FileSystems``
(local paths or any filesystem Beam knows). Output is deterministic — the same table gives the same
bytes — so a re-run can be compared byte for byte:

- Parquet: ``pyarrow.parquet`` writes no timestamps; the ``created_by`` string names the pyarrow
  version, so bytes are stable for one pyarrow version.
- Avro: fastavro with a sync marker derived from the Avro schema (not random) and no codec.
- CSV: ``pyarrow.csv`` with a header; float columns are written as Python ``repr`` text
  (``123.0``, never ``123``), so a reader infers float64 whatever the values — an integral noisy
  count must not turn the column into integers.
- JSON: JSON Lines, one object per row, keys in column order, non-finite floats refused.

``WriteDeadLetters`` writes dead-letter dicts as JSON Lines. They are raw private input rows: the
path must be the operator path from the job file, never the release directory.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from typing import Any

import apache_beam as beam
import fastavro
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from .output_layout import RELEASE_FORMATS


def _avro_type(t: pa.DataType) -> str:
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        return "long"
    if pa.types.is_floating(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    raise ValueError(
        f"release column type {t} cannot be written to Avro; allowed: bool, int, float, string"
    )


def _avro_bytes(table: pa.Table) -> bytes:
    schema = {
        "type": "record",
        "name": "release",
        "fields": [{"name": f.name, "type": ["null", _avro_type(f.type)]} for f in table.schema],
    }
    marker = hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).digest()[:16]
    buf = io.BytesIO()
    fastavro.writer(buf, fastavro.parse_schema(schema), table.to_pylist(), sync_marker=marker)
    return buf.getvalue()


def _json_bytes(table: pa.Table) -> bytes:
    lines = []
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_floating(col.type) and any(
            v is not None and not math.isfinite(v) for v in col.to_pylist()
        ):
            raise ValueError(f"release column {name!r} has a non-finite value; JSON cannot hold it")
    for row in table.to_pylist():
        lines.append(json.dumps(row, allow_nan=False, ensure_ascii=False))
    return "".join(line + "\n" for line in lines).encode()


def _csv_floats_as_text(table: pa.Table) -> pa.Table:
    """Float columns → shortest round-trip text with a decimal point or exponent (``repr``)."""
    for i, name in enumerate(table.column_names):
        col = table.column(name)
        if pa.types.is_floating(col.type):
            text = [None if v is None else repr(float(v)) for v in col.to_pylist()]
            table = table.set_column(i, name, pa.array(text, pa.string()))
    return table


def release_bytes(table: pa.Table, fmt: str) -> bytes:
    """The bytes ``write_release`` would write for ``table`` in ``fmt``."""
    if fmt == "parquet":
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf, compression="snappy", write_statistics=True)
        return bytes(buf.getvalue().to_pybytes())
    if fmt == "avro":
        return _avro_bytes(table)
    if fmt == "csv":
        buf = pa.BufferOutputStream()
        pcsv.write_csv(_csv_floats_as_text(table), buf)
        return bytes(buf.getvalue().to_pybytes())
    if fmt == "json":
        return _json_bytes(table)
    raise ValueError(
        f"release format {fmt!r} is not supported; allowed: {', '.join(RELEASE_FORMATS)}"
    )


def write_release(table: pa.Table, path_without_ext: str, fmt: str) -> str:
    """Write ``table`` to ``path_without_ext`` + the format's extension; return that path.

    ``fmt``: ``parquet`` | ``avro`` | ``csv`` | ``json`` (JSON Lines, extension ``.jsonl``).
    """
    data = release_bytes(table, fmt)
    path = path_without_ext + RELEASE_FORMATS[fmt]
    with FileSystems.create(path) as f:
        f.write(data)
    return path


def _json_line(row: Any) -> str:
    return json.dumps(row, sort_keys=True, ensure_ascii=False)


class WriteDeadLetters(beam.PTransform[Any, Any]):
    """Dead-letter dicts → JSON Lines shards ``<path>/dead_letter-SSSSS-of-NNNNN.jsonl``.

    PRIVATE: every line is a raw input row with the reason it was rejected. Write them only to
    the operator path named in the job file (``[input] dead_letter``); never to the release
    directory, logs or anything an untrusted reader sees.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        if not path:
            raise ValueError("dead-letter path must be a non-empty operator path")
        self._prefix = FileSystems.join(path, "dead_letter")

    def expand(self, rows: Any) -> Any:
        return (
            rows
            | "ToJson" >> beam.Map(_json_line)
            | "WriteJsonl" >> beam.io.WriteToText(self._prefix, file_name_suffix=".jsonl")
        )
