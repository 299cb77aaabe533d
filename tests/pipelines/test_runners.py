"""``[runner]`` → runner and PipelineOptions: defaults, command-line overrides, and every refusal.

No pipeline runs here (see test_portability.py, test_translation.py and test_retry.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

from userdp.pipelines.config import ConfigError
from userdp.pipelines.runner_options import FLINK_VERSIONS, OPTIONS, RunnerError
from userdp.pipelines.runners import (
    check_worker_paths,
    pipeline_options,
    resolve,
    resolved_options,
)

PYPROJECT = str(Path(__file__).resolve().parents[2] / "pyproject.toml")
DATAFLOW = {
    "project": "userdp-test",
    "region": "europe-west1",
    "temp_location": "gs://userdp-test-bucket/tmp",
    "setup_file": PYPROJECT,
}


def test_direct_defaults_to_one_in_memory_fn_api_worker() -> None:
    runner, opts = pipeline_options("direct", {})
    assert isinstance(runner, FnApiRunner)
    got = opts.get_all_options()
    assert (got["direct_running_mode"], got["direct_num_workers"]) == ("in_memory", 1)
    assert got["runner"] is None  # the runner object is passed to beam.Pipeline, not a name
    assert resolved_options("direct", {}) == {
        "runner": "FnApiRunner",
        "direct_running_mode": "in_memory",
        "direct_num_workers": 1,
    }


def test_multi_processing_defaults_to_one_worker_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 6)
    got = resolved_options("direct", {"direct_running_mode": "multi_processing"})
    assert got["direct_num_workers"] == 6
    _, opts = pipeline_options("direct", {"direct_running_mode": "multi_processing"})
    assert opts.get_all_options()["direct_num_workers"] == 6


def test_command_line_flags_override_the_file_and_are_checked_the_same_way() -> None:
    file = {"direct_running_mode": "multi_processing", "direct_num_workers": 2}
    _, opts = pipeline_options("direct", file, ["--direct_num_workers=3"])
    assert opts.get_all_options()["direct_num_workers"] == 3
    back = ["--direct_running_mode=in_memory", "--direct_num_workers", "1"]
    assert resolved_options("direct", file, back) == {
        "runner": "FnApiRunner",
        "direct_running_mode": "in_memory",
        "direct_num_workers": 1,
    }  # fmt: skip
    with pytest.raises(RunnerError, match=r"^--direct_running_mode \(command line\) = 'multi_thr"):
        pipeline_options("direct", file, ["--direct_running_mode=multi_threading"])
    with pytest.raises(
        RunnerError, match=r"^--direct_num_workers \(command line\) = 0: expected an"
    ):
        pipeline_options("direct", file, ["--direct_num_workers=0"])


@pytest.mark.parametrize(
    ("args", "match"),
    [  # a second job file went to Beam, which dropped it: the run exited 0 (CLI audit)
        (["b.toml"], r"^'b\.toml' \(command line\) = 'b\.toml': expected Beam pipeline options"),
        (["--direct_num_workers", "1", "b.toml"], r"^'b\.toml' \(command line\)"),
        (["--save_main_session", "b.toml"], r"^'b\.toml' \(command line\)"),  # a switch
        # another runner's flag: refused in the job file, ignored on the command line
        (["--job_name=x"], r"^--job_name \(command line\) = 'x': .* runner 'dataflow'"),
        (["--flink_master", "host:8081"], r"^--flink_master \(command line\) = 'host:8081'"),
    ],
)
def test_the_command_line_is_checked_as_the_job_files_options_are(
    args: list[str], match: str
) -> None:
    with pytest.raises(RunnerError, match=match):
        pipeline_options("direct", {}, args)


def test_a_flag_beam_does_not_define_takes_the_next_token_as_its_value() -> None:
    """A job server's own flag passes through on flink with its value after a space (the
    stray-argument check first took the value for a second job file: review); on direct the
    flag itself is refused as a typo, naming it."""
    flink = resolved_options(
        "flink",
        {"environment_type": "LOOPBACK"},
        ["--flink_master=localhost:8081", "--checkpointingInterval", "60000"],
    )
    assert flink["checkpointingInterval"] == "60000"
    with pytest.raises(
        RunnerError, match=r"^--direct_num_workrs \(command line\) = '3': expected a Beam pipeline"
    ):
        pipeline_options("direct", {}, ["--direct_num_workrs", "3"])


def test_resolved_options_are_plain_json_and_list_other_command_line_flags() -> None:
    got = resolved_options(
        "dataflow",
        {**DATAFLOW, "use_public_ips": False, "extra_packages": [PYPROJECT]},
        ["--labels=team=privacy", "--max_num_workers=8"],
    )
    assert got == {
        "runner": "DataflowRunner",
        **DATAFLOW,
        "max_num_workers": 8,
        "use_public_ips": False,
        "extra_packages": [PYPROJECT],
        "labels": ["team=privacy"],
    }
    json.dumps(got)


def test_relative_package_paths_are_relative_to_the_job_file(tmp_path: Path) -> None:
    wheel = tmp_path / "dist" / "userdp-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"")
    opts: dict[str, object] = {k: v for k, v in DATAFLOW.items() if k != "setup_file"}
    opts["extra_packages"] = ["dist/" + wheel.name]
    assert resolved_options("dataflow", opts, base_dir=tmp_path)["extra_packages"] == [str(wheel)]
    with pytest.raises(RunnerError, match=r"runner.options.extra_packages = '.*dist/.*existing fi"):
        resolved_options("dataflow", opts)  # relative to the current directory: not there


def test_portable_defaults_to_the_embedded_job_service_with_loopback_workers() -> None:
    runner, opts = pipeline_options("portable", {})
    assert runner == "PortableRunner"
    got = opts.get_all_options()
    assert (got["runner"], got["job_endpoint"], got["environment_type"]) == (
        "PortableRunner",
        "embed",
        "LOOPBACK",
    )


def test_flink_options_reach_beam_and_the_environment_follows_the_master() -> None:
    file = {"flink_master": "flink-jm:8081", "parallelism": 4, "setup_file": PYPROJECT}
    runner, opts = pipeline_options("flink", file)
    got = opts.get_all_options()
    assert runner == "FlinkRunner" and got["runner"] == "FlinkRunner"
    assert (got["flink_master"], got["parallelism"], got["flink_version"]) == (
        "flink-jm:8081",
        4,
        FLINK_VERSIONS[-1],
    )
    assert got["environment_type"] == "DOCKER" and got["setup_file"] == PYPROJECT
    local = resolved_options("flink", {"flink_master": "[local]"})
    assert local["environment_type"] == "LOOPBACK"


@pytest.mark.parametrize(
    ("name", "options", "args", "match"),
    [
        ("spark", {}, [], r"^runner.name = 'spark': expected one of direct, portable, flink"),
        (
            "direct",
            {"job_endpoint": "embed"},
            [],
            r"options.job_endpoint = 'embed': .* keys direct",
        ),
        ("direct", {"direct_num_workers": "2"}, [], r"direct_num_workers = '2': expected an integ"),
        (
            "direct",
            {"direct_num_workers": True},
            [],
            r"direct_num_workers = True: expected an integ",
        ),
        ("direct", {"direct_running_mode": "turbo"}, [], r"mode = 'turbo': expected in_memory or"),
        (
            "direct",
            {"direct_running_mode": "multi_threading"},
            [],
            r"^runner.options.direct_running_mode = 'multi_threading'.* silently lost .* GroupBy",
        ),
        (
            "direct",
            {"direct_num_workers": 2},
            [],
            r"direct_num_workers = 2: expected 1 with in_memory. .*threads.*multi_processing",
        ),
        ("direct", {}, ["--runner=DirectRunner"], r"^--runner \(command line\) = 'DirectRunner'"),
        ("direct", {}, ["--no_wait_until_finish"], r"^--no_wait_until_finish .*manifest.json only"),
        ("portable", {}, ["--streaming"], r"^--streaming \(command line\) = True: .*batch job"),
        ("dataflow", DATAFLOW, ["--dry_run=True"], r"^--dry_run .*manifest.json .*never ran"),
        (
            "dataflow",
            DATAFLOW,
            ["--allow_non_deterministic_key_coders"],
            r"^--allow_non_deterministic_key_coders .*deterministic encodings",
        ),
        ("direct", {}, ["--direct_num_worker=2"], r"^--direct_num_worker \(.*a Beam pipeline opt"),
        ("direct", {}, ["--direct_running_mode=x"], r"^command line = '--direct_running_mode=x'"),
        (
            "direct",
            {"experiments": ["data_buffer_time_limit_ms=10"]},
            [],
            r"experiments = 'data_buffer_time_limit_ms=10'.* silently lost GroupByKey",
        ),
        ("portable", {"job_endpoint": "localhost"}, [], r"job_endpoint = 'localhost': .*host:port"),
        (
            "portable",
            {"environment_type": "PROCESS", "environment_config": '{"command": "boot"}'},
            [],
            r"environment_type = 'PROCESS': .* embed.*no handler for PROCESS",
        ),
        ("portable", {"environment_type": "EXTERNAL"}, [], r"environment_config = '\(missing\)'"),
        ("portable", {"environment_type": "loopback"}, [], r"environment_type = 'loopback'"),
        (
            "portable",
            {"environment_config": "localhost:50000"},
            [],
            r"environment_config = 'localhost:50000': expected no environment_config with LOOPB",
        ),
        (
            "portable",
            {"job_endpoint": "localhost:8099", "environment_type": "DOCKER"},
            [],
            r"environment_type = 'DOCKER': .*setup_file.*import userdp",
        ),
        (
            "portable",
            {"setup_file": "no/setup.py"},
            [],
            r"setup_file = '.*no/setup.py': .* existing",
        ),
        (
            "portable",
            {"setup_file": str(Path(PYPROJECT).parent / "Makefile")},
            [],
            r"setup_file = '.*Makefile': expected the path of userdp's pyproject.toml",
        ),
        ("portable", {"extra_packages": "a.whl"}, [], r"extra_packages = 'a.whl': expected a list"),
        ("flink", {}, [], r"^runner.options.flink_master = '\(missing\)'"),
        ("flink", {"flink_master": "a b"}, [], r"flink_master = 'a b'"),
        (
            "flink",
            {"flink_master": "[local]", "flink_version": "1.10"},
            [],
            r"flink_version = '1.10': expected one of 1.19",
        ),
        ("flink", {"flink_master": "[local]"}, ["--parallelism=0"], r"^--parallelism \(command"),
        (
            "flink",
            {"flink_master": "[local]", "job_endpoint": "embed"},
            [],
            r"job_endpoint = 'embed'.*not Flink: use \[runner\] name = \"portable\"",
        ),
        ("dataflow", {}, [], r"^runner.options.project = '\(missing\)'"),
        (
            "dataflow",
            {k: v for k, v in DATAFLOW.items() if k != "temp_location"},
            [],
            r"temp_location = '\(missing\)': expected a gs://bucket/path. required: .*100 s",
        ),
        ("dataflow", {**DATAFLOW, "temp_location": "/tmp"}, [], r"temp_location = '/tmp'"),
        ("dataflow", {**DATAFLOW, "project": "12345"}, [], r"project = '12345': .*not a project"),
        ("dataflow", {**DATAFLOW, "job_name": "My_Job"}, [], r"job_name = 'My_Job'"),
        (
            "dataflow",
            {**DATAFLOW, "num_workers": 5, "max_num_workers": 2},
            [],
            r"num_workers = 5: expected ≤ max_num_workers = 2",
        ),
        (
            "dataflow",
            {k: v for k, v in DATAFLOW.items() if k != "setup_file"},
            [],
            r"setup_file = '\(missing\)': expected setup_file, extra_packages or sdk_container_im",
        ),
        ("dataflow", DATAFLOW, ["--nonsense=1"], r"^--nonsense \(command line\) = '1'"),
    ],
)
def test_wrong_or_missing_options_stop_before_the_job_starts(
    name: str, options: dict[str, Any], args: list[str], match: str
) -> None:
    with pytest.raises(RunnerError, match=match):
        resolved_options(name, options, args)


def test_runner_errors_are_config_errors_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        pipeline_options("flink", {"flink_master": "[local]", "parallelism": 0})
    assert info.value.key == "runner.options.parallelism" and info.value.value == 0


def test_flags_a_job_server_may_define_pass_through_to_flink() -> None:
    args = ["--checkpointing_interval=5"]
    assert (
        resolved_options("flink", {"flink_master": "[local]"}, args)["checkpointing_interval"]
        == "5"
    )
    _, opts = pipeline_options("flink", {"flink_master": "[local]"}, args)
    assert opts.get_all_options(retain_unknown_options=True)["checkpointing_interval"] == "5"


def test_any_other_beam_option_in_the_file_passes_straight_to_beam() -> None:
    """Options outside the runner's table reach Beam's PipelineOptions as Beam's flags take them
    (a Dataflow option we never listed is not refused), and Beam's parser checks their values."""
    extra = {
        "dataflow_service_options": ["enable_prime"],
        "disk_size_gb": 50,
        "number_of_worker_harness_threads": 4,
        "worker_disk_type": "compute.googleapis.com/projects/p/zones/z/diskTypes/pd-ssd",
        "save_main_session": True,
        "use_public_ips": False,
    }
    resolved = resolve("dataflow", {**DATAFLOW, **extra})
    opts = resolved.pipeline_options().get_all_options()
    dests = {"worker_disk_type": "disk_type"}  # a flag that sets an option of another name
    for key, value in extra.items():
        assert opts[dests.get(key, key)] == value, key
    assert resolved.values["disk_size_gb"] == 50  # `userdp plan` prints them
    assert "--no_use_public_ips" in resolved.flags
    direct = resolve("direct", {"save_main_session": False, "pickle_library": "cloudpickle"})
    assert direct.pipeline_options().get_all_options()["pickle_library"] == "cloudpickle"
    assert not direct.pipeline_options().get_all_options()["save_main_session"]


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        (
            "dataflow",
            {"nonsense": 1},
            r"^runner.options.nonsense = 1: expected a Beam pipeline opt",
        ),
        ("dataflow", {"disk_size_gb": "big"}, r"^runner.options = .*invalid int value: 'big'"),
        ("dataflow", {"flink_master": "[local]"}, r"flink_master = '\[local\]'.* runner 'flink'"),
        ("direct", {"streaming": True}, r"^runner.options.streaming = True: .*batch job"),
        ("portable", {"dry_run": True}, r"^runner.options.dry_run = True: .*never ran"),
        ("dataflow", {"save_main_session": "yes"}, r"save_main_session = 'yes': expected true or"),
        ("dataflow", {"dataflow_service_options": "x"}, r"options = 'x': expected a list of str"),
    ],
)
def test_passed_through_options_are_still_checked(
    name: str, options: dict[str, Any], match: str
) -> None:
    base = DATAFLOW if name == "dataflow" else {}
    with pytest.raises(RunnerError, match=match):
        resolved_options(name, {**base, **options})


def test_every_runner_option_is_a_beam_pipeline_option() -> None:
    _, opts = pipeline_options("portable", {})
    beam_options = opts.get_all_options()
    for name, spec in OPTIONS.items():
        for key in spec:
            assert key in beam_options, (name, key)


def test_dataflow_needs_the_gcp_extra_only_to_run() -> None:
    try:
        import apache_beam.runners.dataflow.internal.apiclient  # noqa: F401, PLC0415
    except ImportError:
        with pytest.raises(RunnerError, match=r"apache-beam\[gcp\]==2\."):
            pipeline_options("dataflow", DATAFLOW)
    else:
        runner, _ = pipeline_options("dataflow", DATAFLOW)
        assert runner == "DataflowRunner"
    assert resolved_options("dataflow", DATAFLOW)["runner"] == "DataflowRunner"  # plan works


def test_dataflow_refuses_launcher_local_data_paths() -> None:
    paths = {"input.path": "gs://b/logs/*.parquet", "output.path": "/home/me/release/"}
    with pytest.raises(
        RunnerError, match=r"^output.path = '/home/me/release/': expected a path Da"
    ):
        check_worker_paths("dataflow", paths)
    check_worker_paths("dataflow", {**paths, "output.path": "gs://b/release/", "dead": None})
    for name in ("direct", "portable", "flink"):  # local or shared mounts: not checkable here
        check_worker_paths(name, paths)


def test_userdp_plan_refuses_local_paths_for_dataflow_as_run_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`userdp plan` printed the Dataflow options of a job reading logs/*.parquet from the
    launcher's disk; only `userdp run` refused it. Both refuse it now, naming the key."""
    from userdp.pipelines.cli import main  # noqa: PLC0415

    options = ", ".join(f"{k} = {json.dumps(v)}" for k, v in DATAFLOW.items())
    job = tmp_path / "job.toml"
    job.write_text(
        '[input]\npath = "logs/*.parquet"\nperson = "person_id"\n\n[budget]\nepsilon = 1.0\n\n'
        '[output]\npath = "gs://userdp-test-bucket/release/"\n\n'
        f'[runner]\nname = "dataflow"\noptions = {{ {options} }}\n\n'
        '[[queries]]\nname = "n"\nmetric = "count"\nmax_rows_per_partition = 1\n'
    )
    assert main(["plan", str(job)]) == 2
    out, err = capsys.readouterr()
    assert "input.path = '" in err and "logs/*.parquet': expected a path Dataflow workers" in err
    assert out == ""  # refused before any of the plan is printed
    job.write_text(
        job.read_text().replace('"logs/*.parquet"', '"gs://userdp-test-bucket/l/*.parquet"')
    )
    assert main(["plan", str(job)]) == 0
