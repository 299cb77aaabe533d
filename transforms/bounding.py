"""Contribution bounding and per-partition sufficient statistics for one shard of persons.

Pure numpy/pyarrow, no Beam: :func:`bound_and_aggregate` takes an Arrow table holding *all* rows of
some set of persons (one person shard, see :class:`transforms.aggregate.ShardByPerson`) and returns
:class:`PartitionStats` per partition key, after

1. keeping at most L = ``max_partitions_per_person`` partitions per person,
2. keeping at most C = ``max_rows_per_partition`` rows per (person, partition),
3. clamping values to [lower, upper] (±inf included),

so that adding or removing one person changes the statistics by at most the sensitivities in
``docs/release-job-contracts.md`` §2.

Which partitions and rows a person keeps **depends only on the person's own rows** and the bounding
key: a person's partitions are ranked by a keyed hash of (person, partition) and the first L kept;
within a kept (person, partition) its rows are ranked by a keyed hash of (person, partition,
clamped value) and the first C kept. Ties are broken by the partition key / clamped value, so the
choice is a function of the person's multiset of rows: the same data gives the same statistics
whatever the row order, the split into tables, a Beam retry or another person's presence.
The keyed hash (BLAKE2b keyed with the 32-byte bounding key per distinct value, combined with the
splitmix64 finaliser) is not used as privacy noise: any deterministic rule of the person's own rows
would keep the neighbouring relation; the key only stops an outsider from predicting which rows
are dropped.

Each person is hashed once per release: :class:`transforms.aggregate.ShardByPerson` computes
h = BLAKE2b-64(bounding key, "person" ‖ id), the very hash the ranking above starts from
(:func:`person_rank_hashes`), once per distinct person when it shards the rows, sends the person
to shard splitmix64(h ⊕ salt) mod S (:func:`rank_hash_shards`) and hands h on with the rows
(:data:`PERSON_HASH_COLUMN`; a fingerprint of the key in the schema metadata). Here h is read from
that column instead of being computed again; a table without it, or made with another key, is
hashed here, with the same result. This keeps the privacy argument: h is still a function of the
person id and the key alone, so what a person keeps is still a function of the person's own rows;
the shard, now derived from h, only decides which whole persons are bounded in the same call,
which never changes what any of them keeps. (Reusing h, rather than a new digest split in two,
also keeps every released value identical to the rule before this change.)

Fixed point: a kept value v contributes round(v/2^q) to ``sum_q`` and round((v − mid)/2^q) to
``centred_sum_q`` (q = ``BoundingParams.quantum``, mid = (lower + upper)/2, ties to even), each
clipped so that |contribution|·2^q never exceeds max(|lower|, |upper|), resp. (upper − lower)/2:
rounding cannot inflate the sensitivity. Sums are exact Python ints; the vectorised partial sums are
exact for shards of fewer than 2^33 rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .columns import PERSON_COLUMN
from .params import BoundingParams
from .person_hashing import (
    I64,
    U64,
    as_arrow_array,
    carried_person_hashes,
    dictionary_indices,
    encode_column,
    hash_per_value,
    mix64,
    splitmix64,
)

BOUNDING_KEY_BYTES = 32

PartitionKey = tuple[Any, ...]

_SPLIT_BITS = 20  # fixed-point values (|x| ≤ 2^41) are summed as two halves of ≤ 21 bits each


class PartitionStats(NamedTuple):
    """Sufficient statistics of one partition after bounding (exact ints; see module docstring)."""

    persons: int
    rows: int
    sum_q: int
    centred_sum_q: int

    def add(self, other: PartitionStats) -> PartitionStats:
        return PartitionStats(
            self.persons + other.persons,
            self.rows + other.rows,
            self.sum_q + other.sum_q,
            self.centred_sum_q + other.centred_sum_q,
        )


ZERO_STATS = PartitionStats(0, 0, 0, 0)


def rows_of_listed_keys(
    table: pa.Table, by: Sequence[str], keys: Sequence[tuple[Any, ...]]
) -> pa.Table:
    """The rows whose ``by`` key is one of ``keys`` (public partitions; each key a tuple in the
    columns' input types). Used before any per-person bound, so that L is spent on listed keys."""
    listed = pa.table(
        {c: pa.array([k[i] for k in keys], table.schema.field(c).type) for i, c in enumerate(by)}
    )
    return table.join(listed, keys=list(by), join_type="left semi")


def check_bounding_key(key: bytes) -> None:
    if not isinstance(key, bytes) or len(key) != BOUNDING_KEY_BYTES:
        raise ValueError(
            f"the bounding key must be {BOUNDING_KEY_BYTES} bytes, got "
            f"{len(key) if isinstance(key, bytes) else type(key).__name__}; "
            "the launcher derives it from the release secret"
        )


# --- bounding ---------------------------------------------------------------------------------


def _rank_within_groups(group: I64, h: U64, tie: npt.NDArray[Any]) -> I64:
    """Per element, its 0-based rank inside its group (ints ≥ 0) when sorted by (h, tie).

    Fast path: one argsort of the group packed with the high bits of h into a uint64. Elements
    that tie there are ordered arbitrarily, which is harmless when their ``tie`` values are equal
    (interchangeable elements); if any tied neighbours differ in ``tie``, an exact lexsort is used.
    """
    n = len(group)
    bits = int(group.max()).bit_length() if n else 0
    packed = h  # a single group: the hash alone
    if bits:
        packed = (group.astype(np.uint64) << np.uint64(64 - bits)) | (h >> np.uint64(bits))
    order = np.argsort(packed)
    p_sorted, t_sorted = packed[order], tie[order]
    if np.any((p_sorted[1:] == p_sorted[:-1]) & (t_sorted[1:] != t_sorted[:-1])):
        order = np.lexsort((tie, h, group))
    g = group[order]
    new = np.ones(n, dtype=bool)
    new[1:] = g[1:] != g[:-1]
    starts = np.flatnonzero(new)
    run_start = starts[np.cumsum(new) - 1]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64) - run_start
    return rank


class _Persons(NamedTuple):
    code: I64  # per row: person code (any numbering: only equality matters)
    hashes: U64  # per code: the person's ranking hash


def _persons(table: pa.Table, key: bytes) -> _Persons:
    carried = carried_person_hashes(table, key)
    if carried is None:
        return _Persons(*hash_per_value(table.column(PERSON_COLUMN), key, b"person"))
    encoded = pc.dictionary_encode(as_arrow_array(table.column(PERSON_COLUMN)))
    code = dictionary_indices(encoded)
    hashes = np.empty(len(encoded.dictionary), dtype=np.uint64)
    hashes[code] = carried  # equal for all rows of a person (one hash per person id)
    return _Persons(code, hashes)


class _Partitions(NamedTuple):
    code: I64  # per row: partition code (sorted by key tuple)
    keys: list[PartitionKey]  # per code
    hashes: U64  # per code: keyed hash of the partition key


def _partitions(table: pa.Table, by: tuple[str, ...], key: bytes) -> _Partitions:
    n = table.num_rows
    if not by:
        return _Partitions(np.zeros(n, np.int64), [()], np.zeros(1, np.uint64))
    columns = [encode_column(table.column(c), key, b"by:" + c.encode()) for c in by]
    if len(columns) == 1:  # the codes are already dense ranks of the sorted distinct values
        only = columns[0]
        return _Partitions(only.codes, [(v,) for v in only.values], only.hashes)
    code = columns[0].codes
    first = np.zeros(0, dtype=np.int64)
    for j, col in enumerate(columns):
        if j:
            code = code * len(col.values) + col.codes  # < n², lexicographic in the columns
        _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
        code = inverse.astype(np.int64).reshape(-1)
    h = columns[0].hashes[columns[0].codes[first]]
    for col in columns[1:]:
        h = mix64(h, col.hashes[col.codes[first]])
    keys = [tuple(col.values[col.codes[r]] for col in columns) for r in first.tolist()]
    return _Partitions(code, keys, h)


class _Pairs(NamedTuple):
    code: I64  # per (person, partition) pair, ascending: person code · P + partition code
    rows: I64  # per pair: its number of rows
    of_row: I64 | None  # per row: the index of its pair (only when asked for)


def _pairs(pair_code: I64, size: int, of_row: bool) -> _Pairs:
    """The distinct codes in ``pair_code`` (all < ``size``) with their counts, sorted."""
    if size <= 4 * len(pair_code) + 1024:  # few possible codes: count them, no sort
        counts = np.bincount(pair_code, minlength=size)
        present = np.flatnonzero(counts)
        if not of_row:
            return _Pairs(present, counts[present], None)
        index = np.zeros(size, dtype=np.int64)
        index[present] = np.arange(len(present), dtype=np.int64)
        return _Pairs(present, counts[present], index[pair_code])
    if not of_row:
        codes, counts = np.unique(pair_code, return_counts=True)
        return _Pairs(codes, counts, None)
    codes, inverse, counts = np.unique(pair_code, return_inverse=True, return_counts=True)
    return _Pairs(codes, counts, inverse.astype(np.int64).reshape(-1))


def _fixed_point(v: npt.NDArray[np.float64], q: int, limit: Fraction, offset: float = 0.0) -> I64:
    """round((v − offset)/2^q), ties to even, clipped to ±floor(limit/2^q)."""
    cap = math.floor(limit / Fraction(2) ** q)
    scaled = np.rint(np.ldexp(v - offset, -q))
    out: I64 = np.clip(scaled, -cap, cap).astype(np.int64)
    return out


def _exact_sums(part: I64, x: I64, size: int) -> list[int]:
    """Σ x per partition as exact Python ints (two ≤ 21-bit halves, exact float bincounts)."""
    low = x & ((1 << _SPLIT_BITS) - 1)
    high = x >> _SPLIT_BITS
    lo = np.bincount(part, weights=low.astype(np.float64), minlength=size)
    hi = np.bincount(part, weights=high.astype(np.float64), minlength=size)
    return [
        (int(h) << _SPLIT_BITS) + int(lo_) for h, lo_ in zip(hi.tolist(), lo.tolist(), strict=True)
    ]


def bound_and_aggregate(
    table: pa.Table, params: BoundingParams, key: bytes
) -> dict[PartitionKey, PartitionStats]:
    """Bounded per-partition statistics of one shard (all rows of each of its persons).

    Args:
      table: a clean table (``docs/release-job-contracts.md`` §3) holding every row of each person
        it mentions; persons must not be split across calls, or their bounds are applied per call.
      params: the query's bounds (L, C, clamp bounds, ``by`` and ``value`` columns).
      key: the 32-byte bounding key (derived by the launcher from the release secret).

    Returns:
      {partition key tuple (``()`` without ``by``): PartitionStats} for every partition that
      keeps at least one person. What a person keeps depends only on the person's own rows (module
      docstring), so the result is the same for any row order or split of the shard into tables.
    """
    check_bounding_key(key)
    n = table.num_rows
    if n == 0:
        return {}
    L, C = params.max_partitions_per_person, params.max_rows_per_partition
    persons = _persons(table, key)
    parts = _partitions(table, params.by, key)
    P = len(parts.keys)

    # (person, partition) pairs, sorted by person then partition code.
    pairs = _pairs(persons.code * P + parts.code, len(persons.hashes) * P, params.value is not None)
    pair_person, pair_part, pair_rows = pairs.code // P, pairs.code % P, pairs.rows
    pair_hash = mix64(persons.hashes[pair_person], parts.hashes[pair_part])
    kept_pair = _rank_within_groups(pair_person, pair_hash, pair_part) < L

    kept_part = pair_part[kept_pair]
    n_persons = np.bincount(kept_part, minlength=P)
    if params.value is None:
        rows = np.bincount(
            kept_part, weights=np.minimum(pair_rows[kept_pair], C).astype(np.float64), minlength=P
        )
        sums = centred = [0] * P
    else:
        assert pairs.of_row is not None  # asked for when there is a value column
        pair_of_row = pairs.of_row
        # Rows of kept pairs, clamped (+0.0 turns −0.0 into 0.0: interchangeable rows hash alike).
        idx = np.flatnonzero(kept_pair[pair_of_row])
        values = as_arrow_array(table.column(params.value)).to_numpy(zero_copy_only=False)
        v = np.clip(values[idx].astype(np.float64), params.lower, params.upper) + 0.0
        row_pair = pair_of_row[idx]
        row_hash = mix64(pair_hash[row_pair], splitmix64(v.view(np.uint64)))
        chosen = _rank_within_groups(row_pair, row_hash, v) < C
        v, row_part = v[chosen], pair_part[row_pair[chosen]]
        rows = np.bincount(row_part, minlength=P)
        lo, hi, q = params.lower, params.upper, params.quantum
        magnitude = max(abs(Fraction(lo)), abs(Fraction(hi)))
        half_width = (Fraction(hi) - Fraction(lo)) / 2
        sums = _exact_sums(row_part, _fixed_point(v, q, magnitude), P)
        # lo/2 + hi/2, not (lo + hi)/2: the same float unless lo + hi overflows ([1e307, 1.7e308]
        # made the midpoint inf and every partition release the upper bound)
        centred = _exact_sums(row_part, _fixed_point(v, q, half_width, lo / 2 + hi / 2), P)

    out: dict[PartitionKey, PartitionStats] = {}
    for p in np.flatnonzero(n_persons).tolist():
        out[parts.keys[p]] = PartitionStats(int(n_persons[p]), int(rows[p]), sums[p], centred[p])
    return out
