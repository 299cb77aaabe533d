"""The ledger's read side: rows → records, status of scopes and periods, history, invariants.

Everything here runs inside a transaction given by the store (:class:`Tx`), so a status or an
invariant check sees one consistent snapshot even while launchers are reserving.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol, TypeVar

from userdp.transforms.mechanisms.rng import SECRET_BYTES

from .errors import LedgerCorruptError
from .model import Amount, CapKind, Cost, from_text
from .records import AccountStatus, Event, ReleaseRecord, ScopeStatus

T = TypeVar("T")
Row = tuple[Any, ...]


class Tx(Protocol):
    """One open transaction. SQL uses ``?`` placeholders; the PostgreSQL store translates them."""

    def execute(self, sql: str, params: Sequence[object] = ()) -> None: ...
    def one(self, sql: str, params: Sequence[object] = ()) -> Row | None: ...
    def all(self, sql: str, params: Sequence[object] = ()) -> list[Row]: ...


@dataclass(frozen=True)
class ScopeRow:
    name: str
    kind: CapKind
    cap: Amount
    period_default: Amount | None
    zcdp_delta: Fraction | None
    spent: Amount


def _amount(kind: CapKind, main: object, delta: object, what: str) -> Amount:
    try:
        return Amount(kind, from_text(main, f"{what} ε/ρ"), from_text(delta, f"{what} δ"))
    except LedgerCorruptError:
        raise
    except ValueError as e:  # e.g. a negative amount written by hand
        raise LedgerCorruptError(f"{what}: {e}: the ledger is corrupt") from None


def _kind(value: object) -> CapKind:
    if value not in ("approx", "zcdp"):
        raise LedgerCorruptError(
            f"stored kind {value!r} is not approx or zcdp: the ledger is corrupt"
        )
    return value


_SCOPE_SQL = (
    "SELECT scope, kind, cap_main, cap_delta, period_cap_main, period_cap_delta, zcdp_delta, "
    "spent_main, spent_delta FROM ledger_scopes"
)


def _scope(r: Row) -> ScopeRow:
    name, kind = r[0], _kind(r[1])
    return ScopeRow(
        name,
        kind,
        _amount(kind, r[2], r[3], f"cap of {name}"),
        _amount(kind, r[4], r[5], f"period default of {name}") if r[4] is not None else None,
        from_text(r[6], f"zcdp_delta of {name}") if r[6] is not None else None,
        _amount(kind, r[7], r[8], f"spent of {name}"),
    )


def load_scope(tx: Tx, scope: str, for_update: str) -> ScopeRow | None:
    r = tx.one(f"{_SCOPE_SQL} WHERE scope = ?{for_update}", (scope,))
    return None if r is None else _scope(r)


def period_charges(tx: Tx, release_id: str, kind: CapKind) -> dict[str, Amount]:
    """What the release charged each of its periods, as stored when it was reserved."""
    rows = tx.all(
        "SELECT period, charged_main, charged_delta FROM ledger_release_periods "
        "WHERE release_id = ?",
        (release_id,),
    )
    return {p: _amount(kind, cm, cd, f"charge of {release_id} on period {p}") for p, cm, cd in rows}


def period_caps(
    tx: Tx, s: ScopeRow, periods: Sequence[str] | None, for_update: str
) -> dict[str, AccountStatus]:
    """The scope's period rows (all, or only ``periods``), with the effective caps."""
    sql = "SELECT period, cap_main, cap_delta, spent_main, spent_delta FROM ledger_periods "
    params: list[object] = [s.name]
    sql += "WHERE scope = ?"
    if periods is not None:
        if not periods:
            return {}
        sql += f" AND period IN ({', '.join('?' for _ in periods)})"
        params += periods
    out = {}
    # Sorted here, not by ORDER BY: PostgreSQL's collation may order text unlike SQLite.
    for p, cm, cd, sm, sd in sorted(tx.all(sql + for_update, params)):
        own = _amount(s.kind, cm, cd, f"cap of period {p}") if cm is not None else None
        spent = _amount(s.kind, sm, sd, f"spent of period {p}")
        out[p] = AccountStatus(s.name, p, s.kind, own or s.period_default, own is None, spent)
    return out


_RELEASE_SQL = (
    "SELECT release_id, scope, cost_kind, cost_main, cost_delta, counted_main, counted_delta, "
    "conversion, config_hash, input_fingerprint, status, reserved_at, completed_at, outputs, "
    "manifest_hash FROM ledger_releases"  # never the secret: auditors may lack that column
)


def _release(r: Row, kind: CapKind, periods: tuple[str, ...]) -> ReleaseRecord:
    try:
        return _release_record(r, kind, periods)
    except LedgerCorruptError:
        raise
    except (ValueError, TypeError) as e:  # a cost kind, an amount or the outputs' JSON
        raise LedgerCorruptError(f"release {r[0]!r}: {e}: the ledger is corrupt") from None


def _release_record(r: Row, kind: CapKind, periods: tuple[str, ...]) -> ReleaseRecord:
    rid = r[0]
    return ReleaseRecord(
        rid,
        r[1],
        periods,
        Cost.from_parts(r[2], from_text(r[3]), from_text(r[4])),
        _amount(kind, r[5], r[6], f"counted of {rid}"),
        r[7],
        r[8],
        r[9],
        r[10],
        r[11],
        r[12],
        json.loads(r[13]) if r[13] is not None else None,
        r[14],
    )


def _release_periods(tx: Tx, rid: str) -> tuple[str, ...]:
    rows = tx.all("SELECT period FROM ledger_release_periods WHERE release_id = ?", (rid,))
    return tuple(sorted(p for (p,) in rows))


def load_release(
    tx: Tx, rid: str, for_update: str, with_secret: bool
) -> tuple[ReleaseRecord, bytes] | None:
    """The release and (``with_secret``) its secret; otherwise the secret is b""."""
    r = tx.one(f"{_RELEASE_SQL} WHERE release_id = ?{for_update}", (rid,))
    if r is None:
        return None
    kind_row = tx.one("SELECT kind FROM ledger_scopes WHERE scope = ?", (r[1],))
    assert kind_row is not None  # a foreign key
    secret = b""
    if with_secret:
        (raw,) = tx.one("SELECT secret FROM ledger_releases WHERE release_id = ?", (rid,)) or (b"",)
        secret = bytes(raw)
    if with_secret and len(secret) != SECRET_BYTES:
        raise LedgerCorruptError(
            f"release {rid!r} has a {len(secret)}-byte secret: the ledger is corrupt"
        )
    return _release(r, _kind(kind_row[0]), _release_periods(tx, rid)), secret


class ReadingMixin(ABC):
    """Status, history and invariant checks; needs only a read transaction."""

    @abstractmethod
    def _read(self, body: Callable[[Tx], T]) -> T: ...

    @abstractmethod
    def _has_table(self, tx: Tx, name: str) -> bool: ...

    def _version(self, tx: Tx) -> int:
        if not self._has_table(tx, "ledger_schema_migrations"):
            return 0
        row = tx.one("SELECT MAX(version) FROM ledger_schema_migrations")
        return int(row[0]) if row and row[0] is not None else 0

    def schema_version(self) -> int:
        """The last applied migration (0 for an empty database)."""
        return self._read(self._version)

    def status(self, scope: str | None = None) -> list[ScopeStatus]:
        """Caps, spends and remainders of every scope (or one) and each of its periods."""

        def body(tx: Tx) -> list[ScopeStatus]:
            where, params = (" WHERE scope = ?", (scope,)) if scope is not None else ("", ())
            out = []
            for r in sorted(tx.all(f"{_SCOPE_SQL}{where}", params)):
                s = _scope(r)
                acc = AccountStatus(s.name, None, s.kind, s.cap, False, s.spent)
                periods = tuple(period_caps(tx, s, None, "").values())
                out.append(ScopeStatus(acc, s.zcdp_delta, s.period_default, periods))
            return out

        return self._read(body)

    def release(self, release_id: str) -> ReleaseRecord | None:
        found = self._read(lambda tx: load_release(tx, release_id, "", with_secret=False))
        return found[0] if found else None

    def releases(self, scope: str | None = None) -> list[ReleaseRecord]:
        """Every release (or one scope's), in reservation order, without secrets."""

        def body(tx: Tx) -> list[ReleaseRecord]:
            kinds = {n: _kind(k) for n, k in tx.all("SELECT scope, kind FROM ledger_scopes")}
            periods: dict[str, list[str]] = defaultdict(list)
            for rid, p in tx.all("SELECT release_id, period FROM ledger_release_periods"):
                periods[rid].append(p)
            where, params = (" WHERE scope = ?", (scope,)) if scope is not None else ("", ())
            rows = sorted(tx.all(f"{_RELEASE_SQL}{where}", params), key=lambda r: (r[11], r[0]))
            return [_release(r, kinds[r[1]], tuple(sorted(periods[r[0]]))) for r in rows]

        return self._read(body)

    def events(self, scope: str | None = None) -> list[Event]:
        """The audit log (set-cap, reserve, rerun, complete), oldest first."""

        def body(tx: Tx) -> list[Row]:
            where, params = (" WHERE scope = ?", (scope,)) if scope is not None else ("", ())
            return tx.all(
                "SELECT id, at, event, scope, period, release_id, detail FROM ledger_events"
                f"{where} ORDER BY id",
                params,
            )

        return [
            Event(int(r[0]), r[1], r[2], r[3], r[4], r[5], json.loads(r[6]))
            for r in self._read(body)
        ]

    def check_invariants(self) -> list[str]:
        """Every broken invariant, in words (empty when the ledger is consistent): spends equal
        the sums of their releases' counted amounts and stay within caps; secrets are whole;
        completed releases have their outputs."""

        def body(tx: Tx) -> list[str]:
            problems: list[str] = []
            scopes = {r[0]: _scope(r) for r in tx.all(_SCOPE_SQL)}
            sums: dict[tuple[str, str | None], Amount] = {}
            by_release: dict[str, list[str]] = defaultdict(list)
            charged: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
            for rid, _scope_name, p, cm, cd in tx.all(
                "SELECT release_id, scope, period, charged_main, charged_delta "
                "FROM ledger_release_periods"
            ):
                by_release[rid].append(p)
                charged[rid].append((p, cm, cd))
            sizes: dict[str, int] = {
                rid: int(n)
                for rid, n in tx.all("SELECT release_id, length(secret) FROM ledger_releases")
            }
            for r in tx.all(_RELEASE_SQL):
                s = scopes[r[1]]
                rec = _release(r, s.kind, tuple(by_release[r[0]]))
                if sizes[rec.release_id] != SECRET_BYTES:
                    problems.append(
                        f"release {rec.release_id!r}: secret is not {SECRET_BYTES} bytes"
                    )
                if rec.status == "completed" and rec.manifest_hash is None:
                    problems.append(f"release {rec.release_id!r}: completed without manifest")
                sums[s.name, None] = sums.get((s.name, None), Amount.zero(s.kind)) + rec.counted
                for p, cm, cd in charged[rec.release_id]:  # as each period was charged
                    amount = _amount(s.kind, cm, cd, f"charge of {rec.release_id} on period {p}")
                    sums[s.name, p] = sums.get((s.name, p), Amount.zero(s.kind)) + amount
            for s in scopes.values():
                accounts = [AccountStatus(s.name, None, s.kind, s.cap, False, s.spent)]
                accounts += period_caps(tx, s, None, "").values()
                for a in accounts:
                    total = sums.pop((s.name, a.period), Amount.zero(s.kind))
                    if total != a.spent:
                        problems.append(
                            f"{a.name}: spent {a.spent} but its releases sum to {total}"
                        )
                    if a.cap is not None and not a.spent.fits_in(a.cap):
                        problems.append(f"{a.name}: spent {a.spent} exceeds cap {a.cap}")
                    if a.cap is None and a.spent != Amount.zero(s.kind):
                        problems.append(f"{a.name}: spent {a.spent} without a cap")
            problems += [f"releases charge unknown account {k}" for k in sums]
            return problems

        return self._read(body)
