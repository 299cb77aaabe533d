"""The job file's ``[runner]`` table → a Beam runner and its PipelineOptions, in one place.

Users move from one machine to a cluster by changing ``[runner]``, not the code. Each runner has a
table of the ``runner.options`` keys userdp checks itself (:data:`.runner_options.OPTIONS`;
reference: ``docs/runners.md``); a key of the wrong type, out of range or missing stops the job
before it starts with a :class:`~pipelines.config.ConfigError` naming ``runner.options.<key>``.
Any other option Beam defines passes straight to Beam's ``PipelineOptions`` (its parser checks the
value, the runner its validators): a hand-kept list would refuse valid options it never heard of.
Keys Beam does not define, and keys of another runner's table, are refused by name.

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

import argparse
import contextlib
import functools
import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

from .runner_checks import OptionChecker, multi_threading_refused, require_gcp_extra
from .runner_options import (
    FLAG_DESTS,
    FLINK_LOCAL,
    FLINK_VERSIONS,
    LIST_FLAGS,
    OPTIONS,
    REFUSED_FLAGS,
    RUNNER_CLASSES,
    RunnerError,
)


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
    _refuse_stray_arguments(name, beam_args)
    given_on_cli = _cli_option_names(beam_args)
    _parse_flags(_flags(file_values), "runner.options", dict(options))  # the file's, alone
    parsed = _parse_flags([*_flags(file_values), *beam_args], "command line", " ".join(beam_args))
    for flag, why in REFUSED_FLAGS.items():
        if flag in given_on_cli and parsed.get(flag) not in (None, False):
            raise RunnerError(f"--{flag} (command line)", parsed[flag], f"no --{flag} flag", why)
    origin = {k: "file" for k in file_values} | {k: "cli" for k in given_on_cli if k in spec}
    values = {k: parsed.get(k) if origin.get(k) == "cli" else file_values.get(k) for k in spec}
    values = _with_defaults(name, {k: v for k, v in values.items() if v is not None}, origin)
    OptionChecker(name, origin).check(values)
    embedded = name == "portable" and values["job_endpoint"] == "embed"
    if (name in ("direct", "dataflow") or embedded) and (unknown := _unknown_flags(beam_args)):
        raise RunnerError(
            f"{unknown[0]} (command line)",
            _flag_value(beam_args, unknown[0][2:]),
            "a Beam pipeline option",
            "Beam does not know this flag (a typo?); see docs/runners.md",
        )
    values |= {k: v for k, v in file_values.items() if k not in spec}  # passed through
    defaults = {k: v for k, v in values.items() if origin.get(k) == "default"}
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
        require_gcp_extra()
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
    """A checked ``runner.options`` value; local package paths made relative to ``base``.

    Keys of the runner's table are checked there; any other Beam pipeline option passes through
    to Beam's own parser and validators (:func:`_passed_through`).
    """
    spec = OPTIONS[name]
    if key in REFUSED_FLAGS:
        raise RunnerError(f"runner.options.{key}", value, f"no {key} option", REFUSED_FLAGS[key])
    if key not in spec:
        return _passed_through(name, key, value)
    opt = spec[key]
    ok = isinstance(value, opt.kind) and not (opt.kind is int and isinstance(value, bool))
    if ok and opt.kind is list:
        ok = all(isinstance(v, str) and v.strip() for v in value)
    if ok and opt.kind is str:
        ok = bool(value.strip())
    if ok and key == "direct_running_mode" and value == "multi_threading":
        raise multi_threading_refused(f"runner.options.{key}")
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


def _passed_through(name: str, key: str, value: Any) -> Any:
    """A ``runner.options`` key outside the runner's table: any option Beam defines, in the TOML
    type its flag takes (true/false for a switch, a list of strings for a repeated flag, else a
    string or number that Beam's parser converts and checks). A key of another runner's table is
    refused: it would be ignored here, which is how a mistake goes unnoticed."""
    others = [n for n, table in OPTIONS.items() if key in table]
    if others:
        raise RunnerError(
            f"runner.options.{key}",
            value,
            f"one of the keys {', '.join(OPTIONS[name])}, or another Beam pipeline option",
            f"{key} is an option of runner {others[0]!r}, which runner {name!r} would ignore",
        )
    actions = beam_option_actions().get(key)
    if not actions:
        raise RunnerError(
            f"runner.options.{key}",
            value,
            "a Beam pipeline option",
            "Beam defines no option of this name (a typo?); see docs/runners.md",
        )
    switch = all(a.nargs == 0 for a in actions)
    # Beam's list options: argparse's append, or its comma-splitting list action
    repeated = any(
        isinstance(a, argparse._AppendAction) or type(a).__name__ == "_CommaSeparatedListAction"
        for a in actions
    )
    if switch:  # a value no flag sets (false for a plain switch) is Beam's default: no flag
        ok, allowed = isinstance(value, bool), "true or false"
    elif repeated:
        ok = isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)
        allowed = "a list of strings"
    else:
        ok = isinstance(value, (str, int, float)) and not isinstance(value, bool)
        allowed = "a string or a number"
    if not ok:
        raise RunnerError(f"runner.options.{key}", value, allowed, "as Beam's flag takes it")
    return list(value) if repeated else value


@functools.cache
def beam_option_actions() -> dict[str, list[argparse.Action]]:
    """Every option Beam's ``PipelineOptions`` defines: its name (``dest``) → the flag actions
    that set it (two for a pair like ``--use_public_ips`` / ``--no_use_public_ips``). A flag
    spelled otherwise than its option (``--worker_disk_type`` sets ``disk_type``) is a name too,
    except a switch's (``no_use_public_ips = true`` would read as its opposite)."""
    parsers: list[argparse.ArgumentParser] = []
    PipelineOptions([]).get_all_options(add_extra_args_fn=parsers.append)
    out: dict[str, list[argparse.Action]] = {}
    for action in parsers[0]._actions:
        if not action.option_strings:
            continue
        out.setdefault(action.dest, []).append(action)
        for flag in action.option_strings if action.nargs != 0 else ():
            alias = flag.removeprefix("--")
            if alias != action.dest and alias not in out:
                out[alias] = [action]
    return out


def _local_path(path: str, base: Path) -> str:
    return path if "://" in path or Path(path).is_absolute() else str(base / path)


def _flags(values: Mapping[str, Any]) -> list[str]:
    """Option values → Beam flags, each through the flag that sets it: a switch is given when
    its value is the switch's (``use_public_ips = false`` is ``--no_use_public_ips``), a list
    repeats its flag, anything else is ``--flag=value``."""
    flags: list[str] = []
    for key, value in values.items():
        actions = beam_option_actions().get(key, [])
        if isinstance(value, bool):
            flags.extend(_flag_of(a) for a in actions if a.nargs == 0 and a.const == value)
        elif isinstance(value, list):
            flag = f"--{LIST_FLAGS[key]}" if key in LIST_FLAGS else _flag_of(actions[0])
            flags.extend(f"{flag}={v}" for v in value)
        else:
            flags.append(f"--{key}={value}")
    return flags


def _flag_of(action: argparse.Action) -> str:
    """The flag of an action: the one spelled like its option when there are aliases."""
    own = f"--{action.dest}"
    return own if own in action.option_strings else action.option_strings[0]


def _runner_flag(name: str) -> list[str]:
    return [] if name == "direct" else [f"--runner={RUNNER_CLASSES[name]}"]


# --- command-line flags -----------------------------------------------------------------------


def _refuse_stray_arguments(name: str, beam_args: Sequence[str]) -> None:
    """The command line holds Beam flags only, and none of another runner's table — checked as
    the job file's options are. A second job file (``userdp run a.toml b.toml``) went to Beam,
    which dropped it with a warning in the operator log, and the run exited 0 as if both ran;
    ``--job_name`` with the direct runner was ignored (CLI audit)."""
    takes_value = False
    for arg in beam_args:
        if arg.startswith("--") and len(arg) > 2:
            flag = arg[2:].split("=", 1)[0]
            dest = _flag_dest(flag)
            others = [n for n, table in OPTIONS.items() if dest in table]
            if others and name not in others:
                raise RunnerError(
                    f"--{flag} (command line)", _flag_value(beam_args, flag),
                    f"one of the options of runner {name!r}, or another Beam pipeline option",
                    f"{dest} is an option of runner {others[0]!r}, which runner {name!r} would "
                    "ignore",
                )  # fmt: skip
            actions = beam_option_actions().get(dest)
            # a flag Beam does not define (a job server's own, passed through on flink and
            # portable) takes the next token as its value, as Beam's parse of it does
            takes_value = "=" not in arg and (not actions or any(a.nargs != 0 for a in actions))
        elif takes_value:
            takes_value = False  # the value of the flag before it
        else:
            raise RunnerError(
                f"{arg!r} (command line)", arg,
                "Beam pipeline options after the job file (--name=value)",
                "a command takes one job file: run each job file in its own command",
            )  # fmt: skip


def _flag_dest(flag: str) -> str:
    """The option a flag sets (``--worker_disk_type`` sets ``disk_type``; dashes are ``_``)."""
    return FLAG_DESTS.get(flag, flag.replace("-", "_"))


def _cli_option_names(beam_args: Sequence[str]) -> set[str]:
    names = set()
    for arg in beam_args:
        if arg.startswith("--") and len(arg) > 2:
            flag = arg[2:].split("=", 1)[0]
            names.add(_flag_dest(flag))
    return names


def _flag_value(beam_args: Sequence[str], flag: str) -> str:
    for i, arg in enumerate(beam_args):
        if arg.startswith(f"--{flag}="):
            return arg.split("=", 1)[1]
        if arg == f"--{flag}":
            nxt = beam_args[i + 1] if i + 1 < len(beam_args) else ""
            return "" if nxt.startswith("--") else nxt
    return ""


def _parse_flags(flags: Sequence[str], where: str, shown: object) -> dict[str, Any]:
    """Beam's parse of ``flags``; its exit on a bad value becomes a RunnerError naming ``where``
    (``runner.options`` or the command line) and showing ``shown``."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return PipelineOptions(list(flags)).get_all_options(retain_unknown_options=True)
    except SystemExit:
        lines = stderr.getvalue().strip().splitlines()
        why = lines[-1].split(": error: ", 1)[-1] if lines else "Beam could not parse them"
        raise RunnerError(where, shown, "values Beam's flags accept", why) from None


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
        local = values.get("flink_master") in FLINK_LOCAL
        defaults = {
            "flink_version": FLINK_VERSIONS[-1],
            "environment_type": "LOOPBACK" if local else "DOCKER",
        }
    for key, value in defaults.items():
        if key not in values:
            values[key] = value
            origin[key] = "default"
    return {k: values[k] for k in OPTIONS[name] if k in values}
