"""Compressed CSV and JSONL inputs: which codec a file is read with, and opening it.

``[input] compression`` names the codec of every input file, or ``"auto"`` (the default): each
file's codec follows its extension, as Beam's ``CompressionTypes.AUTO`` does — ``.gz`` gzip,
``.bz2`` bzip2, ``.zst``/``.zstd`` Zstandard, ``.deflate`` deflate (zlib-wrapped, as Beam writes
it, or raw), ``.xz``/``.lzma`` LZMA, anything else uncompressed. Each file is read through
Beam's ``FileSystems`` (any filesystem) and decompressed as a stream on the worker that reads
it (one file, one worker: a compressed file cannot be split).

**A truncated archive is an error, not a short file.** Beam's own decompressing reader stops
quietly where a cut-off file ends, dropping every row after the cut; :class:`Decompressed` checks
that the last stream (gzip member, bzip2 stream, xz stream, zstd frame) reached its end marker and
raises ``EOFError`` otherwise, so the run fails by the file's name and publishes nothing.
Concatenated streams (``cat a.gz b.gz``) read as the concatenation, as ``gzip -d`` does.

Parquet and Avro compress inside the file (per column chunk, per block) and need random access,
so a whole-file codec is refused for them, by name, before anything is charged.

The codec is a fact of the files, like their names: it never depends on a value in them.
"""

from __future__ import annotations

import bz2
import io
import lzma
import zlib
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import IO, Any

import zstandard

# [input] compression → the codec's name. Beam is imported only where a file is opened: the job
# file's parser (`userdp plan`) must not load it.
CODECS: tuple[str, ...] = ("auto", "none", "gzip", "bzip2", "zstd", "deflate", "xz")
# the extensions AUTO recognises (those of Beam's CompressionTypes.detect_compression_type)
SUFFIXES: dict[str, str] = {
    ".gz": "gzip",
    ".bz2": "bzip2",
    ".zst": "zstd",
    ".zstd": "zstd",
    ".deflate": "deflate",
    ".xz": "xz",
    ".lzma": "xz",
}
STREAM_FORMATS = ("csv", "jsonl")  # formats that may be compressed as a whole file
# what a decoder raises on bytes that are not its codec's (bzip2 raises OSError)
CODEC_ERRORS: tuple[type[Exception], ...] = (zlib.error, lzma.LZMAError, zstandard.ZstdError)


def compressed_suffix(path: str) -> str | None:
    """The compression extension ``path`` ends with (lower case), or None."""
    suffix = PurePosixPath(path.rstrip("/")).suffix.lower()
    return suffix if suffix in SUFFIXES else None


def format_suffix(path: str) -> str:
    """The extension that names the format, past a compression extension: ``.csv`` for
    ``logs.csv.gz`` and for ``logs.csv``."""
    p = PurePosixPath(path.rstrip("/"))
    if compressed_suffix(str(p)) is not None:
        p = p.with_suffix("")
    return p.suffix.lower()


def codec_of(path: str, compression: str) -> str:
    """The codec ``path`` is read with under ``[input] compression``: ``"none"`` or a codec name."""
    if compression != "auto":
        return compression
    suffix = compressed_suffix(path)
    return "none" if suffix is None else SUFFIXES[suffix]


def refusal(path: str, fmt: str, compression: str) -> str | None:
    """Why ``path`` cannot be read as ``fmt`` under ``compression``, or None when it can."""
    codec = codec_of(path, compression)
    if fmt in STREAM_FORMATS or codec == "none":
        return None
    return (
        f"a {fmt} file cannot be read through a whole-file codec ({codec}): {fmt} compresses "
        f'inside the file; allowed: compression = "none" or "auto" with an uncompressed '
        f"{fmt} file (only csv and jsonl may be compressed as a whole)"
    )


class _Deflate:
    """A ``.deflate`` stream in either form: zlib-wrapped, as Beam and Hadoop write it (a 2-byte
    header whose check bits make it a multiple of 31, RFC 1950), or raw deflate (RFC 1951).
    The form is told by the header's first two bytes, before anything is decompressed."""

    def __init__(self) -> None:
        self._d: Any = None
        self._head = b""  # a stream's first byte, until its second arrives

    def decompress(self, block: bytes, max_length: int = 0) -> bytes:
        if self._d is None:
            block = self._head + block
            if len(block) < 2:  # e.g. the one byte left after the previous stream ended
                self._head = block
                return b""
            zlib_header = (
                block[0] & 0x0F == 8  # method: deflate
                and block[0] >> 4 <= 7  # window: at most 32 KiB
                and (block[0] << 8 | block[1]) % 31 == 0
            )
            self._d = zlib.decompressobj(wbits=15 if zlib_header else -15)
        out: bytes = self._d.decompress(block, max_length)
        return out

    @property
    def unconsumed_tail(self) -> bytes:
        return b"" if self._d is None else bytes(self._d.unconsumed_tail)

    @property
    def eof(self) -> bool:
        return self._d is not None and bool(self._d.eof)

    @property
    def unused_data(self) -> bytes:
        return b"" if self._d is None else bytes(self._d.unused_data)


OUT_BYTES = 1 << 20  # decompressed bytes asked for at a time
_ZSTD_PIECE = 256  # compressed bytes fed to zstd at a time: at most ~8 MiB out (32 KiB per byte)


class _Limited:
    """One compressed stream's decompressor that gives at most about ``limit`` bytes per call,
    whatever the ratio: a person's row can be a gigabyte of one letter, which one 64 KiB block
    of zstd or bzip2 holds, and a decompressor that gave a block's whole output would hold it.

    zlib, bzip2 and xz stop at ``max_length`` themselves and keep the rest (zlib's unread input
    in ``unconsumed_tail``, bzip2's and xz's output inside, ``needs_input`` False). zstd's
    decompressor has no such limit, so it is fed small pieces, each of which can give only so
    much (a 4-byte RLE block is at most 128 KiB)."""

    def __init__(self, codec: str) -> None:
        self._zstd = codec == "zstd"
        self._zlib = codec in ("gzip", "deflate")
        self._d: Any = _DECOMPRESSORS[codec]()
        self._tail = b""  # input given but not yet used (zlib, zstd)

    @property
    def needs_input(self) -> bool:
        if self._zlib or self._zstd:
            return not self._tail
        return bool(self._d.needs_input)

    @property
    def eof(self) -> bool:
        return bool(self._d.eof)

    @property
    def unused_data(self) -> bytes:
        return bytes(self._d.unused_data) + (self._tail if self._zstd else b"")

    def decompress(self, data: bytes, limit: int) -> bytes:
        if self._zlib:
            out: bytes = self._d.decompress(self._tail + data, limit)
            self._tail = bytes(self._d.unconsumed_tail)
            return out
        if not self._zstd:
            return bytes(self._d.decompress(data, max_length=limit))
        self._tail += data
        parts, size = [], 0
        while self._tail and size < limit and not self._d.eof:
            piece, self._tail = self._tail[:_ZSTD_PIECE], self._tail[_ZSTD_PIECE:]
            parts.append(self._d.decompress(piece))
            size += len(parts[-1])
        return b"".join(parts)


# codec → a fresh decompressor of one stream (``decompress``, ``eof``, ``unused_data``)
_DECOMPRESSORS: dict[str, Callable[[], Any]] = {
    "gzip": lambda: zlib.decompressobj(wbits=31),  # 16 + 15: a gzip header and trailer
    "deflate": _Deflate,  # zlib-wrapped (Beam, Hadoop) or raw deflate
    "bzip2": bz2.BZ2Decompressor,
    "xz": lzma.LZMADecompressor,  # .xz and legacy .lzma containers (FORMAT_AUTO)
    "zstd": lambda: zstandard.ZstdDecompressor().decompressobj(),
}
READ_BYTES = 1 << 16  # compressed bytes fed to the decompressor at a time


class Decompressed(io.RawIOBase):
    """A compressed byte stream, read decompressed; ``EOFError`` if it ends inside a stream.

    Output is produced as the reader asks for it, at most about ``OUT_BYTES`` (plus one zstd
    piece's output) at a time, so memory does not follow the compression ratio (:class:`_Limited`).
    """

    def __init__(self, raw: IO[bytes], codec: str) -> None:
        super().__init__()
        self._raw, self._codec = raw, codec
        self._d = _Limited(codec)
        self._pending = b""
        self._at = 0  # what of _pending was read already (no copy of the rest per read)
        self._started = False  # the current decompressor has been fed bytes
        self._after_stream = False  # a stream has ended: zero bytes before the next are padding
        # only where no stream of the codec begins with a zero byte: gzip (1f 8b), bzip2 (BZh),
        # zstd (28 b5 2f fd, or a skippable frame's 5x 2a 4d 18) and the .xz format (fd 37 7a 58
        # 5a 00) — never raw deflate (a stored block may begin 00) nor a legacy .lzma stream
        # (its properties byte may be 00), which the xz reader also takes
        self._pads = codec in ("gzip", "bzip2", "zstd", "xz")
        self._head = b""  # the file's first bytes, to tell .xz from legacy .lzma

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._at == len(self._pending):
            self._pending, self._at = b"", 0
            if not self._fill():
                return 0
        n = min(len(buffer), len(self._pending) - self._at)
        buffer[:n] = memoryview(self._pending)[self._at : self._at + n]
        self._at += n
        return n

    def _fill(self) -> bool:
        """Decompress more into ``_pending``; False at the end of the input."""
        if self._d.eof:  # one stream ended: what follows is the next stream, or nothing
            rest = self._d.unused_data
            self._d, self._started, self._after_stream = _Limited(self._codec), False, True
            if rest:
                self._feed(rest)
                return True
        if not self._d.needs_input:  # output or input held from the last call
            self._feed(b"")
            return True
        block = self._raw.read(READ_BYTES)
        if not block:
            if self._started and not self._d.eof:
                more = self._d.decompress(b"", OUT_BYTES)  # zlib can hold output, no input
                if more:
                    self._pending += more
                    return True
                raise EOFError("the compressed file ends inside a stream (truncated)")
            return False
        self._feed(block)
        return True

    def _feed(self, block: bytes) -> None:
        if len(self._head) < 6:
            self._head += block[: 6 - len(self._head)]
        pads = self._pads and (self._codec != "xz" or self._head == b"\xfd7zXZ\x00")
        if pads and self._after_stream and not self._started:
            # zero bytes after a stream: xz's stream padding, or a gzip file padded to a block
            # (gzip -d and xz -d accept both); no stream of these codecs begins with a zero byte
            block = block.lstrip(b"\0")
            if not block:
                return
        self._started = True
        self._pending += self._d.decompress(block, OUT_BYTES)

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_input(path: str, compression: str = "auto") -> IO[bytes]:
    """``path`` opened for reading, decompressed as ``[input] compression`` (or, for ``"auto"``,
    its extension) says."""
    if compression not in CODECS:
        raise ValueError(
            f"compression {compression!r} is not supported; allowed: {', '.join(CODECS)}"
        )
    from apache_beam.io.filesystem import CompressionTypes  # noqa: PLC0415
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415

    raw: IO[bytes] = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    codec = codec_of(path, compression)
    if codec == "none":
        return raw
    return io.BufferedReader(Decompressed(raw, codec), buffer_size=READ_BYTES)
