"""The tuning model (transforms/mechanisms/bound_recommendation.py): its kept rows and persons
against brute force on small logs — the expectation over every subset of L partitions a person
could keep — the choice, the threshold, and misuse."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from userdp.transforms.mechanisms.bound_recommendation import (
    ContributionModel,
    Setting,
    best,
    count_settings,
    persons_settings,
)
from userdp.transforms.mechanisms.contribution_histogram import ContributionHistograms

H = ContributionHistograms(epsilon=1, max_exponent=3, per_octave=4)  # cells exact up to 8
PERSONS = [(1,), (3, 1), (8, 2, 2), (5, 5, 5, 1, 7), (2,) * 7, (9, 1)]


def brute_kept(persons: list[tuple[int, ...]], L: int, C: int) -> Fraction:
    """E[rows kept] when each person keeps a uniformly random L-subset of their partitions and
    C rows of each: the average over every subset, exactly."""
    total = Fraction(0)
    for counts in persons:
        subsets = list(itertools.combinations(range(len(counts)), min(L, len(counts))))
        kept = sum(sum(min(counts[j], C) for j in s) for s in subsets)
        total += Fraction(kept, len(subsets))
    return total


def test_kept_rows_and_persons_match_brute_force_for_every_bound() -> None:
    small = [p for p in PERSONS if max(p) <= 8]  # every count on the exact part of the grid
    model = ContributionModel(H, H.exact(small))
    for L in range(1, 9):
        assert model.kept_persons(L) == pytest.approx(sum(min(len(p), L) for p in small))
        for C in range(1, 9):
            assert model.kept_rows(L, C) == pytest.approx(float(brute_kept(small, L, C)))
    assert model.rows() == pytest.approx(sum(map(sum, small)))


def test_counts_above_the_grid_are_exact_for_bounds_on_the_grid() -> None:
    model = ContributionModel(H, H.exact(PERSONS))  # (9, 1): a count above the top edge 8
    for L, C in itertools.product(range(1, 9), repeat=2):
        assert model.kept_rows(L, C) == pytest.approx(float(brute_kept(PERSONS, L, C)))


def test_the_choice_minimises_bias_plus_noise() -> None:
    model = ContributionModel(H, H.exact(PERSONS))
    settings = count_settings(model, 2, lambda L, C: 0.3 * L * (C or 1))
    chosen = best(settings)
    assert chosen.error == min(s.error for s in settings)
    top = model.rows()
    for s in settings:  # bias = clipped rows over the 2 partitions
        assert s.bias == pytest.approx((top - model.kept_rows(s.L, s.C or 1)) / 2)
    # no noise: the largest bounds clip nothing, and the tie goes to the smallest of them
    free = best(count_settings(model, 2, lambda L, C: 0.0))
    assert free.bias == pytest.approx(0.0) and (free.L, free.C) == (7, 8)
    people = best(persons_settings(model, 2, lambda L, C: 0.0))
    assert people.L == 7 and people.C is None  # the person with 7 partitions


def test_cells_below_the_threshold_are_dropped() -> None:
    grid = H.exact(PERSONS)
    grid[8][8] = 2.5  # a noisy empty cell
    model = ContributionModel(H, grid, threshold=3.0)  # ε = 1: cells below 3 are dropped
    assert all(w == 0.0 for row in model.grid for w in row)  # every true cell here is < 3
    assert ContributionModel(H, grid).grid[8][8] == 2.5


def test_the_tuners_threshold_drops_a_phantom_cell_of_ten_noise_units() -> None:
    """A noisy empty cell far from the data, at 10/ε (P ≈ ½e^−10 per cell, ~1% of runs over 289
    cells), made the model recommend L = C = 256 on a log whose best is (3, 4): its phantom rows
    look like persons the large bounds would keep. ``userdp tune``'s threshold (11/ε) drops it;
    the old one (8/ε, the negative control) did not (docs/tuning.md, the threshold study)."""
    import random  # noqa: PLC0415

    from userdp.pipelines.tune_model import CELL_THRESHOLD  # noqa: PLC0415

    h = ContributionHistograms(epsilon=1, max_exponent=8)
    draw = random.Random(0)  # test data, not noise
    persons = [tuple(draw.randint(1, 4) for _ in range(draw.randint(1, 3))) for _ in range(3000)]
    grid = h.exact(persons)
    phantom = [row[:] for row in grid]
    phantom[-1][-1] += 10.0  # ε = 1: ten noise units in the corner (256+ partitions, rows)

    def choice(g: list[list[float]], threshold: float) -> tuple[int, int | None]:
        chosen = best(
            count_settings(ContributionModel(h, g, threshold), 5, lambda L, C: 0.2 * L * (C or 1))
        )
        return chosen.L, chosen.C

    assert choice(grid, CELL_THRESHOLD) == choice(phantom, CELL_THRESHOLD) == (3, 4)
    assert choice(phantom, 8.0) == (256, 256)  # the old threshold let it through


def test_a_negative_bias_estimate_is_shown_as_zero() -> None:
    s = Setting(2, 3, -1.5, 4.0)
    assert s.error == 2.5 and s.shown_bias == 0.0 and s.shown_error == 4.0


def test_misuse_is_refused() -> None:
    model = ContributionModel(H, H.exact(PERSONS))
    with pytest.raises(ValueError, match=r"partitions must be a finite number, got nan"):
        count_settings(model, float("nan"), lambda L, C: 1.0)
    with pytest.raises(ValueError, match=r"expected a 9×9 histogram"):
        ContributionModel(H, [[0.0]])
    with pytest.raises(ValueError, match=r"no candidate settings"):
        best([])
