"""Fixtures: a fresh SQLite ledger file, and a fresh PostgreSQL schema per test.

The PostgreSQL tests need a server: ``eval "$(.ci/postgres-setup)"`` installs one from the
distribution's packages, starts it on loopback and sets ``USERDP_TEST_POSTGRES_URL`` (a role that
may create databases). Without that variable they are skipped, saying so.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode, urlsplit, urlunsplit

import pytest

from userdp.pipelines.ledger import LedgerStore, open_ledger

PG_ENV = "USERDP_TEST_POSTGRES_URL"
PG_SKIP = (
    f'PostgreSQL ledger tests need a server: run `eval "$(.ci/postgres-setup)"` to install and '
    f"start one and set {PG_ENV}"
)
BACKENDS = ("sqlite", "postgres")


def _admin(url: str) -> object:
    psycopg = pytest.importorskip("psycopg", reason="pip install 'userdp[postgres]' (psycopg 3)")
    return psycopg.connect(url, autocommit=True)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A URL to a new, empty schema (first on the connection's search_path), dropped after the
    test: as isolated as a new database, and much faster to create."""
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(PG_SKIP)
    name = f"userdp_ledger_{secrets.token_hex(6)}"
    admin = _admin(base)
    admin.execute(f"CREATE SCHEMA {name}")  # type: ignore[attr-defined]
    parts = urlsplit(base)
    option = urlencode({"options": f"-csearch_path={name}"})
    query = f"{parts.query}&{option}" if parts.query else option
    try:
        yield urlunsplit(parts._replace(query=query))
    finally:
        admin.execute(f"DROP SCHEMA {name} CASCADE")  # type: ignore[attr-defined]
        admin.close()  # type: ignore[attr-defined]


@pytest.fixture(params=BACKENDS)
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a ledger lives: a SQLite file path, or a PostgreSQL URL (skipped without a server)."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def ledger(location: str) -> Iterator[LedgerStore]:
    with open_ledger(location) as store:
        yield store


@pytest.fixture
def reopen(location: str) -> Callable[[], LedgerStore]:
    """Opens the same ledger again (a second launcher)."""
    return lambda: open_ledger(location)
