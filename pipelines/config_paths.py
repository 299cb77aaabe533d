"""Where a release may read and write: operator-only paths never inside the published one.

A release directory is handed to readers whole. Some paths of a job are for the operator alone:
dead letters (raw rejected rows), the input files, the SQLite ledger (it stores release secrets)
and the release secret file. If one of them lay inside ``output.path``, publishing the release
would publish it too, so :func:`check_private_paths` refuses any overlap when the job file is read.

Paths are compared after resolving: local paths absolute with symbolic links resolved (two
spellings of one directory are one directory), URLs (``gs://``…) as written with one trailing
slash. A glob is represented by its directory part before the first wildcard.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping

from .config_fields import ConfigError


def no_filesystem(what: str, path: str) -> str:
    """The message for a location whose scheme no installed Beam filesystem serves."""
    return (
        f"{what} {path!r}: no Beam filesystem for this scheme here — install the Beam extra "
        "that provides it (apache-beam[gcp] for gs://, apache-beam[aws] for s3://, "
        "apache-beam[azure] for azfs://) or check its spelling"
    )


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _canonical(path: str) -> str:
    """One spelling per location, ending in ``/``."""
    if _is_url(path):
        return path.rstrip("/") + "/"
    local = path.removeprefix("file://")
    return os.path.realpath(os.path.abspath(local)).rstrip(os.sep) + os.sep


def glob_root(pattern: str) -> str:
    """The directory a glob can match in: its part before the first wildcard, up to a ``/``."""
    if not glob.has_magic(pattern):
        return pattern
    parts = pattern.split("/")
    fixed = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return "/".join(fixed) or "."


def paths_overlap(a: str, b: str) -> bool:
    """Is one of the two locations inside the other (or are they the same)?"""
    ca, cb = _canonical(a), _canonical(b)
    return ca.startswith(cb) or cb.startswith(ca)


def check_private_paths(output: str, private: Mapping[str, str | None], source: str) -> None:
    """Refuses an operator-only path inside ``output`` (or ``output`` inside it).

    ``private``: job-file key → path (None: not set). Raises :class:`ConfigError` naming both keys.
    """
    for key, path in private.items():
        if path is None:
            continue
        if key == "input.path":  # input files inside the release; the release inside an input
            inside = _canonical(glob_root(path)).startswith(_canonical(output))  # dir is fine
        else:
            inside = paths_overlap(path, output)
        if inside:
            raise ConfigError(
                key,
                path,
                "a location outside output.path (and output.path not inside it)",
                f"output.path {output!r} is published whole to the release's readers; {key} is "
                "for the operator only (raw rows, secrets or the ledger) — move one of them",
                source,
            )


def check_input_files_outside(output: str, files: list[str] | tuple[str, ...], source: str) -> None:
    """Refuses input files that lie inside ``output`` — the files a glob matched, not only its
    root: ``data/*/*.parquet`` with output ``data/week=3/`` passes the job file's check, and
    publishing would hand the raw files in ``data/week=3/`` to the release's readers (and the
    next run would read its own outputs). File paths are configuration, never data."""
    out = _canonical(output)
    inside = [f for f in files if _canonical(f).startswith(out)]
    if inside:
        raise ConfigError(
            "input.path",
            inside[0],
            "input files outside output.path",
            f"{len(inside)} of the {len(files)} input files lie inside output.path {output!r}, "
            "which is published whole to the release's readers — move the output or narrow "
            "the input's pattern",
            source,
        )


def check_input_files_not_dead_letters(
    dead_letter: str | None, files: list[str] | tuple[str, ...], source: str
) -> None:
    """Refuses input files that are dead letters (``dead_letter-*`` in ``input.dead_letter``): a
    pattern such as ``data/*`` with dead letters in ``data/`` would read the last run's rejected
    rows back as input (each run then rejecting them again, and more). Checked on the files the
    pattern matched, before the charge; file paths are configuration, never data."""
    if dead_letter is None:
        return
    root = _canonical(dead_letter)
    inside = [
        f
        for f in files
        if _canonical(f).startswith(root)
        and f.rstrip("/").rsplit("/", 1)[-1].startswith("dead_letter-")  # the sink's names
    ]
    if inside:
        raise ConfigError(
            "input.path",
            inside[0],
            "input files other than the dead letters",
            f"{len(inside)} of the {len(files)} input files are dead letters in "
            f"input.dead_letter {dead_letter!r}: a run would read the rejected rows of earlier "
            "runs as input — move the dead letters or narrow the input's pattern",
            source,
        )
