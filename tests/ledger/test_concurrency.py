"""8 processes × 150 reservations race for one scope, on a real SQLite file and on a real
PostgreSQL server (skipped, saying how to get one, without ``USERDP_TEST_POSTGRES_URL``).

Every release id is tried by two processes, so the race has charges, free re-runs and refusals.
Checked afterwards: no id charged twice, the ledger's releases are exactly the reported charges,
every spend is the exact sum of its charges and within its cap, no refusal was spurious (the
account it hit is full at the end too), and re-runs got the charged release's secret.
"""

from __future__ import annotations

import multiprocessing
from collections import defaultdict
from fractions import Fraction

from tests.ledger.workers import ATTEMPTS, POOL, SCOPE, WORKERS, race, release_plan
from userdp.pipelines.ledger import EACH_PERIOD, AccountStatus, Amount, open_ledger

SCOPE_CAP = Amount("approx", Fraction(15))  # demand ≈ 135; the week caps alone allow ≈ 20
WEEK_CAP = Amount("approx", Fraction(10))


def run_race(location: str) -> dict[str, list[tuple[str, str]]]:
    ctx = multiprocessing.get_context("spawn")
    go, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=race, args=(location, w, go, results)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    go.set()  # workers open the ledger first, then start together
    outcomes: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for _ in procs:
        _, out = results.get(timeout=120)
        for rid, outcome, info in out:
            outcomes[rid].append((outcome, info))
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    return outcomes


def cap_of(acc: AccountStatus) -> Amount:
    assert acc.cap is not None
    return acc.cap


def test_racing_reservations_never_overspend(location: str) -> None:
    with open_ledger(location) as ledger:
        ledger.set_cap(SCOPE, SCOPE_CAP)
        ledger.set_cap(SCOPE, WEEK_CAP, period=EACH_PERIOD)
    outcomes = run_race(location)  # a stalled race fails on the queue's timeout, not a clock
    assert sum(len(v) for v in outcomes.values()) == WORKERS * ATTEMPTS
    assert len(outcomes) == POOL

    charged: dict[str, str] = {}
    for rid, results in outcomes.items():
        kinds = sorted(o for o, _ in results)
        # Spends only grow, so once refused an id stays refused; otherwise one charge, one re-run.
        assert kinds in (["charged", "rerun"], ["refused", "refused"]), (rid, results)
        if kinds[0] == "charged":
            (secret,) = {info for _, info in results}  # the re-run got the charged secret
            charged[rid] = secret
    refused = set(outcomes) - set(charged)
    assert charged and refused, "the race must both charge and refuse"

    with open_ledger(location) as ledger:
        records = {r.release_id: r for r in ledger.releases()}
        (status,) = ledger.status(SCOPE)
        assert ledger.check_invariants() == []
    assert set(records) == set(charged)  # the ledger's rows are exactly the successes

    expected: dict[str | None, Fraction] = defaultdict(Fraction)
    for k in range(POOL):
        rid, eps, periods = release_plan(k)
        if rid in charged:
            assert records[rid].counted == Amount("approx", eps)
            assert records[rid].periods == tuple(sorted(periods))
            expected[None] += eps
            for account in periods:  # a release reading several periods: 2ε on each (pure ε)
                expected[account] += eps if len(periods) == 1 else 2 * eps
    accounts = {a.period: a for a in (status.scope, *status.periods)}
    for name, acc in accounts.items():
        assert acc.spent == Amount("approx", expected[name])  # exact sums
        assert acc.spent.fits_in(cap_of(acc))  # never over a cap
    for rid in refused:  # each refusal hit an account that cannot take it even now
        _, eps, periods = release_plan(int(rid[1:]))
        each = eps if len(periods) == 1 else 2 * eps
        room = [accounts[None].spent.main + eps <= cap_of(accounts[None]).main]
        room += [accounts[a].spent.main + each <= cap_of(accounts[a]).main for a in periods]
        assert not all(room), f"{rid} was refused but every account it reads has room"
