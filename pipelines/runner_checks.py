"""Checks of one runner's merged options (file and command line) against :mod:`.runner_options`.

:class:`OptionChecker` validates each value's type and range and applies the refusals we
measured (``multi_threading``, the data-losing experiment, workers the job service cannot start);
an error names the file key (``runner.options.<key>``) or the command-line flag.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from apache_beam import version as beam_version

from .runner_options import (
    FLINK_LOCAL,
    FLINK_MASTER,
    HOST_PORT,
    LOST_DATA,
    MISSING,
    OPTIONS,
    SETUP_FILES,
    RunnerError,
)


def multi_threading_refused(key: str) -> RunnerError:
    return RunnerError(
        key,
        "multi_threading",
        "in_memory or multi_processing",
        f"multi_threading is refused: {LOST_DATA} at 10^6 elements",
    )


def _key(key: str, origin: Mapping[str, str]) -> str:
    return f"--{key} (command line)" if origin.get(key) == "cli" else f"runner.options.{key}"


class OptionChecker:
    """Checks the merged values of one runner; an error names the file key or the flag."""

    def __init__(self, name: str, origin: Mapping[str, str]) -> None:
        self.name, self.spec, self.origin = name, OPTIONS[name], origin

    def fail(self, key: str, value: object, allowed: str = "", hint: str = "") -> NoReturn:
        opt = self.spec[key]
        raise RunnerError(_key(key, self.origin), value, allowed or opt.allowed, hint or opt.hint)

    def check(self, v: Mapping[str, Any]) -> None:
        if v.get("direct_running_mode") == "multi_threading":
            raise multi_threading_refused(_key("direct_running_mode", self.origin))
        for key, value in v.items():
            opt = self.spec[key]
            if (opt.choices and value not in opt.choices) or (
                opt.minimum is not None and value < opt.minimum
            ):
                self.fail(key, value)
        for exp in v.get("experiments", []):
            if exp.split("=", 1)[0] == "data_buffer_time_limit_ms":
                self.fail(
                    "experiments",
                    exp,
                    "no data_buffer_time_limit_ms experiment",
                    "with it the portable runner silently lost GroupByKey data in our tests",
                )
        for key in ("setup_file", "extra_packages"):
            for path in [v[key]] if key == "setup_file" and key in v else v.get(key, []):
                if "://" not in path and not Path(path).is_file():
                    self.fail(key, path, "an existing file", f"{path} is not a file")
        if "setup_file" in v and Path(v["setup_file"]).name not in SETUP_FILES:
            self.fail("setup_file", v["setup_file"])
        getattr(self, f"_{self.name}")(v)

    def _direct(self, v: Mapping[str, Any]) -> None:
        if v["direct_running_mode"] == "in_memory" and v["direct_num_workers"] != 1:
            self.fail(
                "direct_num_workers",
                v["direct_num_workers"],
                "1 with in_memory",
                "in_memory with more workers runs bundles on threads in one process (the threaded "
                f'path: {LOST_DATA}); use direct_running_mode = "multi_processing"',
            )

    def _portable(self, v: Mapping[str, Any]) -> None:
        endpoint = v["job_endpoint"]
        if endpoint != "embed" and not HOST_PORT.fullmatch(endpoint):
            self.fail("job_endpoint", endpoint)
        if endpoint == "embed" and v["environment_type"] == "PROCESS":
            self.fail(
                "environment_type",
                "PROCESS",
                'LOOPBACK, EXTERNAL or DOCKER with job_endpoint = "embed"',
                "the embedded job service has no handler for PROCESS workers",
            )
        self._environment(v)

    def _flink(self, v: Mapping[str, Any]) -> None:
        master = v.get("flink_master")
        if master is None:
            self.fail("flink_master", MISSING)
        if master not in FLINK_LOCAL and not FLINK_MASTER.fullmatch(master):
            self.fail("flink_master", master)
        endpoint = v.get("job_endpoint")
        if endpoint is not None and not HOST_PORT.fullmatch(endpoint):
            self.fail(
                "job_endpoint",
                endpoint,
                hint='the embedded Python job service is not Flink: use [runner] name = "portable"',
            )
        self._environment(v)

    def _environment(self, v: Mapping[str, Any]) -> None:
        env, config = v["environment_type"], v.get("environment_config")
        if env == "LOOPBACK" and config is not None:
            self.fail("environment_config", config, "no environment_config with LOOPBACK")
        if env in ("EXTERNAL", "PROCESS") and config is None:
            self.fail("environment_config", MISSING, hint=f"{env} workers need it")
        if env == "DOCKER" and not ({"setup_file", "extra_packages"} & v.keys() or config):
            self.fail(
                "environment_type",
                env,
                "with DOCKER: setup_file, extra_packages or an environment_config image with "
                "userdp installed",
                "the workers must be able to import userdp; Beam's default image does not have it",
            )

    def _dataflow(self, v: Mapping[str, Any]) -> None:
        for key in ("project", "region", "temp_location"):
            if key not in v:
                self.fail(key, MISSING)
        # Imported here: the module logs a warning about Google API clients on every machine
        # without apache-beam[gcp], which `userdp plan` and other runners must not print.
        from apache_beam.options.pipeline_options_validator import (  # noqa: PLC0415
            PipelineOptionsValidator as check,  # noqa: N813
        )

        if not re.fullmatch(check.PROJECT_ID_PATTERN, v["project"]):
            self.fail("project", v["project"], "a project id (not a project number)")
        for key in ("temp_location", "staging_location"):
            m = re.fullmatch(check.GCS_URI, v[key], re.DOTALL) if key in v else None
            if key in v and not (
                m
                and m["SCHEME"] == "gs"
                and re.match(check.GCS_BUCKET, m["BUCKET"])
                and m["OBJECT"]
            ):
                self.fail(key, v[key])
        if "job_name" in v and not re.fullmatch(check.JOB_PATTERN, v["job_name"]):
            self.fail("job_name", v["job_name"])
        if "num_workers" in v and v["num_workers"] > v.get("max_num_workers", v["num_workers"]):
            self.fail(
                "num_workers", v["num_workers"], f"≤ max_num_workers = {v['max_num_workers']}"
            )
        if not {"setup_file", "extra_packages", "sdk_container_image"} & v.keys():
            self.fail(
                "setup_file",
                MISSING,
                "setup_file, extra_packages or sdk_container_image",
                "Dataflow workers must be able to import userdp: give setup_file = the path of "
                "userdp's pyproject.toml, a userdp wheel in extra_packages, or an image with it",
            )


def require_gcp_extra() -> None:
    try:
        import apache_beam.runners.dataflow.internal.apiclient  # noqa: F401, PLC0415
    except ImportError as e:
        raise RunnerError(
            "runner.name",
            "dataflow",
            "apache-beam[gcp] installed where userdp runs",
            f"pip install 'apache-beam[gcp]=={beam_version.__version__}' ({e})",
        ) from e
