"""The ``userdp`` command line.

Each subcommand is a :class:`Command` in :data:`COMMANDS`: a help line, a function that adds its
arguments, and a function that runs it and returns the exit code; a new command is one entry in
that table. Exit codes: 0 success; 2 a bad job file, input schema or arguments; 3 refused by the
budget ledger (nothing ran).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .config import ConfigError, load_job
from .ledger_cli import LEDGER_HELP, add_ledger_arguments, run_ledger
from .plan import plan_release
from .plan_text import print_ledger_quote, print_plan, print_runner


@dataclass(frozen=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB.toml", help="the job file")
    p.add_argument(
        "beam_args",
        nargs=argparse.REMAINDER,
        help="Beam pipeline options, as for `userdp run`: the resolved options are printed",
    )


def _plan(args: argparse.Namespace) -> int:
    from .ledger import LedgerError  # noqa: PLC0415

    try:
        job = load_job(args.job)
        plan = plan_release(job)
        print_plan(plan, sys.stdout)
        print_runner(job, args.beam_args, sys.stdout)
        if job.ledger is not None:
            print_ledger_quote(job, plan, sys.stdout)
    except ConfigError as e:
        print(f"userdp plan: {e}", file=sys.stderr)
        return 2
    except LedgerError as e:
        print(f"userdp plan: {e}", file=sys.stderr)
        return 3
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
    from .job import run_release  # noqa: PLC0415 (Beam loads only for commands that use it)
    from .ledger import LedgerError  # noqa: PLC0415
    from .sources import SchemaError  # noqa: PLC0415

    try:
        job = load_job(args.job)
        if args.release_id and job.ledger is None:
            raise ConfigError("--release-id", args.release_id, "a job file with a [ledger]", "")
        result = run_release(job, args.beam_args, release_id=args.release_id)
    except (ConfigError, SchemaError) as e:
        print(f"userdp run: {e}", file=sys.stderr)
        return 2
    except LedgerError as e:  # refused before anything ran (or a ledger that cannot be used)
        print(f"userdp run: {e}", file=sys.stderr)
        return 3
    print(f"released {len(result.outputs)} queries:")
    for name, path in result.outputs.items():
        print(f"  {name}: {path}")
    print(f"manifest: {result.manifest}")
    r = result.reservation
    if r is None:
        print("no [ledger] in the job file: this run's spend is not recorded across runs")
    elif r.rerun:
        print(f"release {r.release_id!r} re-run: nothing charged (same input, job and secret)")
    else:
        print(
            f"charged {r.counted} to {r.scope!r}"
            + (f" periods {list(r.periods)}" * bool(r.periods))
        )
    if r is not None:
        from .charging import accounts_after  # noqa: PLC0415

        for a in accounts_after(job, r):
            print(f"  {a.name}: spent {a.spent} of {a.cap}; remaining {a.remaining}")
    return 0


def _generate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--people", type=int, required=True, help="number of persons")
    p.add_argument("--out", required=True, help="output file: .parquet .avro .csv or .jsonl")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")


def _generate(args: argparse.Namespace) -> int:
    from .generate import generate  # noqa: PLC0415 (keeps `userdp plan` fast)

    if args.people < 1:
        print(f"userdp generate: --people must be ≥ 1, got {args.people}", file=sys.stderr)
        return 2
    rows = generate(args.people, args.out, seed=args.seed)
    print(f"wrote {rows:,} rows for {args.people:,} persons to {args.out}")
    return 0


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--people", type=int, default=5000, help="persons in the synthetic log")
    p.add_argument("--dir", help="working directory (default: a new temporary directory)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")


def _demo(args: argparse.Namespace) -> int:
    from .demo import demo  # noqa: PLC0415 (Beam loads only for commands that use it)

    if args.people < 1:
        print(f"userdp demo: --people must be ≥ 1, got {args.people}", file=sys.stderr)
        return 2
    demo(args.people, args.dir, args.seed, sys.stdout)
    return 0


COMMANDS: dict[str, Command] = {
    "plan": Command(
        "validate a job file and print its budget split and noise, without reading data",
        _plan_args,
        _plan,
    ),
    "run": Command("run a release: read, bound, aggregate, add noise, write", _run_args, _run),
    "generate": Command("write a synthetic browsing log", _generate_args, _generate),
    "ledger": Command(LEDGER_HELP, add_ledger_arguments, run_ledger),
    "demo": Command(
        "generate a small browsing log, release it on the Direct runner and print the result",
        _demo_args,
        _demo,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="userdp", description="Person-level differential privacy on Apache Beam."
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
