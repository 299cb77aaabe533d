"""Tests of reading, validation, sinks and the synthetic data generator; shared helpers."""

from __future__ import annotations

import glob
import json
import os
import uuid
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from userdp.pipelines.sinks import WriteDeadLetters
from userdp.pipelines.sources import InputSchema, ReadArrowTables
from userdp.transforms.validate import ValidateRows


def _write_clean(table: pa.Table, out_dir: str) -> None:
    pq.write_table(table, os.path.join(out_dir, f"clean-{uuid.uuid4().hex}.parquet"))


def run_read_validate(schema: InputSchema, tmp: str) -> tuple[pa.Table, list[dict[str, Any]]]:
    """Read + validate on the FnApiRunner; return (all clean rows sorted, dead-letter dicts)."""
    clean_dir, ops_dir = os.path.join(tmp, "clean"), os.path.join(tmp, "ops")
    os.makedirs(clean_dir)
    with beam.Pipeline(runner=FnApiRunner()) as p:
        out = (
            p
            | "Read" >> ReadArrowTables(schema)
            | "Validate" >> ValidateRows(schema.person, schema.person_type, dict(schema.keys),
                                         schema.numbers)
        )  # fmt: skip
        _ = out.clean | "WriteClean" >> beam.Map(_write_clean, clean_dir)
        _ = out.dead_letter | "WriteDead" >> WriteDeadLetters(ops_dir)
    parts = [pq.read_table(f) for f in sorted(glob.glob(os.path.join(clean_dir, "*.parquet")))]
    names = [f.name for f in schema.arrow_schema()]
    cols = ["__person__", *names[1:]]
    clean = (
        pa.concat_tables(parts).replace_schema_metadata(None)
        if parts
        else pa.table({c: [] for c in cols})
    )
    clean = clean.sort_by([(c, "ascending") for c in cols])
    dead = []
    for path in sorted(glob.glob(os.path.join(ops_dir, "dead_letter-*.jsonl"))):
        with open(path) as f:
            dead.extend(json.loads(line) for line in f if line.strip())
    return clean, dead
