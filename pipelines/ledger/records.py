"""What the ledger returns: a reservation (with the release's secret), release records, account
status and quotes. Only :class:`Reservation` holds the secret; every other record is public."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from userdp.transforms.mechanisms.rng import ReleaseKey

from .model import Amount, CapKind, Cost


@dataclass(frozen=True)
class Reservation:
    """A release's charge, held by the launcher for the run.

    ``rerun`` is True when the release id was already in the ledger with the same scope, periods,
    cost, config hash and input fingerprint: nothing new was charged, and ``secret`` is the stored
    one, so the run redraws exactly the same noise. ``secret`` never appears in ``repr``.
    """

    release_id: str
    scope: str
    periods: tuple[str, ...]
    cost: Cost
    counted: Amount
    conversion: str
    config_hash: str
    input_fingerprint: str
    rerun: bool
    status: str
    secret: bytes = field(repr=False)

    @property
    def key(self) -> ReleaseKey:
        """The release's noise key, built from the stored secret."""
        return ReleaseKey(self.secret)

    def to_manifest(self) -> dict[str, Any]:
        """The charge, for ``manifest.json``: the same on every run of this release id (nothing
        that varies between runs, such as ``rerun`` or what remains, and never the secret).

        Not the input fingerprint: it digests the input files' sizes, which depend on the rows
        of every person — a published value computed from the data without noise (issue 12,
        item 7). It stays in the ledger, keyed by the release's own fingerprint key
        (:func:`.fingerprint.keyed_fingerprint`); ``release_id`` links the two."""
        return {
            "release_id": self.release_id,
            "scope": self.scope,
            "periods": list(self.periods),
            "cost": self.cost.to_manifest(),
            "counted": self.counted.to_manifest(),
            "conversion": self.conversion,
        }


@dataclass(frozen=True)
class ReleaseRecord:
    """One release as the ledger holds it, without its secret."""

    release_id: str
    scope: str
    periods: tuple[str, ...]
    cost: Cost
    counted: Amount
    conversion: str
    config_hash: str
    input_fingerprint: str
    status: str  # "reserved" (running, failed or killed: the charge stays) or "completed"
    reserved_at: str
    completed_at: str | None
    outputs: Mapping[str, str] | None
    manifest_hash: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "release_id": self.release_id,
            "scope": self.scope,
            "periods": list(self.periods),
            "cost": self.cost.to_manifest(),
            "counted": self.counted.to_manifest(),
            "conversion": self.conversion,
            "config_hash": self.config_hash,
            "input_fingerprint": self.input_fingerprint,
            "status": self.status,
            "reserved_at": self.reserved_at,
            "completed_at": self.completed_at,
            "outputs": dict(self.outputs) if self.outputs is not None else None,
            "manifest_hash": self.manifest_hash,
        }


@dataclass(frozen=True)
class AccountStatus:
    """A scope's or one period's cap, spend and remainder (``period`` None: the scope itself).

    ``cap`` is None for a period without its own cap when the scope has no per-period default;
    ``cap_is_default`` says the period uses the scope's per-period default.
    """

    scope: str
    period: str | None
    kind: CapKind
    cap: Amount | None
    cap_is_default: bool
    spent: Amount

    @property
    def remaining(self) -> Amount | None:
        return None if self.cap is None else self.cap.minus_clamped(self.spent)

    @property
    def name(self) -> str:
        return (
            f"scope {self.scope!r}"
            if self.period is None
            else (f"period {self.period!r} of scope {self.scope!r}")
        )


@dataclass(frozen=True)
class ScopeStatus:
    scope: AccountStatus
    zcdp_delta: Fraction | None  # approx scopes: the δ at which each zCDP release is converted
    period_default: Amount | None
    periods: tuple[AccountStatus, ...]


@dataclass(frozen=True)
class Quote:
    """What a release would be charged, and the accounts it would touch, before reserving.

    ``refusal`` is the message :meth:`reserve` would raise now (None when it fits);
    ``existing`` is the record of the same release id when it is already in the ledger.
    """

    scope: str
    periods: tuple[str, ...]
    cost: Cost
    counted: Amount | None
    conversion: str
    accounts: tuple[AccountStatus, ...]
    refusal: str | None
    existing: ReleaseRecord | None


@dataclass(frozen=True)
class Event:
    """One line of the ledger's audit log: set-cap, reserve, rerun or complete."""

    id: int
    at: str
    event: str
    scope: str | None
    period: str | None
    release_id: str | None
    detail: Mapping[str, Any]
