"""Wall time of one count-per-domain release: userdp's library (dicts, Arrow) against PipelineDP.

On one Parquet file of synthetic browsing logs (``pipelines.generate``, ≥ 1.5M rows by default,
cached in ``--data-dir``), with the same runner (Beam's ``FnApiRunner``, in memory, in the
calling process: what ``runner="DirectRunner"`` falls back to for batch pipelines after it has
tried Prism — named directly, so no run depends on whether Prism can be downloaded), three paths
each release visits per domain with private partitions, ε = 1, δ = 1e-6, L = 5 domains per person,
C = 3 rows per (person, domain):

(1) ``dicts``: userdp's library on Python dicts: ``ReadFromParquet`` → ``release.ByPerson(...)``
    → ``dp.Count(by=["domain"], ...)``;
(2) ``arrow``: the same on Arrow batches: ``ReadFromParquetBatched`` (``pa.Table`` elements);
(3) ``pipelinedp``: PipelineDP's ``private_beam`` (``MakePrivate`` → ``Count`` with Laplace noise,
    ``NaiveBudgetAccountant(total_epsilon=1, total_delta=1e-6)``, private partition selection)
    on ``ReadFromParquet`` dicts.

Every path reads all the file's columns and ends in the same throwaway sink (the number and the
sum of the released values, into a JSON file). The time of a run is the wall time
(``time.perf_counter``) of its whole ``with beam.Pipeline(...) as p:`` block: construction and
run. Before the timed runs, each path runs once, untimed, on the file's first 20,000 rows, so
one-time costs (imports, the first runner start) are not timed.

(1) and (2) run in this process. (3) runs in a child process (``--only pipelinedp``, this same
file) with the interpreter of ``--pipelinedp-python``: PipelineDP pins its own dependencies, so
it may live in a virtualenv of its own. Without the flag, this interpreter is used if it can
import ``pipeline_dp``; otherwise (3) is skipped, with the reason printed.

Reported per run and, with ``--repeat`` > 1, as the median: seconds, rows/s and the number of
released partitions of each path (a check that they did comparable work); then the ratios of the
median times: dicts / PipelineDP, arrow / PipelineDP, arrow / dicts.

Usage: python benchmarks/library.py [--people N] [--repeat R] [--data-dir DIR]
                                    [--pipelinedp-python PATH] [--only dicts|arrow|pipelinedp]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

PERSON, DOMAIN = "person_id", "domain"
L, C = 5, 3
EPSILON, DELTA = 1.0, 1e-6
MIN_ROWS = 1_500_000
SEED = 0
WARMUP_ROWS = 20_000
PATHS = ("dicts", "arrow", "pipelinedp")
LABELS = {
    "dicts": "userdp library, dicts",
    "arrow": "userdp library, Arrow",
    "pipelinedp": "PipelineDP private_beam",
}

# --- the three pipelines -------------------------------------------------------------------------


def _write_summary(values: list[float], path: str) -> None:
    """The throwaway sink: how many partitions were released, and the sum of their values."""
    with open(path, "w") as f:
        json.dump({"partitions": len(values), "total": float(sum(values))}, f)


def _sink(released: Any, value: Callable[[Any], float], out: str) -> None:
    _ = (
        released
        | "Value" >> beam.Map(value)
        | "Collect" >> beam.combiners.ToList()
        | "Summary" >> beam.Map(_write_summary, out)
    )


def run_userdp(data: str, out: str, *, arrow: bool) -> None:
    """(1) or (2): userdp's library, reading dicts or Arrow batches."""
    import userdp.transforms as dp  # noqa: PLC0415 (not needed by the PipelineDP child)

    release = dp.Release(dp.Budget(epsilon=EPSILON, delta=DELTA))
    read = beam.io.ReadFromParquetBatched(data) if arrow else beam.io.ReadFromParquet(data)
    with beam.Pipeline(runner=FnApiRunner()) as p:
        rows = p | "Read" >> read
        people = rows | release.ByPerson(
            PERSON, person_type="int", keys={DOMAIN: "string"}, values=[]
        )
        visits = people | "visits" >> dp.Count(
            by=[DOMAIN], max_partitions_per_person=L, max_rows_per_partition=C,
            epsilon=EPSILON, delta=DELTA,
        )  # fmt: skip
        _sink(visits, lambda row: row.value, out)


def run_pipelinedp(data: str, out: str) -> None:
    """(3): PipelineDP's private_beam Count, reading dicts."""
    import pipeline_dp  # noqa: PLC0415 (maybe only in the child's interpreter)
    from pipeline_dp import private_beam  # noqa: PLC0415

    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=DELTA)
    params = pipeline_dp.CountParams(
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        max_partitions_contributed=L,
        max_contributions_per_partition=C,
        partition_extractor=lambda r: r[DOMAIN],
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        rows = p | "Read" >> beam.io.ReadFromParquet(data)
        private = rows | "MakePrivate" >> private_beam.MakePrivate(
            budget_accountant=accountant, privacy_id_extractor=lambda r: r[PERSON]
        )
        counts = private | "Count" >> private_beam.Count(params)  # private partition selection
        accountant.compute_budgets()
        _sink(counts, lambda kv: kv[1], out)


def run_path(path: str, data: str, out: str) -> None:
    if path == "pipelinedp":
        run_pipelinedp(data, out)
    else:
        run_userdp(data, out, arrow=path == "arrow")


# --- timing --------------------------------------------------------------------------------------


@dataclass
class Runs:
    """Wall seconds and released partitions of each timed run of one path."""

    seconds: list[float] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    totals: list[float] = field(default_factory=list)

    def median(self) -> float:
        return float(statistics.median(self.seconds))


def time_path(path: str, data: str, warmup: str | None, repeat: int) -> Runs:
    """``repeat`` timed runs of ``path`` in this process, after one untimed run on ``warmup``."""
    runs = Runs()
    with tempfile.TemporaryDirectory(prefix="userdp-bench-") as tmp:
        out = str(Path(tmp) / "summary.json")
        if warmup is not None:
            run_path(path, warmup, out)
        for _ in range(repeat):
            start = time.perf_counter()
            run_path(path, data, out)
            runs.seconds.append(time.perf_counter() - start)
            summary = json.loads(Path(out).read_text())
            runs.partitions.append(summary["partitions"])
            runs.totals.append(summary["total"])
    return runs


def pipelinedp_versions() -> dict[str, str]:
    from importlib.metadata import version  # noqa: PLC0415

    return {
        "pipeline-dp": version("pipeline-dp"),
        "python-dp": version("python-dp"),
        "apache-beam": beam.__version__,
        "python": platform.python_version(),
    }


def pipelinedp_python(given: str | None) -> tuple[str | None, str]:
    """(interpreter for the PipelineDP child, or None to skip, and why it was chosen or not)."""
    if given is not None:
        check = subprocess.run(
            [given, "-c", "import pipeline_dp"], capture_output=True, text=True, check=False
        )
        if check.returncode != 0:
            last = (check.stderr.strip().splitlines() or ["?"])[-1]
            return None, f"{given} cannot import pipeline_dp ({last})"
        return given, f"--pipelinedp-python {given}"
    if importlib.util.find_spec("pipeline_dp") is None:
        return None, f"{sys.executable} cannot import pipeline_dp; give --pipelinedp-python PATH"
    return sys.executable, f"this interpreter, {sys.executable}"


def time_pipelinedp(python: str, data: str, warmup: str | None, repeat: int) -> Runs:
    """The PipelineDP runs, in a child process of ``python`` running this file."""
    with tempfile.TemporaryDirectory(prefix="userdp-bench-pdp-") as tmp:
        result = Path(tmp) / "result.json"
        cmd = [python, __file__, "--only", "pipelinedp", "--data-file", data]
        cmd += ["--repeat", str(repeat), "--result", str(result)]
        cmd += ["--warmup-file", warmup] if warmup is not None else ["--no-warmup"]
        subprocess.run(cmd, check=True)
        got = json.loads(result.read_text())
    print(f"PipelineDP child: {' '.join(f'{k} {v}' for k, v in got['versions'].items())}")
    return Runs(got["seconds"], got["partitions"], got["totals"])


# --- data ----------------------------------------------------------------------------------------


def ensure_data(people: int, directory: Path) -> tuple[str, int, float]:
    """(path, rows, seconds generating) of the logs for ``people`` persons: throughput.py's cache.

    Imported here, not at the top: the PipelineDP child runs this file in a virtualenv without
    userdp, and ``throughput`` imports userdp. Same cache, so both benchmarks read one file.
    """
    from throughput import ensure_data as cached_logs  # noqa: PLC0415 (benchmarks/ is sys.path[0])

    return cached_logs(people, directory)


def ensure_warmup(data: str) -> str:
    """The first ``WARMUP_ROWS`` rows of ``data``, next to it (made once)."""
    src = Path(data)
    path = src.with_name(f"warmup-{WARMUP_ROWS}-{src.name}")
    if not path.exists():
        first = next(pq.ParquetFile(src).iter_batches(batch_size=WARMUP_ROWS))
        tmp = path.with_name(path.name + ".partial")
        pq.write_table(pa.Table.from_batches([first]), tmp)
        tmp.replace(path)
    return str(path)


# --- report --------------------------------------------------------------------------------------


def _rate(rows: int, seconds: float) -> str:
    return f"{seconds:8.2f} s {rows / seconds:>11,.0f} rows/s"


def report(rows: int, runs: dict[str, Runs]) -> None:
    if not runs:
        print("nothing timed")
        return
    repeat = max(len(r.seconds) for r in runs.values())
    for i in range(repeat):
        print(f"run {i + 1}/{repeat}:")
        for path, r in runs.items():
            print(
                f"  {LABELS[path]:<25}{_rate(rows, r.seconds[i])}   "
                f"{r.partitions[i]:>4} partitions released, noisy total {r.totals[i]:>12,.0f}"
            )
    if repeat > 1:
        print(f"median of {repeat}:")
        for path, r in runs.items():
            print(f"  {LABELS[path]:<25}{_rate(rows, r.median())}")
    pick = "median " if repeat > 1 else ""
    pairs = [("dicts", "pipelinedp"), ("arrow", "pipelinedp"), ("arrow", "dicts")]
    for a, b in pairs:
        if a in runs and b in runs:
            ratio = runs[a].median() / runs[b].median()
            print(
                f"{pick}time {a} / {b}: {ratio:.3f} ({a} is {1 / ratio:.2f}x "
                f"{'faster' if ratio < 1 else 'slower'} than {b})"
            )


# --- driver --------------------------------------------------------------------------------------


def child(args: argparse.Namespace) -> None:
    """``--result``: run the one path ``--only``, write its timings as JSON (for the parent)."""
    runs = time_path(args.only, args.data_file, args.warmup_file, args.repeat)
    result = {"seconds": runs.seconds, "partitions": runs.partitions, "totals": runs.totals}
    result["versions"] = pipelinedp_versions() if args.only == "pipelinedp" else {}
    Path(args.result).write_text(json.dumps(result))


def benchmark(args: argparse.Namespace) -> None:
    if args.data_file is not None:
        data, rows, made = args.data_file, pq.ParquetFile(args.data_file).metadata.num_rows, "given"
    else:
        data, rows, gen_s = ensure_data(args.people, args.data_dir)
        made = f"{args.people:,} persons, " + (f"generated in {gen_s:.1f} s" if gen_s else "cached")
    print(f"data: {data} ({rows:,} rows, {made}); FnApiRunner, Beam {beam.__version__}")
    if rows < MIN_ROWS:
        print(f"note: {rows:,} rows is below {MIN_ROWS:,}; use more --people")
    warmup = None if args.no_warmup else args.warmup_file or ensure_warmup(data)

    runs: dict[str, Runs] = {}
    for path in (args.only,) if args.only else PATHS:
        if path != "pipelinedp":
            runs[path] = time_path(path, data, warmup, args.repeat)
            continue
        python, why = pipelinedp_python(args.pipelinedp_python)
        if python is None:
            print(f"PipelineDP skipped: {why}")
            continue
        print(f"PipelineDP: {why}")
        runs[path] = time_pipelinedp(python, data, warmup, args.repeat)
    report(rows, runs)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--people", type=int, default=100_000, help="persons to generate (100000)")
    p.add_argument("--repeat", type=int, default=1, help="timed runs of each path (1)")
    p.add_argument(
        "--data-dir", type=Path, default=Path("/tmp/userdp_bench"),
        help="cache directory for the generated Parquet file (/tmp/userdp_bench)",
    )  # fmt: skip
    p.add_argument("--data-file", help="time on this Parquet file instead of a generated one")
    p.add_argument("--pipelinedp-python", help="interpreter that can import pipeline_dp")
    p.add_argument("--only", choices=PATHS, help="time one path only")
    p.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up runs")
    p.add_argument("--warmup-file", help=argparse.SUPPRESS)  # given to the PipelineDP child
    p.add_argument("--result", help=argparse.SUPPRESS)  # the child writes its timings here
    args = p.parse_args(argv)
    if args.people < 1 or args.repeat < 1:
        p.error("--people and --repeat must be at least 1")
    if args.result is not None and (args.only is None or args.data_file is None):
        p.error("--result needs --only and --data-file")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.result is not None:
        child(args)
    else:
        benchmark(args)


if __name__ == "__main__":
    main()
