"""Dead letters are raw private rows: on a local filesystem only their owner may read them.

Beam's text sink creates files with the process umask (0644 under the usual 022), so before this
a rejected row holding a person id sat world-readable in ``ops/rejected/`` while the operator log,
key files and the ledger were 0600. Now a missing dead-letter directory is created 0700 before the
run and every ``dead_letter-*`` file is made 0600 after it, whether the run succeeded or failed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stats_helpers import TEST_SECRET
from userdp.pipelines.config import ConfigError, parse_job
from userdp.pipelines.dead_letters import make_private_directory, restrict_dead_letters
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    """The umask most machines run with: files 0644, directories 0755 unless chosen."""
    saved = os.umask(0o022)
    yield
    os.umask(saved)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def csv_job(root: Path, dead: Path) -> dict[str, object]:
    (root / "data").mkdir(parents=True)
    rows = ["person_id,domain", *(f"{i},a.example" for i in range(30)), ",secret-domain"]
    (root / "data" / "d.csv").write_text("\n".join(rows) + "\n")
    return {
        "input": {"path": str(root / "data" / "*.csv"), "format": "csv", "person": "person_id",
                  "dead_letter": str(dead)},
        "budget": {"epsilon": 1.0, "delta": 1e-6},
        "output": {"path": str(root / "release")},
        "queries": [{"name": "n", "metric": "count", "by": ["domain"],
                     "max_partitions_per_person": 1, "max_rows_per_partition": 1}],
    }  # fmt: skip


def test_a_run_leaves_its_rejected_rows_readable_by_the_owner_only(tmp_path: Path) -> None:
    dead = tmp_path / "ops" / "rejected"
    cfg = parse_job(csv_job(tmp_path, dead))
    run_release(cfg, release_key=ReleaseKey(TEST_SECRET), num_shards=1)
    files = sorted(dead.glob("dead_letter-*"))
    assert files and "secret-domain" in "".join(f.read_text() for f in files)  # the row is there
    assert mode(dead) == 0o700
    assert [mode(f) for f in files] == [0o600] * len(files)
    assert mode(tmp_path / "ops") == 0o755  # only the directory userdp writes is closed
    assert mode(next((tmp_path / "release").glob("n.*"))) == 0o644  # the release is public


def test_the_checks_make_the_dead_letter_directory_owner_only_and_keep_it(tmp_path: Path) -> None:
    """Before, the write probe made a missing directory with the umask's mode and removed it; a
    concurrent launcher could find it there (0755: not made private) or lose it to the removal
    (recreated 0755 by Beam). Made 0700 by the checks and kept, it is private whoever is first."""
    from userdp.pipelines.job import check_job  # noqa: PLC0415

    dead = tmp_path / "ops" / "rejected"
    check_job(parse_job(csv_job(tmp_path, dead)), [])
    assert dead.is_dir() and mode(dead) == 0o700 and list(dead.iterdir()) == []


def test_an_existing_directory_keeps_its_mode_and_its_files_are_closed(tmp_path: Path) -> None:
    dead = tmp_path / "shared-ops"
    dead.mkdir(mode=0o750)
    (dead / "dead_letter-old.jsonl").write_text("{}\n")
    (dead / "notes.txt").write_text("the operator's own file\n")
    make_private_directory(str(dead))
    assert mode(dead) == 0o750  # the operator chose it (a group of operators, say)
    restrict_dead_letters(str(dead))
    assert mode(dead / "dead_letter-old.jsonl") == 0o600
    assert mode(dead / "notes.txt") == 0o644  # not a dead letter: left alone


def test_remote_paths_and_no_path_are_left_to_their_store(tmp_path: Path) -> None:
    for path in (None, "", "gs://bucket/ops/rejected"):
        make_private_directory(path)  # nothing to create locally, nothing raised
        restrict_dead_letters(path)
    assert list(tmp_path.iterdir()) == []


def test_a_pattern_that_matches_the_dead_letters_is_refused_before_the_charge(
    tmp_path: Path,
) -> None:
    """Dead letters in data/ and input data/*: the second run would read the first run's
    rejected rows as input. The files the pattern matched are checked before the charge."""
    job = csv_job(tmp_path, tmp_path / "data")
    job["input"]["path"] = str(tmp_path / "data" / "*")  # type: ignore[index]
    cfg = parse_job(job)
    run_release(cfg, release_key=ReleaseKey(TEST_SECRET), num_shards=1)  # nothing there yet
    assert list((tmp_path / "data").glob("dead_letter-*"))
    with pytest.raises(ConfigError, match=r"other than the dead letters.* would read the rejected"):
        run_release(cfg, release_key=ReleaseKey(TEST_SECRET), num_shards=1)
    job["input"]["path"] = str(tmp_path / "data" / "*.csv")  # type: ignore[index]
    run_release(parse_job(job), release_key=ReleaseKey(TEST_SECRET), num_shards=1)  # fine
