"""The partition-selection rule for an (ε, δ) share: of the valid rules, the one that keeps most.

Which rule releases more partitions for the same (ε, δ) depends on L (partitions per person):

* :class:`~.partition_selection.TruncatedGeometricSelection` is the optimal rule for L = 1
  (Desfontaines et al., PoPETs 2022) and composes (ε/L, δ/L) over a person's L partitions;
* :class:`~.partition_selection.GaussianThresholding` adds discrete Gaussian noise of σ² = L/(2ρ)
  to the person counts. The L counts one person moves form one vector of L2 norm √L, so its
  privacy loss grows like √L rather than L: for L ≥ 4 or so it keeps partitions with fewer
  persons. Its guarantee is ρ-zCDP for the noisy counts plus ``delta`` for the partitions only
  one side has (the class docstring); ρ-zCDP is (ε, δ_c)-DP for the ρ given by
  :func:`~.accounting.zcdp_budget_for` (the CKS conversion), so with δ split as δ_c + δ_t the
  whole is (ε, δ)-DP by basic composition of the two failure events
  (``docs/partition_selection.md`` §5).

:func:`best_selection` builds the candidates from public parameters only (ε, δ, L) and returns
the one with the smallest ``half_keep_count`` — the person count kept with probability ½, the
point where the keep curves differ most in practice — preferring the truncated-geometric rule on
a tie; that rule's table is skipped when a closed-form floor on its count already loses
(:func:`geometric_half_keep_floor`, docs/partition_selection.md §5). The choice reads no data,
so it costs no budget. Measured gain: ``docs/accuracy.md``.
"""

from __future__ import annotations

import math
from fractions import Fraction

from .accounting import ApproxDP, zcdp_budget_for
from .checks import Rational, as_fraction, positive
from .partition_selection import (
    TABLE_MAX_EPSILON,
    GaussianThresholding,
    TruncatedGeometricSelection,
    check_delta,
    check_max_partitions,
)
from .selection_tails import TooWideToTabulateError

# Fractions of δ left to the Gaussian thresholding's own tail (the rest goes to the conversion).
# Measured at ε ∈ [0.05, 2], L ∈ [1, 50], δ = 10^-6: the best split is between 1/4 and 1/2 and
# moves half_keep_count by < 1%, so two candidates suffice.
GAUSSIAN_DELTA_SPLITS = (Fraction(1, 2), Fraction(1, 4))

SelectionForApproxDP = TruncatedGeometricSelection | GaussianThresholding


def gaussian_selection(
    epsilon: Rational, delta: Rational, max_partitions_per_person: int, tail: Fraction
) -> GaussianThresholding:
    """Gaussian thresholding that is (ε, δ)-DP: ρ from (ε, δ·(1 − tail)), tail δ·tail."""
    eps, d = as_fraction(epsilon, "epsilon"), as_fraction(delta, "delta")
    rho = zcdp_budget_for(ApproxDP(eps, d * (1 - tail))).rho
    return GaussianThresholding(rho, d * tail, max_partitions_per_person)


def geometric_half_keep_floor(epsilon: Fraction, delta: Fraction, max_partitions: int) -> float:
    """A lower bound on ``TruncatedGeometricSelection(ε, δ, L).half_keep_count``, without its
    table: every (ε', δ')-DP keep rule with π(0) = 0 has π(n) ≤ e^ε'·π(n−1) + δ', so
    π(n) ≤ δ'·(e^(ε'n) − 1)/(e^ε' − 1), which stays below ½ while
    n < ln(1 + (e^ε' − 1)/(2δ'))/ε' — and ln(x) ≤ ln(1 + x). Per-partition ε' = ε/L, δ' = δ/L.
    Logs of the exact δ' (a Fraction far below a float's range is fine); shaved by 10^−9 for the
    float rounding."""
    eps = min(epsilon / max_partitions, TABLE_MAX_EPSILON)  # the table's own cap, per partition
    d = delta / max_partitions
    e = float(eps)
    if e == 0.0:  # ε' below the float range: the table would be endless, the floor is too
        return math.inf
    log_delta = math.log(d.numerator) - math.log(d.denominator)
    bound = (math.log(math.expm1(e)) - math.log(2) - log_delta) / e
    return bound * (1 - 1e-9) - 1e-9


def best_selection(
    epsilon: Rational, delta: Rational, max_partitions_per_person: int
) -> SelectionForApproxDP:
    """The (ε, δ)-DP selection rule with the smallest half-keep count (module docstring).

    The Gaussian candidates are built first: they are quick at every L. The optimal rule's table
    has about ln(1/δ')/ε' entries (ε' = ε/L), minutes of exact arithmetic at large L or small ε,
    so it is built only when a lower bound on its half-keep count
    (:func:`geometric_half_keep_floor`) does not already lose to a Gaussian candidate — it then
    cannot win, and the choice is the same as if it had been built."""
    # the geometric rule's checks and messages, before any candidate is built
    eps = positive(epsilon, "epsilon", "split the budget so that selection gets ε > 0")
    d, L = check_delta(delta), check_max_partitions(max_partitions_per_person)
    gaussian: GaussianThresholding | None = None
    for tail in GAUSSIAN_DELTA_SPLITS:
        try:
            candidate = gaussian_selection(eps, d, L, tail)
        except TooWideToTabulateError:  # a tiny ε: only the geometric rule can serve
            continue
        if gaussian is None or candidate.half_keep_count < gaussian.half_keep_count:
            gaussian = candidate
    if gaussian is not None and geometric_half_keep_floor(eps, d, L) > gaussian.half_keep_count:
        return gaussian  # (a tie would prefer the geometric rule: then it is built)
    geometric = TruncatedGeometricSelection(eps, d, L)
    if gaussian is not None and gaussian.half_keep_count < geometric.half_keep_count:
        return gaussian
    return geometric
