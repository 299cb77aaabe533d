"""The ``userdp`` command line.

Each subcommand is a :class:`Command` in :data:`COMMANDS`: a help line, a function that adds its
arguments, and a function that runs it and returns the exit code; a new command is one entry in
that table.

Exit codes of ``userdp run`` (and the others where they apply):

- 0: the release was published (or the command did what it says);
- 2: a problem with the job file, an input file, a key file, the secret file or an output
  location — found before anything was charged, or (an input file that turns out corrupt while it
  is read) after, in which case nothing was published and the charge was taken back;
- 3: the budget ledger refused the release (nothing ran) or cannot be used;
- 1: the run itself failed (a full disk, a worker lost, a bug): nothing was published unless the
  message says publishing failed part-way; what became of the ledger's charge is printed;
- 130 / 143: interrupted by Ctrl-C / SIGTERM: cleaned up, and the message says when and what
  became of the charge (taken back if nothing was published).

No message contains a data value. Library messages and tracebacks, which may, go to an
operator-only log file (:mod:`.private_log`) whose path is printed.
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


class _BeamImportNotice(logging.Filter):
    """Beam logs "apitools not found, …" on the root logger whenever it is imported without its
    Google Cloud client libraries, which userdp does not need unless a job uses BigQuery: a line
    of noise on every command. Only that record is dropped, and only in the command line (before
    the imports below load Beam); a library user's logging is left as they set it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("apitools not found")


logging.getLogger().addFilter(_BeamImportNotice())

from .config import ConfigError, load_job  # noqa: E402  (after the filter: these load Beam)
from .entry import print_summary  # noqa: E402
from .interrupts import RunInterrupted, exit_code  # noqa: E402
from .ledger_cli import LEDGER_HELP, add_ledger_arguments, run_ledger  # noqa: E402
from .plan import plan_release  # noqa: E402
from .plan_text import print_keys, print_ledger_quote, print_plan, print_runner  # noqa: E402
from .tool_cli import demo_args, generate_args, keygen_args, run_demo, run_generate, run_keygen  # noqa: E402
from .tune_cli import TUNE_HELP, add_tune_arguments, run_tune_command  # noqa: E402


@dataclass(frozen=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB.toml", help="the job file")
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw each query's expected error vs the budget into FILE (.svg or .png); "
        "public: no data is read",
    )
    p.add_argument(
        "beam_args",
        nargs=argparse.REMAINDER,
        help="Beam pipeline options, as for `userdp run`: the resolved options are printed",
    )


def _plan(args: argparse.Namespace) -> int:
    from .ledger import LedgerError  # noqa: PLC0415

    # `--plot FILE` may come after the job file too, where argparse hands it to the Beam flags
    plot, beam_args = _take_flag(list(args.beam_args), "--plot")
    args.plot = plot or args.plot
    try:
        job = load_job(args.job)
        plan = plan_release(job)
        runner = io.StringIO()  # the runner's checks come first: nothing printed, then refused
        print_runner(job, beam_args, runner)
        print_plan(plan, sys.stdout)
        sys.stdout.write(runner.getvalue())
        print_keys(job, sys.stdout)
        if job.ledger is not None:
            print_ledger_quote(job, plan, sys.stdout)
        if args.plot:
            return _plot(job, args.plot)
    except ConfigError as e:
        print(f"userdp plan: {e}", file=sys.stderr)
        return 2
    except LedgerError as e:
        print(f"userdp plan: {e}", file=sys.stderr)
        return 3
    return 0


def _take_flag(argv: list[str], flag: str) -> tuple[str | None, list[str]]:
    """(the value of ``flag`` in ``argv`` as ``--flag V`` or ``--flag=V``, the other args)."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1], argv[:i] + argv[i + 2 :]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1], argv[:i] + argv[i + 1 :]
    return None, argv


def _plot(job: Any, path: str) -> int:
    from .plan_plot import plot_error_curves  # noqa: PLC0415 (matplotlib loads slowly)

    if not path.lower().endswith((".svg", ".png")):
        print(f"userdp plan: --plot {path}: expected a .svg or .png file name", file=sys.stderr)
        return 2
    try:
        skipped = plot_error_curves(job, path)
    except OSError as e:
        print(f"userdp plan: --plot {path}: cannot be written ({e.strerror})", file=sys.stderr)
        return 2
    print(f"error vs budget plot: {path}")
    if skipped:
        print(f"  not drawn (no closed-form error before the data): {', '.join(skipped)}")
    return 0


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB.toml", help="the job file")
    p.add_argument(
        "--release-id",
        help="the ledger's release id (overrides [ledger] release_id); re-running an id on the "
        "same input and job file is free and writes the same bytes",
    )
    p.add_argument(
        "beam_args",
        nargs=argparse.REMAINDER,
        help="Beam pipeline options after the job file (e.g. --direct_running_mode="
        "multi_processing --direct_num_workers=2); they override the job file's [runner] options",
    )


def _run(args: argparse.Namespace) -> int:
    from .private_log import logged_command  # noqa: PLC0415

    return logged_command("run", lambda log: _run_logged(args, log))


_CHARGE = {
    "released": "nothing was published; the ledger's charge was taken back",
    "kept": "the ledger's charge is kept: re-run with --release-id {rid} to finish without a "
    "new charge",
    "none": "nothing was published",
    "partial": "check what was published with `userdp verify`, and run again",
}


def _interruption(e: KeyboardInterrupt) -> str:
    """When the run stopped and what became of its charge (a RunInterrupted, raised once the run
    was cleaned up; any other interrupt came before the run could tell — during the checks, or a
    second one during its clean-up)."""
    if isinstance(e, RunInterrupted):
        return f"interrupted {e.when}; {_CHARGE[e.charge].format(rid=e.release_id)}"
    return (  # before the run could say (or while it cleaned up): the tools that tell
        "interrupted; `userdp verify OUTPUT` tells whether a complete release was published and "
        "`userdp ledger history` whether a charge stands"
    )


def _run_logged(args: argparse.Namespace, log: Any) -> int:
    from userdp.transforms.keys import KeyFileError  # noqa: PLC0415

    from .job import ReleaseRunError, run_release  # noqa: PLC0415 (Beam loads only when used)
    from .ledger import LedgerError  # noqa: PLC0415
    from .ledger.model import LEDGER_NAME_RULE, check_name  # noqa: PLC0415
    from .progress import Progress  # noqa: PLC0415
    from .publish import OutputLocationError  # noqa: PLC0415
    from .sources import SchemaError  # noqa: PLC0415

    try:
        misplaced, _ = _take_flag(list(args.beam_args), "--release-id")
        if misplaced is not None:  # after the job file, argparse hands it to Beam's parser
            raise ConfigError(
                "--release-id", misplaced, "the option before the job file",
                "userdp run --release-id ID JOB.toml [Beam options]",
            )  # fmt: skip
        job = load_job(args.job)
        if args.release_id and job.ledger is None:
            raise ConfigError("--release-id", args.release_id, "a job file with a [ledger]", "")
        if args.release_id is not None:
            try:
                check_name(args.release_id, "--release-id")
            except ValueError:
                raise ConfigError(
                    "--release-id", args.release_id, LEDGER_NAME_RULE, "as [ledger] release_id"
                ) from None
        progress = Progress(sys.stderr)
        result = run_release(job, args.beam_args, release_id=args.release_id, progress=progress)
    except (ConfigError, SchemaError, OutputLocationError, KeyFileError) as e:
        print(f"userdp run: {e}", file=sys.stderr)
        return 2
    except LedgerError as e:  # refused before anything ran (or a ledger that cannot be used)
        print(f"userdp run: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM
        print(f"userdp run: {_interruption(e)}", file=sys.stderr)
        return exit_code(e)
    except ReleaseRunError as e:
        log.exception(e)
        text, charge = str(e), _CHARGE[e.charge].format(rid=e.release_id)
        if text.endswith("nothing was published"):  # said once
            charge = charge.removeprefix("nothing was published").removeprefix("; ")
        print(f"userdp run: {text}" + f"; {charge}" * bool(charge), file=sys.stderr)
        return 2 if e.input_error else 1
    except Exception as e:
        log.exception(e)
        print(
            f"userdp run: failed ({type(e).__name__}) — this is a bug in userdp, please report "
            "it; nothing was published",
            file=sys.stderr,
        )
        return 1
    return _report_published(job, result)


def _report_published(job: Any, result: Any) -> int:
    """What was released; 0 — or, interrupted while saying so, 130/143 and a line that the
    release is complete all the same (it was published and recorded before)."""
    try:
        print_summary(lambda: _print_result(job, result), "run", "published")
    except KeyboardInterrupt as e:
        print("userdp run: interrupted after the release was published", file=sys.stderr)
        return exit_code(e)
    return 0


def _print_result(job: Any, result: Any) -> None:
    n = len(result.outputs)
    print(f"released {n} quer{'y' if n == 1 else 'ies'}:")
    for name, path in result.outputs.items():
        print(f"  {name}: {path}")
    print(f"manifest: {result.manifest}")
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415 (loaded by the run)

    report = FileSystems.join(FileSystems.split(result.manifest)[0], "report.html")
    if FileSystems.exists(report):
        print(f"report (tables, error bars, budget split; DP outputs only): {report}")
    from .charging import account_lines, charge_lines  # noqa: PLC0415

    r = result.reservation
    if r is None:
        print("no [ledger] in the job file: this run's spend is not recorded across runs")
    elif r.rerun:
        print(f"release {r.release_id!r} re-run: nothing charged (same input, job and secret)")
        print("\n".join(account_lines(job, r)))
    else:
        print("\n".join(charge_lines(job, r, f"release id {r.release_id}")))


def _verify_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("release", metavar="DIR", help="a release directory (output.path)")


def _verify(args: argparse.Namespace) -> int:
    from .verify import verify_release  # noqa: PLC0415 (Beam loads slowly)

    problems = verify_release(args.release)
    for problem in problems:
        print(f"userdp verify: {problem}", file=sys.stderr)
    if problems:
        print(f"{args.release}: NOT a complete release", file=sys.stderr)
        return 1
    print(f"{args.release}: complete (every file the manifest lists matches its SHA-256)")
    return 0


COMMANDS: dict[str, Command] = {
    "plan": Command(
        "validate a job file and print its budget split and noise, without reading data",
        _plan_args,
        _plan,
    ),
    "run": Command("run a release: read, bound, aggregate, add noise, write", _run_args, _run),
    "tune": Command(TUNE_HELP, add_tune_arguments, run_tune_command),
    "verify": Command(
        "check that a release directory is complete: its manifest and every file it lists",
        _verify_args,
        _verify,
    ),
    "generate": Command("write a synthetic browsing log", generate_args, run_generate),
    "ledger": Command(LEDGER_HELP, add_ledger_arguments, run_ledger),
    "keygen": Command(
        "create a key file for [release] secret_path (keeps noise keys out of the job graph)",
        keygen_args,
        run_keygen,
    ),
    "demo": Command(
        "generate a small browsing log, release it on the Direct runner and print the result",
        demo_args,
        run_demo,
    ),
}


class _VersionAction(argparse.Action):
    """``--version``: the package version and the code digest (:mod:`.version`), the two
    facts a release's manifest records as ``userdp_version`` and ``userdp_code`` — so an operator
    can tell whether this install would re-run a release's code. The digest reads the sources
    only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from .version import userdp_code_digest, userdp_version  # noqa: PLC0415

        # one line per manifest field, named as there, to compare with a release's
        print(f"userdp_version {userdp_version()}\nuserdp_code {userdp_code_digest()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="userdp", description="Person-level differential privacy on Apache Beam."
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="print the version and the code digest a release's manifest records, and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help)
        cmd.add_arguments(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args._run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
