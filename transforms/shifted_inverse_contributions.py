"""Step 2 of the shifted inverse and auto-bound pipelines: each shard's contributions per partition.

One vectorised reduction per (person, partition) in numpy/pyarrow (:func:`shard_contributions`):
rows clamped to [0, ``limit``], at most L public partitions per person, then one value per
(person, partition), or the person's rows tagged with a person code (distinct counts, quantiles).
Not private on its own: the release (:mod:`.shifted_inverse_release`) adds the noise. The whole
pipeline and its guarantees: :mod:`.shifted_inverse_release`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .bounding import rows_of_listed_keys
from .columns import PERSON_COLUMN

I64 = npt.NDArray[np.int64]
Key = tuple[Any, ...]
Shape = Literal["totals", "values", "pairs", "rows"]
_LIMB = 20  # fixed-point sums are added in three limbs of 20 bits (each sum exact in float64)


@dataclass(frozen=True)
class Contributions:
    """What each shard contributes per partition (public parameters only).

    Attributes:
      shape: ``totals`` (one exact int per person: rows, or the fixed-point sum of ``value``),
        ``values`` (one number per person: ``reduction`` of its rows), ``pairs`` (the distinct
        (value, person) pairs) or ``rows`` (every row's clamped value and its person).
      reduction: per person, ``count``, ``sum`` or ``max`` (``totals`` / ``values``).
      value: the column read (None for ``count``).
      limit: row values are clamped to [0, limit] (negative values count as 0).
      quantum: fixed-point exponent q of sums (values in units of 2^q).
      by, public_keys, max_partitions: the public partitions and L (no ``by``: one partition).
    """

    shape: Shape
    reduction: str = "count"
    value: str | None = None
    limit: float = 0.0
    quantum: int = 0
    by: tuple[str, ...] = ()
    public_keys: tuple[Key, ...] = ((),)
    max_partitions: int = 1

    def __post_init__(self) -> None:
        if self.shape not in ("totals", "values", "pairs", "rows"):
            raise ValueError(f"shape must be totals, values, pairs or rows, got {self.shape!r}")
        if self.reduction not in ("count", "sum", "max"):
            raise ValueError(f"reduction must be count, sum or max, got {self.reduction!r}")
        needs_value = self.shape in ("pairs", "rows") or self.reduction != "count"
        if (self.value is not None) != needs_value:
            raise ValueError("count takes no value column; every other contribution reads one")
        if not self.public_keys or any(len(k) != len(self.by) for k in self.public_keys):
            raise ValueError("public_keys: one or more tuples with one value per `by` column")
        if self.max_partitions < 1 or (not self.by and self.max_partitions != 1):
            raise ValueError("max_partitions: L ≥ 1, and 1 without `by`")

    @property
    def unit(self) -> Fraction:
        """The value of one fixed-point unit (sums), else 1."""
        return Fraction(2) ** self.quantum if self.reduction == "sum" else Fraction(1)

    def empty(self) -> Any:
        """The contribution of a partition with no rows."""
        if self.shape in ("pairs", "rows"):
            return (np.zeros(0, dtype=object if self.shape == "pairs" else np.float64), EMPTY_CODES)
        return np.zeros(0, dtype=np.float64 if self.reduction == "max" else np.int64)


EMPTY_CODES: I64 = np.zeros(0, dtype=np.int64)


# --- step 2: per shard, one reduction per (person, partition) ----------------------------------


def _sorted_codes(column: pa.ChunkedArray) -> tuple[I64, list[Any]]:
    """Per row, the rank of its value among the column's sorted distinct values; those values."""
    enc = pc.dictionary_encode(column.combine_chunks())
    order = np.asarray(pc.sort_indices(enc.dictionary), dtype=np.int64)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    codes = rank[np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]
    return codes, enc.dictionary.take(pa.array(order)).to_pylist()


def _partition_codes(table: pa.Table, by: tuple[str, ...]) -> tuple[I64, list[Key]]:
    """Per row its partition code, ordered like the key tuples; the key of each code."""
    if not by:
        return np.zeros(table.num_rows, dtype=np.int64), [()]
    columns = [_sorted_codes(table.column(c)) for c in by]
    stacked = np.stack([c for c, _ in columns], axis=1)
    uniq, inverse = np.unique(stacked, axis=0, return_inverse=True)
    keys = [tuple(columns[i][1][j] for i, j in enumerate(row)) for row in uniq.tolist()]
    return inverse.reshape(-1).astype(np.int64), keys


def _quanta(v: npt.NDArray[np.float64], q: int) -> I64:
    """round(v/2^q), ties to even: exact for v in [0, limit], limit/2^q ≤ 2^60 < 2^63
    (``params.FREE_SUM_BITS``)."""
    out: I64 = np.rint(np.ldexp(v, -q)).astype(np.int64)
    return out


def _group_sums(group: I64, x: I64, size: int) -> npt.NDArray[Any]:
    """Σ x per group, exactly (x in [0, 2^60)): int64, or Python ints if int64 could overflow.

    Each of the three 20-bit limbs is summed by ``bincount`` in float64, exact while a group has
    fewer than 2^33 rows; the limbs are recombined in int64 when the total stays below 2^62."""
    mask = (1 << _LIMB) - 1
    limbs = [
        np.bincount(group, weights=((x >> shift) & mask).astype(np.float64), minlength=size)
        for shift in (0, _LIMB, 2 * _LIMB)
    ]
    if (
        size == 0
        or sum(float(limb.max()) * 2.0 ** (i * _LIMB) for i, limb in enumerate(limbs)) < 2.0**62
    ):
        out = limbs[0].astype(np.int64)
        for i in (1, 2):
            out += limbs[i].astype(np.int64) << (i * _LIMB)
        return out
    return np.array(
        [
            int(a) + (int(b) << _LIMB) + (int(c) << 2 * _LIMB)
            for a, b, c in zip(*limbs, strict=True)
        ],
        object,
    )


def _public_rows(table: pa.Table, spec: Contributions) -> pa.Table:
    """The rows whose partition key is public (all rows without ``by``)."""
    return rows_of_listed_keys(table, spec.by, spec.public_keys) if spec.by else table


def _kept_pairs(
    person: I64, part: I64, P: int, L: int
) -> tuple[I64, I64, I64, npt.NDArray[np.bool_]]:
    """(person, partition) pairs: per row its pair; per pair its partition, rows, and whether the
    person keeps it — each person's L partitions with the most rows (ties: the smaller key)."""
    pairs, pair_of_row, rows = np.unique(person * P + part, return_inverse=True, return_counts=True)
    pair_person, pair_part = pairs // P, pairs % P
    kept = np.ones(len(pairs), dtype=bool)
    if L < P:
        order = np.lexsort((pair_part, -rows, pair_person))
        starts = np.r_[0, np.flatnonzero(np.diff(pair_person[order])) + 1]
        run = np.repeat(starts, np.diff(np.r_[starts, len(order)]))
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order)) - run
        kept = rank < L
    return pair_of_row.reshape(-1), pair_part, rows, kept


def _per_pair(
    spec: Contributions, table: pa.Table, pair_of_row: I64, rows: I64
) -> npt.NDArray[Any]:
    """One value per (person, partition): rows, the exact fixed-point sum, or the maximum."""
    if spec.reduction == "count":
        return rows.astype(np.int64)
    values = _clamped(table, spec)
    if spec.reduction == "sum":
        return _group_sums(pair_of_row, _quanta(values, spec.quantum), len(rows))
    out = np.zeros(len(rows), dtype=np.float64)
    np.maximum.at(out, pair_of_row, values)
    return out


def _clamped(table: pa.Table, spec: Contributions) -> npt.NDArray[np.float64]:
    """The value column clamped to [0, limit]: +inf → limit, negative → 0 (documented)."""
    raw = table.column(str(spec.value)).combine_chunks().to_numpy(zero_copy_only=False)
    return np.clip(np.asarray(raw, dtype=np.float64), 0.0, spec.limit)


def _distinct_pairs(values: pa.Array, codes: I64) -> tuple[npt.NDArray[Any], I64]:
    """The distinct (value, person code) pairs."""
    uniq = pa.table({"v": values, "c": pa.array(codes)}).group_by(["v", "c"]).aggregate([])
    v = np.empty(uniq.num_rows, dtype=object)  # 1-d whatever the values' type
    v[:] = uniq.column("v").to_pylist()
    return v, np.asarray(uniq.column("c").to_numpy(), dtype=np.int64)


def shard_contributions(
    shard: int, table: pa.Table, spec: Contributions
) -> Iterator[tuple[Key, Any]]:
    """(partition key, contribution) for every public partition with rows in this shard.

    ``table`` holds all rows of its persons. Contributions: ``totals`` / ``values`` a 1-d array
    (one entry per person in the partition, ids dropped); ``pairs`` / ``rows`` (values, person
    codes), codes unique across shards (shard·2^32 + index). Not private: feeds a combine.
    """
    table = _public_rows(table, spec)
    if table.num_rows == 0:
        return
    enc = pc.dictionary_encode(table.column(PERSON_COLUMN).combine_chunks())
    person = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    part, keys = _partition_codes(table, spec.by)
    pair_of_row, pair_part, rows, kept = _kept_pairs(person, part, len(keys), spec.max_partitions)
    if spec.shape in ("totals", "values"):
        per_pair = _per_pair(spec, table, pair_of_row, rows)
        for p in np.unique(pair_part[kept]).tolist():
            yield keys[p], per_pair[kept & (pair_part == p)]
        return
    row_kept, codes = kept[pair_of_row], (shard << 32) + person
    values = _clamped(table, spec) if spec.shape == "rows" else None
    raw = table.column(str(spec.value)).combine_chunks()
    for p in np.unique(part[row_kept]).tolist():
        mask = row_kept & (part == p)
        if values is None:
            yield keys[p], _distinct_pairs(raw.filter(pa.array(mask)), codes[mask])
        else:
            yield keys[p], (values[mask], codes[mask])


class ContributeShard:
    """(shard, table) → :func:`shard_contributions` (picklable parameters only)."""

    def __init__(self, spec: Contributions) -> None:
        self._spec = spec

    def __call__(self, shard: int, table: pa.Table) -> Iterator[tuple[Key, Any]]:
        return shard_contributions(shard, table, self._spec)
