"""Beam side of the shifted inverse mechanism and of ``bound = "auto"``: sufficient statistics.

Both mechanisms see the data through a few small statistics per partition, so the pipeline is

1. :class:`~transforms.aggregate.ShardByPerson` — all rows of a person in one table (the
   release's one shuffle by person, shared with its other queries);
2. per shard, **one reduction per person** (and partition): :func:`shard_contributions`, vectorised
   in numpy/pyarrow — rows are clamped to [0, ``limit``], each person keeps at most L public
   partitions, then one value per (person, partition) or, for distinct counts and quantiles of row
   values, the person's rows tagged with a person code;
3. a ``CombinePerKey`` whose CombineFn keeps only what the mechanism reads — the exact total and the
   top-K per-person totals (:class:`TopTotals`), the top-K per-person values (:class:`TopValues`),
   the histogram over the clamp grid with every candidate's clamped sum (:class:`ClampStats`),
   or the gathered rows (:class:`GatherRows`, distinct counts and quantiles only). Each is
   associative and lifted by Beam before the shuffle, and gives the same output whatever the
   split of the input;
4. one ``Map`` per partition that computes the down values and draws the release from
   the query's noise key, ``key.rng(partition, purpose)`` — the only randomness.

Nothing here is private on its own until step 4; nothing computed from the data leaves otherwise.
Guarantees (add/remove one person) are the core's: :class:`~.mechanisms.shifted_inverse.
ShiftedInverseParams` (pure ε or ρ-zCDP), :class:`~.mechanisms.auto_bound.ClampChoiceParams` (pure
ε) composed with Laplace / Gaussian noise of sensitivity the chosen clamp. Per public partition,
a person reaches at most L partitions, each released with 1/L of the budget
(``docs/shifted_inverse.md`` §3, §7).

Exactness. Counts are integers. Values are clamped to [0, limit] and summed in fixed point,
round(v/2^q) with q = ``quantum``, as exact integers (``docs/shifted_inverse.md`` §7), so the
statistic is a function of each person's multiset of rows, whatever the split into tables. Which
L partitions a person keeps (their L partitions with the most rows; ties: the smaller key) depends
only on that person's rows. ``noise=False`` is a test hook: the exact statistic, never from a job.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import accumulate, chain
from typing import Any, Literal

import apache_beam as beam
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.pvalue import PCollection

from .bounding import PERSON_COLUMN
from .keys import KeySource, NoiseKey
from .mechanisms.additive import GaussianMechanism, LaplaceMechanism
from .mechanisms.auto_bound import ClampChoiceParams
from .mechanisms.shifted_inverse import (
    ShiftedInverseParams,
    shifted_inverse,
    shifted_inverse_quantile,
)
from .mechanisms.shifted_inverse_stats import (
    distinct_down_values,
    max_down_values,
    quantile_k,
    sum_down_values,
)
from .noisy_combine import canonical_key_string

I64 = npt.NDArray[np.int64]
Key = tuple[Any, ...]
Shape = Literal["totals", "values", "pairs", "rows"]
_HALF = 20  # fixed-point sums are added as two halves of ≤ 20 and ≤ 21 bits (exact in float64)


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
            return (np.zeros(0, dtype=object if self.shape == "pairs" else np.float64), _I0)
        return np.zeros(0, dtype=np.float64 if self.reduction == "max" else np.int64)


_I0: I64 = np.zeros(0, dtype=np.int64)


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
    """round(v/2^q), ties to even: exact for v in [0, limit], limit/2^q ≤ 2^40."""
    out: I64 = np.rint(np.ldexp(v, -q)).astype(np.int64)
    return out


def _group_sums(group: I64, x: I64, size: int) -> npt.NDArray[Any]:
    """Σ x per group, exactly (x in [0, 2^41]): int64, or Python ints if int64 could overflow."""
    lo = np.bincount(group, weights=(x & ((1 << _HALF) - 1)).astype(np.float64), minlength=size)
    hi = np.bincount(group, weights=(x >> _HALF).astype(np.float64), minlength=size)
    if size == 0 or (hi.max() < 2.0**42 and lo.max() < 2.0**52):
        return (hi.astype(np.int64) << _HALF) + lo.astype(np.int64)
    return np.array([(int(h) << _HALF) + int(v) for h, v in zip(hi, lo, strict=True)], object)


def _public_rows(table: pa.Table, spec: Contributions) -> pa.Table:
    """The rows whose partition key is public (all rows without ``by``)."""
    if not spec.by:
        return table
    keys = pa.table(
        {c: pa.array([k[i] for k in spec.public_keys], table.schema.field(c).type)
         for i, c in enumerate(spec.by)}
    )  # fmt: skip
    return table.join(keys.group_by(list(spec.by)).aggregate([]), list(spec.by), join_type="inner")


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


class _Contribute:
    """(shard, table) → :func:`shard_contributions` (picklable parameters only)."""

    def __init__(self, spec: Contributions) -> None:
        self._spec = spec

    def __call__(self, shard: int, table: pa.Table) -> Iterator[tuple[Key, Any]]:
        return shard_contributions(shard, table, self._spec)


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
        return [*acc, chunk] if len(chunk[1]) else acc

    def merge_accumulators(self, accs: Iterable[list[tuple[Any, I64]]]) -> list[tuple[Any, I64]]:
        return [c for acc in accs for c in acc]

    def extract_output(self, acc: list[tuple[Any, I64]]) -> tuple[Any, I64]:
        if not acc:
            return np.zeros(0, dtype=np.float64), _I0
        return np.concatenate([v for v, _ in acc]), np.concatenate([c for _, c in acc])


# --- step 4: the release, one Map per partition ------------------------------------------------

Statistic = Literal["total", "max", "distinct", "quantile"]


@dataclass(frozen=True)
class ShiftedInverseQuery:
    """A planned shifted-inverse release (public parameters, per partition).

    Attributes:
      name: the query name (first part of every noise label).
      statistic: ``total`` (Σ per-person totals), ``max`` (the k-th largest per-person value),
        ``distinct`` (distinct values of ``contributions.value``) or ``quantile`` (the q-quantile
        of row values, or of per-person values with ``contributions.shape == "values"``).
      contributions: what each shard contributes.
      params: the release's parameters, already split over L partitions; for ``quantile`` the
        selection's, with ``count_params`` for the row count released first.
      k, q: ``max``'s rank from the top; ``quantile``'s q.
    """

    name: str
    statistic: Statistic
    contributions: Contributions
    params: ShiftedInverseParams
    count_params: ShiftedInverseParams | None = None
    k: int = 1
    q: Fraction | None = None

    def __post_init__(self) -> None:
        shapes: dict[str, tuple[str, ...]] = {"total": ("totals",), "max": ("values",)}
        shapes.update(distinct=("pairs",), quantile=("rows", "values"))
        if self.contributions.shape not in shapes.get(self.statistic, ()):
            raise ValueError(f"statistic {self.statistic!r} cannot read {self.contributions.shape}")
        if (self.statistic == "quantile") != (self.count_params is not None and self.q is not None):
            raise ValueError("count_params and q are for (and required by) statistic 'quantile'")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k must be a positive integer, got {self.k!r}")

    def combine_fn(self) -> beam.CombineFn:
        """The lifted combiner of this statistic's sufficient statistics."""
        if self.statistic == "total":
            return TopTotals(self.params.top_k)
        if self.statistic == "max":
            return TopValues(self.k - 1 + self.params.down_values_needed)
        if self.statistic == "quantile" and self.contributions.shape == "values":
            from .local_release import ConcatenateValues  # noqa: PLC0415

            return ConcatenateValues()
        return GatherRows()

    def exact(self, stats: Any) -> Fraction:
        """The statistic without noise (the ``noise=False`` test hook)."""
        unit = self.contributions.unit
        if self.statistic == "total":
            return Fraction(stats[0]) * unit
        if self.statistic == "max":
            return Fraction(stats[self.k - 1]) * unit if len(stats) >= self.k else Fraction(0)
        values = stats if isinstance(stats, np.ndarray) else stats[0]
        if self.statistic == "distinct":
            return Fraction(len(set(values.tolist())))
        assert self.q is not None
        ordered = np.sort(np.asarray(values, np.float64) * float(unit))[::-1]
        k = quantile_k(self.q, len(ordered))
        return Fraction(float(ordered[k - 1])) if len(ordered) else Fraction(0)

    def release(self, stats: Any, rng: _Rngs) -> Fraction:
        """The shifted-inverse release from the combined statistics (pure ε-DP or ρ-zCDP)."""
        p, unit, count = self.params, self.contributions.unit, self.params.down_values_needed
        if self.statistic == "total":
            total, top = stats
            down = sum_down_values(total * unit, [t * unit for t in top], count)
            return shifted_inverse(down, p, rng("value"))
        if self.statistic == "max":
            tops = [Fraction(v) * unit for v in stats[self.k - 1 :]]
            return shifted_inverse(max_down_values(tops, count), p, rng("value"))
        if self.statistic == "distinct":
            distinct = distinct_down_values(stats[0], stats[1], count)
            return shifted_inverse(distinct, p, rng("value"))
        assert self.count_params is not None and self.q is not None
        if isinstance(stats, np.ndarray):  # one value per person
            values, persons = stats * float(unit), np.arange(len(stats))
        else:
            values, persons = stats
        out = shifted_inverse_quantile(
            values, persons, self.q, count_params=self.count_params, select_params=p,
            count_rng=rng("count"), select_rng=rng("value"),
        )  # fmt: skip
        return out.value


@dataclass(frozen=True)
class AutoBoundQuery:
    """A planned ``count``/``sum`` with a privately chosen clamp (public parameters, per partition).

    The clamp c_k is drawn by ``choice`` (pure ε), then Σ min(t_i, c_k) over per-person totals
    t_i gets Laplace (``epsilon``) or Gaussian (``rho``) noise of sensitivity c_k: the composition
    of the two. Candidates must be whole fixed-point units (the choice's unit ≥
    ``contributions.quantum``).
    """

    name: str
    contributions: Contributions
    choice: ClampChoiceParams
    noise: Literal["laplace", "gaussian"]
    epsilon: float | None = None
    rho: float | None = None
    thresholds: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        c = self.contributions
        if c.shape != "totals":
            raise ValueError("an auto bound clamps per-person totals (shape 'totals')")
        if self.choice.unit_exponent < c.quantum:
            raise ValueError("the smallest candidate clamp is finer than the fixed-point unit")
        if (self.noise == "laplace") != (self.epsilon is not None) or (
            self.noise == "gaussian"
        ) != (self.rho is not None):
            raise ValueError("laplace noise takes epsilon, gaussian noise takes rho")
        unit = Fraction(2) ** c.quantum
        thresholds = tuple(int(b / unit) for b in self.choice.candidates)  # whole units
        object.__setattr__(self, "thresholds", thresholds)

    def bound(self, index: int) -> float:
        """The clamp of candidate ``index`` (public once the index is released)."""
        return float(self.choice.candidates[index])

    def mechanism(self, index: int) -> LaplaceMechanism | GaussianMechanism:
        """The noise for candidate ``index``: sensitivity its clamp."""
        bound = self.bound(index)
        if self.epsilon is not None:
            return LaplaceMechanism(bound, self.epsilon)
        assert self.rho is not None
        return GaussianMechanism(bound, self.rho)


_Rngs = Any  # purpose → KeyedRng


class _ReleasePartition:
    """(partition key, combined statistics) → the output row; noise from (query, key, purpose)."""

    def __init__(
        self, query: ShiftedInverseQuery | AutoBoundQuery, key: NoiseKey, noise: bool
    ) -> None:
        self._query, self._key, self._noise = query, key, noise

    def __call__(self, key: Key, stats: Any) -> dict[str, Any]:
        q, label = self._query, canonical_key_string(key)

        def rng(purpose: str) -> Any:
            return self._key.rng(label, purpose)

        row: dict[str, Any] = dict(zip(q.contributions.by, key, strict=True))
        if isinstance(q, ShiftedInverseQuery):
            row["value"] = float(q.release(stats, rng) if self._noise else q.exact(stats))
            return row
        hist, clamped = stats
        k = q.choice.choose(hist, rng("bound")) if self._noise else q.choice.mode(hist)
        exact = clamped[k] * q.contributions.unit
        mechanism = q.mechanism(k)
        row["value"] = mechanism.release(exact, rng("value")) if self._noise else float(exact)
        row["stddev"], row["bound"] = mechanism.std, q.bound(k)
        return row


class ReleaseShiftedInverse(beam.PTransform[Any, Any]):
    """Person shards ((shard, pa.Table) from :class:`~transforms.aggregate.ShardByPerson`, shared
    by the release's queries) → one row per public partition ({by..., value}, + stddev, bound for
    an auto bound): a shifted-inverse release, or a count/sum with a privately chosen clamp.

    Args:
      query: a :class:`ShiftedInverseQuery` or :class:`AutoBoundQuery` (its guarantee is the
        release's, per partition; L partitions per person compose).
      keys: the query's noise key is ``keys.for_query(name)`` (derived here; the step holds only
        it), noise from ``key.rng(partition, purpose)``.
      noise: False only from tests: the exact statistic (auto bound: the best-scoring clamp).
    """

    def __init__(
        self,
        query: ShiftedInverseQuery | AutoBoundQuery,
        *,
        keys: KeySource,
        noise: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(query, (ShiftedInverseQuery, AutoBoundQuery)):
            raise TypeError(f"query must be a planned query, got {type(query).__name__}")
        self._query, self._noise, self._key = query, noise, keys.for_query(query.name)

    def expand(self, shards: PCollection[Any]) -> PCollection[Any]:
        q = self._query
        spec = q.contributions
        fn = q.combine_fn() if isinstance(q, ShiftedInverseQuery) else ClampStats(q.thresholds)
        contributions = (
            shards  # (shard, pa.Table): all rows of its persons
            | "Contributions" >> beam.FlatMapTuple(_Contribute(spec))  # (key, contribution)
        )
        empty = shards.pipeline | "PublicKeys" >> beam.Create(
            [(k, spec.empty()) for k in spec.public_keys]
        )  # every public partition is released, absent ones from no data
        out: PCollection[Any] = (
            (contributions, empty)
            | "WithPublicKeys" >> beam.Flatten()
            | "Combine" >> beam.CombinePerKey(fn)  # (key, sufficient statistics), lifted
            | "Release" >> beam.MapTuple(_ReleasePartition(q, self._key, self._noise))
        )
        return out
