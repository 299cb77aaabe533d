"""The launcher's write probe, when scheduled runs probe the same new directory at once.

Each launcher creates a missing directory, writes and deletes a probe file, and removes the
directories it created. A second launcher probing the same directory could lose it under its
feet (the first one's removal) and fail a legitimate run with exit 2 — about 45% of 1,200 probes
from 4 processes did, before the probe used its own file name and tried again.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest
from apache_beam.io.filesystems import FileSystems

from userdp.pipelines import publish
from userdp.pipelines.publish import OutputLocationError, probe_writable


def test_a_directory_removed_under_the_probe_is_probed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "ops" / "rejected"
    create, lost = FileSystems.create, []

    def another_launcher_removes_it(path: str, *args: Any, **kwargs: Any) -> Any:
        if not lost:  # the first attempt loses its directory to a concurrent removal
            lost.append(path)
            os.rmdir(target)
            raise FileNotFoundError(2, "No such file or directory")
        return create(path, *args, **kwargs)

    monkeypatch.setattr(FileSystems, "create", another_launcher_removes_it)
    probe_writable(str(target), "input.dead_letter")
    assert len(lost) == 1 and not (tmp_path / "ops").exists()  # no trace left


def test_a_directory_that_stays_unwritable_is_refused_after_the_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = []

    def always_gone(path: str, *args: Any, **kwargs: Any) -> Any:
        attempts.append(path)
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(FileSystems, "create", always_gone)
    with pytest.raises(OutputLocationError, match=r"output.path .* cannot be written \(No such"):
        probe_writable(str(tmp_path / "release"), "output.path")
    assert len(attempts) == publish.PROBE_ATTEMPTS
    assert len(set(attempts)) == publish.PROBE_ATTEMPTS  # each attempt its own probe file


def _probe_many(directory: str, n: int) -> int:
    failures = 0
    for _ in range(n):
        try:
            probe_writable(directory, "input.dead_letter")
        except OutputLocationError:
            failures += 1
    return failures


def test_four_launchers_probing_one_new_directory_all_succeed(tmp_path: Path) -> None:
    directory = str(tmp_path / "shared" / "ops" / "rejected")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        failures = pool.starmap(_probe_many, [(directory, 100)] * 4)
    assert failures == [0, 0, 0, 0]


@pytest.mark.parametrize("path", ["gcs://bucket/release", "foo://host/x", "hdfs://nn/release"])
def test_a_scheme_no_installed_filesystem_serves_is_an_output_location_error(path: str) -> None:
    """Was exit 1 ("a bug in userdp"): FileSystems.join raised before the probe's try."""
    with pytest.raises(OutputLocationError, match=r"no Beam filesystem for this scheme here"):
        probe_writable(path, "output.path")
