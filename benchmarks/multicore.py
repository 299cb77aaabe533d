"""Speed-up of the Direct runner's multi_processing mode over in_memory on the throughput workload.

Workload: a synthetic browsing log from ``pipelines.generate`` (≥ 1.5M rows by default, one Parquet
file) and one query, visits per domain (count by ``domain``, L = 5, C = 3, private partitions),
run through ``run_release`` — read, validate, shard by person, bound, aggregate, noisy combine,
write. Each mode runs ``--repeats`` times; the best wall-clock time of each is reported (the least
disturbed by other load), with rows/s and the speed-up in_memory / multi_processing. Both modes use
the same release secret, and the benchmark checks that they wrote byte-identical releases.

Usage: python benchmarks/multicore.py [--people N] [--workers W] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from userdp.pipelines.config import parse_job
from userdp.pipelines.generate import generate
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey


def _job(data: Path, out: Path, options: dict[str, object]) -> dict[str, object]:
    return {
        "input": {"path": str(data), "person": "person_id"},
        "budget": {"epsilon": 1.0, "delta": 1e-6},
        "runner": {"name": "direct", "options": options},
        "output": {"path": str(out)},
        "queries": [
            {
                "name": "visits_per_domain",
                "metric": "count",
                "by": ["domain"],
                "max_partitions_per_person": 5,
                "max_rows_per_partition": 3,
            }
        ],
    }


def _time(job: dict[str, object], base: Path, key: ReleaseKey) -> tuple[float, bytes]:
    config = parse_job(job, base_dir=base)
    start = time.perf_counter()
    result = run_release(config, release_key=key)
    seconds = time.perf_counter() - start
    return seconds, Path(result.outputs["visits_per_domain"]).read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=75_000, help="persons to generate")
    parser.add_argument("--workers", type=int, default=2, help="multi_processing workers")
    parser.add_argument("--repeats", type=int, default=2, help="runs per mode (best is kept)")
    args = parser.parse_args()
    key = ReleaseKey.generate()  # one secret for both modes, so their outputs can be compared
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        data = base / "logs.parquet"
        rows = generate(args.people, str(data), seed=1)
        groups = pq.read_metadata(data).num_row_groups
        print(f"workload: {rows:,} rows, {args.people:,} persons, {groups} row groups; ", end="")
        print(f"{os.cpu_count()} cores; count by domain")
        modes = {
            "in_memory": {"direct_running_mode": "in_memory"},
            f"multi_processing x{args.workers}": {
                "direct_running_mode": "multi_processing",
                "direct_num_workers": args.workers,
            },
        }
        best: dict[str, float] = {}
        outputs: dict[str, bytes] = {}
        for run in range(args.repeats):
            for mode, options in modes.items():
                out = base / f"release-{mode.split()[0]}-{run}"
                seconds, outputs[mode] = _time(_job(data, out, options), base, key)
                best[mode] = min(best.get(mode, seconds), seconds)
                print(
                    f"  run {run + 1} {mode:>20}: {seconds:7.2f} s  {rows / seconds:>12,.0f} rows/s"
                )
        (single, multi), (m1, m2) = best.values(), outputs.values()
        print(f"best: in_memory {single:.2f} s, multi_processing {multi:.2f} s; ", end="")
        print(f"speed-up {single / multi:.2f}x; releases byte-identical: {m1 == m2}")


if __name__ == "__main__":
    main()
