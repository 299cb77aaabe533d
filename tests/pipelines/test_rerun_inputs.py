"""A free re-run under the ledger must publish the same bytes, or nothing (issue 12, item 3).

A re-run of a release id draws the same noise (the ledger keeps the secret). If anything that
shapes the released values changed in between — the public-key file, the source of a
sample-and-aggregate function, userdp's own code, the release key file — the same noise would
be added to a different statistic and the difference of the two outputs would be the exact change.
So every one of them is in the ledger's fingerprint: editing any one makes the re-run a refused
ledger conflict (exit 3), found before the pipeline runs, and the published release is untouched.
The last line of defence is checked too: a re-run whose manifest differs although its fingerprint
did not (a blind spot, simulated) is refused before publishing, and the old release stays.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

import userdp.pipelines.charging
import userdp.pipelines.job
import userdp.pipelines.ledger
import userdp.pipelines.publish
import userdp.pipelines.release_inputs
from userdp.pipelines.cli import main
from userdp.pipelines.generate import generate

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

FUNCTION_MODULE = "userdp_rerun_fns"
HELPER_MODULE = "userdp_rerun_helper"
FUNCTION_SOURCE = f"""
import numpy as np

from {HELPER_MODULE} import durations


def mean_duration(table):
    return float(np.mean(durations(table)))
"""
HELPER_SOURCE = """
import numpy as np


def durations(table):
    return np.asarray(table.column("duration_s").to_numpy(), dtype=float)
"""

JOB = f"""
[input]
path = "data/*.parquet"
person = "person_id"

[budget]
epsilon = 2.0

[output]
path = "release/"

[release]
secret_path = "keys/release.key"

[ledger]
path = "ledger.sqlite"
scope = "logs"
release_id = "weekly-1"

[[queries]]
name = "visits"
metric = "count"
by = ["domain"]
partitions = "domains.csv"
max_partitions_per_person = 2
max_rows_per_partition = 3

[[queries]]
name = "mean_duration"
metric = "sample_aggregate"
function = "{FUNCTION_MODULE}:mean_duration"
columns = ["duration_s"]
range = [0.0, 600.0]
chunks = 10
aggregator = "mean"
"""


@pytest.fixture
def published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A job directory with one release published under the ledger."""
    (tmp_path / "data").mkdir()
    generate(120, str(tmp_path / "data" / "logs.parquet"), seed=3)
    (tmp_path / "domains.csv").write_text("domain\nsite00.example\nsite01.example\n")
    (tmp_path / "fns").mkdir()
    (tmp_path / "fns" / f"{FUNCTION_MODULE}.py").write_text(FUNCTION_SOURCE)
    (tmp_path / "fns" / f"{HELPER_MODULE}.py").write_text(HELPER_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "fns"))
    monkeypatch.delitem(sys.modules, FUNCTION_MODULE, raising=False)
    monkeypatch.delitem(sys.modules, HELPER_MODULE, raising=False)
    (tmp_path / "keys").mkdir()
    assert main(["keygen", str(tmp_path / "keys" / "release.key")]) == 0
    (tmp_path / "job.toml").write_text(JOB)
    ledger = str(tmp_path / "ledger.sqlite")
    assert (
        main(["ledger", "set-cap", "--ledger", ledger, "--scope", "logs", "--epsilon", "10"]) == 0
    )
    assert main(["run", str(tmp_path / "job.toml")]) == 0
    return tmp_path


def release_files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "release").iterdir())}


def siblings(root: Path) -> list[str]:
    """Everything beside the release directory: a staging directory left behind would show."""
    return sorted(p.name for p in root.iterdir())


def test_an_unchanged_rerun_is_free_and_byte_identical(
    published: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The control: without an edit the re-run goes through (so the refusals below are real)."""
    before = release_files(published)
    capsys.readouterr()
    assert main(["run", str(published / "job.toml")]) == 0
    assert "re-run: nothing charged" in capsys.readouterr().out
    assert release_files(published) == before


def _edit_key_file(root: Path, mp: pytest.MonkeyPatch) -> None:
    (root / "domains.csv").write_text("domain\nsite00.example\nsite02.example\n")


def _edit_function_source(root: Path, mp: pytest.MonkeyPatch) -> None:
    source = FUNCTION_SOURCE.replace("np.mean(", "np.median(")
    (root / "fns" / f"{FUNCTION_MODULE}.py").write_text(source)
    mp.delitem(sys.modules, FUNCTION_MODULE, raising=False)


def _edit_imported_helper(root: Path, mp: pytest.MonkeyPatch) -> None:
    source = HELPER_SOURCE.replace("dtype=float)", "dtype=float) * 2.0")
    (root / "fns" / f"{HELPER_MODULE}.py").write_text(source)
    mp.delitem(sys.modules, FUNCTION_MODULE, raising=False)
    mp.delitem(sys.modules, HELPER_MODULE, raising=False)


def _upgrade_numpy(root: Path, mp: pytest.MonkeyPatch) -> None:
    installed = importlib.metadata.version  # what the function computes with: a new NumPy
    mp.setattr(importlib.metadata, "version", lambda d: "99.0.0" if d == "numpy" else installed(d))


def _upgrade_pyarrow(root: Path, mp: pytest.MonkeyPatch) -> None:
    installed = importlib.metadata.version  # its Parquet files name their writer's version
    mp.setattr(importlib.metadata, "version", lambda d: "99.0" if d == "pyarrow" else installed(d))


def _upgrade_userdp(root: Path, mp: pytest.MonkeyPatch) -> None:
    # a new version or any edited module of transforms/pipelines changes this digest
    mp.setattr(userdp.pipelines.release_inputs, "userdp_code_digest", lambda: "0.2.0 sha256:new")


def _replace_key_file(root: Path, mp: pytest.MonkeyPatch) -> None:
    (root / "keys" / "release.key").unlink()
    assert main(["keygen", str(root / "keys" / "release.key")]) == 0


EDITS = {
    "public key file": _edit_key_file,
    "sample-and-aggregate source": _edit_function_source,
    "a module the function imports": _edit_imported_helper,
    "the NumPy the function calls": _upgrade_numpy,
    "userdp code": _upgrade_userdp,
    "a library userdp writes with": _upgrade_pyarrow,
    "release key file": _replace_key_file,
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_editing_anything_the_release_reads_refuses_the_rerun_before_it_runs(
    edit: str, published: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before, beside = release_files(published), siblings(published)
    EDITS[edit](published, monkeypatch)
    ran = []
    monkeypatch.setattr(userdp.pipelines.job, "build_pipeline", lambda *a, **k: ran.append(1))
    capsys.readouterr()
    assert main(["run", str(published / "job.toml")]) == 3
    err = capsys.readouterr().err
    assert "weekly-1" in err and "Traceback" not in err
    assert ran == []  # refused before the pipeline was built
    assert release_files(published) == before and siblings(published) == beside


def _fingerprint_blind_to_the_key_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change the fingerprint does not see, simulated: the key file's digest is left out."""
    original = userdp.pipelines.release_inputs.release_artifacts

    def blind(*args: object, **kwargs: object) -> dict[str, str]:
        artifacts = original(*args, **kwargs)  # type: ignore[arg-type]
        return {k: v for k, v in artifacts.items() if not k.endswith(".partitions")}

    monkeypatch.setattr(userdp.pipelines.job, "release_artifacts", blind)


def test_a_rerun_whose_outputs_differ_is_refused_before_publishing(
    published: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defence in depth: a change the fingerprint does not see (simulated by hiding the key
    file's digest) still cannot overwrite the release — the manifests are compared first."""
    _fingerprint_blind_to_the_key_file(monkeypatch)
    job = published / "job.toml"
    job.write_text(JOB.replace('"weekly-1"', '"weekly-2"'))  # a new id, fingerprinted blind
    assert main(["run", str(job)]) == 0
    before, beside = release_files(published), siblings(published)
    capsys.readouterr()
    _edit_key_file(published, monkeypatch)
    assert main(["run", str(published / "job.toml")]) == 3  # a ledger conflict
    err = capsys.readouterr().err
    assert "differ from the published ones" in err and "nothing was published" in err
    assert release_files(published) == before and siblings(published) == beside


def test_a_rerun_after_a_crash_while_publishing_is_held_to_the_crashed_runs_bytes(
    published: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run killed half-way through publishing has put some outputs out but recorded no
    manifest. Its re-run used to publish whatever it computed: with a change the fingerprint
    does not see (a module a function imports; simulated by hiding the key file's digest), the
    same noise on a different statistic — the exact difference, for one charge (an audit's
    finding). The ledger now fixes the manifest's hash before any file moves."""
    _fingerprint_blind_to_the_key_file(monkeypatch)
    job = published / "job.toml"
    job.write_text(JOB.replace('"weekly-1"', '"weekly-3"'))
    renames = []
    rename = userdp.pipelines.publish.FileSystems.rename

    def dies_after_one_file(sources: list[str], targets: list[str]) -> None:
        if renames:  # the process dies (an interrupt stands in for SIGKILL) after one output
            raise KeyboardInterrupt
        renames.append(targets)
        rename(sources, targets)

    with monkeypatch.context() as crash:
        crash.setattr(userdp.pipelines.publish.FileSystems, "rename", dies_after_one_file)
        assert main(["run", str(job)]) == 130
    assert "interrupted while publishing" in capsys.readouterr().err
    after_crash = release_files(published)
    assert "manifest.json" not in after_crash  # one output of the crashed run is out
    assert main(["ledger", "history", "--ledger", str(published / "ledger.sqlite")]) == 0
    assert "; publishing began, manifest sha256:" in capsys.readouterr().out
    _edit_key_file(published, monkeypatch)
    assert main(["run", str(job)]) == 3  # the re-run computes another statistic: refused
    err = capsys.readouterr().err
    assert "differ from the published ones" in err and "nothing was published" in err
    assert release_files(published) == after_crash


def test_a_ledger_gone_before_publishing_fails_the_run_and_keeps_the_charge(
    published: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The ledger is asked once more before publishing; unreachable then, the run published
    nothing and its charge stays reserved — exit 1 and how to finish, not exit 3 ("nothing
    ran", a review)."""
    job = published / "job.toml"
    job.write_text(JOB.replace('"weekly-1"', '"weekly-5"'))

    def unreachable(*args: object, **kwargs: object) -> None:
        raise userdp.pipelines.ledger.LedgerError("could not connect to the ledger database")

    before = release_files(published)
    with monkeypatch.context() as down:
        down.setattr(userdp.pipelines.charging, "begin_publishing", unreachable)
        capsys.readouterr()
        assert main(["run", str(job)]) == 1
    err = capsys.readouterr().err
    assert "the ledger could not record the release's manifest before publishing" in err
    assert "nothing was published" in err and "re-run with --release-id weekly-5" in err
    assert release_files(published) == before
    assert main(["run", str(job)]) == 0  # the ledger is back: the re-run finishes it for free
    assert "re-run: nothing charged" in capsys.readouterr().out


def test_a_ledger_gone_after_publishing_says_the_release_is_out(
    published: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Published, but the ledger could not record it: exit 1 saying so (it was exit 3, which
    means "refused, nothing ran"), and a re-run of the id records it for free."""
    job = published / "job.toml"
    job.write_text(JOB.replace('"weekly-1"', '"weekly-6"'))

    def unreachable(*args: object, **kwargs: object) -> None:
        raise userdp.pipelines.ledger.LedgerError("database is locked")

    with monkeypatch.context() as down:
        down.setattr(userdp.pipelines.charging, "complete", unreachable)
        capsys.readouterr()
        assert main(["run", str(job)]) == 1
    err = capsys.readouterr().err
    assert "release/, but the ledger could not record it (database is locked)" in err
    assert "re-run with --release-id weekly-6" in err
    assert main(["run", str(job)]) == 0  # records the completed release, nothing charged
    assert "re-run: nothing charged" in capsys.readouterr().out
