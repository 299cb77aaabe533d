"""Tails of the discrete Laplace and Gaussian distributions, in :mod:`decimal`, for thresholds.

Partition selection (:mod:`.partition_selection`) sets its thresholds from P(Z ≥ k) for the
noise Z it adds to a person count; these are computed here to a stated precision, with a rigorous
bound on any truncated remainder, so that a threshold is accepted only if its δ provably fits.
Derivations: ``docs/partition_selection.md`` §1–2.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import MAX_EMAX, MIN_EMIN, Decimal, localcontext
from fractions import Fraction

from .checks import Rational, positive

MAX_TERMS = 10**7  # cap on pmf terms / table entries computed at build time


class TooWideToTabulateError(ValueError):
    """A discrete Gaussian whose tail table would pass ``MAX_TERMS`` (a tiny ρ per partition):
    a rule chooser skips that candidate; a planner refuses the budget naming the query."""


def _too_wide(sigma2: Fraction) -> TooWideToTabulateError:
    return TooWideToTabulateError(
        f"discrete Gaussian with σ² = {float(sigma2):.6g} is too wide to tabulate "
        f"({MAX_TERMS} terms); choose a larger rho or a smaller max_partitions_per_person"
    )


def to_decimal(x: Fraction) -> Decimal:
    """x in the current decimal context (correctly rounded)."""
    return Decimal(x.numerator) / Decimal(x.denominator)


def discrete_laplace_tail(scale: Rational, k: int, *, prec: int = 60) -> Decimal:
    """P(Z ≥ k) for Z ~ discrete Laplace of the given scale, to ``prec`` significant digits.

    With q = e^(−1/scale), P(Z = z) = (1 − q)/(1 + q)·q^|z|, so for k ≥ 1 the geometric series gives
    P(Z ≥ k) = (1 − q)/(1 + q)·q^k/(1 − q) = q^k/(1 + q); for k ≤ 0, by symmetry,
    P(Z ≥ k) = 1 − P(Z ≥ 1 − k) = 1 − q^(1−k)/(1 + q).
    """
    rate = 1 / positive(scale, "scale", "the noise scale is L/ε")
    with localcontext() as ctx:
        ctx.prec = prec
        ctx.Emin, ctx.Emax = MIN_EMIN, MAX_EMAX  # a tail below 10^−999999 stays above 0
        r = to_decimal(rate)
        q1 = 1 + (-r).exp()
        if k >= 1:
            return (-r * k).exp() / q1
        return 1 - (-r * (1 - k)).exp() / q1


def gaussian_tail_fn(
    sigma2: Fraction, floor: Decimal, prec: int
) -> tuple[Callable[[int], Decimal], int]:
    """(k ↦ P(Z ≥ k), M) for Z ~ discrete Gaussian(σ²), accurate where P(Z ≥ k) ≫ ``floor``.

    The unnormalised terms t_z = e^(−z²/(2σ²)) are built by t_{z+1} = t_z·a·b^z with
    a = e^(−1/(2σ²)), b = a² (multiplications only, ~2M roundings, hence ``prec`` + 10 digits),
    up to the first M with t_M < floor and remainder bound R < floor, where
    Σ_{z>M} t_z ≤ t_M·Σ_{j≥1} b^(Mj) = t_M·b^M/(1 − b^M) because (M + j)² ≥ M² + 2Mj. The tail sums
    S(m) = Σ_{m≤z≤M} t_z + R are upper bounds; the normaliser is t_0 + 2·S(1).
    """
    # t_M < floor needs M > σ·√(2·ln(1/floor)): a σ² needing more than MAX_TERMS terms is
    # refused at once, not after building 10^7 of them (minutes, for a budget like ε = 1e-300)
    if sigma2 > Fraction(MAX_TERMS**2) / Fraction(2 * float(-floor.ln())):
        raise _too_wide(sigma2)
    with localcontext() as ctx:
        ctx.prec = prec + 10
        # A huge ρ makes σ² tiny and a = e^(−1/(2σ²)) astronomically small: the widest exponent
        # range keeps it exact (a ≥ 10^(−10^18)); past that it would round to 0, and the bounds
        # below would divide 0 by 0, so such a σ² is refused.
        ctx.Emin, ctx.Emax = MIN_EMIN, MAX_EMAX
        a = (-to_decimal(1 / (2 * sigma2))).exp()
        if a == 0:
            raise ValueError(
                f"discrete Gaussian with σ² = {float(sigma2):.6g} is too narrow to tabulate; "
                "choose a smaller rho (a ρ this large protects nothing)"
            )
        b = a * a
        terms = [Decimal(1)]
        t, c, rest = Decimal(1), a, Decimal(0)  # c = a·b^z
        while True:
            t *= c
            c *= b
            terms.append(t)
            if t < floor:
                beta = c / a  # b^M for M = len(terms) − 1
                rest = t * beta / (1 - beta)
                if rest < floor:
                    break
            if len(terms) > MAX_TERMS:
                raise _too_wide(sigma2)
        M = len(terms) - 1
        sums = [Decimal(0)] * (M + 2)
        sums[M + 1] = rest
        for z in range(M, -1, -1):
            sums[z] = sums[z + 1] + terms[z]
        norm = terms[0] + 2 * sums[1]

    def tail(k: int) -> Decimal:
        with localcontext() as ctx:
            ctx.prec = prec
            ctx.Emin, ctx.Emax = MIN_EMIN, MAX_EMAX  # as above: tiny tails stay above 0
            if k >= 1:
                return sums[min(k, M + 1)] / norm
            if 1 - k > M + 1:
                return Decimal(1)
            return 1 - sums[1 - k] / norm

    return tail, M
