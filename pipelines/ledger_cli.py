"""``userdp ledger show|history|set-cap``: read the budget ledger and set its caps.

The ledger is named by ``--ledger`` (a SQLite file path or a ``postgresql://`` URL) or, when that
is absent, the ``USERDP_LEDGER`` environment variable. ``show`` and ``history`` never create a
ledger; ``set-cap`` creates the SQLite file (mode 0600) on first use. Budget numbers are read
exactly: ``0.1`` is 1/10, ``1/3`` is a third, ``1e-6`` is 10⁻⁶. Exit codes: 0 success, 2 a bad
argument, a refused cap or an unusable ledger.

Registered in :mod:`pipelines.cli` with :func:`add_ledger_arguments` and :func:`run_ledger` (or
:func:`add_ledger_parser` on an ``add_subparsers()`` object).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from fractions import Fraction
from typing import Any, TextIO

from .config_fields import is_modest_fraction
from .ledger import (
    EACH_PERIOD,
    POSTGRES_SCHEMES,
    AccountStatus,
    Amount,
    LedgerError,
    LedgerStore,
    ReleaseRecord,
    ScopeStatus,
    open_ledger,
)
from .ledger.model import show

LEDGER_ENV = "USERDP_LEDGER"
LEDGER_HELP = "show the privacy-budget ledger's caps and charges, or set a cap"


def add_ledger_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Adds ``ledger`` to an ``ArgumentParser.add_subparsers()`` object; returns its parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "ledger", help=LEDGER_HELP, description=LEDGER_HELP
    )
    add_ledger_arguments(p)
    p.set_defaults(_run=run_ledger)
    return p


def add_ledger_arguments(p: argparse.ArgumentParser) -> None:
    """The ``show``, ``history`` and ``set-cap`` subcommands and their arguments."""
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument(
        "--ledger",
        metavar="PATH|URL",
        default=None,
        help=f"SQLite file or postgresql:// URL (default: ${LEDGER_ENV})",
    )
    sub = p.add_subparsers(dest="ledger_command", required=True, metavar="SUBCOMMAND")
    s = sub.add_parser("show", parents=[where], help="caps, spent and remaining, per period")
    s.add_argument("--scope", help="only this scope")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    h = sub.add_parser("history", parents=[where], help="every release charged, oldest first")
    h.add_argument("--scope", help="only this scope")
    h.add_argument("--json", action="store_true", help="machine-readable output")
    h.add_argument("--events", action="store_true", help="the full audit log, with cap changes")
    c = sub.add_parser("set-cap", parents=[where], help="set a scope's or a period's cap")
    c.add_argument("--scope", required=True, help="the scope (created by its first set-cap)")
    which = c.add_mutually_exclusive_group()
    which.add_argument("--period", help="cap only this period (e.g. an ISO week 2025-W03)")
    which.add_argument("--each-period", action="store_true", help="the default cap of every period")
    kind = c.add_mutually_exclusive_group(required=True)
    kind.add_argument("--epsilon", help="an (ε, δ) cap: ε (exact: 1, 0.5, 1/3)")
    kind.add_argument("--rho", help="a ρ-zCDP cap: ρ")
    c.add_argument("--delta", default="0", help="the cap's δ (default 0)")
    c.add_argument(
        "--zcdp-delta",
        help="(ε, δ) scopes: the δ at which a zCDP release is converted to (ε, δ)",
    )


def run_ledger(args: argparse.Namespace) -> int:
    command = args.ledger_command
    location = args.ledger or os.environ.get(LEDGER_ENV, "")
    try:
        if not location:
            raise LedgerError(f"no ledger: pass --ledger PATH|URL or set ${LEDGER_ENV}")
        is_file = not location.startswith(POSTGRES_SCHEMES)
        if command != "set-cap" and is_file and not os.path.exists(location):
            raise LedgerError(f"no ledger at {location}: set a cap first to create one")
        if command != "set-cap" and is_file and os.path.getsize(location) == 0:
            # reading never creates a ledger: an empty file stays as it is
            raise LedgerError(f"{location} is empty, not a ledger: set a cap to create one there")
        with open_ledger(location) as ledger:
            if command == "show":
                _show(ledger, args.scope, args.json, sys.stdout)
            elif command == "history":
                _history(ledger, args.scope, args.json, args.events, sys.stdout)
            else:
                _set_cap(ledger, args, sys.stdout)
    except (LedgerError, ValueError, TypeError) as e:
        print(f"userdp ledger {command}: {e}", file=sys.stderr)
        return 2
    return 0


def _exact(text: str, name: str) -> Fraction:
    try:
        x = Fraction(text)
    except (ValueError, ZeroDivisionError) as e:
        raise ValueError(
            f"--{name} = {text!r}: expected a number such as 1, 0.5, 1/3 or 1e-6"
        ) from e
    if x < 0:
        raise ValueError(f"--{name} = {text!r}: expected a number ≥ 0")
    if not is_modest_fraction(x):  # as a job file's budget (config_fields.EXACT_BITS)
        raise ValueError(f"--{name} = {text[:40]!r}…: expected a number of at most ~330 digits")
    return x


def _set_cap(ledger: LedgerStore, args: argparse.Namespace, out: TextIO) -> None:
    if args.epsilon is not None:
        cap = Amount("approx", _exact(args.epsilon, "epsilon"), _exact(args.delta, "delta"))
    else:
        cap = Amount("zcdp", _exact(args.rho, "rho"), _exact(args.delta, "delta"))
    zd = _exact(args.zcdp_delta, "zcdp-delta") if args.zcdp_delta is not None else None
    period = EACH_PERIOD if args.each_period else args.period
    ledger.set_cap(args.scope, cap, period=period, zcdp_delta=zd)
    what = {None: "", EACH_PERIOD: ", each period"}.get(period, f", period {period}")
    out.write(f"cap of {args.scope}{what}: {cap}\n")


def _account_json(a: AccountStatus) -> dict[str, Any]:
    r = a.remaining
    return {
        "period": a.period,
        "cap": a.cap.to_manifest() if a.cap else None,
        "cap_is_default": a.cap_is_default,
        "spent": a.spent.to_manifest(),
        "remaining": r.to_manifest(round_up=False) if r else None,
    }


def _account_line(label: str, a: AccountStatus) -> str:
    cap = "no cap" if a.cap is None else f"cap {a.cap}" + (" (default)" * a.cap_is_default)
    r = a.remaining
    return f"  {label:<14} {cap}; spent {a.spent}" + (f"; remaining {r}" if r else "") + "\n"


def _show(ledger: LedgerStore, scope: str | None, as_json: bool, out: TextIO) -> None:
    status = ledger.status(scope)
    if scope is not None and not status:
        raise LedgerError(f"scope {scope!r} is not in the ledger")
    if as_json:
        out.write(json.dumps([_scope_json(s) for s in status], indent=2) + "\n")
        return
    if not status:
        out.write("no scopes: set a cap with `userdp ledger set-cap`\n")
    for s in status:
        kind = "(ε, δ)-DP" if s.scope.kind == "approx" else "ρ-zCDP (+ δ)"
        conv = f"; zCDP releases converted at δ={show(s.zcdp_delta)}" if s.zcdp_delta else ""
        out.write(f"{s.scope.scope}: caps in {kind}{conv}\n")
        out.write(_account_line("whole scope", s.scope))
        if s.period_default is not None:
            out.write(f"  {'each period':<14} cap {s.period_default} unless set\n")
        for p in s.periods:
            out.write(_account_line(p.period or "", p))


def _scope_json(s: ScopeStatus) -> dict[str, Any]:
    return {
        "scope": s.scope.scope,
        "kind": s.scope.kind,
        "zcdp_delta": str(s.zcdp_delta) if s.zcdp_delta is not None else None,
        "period_default": s.period_default.to_manifest() if s.period_default else None,
        **{k: v for k, v in _account_json(s.scope).items() if k != "period"},
        "periods": [_account_json(p) for p in s.periods],
    }


def _history(
    ledger: LedgerStore, scope: str | None, as_json: bool, events: bool, out: TextIO
) -> None:
    if events:
        log = ledger.events(scope)
        if as_json:
            out.write(
                json.dumps([vars(e) for e in log], indent=2, default=dict, ensure_ascii=False)
                + "\n"
            )
            return
        for e in log:
            where = " ".join(
                f"{k} {v}"
                for k, v in (("scope", e.scope), ("period", e.period), ("release", e.release_id))
                if v
            )
            detail = json.dumps(dict(e.detail), sort_keys=True, ensure_ascii=False)
            out.write(f"{e.at} {e.event} {where}: {detail}\n")
        return
    records = ledger.releases(scope)
    if as_json:
        out.write(json.dumps([r.to_json() for r in records], indent=2) + "\n")
        return
    if not records:
        out.write("no releases charged\n")
    for r in records:
        out.write(_release_lines(r))


def _release_lines(r: ReleaseRecord) -> str:
    periods = f" periods {', '.join(r.periods)}" if r.periods else ""
    end = ""
    if r.completed_at:
        end = f"; completed {r.completed_at}, manifest {r.manifest_hash}"
    elif r.manifest_hash:  # a run began publishing and did not finish: re-run the id
        end = f"; publishing began, manifest {r.manifest_hash} (unfinished: re-run the id)"
    lines = [
        f"{r.release_id} ({r.status}): scope {r.scope}{periods}",
        f"  cost {r.cost}; counted {r.counted}; conversion: {r.conversion}",
        f"  reserved {r.reserved_at}{end}",
        f"  config {r.config_hash}; input {r.input_fingerprint}",
    ]
    return "\n".join(lines) + "\n"
