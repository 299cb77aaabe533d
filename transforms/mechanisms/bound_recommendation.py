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
* ``sum`` with bounds [lo, hi]: the clipped rows and the clamped values,
  |R·μ − kept(L, C)·m(lo, hi)| / K, where m(lo, hi) = E[clamp(x, lo, hi)] and μ = E[x] come from
  the value histogram (:mod:`.value_histogram`), assuming a row's value does not depend on how
  many rows its person has; noise scales with max(|lo|, |hi|);
* ``mean``: the clamp's bias |μ − m(lo, hi)| plus the noise of the centred sum divided by the
  rows per partition, kept(L, C)/K; noise scales with hi − lo;

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

import numpy as np

from .contribution_histogram import ContributionHistograms, Grid
from .value_histogram import ValueHistogram

SIGNAL_CELLS = 10.0  # the least mass a histogram must hold, in thresholds (has_signal)
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
    bounds: tuple[float, float] | None = None  # a sum's or a mean's value bounds

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
        self.cut = cut
        self._rep = [params.representative(b) for b in range(params.size)]
        self.persons_by_p = ContributionHistograms.partitions_per_person(grid)

    def has_signal(self, cells: float = SIGNAL_CELLS) -> bool:
        """Whether the persons the histogram holds above the threshold are at least ``cells``
        thresholds' worth: below that the model would choose from noise (and, with no cell
        left, every bound would look free of bias), so no recommendation is made."""
        return sum(map(sum, self.grid)) >= cells * max(self.cut, 1 / float(self.params.epsilon))

    @property
    def candidates(self) -> tuple[int, ...]:
        """The bounds considered: the grid's edges (where the model is exact)."""
        return self.params.edges

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


class ValueModel:
    """Clamped means of one value column, from its released histogram (:mod:`.value_histogram`)."""

    def __init__(self, params: ValueHistogram, hist: Sequence[float], threshold: float = 0.0):
        if len(hist) != params.size:
            raise ValueError(f"expected a histogram of {params.size} buckets, got {len(hist)}")
        cut = threshold / float(params.epsilon)
        self.params, self.cut = params, cut
        self.weights = np.array([w if w >= cut else 0.0 for w in hist])
        self.reps = np.array([params.representative(b) for b in range(params.size)])

    def has_signal(self, cells: float = SIGNAL_CELLS) -> bool:
        """As :meth:`ContributionModel.has_signal`, for the values."""
        return float(self.weights.sum()) >= cells * max(self.cut, 1 / float(self.params.epsilon))

    def clamped_mean(self, lo: float, hi: float) -> float:
        """m(lo, hi) = E[clamp(x, lo, hi)] (0 when the histogram holds nothing above noise)."""
        total = float(self.weights.sum())
        if total <= 0:
            return 0.0
        return float(self.weights @ np.clip(self.reps, lo, hi)) / total

    def clamped_means(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """:meth:`clamped_mean` for every pair of ``lo`` and ``hi`` (broadcast), at once."""
        lo, hi = np.broadcast_arrays(np.asarray(lo, float), np.asarray(hi, float))
        total = float(self.weights.sum())
        if total <= 0:
            return np.zeros(lo.shape)
        clipped = np.clip(self.reps.reshape(-1, *([1] * lo.ndim)), lo, hi)
        return np.tensordot(self.weights, clipped, axes=1) / total

    def mean(self) -> float:
        """μ: the mean at the grid's outer edges (values beyond are clamped there alike)."""
        edges = self.params.edges
        return self.clamped_mean(edges[0], edges[-1])


@dataclass(frozen=True)
class _ValueQuery:
    """A ``sum`` or ``mean`` to tune: the model's two terms for any (L, C) and bounds."""

    model: ContributionModel
    values: ValueModel
    partitions: float
    noise_abs: NoiseAbs
    metric: str
    bounds0: tuple[float, float]

    def __post_init__(self) -> None:
        if self.metric not in ("sum", "mean"):
            raise ValueError(f"value bounds are tuned for sum and mean, not {self.metric!r}")

    def terms(self, L: int, C: int, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, ...]:
        """(bias, noise) at (L, C) for every pair of ``lo`` and ``hi`` (broadcast)."""
        k, b0 = _check_partitions(self.partitions), self.bounds0
        m = self.values.clamped_means(lo, hi)
        kept, mu = self.model.kept_rows(L, C), self.values.mean()
        if self.metric == "sum":
            width = np.maximum(np.abs(lo), np.abs(hi)) / max(abs(b0[0]), abs(b0[1]))
            bias, per_row = np.abs(self.model.rows() * mu - kept * m) / k, 1.0
        else:  # the centred sum's noise over the rows a partition keeps
            width = (hi - lo) / max(b0[1] - b0[0], 1e-300)
            bias, per_row = np.abs(mu - m), 1 / max(kept / k, 1.0)
        width = np.where(width > 0, width, np.inf)  # [0, 0] releases nothing: never chosen
        return bias, self.noise_abs(L, C) * width * per_row


def value_settings(
    model: ContributionModel,
    values: ValueModel,
    partitions: float,
    noise_abs: NoiseAbs,
    *,
    metric: str,
    bounds0: tuple[float, float],
) -> tuple[list[Setting], list[Setting]]:
    """For a ``sum`` or ``mean``: (each candidate (L, C) with its best bounds, and every upper
    bound with its best lower bound at the best (L, C)). ``noise_abs`` is at ``bounds0``."""
    q = _ValueQuery(model, values, partitions, noise_abs, metric, bounds0)
    los, his = values.params.bound_candidates()
    lo, hi = np.array(los)[:, None], np.array(his)[None, :]
    out: list[Setting] = []
    grids = {}
    for L in model.candidates:
        for C in model.candidates:
            bias, noise = q.terms(L, C, lo, hi)
            a, b = (int(x) for x in np.unravel_index(int(np.argmin(bias + noise)), bias.shape))
            grids[(L, C)] = (bias, noise)
            out.append(Setting(L, C, float(bias[a, b]), float(noise[a, b]), (los[a], his[b])))
    chosen = best(out)
    bias, noise = grids[(chosen.L, int(chosen.C or 0))]
    along = []
    for col, h in enumerate(his):
        row = int(np.argmin(bias[:, col] + noise[:, col]))
        if np.isfinite(noise[row, col]):
            along.append(Setting(chosen.L, chosen.C, float(bias[row, col]),
                                 float(noise[row, col]), (los[row], h)))  # fmt: skip
    return out, along


def value_setting(
    model: ContributionModel,
    values: ValueModel,
    partitions: float,
    noise_abs: NoiseAbs,
    *,
    metric: str,
    bounds0: tuple[float, float],
    at: tuple[int, int, tuple[float, float]],
) -> Setting:
    """E of one (L, C, bounds) of a ``sum`` or ``mean`` — the same model as
    :func:`value_settings`, for a setting off the grid (the job's own)."""
    q = _ValueQuery(model, values, partitions, noise_abs, metric, bounds0)
    L, C, (lo, hi) = at
    bias, noise = q.terms(L, C, np.array(lo), np.array(hi))
    return Setting(L, C, float(bias), float(noise), (lo, hi))
