"""Private partition selection: which partition keys may be released.

When the set of partition keys (e.g. web domains) is itself private, a key may appear in the output
only if a randomised test on its exact number n of *distinct persons* passes, so that a partition
held by a single person does not reveal that person's presence. Each person contributes to at most
L = ``max_partitions_per_person`` partitions (enforced upstream); neighbouring data sets differ by
adding or removing all rows of one person. Such a change moves the person count of at most L
partitions by one, and creates (or deletes) only partitions whose count is 1 in the larger data set.

Three rules, each a frozen parameter object that validates its knobs and does all threshold and δ
arithmetic once, when the pipeline is built; ``decide(count, rng)`` then decides one partition:

* :class:`LaplaceThresholding` — keep iff n + Z ≥ T, Z discrete Laplace of scale L/ε; the noisy
  count may be released with the key. (ε, δ)-DP for the key set and the noisy counts together.
* :class:`GaussianThresholding` — the same with discrete Gaussian noise, σ² = L/(2ρ). ρ-zCDP for
  the counts plus δ for the selection (the precise statement is in the class docstring).
* :class:`TruncatedGeometricSelection` — keep with probability π(n), the optimal (ε, δ) rule of
  Desfontaines, Voss, Gipson, Mandayam (PoPETs 2022); releases the key only.

Every draw that decides a release is exact (:mod:`.discrete`) and comes from the caller's
:class:`~.rng.KeyedRng`. Thresholds and probabilities are computed in :mod:`decimal`, rounded in the
safe direction. Derivations and proofs: ``docs/partition_selection.md``. Error messages never echo
a person count: counts are private.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import MAX_EMAX, MIN_EMIN, ROUND_FLOOR, Decimal, localcontext
from fractions import Fraction
from typing import NamedTuple

from .checks import Rational, as_fraction, positive
from .discrete import (
    bernoulli_rational,
    discrete_gaussian,
    discrete_laplace,
)
from .rng import KeyedRng
from .selection_tails import MAX_TERMS, discrete_laplace_tail, gaussian_tail_fn, to_decimal
from .threshold_search import smallest_passing

_MARGIN = 1 + Fraction(1, 10**30)  # T is accepted only if δ(T)·(1 + 1e−30) ≤ δ, exactly
# (as Fractions: in the ambient 28-digit decimal context 1 + 1e−30 was 1, and the product
# rounded to nearest could fall below δ(T))
_DELTA_SLACK_DIGITS = 20  # the optimal rule is computed for δ' = δ_p·(1 − 10^−20)


class Decision(NamedTuple):
    """Outcome of a thresholding rule. If ``keep`` is False, ``noisy_count`` must be discarded."""

    keep: bool
    noisy_count: int


def check_delta(x: Rational) -> Fraction:
    f = as_fraction(x, "delta")
    if not 0 < f < 1:
        raise ValueError(
            f"delta must lie in the open interval (0, 1), got {x!r}; partition selection needs "
            "δ > 0 (a key seen by one person cannot be released with δ = 0), and δ ≥ 1 promises "
            "nothing"
        )
    return f


def check_max_partitions(L: int) -> int:
    if isinstance(L, bool) or not isinstance(L, int):
        raise TypeError(f"max_partitions_per_person must be an int, got {type(L).__name__} {L!r}")
    if L < 1:
        raise ValueError(
            f"max_partitions_per_person must be ≥ 1, got {L}; it is the contribution bound that "
            "the pipeline enforces upstream"
        )
    return L


def _count(n: int) -> int:
    # The value itself is private, so the messages name only its type or sign.
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(
            f"count must be an int (a number of distinct persons), got {type(n).__name__}"
        )
    if n < 0:
        raise ValueError("count must be a non-negative number of distinct persons, got a negative")
    return n


def _digits(x: Fraction) -> int:
    """⌈log10(1/x)⌉ for 0 < x < 1, from the integer parts so that a tiny x cannot underflow."""
    return max(0, math.ceil(math.log10(x.denominator) - math.log10(x.numerator)))


def _threshold_prec(delta: Fraction, L: int) -> int:
    # 1 − (1 − p)^L loses ~log10(1/p) digits to cancellation, p ≈ δ/L; 50 digits remain.
    return 50 + _digits(delta) + len(str(L))


def _selection_delta(p: Decimal, L: int) -> Decimal:
    """δ(T) = 1 − (1 − p)^L: the chance that one of L independent single-person keys passes.
    A p below the context's precision makes 1 − p round to 1: then L·p, an upper bound, so a
    stated δ is never 0 where it is not (a huge ρ puts p near e^(−10^7))."""
    value = 1 - (1 - p) ** L
    return value if value > 0 or p == 0 else L * p


@dataclass(frozen=True, init=False)
class LaplaceThresholding:
    """Keep a partition iff n + Z ≥ ``threshold``, Z ~ discrete Laplace of scale L/ε (exact).

    ``threshold`` T is the least integer with δ(T) ≤ δ, where δ(T) = 1 − (1 − P(Z ≥ T − 1))^L is
    the probability that one of the removed person's ≤ L partitions, each held by that person alone
    (count 1) and noised independently, passes; P(Z ≥ k) = q^k/(1 + q) for k ≥ 1, q = e^(−ε/L)
    (:func:`discrete_laplace_tail`). δ(T) is computed to ≥ 50 significant digits and T accepted only
    if δ(T)·(1 + 10^−30) ≤ δ, so rounding can only raise T.

    Guarantee: (ε, δ)-DP for the set of kept keys *and* their noisy counts together. The counts of
    partitions present in both neighbours form a vector of L1 sensitivity ≤ L, so with scale L/ε
    they are ε-DP (discrete Laplace mechanism, CKS 2020); thresholding them is post-processing. The
    partitions that exist only because of the person are all dropped with probability ≥ 1 − δ(T),
    independently; that event costs the additive δ(T) ≤ δ in both directions of the DP inequality
    (proof in ``docs/partition_selection.md``). Noisy counts of dropped partitions must never leave.
    """

    epsilon: Fraction
    delta: Fraction
    max_partitions_per_person: int
    scale: Fraction
    threshold: int
    delta_achieved: Decimal
    half_keep_count: int

    def __init__(self, epsilon: Rational, delta: Rational, max_partitions_per_person: int) -> None:
        eps = positive(epsilon, "epsilon", "split the budget so that selection gets ε > 0")
        d, L = check_delta(delta), check_max_partitions(max_partitions_per_person)
        scale = Fraction(L) / eps
        for name, value in (("epsilon", eps), ("delta", d), ("max_partitions_per_person", L)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "scale", scale)
        # At T = k + 1, P(Z ≥ k) ≤ e^(−k/scale) ≤ e^−2·δ/L, so δ(T) ≤ e^−2·δ: T = k + 1 passes.
        log_l_over_d = math.log(L) + math.log(d.denominator) - math.log(d.numerator)
        k = math.ceil(float(scale) * (log_l_over_d + 2)) + 2
        T = smallest_passing(lambda t: Fraction(self.delta_at(t)) * _MARGIN <= d, 1 - k, k + 1)
        object.__setattr__(self, "threshold", T)
        object.__setattr__(self, "delta_achieved", self.delta_at(T))
        # P(Z ≥ 0) = 1/(1 + q) > 1/2 > q/(1 + q) = P(Z ≥ 1): P(n + Z ≥ T) ≥ 1/2 iff n ≥ T.
        object.__setattr__(self, "half_keep_count", max(T, 1))

    def delta_at(self, threshold: int) -> Decimal:
        """δ(T) = 1 − (1 − P(1 + Z ≥ T))^L for this noise scale and L."""
        prec = _threshold_prec(self.delta, self.max_partitions_per_person)
        p = discrete_laplace_tail(self.scale, threshold - 1, prec=prec)
        with localcontext() as ctx:
            ctx.prec = prec
            ctx.Emin, ctx.Emax = MIN_EMIN, MAX_EMAX  # as the tail's: δ(T) never rounds to 0
            return _selection_delta(p, self.max_partitions_per_person)

    def keep_probability(self, count: int) -> float:
        """P(count + Z ≥ T), for planning output."""
        return float(discrete_laplace_tail(self.scale, self.threshold - _count(count)))

    def decide(self, count: int, rng: KeyedRng) -> Decision:
        noisy = _count(count) + discrete_laplace(rng, self.scale)
        return Decision(noisy >= self.threshold, noisy)


@dataclass(frozen=True, init=False)
class GaussianThresholding:
    """Keep a partition iff n + Z ≥ ``threshold``, Z ~ discrete Gaussian with σ² = L/(2ρ) (exact).

    ``threshold`` is chosen as for :class:`LaplaceThresholding`, with
    δ(T) = 1 − (1 − P(Z ≥ T − 1))^L and P(Z ≥ k) summed from the discrete Gaussian pmf in
    :mod:`decimal`, with a rigorous bound on the truncated remainder (see ``gaussian_tail_fn``).
    Building costs O(σ·√log(L/δ)) decimal multiplications.

    Guarantee, precisely. (i) The noisy counts of the partitions present in both neighbours have L2
    sensitivity ≤ √L, so they are ρ-zCDP (CKS 2020, Thm. 4); thresholding them is post-processing.
    (ii) The partitions that exist only because of the person are all dropped, independently of
    (i), with probability ≥ 1 − δ(T) ≥ 1 − δ. Hence the whole output (keys and noisy counts) is
    δ-approximately ρ-zCDP (Bun & Steinke 2016, Def. 8.1), and for every δ_c ∈ (0, 1): if the
    ρ-zCDP release (i) is (ε_c, δ_c)-DP by any conversion (e.g. ``accounting.zcdp_to_approx``),
    the whole output is (ε_c, δ_c + δ)-DP (proof in ``docs/partition_selection.md``). It is *not*
    ρ-zCDP on its own: the selection's δ must be accounted for separately.
    """

    rho: Fraction
    delta: Fraction
    max_partitions_per_person: int
    sigma2: Fraction
    threshold: int
    delta_achieved: Decimal
    half_keep_count: int

    def __init__(self, rho: Rational, delta: Rational, max_partitions_per_person: int) -> None:
        r = positive(rho, "rho", "split the budget so that selection gets ρ > 0")
        d, L = check_delta(delta), check_max_partitions(max_partitions_per_person)
        for name, value in (("rho", r), ("delta", d), ("max_partitions_per_person", L)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "sigma2", Fraction(L) / (2 * r))
        tail, M = self._tail()
        # At T = M + 2, P(Z ≥ M + 1) ≤ R/norm < 10^−40·δ/L, so T = M + 2 passes.
        T = smallest_passing(lambda t: Fraction(self._delta(tail, t)) * _MARGIN <= d, 1 - M, M + 2)
        object.__setattr__(self, "threshold", T)
        object.__setattr__(self, "delta_achieved", self._delta(tail, T))
        # P(Z ≥ 0) = (1 + S)/(1 + 2S) > 1/2 > S/(1 + 2S) = P(Z ≥ 1), S = Σ_{z≥1} t_z.
        object.__setattr__(self, "half_keep_count", max(T, 1))

    def _tail(self) -> tuple[Callable[[int], Decimal], int]:
        L = self.max_partitions_per_person
        floor = Decimal(10) ** -40 * to_decimal(self.delta / L)
        return gaussian_tail_fn(self.sigma2, floor, _threshold_prec(self.delta, L))

    def _delta(self, tail: Callable[[int], Decimal], threshold: int) -> Decimal:
        p = tail(threshold - 1)
        with localcontext() as ctx:
            ctx.prec = _threshold_prec(self.delta, self.max_partitions_per_person)
            ctx.Emin, ctx.Emax = MIN_EMIN, MAX_EMAX  # p may be far below 10^−999999
            return _selection_delta(p, self.max_partitions_per_person)

    def delta_at(self, threshold: int) -> Decimal:
        """δ(T) = 1 − (1 − P(1 + Z ≥ T))^L (re-tabulates the pmf: for tests and planning)."""
        return self._delta(self._tail()[0], threshold)

    def keep_probability(self, count: int) -> float:
        """P(count + Z ≥ T), for planning output (re-tabulates the pmf)."""
        return float(self._tail()[0](self.threshold - _count(count)))

    def decide(self, count: int, rng: KeyedRng) -> Decision:
        noisy = _count(count) + discrete_gaussian(rng, self.sigma2)
        return Decision(noisy >= self.threshold, noisy)


TABLE_MAX_EPSILON = Fraction(100)
"""The optimal rule's table is built at min(ε, 100). Its precision grows as ε/ln 10 digits, so an
ε of 10^6 took minutes and 2^63 ran out of memory before any check could refuse it; and at
ε = 100 the table is already [0, δ', 1 − e^−100·(1 − 2δ'), …, 1] up to e^−100. A rule that is
(100, δ)-DP is (ε, δ)-DP for every larger ε, so the cap costs nothing but that e^−100."""


def _optimal_table(eps: Fraction, delta: Fraction) -> tuple[Fraction, ...]:
    """π̂(0..n*) for per-partition (ε, δ): exact rationals, π̂(n*) = 1 and π̂(n) < 1 before.

    Recursion (Desfontaines et al. 2022, Thm. 1; as in Google's ``go/dpagg/select_partition.go``):
    π(0) = 0, π(n) = min(e^ε·π(n−1) + δ, 1 − e^−ε·(1 − π(n−1) − δ), 1).

    Why rounding cannot break DP. Work at precision P (u = 10^(1−P), every decimal operation and exp
    correctly rounded, so relative error ≤ u/2 each), with δ' = δ·(1 − 10^−20) rounded (so
    δ − δ' ≥ s/2, s = δ·10^−20), feed back the *rounded* value π̂(n−1) ∈ [0, 1] (on the grid
    10^−G, G < P, so 1 − π̂ is exact), and set π̂(n) = floor_G(min(b1, b2, 1)) where b1, b2 are the
    computed branches. Then π̂(n) ≤ b1 ≤ e^ε·π̂(n−1) + δ' + 2u·e^ε and π̂(n) ≤ b2 ≤ 1 −
    e^−ε(1 − π̂(n−1) − δ') + 2u. The first gives π̂(n) ≤ e^ε·π̂(n−1) + δ once 2u·e^ε ≤ s/2; the
    second rearranges to 1 − π̂(n−1) ≤ e^ε(1 − π̂(n)) + δ' + 2u·e^ε ≤ e^ε(1 − π̂(n)) + δ. P below
    makes 2u·e^ε ≤ s/2 with room to spare. Together with π̂ non-decreasing (b1, b2 ≥ π̂(n−1)), these
    two inequalities are (ε, δ)-DP of Bernoulli(π̂(n)) against Bernoulli(π̂(n−1)) for both outcomes.
    The test suite re-checks both inequalities over the whole table in exact rational arithmetic.
    """
    eps = min(eps, TABLE_MAX_EPSILON)  # (100, δ)-DP is (ε, δ)-DP for every ε ≥ 100
    slack = _DELTA_SLACK_DIGITS + _digits(delta)  # s = δ·10^−20 ≥ 10^−slack
    grid = slack + 15  # G: π̂ keeps 15 digits below the slack
    prec = grid + math.ceil(float(eps) / math.log(10)) + 10
    with localcontext() as ctx:
        ctx.prec = prec
        e_up, e_down = to_decimal(eps).exp(), (-to_decimal(eps)).exp()
        d = to_decimal(delta) * (1 - Decimal(10) ** -_DELTA_SLACK_DIGITS)
        quantum = Decimal(10) ** -grid
        pi = Decimal(0)
        table = [Fraction(0)]
        while pi < 1:
            pi = min(e_up * pi + d, 1 - e_down * (1 - pi - d), Decimal(1))
            pi = pi.quantize(quantum, rounding=ROUND_FLOOR)
            table.append(Fraction(pi))
            if len(table) > MAX_TERMS:
                raise ValueError(
                    "the optimal selection table would exceed 10^7 entries; per-partition ε = "
                    f"{float(eps):.3g} (the selection's ε over max_partitions_per_person) is too "
                    "small to select any partition usefully: give the selection a larger epsilon "
                    "or lower max_partitions_per_person (or, in the core, use GaussianThresholding)"
                )
    return tuple(table)


@dataclass(frozen=True, init=False)
class TruncatedGeometricSelection:
    """Keep a partition with n persons with probability π(n), the optimal (ε, δ)-DP selection rule.

    Desfontaines, Voss, Gipson, Mandayam, "Differentially private partition selection", PoPETs 2022
    (arXiv:2006.03684), Thm. 1: π(0) = 0, π(n) = min(e^ε·π(n−1) + δ, 1 − e^−ε(1 − π(n−1) − δ), 1)
    is the largest keep probability that is (ε, δ)-DP when each person is in one partition; it is
    the truncated-geometric rule. For L partitions per person this uses per-partition (ε/L, δ/L)
    and basic composition over the ≤ L partitions one person changes (decisions are independent),
    as Google's ``PreAggSelectPartition`` does; this is not optimal for L > 1 (Gaussian
    thresholding often keeps more for L > 3).

    ``probabilities`` holds π̂(0..n*) as exact rationals, π̂(n*) = 1 (= ``always_keep_count``);
    π̂ is π for δ' = δ/L·(1 − 10^−20), rounded *down* to a decimal grid, so it satisfies both DP
    inequalities for the true (ε/L, δ/L) (proof at ``_optimal_table``). Bernoulli(π̂(n)) is sampled
    exactly; n ≥ n* is kept always. Guarantee: (ε, δ)-DP for the set of kept keys. No count is
    released; a count published with the key needs its own budget.
    """

    epsilon: Fraction
    delta: Fraction
    max_partitions_per_person: int
    probabilities: tuple[Fraction, ...]
    always_keep_count: int
    half_keep_count: int

    def __init__(self, epsilon: Rational, delta: Rational, max_partitions_per_person: int) -> None:
        eps = positive(epsilon, "epsilon", "split the budget so that selection gets ε > 0")
        d, L = check_delta(delta), check_max_partitions(max_partitions_per_person)
        for name, value in (("epsilon", eps), ("delta", d), ("max_partitions_per_person", L)):
            object.__setattr__(self, name, value)
        table = _optimal_table(eps / L, d / L)
        object.__setattr__(self, "probabilities", table)
        object.__setattr__(self, "always_keep_count", len(table) - 1)
        half = next(n for n, p in enumerate(table) if 2 * p >= 1)
        object.__setattr__(self, "half_keep_count", half)

    @property
    def epsilon_per_partition(self) -> Fraction:
        return self.epsilon / self.max_partitions_per_person

    @property
    def delta_per_partition(self) -> Fraction:
        return self.delta / self.max_partitions_per_person

    def keep_probability(self, count: int) -> Fraction:
        n = _count(count)
        return self.probabilities[n] if n < self.always_keep_count else Fraction(1)

    def decide(self, count: int, rng: KeyedRng) -> bool:
        n = _count(count)
        if n == 0:
            return False
        if n >= self.always_keep_count:
            return True
        return bernoulli_rational(rng, self.probabilities[n])
