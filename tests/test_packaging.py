"""Installing userdp adds one import name: a wheel holds ``userdp/`` and its dist-info only."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
pytestmark = pytest.mark.slow  # builds a wheel (~10 s)


def test_the_wheel_installs_only_userdp(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("userdp-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        entry_points = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    top = {n.split("/", 1)[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"userdp"}
    modules = (
        "__init__.py",
        "py.typed",
        "transforms/__init__.py",
        "transforms/mechanisms/rng.py",
        "pipelines/cli.py",
        "pipelines/kinds/base.py",
        "pipelines/ledger/store.py",
    )
    for module in modules:
        assert f"userdp/{module}" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "userdp = userdp.pipelines.entry:console" in entry_points


def test_no_module_imports_the_bare_folder_names() -> None:
    """Inside the repository ``transforms``/``pipelines`` are importable from its root; code that
    imported them would break once installed, and load every module twice."""
    offenders = []
    for folder in ("transforms", "pipelines", "tests", "benchmarks", "examples"):
        for path in (ROOT / folder).rglob("*.py"):
            for line in path.read_text().splitlines():
                stripped = line.strip()
                if stripped.startswith(("from transforms", "from pipelines", "import transforms",
                                        "import pipelines")):  # fmt: skip
                    offenders.append(f"{path.relative_to(ROOT)}: {stripped}")
    assert not offenders
