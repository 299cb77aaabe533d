"""Launchers killed with SIGKILL in the middle of reserving leave a consistent SQLite ledger.

20 runs on one ledger file: a spawned process reserves releases in a loop and is killed after a
random delay. Its clock sleeps 20 ms after each reservation's writes (before the commit), so kills
often land inside a write transaction, leaving a hot journal. After every kill the next opener
rolls it back, and: ``PRAGMA integrity_check`` and the foreign keys pass, every spend equals the
exact sum of its releases and stays within its cap, every release has its whole secret. From run
10 the cap is cut to what is spent + 2/7, so the last runs fill it and are killed while refused.
Five more processes are killed while they create and migrate a new ledger file.

The delays come from a seeded ``random.Random``: they schedule the test, they are not noise.
The test asserts that at least one kill left a hot journal. Measured over 3 runs: 8, 11 and 8 of
the 20 kills did (≈ 80% of the 10 runs before the cap is cut), so a run with none has probability
≈ 0.2¹⁰ ≈ 10⁻⁷.
"""

from __future__ import annotations

import multiprocessing
import random
import signal
import time
from fractions import Fraction
from pathlib import Path

from tests.ledger.workers import SCOPE, open_and_close, reserve_until_killed
from userdp.pipelines.ledger import EACH_PERIOD, Amount
from userdp.pipelines.ledger.migrations import LATEST_VERSION
from userdp.pipelines.ledger.sqlite_store import SqliteLedger

RUNS = 20
SCOPE_CAP = Amount("approx", Fraction(10))  # ≈ 2-3 reservations of 1/7 per run: not filled
WEEK_CAP = Amount("approx", Fraction(5))
TIGHTEN_AT = 10  # then the cap is cut to what is spent + 2/7: later runs fill it and are refused


def check_consistent(path: Path) -> SqliteLedger:
    ledger = SqliteLedger(path)  # rolls back a hot journal left by the kill
    assert ledger.integrity_check() == []
    assert ledger.check_invariants() == []  # spends = sums of releases, within caps, secrets
    return ledger


def test_kills_during_reservation_leave_the_ledger_consistent(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with SqliteLedger(path) as ledger:
        ledger.set_cap(SCOPE, SCOPE_CAP)
        ledger.set_cap(SCOPE, WEEK_CAP, period=EACH_PERIOD)
    ctx = multiprocessing.get_context("spawn")
    delays = random.Random(20).uniform  # not noise: kill times of a test
    hot_journals, charged = 0, list[int]()
    status = None
    for run in range(RUNS):
        if run == TIGHTEN_AT:
            with SqliteLedger(path) as ledger:
                (now,) = ledger.status(SCOPE)
                ledger.set_cap(SCOPE, now.scope.spent + Amount("approx", Fraction(2, 7)))
        ready = ctx.Event()
        p = ctx.Process(target=reserve_until_killed, args=(str(path), run, ready))
        p.start()
        assert ready.wait(timeout=30), "the worker did not open the ledger"
        time.sleep(delays(0.0, 0.15))
        assert p.exitcode is None, "the worker must still be reserving when it is killed"
        p.kill()
        p.join(timeout=30)
        assert p.exitcode == -signal.SIGKILL
        journal = Path(f"{path}-journal")
        hot_journals += journal.exists() and journal.stat().st_size > 0
        with check_consistent(path) as ledger:
            (status,) = ledger.status(SCOPE)
            charged.append(len(ledger.releases()))
            for acc in (status.scope, *status.periods):
                assert acc.cap is not None and acc.spent.fits_in(acc.cap)
    # The kills hit transactions in flight, and the last runs filled the cap (refusals ran too).
    assert hot_journals >= 1, f"no kill landed inside a write transaction ({RUNS} runs)"
    assert status is not None and status.scope.remaining == Amount("approx", Fraction(0))
    assert charged[TIGHTEN_AT - 1] > 0


def test_kills_while_creating_a_ledger_leave_a_usable_file(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    delays = random.Random(5).uniform  # not noise: kill times of a test
    for run in range(5):
        path = tmp_path / f"new-{run}.sqlite"
        p = ctx.Process(target=open_and_close, args=(str(path),))
        p.start()
        time.sleep(delays(0.05, 0.5))  # spans interpreter start-up, file creation and migration
        p.kill()
        p.join(timeout=30)
        with check_consistent(path) as ledger:  # created now if the kill came first
            assert ledger.schema_version() == LATEST_VERSION
