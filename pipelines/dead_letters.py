"""The dead-letter directory's access: raw private rows, so owner-only on local disks.

Dead letters are rows the reader rejected, written by Beam into the operator's ``dead_letter``
path; they are never published. Local directories are made 0700 before a run and the files
0600 after it, success or not; a failed run's half-written ``beam-temp-*`` folders are deleted.
"""

from __future__ import annotations

import os

from apache_beam.io.filesystems import FileSystems

from .publish import is_local_path


def make_private_directory(directory: str | None) -> None:
    """Creates a missing local dead-letter directory owner-only (0700) before the run, so the raw
    rows Beam writes into it are unreadable by other users whatever the umask (Beam creates its
    files 0644 under a usual umask). An existing directory keeps the mode its operator gave it;
    :func:`restrict_dead_letters` still closes the files. Other filesystems (``gs://`` …) keep
    their own access control: the bucket's permissions decide."""
    if not directory or not is_local_path(directory) or os.path.isdir(directory):
        return
    os.makedirs(directory, exist_ok=True)
    os.chmod(directory, 0o700)  # exact, whatever the umask (makedirs' mode is masked)


def restrict_dead_letters(directory: str | None) -> None:
    """Makes every local ``dead_letter-*`` file owner-only (0600) after a run, success or not:
    they are raw private rows, like the operator log and the ledger (also 0600)."""
    if not directory or not is_local_path(directory) or not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.startswith("dead_letter") and os.path.isfile(path):
            try:
                os.chmod(path, 0o600)
            except OSError:  # another user's file from an earlier run: not ours to change
                continue


def settle_failed_dead_letters(directory: str | None) -> None:
    """After a failed run: Beam's temporary folders deleted, the finished files owner-only."""
    remove_temporary_folders(directory)
    restrict_dead_letters(directory)


def remove_temporary_folders(directory: str | None) -> None:
    """Deletes Beam's ``beam-temp-*`` folders (raw dead-letter rows of a failed write)."""
    if not directory:
        return
    try:
        matches = FileSystems.match([FileSystems.join(directory, "beam-temp-*")])
        paths = [m.path for r in matches for m in r.metadata_list]
        if is_local_path(directory) and os.path.isdir(directory):
            paths += [
                os.path.join(directory, n)
                for n in os.listdir(directory)
                if n.startswith("beam-temp-")
            ]
        if paths:
            FileSystems.delete(sorted(set(paths)))
    except Exception:
        pass
