"""Privacy audit of the trimmed mean's released value, with a negative control that must be caught.

The pair: bounds [0, 8] on a 3-bit grid (grid points 0 … 8), τ = 1/10, ε = 1; x = 10^5 values
at 2, 8·10^5 at 4, 10^5 at 6, and x' = x plus one value at 3. The τ-threshold's best positions
(10^5 persons below it) then fill the empty grid point 3, and the (1 − τ)-threshold's the empty
point 5: on both sides the thresholds' grid points are (a, b) = (3, 5) except with probability
δ ≈ 10^-3 (the exact laws give it; the rest is the best run's two end positions, (2, J) and
(4, 0), which hold the same persons below but another grid point, and runs ≥ 240 score units
worse). Given (3, 5), x has nobody at the thresholds' points, and x' has the added person at a,
kept unless the lower position is (3, J) (the added person below it): the person moves S by
2a − a − b = −(b − a) and C by one — the sum's and count's whole parts, s·ε + c·ε = 3/8.

The claim audited is the one this pair allows, from the exact position laws (computed here from
the definition, vectorised): (η + (s + c)·ε, δ) with η = |ln P_x(a, b)/P_x'(a, b)| over both
thresholds and δ = P((a, b) ≠ (3, 5)) on either side — for any event E,
P_x(E) ≤ P_x(E, (3, 5)) + δ ≤ e^(η + (s + c)ε)·P_x'(E) + δ, and back: given (3, 5) the release
under x is one law and under x' a mixture of that law shifted by the added person (within
e^((s + c)ε) of it) and that law itself. A claim tighter than the mechanism's ε = 1 is what gives
the audit power over the sum's noise:

* the mechanism itself passes; its ε_lb is 0.16 at n = 2·10^4 (must be ≥ 0.1: the audit sees
  the sum's loss);
* negative control — noise on S for a sensitivity of (b − a)/2 (the slip of counting the centred
  range in whole cells): its loss on this pair is 2s·ε + c·ε ≈ 0.66, and ε_lb is 0.41 at
  n = 2·10^4: caught against the claim ≈ 0.375 (at 10^4 draws, 0.35: not caught).

Draws are the real release (``TrimmedMean.release_histogram``) on the pair's grid histograms; the
harness's fixed secret makes the outcome deterministic (docs/audit.md). ``slow_audit`` repeats the
mechanism's audit at n = 10^6.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest

from userdp.transforms.mechanisms.accounting import PureDP
from userdp.transforms.mechanisms.exponential_quantile import GridHistogram
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.split_quantile import SplitQuantile
from userdp.transforms.mechanisms.trimmed_mean import TrimmedMean, kept_sum_and_count

from .harness import assert_caught, assert_private

X = np.repeat([2.0, 4.0, 6.0], [100_000, 800_000, 100_000])
X_PRIME = np.append(X, 3.0)
DOMINANT = (3, 5)


class HalfSumSensitivity(TrimmedMean):
    """The negative control: S's noise calibrated for (b − a)/2."""

    def noise_scales(self, span: int) -> tuple[Fraction, Fraction]:
        return super().noise_scales(max(1, span // 2))


def _mechanism(cls: type[TrimmedMean]) -> TrimmedMean:
    return cls(Fraction(1, 10), 0.0, 8.0, PureDP(1), grid_bits=3)


def grid_point_law(q: SplitQuantile, histogram: GridHistogram) -> npt.NDArray[np.float64]:
    """P(the drawn position's grid point = k), k = 0 … G, exactly from the definition: every
    position f = k·(J + 1) + j has B = (persons below k) + ⌊j·c_k/J⌋ and weight
    exp(−ε·|d·B − a·n|/(2Δ)) (floats: the smallest weights that matter are ~e^-50)."""
    cells, bits = q.grid.cells, q.split_bits
    counts = np.zeros(cells + 1, dtype=np.int64)
    counts[histogram[0]] = histogram[1]
    below = np.concatenate(([0], np.cumsum(counts)[:-1]))
    j = np.arange((1 << bits) + 1, dtype=np.int64)
    b = below[:, None] + ((j[None, :] * counts[:, None]) >> bits)  # B at every position
    a, d, n = q.q.numerator, q.q.denominator, int(counts.sum())
    gap = np.abs(d * b - a * n)
    w = np.exp(-float(q.epsilon) * (gap - gap.min()) / (2 * q.sensitivity))
    by_point = w.sum(axis=1)
    return by_point / by_point.sum()


def pair_claim() -> tuple[float, float]:
    """(ε, δ) for this pair: η from the exact threshold laws plus the sum's and count's parts."""
    m = _mechanism(TrimmedMean)
    eta, delta = 0.0, 0.0
    hx, hy = m.grid_histogram(X), m.grid_histogram(X_PRIME)
    for q, k in zip((m.low_quantile, m.high_quantile), DOMINANT, strict=True):
        lx, ly = grid_point_law(q, hx), grid_point_law(q, hy)
        eta += abs(math.log(lx[k] / ly[k]))
        # P(this threshold's point ≠ k), summed directly (1 − P(k) would lose it to rounding);
        # the union bound over the two thresholds
        delta += max(lx.sum() - lx[k], ly.sum() - ly[k])
    parts = m.parts[1] + m.parts[2]
    return eta + float(parts * m.budget.epsilon), delta  # type: ignore[union-attr]


def _draws(cls: type[TrimmedMean]) -> tuple[object, ...]:
    m = _mechanism(cls)

    def run(histogram: object, rng: KeyedRng) -> float:
        return m.release_histogram(histogram, rng)  # type: ignore[arg-type]

    return run, m.grid_histogram(X_PRIME), m.grid_histogram(X)


def test_the_pair_has_the_thresholds_and_shift_the_claim_assumes() -> None:
    m = _mechanism(TrimmedMean)
    hx, hy = m.grid_histogram(X), m.grid_histogram(X_PRIME)
    for h in (hx, hy):
        for q, k in zip((m.low_quantile, m.high_quantile), DOMINANT, strict=True):
            assert grid_point_law(q, h)[k] > 1 - 2e-3
    eps, delta = pair_claim()
    assert 0.375 <= eps < 0.376 and 0 < delta < 2e-3
    inside_a = (3, 1)  # a lower position at a with the added person above it, as nearly all are
    (sx, cx), (sy, cy) = (kept_sum_and_count(h, inside_a, (5, 7)) for h in (hx, hy))
    assert (sy - sx, cy - cx) == (-2, 1)  # the whole sensitivity b − a, and one person
    j_max = 1 << m.split_bits
    (sx, cx), (sy, cy) = (kept_sum_and_count(h, (3, j_max), (5, 7)) for h in (hx, hy))
    assert (sy - sx, cy - cx) == (0, 0)  # (3, J): the added person is below the lower position


@pytest.mark.parametrize(
    "n",
    [pytest.param(20_000, id="n=2e4"), pytest.param(1_000_000, id="n=1e6",
                                                    marks=pytest.mark.slow_audit)],
)  # fmt: skip
def test_the_trimmed_mean_passes_the_pairs_claim(n: int) -> None:
    eps, delta = pair_claim()
    run, x, x_prime = _draws(TrimmedMean)
    result = assert_private(run, x, x_prime, epsilon=eps, delta=delta, n=n, label="trimmed")
    assert result.epsilon_lb >= 0.1, f"the audit lost power:\n{result}"


def test_sum_noise_for_half_the_sensitivity_is_caught() -> None:
    eps, delta = pair_claim()
    run, x, x_prime = _draws(HalfSumSensitivity)
    assert_caught(run, x, x_prime, epsilon=eps, delta=delta, n=20_000, label="trimmed-half")
