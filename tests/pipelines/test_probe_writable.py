"""The launcher's write probe, when scheduled runs probe the same new directory at once.

Each launcher writes and deletes a probe file of its own name in the directory, or, when the
directory does not exist yet, in its nearest existing ancestor. An earlier probe created the
missing directories and removed them again: a second launcher could lose the directory under
its feet (about 45% of 1,200 probes from 4 processes failed, before retries), and Beam's
``create`` re-made a removed directory that nobody then removed (four launchers left one behind
in each of 10 trials).
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
    """Another launcher (or the operator) removes the directory between the probe's choice of it
    and its file: the probe tries again, now in the nearest existing ancestor, and leaves no
    trace."""
    target = tmp_path / "ops" / "rejected"
    target.mkdir(parents=True)
    create, lost = FileSystems.create, []

    def another_launcher_removes_it(path: str, *args: Any, **kwargs: Any) -> Any:
        if not lost:  # the first attempt loses its directory to a concurrent removal
            lost.append(path)
            os.rmdir(target)
            raise FileNotFoundError(2, "No such file or directory")
        return create(path, *args, **kwargs)

    monkeypatch.setattr(FileSystems, "create", another_launcher_removes_it)
    probe_writable(str(target), "input.dead_letter")
    assert len(lost) == 1 and os.path.dirname(lost[0]) == str(target)
    assert list((tmp_path / "ops").iterdir()) == []  # no probe file, no directory made


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


def _probe_many(directory: str, n: int) -> list[str]:
    failures = []
    for _ in range(n):
        try:
            probe_writable(directory, "input.dead_letter")
        except OutputLocationError as e:
            failures.append(str(e))
    return failures


def test_four_launchers_probing_one_new_directory_all_succeed_and_leave_no_trace(
    tmp_path: Path,
) -> None:
    directory = str(tmp_path / "shared" / "ops" / "rejected")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        failures = pool.starmap(_probe_many, [(directory, 100)] * 4)
    assert failures == [[], [], [], []]
    assert list(tmp_path.iterdir()) == []  # no directory made, none left behind


def test_a_missing_directory_is_probed_in_its_nearest_existing_ancestor(tmp_path: Path) -> None:
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "keep.txt").write_text("the operator's\n")
    seen: list[str] = []
    create = FileSystems.create

    def record(path: str, *args: Any, **kwargs: Any) -> Any:
        seen.append(path)
        return create(path, *args, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(FileSystems, "create", record)
        probe_writable(str(tmp_path / "ops" / "rejected" / "today"), "input.dead_letter")
    assert [os.path.dirname(p) for p in seen] == [str(tmp_path / "ops")]
    assert sorted(p.name for p in (tmp_path / "ops").iterdir()) == ["keep.txt"]


def test_a_path_under_a_regular_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a file, not a directory\n")
    with pytest.raises(OutputLocationError, match=r"input.dead_letter .* cannot be written"):
        probe_writable(str(tmp_path / "notes.txt" / "rejected"), "input.dead_letter")
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_missing_directory_whose_name_is_too_long_is_refused(tmp_path: Path) -> None:
    """The probe is written in the existing ancestor, so it would pass; the directory could then
    not be made — after the charge. Its name is checked against the filesystem's limit."""
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    ok = tmp_path / ("a" * limit) / "rejected"
    probe_writable(str(ok), "input.dead_letter")  # at the limit: fine
    too_long = tmp_path / "ops" / ("é" * (limit // 2 + 1)) / "rejected"  # > limit in bytes
    with pytest.raises(OutputLocationError, match=r"input.dead_letter .* \(File name too long\)"):
        probe_writable(str(too_long), "input.dead_letter")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["gcs://bucket/release", "foo://host/x", "hdfs://nn/release"])
def test_a_scheme_no_installed_filesystem_serves_is_an_output_location_error(path: str) -> None:
    """Was exit 1 ("a bug in userdp"): FileSystems.join raised before the probe's try."""
    with pytest.raises(OutputLocationError, match=r"no Beam filesystem for this scheme here"):
        probe_writable(path, "output.path")


def test_an_output_whose_staging_name_is_too_long_is_refused(tmp_path: Path) -> None:
    """The staging directory's name is the output's plus 29 bytes: an output name of 240 bytes
    passed every probe and failed where the staging directory was made, after the charge."""
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    publish.check_staging_name(str(tmp_path / "release" / ("a" * (limit - 29))))  # fits
    too_long = tmp_path / "release" / ("a" * (limit - 28))
    with pytest.raises(OutputLocationError, match=r"staging directory's name \(\d+ bytes"):
        publish.check_staging_name(str(too_long))
    assert list(tmp_path.iterdir()) == []
