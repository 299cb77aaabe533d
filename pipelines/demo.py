"""``userdp demo``: a whole release on a small synthetic browsing log, on the Direct runner.

It does what a user does on day one — generate a log, write a job file, plan, run — in a working
directory, then prints each released table with every value beside its noise's standard deviation
and the budget the manifest says was spent. The job is ``examples/browsing_job.toml`` plus a
global distinct-person count; it is a string here, so the demo also works from an installed wheel.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TextIO

import pyarrow as pa

from .config import load_job
from .generate import generate
from .plan import plan_release
from .plan_text import print_plan

DEMO_JOB = """\
# The demo's job: per-domain statistics of a synthetic browsing log (userdp demo wrote this file).
[input]
path = "data/*.parquet"
person = "person_id"
dead_letter = "ops/rejected/"

[budget]
epsilon = 1.0
delta = 1e-6

[output]
path = "release/"
format = "parquet"

[[queries]]
name = "visits_per_domain"
metric = "count"
by = ["domain"]
max_partitions_per_person = 5
max_rows_per_partition = 3

[[queries]]
name = "mean_duration_per_domain"
metric = "mean"
by = ["domain"]
value = "duration_s"
bounds = [0.0, 600.0]
max_partitions_per_person = 5
max_rows_per_partition = 3

[[queries]]
name = "persons_total"
metric = "persons"
"""

MAX_ROWS_SHOWN = 12


def run_demo(people: int, workdir: Path, seed: int, out: TextIO) -> Path:
    """Generate, plan, run and print; returns the manifest's path."""
    from .job import run_release  # noqa: PLC0415 (Beam loads only when the demo runs)

    (workdir / "data").mkdir(parents=True, exist_ok=True)
    job_path = workdir / "job.toml"
    job_path.write_text(DEMO_JOB, encoding="utf-8")
    rows = generate(people, str(workdir / "data" / "logs.parquet"), seed=seed)
    out.write(f"generated {rows:,} visit rows for {people:,} persons in {workdir / 'data'}\n")
    out.write(f"job file: {job_path}\n\n")
    job = load_job(job_path)
    plan = plan_release(job)
    print_plan(plan, out)
    out.write("\nrunning the release on the Direct runner…\n")
    result = run_release(job)
    for name, path in result.outputs.items():
        print_release_table(name, read_table(path), out)
    manifest = json.loads(Path(result.manifest).read_text(encoding="utf-8"))
    spent = manifest["spent"]
    out.write(
        f"\nspent ε = {spent['epsilon_exact']}, δ = {spent['delta_exact']} of the total "
        f"{plan.total} (manifest: {result.manifest})\n"
        "Values are noisy by design: a count is within about 2 stddev of its contribution-bounded "
        "true value 95% of the time; a mean's stddev is a delta-method approximation from the "
        "noisy count. Partitions with few persons are not released at all.\n"
    )
    if "report" in manifest:
        page = Path(result.manifest).parent / manifest["report"]["file"]
        out.write(f"the same as a page, with error bars: {page}\n")
    return Path(result.manifest)


def read_table(path: str) -> pa.Table:
    import pyarrow.parquet as pq  # noqa: PLC0415

    return pq.read_table(path)


def print_release_table(name: str, table: pa.Table, out: TextIO) -> None:
    """The released rows, largest values first, with the noise's standard deviation beside."""
    out.write(f"\n{name} ({table.num_rows} released row{'s' * (table.num_rows != 1)})\n")
    rows = sorted(table.to_pylist(), key=lambda r: -float(r["value"]))
    keys = [c for c in table.column_names if c not in ("value", "stddev")]
    width = max([len(" / ".join(keys)), *(len(_key(r, keys)) for r in rows)], default=10)
    out.write(f"  {' / '.join(keys) or '(all)':<{width}}  {'value':>12}  {'stddev':>10}\n")
    for r in rows[:MAX_ROWS_SHOWN]:
        out.write(f"  {_key(r, keys):<{width}}  {r['value']:>12.2f}  {r['stddev']:>10.2f}\n")
    if len(rows) > MAX_ROWS_SHOWN:
        out.write(f"  … {len(rows) - MAX_ROWS_SHOWN} more rows in the output file\n")


def _key(row: dict[str, object], keys: list[str]) -> str:
    return " / ".join(str(row[k]) for k in keys) or "(all)"


def demo(people: int, workdir: str | None, seed: int, out: TextIO) -> Path:
    """Run the demo in ``workdir`` (kept) or in a new temporary directory (also kept: it holds
    the job file and the outputs the demo points at)."""
    path = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="userdp-demo-"))
    return run_demo(people, path, seed, out)
