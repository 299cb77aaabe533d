"""The demo job on a portable runner whose parts are separate processes, as on Flink or Dataflow.

Beam's job service (``local_job_service_main``) and an external worker pool (``worker_pool_main``)
run as their own processes on loopback; ``userdp run`` submits the demo job to the service with
``environment_type = "EXTERNAL"``, and the pool starts each SDK worker as a new Python process. So
the job graph is pickled and shipped, nothing is shared with the launcher's memory, and each worker
sets itself up from the graph alone. The release must be byte-identical to the Direct runner's
under the same secret — with sharded outputs, so the shard files are compared too. This is the
closest local stand-in for Flink (docs/runners.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import userdp.pipelines.job
from userdp.pipelines import cli
from userdp.pipelines.demo import DEMO_JOB
from userdp.pipelines.generate import generate
from userdp.pipelines.verify import verify_release

SECRET = bytes(range(7, 39))  # a fixed test secret, never a real release's
SHARDED_DEMO = DEMO_JOB.replace('format = "parquet"\n', 'format = "parquet"\nshards = 3\n', 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def wait_for(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the service exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("localhost", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"nothing listens on port {port} after 60 s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int, Path]]:
    """(job service port, worker pool port, their logs): two processes, each in its own process
    group so the SDK workers the pool starts are stopped with it."""
    logs = tmp_path_factory.mktemp("services")
    env = dict(os.environ)  # the pool starts workers as `python`: this interpreter's
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    job_port, pool_port = free_port(), free_port()
    commands = {
        job_port: ["apache_beam.runners.portability.local_job_service_main", "--port"],
        pool_port: ["apache_beam.runners.worker.worker_pool_main", "--service_port"],
    }
    started = []
    try:
        for port, (module, flag) in commands.items():
            log = logs / f"{module.rsplit('.', 1)[-1]}.log"
            with log.open("wb") as out:
                p = subprocess.Popen(
                    [sys.executable, "-m", module, flag, str(port)],
                    stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                )  # fmt: skip
            started.append(p)
            wait_for(port, p, log)
        yield job_port, pool_port, logs
    finally:
        for p in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)


def release(
    directory: Path, data: Path, monkeypatch: pytest.MonkeyPatch, runner: str
) -> dict[str, object]:
    directory.mkdir(parents=True)
    job = SHARDED_DEMO.replace('"data/*.parquet"', f'"{data.as_posix()}"') + runner
    (directory / "job.toml").write_text(job)
    monkeypatch.setattr(userdp.pipelines.job, "new_release_secret", lambda: SECRET)
    assert cli.main(["run", str(directory / "job.toml")]) == 0
    out = directory / "release"
    assert verify_release(str(out)) == []
    files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}
    dead = sorted(
        line for f in (directory / "ops").rglob("*.jsonl") for line in f.read_text().splitlines()
    )
    return {"files": files, "dead": dead}


def test_the_demo_job_on_separate_job_service_and_worker_processes_gives_the_same_bytes(
    services: tuple[int, int, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data" / "logs.parquet"
    generate(2000, str(data), seed=0)
    direct = release(tmp_path / "direct", data, monkeypatch, "")
    job_port, pool_port, logs = services
    portable = release(
        tmp_path / "portable",
        data,
        monkeypatch,
        '\n[runner]\nname = "portable"\noptions = { '
        f'job_endpoint = "localhost:{job_port}", environment_type = "EXTERNAL", '
        f'environment_config = "localhost:{pool_port}" }}\n',
    )
    assert portable == direct
    assert len([f for f in direct["files"] if f.startswith("visits_per_domain/part-")]) == 3
    # not vacuous: the pool started SDK worker processes for this job
    assert "Starting worker with command" in (logs / "worker_pool_main.log").read_text()
