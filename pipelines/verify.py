"""Is a release directory complete? What a reader checks before trusting the files it holds.

A release directory is complete when it has a ``manifest.json`` — the launcher writes it last,
after every output is in place (:mod:`.publish`) — and every file the manifest lists is there with
the listed size and SHA-256, and no other file sits among a query's outputs or (on a local disk)
in the directory itself. A run that was killed
or failed leaves no manifest (or a stale file beside one, or a file that differs from its listing),
so it never verifies. ``userdp verify DIR`` prints the problems and exits 1 when there are any.
Nothing here reads a value: sizes and hashes of DP outputs only.
"""

from __future__ import annotations

import json
import os
from typing import Any

from apache_beam.io.filesystems import FileSystems

from .output_layout import MANIFEST
from .publish import file_sha256, is_local_path


def _listed(manifest: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """Relative file name → (bytes, sha256) for every file the manifest lists."""
    out = {}
    for facts in [*manifest["files"].values(), manifest.get("report") or []]:
        for f in facts if isinstance(facts, list) else [facts]:
            out[str(f["file"])] = (int(f["bytes"]), str(f["sha256"]))
    return out


def _present(directory: str, outputs: dict[str, str]) -> set[str]:
    """The files among the query outputs now in the directory (relative names)."""
    present = set()
    for output in outputs.values():
        pattern = FileSystems.join(directory, output, "*") if output.endswith("/") else None
        path = FileSystems.join(directory, output)
        if pattern is None:
            if FileSystems.exists(path):
                present.add(output)
            continue
        for m in FileSystems.match([pattern])[0].metadata_list:
            present.add(output + m.path.rsplit("/", 1)[-1])
    return present


def verify_release(directory: str) -> list[str]:
    """The reasons ``directory`` is not a complete release; an empty list when it is."""
    manifest_path = FileSystems.join(directory, MANIFEST)
    if is_local_path(directory) and not os.path.isdir(directory):
        return [f"{directory} is not a directory: give a release directory (the job's output.path)"]
    if not FileSystems.exists(manifest_path):
        return [f"no {MANIFEST}: not a complete release (a run was interrupted, failed or runs)"]
    try:
        with FileSystems.open(manifest_path) as f:
            manifest = json.loads(f.read())
        listed = _listed(manifest)
        outputs = {str(k): str(v) for k, v in manifest["outputs"].items()}
    except (ValueError, KeyError, TypeError) as e:
        return [f"{MANIFEST} is not a userdp manifest ({type(e).__name__})"]
    problems = []
    for name, (size, sha256) in sorted(listed.items()):
        try:
            found_sha, found_size = file_sha256(FileSystems.join(directory, name))
        except Exception as e:
            problems.append(
                f"{name}: listed in the manifest but cannot be read ({type(e).__name__})"
            )
            continue
        if (found_size, found_sha) != (size, sha256):
            problems.append(f"{name}: differs from the manifest (size or SHA-256)")
    for name in sorted(_present(directory, outputs) - set(listed)):
        problems.append(f"{name}: among the outputs but not listed in the manifest")
    for name in sorted(_top_level(directory) - set(listed) - {MANIFEST} - _dirs(outputs)):
        problems.append(f"{name}: in the release directory but not part of this release")
    return problems


def _dirs(outputs: dict[str, str]) -> set[str]:
    return {o.rstrip("/") for o in outputs.values() if o.endswith("/")}


def _top_level(directory: str) -> set[str]:
    """Names directly in a local release directory (files, and directories such as a sharded
    output's): all of it is published, so anything the manifest does not list is flagged. On
    object stores (no directories to list) only the outputs' own places are checked."""
    return set(os.listdir(directory)) if is_local_path(directory) else set()
