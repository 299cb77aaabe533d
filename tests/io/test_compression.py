"""pipelines/compression.py: codecs from names, streaming decompression, truncation caught."""

from __future__ import annotations

import bz2
import gzip
import lzma
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zstandard

from userdp.pipelines.compression import READ_BYTES, codec_of, format_suffix, open_input


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


COMPRESS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "gzip": (".gz", gzip.compress),
    "bzip2": (".bz2", bz2.compress),
    "xz": (".xz", lzma.compress),
    "zstd": (".zst", lambda b: zstandard.ZstdCompressor().compress(b)),
    "deflate": (".deflate", _deflate),
}
DATA = b"".join(b'{"person_id": %d, "domain": "d%d"}\n' % (i, i % 97) for i in range(50_000))


def read_all(path: Path, compression: str = "auto") -> bytes:
    with open_input(str(path), compression) as f:
        return f.read()


@pytest.mark.parametrize("codec", COMPRESS)
def test_each_codec_reads_back_the_bytes_by_name_and_by_key(tmp_path: Path, codec: str) -> None:
    suffix, compress = COMPRESS[codec]
    blob = compress(DATA)  # once: gzip stamps the current second into its header
    named = tmp_path / f"logs.jsonl{suffix}"
    named.write_bytes(blob)
    assert codec_of(str(named), "auto") == codec
    assert read_all(named) == DATA
    unnamed = tmp_path / "logs.data"
    unnamed.write_bytes(blob)
    assert read_all(unnamed, codec) == DATA
    assert read_all(unnamed, "auto") == blob  # no extension: read as it is


@pytest.mark.parametrize("codec", COMPRESS)
def test_a_truncated_file_raises_instead_of_ending_early(tmp_path: Path, codec: str) -> None:
    suffix, compress = COMPRESS[codec]
    whole = compress(DATA)
    path = tmp_path / f"cut{suffix}"
    path.write_bytes(whole[: len(whole) * 2 // 3])
    with pytest.raises(EOFError, match="ends inside a stream"):
        read_all(path)


@pytest.mark.parametrize("codec", ["gzip", "bzip2", "xz", "zstd"])
def test_concatenated_streams_read_as_their_concatenation(tmp_path: Path, codec: str) -> None:
    suffix, compress = COMPRESS[codec]
    path = tmp_path / f"two{suffix}"
    path.write_bytes(compress(DATA[:1000]) + compress(DATA[1000:]))
    assert read_all(path) == DATA


@pytest.mark.parametrize("codec", ["gzip", "bzip2", "xz", "zstd"])
@pytest.mark.parametrize("zeros", [4, 512, READ_BYTES + 8])
def test_zero_padding_after_a_stream_is_the_end_not_a_corrupt_file(
    tmp_path: Path, codec: str, zeros: int
) -> None:
    """xz's stream padding (multiples of 4 zero bytes) and a gzip file padded to a block are
    valid (`xz -t`, `gzip -dc` accept them); they were refused as unreadable. Zeros between two
    streams are skipped too; a file that starts with zeros is still not a stream."""
    suffix, compress = COMPRESS[codec]
    path = tmp_path / f"padded{suffix}"
    path.write_bytes(compress(DATA[:1000]) + b"\0" * zeros)
    assert read_all(path) == DATA[:1000]
    path.write_bytes(compress(DATA[:1000]) + b"\0" * zeros + compress(DATA[1000:2000]))
    assert read_all(path) == DATA[:2000]
    path.write_bytes(b"\0" * 4 + compress(DATA[:1000]))
    with pytest.raises((OSError, EOFError, ValueError, lzma.LZMAError, zlib.error,
                        zstandard.ZstdError)):  # fmt: skip
        read_all(path)


def test_streams_that_may_begin_with_a_zero_byte_still_concatenate(tmp_path: Path) -> None:
    """Zeros are skipped only where no stream begins with one: a raw-deflate stream that opens
    with a stored block, or a legacy .lzma stream with properties byte 0, read as before."""
    first = _deflate(DATA[:100])
    stored = zlib.compressobj(0, zlib.DEFLATED, -15)
    second = stored.compress(DATA[100:200]) + stored.flush(zlib.Z_FULL_FLUSH) + stored.flush()
    assert second[0] == 0  # a non-final stored block's header
    (tmp_path / "two.deflate").write_bytes(first + second)
    assert read_all(tmp_path / "two.deflate") == DATA[:200]
    filters = [{"id": lzma.FILTER_LZMA1, "lc": 0, "lp": 0, "pb": 0}]
    alone = [lzma.compress(d, format=lzma.FORMAT_ALONE, filters=filters)
             for d in (DATA[:100], DATA[100:200])]  # fmt: skip
    assert alone[1][0] == 0  # the properties byte
    (tmp_path / "two.lzma").write_bytes(alone[0] + alone[1])
    assert read_all(tmp_path / "two.lzma", "xz") == DATA[:200]


STREAMING: dict[str, Callable[[], Any]] = {  # compressors fed piece by piece
    "gzip": lambda: zlib.compressobj(6, zlib.DEFLATED, 31),
    "bzip2": bz2.BZ2Compressor,
    "xz": lzma.LZMACompressor,
    "zstd": lambda: zstandard.ZstdCompressor().compressobj(),
    "deflate": lambda: zlib.compressobj(6, zlib.DEFLATED, -15),
}


@pytest.mark.parametrize("codec", COMPRESS)
def test_one_huge_compressible_line_is_never_held_whole(tmp_path: Path, codec: str) -> None:
    """A person's 64 MiB line of one letter compresses to 83 bytes (bzip2) – 64 KiB (gzip),
    within one fed block: each decompressor gave the block's whole output at once, so the
    launcher's one-byte look at the file held 64 MiB (1 GiB in the audit's repro, 2.3 GB of
    memory, and a MemoryError exit under a cap). Memory is bounded now, whatever the ratio."""
    c, piece = STREAMING[codec](), b"u" * (1 << 20)
    blob = b"".join(c.compress(piece) for _ in range(64)) + c.flush()
    path = tmp_path / f"bomb{COMPRESS[codec][0]}"
    path.write_bytes(blob)
    tracemalloc.start()
    try:
        with open_input(str(path)) as f:
            assert f.read(1) == b"u"
            total = 1 + sum(len(b) for b in iter(lambda: f.read(1 << 20), b""))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == 64 << 20
    assert peak < 24 << 20, f"{peak / 2**20:.0f} MiB held"


def test_an_empty_compressed_file_has_no_bytes(tmp_path: Path) -> None:
    (tmp_path / "empty.csv.gz").write_bytes(b"")
    assert read_all(tmp_path / "empty.csv.gz") == b""


def test_format_and_codec_from_names() -> None:
    assert format_suffix("data/logs.csv.gz") == ".csv"
    assert format_suffix("data/LOGS.JSONL.ZST") == ".jsonl"
    assert format_suffix("data/logs.parquet") == ".parquet"
    assert codec_of("x.CSV.BZ2", "auto") == "bzip2"
    assert codec_of("x.csv", "auto") == "none"
    assert codec_of("x.csv", "gzip") == "gzip"
    with pytest.raises(ValueError, match="compression 'rar' is not supported; allowed: auto"):
        open_input("x.csv", "rar")


def test_deflate_files_as_beam_and_hadoop_write_them(tmp_path: Path) -> None:
    """Beam's and Hadoop's .deflate is zlib-wrapped (RFC 1950); raw deflate is read too."""
    path = tmp_path / "x.jsonl.deflate"
    for level in (1, 6, 9):
        path.write_bytes(zlib.compress(DATA, level) + zlib.compress(DATA[:100], level))
        assert read_all(path) == DATA + DATA[:100]
    from apache_beam.io.filesystem import CompressionTypes  # noqa: PLC0415
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415

    with FileSystems.create(str(path), compression_type=CompressionTypes.DEFLATE) as f:
        f.write(DATA)
    assert read_all(path) == DATA
    # the first stream ends one byte before the first read block does: the next stream's first
    # block is one byte, too short to tell its form by, so it waits for the second byte
    payload = bytes(range(256)) * 256
    first = zlib.compress(payload[: READ_BYTES - 1 - 11], 0)  # stored: 2 + 5 + n + 4 bytes
    assert len(first) == READ_BYTES - 1
    path.write_bytes(first + zlib.compress(b"second", 9))
    assert read_all(path) == payload[: READ_BYTES - 12] + b"second"
