"""The ``runner.options`` each runner accepts, with their types and the refusals we measured.

A table per runner (:data:`OPTIONS`), Beam's flag aliases and the flags that are refused, with
the reason; :mod:`.runners` checks a job's ``[runner]`` table and command-line flags against
them. Reference for users: ``docs/runners.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from apache_beam.options.pipeline_options import FlinkRunnerOptions

from .config import ConfigError

RUNNER_CLASSES = {
    "direct": "FnApiRunner",
    "portable": "PortableRunner",
    "flink": "FlinkRunner",
    "dataflow": "DataflowRunner",
}
ENVIRONMENT_TYPES = ("LOOPBACK", "EXTERNAL", "DOCKER", "PROCESS")
FLINK_VERSIONS: tuple[str, ...] = tuple(FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS)
FLINK_LOCAL = ("[local]", "[auto]")  # Beam's job server starts a local Flink itself
HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}")
FLINK_MASTER = re.compile(r"(https?://)?(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9_.-]+)(:[0-9]{1,5})?/?")
SETUP_FILES = ("pyproject.toml", "setup.py")
LOST_DATA = "with Beam 2.77 it silently lost 0.5–3.8% of GroupByKey totals in our tests"
MISSING = "(missing)"


class RunnerError(ConfigError):
    """A ``[runner]`` setting or a Beam flag that cannot work; raised before the job starts."""


@dataclass(frozen=True)
class Option:
    """One ``runner.options`` key: its TOML type, what is allowed (for the error), a hint."""

    kind: type  # str | int | bool | list (of str)
    allowed: str
    hint: str = ""
    choices: tuple[str, ...] = ()
    minimum: int | None = None


WORKERS = "an integer ≥ 1"
PACKAGING = {
    "setup_file": Option(
        str,
        "the path of userdp's pyproject.toml (or setup.py)",
        "workers build and install userdp from it; a relative path is relative to the job file",
    ),
    "extra_packages": Option(
        list, "a list of paths of wheels or sdists", 'e.g. ["dist/userdp-0.2.0-py3-none-any.whl"]'
    ),
}
EXPERIMENTS = {"experiments": Option(list, "a list of Beam experiments", 'e.g. ["use_runner_v2"]')}
ENVIRONMENT = {
    "environment_type": Option(
        str,
        f"one of {', '.join(ENVIRONMENT_TYPES)}",
        "where the Python workers run",
        choices=ENVIRONMENT_TYPES,
    ),
    "environment_config": Option(
        str,
        "DOCKER: an SDK image; EXTERNAL: the worker pool's host:port; PROCESS: JSON with a command",
    ),
}
OPTIONS: dict[str, dict[str, Option]] = {
    "direct": {
        "direct_running_mode": Option(
            str, "in_memory or multi_processing", choices=("in_memory", "multi_processing")
        ),
        "direct_num_workers": Option(int, WORKERS, "processes for multi_processing", minimum=1),
        **EXPERIMENTS,
    },
    "portable": {
        "job_endpoint": Option(
            str,
            '"embed" or the host:port of a running Beam job server',
            '"embed" runs the embedded Python job service in this process',
        ),
        **ENVIRONMENT,
        **PACKAGING,
        **EXPERIMENTS,
    },
    "flink": {
        "flink_master": Option(
            str,
            "the Flink JobManager's REST host:port, or [local] / [auto]",
            'required, e.g. flink_master = "flink-jobmanager:8081"',
        ),
        "flink_version": Option(
            str,
            f"one of {', '.join(FLINK_VERSIONS)}",
            "the cluster's Flink version",
            choices=FLINK_VERSIONS,
        ),
        "parallelism": Option(int, WORKERS, "default: the cluster's default", minimum=1),
        "flink_job_server_jar": Option(str, "a path or URL of Beam's Flink job server jar"),
        "flink_submit_uber_jar": Option(bool, "true or false", "submit one jar via Flink's REST"),
        "job_endpoint": Option(
            str,
            "the host:port of a running Beam Flink job server",
            "e.g. the apache/beam_flink<version>_job_server container",
        ),
        **ENVIRONMENT,
        **PACKAGING,
        **EXPERIMENTS,
    },
    "dataflow": {
        "project": Option(str, "a Google Cloud project id", "required"),
        "region": Option(str, "a Dataflow region, e.g. europe-west1", "required"),
        "temp_location": Option(
            str,
            "a gs://bucket/path",
            "required: without it Beam spends ~100 s retrying to create a bucket, then fails",
        ),
        "staging_location": Option(str, "a gs://bucket/path", "default: under temp_location"),
        "job_name": Option(str, "lower-case letters, digits and -, starting with a letter"),
        "service_account_email": Option(str, "a service account e-mail address"),
        "machine_type": Option(str, "a Compute Engine machine type, e.g. n2-standard-4"),
        "num_workers": Option(int, WORKERS, minimum=1),
        "max_num_workers": Option(int, WORKERS, minimum=1),
        "sdk_container_image": Option(str, "a container image with userdp installed"),
        "subnetwork": Option(str, "a subnetwork, e.g. regions/<region>/subnetworks/<name>"),
        "use_public_ips": Option(bool, "true or false"),
        **PACKAGING,
        **EXPERIMENTS,
    },
}
REFUSED_FLAGS = {
    "runner": 'the runner is chosen by [runner] name in the job file, e.g. name = "flink"',
    "no_wait_until_finish": "the launcher writes manifest.json only after the job has finished",
    "streaming": "a release is a batch job over bounded input",
    "allow_non_deterministic_key_coders": "keys must be grouped by deterministic encodings",
    "dry_run": "userdp run would write manifest.json for a release that never ran",
    "template_location": "userdp run runs the release; it does not make Dataflow templates",
}
LIST_FLAGS = {"extra_packages": "extra_package", "experiments": "experiment"}
FLAG_DESTS = {  # Beam's flag aliases → option name, for flags given on the command line
    "extra_package": "extra_packages",
    "experiment": "experiments",
    "worker_machine_type": "machine_type",
    "no_use_public_ips": "use_public_ips",
}
