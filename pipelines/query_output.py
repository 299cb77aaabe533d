"""Writing one query's released rows: one file, or the shards of a partitioned query.

Every column has a declared type — the ``by`` columns their input types, the released columns
the kind's — never one inferred from the values, so an output's schema does not depend on the
data: not on which partitions survived selection, nor on whether a value is missing (⊥). Rows
are sorted within a file, so the bytes never depend on element order or on the runner. Which
files exist is fixed before the pipeline runs (:mod:`.output_layout`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.pvalue import PCollection
from apache_beam.transforms import combiners

from userdp.transforms.noisy_combine import canonical_key_string

from .output_layout import QueryFiles, shard_of
from .sinks import release_bytes

_ARROW_TYPES = {
    "float64": pa.float64(),
    "int64": pa.int64(),
    "string": pa.string(),
    "bool": pa.bool_(),
}


def released_table(
    rows: Iterable[dict[str, Any]], by: pa.Schema, columns: Sequence[tuple[str, str]]
) -> pa.Table:
    """Released rows → a table of the declared schema, sorted by partition key, then by the
    released columns (kinds with several rows and no partition key, e.g. one per coordinate)."""
    order = [*by.names, *(c for c, _ in columns)]
    ordered = sorted(rows, key=lambda r: canonical_key_string(tuple(r[c] for c in order)))
    fields = [*by, *(pa.field(c, _ARROW_TYPES[t]) for c, t in columns)]
    return pa.table(
        {f.name: pa.array([r[f.name] for r in ordered], f.type) for f in fields}, pa.schema(fields)
    )


def write_file(
    rows: Iterable[dict[str, Any]],
    by: pa.Schema,
    columns: Sequence[tuple[str, str]],
    path: str,
    fmt: str,
) -> str:
    """One file of released rows (possibly none: a shard no released key fell in); its path."""
    data = release_bytes(released_table(rows, by, columns), fmt)
    with FileSystems.create(path) as f:
        f.write(data)
    return path


def _key_shard(row: dict[str, Any], names: Sequence[str], shards: int) -> tuple[int, Any]:
    return shard_of(tuple(row[c] for c in names), shards), row


class _FileWriter:
    """Writes one query's files: ``write(shard, rows)``; called on a grouped shard, or on the
    whole output as shard 0 when it is one file."""

    def __init__(
        self,
        by: pa.Schema,
        columns: Sequence[tuple[str, str]],
        out_dir: str,
        files: QueryFiles,
        fmt: str,
    ) -> None:
        self.by, self.columns, self.out_dir, self.files, self.fmt = by, columns, out_dir, files, fmt

    def write(self, shard: int, rows: Iterable[dict[str, Any]]) -> str:
        path = FileSystems.join(self.out_dir, self.files.shard(shard))
        return write_file(rows, self.by, self.columns, path, self.fmt)

    def one_file(self, rows: list[dict[str, Any]]) -> str:
        return self.write(0, rows)

    def grouped_shard(self, element: tuple[int, dict[str, Iterable[Any]]]) -> str:
        """(shard index, {"rows": its rows, "shard": [0]}) from the CoGroupByKey."""
        shard, grouped = element
        return self.write(shard, grouped["rows"])


class WriteQueryOutput(beam.PTransform[Any, Any]):
    """A query's released ``beam.Row``s → its files under ``out_dir``; the output is their paths.

    One file (``files.shards == 1``): the rows are gathered on one worker and written. Shards:
    each row goes to shard ``hash(key) mod N``; each shard is grouped on one worker and written,
    an empty shard too (joined with the list of every shard index), so no worker holds more than
    its shard and the set of files does not depend on the data.
    """

    def __init__(
        self,
        by: pa.Schema,
        columns: Sequence[tuple[str, str]],
        out_dir: str,
        files: QueryFiles,
        fmt: str,
    ) -> None:
        super().__init__()
        self._writer = _FileWriter(by, list(columns), out_dir, files, fmt)

    def expand(self, released: PCollection[Any]) -> PCollection[Any]:
        dicts = released | "AsDicts" >> beam.Map(lambda row: row.as_dict())
        writer, files = self._writer, self._writer.files
        if not files.sharded:
            written: PCollection[Any] = (
                dicts | "Collect" >> combiners.ToList() | "Write" >> beam.Map(writer.one_file)
            )
            return written
        keyed = dicts | "ToShard" >> beam.Map(_key_shard, writer.by.names, files.shards)
        every = released.pipeline | "EveryShard" >> beam.Create(
            [(i, 0) for i in range(files.shards)]
        )
        sharded: PCollection[Any] = (
            {"rows": keyed, "shard": every}
            | "GroupByShard" >> beam.CoGroupByKey()
            | "WriteShards" >> beam.Map(writer.grouped_shard)
        )
        return sharded
