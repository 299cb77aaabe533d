"""Amounts, costs and the conversions that count a cost against a cap: exact values."""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

import pytest

from userdp.pipelines.ledger import (
    Amount,
    Cost,
    IncompatibleCostError,
    LedgerCorruptError,
    count_against,
)
from userdp.pipelines.ledger.model import check_name, from_text, period_amount, show, to_text
from userdp.transforms.mechanisms.accounting import ZCDP, ApproxDP, PureDP, zcdp_to_approx


def test_rationals_are_stored_as_exact_p_over_q_text() -> None:
    for x in (Fraction(0), Fraction(1), Fraction(1, 3), Fraction(10**30 + 1, 7**20)):
        assert from_text(to_text(x)) == x
    assert to_text(Fraction(2)) == "2/1" and to_text(Fraction(-1, 10)) == "-1/10"
    for bad in ("0.1", "1e-6", "1/0", "1", "", None, 0.5, "1/3 "):
        with pytest.raises(LedgerCorruptError, match="not an exact rational 'p/q': the ledger is"):
            from_text(bad)
    assert show(Fraction(1, 3)) == "1/3 (≈0.3333333333)" and show(Fraction(4)) == "4"


def test_huge_or_tiny_exact_amounts_are_shown_as_decimals() -> None:
    """A cap of ε = 1e400 is kept exactly but shown in 7 characters, not 401 digits."""
    assert show(Fraction(10**400)) == "≈1e+400"
    assert show(Fraction(1, 10**300)) == "≈1e-300"
    assert show(Fraction(2**200, 3)) == "≈5.356460148e+59"
    assert show(Fraction(10**6)) == "1000000" and show(Fraction(1, 3)) == "1/3 (≈0.3333333333)"
    assert str(Amount("approx", Fraction(10**400))) == "(ε=≈1e+400, δ=0)"


def test_amounts_add_exactly_and_refuse_mixing_kinds() -> None:
    a = Amount("approx", Fraction(1, 3), Fraction(1, 10**6))
    assert a + a + a == Amount(
        "approx", Fraction(1), Fraction(3, 10**6)
    )  # floats would give 0.999...
    assert Amount("approx", Fraction(1)).minus_clamped(a) == Amount(
        "approx", Fraction(2, 3), Fraction(0)
    )
    assert a.fits_in(Amount("approx", Fraction(1, 3), Fraction(1, 10**6)))
    assert not a.fits_in(Amount("approx", Fraction(1), Fraction(0)))  # δ over
    with pytest.raises(ValueError, match="cannot combine a approx amount with a zcdp amount"):
        _ = a + Amount("zcdp", Fraction(1))
    with pytest.raises(ValueError, match="ε must be an exact Fraction ≥ 0, got -1"):
        Amount("approx", Fraction(-1))
    with pytest.raises(ValueError, match=r"δ must be an exact Fraction ≥ 0, got 0\.5"):
        Amount("zcdp", Fraction(1), 0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind must be one of"):
        Amount("pure", Fraction(1))  # type: ignore[arg-type]


def test_manifest_floats_round_to_the_safe_side() -> None:
    a = Amount("approx", Fraction(1, 3), Fraction(1, 10))
    up, down = a.to_manifest(), a.to_manifest(round_up=False)
    assert Fraction(up["epsilon"]) >= Fraction(1, 3) and Fraction(up["delta"]) >= Fraction(1, 10)
    assert Fraction(down["epsilon"]) <= Fraction(1, 3) and Fraction(down["delta"]) <= Fraction(
        1, 10
    )
    assert up["epsilon_exact"] == "1/3" and up["delta_exact"] == "1/10"


def test_cost_validation() -> None:
    assert Cost(ZCDP(Fraction(1, 2)), Fraction(1, 10**9)).parts() == (
        Fraction(1, 2),
        Fraction(1, 10**9),
    )
    assert (
        str(Cost(ApproxDP(Fraction(1, 3), Fraction(1, 10**6))))
        == "(ε=1/3 (≈0.3333333333), δ=1/1000000 (≈1e-06))"
    )
    with pytest.raises(ValueError, match="selection_delta=1/1000 is only for a ZCDP budget"):
        Cost(PureDP(1), Fraction(1, 1000))
    with pytest.raises(ValueError, match=r"selection_delta must be an exact Fraction in \[0, 1\)"):
        Cost(ZCDP(1), Fraction(1))
    with pytest.raises(TypeError, match="budget must be PureDP, ApproxDP or ZCDP"):
        Cost(0.5)  # type: ignore[arg-type]
    for c in (
        Cost(PureDP(Fraction(1, 3))),
        Cost(ApproxDP(1, Fraction(1, 7))),
        Cost(ZCDP(Fraction(2, 3)), Fraction(1, 9)),
    ):
        assert Cost.from_parts(c.kind, *c.parts()) == c


def test_counting_in_an_approx_scope() -> None:
    assert count_against(Cost(PureDP(Fraction(1, 3))), "approx", None, "s") == (
        Amount("approx", Fraction(1, 3)),
        "none: pure ε-DP is (ε, 0)-DP",
    )
    counted, how = count_against(
        Cost(ApproxDP(Fraction(1, 2), Fraction(1, 10**6))), "approx", None, "s"
    )
    assert counted == Amount("approx", Fraction(1, 2), Fraction(1, 10**6)) and how == "none"
    # ρ-zCDP at the scope's conversion δ_c, plus the selection δ added after conversion.
    rho, dc, ds = Fraction(1, 32), Fraction(1, 1000), Fraction(1, 10**8)
    counted, how = count_against(Cost(ZCDP(rho), ds), "approx", dc, "s")
    assert counted == Amount("approx", zcdp_to_approx(ZCDP(rho), dc).epsilon, dc + ds)
    assert 0.68800245548 < float(counted.main) < 0.688002455490  # OpenDP's reference value
    assert "by zcdp_to_approx (Canonne, Kamath & Steinke 2020 Cor. 13, ε rounded up)" in how
    with pytest.raises(
        IncompatibleCostError, match="scope 'logs' has an \\(ε, δ\\) cap and no conversion δ"
    ):
        count_against(Cost(ZCDP(rho)), "approx", None, "logs")


def test_counting_in_a_zcdp_scope() -> None:
    counted, how = count_against(Cost(PureDP(Fraction(1, 3))), "zcdp", None, "s")
    assert counted == Amount("zcdp", Fraction(1, 18)) and "pure_to_zcdp" in how
    counted, _ = count_against(Cost(ZCDP(Fraction(1, 8)), Fraction(1, 10**7)), "zcdp", None, "s")
    assert counted == Amount("zcdp", Fraction(1, 8), Fraction(1, 10**7))
    counted, _ = count_against(Cost(ApproxDP(Fraction(1, 2), 0)), "zcdp", None, "s")
    assert counted == Amount("zcdp", Fraction(1, 8))  # (ε, 0) is pure ε
    with pytest.raises(
        IncompatibleCostError,
        match=r"scope 'logs' is capped in ρ .* \(ε, δ\)-DP implies no zCDP bound",
    ):
        count_against(Cost(ApproxDP(Fraction(1, 2), Fraction(1, 10**6))), "zcdp", None, "logs")


@pytest.mark.parametrize("name", ["", "-x", "a b", "a/b", "*", "x" * 201, "é", 3])
def test_names_are_refused_unless_plain(name: object) -> None:
    with pytest.raises(ValueError, match="scope must be 1-200 of"):
        check_name(name, "scope")
    assert check_name("browsing-logs", "scope") == "browsing-logs"
    assert check_name("2025-W03", "period") == "2025-W03"


def test_postgres_urls_are_shown_without_their_password() -> None:
    from userdp.pipelines.ledger.postgres_store import _redact  # noqa: PLC0415

    assert _redact("postgresql://op:s3cret@db:5432/l") == "postgresql://op:***@db:5432/l"
    assert _redact("postgresql://op@db/l") == "postgresql://op@db/l"
    assert _redact("postgresql://db/l") == "postgresql://db/l"


def test_a_release_reading_several_periods_charges_each_the_group_of_two_rate() -> None:
    approx = Amount("approx", Fraction(1, 2), Fraction(1, 10**6))
    assert period_amount(approx, 1, "s") == approx  # one period: the person's rows there
    two = period_amount(approx, 3, "s")
    # (2ε, (1 + e^ε)·δ), e^ε rounded up by at most 10^−49 relative
    with localcontext() as ctx:
        ctx.prec = 90  # e^0.5 to 90 digits: far below the 10^−50 the ledger rounds up by
        exact = (1 + Decimal("0.5").exp()) * Decimal(10) ** -6
    assert two.main == 1 and exact <= Decimal(two.delta.numerator) / two.delta.denominator
    assert two.delta < Fraction(exact) * (1 + Fraction(1, 10**45))
    assert period_amount(Amount("approx", Fraction(3)), 2, "s") == Amount("approx", Fraction(6))
    assert period_amount(Amount("zcdp", Fraction(1, 8)), 2, "s") == Amount("zcdp", Fraction(1, 2))
    with pytest.raises(
        IncompatibleCostError,
        match=r"scope 'logs' is capped in ρ per period, and this release reads 2 periods while "
        r"spending δ=1/1000000 .* Release each period separately",
    ):
        period_amount(Amount("zcdp", Fraction(1, 8), Fraction(1, 10**6)), 2, "logs")
    huge = period_amount(Amount("approx", Fraction(10**4), Fraction(1, 10**9)), 2, "s")
    assert huge.delta > 1  # e^10000·δ: no cap (δ < 1) takes it, so the release is refused
