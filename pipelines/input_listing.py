"""The input files of ``input.path``: listed and checked before anything is planned or charged.

Local paths and globs are listed with :mod:`glob` (the config resolved them against the job file);
every match must be a readable regular file — a directory, FIFO, socket or dangling symbolic link
is refused by name (a FIFO would block the read forever, and skipping it silently would drop its
rows). Paths with a scheme (``gs://`` …) go through Beam's ``FileSystems``.
"""

from __future__ import annotations

import glob
import os
import stat

from apache_beam.io.filesystems import FileSystems

from .config_paths import no_filesystem


class SchemaError(ValueError):
    """An input file that does not fit the job: names file, column, found type, allowed."""


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local_files(pattern: str) -> list[tuple[str, int]]:
    """(path, size) of every entry the glob names, each checked to be a readable regular file."""
    pattern = pattern.removeprefix("file://")
    # recursive: `**` spans directories, as Beam's matcher does on object stores (there it needs
    # at least one; here zero or more) — without it a local `**` was one level only
    names = glob.glob(pattern, recursive=True) if glob.has_magic(pattern) else [pattern]
    if "**" in pattern:  # `data/**` names the files under data/, as Beam lists them (no dirs)
        names = [n for n in names if not os.path.isdir(n)]
    out = []
    for name in names:
        if not os.path.lexists(name):
            continue  # a plain path that does not exist: "matched no files" below
        try:
            info = os.stat(name)  # follows symbolic links
            mode = info.st_mode
        except FileNotFoundError:
            raise SchemaError(
                f"input file {name}: a symbolic link to a missing file; allowed: readable "
                "regular files — remove the link or narrow input.path"
            ) from None
        except OSError as e:
            raise SchemaError(f"input file {name}: cannot be examined ({e.strerror})") from None
        if not stat.S_ISREG(mode):
            what = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, socket "
            what += "" if stat.S_ISDIR(mode) else "or device)"
            raise SchemaError(
                f"input file {name}: {what}; allowed: regular files — narrow input.path so "
                "that it matches only the data files"
            )
        if not os.access(name, os.R_OK):
            raise SchemaError(f"input file {name}: not readable by this user (permissions)")
        out.append((os.path.abspath(name), info.st_size))
    return out


def _check_name(path: str) -> None:
    """A file name that is not UTF-8 (bytes Python holds as surrogate escapes) is refused here,
    before the charge: Beam encodes each path as UTF-8 text when it ships the reads, and that
    raised on a worker after the charge (exit 1). Shown with the bytes escaped."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(path).decode("utf-8", "backslashreplace")
        raise SchemaError(
            f"input file '{shown}': its name is not UTF-8 text, which Beam cannot carry; "
            "rename the file"
        ) from None


def list_input_files(path_glob: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(the sorted files of ``input.path``, each one's size in bytes); :class:`SchemaError` if
    none, or one is not a file. Sizes are public file metadata: they size shards, never a value."""
    if _is_local(path_glob):
        found = _local_files(path_glob)
    else:
        try:
            FileSystems.get_filesystem(path_glob)
        except Exception:  # ValueError: no such scheme; BeamIOError: its library is missing
            raise SchemaError(no_filesystem("input path", path_glob)) from None
        try:
            matches = FileSystems.match([path_glob])
        except Exception as e:  # no such bucket, no credentials, a host that does not answer
            raise SchemaError(
                f"input path {path_glob!r}: cannot be listed ({type(e).__name__}); check the "
                "location and this machine's access to it"
            ) from None
        found = [(m.path, m.size_in_bytes) for r in matches for m in r.metadata_list]
    if not found:
        raise SchemaError(f"input path {path_glob!r} matched no files")
    for path, _ in found:
        _check_name(path)
    listed = sorted(set(found))
    return tuple(p for p, _ in listed), tuple(n for _, n in listed)
