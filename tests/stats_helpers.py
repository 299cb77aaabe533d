"""Goodness-of-fit helpers shared by the sampler tests.

Every distribution test in the suite uses a fixed release secret, so it draws the same samples on
every run and cannot flake. The threshold ``P_MIN = 1e-6`` is the test's stated false-rejection
probability for a correct sampler under a fresh secret; the negative controls (the same samples
tested against the distribution at scale ×0.7 and ×1.3) must fall below it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from scipy import stats

P_MIN = 1e-6
N_DRAWS = 100_000
TEST_SECRET = bytes(range(32))


def chisquare_pvalue(
    samples: Iterable[int],
    pmf: Callable[[int], float],
    mode: int = 0,
    min_expected: float = 20.0,
    tail_terms: int = 200_000,
) -> float:
    """χ² goodness-of-fit p-value of integer samples against a pmf on ℤ.

    Cells are single integers around the mode, extended outwards while each cell's expected count
    is at least ``min_expected``; everything beyond is pooled into two tail cells, so no cell has a
    small expected count (the χ² approximation needs that).
    """
    counts = Counter(samples)
    n = sum(counts.values())
    lo = hi = mode
    while n * pmf(lo - 1) >= min_expected:
        lo -= 1
    while n * pmf(hi + 1) >= min_expected:
        hi += 1
    cells = list(range(lo, hi + 1))
    expected = [n * pmf(k) for k in cells]
    observed = [counts.get(k, 0) for k in cells]
    # Tails: everything below lo and above hi, summed far enough out that the remainder is
    # negligible next to min_expected / n.
    below = sum(pmf(k) for k in range(lo - 1, lo - tail_terms, -1))
    above = sum(pmf(k) for k in range(hi + 1, hi + tail_terms))
    tails_exp = [n * below, n * above]
    tails_obs = [
        sum(c for k, c in counts.items() if k < lo),
        sum(c for k, c in counts.items() if k > hi),
    ]
    for e, o in zip(tails_exp, tails_obs, strict=True):
        if e >= 1.0:
            expected.append(e)
            observed.append(o)
        elif o > 5:  # mass where the pmf says there is (almost) none: a certain misfit
            return 0.0
    exp_arr = np.asarray(expected)
    obs_arr = np.asarray(observed, dtype=float)
    exp_arr *= obs_arr.sum() / exp_arr.sum()  # absorb the tiny truncated remainder
    return float(stats.chisquare(obs_arr, exp_arr).pvalue)


def ks_pvalue(samples: Sequence[float], cdf: Callable[[np.ndarray], np.ndarray]) -> float:
    """Kolmogorov–Smirnov p-value of continuous samples against a vectorised CDF."""
    return float(stats.kstest(np.asarray(samples, dtype=float), cdf).pvalue)
