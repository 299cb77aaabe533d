"""A small job with one query of every family, on a small synthetic log: for wiring tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from userdp.pipelines.generate import generate


def write_small_job(tmp: Path, people: int = 60) -> dict[str, Any]:
    """Writes ``tmp/data/logs.parquet`` and a public key file; returns the job table (relative
    paths: parse it with ``base_dir=tmp``)."""
    (tmp / "data").mkdir(parents=True, exist_ok=True)
    generate(people, str(tmp / "data" / "logs.parquet"), seed=1)
    (tmp / "domains.csv").write_text("domain\n" + "".join(f"site0{i}.example\n" for i in range(5)))
    return {
        "input": {"path": "data/*.parquet", "person": "person_id"},
        "budget": {"epsilon": 8.0, "delta": 1e-6},
        "output": {"path": "release/"},
        "queries": [
            {"name": "visits", "metric": "count", "by": ["domain"],
             "max_partitions_per_person": 3, "max_rows_per_partition": 2},
            {"name": "mean_duration", "metric": "mean", "by": ["domain"], "value": "duration_s",
             "bounds": [0.0, 600.0], "max_partitions_per_person": 3,
             "max_rows_per_partition": 2, "partitions": "domains.csv"},
            {"name": "total_visits", "metric": "total", "upper": 1048576},
            {"name": "median_duration", "metric": "median", "per_person": "mean",
             "value": "duration_s", "bounds": [0.0, 600.0]},
            {"name": "top_domain", "metric": "top_partition", "by": ["domain"]},
            {"name": "p90", "metric": "sample_aggregate",
             "function": "userdp.pipelines.example_functions:visit_duration_p90",
             "columns": ["duration_s"], "range": [0.0, 1000.0], "chunks": 10,
             "aggregator": "median"},
        ],
    }  # fmt: skip
