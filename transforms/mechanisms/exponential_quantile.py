"""The q-quantile of one value per person by the exponential mechanism on a public grid.

Candidates are the G + 1 grid points c_k = lower + k·(upper − lower)/G, k = 0 … G (G = 2^grid_bits,
public). Each value is clamped to [lower, upper] and rounded to its nearest grid index; with
B(k) = #{values below c_k} and T(k) = #{values above c_k} (rounded), and q = a/d in lowest terms,
candidate k scores

    u(k) = −|(d − a)·B(k) − a·T(k)|,

which is 0 where the grid point splits the values q : (1 − q) and falls by (d − a) or a per value
moved across. Adding or removing one person's value changes B(k) or T(k) (or neither) by one, so
every score moves by at most Δ = max(a, d − a); the mechanism picks k with probability
∝ exp(ε·u(k)/(2Δ)) (McSherry & Talwar 2007; Dwork & Roth 2014, Thm. 3.10; for quantiles Smith
2011). **Guarantee: pure ε-DP, add/remove one person** (one value per person: the job's
``per_person`` reduction); also ε-bounded-range, hence ε²/8-zCDP (``docs/accounting.md``,
"Bounded-range mechanisms"), which is how a ρ share counts it. The candidate set depends only
on the public bounds and G. Derivation and the brute-force checks: ``docs/local_sensitivity.md``
§13, ``tests/mechanisms/test_exponential_quantile.py``, ``test_bounded_range.py``.

Sampling is exact: scores are constant on the open runs of grid points between consecutive
distinct data indices, so the candidates are grouped into at most 2n + 1 runs, one run is drawn by
:func:`~.exponential.sample_exp_weights` with the run lengths as multiplicities, then a uniform
point of the run (``rng.randbelow``). O(n log n) per release, independent of G.

The scores read the data only through its **grid histogram** — the distinct grid indices and how
many values each holds — so a pipeline sends per-shard histograms and adds them up
(:func:`merge_grid_histograms`) instead of gathering one value per person: the merged histogram
has at most G + 1 entries of 16 bytes (≤ 16.8 MB at the default G = 2^20), whatever the person
count; the draw from the merged histogram is the draw from the values (same runs, same stream).

Accuracy: the released point has rank error |r − q·n| ≤ Δ·2·ln((G + 1)/β)/ε + 1 with probability
≥ 1 − β, whatever the spread of the values — so, unlike smooth sensitivity, no local-sensitivity
bound is paid on dense data (measured: ``docs/accuracy.md``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from .accounting import PureDP
from .checks import Rational, positive
from .exponential import (
    ExponentialMechanism,
    exponent_factor,
    sample_exp_weights_of_int_scores,
)
from .quantile_sensitivity import as_quantile
from .rng import KeyedRng

DEFAULT_GRID_BITS = 20  # 2^20 cells of [lower, upper]: 10^-6 of the range
MAX_GRID_BITS = 40
DENSE_CELLS = 1 << 22
"""Grids of at most this many cells are combined as one int64 count per grid point (32 MiB at
most; ``transforms/grid_histogram.py``), finer ones as sparse histograms."""

GridHistogram = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]
"""(sorted distinct grid indices, how many values each holds): the mechanism's whole view of
the data (:meth:`ExponentialQuantile.grid_histogram`)."""


def merge_grid_histograms(parts: Iterable[GridHistogram]) -> GridHistogram:
    """The histogram of the union of the parts' values (counts added per grid index, exactly:
    integer sums). This is what lets a pipeline combine shards without gathering per-person
    values: the mechanism's draw from the merged histogram is its draw from all the values."""
    parts = list(parts)
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if len(parts) == 1:
        return parts[0]
    idx = np.concatenate([p[0] for p in parts])
    counts = np.concatenate([p[1] for p in parts])
    if len(idx) == 0:
        return idx.astype(np.int64), counts.astype(np.int64)
    order = np.argsort(idx, kind="stable")
    idx, counts = idx[order], counts[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(idx)) + 1))
    return idx[starts], np.add.reduceat(counts, starts).astype(np.int64, copy=False)


class GridBoundsError(ValueError):
    """Public bounds too close for a grid (their halves are equal floats): the bounds' fault,
    which a job reports against its ``bounds`` key, not its share."""

    def __init__(self, lower: object, upper: object) -> None:
        self.bounds = [lower, upper]
        super().__init__(f"bounds [{lower}, {upper}] are too close to tell apart on a grid")


@dataclass(frozen=True)
class ExponentialQuantile:
    """The q-quantile on a grid of [lower, upper], 2^grid_bits cells.

    Guarantee: pure ε-DP (and ε²/8-zCDP) for adding or removing one person's value; proof in the
    module docstring (McSherry & Talwar 2007), derivation ``docs/local_sensitivity.md`` §13.
    """

    q: Fraction
    lower: float
    upper: float
    epsilon: Fraction
    grid_bits: int = DEFAULT_GRID_BITS
    mechanism: ExponentialMechanism = field(init=False, repr=False)

    def __init__(
        self,
        q: Rational,
        lower: float,
        upper: float,
        epsilon: Rational,
        grid_bits: int = DEFAULT_GRID_BITS,
    ) -> None:
        qf = as_quantile(q)
        lo, hi = float(lower), float(upper)
        if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
            raise ValueError(f"bounds must be finite with lower < upper, got [{lower}, {upper}]")
        if hi / 2 - lo / 2 == 0:  # e.g. ±5e-324: the halves the indices divide by (grid_indices)
            raise GridBoundsError(lower, upper)
        eps = positive(epsilon, "epsilon", "the quantile's share of the budget")
        if isinstance(grid_bits, bool) or not isinstance(grid_bits, int):
            raise TypeError(f"grid_bits must be an int, got {grid_bits!r}")
        if not 1 <= grid_bits <= MAX_GRID_BITS:
            raise ValueError(f"grid_bits must be in [1, {MAX_GRID_BITS}], got {grid_bits}")
        sensitivity = max(qf.numerator, qf.denominator - qf.numerator)
        for name, value in (("q", qf), ("lower", lo), ("upper", hi), ("epsilon", eps),
                            ("grid_bits", grid_bits)):  # fmt: skip
            object.__setattr__(self, name, value)
        object.__setattr__(self, "mechanism", ExponentialMechanism(eps, sensitivity))  # type: ignore[arg-type]  # exact rationals are accepted

    @property
    def guarantee(self) -> PureDP:
        return PureDP(self.epsilon)

    @property
    def cells(self) -> int:
        return 1 << self.grid_bits

    @property
    def dense_counts(self) -> bool:
        """Whether a pipeline adds its histograms as one count per grid point (``DENSE_CELLS``):
        the one rule both the combine and the plan's memory line follow."""
        return self.cells <= DENSE_CELLS

    def grid_indices(self, values: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Each value clamped and rounded to its nearest grid index in [0, G] (NaN refused)."""
        x = np.asarray(values, dtype=np.float64).ravel()
        if np.isnan(x).any():
            raise ValueError("per-person values contain NaN; validation must drop them first")
        x = np.clip(x, self.lower, self.upper)
        g = self.cells
        # Halves: x − lower and upper − lower can pass the float range (bounds near ±1e308),
        # and inf/inf = NaN would give garbage indices, with a warning, for some data only.
        # Halving is exact for normal floats, so the indices are the same wherever the plain
        # differences were finite.
        lo, span = self.lower / 2, self.upper / 2 - self.lower / 2
        idx = np.rint((x / 2 - lo) / span * g)
        return np.clip(idx, 0, g).astype(np.int64)

    def grid_histogram(self, values: npt.ArrayLike) -> GridHistogram:
        """The values' grid indices as (sorted distinct indices, their counts): all the
        mechanism reads of the data (:meth:`runs`), so shards can send this instead of their
        values and :func:`merge_grid_histograms` can add them up (at most G + 1 entries)."""
        uniq, counts = np.unique(self.grid_indices(values), return_counts=True)
        return uniq.astype(np.int64, copy=False), counts.astype(np.int64, copy=False)

    def runs(self, values: npt.ArrayLike) -> tuple[list[int], list[int], list[int]]:
        """(scores, lengths, first grid index) of the runs of equal score covering 0 … G."""
        return self.histogram_runs(self.grid_histogram(values))

    def histogram_runs(self, histogram: GridHistogram) -> tuple[list[int], list[int], list[int]]:
        """:meth:`runs` from the values' :meth:`grid_histogram`."""
        uniq, counts = histogram
        a, d = self.q.numerator, self.q.denominator
        below = np.concatenate(([0], np.cumsum(counts)))  # values below run j's points
        n = int(below[-1])
        scores: list[int] = []
        lengths: list[int] = []
        starts: list[int] = []
        prev = -1  # the last grid index covered
        for j, u in enumerate(uniq.tolist()):
            if u > prev + 1:  # the open gap before this data index: B = below[j], T = n − B
                b = int(below[j])
                scores.append(-abs((d - a) * b - a * (n - b)))
                lengths.append(u - prev - 1)
                starts.append(prev + 1)
            b, c = int(below[j]), int(counts[j])  # the data index itself: its values are neither
            scores.append(-abs((d - a) * b - a * (n - b - c)))
            lengths.append(1)
            starts.append(u)
            prev = u
        if prev < self.cells:  # the gap after the last data index (or the whole grid)
            scores.append(-abs((d - a) * n))
            lengths.append(self.cells - prev)
            starts.append(prev + 1)
        return scores, lengths, starts

    def grid_value(self, k: int) -> float:
        """lower + k·(upper − lower)/G, in [lower, upper]. The float formula passes the float
        range for wide bounds (k·span overflows: the default median released inf, for some data
        only); then the value is computed exactly instead. Elsewhere it is the float formula
        (clamped to the bounds), so released values do not change."""
        value = self.lower + k * (self.upper - self.lower) / self.cells
        if not math.isfinite(value):
            lo, hi = Fraction(self.lower), Fraction(self.upper)
            value = float(lo + (hi - lo) * k / self.cells)
        return min(max(value, self.lower), self.upper)

    def release(self, values: npt.ArrayLike, rng: KeyedRng) -> float:
        """One ε-DP draw of the q-quantile of ``values`` (one per person)."""
        return self.release_histogram(self.grid_histogram(values), rng)

    def release_histogram(self, histogram: GridHistogram, rng: KeyedRng) -> float:
        """:meth:`release` from the values' :meth:`grid_histogram` (or a
        :func:`merge_grid_histograms` of parts of them): the same draw, so the same guarantee —
        pure ε-DP for add/remove one person when the values are one per person. Anything that
        is not such a histogram is refused (:meth:`check_histogram`)."""
        return self.grid_value(self.release_index(histogram, rng))

    def check_histogram(self, histogram: GridHistogram) -> None:
        """Refuse what is not a grid histogram (indices unsorted, repeated or off the grid, counts
        below one, non-integer arrays): its runs would not be the scores'."""
        uniq, counts = (np.asarray(a) for a in histogram)
        if uniq.shape != counts.shape or uniq.ndim != 1:
            raise ValueError("a grid histogram is two 1-d arrays of one length")
        if not all(a.dtype.kind in "iu" for a in (uniq, counts)):  # not bool, not float
            raise ValueError("a grid histogram's indices and counts are integer arrays")
        if len(uniq) and (
            uniq[0] < 0
            or uniq[-1] > self.cells
            or bool(np.any(np.diff(uniq) <= 0))
            or bool(np.any(counts < 1))
        ):
            raise ValueError(
                "a grid histogram needs increasing indices in [0, 2^grid_bits] and counts ≥ 1 "
                "(ExponentialQuantile.grid_histogram, merge_grid_histograms)"
            )

    def release_index(self, histogram: GridHistogram, rng: KeyedRng) -> int:
        """The drawn grid index (:meth:`release_histogram` is its grid value): what the trimmed
        mean keeps persons by."""
        self.check_histogram(histogram)
        uniq, counts = (np.asarray(a) for a in histogram)
        scores, lengths, starts = self.histogram_runs((uniq, counts))
        # far runs (exponents > 80 above the best) are drawn by rejection: the cost of a draw
        # does not grow with the person count (exponential.sample_exp_weights)
        m = self.mechanism  # q_i = factor·(max u − u_i), as ExponentialMechanism.exponents
        factor = exponent_factor(m.epsilon, m.sensitivity, m.monotone)
        t = sample_exp_weights_of_int_scores(rng, scores, factor, lengths)
        return starts[t] + rng.randbelow(lengths[t])

    def best_index(self, histogram: GridHistogram) -> int:
        """The lowest grid index of the best score: the quantile without noise (test hooks)."""
        self.check_histogram(histogram)
        uniq, counts = (np.asarray(a) for a in histogram)
        scores, _, starts = self.histogram_runs((uniq, counts))
        return starts[scores.index(max(scores))]

    def to_manifest(self) -> dict[str, Any]:
        return {
            "kind": "exponential_mechanism_quantile",
            "q": str(self.q),
            "epsilon": float(self.epsilon),
            "epsilon_exact": str(self.epsilon),
            "grid_cells": self.cells,
            "score_sensitivity": max(self.q.numerator, self.q.denominator - self.q.numerator),
            "score": "-|(d-a)·#below - a·#above| for q = a/d",
        }
