"""The joint contribution histogram for tuning (transforms/mechanisms/contribution_histogram.py):
exact cells, L1 sensitivity 1 by brute force on small inputs, the noise's law, misuse."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from userdp.transforms.mechanisms.additive import LaplaceMechanism
from userdp.transforms.mechanisms.contribution_histogram import ContributionHistograms
from userdp.transforms.mechanisms.rng import KeyedRng

SECRET = bytes(range(32))
H = ContributionHistograms(epsilon=1, max_exponent=3, per_octave=4)  # ≤1, 2, …, 8, >8


def test_cells_hold_one_over_p_per_pair_and_marginals_follow() -> None:
    assert [H.bucket(c) for c in (1, 2, 8, 9, 1000)] == [0, 1, 7, 8, 8]
    grid = H.exact([(1,), (3, 3, 9)])
    assert grid[0][0] == 1.0  # P = 1, r = 1
    assert grid[2][2] == pytest.approx(2 / 3) and grid[2][8] == pytest.approx(1 / 3)
    assert sum(map(sum, grid)) == pytest.approx(2.0)  # one unit per person
    assert H.partitions_per_person(grid) == pytest.approx([1, 0, 1, 0, 0, 0, 0, 0, 0])
    assert H.rows_per_pair(grid) == pytest.approx([1, 0, 2 / 3, 0, 0, 0, 0, 0, 1 / 3])
    # the Beam side's integer pair counts give the same grid, whatever their order
    pairs = H.pair_counts([(3, 3, 9), (1,)])
    assert pairs == {(1, 0): 1, (3, 2): 2, (3, 8): 1}
    assert H.from_pair_counts(dict(reversed(list(pairs.items())))) == grid


def test_representatives_are_exact_on_the_grid() -> None:
    h = ContributionHistograms(epsilon=1, max_exponent=4, per_octave=2)  # 1 2 3 4 6 8 12 16
    assert h.edges == (1, 2, 3, 4, 6, 8, 12, 16)
    assert [h.representative(b) for b in range(h.size)] == [1, 2, 3, 4, 5.5, 7.5, 10.5, 14.5, 32]


def test_one_person_moves_the_histogram_by_at_most_one_in_l1() -> None:
    """Brute force: every multiset of 2 persons, each touching 1–3 partitions with 1–10 rows,
    against the same plus any one more person."""
    people = [p for k in (1, 2, 3) for p in itertools.product((1, 4, 10), repeat=k)]
    worst = 0.0
    for base in itertools.combinations_with_replacement(people[:8], 2):
        before = H.exact(base)
        for extra in people:
            after = H.exact((*base, extra))
            change = sum(abs(a - b) for ra, rb in zip(after, before, strict=True)
                         for a, b in zip(ra, rb, strict=True))  # fmt: skip
            worst = max(worst, change)
    assert worst == pytest.approx(1.0)


def test_the_noise_is_laplace_of_scale_one_over_epsilon() -> None:
    """KS test of 5,000 cell noises against Laplace(1/ε); seeded, false alarm ≤ 10^-3."""
    h = ContributionHistograms(epsilon=0.5, max_exponent=3, per_octave=1)  # 5 × 5 cells
    exact = h.exact([(1,)])
    noise = []
    for i in range(200):
        noisy = h.release([(1,)], KeyedRng(SECRET, "hist", i))
        noise += [v - e for rv, re_ in zip(noisy, exact, strict=True)
                  for v, e in zip(rv, re_, strict=True)]  # fmt: skip
    assert stats.kstest(np.array(noise), stats.laplace(scale=2.0).cdf).pvalue > 1e-3
    assert math.isclose(float(np.std(noise)), math.sqrt(2) * 2.0, rel_tol=0.1)


def test_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match=r"epsilon must be positive, got 0"):
        ContributionHistograms(epsilon=0)
    with pytest.raises(ValueError, match=r"max_exponent must lie in \[1, 20\]"):
        ContributionHistograms(epsilon=1, max_exponent=0)
    with pytest.raises(ValueError, match=r"a contribution count is an integer ≥ 1, got 0"):
        H.exact([(0,)])
    with pytest.raises(ValueError, match=r"every person touches at least one partition"):
        H.exact([()])
    with pytest.raises(ValueError, match=r"bucket 9 is outside \[0, 9\)"):
        H.from_pair_counts({(1, 9): 1})
    with pytest.raises(ValueError, match=r"expected a 9×9 histogram"):
        H.add_noise([[0.0]], KeyedRng(SECRET, "x"))


def test_the_noise_allows_one_rounding_per_cell() -> None:
    """The 17×17 cells are one vector mechanism (a person's weights 1/P spread over cells, each
    rounded to the noise grid alone: inflation cells·g), drawn row by row."""
    h = ContributionHistograms(epsilon=Fraction(1, 10), max_exponent=8)
    exact = h.exact([[1, 3, 7], [2]])
    noisy = h.add_noise(exact, KeyedRng(SECRET, "grid"))
    flat = LaplaceMechanism(1.0, 0.1, dimension=h.size**2).release_vector(
        [v for row in exact for v in row], KeyedRng(SECRET, "grid")
    )
    assert [v for row in noisy for v in row] == flat


def test_what_the_noise_is_added_to_moves_by_no_more_than_it_allows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past ~2^27 in a cell, float sums of n/P round: one person (P = 5) beside 6.6e8 pairs of
    P = 5 and 8.2e8 of P = 6 moved the float histogram by 1 + 3e-8 in L1, beyond the 1 + d·g
    (d·g = 1.1e-8) the noise allows (a review's case). Each n/P is now rounded once to the
    noise's grid: the person moves one term per cell they touch, by their weight ± g."""
    seen: list[list[float | Fraction]] = []

    def capture(self: LaplaceMechanism, values: list[float | Fraction], rng: KeyedRng) -> list:
        seen.append(list(values))
        return [0.0] * len(values)

    monkeypatch.setattr(LaplaceMechanism, "release_vector", capture)
    h = ContributionHistograms(epsilon=Fraction(1, 40), max_exponent=8)
    g = Fraction(h.mechanism().granularity)
    base = {(5, 0): 655_871_080, (6, 0): 823_567_439}
    for pairs in (base, {**base, (5, 0): base[5, 0] + 5}):  # + one person touching 5 partitions
        h.release_pair_counts(pairs, KeyedRng(SECRET, "big"))
    change = sum(abs(Fraction(a) - Fraction(b)) for a, b in zip(*seen, strict=True))
    assert abs(change - 1) <= g  # one cell touched: its weight 1, ± one grid step
    assert all((Fraction(v) / g).denominator == 1 for v in seen[0])  # on the grid: no 2nd rounding


def test_grid_sums_brute_force_on_a_coarse_grid() -> None:
    """Every multiset of 2 persons (1–3 partitions, 1–10 rows) plus any one more, terms rounded
    to a grid of 1/4 (coarse, so rounding matters): L1 change ≤ 1 + (cells touched)/4."""
    people = [p for k in (1, 2, 3) for p in itertools.product((1, 4, 10), repeat=k)]
    k, g = -2, Fraction(1, 4)
    for base in itertools.combinations_with_replacement(people[:8], 2):
        before = H.grid_sums(H.pair_counts(base), k)
        for extra in people:
            after = H.grid_sums(H.pair_counts((*base, extra)), k)
            touched = {(H.bucket(len(extra)), H.bucket(c)) for c in extra}
            change = sum(abs(a - b) for a, b in zip(after, before, strict=True))
            assert change <= 1 + len(touched) * g, (base, extra)
