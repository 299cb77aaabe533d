"""Everything a release reads besides its data rows, as digests for the ledger's fingerprint.

The ledger lets a release id be re-run for free because the re-run draws the *same* noise (the
stored secret) on the *same* inputs, so it publishes the same bytes. If anything that shapes the
released values could change between the runs, the same noise would be added to a different
statistic, and the difference of the two outputs would be the exact, noise-free change (issue 12).
So the fingerprint covers, beside the input files (path, size, modification time):

- every file a query reads: public partition key files (by content);
- the source of every user function a query calls (``sample_aggregate``'s ``function``): the
  module's file, by content, and the files of the modules it reaches through its globals (what
  it imports, and the modules of the functions and classes it imports by name) outside the
  standard library and userdp; for installed packages it reaches (NumPy, pyarrow …), their
  version (a stop-33 audit: a helper module a function imported was edited between a run and
  its re-run, which the fingerprint did not see);
- the userdp code itself: its version and a digest of every module of ``transforms`` and
  ``pipelines`` (a change of a mechanism, a clamp or a rounding rule changes released values);
- the release secret file (``[release] secret_path``): a key check value, HMAC-SHA256 of a fixed
  label under the key — it identifies the key without revealing it.

A kind that reads another file or loads other code must add it here.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import sys
import sysconfig
import types
from collections.abc import Mapping
from pathlib import Path

from .config import JobConfig
from .config_fields import ConfigError
from .publish import file_sha256
from .version import userdp_code_digest


def _file_digest(path: str) -> str:
    return "sha256:" + file_sha256(path)[0]


def function_source_digest(function: str) -> str:
    """The digest of the code behind ``module:function``: its module's source and what that
    module reaches (module docstring; :func:`_reached_code`)."""
    name = function.split(":", 1)[0]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or not Path(spec.origin).is_file():
        return f"module {name} (no source file)"
    lines = _reached_code(importlib.import_module(name))  # planning imported it already
    return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


_LIBRARY_DIRS = tuple(
    str(Path(p).resolve())
    for key in ("stdlib", "platstdlib", "purelib", "platlib")
    if (p := sysconfig.get_paths().get(key))
)


def _reached_code(root: types.ModuleType) -> list[str]:
    """Sorted lines ``<module> <file digest>`` for the user modules ``root`` reaches, and
    ``<package>==<version>`` for the installed packages it reaches (not walked into); the
    standard library and userdp (``userdp_code_digest``) are left out. A module reaches what its
    source imports (anywhere in the file, so imports inside functions and ``from m import
    CONSTANT`` count; modules not loaded yet are found without importing them) and, once loaded,
    the modules its globals are or come from (``importlib.import_module`` into a global)."""
    seen, todo, lines = {root.__name__}, [root.__name__], set()
    while todo:
        name = todo.pop()
        module = sys.modules.get(name)
        origin = getattr(module, "__file__", None) if module is not None else _origin(name)
        top = name.split(".", 1)[0]
        if top == "userdp" or not isinstance(origin, str):  # userdp's own, or built in
            continue
        path = str(Path(origin).resolve())
        if path.startswith(_LIBRARY_DIRS):  # an installed package or the standard library
            lines.update(_installed_versions(top))
            continue
        lines.add(f"{name} {_file_digest(path)}")
        package = (module.__package__ if module is not None else None) or name.rpartition(".")[0]
        found = _imports_in_source(path, package)
        if module is not None:
            found |= _modules_of_globals(module)
        for other in sorted(found - seen):
            seen.add(other)
            todo.append(other)
    return sorted(lines)


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _installed_versions(top: str) -> list[str]:
    """``<distribution>==<version>`` of the installed distributions that provide the import name
    ``top`` (none for the standard library), from their metadata: the same whether or not the
    package is loaded yet, so a re-run in another process digests alike."""
    return [f"{d}=={importlib.metadata.version(d)}" for d in sorted(_distributions().get(top, []))]


def _origin(name: str) -> str | None:
    """The file of a module that is not loaded, found without importing it (None if none)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a parent package that fails, or a bad name
        return None
    return spec.origin if spec is not None else None


def _imports_in_source(path: str, package: str) -> set[str]:
    """Module names the file imports: ``import a.b`` (a and a.b), ``from a import b`` (a, and
    a.b when that is a module), relative imports resolved against ``package``."""
    if not path.endswith(".py"):
        return set()
    try:
        tree = ast.parse(Path(path).read_bytes(), path)
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                names.update(".".join(parts[: i + 1]) for i in range(len(parts)))
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            try:
                resolved = importlib.util.resolve_name(base, package) if node.level else base
            except (ImportError, ValueError):
                continue
            names.add(resolved)
            names.update(f"{resolved}.{a.name}" for a in node.names if a.name != "*")
    return {n for n in names if n in sys.modules or _origin(n) is not None}


def _modules_of_globals(module: types.ModuleType) -> set[str]:
    """Modules the loaded module's globals are, or whose functions and classes they are."""
    names = set()
    for value in list(vars(module).values()):
        if isinstance(value, types.ModuleType):
            names.add(value.__name__)
            continue
        try:  # a global of user code may be any object, even one whose attributes raise
            owner = getattr(value, "__module__", None)
        except Exception:
            continue
        if isinstance(owner, str) and owner in sys.modules:
            names.add(owner)
    return names


def release_artifacts(job: JobConfig, secret_check: str | None) -> dict[str, str]:
    """Name → digest of everything the release reads besides its input rows (module docstring)."""
    out = {"userdp": userdp_code_digest()}
    for i, q in enumerate(job.queries):
        if q.partitions not in (None, "private"):
            try:
                out[f"queries[{i}].partitions"] = _file_digest(str(q.partitions))
            except OSError as e:
                raise ConfigError(
                    f"queries[{i}].partitions", q.partitions, "a readable file", e.strerror or "",
                    job.source,
                ) from None  # fmt: skip
        function = q.options.get("function")
        if isinstance(function, str):
            out[f"queries[{i}].function"] = function_source_digest(function)
    if secret_check is not None:
        out["release.secret_path"] = secret_check
    return out
