"""The synthetic browsing-log generator: formats, schema, determinism and a heavy tail."""

from __future__ import annotations

from pathlib import Path

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq
import pytest

from userdp.pipelines.generate import SCHEMA, generate


def _read(path: Path) -> pa.Table:
    if path.suffix == ".parquet":
        return pq.read_table(path)
    if path.suffix == ".csv":
        return pcsv.read_csv(path)
    if path.suffix == ".jsonl":
        return pjson.read_json(path)
    with open(path, "rb") as f:
        return pa.Table.from_pylist(list(fastavro.reader(f)), schema=SCHEMA)


def test_all_formats_hold_the_same_rows(tmp_path: Path) -> None:
    tables = []
    for ext in (".parquet", ".avro", ".csv", ".jsonl"):
        path = tmp_path / f"logs{ext}"
        rows = generate(100, str(path), seed=3)
        table = _read(path)
        assert table.num_rows == rows
        assert table.schema.equals(SCHEMA), (ext, table.schema)
        tables.append(table)
    for table in tables[1:]:
        assert table.equals(tables[0])


def test_heavy_tail_and_shape(tmp_path: Path) -> None:
    path = tmp_path / "logs.parquet"
    rows = generate(2000, str(path), seed=1)
    table = pq.read_table(path)
    _, counts = np.unique(table.column("person_id").to_numpy(), return_counts=True)
    assert len(counts) == 2000
    assert (counts >= 10_000).sum() >= 3  # bots
    assert np.median(counts) < 50
    assert rows == counts.sum()
    domains = table.column("domain").unique()
    assert 30 <= len(domains) <= 50
    ts = table.column("timestamp").to_numpy()
    assert ts.min() >= 1_704_067_200
    assert ts.max() < 1_704_067_200 + 28 * 86400
    assert (table.column("duration_s").to_numpy() > 0).all()
    assert generate(2000, str(tmp_path / "again.parquet"), seed=1) == rows
    assert pq.read_table(tmp_path / "again.parquet").equals(table)


def test_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"extension '\.txt' is not supported; allowed: \.parquet"):
        generate(10, str(tmp_path / "x.txt"))
    with pytest.raises(ValueError, match="people must be at least 1, received 0"):
        generate(0, str(tmp_path / "x.csv"))
