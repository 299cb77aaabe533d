"""Recommending contribution bounds (L, C) from the private joint histogram: bias + noise.

The model (derivation: ``docs/tuning.md``). A query per partition over K partitions with bounds
L (partitions per person) and C (rows per person and partition) publishes, in each partition, the
bounded statistic plus noise of standard deviation σ(L, C) (from the plan: the job's own
mechanism and budget split). Its expected absolute error per partition against the *unbounded*
truth is at most

    E(L, C) = (R − kept(L, C)) / K + a·σ(L, C)

— the rows clipping removes, spread over the partitions (the bias), plus the noise's mean
absolute value (a = E|X|/σ: 1/√2 for Laplace, √(2/π) for Gaussian). From the joint histogram w
(:mod:`.contribution_histogram`; cells by bucket of P and of r):

* ``count``: kept(L, C) = Σ w·min(P, L)·min(r, C);
* ``persons`` (no C): kept(L) = Σ_P H(P)·min(P, L), H the row sums of w;

and R = kept at the grid's top bound in both: rows beyond the grid are clipped by every candidate
alike (they shift E but never the choice), and the bucket above the grid has no known size.

A person keeps L of their P partitions, each alike (a keyed hash ranks them,
:mod:`transforms.bounding`), so min(P, L)/P of each partition's rows in expectation: the weight
1/P in w turns that into min(P, L) per cell. Everything here is post-processing of released
values and public parameters: the recommendation is as private as the histogram.

Noise in w is kept as it is (no clipping of negative cells): each cell's noise has mean zero, so
kept(L, C) is unbiased for every (L, C); clipping would add phantom rows to every empty cell,
most where min(P, L)·min(r, C) is largest, and push the choice up (measured in
``benchmarks/tuning.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .contribution_histogram import ContributionHistograms, Grid

LAPLACE_ABS = 1 / math.sqrt(2)  # E|X| / σ for Laplace
GAUSSIAN_ABS = math.sqrt(2 / math.pi)  # E|X| / σ for a Gaussian


@dataclass(frozen=True)
class Setting:
    """One (L, C) with its modelled error per partition: ``bias`` + ``noise`` = ``error``.
    ``C`` is None for a query without a row bound (``persons``).

    ``bias`` is the estimate as it comes from the noisy histogram and may be slightly negative:
    it is not clipped at 0, because a clip would tie every setting whose estimate falls below 0
    and hand the choice to the least noise (``shown_bias`` is clipped, for people)."""

    L: int
    C: int | None
    bias: float
    noise: float

    @property
    def error(self) -> float:
        return self.bias + self.noise

    @property
    def shown_bias(self) -> float:
        return max(0.0, self.bias)

    @property
    def shown_error(self) -> float:
        return self.shown_bias + self.noise


class ContributionModel:
    """Kept rows and persons for any (L, C) on the grid, from a released joint histogram."""

    def __init__(self, params: ContributionHistograms, grid: Grid, threshold: float = 0.0) -> None:
        if len(grid) != params.size or any(len(row) != params.size for row in grid):
            raise ValueError(f"expected a {params.size}×{params.size} histogram")
        cut = threshold / float(params.epsilon)
        grid = [[w if w >= cut else 0.0 for w in row] for row in grid] if threshold else grid
        self.params, self.grid = params, grid
        self._rep = [params.representative(b) for b in range(params.size)]
        self.persons_by_p = ContributionHistograms.partitions_per_person(grid)

    @property
    def candidates(self) -> tuple[int, ...]:
        """The bounds considered: the grid's edges (where the model is exact)."""
        return self.params.edges

    def kept_rows_sd(self, L: int, C: int) -> float:
        """The standard deviation of :meth:`kept_rows`'s noise (public: Laplace(1/ε) per cell)."""
        rep, b = self._rep, 1 / float(self.params.epsilon)
        return math.sqrt(2 * b * b * sum(
            (min(rep[pb], L) * min(rep[rb], C)) ** 2
            for pb in range(self.params.size)
            for rb in range(self.params.size)
        ))  # fmt: skip

    def kept_rows(self, L: int, C: int) -> float:
        rep = self._rep
        return sum(
            w * min(rep[pb], L) * min(rep[rb], C)
            for pb, row in enumerate(self.grid)
            for rb, w in enumerate(row)
        )

    def rows(self) -> float:
        """Rows up to the grid: kept(top, top). Rows above it are clipped by every candidate
        alike, so they cannot change the choice; leaving them out keeps the bucket above the grid
        (whose size is unknown) from multiplying its noise into every estimate."""
        top = self.params.edges[-1]
        return self.kept_rows(top, top)

    def kept_persons(self, L: int) -> float:
        return sum(h * min(self._rep[pb], L) for pb, h in enumerate(self.persons_by_p))

    def person_partitions(self) -> float:
        """(person, partition) pairs up to the grid: kept_persons(top) (see :meth:`rows`)."""
        return self.kept_persons(self.params.edges[-1])


NoiseAbs = Callable[[int, int | None], float]  # (L, C) → a·σ(L, C), from the plan


def _check_partitions(partitions: float) -> float:
    if not (isinstance(partitions, (int, float)) and math.isfinite(partitions)):
        raise ValueError(f"partitions must be a finite number, got {partitions!r}")
    return max(1.0, float(partitions))  # a noisy estimate below 1 means "very few"


def count_settings(
    model: ContributionModel,
    partitions: float,
    noise_abs: NoiseAbs,
    Ls: Sequence[int] | None = None,
    Cs: Sequence[int] | None = None,
) -> list[Setting]:
    """E(L, C) of a ``count`` for every candidate pair (module docstring)."""
    k = _check_partitions(partitions)
    rows = model.rows()
    return [
        Setting(L, C, (rows - model.kept_rows(L, C)) / k, noise_abs(L, C))
        for L in (Ls or model.candidates)
        for C in (Cs or model.candidates)
    ]


def persons_settings(
    model: ContributionModel,
    partitions: float,
    noise_abs: NoiseAbs,
    Ls: Sequence[int] | None = None,
) -> list[Setting]:
    """E(L) of a ``persons`` count per partition for every candidate L."""
    k = _check_partitions(partitions)
    total = model.person_partitions()
    return [
        Setting(L, None, (total - model.kept_persons(L)) / k, noise_abs(L, None))
        for L in (Ls or model.candidates)
    ]


def best(settings: Sequence[Setting]) -> Setting:
    """The smallest modelled error; ties go to the smaller L, then C (less noise to explain)."""
    if not settings:
        raise ValueError("no candidate settings")
    return min(settings, key=lambda s: (s.error, s.L, s.C or 0))
