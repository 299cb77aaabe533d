"""userdp: person-level differential privacy for batch jobs on Apache Beam.

Two packages live under this one import name:

- :mod:`userdp.transforms` — the library. Its ``__init__`` is the public API a Beam user reads
  first (``Release``, ``Budget``, ``ByPerson``, ``Count``, ``Median`` …); below it are the Beam
  steps and the pure mechanisms core (:mod:`userdp.transforms.mechanisms`, no Beam import).
- :mod:`userdp.pipelines` — the job layer: the job file, file I/O, runners, the budget ledger and
  the ``userdp`` command line, a client of the library.

In the repository these are the folders ``transforms/`` and ``pipelines/``; ``pyproject.toml`` maps
them into this package, so installing userdp adds exactly one top-level name.
"""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("userdp")
except metadata.PackageNotFoundError:  # pragma: no cover - a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
