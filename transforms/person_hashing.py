"""Keyed hashes of persons and values: which shard a person goes to, and how persons are ranked.

Every choice that bounding makes per person (which L partitions, which C rows) is ranked by a
keyed 64-bit hash of the person id and the value, computed once per distinct value in numpy
(splitmix64 over keyed BLAKE2b digests), so a person's choices depend only on their own rows and
the release's bounding key, never on other persons or on how rows are split into tables. The
shard of a person is a function of the same hash. Used by :mod:`.bounding` and the shuffle by
person (:mod:`.aggregate`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from .columns import PERSON_HASH_COLUMN

# --- hashing ----------------------------------------------------------------------------------


PERSON_HASH_KEY = b"userdp.person_hash_key"  # schema metadata: fingerprint of the hash's key
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
MAX_PERSON_SHARDS = 1 << 20
"""Person shards of one shuffle, at most: a shard step counts rows per shard in an array of
num_shards entries, and a number that passed the check could overflow a uint64 or exhaust memory
on a worker — only once a person's rows reached the step (a failure that depended on the data)."""
SHARD_SALT = np.uint64(0x5348415244)  # shard = splitmix64(h ⊕ salt) mod S: not h's own bits


def splitmix64(x: U64) -> U64:
    """The splitmix64 finaliser, elementwise (uint64 arithmetic wraps, as intended)."""
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    out: U64 = z ^ (z >> np.uint64(31))
    return out


def mix64(a: U64, b: U64) -> U64:
    """An order-sensitive combination of two 64-bit hashes."""
    return splitmix64(a ^ splitmix64(b))


def _value_bytes(v: object) -> bytes:
    """Type-tagged bytes of one distinct column value (injective within a column)."""
    if isinstance(v, str):
        return b"s" + v.encode("utf-8")
    if isinstance(v, bytes):
        return b"y" + v
    if isinstance(v, bool):
        return b"b1" if v else b"b0"
    if isinstance(v, int):
        return b"i" + str(v).encode("ascii")
    if isinstance(v, float):
        return b"f" + v.hex().encode("ascii")
    return b"o" + type(v).__qualname__.encode() + b":" + repr(v).encode("utf-8")


def _keyed_hashes(values: Sequence[object], key: bytes, tag: bytes, arrow_type: Any = None) -> U64:
    """BLAKE2b-64 keyed with ``key`` of tag ‖ value bytes (:func:`_value_bytes`), per value.

    ``arrow_type``, when given, is the type of the Arrow column the values came from: for string
    and integer columns every value has the same type tag, so the loop skips the per-value dispatch
    (same bytes hashed, same hashes; this loop is the costliest step of sharding).
    """
    base = hashlib.blake2b(key=key, digest_size=8)
    base.update(tag + b"\x00")
    as_bytes: Callable[[Any], bytes] = _value_bytes
    if arrow_type is not None and is_text_type(arrow_type):
        base.update(b"s")
        as_bytes = str.encode
    elif arrow_type is not None and pa.types.is_integer(arrow_type):
        base.update(b"i")
        as_bytes = _int_bytes
    copy, digests = base.copy, bytearray()
    for v in values:
        h = copy()
        h.update(as_bytes(v))
        digests += h.digest()
    return np.frombuffer(bytes(digests), dtype="<u8").astype(np.uint64)


def _int_bytes(v: int) -> bytes:
    return str(v).encode("ascii")


def is_text_type(arrow_type: Any) -> bool:
    """``string`` or ``large_string`` (clean tables hold the latter: transforms/validate.py)."""
    return bool(pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type))


def as_arrow_array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return column.chunk(0)
        return pa.concat_arrays(column.chunks) if column.num_chunks else pa.array([], column.type)
    return column


def dictionary_indices(encoded: pa.DictionaryArray) -> I64:
    out: I64 = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return out


class EncodedColumn(NamedTuple):
    codes: I64  # per row: rank of its value among the sorted distinct values
    hashes: U64  # per distinct value (sorted order): keyed hash
    values: list[Any]  # per distinct value (sorted order): the Python value


def encode_column(column: pa.ChunkedArray | pa.Array, key: bytes, tag: bytes) -> EncodedColumn:
    """Dictionary-encode a column; distinct values sorted, so indices do not depend on row order."""
    encoded = pc.dictionary_encode(as_arrow_array(column))
    dictionary = encoded.dictionary
    order = pc.sort_indices(dictionary).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    codes = rank[dictionary_indices(encoded)]
    values = dictionary.take(pa.array(order)).to_pylist()
    return EncodedColumn(codes, _keyed_hashes(values, key, tag, dictionary.type), values)


def hash_per_value(column: pa.ChunkedArray | pa.Array, key: bytes, tag: bytes) -> tuple[I64, U64]:
    """(per row: index of its value, per distinct value: keyed hash); indices in any order."""
    encoded = pc.dictionary_encode(as_arrow_array(column))
    dictionary = encoded.dictionary
    hashes = _keyed_hashes(dictionary.to_pylist(), key, tag, dictionary.type)
    return dictionary_indices(encoded), hashes


def person_shards(persons: pa.ChunkedArray | pa.Array, num_shards: int, key: bytes) -> I64:
    """Per row, the person's shard: keyed hash of the person id mod ``num_shards``."""
    codes, hashes = hash_per_value(persons, key, b"shard")
    shard_of_value = (hashes % np.uint64(num_shards)).astype(np.int64)
    out: I64 = shard_of_value[codes]
    return out


def person_rank_hashes(ids: pa.Array, key: bytes) -> U64:
    """Per value of ``ids`` (distinct person ids), its ranking hash h (module docstring).

    The same h that :func:`bound_and_aggregate` computes for a table without
    :data:`PERSON_HASH_COLUMN`: BLAKE2b-64 keyed with ``key`` of "person" ‖ the id's bytes.
    """
    return _keyed_hashes(ids.to_pylist(), key, b"person", ids.type)


def rank_hash_shards(hashes: U64, num_shards: int) -> I64:
    """Per ranking hash h, its person's shard: splitmix64(h ⊕ salt) mod ``num_shards``."""
    out: I64 = (splitmix64(hashes ^ SHARD_SALT) % np.uint64(num_shards)).astype(np.int64)
    return out


def person_hash_fingerprint(key: bytes) -> bytes:
    """Names the key a :data:`PERSON_HASH_COLUMN` was made with (schema metadata), not the key."""
    return hashlib.blake2b(b"person hash column", key=key, digest_size=16).hexdigest().encode()


def carried_person_hashes(table: pa.Table, key: bytes) -> U64 | None:
    """The per-row person hashes carried by ``table`` if they were made with ``key``, else None."""
    fingerprint = (table.schema.metadata or {}).get(PERSON_HASH_KEY)
    if PERSON_HASH_COLUMN not in table.column_names or fingerprint != person_hash_fingerprint(key):
        return None
    out: U64 = as_arrow_array(table.column(PERSON_HASH_COLUMN)).to_numpy(zero_copy_only=False)
    return out
