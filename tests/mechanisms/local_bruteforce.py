"""Brute-force oracles for the local-sensitivity mechanisms, straight from the definitions.

A data set over the small domain V = {0, 1, 2, 3, 4} (bounds lo = 0, hi = 4) is a count vector;
adding or removing one person changes one count by one, so the add/remove distance between two
data sets is the L1 distance of their count vectors. Every data set within distance k of x is in
the universe of all count vectors of total ≤ |x| + k, so the oracles below are exact:

* f(y) — the q-quantile x_{⌈q·n⌉} of the padded sorted values (lo for the empty data set);
* LS(y) — max |f(y) − f(y')| over all neighbours y' (remove one value, or add any value of V;
  adding lo or hi is as extreme as adding any real value in [lo, hi]);
* A⁽ᵏ⁾(x) — max LS(y) over d(x, y) ≤ k; S*(x) = max_k e^(−βk)·A⁽ᵏ⁾(x).

Nothing here uses the derivations in docs/local_sensitivity.md.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from functools import cache

import numpy as np
from numpy.typing import NDArray

V = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
LO, HI = 0.0, 4.0
IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


@cache
def universe(max_size: int) -> IntArray:
    """All count vectors over V with total ≤ max_size, one per row."""
    rows = []
    for size in range(max_size + 1):
        for combo in itertools.combinations_with_replacement(range(len(V)), size):
            counts = [0] * len(V)
            for j in combo:
                counts[j] += 1
            rows.append(counts)
    return np.array(rows, dtype=np.int64)


def values_of(counts: IntArray) -> FloatArray:
    return np.repeat(V, counts)


def quantiles(u: IntArray, q: Fraction) -> FloatArray:
    """f for every row of u: the ⌈q·n⌉-th smallest value, lo for rank 0."""
    n = u.sum(axis=1)
    r = -((-q.numerator * n) // q.denominator)
    cum = np.cumsum(u, axis=1)
    idx = (cum < r[:, None]).sum(axis=1)  # first value index whose cumulative count reaches r
    out = V[np.minimum(idx, len(V) - 1)]
    return np.where(r == 0, LO, out)


@cache
def local_sensitivities(max_size: int, q: Fraction) -> FloatArray:
    """LS for every row of universe(max_size), by trying every neighbour."""
    u = universe(max_size)
    fx = quantiles(u, q)
    best = np.zeros(len(u))
    for j in range(len(V)):
        step = np.zeros(len(V), dtype=np.int64)
        step[j] = 1
        best = np.maximum(best, np.abs(quantiles(u + step, q) - fx))
        has = u[:, j] > 0
        removed = np.abs(quantiles(np.where(has[:, None], u - step, u), q) - fx)
        best = np.maximum(best, np.where(has, removed, 0.0))
    return best


def sensitivity_at_distance(x: IntArray, q: Fraction) -> FloatArray:
    """A⁽ᵏ⁾(x) for k = 0 … |x| (for k ≥ |x| it equals A⁽|x|⁾ = hi − lo: the empty set is at |x|)."""
    n = int(x.sum())
    u = universe(2 * n)
    ls = local_sensitivities(2 * n, q)
    d = np.abs(u - x).sum(axis=1)
    return np.array([ls[d <= k].max() for k in range(n + 1)])


def smooth_sensitivity(x: IntArray, q: Fraction, beta: float) -> float:
    """S*(x) = max_k e^(−βk)·A⁽ᵏ⁾(x); terms with k > |x| are smaller than the k = |x| one."""
    a = sensitivity_at_distance(x, q)
    return max(math.exp(-beta * k) * float(a[k]) for k in range(len(a)))


def neighbours(x: IntArray) -> list[IntArray]:
    """All data sets at add/remove distance 1 from x."""
    out = []
    for j in range(len(V)):
        step = np.zeros(len(V), dtype=np.int64)
        step[j] = 1
        out.append(x + step)
        if x[j] > 0:
            out.append(x - step)
    return out
