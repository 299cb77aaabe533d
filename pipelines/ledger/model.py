"""What the ledger counts: exact amounts, caps, a release's cost and how it counts against a cap.

Every amount here is a guarantee for userdp's neighbouring relation (add or remove all rows of one
person). A scope's cap is stated in one *kind*, fixed when the scope is created:

* ``"approx"``: (ε, δ)-DP. Releases compose by basic composition: ε's add and δ's add
  (Dwork & Roth 2014, Thms. 3.14 and 3.16).
* ``"zcdp"``: δ-approximate ρ-zCDP (Bun & Steinke 2016, Def. 8.1): ρ's add (ibid., Lemma 1.7)
  and the δ's of private partition selection add by a union bound over their failure events
  (docs/ledger.md). δ = 0 is plain ρ-zCDP.

A release's :class:`Cost` is its plan's spent budget (``PureDP``, ``ApproxDP`` or ``ZCDP``, plus the
selection δ a ρ total spends beside ρ). :func:`count_against` turns it into an :class:`Amount` of
the scope's kind, by the conversions of :mod:`transforms.mechanisms.accounting`, and says in words
which conversion it used; the ledger stores both, and the manifest records them. Everything is an
exact :class:`~fractions.Fraction`; the only inexact steps, zCDP → (ε, δ) and the e^ε of
:func:`period_amount`, round up.

A period's cap protects a person's rows *of that period* — a different neighbouring relation,
under which a release that reads several periods costs more than its plan: :func:`period_amount`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any, Literal

from userdp.transforms.mechanisms.accounting import (
    ZCDP,
    ApproxDP,
    Budget,
    PureDP,
    float_down,
    float_up,
    pure_to_zcdp,
    zcdp_to_approx,
)

from .errors import IncompatibleCostError, LedgerCorruptError

CapKind = Literal["approx", "zcdp"]
CAP_KINDS: tuple[CapKind, ...] = ("approx", "zcdp")
EACH_PERIOD = "*"  # set_cap(period=EACH_PERIOD): the default cap of every period of a scope

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:@+=-]{0,199}")
LEDGER_NAME_RULE = "1-200 of A-Z a-z 0-9 _ . : @ + = - starting with a letter, digit or _"
_RATIONAL = re.compile(r"(-?[0-9]+)/([1-9][0-9]*)")


def check_name(value: object, what: str) -> str:
    """A scope, period or release id: 1-200 of A-Z a-z 0-9 _ . : @ + = - (not starting with . : @
    + = -). Refuses anything else, so names are safe in messages, paths and shell commands."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(f"{what} must be {LEDGER_NAME_RULE}, got {value!r}")
    return value


def to_text(x: Fraction) -> str:
    """The stored form of an exact rational: always ``"p/q"`` in lowest terms (``"1/1"``)."""
    return f"{x.numerator}/{x.denominator}"


def from_text(text: object, what: str = "stored amount") -> Fraction:
    """Inverse of :func:`to_text`; anything else is a corrupt ledger and is refused."""
    m = _RATIONAL.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise LedgerCorruptError(
            f"{what} {text!r} is not an exact rational 'p/q': the ledger is corrupt"
        )
    return Fraction(int(m.group(1)), int(m.group(2)))


SHOWN_DIGITS = 40  # longer exact texts are shown as a decimal (the JSON keeps them exact)


def show(x: Fraction) -> str:
    """Exact, with a decimal approximation when not an integer: ``1/3 (≈0.3333333333)``; an
    exact text past ``SHOWN_DIGITS`` digits (``1e400`` given as a cap) only as ``≈1e+400``."""
    digits = len(str(x.numerator)) + len(str(x.denominator))
    if digits > SHOWN_DIGITS:
        with localcontext() as ctx:  # Decimal: no float overflow or underflow
            ctx.prec = 12
            return f"≈{(Decimal(x.numerator) / Decimal(x.denominator)).normalize():.10g}"
    if x.denominator == 1:
        return str(x.numerator)
    return f"{x.numerator}/{x.denominator} (≈{float(x):.10g})"


@dataclass(frozen=True)
class Amount:
    """An amount of one kind: (ε, δ) for ``"approx"``, (ρ, δ) for ``"zcdp"``; ``main`` is ε or ρ.

    Used for caps, spends and what a release is counted as. Components are exact and ≥ 0.
    """

    kind: CapKind
    main: Fraction
    delta: Fraction = Fraction(0)

    def __post_init__(self) -> None:
        if self.kind not in CAP_KINDS:
            raise ValueError(f"kind must be one of {CAP_KINDS}, got {self.kind!r}")
        for name in ("main", "delta"):
            v = getattr(self, name)
            if not isinstance(v, Fraction) or v < 0:
                got = show(v) if isinstance(v, Fraction) else repr(v)
                raise ValueError(f"{self._symbol(name)} must be an exact Fraction ≥ 0, got {got}")

    @classmethod
    def zero(cls, kind: CapKind) -> Amount:
        return cls(kind, Fraction(0), Fraction(0))

    @staticmethod
    def _sym(kind: CapKind) -> str:
        return "ε" if kind == "approx" else "ρ"

    def _symbol(self, name: str) -> str:
        return "δ" if name == "delta" else self._sym(self.kind)

    def __add__(self, other: Amount) -> Amount:
        self._same_kind(other)
        return Amount(self.kind, self.main + other.main, self.delta + other.delta)

    def minus_clamped(self, other: Amount) -> Amount:
        """``self − other`` per component, floored at 0 (what remains of a cap)."""
        self._same_kind(other)
        return Amount(
            self.kind,
            max(Fraction(0), self.main - other.main),
            max(Fraction(0), self.delta - other.delta),
        )

    def fits_in(self, cap: Amount) -> bool:
        self._same_kind(cap)
        return self.main <= cap.main and self.delta <= cap.delta

    def _same_kind(self, other: Amount) -> None:
        if other.kind != self.kind:
            raise ValueError(f"cannot combine a {self.kind} amount with a {other.kind} amount")

    def __str__(self) -> str:
        return f"({self._sym(self.kind)}={show(self.main)}, δ={show(self.delta)})"

    def to_manifest(self, *, round_up: bool = True) -> dict[str, Any]:
        """Exact text and a float rounded up, so a reader of the float never sees less spent;
        ``round_up=False`` rounds down, for what remains of a cap."""
        sym = "epsilon" if self.kind == "approx" else "rho"
        to_float = float_up if round_up else float_down
        return {
            "kind": self.kind,
            sym: to_float(self.main),
            f"{sym}_exact": str(self.main),
            "delta": to_float(self.delta),
            "delta_exact": str(self.delta),
        }


@dataclass(frozen=True)
class Cost:
    """What one release spends: its plan's composed budget and, for a ρ (zCDP) budget, the δ that
    private partition selection spends beside ρ (the plan's ``spent_selection_delta``)."""

    budget: Budget
    selection_delta: Fraction = Fraction(0)

    def __post_init__(self) -> None:
        if not isinstance(self.budget, (PureDP, ApproxDP, ZCDP)):
            raise TypeError(f"budget must be PureDP, ApproxDP or ZCDP, got {self.budget!r}")
        d = self.selection_delta
        if not isinstance(d, Fraction) or not 0 <= d < 1:
            raise ValueError(f"selection_delta must be an exact Fraction in [0, 1), got {d!r}")
        if d and not isinstance(self.budget, ZCDP):
            raise ValueError(
                f"selection_delta={d} is only for a ZCDP budget; an (ε, δ) budget already "
                "includes the selection's δ"
            )

    @property
    def kind(self) -> str:
        """``"pure"``, ``"approx"`` or ``"zcdp"``."""
        return {PureDP: "pure", ApproxDP: "approx", ZCDP: "zcdp"}[type(self.budget)]

    def parts(self) -> tuple[Fraction, Fraction]:
        """(ε, 0), (ε, δ) or (ρ, selection δ): the stored form."""
        b = self.budget
        if isinstance(b, PureDP):
            return b.epsilon, Fraction(0)
        if isinstance(b, ApproxDP):
            return b.epsilon, b.delta
        return b.rho, self.selection_delta

    @classmethod
    def from_parts(cls, kind: str, main: Fraction, delta: Fraction) -> Cost:
        if kind == "pure":
            return cls(PureDP(main))
        if kind == "approx":
            return cls(ApproxDP(main, delta))
        if kind == "zcdp":
            return cls(ZCDP(main), delta)
        raise ValueError(f"stored cost kind {kind!r} is not pure, approx or zcdp")

    def __str__(self) -> str:
        """Exact, unlike ``str(budget)``: two costs that differ never print alike."""
        main, delta = self.parts()
        if isinstance(self.budget, PureDP):
            return f"ε={show(main)}"
        if isinstance(self.budget, ApproxDP):
            return f"(ε={show(main)}, δ={show(delta)})"
        extra = f" + selection δ={show(delta)}" if delta else ""
        return f"ρ={show(main)}{extra}"

    def to_manifest(self) -> dict[str, Any]:
        out = self.budget.to_manifest()
        if isinstance(self.budget, ZCDP):
            out["selection_delta"] = float_up(self.selection_delta)
            out["selection_delta_exact"] = str(self.selection_delta)
        return out


def count_against(
    cost: Cost, kind: CapKind, zcdp_delta: Fraction | None, scope: str
) -> tuple[Amount, str]:
    """``cost`` as an amount of ``kind``, and the conversion used, in words.

    * pure ε → (ε, 0) in an approx scope (by definition); → ρ = ε²/2 in a zCDP scope
      (``pure_to_zcdp``, Bun & Steinke 2016 Prop. 1.4). Exact.
    * (ε, δ) → itself in an approx scope. In a zCDP scope it is refused: (ε, δ)-DP implies no
      zCDP bound (an (ε, 0) cost is counted as pure ε).
    * ρ-zCDP + selection δ_s → (ρ, δ_s) in a zCDP scope. In an approx scope, at the scope's
      conversion δ_c (``zcdp_delta``): (ε_c, δ_c + δ_s) with ε_c from ``zcdp_to_approx(ρ, δ_c)``
      (Canonne, Kamath & Steinke 2020 Cor. 13, ε rounded up); the δ_s of selection is added after
      conversion (docs/partition_selection.md). Without a conversion δ it is refused.
    """
    main, delta = cost.parts()
    b = cost.budget
    if kind == "approx":
        if isinstance(b, PureDP):
            return Amount(kind, main), "none: pure ε-DP is (ε, 0)-DP"
        if isinstance(b, ApproxDP):
            return Amount(kind, main, delta), "none"
        if main == 0:
            return Amount(kind, Fraction(0), delta), "none: ρ = 0 is (0, 0)-DP; plus selection δ"
        if zcdp_delta is None:
            raise IncompatibleCostError(
                f"scope {scope!r} has an (ε, δ) cap and no conversion δ, so the ρ-zCDP cost "
                f"{cost} cannot be counted against it; set one with `userdp ledger set-cap "
                f"--scope {scope} --zcdp-delta D ...` or use a scope capped in ρ"
            )
        eps = zcdp_to_approx(ZCDP(main), zcdp_delta).epsilon
        plus = f", plus selection δ={show(delta)}" if delta else ""
        return Amount(kind, eps, zcdp_delta + delta), (
            f"ρ={show(main)}-zCDP → (ε={show(eps)}, δ={show(zcdp_delta)}) by zcdp_to_approx "
            f"(Canonne, Kamath & Steinke 2020 Cor. 13, ε rounded up){plus}"
        )
    if isinstance(b, PureDP) or (isinstance(b, ApproxDP) and delta == 0):
        rho = pure_to_zcdp(PureDP(main)).rho
        return Amount(kind, rho), (
            f"ε={show(main)}-DP → ρ=ε²/2={show(rho)} by pure_to_zcdp (Bun & Steinke 2016 "
            "Prop. 1.4, exact)"
        )
    if isinstance(b, ApproxDP):
        raise IncompatibleCostError(
            f"scope {scope!r} is capped in ρ (zCDP) but the release costs {cost}: (ε, δ)-DP "
            "implies no zCDP bound; state the job's budget as rho, or charge a scope capped in "
            "(ε, δ)"
        )
    return Amount(kind, main, delta), "none"


def period_amount(counted: Amount, n_periods: int, scope: str) -> Amount:
    """What a release counted as ``counted`` charges each of the ``n_periods`` periods it reads.

    A period's cap protects a person's rows of that period: its neighbours differ by those rows,
    and the person's rows of other periods stay. A release that reads one period sees that as
    adding or removing the person, so it costs ``counted``. A release that reads several sees the
    person's data *changed*: contribution bounding picks each person's partitions and rows
    across everything it reads, so removing week 3's rows can move the pick to week 2's — one
    removal and one addition. Group privacy for two (docs/ledger.md, "Periods"):

    * (ε, δ) → (2ε, (1 + e^ε)·δ): P[M(D) ∈ S] ≤ e^ε·(e^ε·P[M(D″) ∈ S] + δ) + δ;
    * ρ-zCDP → 4ρ (Bun & Steinke 2016, Prop. 1.9: k²ρ for groups of k).

    δ-approximate ρ-zCDP (a ρ budget whose private selection or PTR spends δ) has no group
    bound we can cite, so such a release cannot charge several periods of a ρ-capped scope.
    """
    if n_periods <= 1:
        return counted
    if counted.kind == "zcdp":
        if counted.delta:
            raise IncompatibleCostError(
                f"scope {scope!r} is capped in ρ per period, and this release reads "
                f"{n_periods} periods while spending δ={show(counted.delta)} beside ρ (private "
                "partition selection, PTR, smooth sensitivity with Laplace noise or "
                "top_partition): its cost on one period's rows has no zCDP bound. Release each "
                "period separately, use public partitions, or charge a scope capped in (ε, δ) "
                "with a conversion δ"
            )
        return Amount("zcdp", 4 * counted.main)
    return Amount("approx", 2 * counted.main, counted.delta * (1 + _exp_up(counted.main)))


def _exp_up(x: Fraction) -> Fraction:
    """An exact rational ≥ e^x (x ≥ 0): 60 significant digits, correctly rounded, then raised by
    10^−50 relative."""
    with localcontext() as ctx:
        ctx.prec, ctx.Emax = 60, 10**9
        e = (Decimal(x.numerator) / Decimal(x.denominator)).exp()
    return Fraction(e) * (1 + Fraction(1, 10**50))
