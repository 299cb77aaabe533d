"""The throughput paths of the person shuffle and of bounding, against independent references.

Covers the packed shuffle of :class:`transforms.aggregate.ShardByPerson` (dictionary-encoded
person and low-cardinality text, decoded on arrival), the per-person ranking hash carried with the
shard (reused with the right key, ignored with another), and both pair-counting paths and both
partition-coding paths of :func:`transforms.bounding.bound_and_aggregate`. The reference below is
the bounding rule of the ``transforms.bounding`` module docstring written out in plain Python
(hashlib + Python ints + Fraction), so it shares no numpy code with the module under test.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import struct
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that

from userdp.transforms import bounding, person_hashing
from userdp.transforms.aggregate import ShardByPerson, _concatenate, split_by_shard
from userdp.transforms.bounding import (
    ZERO_STATS,
    PartitionStats,
    bound_and_aggregate,
)
from userdp.transforms.columns import PERSON_COLUMN, PERSON_HASH_COLUMN
from userdp.transforms.params import BoundingParams
from userdp.transforms.person_hashing import (
    PERSON_HASH_KEY,
    person_hash_fingerprint,
    person_rank_hashes,
    rank_hash_shards,
)

KEY = bytes(range(32))
OTHER_KEY = bytes(range(100, 132))
Stats = dict[tuple[Any, ...], PartitionStats]

# --- reference: the documented bounding rule in plain Python -----------------------------------

_M64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _mix(a: int, b: int) -> int:
    return _splitmix64(a ^ _splitmix64(b))


def _keyed(key: bytes, tag: bytes, v: object) -> int:
    """BLAKE2b-64(key, tag ‖ 0 ‖ type-tagged value), little-endian."""
    if isinstance(v, str):
        data = b"s" + v.encode()
    elif isinstance(v, bool):
        data = b"b1" if v else b"b0"
    elif isinstance(v, int):
        data = b"i" + str(v).encode()
    else:
        raise TypeError(type(v))
    digest = hashlib.blake2b(tag + b"\x00" + data, key=key, digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _fixed(x: float, q: int, limit: Fraction) -> int:
    cap = math.floor(limit / Fraction(2) ** q)
    return max(-cap, min(cap, round(Fraction(x) / Fraction(2) ** q)))  # round: ties to even


def reference_bound(table: pa.Table, p: BoundingParams, key: bytes) -> Stats:
    """Per person: first L partitions by (hash(person, partition), key); per kept partition:
    first C clamped values by (hash(person, partition, value), value); fixed-point sums."""
    persons = table.column(PERSON_COLUMN).to_pylist()
    keys = list(zip(*(table.column(c).to_pylist() for c in p.by), strict=True)) or [()] * len(
        persons
    )
    values = table.column(p.value).to_pylist() if p.value else [0.0] * len(persons)
    rows: dict[Any, dict[tuple[Any, ...], list[float]]] = {}
    for pid, k, v in zip(persons, keys, values, strict=True):
        rows.setdefault(pid, {}).setdefault(k, []).append(v)
    lo, hi, q = p.lower, p.upper, p.quantum
    mid, mag = (lo + hi) / 2, max(abs(Fraction(lo)), abs(Fraction(hi)))
    half = (Fraction(hi) - Fraction(lo)) / 2
    out: dict[tuple[Any, ...], list[int]] = {}
    for pid, parts in rows.items():
        ph = _keyed(key, b"person", pid)
        ranked = []
        for k in parts:
            kh = 0
            for j, (col, v) in enumerate(zip(p.by, k, strict=True)):
                vh = _keyed(key, b"by:" + col.encode(), v)
                kh = _mix(kh, vh) if j else vh
            ranked.append((_mix(ph, kh), k))
        for pair_h, k in sorted(ranked)[: p.max_partitions_per_person]:
            acc = out.setdefault(k, [0, 0, 0, 0])
            acc[0] += 1
            if p.value is None:
                acc[1] += min(len(parts[k]), p.max_rows_per_partition)
                continue
            clamped = [min(max(v, lo), hi) + 0.0 for v in parts[k]]
            bits = [struct.unpack("<Q", struct.pack("<d", v))[0] for v in clamped]
            chosen = sorted(
                (_mix(pair_h, _splitmix64(b)), v) for b, v in zip(bits, clamped, strict=True)
            )
            for _, v in chosen[: p.max_rows_per_partition]:
                acc[1] += 1
                acc[2] += _fixed(v, q, mag)
                acc[3] += _fixed(v - mid, q, half)
    return {k: PartitionStats(*s) for k, s in out.items()}


# --- data ----------------------------------------------------------------------------------------

SPECIAL = [math.inf, -math.inf, -0.0, 0.0, -50.0, 99.0, 10.0, -2.0]


def random_table(seed: int, n: int, persons: int, domains: int) -> pa.Table:
    """Skewed persons (a few heavy ones), low-cardinality text ``domain``, int ``hour``, bool
    ``flag``, constant ``const``, high-cardinality text ``note``, float64 ``d`` with ±inf/−0.0."""
    rng = np.random.default_rng(seed)
    pid = (persons * rng.random(n) ** 2).astype(np.int64)
    d = np.where(rng.random(n) < 0.3, rng.choice(SPECIAL, n), rng.uniform(-20.0, 30.0, n))
    schema = pa.schema(
        [
            (PERSON_COLUMN, pa.string()),
            ("domain", pa.string()),
            ("hour", pa.int64()),
            ("flag", pa.bool_()),
            ("const", pa.string()),
            ("note", pa.string()),
            ("d", pa.float64()),
        ],
        metadata={b"origin": b"test"},
    )
    columns = [
        [f"p{i}" for i in pid],
        [f"dom-{i}" for i in rng.integers(0, domains, n)],
        rng.integers(-2, 3, n),
        rng.random(n) < 0.5,
        ["same"] * n,
        [f"note-{i}-{rng.integers(1 << 40)}" for i in range(n)],
        d,
    ]
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


def splits(t: pa.Table, how: str, seed: int) -> list[pa.Table]:
    """The input tables of one shuffle: the rows of ``t`` in several table splits."""
    if how == "whole":
        return [t]
    rng = np.random.default_rng(seed)
    cuts = sorted(rng.integers(0, t.num_rows, 3 if how == "three" else 40).tolist())
    bounds = [0, *cuts, t.num_rows]
    parts = [t.slice(a, b - a) for a, b in itertools.pairwise(bounds)]  # empty slices included
    if how == "chunked":  # one table whose columns have many chunks
        return [pa.concat_tables(parts)]
    return parts


def row_multiset(t: pa.Table) -> Counter[tuple[Any, ...]]:
    """Rows as a multiset, floats by their bits (−0.0 ≠ 0.0) and values tagged with their type."""

    def exact(v: object) -> object:
        return (type(v).__name__, v.hex() if isinstance(v, float) else v)

    return Counter(tuple(exact(v) for v in row.values()) for row in t.to_pylist())


def shuffle(tables: list[pa.Table], S: int, key: bytes, person_hashes: bool) -> dict[int, pa.Table]:
    """split_by_shard(packed) per input table → group by shard → _concatenate (no Beam)."""
    grouped: dict[int, list[Any]] = {}
    for t in tables:
        for s, part in split_by_shard(t, S, key, packed=True):
            grouped.setdefault(s, []).append(part)
    return dict(_concatenate(s, parts, person_hashes) for s, parts in grouped.items())


def expected_schema(t: pa.Table, person_hashes: bool, key: bytes) -> pa.Schema:
    if not person_hashes:
        return t.schema
    metadata = {**t.schema.metadata, PERSON_HASH_KEY: person_hash_fingerprint(key)}
    return t.schema.append(pa.field(PERSON_HASH_COLUMN, pa.uint64())).with_metadata(metadata)


def check_shards(shards: dict[int, pa.Table], t: pa.Table, S: int, person_hashes: bool) -> None:
    """Rows, schema, whole persons and the shard rule of one shuffle of ``t``."""
    shard_of: dict[str, int] = {}
    for s, table in shards.items():
        assert 0 <= s < S
        assert table.schema.equals(expected_schema(t, person_hashes, KEY), check_metadata=True)
        for pid in set(table.column(PERSON_COLUMN).to_pylist()):
            assert shard_of.setdefault(pid, s) == s, f"{pid} in shards {shard_of[pid]} and {s}"
        if person_hashes:  # the carried hash is the person's ranking hash, row by row
            got = table.column(PERSON_HASH_COLUMN).to_pylist()
            ids = table.column(PERSON_COLUMN).to_pylist()
            assert got == [_keyed(KEY, b"person", pid) for pid in ids]
    out = pa.concat_tables(
        [x.drop_columns([PERSON_HASH_COLUMN]) if person_hashes else x for x in shards.values()]
    )
    assert row_multiset(out) == row_multiset(t)
    ids = sorted(shard_of)
    hashes = person_rank_hashes(pa.array(ids), KEY)
    assert hashes.tolist() == [_keyed(KEY, b"person", pid) for pid in ids]
    assert rank_hash_shards(hashes, S).tolist() == [shard_of[pid] for pid in ids]


# --- the packed shuffle --------------------------------------------------------------------------


@pytest.mark.parametrize("person_hashes", [False, True])
@pytest.mark.parametrize("how", ["whole", "three", "many", "chunked"])
@pytest.mark.parametrize(("seed", "S"), [(0, 1), (1, 5), (2, 8)])
def test_packed_shuffle_returns_input_rows_and_schema(
    person_hashes: bool, how: str, seed: int, S: int
) -> None:
    t = random_table(seed, n=1500, persons=150, domains=12)
    check_shards(shuffle(splits(t, how, seed), S, KEY, person_hashes), t, S, person_hashes)


def test_packed_parts_encode_persons_and_low_cardinality_text_only() -> None:
    """On the wire: person and ``domain`` as small dictionary indices, ``note`` stays plain, and
    one ranking hash per person of the part (not per row)."""
    t = random_table(3, n=1500, persons=150, domains=12)
    for _, (part, hashes) in split_by_shard(t, 4, KEY, packed=True):
        types = {f.name: f.type for f in part.schema}
        assert types[PERSON_COLUMN] == pa.dictionary(pa.int8(), pa.string())  # < 128 persons
        assert types["domain"] == pa.dictionary(pa.int8(), pa.string())
        assert types["note"] == pa.string() and types["d"] == pa.float64()
        ids = part.column(PERSON_COLUMN).combine_chunks().dictionary.to_pylist()
        assert len(ids) == len(set(ids)) == len(set(part.column(PERSON_COLUMN).to_pylist()))
        assert hashes.tolist() == [_keyed(KEY, b"person", pid) for pid in ids]


@pytest.mark.parametrize(
    ("persons", "width"),
    [(128, pa.int8()), (129, pa.int16()), (32768, pa.int16()), (32769, pa.int32())],
)
def test_dictionary_indices_of_every_width_decode(persons: int, width: pa.DataType) -> None:
    """The narrowest index type at its boundaries (persons), and a 200-value text column."""
    ids = [f"p{i}" for i in range(persons)] * max(2, 4000 // persons)
    t = pa.table({PERSON_COLUMN: ids, "k": [f"k{i % 200}" for i in range(len(ids))]})
    ((_, (part, _)),) = split_by_shard(t, 1, KEY, packed=True)
    assert part.schema.field(PERSON_COLUMN).type == pa.dictionary(width, pa.string())
    assert part.schema.field("k").type == pa.dictionary(pa.int16(), pa.string())
    (back,) = shuffle([t], 1, KEY, person_hashes=False).values()
    assert back.schema.equals(t.schema) and row_multiset(back) == row_multiset(t)


@pytest.mark.parametrize("person_hashes", [False, True])
def test_shard_by_person_round_trip_through_beam(person_hashes: bool) -> None:
    t = random_table(4, n=800, persons=90, domains=5)
    S = 6

    def check(elements: list[tuple[int, pa.Table]]) -> None:
        assert len({s for s, _ in elements}) == len(elements)  # one table per shard
        check_shards(dict(elements), t, S, person_hashes)

    with beam.Pipeline(runner=FnApiRunner()) as p:
        out = (
            p
            | "Create" >> beam.Create(splits(t, "three", 4))
            | "Shard" >> ShardByPerson(S, KEY, person_hashes=person_hashes)
        )
        assert_that(out, check)


# --- the carried person hash ---------------------------------------------------------------------


def spy_person_hashing(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the person ids bounding hashes itself (not taken from a carried column)."""
    hashed: list[int] = []
    original = person_hashing._keyed_hashes

    def spy(values: Any, key: bytes, tag: bytes, arrow_type: Any = None) -> Any:
        if tag == b"person":
            hashed.append(len(values))
        return original(values, key, tag, arrow_type)

    monkeypatch.setattr(person_hashing, "_keyed_hashes", spy)
    return hashed


def test_carried_hash_is_reused_with_its_key_and_ignored_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Shards carrying hashes made with either key, bounded under either key: always the
    reference of the bounding key, the same as without the column and as with the right one; the
    column is read (no person hashed) exactly when its fingerprint names the bounding key."""
    t = random_table(5, n=2000, persons=120, domains=15)
    p = BoundingParams(("domain", "hour"), "d", -2.0, 10.0, 2, 2)
    hashed = spy_person_hashing(monkeypatch)
    for made_with in (KEY, OTHER_KEY):
        shards = shuffle(splits(t, "three", 5), 4, made_with, person_hashes=True)
        for key in (KEY, OTHER_KEY):
            merged: Stats = {}
            for shard in shards.values():
                plain = shard.drop_columns([PERSON_HASH_COLUMN])
                unmarked = shard.replace_schema_metadata(None)  # a hash column of unknown key
                want = reference_bound(plain, p, key)
                for table in (shard, plain, unmarked):
                    hashed.clear()
                    got = bound_and_aggregate(table, p, key)
                    assert got == want
                    reused = key == made_with and table is shard
                    assert (hashed == []) == reused, (made_with == key, hashed)
                for k, s in got.items():
                    merged[k] = merged.get(k, ZERO_STATS).add(s)
            assert merged == reference_bound(t, p, key)
    # The keys choose different rows here, so using one key's hashes under the other would show.
    assert reference_bound(t, p, KEY) != reference_bound(t, p, OTHER_KEY)


# --- pair counting and partition coding ----------------------------------------------------------


def spy_pair_unique(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records bounding's np.unique calls: "pairs" (counting pairs) or "partitions" (multi-by)."""
    calls: list[str] = []

    class SpyNumpy:
        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

        def unique(self, *args: Any, **kwargs: Any) -> Any:
            calls.append("pairs" if kwargs.get("return_counts") else "partitions")
            return np.unique(*args, **kwargs)

    monkeypatch.setattr(bounding, "np", SpyNumpy())
    return calls


def force_unique_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make bounding count pairs with np.unique: ``size`` only chooses the path there."""
    original: Callable[..., Any] = bounding._pairs
    monkeypatch.setattr(
        bounding, "_pairs", lambda code, size, of_row: original(code, 1 << 62, of_row)
    )


def raw_excess(t: pa.Table, p: BoundingParams) -> tuple[int, int]:
    """(max partitions of a person, max rows of a (person, partition)) before bounding."""
    keys = zip(
        t.column(PERSON_COLUMN).to_pylist(), *(t.column(c).to_pylist() for c in p.by), strict=True
    )
    pairs = Counter(keys)
    return max(Counter(pid for pid, *_ in pairs).values()), max(pairs.values())


# (persons, domains) giving few possible pairs (bincount) or many (np.unique) for 2000 rows.
SMALL, LARGE = (60, 8), (1500, 40)


@pytest.mark.parametrize(("shape", "force"), [(SMALL, False), (SMALL, True), (LARGE, False)])
@pytest.mark.parametrize(
    "p",
    [
        BoundingParams(("domain",), "d", -2.0, 10.0, 2, 2),
        BoundingParams(("domain",), None, 0.0, 0.0, 3, 1),
        BoundingParams(("domain", "hour"), "d", -5.0, 50.0, 3, 2),
        BoundingParams(("flag", "domain", "hour"), None, 0.0, 0.0, 2, 1),
        BoundingParams((), "d", 0.0, 1.0, 1, 4),
    ],
    ids=["single", "single-count", "pair", "triple-count", "no-by"],
)
def test_both_pair_counting_paths_match_the_reference(
    monkeypatch: pytest.MonkeyPatch,
    shape: tuple[int, int],
    force: bool,
    p: BoundingParams,
) -> None:
    """Few possible pairs: bincount; many (LARGE with `by`; without `by` there are at most as
    many pairs as rows): np.unique; ``force``: np.unique on the SMALL data as well."""
    t = random_table(6, n=2000, persons=shape[0], domains=shape[1])
    partitions, rows = raw_excess(t, p)
    assert rows > p.max_rows_per_partition  # C binds
    assert partitions > p.max_partitions_per_person or not p.by  # L binds
    expected = reference_bound(t, p, KEY)
    calls = spy_pair_unique(monkeypatch)
    if force:
        force_unique_pairs(monkeypatch)
    assert bound_and_aggregate(t, p, KEY) == expected
    assert calls.count("pairs") == (force or (shape == LARGE and bool(p.by)))
    # multi-`by` codes partitions with np.unique; the single-`by` path sorts nothing
    assert ("partitions" in calls) == (len(p.by) > 1)


@pytest.mark.parametrize("of_row", [False, True])
@pytest.mark.parametrize("n", [1, 37, 3000])
def test_pairs_counts_distinct_codes_on_both_sides_of_the_threshold(
    monkeypatch: pytest.MonkeyPatch, n: int, of_row: bool
) -> None:
    rng = np.random.default_rng(n)
    limit = 4 * n + 1024  # bincount up to this many possible codes
    for size, path in [(n, "bincount"), (limit, None), (limit + 1, None), (50 * limit, "unique")]:
        pool = rng.choice(size, size=min(size, max(1, n // 3)), replace=False)
        code = np.append(rng.choice(pool, n - 1), size - 1).astype(np.int64)  # max code present
        calls = spy_pair_unique(monkeypatch)
        got = bounding._pairs(code, size, of_row)
        want = Counter(code.tolist())
        assert got.code.tolist() == sorted(want)
        assert got.rows.tolist() == [want[c] for c in sorted(want)]
        if of_row:
            assert got.of_row is not None and got.code[got.of_row].tolist() == code.tolist()
        else:
            assert got.of_row is None
        if path is not None:
            assert calls == (["pairs"] if path == "unique" else []), (size, calls)


@pytest.mark.parametrize(("L", "C"), [(50, 50), (50, 1), (2, 50)])
def test_single_by_equals_by_pair_with_a_constant_column(L: int, C: int) -> None:
    """("domain",) vs ("domain", "const") and ("const", "domain"): the same partitions. Without
    binding bounds everything agrees; a binding C keeps the counts (rows are min(rows, C)); a
    binding L keeps the number of partitions each person keeps."""
    t = random_table(7, n=1500, persons=80, domains=10)
    single = bound_and_aggregate(t, BoundingParams(("domain",), "d", -2.0, 10.0, L, C), KEY)
    assert single == reference_bound(t, BoundingParams(("domain",), "d", -2.0, 10.0, L, C), KEY)
    for by in [("domain", "const"), ("const", "domain")]:
        multi = bound_and_aggregate(t, BoundingParams(by, "d", -2.0, 10.0, L, C), KEY)
        flat = {(k[by.index("domain")],): s for k, s in multi.items()}
        assert len(flat) == len(multi)
        if C == 50 and L == 50:
            assert flat == single
        elif L == 50:
            assert {k: s[:2] for k, s in flat.items()} == {k: s[:2] for k, s in single.items()}
        else:
            persons = sum(s.persons for s in single.values())
            assert sum(s.persons for s in flat.values()) == persons


def test_text_column_with_nulls_is_sent_plain_and_keeps_its_nulls() -> None:
    n = 400
    table = pa.table(
        {
            PERSON_COLUMN: [f"p{i % 37}" for i in range(n)],
            "domain": [None if i % 7 == 0 else f"d{i % 3}" for i in range(n)],
        }
    )
    back = pa.concat_tables(shuffle([table], 4, KEY, person_hashes=False).values())
    assert sorted(back.column("domain").to_pylist(), key=str) == sorted(
        table.column("domain").to_pylist(), key=str
    )
    assert back.column("domain").null_count == table.column("domain").null_count


def test_null_person_ids_are_refused() -> None:
    table = pa.table({PERSON_COLUMN: ["a", None, "b"], "v": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match="null ids: shard only validated tables"):
        list(split_by_shard(table, 4, KEY, packed=True))
