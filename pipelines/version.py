"""What version of userdp made a release: the package version, and a digest of its code.

The manifest records both. The package version changes with each published userdp (CHANGELOG.md);
the code digest changes whenever any module that can shape released values changes — a mechanism,
a clamp, a rounding rule, a planner — so two manifests with the same digest, secret and inputs
come from code that writes the same bytes. The ledger's fingerprint uses the same digest.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata
from pathlib import Path


def userdp_version() -> str:
    try:
        return metadata.version("userdp")
    except metadata.PackageNotFoundError:  # a source tree that is not installed
        return "0+unknown"


@functools.cache
def userdp_code_digest() -> str:
    """``<version> sha256:<digest>`` of every ``.py`` file of userdp.transforms and .pipelines."""
    digest = hashlib.sha256()
    here = Path(__file__).parent  # the job layer; the library is its sibling
    roots = [here.parent / "transforms", here]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{root.name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes() + b"\0")
    return f"{userdp_version()} sha256:{digest.hexdigest()}"
