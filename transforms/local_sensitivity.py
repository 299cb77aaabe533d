"""Beam final combines for the local-sensitivity mechanisms: gather what the release reads, once.

Smooth sensitivity, propose-test-release and the stability-based release are not additive: each
needs the whole multiset of per-person values (or the person count of every partition) in one
place. So the steps are

1. one value per person (:class:`~transforms.per_person.ReducePerPerson`: one vectorised
   reduction per person shard, from the release's one keyed shuffle by person), or the distinct
   persons of each partition per shard, summed over shards;
2. one global combine that brings what the release reads to **one worker** — never every
   value (only the exponential quantile's noise-off test hook gathers them). The
   smooth-sensitivity quantile and PTR's quantiles (one bound or the ladder) read
   only a window of order statistics around the rank (``docs/local_sensitivity.md`` §4, §6),
   so they gather that window (:class:`~.rank_window.GatherQuantileWindow`: three histogram
   passes, then the window's values; their number follows β, or PTR's public distance cap, and
   q — not the person count). PTR's means read only the count and the exact clamped sum
   (:class:`SumClampedValues`). The exponential-mechanism quantile (the default median) and the
   trimmed mean read their data only through a histogram of grid indices, so each shard sends
   its histogram and the combine adds them (:mod:`.grid_histogram`: one int64 count per grid
   point, 8.4 MB at the default grid, whatever the person count);
3. the mechanism of :mod:`transforms.mechanisms` in one ``Map``, its noise drawn from
   the query's noise key, ``key.rng("value")``.

Guarantee: the wrapped mechanism's (pure ε, (ε, δ) or ρ-zCDP, stated in its docstring; proofs in
``docs/local_sensitivity.md``) for add/remove one person — the per-person reduction turns a person
into exactly one value, and a person moves each partition's person count by at most one. Nothing
else computed from the data leaves these transforms.

Empty input still gives one row: ``CombineGlobally`` emits its default (no values, no partitions)
and the mechanism releases from the empty data set (a noisy ``lower`` for a quantile, ⊥ for the
tests that need many persons). Every output row has ``released``: False when the mechanism
returned ⊥ (then the value, or the ``by`` columns, are null). ``noise=False`` is a test hook: the
exact statistic on the same per-person values, for wiring tests; it never comes from a job file.
This module adds no math: it wires the core's mechanisms and exact statistics.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from fractions import Fraction
from typing import Any, cast

import apache_beam as beam
import numpy as np
import numpy.typing as npt
import pyarrow as pa
from apache_beam.pvalue import PCollection
from apache_beam.transforms import combiners

from .columns import PERSON_COLUMN
from .grid_histogram import grid_histogram_combine
from .keys import KeySource, NoiseKey
from .mechanisms.exponential_quantile import ExponentialQuantile, GridHistogram
from .mechanisms.ptr import ClampedSum, PTRMean, PTRQuantile
from .mechanisms.ptr_ladder import LadderPTR, LadderRelease, reads_clamped_sum
from .mechanisms.quantile_sensitivity import quantile_of_sorted, sorted_clamped
from .mechanisms.smooth_sensitivity import SmoothQuantile
from .mechanisms.stability import StableTopPartition, top_partition_distance
from .mechanisms.trimmed_mean import TrimmedMean
from .per_person import ReducePerPerson
from .rank_window import GatherQuantileWindow

F64 = npt.NDArray[np.float64]
PerPersonMechanism = (
    SmoothQuantile | PTRQuantile | PTRMean | LadderPTR | ExponentialQuantile | TrimmedMean
)
GriddedMechanism = ExponentialQuantile | TrimmedMean  # read the data only as a grid histogram
PartitionKey = tuple[Any, ...]


class SumClampedValues(beam.CombineFn):
    """Per-shard arrays of per-person values → their count and exact sum clamped to [lo, hi]
    (:class:`~.mechanisms.ptr.ClampedSum`): all a PTR mean reads. Exact, so it does not depend
    on how the values are split."""

    def __init__(self, lower: float, upper: float) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Beam is unannotated
        self._lower, self._upper = lower, upper

    def create_accumulator(self) -> ClampedSum:
        return ClampedSum(0, Fraction(0))

    def add_input(self, acc: ClampedSum, values: F64) -> ClampedSum:
        return acc.merge(ClampedSum.of(values, self._lower, self._upper))

    def merge_accumulators(self, accs: Iterable[ClampedSum]) -> ClampedSum:
        total = ClampedSum(0, Fraction(0))
        for a in accs:
            total = total.merge(a)
        return total

    def extract_output(self, acc: ClampedSum) -> ClampedSum:
        return acc


class ConcatenateValues(beam.CombineFn):
    """Per-shard arrays of per-person values → one float64 array (gathered on one worker: the
    shifted inverse's per-person quantiles, and the exponential quantile's noise-off hook).

    The accumulator is a list of the arrays, concatenated once at the end, so merging is cheap.
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Beam is unannotated

    def create_accumulator(self) -> list[F64]:
        return []

    def add_input(self, acc: list[F64], values: F64) -> list[F64]:
        acc.append(values)
        return acc

    def merge_accumulators(self, accs: Iterable[list[F64]]) -> list[F64]:
        return [a for acc in accs for a in acc]

    def extract_output(self, acc: list[F64]) -> F64:
        if not acc:
            return np.zeros(0, dtype=np.float64)
        return np.concatenate(acc).astype(np.float64, copy=False)


class _ReleaseFromHistogram:
    """grid histogram → the output row {value, released}: the exponential quantile's or the
    trimmed mean's draw; with ``noise`` off (tests only), the trimmed mean's exact statistic."""

    def __init__(self, mechanism: GriddedMechanism, key: NoiseKey, noise: bool) -> None:
        self._mechanism, self._key, self._noise = mechanism, key, noise

    def __call__(self, histogram: GridHistogram) -> dict[str, Any]:
        m = self._mechanism
        if isinstance(m, ExponentialQuantile):  # the quantile's noise-off hook gathers values
            value = m.release_histogram(histogram, self._key.rng("value"))
            return {"value": float(value), "released": True}
        if self._noise:
            parts = m.release_parts(histogram, self._key.rng("value"))
        else:
            parts = m.exact_parts(histogram)
        lower, upper = m.threshold_values(parts)
        return {
            "value": float(parts.value),
            "lower_threshold": float(lower),
            "upper_threshold": float(upper),
            "released": True,
        }


def exact_statistic(mechanism: PerPersonMechanism, values: F64) -> float:
    """A quantile's statistic without noise (the ``noise=False`` test hook): the q-quantile as
    the core defines it (``lower`` for no values). A mean's hook reads its :class:`ClampedSum`
    (:class:`_ReleaseValue`)."""
    assert not isinstance(mechanism, (TrimmedMean, PTRMean))  # histogram; sum
    xs = sorted_clamped(values, mechanism.lower, mechanism.upper)
    assert mechanism.q is not None  # quantile mechanisms always have q
    return quantile_of_sorted(xs, mechanism.q, mechanism.lower)


class _ReleaseValue:
    """values (or a mean's :class:`ClampedSum`) → the output row {value, released}; pure given
    the rng label (a Beam Map)."""

    def __init__(self, mechanism: PerPersonMechanism, key: NoiseKey, noise: bool) -> None:
        self._mechanism, self._key, self._noise = mechanism, key, noise

    def __call__(self, values: F64 | ClampedSum) -> dict[str, Any]:
        m = self._mechanism
        value: float | None
        if isinstance(values, ClampedSum):
            assert isinstance(m, (PTRMean, LadderPTR))
            if not self._noise:
                value = float(values.mean(m.lower, m.upper))
            else:
                out = m.release_sum(values, self._key.rng("value"))
                value = out.value if isinstance(out, LadderRelease) else out
        elif not self._noise:
            value = exact_statistic(m, values)
        else:
            out = m.release(values, self._key.rng("value"))
            value = out.value if isinstance(out, LadderRelease) else out
        return {"value": None if value is None else float(value), "released": value is not None}


class ReleasePerPersonStatistic(beam.PTransform[Any, Any]):
    """Person shards ((shard, pa.Table) from :class:`~transforms.aggregate.ShardByPerson`, shared
    by the release's queries) → one row {value: float | None, released: bool}; a trimmed mean's
    row also has lower_threshold and upper_threshold.

    Args:
      mechanism: the planned core mechanism (smooth-sensitivity quantile, PTR quantile or mean,
        or the PTR ladder); its guarantee is the release's.
      reduction, value: the per-person reduction and the column it reads (None for ``count``).
      keys: the query's noise key is ``keys.for_query(query)`` (derived here; the step holds only
        it), noise from ``key.rng("value")``.
      query: the query's name.
      noise: False only from tests: the exact statistic instead of a release.
    """

    def __init__(
        self,
        mechanism: PerPersonMechanism,
        reduction: str,
        value: str | None,
        *,
        keys: KeySource,
        query: str,
        noise: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(
            mechanism,
            (SmoothQuantile, PTRQuantile, PTRMean, LadderPTR, ExponentialQuantile, TrimmedMean),
        ):
            raise TypeError(
                "mechanism must be SmoothQuantile, PTRQuantile, PTRMean, LadderPTR, "
                f"ExponentialQuantile or TrimmedMean, got {type(mechanism).__name__}"
            )
        # per-person values clamped to the mechanism's bounds, ±inf and NaN mapped into them: no
        # row value (±inf, 1e308 twice) can make the release raise
        self._per_person = ReducePerPerson(reduction, value, (mechanism.lower, mechanism.upper))
        self._mechanism = mechanism
        key = keys.for_query(query)
        self._release = _ReleaseValue(mechanism, key, noise)
        # The exponential quantile's noise-off hook gathers the values (its exact statistic is
        # not on the grid); the trimmed mean's is defined on the grid histogram.
        self._from_histogram = (
            _ReleaseFromHistogram(mechanism, key, noise)
            if isinstance(mechanism, TrimmedMean)
            or (isinstance(mechanism, ExponentialQuantile) and noise)
            else None
        )

    def expand(self, shards: PCollection[Any]) -> PCollection[Any]:
        out: PCollection[Any]
        if self._from_histogram is not None:
            # The exponential quantile and the trimmed mean read only the grid histogram: shards
            # send theirs and the combine adds them (no per-person values on one worker).
            assert isinstance(self._mechanism, (ExponentialQuantile, TrimmedMean))
            out = (
                shards
                | "ReducePerPerson" >> self._per_person  # np.ndarray per shard
                | "GridHistogram" >> beam.Map(self._mechanism.grid_histogram)
                | "MergeHistograms" >> beam.CombineGlobally(grid_histogram_combine(self._mechanism))
                | "Release" >> beam.Map(self._from_histogram)  # {value, released}
            )
            return out
        values = shards | "ReducePerPerson" >> self._per_person  # np.ndarray per shard
        m = self._mechanism
        gathered: PCollection[Any]
        if reads_clamped_sum(m):
            gathered = values | "SumClamped" >> beam.CombineGlobally(
                SumClampedValues(m.lower, m.upper)
            )
        elif isinstance(m, ExponentialQuantile):
            # only its noise-off hook comes here (with noise it reads the grid histogram, above):
            # the exact quantile is not on the grid, so that test hook gathers every value
            gathered = values | "GatherValues" >> beam.CombineGlobally(ConcatenateValues())
        else:
            # only the order statistics the release reads: the window around the rank, found
            # by histograms (the release on them is the release on all values, bit for bit)
            assert isinstance(m, (SmoothQuantile, PTRQuantile, LadderPTR)) and m.q is not None
            gathered = values | "GatherWindow" >> GatherQuantileWindow(
                m.q, m.reach, m.lower, m.upper
            )
        out = gathered | "Release" >> beam.Map(self._release)  # {value, released}
        return out


class _PersonsPerPartition:
    """(shard, table) → [(key, distinct persons in this shard with a row in the partition)].

    A shard holds all rows of its persons, so summing over shards gives exact person counts.
    """

    def __init__(self, by: Sequence[str]) -> None:
        self._by = list(by)

    def __call__(self, shard: int, table: pa.Table) -> list[tuple[PartitionKey, int]]:
        del shard
        if table.num_rows == 0:
            return []
        pairs = table.select([PERSON_COLUMN, *self._by]).group_by([PERSON_COLUMN, *self._by])
        distinct = pairs.aggregate([])  # one row per (person, partition)
        counts = distinct.group_by(self._by).aggregate([(PERSON_COLUMN, "count")])
        keys = zip(*(counts.column(c).to_pylist() for c in self._by), strict=True)
        n = counts.column(f"{PERSON_COLUMN}_count").to_pylist()
        return [(tuple(k), int(c)) for k, c in zip(keys, n, strict=True)]


class _ReleaseTop:
    """{key: persons} → the output row {by..., released}; by columns null for ⊥."""

    def __init__(
        self,
        mechanism: StableTopPartition,
        by: Sequence[str],
        key: NoiseKey,
        noise: bool,
    ) -> None:
        self._mechanism, self._by = mechanism, tuple(by)
        self._key, self._noise = key, noise

    def __call__(self, counts: dict[PartitionKey, int]) -> dict[str, Any]:
        top: Hashable | None
        if self._noise:
            top = self._mechanism.release(counts, self._key.rng("value"))
        else:
            top = top_partition_distance(counts)[0]
        key = (None,) * len(self._by) if top is None else cast(PartitionKey, top)
        return {**dict(zip(self._by, key, strict=True)), "released": top is not None}


class ReleaseTopPartition(beam.PTransform[Any, Any]):
    """Person shards → one row {by..., released}: the partition with the most persons, or ⊥.

    Person counts need no contribution bound: one person moves each count by at most one, which
    is all the stability argument uses (docs/local_sensitivity.md §9).

    Args:
      mechanism: the planned :class:`~transforms.mechanisms.stability.StableTopPartition`.
      by: the partition columns (keys are tuples of their values).
      keys, query, noise: as for :class:`ReleasePerPersonStatistic`.
    """

    def __init__(
        self,
        mechanism: StableTopPartition,
        by: Sequence[str],
        *,
        keys: KeySource,
        query: str,
        noise: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(mechanism, StableTopPartition):
            raise TypeError(f"mechanism must be StableTopPartition, got {type(mechanism).__name__}")
        if not by:
            raise ValueError("top partition needs at least one `by` column")
        self._by = tuple(by)
        self._release = _ReleaseTop(mechanism, by, keys.for_query(query), noise)

    def expand(self, shards: PCollection[Any]) -> PCollection[Any]:
        out: PCollection[Any] = (
            shards  # (shard, pa.Table): all rows of its persons
            | "PersonsPerPartition" >> beam.FlatMapTuple(_PersonsPerPartition(self._by))
            # (key, persons in one shard)
            | "SumPerPartition" >> beam.CombinePerKey(sum)  # (key, persons)
            | "GatherCounts" >> combiners.ToDict()  # {key: persons}, {} for no input
            | "Release" >> beam.Map(self._release)  # {by..., released}
        )
        return out
