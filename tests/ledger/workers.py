"""Process entry points for the concurrency and crash tests (spawned, so importable by name)."""

from __future__ import annotations

import contextlib
import time
from datetime import datetime
from fractions import Fraction
from typing import Any

from userdp.pipelines.ledger import CapExceededError, Cost, open_ledger
from userdp.pipelines.ledger.sqlite_store import SqliteLedger
from userdp.pipelines.ledger.store import utc_now
from userdp.transforms.mechanisms.accounting import PureDP

SCOPE = "browsing-logs"
COSTS = (Fraction(1, 3), Fraction(1, 7), Fraction(1, 5))
WEEKS = ("2025-W01", "2025-W02", "2025-W03", "2025-W04")


def release_plan(k: int) -> tuple[str, Fraction, tuple[str, ...]]:
    """Release k of the race: its id, its ε and the weeks it reads (one or two)."""
    periods = (WEEKS[k % 4],) + ((WEEKS[(k + 1) % 4],) if k % 2 else ())
    return f"r{k:04d}", COSTS[k % 3], periods


WORKERS, ATTEMPTS = 8, 150
POOL = WORKERS * ATTEMPTS // 2  # 600 distinct ids, each tried by two workers


def race(location: str, worker: int, go: Any, results: Any) -> None:
    """Tries ATTEMPTS reservations, ids k = worker·ATTEMPTS/2 + i (mod POOL), so every id is
    tried by two workers; reports (id, outcome, secret or message) for each."""
    out: list[tuple[str, str, str]] = []
    with open_ledger(location) as ledger:
        go.wait()
        for i in range(ATTEMPTS):
            rid, eps, periods = release_plan((worker * ATTEMPTS // 2 + i) % POOL)
            try:
                r = ledger.reserve(
                    rid, scope=SCOPE, periods=periods, cost=Cost(PureDP(eps)),
                    config_hash="config", input_fingerprint="input",
                )  # fmt: skip
            except CapExceededError as e:
                out.append((rid, "refused", str(e)))
            else:
                out.append((rid, "rerun" if r.rerun else "charged", r.secret.hex()))
    results.put((worker, out))


class _SlowClock:
    """A clock that sleeps 20 ms on every second call. A successful reservation reads the clock
    twice, before its writes and after them (for its audit event), so it stays open with a hot
    journal for those 20 ms, and a kill usually lands in the middle of a transaction."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> datetime:
        self.calls += 1
        if self.calls % 2 == 0:
            time.sleep(0.02)
        return utc_now()


def reserve_until_killed(path: str, run: int, ready: Any) -> None:
    """Reserves releases of ε = 1/7 on one or two weeks, forever (refusals included)."""
    ledger = SqliteLedger(path, clock=_SlowClock())
    ready.set()
    i = 0
    while True:
        periods = (WEEKS[i % 3],) + ((WEEKS[3],) if i % 2 else ())
        with contextlib.suppress(CapExceededError):
            ledger.reserve(
                f"crash{run:02d}-{i:05d}", scope=SCOPE, periods=periods,
                cost=Cost(PureDP(Fraction(1, 7))), config_hash="c", input_fingerprint="f",
            )  # fmt: skip
        i += 1


def open_and_close(path: str) -> None:
    """Creates and migrates a new ledger, for kills during creation."""
    SqliteLedger(path).close()
