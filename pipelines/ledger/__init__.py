"""The privacy-budget ledger for scheduled releases: caps per scope and per data period, exact
spends, one serialised reservation per release before its pipeline starts, idempotent re-runs.

Budgets are guarantees for adding or removing all rows of one person; releases compose by basic
composition (see :mod:`.model`). Only the launcher uses the ledger; Beam workers never do.

Typical use by the launcher::

    with open_ledger("ledger.sqlite") as ledger:          # or a postgresql:// URL
        r = ledger.reserve(
            release_id, scope="browsing-logs", periods=periods,
            cost=Cost(plan.spent, plan.spent_selection_delta), config_hash=job.config_hash,
            input_fingerprint=input_fingerprint(schema.files).digest,
        )  # refuses (CapExceededError) before anything runs; a re-run returns the same secret
        ...  # run the pipeline with release_key=r.key; manifest["ledger"] = r.to_manifest()
        ledger.complete(release_id, outputs, "sha256:" + manifest_sha256)

Operator's guide, schema and PostgreSQL grants: ``docs/ledger.md``.
"""

from __future__ import annotations

import os

from .errors import (
    CapExceededError,
    IncompatibleCostError,
    LedgerCorruptError,
    LedgerError,
    LedgerPermissionError,
    LedgerSchemaError,
    ReleaseConflictError,
    UnknownScopeError,
)
from .fingerprint import InputFile, InputFingerprint, input_fingerprint, periods_from_paths
from .model import EACH_PERIOD, Amount, CapKind, Cost, count_against
from .records import AccountStatus, Event, Quote, ReleaseRecord, Reservation, ScopeStatus
from .store import LedgerStore

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_ledger(location: str | os.PathLike[str]) -> LedgerStore:
    """The ledger at ``location``: a ``postgresql://`` (or ``postgres://``) URL, or a path to a
    SQLite file (created with mode 0600 if missing)."""
    text = os.fspath(location)
    if not text:
        raise LedgerError("the ledger location is empty: give a file path or a postgresql:// URL")
    if text.startswith(POSTGRES_SCHEMES):
        from .postgres_store import PostgresLedger  # noqa: PLC0415 (optional dependency)

        return PostgresLedger(text)
    from .sqlite_store import SqliteLedger  # noqa: PLC0415

    return SqliteLedger(text)


__all__ = [
    "EACH_PERIOD",
    "AccountStatus",
    "Amount",
    "CapExceededError",
    "CapKind",
    "Cost",
    "Event",
    "IncompatibleCostError",
    "InputFile",
    "InputFingerprint",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerPermissionError",
    "LedgerSchemaError",
    "LedgerStore",
    "Quote",
    "ReleaseConflictError",
    "ReleaseRecord",
    "Reservation",
    "ScopeStatus",
    "UnknownScopeError",
    "count_against",
    "input_fingerprint",
    "open_ledger",
    "periods_from_paths",
]
