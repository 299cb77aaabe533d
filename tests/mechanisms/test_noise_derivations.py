"""Brute-force checks of the grid-inflation bounds derived in docs/noise.md, on small inputs."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from userdp.transforms.mechanisms.additive import (
    GaussianMechanism,
    LaplaceMechanism,
    _round_to_grid,
)

# Inputs: all multiples of 1/16 in [-3, 3], rounded to grids g = 2^k for k in {-1, 0, 1}.
VALUES = [n / 16 for n in range(-48, 49)]
GRID_EXPONENTS = (-1, 0, 1)


def test_scalar_rounding_moves_neighbours_apart_by_at_most_one_grid_step() -> None:
    for k in GRID_EXPONENTS:
        g = 2.0**k
        for a, b in itertools.product(VALUES, repeat=2):
            gap = abs(_round_to_grid(a, k) - _round_to_grid(b, k))
            assert gap <= (abs(a - b) + g) / g, (a, b, k)


def test_the_scalar_bound_is_tight() -> None:
    # Some pair attains |r(a) − r(b)| > |a − b|/g: the inflation cannot be dropped.
    k, g = 0, 1.0
    assert any(
        abs(_round_to_grid(a, k) - _round_to_grid(b, k)) > abs(a - b) / g
        for a, b in itertools.product(VALUES, repeat=2)
    )


def test_vector_l1_and_l2_bounds() -> None:
    small = VALUES[::6]  # 17 values per coordinate, d = 2 and 3
    for d in (2, 3):
        for k in GRID_EXPONENTS:
            g = 2.0**k
            vectors = list(itertools.product(small, repeat=d))
            for x, y in itertools.product(vectors[::23], vectors[::19]):
                rx = [_round_to_grid(v, k) for v in x]
                ry = [_round_to_grid(v, k) for v in y]
                l1 = sum(abs(p - q) for p, q in zip(rx, ry, strict=True))
                l2 = math.sqrt(sum((p - q) ** 2 for p, q in zip(rx, ry, strict=True)))
                d1 = sum(abs(p - q) for p, q in zip(x, y, strict=True))
                d2 = math.sqrt(sum((p - q) ** 2 for p, q in zip(x, y, strict=True)))
                assert l1 <= d1 / g + d
                assert l2 <= d2 / g + math.ceil(math.sqrt(d)) + 1e-12


def test_rounding_is_exact_for_dyadic_inputs() -> None:
    for k in GRID_EXPONENTS:
        for a in VALUES:
            assert _round_to_grid(a, k) == round(Fraction(a) / Fraction(2) ** k)


def test_l_scalar_releases_need_l_roundings_of_inflation() -> None:
    """One person moves L partitions, each rounded and released by its own scalar mechanism
    whose Δ₁ covers all L (docs/noise.md §1): the roundings add up to L grid steps, which
    ``spans = L`` allows for and a single step (the mechanism's default) does not."""
    k, g, L = 0, 1.0, 3
    per = 0.25  # each partition moves by 1/4 of a grid step: Δ₁ = 3/4
    worst = 0
    for x in itertools.product(VALUES[::3], repeat=L):
        moved = [_round_to_grid(v + per, k) - _round_to_grid(v, k) for v in x]
        worst = max(worst, sum(abs(m) for m in moved))
    d1 = L * per
    assert worst <= d1 / g + L  # the bound the mechanism with spans = L is calibrated to
    assert worst > d1 / g + 1  # what a scalar's one step of inflation would have allowed
    eps = 1.0
    spans = LaplaceMechanism(d1, eps, spans=L)
    one = LaplaceMechanism(d1, eps)
    g_m = Fraction(2) ** spans._k
    assert spans._grid_scale == (Fraction(d1) + L * g_m) / (Fraction(eps) * g_m)
    assert one._grid_scale == (Fraction(d1) + g_m) / (Fraction(eps) * g_m)
    with pytest.raises(ValueError, match="give dimension = their product, not both"):
        LaplaceMechanism(d1, eps, dimension=2, spans=L)
    gauss = GaussianMechanism(d1, 0.5, spans=4)
    g_g = Fraction(2) ** gauss._k
    assert gauss._grid_sigma2 == (Fraction(d1) + 2 * g_g) ** 2 / (2 * Fraction(0.5) * g_g**2)
