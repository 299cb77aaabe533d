"""Everything a release reads besides its data rows, as digests for the ledger's fingerprint.

The ledger lets a release id be re-run for free because the re-run draws the *same* noise (the
stored secret) on the *same* inputs, so it publishes the same bytes. If anything that shapes the
released values could change between the runs, the same noise would be added to a different
statistic, and the difference of the two outputs would be the exact, noise-free change (issue 12).
So the fingerprint covers, beside the input files (path, size, modification time):

- every file a query reads: public partition key files (by content);
- the source of every user function a query calls (``sample_aggregate``'s ``function``): the
  module's file, by content, and the sources of the user modules its source imports, and theirs
  (outside the standard library and userdp); for installed packages it reaches (NumPy …), their
  distribution's version (a stop-33 audit: a helper module a function imported was edited
  between a run and its re-run, which the fingerprint did not see). Code it cannot read is
  refused (exit 2), not digested as a constant;
- the userdp code itself: its version and a digest of every module of ``transforms`` and
  ``pipelines`` (a change of a mechanism, a clamp or a rounding rule changes released values),
  and the versions of the libraries it writes and computes with (``_OUTPUT_LIBRARIES``: a
  Parquet file names its writer's version, so a re-run after an upgrade could not write the
  same bytes — refused when it starts, not after its pipeline ran);
- the release secret file (``[release] secret_path``): a key check value, HMAC-SHA256 of a fixed
  label under the key — it identifies the key without revealing it.

A kind that reads another file or loads other code must add it here.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import site as site_module
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from .config import JobConfig
from .config_fields import ConfigError
from .publish import file_sha256
from .version import userdp_code_digest


def _file_digest(path: str) -> str:
    return "sha256:" + file_sha256(path)[0]


class UnreadableCodeError(ValueError):
    """A module a user function reaches has no source or file userdp can digest."""


_MAX_MODULES = 2000  # user modules one function may reach (a fingerprint, not a crawl)


def function_source_digest(function: str) -> str:
    """The digest of the code behind ``module:function``: its module's file and what that
    module reaches (module docstring; :func:`_reached_code`). Raises :class:`UnreadableCodeError`
    for code it cannot read: a constant in its place would hide a change."""
    name = function.split(":", 1)[0]
    lines = _reached_code(name)
    return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _reached_code(root: str) -> list[str]:
    """Sorted lines: ``<module> <digest>`` for ``root``, its packages and every user module they
    reach, and ``<distribution>==<version>`` for the installed packages reached (not walked).

    A module reaches what its source imports (anywhere in the file, so imports inside functions
    and ``from m import CONSTANT`` count), read from the source, never from what happens to be
    loaded: the first run and a re-run in another process digest alike. Each module is judged by
    where its file lies (:func:`_kind`): the standard library and userdp (``userdp_code_digest``)
    are left out; a file a distribution installed counts by that distribution's version;
    anything else is the user's code — also an editable install, or a module named like a
    standard one that shadows it. Specs are found without running any package's code; a module
    that cannot be found is left out, as a guarded ``try: import x`` leaves it at run time."""
    first = _with_parents(root)
    seen, todo, lines = set(first), list(reversed(first)), set[str]()
    while todo:
        if len(lines) > _MAX_MODULES:
            raise UnreadableCodeError(f"{root} reaches more than {_MAX_MODULES} modules")
        name = todo.pop()
        kind = _kind(name)
        if kind is None and name == root:
            raise UnreadableCodeError(f"module {name} cannot be found")
        if kind in (None, "stdlib"):
            continue
        top = name.split(".", 1)[0]
        if kind == "installed":
            lines.update(_installed_versions(top))
            if name not in first:  # an installed package is named by its version, not walked
                continue
        source = _module_source(name)
        if source is None:  # a namespace package: no code of its own
            continue
        lines.add(f"{name} sha256:{hashlib.sha256(source).hexdigest()}")
        for other in sorted(_imports_in_source(source, name, _package_of(name)) - seen):
            seen.add(other)
            todo.append(other)
    return sorted(lines)


_STDLIB_DIRS = tuple(
    Path(p).resolve() for key in ("stdlib", "platstdlib") if (p := sysconfig.get_paths().get(key))
)


def _kind(name: str) -> str | None:
    """``"stdlib"``, ``"installed"`` (a file of an installed distribution), ``"user"``, or None
    when the module cannot be found. userdp's own modules count as the standard library here:
    ``userdp_code_digest`` covers them."""
    top = name.split(".", 1)[0]
    spec = None if top == "userdp" else _spec(name)
    origin = spec.origin if spec is not None else None
    if spec is None or origin in ("built-in", "frozen"):
        return "stdlib" if spec is not None or top == "userdp" else None
    if origin is None or origin == "namespace" or not Path(origin).exists():
        return "user"  # a namespace package, or code in a zip: the user's
    path = Path(origin).resolve()
    site = (*site_module.getsitepackages(), site_module.getusersitepackages())
    if path in _installed_files(top) or any(
        path.is_relative_to(Path(d).resolve())
        for d in site  # a distribution without RECORD
    ):
        return "installed"
    return "stdlib" if any(path.is_relative_to(d) for d in _STDLIB_DIRS) else "user"


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    return importlib.metadata.packages_distributions()


@functools.cache
def _installed_files(top: str) -> frozenset[Path]:
    """The files the distributions providing the import name ``top`` installed (RECORD): an
    editable install lists its finder, not the sources, whose modules are then the user's."""
    files: set[Path] = set()
    for dist_name in set(_distributions().get(top, [])):
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            files.add(Path(str(dist.locate_file(f))).resolve())
    return frozenset(files)


def _installed_versions(top: str) -> tuple[str, ...]:
    """``<distribution>==<version>`` of the installed distributions that provide the import name
    ``top``, from their metadata: the same whether or not the package is loaded."""
    out = []
    for d in sorted(set(_distributions().get(top, []))):
        try:
            out.append(f"{d}=={importlib.metadata.version(d)}")
        except importlib.metadata.PackageNotFoundError:  # named, but its metadata is gone
            out.append(f"{d}==?")
    return tuple(out)


def _spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """The module's spec, found without running any module: a loaded module's own; a top-level
    name by the import system's finders (they run no module code); a submodule by the path
    finder in its package's ``__path__`` (``importlib.util.find_spec`` would import the package).
    None when not found, whatever the finders raise."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None) if module is not None else None
    if isinstance(spec, importlib.machinery.ModuleSpec):
        return spec
    parent, _, _ = name.rpartition(".")
    try:
        if not parent:
            return importlib.util.find_spec(name)
        package = _spec(parent)
        if package is None or package.submodule_search_locations is None:
            return None
        locations = list(package.submodule_search_locations)
        return importlib.machinery.PathFinder.find_spec(name, locations)
    except Exception:
        return None


def _package_of(name: str) -> str:
    spec = _spec(name)
    if spec is not None and spec.submodule_search_locations is not None:
        return name  # a package: its relative imports resolve against itself
    return name.rpartition(".")[0]


def _module_source(name: str) -> bytes | None:
    """The bytes of a user module: its file, or what its loader reads (a zip import); None for a
    namespace package. Raises :class:`UnreadableCodeError` when there is code but no bytes."""
    spec = _spec(name)
    if spec is None:
        raise UnreadableCodeError(f"module {name} cannot be found")
    origin = spec.origin
    if origin is None or origin == "namespace":
        if spec.submodule_search_locations is not None:
            return None
        raise UnreadableCodeError(f"module {name} has no file to digest")
    if Path(origin).is_file():
        return Path(origin).read_bytes()
    get_data = getattr(spec.loader, "get_data", None)
    if callable(get_data):
        try:
            data = get_data(origin)
        except OSError:
            data = None
        if isinstance(data, bytes):
            return data
    raise UnreadableCodeError(f"module {name} has no file or source to digest ({origin!r})")


def _imports_in_source(source: bytes, name: str, package: str) -> set[str]:
    """Modules the source may import: ``import a.b`` and ``from a.b import c`` give a, a.b and
    a.b.c (c may be a name, not a module: then it is not found); relative imports resolve
    against ``package``. What each is, is decided where its file lies (:func:`_kind`)."""
    try:
        tree = ast.parse(source, name)
    except (SyntaxError, ValueError):  # compiled code (an extension module): its bytes count
        return set()
    dotted: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                dotted.update(_with_parents(alias.name))
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            try:
                resolved = importlib.util.resolve_name(base, package) if node.level else base
            except (ImportError, ValueError):
                continue
            dotted.update(_with_parents(resolved))
            dotted.update(f"{resolved}.{a.name}" for a in node.names if a.name != "*")
    return {n for n in dotted if n}


def _with_parents(dotted: str) -> list[str]:
    """a.b.c → [a, a.b, a.b.c]: the packages an import loads."""
    parts = dotted.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


_OUTPUT_LIBRARIES = ("apache-beam", "numpy", "pyarrow", "fastavro", "scipy", "matplotlib")
"""userdp's dependencies whose version can change a release's bytes (a Parquet file names its
writer's version; a sum may round otherwise)."""


def library_versions() -> str:
    return "; ".join(f"{d}=={importlib.metadata.version(d)}" for d in _OUTPUT_LIBRARIES)


def release_artifacts(job: JobConfig, secret_check: str | None) -> dict[str, str]:
    """Name → digest of everything the release reads besides its input rows (module docstring)."""
    out = {"userdp": userdp_code_digest(), "libraries": library_versions()}
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
            try:
                out[f"queries[{i}].function"] = function_source_digest(function)
            except UnreadableCodeError as e:
                raise ConfigError(
                    f"queries[{i}].function", function, "code whose every module can be read",
                    f"{e}; the ledger's fingerprint must see all the code the function runs",
                    job.source,
                ) from None  # fmt: skip
    if secret_check is not None:
        out["release.secret_path"] = secret_check
    return out
