"""The console of `userdp run` holds userdp's own sentences only, also in Beam's
``multi_processing`` mode, whose SDK workers are child processes writing to the launcher's file
descriptors: what they log (here "Renamed N shards", N depending on which files hold dead
letters) goes to the operator-only log with the rest of the library's messages."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow  # a whole job on a multi-process runner: `make test-all`

JOB = """
[input]
path = "data/*.parquet"
person = "person_id"
dead_letter = "ops/"

[budget]
epsilon = 1.0

[output]
path = "release/"

[runner]
name = "direct"
options = { direct_running_mode = "multi_processing", direct_num_workers = 2 }

[[queries]]
name = "visits"
metric = "count"
max_rows_per_partition = 5
"""


def test_worker_processes_log_to_the_private_file_not_the_console(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    for i in range(2):  # a dead letter (a null person id) in each file: two dead-letter shards
        rows = {"person_id": [f"p{i}{j}" for j in range(20)] + [None], "domain": ["a"] * 21}
        pq.write_table(pa.table(rows), tmp_path / "data" / f"f{i}.parquet")
    (tmp_path / "job.toml").write_text(JOB)
    done = subprocess.run(
        [sys.executable, "-m", "userdp.pipelines.entry", "run", "job.toml"],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    foreign = [x for x in lines if not re.match(r"(\[ *\d+\.\d s\] |userdp run: )", x)]
    assert foreign == []
    (log,) = re.findall(r"are in (\S+\.log)$", done.stderr, flags=re.M)
    assert "Renamed" in Path(log).read_text()  # the workers' lines, kept for the operator
    assert "visits" in done.stdout  # the summary still reaches the console
