"""Runner selection: Direct is the FnApiRunner, flags override the file, unsafe modes refused."""

from __future__ import annotations

import pytest
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

from pipelines.runners import RunnerError, pipeline_options


def test_direct_is_the_fn_api_runner_and_cli_flags_override_the_file() -> None:
    runner, opts = pipeline_options(
        "direct",
        {"direct_running_mode": "multi_processing", "direct_num_workers": 2},
        ["--direct_num_workers=3"],
    )
    assert isinstance(runner, FnApiRunner)
    got = opts.get_all_options()
    assert got["direct_running_mode"] == "multi_processing"
    assert got["direct_num_workers"] == 3


def test_cluster_runners_pass_options_through() -> None:
    runner, opts = pipeline_options("flink", {"flink_master": "localhost:8081", "parallelism": 2})
    assert runner == "FlinkRunner"
    got = opts.get_all_options()
    assert got["runner"] == "FlinkRunner"
    assert got["flink_master"] == "localhost:8081"
    assert got["parallelism"] == 2


def test_multi_threading_is_refused_with_the_reason() -> None:
    with pytest.raises(RunnerError, match=r"silently lost .* GroupByKey"):
        pipeline_options("direct", {"direct_running_mode": "multi_threading"})


def test_unknown_runner_and_mode_are_refused() -> None:
    with pytest.raises(RunnerError, match=r"runner.name = 'spark' is not one of"):
        pipeline_options("spark", {})
    with pytest.raises(RunnerError, match="direct_running_mode = 'turbo' is not one of"):
        pipeline_options("direct", {"direct_running_mode": "turbo"})
