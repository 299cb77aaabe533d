"""The shared ledger: PostgreSQL, for schedulers on several machines (needs ``userdp[postgres]``).

Same schema, migrations and protocol as the SQLite store. A write transaction (READ COMMITTED)
first locks the scope's row with ``SELECT ... FOR UPDATE``; every reservation and cap change of a
scope and its periods takes that lock first, so they are serialised per scope and cannot deadlock
on each other. Two launchers racing to create the same release id in different scopes meet on the
primary key; the loser's transaction is retried and then sees the winner's row. Serialization
failures and deadlocks (from other clients) are retried too, with a bounded number of attempts.
First opens take a transaction-scoped advisory lock, so concurrent migrations cannot collide.

Access control is the database's: the ledger tables hold release secrets, so only the operator's
role may read them (docs/ledger.md lists the grants).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .errors import LedgerError
from .reading import Row, Tx
from .store import Clock, LedgerStore, utc_now

T = TypeVar("T")

_MIGRATION_LOCK = 0x7573_6572_6470  # "userdp": the advisory lock id of migrations
_INSTALL_HINT = "install the PostgreSQL driver with `pip install 'userdp[postgres]'` (psycopg 3)"


class _PgTx:
    __slots__ = ("_conn",)

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def _run(self, sql: str, params: Sequence[object]) -> Any:
        if "%" in sql:
            raise ValueError(f"ledger SQL must not contain '%': {sql!r}")
        return self._conn.execute(sql.replace("?", "%s"), tuple(params) if params else None)

    def execute(self, sql: str, params: Sequence[object] = ()) -> None:
        self._run(sql, params)

    def one(self, sql: str, params: Sequence[object] = ()) -> Row | None:
        row = self._run(sql, params).fetchone()
        return None if row is None else tuple(row)

    def all(self, sql: str, params: Sequence[object] = ()) -> list[Row]:
        return [tuple(r) for r in self._run(sql, params).fetchall()]


class PostgresLedger(LedgerStore):
    """A ledger in the PostgreSQL database at ``url`` (``postgresql://user@host/db``).

    Args:
      url: a libpq connection URL; keep the password out of it (use ~/.pgpass or PGPASSWORD).
      attempts: how many times a write is tried when the server reports a conflict.
      clock: the time source for timestamps.
    """

    dialect = "postgres"
    for_update = " FOR UPDATE"

    def __init__(
        self, url: str, *, attempts: int = 20, connect_timeout: int = 10, clock: Clock = utc_now
    ) -> None:
        super().__init__(clock)
        try:
            import psycopg  # noqa: PLC0415 (optional dependency)
        except ImportError as e:
            raise LedgerError(f"the ledger {_redact(url)} is PostgreSQL: {_INSTALL_HINT}") from e
        self._psycopg = psycopg
        self._url = url
        self._attempts = attempts
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=connect_timeout)
        except psycopg.Error as e:
            raise LedgerError(f"cannot connect to the ledger {_redact(url)}: {e}") from e
        self._migrate()

    def __repr__(self) -> str:
        return f"PostgresLedger({_redact(self._url)!r})"

    def close(self) -> None:
        self._conn.close()

    def _has_table(self, tx: Tx, name: str) -> bool:
        row = tx.one("SELECT to_regclass(?)", (name,))  # on the connection's search_path
        return row is not None and row[0] is not None

    def _lock_for_migration(self, tx: Tx) -> None:
        tx.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))

    def _write(self, body: Callable[[Tx], T]) -> T:
        errors = self._psycopg.errors
        retry = (errors.SerializationFailure, errors.DeadlockDetected, errors.UniqueViolation)
        for attempt in range(self._attempts):
            try:
                with self._conn.transaction():
                    return body(_PgTx(self._conn))
            except retry as e:
                last: Exception = e
                time.sleep(min(0.5, 0.005 * 2**attempt))
            except self._psycopg.Error as e:
                raise LedgerError(f"the ledger {_redact(self._url)} failed: {e}") from e
        raise LedgerError(
            f"the ledger {_redact(self._url)} kept reporting conflicts after {self._attempts} "
            f"attempts: {last}"
        )

    def _read(self, body: Callable[[Tx], T]) -> T:
        try:
            with self._conn.transaction():
                tx = _PgTx(self._conn)
                tx.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                return body(tx)
        except self._psycopg.Error as e:
            raise LedgerError(f"the ledger {_redact(self._url)} failed: {e}") from e


def _redact(url: str) -> str:
    """The URL without a password, for messages."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"
