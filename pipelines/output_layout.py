"""Which files a release holds: one per unpartitioned query, N shards per partitioned one.

A partitioned query (one with ``by`` columns) can release millions of rows; gathering them on one
worker to write one file would make that worker hold the whole output. So its rows are written in
``N`` shards, ``<output>/<query>/part-SSSSS-of-NNNNN.<ext>``, each row in the shard
``hash(partition key) mod N`` (:func:`shard_of`), each shard sorted by key, so the bytes are
deterministic for a given secret and do not depend on the runner or on element order.

**Where the switch is.** ``N`` is ``[output] shards`` when the job file gives it; otherwise, for a
query with public partitions, one shard per ``PUBLIC_KEYS_PER_SHARD`` (a million) listed keys, at
most ``MAX_OUTPUT_SHARDS``; otherwise 1. With ``N = 1`` (e.g. the demo) the output is one file,
``<output>/<query>.<ext>``; queries without ``by`` release a row or a few and are always one file.
A query with private partitions over a large log may release millions of rows: its job file
should set ``shards`` (the README says so).

**No observable depends on the data.** ``N`` comes from the job file or the public key file,
never from the rows, and every shard file is written even when no released row falls in it: the
set of files is fixed before the pipeline runs (:func:`query_files`), so the launcher can check
each exists before publishing. (Until stop 30 the default followed the input files' total size,
one shard per 256 MiB; but that size depends on every person's rows, so one person could move a
release across the line and change its set of files — an audit built such a pair.)
The shard of a row is an unkeyed hash of its released partition key: it reveals nothing the row
does not, and the file a key lands in is the same for every secret.

**Why not Beam's ``fileio.WriteToFiles``.** Its file names carry window, pane and shard
numbers that the runner chooses, and it writes no file for a destination without rows — so the
set of files would depend on the data and on the runner. Here each shard is grouped on one worker
and written once through Beam's ``FileSystems`` (any filesystem Beam knows) into the staging
directory; a retried bundle rewrites the same bytes to the same name, and the launcher publishes
only after every expected file exists (:mod:`.publish`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

PUBLIC_KEYS_PER_SHARD = 1_000_000
MAX_OUTPUT_SHARDS = 1024
RELEASE_FORMATS: dict[str, str] = {
    "parquet": ".parquet",
    "avro": ".avro",
    "csv": ".csv",
    "json": ".jsonl",
}
"""Output format → the extension of its files."""
MANIFEST = "manifest.json"
REPORT = "report.html"  # pipelines/report.py: listed in the manifest like the outputs


def auto_shards(public_keys: int | None) -> int:
    """Shards of a partitioned query's output when the job file names none: from the number of
    its public keys (its most rows), or 1 with private partitions (module docstring)."""
    if public_keys is None:
        return 1
    return max(1, min(MAX_OUTPUT_SHARDS, math.ceil(public_keys / PUBLIC_KEYS_PER_SHARD)))


def shard_of(key: tuple[object, ...], shards: int) -> int:
    """The shard of a released row with partition key ``key`` (BLAKE2b of its canonical text)."""
    # imported here: the job file's parser imports this module and must not load Beam
    from userdp.transforms.noisy_combine import canonical_key_string  # noqa: PLC0415

    digest = hashlib.blake2b(canonical_key_string(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


@dataclass(frozen=True)
class QueryFiles:
    """The files of one query's output, relative to the release directory."""

    name: str
    extension: str  # ".parquet", ".csv", ...
    shards: int  # 1: one file <name><ext>

    @property
    def sharded(self) -> bool:
        return self.shards > 1

    @property
    def output(self) -> str:
        """What a reader opens: the file, or the directory of shards (with a trailing ``/``)."""
        return f"{self.name}/" if self.sharded else self.name + self.extension

    def shard(self, i: int) -> str:
        if not self.sharded:
            return self.name + self.extension
        return f"{self.name}/part-{i:05d}-of-{self.shards:05d}{self.extension}"

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(self.shard(i) for i in range(self.shards))


def query_files(
    queries: Sequence[tuple[str, bool, int | None]], extension: str, shards: int | None
) -> dict[str, QueryFiles]:
    """Query name → its files; ``queries``: (name, has ``by`` columns, number of public keys or
    None) per query; ``shards``: the job file's ``[output] shards``, if any."""
    return {
        name: QueryFiles(
            name, extension, (shards if shards is not None else auto_shards(keys)) if by else 1
        )
        for name, by, keys in queries
    }


def occupied_paths(name: str) -> tuple[str, ...]:
    """The paths, lower-cased, that a query called ``name`` may occupy in the release directory
    — in either layout (``name/`` of shards, ``name.ext``) and any format: publishing replaces
    both layouts of an earlier run, and a job may change its format between runs."""
    low = name.lower()
    return (low, *(low + ext for ext in RELEASE_FORMATS.values()))


def first_name_clash(names: Sequence[str]) -> tuple[int, str, int | None] | None:
    """(i, path, j) for the first query i that occupies a path of an earlier query j, or of the
    release's own files (j None: the manifest, the report) — publishing one would delete or
    overwrite the other (compared ignoring case, as filesystems may); None if there is none."""
    owner: dict[str, int | None] = {MANIFEST: None, REPORT: None}
    for i, name in enumerate(names):
        for path in occupied_paths(name):
            if path in owner:
                return i, path, owner[path]
        owner.update(dict.fromkeys(occupied_paths(name), i))
    return None
