"""A private histogram of values, each person weighing 1: what ``userdp tune`` chooses bounds from.

Over a public signed grid of powers of two — (−∞, −2^max), [−2^(k+1), −2^k) for
k = max−1 … min, [−2^min, 2^min] (zero and tiny values), (2^k, 2^(k+1)] for k = min … max−1,
(2^max, ∞) — each person adds **1/n to the bucket of each of their n values** (of one column,
every row they have). Quantiles and clamped means of the values read off it; ``userdp tune`` uses
the clamped mean m(lo, hi) = E[clamp(x, lo, hi)] to model the bias of a sum's or a mean's bounds.

Guarantee: pure ε-DP for adding or removing all rows of one person. A person's contribution has
L1 norm exactly 1 (n weights of 1/n), so Laplace(1/ε) on every bucket of the fixed grid is the
Laplace mechanism on global sensitivity (seed ``calibrating-noise-dmns06.txt``; brute force and
audit: ``tests/mechanisms/test_value_histogram.py``). Counting rows instead of weighing them
would let one person move it by n. As in :mod:`.contribution_histogram`, the Beam side counts
values per (n, bucket) as integers and :meth:`ValueHistogram.grid_sums` rounds each c/n once to
the noise's grid and adds integers (one person moves it by at most 1 + buckets·g, as calibrated).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from .accounting import PureDP, float_down
from .additive import LaplaceMechanism, rounded_quotient
from .checks import Rational, positive
from .rng import KeyedRng


@dataclass(frozen=True, kw_only=True)
class ValueHistogram:
    """Public parameters: ``epsilon``; magnitudes 2^``min_exponent`` … 2^``max_exponent``.

    Guarantee: pure ε-DP for adding or removing all rows of one person (L1 sensitivity 1,
    Laplace(1/ε) per bucket; proof in the module docstring, seed ``calibrating-noise-dmns06.txt``).
    """

    epsilon: Rational
    min_exponent: int = -10
    max_exponent: int = 30
    edges: tuple[float, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        positive(self.epsilon, "epsilon")
        lo, hi = self.min_exponent, self.max_exponent
        if not -60 <= lo < hi <= 60:
            raise ValueError(f"need -60 ≤ min_exponent < max_exponent ≤ 60, got {lo} and {hi}")
        neg = [-(2.0**k) for k in range(hi, lo - 1, -1)]  # −2^max … −2^min
        pos = [2.0**k for k in range(lo, hi + 1)]  # 2^min … 2^max
        object.__setattr__(self, "edges", tuple(neg + pos))

    @property
    def guarantee(self) -> PureDP:
        return PureDP(self.epsilon)

    @property
    def size(self) -> int:
        """Buckets: below −2^max, one per octave each side, the middle one, above 2^max."""
        return len(self.edges) + 1

    def bucket(self, x: float) -> int:
        """Bucket b holds edges[b−1] < x ≤ edges[b] on the positive side, edges[b−1] ≤ x <
        edges[b] on the negative side, and [−2^min, 2^min] in the middle. NaN is refused."""
        if math.isnan(x):
            raise ValueError("a value is a number, got NaN")
        return int(self.buckets(np.array([x], dtype=np.float64))[0])

    def buckets(self, x: np.ndarray) -> np.ndarray:
        """:meth:`bucket` of every value at once (the Beam side's form; NaN is never passed:
        validation sends it to the dead letters)."""
        edges = np.asarray(self.edges)
        half = len(edges) // 2
        below = np.searchsorted(edges[:half], x, side="right")  # negative edges ≤ x
        above = half + np.searchsorted(edges[half:], x, side="left")  # positive edges < x
        return np.where(x < edges[half - 1], below, above)

    def representative(self, b: int) -> float:
        """The value a bucket stands for: the middle of its octave, 0 for the middle bucket,
        twice the outer edge beyond the grid."""
        if not 0 <= b < self.size:
            raise ValueError(f"bucket {b} is outside [0, {self.size})")
        half = len(self.edges) // 2
        if b == half:
            return 0.0
        if b == 0:
            return 2 * self.edges[0]
        if b == self.size - 1:
            return 2 * self.edges[-1]
        return (self.edges[b - 1] + self.edges[b]) / 2

    def counts(self, persons: Iterable[Sequence[float]]) -> dict[tuple[int, int], int]:
        """(n, bucket) → number of values: the exact integer statistic the Beam side sums."""
        out: dict[tuple[int, int], int] = {}
        for values in persons:
            if not values:
                raise ValueError("every person has at least one value")
            for x in values:
                cell = (len(values), self.bucket(float(x)))
                out[cell] = out.get(cell, 0) + 1
        return out

    def grid_sums(self, counts: Mapping[tuple[int, int], int], k: int) -> list[Fraction]:
        """The histogram with each term c/n rounded once to a multiple of 2^k (the noise's grid):
        what the noise is added to; a person moves it by at most 1 + (buckets touched)·g in L1,
        the bound the noise is calibrated for (as :meth:`.ContributionHistograms.grid_sums`).
        Not private."""
        units = [0] * self.size
        for n, b, c in self._checked(counts.items()):
            units[b] += rounded_quotient(c, n, k)
        step = Fraction(2) ** k
        return [u * step for u in units]

    def from_counts(self, counts: Mapping[tuple[int, int], int]) -> list[float]:
        """The histogram (weights 1/n) in floats (noise off, for tests and display): not private."""
        hist = [0.0] * self.size
        for n, b, c in self._checked(sorted(counts.items())):  # the same floats every run
            hist[b] += c / n
        return hist

    def _checked(
        self, items: Iterable[tuple[tuple[int, int], int]]
    ) -> Iterator[tuple[int, int, int]]:
        """(n, bucket, values) of the Beam side's counts, each checked."""
        for (n, b), c in items:
            if isinstance(n, bool) or not isinstance(n, int) or n < 1 or c < 1:
                raise ValueError(f"counts must be positive integers, got n={n!r}, count={c!r}")
            if not 0 <= b < self.size:
                raise ValueError(f"bucket {b} is outside [0, {self.size})")
            yield n, b, c

    def mechanism(self) -> LaplaceMechanism:
        """One vector mechanism: a person's L1 of 1 spreads over many buckets, each rounded to
        the noise grid, so the grid inflation is size·g, not g (additive.py)."""
        return LaplaceMechanism(1.0, float_down(Fraction(self.epsilon)), dimension=self.size)

    def release_counts(self, counts: Mapping[tuple[int, int], int], rng: KeyedRng) -> list[float]:
        """The histogram of the Beam side's counts with Laplace(1/ε) on every bucket: pure ε-DP."""
        mech = self.mechanism()
        return mech.release_vector(self.grid_sums(counts, mech.grid_exponent), rng)

    def exact(self, persons: Iterable[Sequence[float]]) -> list[float]:
        return self.from_counts(self.counts(persons))

    def add_noise(self, exact: Sequence[float | Fraction], rng: KeyedRng) -> list[float]:
        """Laplace(1/ε) on every bucket: pure ε-DP (module docstring)."""
        if len(exact) != self.size:
            raise ValueError(f"expected a histogram of {self.size} buckets, got {len(exact)}")
        return self.mechanism().release_vector(exact, rng)

    def release(self, persons: Iterable[Sequence[float]], rng: KeyedRng) -> list[float]:
        return self.release_counts(self.counts(persons), rng)

    def bound_candidates(self) -> tuple[list[float], list[float]]:
        """(lower candidates ≤ 0, upper candidates ≥ 0): 0 and the grid's edges on each side."""
        half = len(self.edges) // 2
        return [0.0, *self.edges[:half][::-1]], [0.0, *self.edges[half:]]
