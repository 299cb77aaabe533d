"""``userdp tune JOB.toml [--epsilon E] [--out DIR]``: the command's arguments and its output.

Exit codes as ``userdp run``'s (:mod:`.cli`): 2 for the job file, inputs or locations (nothing
charged), 3 when the ledger refuses, 1 when the measurement itself failed (its charge taken back)
or writing its results did (its charge stands), 130/143 when interrupted (the line says what
became of the charge). Library messages may quote data: they go to the operator-only log
(:mod:`.private_log`).
"""

from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from typing import Any

from .config import MAX_EPSILON, TOO_LARGE_BUDGET, ConfigError, load_job
from .config_fields import TOO_EXACT, is_modest_fraction
from .entry import print_summary
from .interrupts import RunInterrupted, exit_code

TUNE_HELP = (
    "measure contributions privately and recommend L, C and value bounds (writes a new job file)"
)


def add_tune_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB.toml", help="the job file")
    p.add_argument(
        "--epsilon",
        default=None,
        help="pure ε the measurements spend (default 0.1); charged to the job's ledger",
    )
    p.add_argument(
        "--out", default=None, help="directory for the report and manifest (default JOB.tune/)"
    )
    p.add_argument("beam_args", nargs=argparse.REMAINDER, help="Beam pipeline options")


def _epsilon(text: str | None) -> Fraction | None:
    if text is None:
        return None
    try:
        eps = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise ConfigError("--epsilon", text, "a positive number, e.g. 0.1") from None
    if eps <= 0:
        raise ConfigError("--epsilon", text, "a positive number, e.g. 0.1")
    if eps > MAX_EPSILON:  # as a job file's budget (config.MAX_EPSILON)
        raise ConfigError("--epsilon", text, f"at most {int(MAX_EPSILON):,}", TOO_LARGE_BUDGET)
    if not is_modest_fraction(eps):  # as a job file's budget (config_fields.EXACT_BITS)
        raise ConfigError(
            "--epsilon", text[:40] + "…", "a number of at most ~330 digits", TOO_EXACT
        )
    return eps


def run_tune_command(args: argparse.Namespace) -> int:
    from .private_log import logged_command  # noqa: PLC0415

    return logged_command("tune", lambda log: _tune_logged(args, log))


def _tune_logged(args: argparse.Namespace, log: Any) -> int:
    from userdp.transforms.keys import KeyFileError  # noqa: PLC0415

    from .cli import _take_flag  # noqa: PLC0415 (cli imports this module)
    from .ledger import LedgerError  # noqa: PLC0415
    from .progress import Progress  # noqa: PLC0415
    from .publish import OutputLocationError  # noqa: PLC0415
    from .sources import SchemaError  # noqa: PLC0415
    from .tune import MeasuredError, run_tune  # noqa: PLC0415 (Beam loads only when used)

    # flags after the job file reach argparse's remainder (the Beam flags): take ours back
    epsilon, beam_args = _take_flag(list(args.beam_args), "--epsilon")
    out, beam_args = _take_flag(beam_args, "--out")
    try:
        job = load_job(args.job)
        eps = _epsilon(epsilon or args.epsilon)
        result = run_tune(job, eps, out or args.out, beam_args, progress=Progress(sys.stderr))
    except (ConfigError, SchemaError, OutputLocationError, KeyFileError) as e:
        print(f"userdp tune: {e}", file=sys.stderr)
        return 2
    except LedgerError as e:
        print(f"userdp tune: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM
        print(f"userdp tune: {_interruption(e)}", file=sys.stderr)
        return exit_code(e)
    except MeasuredError as e:
        log.exception(e)
        charge = _TUNE_CHARGE["kept" if e.charged else "none"]
        print(f"userdp tune: writing the results failed ({e}); {charge}", file=sys.stderr)
        return 1
    except Exception as e:
        log.exception(e)
        print(
            f"userdp tune: the measurement failed ({type(e).__name__}); its charge, if any, was "
            "taken back",
            file=sys.stderr,
        )
        return 1
    print_summary(lambda: print_tune_result(result, job), "tune", "measured, charged and written")
    return 0


_TUNE_CHARGE = {
    "released": "its charge was taken back",
    "kept": "its charge stands, since noisy measurements may exist (`userdp ledger history`)",
    "none": "nothing was charged",
}


def _interruption(e: KeyboardInterrupt) -> str:
    """When tuning stopped and what became of its charge (:class:`RunInterrupted`); any other
    interrupt came before tuning could tell (its checks, or a second one during its clean-up)."""
    if isinstance(e, RunInterrupted):
        return f"interrupted {e.when}; {_TUNE_CHARGE[e.charge]}"
    return "interrupted; `userdp ledger history` tells whether a tuning charge stands"


def print_tune_result(result: Any, job: Any) -> None:
    from .tune_recommend import relative, setting_text  # noqa: PLC0415

    if not result.recommendations:
        print(
            "nothing to tune: no count, persons, sum or mean query per partition with numeric "
            "bounds"
        )
    else:
        print(f"spent pure ε = {float(result.epsilon):g} on the measurements")
        print(
            "expected |error| per partition (clipped rows spread over the partitions + noise), "
            "as far as the noisy histograms show it — heavy tails they cannot see make it larger "
            "(docs/tuning.md, 'What the stated error leaves out'):"
        )
    for r in result.recommendations:
        print(
            f"  {r.query}: current {setting_text(r.old)} → {r.old.shown_error:.4g}; "
            f"recommended {setting_text(r.new)} → {r.new.shown_error:.4g} "
            f"({relative(r.old.shown_error, r.new.shown_error)} less error)"
        )
        if r.note:
            print(f"    {r.note}")
    for q, why in result.untuned.items():
        print(f"  {q}: not tuned ({why})")
    if result.job_file:
        print(f"new job file (the original is unchanged): {result.job_file}")
    elif result.job_file_error:
        print(f"no new job file: {result.job_file_error}")
    elif result.recommendations:
        print("the job's bounds are already the recommended ones: no new job file")
    if result.recommendations:
        print(f"report and manifest: {result.directory}/report.html, manifest.json")
    r = result.reservation
    if r is not None:
        from .charging import charge_lines  # noqa: PLC0415

        print("\n".join(charge_lines(job, r, f"tuning run {r.release_id}")))
    elif result.recommendations:
        print("no [ledger] in the job file: this spend is not recorded across runs")
