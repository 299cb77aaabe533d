"""Versioned schema migrations, the same for SQLite and PostgreSQL.

``ledger_schema_migrations`` records every applied version. Opening a ledger applies the missing
migrations in order, each in the serialised write transaction together with its record, so a crash
or a concurrent opener never leaves half a migration (DDL is transactional on both databases). A
ledger whose version is newer than this code knows is refused rather than misread.

Amounts are exact rationals stored as text ``"p/q"`` (never floats). The statements use a small
common dialect; ``{blob}`` and ``{autoinc}`` are filled in per database.

Invariants (checked by :meth:`~pipelines.ledger.store.LedgerStore.check_invariants`):

* a scope's ``spent`` is exactly the sum of the ``counted`` amounts of the releases that charged
  it, a period's the sum of the ``charged`` amounts its rows of ``ledger_release_periods`` hold
  (more than ``counted`` for a release that reads several periods: ``model.period_amount``), and
  neither exceeds its cap;
* a release charges one scope and the periods listed in ``ledger_release_periods``; its release id
  is the primary key, so it is charged at most once;
* a ``completed`` release has its outputs, manifest hash and completion time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .errors import LedgerSchemaError
from .fingerprint import KEYED_PREFIX, keyed_fingerprint, new_fingerprint_key

Dialect = Literal["sqlite", "postgres"]

_DIALECT = {
    "sqlite": {"blob": "BLOB", "autoinc": "INTEGER PRIMARY KEY AUTOINCREMENT"},
    "postgres": {"blob": "BYTEA", "autoinc": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"},
}


@dataclass(frozen=True)
class Migration:
    """``statements`` (DDL), then ``rewrite(tx)``: a change to the rows the SQL dialects cannot
    say alike, in the same transaction."""

    version: int
    name: str
    statements: tuple[str, ...]
    rewrite: Callable[[Any], None] | None = None


def key_stored_fingerprint(tx: Any, release_id: str, plain: str) -> tuple[str, bytes]:
    """Stores a release's plain input fingerprint in its keyed form under a new random
    ``fingerprint_key`` (:func:`.fingerprint.keyed_fingerprint`); returns (keyed, key)."""
    key = new_fingerprint_key()
    keyed = keyed_fingerprint(key, plain)
    tx.execute(
        "UPDATE ledger_releases SET input_fingerprint = ?, fingerprint_key = ? "
        "WHERE release_id = ?",
        (keyed, key, release_id),
    )
    return keyed, key


def _periods_charged_as_counted(tx: Any) -> None:
    """Version 4: a release reserved before it charged each of its periods its ``counted``
    amount, so that is what its rows record (docs/ledger.md, "Periods": such releases were
    charged less than a period's rows cost; their record stays true to what was charged)."""
    tx.execute(
        "UPDATE ledger_release_periods SET "
        "charged_main = (SELECT r.counted_main FROM ledger_releases r "
        "WHERE r.release_id = ledger_release_periods.release_id), "
        "charged_delta = (SELECT r.counted_delta FROM ledger_releases r "
        "WHERE r.release_id = ledger_release_periods.release_id)"
    )


def _key_input_fingerprints(tx: Any) -> None:
    """Version 3: every plain input fingerprint is keyed (:func:`key_stored_fingerprint`), so
    the ledger holds no digest of the files' sizes that anyone without its key can invert."""
    for rid, fp in tx.all("SELECT release_id, input_fingerprint FROM ledger_releases"):
        if not str(fp).startswith(KEYED_PREFIX):
            key_stored_fingerprint(tx, rid, str(fp))


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "scopes, periods, releases, events",
        (
            """CREATE TABLE ledger_scopes (
                scope TEXT PRIMARY KEY,
                kind TEXT NOT NULL CHECK (kind IN ('approx', 'zcdp')),
                cap_main TEXT NOT NULL,
                cap_delta TEXT NOT NULL,
                period_cap_main TEXT,
                period_cap_delta TEXT,
                zcdp_delta TEXT,
                spent_main TEXT NOT NULL,
                spent_delta TEXT NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                CHECK ((period_cap_main IS NULL) = (period_cap_delta IS NULL)),
                CHECK (kind = 'approx' OR zcdp_delta IS NULL)
            )""",
            """CREATE TABLE ledger_periods (
                scope TEXT NOT NULL REFERENCES ledger_scopes (scope),
                period TEXT NOT NULL,
                cap_main TEXT,
                cap_delta TEXT,
                spent_main TEXT NOT NULL,
                spent_delta TEXT NOT NULL,
                PRIMARY KEY (scope, period),
                CHECK ((cap_main IS NULL) = (cap_delta IS NULL))
            )""",
            """CREATE TABLE ledger_releases (
                release_id TEXT PRIMARY KEY,
                scope TEXT NOT NULL REFERENCES ledger_scopes (scope),
                cost_kind TEXT NOT NULL CHECK (cost_kind IN ('pure', 'approx', 'zcdp')),
                cost_main TEXT NOT NULL,
                cost_delta TEXT NOT NULL,
                counted_main TEXT NOT NULL,
                counted_delta TEXT NOT NULL,
                conversion TEXT NOT NULL,
                config_hash TEXT NOT NULL,
                input_fingerprint TEXT NOT NULL,
                secret {blob} NOT NULL,
                status TEXT NOT NULL CHECK (status IN ('reserved', 'completed')),
                reserved_at TEXT NOT NULL,
                completed_at TEXT,
                outputs TEXT,
                manifest_hash TEXT,
                CHECK (status = 'reserved' OR (completed_at IS NOT NULL
                       AND outputs IS NOT NULL AND manifest_hash IS NOT NULL))
            )""",
            """CREATE TABLE ledger_release_periods (
                release_id TEXT NOT NULL REFERENCES ledger_releases (release_id),
                scope TEXT NOT NULL,
                period TEXT NOT NULL,
                PRIMARY KEY (release_id, period),
                FOREIGN KEY (scope, period) REFERENCES ledger_periods (scope, period)
            )""",
            """CREATE TABLE ledger_events (
                id {autoinc},
                at TEXT NOT NULL,
                event TEXT NOT NULL,
                scope TEXT,
                period TEXT,
                release_id TEXT,
                detail TEXT NOT NULL
            )""",
        ),
    ),
    Migration(
        2,
        "indexes for history and per-period sums",
        (
            "CREATE INDEX ledger_releases_by_scope ON ledger_releases (scope, reserved_at)",
            "CREATE INDEX ledger_release_periods_by_period "
            "ON ledger_release_periods (scope, period)",
        ),
    ),
    Migration(
        3,
        "input fingerprints keyed by a per-release key",
        ("ALTER TABLE ledger_releases ADD COLUMN fingerprint_key {blob}",),
        _key_input_fingerprints,
    ),
    Migration(
        4,
        "what each period was charged, stored with the release's period",
        (
            "ALTER TABLE ledger_release_periods ADD COLUMN charged_main TEXT",
            "ALTER TABLE ledger_release_periods ADD COLUMN charged_delta TEXT",
        ),
        _periods_charged_as_counted,
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version

MIGRATIONS_TABLE = """CREATE TABLE IF NOT EXISTS ledger_schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL
)"""


def statements_for(migration: Migration, dialect: Dialect) -> list[str]:
    return [s.format(**_DIALECT[dialect]) for s in migration.statements]


def pending(current: int, migrations: Sequence[Migration] = MIGRATIONS) -> list[Migration]:
    """The migrations after version ``current``; refuses a ledger newer than this code."""
    known = migrations[-1].version if migrations else 0
    if current > known:
        raise LedgerSchemaError(
            f"the ledger's schema is version {current} but this userdp knows versions up to "
            f"{known}: upgrade userdp before using this ledger (never downgrade a ledger)"
        )
    return [m for m in migrations if m.version > current]
