"""Privacy audit of the trimmed mean's released value, with a negative control that must be caught.

The pair: bounds [0, 8] on a 3-bit grid (grid points 0 … 8), τ = 1/10, ε = 1;
x = 200 values at 2, 1,600 at 4, 200 at 6, and x' = x plus one value at 5. On both sides the
thresholds are (a, b) = (3, 5) with probability > 1 − 10^−11: every other grid point scores at
least 1,600 below the best (score −|9B − T| for τ, −|B − 9T| for 1 − τ), and a threshold draw's
weights fall by a factor e^(−ε_t/(2Δ)) = e^(−0.0174) per unit of score (ε_t = 5/16, Δ = 9), so
e^(−27.8) at 1,600. Given (3, 5), the added value (grid index 5 = b) moves S by 2k − a − b = 2 =
b − a and C by one: the sum's and count's whole parts, s·ε + c·ε = 3/8.

The claim audited is therefore the one this pair allows, derived from the exact threshold laws
(:func:`tests.mechanisms.test_exponential_quantile.law`): (η + (s + c)·ε, δ) with
η = |ln P_x(a, b)/P_x'(a, b)| over both thresholds and δ = P(thresholds ≠ (3, 5)) on either side
— for any event E, P_x(E) ≤ P_x(E, (3, 5)) + δ ≤ e^(η + (s + c)ε)·P_x'(E) + δ, and back. A tighter
claim than the mechanism's ε = 1 is what gives the audit power over the sum's noise:

* the mechanism itself passes; its ε_lb is 0.18 at n = 2·10^4 (must be ≥ 0.1: the audit sees the
  sum's loss);
* negative control — noise on S for a sensitivity of (b − a)/2 (the slip of counting the centred
  range in whole cells): its loss on this pair is 2s·ε + c·ε ≈ 0.66, and ε_lb is 0.43 at
  n = 2·10^4 (0.40 at 10^4): caught against the claim ≈ 0.375.

Draws are the real release (``TrimmedMean.release_histogram``) on the pair's grid histograms; the
harness's fixed secret makes the outcome deterministic (docs/audit.md). ``slow_audit`` repeats the
mechanism's audit at n = 10^6.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from userdp.transforms.mechanisms.accounting import PureDP
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.trimmed_mean import TrimmedMean, kept_sum_and_count

from ..mechanisms.test_exponential_quantile import law
from .harness import assert_caught, assert_private

X = [2.0] * 200 + [4.0] * 1600 + [6.0] * 200
X_PRIME = [*X, 5.0]
DOMINANT = (3, 5)


class HalfSumSensitivity(TrimmedMean):
    """The negative control: S's noise calibrated for (b − a)/2."""

    def noise_scales(self, span: int) -> tuple[Fraction, Fraction]:
        return super().noise_scales(max(1, span // 2))


def _mechanism(cls: type[TrimmedMean]) -> TrimmedMean:
    return cls(Fraction(1, 10), 0.0, 8.0, PureDP(1), grid_bits=3)


def pair_claim() -> tuple[float, float]:
    """(ε, δ) for this pair: η from the exact threshold laws plus the sum's and count's parts."""
    m = _mechanism(TrimmedMean)
    eta, delta = 0.0, 0.0
    for q, k in zip((m.low_quantile, m.high_quantile), DOMINANT, strict=True):
        lx, ly = law(q, X), law(q, X_PRIME)
        eta += abs(math.log(lx[k] / ly[k]))
        # P(this threshold ≠ k), summed directly (1 − P(k) would lose it to rounding); the
        # union bound over the two thresholds
        delta += max(sum(lx) - lx[k], sum(ly) - ly[k])
    parts = m.parts[1] + m.parts[2]
    return eta + float(parts * m.budget.epsilon), delta  # type: ignore[union-attr]


def _draws(cls: type[TrimmedMean]) -> tuple[object, ...]:
    m = _mechanism(cls)

    def run(histogram: object, rng: KeyedRng) -> float:
        return m.release_histogram(histogram, rng)  # type: ignore[arg-type]

    return run, m.grid_histogram(X_PRIME), m.grid_histogram(X)


def test_the_pair_has_the_thresholds_and_shift_the_claim_assumes() -> None:
    m = _mechanism(TrimmedMean)
    for data in (X, X_PRIME):
        for q, k in zip((m.low_quantile, m.high_quantile), DOMINANT, strict=True):
            assert law(q, data)[k] > 1 - 1e-10
    eps, delta = pair_claim()
    assert 0.375 <= eps < 0.376 and 0 < delta < 1e-10
    hx, hy = m.grid_histogram(X), m.grid_histogram(X_PRIME)
    (sx, cx), (sy, cy) = (kept_sum_and_count(h, *DOMINANT) for h in (hx, hy))
    assert (sy - sx, cy - cx) == (2, 1)  # the whole sensitivity b − a, and one person


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
