"""Peak memory and wall time of one release as the input grows: Direct vs separate worker processes.

The release is a count of visits per url (L = 5, C = 3, private partitions, ε = 1, δ = 10⁻⁶) over
a synthetic browsing log (``pipelines.generate``, about 24 rows per person) of about 1.5M, 15M
and 45M rows (``--rows`` to choose). Each size runs ``userdp run`` as a child process:

* ``direct``: Beam's FnApiRunner in memory — the launcher *is* the only worker, so its peak RSS
  is the pipeline's (``os.wait4`` of the child);
* ``multi-process``: the portable runner against a job service and an external worker pool, each
  its own process (as in ``tests/pipelines/test_multiprocess_runner.py``, the local stand-in for
  Flink); the pool starts each SDK worker as a new process. Peak RSS is read from each process's
  ``/proc/<pid>/status`` (VmHWM), sampled every 0.2 s until it exits: the launcher, the job service
  (which runs the runner's shuffles and holds their data, as Flink's task managers would) and the
  largest SDK worker. Beam's local job service runs one SDK worker whatever the options say
  (``FnApiRunner.run_via_runner_api`` does not read ``direct_num_workers``).

Person shards follow the input's size (``pipelines.release_graph.default_shards``: at most 64 MiB
of input per shard), so a worker's share of the data stays bounded as the input grows. Printed per
size: rows, input bytes, person shards, wall seconds and the peaks; then the growth of each peak
between the smallest and the largest input beside the growth of the input.

Usage: python benchmarks/scale.py [--rows 1.5e6,15e6,45e6] [--data DIR] [--skip-multiprocess]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

ROWS_PER_PERSON = 23.7  # pipelines.generate, measured: 23,727,307 rows for 1,000,000 persons
JOB = """\
[input]
path = "{data}"
person = "person_id"

[budget]
epsilon = 1.0
delta = 1e-6

[output]
path = "release/"
format = "parquet"

[[queries]]
name = "visits_per_url"
metric = "count"
by = ["url"]
max_partitions_per_person = 5
max_rows_per_partition = 3
{runner}"""
USERDP = str(Path(sys.executable).parent / "userdp")


def ensure_log(rows: float, directory: Path) -> tuple[Path, int]:
    """A cached synthetic log of about ``rows`` rows: (path, exact rows)."""
    import pyarrow.parquet as pq  # noqa: PLC0415

    people = max(1, round(rows / ROWS_PER_PERSON))
    path = directory / f"logs-{people}.parquet"
    if not path.exists():
        subprocess.run(
            [USERDP, "generate", "--people", str(people), "--out", str(path)],
            check=True,
            capture_output=True,
        )
    return path, pq.ParquetFile(path).metadata.num_rows


def vm_hwm_kib(pid: int) -> int | None:
    """Peak resident set of a live process (Linux), or None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def children_of(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


class PeakSampler:
    """Samples VmHWM of the named processes (and the pool's children) until stopped."""

    def __init__(self, pids: dict[str, int], pool: int | None) -> None:
        self.pids, self.pool = dict(pids), pool
        self.peaks: dict[str, int] = {}
        self.workers: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, pid in self.pids.items():
                if (kib := vm_hwm_kib(pid)) is not None:
                    self.peaks[name] = max(self.peaks.get(name, 0), kib)
            for pid in children_of(self.pool) if self.pool else []:
                if (kib := vm_hwm_kib(pid)) is not None:
                    self.workers[pid] = max(self.workers.get(pid, 0), kib)
            time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_cluster(logs: Path) -> Any:
    """A job service and a worker pool as separate processes: (job port, pool port, pids)."""
    env = dict(
        os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    )
    ports = {"job": free_port(), "pool": free_port()}
    modules = {
        "job": ["apache_beam.runners.portability.local_job_service_main", "--port"],
        "pool": ["apache_beam.runners.worker.worker_pool_main", "--service_port"],
    }
    procs = {}
    try:
        for name, (module, flag) in modules.items():
            with (logs / f"{name}.log").open("wb") as out:
                procs[name] = subprocess.Popen(
                    [sys.executable, "-m", module, flag, str(ports[name])],
                    stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                )  # fmt: skip
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(("localhost", ports[name]), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or procs[name].poll() is not None:
                        raise RuntimeError(f"{module} did not start: see {logs}") from None
                    time.sleep(0.2)
        yield ports["job"], ports["pool"], {n: p.pid for n, p in procs.items()}
    finally:
        for p in procs.values():
            with suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def run_release(workdir: Path, data: Path, runner: str, cluster: Any = None) -> dict[str, Any]:
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / "job.toml").write_text(JOB.format(data=data.as_posix(), runner=runner))
    start = time.perf_counter()
    child = subprocess.Popen(
        [USERDP, "run", str(workdir / "job.toml")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    pids = {"launcher": child.pid}
    if cluster is not None:
        pids["job service"] = cluster[2]["job"]
    with PeakSampler(pids, cluster[2]["pool"] if cluster else None) as sampler:
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    err = child.stderr.read().decode() if child.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"userdp run failed:\n{err[-3000:]}")
    peaks = dict(sampler.peaks)
    peaks["launcher"] = max(peaks.get("launcher", 0), usage.ru_maxrss)
    if sampler.workers:
        peaks["largest worker"] = max(sampler.workers.values())
        peaks["workers"] = len(sampler.workers)
    return {"wall": wall, "peaks": peaks}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1.5e6,15e6,45e6")
    ap.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "userdp-scale")
    ap.add_argument("--skip-multiprocess", action="store_true")
    args = ap.parse_args()
    from apache_beam.options.pipeline_options import PipelineOptions  # noqa: PLC0415

    from userdp.pipelines.release_graph import default_shards  # noqa: PLC0415

    args.data.mkdir(parents=True, exist_ok=True)
    sizes = [float(x) for x in args.rows.split(",")]
    results: list[dict[str, Any]] = []
    import resource  # noqa: PLC0415

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        "count per url, L = 5, C = 3, private partitions; peak RSS in MiB (the launcher's is at "
        f"least this script's {own:.0f} MiB: a forked child's ru_maxrss starts from it)"
    )
    head = (
        f"{'rows':>12} {'input MiB':>9} {'shards':>6} {'runner':<14} {'wall s':>7} {'rows/s':>10}"
    )
    print(head + "  peak RSS (MiB)")
    for rows in sizes:
        data, exact = ensure_log(rows, args.data)
        size = data.stat().st_size
        shards = default_shards("direct", PipelineOptions([]), size)
        runs = {"direct": run_release(args.data / "work-direct", data, "")}
        if not args.skip_multiprocess:
            with local_cluster(args.data) as cluster:
                runner = (
                    '\n[runner]\nname = "portable"\noptions = { '
                    f'job_endpoint = "localhost:{cluster[0]}", environment_type = "EXTERNAL", '
                    f'environment_config = "localhost:{cluster[1]}" }}\n'
                )
                runs["multi-process"] = run_release(args.data / "work-mp", data, runner, cluster)
        for name, r in runs.items():
            peaks = ", ".join(
                f"{k} {v}" if k == "workers" else f"{k} {v / 1024:.0f}"
                for k, v in r["peaks"].items()
            )
            print(
                f"{exact:>12,} {size / 2**20:>9.0f} {shards:>6} {name:<14} {r['wall']:>7.1f} "
                f"{exact / r['wall']:>10,.0f}  {peaks}"
            )
            results.append({"rows": exact, "bytes": size, "runner": name, **r})
    first, last = results[0]["rows"], results[-1]["rows"]
    if first != last:
        print(f"\ngrowth from {first:,} to {last:,} rows: input × {last / first:.1f}")
        for runner in ("direct", "multi-process"):
            rs = [r for r in results if r["runner"] == runner]
            if len(rs) < 2:
                continue
            for key in rs[-1]["peaks"]:
                if key != "workers" and key in rs[0]["peaks"]:
                    g = rs[-1]["peaks"][key] / rs[0]["peaks"][key]
                    print(f"  {runner:<14} {key:<15} peak RSS × {g:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
