"""Input fingerprints (paths, sizes, modification times through Beam's FileSystems) and the rule
that maps input files to data periods."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from userdp.pipelines.ledger import InputFile, LedgerError, input_fingerprint, periods_from_paths
from userdp.pipelines.ledger.fingerprint import fingerprint_of


def write(path: Path, data: bytes, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (mtime, mtime))


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    write(tmp_path / "week=2025-W01" / "part-0.parquet", b"abc", 1_700_000_000.25)
    write(tmp_path / "week=2025-W02" / "part-0.parquet", b"defg", 1_700_000_100.5)
    return tmp_path


def test_same_files_same_fingerprint_in_any_order(inputs: Path) -> None:
    a, b = (str(p) for p in sorted(inputs.glob("*/*.parquet")))
    glob = str(inputs / "*" / "*.parquet")
    fp = input_fingerprint(glob)
    assert fp.digest.startswith("sha256:") and len(fp.digest) == 7 + 64
    assert fp.files == (InputFile(a, 3, 1_700_000_000.25), InputFile(b, 4, 1_700_000_100.5))
    assert input_fingerprint([b, a]) == fp == input_fingerprint([a, b, glob])


@pytest.mark.parametrize("change", ["size", "mtime", "new file", "renamed"])
def test_any_change_to_the_listing_changes_the_fingerprint(inputs: Path, change: str) -> None:
    glob = str(inputs / "*" / "*.parquet")
    before = input_fingerprint(glob).digest
    first = inputs / "week=2025-W01" / "part-0.parquet"
    if change == "size":
        write(first, b"abcd", 1_700_000_000.25)  # one more byte, same time
    elif change == "mtime":
        os.utime(first, (1_700_000_000.5, 1_700_000_000.5))  # same bytes, touched
    elif change == "new file":
        write(inputs / "week=2025-W02" / "part-1.parquet", b"", 1_700_000_000.0)
    else:
        first.rename(first.with_name("part-9.parquet"))
    assert input_fingerprint(glob).digest != before


def test_a_path_matching_nothing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match=r"input path '.*nothing-\*\.csv' matched no files"):
        input_fingerprint(str(tmp_path / "nothing-*.csv"))
    with pytest.raises(LedgerError, match="no input paths to fingerprint"):
        input_fingerprint([])


def test_fingerprint_of_object_store_facts() -> None:
    # What FileSystems.match reports for gs:// objects: path, size, update time (new generation).
    one = InputFile("gs://bucket/logs/2025-W01.parquet", 10, 1_700_000_000.0)
    newer = InputFile("gs://bucket/logs/2025-W01.parquet", 10, 1_700_000_001.0)
    assert fingerprint_of([one]).digest != fingerprint_of([newer]).digest
    assert fingerprint_of([one, one]) == fingerprint_of([one])


def test_periods_from_paths(inputs: Path) -> None:
    files = [str(p) for p in inputs.glob("*/*.parquet")]
    rule = r"week=(?P<period>\d{4}-W\d{2})"
    assert periods_from_paths(files + files, rule) == ("2025-W01", "2025-W02")
    assert periods_from_paths(["logs/2025-W03.csv"], r"\d{4}-W\d{2}") == ("2025-W03",)
    with pytest.raises(
        LedgerError,
        match=r"input file other/x\.parquet does not match the period "
        r"rule .* or its data would be read without being charged",
    ):
        periods_from_paths([*files, "other/x.parquet"], rule)
    with pytest.raises(ValueError, match="period of a/b c must be 1-200 of"):
        periods_from_paths(["a/b c"], r"b c")
