"""The SQLite ledger file: mode 0600, refused when others can read it, migrations from empty and
from an older version, re-open, and a ledger newer than the code refused."""

from __future__ import annotations

import os
import sqlite3
import stat
from fractions import Fraction
from pathlib import Path

import pytest

from userdp.pipelines.ledger import (
    Amount,
    Cost,
    LedgerError,
    LedgerPermissionError,
    LedgerSchemaError,
    ReleaseConflictError,
    open_ledger,
)
from userdp.pipelines.ledger.fingerprint import keyed_fingerprint
from userdp.pipelines.ledger.migrations import LATEST_VERSION, MIGRATIONS, statements_for
from userdp.pipelines.ledger.sqlite_store import SqliteLedger
from userdp.transforms.mechanisms.accounting import PureDP

TABLES = {
    "ledger_schema_migrations",
    "ledger_scopes",
    "ledger_periods",
    "ledger_releases",
    "ledger_release_periods",
    "ledger_events",
}


def schema(path: Path) -> tuple[set[str], set[str], list[int]]:
    with sqlite3.connect(path) as db:
        names = db.execute("SELECT type, name FROM sqlite_master").fetchall()
        versions = [v for (v,) in db.execute("SELECT version FROM ledger_schema_migrations")]
    tables = {n for t, n in names if t == "table" and n != "sqlite_sequence"}
    return tables, {n for t, n in names if t == "index" and n.startswith("ledger_")}, versions


def test_created_with_mode_0600_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    old = os.umask(0)
    try:
        SqliteLedger(path).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644])
def test_a_file_others_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "ledger.sqlite"
    SqliteLedger(path).close()
    path.chmod(mode)
    with pytest.raises(
        LedgerPermissionError,
        match=f"the ledger {path} has mode {mode:04o}: group or others can access it.*"
        f"Run `chmod 600 {path}`",
    ):
        open_ledger(path)
    path.chmod(0o600)
    open_ledger(path).close()


def test_missing_directory_and_foreign_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="its directory does not exist"):
        open_ledger(tmp_path / "no" / "ledger.sqlite")
    with pytest.raises(LedgerError, match="is not a regular file"):
        open_ledger(tmp_path)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database, but long enough to be looked at" * 100)
    junk.chmod(0o600)
    with pytest.raises(LedgerSchemaError, match="is not a readable userdp ledger"):
        open_ledger(junk)


def test_migrations_from_an_empty_file_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    path.touch(mode=0o600)  # an empty file is an empty database
    with SqliteLedger(path) as ledger:
        assert ledger.schema_version() == LATEST_VERSION == 4
        ledger.set_cap("logs", Amount("approx", Fraction(1)))
        ledger.reserve("r", scope="logs", periods=[], cost=Cost(PureDP(Fraction(1, 3))),
                       config_hash="c", input_fingerprint="f")  # fmt: skip
    tables, indexes, versions = schema(path)
    assert tables == TABLES and versions == [1, 2, 3, 4]
    assert indexes == {"ledger_releases_by_scope", "ledger_release_periods_by_period"}
    with SqliteLedger(path) as again:  # re-open: nothing re-applied, data kept
        assert again.schema_version() == 4 and again.integrity_check() == []
        assert again.releases()[0].counted == Amount("approx", Fraction(1, 3))
    assert schema(path)[2] == [1, 2, 3, 4]


def test_migrates_a_version_1_ledger_keeping_its_data(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    path.touch(mode=0o600)
    with sqlite3.connect(path) as db:  # a ledger written by a userdp that knew only version 1
        db.execute("CREATE TABLE ledger_schema_migrations (version INTEGER PRIMARY KEY, "
                   "name TEXT NOT NULL, applied_at TEXT NOT NULL)")  # fmt: skip
        for statement in statements_for(MIGRATIONS[0], "sqlite"):
            db.execute(statement)
        db.execute("INSERT INTO ledger_schema_migrations VALUES (1, 'v1', 'then')")
        db.execute("INSERT INTO ledger_scopes (scope, kind, cap_main, cap_delta, spent_main, "
                   "spent_delta, created_at, updated_at) VALUES "
                   "('logs', 'approx', '1/1', '0/1', '0/1', '0/1', 'then', 'then')")  # fmt: skip
    assert schema(path)[1] == set() and schema(path)[2] == [1]
    with SqliteLedger(path) as ledger:
        assert ledger.schema_version() == 4
        assert ledger.status()[0].scope.cap == Amount("approx", Fraction(1))
    assert len(schema(path)[1]) == 2 and schema(path)[2] == [1, 2, 3, 4]


def written_by(path: Path, versions: int) -> sqlite3.Connection:
    """A connection to ``path`` holding the schema of migrations 1 … ``versions`` and their
    records: a ledger as an older userdp left it, for a test to add rows to."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE ledger_schema_migrations (version INTEGER PRIMARY KEY, "
               "name TEXT NOT NULL, applied_at TEXT NOT NULL)")  # fmt: skip
    for m in MIGRATIONS[:versions]:
        for statement in statements_for(m, "sqlite"):
            db.execute(statement)
        db.execute("INSERT INTO ledger_schema_migrations VALUES (?, 'v', 'then')", (m.version,))
    return db


def test_migrating_to_version_3_keys_the_stored_input_fingerprints(tmp_path: Path) -> None:
    """A version-2 ledger holds plain fingerprints (digests of the files' sizes); version 3 keys
    each with a new per-release key, and a re-run of such a release on the same files stays free."""
    path = tmp_path / "ledger.sqlite"
    path.touch(mode=0o600)
    plain = "sha256:" + "ab" * 32
    with written_by(path, 2) as db:  # a ledger written by a userdp that knew versions 1 and 2
        db.execute("INSERT INTO ledger_scopes (scope, kind, cap_main, cap_delta, spent_main, "
                   "spent_delta, created_at, updated_at) VALUES "
                   "('logs', 'approx', '1/1', '0/1', '1/3', '0/1', 'then', 'then')")  # fmt: skip
        db.execute("INSERT INTO ledger_releases (release_id, scope, cost_kind, cost_main, "
                   "cost_delta, counted_main, counted_delta, conversion, config_hash, "
                   "input_fingerprint, secret, status, reserved_at) VALUES ('r', 'logs', 'pure', "
                   "'1/3', '0/1', '1/3', '0/1', 'none: pure ε-DP is (ε, 0)-DP', 'c', ?, ?, "
                   "'reserved', 'then')",
                   (plain, bytes(32)))  # fmt: skip
    with SqliteLedger(path) as ledger:
        (record,) = ledger.releases()
        assert record.input_fingerprint.startswith("hmac-sha256:")
        with sqlite3.connect(path) as db:
            (key,) = db.execute("SELECT fingerprint_key FROM ledger_releases").fetchone()
        assert record.input_fingerprint == keyed_fingerprint(key, plain) and key != bytes(32)
        again = ledger.reserve("r", scope="logs", periods=[], cost=Cost(PureDP(Fraction(1, 3))),
                               config_hash="c", input_fingerprint=plain)  # fmt: skip
        assert again.rerun and ledger.status()[0].scope.spent == Amount("approx", Fraction(1, 3))


def test_migrating_to_version_4_records_what_each_period_was_charged(tmp_path: Path) -> None:
    """Before version 4 a release charged each period its counted amount, even when it read
    several (docs/ledger.md, "Periods"). The migration records that, so the invariants hold and
    cancelling such a release takes back what it charged, not the new rate."""
    path = tmp_path / "ledger.sqlite"
    path.touch(mode=0o600)
    with written_by(path, 3) as db:  # a ledger written by a userdp that knew versions 1 to 3
        db.execute(
            "INSERT INTO ledger_scopes (scope, kind, cap_main, cap_delta, period_cap_main, "
            "period_cap_delta, spent_main, spent_delta, created_at, updated_at) VALUES "
            "('s', 'approx', '10/1', '0/1', '3/1', '0/1', '2/1', '0/1', 'then', 'then')"
        )
        for p, spent in (("w1", "2/1"), ("w2", "1/1")):
            db.execute("INSERT INTO ledger_periods (scope, period, spent_main, spent_delta) "
                       "VALUES ('s', ?, ?, '0/1')", (p, spent))  # fmt: skip
        for rid, periods in (("r1", ("w1", "w2")), ("r3", ("w1",))):  # ε = 1 each, old rate
            db.execute("INSERT INTO ledger_releases (release_id, scope, cost_kind, cost_main, "
                       "cost_delta, counted_main, counted_delta, conversion, config_hash, "
                       "input_fingerprint, secret, fingerprint_key, status, reserved_at) VALUES "
                       "(?, 's', 'pure', '1/1', '0/1', '1/1', '0/1', 'none', 'c', "
                       "'hmac-sha256:x', ?, ?, 'reserved', 'then')",
                       (rid, bytes(32), bytes(32)))  # fmt: skip
            for p in periods:
                db.execute("INSERT INTO ledger_release_periods (release_id, scope, period) "
                           "VALUES (?, 's', ?)", (rid, p))  # fmt: skip
            db.execute("INSERT INTO ledger_events (at, event, scope, release_id, detail) "
                       "VALUES ('then', 'reserve', 's', ?, '{}')", (rid,))  # fmt: skip
    with SqliteLedger(path) as ledger:
        assert ledger.check_invariants() == []
        assert ledger.cancel("r1")
        (status,) = ledger.status("s")
        assert [(p.period, p.spent.main) for p in status.periods] == [("w1", 1), ("w2", 0)]
        assert status.scope.spent.main == 1 and ledger.check_invariants() == []


def test_a_plain_fingerprint_written_after_the_migration_is_keyed_at_its_rerun(
    tmp_path: Path,
) -> None:
    """An older userdp that opened the ledger before another launcher migrated it can still
    write a plain digest (and no key): its re-run keys the row, and a refusal never quotes it."""
    path = tmp_path / "ledger.sqlite"
    plain, other = "sha256:" + "ab" * 32, "sha256:" + "cd" * 32
    with SqliteLedger(path) as ledger:
        ledger.set_cap("logs", Amount("approx", Fraction(1)))
    with sqlite3.connect(path) as db:  # the row as the older userdp writes it
        db.execute("INSERT INTO ledger_releases (release_id, scope, cost_kind, cost_main, "
                   "cost_delta, counted_main, counted_delta, conversion, config_hash, "
                   "input_fingerprint, secret, status, reserved_at) VALUES ('r', 'logs', 'pure', "
                   "'1/3', '0/1', '1/3', '0/1', 'none: pure ε-DP is (ε, 0)-DP', 'c', ?, ?, "
                   "'reserved', 'then')", (plain, bytes(32)))  # fmt: skip
    cost = Cost(PureDP(Fraction(1, 3)))
    with SqliteLedger(path) as ledger:
        with pytest.raises(ReleaseConflictError, match="input fingerprint: recorded hmac") as e:
            ledger.reserve("r", scope="logs", periods=[], cost=cost, config_hash="c",
                           input_fingerprint=other)  # fmt: skip
        assert plain not in str(e.value) and other not in str(e.value)
        again = ledger.reserve("r", scope="logs", periods=[], cost=cost, config_hash="c",
                               input_fingerprint=plain)  # fmt: skip
        assert again.rerun and again.input_fingerprint.startswith("hmac-sha256:")
        assert [r.input_fingerprint for r in ledger.releases()] == [again.input_fingerprint]


def test_a_ledger_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    SqliteLedger(path).close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO ledger_schema_migrations VALUES (7, 'future', 'later')")
    with pytest.raises(
        LedgerSchemaError,
        match="the ledger's schema is version 7 but this userdp knows versions up to 4",
    ):
        SqliteLedger(path)


def test_schema_checks_refuse_rows_that_break_the_rules(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    SqliteLedger(path).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA foreign_keys = ON")
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            db.execute("INSERT INTO ledger_scopes (scope, kind, cap_main, cap_delta, spent_main, "
                       "spent_delta, created_at, updated_at) VALUES "
                       "('x', 'pure', '1/1', '0/1', '0/1', '0/1', 't', 't')")  # fmt: skip
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY constraint failed"):
            db.execute("INSERT INTO ledger_releases (release_id, scope, cost_kind, cost_main, "
                       "cost_delta, counted_main, counted_delta, conversion, config_hash, "
                       "input_fingerprint, secret, status, reserved_at) VALUES ('r', 'nope', "
                       "'pure', '1/1', '0/1', '1/1', '0/1', 'none', 'c', 'f', x'00', "
                       "'reserved', 't')")  # fmt: skip
