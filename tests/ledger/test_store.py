"""The ledger protocol, on SQLite and on PostgreSQL (skipped without a server): charges, refusals
with their numbers, re-runs, conflicts, completion, caps, quotes, history and invariants."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from fractions import Fraction

import pytest

from userdp.pipelines.ledger import (
    EACH_PERIOD,
    Amount,
    CapExceededError,
    Cost,
    IncompatibleCostError,
    LedgerError,
    LedgerStore,
    ReleaseConflictError,
    Reservation,
    UnknownScopeError,
)
from userdp.pipelines.ledger.fingerprint import keyed_fingerprint
from userdp.transforms.mechanisms.accounting import ZCDP, ApproxDP, PureDP
from userdp.transforms.mechanisms.budget_split import BudgetExceededError

THIRD = Cost(PureDP(Fraction(1, 3)))


def eps(main: Fraction | int, delta: Fraction | int = 0) -> Amount:
    return Amount("approx", Fraction(main), Fraction(delta))


def reserve(
    ledger: LedgerStore,
    rid: str,
    cost: Cost = THIRD,
    periods: tuple[str, ...] = (),
    *,
    scope: str = "logs",
    config: str = "cfg",
    fp: str = "fp",
) -> Reservation:
    return ledger.reserve(
        rid, scope=scope, periods=periods, cost=cost, config_hash=config, input_fingerprint=fp
    )


def spent(ledger: LedgerStore, period: str | None = None) -> Amount:
    (s,) = ledger.status("logs")
    if period is None:
        return s.scope.spent
    return next(p.spent for p in s.periods if p.period == period)


def test_thirds_fill_a_cap_of_one_exactly(ledger: LedgerStore) -> None:
    ledger.set_cap("logs", eps(1))
    for i in range(3):
        reserve(ledger, f"r{i}")
    assert spent(ledger) == eps(1)  # exact: 3 × 1/3 is 1, not 1 − 2⁻⁵³
    with pytest.raises(CapExceededError, match=re.escape("remaining (ε=0, δ=0)")):
        reserve(ledger, "r3", Cost(PureDP(Fraction(1, 10**30))))
    reserve(ledger, "free", Cost(PureDP(0)))  # a zero cost always fits
    assert ledger.check_invariants() == []


def test_refusal_names_the_scope_cap_spent_and_requested(ledger: LedgerStore) -> None:
    ledger.set_cap("logs", eps(1, Fraction(1, 10**6)))
    reserve(ledger, "a", Cost(ApproxDP(Fraction(2, 3), Fraction(1, 10**6))))
    msg = (
        "release 'b' refused: it would exceed the cap of scope 'logs': "
        "cap (ε=1, δ=1/1000000 (≈1e-06)), spent (ε=2/3 (≈0.6666666667), δ=1/1000000 (≈1e-06)), "
        "requested (ε=1/3 (≈0.3333333333), δ=1/1000000000 (≈1e-09)), "
        "remaining (ε=1/3 (≈0.3333333333), δ=0). Nothing was charged"
    )
    with pytest.raises(CapExceededError, match=re.escape(msg)) as e:
        reserve(ledger, "b", Cost(ApproxDP(Fraction(1, 3), Fraction(1, 10**9))))  # δ is over
    assert isinstance(e.value, BudgetExceededError)  # accounting's error, for callers of either
    assert (e.value.scope, e.value.period, e.value.cap) == (
        "logs",
        None,
        eps(1, Fraction(1, 10**6)),
    )
    assert ledger.release("b") is None and spent(ledger) == eps(Fraction(2, 3), Fraction(1, 10**6))


def test_a_period_cap_refuses_and_nothing_is_charged_anywhere(ledger: LedgerStore) -> None:
    # Each release reads two or three periods at ε = 1/3: 2/3 on each period (group of two).
    ledger.set_cap("logs", eps(10))
    ledger.set_cap("logs", eps(1), period=EACH_PERIOD)
    ledger.set_cap("logs", eps(2), period="2025-W02")
    reserve(ledger, "a", periods=("2025-W01", "2025-W02"))
    msg = (
        "release 'b' refused: it would exceed the cap of period '2025-W01' of scope 'logs': "
        "cap (ε=1, δ=0), spent (ε=2/3 (≈0.6666666667), δ=0), "
        "requested (ε=2/3 (≈0.6666666667), δ=0), remaining (ε=1/3 (≈0.3333333333), δ=0)"
    )
    with pytest.raises(CapExceededError, match=re.escape(msg)):
        reserve(ledger, "b", periods=("2025-W02", "2025-W03", "2025-W01"))
    # All or nothing: W02 (which had room) and the scope are unchanged, W03 was not created.
    assert spent(ledger) == eps(Fraction(1, 3)) and spent(ledger, "2025-W02") == eps(Fraction(2, 3))
    (s,) = ledger.status("logs")
    assert [p.period for p in s.periods] == ["2025-W01", "2025-W02"]
    assert [p.cap_is_default for p in s.periods] == [True, False]
    reserve(ledger, "c", periods=("2025-W02", "2025-W03"))
    assert spent(ledger, "2025-W02") == eps(Fraction(4, 3))
    assert spent(ledger, "2025-W03") == eps(Fraction(2, 3))
    reserve(ledger, "d", periods=("2025-W03",))  # one period: its rows are the person's there
    assert spent(ledger, "2025-W03") == eps(1) and spent(ledger) == eps(1)
    assert ledger.check_invariants() == []


def test_missing_caps_are_refused(ledger: LedgerStore) -> None:
    with pytest.raises(UnknownScopeError, match="scope 'logs' has no cap in this ledger"):
        reserve(ledger, "a")
    with pytest.raises(UnknownScopeError, match="scope 'logs' does not exist: set its own cap"):
        ledger.set_cap("logs", eps(1), period="2025-W01")
    ledger.set_cap("logs", eps(1))
    with pytest.raises(
        UnknownScopeError,
        match="period '2025-W01' of scope 'logs' has no cap and the scope has no per-period",
    ):
        reserve(ledger, "a", periods=("2025-W01",))
    with pytest.raises(ValueError, match="periods must be distinct"):
        reserve(ledger, "a", periods=("2025-W01", "2025-W01"))
    with pytest.raises(TypeError, match="periods must be a sequence of period names, got the str"):
        reserve(ledger, "a", periods="2025-W01")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="release id must be 1-200 of"):
        reserve(ledger, "a b")
    assert ledger.releases() == []


def test_cost_of_the_wrong_kind_is_refused(ledger: LedgerStore) -> None:
    ledger.set_cap("rho-scope", Amount("zcdp", Fraction(1)))
    with pytest.raises(IncompatibleCostError, match="implies no zCDP bound"):
        reserve(ledger, "a", Cost(ApproxDP(1, Fraction(1, 10**6))), scope="rho-scope")
    reserve(ledger, "b", Cost(PureDP(1)), scope="rho-scope")  # ε = 1 counts as ρ = 1/2
    (s,) = ledger.status("rho-scope")
    assert s.scope.spent == Amount("zcdp", Fraction(1, 2))
    ledger.set_cap("logs", eps(1))
    with pytest.raises(IncompatibleCostError, match="has an \\(ε, δ\\) cap and no conversion δ"):
        reserve(ledger, "c", Cost(ZCDP(Fraction(1, 100))))


def test_zcdp_release_in_an_approx_scope_is_converted_and_recorded(ledger: LedgerStore) -> None:
    ledger.set_cap("logs", eps(1, Fraction(1, 10**5)), zcdp_delta=Fraction(1, 10**6))
    r = ledger.reserve(
        "z", scope="logs", periods=(), cost=Cost(ZCDP(Fraction(1, 1000)), Fraction(1, 10**8)),
        config_hash="c", input_fingerprint="f",
    )  # fmt: skip
    assert r.counted.delta == Fraction(1, 10**6) + Fraction(1, 10**8)
    assert 0.1 < r.counted.main < 0.2  # CKS at ρ = 10⁻³, δ = 10⁻⁶: ε ≈ 0.1727
    record = ledger.release("z")
    assert record is not None
    assert (record.counted, record.conversion) == (r.counted, r.conversion)  # exact round trip
    assert r.to_manifest()["conversion"].startswith("ρ=1/1000 (≈0.001)-zCDP → (ε=")
    assert spent(ledger) == r.counted


def test_rerun_of_the_same_release_is_free_and_returns_the_same_secret(
    ledger: LedgerStore, reopen: Callable[[], LedgerStore]
) -> None:
    ledger.set_cap("logs", eps(1))
    ledger.set_cap("logs", eps(1), period=EACH_PERIOD)
    first = ledger.reserve(
        "weekly-2025-W03", scope="logs", periods=["2025-W03", "2025-W02"], cost=THIRD,
        config_hash="c", input_fingerprint="f",
    )  # fmt: skip
    assert not first.rerun and len(first.secret) == 32 and "secret" not in repr(first)
    # The run was killed before complete(): its charge stays, and a re-run (another launcher,
    # periods in another order) is free and gets the same noise key.
    with reopen() as other:
        again = other.reserve(
            "weekly-2025-W03", scope="logs", periods=["2025-W02", "2025-W03"], cost=THIRD,
            config_hash="c", input_fingerprint="f",
        )  # fmt: skip
    assert again.rerun and again.secret == first.secret
    assert again.to_manifest() == first.to_manifest()
    assert again.key.rng("q", "noise").read(16) == first.key.rng("q", "noise").read(16)
    assert spent(ledger) == eps(Fraction(1, 3)) and spent(ledger, "2025-W02") == eps(Fraction(2, 3))
    other_id = reserve(ledger, "weekly-2025-W03-b", periods=("2025-W03",), config="c", fp="f")
    assert other_id.secret != first.secret  # type: ignore[attr-defined]  # a new id: a new charge
    assert spent(ledger) == eps(Fraction(2, 3))
    assert [e.event for e in ledger.events()][-3:] == ["reserve", "rerun", "reserve"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"fp": "fp-changed"}, "input fingerprint: recorded hmac-sha256:"),  # keyed: below
        ({"config": "cfg-changed"}, "config hash: recorded cfg, now cfg-changed"),
        ({"periods": ("2025-W01", "2025-W02")}, "periods: recorded ['2025-W01'], now"),
        ({"cost": Cost(PureDP(Fraction(1, 4)))}, "cost: recorded ε=1/3 (≈0.3333333333), now ε=1/4"),
        ({"scope": "other"}, "scope: recorded logs, now other"),
    ],
)
def test_a_changed_rerun_is_refused_because_it_would_publish_the_difference(
    ledger: LedgerStore, change: dict[str, object], says: str
) -> None:
    for scope in ("logs", "other"):
        ledger.set_cap(scope, eps(1))
        ledger.set_cap(scope, eps(1), period=EACH_PERIOD)
    reserve(ledger, "r", periods=("2025-W01",))
    args: dict[str, object] = {"periods": ("2025-W01",), **change}
    with pytest.raises(ReleaseConflictError, match=re.escape(says)) as e:
        reserve(ledger, "r", **args)  # type: ignore[arg-type]
    assert "subtracting the two outputs would cancel the noise" in str(e.value)
    assert "Use a new release id (a new charge)" in str(e.value)
    assert ("modification time" in str(e.value)) == ("fp" in change)  # only for the input
    assert spent(ledger) == eps(Fraction(1, 3)) and len(ledger.releases()) == 1


def test_the_input_fingerprint_is_stored_and_shown_keyed_by_a_key_of_its_own(
    ledger: LedgerStore,
) -> None:
    """The plain digest hashes the input files' sizes (one person's rows move them) and could be
    inverted by trying sizes; the observables audit recovered a 22-byte row from `ledger
    history`. Stored, listed and quoted in a refusal, it is keyed by a per-release key that never
    leaves the ledger: the same files give unrelated values under two ids, and the re-run check
    still works."""
    ledger.set_cap("logs", eps(1))
    plain = "sha256:" + "ab" * 32
    first, second = reserve(ledger, "r1", fp=plain), reserve(ledger, "r2", fp=plain)
    assert first.input_fingerprint.startswith("hmac-sha256:")
    # not the release secret's: with secret_path that secret is a nonce in the job graph
    assert first.input_fingerprint != keyed_fingerprint(first.secret, plain)
    assert first.input_fingerprint != second.input_fingerprint
    listed = {r.release_id: r.input_fingerprint for r in ledger.releases()}
    assert listed == {"r1": first.input_fingerprint, "r2": second.input_fingerprint}
    assert reserve(ledger, "r1", fp=plain).rerun  # the same files: a free re-run
    other = "sha256:" + "cd" * 32
    with pytest.raises(ReleaseConflictError, match="input fingerprint: recorded hmac") as e:
        reserve(ledger, "r1", fp=other)
    assert plain not in str(e.value) and other not in str(e.value)
    # what restoring the input means: a byte-identical copy with new times is new input
    assert "path, size and modification time — copy files back with their times" in str(e.value)
    assert plain not in json.dumps([r.to_json() for r in ledger.releases()])


def test_complete_records_outputs_and_refuses_a_different_rerun(ledger: LedgerStore) -> None:
    ledger.set_cap("logs", eps(1))
    with pytest.raises(LedgerError, match="release 'r' is not in the ledger"):
        ledger.complete("r", {}, "sha256:00")
    reserve(ledger, "r")
    done = ledger.complete("r", {"visits": "out/visits.parquet"}, "sha256:aa")
    assert done.status == "completed" and done.outputs == {"visits": "out/visits.parquet"}
    assert ledger.complete("r", {"visits": "out/visits.parquet"}, "sha256:aa") == done
    with pytest.raises(ReleaseConflictError, match="this run produced another manifest") as e:
        ledger.complete("r", {"visits": "out/visits.parquet"}, "sha256:bb")
    assert "sha256:bb" not in str(e.value)  # this run's hash would show the change (see below)
    (record,) = ledger.releases()
    assert record.manifest_hash == "sha256:aa" and record.completed_at is not None
    assert [e.event for e in ledger.events()] == ["set-cap", "reserve", "complete"]


def test_cancel_takes_a_charge_back_unless_a_rerun_joined_it(ledger: LedgerStore) -> None:
    """Launcher A reserves r; launcher B starts r again while A runs (a re-run: same secret).
    A's pipeline fails: taking the charge back would let B publish uncharged (and a later run of
    r charge anew with a new secret — the same data under two noises, one charge)."""
    ledger.set_cap("logs", eps(1))
    reserve(ledger, "alone")
    assert ledger.cancel("alone") is True  # no one else holds its secret: taken back
    assert spent(ledger) == eps(0) and ledger.releases() == []
    reserve(ledger, "r")  # A
    reserve(ledger, "r")  # B joins while A runs
    assert ledger.cancel("r") is False  # A failed: the charge stays for B
    assert spent(ledger) == eps(Fraction(1, 3))
    assert ledger.complete("r", {"visits": "out/visits.parquet"}, "sha256:aa").status == "completed"
    assert [e.event for e in ledger.events()][-4:] == ["reserve", "rerun", "keep", "complete"]
    assert not reserve(ledger, "alone").rerun  # a cancelled id is charged anew
    assert ledger.cancel("alone") is True


def test_the_first_run_to_publish_fixes_the_bytes_of_its_release_id(ledger: LedgerStore) -> None:
    """A run records its manifest's hash before any file moves. Killed half-way through
    publishing, it leaves the release reserved with that hash: every later run of the id must
    bring the same hash (or publish nothing), and the charge can no longer be taken back."""
    ledger.set_cap("logs", eps(1))
    with pytest.raises(LedgerError, match="release 'r' is not in the ledger: a release publishes"):
        ledger.begin_publishing("r", "sha256:aa")
    reserve(ledger, "r")
    ledger.begin_publishing("r", "sha256:aa")  # ... and the run dies while publishing
    (record,) = ledger.releases()
    assert record.status == "reserved" and record.manifest_hash == "sha256:aa"
    assert ledger.check_invariants() == []
    assert reserve(ledger, "r").rerun  # the re-run: same secret, nothing charged
    ledger.begin_publishing("r", "sha256:aa")  # the same bytes: it may publish them
    # The refusal names the published (public) hash, never this run's: under the same noise,
    # this run's hash commits to the exact change of the statistic, which anyone holding the
    # published release could recover by hashing guesses.
    with pytest.raises(ReleaseConflictError, match=r"differ from the published ones \(manifest "
                       r"hash sha256:aa, fixed when a run of this id began publishing\): "
                       r"nothing was published") as e:  # fmt: skip
        ledger.begin_publishing("r", "sha256:bb")
    assert "sha256:bb" not in str(e.value)
    with pytest.raises(ReleaseConflictError, match=r"another manifest hash \(sha256:aa\)") as e:
        ledger.complete("r", {"visits": "out/visits.parquet"}, "sha256:bb")
    assert "sha256:bb" not in str(e.value)
    assert ledger.cancel("r") is False  # files may be out: the charge stays
    assert spent(ledger) == eps(Fraction(1, 3))
    ledger.complete("r", {"visits": "out/visits.parquet"}, "sha256:aa")
    ledger.begin_publishing("r", "sha256:aa")  # a re-run of the completed release
    with pytest.raises(ReleaseConflictError, match="differ from the published ones"):
        ledger.begin_publishing("r", "sha256:bb")
    assert [e.event for e in ledger.events()][-5:] == [
        "reserve", "publish", "rerun", "keep", "complete"
    ]  # fmt: skip


def test_set_cap_rules(ledger: LedgerStore) -> None:
    ledger.set_cap("logs", eps(1), zcdp_delta=Fraction(1, 10**7))
    reserve(ledger, "a", Cost(PureDP(Fraction(1, 2))))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "cap (ε=1/4 (≈0.25), δ=0) for scope 'logs' is below what is already spent, (ε=1/2"
        ),
    ):
        ledger.set_cap("logs", eps(Fraction(1, 4)))
    with pytest.raises(ValueError, match="scope 'logs' is capped in approx amounts"):
        ledger.set_cap("logs", Amount("zcdp", Fraction(1)))
    with pytest.raises(ValueError, match="a conversion δ in \\(0, 1\\) is set only with the scope"):
        ledger.set_cap("logs", eps(1), period=EACH_PERIOD, zcdp_delta=Fraction(1, 10))
    with pytest.raises(ValueError, match="a cap's δ must be < 1"):
        ledger.set_cap("logs", eps(1, 1))
    ledger.set_cap("logs", eps(Fraction(1, 2)))  # down to exactly what is spent: a freeze
    (s,) = ledger.status("logs")
    assert s.scope.remaining == eps(0) and s.zcdp_delta == Fraction(1, 10**7)  # kept
    ledger.set_cap("logs", eps(5))
    ledger.set_cap("logs", eps(1), period=EACH_PERIOD)
    reserve(ledger, "b", periods=("W1",))
    with pytest.raises(ValueError, match="for period 'W1' \\(it uses the default\\) is below"):
        ledger.set_cap("logs", eps(Fraction(1, 10)), period=EACH_PERIOD)
    ledger.set_cap("logs", eps(2), period=EACH_PERIOD)  # raising the default raises W1's cap
    (s,) = ledger.status("logs")
    assert s.periods[0].cap == eps(2) and s.periods[0].cap_is_default
    assert ledger.check_invariants() == []


def test_quote_shows_cost_and_what_remains_without_writing(ledger: LedgerStore) -> None:
    ledger.set_cap("logs", eps(1))
    ledger.set_cap("logs", eps(Fraction(1, 2)), period=EACH_PERIOD)
    q = ledger.quote("logs", ["W1"], THIRD)
    assert q.refusal is None and q.counted == eps(Fraction(1, 3)) and q.existing is None
    assert [(a.period, a.remaining) for a in q.accounts] == [
        (None, eps(1)),
        ("W1", eps(Fraction(1, 2))),
    ]
    reserve(ledger, "r", periods=("W1",))
    q = ledger.quote("logs", ["W1"], THIRD, release_id="r")
    assert q.existing is not None and q.existing.release_id == "r"
    assert q.refusal is not None and "cap of period 'W1' of scope 'logs'" in q.refusal
    assert ledger.quote("nope", [], THIRD).refusal == (
        "scope 'nope' has no cap in this ledger: set one with `userdp ledger set-cap --scope nope "
        "--epsilon E [--delta D]` (or --rho R) before charging it"
    )
    assert len(ledger.releases()) == 1 and spent(ledger) == eps(Fraction(1, 3))


def test_history_lists_every_charge_in_order(ledger: LedgerStore) -> None:
    ledger.set_cap("logs", eps(1))
    ledger.set_cap("other", Amount("zcdp", Fraction(1)))
    for rid in ("r1", "r2"):
        reserve(ledger, rid)
    reserve(ledger, "z", Cost(ZCDP(Fraction(1, 8))), scope="other")
    assert [r.release_id for r in ledger.releases()] == ["r1", "r2", "z"]
    assert [r.release_id for r in ledger.releases("other")] == ["z"]
    js = ledger.releases("logs")[0].to_json()
    assert js["cost"] == THIRD.to_manifest() and js["counted"]["epsilon_exact"] == "1/3"
    assert "secret" not in js


def test_invariant_check_catches_a_tampered_spend(ledger: LedgerStore) -> None:
    ledger.set_cap("logs", eps(1))
    reserve(ledger, "r")
    assert ledger.check_invariants() == []
    ledger._write(lambda tx: tx.execute("UPDATE ledger_scopes SET spent_main = '1/4'"))
    assert ledger.check_invariants() == [
        "scope 'logs': spent (ε=1/4 (≈0.25), δ=0) but its releases sum to "
        "(ε=1/3 (≈0.3333333333), δ=0)"
    ]


def test_a_weekly_schedule_stops_exactly_when_a_week_would_overspend(ledger: LedgerStore) -> None:
    # Each weekly release reads the last three ISO weeks at ε = 1/2; each week may give ε = 2.
    # A release reading one week costs that week 1/2, one reading several 1 on each (a week's
    # rows: group privacy for two). So the release of 2025-W03 (W01's third) is refused.
    ledger.set_cap("logs", eps(100))
    ledger.set_cap("logs", eps(2), period=EACH_PERIOD)
    weeks = [f"2025-W{w:02d}" for w in range(1, 6)]
    half = Cost(PureDP(Fraction(1, 2)))
    manifests = []
    for i in range(2):
        r = ledger.reserve(
            f"weekly-{weeks[i]}", scope="logs", periods=weeks[max(0, i - 2) : i + 1], cost=half,
            config_hash="c", input_fingerprint=f"fp-{i}",
        )  # fmt: skip
        manifests.append(r.to_manifest())
    msg = (
        "release 'weekly-2025-W03' refused: it would exceed the cap of period '2025-W01' of scope "
        "'logs': cap (ε=2, δ=0), spent (ε=3/2 (≈1.5), δ=0), requested (ε=1, δ=0), "
        "remaining (ε=1/2 (≈0.5), δ=0)"
    )
    with pytest.raises(CapExceededError, match=re.escape(msg)):
        ledger.reserve(
            "weekly-2025-W03", scope="logs", periods=weeks[0:3], cost=half, config_hash="c",
            input_fingerprint="fp-2",
        )  # fmt: skip
    assert spent(ledger, "2025-W01") == eps(Fraction(3, 2)) and spent(ledger, "2025-W02") == eps(1)
    assert spent(ledger) == eps(1)
    # The manifest's ledger block and the history agree on every charge.
    for m, record in zip(manifests, ledger.releases(), strict=True):
        js = record.to_json()
        assert {k: js[k] for k in m} == m


def test_a_scope_with_period_caps_refuses_a_release_that_names_no_period(
    ledger: LedgerStore,
) -> None:
    """Leaving the periods out would spend the scope and no period: past every period's cap."""
    ledger.set_cap("logs", eps(10))
    ledger.set_cap("logs", eps(1), period="2025-W01")  # one period's own cap makes it per period
    msg = "scope 'logs' is accounted per period, and the release names none"
    with pytest.raises(UnknownScopeError, match=re.escape(msg)):
        reserve(ledger, "a")
    refusal = ledger.quote("logs", (), THIRD).refusal  # `userdp plan` shows the same refusal
    assert refusal is not None and msg in refusal
    ledger.set_cap("other", eps(10))  # no period caps: a release may name none
    reserve(ledger, "b", scope="other")
    assert spent(ledger) == eps(0)


def test_costs_that_print_alike_but_differ_are_a_changed_rerun(ledger: LedgerStore) -> None:
    """A cost's text shortens exact values past 40 digits; the re-run check compares the values."""
    ledger.set_cap("logs", eps(1))
    first = Cost(PureDP(Fraction("0.12345678901234567890123456789012345678901234567")))
    second = Cost(PureDP(Fraction("0.12345678901234567890123456789012345678901234568")))
    assert str(first) == str(second)
    reserve(ledger, "r", cost=first)
    with pytest.raises(ReleaseConflictError, match=re.escape("with a different cost: recorded")):
        reserve(ledger, "r", cost=second)
