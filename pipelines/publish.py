"""Releases that are complete or absent: staged by the pipeline, published by the launcher.

The pipeline never writes into the release directory. It writes each query's output into a
*staging* directory beside it (``<parent>/.<name>.userdp-staging-<token>/``, on the same
filesystem, created and probed before the ledger is charged). When the pipeline has finished, the
launcher

1. checks that every expected output file exists — the set is fixed before the run
   (:mod:`.output_layout`: one file per query, or N shards) — and reads its size and SHA-256
   (they go into the manifest, so a reader can verify the files it got);
2. removes the previous ``manifest.json`` of the release directory, if any — from here until step 4
   the directory holds no manifest, i.e. no complete release;
3. removes the outputs the previous manifest listed for queries this release does not have,
   then moves the staged outputs in, replacing the previous run's files of each query (a rename
   on local filesystems; copy and delete on object stores);
4. writes ``manifest.json`` last, through a temporary name and a rename: a release directory with a
   manifest is complete, and the manifest lists every file of it.

A run that fails before step 2 has published nothing: its staging directory is deleted, and the
ledger may release its charge (``pipelines/job.py``). A run killed outright (SIGKILL, the
out-of-memory killer) cannot delete it; the next run beside the same release does
(:func:`remove_abandoned_staging`): a local run holds an ``flock`` on its staging directory for its
whole life, so a staging directory nobody holds, older than an hour, belongs to a dead run.

A run that fails during steps 2–4 leaves a directory without a manifest — incomplete, never
complete-looking — and keeps its charge; re-running the same release id (free, same secret)
completes it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from apache_beam.io.filesystems import FileSystems

from .config_paths import no_filesystem
from .interrupts import caused_by
from .output_layout import MANIFEST, REPORT, QueryFiles

_PROBE = ".userdp-write-probe"


class OutputLocationError(ValueError):
    """The release (or a staging) location cannot be written: names the path and the reason."""


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or type(e).__name__


def is_local_path(directory: str) -> bool:
    """A path on this machine's disk (os calls apply), not an object store's ``scheme://``."""
    return "://" not in directory


def _make_dirs(directory: str) -> None:
    """Creates a local directory and its missing parents (object stores have no directories).

    Parents made for a run stay after it, as ``mkdir -p`` leaves them: removing them again on a
    failed run would race with a concurrent launcher that found them and is about to make its
    own staging directory inside (the race :func:`probe_writable` avoids by making none)."""
    if is_local_path(directory):
        os.makedirs(directory, exist_ok=True)


PROBE_ATTEMPTS = 50


def _probe_directory(directory: str) -> str:
    """Where the write probe goes: ``directory`` when it exists, else (a local path) its nearest
    existing ancestor. Whoever may create files there may create the missing directories, so
    probing there proves as much — and creates no directory that another launcher probing at
    once could remove under this one's feet, or that a removal could leave behind."""
    if not is_local_path(directory):
        return directory  # object stores have no directories: the probe names the path itself
    d = os.path.abspath(directory)
    missing = []
    while not os.path.lexists(d):
        d, name = os.path.split(d)
        missing.append(name)
    _check_names(d, missing)
    return d


def _check_names(existing: str, missing: Sequence[str]) -> None:
    """Refuses a missing component whose name the filesystem of ``existing`` cannot hold (longer
    than its ``NAME_MAX``, 255 bytes on most): the probe, written in ``existing``, would pass, and
    the run would fail only where the directory is made — after the charge."""
    try:
        limit = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        return  # no limit known here: the directory's creation reports it
    for name in missing:
        if len(os.fsencode(name)) > limit:
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))


def probe_writable(directory: str, what: str) -> None:
    """Proves that files can be created in ``directory`` (or, when it does not exist yet, in its
    nearest existing ancestor, where it can then be made) by creating and removing a probe file
    of its own name, and leaves no trace: it creates no directory. The names it would have to
    create are checked against the filesystem's limit there (:func:`_check_names`).

    Launchers may probe the same new directory at once (scheduled runs sharing a dead-letter or
    release parent). An earlier probe created the missing directories and removed them again,
    so concurrent launchers removed each other's directories (failing legitimate runs with
    exit 2, or, as Beam's ``create`` re-made a removed directory, leaving it behind: four
    launchers left one in each of 10 trials). A probe that still loses its directory (removed
    by someone else, ``FileNotFoundError``) tries again after a random pause of up to 10 ms,
    ``PROBE_ATTEMPTS`` times in all."""
    try:
        FileSystems.get_filesystem(directory)
    except Exception:  # ValueError: no such scheme; BeamIOError: its library is missing
        raise OutputLocationError(no_filesystem(what, directory)) from None
    for attempt in range(PROBE_ATTEMPTS):
        try:  # join too: a scheme no Beam filesystem serves raises there (exit 2, not a "bug")
            probe = FileSystems.join(
                _probe_directory(directory), f"{_PROBE}-{secrets.token_hex(6)}"
            )
            with FileSystems.create(probe) as f:
                f.write(b"")
            FileSystems.delete([probe])
            return
        except Exception as e:
            if _vanished(e) and attempt + 1 < PROBE_ATTEMPTS:
                time.sleep(secrets.randbelow(10_000) / 1e6)  # out of step with the others
                continue
            raise OutputLocationError(
                f"{what} {directory!r} cannot be written ({_reason(e)}): check that it is a "
                "directory (not under a regular file), that it exists or can be created, and "
                "that this user may write to it"
            ) from None


def _vanished(e: BaseException) -> bool:
    """A local directory removed under us (or Beam's wrapper of that error)."""
    return caused_by(e, FileNotFoundError) or "No such file or directory" in str(e)


def check_staging_name(output: str) -> None:
    """Refuses an ``output`` whose staging directory's name (``.<name>.userdp-staging-<12 hex>``,
    29 bytes more than the output's own name) the filesystem cannot hold — the probes pass
    such a name, and the staging directory is made after the charge."""
    if not is_local_path(output):
        return
    parent, name = os.path.split(os.path.abspath(output.rstrip("/")))
    staging = f"{_staging_prefix(name)}{secrets.token_hex(6)}"
    try:
        _check_names(_probe_directory(parent), [staging])
    except OSError as e:
        raise OutputLocationError(
            f"output.path {output!r}: its staging directory's name ({len(os.fsencode(staging))} "
            f"bytes: the output's name and 29 more) is too long for this filesystem "
            f"({_reason(e)}); shorten the output directory's name"
        ) from None


def staging_parent(output: str) -> str:
    """The directory that holds the staging directory of ``output`` (its parent)."""
    return str(FileSystems.split(output.rstrip("/"))[0])


def file_sha256(path: str) -> tuple[str, int]:
    """(hex SHA-256, size in bytes) of a file on any Beam filesystem, read in 1 MiB blocks."""
    digest, size = hashlib.sha256(), 0
    with FileSystems.open(path) as f:
        while block := f.read(1 << 20):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


@dataclass(frozen=True)
class Staging:
    """Where the pipeline writes a release's outputs before the launcher publishes them."""

    output: str  # the release directory
    path: str  # the staging directory
    lock: int | None = field(default=None, compare=False)  # fd holding its flock (local only)

    @classmethod
    def create(cls, output: str, *, private: bool = False) -> Staging:
        """A fresh staging directory beside ``output``, locked for this run's life (module
        docstring); a dead run's leftovers beside it are removed first. The launcher has probed
        both locations (:func:`probe_writable`) before charging.

        ``private``: make a local staging directory owner-only (0700) — for the embedded runner,
        whose workers are the launcher's own processes. Staged outputs are noisy answers whose
        charge is taken back if the run fails: readable while the run lives, they would be
        answers nobody paid for (docs/threat-model.md). Other runners' workers may run as
        another user on a shared disk; there the directory's parent must not be readable by the
        release's readers."""
        parent, name = FileSystems.split(output.rstrip("/"))
        remove_abandoned_staging(output)
        staging = FileSystems.join(parent, f"{_staging_prefix(name)}{secrets.token_hex(6)}")
        try:
            if private and is_local_path(staging):  # owner-only from its first instant
                _make_dirs(FileSystems.split(staging)[0])
                os.mkdir(staging, 0o700)
                os.chmod(staging, 0o700)  # exact, whatever the umask
            else:
                _make_dirs(staging)
            lock = _hold(staging) if is_local_path(staging) else None
        except Exception as e:
            raise OutputLocationError(
                f"the staging directory {staging!r} cannot be created ({_reason(e)})"
            ) from None
        return cls(output, staging, lock)

    def staged(self, filename: str) -> str:
        return FileSystems.join(self.path, filename)

    def discard(self) -> None:
        """Deletes the staging directory and everything in it (a failed or finished run), then
        lets go of its lock."""
        try:
            if FileSystems.exists(self.path):
                FileSystems.delete([self.path])
        except Exception:
            pass
        if self.lock is not None:  # once: a second close could close a reused descriptor
            fd = self.lock
            object.__setattr__(self, "lock", None)
            with contextlib.suppress(OSError):
                os.close(fd)

    def file_facts(self, layout: Mapping[str, QueryFiles]) -> dict[str, list[dict[str, object]]]:
        """Query name → [{file, bytes, sha256}] of each staged file of its output;
        OutputLocationError if one is missing or unreadable (the pipeline did not write it)."""
        facts: dict[str, list[dict[str, object]]] = {}
        for name, files in layout.items():
            facts[name] = []
            for filename in files.files:
                try:
                    sha256, size = file_sha256(self.staged(filename))
                except Exception as e:
                    raise OutputLocationError(
                        f"the output of query {name!r} was not written ({filename}: "
                        f"{_reason(e)}); nothing was published"
                    ) from None
                facts[name].append({"file": filename, "bytes": size, "sha256": sha256})
        return facts

    def publish(
        self, layout: Mapping[str, QueryFiles], manifest: bytes, extra: Sequence[str] = ()
    ) -> dict[str, str]:
        """Steps 2–4 of the module docstring; returns query name → published path (a file, or
        the directory of a sharded output). ``extra``: more staged files to move (the report);
        a previous run's copy of each is replaced, or removed when this run has none."""
        _make_dirs(self.output)
        with _publishing_lock(self.output):
            return self._publish(layout, manifest, extra)

    def _publish(
        self, layout: Mapping[str, QueryFiles], manifest: bytes, extra: Sequence[str]
    ) -> dict[str, str]:
        final = FileSystems.join(self.output, MANIFEST)
        earlier = _previous_files(final, set(layout))
        if FileSystems.exists(final):
            FileSystems.delete([final])
        _remove_files(self.output, earlier)  # another release's queries: not beside this one
        published = {}
        for name, files in layout.items():
            for old in (files.name + files.extension, files.name):  # either layout, earlier run
                path = FileSystems.join(self.output, old)
                if FileSystems.exists(path):
                    FileSystems.delete([path])
            if files.sharded:
                _make_dirs(FileSystems.join(self.output, files.name))
            for filename in files.files:
                target = FileSystems.join(self.output, filename)
                FileSystems.rename([self.staged(filename)], [target])
            published[name] = FileSystems.join(self.output, files.output)
        for filename in (REPORT, *extra):
            target = FileSystems.join(self.output, filename)
            if FileSystems.exists(target):
                FileSystems.delete([target])
        for filename in extra:
            FileSystems.rename([self.staged(filename)], [FileSystems.join(self.output, filename)])
        temporary = self.staged(MANIFEST)
        with FileSystems.create(temporary) as f:
            f.write(manifest)
        FileSystems.rename([temporary], [final])
        self.discard()
        return published


# A live run locks its staging directory microseconds after making it; the hour also spares a
# run of a userdp from before the lock (an upgrade while it runs), whose directory is unlocked.
ABANDONED_AFTER_S = 3600.0


def _staging_prefix(name: str) -> str:
    return f".{name}.userdp-staging-"


def _hold(directory: str) -> int:
    """An open descriptor of ``directory`` holding an exclusive ``flock`` on it (released when
    closed, or when the process dies however it dies)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh directory: nobody else holds it
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_abandoned_staging(output: str) -> list[str]:
    """Deletes the staging directories beside a local ``output`` that a killed run left: those no
    live run holds locked, older than ``ABANDONED_AFTER_S``. Returns their paths. They hold DP
    outputs of a release that was never published (noised, so no raw data lingered), and they
    would otherwise pile up hidden beside the release. Object stores are left as they are (no
    lock there tells a live run from a dead one)."""
    if not is_local_path(output):
        return []
    parent, name = os.path.split(os.path.abspath(output.rstrip("/")))
    try:
        entries = os.listdir(parent)
    except OSError:
        return []
    removed = []
    for entry in entries:
        path = os.path.join(parent, entry)
        if not entry.startswith(_staging_prefix(name)) or os.path.islink(path):
            continue
        try:
            if time.time() - os.stat(path).st_mtime < ABANDONED_AFTER_S:
                continue
            fd = _hold(path)  # BlockingIOError: a live run holds it
        except OSError:
            continue
        try:
            shutil.rmtree(path)
            removed.append(path)
        except OSError:
            pass  # not ours to remove (another user's): left as it is
        finally:
            os.close(fd)
    return removed


@contextlib.contextmanager
def _publishing_lock(directory: str) -> Iterator[None]:
    """Serialises launchers publishing into one local release directory (an exclusive
    ``flock`` on the directory itself, so no lock file is left): each moves its files in and
    writes its manifest while the others wait, and the directory ends as one complete release —
    the last one published. Interleaved, it held one release's manifest beside another's files.
    Object stores have no such lock: one release directory per scheduled job is the rule there."""
    if not is_local_path(directory):
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _previous_files(manifest_path: str, queries: set[str]) -> list[str]:
    """The files a userdp release already in the directory listed for queries other than
    ``queries``: a new release removes them, so no stale output sits beside its manifest.

    Only a manifest with userdp's keys is trusted, and only the exact files it lists (sizes and
    hashes beside them), each a plain relative name — ``q.parquet`` or ``q/part-…`` — never a
    directory, ``.`` or ``..``: a stray or hand-made ``manifest.json`` removes nothing else."""
    try:
        with FileSystems.open(manifest_path) as f:
            manifest = json.loads(f.read())
        if not {"userdp_version", "outputs", "files", "queries"} <= set(manifest):
            return []
        names = [
            str(fact["file"])
            for query, facts in manifest["files"].items()
            if query not in queries
            for fact in facts
        ]
    except Exception:  # no manifest, or not one of ours: nothing to remove
        return []
    return [n for n in names if _plain_relative(n)]


def _plain_relative(name: str) -> bool:
    parts = name.split("/")
    return len(parts) <= 2 and all(p and p not in (".", "..") for p in parts)


def _remove_files(directory: str, names: Sequence[str]) -> None:
    """Deletes each listed file that is there, then each shard directory they leave empty."""
    for name in names:
        path = FileSystems.join(directory, name)
        if FileSystems.exists(path):
            FileSystems.delete([path])
    for shard_dir in sorted({n.split("/")[0] for n in names if "/" in n}):
        if is_local_path(directory):  # not empty (not only ours) or gone: left as it is
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(directory, shard_dir))
