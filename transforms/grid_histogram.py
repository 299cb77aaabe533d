"""Beam combines that add per-shard grid histograms into one (the exponential quantile's, the
trimmed mean's).

:class:`~transforms.mechanisms.exponential_quantile.ExponentialQuantile` and
:class:`~transforms.mechanisms.trimmed_mean.TrimmedMean` read the data only through its grid
histogram (sorted distinct grid indices, how many values each holds), so each
person shard sends its histogram and one of these combines adds them: the releasing worker never
holds one value per person. Which combine depends on the public grid size G (never on the data):

* :class:`AddGridHistograms`, for grids of at most ``DENSE_CELLS`` cells (the default 2^20
  among them): the accumulator is one int64 count per grid point (8·(G + 1) bytes, 8.4 MB at the
  default grid), each input added in place; it travels between workers as a histogram of its
  nonzero points (``compact``).
* :class:`MergeSparseGridHistograms`, for finer grids, where a dense array would be too large:
  a list of histograms merged once it holds more than ``COMPACT_AT`` entries and its pending
  histograms outnumber its largest. It holds at most max(``COMPACT_AT``, twice the merged
  histogram) entries plus one input, 16 bytes each, and a merge needs a few times its entries
  in working memory; so on such grids the memory grows with the distinct values (up to one per
  person), as gathering values would.

Not private on their own: the histogram is the data; the release
(``ExponentialQuantile.release_histogram``) adds the noise. Both combines give the same output
whatever the split of their input (integer sums), so a Beam retry cannot change the draw.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import apache_beam as beam
import numpy as np
import numpy.typing as npt

from .mechanisms.exponential_quantile import GridHistogram, merge_grid_histograms

I64 = npt.NDArray[np.int64]
DenseAcc = I64 | GridHistogram | None  # counts per point, a compacted histogram, or nothing yet


class OnGrid(Protocol):
    """A mechanism that reads its data as a grid histogram: ``ExponentialQuantile``,
    ``TrimmedMean``."""

    @property
    def cells(self) -> int: ...

    @property
    def dense_counts(self) -> bool: ...


def grid_histogram_combine(mechanism: OnGrid) -> beam.CombineFn:
    """The combine for the mechanism's public grid: dense counts up to ``DENSE_CELLS`` cells."""
    if mechanism.dense_counts:
        return AddGridHistograms(mechanism.cells)
    return MergeSparseGridHistograms()


def _empty() -> GridHistogram:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)


class AddGridHistograms(beam.CombineFn):
    """Grid histograms → their sum, in an int64 array of one count per grid point.

    The array is made at the first input (an accumulator that sees none stays ``None``, so an
    idle bundle holds nothing) and is sent between workers as the histogram of its nonzero
    points. A histogram's indices are distinct, so ``counts[indices] += c`` adds each once.
    """

    def __init__(self, cells: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Beam is unannotated
        self._points = cells + 1

    def _counts(self, acc: DenseAcc) -> I64:
        """``acc`` as an array of counts this combine may modify."""
        if isinstance(acc, np.ndarray):
            return acc
        counts = np.zeros(self._points, dtype=np.int64)
        if acc is not None:
            counts[acc[0]] = acc[1]
        return counts

    def create_accumulator(self) -> DenseAcc:
        return None

    def add_input(self, acc: DenseAcc, histogram: GridHistogram) -> DenseAcc:
        counts = self._counts(acc)
        counts[histogram[0]] += histogram[1]
        return counts

    def merge_accumulators(self, accs: Iterable[DenseAcc]) -> DenseAcc:
        out: I64 | None = None
        for acc in accs:
            if acc is None:
                continue
            if out is None:  # a new array: the inputs are left as they are
                out = self._counts(None)
            if isinstance(acc, np.ndarray):
                out += acc
            else:
                out[acc[0]] += acc[1]
        return out

    def compact(self, acc: DenseAcc) -> DenseAcc:
        return self.extract_output(acc) if isinstance(acc, np.ndarray) else acc

    def extract_output(self, acc: DenseAcc) -> GridHistogram:
        if acc is None:
            return _empty()
        if isinstance(acc, np.ndarray):
            points = np.flatnonzero(acc)
            return points.astype(np.int64, copy=False), acc[points]
        return acc


class MergeSparseGridHistograms(beam.CombineFn):
    """Grid histograms → their sum, for grids too fine for dense counts (module docstring).

    The accumulator is a list of histograms, merged (``merge_grid_histograms``) once it holds
    more than ``COMPACT_AT`` entries *and* its pending histograms outnumber its largest: the
    merges then sort about twice the entries that arrive at most, and a list never holds more
    than max(``COMPACT_AT``, twice the merged histogram) entries plus one input.
    ``merge_accumulators`` adds the accumulators' histograms one by one under the same rule.
    """

    COMPACT_AT = 1 << 21  # entries (16 bytes each, 32 MiB)

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Beam is unannotated

    def create_accumulator(self) -> list[GridHistogram]:
        return []

    def _compacted(self, acc: list[GridHistogram]) -> list[GridHistogram]:
        sizes = [len(h[0]) for h in acc]
        total = sum(sizes)
        if len(acc) > 1 and total > self.COMPACT_AT and total > 2 * max(sizes):
            return [merge_grid_histograms(acc)]
        return acc

    def add_input(self, acc: list[GridHistogram], histogram: GridHistogram) -> list[GridHistogram]:
        acc.append(histogram)
        return self._compacted(acc)

    def merge_accumulators(self, accs: Iterable[list[GridHistogram]]) -> list[GridHistogram]:
        out: list[GridHistogram] = []
        for acc in accs:
            for histogram in acc:
                out = self.add_input(out, histogram)
        return out

    def extract_output(self, acc: list[GridHistogram]) -> GridHistogram:
        return merge_grid_histograms(acc)
