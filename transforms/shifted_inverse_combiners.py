"""Step 3 of the shifted inverse and auto-bound pipelines: CombineFns lifted before the shuffle.

Each keeps only what its mechanism reads, is associative, and gives the same output whatever
the split of its input: the exact total and the top-K per-person totals (:class:`TopTotals`),
the top-K values (:class:`TopValues`), the clamp-grid histogram with every candidate's clamped
sum (:class:`ClampStats`), or the gathered rows (:class:`GatherRows`). Not private on their own:
the release (:mod:`.shifted_inverse_release`) adds the noise.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain
from typing import Any

import apache_beam as beam
import numpy as np
import numpy.typing as npt

from .shifted_inverse_contributions import EMPTY_CODES, I64

# --- step 3: combiners, lifted before the shuffle ------------------------------------------


def _top(k: int, *iterables: Iterable[Any]) -> list[Any]:
    """The k largest items, non-increasing (exact comparisons of ints, floats or Fractions)."""
    return heapq.nlargest(k, chain(*iterables)) if k > 0 else []


def _candidates(values: npt.NDArray[Any], k: int) -> list[Any]:
    """A list holding the k largest of ``values`` (numpy's partition first, when it can)."""
    if values.dtype != object and len(values) > k:
        return list(np.partition(values, len(values) - k)[len(values) - k :].tolist())
    return list(values.tolist())


class TopTotals(beam.CombineFn):
    """Per-person totals → (exact total, the K largest totals, non-increasing).

    Composes :func:`_top` (a bounded heap) rather than a Beam top-N combiner: the exact total rides
    in the same accumulator, and Python ints never overflow.
    """

    def __init__(self, k: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Beam is unannotated
        self._k = k

    def create_accumulator(self) -> tuple[int, list[int]]:
        return 0, []

    def add_input(
        self, acc: tuple[int, list[int]], totals: npt.NDArray[Any]
    ) -> tuple[int, list[int]]:
        total = sum(int(t) for t in totals.tolist())  # Python ints: exact
        return acc[0] + total, _top(self._k, acc[1], [int(t) for t in _candidates(totals, self._k)])

    def merge_accumulators(self, accs: Iterable[tuple[int, list[int]]]) -> tuple[int, list[int]]:
        accs = list(accs)
        return sum(a[0] for a in accs), _top(self._k, *(a[1] for a in accs))

    def extract_output(self, acc: tuple[int, list[int]]) -> tuple[int, list[int]]:
        return acc


class TopValues(beam.CombineFn):
    """Per-person values → the K largest, non-increasing (maxima, k-th largest)."""

    def __init__(self, k: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Beam is unannotated
        self._k = k

    def create_accumulator(self) -> list[Any]:
        return []

    def add_input(self, acc: list[Any], values: npt.NDArray[Any]) -> list[Any]:
        return _top(self._k, acc, _candidates(values, self._k))

    def merge_accumulators(self, accs: Iterable[list[Any]]) -> list[Any]:
        return _top(self._k, *accs)

    def extract_output(self, acc: list[Any]) -> list[Any]:
        return acc


class ClampStats(beam.CombineFn):
    """Per-person totals → (histogram over the clamp choice's buckets, Σ min(t, c_k) per c_k).

    ``thresholds`` are the candidate clamps c_k in fixed-point units, increasing; a total t falls
    in bucket #{thresholds < t} (:meth:`ClampChoiceParams.bucket`, vectorised and exact on ints).
    """

    def __init__(self, thresholds: Sequence[int]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Beam is unannotated
        self._thresholds = [int(t) for t in thresholds]

    def create_accumulator(self) -> tuple[list[int], list[int]]:
        n = len(self._thresholds)
        return [0] * (n + 1), [0] * n

    def add_input(
        self, acc: tuple[list[int], list[int]], totals: npt.NDArray[Any]
    ) -> tuple[list[int], list[int]]:
        cap = self._thresholds[-1] + 1  # every total above the largest clamp acts alike
        t = np.sort(np.array([min(int(x), cap) for x in totals.tolist()], dtype=np.int64))
        thr = np.asarray(self._thresholds, dtype=np.int64)
        hist = np.bincount(np.searchsorted(thr, t, side="left"), minlength=len(thr) + 1)
        prefix = [0, *accumulate(t.tolist())]  # exact Python ints
        n, clamped = len(t), []
        for b in self._thresholds:  # Σ min(t, b) = Σ_{t ≤ b} t + b·#{t > b}
            i = int(np.searchsorted(t, b, side="right"))
            clamped.append(prefix[i] + b * (n - i))
        return self.merge_accumulators([acc, (hist.tolist(), clamped)])

    def merge_accumulators(
        self, accs: Iterable[tuple[list[int], list[int]]]
    ) -> tuple[list[int], list[int]]:
        hist, clamped = self.create_accumulator()
        for h, c in accs:
            hist = [a + int(b) for a, b in zip(hist, h, strict=True)]
            clamped = [a + int(b) for a, b in zip(clamped, c, strict=True)]
        return hist, clamped

    def extract_output(self, acc: tuple[list[int], list[int]]) -> tuple[list[int], list[int]]:
        return acc


class GatherRows(beam.CombineFn):
    """(values, person codes) chunks → one pair of arrays, on one worker (distinct, quantiles)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Beam is unannotated

    def create_accumulator(self) -> list[tuple[Any, I64]]:
        return []

    def add_input(
        self, acc: list[tuple[Any, I64]], chunk: tuple[Any, I64]
    ) -> list[tuple[Any, I64]]:
        if len(chunk[1]):
            acc.append(chunk)  # in place: a copy per input would be quadratic in the chunks
        return acc

    def merge_accumulators(self, accs: Iterable[list[tuple[Any, I64]]]) -> list[tuple[Any, I64]]:
        return [c for acc in accs for c in acc]

    def extract_output(self, acc: list[tuple[Any, I64]]) -> tuple[Any, I64]:
        if not acc:
            return np.zeros(0, dtype=np.float64), EMPTY_CODES
        return np.concatenate([v for v, _ in acc]), np.concatenate([c for _, c in acc])
