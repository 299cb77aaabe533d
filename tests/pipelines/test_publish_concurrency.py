"""Launchers publishing into one release directory at once end with one complete release.

Six scheduled runs with new ids writing the same ``output.path`` left, in about one round of
eight, one release's manifest beside another's files ("differs from the manifest"). Publishing
now holds an exclusive lock on the directory while it moves files in and writes the manifest.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from apache_beam.io.filesystems import FileSystems

from userdp.pipelines.output_layout import query_files
from userdp.pipelines.publish import Staging
from userdp.pipelines.verify import verify_release


def _staged(out: Path, names: list[str], content: bytes) -> tuple[Staging, Any, bytes]:
    layout = query_files([(n, True, None) for n in names], ".csv", 2)
    staging = Staging.create(str(out))
    for files in layout.values():
        for f in files.files:
            Path(staging.staged(f)).parent.mkdir(parents=True, exist_ok=True)
            Path(staging.staged(f)).write_bytes(content + f.encode())
    manifest = {
        "userdp_version": "test",
        "queries": names,
        "outputs": {n: f.output for n, f in layout.items()},
        "files": staging.file_facts(layout),
    }
    return staging, layout, json.dumps(manifest).encode()


def test_concurrent_publishes_leave_one_complete_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first publisher pauses after its first file until the second is moving files too (or
    0.5 s pass): without the lock they interleave every time, with it the second waits."""
    out = tmp_path / "release"
    rename = FileSystems.rename
    second_moving = threading.Event()
    first = threading.local()

    def rename_in_turn(*args: Any, **kwargs: Any) -> Any:
        done = rename(*args, **kwargs)
        if threading.current_thread().name == "first" and not getattr(first, "paused", False):
            first.paused = True
            second_moving.wait(timeout=0.5)
        elif threading.current_thread().name == "second":
            second_moving.set()
        return done

    monkeypatch.setattr(FileSystems, "rename", rename_in_turn)
    runs = [_staged(out, ["a", "b"], b"1"), _staged(out, ["b", "c"], b"2")]
    threads = [
        threading.Thread(target=s.publish, args=(layout, m), name=name)
        for (s, layout, m), name in zip(runs, ["first", "second"], strict=True)
    ]
    threads[0].start()
    time.sleep(0.1)  # the first holds the directory (or is moving files) before the second
    threads[1].start()
    for t in threads:
        t.join()
    assert verify_release(str(out)) == []
    assert json.loads((out / "manifest.json").read_text())["queries"] == ["b", "c"]
