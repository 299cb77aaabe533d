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

:func:`best_selection` builds each candidate from public parameters only (ε, δ, L) and returns
the one with the smallest ``half_keep_count`` — the person count kept with probability ½, the
point where the keep curves differ most in practice — preferring the truncated-geometric rule on
a tie. The choice reads no data, so it costs no budget. Measured gain: ``docs/accuracy.md``.
"""

from __future__ import annotations

from fractions import Fraction

from .accounting import ApproxDP, zcdp_budget_for
from .checks import Rational, as_fraction
from .partition_selection import GaussianThresholding, TruncatedGeometricSelection
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


def best_selection(
    epsilon: Rational, delta: Rational, max_partitions_per_person: int
) -> SelectionForApproxDP:
    """The (ε, δ)-DP selection rule with the smallest half-keep count (module docstring)."""
    best: SelectionForApproxDP = TruncatedGeometricSelection(
        epsilon, delta, max_partitions_per_person
    )
    for tail in GAUSSIAN_DELTA_SPLITS:
        try:
            candidate = gaussian_selection(epsilon, delta, max_partitions_per_person, tail)
        except TooWideToTabulateError:  # a tiny ε: the geometric rule stands (it is built)
            continue
        if candidate.half_keep_count < best.half_keep_count:
            best = candidate
    return best
