"""A run killed outright (SIGKILL) leaves its staging directory; the next run beside the same
release removes it, and never one a live run holds, nor one made a moment ago."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

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
