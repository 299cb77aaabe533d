"""Synthetic browsing logs for demos, tests and benchmarks (not private data; no DP here).

One row per page visit, columns:

- ``person_id`` (int64): ``1_000_000 + i`` for person ``i``;
- ``url`` (string) ``https://<domain>/p/<page>`` and ``domain`` (string) ``siteNN.example``;
- ``timestamp`` (int64): Unix epoch **seconds**, UTC, uniform over the 4 weeks from 2024-01-01 —
  an integer rather than an Arrow timestamp so that all four formats hold the same value;
- ``duration_s`` (float64): lognormal, median about 33 s.

Visits per person are lognormal (median about 12, ``visits_median``); a few "bot" persons (at least
3, one per 10^4 persons) have 10^4–10^5 visits each, log-uniformly, so contribution bounding
matters. Domains are Zipf(1.1) over 50 domains (``domains``, ``domain_skew``), pages Zipf(1.0) over
200 pages per domain. The settings give logs of known, different contribution structure (few or
many partitions per person, few or many rows in each) for ``benchmarks/tuning.py``. The format
follows the extension of ``out`` (``.parquet``, ``.avro``, ``.csv``, ``.jsonl``); rows are produced
and written in chunks of ``CHUNK_PERSONS`` persons.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

DOMAINS = 50
VISITS_MEDIAN = math.exp(2.5)  # about 12.2
PAGES = 200
START = 1_704_067_200  # 2024-01-01T00:00:00Z
SPAN = 28 * 24 * 3600
CHUNK_PERSONS = 20_000
SCHEMA = pa.schema(
    [
        ("person_id", pa.int64()),
        ("url", pa.string()),
        ("domain", pa.string()),
        ("timestamp", pa.int64()),
        ("duration_s", pa.float64()),
    ]
)
_AVRO_SCHEMA = {
    "type": "record",
    "name": "visit",
    "fields": [
        {"name": "person_id", "type": "long"},
        {"name": "url", "type": "string"},
        {"name": "domain", "type": "string"},
        {"name": "timestamp", "type": "long"},
        {"name": "duration_s", "type": "double"},
    ],
}


def _zipf(n: int, s: float) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1) ** s
    return np.asarray(p / p.sum())


@dataclass(frozen=True)
class LogShape:
    """The generator's settings: median visits per person, domains and their Zipf exponent."""

    visits_median: float = VISITS_MEDIAN
    domains: int = DOMAINS
    domain_skew: float = 1.1

    def __post_init__(self) -> None:
        if not (1 <= self.visits_median <= 10_000 and 1 <= self.domains <= 1_000_000):
            raise ValueError(
                "visits_median must lie in [1, 10000] and domains in [1, 1000000], got "
                f"{self.visits_median} and {self.domains}"
            )
        if not 0 <= self.domain_skew <= 5:
            raise ValueError(f"domain_skew must lie in [0, 5], got {self.domain_skew}")


def _visits(rng: np.random.Generator, people: int, median: float) -> np.ndarray:
    counts = np.maximum(1, np.round(rng.lognormal(mean=math.log(median), sigma=1.0, size=people)))
    bots = min(people, max(3, people // 10_000))
    heavy = rng.choice(people, size=bots, replace=False)
    counts[heavy] = np.round(10 ** rng.uniform(4.0, 5.0, size=bots))
    return np.asarray(counts, dtype=np.int64)


def _chunks(people: int, seed: int, shape: LogShape) -> Iterator[pa.Table]:
    rng = np.random.default_rng(seed)  # not noise: synthetic data
    counts = _visits(rng, people, shape.visits_median)
    domains = shape.domains
    domain_p, page_p = _zipf(domains, shape.domain_skew), _zipf(PAGES, 1.0)
    domain_names = pa.array([f"site{d:02d}.example" for d in range(domains)])
    for lo in range(0, people, CHUNK_PERSONS):
        hi = min(people, lo + CHUNK_PERSONS)
        person = np.repeat(np.arange(lo, hi, dtype=np.int64) + 1_000_000, counts[lo:hi])
        n = len(person)
        domain = pc.take(domain_names, pa.array(rng.choice(domains, size=n, p=domain_p)))
        page = pc.cast(pa.array(rng.choice(PAGES, size=n, p=page_p)), pa.string())
        url = pc.binary_join_element_wise("https://", domain, "/p/", page, "")
        yield pa.table(
            [
                pa.array(person),
                url,
                domain,
                pa.array(START + rng.integers(0, SPAN, size=n, dtype=np.int64)),
                pa.array(rng.lognormal(mean=3.5, sigma=1.2, size=n)),
            ],
            schema=SCHEMA,
        )


def _jsonl(table: pa.Table) -> bytes:
    # Generated strings hold no quotes, backslashes or control characters, so plain joins give
    # valid JSON; floats print in Arrow's shortest round-trip form (finite here).
    text = [pc.cast(table.column(c), pa.string()) for c in SCHEMA.names]
    line = pc.binary_join_element_wise(
        '{"person_id":', text[0], ',"url":"', text[1], '","domain":"', text[2],
        '","timestamp":', text[3], ',"duration_s":', text[4], "}\n", "",
    )  # fmt: skip
    arr = line.combine_chunks() if isinstance(line, pa.ChunkedArray) else line
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[
        arr.offset : arr.offset + len(arr) + 1
    ]
    start, end = int(offsets[0]), int(offsets[-1])
    return bytes(arr.buffers()[2].to_pybytes()[start:end])


def generate(people: int, out: str, seed: int = 0, shape: LogShape | None = None) -> int:
    """Write synthetic browsing logs for ``people`` persons to ``out``; return the rows written."""
    shape = shape or LogShape()
    if people < 1:
        raise ValueError(f"people must be at least 1, received {people}")
    suffix = Path(out).suffix
    if suffix not in (".parquet", ".avro", ".csv", ".jsonl"):
        raise ValueError(
            f"output {out!r}: extension {suffix!r} is not supported; "
            "allowed: .parquet, .avro, .csv, .jsonl"
        )
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    if suffix == ".avro":
        # fastavro consumes the record generator lazily, chunk by chunk.
        def records() -> Iterator[dict[str, Any]]:
            nonlocal rows
            for table in _chunks(people, seed, shape):
                rows += table.num_rows
                yield from table.to_pylist()

        with open(out, "wb") as f:
            fastavro.writer(f, fastavro.parse_schema(_AVRO_SCHEMA), records())
        return rows
    with open(out, "wb") as f:
        writer: Any = None
        if suffix == ".parquet":
            writer = pq.ParquetWriter(f, SCHEMA)
        elif suffix == ".csv":
            writer = pcsv.CSVWriter(f, SCHEMA)
        for table in _chunks(people, seed, shape):
            rows += table.num_rows
            if writer is None:
                f.write(_jsonl(table))
            else:
                writer.write_table(table)
        if writer is not None:
            writer.close()
    return rows
