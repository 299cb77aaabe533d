"""The small ``userdp`` commands that touch no private data: ``generate`` (a synthetic log),
``demo`` (generate, plan, run and print a small release) and ``keygen`` (a release key file).

Split from :mod:`.cli` so that each stays small. A bad argument or a location that cannot be
written is exit 2 with a message, never a traceback (the messages may name the synthetic data's
files; they hold no private value).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def generate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--people", type=int, required=True, help="number of persons")
    p.add_argument("--out", required=True, help="output file: .parquet .avro .csv or .jsonl")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")
    p.add_argument(
        "--visits-median", type=float, default=None, help="median visits per person (about 12)"
    )
    p.add_argument("--domains", type=int, default=None, help="number of domains (50)")
    p.add_argument(
        "--domain-skew", type=float, default=None, help="Zipf exponent of domain popularity (1.1)"
    )


def run_generate(args: argparse.Namespace) -> int:
    from .generate import generate  # noqa: PLC0415 (keeps `userdp plan` fast)

    if args.people < 1:
        print(f"userdp generate: --people must be ≥ 1, got {args.people}", file=sys.stderr)
        return 2
    from .generate import LogShape  # noqa: PLC0415

    given = {
        k: v
        for k, v in (
            ("visits_median", args.visits_median),
            ("domains", args.domains),
            ("domain_skew", args.domain_skew),
        )
        if v is not None
    }
    try:
        shape = LogShape(**given)
    except ValueError as e:
        print(f"userdp generate: {e}", file=sys.stderr)
        return 2
    try:
        rows = generate(args.people, args.out, seed=args.seed, shape=shape)
    except OSError as e:  # synthetic data: no message here holds a private value
        print(f"userdp generate: cannot write {args.out} ({e.strerror or e})", file=sys.stderr)
        return 2
    except ValueError as e:  # an extension that is no format
        print(f"userdp generate: {e}", file=sys.stderr)
        return 2
    print(f"wrote {rows:,} rows for {args.people:,} persons to {args.out}")
    return 0


def demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--people", type=int, default=5000, help="persons in the synthetic log")
    p.add_argument("--dir", help="working directory (default: a new temporary directory)")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic data")


def run_demo(args: argparse.Namespace) -> int:
    from .demo import demo  # noqa: PLC0415 (Beam loads only for commands that use it)

    if args.people < 1:
        print(f"userdp demo: --people must be ≥ 1, got {args.people}", file=sys.stderr)
        return 2
    if args.dir is not None:
        try:
            Path(args.dir, "data").mkdir(parents=True, exist_ok=True)
        except OSError as e:
            print(f"userdp demo: --dir {args.dir}: {e.strerror or e}", file=sys.stderr)
            return 2
    demo(args.people, args.dir, args.seed, sys.stdout)
    return 0


def keygen_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="the key file to create (must not exist)")


def run_keygen(args: argparse.Namespace) -> int:
    """A release key file for ``[release] secret_path``: 32 random bytes, mode 0600, never
    overwritten (replacing a key makes earlier release ids impossible to re-run)."""
    import os  # noqa: PLC0415
    import secrets  # noqa: PLC0415

    try:
        parent = os.path.dirname(args.path)
        if parent and not os.path.isdir(parent):  # e.g. keys/ beside the job file: owner-only
            os.makedirs(parent, mode=0o700)
        fd = os.open(args.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        print(f"userdp keygen: cannot create {args.path} ({e.strerror})", file=sys.stderr)
        return 2
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(32))
    print(f"wrote a 32-byte key to {args.path} (mode 0600); set [release] secret_path to it")
    return 0
