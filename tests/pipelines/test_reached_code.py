"""What the ledger's fingerprint reads of a user function's code (pipelines/release_inputs.py):
its module, the user modules it reaches, the versions of installed packages it reaches."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import sys
from pathlib import Path

import pytest

from userdp.pipelines import release_inputs
from userdp.pipelines.release_inputs import function_source_digest

MAIN = """
import json
import os.path

import numpy as np

import fp_helper_a
from fp_helper_b import scale
from userdp.transforms.columns import PERSON_COLUMN


class Hostile:
    def __getattr__(self, name):
        raise RuntimeError("no attributes here")


HOSTILE = Hostile()


def f(table):
    import fp_lazy  # imported when the chunk function runs, not when it is planned

    return float(np.mean(fp_helper_a.values(table))) * scale * fp_lazy.k
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "fp_main.py").write_text(MAIN)
    (tmp_path / "fp_helper_a.py").write_text("def values(t):\n    return [1.0]\n")
    (tmp_path / "fp_helper_b.py").write_text("scale = 1.0\n")
    (tmp_path / "fp_unrelated.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "fp_lazy.py").write_text("k = 1\n")
    for name in ("fp_main", "fp_helper_a", "fp_helper_b", "fp_unrelated", "fp_lazy"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def _fresh_digest(monkeypatch: pytest.MonkeyPatch) -> str:
    for name in ("fp_main", "fp_helper_a", "fp_helper_b"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return function_source_digest("fp_main:f")


def test_the_digest_follows_imported_user_modules_and_nothing_else(
    modules: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _fresh_digest(monkeypatch)
    assert first.startswith("sha256:")
    assert _fresh_digest(monkeypatch) == first  # stable; the hostile global is passed over
    (modules / "fp_unrelated.py").write_text("x = 2\n")  # not imported by the function
    assert _fresh_digest(monkeypatch) == first
    (modules / "fp_helper_a.py").write_text("def values(t):\n    return [2.0]\n")
    second = _fresh_digest(monkeypatch)
    assert second != first  # imported as a module
    (modules / "fp_helper_b.py").write_text("scale = 2.0\n")
    third = _fresh_digest(monkeypatch)
    assert third != second  # `from fp_helper_b import scale`: a float, found by the import line
    (modules / "fp_lazy.py").write_text("k = 1\n")
    assert _fresh_digest(monkeypatch) == third  # not loaded, yet found by the import in `f`
    (modules / "fp_lazy.py").write_text("k = 2\n")
    assert _fresh_digest(monkeypatch) != third


def test_installed_packages_count_by_version(
    modules: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _fresh_digest(monkeypatch)
    installed = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda d: "99.0.0" if d == "numpy" else installed(d)
    )
    assert _fresh_digest(monkeypatch) != first


def test_a_package_imported_only_when_the_function_runs_counts_the_same_loaded_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-run runs in another process, where the package may or may not be loaded yet when the
    fingerprint is taken: its version comes from the installed metadata, not from the module."""
    (tmp_path / "fp_lazy_pkg.py").write_text("def f(t):\n    import cycler\n\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fp_lazy_pkg", raising=False)
    monkeypatch.delitem(sys.modules, "cycler", raising=False)
    before = function_source_digest("fp_lazy_pkg:f")
    assert "cycler" not in sys.modules  # found, not imported
    import cycler  # noqa: F401, PLC0415 (the function's own import, run)

    assert function_source_digest("fp_lazy_pkg:f") == before


def test_built_in_zipped_installed_and_unreadable_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A review's cases: a built-in module imported inside the function (`pwd`: origin
    "built-in", not a file) crashed every ledgered run; a helper imported from a zip on the
    path likewise; a function in an installed package digested as a constant (edits unseen)."""
    import types  # noqa: PLC0415
    import zipfile  # noqa: PLC0415

    with zipfile.ZipFile(tmp_path / "helpers.zip", "w") as z:
        z.writestr("fp_zipped.py", "k = 1\n")
    (tmp_path / "fp_edge.py").write_text(
        "import fp_zipped\n\n\ndef f(t):\n    import pwd\n\n    return float(fp_zipped.k)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path / "helpers.zip"))
    for name in ("fp_edge", "fp_zipped"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    first = function_source_digest("fp_edge:f")
    with zipfile.ZipFile(tmp_path / "helpers.zip", "w") as z:
        z.writestr("fp_zipped.py", "k = 2\n")
    import zipimport  # noqa: PLC0415

    zipimport._zip_directory_cache.clear()  # type: ignore[attr-defined]
    monkeypatch.delitem(sys.modules, "fp_zipped", raising=False)
    assert function_source_digest("fp_edge:f") != first  # the zipped source counts

    # the function's own module inside an installed distribution: hashed all the same
    distributions = dict(release_inputs._distributions())
    monkeypatch.setattr(
        release_inputs, "_distributions", lambda: {**distributions, "fp_edge": ["teamfns"]}
    )
    installed = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda d: "0.1" if d == "teamfns" else installed(d)
    )
    before = function_source_digest("fp_edge:f")
    (tmp_path / "fp_edge.py").write_text(
        "import fp_zipped\n\n\ndef f(t):\n    return 2 * float(fp_zipped.k)\n"
    )
    assert function_source_digest("fp_edge:f") != before  # same version, edited file

    # code with no bytes to read is refused, not digested as a constant
    made = types.ModuleType("fp_made")
    made.__spec__ = importlib.machinery.ModuleSpec("fp_made", None, origin="made-up")
    monkeypatch.setitem(sys.modules, "fp_made", made)
    (tmp_path / "fp_uses_made.py").write_text("import fp_made\n\n\ndef f(t):\n    return 1.0\n")
    with pytest.raises(release_inputs.UnreadableCodeError, match="module fp_made has no file"):
        function_source_digest("fp_uses_made:f")


def test_packages_editable_installs_and_guarded_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second review's cases: the function's own package `__init__` runs with it (an edit
    went unseen); a package whose name a distribution claims but whose files it did not install
    (an editable install) is the user's code; a guarded import of a package whose `__init__`
    raises must not crash the walker (it ran the `__init__` to find a submodule)."""
    pkg = tmp_path / "fp_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("SCALE = 1\n")
    (pkg / "helper.py").write_text("def values(t):\n    return [1.0]\n")
    (pkg / "fn.py").write_text(
        "from .helper import values\n\ntry:\n    import fp_broken.sub\nexcept Exception:\n"
        "    pass\n\n\ndef f(t):\n    return values(t)[0]\n"
    )
    broken = tmp_path / "fp_broken"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise RuntimeError('not today')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("fp_pkg", "fp_pkg.fn", "fp_pkg.helper", "fp_broken"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    distributions = dict(release_inputs._distributions())
    monkeypatch.setattr(  # an editable install: the name is claimed, the files are not listed
        release_inputs, "_distributions", lambda: {**distributions, "fp_pkg": ["fp-pkg-dist"]}
    )
    first = function_source_digest("fp_pkg.fn:f")  # no RuntimeError from fp_broken
    assert "fp_broken" not in sys.modules  # found, never run
    (pkg / "__init__.py").write_text("SCALE = 2\n")
    second = function_source_digest("fp_pkg.fn:f")
    assert second != first  # the package's __init__ counts
    (pkg / "helper.py").write_text("def values(t):\n    return [2.0]\n")
    assert function_source_digest("fp_pkg.fn:f") != second  # walked although the name is claimed
