"""The values at sorted ranks ``first`` … ``last`` of a PCollection, without gathering the rest.

The smooth-sensitivity quantile and PTR's quantile tests read only a window of order statistics
around the rank (:mod:`.mechanisms.quantile_window`: about K + 3 values for the median, K from β
alone, or from PTR's public distance cap), so the releasing worker needs those values, not one
per person. Finding them is a distributed selection
by histograms of a public number of buckets (``BUCKETS``), refined ``LEVELS`` times:

1. level 0: every shard's histogram of its (clamped) values over [lo, hi], summed: the count n
   and the window's ranks (:class:`~.mechanisms.quantile_window.QuantileWindow`);
2. each later level: the buckets holding ranks ``first`` and ``last`` (and those between) are
   split again into ``BUCKETS``, over the values that fell into them, and so on;
3. the values in the last level's selected buckets are gathered as (distinct value, count) —
   ties collapse — and the window's ranks are read off them.

Why it is exact. A bucket index ⌊(v − A)/(B − A)·BUCKETS⌋ (clipped) is a nondecreasing function
of v in floating point (each operation rounds monotonically), so the values of a level's buckets
k1 … k2 are a contiguous run of the sorted values, and the count below them is the previous
count plus the level's counts below k1. The bucket edges are never compared with values, so
rounding at an edge cannot lose or duplicate a value.

Memory. Each level's histogram is ``BUCKETS`` int64 counts (512 KiB). The gathered values are
the window plus the rest of its two edge buckets at the last level, whose width is
(hi − lo)·2^−48 — below a float's resolution for most data, so what remains there are ties,
which collapse into one (value, count). Only values crowded closer than that (10^7 distinct values
within (hi − lo)·2^−48 of each other) would make the gather large: then it holds them, as
gathering everything did. Everything here is exact integer counting: the same output whatever
the split of the input, so a retry cannot change the release. Nothing is private on its own:
the release adds the noise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
import numpy.typing as npt
from apache_beam.pvalue import AsSingleton, PCollection

from .mechanisms.quantile_window import SEARCH_BUCKETS, SEARCH_LEVELS, QuantileWindow

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

BUCKETS = SEARCH_BUCKETS
LEVELS = SEARCH_LEVELS  # a bucket of the last level spans (hi − lo)·2^−48


def bucket_of(values: F64, low: float, high: float) -> I64:
    """⌊(v − low)/(high − low)·BUCKETS⌋ clipped to [0, BUCKETS − 1]: nondecreasing in v (a
    degenerate range, high == low, sends v == low to 0 and v > low to the last bucket)."""
    with np.errstate(all="ignore"):
        pos = (values - low) / (high - low) * BUCKETS
    pos = np.nan_to_num(pos, nan=0.0, posinf=BUCKETS - 1.0, neginf=0.0)
    return np.clip(np.floor(pos), 0, BUCKETS - 1).astype(np.int64)


@dataclass(frozen=True)
class Narrowing:
    """Where the wanted ranks are after some levels: the buckets kept at each level (low, high,
    k1, k2) and how many values lie below them. ``first > last``: nothing is wanted."""

    first: int
    last: int
    below: int
    steps: tuple[tuple[float, float, int, int], ...]
    low: float  # the range the next level splits
    high: float

    @classmethod
    def start(cls, window: QuantileWindow, low: float, high: float) -> Narrowing:
        return cls(window.first, window.last, 0, (), low, high)

    def selected(self, values: F64) -> npt.NDArray[np.bool_]:
        """Which of ``values`` lie in every level's kept buckets."""
        keep = np.ones(len(values), dtype=bool)
        for low, high, k1, k2 in self.steps:
            b = bucket_of(values, low, high)
            keep &= (b >= k1) & (b <= k2)
        return keep

    def histogram(self, values: F64) -> I64:
        """This shard's counts per bucket of the next level, over its selected values."""
        chosen = values[self.selected(values)]
        return np.bincount(bucket_of(chosen, self.low, self.high), minlength=BUCKETS)

    def refine(self, counts: I64) -> Narrowing:
        """The next level: keep the buckets holding ranks ``first`` … ``last``."""
        if self.first > self.last:
            return Narrowing(self.first, self.last, self.below, (*self.steps, (0, 1, 1, 0)), 0, 1)
        cum = self.below + np.cumsum(counts)
        k1 = int(np.searchsorted(cum, self.first))  # first bucket whose cum reaches `first`
        k2 = int(np.searchsorted(cum, self.last))
        width = (self.high - self.low) / BUCKETS
        return Narrowing(
            self.first,
            self.last,
            self.below + int(counts[:k1].sum()),
            (*self.steps, (self.low, self.high, k1, k2)),
            self.low + k1 * width,
            min(self.high, self.low + (k2 + 1) * width),
        )

    def window_values(self, distinct: F64, counts: I64) -> F64:
        """The sorted values of ranks ``first`` … ``last`` from the selected values' sorted
        (distinct value, count) pairs, whose ranks start at ``below`` + 1."""
        ends = self.below + np.cumsum(counts)  # rank of each distinct value's last copy
        starts = ends - counts + 1
        take = np.minimum(ends, self.last) - np.maximum(starts, self.first) + 1
        return np.repeat(distinct, np.maximum(take, 0)).astype(np.float64, copy=False)


class SumCounts(beam.CombineFn):
    """Per-shard int64 count arrays of one length → their sum (zeros when there are none)."""

    def __init__(self, length: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Beam is unannotated
        self._length = length

    def create_accumulator(self) -> I64:
        return np.zeros(self._length, dtype=np.int64)

    def add_input(self, acc: I64, counts: I64) -> I64:
        acc += counts
        return acc

    def merge_accumulators(self, accs: Iterable[I64]) -> I64:
        total = np.zeros(self._length, dtype=np.int64)
        for a in accs:
            total += a
        return total

    def extract_output(self, acc: I64) -> I64:
        return acc


def _distinct(values: F64) -> tuple[F64, I64]:
    u, c = np.unique(values, return_counts=True)
    return u.astype(np.float64, copy=False), c.astype(np.int64, copy=False)


class MergeDistinct(beam.CombineFn):
    """(sorted distinct values, counts) per shard → the same for all shards (ties summed)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Beam is unannotated

    def create_accumulator(self) -> list[tuple[F64, I64]]:
        return []

    def add_input(self, acc: list[tuple[F64, I64]], pair: tuple[F64, I64]) -> list[tuple[F64, I64]]:
        if len(pair[0]):
            acc.append(pair)
        return acc

    def merge_accumulators(self, accs: Iterable[list[tuple[F64, I64]]]) -> list[tuple[F64, I64]]:
        return [p for acc in accs for p in acc]

    def extract_output(self, acc: list[tuple[F64, I64]]) -> tuple[F64, I64]:
        if not acc:
            return np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int64)
        values = np.concatenate([v for v, _ in acc])
        counts = np.concatenate([c for _, c in acc])
        order = np.argsort(values, kind="stable")
        values, counts = values[order], counts[order]
        starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
        return values[starts], np.add.reduceat(counts, starts)  # exact int64 sums of ties


class _Start:
    def __init__(self, q: object, reach: int, low: float, high: float) -> None:
        self._q, self._reach, self._low, self._high = q, reach, low, high

    def __call__(self, counts: I64) -> Narrowing:
        window = QuantileWindow.for_reach(int(counts.sum()), self._q, self._reach)
        return Narrowing.start(window, self._low, self._high).refine(counts)


def _selected_distinct(values: F64, narrowing: Narrowing) -> tuple[F64, I64]:
    return _distinct(values[narrowing.selected(values)])


def _read_window(pair: tuple[F64, I64], narrowing: Narrowing) -> F64:
    return narrowing.window_values(*pair)


class GatherQuantileWindow(beam.PTransform[Any, Any]):
    """PCollection of per-shard float64 arrays (per-person values, clamped to [low, high]) →
    one sorted float64 array: the values of ranks ``first`` … ``last`` of the window
    ``QuantileWindow.for_reach(n, q, reach)`` (module docstring). Released on it, a mechanism
    that reads only the gaps of cost ≤ ``reach`` (``SmoothQuantile`` with reach
    ``cost_reach(beta)``; ``PTRQuantile`` and a quantile ``LadderPTR`` with their ``reach``) gives
    the release on all values (:mod:`.mechanisms.quantile_window`).
    """

    def __init__(self, q: object, reach: int, low: float, high: float) -> None:
        super().__init__()
        QuantileWindow.for_reach(0, q, reach)  # checks q and reach when the pipeline is built
        self._q, self._reach, self._low, self._high = q, reach, low, high

    def expand(self, values: PCollection[Any]) -> PCollection[Any]:
        whole = Narrowing(1, 0, 0, (), self._low, self._high)  # no steps: every value counts
        counts = (
            values
            | "Level0Histogram" >> beam.Map(whole.histogram)
            | "Level0Sum" >> beam.CombineGlobally(SumCounts(BUCKETS))
        )
        narrowing = counts | "Level0Buckets" >> beam.Map(
            _Start(self._q, self._reach, self._low, self._high)
        )
        for level in range(1, LEVELS):
            counts = (
                values
                | f"Level{level}Histogram"
                >> beam.Map(lambda v, nw: nw.histogram(v), AsSingleton(narrowing))
                | f"Level{level}Sum" >> beam.CombineGlobally(SumCounts(BUCKETS))
            )
            narrowing = counts | f"Level{level}Buckets" >> beam.Map(
                lambda c, nw: nw.refine(c), AsSingleton(narrowing)
            )
        selected = (
            values
            | "SelectedDistinct" >> beam.Map(_selected_distinct, AsSingleton(narrowing))
            | "MergeDistinct" >> beam.CombineGlobally(MergeDistinct())
        )
        window: PCollection[Any] = selected | "ReadWindow" >> beam.Map(
            _read_window, AsSingleton(narrowing)
        )
        return window
