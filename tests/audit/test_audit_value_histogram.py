"""Privacy audit of the tuning's value histogram (value_histogram.py), with a negative control.

The pair: two persons against the same plus a third whose three values all fall in one bucket
((4, 8]). The audited output is that bucket's noisy value: the correct mechanism moves it by
3 × 1/3 = 1 under Laplace(1/ε), exactly ε = 1 (harness false alarm ≤ 10^-6). Negative control:
counting each value once instead of 1/n per person's value — the bug the weights prevent — moves
it by 3: ε_true = 3, caught. Measured at n = 10^5 a side: ε_lb 0.934 (pass) and 2.834 (caught).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.audit.harness import assert_caught, assert_private
from userdp.transforms.mechanisms.additive import laplace_mechanism
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.value_histogram import ValueHistogram

H = ValueHistogram(epsilon=1, min_exponent=0, max_exponent=3)  # 9 buckets
X: tuple[tuple[float, ...], ...] = ((1.5,), (3.0, 6.0))
X_PRIME = (*X, (5.0, 5.0, 7.0))
BUCKET = H.bucket(5.0)
N = 100_000


def _weighted(persons: Sequence[Sequence[float]], rng: KeyedRng) -> float:
    return H.release(persons, rng)[BUCKET]


def _unweighted(persons: Sequence[Sequence[float]], rng: KeyedRng) -> float:
    exact = sum(1.0 for values in persons for x in values if H.bucket(x) == BUCKET)
    return laplace_mechanism(exact, sensitivity=1.0, epsilon=1.0, rng=rng)


@pytest.mark.slow
def test_the_value_histogram_passes_the_audit() -> None:
    result = assert_private(_weighted, X, X_PRIME, epsilon=1.0, n=N, label="tune-values")
    assert result.epsilon_lb > 0.5, f"the audit lost power:\n{result}"


@pytest.mark.slow
def test_negative_control_counting_values_instead_of_weights_is_caught() -> None:
    assert_caught(_unweighted, X, X_PRIME, epsilon=1.0, n=N, label="tune-values-unweighted")
