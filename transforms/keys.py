"""Noise keys that workers fetch themselves, so that no noise key travels in the job graph.

Without a key file, the launcher derives one :class:`~transforms.mechanisms.rng.QueryKey` per query
from the release secret and pickles it into that query's noise step: whoever can read the staged
job graph (a Dataflow staging bucket, a Flink job server) can recompute that query's noise and
subtract it. With ``[release] secret_path``, the graph carries only :class:`FileQueryKey`: the key
file's path, the release's nonce and the query name. Each worker process reads the key file on
first use (Beam's ``FileSystems``, so any filesystem the workers can reach: a mounted secret, a
Cloud Storage object readable by the workers' service account only) and derives the same
``QueryKey`` the launcher would; the file's content never enters the graph. Threat model:
``docs/threat-model.md``.
"""

from __future__ import annotations

import os
import stat
import threading
from typing import Any, Protocol

from .mechanisms.rng import (
    SECRET_BYTES,
    KeyedRng,
    LabelPart,
    QueryKey,
    ReleaseKey,
    derive_release_secret,
)

MAX_KEY_FILE_BYTES = 4096


class NoiseKey(Protocol):
    """What a noise step needs: the query's labelled streams."""

    @property
    def query(self) -> str: ...

    def rng(self, *label: LabelPart) -> KeyedRng: ...


class KeySource(Protocol):
    """Where a transform takes its keys from when it is built: a query's noise key and non-noise
    subkeys. A :class:`~transforms.mechanisms.rng.ReleaseKey` (tests, a library user with a secret
    in hand) and the launcher's :class:`ReleaseKeys` both are one. Transforms keep only what they
    derive, never the source, so a job graph never holds the release secret."""

    def for_query(self, query: str) -> NoiseKey: ...

    def subkey(self, *label: LabelPart) -> bytes: ...


class KeyFileError(ValueError):
    """The key file cannot be read or holds too few bytes; names the path, never the content."""


def read_key_file(path: str) -> bytes:
    """The key file's bytes (32 to 4096 of them); :class:`KeyFileError` otherwise."""
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415 (keeps the core light)

    if "://" not in path:  # local: a FIFO (or a device) blocked the open, or read without end
        try:
            regular = stat.S_ISREG(os.stat(path).st_mode)
        except OSError:
            regular = True  # let the open below name the reason
        if not regular:
            raise KeyFileError(f"release.secret_path {path!r} is not a regular file")
    try:
        with FileSystems.open(path) as f:
            data: bytes = f.read(MAX_KEY_FILE_BYTES + 1)
    except Exception as e:
        reason = getattr(e, "strerror", None) or type(e).__name__
        raise KeyFileError(f"release.secret_path {path!r} cannot be read ({reason})") from None
    if not SECRET_BYTES <= len(data) <= MAX_KEY_FILE_BYTES:
        raise KeyFileError(
            f"release.secret_path {path!r} holds {len(data)} bytes; allowed: {SECRET_BYTES} to "
            f"{MAX_KEY_FILE_BYTES} random bytes — create one with `userdp keygen PATH`"
        )
    return data


_CACHE: dict[tuple[str, bytes, str], QueryKey] = {}
_LOCK = threading.Lock()


class FileQueryKey:
    """A query's noise key, resolved on the worker from the key file (module docstring)."""

    __slots__ = ("_nonce", "_path", "_query")

    def __init__(self, path: str, nonce: bytes, query: str) -> None:
        self._path, self._nonce, self._query = path, nonce, query

    @property
    def query(self) -> str:
        return self._query

    def _resolve(self) -> QueryKey:
        cache_key = (self._path, self._nonce, self._query)
        with _LOCK:
            key = _CACHE.get(cache_key)
            if key is None:
                secret = derive_release_secret(read_key_file(self._path), self._nonce)
                key = _CACHE[cache_key] = ReleaseKey(secret).for_query(self._query)
        return key

    def rng(self, *label: LabelPart) -> KeyedRng:
        return self._resolve().rng(*label)

    def __repr__(self) -> str:
        return f"FileQueryKey({self._path!r}, {self._query!r})"

    def __reduce__(self) -> tuple[type[FileQueryKey], tuple[str, bytes, str]]:
        return (FileQueryKey, (self._path, self._nonce, self._query))


class ReleaseKeys:
    """The launcher's view of a release's keys: what each pipeline step may be given.

    ``for_query`` → the noise key of one query (a :class:`QueryKey`, or a :class:`FileQueryKey`
    with a key file); ``subkey`` → 32 derived bytes for non-noise keyed hashes (bounding, chunks),
    which may travel in the graph: they decide which of a person's own rows are kept and which
    chunk a person joins — choices independent of every other person's data, so knowing them
    breaks no guarantee.
    """

    def __init__(self, release: ReleaseKey, key_file: str | None = None, nonce: bytes = b""):
        self._release, self._key_file, self._nonce = release, key_file, nonce

    @classmethod
    def from_secret(cls, secret: bytes, key_file: str | None) -> ReleaseKeys:
        """``secret``: the ledger's per-release secret or a fresh one. With a key file it is the
        nonce, and the release secret is derived from both (the launcher reads the file)."""
        if key_file is None:
            return cls(ReleaseKey(secret))
        derived = derive_release_secret(read_key_file(key_file), secret)
        return cls(ReleaseKey(derived), key_file, secret)

    @property
    def keys_in_graph(self) -> bool:
        """True when noise keys are pickled into the job graph (no key file)."""
        return self._key_file is None

    def for_query(self, query: str) -> NoiseKey:
        if self._key_file is None:
            return self._release.for_query(query)
        return FileQueryKey(self._key_file, self._nonce, query)

    def subkey(self, *label: LabelPart) -> bytes:
        return self._release.subkey(*label)

    def __repr__(self) -> str:
        return "ReleaseKeys(<secret>)"

    def __reduce__(self) -> Any:
        raise TypeError(
            "ReleaseKeys holds the release secret and must stay on the launcher: give pipeline "
            "steps for_query(name) or subkey(...) instead"
        )
