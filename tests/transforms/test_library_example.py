"""The README's library example (examples/library_pipeline.py) runs as it is, on Direct."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

EXAMPLE = Path(__file__).parents[2] / "examples" / "library_pipeline.py"
README = Path(__file__).parents[2] / "README.md"


def test_the_library_example_runs_verbatim_and_writes_a_release(tmp_path: Path) -> None:
    out = tmp_path / "release"
    subprocess.run(
        [sys.executable, str(EXAMPLE), "--out", str(out)], check=True, cwd=tmp_path, timeout=600
    )
    visits = [json.loads(x) for f in out.glob("visits*.jsonl") for x in f.read_text().splitlines()]
    assert visits and all(set(v) == {"domain", "value", "stddev"} for v in visits)
    (median_file,) = out.glob("median_duration*.jsonl")
    (median,) = [json.loads(x) for x in median_file.read_text().splitlines()]
    assert 0 <= median["value"] <= 600
    assert (tmp_path / "ops").stat().st_mode & 0o777 == 0o700  # dead letters: owner only
    manifest = json.loads((out / "manifest.json").read_text())
    assert [q["name"] for q in manifest["queries"]] == ["visits", "median_duration"]
    assert manifest["spent"]["epsilon"] == 1.0


def test_the_readme_shows_the_example_file() -> None:
    body = "\n".join(EXAMPLE.read_text().splitlines()[20:50])
    assert "release.ByPerson(" in body
    readme = README.read_text()
    for line in ("release = dp.Release(dp.Budget(epsilon=1, delta=1e-6))",
                 'visits = people | "visits" >> dp.Count('):  # fmt: skip
        assert line in readme and line in EXAMPLE.read_text()
