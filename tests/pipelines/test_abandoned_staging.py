"""A run killed outright (SIGKILL) leaves its staging directory; the next run beside the same
release removes it, and never one a live run holds, nor one made a moment ago."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import userdp.pipelines.job
from userdp.pipelines.cli import main
from userdp.pipelines.demo import DEMO_JOB
from userdp.pipelines.generate import generate
from userdp.pipelines.publish import ABANDONED_AFTER_S, Staging, remove_abandoned_staging


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def staging_dirs(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".userdp-staging-" in p.name)


def test_a_killed_runs_staging_is_removed_by_the_next_and_a_live_ones_kept(
    tmp_path: Path,
) -> None:
    release = tmp_path / "release"
    # a launcher that made its staging directory and was killed before it could remove it
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from userdp.pipelines.publish import Staging
            s = Staging.create({str(release)!r})
            open(s.staged("q.parquet"), "wb").write(b"staged")
            print(s.path, flush=True)
            time.sleep(600)
        """)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert child.stdout is not None
    killed = Path(child.stdout.readline().strip())
    live = Staging.create(str(release))  # this process: alive, holds its lock
    assert remove_abandoned_staging(str(release)) == []  # both held (and young)
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert remove_abandoned_staging(str(release)) == []  # dead, but made a moment ago
    for p in (killed, Path(live.path)):
        age(p, ABANDONED_AFTER_S + 5)
    other = tmp_path / ".other.userdp-staging-abc"  # another release's: not ours to touch
    other.mkdir()
    age(other, 3600)
    after = Staging.create(str(release))  # a new run removes the dead run's directory
    assert not killed.exists()
    assert staging_dirs(tmp_path) == sorted(
        [Path(live.path).name, Path(after.path).name, other.name]
    )
    live.discard()
    after.discard()
    live.discard()  # idempotent: the lock's descriptor is closed once
    assert staging_dirs(tmp_path) == [other.name]


def test_object_store_outputs_are_left_alone() -> None:
    assert remove_abandoned_staging("gs://bucket/release/") == []


def test_the_embedded_runners_staging_is_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Staged outputs are noisy answers whose charge a failed run takes back: on a local disk
    with the embedded runner the directory is 0700 whatever the umask, so no other user reads
    an answer nobody paid for. Other runners' workers may be another user: left as made."""
    old = os.umask(0o022)
    try:
        private = Staging.create(str(tmp_path / "release"), private=True)
        shared = Staging.create(str(tmp_path / "release"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(private.path).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(shared.path).st_mode) == 0o755
    seen = []
    original = userdp.pipelines.job._run_into_staging

    def run(job: Any, c: Any, keys: Any, staging: Staging, *a: Any, **k: Any) -> Any:
        seen.append(stat.S_IMODE(os.stat(staging.path).st_mode))
        return original(job, c, keys, staging, *a, **k)

    monkeypatch.setattr(userdp.pipelines.job, "_run_into_staging", run)
    generate(200, str(tmp_path / "data" / "logs.parquet"), seed=1)
    (tmp_path / "job.toml").write_text(DEMO_JOB)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "job.toml"]) == 0
    assert seen == [0o700]
