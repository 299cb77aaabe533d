"""The query-kind interface end to end, with a test-only kind (tests/pipelines/fake_kind.py):
config dispatch and key checks, planning from the kind's budget share, the plan report, the
manifest entry, and the pipeline writing the kind's declared columns."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from userdp.pipelines import kinds
from userdp.pipelines.cli import main
from userdp.pipelines.config import ConfigError, load_job, parse_job
from userdp.pipelines.generate import generate
from userdp.pipelines.job import build_pipeline, required_columns, run_release
from userdp.pipelines.plan import plan_release
from userdp.pipelines.plan_text import print_plan
from userdp.pipelines.sources import inspect_inputs
from userdp.transforms.mechanisms.additive import LaplaceMechanism
from userdp.transforms.mechanisms.rng import ReleaseKey


@pytest.fixture(autouse=True)
def fake_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(kinds.METRIC_KINDS, "fake_persons", "tests.pipelines.fake_kind")


def job(tmp_path: Path, **fake: Any) -> dict[str, Any]:
    return {
        "input": {"path": str(tmp_path / "data" / "*.parquet"), "person": "person_id"},
        "budget": {"epsilon": 1.0},
        "output": {"path": str(tmp_path / "release")},
        "queries": [
            {"name": "visits", "metric": "count", "max_rows_per_partition": 2},
            {"name": "people", "metric": "fake_persons", **fake},
        ],
    }


def test_kind_keys_are_checked_by_the_kind(tmp_path: Path) -> None:
    cfg = parse_job(job(tmp_path, label="hello"))
    assert cfg.queries[1].options == {"label": "hello"}
    with pytest.raises(ConfigError, match=r"queries\[1\]\.by = .*unknown key"):
        parse_job(job(tmp_path, by=["domain"]))
    with pytest.raises(ConfigError, match=r"queries\[1\]\.label = 3: expected a non-empty string"):
        parse_job(job(tmp_path, label=3))
    with pytest.raises(ConfigError, match=r"queries\[1\]\.metric = 'no_such'.*fake_persons"):
        bad = job(tmp_path)
        bad["queries"][1]["metric"] = "no_such"
        parse_job(bad)


def test_kind_is_planned_from_its_share_and_reported(tmp_path: Path) -> None:
    plan = plan_release(parse_job(job(tmp_path, label="x", epsilon=0.25)))
    fake = plan.queries[1]
    assert fake.name == "people" and str(fake.share) == "ε=0.25"
    assert str(plan.spent) == str(plan.total)  # the aggregate got the other 0.75
    out = io.StringIO()
    print_plan(plan, out)
    assert "people: share ε=0.25\n  fake: Laplace scale 4, label x\n" in out.getvalue()
    assert plan.to_manifest()["queries"][1] == {
        "name": "people",
        "metric": "fake_persons",
        "scale": LaplaceMechanism(1.0, 0.25).scale,  # 4, widened by one grid step
    }


def test_kind_runs_in_the_pipeline_with_its_declared_columns(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    generate(60, str(tmp_path / "data" / "logs.parquet"), seed=3)
    cfg = parse_job(job(tmp_path, label="exact"))
    result = run_release(cfg, release_key=ReleaseKey(b"k" * 32), noise=False)
    table = pq.read_table(result.outputs["people"])
    assert table.schema.names == ["value", "note"]
    assert table.to_pylist() == [{"value": 60.0, "note": "exact"}]  # every generated person
    manifest = json.loads(Path(result.manifest).read_text())
    assert manifest["outputs"]["people"] == "people.parquet"


def test_registered_kinds_plan_through_the_real_table(capsys: pytest.CaptureFixture[str]) -> None:
    """median goes through the quantile dispatcher to smooth sensitivity; the others to their
    module — no monkeypatching of the table."""
    example = Path(__file__).resolve().parents[2] / "examples" / "local_sensitivity_job.toml"
    assert main(["plan", str(example)]) == 0
    out = capsys.readouterr().out
    assert "median_duration: share" in out and "top_domain: share" in out
    plan = plan_release(load_job(example))
    assert getattr(plan.queries[0], "method", None) == "smooth_sensitivity"


def test_one_shuffle_by_person_serves_aggregates_and_kinds(tmp_path: Path) -> None:
    """A count, a median, a PTR mean, a top partition and a shifted-inverse total share one
    ShardByPerson: the input is shuffled by person once, whatever the number of queries."""
    (tmp_path / "data").mkdir()
    generate(30, str(tmp_path / "data" / "logs.parquet"), seed=1)
    raw = job(tmp_path)
    raw["budget"] = {"epsilon": 1.0, "delta": 1e-6}
    raw["queries"] = [
        {"name": "visits", "metric": "count", "max_rows_per_partition": 2},
        {"name": "med", "metric": "median", "per_person": "count", "bounds": [0.0, 100.0]},
        {"name": "pm", "metric": "ptr_mean", "per_person": "count", "bounds": [0.0, 100.0]},
        {"name": "top", "metric": "top_partition", "by": ["domain"]},
        {"name": "tot", "metric": "total"},
    ]
    cfg = parse_job(raw)
    schema = inspect_inputs(cfg.input.path, cfg.input.format, required_columns(cfg))
    pipeline = beam.Pipeline(runner=FnApiRunner())
    build_pipeline(pipeline, cfg, plan_release(cfg), schema, ReleaseKey(b"k" * 32))
    names = [t.unique_name for t in pipeline.to_runner_api().components.transforms.values()]
    # one ShardByPerson, built by the first query that needs whole persons, used by all
    (shuffle,) = [n for n in names if n.endswith("/ShardByPerson")]
    assert shuffle == "visits/ShardByPerson"
    assert len([n for n in names if "ShardByPerson" in n.split("/")[1:2]]) == len(
        [n for n in names if n.startswith(shuffle)]
    )
