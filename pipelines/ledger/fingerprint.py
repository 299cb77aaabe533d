"""The input fingerprint of a release, and the data periods its input files belong to.

A fingerprint is the SHA-256 of the sorted list of (path, size in bytes, modification time) of
every input file, from Beam's ``FileSystems.match``, so it works for local paths and for ``gs://``
(and any other Beam file system) alike, together with *artifacts*: named digests of everything else
the release reads that could change its values — key files, the source of user functions, the
userdp code, a check value of the secret file (``pipelines/release_inputs.py`` lists them). On
Cloud Storage an overwritten object is a new generation with a new update time, so a replaced
object changes the fingerprint. No data is read. The ledger refuses to re-run a release id on a
different fingerprint (:mod:`.store`), because the same noise on different data would publish the
difference.

Limits: a file changed in place with its size and modification time restored is not detected (only
a content hash would detect it); file systems that report no modification time (Beam gives 0.0) are
fingerprinted by path and size only.

Fingerprint the same file list the pipeline reads (``InputSchema.files``), not the glob again, so a
file that appears between the two is not missed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .errors import LedgerError
from .model import check_name

FINGERPRINT_VERSION = 2  # 2: artifacts beside the input files


@dataclass(frozen=True, order=True)
class InputFile:
    path: str
    size: int
    mtime: float  # seconds since the epoch, as the file system reports it; 0.0 when unknown


@dataclass(frozen=True)
class InputFingerprint:
    digest: str  # "sha256:<64 hex digits>"
    files: tuple[InputFile, ...]
    artifacts: tuple[tuple[str, str], ...] = ()  # (name, digest), sorted


def fingerprint_of(
    files: Iterable[InputFile], artifacts: Mapping[str, str] | None = None
) -> InputFingerprint:
    """The fingerprint of explicit file facts (sorted, duplicates removed) and artifacts."""
    listed = tuple(sorted(set(files)))
    extra = tuple(sorted((artifacts or {}).items()))
    payload = json.dumps(
        {
            "version": FINGERPRINT_VERSION,
            "files": [[f.path, f.size, repr(f.mtime)] for f in listed],
            "artifacts": [list(a) for a in extra],
        },
        separators=(",", ":"),
    )
    digest = "sha256:" + hashlib.sha256(payload.encode()).hexdigest()
    return InputFingerprint(digest, listed, extra)


KEYED_PREFIX = "hmac-sha256:"


def new_fingerprint_key() -> bytes:
    """A release's fingerprint key: 32 random bytes that never leave the ledger."""
    return secrets.token_bytes(32)


def keyed_fingerprint(key: bytes, digest: str) -> str:
    """What the ledger stores and shows of a release's input fingerprint: the digest keyed with
    the release's own ``fingerprint_key`` (HMAC-SHA-256).

    The plain digest hashes the input files' sizes, which depend on every person's rows; with the
    paths and times known (or 0.0 where a file system reports none) it is inverted by trying
    sizes, and ``ledger history``, an auditor's role and a refused re-run's message showed it.
    Keyed, it tells only whether two runs of one release id read the same files — all the re-run
    check needs. The key is not the release secret: with ``[release] secret_path`` that secret is
    a nonce in the job graph, which untrusted readers may hold. It never leaves the ledger, and
    the auditor's grants (docs/ledger.md) do not include it."""
    mac = hmac.new(key, b"userdp.input-fingerprint.v1\x00" + digest.encode(), hashlib.sha256)
    return KEYED_PREFIX + mac.hexdigest()


def input_fingerprint(
    paths: str | Sequence[str], artifacts: Mapping[str, str] | None = None
) -> InputFingerprint:
    """Matches every path or glob with ``FileSystems.match`` and fingerprints what it finds.

    Raises :class:`LedgerError` when a path or glob matches no file (a fingerprint of nothing
    could not tell two inputs apart).
    """
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415 (Beam loads slowly)

    patterns = [paths] if isinstance(paths, str) else list(paths)
    if not patterns:
        raise LedgerError("no input paths to fingerprint")
    found: list[InputFile] = []
    for pattern, result in zip(patterns, FileSystems.match(patterns), strict=True):
        if not result.metadata_list:
            raise LedgerError(f"input path {pattern!r} matched no files: nothing to fingerprint")
        found += (
            InputFile(m.path, int(m.size_in_bytes), float(m.last_updated_in_seconds))
            for m in result.metadata_list
        )
    return fingerprint_of(found, artifacts)


def periods_from_paths(paths: Iterable[str], pattern: str) -> tuple[str, ...]:
    """The distinct data periods of the input files, sorted: the ``period`` group of ``pattern``
    (a regular expression searched in each path), or the whole match when it has no such group.

    Every file must match: a file whose period is unknown would be read without being charged to
    any period, so it is refused. E.g. ``pattern = r"week=(?P<period>\\d{4}-W\\d{2})"``.
    """
    rx = re.compile(pattern)
    periods = set()
    for path in paths:
        m = rx.search(path)
        if m is None:
            raise LedgerError(
                f"input file {path} does not match the period rule {pattern!r}: every input file "
                "must name its period, or its data would be read without being charged"
            )
        period = m.group("period") if "period" in rx.groupindex else m.group(0)
        periods.add(check_name(period, f"period of {path}"))
    if not periods:
        raise LedgerError(f"no input files to take periods from with the rule {pattern!r}")
    return tuple(sorted(periods))
