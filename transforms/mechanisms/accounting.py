"""Privacy budgets: pure ε-DP, approximate (ε, δ)-DP and ρ-zCDP; conversions, composition, splits.

Every budget here is a guarantee for userdp's neighbouring relation: data sets that differ by adding
or removing *all* rows of one person. The conversions and composition rules below hold for any
neighbouring relation, so they carry that person-level guarantee over unchanged.

Budgets are frozen dataclasses of exact :class:`fractions.Fraction` values, so a plan that splits
ε = 1 into thirds spends exactly 1, not 1 + 2⁻⁵². Where a conversion is transcendental
(zCDP → (ε, δ)) it is computed in floating point and rounded in the safe direction: an ε it
produces is never below the exact value of the stated bound, and a ρ produced for a target (ε, δ)
is never above the largest admissible one. The margins are stated in each docstring; the
derivations are in ``docs/accounting.md``.

Composition is *basic* sequential composition (budgets add), which also holds when later queries
are chosen adaptively. Nothing here uses advanced composition or privacy-loss distributions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from .checks import Rational, as_fraction

ConversionMethod = Literal["cks", "bs16"]  # CKS 2020 Cor. 13 (tighter) or BS16 Prop. 1.3

_METHODS = ("cks", "bs16")
_REL_MARGIN = 1e-12  # float-error margin, relative to the operands' size (see zcdp_to_approx)
_BISECT_STEPS = 2000  # upper bound only; bisection stops when the float interval cannot shrink


def _checked(x: Rational, name: str, *, below_one: bool = False) -> Fraction:
    f = as_fraction(x, name)
    if f < 0 or (below_one and f >= 1):
        valid = "[0, 1)" if below_one else "[0, ∞)"
        raise ValueError(f"{name} must lie in {valid}, got {x!r}")
    return f


def format_fraction(x: Fraction) -> str:
    """Short human form: integers exactly, other values to 10 significant digits."""
    return str(x.numerator) if x.denominator == 1 else format(float(x), ".10g")


def float_up(x: Fraction) -> float:
    """The smallest float ≥ x."""
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


def float_down(x: Fraction) -> float:
    """The largest float ≤ x."""
    f = float(x)
    return f if Fraction(f) <= x else math.nextafter(f, -math.inf)


def sqrt_up(x: Fraction) -> float:
    """The smallest float f ≥ 0 with f² ≥ x (exact comparison): a square root never under-declared,
    for an L2 sensitivity."""
    f = _largest_float_with_square_within(x)
    return f if Fraction(f) ** 2 >= x else math.nextafter(f, math.inf)


def epsilon_within_rho(rho: Fraction) -> float:
    """The largest float ε with ε²/2 ≤ ρ: an ε-DP mechanism is ε²/2-zCDP (Bun–Steinke 2016,
    Prop. 1.4), so it may run inside a ρ share; an (ε, δ) one is then δ-approximately so
    (docs/accounting.md)."""
    return _largest_float_with_square_within(2 * rho)


def bounded_range_epsilon_within_rho(rho: Fraction) -> float:
    """The largest float ε with ε²/8 ≤ ρ, for an *ε-bounded-range* mechanism: one whose privacy
    loss ln(P[M(x) = y] / P[M(x') = y]) spans an interval of length at most ε over the outputs y,
    for every pair of neighbours. Such a mechanism is ε²/8-zCDP (Cesar & Rogers 2021; proof in
    docs/accounting.md, "Bounded-range mechanisms"), a quarter of the ε²/2 of an arbitrary ε-DP
    one, so inside a ρ share it runs with twice the ε. The exponential mechanism is ε-bounded-range
    in both its forms here (weights e^(ε·u/(2Δ)), or e^(ε·u/Δ) for a monotone utility); Laplace
    noise is not (its loss spans 2ε) and keeps :func:`epsilon_within_rho`."""
    return _largest_float_with_square_within(8 * rho)


def _largest_float_with_square_within(bound: Fraction) -> float:
    """The largest float ε ≥ 0 with ε² ≤ bound (exact comparison).

    The start is √(bound·4^k)·2^−k with bound·4^k near 1, within an ulp of the answer whatever the
    size of ``bound``: √float(bound) itself is far off (or 0) once ``bound`` is subnormal, and the
    one-ulp steps below would then walk ~10^11 floats or more (a ρ of 1e-320 hung the planner)."""
    if bound <= 0:
        return 0.0
    k = (bound.denominator.bit_length() - bound.numerator.bit_length()) // 2
    scaled = bound * Fraction(4) ** k if k >= 0 else bound / Fraction(4) ** -k
    eps = math.ldexp(math.sqrt(float(scaled)), -k)
    while Fraction(eps) ** 2 > bound:
        eps = math.nextafter(eps, 0.0)
    while Fraction(math.nextafter(eps, math.inf)) ** 2 <= bound:
        eps = math.nextafter(eps, math.inf)
    return eps


def _manifest(name: str, x: Fraction) -> dict[str, float | str]:
    # The float is rounded up, so a reader of the float never sees less than was spent.
    return {name: float_up(x), f"{name}_exact": str(x)}


@dataclass(frozen=True, init=False)
class PureDP:
    """ε-differential privacy: P[M(D) ∈ S] ≤ e^ε · P[M(D') ∈ S] for neighbouring D, D' and all S
    (Dwork, McSherry, Nissim, Smith 2006)."""

    epsilon: Fraction

    def __init__(self, epsilon: Rational) -> None:
        object.__setattr__(self, "epsilon", _checked(epsilon, "epsilon"))

    def __str__(self) -> str:
        return f"ε={format_fraction(self.epsilon)}"

    def to_manifest(self) -> dict[str, float | str]:
        return {"kind": "pure", **_manifest("epsilon", self.epsilon)}


@dataclass(frozen=True, init=False)
class ApproxDP:
    """(ε, δ)-differential privacy: P[M(D) ∈ S] ≤ e^ε · P[M(D') ∈ S] + δ; 0 ≤ δ < 1, since δ ≥ 1
    promises nothing (Dwork, Kenthapadi, McSherry, Mironov, Naor 2006)."""

    epsilon: Fraction
    delta: Fraction

    def __init__(self, epsilon: Rational, delta: Rational) -> None:
        object.__setattr__(self, "epsilon", _checked(epsilon, "epsilon"))
        object.__setattr__(self, "delta", _checked(delta, "delta", below_one=True))

    def __str__(self) -> str:
        return f"(ε={format_fraction(self.epsilon)}, δ={format_fraction(self.delta)})"

    def to_manifest(self) -> dict[str, float | str]:
        return {
            "kind": "approx",
            **_manifest("epsilon", self.epsilon),
            **_manifest("delta", self.delta),
        }


@dataclass(frozen=True, init=False)
class ZCDP:
    """ρ-zero-concentrated DP: D_α(M(D) ‖ M(D')) ≤ ρα for every Rényi order α > 1
    (Bun & Steinke 2016, Def. 1.1). The Gaussian mechanisms' native guarantee."""

    rho: Fraction

    def __init__(self, rho: Rational) -> None:
        object.__setattr__(self, "rho", _checked(rho, "rho"))

    def __str__(self) -> str:
        return f"ρ={format_fraction(self.rho)}"

    def to_manifest(self) -> dict[str, float | str]:
        return {"kind": "zcdp", **_manifest("rho", self.rho)}


Budget = PureDP | ApproxDP | ZCDP


def require_budget(b: object, what: str) -> None:
    if not isinstance(b, (PureDP, ApproxDP, ZCDP)):
        raise TypeError(f"{what} must be PureDP, ApproxDP or ZCDP, got {type(b).__name__} {b!r}")


# ---------------------------------------------------------------------------------- conversions


def pure_to_zcdp(budget: PureDP) -> ZCDP:
    """ε-DP implies (ε²/2)-zCDP (Bun & Steinke 2016, Prop. 1.4). Exact."""
    return ZCDP(budget.epsilon**2 / 2)


def pure_to_approx(budget: PureDP) -> ApproxDP:
    """ε-DP is (ε, 0)-DP, by definition. Exact."""
    return ApproxDP(budget.epsilon, 0)


def _log_inv_delta_up(delta: Fraction) -> float:
    """ln(1/δ) for 0 < δ < 1 from δ rounded down; its ≤ 1-ulp error is inside the margin."""
    d = float_down(delta)  # a smaller δ gives a larger ln(1/δ): the safe side
    if d > 0.0:
        return -math.log(d)
    return math.log(delta.denominator) - math.log(delta.numerator)  # δ below the float range


def _cks_objective(t: float, rho: float, L: float) -> tuple[float, float]:
    """CKS 2020 Cor. 13 at α = 1 + t, rewritten as
    αρ + ln(1 − 1/α) + (L − ln α)/(α − 1) = (1+t)ρ + ln(t/(1+t)) + (L − ln(1+t))/t.

    Returns (value, size): ``size`` sums the magnitudes of every operand, so that each float
    rounding (and the cancellation in L − ln(1+t)) errs by at most a few 2⁻⁵³ · size.
    """
    log1p_t = math.log1p(t)
    # ln(t/(1+t)) without cancellation: −ln(1 + 1/t) for t ≥ 1, ln t − ln(1+t) (same signs) below.
    log_ratio = (-math.log1p(1.0 / t),) if t >= 1.0 else (math.log(t), -log1p_t)
    value = math.fsum(((1.0 + t) * rho, *log_ratio, (L - log1p_t) / t))
    size = (1.0 + t) * rho + math.fsum(abs(x) for x in log_ratio) + (L + log1p_t) / t
    return value, size


def _eps_cks(rho: float, L: float) -> float:
    """inf over α > 1 of the CKS objective, rounded up (see :func:`zcdp_to_approx`).

    With t = α − 1 the objective's derivative is ρ − (L − ln(1+t))/t², whose sign is that of
    h(t) = ρt² + ln(1+t) − L: strictly increasing, h(0) = −L < 0 and h(√(L/ρ)) > 0. So the
    objective has exactly one stationary point t* ∈ (0, √(L/ρ)), its global minimum (it is convex
    on t ≤ 1/δ − 1, which contains t*, and increasing beyond). Bisection on the sign of h finds t*
    to the last float; any t > 0 gives a valid bound, so an imperfect t* only makes ε larger.
    """
    lo, hi = 0.0, min(math.sqrt(L / rho), 1e300)  # h(1e300) > 0 as well
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        if rho * mid * mid + math.log1p(mid) - L < 0.0:
            lo = mid
        else:
            hi = mid
    candidates = [_cks_objective(t, rho, L) for t in (lo, hi) if t > 0.0]
    value, size = min(candidates)
    # Below 0 means the CKS δ at ε = 0 (it decreases in ε) is already ≤ δ: (0, δ)-DP holds.
    return max(0.0, value + _REL_MARGIN * size)


def _eps_bs16(rho: float, L: float) -> float:
    value = rho + 2.0 * math.sqrt(rho * L)
    return value + _REL_MARGIN * value


def _zcdp_eps_up(rho: Fraction, delta: Fraction, method: ConversionMethod) -> float:
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
    if rho == 0:
        return 0.0  # 0-zCDP: the output distributions coincide, so (0, 0)-DP
    if delta == 0:
        raise ValueError(
            f"ρ-zCDP with ρ={format_fraction(rho)} > 0 implies no (ε, 0)-DP guarantee; "
            "pass a delta in (0, 1)"
        )
    rho_f, L = float_up(rho), _log_inv_delta_up(delta)  # ε grows with ρ and L: the safe side
    eps = _eps_cks(rho_f, L) if method == "cks" else _eps_bs16(rho_f, L)
    if not math.isfinite(eps):
        raise ValueError(
            f"ρ={format_fraction(rho)}, δ={format_fraction(delta)} is outside the float range "
            "of this bound"
        )
    return eps


def zcdp_to_approx(budget: ZCDP, delta: Rational, *, method: ConversionMethod = "cks") -> ApproxDP:
    """The (ε, δ)-DP guarantee implied by ρ-zCDP, for the given δ ∈ (0, 1).

    ``method="cks"`` (default): ε = inf_{α>1} αρ + (ln(1/δ) + (α−1)·ln(1−1/α) − ln α)/(α−1)
    (Canonne, Kamath & Steinke 2020, "The Discrete Gaussian for Differential Privacy", Cor. 13),
    never larger than the BS16 bound. ``method="bs16"``: ε = ρ + 2√(ρ·ln(1/δ)) (Bun & Steinke
    2016, Prop. 1.3).

    Rounding: ρ is rounded up to a float and ln(1/δ) computed from δ rounded down (both only raise
    ε); the float result is then raised by 10⁻¹² · (sum of the magnitudes of the formula's
    operands), over 500× the worst error of its few float operations; ε is the exact rational of
    that float. So ε is never below the bound's exact value, and above it by ≲ 10⁻¹¹ relative
    (checked against 60-digit decimal arithmetic). ρ = 0 gives ε = 0 for every δ; a bound below
    0 is returned as ε = 0.
    """
    d = _checked(delta, "delta", below_one=True)
    return ApproxDP(Fraction(_zcdp_eps_up(budget.rho, d, method)), d)


def zcdp_budget_for(target: ApproxDP, *, method: ConversionMethod = "cks") -> ZCDP:
    """The largest ρ (to float precision) such that ρ-zCDP implies ``target`` by the bound of
    :func:`zcdp_to_approx` with the same ``method``.

    Used when a user states an (ε, δ) budget but the mechanism is Gaussian: calibrate the noise to
    this ρ. This is not a conversion of guarantees ((ε, δ)-DP does not imply any zCDP); it inverts
    the zCDP → (ε, δ) bound. Bisection over float ρ keeps ``lo`` with the *rounded-up* forward
    ε(lo) ≤ target ε, so the returned ρ is one the forward conversion certifies: never above the
    largest admissible ρ (rounded down), and short of it by about the forward margin (≲ 10⁻¹¹
    relative). ε = 0 with δ > 0 still admits a small ρ > 0. A target with δ = 0 is refused.
    """
    if target.delta == 0:
        raise ValueError(
            f"no ρ > 0 gives δ = 0, so target {target} admits no Gaussian (zCDP) mechanism; "
            "state a delta in (0, 1) or use a pure-DP mechanism"
        )
    eps = target.epsilon

    def ok(rho: float) -> bool:
        return Fraction(_zcdp_eps_up(Fraction(rho), target.delta, method)) <= eps

    lo, hi = 0.0, max(1.0, float_up(eps))
    while hi < 1e300 and ok(hi):  # ε(ρ) → ∞ with ρ: stops, usually at once
        lo, hi = hi, 2.0 * hi
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return ZCDP(Fraction(lo))


# ----------------------------------------------------------------------------------- composition


def compose(*budgets: Budget) -> Budget:
    """Basic sequential composition: the guarantee of running every mechanism on the same data.

    Same kind: ε's add (Dwork & Roth 2014, Thm. 3.14); (ε, δ)'s add componentwise (ibid., Thm.
    3.16); ρ's add (Bun & Steinke 2016, Lemma 1.7). All exact. PureDP mixed with ZCDP gives ZCDP,
    the pure parts converted by :func:`pure_to_zcdp`. ApproxDP mixed with anything else is
    refused: which δ to spend on the zCDP parts is the caller's choice, so convert explicitly.
    Holds for adaptively chosen mechanisms, each with independent randomness (userdp's noise
    streams are keyed by distinct labels). No advanced composition.
    """
    if not budgets:
        raise ValueError("compose() needs at least one budget")
    for i, b in enumerate(budgets):
        require_budget(b, f"compose() argument {i}")
    kinds = {type(b) for b in budgets}
    if ApproxDP in kinds and len(kinds) > 1:
        raise TypeError(
            "compose() will not mix ApproxDP with "
            + " or ".join(sorted(k.__name__ for k in kinds if k is not ApproxDP))
            + " implicitly: convert first with pure_to_approx(b) or zcdp_to_approx(b, delta), "
            "then compose the ApproxDP values"
        )
    if kinds == {PureDP}:
        return PureDP(sum((b.epsilon for b in budgets if isinstance(b, PureDP)), Fraction(0)))
    if kinds == {ApproxDP}:
        parts = [b for b in budgets if isinstance(b, ApproxDP)]
        delta = sum((b.delta for b in parts), Fraction(0))
        if delta >= 1:
            raise ValueError(
                f"composed δ={format_fraction(delta)} ≥ 1: the composition guarantees nothing"
            )
        return ApproxDP(sum((b.epsilon for b in parts), Fraction(0)), delta)
    zs = [pure_to_zcdp(b) if isinstance(b, PureDP) else b for b in budgets]
    return ZCDP(sum((z.rho for z in zs if isinstance(z, ZCDP)), Fraction(0)))
