"""The rules a ledger write must pass, inside its transaction: which accounts a release charges and
whether they can take it, when a re-run is the same release, and how caps may change. Each refusal
names the account, the cap, what is spent and what was asked for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from .errors import CapExceededError, ReleaseConflictError, UnknownScopeError
from .model import EACH_PERIOD, Amount, Cost, check_name, count_against, period_amount, to_text
from .reading import ScopeRow, Tx, period_caps
from .records import AccountStatus, ReleaseRecord


def _hash_text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise ValueError(f"{what} must be a non-empty string of ≤ 200 characters, got {value!r}")
    return value


def checked_periods(periods: Sequence[str]) -> tuple[str, ...]:
    if isinstance(periods, str):
        raise TypeError(f"periods must be a sequence of period names, got the string {periods!r}")
    out = tuple(sorted(check_name(p, "period") for p in periods))
    if len(set(out)) != len(out):
        raise ValueError(f"periods must be distinct, got {list(periods)}")
    return out


@dataclass(frozen=True)
class ReleaseRequest:
    """The arguments of a reservation, validated."""

    release_id: str
    scope: str
    periods: tuple[str, ...]
    cost: Cost
    config_hash: str
    input_fingerprint: str

    def __post_init__(self) -> None:
        check_name(self.release_id, "release id")
        check_name(self.scope, "scope")
        checked_periods(self.periods)
        if not isinstance(self.cost, Cost):
            raise TypeError(f"cost must be a ledger Cost, got {self.cost!r}")
        _hash_text(self.config_hash, "config_hash")
        _hash_text(self.input_fingerprint, "input_fingerprint")


def manifest_hash_text(value: object) -> str:
    return _hash_text(value, "manifest_hash")


def assess(
    tx: Tx,
    s: ScopeRow | None,
    scope: str,
    *,
    periods: tuple[str, ...],
    cost: Cost,
    for_update: str,
    create_periods: bool,
    charging: bool = True,
) -> tuple[Amount, str, list[AccountStatus]]:
    """The counted amount, its conversion, and the accounts (scope first, then each period) as they
    stand. With ``create_periods``, missing period rows are inserted (spent 0, default cap).
    ``charging`` False (taking a charge back) skips the refusals of a new charge."""
    if s is None:
        raise UnknownScopeError(
            f"scope {scope!r} has no cap in this ledger: set one with `userdp ledger set-cap "
            f"--scope {scope} --epsilon E [--delta D]` (or --rho R) before charging it"
        )
    counted, conversion = count_against(cost, s.kind, s.zcdp_delta, scope)
    # refuses what has no period bound; taking a charge back reads what was stored instead
    per_period = period_amount(counted, len(periods), scope) if charging else counted
    if per_period != counted:
        conversion += (
            f"; each of its {len(periods)} periods counts {per_period} (a period's rows: group "
            "privacy for two, docs/ledger.md)"
        )
    accounts = [AccountStatus(scope, None, s.kind, s.cap, False, s.spent)]
    caps = period_caps(tx, s, periods, for_update)
    if charging and not periods and (s.period_default is not None or period_caps(tx, s, None, "")):
        # otherwise a job file could leave its periods out and spend past every period's cap
        raise UnknownScopeError(
            f"scope {scope!r} is accounted per period, and the release names none: say which "
            "periods its input covers with [ledger] period_rule (derived from every input "
            "path) or periods"
        )
    for p in periods:
        acc = caps.get(p) or AccountStatus(
            scope, p, s.kind, s.period_default, True, Amount.zero(s.kind)
        )
        if acc.cap is None:
            raise UnknownScopeError(
                f"period {p!r} of scope {scope!r} has no cap and the scope has no per-period "
                f"default: set one with `userdp ledger set-cap --scope {scope} --period {p}` "
                f"(or --period '{EACH_PERIOD}' for every period)"
            )
        if p not in caps and create_periods:
            tx.execute(
                "INSERT INTO ledger_periods (scope, period, spent_main, spent_delta) "
                "VALUES (?, ?, '0/1', '0/1')",
                (scope, p),
            )
        accounts.append(acc)
    return counted, conversion, accounts


def charges(
    accounts: Sequence[AccountStatus], counted: Amount
) -> list[tuple[AccountStatus, Amount]]:
    """Each account with what the release charges it: ``counted`` on the scope, and on each
    period :func:`~.model.period_amount` (more when the release reads several periods)."""
    n = sum(acc.period is not None for acc in accounts)
    per_period = period_amount(counted, n, accounts[0].scope) if n else counted
    return [(acc, counted if acc.period is None else per_period) for acc in accounts]


def first_refusal(
    release_id: str,
    accounts: Sequence[AccountStatus],
    counted: Amount,
    cost: Cost,
    conversion: str,
) -> CapExceededError | None:
    """The refusal for the first account that cannot take its charge; None when all can."""
    for acc, amount in charges(accounts, counted):
        if acc.cap is not None and (acc.spent + amount).fits_in(acc.cap):
            continue
        how = "" if conversion.startswith("none") else f" (cost {cost} counted as: {conversion})"
        if amount != counted:  # a period read with others: say why it is charged more
            how += (
                f"; a release that reads several periods charges each {amount} (group privacy "
                "for two: docs/ledger.md, 'Periods')"
            )
        remaining = acc.remaining
        return CapExceededError(
            f"release {release_id!r} refused: it would exceed the cap of {acc.name}: cap "
            f"{acc.cap}, spent {acc.spent}, requested {amount}"
            + (f", remaining {remaining}" if remaining is not None else "")
            + f"{how}. Nothing was charged",
            scope=acc.scope,
            period=acc.period,
            cap=acc.cap,
            spent=acc.spent,
            requested=amount,
        )
    return None


def refuse_changed_rerun(record: ReleaseRecord, req: ReleaseRequest) -> None:
    """A release id seen before must come back with the same input, config, scope, periods and
    cost; otherwise :class:`ReleaseConflictError`, saying why."""
    changes = [
        f"{what}: recorded {old}, now {new}"
        for what, old, new in (
            ("input fingerprint", record.input_fingerprint, req.input_fingerprint),
            ("config hash", record.config_hash, req.config_hash),
            ("scope", record.scope, req.scope),
            ("periods", list(record.periods), list(req.periods)),
        )
        if old != new
    ]
    # costs compare exactly: their text shortens values of more than 40 digits
    if (record.cost.kind, record.cost.parts()) != (req.cost.kind, req.cost.parts()):
        changes.append(f"cost: recorded {record.cost}, now {req.cost}")
    if changes:
        # what "the original input" means: the fingerprint is of metadata, not bytes, so a
        # byte-identical copy with new times is new input (docs/ledger.md, Input fingerprint)
        covers = (
            " (the input fingerprint covers each input file's path, size and modification time "
            "— copy files back with their times, e.g. `cp -p` — and the code of userdp, the "
            "public key files, chunk functions and [release] key file the release reads)"
            if record.input_fingerprint != req.input_fingerprint
            else ""
        )
        raise ReleaseConflictError(
            f"release id {record.release_id!r} is already in the ledger (reserved "
            f"{record.reserved_at}, {record.status}) with a different "
            + "; ".join(changes)
            + ". Refused: the id's noise key would draw the same noise on different data or "
            "queries, and subtracting the two outputs would cancel the noise and publish the "
            "difference of the true values. Use a new release id (a new charge), or restore "
            f"the original input and config to re-run this one for free{covers}"
        )


def check_cap_arguments(
    scope: str, cap: Amount, period: str | None, zcdp_delta: Fraction | None
) -> None:
    check_name(scope, "scope")
    if not isinstance(cap, Amount):
        raise TypeError(f"cap must be an Amount, got {cap!r}")
    if period is not None and period != EACH_PERIOD:
        check_name(period, "period")
    if zcdp_delta is not None and (
        period is not None or cap.kind != "approx" or not 0 < zcdp_delta < 1
    ):
        raise ValueError(
            f"zcdp_delta={zcdp_delta!r}: a conversion δ in (0, 1) is set only with the scope "
            "cap of an (ε, δ) scope (zCDP releases are converted at that δ)"
        )
    if cap.delta >= 1:
        raise ValueError(f"a cap's δ must be < 1 (δ ≥ 1 promises nothing), got {cap}")


def apply_cap(
    tx: Tx,
    s: ScopeRow,
    cap: Amount,
    *,
    period: str | None,
    zcdp_delta: Fraction | None,
    now: str,
    for_update: str,
) -> str | None:
    """Changes a cap of the existing scope ``s``; returns the cap it replaces, in words.
    Refuses a cap of another kind, or one below what its account has already spent."""
    if cap.kind != s.kind:
        raise ValueError(
            f"scope {s.name!r} is capped in {s.kind} amounts {s.cap}; its caps stay of that "
            f"kind (got a {cap.kind} cap {cap}). Use a new scope for a different kind"
        )

    def refuse_below(spent: Amount, what: str) -> None:
        if not spent.fits_in(cap):
            raise ValueError(f"cap {cap} for {what} is below what is already spent, {spent}")

    if period is None:
        refuse_below(s.spent, f"scope {s.name!r}")
        zd = zcdp_delta if zcdp_delta is not None else s.zcdp_delta
        tx.execute(
            "UPDATE ledger_scopes SET cap_main = ?, cap_delta = ?, zcdp_delta = ?, "
            "updated_at = ? WHERE scope = ?",
            (to_text(cap.main), to_text(cap.delta), to_text(zd) if zd else None, now, s.name),
        )
        return str(s.cap)
    accounts = period_caps(tx, s, None, for_update)
    if period == EACH_PERIOD:
        for acc in accounts.values():
            if acc.cap_is_default:
                refuse_below(acc.spent, f"period {acc.period!r} (it uses the default)")
        tx.execute(
            "UPDATE ledger_scopes SET period_cap_main = ?, period_cap_delta = ?, "
            "updated_at = ? WHERE scope = ?",
            (to_text(cap.main), to_text(cap.delta), now, s.name),
        )
        return str(s.period_default) if s.period_default else None
    old = accounts.get(period)
    if old is None:
        tx.execute(
            "INSERT INTO ledger_periods (scope, period, cap_main, cap_delta, spent_main, "
            "spent_delta) VALUES (?, ?, ?, ?, '0/1', '0/1')",
            (s.name, period, to_text(cap.main), to_text(cap.delta)),
        )
        return None
    refuse_below(old.spent, f"period {period!r} of scope {s.name!r}")
    tx.execute(
        "UPDATE ledger_periods SET cap_main = ?, cap_delta = ? WHERE scope = ? AND period = ?",
        (to_text(cap.main), to_text(cap.delta), s.name, period),
    )
    return None if old.cap is None or old.cap_is_default else str(old.cap)
