"""Reading Parquet files of many small row groups: joined reads against one read per group.

Workload: a synthetic browsing log from ``pipelines.generate`` written again with row groups of
``--sizes`` rows, and one query (visits per domain: count by ``domain``, L = 5, C = 3, private
partitions) run through ``run_release`` on the Direct runner. Each file is read twice: with the
default split (consecutive row groups joined into reads of at most ``SPAN_ROWS`` rows,
``input_files.row_group_spans``) and with ``SPAN_ROWS = 1``, one read per row group — the split
userdp used before. Both use the same release secret; the benchmark checks that they wrote
byte-identical releases. Prints the wall time of each (best of ``--repeats``) and their ratio.

Usage: python benchmarks/row_groups.py [--people N] [--sizes 100,1000,10000] [--repeats R]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from userdp.pipelines import input_files
from userdp.pipelines.config import parse_job
from userdp.pipelines.generate import generate
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey


def _job(data: Path, out: Path) -> dict[str, object]:
    query = {
        "name": "visits_per_domain",
        "metric": "count",
        "by": ["domain"],
        "max_partitions_per_person": 5,
        "max_rows_per_partition": 3,
    }
    return {
        "input": {"path": str(data), "person": "person_id"},
        "budget": {"epsilon": 1.0, "delta": 1e-6},
        "output": {"path": str(out)},
        "queries": [query],
    }


def _best(
    data: Path, base: Path, key: ReleaseKey, span_rows: int, repeats: int
) -> tuple[float, bytes]:
    saved, input_files.SPAN_ROWS = input_files.SPAN_ROWS, span_rows
    try:
        best, out = float("inf"), b""
        for run in range(repeats):
            target = base / f"release-{data.stem}-{span_rows}-{run}"
            config = parse_job(_job(data, target), base_dir=base)
            start = time.perf_counter()
            result = run_release(config, release_key=key)
            best = min(best, time.perf_counter() - start)
            out = Path(result.outputs["visits_per_domain"]).read_bytes()
        return best, out
    finally:
        input_files.SPAN_ROWS = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=500, help="persons to generate (500)")
    parser.add_argument("--sizes", default="100,1000,10000", help="rows per row group")
    parser.add_argument("--repeats", type=int, default=2, help="runs per setting (best is kept)")
    args = parser.parse_args()
    key = ReleaseKey.generate()  # one secret for every run, so their outputs can be compared
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        source = base / "logs.parquet"
        rows = generate(args.people, str(source), seed=1)
        table = pq.read_table(source)
        print(f"workload: {rows:,} rows, {args.people:,} persons; count by domain, Direct runner")
        head = ("rows/group", "groups", "joined", "one per group", "ratio")
        print("{:>10} {:>7} {:>9} {:>14} {:>6}  same".format(*head))
        for size in (int(s) for s in args.sizes.split(",")):
            data = base / f"groups-{size}.parquet"
            pq.write_table(table, data, row_group_size=size)
            groups = pq.read_metadata(data).num_row_groups
            joined, a = _best(data, base, key, input_files.SPAN_ROWS, args.repeats)
            single, b = _best(data, base, key, 1, args.repeats)
            print(
                f"{size:>10,} {groups:>7,} {joined:>8.2f}s {single:>13.2f}s "
                f"{single / joined:>6.1f}  {a == b}"
            )


if __name__ == "__main__":
    main()
