"""One value per person: the reduction step of the mechanisms that work on per-person values.

The shifted inverse mechanism (per-person totals and maxima), smooth sensitivity, propose-test-
release and the stability-based release all see the data as a multiset of per-person values, so
that adding or removing one person adds or removes exactly one value. :class:`PerPersonValues`
computes that multiset on Beam: rows are sharded by a keyed hash of the person (all rows of a
person land in one shard, :class:`transforms.aggregate.ShardByPerson`), then each shard is reduced
with one vectorised ``pyarrow`` group-by. The output is one float64 numpy array per shard — person
ids are dropped, they are not needed after the reduction. Not private on its own: it feeds a
mechanism's final combine and must never be written out.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import apache_beam as beam
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.pvalue import PCollection

from .aggregate import ShardByPerson
from .columns import PERSON_COLUMN

Reduction = Literal["count", "sum", "mean", "max", "min", "distinct"]
REDUCTIONS: tuple[str, ...] = get_args(Reduction)
F64 = npt.NDArray[np.float64]

# reduction → pyarrow hash aggregate; "count" counts rows (the person column is never null)
_AGGREGATE = {
    "count": "count",
    "sum": "sum",
    "mean": "mean",
    "max": "max",
    "min": "min",
    "distinct": "count_distinct",
}


def check_reduction(reduction: str, value: str | None) -> None:
    """``count`` needs no column; every other reduction reads one (``distinct``: any type)."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"per-person reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if reduction == "count" and value is not None:
        raise ValueError("the per-person 'count' reduction counts rows; it takes no value column")
    if reduction != "count" and not value:
        raise ValueError(f"the per-person {reduction!r} reduction needs a value column")


def reduce_per_person(
    table: pa.Table,
    reduction: str,
    value: str | None,
    bounds: tuple[float, float] | None = None,
) -> F64:
    """One value per distinct ``__person__`` in ``table`` (which must hold all of their rows).

    The order of the values is unspecified (the mechanisms take multisets). ``count`` and
    ``distinct`` are exact integers as floats. ``sum``/``mean``/``max``/``min`` read a float64
    column; with ``bounds`` = (lower, upper) — the mechanism's declared bounds — **the per-person
    value is clamped**: clamp(Σ x), clamp(mean x), as the job file's keys say. Whatever the rows
    hold the value is finite and in the bounds, so no data value can make the mechanism after this
    step raise (issue 12; a crash that depends on one person is an observable): a sum or mean that
    reaches ±inf (an ±inf row, or overflow past 1e308) becomes the bound on its side, and one that
    is NaN (rows +inf and −inf, or overflow both ways) becomes the fixed point clamp(0). Rows are
    not clamped one by one: that made a sum of rows below a positive ``lower`` Σ clamp(x) — ten
    rows of 5 with bounds [100, …] summed to 1,000, not clamp(50) = 100 — and a mean the mean of
    capped rows. The value is a deterministic function of the person's own rows, which is all the
    mechanisms need (one person → one value): the same bits whatever the order of the rows or of
    the shard's chunks (summed in sorted order).
    """
    check_reduction(reduction, value)
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.float64)
    column = PERSON_COLUMN if reduction == "count" else str(value)
    selected = table.select(list(dict.fromkeys([PERSON_COLUMN, column])))
    clamping = bounds is not None and reduction in _CLAMPED
    if reduction in _ORDER_SENSITIVE:
        # A float sum depends on the order of its terms, and Arrow's threaded hash aggregate
        # adds a person's rows in whatever order its threads and the shard's chunks (the
        # shuffle's batching, which other persons move) give them. Sorted by value and summed
        # on one thread, a person's sum is a function of their own multiset of values.
        selected = selected.take(pc.sort_indices(selected[column]))
    agg = selected.group_by(PERSON_COLUMN, use_threads=False).aggregate(
        [(column, _AGGREGATE[reduction])]
    )
    out: F64 = np.asarray(
        pc.cast(agg.column(f"{column}_{_AGGREGATE[reduction]}"), pa.float64()).to_numpy(
            zero_copy_only=False
        ),
        dtype=np.float64,
    )
    if clamping:
        assert bounds is not None
        lower, upper = _checked(bounds)
        # ±inf (an inf row, or a sum past the float range) → the bound on its side; NaN (inf rows
        # of both signs, or overflow both ways) → clamp(0); the value depends on this person alone
        out = np.nan_to_num(out, nan=min(max(0.0, lower), upper), posinf=upper, neginf=lower)
        out = np.clip(out, lower, upper)
    return out


_CLAMPED = frozenset({"sum", "mean", "max", "min"})
_ORDER_SENSITIVE = frozenset({"sum", "mean"})  # float addition is not associative


def _checked(bounds: tuple[float, float]) -> tuple[float, float]:
    lower, upper = float(bounds[0]), float(bounds[1])
    if not (np.isfinite(lower) and np.isfinite(upper) and lower <= upper):
        raise ValueError(f"bounds must be finite with lower <= upper, got {bounds!r}")
    return lower, upper


class _ReduceShard:
    def __init__(
        self, reduction: str, value: str | None, bounds: tuple[float, float] | None
    ) -> None:
        check_reduction(reduction, value)
        self._reduction, self._value = reduction, value
        self._bounds = None if bounds is None else _checked(bounds)

    def __call__(self, shard: int, table: pa.Table) -> F64:
        del shard
        return reduce_per_person(table, self._reduction, self._value, self._bounds)


class ReducePerPerson(beam.PTransform[Any, Any]):
    """PCollection[(shard, pa.Table)] (all rows of each person in one table, from
    :class:`~transforms.aggregate.ShardByPerson`) → PCollection[np.ndarray] of per-person values.
    Lets several queries reduce from one shuffle. ``bounds``: each per-person value is clamped
    to them (:func:`reduce_per_person`)."""

    def __init__(
        self, reduction: str, value: str | None, bounds: tuple[float, float] | None = None
    ) -> None:
        super().__init__()
        self._reduce = _ReduceShard(reduction, value, bounds)

    def expand(self, shards: PCollection[Any]) -> PCollection[Any]:
        out: PCollection[Any] = shards | "ReducePerPerson" >> beam.MapTuple(self._reduce)
        return out


class PerPersonValues(beam.PTransform[Any, Any]):
    """Clean tables → PCollection[np.ndarray]: per shard, one value per person in the shard.

    Args:
      reduction: ``count`` (rows), ``sum``/``mean``/``max``/``min`` of ``value``, or ``distinct``
        (number of distinct values of ``value``, e.g. distinct URLs a person visited).
      value: the column the reduction reads (None for ``count``).
      key: the 32-byte sharding key derived by the launcher from the release secret.
      num_shards: person shards (each held in memory by one worker).
      bounds: (lower, upper) each per-person value is clamped to (value reductions).
    """

    def __init__(
        self,
        reduction: str,
        value: str | None,
        key: bytes,
        num_shards: int,
        bounds: tuple[float, float] | None = None,
    ) -> None:
        super().__init__()
        check_reduction(reduction, value)
        self._reduction, self._value = reduction, value
        self._bounds = None if bounds is None else _checked(bounds)
        self._key, self._num_shards = key, num_shards

    def expand(self, tables: PCollection[Any]) -> PCollection[Any]:
        out: PCollection[Any] = (
            tables
            | "ShardByPerson" >> ShardByPerson(self._num_shards, self._key)
            | "Reduce" >> ReducePerPerson(self._reduction, self._value, self._bounds)
        )
        return out
