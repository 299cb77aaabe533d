"""The contribution histograms for tuning (transforms/mechanisms/contribution_histogram.py):
exact buckets, L1 sensitivity 1 by brute force on small inputs, the noise's law, misuse."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from userdp.transforms.mechanisms.contribution_histogram import ContributionHistograms
from userdp.transforms.mechanisms.rng import KeyedRng

SECRET = bytes(range(32))
H = ContributionHistograms(epsilon=1, max_exponent=3)  # buckets ≤1, 2, 3, 4, 5, 6, 7, 8, >8


def test_buckets_follow_the_clamp_grid() -> None:
    assert [H.bucket(c) for c in (1, 2, 8, 9, 1000)] == [0, 1, 7, 8, 8]
    parts, rows = H.exact([(1,), (3, 3, 9)])
    assert parts == [1, 0, 1, 0, 0, 0, 0, 0, 0]
    assert rows == pytest.approx([1, 0, 2 / 3, 0, 0, 0, 0, 0, 1 / 3])


def test_one_person_moves_each_histogram_by_at_most_one_in_l1() -> None:
    """Brute force: every multiset of up to 3 persons, each touching 1–3 partitions with 1–10
    rows, against the same plus any one more person."""
    people = [p for k in (1, 2, 3) for p in itertools.product((1, 4, 10), repeat=k)]
    worst = 0.0
    for base in itertools.combinations_with_replacement(people[:8], 2):
        before = H.exact(base)
        for extra in people:
            after = H.exact((*base, extra))
            for b, a in zip(before, after, strict=True):
                worst = max(worst, sum(abs(x - y) for x, y in zip(a, b, strict=True)))
    assert worst == pytest.approx(1.0)


def test_the_noise_is_laplace_of_scale_one_over_epsilon() -> None:
    """KS test of 4,000 bucket noises against Laplace(1/ε); seeded, false alarm ≤ 10^-3."""
    h = ContributionHistograms(epsilon=0.5, max_exponent=3)
    noise = []
    for i in range(500):
        parts, _ = h.release([(1,)], KeyedRng(SECRET, "hist", i))
        noise += [v - e for v, e in zip(parts, h.exact([(1,)])[0], strict=True)][:8]
    assert stats.kstest(np.array(noise), stats.laplace(scale=2.0).cdf).pvalue > 1e-3
    assert math.isclose(float(np.std(noise)), math.sqrt(2) * 2.0, rel_tol=0.1)


def test_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match=r"epsilon must be positive, got 0"):
        ContributionHistograms(epsilon=0)
    with pytest.raises(ValueError, match=r"max_exponent must lie in \[1, 40\]"):
        ContributionHistograms(epsilon=1, max_exponent=0)
    with pytest.raises(ValueError, match=r"a contribution count is an integer ≥ 1, got 0"):
        H.exact([(0,)])
    with pytest.raises(ValueError, match=r"every person touches at least one partition"):
        H.exact([()])
