"""`userdp plan`: prints the split and the noise without data; exit 2 on a bad job file."""

from __future__ import annotations

import json
import logging
import math
import os
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.pipelines.test_config import EXAMPLE
from userdp.pipelines import cli
from userdp.pipelines.cli import COMMANDS, main
from userdp.pipelines.config import load_job
from userdp.pipelines.entry import main as entry_main
from userdp.pipelines.entry import print_summary
from userdp.pipelines.plan import plan_release

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

ROOT = EXAMPLE.parents[1]


def test_plan_prints_split_mechanisms_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "budget: total (ε=1, δ=1e-06); spent (ε=1, δ=1e-06)" in out
    assert "visits_per_domain: share (ε=0.5, δ=5e-07)\n  count by domain\n" in out
    assert "selection: shared, selection[domain;L=5] (below)" in out
    assert "count: Laplace ε=0.375, L1 sens 15" in out and "95% error ±119.8" in out
    assert "selection[domain;L=5]: share (ε=0.25, δ=1e-06)" in out
    assert "shared by visits_per_domain, mean_duration_per_domain" in out
    assert "GaussianThresholding, keeps a partition with ≥ 203 persons half the time" in out
    assert (
        "mean_duration_per_domain: share" in out
        and "  mean by domain\n" in out
        and "rows: stddev" in out
    )


def test_plan_bad_job_exits_2_with_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "job.toml"
    bad.write_text(EXAMPLE.read_text().replace("[0.0, 600.0]", "[600.0, 0.0]"))
    assert main(["plan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "queries[1].bounds = [600.0, 0.0]: expected [lower, upper]" in err
    assert str(bad) in err


def test_unknown_commands_are_refused_by_argparse() -> None:
    assert {"plan", "run", "generate", "demo"} <= set(COMMANDS)
    with pytest.raises(SystemExit) as e:
        main(["publish"])
    assert e.value.code == 2


def test_version_prints_the_two_facts_a_manifest_records(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    manifest = plan_release(load_job(EXAMPLE)).to_manifest()
    assert lines == [
        f"userdp_version {manifest['userdp_version']}",
        f"userdp_code {manifest['userdp_code']}",
    ]
    assert lines[1].startswith("userdp_code ") and " sha256:" in lines[1]


def test_demo_generates_runs_and_prints_each_table_with_its_stddev(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--people", "400", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    manifest = json.loads((tmp_path / "release" / "manifest.json").read_text())
    assert manifest["spent"] == manifest["total"]
    for name, file in manifest["outputs"].items():
        table = pq.read_table(tmp_path / "release" / file)
        rows = f"{table.num_rows} released row" + "s" * (table.num_rows != 1)
        assert f"{name} ({rows})" in out
        values = table.column("value").to_pylist()
        assert all(math.isfinite(v) for v in values)
        if values:  # the largest released value is printed beside its stddev
            top = max(table.to_pylist(), key=lambda r: r["value"])
            assert f"{top['value']:>12.2f}  {top['stddev']:>10.2f}" in out
    assert "budget: total (ε=1, δ=1e-06)" in out  # the plan is shown first
    assert main(["demo", "--people", "0"]) == 2


def test_generate_then_run_a_bad_and_a_good_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    assert main(["generate", "--people", "50", "--out", str(data / "logs.parquet")]) == 0
    assert main(["generate", "--people", "0", "--out", str(data / "x.parquet")]) == 2
    job = tmp_path / "job.toml"
    job.write_text(EXAMPLE.read_text().replace('"duration_s"', '"no_such_column"'))
    assert main(["run", str(job)]) == 2  # schema problem: stops before planning, names it
    assert "no_such_column" in capsys.readouterr().err
    job.write_text(EXAMPLE.read_text())
    assert main(["run", str(job)]) == 0
    assert (tmp_path / "release" / "manifest.json").exists()
    assert (tmp_path / "release" / "visits_per_domain.parquet").exists()


def test_console_module_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "userdp.pipelines.cli", "plan", str(EXAMPLE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "spent (ε=1, δ=1e-06)" in proc.stdout
    assert "apitools" not in proc.stderr  # Beam's import notice, on every command before


def test_the_entry_module_runs_as_a_script() -> None:
    """``python -m userdp.pipelines.entry`` is how tests and the workers' launcher start the
    command; its ``__main__`` block went missing once (caught only by a slow test)."""
    proc = subprocess.run(
        [sys.executable, "-m", "userdp.pipelines.entry", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and "usage: userdp" in proc.stdout, proc.stderr


def test_a_reader_that_closes_stdout_early_gets_exit_141_and_no_traceback() -> None:
    """``userdp plan JOB | head``: the reader is gone when plan prints (a docs audit saw a
    BrokenPipeError traceback); the console script ends with 141, as a shell's SIGPIPE."""
    entry = "import sys; from userdp.pipelines.entry import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", entry, "plan", str(EXAMPLE)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # before the command has loaded Beam, so before it prints a line
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141, err
    assert b"Traceback" not in err and b"BrokenPipe" not in err


def test_a_run_whose_stdout_closed_still_reports_its_release_as_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The release is published before its summary is printed: a closed stdout then is exit 0
    and a line on stderr, not a failure."""
    read, write = os.pipe()
    os.close(read)
    result = SimpleNamespace(
        outputs={"visits": str(tmp_path / "visits.parquet")},
        manifest=str(tmp_path / "manifest.json"),
        reservation=None,
    )
    with os.fdopen(write, "w") as closed:
        monkeypatch.setattr(sys, "stdout", closed)
        assert cli._report_published(SimpleNamespace(), result) == 0
        monkeypatch.undo()
    assert "published; stdout was closed before the summary" in capsys.readouterr().err


def test_a_command_started_with_stdout_closed_still_succeeds(tmp_path: Path) -> None:
    """``userdp keygen K >&-``: Python sets sys.stdout to None; the key is made, exit 0 (the
    first stdout handling flushed None and failed after the work was done; a review)."""
    entry = "import sys; from userdp.pipelines.entry import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", entry, "keygen", str(tmp_path / "k")],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: os.close(1),
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "k").stat().st_size == 32


def test_a_broken_pipe_that_is_not_stdout_is_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """An output FIFO whose reader went away is not a closed stdout: no silent 141."""

    def breaks(argv: Any) -> int:
        raise BrokenPipeError("an output FIFO")

    monkeypatch.setattr(cli, "main", breaks)
    with pytest.raises(BrokenPipeError, match="an output FIFO"):
        entry_main(["generate"])


def test_a_summary_whose_reader_went_away_says_the_work_stands(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """tune's charge and files exist before its summary: exit 0 and one line on stderr (a
    scheduler retrying a nonzero exit would spend again)."""
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as closed:
        monkeypatch.setattr(sys, "stdout", closed)
        print_summary(lambda: print("x" * 100_000), "tune", "measured, charged and written")
        monkeypatch.undo()
    err = capsys.readouterr().err
    assert (
        err == "userdp tune: measured, charged and written; stdout was closed before the summary\n"
    )


def test_only_beams_import_notice_is_filtered_from_the_root_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logging.getLogger().warning("apitools not found, and bigquery client libraries are not …")
    logging.getLogger().warning("a warning the operator should see")
    assert [r.getMessage() for r in caplog.records] == ["a warning the operator should see"]


def test_keygen_creates_a_missing_folder_owner_only(tmp_path: Path) -> None:
    """The README's `userdp keygen keys/release.key` failed when keys/ did not exist."""
    key = tmp_path / "keys" / "release.key"
    assert main(["keygen", str(key)]) == 0
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    assert main(["keygen", str(key)]) == 2  # never overwritten
