"""What sharing one partition selection saves on the demo job (``userdp demo``'s job file).

The demo job releases a count and a mean per domain (private partitions, L = 5, C = 3) and a
global person count, ε = 1, δ = 10^-6 split evenly. Its two per-domain queries have the same
``by`` and L, so they share one selection (pipelines/kinds/shared_selection.py). This script runs
the job ``--runs`` times with distinct secrets, twice per secret: as planned (shared) and with the
grouping switched off (each query its own selection, as before), on the same generated log, and
compares with the contribution-bounded truth (the same job with the noise switched off through the
test hook, under the same secret: which rows bounding keeps depends on it):

* partitions released per query (mean over runs), and the runs in which the two queries released
  different key sets;
* median |released − bounded truth| of the count and of the mean, over the partitions both modes
  released under the same secret (so a mode is not penalised for releasing smaller partitions).

Usage: python benchmarks/shared_selection.py [--people 5000] [--runs 20]
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import statistics
import tempfile
from pathlib import Path
from unittest import mock

import pyarrow.parquet as pq

from userdp.pipelines import plan as plan_module
from userdp.pipelines.config import load_job
from userdp.pipelines.demo import DEMO_JOB
from userdp.pipelines.generate import generate
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey

COUNT, MEAN = "visits_per_domain", "mean_duration_per_domain"


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")  # nan: no partition in both modes


def _release(
    workdir: Path, key: ReleaseKey, *, shared: bool, noise: bool = True
) -> dict[str, dict[str, float]]:
    job = load_job(workdir / "job.toml")
    out = Path(job.output.path)
    for f in out.glob("*"):
        f.unlink()
    with mock.patch.object(
        plan_module, "group_selections", plan_module.group_selections if shared else lambda *a: {}
    ):
        run_release(job, release_key=key, noise=noise, num_shards=8)
    return {
        name: dict(zip(t.column("domain").to_pylist(), t.column("value").to_pylist(), strict=True))
        for name in (COUNT, MEAN)
        for t in [pq.read_table(out / f"{name}.parquet")]
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--people", type=int, default=5_000)  # the demo's default
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    # run_release outside the CLI logs to this console: Beam warns of every empty dead-letter
    # write ("No shards found to finalize"), two lines a run (the CLI sends them to its log)
    logging.getLogger("apache_beam.io.filebasedsink").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "job.toml").write_text(DEMO_JOB, encoding="utf-8")
        rows = generate(args.people, str(work / "data" / "logs.parquet"), seed=1)
        print(f"demo job, {args.people:,} persons, {rows:,} rows, {args.runs} runs per mode")
        modes = {False: "own selections  ", True: "shared selection"}
        kept = {(m, n): [] for m in modes for n in (COUNT, MEAN)}  # type: ignore[var-annotated]
        errors = {(m, n): [] for m in modes for n in (COUNT, MEAN)}  # type: ignore[var-annotated]
        differ = dict.fromkeys(modes, 0)
        for i in range(args.runs):
            secret = hashlib.sha256(f"userdp.benchmark.shared_selection.{i}".encode()).digest()
            key = ReleaseKey(secret)
            outs = {m: _release(work, key, shared=m) for m in modes}
            # noise off, same secret (bounding is keyed by it): the bounded truth, every domain
            truth = _release(work, key, shared=True, noise=False)
            for m, out in outs.items():
                differ[m] += set(out[COUNT]) != set(out[MEAN])
            for name in (COUNT, MEAN):
                both = set(outs[False][name]) & set(outs[True][name])  # compared like for like
                for m, out in outs.items():
                    kept[m, name].append(len(out[name]))
                    errors[m, name] += [abs(out[name][k] - truth[name][k]) for k in both]
        for m, label in modes.items():
            print(
                f"{label}  partitions released: count {statistics.mean(kept[m, COUNT]):5.1f}, "
                f"mean {statistics.mean(kept[m, MEAN]):5.1f}; runs with two key sets "
                f"{differ[m]}/{args.runs}; median |error| where both modes released: count "
                f"{_median(errors[m, COUNT]):6.2f}, mean {_median(errors[m, MEAN]):5.2f}"
            )


if __name__ == "__main__":
    main()
