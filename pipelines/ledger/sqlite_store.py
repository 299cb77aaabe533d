"""The embedded ledger: one SQLite file, private to the operator (mode 0600).

Writes are serialised by ``BEGIN IMMEDIATE``, which takes the database's write lock before the
first read, so two launchers cannot both read the same spend and both add to it; a launcher that
finds the lock taken waits up to ``timeout`` seconds (SQLite's busy handler). The default rollback
journal with ``synchronous=FULL`` makes every committed charge durable before the pipeline starts,
and a launcher killed mid-transaction leaves a hot journal that the next opener rolls back.

The file holds every release's secret, so it is created with mode 0600 and refused on open when
group or others can read it. It must live on a local file system (SQLite's locks are unreliable
on network file systems); schedulers on several machines should use the PostgreSQL store.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from .errors import LedgerError, LedgerPermissionError, LedgerSchemaError
from .reading import Row, Tx
from .store import Clock, LedgerStore, utc_now

T = TypeVar("T")


def create_private_file(path: str) -> None:
    """Creates ``path`` empty with mode 0600 unless it exists (an empty file is a valid, empty
    SQLite database). ``O_EXCL`` makes concurrent first opens safe: one creates, others find it."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    except FileNotFoundError as e:
        raise LedgerError(
            f"cannot create the ledger {path}: its directory does not exist; create it first"
        ) from e
    try:
        os.fchmod(fd, 0o600)  # exact, whatever the umask
    finally:
        os.close(fd)


def check_private(path: str) -> None:
    """Refuses a ledger file that is not a regular file or that group or others may read."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise LedgerError(f"the ledger {path} is not a regular file")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise LedgerPermissionError(
            f"the ledger {path} has mode {mode:04o}: group or others can access it, and it holds "
            f"every release's secret noise key. Run `chmod 600 {path}` (and consider whether the "
            "secrets were read: a reader of a secret can subtract the noise from its outputs)"
        )


class _SqliteTx:
    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[object] = ()) -> None:
        self._conn.execute(sql, tuple(params))

    def one(self, sql: str, params: Sequence[object] = ()) -> Row | None:
        row: Row | None = self._conn.execute(sql, tuple(params)).fetchone()
        return row

    def all(self, sql: str, params: Sequence[object] = ()) -> list[Row]:
        return list(self._conn.execute(sql, tuple(params)).fetchall())


class SqliteLedger(LedgerStore):
    """A ledger in the SQLite file ``path`` (created 0600 if missing; migrated on open).

    Args:
      path: the ledger file; its directory must exist.
      timeout: seconds a write waits for another launcher's transaction before giving up.
      clock: the time source for timestamps.
    """

    dialect = "sqlite"
    for_update = ""  # BEGIN IMMEDIATE already holds the database's write lock

    def __init__(
        self, path: str | os.PathLike[str], *, timeout: float = 60.0, clock: Clock = utc_now
    ) -> None:
        super().__init__(clock)
        self.path = os.fspath(Path(path))
        create_private_file(self.path)
        check_private(self.path)
        self._conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None)
        try:
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._conn.execute("PRAGMA synchronous = FULL")
            self._migrate()
        except sqlite3.OperationalError as e:  # locked, unreadable, read-only, ...
            self._conn.close()
            raise LedgerError(f"cannot open the ledger {self.path}: {e}") from e
        except sqlite3.DatabaseError as e:  # not a database, or a corrupt one
            self._conn.close()
            raise LedgerSchemaError(f"{self.path} is not a readable userdp ledger: {e}") from e

    def __repr__(self) -> str:
        return f"SqliteLedger({self.path!r})"

    def close(self) -> None:
        self._conn.close()

    def _write(self, body: Callable[[Tx], T]) -> T:
        return self._transaction("BEGIN IMMEDIATE", body)

    def _read(self, body: Callable[[Tx], T]) -> T:
        return self._transaction("BEGIN DEFERRED", body)

    def _transaction(self, begin: str, body: Callable[[Tx], T]) -> T:
        try:
            self._conn.execute(begin)
        except sqlite3.OperationalError as e:
            raise LedgerError(
                f"the ledger {self.path} stayed locked by another launcher ({e}); try again"
            ) from e
        try:
            result = body(_SqliteTx(self._conn))
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        return result

    def _has_table(self, tx: Tx, name: str) -> bool:
        return (
            tx.one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
            is not None
        )

    def integrity_check(self) -> list[str]:
        """SQLite's ``PRAGMA integrity_check`` and ``foreign_key_check``: empty when both pass."""

        def body(tx: Tx) -> list[str]:
            rows = [str(r[0]) for r in tx.all("PRAGMA integrity_check")]
            problems = [] if rows == ["ok"] else rows
            return problems + [f"foreign key: {r}" for r in tx.all("PRAGMA foreign_key_check")]

        return self._read(body)
