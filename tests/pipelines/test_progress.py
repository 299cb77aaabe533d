"""Progress lines of `userdp run` (pipelines/progress.py): stages in order, a heartbeat while the
pipeline runs, and nothing but public facts — every line fits one of a few templates whose only
numbers are times, file counts and sizes."""

from __future__ import annotations

import io
import re
import threading
import time
from pathlib import Path

import pytest

from userdp.pipelines.cli import main
from userdp.pipelines.demo import DEMO_JOB
from userdp.pipelines.generate import generate
from userdp.pipelines.progress import Progress

PREFIX = r"\[ *\d+\.\d s\] "
TEMPLATES = [
    r"checking the job file, its inputs and the output location \(.*job\.toml\)",
    r"\d+ input files?, \d+ quer(y|ies), runner direct",  # no size: it depends on the data
    r"running the pipeline on direct \(\d+ output files?\) …",
    r"running the pipeline on direct \(\d+ output files?\): done in \d+\.\d s",
    r"publishing \d+ output files? and the manifest in .*release/",
]


def test_userdp_run_prints_each_stage_with_public_facts_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    generate(300, str(tmp_path / "data" / "logs.parquet"), seed=2)
    (tmp_path / "job.toml").write_text(DEMO_JOB)
    assert main(["run", str(tmp_path / "job.toml")]) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if re.match(PREFIX, x)]
    assert len(lines) == len(TEMPLATES)
    for line, template in zip(lines, TEMPLATES, strict=True):
        assert re.fullmatch(PREFIX + template, line), line


def test_a_heartbeat_while_a_stage_runs_and_silence_without_an_output() -> None:
    out = io.StringIO()
    now = [100.0]  # a fake clock: the lines show its times, not the machine's
    progress = Progress(out, heartbeat_s=0.01, clock=lambda: now[0])
    with progress.running("running the pipeline"):
        now[0] = 103.4
        for _ in range(3000):  # wait for a heartbeat, however loaded the machine
            if "still" in out.getvalue():
                break
            time.sleep(0.01)
        now[0] = 107.25
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("running the pipeline …")
    assert re.fullmatch(PREFIX + r"still running the pipeline \([037] s\)", lines[1])
    assert re.fullmatch(PREFIX + r"running the pipeline: done in 7\.2 s", lines[-1])
    silent = Progress(None, heartbeat_s=0.01)
    before = threading.active_count()
    with silent.running("x"):
        assert threading.active_count() == before  # no thread when nothing is printed
