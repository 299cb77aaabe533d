"""The mechanisms core imports no Beam and never uses `random` / `numpy.random` for noise."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "transforms" / "mechanisms"
FORBIDDEN = re.compile(
    r"np\.random|numpy\.random|^\s*import random\b|^\s*from random import|"
    r"\brandom\.(random|uniform|gauss|choice|randint|getrandbits|shuffle|sample)\(",
    re.MULTILINE,
)


def test_core_files_exist() -> None:
    assert len(list(CORE.glob("*.py"))) >= 5


def test_core_imports_no_beam() -> None:
    for path in CORE.glob("*.py"):
        assert "apache_beam" not in path.read_text(), path.name
    code = (
        "import sys, importlib, pkgutil, transforms.mechanisms as m\n"
        "for info in pkgutil.iter_modules(m.__path__):\n"
        "    importlib.import_module('userdp.transforms.mechanisms.' + info.name)\n"
        "print(any(name.startswith('apache_beam') for name in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=CORE.parents[1],
    )
    assert out.stdout.strip() == "False"


def test_core_uses_no_insecure_randomness() -> None:
    for path in CORE.glob("*.py"):
        for line in path.read_text().splitlines():
            if FORBIDDEN.search(line):
                assert "# not noise:" in line, f"{path.name}: {line.strip()}"


def test_the_scan_catches_insecure_randomness() -> None:
    # Negative control for the scan itself.
    for bad in ("x = np.random.laplace(0, 1)", "import random", "random.gauss(0, 1)"):
        assert FORBIDDEN.search(bad)
