"""generate, demo and keygen: a bad argument or location is exit 2 with a message naming it,
never a traceback (CLI audit: generate --out data/ or /proc/x.parquet, demo --dir FILE)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from userdp.pipelines.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["generate", "--people", "5", "--out", "{tmp}/x.txt"], r"extension '\.txt' is not supp"),
        (["generate", "--people", "5", "--out", "{tmp}"], r"extension '' is not supported"),
        (
            ["generate", "--people", "5", "--out", "{tmp}/file/x.parquet"],
            r"cannot write .*/file/x\.parquet \((Not a directory|File exists)\)",
        ),
        (
            ["demo", "--people", "5", "--dir", "{tmp}/file"],
            r"--dir .*/file: (Not a directory|File exists)",
        ),
        (
            ["keygen", "{tmp}/file/key"],
            r"cannot create .*/file/key \((Not a directory|File exists)\)",
        ),
    ],
)
def test_a_bad_location_is_exit_2_naming_it(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("a regular file\n")
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert re.search(message, err), err
