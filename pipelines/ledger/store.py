"""The ledger protocol, written once for both databases: reserve, publish, complete, caps, read.

The launcher calls :meth:`LedgerStore.reserve` before the pipeline starts,
:meth:`~.finishing.FinishingMixin.begin_publishing` with the manifest's hash before any output
moves (that hash then binds every run of the release id), and
:meth:`~.finishing.FinishingMixin.complete` after the outputs and the manifest are written;
workers never touch the ledger. A reservation is one serialised write transaction (SQLite
``BEGIN IMMEDIATE``; PostgreSQL ``SELECT ... FOR UPDATE`` of the scope's row, which every write
to the scope or its periods takes first), so concurrent launchers cannot both spend the last of a
cap. It either charges the scope and every period the release reads, or refuses with the numbers
and charges nothing. A charge is taken back (:meth:`~.finishing.FinishingMixin.cancel`) only by
the launcher that made it, only when its pipeline failed before publishing began, and only when
no re-run of the same id joined it meanwhile; a run that is killed, or fails while publishing,
keeps its charge (outputs computed under its secret may exist).

Release ids make re-runs idempotent: the secret (the release's noise key) is created by the
reservation and stored with it; the same id with the same input fingerprint, config hash, scope,
periods and cost returns the stored secret and charges nothing, so the re-run redraws the same noise
and writes the same bytes. Anything different under the same id is refused
(:class:`ReleaseConflictError`): the same noise on different data would publish the difference.

Database specifics (connecting, transactions, retries, locking syntax) are in :mod:`.sqlite_store`
and :mod:`.postgres_store`; the read side is in :mod:`.reading`, the write rules in :mod:`.rules`.
"""

from __future__ import annotations

import dataclasses
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from fractions import Fraction
from typing import Any, ClassVar, TypeVar

from userdp.transforms.mechanisms.rng import new_release_secret

from .errors import LedgerError, UnknownScopeError
from .fingerprint import keyed_fingerprint, new_fingerprint_key
from .finishing import FinishingMixin
from .migrations import MIGRATIONS_TABLE, Dialect, key_stored_fingerprint, pending, statements_for
from .model import Amount, Cost, check_name, to_text
from .reading import ReadingMixin, Tx, load_release, load_scope
from .records import AccountStatus, Quote, Reservation
from .rules import (
    ReleaseRequest,
    apply_cap,
    assess,
    charges,
    check_cap_arguments,
    checked_periods,
    first_refusal,
    refuse_changed_rerun,
)

T = TypeVar("T")
S = TypeVar("S", bound="LedgerStore")
Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class LedgerStore(FinishingMixin, ReadingMixin, ABC):
    """The budget ledger. Not thread-safe: one store object per thread or process.

    Args:
      clock: the time source for timestamps (tests pass a fixed clock).
    """

    dialect: ClassVar[Dialect]
    for_update: ClassVar[str]  # appended to SELECTs of rows the transaction will change

    def __init__(self, clock: Clock = utc_now) -> None:
        self._clock = clock

    @abstractmethod
    def _write(self, body: Callable[[Tx], T]) -> T:
        """Runs ``body`` in one serialised write transaction (retried on transient conflicts)."""

    @abstractmethod
    def close(self) -> None: ...

    def _lock_for_migration(self, tx: Tx) -> None:
        """Serialises concurrent first opens where the write transaction alone does not."""

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _now(self) -> str:
        return self._clock().astimezone(timezone.utc).isoformat(timespec="microseconds")

    def _event(self, tx: Tx, event: str, detail: Mapping[str, Any], **where: str | None) -> None:
        tx.execute(
            "INSERT INTO ledger_events (at, event, scope, period, release_id, detail) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                self._now(),
                event,
                where.get("scope"),
                where.get("period"),
                where.get("release_id"),
                json.dumps(detail, sort_keys=True, ensure_ascii=False),
            ),
        )

    def _migrate(self) -> None:
        """Applies the missing schema migrations (see :mod:`.migrations`). An up-to-date ledger
        is only read, so a role that may not create tables (an auditor) can open it."""
        if not pending(self.schema_version()):
            return

        def body(tx: Tx) -> None:
            self._lock_for_migration(tx)
            tx.execute(MIGRATIONS_TABLE)
            for m in pending(self._version(tx)):  # again: another opener may have migrated
                for statement in statements_for(m, self.dialect):
                    tx.execute(statement)
                if m.rewrite is not None:
                    m.rewrite(tx)
                tx.execute(
                    "INSERT INTO ledger_schema_migrations (version, name, applied_at) "
                    "VALUES (?, ?, ?)",
                    (m.version, m.name, self._now()),
                )

        self._write(body)

    # ------------------------------------------------------------------------------- reserve

    def reserve(
        self,
        release_id: str,
        *,
        scope: str,
        periods: Sequence[str],
        cost: Cost,
        config_hash: str,
        input_fingerprint: str,
    ) -> Reservation:
        """Charges ``cost`` to ``scope`` and each of ``periods``, all or nothing, and returns the
        reservation with the release's secret; or returns the stored reservation of a re-run.

        Raises :class:`CapExceededError` (scope or period, cap, spent, requested),
        :class:`UnknownScopeError` (no cap), :class:`IncompatibleCostError` (a cost the scope's
        kind cannot count) or :class:`ReleaseConflictError` (the id exists with other inputs).
        """
        req = ReleaseRequest(
            release_id, scope, checked_periods(periods), cost, config_hash, input_fingerprint
        )
        return self._write(lambda tx: self._reserve(tx, req))

    def _reserve(self, tx: Tx, req: ReleaseRequest) -> Reservation:
        rid, scope = req.release_id, req.scope
        s = load_scope(tx, scope, self.for_update)  # PostgreSQL: the scope's lock, taken first
        existing = load_release(tx, rid, self.for_update, with_secret=True)
        if existing is not None:
            record, secret = existing
            (key,) = tx.one(
                "SELECT fingerprint_key FROM ledger_releases WHERE release_id = ?", (rid,)
            ) or (None,)
            if key is None:  # a plain digest an older userdp wrote after the migration: key it
                stored, key = key_stored_fingerprint(tx, rid, record.input_fingerprint)
                record = dataclasses.replace(record, input_fingerprint=stored)
            keyed = keyed_fingerprint(bytes(key), req.input_fingerprint)  # as stored
            refuse_changed_rerun(record, dataclasses.replace(req, input_fingerprint=keyed))
            self._event(tx, "rerun", {"status": record.status}, scope=scope, release_id=rid)
            return Reservation(
                rid, record.scope, record.periods, record.cost, record.counted,
                record.conversion, record.config_hash, record.input_fingerprint, True,
                record.status, secret,
            )  # fmt: skip
        counted, conversion, accounts = assess(
            tx,
            s,
            scope,
            periods=req.periods,
            cost=req.cost,
            for_update=self.for_update,
            create_periods=True,
        )
        refusal = first_refusal(rid, accounts, counted, req.cost, conversion)
        if refusal is not None:
            raise refusal
        secret, key = new_release_secret(), new_fingerprint_key()
        keyed = keyed_fingerprint(key, req.input_fingerprint)
        now = self._now()
        m, d = req.cost.parts()
        tx.execute(
            "INSERT INTO ledger_releases (release_id, scope, cost_kind, cost_main, cost_delta,"
            " counted_main, counted_delta, conversion, config_hash, input_fingerprint, secret,"
            " fingerprint_key, status, reserved_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'reserved', ?)",
            (
                rid, scope, req.cost.kind, to_text(m), to_text(d), to_text(counted.main),
                to_text(counted.delta), conversion, req.config_hash, keyed, secret, key, now,
            ),
        )  # fmt: skip
        for acc, amount in charges(accounts, counted):
            self._add_spend(tx, acc, amount, rid, now)
        detail = {"periods": list(req.periods), "cost": str(req.cost), "counted": str(counted)}
        self._event(tx, "reserve", {**detail, "conversion": conversion}, scope=scope,
                    release_id=rid)  # fmt: skip
        return Reservation(
            rid, scope, req.periods, req.cost, counted, conversion, req.config_hash, keyed,
            False, "reserved", secret,
        )  # fmt: skip

    @classmethod
    def _add_spend(cls, tx: Tx, acc: AccountStatus, counted: Amount, rid: str, now: str) -> None:
        cls._set_spend(tx, acc, acc.spent + counted, now)
        if acc.period is not None:  # what this period was charged, for cancel and the invariants
            tx.execute(
                "INSERT INTO ledger_release_periods (release_id, scope, period, charged_main, "
                "charged_delta) VALUES (?, ?, ?, ?, ?)",
                (rid, acc.scope, acc.period, to_text(counted.main), to_text(counted.delta)),
            )

    @staticmethod
    def _set_spend(tx: Tx, acc: AccountStatus, spent: Amount, now: str) -> None:
        if acc.period is None:
            tx.execute(
                "UPDATE ledger_scopes SET spent_main = ?, spent_delta = ?, updated_at = ? "
                "WHERE scope = ?",
                (to_text(spent.main), to_text(spent.delta), now, acc.scope),
            )
            return
        tx.execute(
            "UPDATE ledger_periods SET spent_main = ?, spent_delta = ? "
            "WHERE scope = ? AND period = ?",
            (to_text(spent.main), to_text(spent.delta), acc.scope, acc.period),
        )

    def quote(
        self, scope: str, periods: Sequence[str], cost: Cost, *, release_id: str | None = None
    ) -> Quote:
        """What :meth:`reserve` would charge now and the accounts as they stand; writes nothing.
        For ``userdp plan`` and ``userdp run`` to show the cost and what remains. With
        ``release_id``, ``existing`` is that release's record if the ledger has it."""
        check_name(scope, "scope")
        ps = checked_periods(periods)
        rid = check_name(release_id, "release id") if release_id is not None else None

        def body(tx: Tx) -> Quote:
            found = load_release(tx, rid, "", with_secret=False) if rid is not None else None
            record = found[0] if found else None
            try:
                counted, conversion, accounts = assess(
                    tx,
                    load_scope(tx, scope, ""),
                    scope,
                    periods=ps,
                    cost=cost,
                    for_update="",
                    create_periods=False,
                )
            except LedgerError as e:
                return Quote(scope, ps, cost, None, "", (), str(e), record)
            refusal = first_refusal(rid or "(new)", accounts, counted, cost, conversion)
            return Quote(
                scope, ps, cost, counted, conversion, tuple(accounts),
                str(refusal) if refusal else None, record,
            )  # fmt: skip

        return self._read(body)

    # ------------------------------------------------------------------------------- set_cap

    def set_cap(
        self,
        scope: str,
        cap: Amount,
        *,
        period: str | None = None,
        zcdp_delta: Fraction | None = None,
    ) -> None:
        """Sets the cap of ``scope`` (creating it), of one ``period`` of it, or with
        ``period=EACH_PERIOD`` the default cap of every period without its own.

        A scope's kind (``cap.kind``) is fixed when it is created. ``zcdp_delta`` (approx scopes,
        scope cap only; kept when omitted) is the δ at which a zCDP release is converted to (ε, δ).
        A cap below what is already spent is refused: the ledger never shows an overspend.
        """
        check_cap_arguments(scope, cap, period, zcdp_delta)

        def body(tx: Tx) -> None:
            s = load_scope(tx, scope, self.for_update)
            now = self._now()
            extra = {"zcdp_delta": str(zcdp_delta)} if zcdp_delta is not None else {}
            if s is not None:
                was = apply_cap(
                    tx, s, cap, period=period, zcdp_delta=zcdp_delta, now=now,
                    for_update=self.for_update,
                )  # fmt: skip
                detail = {"cap": str(cap), "was": was, **extra}
                self._event(tx, "set-cap", detail, scope=scope, period=period)
                return
            if period is not None:
                raise UnknownScopeError(
                    f"scope {scope!r} does not exist: set its own cap (without a period) first"
                )
            tx.execute(
                "INSERT INTO ledger_scopes (scope, kind, cap_main, cap_delta, zcdp_delta, "
                "spent_main, spent_delta, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, '0/1', '0/1', ?, ?)",
                (
                    scope, cap.kind, to_text(cap.main), to_text(cap.delta),
                    to_text(zcdp_delta) if zcdp_delta is not None else None, now, now,
                ),
            )  # fmt: skip
            self._event(tx, "set-cap", {"cap": str(cap), "was": None, **extra}, scope=scope)

        self._write(body)
