"""Stability-based release ("distance to instability"): publish a discrete answer, exactly, only
when it is far from changing.

Mechanism (seed ``lecture-ptr-lln-stability.txt`` §15.1.4; Thakurta & Smith 2013): for a
discrete-valued f, let dist(x) be the fewest add/remove-one-person steps to a data set with a
different answer and d(x) = dist(x) − 1 ≥ 0, which changes by at most 1 between neighbours. Output
f(x) iff d(x) + Z ≥ T, with Z exact discrete Laplace of scale 1/ε and T the smallest integer with
P(Z ≥ T) ≤ δ; otherwise ⊥ (``None``).

Guarantee: (ε, δ)-DP for add/remove one person. If f(x) = f(x') the output is post-processing of
d + Z (ε-DP); if f(x) ≠ f(x') then d(x) = d(x') = 0, ⊥ has the same probability on both, and an
answer appears with probability ≤ δ. The budget is spent whether or not ⊥ comes out.

Two answers:

* :class:`StableTopPartition` — the partition held by the most persons (ties: the smallest key).
  One person's presence moves every partition's person count by at most one, whatever the bound
  L on partitions per person, so c₁ − c_p drops by at most one per step for any rival p:
  dist = min(c₁, min_p (c₁ − c_p + [p after p₁ in key order])) (docs/local_sensitivity.md §9).
* :class:`StableBucketedQuantile` — the index of the public bucket holding the q-quantile (as in
  :mod:`.quantile_sensitivity`) of per-person values; dist from closed forms (docs §9).
"""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import pairwise
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .accounting import ApproxDP
from .checks import Rational
from .ptr import check_delta, check_epsilon, distance_threshold, passes_test
from .quantile_sensitivity import as_quantile, exact_counts, quantile_of_sorted, sorted_clamped
from .rng import KeyedRng


def top_partition_distance(counts: Mapping[Any, int]) -> tuple[Any, int]:
    """(f(x), dist(x)) for person counts per partition; f is None when every count is 0.

    dist = min(c₁, min over present rivals p of c₁ − c_p + [p > p₁]); the c₁ term stands for an
    absent key that sorts before p₁ (a lower bound on the true distance, still 1-Lipschitz:
    docs §9). Keys must be mutually comparable (ties are broken by key order).
    """
    for c in counts.values():
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 0:
            raise ValueError(  # no key or count in the message: both are private
                "person counts must be non-negative ints (exact distinct-person counts)"
            )
    present = {k: int(c) for k, c in counts.items() if c > 0}
    if not present:
        return None, 1
    try:
        top = min(present, key=lambda k: (-present[k], k))
    except TypeError as err:
        raise TypeError(
            "partition keys must be mutually comparable (all str or all int) for tie-breaking"
        ) from err
    c1 = present[top]
    dist = c1
    for k, c in present.items():
        if k != top:
            dist = min(dist, c1 - c + (1 if k > top else 0))
    return top, dist


@dataclass(frozen=True, init=False)
class StableTopPartition:
    """Releases the partition with the most persons, or ⊥ when that answer is not stable.

    Guarantee: (ε, δ)-DP for add/remove one person, for person counts computed after
    contribution bounding (any L): proof in the module docstring (seed
    ``lecture-ptr-lln-stability.txt`` §15.1.4). ``release`` returns the key or None (⊥).
    """

    epsilon: Fraction
    delta: Fraction
    threshold: int

    def __init__(self, epsilon: Rational, delta: Rational) -> None:
        eps, d = check_epsilon(epsilon), check_delta(delta)
        for name, v in (("epsilon", eps), ("delta", d), ("threshold", distance_threshold(eps, d))):
            object.__setattr__(self, name, v)

    @property
    def guarantee(self) -> ApproxDP:
        return ApproxDP(self.epsilon, self.delta)

    def release(self, counts: Mapping[Any, int], rng: KeyedRng) -> Hashable | None:
        top, dist = top_partition_distance(counts)
        if not passes_test(dist - 1, self.epsilon, self.threshold, rng) or top is None:
            return None
        key: Hashable = top
        return key

    def to_manifest(self) -> dict[str, object]:
        return {
            "mechanism": "stability",
            "statistic": "top_partition",
            "threshold": self.threshold,
            "neighbouring": "add/remove one person",
            "guarantee": self.guarantee.to_manifest(),
        }


def _ceil_div(num: np.ndarray, den: int) -> np.ndarray:
    return -((-num) // den)


def bucketed_quantile_distance(
    xs: np.ndarray, q: Fraction, edges: Sequence[float]
) -> tuple[int, int]:
    """(bucket index j of the q-quantile, dist) for sorted clamped values and bucket edges.

    Down (j ≥ 1): remove R values ≥ e_j and add A at lo until #{y < e_j} ≥ ⌈q·n'⌉:
    A(R) = max(0, ⌈(q(n − R) − m)/(1 − q)⌉), m = #{x < e_j}. Up (j ≤ B − 2): remove R values
    < e_{j+1} and add A at hi until #{y < e_{j+1}} < ⌈q·n'⌉:
    A(R) = max(0, ⌊(m' − R)/q − (n − R)⌋ + 1), m' = #{x < e_{j+1}}.
    dist is the least R + A(R) over both (docs §9). Exact: R is int64 only when q's denominator
    is small, else Python ints (:func:`.quantile_sensitivity.exact_counts`). q = 0.3333333333333333
    is 3333333333333333/10^16: with a few thousand values the int64 products wrapped silently
    (distance 0 instead of hundreds) or raised OverflowError, depending on the counts.
    """
    a, b = q.numerator, q.denominator
    n = len(xs)
    e = np.asarray(edges, dtype=np.float64)
    value = quantile_of_sorted(xs, q, float(e[0]))
    j = int(np.searchsorted(e[1:-1], value, side="right"))
    best = n + 2  # removing everyone and adding values at an end always suffices
    if j >= 1:
        m = int(np.searchsorted(xs, e[j], side="left"))
        R = exact_counts(np.arange(0, n - m + 1), q)
        A = np.maximum(0, _ceil_div(a * (n - R) - b * m, b - a))
        best = min(best, int((R + A).min()))
    if j <= len(e) - 3:
        m2 = int(np.searchsorted(xs, e[j + 1], side="left"))
        R = exact_counts(np.arange(0, m2 + 1), q)
        A = np.maximum(0, (b * (m2 - R) - a * (n - R)) // a + 1)
        best = min(best, int((R + A).min()))
    return j, best


def _check_edges(edges: Sequence[float]) -> tuple[float, ...]:
    out: list[float] = []
    for v in edges:
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(float(v)):
            raise ValueError(f"bucket edges must be finite numbers, got {v!r}")
        out.append(float(v))
    if len(out) < 3 or any(not a < b for a, b in pairwise(out)):
        raise ValueError(
            f"bucket edges must be strictly increasing with at least 3 entries (2 buckets), got "
            f"{list(edges)!r}; the first and last are the clamp bounds"
        )
    return tuple(out)


@dataclass(frozen=True, init=False)
class StableBucketedQuantile:
    """Releases which public bucket holds the q-quantile (median: q = 1/2), or ⊥.

    ``edges`` e_0 < … < e_B are public; values are clamped to [e_0, e_B]; bucket j is
    [e_j, e_{j+1}) (the last one closed). Guarantee: (ε, δ)-DP for add/remove one person (module
    docstring; distance derivation docs/local_sensitivity.md §9). ``release`` returns j or None.
    """

    q: Fraction
    edges: tuple[float, ...]
    epsilon: Fraction
    delta: Fraction
    threshold: int

    def __init__(
        self, q: Rational, edges: Sequence[float], epsilon: Rational, delta: Rational
    ) -> None:
        eps, d = check_epsilon(epsilon), check_delta(delta)
        fields = {
            "q": as_quantile(q),
            "edges": _check_edges(edges),
            "epsilon": eps,
            "delta": d,
            "threshold": distance_threshold(eps, d),
        }
        for name, v in fields.items():
            object.__setattr__(self, name, v)

    @property
    def guarantee(self) -> ApproxDP:
        return ApproxDP(self.epsilon, self.delta)

    def bucket_and_distance(self, values: ArrayLike) -> tuple[int, int]:
        """(j, dist) — not private; for tests."""
        xs = sorted_clamped(values, self.edges[0], self.edges[-1])
        return bucketed_quantile_distance(xs, self.q, self.edges)

    def release(self, values: ArrayLike, rng: KeyedRng) -> int | None:
        j, dist = self.bucket_and_distance(values)
        return j if passes_test(dist - 1, self.epsilon, self.threshold, rng) else None

    def to_manifest(self) -> dict[str, object]:
        return {
            "mechanism": "stability",
            "statistic": "bucketed_quantile",
            "q": str(self.q),
            "edges": list(self.edges),
            "threshold": self.threshold,
            "neighbouring": "add/remove one person",
            "guarantee": self.guarantee.to_manifest(),
        }
