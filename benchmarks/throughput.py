"""Rows per second of the release job against a plain per-element Beam pipeline and PipelineDP.

On one Parquet file of synthetic browsing logs (``pipelines.generate``, about 24 rows per person;
``--people 1000000`` gives ~24M rows), with the same runner (Beam's FnApiRunner, in memory:
``pipeline_options("direct", {}, [])``), a count per key (``--by url``, the default, or
``domain``), private partitions, ε = 1, δ = 1e-6, L = 5, C = 3:

(a) ``userdp run JOB.toml`` in-process (``pipelines.cli.main``). The time covers the whole command:
    job-file parsing, schema inspection, planning, pipeline construction, the run, the output
    files and the manifest.
(b) what a user would write without userdp: ``ReadFromParquet`` rows (dicts) → (person, key) →
    GroupByKey per person → keep ≤ L keys per person and ≤ C rows per (person, key) in Python →
    (key, kept rows) → CombinePerKey(sum) → collect into one JSON file. No noise.

(b) picks a person's L keys with the same deterministic rule as userdp's bounding (BLAKE2b keyed
with the release's bounding key, combined with splitmix64, ties by key), written here per element
in plain Python; for a count only the number of kept rows per (person, key), min(rows, C),
matters. So (a) with noise off and (b) must give the *same* per-key counts; the script checks
that in an extra, untimed run of (a) with noise off (``--no-check`` skips it).

Each repetition times (a) then (b); the order alternates between repetitions. Reported: every
run (wall seconds by ``time.perf_counter``, and this process's CPU seconds, which other load on a
shared machine disturbs less; FnApiRunner in memory runs the workers in this process), the
**median** and the best over the repetitions; the headline ratio uses the wall-time medians.
A warm-up run of each on a tiny file comes first, so one-time costs (imports, the first runner
start) are not timed.

Then each runs once more as a whole process of its own (interpreter start and imports included)
with its peak RSS (``os.wait4``): (a) ``userdp run``, (b), and with ``--pipelinedp PYTHON``
PipelineDP 0.3.1's ``private_beam.Count`` on the same file and parameters
(``benchmarks/pipelinedp_count.py``, in that interpreter; minutes on large files).

Usage: python benchmarks/throughput.py [--people N] [--repeat R] [--data DIR] [--no-check]
                                       [--by url|domain] [--pipelinedp PYTHON]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow.parquet as pq
from apache_beam.transforms import combiners

from userdp.pipelines.cli import main as userdp_main
from userdp.pipelines.config import load_job
from userdp.pipelines.generate import generate
from userdp.pipelines.job import run_release
from userdp.pipelines.runners import pipeline_options
from userdp.transforms.mechanisms.rng import ReleaseKey

PERSON = "person_id"
BY = {"column": "url"}  # the partition column: --by url (default) or domain
L, C = 5, 3
MIN_ROWS = 1_500_000
SEED = 0
QUERY = "visits_per_key"
# The noise-off check needs (a) and (b) to use the same bounding key; the timed (a) runs draw a
# fresh release secret, as `userdp run` does.
CHECK_KEY = ReleaseKey(bytes(range(32)))

JOB_TOML = """\
[input]
path = {data!r}
person = "{person}"

[budget]
epsilon = 1.0
delta = 1e-6

[runner]
name = "direct"
options = {{ }}

[output]
path = {out!r}
format = "parquet"

[[queries]]
name = "{query}"
metric = "count"
by = ["{by}"]
max_partitions_per_person = {L}
max_rows_per_partition = {C}
partitions = "private"
"""

# --- (b): the per-element pipeline --------------------------------------------------------------

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class BoundPerson(beam.DoFn):
    """(person, its domains) → (domain, kept rows) for at most L domains, at most C rows each.

    A person's domains are ranked by a keyed hash of (person, domain) — the rule of
    ``transforms.bounding`` (BLAKE2b-64 keyed per value, splitmix64 mix, ties by domain) — and the
    first L kept. Hashes of domains are cached per DoFn instance, as a careful user would.
    """

    def __init__(self, key: bytes, max_partitions: int, max_rows: int, by: str) -> None:
        self._key, self._by = key, by
        self._max_partitions = max_partitions
        self._max_rows = max_rows
        self._domain_hash: dict[str, int] = {}

    def _hash(self, tag: bytes, text: str) -> int:
        h = hashlib.blake2b(tag + b"\x00" + b"s" + text.encode(), key=self._key, digest_size=8)
        return int.from_bytes(h.digest(), "little")

    def process(self, element: tuple[Any, Iterable[str]]) -> Iterator[tuple[str, int]]:
        person, domains = element
        rows = Counter(domains)
        person_hash = self._hash(b"person", str(person))
        ranked = []
        for domain in rows:
            dh = self._domain_hash.get(domain)
            if dh is None:
                dh = self._domain_hash[domain] = self._hash(b"by:" + self._by.encode(), domain)
            ranked.append((_splitmix64(person_hash ^ _splitmix64(dh)), domain))
        ranked.sort()
        for _, domain in ranked[: self._max_partitions]:
            yield domain, min(rows[domain], self._max_rows)


def _write_counts(counts: list[tuple[str, int]], path: str) -> None:
    with open(path, "w") as f:
        json.dump(dict(sorted(counts)), f)


def run_plain(data: str, out: str, key: bytes) -> None:
    """(b): the per-element Beam pipeline, on the runner ``userdp run`` uses for ``direct``."""
    runner, options = pipeline_options("direct", {}, [])
    by = BY["column"]
    with beam.Pipeline(runner=runner, options=options) as p:
        _ = (
            p
            | "Read" >> beam.io.ReadFromParquet(data, columns=[PERSON, by])
            | "KeyByPerson" >> beam.Map(lambda row: (row[PERSON], row[by]))
            | "GroupByPerson" >> beam.GroupByKey()
            | "Bound" >> beam.ParDo(BoundPerson(key, L, C, by))
            | "SumPerDomain" >> beam.CombinePerKey(sum)
            | "Collect" >> combiners.ToList()
            | "Write" >> beam.Map(_write_counts, out)
        )


def read_plain(out: str) -> dict[str, int]:
    with open(out) as f:
        counts: dict[str, int] = json.load(f)
    return counts


# --- (a): userdp run -----------------------------------------------------------------------------


def write_job(work: Path, data: str, release: str) -> Path:
    job = work / "job.toml"
    text = JOB_TOML.format(
        data=data, out=release, person=PERSON, by=BY["column"], query=QUERY, L=L, C=C
    )
    job.write_text(text)
    return job


def run_userdp(job: Path) -> None:
    """(a): ``userdp run JOB.toml``, in-process; its summary and progress lines are swallowed."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        status = userdp_main(["run", str(job)])
    if status != 0:
        raise RuntimeError(f"userdp run {job} exited with status {status}")


def read_release(release: str) -> dict[str, float]:
    """The released values per key: one file, or the directory of shards of a large input."""
    path = os.path.join(release, QUERY + ".parquet")
    table = pq.read_table(path if os.path.exists(path) else os.path.join(release, QUERY))
    keys, values = table.column(BY["column"]).to_pylist(), table.column("value").to_pylist()
    return dict(zip(keys, values, strict=True))


# --- whole processes: wall time and peak memory ---------------------------------------------------


def child_run(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of a command run as a child process (``os.wait4``)."""
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: a chatty child cannot block
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace")[-3000:]
            raise RuntimeError(f"{' '.join(cmd[:3])} … failed:\n{tail}")
    return wall, usage.ru_maxrss / 1024


def whole_processes(rows: int, work: Path, data: str, pipelinedp: str | None) -> None:
    """One run of each as its own process — imports, planning, the run, the output — with the
    process's peak RSS: (a) ``userdp run``, (b) the per-element pipeline, and PipelineDP's
    ``private_beam.Count`` (``benchmarks/pipelinedp_count.py``) with ``--pipelinedp``."""
    here = Path(__file__).resolve()
    job = write_job(work, data, str(work / "release-child"))
    runs = {
        "(a) userdp run": [str(Path(sys.executable).parent / "userdp"), "run", str(job)],
        "(b) per-element Beam": [sys.executable, str(here), "--only", "plain", "--data-file",
                                 data, "--by", BY["column"], "--out", str(work / "b.json")],
    }  # fmt: skip
    if pipelinedp:
        runs["PipelineDP Count"] = [pipelinedp, str(here.with_name("pipelinedp_count.py")), data,
                                    BY["column"], str(work / "pipelinedp.json")]  # fmt: skip
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"whole process, one run each, count per {BY['column']} ({rows:,} rows; peak RSS of each "
        f"child ≥ this script's {own:,.0f} MiB, which a forked child's ru_maxrss starts from):"
    )
    results = {}
    for name, cmd in runs.items():
        wall, rss = results[name] = child_run(cmd)
        print(f"  {name:<22} {_rate(rows, wall)}   peak RSS {rss:,.0f} MiB")
    ours = results["(a) userdp run"][0]
    for name, (wall, _) in results.items():
        if name != "(a) userdp run":
            print(f"  userdp run is {wall / ours:.1f}x faster than {name}")
    rate = rows / ours
    print(f"target ≥ 1M rows/s whole process: {'met' if rate >= 1e6 else 'NOT met'} ({rate:,.0f})")
    if pipelinedp:
        ratio = results["PipelineDP Count"][0] / ours
        print(f"target ≥ 20x PipelineDP: {'met' if ratio >= 20 else 'NOT met'} ({ratio:.1f}x)")


# --- driver --------------------------------------------------------------------------------------


def ensure_data(people: int, directory: Path) -> tuple[str, int, float]:
    """(path, rows, seconds spent generating — 0 if cached) of the logs for ``people`` persons."""
    path = directory / f"logs-{people}p-seed{SEED}.parquet"
    if path.exists():
        return str(path), pq.ParquetFile(path).metadata.num_rows, 0.0
    start = time.perf_counter()
    tmp = directory / (path.name + ".partial.parquet")
    rows = generate(people, str(tmp), seed=SEED)
    tmp.replace(path)
    return str(path), rows, time.perf_counter() - start


def timed(fn: Any, *args: Any) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of ``fn(*args)``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


@dataclass
class Timings:
    """Wall and CPU seconds of each timed run of (a) and (b)."""

    wall: dict[str, list[float]] = field(default_factory=lambda: {"a": [], "b": []})
    cpu: dict[str, list[float]] = field(default_factory=lambda: {"a": [], "b": []})

    def add(self, which: str, wall: float, cpu: float) -> None:
        self.wall[which].append(wall)
        self.cpu[which].append(cpu)

    def ratio(self, times: dict[str, list[float]], pick: Any = statistics.median) -> float:
        """Speed of (a) over speed of (b) = time of (b) / time of (a), of ``pick`` per side."""
        return float(pick(times["b"]) / pick(times["a"]))


def _rate(rows: int, seconds: float) -> str:
    return f"{seconds:7.2f} s {rows / seconds:>11,.0f} rows/s"


def time_runs(rows: int, repeat: int, job: Path, data: str, plain_out: str) -> Timings:
    """``repeat`` timed runs of (a) and (b), alternating which goes first; prints each."""
    key = ReleaseKey.generate().subkey("bounding")
    t = Timings()
    for r in range(repeat):
        for which in ("a", "b") if r % 2 == 0 else ("b", "a"):
            if which == "a":
                t.add("a", *timed(run_userdp, job))
            else:
                t.add("b", *timed(run_plain, data, plain_out, key))
        (wa, wb), (ca, cb) = (t.wall["a"][-1], t.wall["b"][-1]), (t.cpu["a"][-1], t.cpu["b"][-1])
        print(
            f"run {r + 1}/{repeat}: (a) userdp run {_rate(rows, wa)} | (b) plain "
            f"{_rate(rows, wb)} | ratio {wb / wa:.2f}x | "
            f"CPU {ca:.2f} s vs {cb:.2f} s: {cb / ca:.2f}x"
        )
    return t


def report(rows: int, t: Timings) -> float:
    """Prints medians, bests and the ratios; returns the wall-time ratio of the medians."""
    n = len(t.wall["a"])
    for name, pick in (("median", statistics.median), ("best", min)):
        a, b = pick(t.wall["a"]), pick(t.wall["b"])
        print(
            f"{name + ' of ' + str(n) + ':':<13}(a) {_rate(rows, a)}   "
            f"(b) {_rate(rows, b)}   ratio {b / a:.2f}x"
        )
    ratio = t.ratio(t.wall)
    print(
        f"speed ratio (a)/(b), wall-time medians: {ratio:.2f}x; CPU-time medians: "
        f"{t.ratio(t.cpu):.2f}x (process CPU seconds, less disturbed by other load)"
    )
    print(f"target (a) >= 5x (b) on wall-time medians: {'met' if ratio >= 5 else 'NOT met'}")
    return ratio


def check(work: Path, data: str, plain_out: str, rows: int) -> bool:
    """Untimed: (a) with noise off and (b), same bounding key, must give the same counts."""
    release = str(work / "release-check")
    run_release(load_job(write_job(work, data, release)), release_key=CHECK_KEY, noise=False)
    exact = {d: int(v) for d, v in read_release(release).items()}
    run_plain(data, plain_out, CHECK_KEY.subkey("bounding"))
    plain = read_plain(plain_out)
    same = exact == plain
    print(
        f"check (untimed; same bounding rule and key), (a) noise off vs (b): per-key counts "
        f"{'identical' if same else 'DIFFERENT'} ({len(exact)} vs {len(plain)} keys; totals "
        f"{sum(exact.values()):,} vs {sum(plain.values()):,} of {rows:,} rows)"
    )
    return same


def benchmark(
    people: int, repeat: int, data_dir: Path | None, do_check: bool, pipelinedp: str | None = None
) -> float:
    """Runs and prints everything; returns the speed ratio (a)/(b) of the wall-time medians."""
    with tempfile.TemporaryDirectory(prefix="userdp-bench-") as tmp:
        work = Path(tmp)
        data, rows, gen_s = ensure_data(people, data_dir or work)
        made = f"generated in {gen_s:.1f} s" if gen_s else "cached"
        print(f"data: {data} ({rows:,} rows, {people:,} persons, {made})")
        if rows < MIN_ROWS:
            print(f"note: {rows:,} rows is below the issue's {MIN_ROWS:,}; use more --people")
        # Whole processes first: a child's ru_maxrss starts at its parent's RSS when forked
        # (Linux), so they run while this process is still small (its RSS is printed).
        whole_processes(rows, work, data, pipelinedp)
        warm = work / "warm"  # warm-up on a tiny file: first-run costs are not timed
        warm.mkdir()
        tiny, _, _ = ensure_data(200, warm)
        run_userdp(write_job(warm, tiny, str(warm / "release")))
        run_plain(tiny, str(warm / "plain.json"), CHECK_KEY.subkey("bounding"))

        release, plain_out = str(work / "release"), str(work / "plain.json")
        timings = time_runs(rows, repeat, write_job(work, data, release), data, plain_out)
        noisy, plain = read_release(release), read_plain(plain_out)
        print(
            f"last timed outputs: (a) {len(noisy)} keys released, noisy total "
            f"{sum(noisy.values()):,.0f}; (b) {len(plain)} keys, total {sum(plain.values()):,}"
        )
        ratio = report(rows, timings)
        if do_check and not check(work, data, plain_out, rows):
            raise SystemExit("check failed: (a) with noise off and (b) disagree")
        return ratio


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--people", type=int, default=100_000, help="persons to generate (100000)")
    p.add_argument("--repeat", type=int, default=3, help="repetitions of (a) and (b) (3)")
    p.add_argument("--data", type=Path, help="cache directory for the generated Parquet file")
    p.add_argument("--no-check", action="store_true", help="skip the untimed noise-off check")
    p.add_argument("--by", choices=["url", "domain"], default="url", help="partition column (url)")
    p.add_argument(
        "--pipelinedp",
        metavar="PYTHON",
        help="an interpreter with pipeline-dp installed: also time PipelineDP's Count (minutes)",
    )
    p.add_argument("--only", choices=["plain"], help=argparse.SUPPRESS)  # (b) as a child
    p.add_argument("--data-file", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    BY["column"] = args.by
    if args.people < 1 or args.repeat < 1:
        p.error("--people and --repeat must be at least 1")
    if args.data is not None:
        args.data.mkdir(parents=True, exist_ok=True)
    return args


def main(argv: list[str] | None = None) -> float:
    args = parse_args(argv)
    if args.only == "plain":  # the child of whole_processes
        run_plain(args.data_file, args.out, ReleaseKey.generate().subkey("bounding"))
        return 0.0
    return benchmark(args.people, args.repeat, args.data, not args.no_check, args.pipelinedp)


if __name__ == "__main__":
    main()
