"""A private joint histogram of how persons contribute: what ``userdp tune`` chooses L and C from.

Over a public grid of buckets — the clamp grid of :mod:`.auto_bound` with ``per_octave`` points
per octave (1, 2, 3, 4, 6, 8, 12, 16, 23, 32, … at two per octave) up to 2^``max_exponent``, plus
one bucket above — one two-dimensional histogram: each person who touches P partitions adds
**1/P to the cell (bucket of P, bucket of r) for each of their partitions**, r being the person's
row count in that partition. A person's weights add up to 1 whatever they touch.

Why joint and why 1/P. The rows kept by contribution bounds (L, C) are
Σ_persons min(P, L)/P · Σ_their partitions min(r, C) — a person keeps L of their P partitions,
each chosen alike, and C rows of each — which is exactly Σ_cells weight · min(P, L) · min(r, C)
over this histogram (up to the buckets' widths): one release gives the kept rows of every (L, C)
without assuming that P and r are independent (they are not: a person with many rows tends to
touch many partitions *and* to have many rows in each). Its marginals are the two histograms a
tuner usually draws: persons by P (row sums) and rows per (person, partition) weighted per person
(column sums).

Guarantee: pure ε-DP for adding or removing all rows of one person. A person's contribution has L1
norm exactly 1 (P weights of 1/P, all non-negative), so the exact histogram has L1 sensitivity 1
and Laplace noise of scale 1/ε on every cell of the fixed grid is the Laplace mechanism on global
sensitivity (Dwork, McSherry, Nissim & Smith 2006; seed ``calibrating-noise-dmns06.txt``),
each draw from the secure sampler of :mod:`.additive`. Counting each (person, partition) pair
once instead would let one person move the histogram by P: the negative control of
``tests/audit/test_audit_contribution_histogram.py``. The cells are public (the grid), so which
cells exist reveals nothing.

Exactness. The Beam side counts pairs per (exact P, bucket of r) — integers, summed in any order —
and :meth:`ContributionHistograms.grid_sums` rounds each n/P once to the noise's grid and adds
integers, so the histogram the noise is added to moves by at most 1 + cells·g when a person comes
or goes, the bound the noise is calibrated for (float sums could move it by more), and a re-run
gives the same histogram to the last bit.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from .accounting import PureDP, float_down
from .additive import LaplaceMechanism, rounded_quotient
from .auto_bound import clamp_grid
from .checks import Rational, positive
from .rng import KeyedRng

Grid = list[list[float]]


def _count(x: object, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < 1:
        raise ValueError(f"{name} is an integer ≥ 1, got {x!r}")
    return x


@dataclass(frozen=True, kw_only=True)
class ContributionHistograms:
    """Public parameters: ``epsilon`` for the one joint histogram; buckets up to
    2^``max_exponent`` at ``per_octave`` per octave, one more above.

    Guarantee: pure ε-DP for adding or removing all rows of one person (L1 sensitivity 1,
    Laplace(1/ε) per cell; proof in the module docstring, seed ``calibrating-noise-dmns06.txt``).
    """

    epsilon: Rational
    max_exponent: int = 6
    per_octave: int = 2
    edges: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        positive(self.epsilon, "epsilon")
        if not 1 <= self.max_exponent <= 20 or not 1 <= self.per_octave <= 8:
            raise ValueError(
                "max_exponent must lie in [1, 20] and per_octave in [1, 8], got "
                f"{self.max_exponent} and {self.per_octave}"
            )
        grid = clamp_grid(0, self.max_exponent, self.per_octave, 0)
        object.__setattr__(self, "edges", tuple(int(e) for e in grid))

    @property
    def guarantee(self) -> PureDP:
        return PureDP(self.epsilon)

    @property
    def size(self) -> int:
        """Buckets per axis: [1, e_0], (e_0, e_1], …, (e_{K−2}, e_{K−1}], (e_{K−1}, ∞)."""
        return len(self.edges) + 1

    def bucket(self, count: int) -> int:
        """The bucket of a count ≥ 1 (no noise)."""
        return bisect_left(self.edges, _count(count, "a contribution count"))

    def buckets(self, counts: np.ndarray) -> np.ndarray:
        """:meth:`bucket` of every count at once (the Beam side's form)."""
        return np.searchsorted(np.asarray(self.edges), counts, side="left")

    def representative(self, b: int) -> float:
        """The value a bucket stands for: the middle of its whole numbers; twice the top edge for
        the bucket above the grid (only its row totals use it: every L and C a tuner considers
        lies on the grid, where min(P, L) and min(r, C) are exact for that bucket)."""
        if not 0 <= b < self.size:
            raise ValueError(f"bucket {b} is outside [0, {self.size})")
        if b == len(self.edges):
            return 2.0 * self.edges[-1]
        low = self.edges[b - 1] + 1 if b else 1
        return (low + self.edges[b]) / 2

    def pair_counts(self, persons: Iterable[Sequence[int]]) -> dict[tuple[int, int], int]:
        """(P, bucket of r) → number of (person, partition) pairs: the exact, integer statistic
        the Beam side sums. ``persons``: for each person, the row count of each partition they
        touch."""
        out: dict[tuple[int, int], int] = {}
        for counts in persons:
            if not counts:
                raise ValueError("every person touches at least one partition")
            p = len(counts)
            for c in counts:
                cell = (p, self.bucket(c))
                out[cell] = out.get(cell, 0) + 1
        return out

    def grid_sums(self, pairs: Mapping[tuple[int, int], int], k: int) -> list[Fraction]:
        """The joint histogram, cells flattened row by row, with each term n/P rounded once to a
        multiple of 2^k (the noise's grid): what the noise is added to. Not private.

        Why per term: the noise is calibrated for a person moving the statistic by at most
        1 + d·g in L1 (Δ = 1, plus one rounding per cell: :class:`~.additive.LaplaceMechanism`).
        A person changes one term (their P) in each cell they touch, by their exact weight there
        ± g, so the cells move by at most 1 + (cells touched)·g. Float sums of n/P moved a cell
        by 1 + 3·10⁻⁸ past ~2^27 pairs (a review); exact fractions cost time quadratic in the
        distinct P of a cell (their denominators' LCM). Integers here: linear."""
        units = [0] * (self.size * self.size)
        for p, rb, n in self._checked(pairs.items()):
            units[self.bucket(p) * self.size + rb] += rounded_quotient(n, p, k)
        step = Fraction(2) ** k
        return [u * step for u in units]

    def from_pair_counts(self, pairs: Mapping[tuple[int, int], int]) -> Grid:
        """The joint histogram in floats (noise off, for tests and display): not private."""
        grid = [[0.0] * self.size for _ in range(self.size)]
        # a fixed order: the same floats every run
        for p, rb, n in self._checked(sorted(pairs.items())):
            grid[self.bucket(p)][rb] += n / p
        return grid

    def _checked(
        self, items: Iterable[tuple[tuple[int, int], int]]
    ) -> Iterator[tuple[int, int, int]]:
        """(P, bucket of r, pairs) of the Beam side's pair counts, each checked."""
        for (p, rb), n in items:
            _count(p, "P")
            _count(n, "a pair count")
            if not 0 <= rb < self.size:
                raise ValueError(f"bucket {rb} is outside [0, {self.size})")
            yield p, rb, n

    def _rows(self, flat: Sequence[float]) -> Grid:
        return [list(flat[i * self.size : (i + 1) * self.size]) for i in range(self.size)]

    def exact(self, persons: Iterable[Sequence[int]]) -> Grid:
        """The joint histogram of ``persons`` (see :meth:`pair_counts`): not private."""
        return self.from_pair_counts(self.pair_counts(persons))

    def mechanism(self) -> LaplaceMechanism:
        """One vector mechanism over all cells (a person's L1 of 1 spreads over several, each
        rounded to the noise grid: inflation cells·g, additive.py)."""
        return LaplaceMechanism(1.0, float_down(Fraction(self.epsilon)), dimension=self.size**2)

    def release_pair_counts(self, pairs: Mapping[tuple[int, int], int], rng: KeyedRng) -> Grid:
        """The joint histogram of the Beam side's pair counts with Laplace(1/ε) on every cell:
        pure ε-DP (module docstring; :meth:`grid_sums`)."""
        mech = self.mechanism()
        return self._rows(mech.release_vector(self.grid_sums(pairs, mech.grid_exponent), rng))

    def add_noise(self, exact: Sequence[Sequence[float | Fraction]], rng: KeyedRng) -> Grid:
        """Laplace(1/ε) on every cell, row by row: pure ε-DP (module docstring)."""
        if len(exact) != self.size or any(len(row) != self.size for row in exact):
            raise ValueError(f"expected a {self.size}×{self.size} histogram")
        return self._rows(self.mechanism().release_vector([v for row in exact for v in row], rng))

    def release(self, persons: Iterable[Sequence[int]], rng: KeyedRng) -> Grid:
        """The joint histogram with Laplace(1/ε) on every cell: pure ε-DP."""
        return self.release_pair_counts(self.pair_counts(persons), rng)

    @staticmethod
    def partitions_per_person(grid: Grid) -> list[float]:
        """Persons by bucket of P (row sums; post-processing of the released grid)."""
        return [sum(row) for row in grid]

    @staticmethod
    def rows_per_pair(grid: Grid) -> list[float]:
        """Rows per (person, partition), each person weighing 1 (column sums)."""
        return [sum(col) for col in zip(*grid, strict=True)]
