"""Keyed, deterministic, cryptographically strong randomness for noise.

Every noisy value userdp releases is drawn from a :class:`KeyedRng` built from the release secret
(32 bytes from :mod:`secrets`, held by the launcher and the ledger) and a *label* naming what the
draw is for, e.g. ``("visits_per_domain", "example.com", "noise")``.

Construction (a standard PRF-in-counter-mode stream):

* subkey = HMAC-SHA256(secret, ``b"userdp.rng.v1"`` ‖ encode(label)), where ``encode`` writes every
  label part with a type tag and a length prefix, so distinct labels never encode alike;
* block i = SHAKE-256(subkey ‖ uint64_be(i)), of 128·2^min(i, 5) bytes (small first blocks keep a
  one-draw stream cheap, later ones amortise the hashing), concatenated into one byte stream.

Consequences the pipeline relies on:

* Same secret and label ⇒ the same stream. A Beam retry, or a re-run of the same release (the
  job file's ledger keeps its secret per release id), re-draws exactly the same noise, so such a
  re-run cannot publish a second noisy answer to one question (averaging them would shrink the
  noise). A library ``Release`` draws a new secret each time: a new release, budgeted anew.
* Different labels ⇒ computationally independent streams (HMAC-SHA256 is a PRF, SHAKE-256 an XOF),
  so releases for different partitions or queries can be drawn on different workers in any order.
* Neither the standard library's nor NumPy's pseudo-random generators are used; an attacker who
  does not hold the secret cannot predict or reproduce a draw.

Only integers and bits are produced here. The exact samplers in :mod:`.discrete` build every
distribution from :meth:`KeyedRng.randbelow` and :meth:`KeyedRng.randbits`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

SECRET_BYTES = 32
_DOMAIN = b"userdp.rng.v1"
_FIRST_BLOCK = 128
_MAX_BLOCK_DOUBLINGS = 5

LabelPart = str | int | bytes


def new_release_secret() -> bytes:
    """A fresh 32-byte release secret from the operating system's CSPRNG."""
    return secrets.token_bytes(SECRET_BYTES)


def encode_label(label: tuple[LabelPart, ...]) -> bytes:
    """Injective encoding of a label: a type tag and a length prefix for every part.

    Only ``str``, ``int`` and ``bytes`` parts are accepted (``bool`` and ``float`` are refused):
    a float partition key such as ``1.0`` must be canonicalised by the caller first, otherwise
    ``1``, ``1.0`` and ``"1"`` could silently name one stream or three.
    """
    out = bytearray()
    for part in label:
        if isinstance(part, bool) or not isinstance(part, (str, int, bytes)):
            raise TypeError(
                f"label parts must be str, int or bytes; got {type(part).__name__} {part!r}. "
                "Canonicalise keys before using them in a noise label."
            )
        if isinstance(part, str):
            tag, raw = b"s", part.encode("utf-8")
        elif isinstance(part, int):
            tag, raw = b"i", str(part).encode("ascii")
        else:
            tag, raw = b"b", part
        out += tag + len(raw).to_bytes(8, "big") + raw
    return bytes(out)


class KeyedRng:
    """A deterministic byte stream keyed by (release secret, label); see the module docstring.

    Args:
      secret: the release secret, exactly 32 bytes.
      *label: what the stream is for; parts are ``str``, ``int`` or ``bytes``.
    """

    __slots__ = ("_buf", "_counter", "_label", "_nbits", "_pos", "_subkey", "_word")

    def __init__(self, secret: bytes, *label: LabelPart) -> None:
        if not isinstance(secret, bytes) or len(secret) != SECRET_BYTES:
            raise ValueError(
                f"release secret must be {SECRET_BYTES} bytes, got "
                f"{len(secret) if isinstance(secret, bytes) else type(secret).__name__}; "
                "create one with new_release_secret()."
            )
        self._label = tuple(label)
        self._subkey = hmac.new(secret, _DOMAIN + encode_label(self._label), "sha256").digest()
        self._counter = 0
        self._buf = b""
        self._pos = 0
        self._word = 0  # bit reservoir for randbits: _nbits unused low bits of a stream word
        self._nbits = 0

    @property
    def label(self) -> tuple[LabelPart, ...]:
        return self._label

    def __repr__(self) -> str:  # never shows key material
        return f"KeyedRng(label={self._label!r})"

    def _refill(self) -> None:
        size = _FIRST_BLOCK << min(self._counter, _MAX_BLOCK_DOUBLINGS)
        block = hashlib.shake_256(self._subkey + self._counter.to_bytes(8, "big")).digest(size)
        self._counter += 1
        self._buf = self._buf[self._pos :] + block
        self._pos = 0

    def read(self, n: int) -> bytes:
        """The next ``n`` bytes of the stream."""
        if n < 0:
            raise ValueError(f"cannot read a negative number of bytes: {n}")
        while len(self._buf) - self._pos < n:
            self._refill()
        out = self._buf[self._pos : self._pos + n]
        self._pos += n
        return out

    def _word64(self) -> int:
        """The next 8 bytes of the stream as an integer."""
        pos = self._pos
        if len(self._buf) - pos < 8:
            self._refill()
            pos = 0
        self._pos = pos + 8
        return int.from_bytes(self._buf[pos : pos + 8], "big")

    def randbits(self, k: int) -> int:
        """A uniform integer in [0, 2**k).

        Small requests (k ≤ 64) are served from a 64-bit reservoir taken from the byte stream, so
        a 1-bit draw costs one shift rather than a byte; bits left over when a request does not fit
        are discarded (still uniform and deterministic). Larger requests read whole bytes.
        """
        if 0 <= k <= self._nbits:
            self._nbits -= k
            r = self._word & ((1 << k) - 1)
            self._word >>= k
            return r
        if k <= 64:
            if k < 0:
                raise ValueError(f"number of bits must be non-negative, got {k}")
            word = self._word64()
            self._word = word >> k
            self._nbits = 64 - k
            return word & ((1 << k) - 1)
        nbytes = (k + 7) >> 3
        return int.from_bytes(self.read(nbytes), "big") >> ((nbytes << 3) - k)

    def randbelow(self, n: int) -> int:
        """A uniform integer in [0, n), exact (rejection sampling on ⌈log2 n⌉ bits)."""
        if n <= 1:
            if n == 1:
                return 0
            raise ValueError(f"randbelow needs a positive bound, got {n}")
        k = (n - 1).bit_length()
        while True:
            if k <= self._nbits:  # the reservoir fast path of randbits, inlined: the hot loop
                self._nbits -= k
                r = self._word & ((1 << k) - 1)
                self._word >>= k
            else:
                r = self.randbits(k)
            if r < n:
                return r

    def uniform_open01(self) -> float:
        """(2m + 1)/2^53 for a uniform m < 2^52: an exact float strictly inside (0, 1).

        Midpoints of 2^52 equal cells, symmetric about 1/2. (The tempting (m + 1/2)/2^53 for a
        53-bit m needs 54 significant bits and rounds to 1.0 at m = 2^53 − 1.) Used only by the
        heavy-tailed continuous samplers, whose docstrings state the floating-point risk; the
        exact samplers never touch floats.
        """
        return ((self.randbits(52) << 1) | 1) * (1.0 / (1 << 53))


def derive_release_secret(file_key: bytes, nonce: bytes) -> bytes:
    """The release secret when the operator keeps a key file (``[release] secret_path``):
    HMAC-SHA256(file key, label ‖ nonce). The nonce (the ledger's per-release secret, or a fresh
    one) may travel with the job; without the file key it determines nothing."""
    if not isinstance(file_key, bytes) or len(file_key) < SECRET_BYTES:
        raise ValueError(f"a key file must hold at least {SECRET_BYTES} bytes")
    return hmac.new(file_key, b"userdp.release.v1" + nonce, "sha256").digest()


def key_check_value(file_key: bytes) -> str:
    """Identifies a key file without revealing it: HMAC-SHA256 of a fixed label, truncated to 128
    bits (a preimage or a key recovery from it is as hard as breaking HMAC)."""
    return "kcv:" + hmac.new(file_key, b"userdp.key-check.v1", "sha256").hexdigest()[:32]


class QueryKey:
    """The noise streams of one query: ``key.rng(partition, purpose)``.

    Its 32 bytes are derived from the release secret for this query alone (``ReleaseKey.for_query``)
    — what a worker holding it can compute is this query's noise, never another query's and never
    the release secret. Pipelines hand each noise step the key of its own query only.
    """

    __slots__ = ("_query", "_secret")

    def __init__(self, secret: bytes, query: str) -> None:
        KeyedRng(secret)  # validates length and type with the same message
        self._secret, self._query = secret, query

    @property
    def query(self) -> str:
        return self._query

    def rng(self, *label: LabelPart) -> KeyedRng:
        return KeyedRng(self._secret, *label)

    def __repr__(self) -> str:  # never shows the key
        return f"QueryKey({self._query!r}, <key>)"

    def __reduce__(self) -> tuple[type[QueryKey], tuple[bytes, str]]:
        return (QueryKey, (self._secret, self._query))


class ReleaseKey:
    """The release secret, as a factory of labelled streams: ``key.rng("q1", "example.com")``.

    The launcher holds the ``ReleaseKey``; pipelines carry only what it derives — one
    :class:`QueryKey` per query (``for_query``) and non-noise subkeys (``subkey``) — so a job graph
    never contains the release secret (docs/threat-model.md).
    """

    __slots__ = ("_secret",)

    def __init__(self, secret: bytes) -> None:
        KeyedRng(secret)  # validates length and type with the same message
        self._secret = secret

    @classmethod
    def generate(cls) -> ReleaseKey:
        return cls(new_release_secret())

    def rng(self, *label: LabelPart) -> KeyedRng:
        return KeyedRng(self._secret, *label)

    def for_query(self, query: str) -> QueryKey:
        """The key of one query's noise, computationally independent of every other query's."""
        return QueryKey(KeyedRng(self._secret, "query", query).read(SECRET_BYTES), query)

    def subkey(self, *label: LabelPart) -> bytes:
        """32 bytes derived for a non-noise purpose, e.g. the keyed hashes of contribution
        bounding; computationally independent of every noise stream (its label differs)."""
        return KeyedRng(self._secret, "subkey", *label).read(SECRET_BYTES)

    def __repr__(self) -> str:  # never shows the secret
        return "ReleaseKey(<secret>)"

    def __reduce__(self) -> tuple[type[ReleaseKey], tuple[bytes]]:
        return (ReleaseKey, (self._secret,))
