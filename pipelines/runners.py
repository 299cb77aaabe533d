"""The job file's ``[runner]`` table → a Beam runner and its PipelineOptions, in one place.

Users move from one machine to a cluster by changing ``[runner]``, not the code. Each runner has a
fixed set of ``runner.options`` keys (:data:`OPTIONS`; reference: ``docs/runners.md``); a key that
is unknown for the runner, of the wrong type, out of range or missing stops the job before it
starts with a :class:`~pipelines.config.ConfigError` naming ``runner.options.<key>``.

* ``direct`` (default): Beam's ``FnApiRunner``, explicitly. Plain ``DirectRunner`` switches to the
  Prism runner (downloaded at run time) wherever the network allows, so one job file would run on
  different engines in different places. ``direct_running_mode`` is ``in_memory`` (default, one
  worker) or ``multi_processing`` (``direct_num_workers`` processes, default one per core).
* ``portable``: Beam's ``PortableRunner``; ``job_endpoint = "embed"`` (default) runs Beam's
  embedded Python job service in the launcher, ``"host:port"`` uses a running job server.
* ``flink``: Beam's ``FlinkRunner`` (a PortableRunner: same pipeline proto and Fn API).
* ``dataflow``: Beam's ``DataflowRunner``; needs ``apache-beam[gcp]`` on the launcher.

Refused, with the reason in the error: the ``multi_threading`` direct mode and ``in_memory`` with
more than one worker (threads in one process: with Beam 2.77 on our machines the threaded mode
silently lost 0.5–3.8% of GroupByKey totals in most runs at 10^6 elements), the
``data_buffer_time_limit_ms`` experiment (the portable runner lost data with it too), ``PROCESS``
workers on the embedded job service (it has no handler for them), ``DOCKER`` workers without a way
to install userdp, a ``--runner`` flag (the runner is ``runner.name``) and, on the runners that
have no job server to define more options, flags Beam does not know.

Beam flags given on the ``userdp run`` command line override the file (later flags win in Beam's
parser; list options such as ``--experiments`` are appended); the same checks apply to the merged
values, and an error names the flag. :func:`resolved_options` gives the merged options as a plain
dict for ``userdp plan``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from apache_beam import version as beam_version
from apache_beam.options.pipeline_options import FlinkRunnerOptions, PipelineOptions
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

from .config import ConfigError

RUNNER_CLASSES = {
    "direct": "FnApiRunner",
    "portable": "PortableRunner",
    "flink": "FlinkRunner",
    "dataflow": "DataflowRunner",
}
ENVIRONMENT_TYPES = ("LOOPBACK", "EXTERNAL", "DOCKER", "PROCESS")
FLINK_VERSIONS: tuple[str, ...] = tuple(FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS)
_FLINK_LOCAL = ("[local]", "[auto]")  # Beam's job server starts a local Flink itself
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}")
_FLINK_MASTER = re.compile(r"(https?://)?(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9_.-]+)(:[0-9]{1,5})?/?")
_SETUP_FILES = ("pyproject.toml", "setup.py")
_LOST_DATA = "with Beam 2.77 it silently lost 0.5–3.8% of GroupByKey totals in our tests"
_MISSING = "(missing)"


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


_WORKERS = "an integer ≥ 1"
_PACKAGING = {
    "setup_file": Option(
        str,
        "the path of userdp's pyproject.toml (or setup.py)",
        "workers build and install userdp from it; a relative path is relative to the job file",
    ),
    "extra_packages": Option(
        list, "a list of paths of wheels or sdists", 'e.g. ["dist/userdp-0.1.0-py3-none-any.whl"]'
    ),
}
_EXPERIMENTS = {"experiments": Option(list, "a list of Beam experiments", 'e.g. ["use_runner_v2"]')}
_ENVIRONMENT = {
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
        "direct_num_workers": Option(int, _WORKERS, "processes for multi_processing", minimum=1),
        **_EXPERIMENTS,
    },
    "portable": {
        "job_endpoint": Option(
            str,
            '"embed" or the host:port of a running Beam job server',
            '"embed" runs the embedded Python job service in this process',
        ),
        **_ENVIRONMENT,
        **_PACKAGING,
        **_EXPERIMENTS,
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
        "parallelism": Option(int, _WORKERS, "default: the cluster's default", minimum=1),
        "flink_job_server_jar": Option(str, "a path or URL of Beam's Flink job server jar"),
        "flink_submit_uber_jar": Option(bool, "true or false", "submit one jar via Flink's REST"),
        "job_endpoint": Option(
            str,
            "the host:port of a running Beam Flink job server",
            "e.g. the apache/beam_flink<version>_job_server container",
        ),
        **_ENVIRONMENT,
        **_PACKAGING,
        **_EXPERIMENTS,
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
        "num_workers": Option(int, _WORKERS, minimum=1),
        "max_num_workers": Option(int, _WORKERS, minimum=1),
        "sdk_container_image": Option(str, "a container image with userdp installed"),
        "subnetwork": Option(str, "a subnetwork, e.g. regions/<region>/subnetworks/<name>"),
        "use_public_ips": Option(bool, "true or false"),
        **_PACKAGING,
        **_EXPERIMENTS,
    },
}
_REFUSED_FLAGS = {
    "runner": 'the runner is chosen by [runner] name in the job file, e.g. name = "flink"',
    "no_wait_until_finish": "the launcher writes manifest.json only after the job has finished",
    "streaming": "a release is a batch job over bounded input",
    "allow_non_deterministic_key_coders": "keys must be grouped by deterministic encodings",
    "dry_run": "userdp run would write manifest.json for a release that never ran",
    "template_location": "userdp run runs the release; it does not make Dataflow templates",
}
_LIST_FLAGS = {"extra_packages": "extra_package", "experiments": "experiment"}
_FLAG_DESTS = {  # Beam's flag aliases → option name, for flags given on the command line
    "extra_package": "extra_packages",
    "experiment": "experiments",
    "worker_machine_type": "machine_type",
    "no_use_public_ips": "use_public_ips",
}


@dataclass(frozen=True)
class ResolvedRunner:
    """The merged ``[runner]`` settings: Beam's flags and the values ``userdp plan`` prints."""

    name: str
    flags: tuple[str, ...]  # --runner, userdp's defaults, the file's options, the command line
    values: Mapping[str, Any]  # runner, each set option of the runner, other command-line flags

    def pipeline_options(self) -> PipelineOptions:
        return PipelineOptions(list(self.flags))


def resolve(
    name: str,
    options: Mapping[str, Any],
    beam_args: Sequence[str] = (),
    *,
    base_dir: str | Path | None = None,
) -> ResolvedRunner:
    """Checks ``[runner]`` and the command-line flags and merges them (see the module docstring).

    ``base_dir``: the job file's directory, against which the file's relative ``setup_file`` and
    ``extra_packages`` are resolved (default: the current directory).
    """
    if name not in OPTIONS:
        raise RunnerError("runner.name", name, f"one of {', '.join(OPTIONS)}", "")
    spec = OPTIONS[name]
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    file_values = {k: _file_value(name, k, v, base) for k, v in options.items()}
    given_on_cli = _cli_option_names(beam_args)
    parsed = _parse_flags([*_flags(file_values), *beam_args], beam_args)
    for flag, why in _REFUSED_FLAGS.items():
        if flag in given_on_cli and parsed.get(flag) not in (None, False):
            raise RunnerError(f"--{flag} (command line)", parsed[flag], f"no --{flag} flag", why)
    origin = {k: "file" for k in file_values} | {k: "cli" for k in given_on_cli if k in spec}
    values = {k: parsed.get(k) if origin.get(k) == "cli" else file_values.get(k) for k in spec}
    values = _with_defaults(name, {k: v for k, v in values.items() if v is not None}, origin)
    _Checker(name, origin).check(values)
    embedded = name == "portable" and values["job_endpoint"] == "embed"
    if (name in ("direct", "dataflow") or embedded) and (unknown := _unknown_flags(beam_args)):
        raise RunnerError(
            f"{unknown[0]} (command line)",
            _flag_value(beam_args, unknown[0][2:]),
            "a Beam pipeline option",
            "Beam does not know this flag (a typo?); see docs/runners.md",
        )
    defaults = {k: v for k, v in values.items() if origin[k] == "default"}
    flags = [*_runner_flag(name), *_flags(defaults), *_flags(file_values), *beam_args]
    extra = {k: parsed[k] for k in sorted(given_on_cli) if k not in spec and k in parsed}
    return ResolvedRunner(name, tuple(flags), {"runner": RUNNER_CLASSES[name], **values, **extra})


def pipeline_options(
    name: str,
    options: Mapping[str, Any],
    beam_args: Sequence[str] = (),
    *,
    base_dir: str | Path | None = None,
) -> tuple[Any, PipelineOptions]:
    """(runner, PipelineOptions) for ``[runner]``, command-line flags overriding the file.

    The runner is an ``FnApiRunner`` instance for ``direct`` and Beam's runner name otherwise.
    """
    resolved = resolve(name, options, beam_args, base_dir=base_dir)
    if name == "dataflow":
        _require_gcp_extra()
    runner: Any = FnApiRunner() if name == "direct" else RUNNER_CLASSES[name]
    return runner, resolved.pipeline_options()


def resolved_options(
    name: str,
    options: Mapping[str, Any],
    beam_args: Sequence[str] = (),
    *,
    base_dir: str | Path | None = None,
) -> dict[str, object]:
    """The merged runner options as a plain, JSON-able dict, for ``userdp plan`` to print.

    ``runner`` (Beam's runner class), then every option of the runner that is set — by the file,
    the command line or userdp's defaults — then any other flag given on the command line.
    Raises what :func:`pipeline_options` raises, except the check for the Dataflow extra.
    """
    return dict(resolve(name, options, beam_args, base_dir=base_dir).values)


def check_worker_paths(name: str, paths: Mapping[str, str | None]) -> None:
    """Refuses launcher-local data paths on runners whose workers cannot reach them.

    ``paths``: job-file key → path, e.g. ``{"input.path": ..., "output.path": ...,
    "input.dead_letter": ...}``. Dataflow workers are VMs of their own: a local path would be read
    from, and the release written to, their ephemeral disks while the launcher writes the manifest
    locally. Flink needs a filesystem every task manager shares (a URL, or the same mount on every
    node), which cannot be checked from here: see docs/runners.md.
    """
    if name != "dataflow":
        return
    for key, path in paths.items():
        if path is not None and "://" not in path:
            raise RunnerError(
                key,
                path,
                "a path Dataflow workers can reach, e.g. gs://bucket/path",
                "with runner dataflow, input, output and dead letters must be on Cloud Storage",
            )


# --- the file's values → flags ----------------------------------------------------------------


def _file_value(name: str, key: str, value: Any, base: Path) -> Any:
    """A checked ``runner.options`` value; local package paths made relative to ``base``."""
    spec = OPTIONS[name]
    if key not in spec:
        raise RunnerError(
            f"runner.options.{key}",
            value,
            f"one of the keys {', '.join(spec)}",
            f"unknown key for runner {name!r} (a typo, or a key of another runner?)",
        )
    opt = spec[key]
    ok = isinstance(value, opt.kind) and not (opt.kind is int and isinstance(value, bool))
    if ok and opt.kind is list:
        ok = all(isinstance(v, str) and v.strip() for v in value)
    if ok and opt.kind is str:
        ok = bool(value.strip())
    if ok and key == "direct_running_mode" and value == "multi_threading":
        raise _multi_threading_refused(f"runner.options.{key}")
    if ok and opt.choices and value not in opt.choices:
        ok = False
    if ok and opt.minimum is not None and value < opt.minimum:
        ok = False
    if not ok:
        raise RunnerError(f"runner.options.{key}", value, opt.allowed, opt.hint)
    if key == "setup_file":
        return _local_path(value, base)
    if key == "extra_packages":
        return [_local_path(v, base) for v in value]
    return list(value) if opt.kind is list else value


def _local_path(path: str, base: Path) -> str:
    return path if "://" in path or Path(path).is_absolute() else str(base / path)


def _flags(values: Mapping[str, Any]) -> list[str]:
    flags: list[str] = []
    for key, value in values.items():
        if key == "use_public_ips":
            flags.append("--use_public_ips" if value else "--no_use_public_ips")
        elif isinstance(value, bool):
            flags.extend([f"--{key}"] if value else [])
        elif isinstance(value, list):
            flags.extend(f"--{_LIST_FLAGS[key]}={v}" for v in value)
        else:
            flags.append(f"--{key}={value}")
    return flags


def _runner_flag(name: str) -> list[str]:
    return [] if name == "direct" else [f"--runner={RUNNER_CLASSES[name]}"]


# --- command-line flags -----------------------------------------------------------------------


def _cli_option_names(beam_args: Sequence[str]) -> set[str]:
    names = set()
    for arg in beam_args:
        if arg.startswith("--") and len(arg) > 2:
            flag = arg[2:].split("=", 1)[0]
            names.add(_FLAG_DESTS.get(flag, flag.replace("-", "_")))
    return names


def _flag_value(beam_args: Sequence[str], flag: str) -> str:
    for i, arg in enumerate(beam_args):
        if arg.startswith(f"--{flag}="):
            return arg.split("=", 1)[1]
        if arg == f"--{flag}":
            nxt = beam_args[i + 1] if i + 1 < len(beam_args) else ""
            return "" if nxt.startswith("--") else nxt
    return ""


def _parse_flags(flags: Sequence[str], beam_args: Sequence[str]) -> dict[str, Any]:
    """Beam's parse of ``flags``; its exit on a bad command-line value becomes a RunnerError."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return PipelineOptions(list(flags)).get_all_options(retain_unknown_options=True)
    except SystemExit:
        lines = stderr.getvalue().strip().splitlines()
        why = lines[-1].split(": error: ", 1)[-1] if lines else "Beam could not parse them"
        raise RunnerError("command line", " ".join(beam_args), "valid Beam flags", why) from None


def _unknown_flags(beam_args: Sequence[str]) -> list[str]:
    opts = PipelineOptions(list(beam_args))
    known = opts.get_all_options()
    everything = opts.get_all_options(retain_unknown_options=True)
    return [f"--{k}" for k in everything if k not in known]


# --- defaults and checks ----------------------------------------------------------------------


def _with_defaults(name: str, values: dict[str, Any], origin: dict[str, str]) -> dict[str, Any]:
    defaults: dict[str, Any] = {}
    if name == "direct":
        mode = values.get("direct_running_mode", "in_memory")
        workers = (os.cpu_count() or 1) if mode == "multi_processing" else 1
        defaults = {"direct_running_mode": mode, "direct_num_workers": workers}
    elif name == "portable":
        defaults = {"job_endpoint": "embed", "environment_type": "LOOPBACK"}
    elif name == "flink":
        local = values.get("flink_master") in _FLINK_LOCAL
        defaults = {
            "flink_version": FLINK_VERSIONS[-1],
            "environment_type": "LOOPBACK" if local else "DOCKER",
        }
    for key, value in defaults.items():
        if key not in values:
            values[key] = value
            origin[key] = "default"
    return {k: values[k] for k in OPTIONS[name] if k in values}


def _multi_threading_refused(key: str) -> RunnerError:
    return RunnerError(
        key,
        "multi_threading",
        "in_memory or multi_processing",
        f"multi_threading is refused: {_LOST_DATA} at 10^6 elements",
    )


def _key(key: str, origin: Mapping[str, str]) -> str:
    return f"--{key} (command line)" if origin.get(key) == "cli" else f"runner.options.{key}"


class _Checker:
    """Checks the merged values of one runner; an error names the file key or the flag."""

    def __init__(self, name: str, origin: Mapping[str, str]) -> None:
        self.name, self.spec, self.origin = name, OPTIONS[name], origin

    def fail(self, key: str, value: object, allowed: str = "", hint: str = "") -> NoReturn:
        opt = self.spec[key]
        raise RunnerError(_key(key, self.origin), value, allowed or opt.allowed, hint or opt.hint)

    def check(self, v: Mapping[str, Any]) -> None:
        if v.get("direct_running_mode") == "multi_threading":
            raise _multi_threading_refused(_key("direct_running_mode", self.origin))
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
        if "setup_file" in v and Path(v["setup_file"]).name not in _SETUP_FILES:
            self.fail("setup_file", v["setup_file"])
        getattr(self, f"_{self.name}")(v)

    def _direct(self, v: Mapping[str, Any]) -> None:
        if v["direct_running_mode"] == "in_memory" and v["direct_num_workers"] != 1:
            self.fail(
                "direct_num_workers",
                v["direct_num_workers"],
                "1 with in_memory",
                "in_memory with more workers runs bundles on threads in one process (the threaded "
                f'path: {_LOST_DATA}); use direct_running_mode = "multi_processing"',
            )

    def _portable(self, v: Mapping[str, Any]) -> None:
        endpoint = v["job_endpoint"]
        if endpoint != "embed" and not _HOST_PORT.fullmatch(endpoint):
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
            self.fail("flink_master", _MISSING)
        if master not in _FLINK_LOCAL and not _FLINK_MASTER.fullmatch(master):
            self.fail("flink_master", master)
        endpoint = v.get("job_endpoint")
        if endpoint is not None and not _HOST_PORT.fullmatch(endpoint):
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
            self.fail("environment_config", _MISSING, hint=f"{env} workers need it")
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
                self.fail(key, _MISSING)
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
                _MISSING,
                "setup_file, extra_packages or sdk_container_image",
                "Dataflow workers must be able to import userdp: give setup_file = the path of "
                "userdp's pyproject.toml, a userdp wheel in extra_packages, or an image with it",
            )


def _require_gcp_extra() -> None:
    try:
        import apache_beam.runners.dataflow.internal.apiclient  # noqa: F401, PLC0415
    except ImportError as e:
        raise RunnerError(
            "runner.name",
            "dataflow",
            "apache-beam[gcp] installed where userdp runs",
            f"pip install 'apache-beam[gcp]=={beam_version.__version__}' ({e})",
        ) from e
