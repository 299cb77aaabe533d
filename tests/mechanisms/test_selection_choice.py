"""The (ε, δ) partition-selection rule is the valid candidate that keeps the most partitions."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from userdp.transforms.mechanisms import selection_choice
from userdp.transforms.mechanisms.accounting import ZCDP, zcdp_to_approx
from userdp.transforms.mechanisms.partition_selection import (
    GaussianThresholding,
    TruncatedGeometricSelection,
)
from userdp.transforms.mechanisms.selection_choice import (
    GAUSSIAN_DELTA_SPLITS,
    best_selection,
    gaussian_selection,
    geometric_half_keep_floor,
)

DELTA = Fraction(1, 10**6)
GRID = [(Fraction(e), L) for e in ("1/20", "1/4", "1/2", "1", "2") for L in (1, 2, 3, 5, 10, 30)]


@pytest.mark.parametrize(("epsilon", "L"), GRID)
def test_the_choice_is_the_candidate_with_the_smallest_half_keep_count(
    epsilon: Fraction, L: int
) -> None:
    candidates = [
        TruncatedGeometricSelection(epsilon, DELTA, L),
        *(gaussian_selection(epsilon, DELTA, L, tail) for tail in GAUSSIAN_DELTA_SPLITS),
    ]
    chosen = best_selection(epsilon, DELTA, L)
    assert chosen.half_keep_count == min(c.half_keep_count for c in candidates)
    assert chosen in candidates
    if chosen.half_keep_count == candidates[0].half_keep_count:
        assert isinstance(chosen, TruncatedGeometricSelection)  # ties go to the exact rule


@pytest.mark.parametrize(("epsilon", "L"), GRID)
@pytest.mark.parametrize("tail", GAUSSIAN_DELTA_SPLITS)
def test_the_gaussian_candidate_is_within_the_share(
    epsilon: Fraction, L: int, tail: Fraction
) -> None:
    rule = gaussian_selection(epsilon, DELTA, L, tail)
    assert isinstance(rule, GaussianThresholding) and rule.max_partitions_per_person == L
    assert rule.delta == DELTA * tail  # the thresholding's own tail
    converted = zcdp_to_approx(ZCDP(rule.rho), DELTA * (1 - tail))  # the noisy counts' part
    assert converted.epsilon <= epsilon  # so keys and counts are (ε, δ)-DP (docs §5)
    assert converted.delta + rule.delta == DELTA


def test_which_rule_wins_where() -> None:
    """L = 1: the optimal rule; L = 5 (the demo job): Gaussian thresholding keeps more."""
    one = best_selection(Fraction(1, 4), DELTA, 1)
    assert isinstance(one, TruncatedGeometricSelection)
    five = best_selection(Fraction(1, 4), Fraction(1, 2 * 10**6), 5)
    geometric = TruncatedGeometricSelection(Fraction(1, 4), Fraction(1, 2 * 10**6), 5)
    assert isinstance(five, GaussianThresholding)
    assert five.half_keep_count < 0.9 * geometric.half_keep_count


def test_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        best_selection(0, DELTA, 5)
    with pytest.raises(ValueError, match="delta"):
        best_selection(1, 0, 5)
    with pytest.raises(ValueError, match="max_partitions_per_person"):
        best_selection(1, DELTA, 0)


def test_a_gaussian_candidate_too_wide_to_tabulate_is_skipped_not_fatal() -> None:
    """ε = 1e-300: every Gaussian candidate's table would pass 10^7 terms. The chooser raised
    (after minutes of tabulating) although the geometric rule is built in a moment; it now skips
    a candidate it cannot build."""
    rule = best_selection(1e-300, 1e-3, 1)
    assert isinstance(rule, TruncatedGeometricSelection) and rule.half_keep_count == 500


@pytest.mark.parametrize("epsilon", ["1/20", "1", "8", "200", "5000"])
@pytest.mark.parametrize("delta", [Fraction(1, 10**6), Fraction(1, 10**12), Fraction(1, 10**300)])
def test_the_floor_is_below_the_optimal_rules_half_keep_count_and_close_to_it(
    epsilon: str, delta: Fraction
) -> None:
    """The bound that lets the chooser skip the table: never above the count it bounds (else a
    rule that would win could be skipped), and within 1% of it wherever the table is long."""
    for L in (1, 3, 30):
        actual = TruncatedGeometricSelection(Fraction(epsilon), delta, L).half_keep_count
        floor = geometric_half_keep_floor(Fraction(epsilon), delta, L)
        assert floor <= actual, (epsilon, delta, L)
        if actual >= 100:
            assert floor >= 0.99 * actual, (epsilon, delta, L)
    # an ε' below the float range: no table could end, and the floor says so (not log(0))
    assert geometric_half_keep_floor(Fraction(1, 10**320), Fraction(1, 10), 2**53) == math.inf


def test_a_large_L_is_chosen_without_building_the_optimal_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """L = 10^6 at ε = 1, δ = 10^−7: the optimal rule's table (ε' = 10^−6) took minutes and then
    passed 10^7 entries, failing with advice the library had no parameter for, although Gaussian
    thresholding was always going to win. Its half-keep count's floor says so without the table."""

    def no_table(*args: object) -> TruncatedGeometricSelection:
        raise AssertionError("the optimal rule's table was built")

    monkeypatch.setattr(selection_choice, "TruncatedGeometricSelection", no_table)
    delta = Fraction(1, 10**7)
    for epsilon, L in ((Fraction(1), 10**6), (Fraction(1, 100), 10**5), (Fraction(1, 10), 1000)):
        rule = best_selection(epsilon, delta, L)
        assert isinstance(rule, GaussianThresholding) and rule.max_partitions_per_person == L
        assert geometric_half_keep_floor(epsilon, delta, L) > rule.half_keep_count
