"""`userdp ledger show|history|set-cap` through its argparse entry point (both backends)."""

from __future__ import annotations

import argparse
import json
import stat
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import pytest

from userdp.pipelines.ledger import Cost, open_ledger
from userdp.pipelines.ledger_cli import LEDGER_ENV, add_ledger_parser
from userdp.transforms.mechanisms.accounting import ZCDP, PureDP


def userdp(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="userdp")
    add_ledger_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args._run(args)
    return code


def test_set_cap_show_and_history(location: str, capsys: pytest.CaptureFixture[str]) -> None:
    at = ["--ledger", location]
    assert userdp(["ledger", "set-cap", *at, "--scope", "logs", "--epsilon", "1",
                   "--delta", "1e-6", "--zcdp-delta", "1e-7"]) == 0  # fmt: skip
    assert userdp(["ledger", "set-cap", *at, "--scope", "logs", "--each-period",
                   "--epsilon", "0.5", "--delta", "1e-6"]) == 0  # fmt: skip
    assert userdp(["ledger", "set-cap", *at, "--scope", "logs", "--period", "2025-W02",
                   "--epsilon", "1/3", "--delta", "1e-6"]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines() == [
        "cap of logs: (ε=1, δ=1/1000000 (≈1e-06))",
        "cap of logs, each period: (ε=1/2 (≈0.5), δ=1/1000000 (≈1e-06))",
        "cap of logs, period 2025-W02: (ε=1/3 (≈0.3333333333), δ=1/1000000 (≈1e-06))",
    ]
    with open_ledger(location) as ledger:
        ledger.reserve(
            "weekly-01",
            scope="logs",
            periods=["2025-W01"],
            cost=Cost(PureDP(Fraction(1, 4))),
            config_hash="c",
            input_fingerprint="f",
        )
        ledger.complete("weekly-01", {"q": "out/q.parquet"}, "sha256:m")
        ledger.reserve("weekly-02", scope="logs", periods=["2025-W02"],
                       cost=Cost(ZCDP(Fraction(1, 10**6))), config_hash="c",
                       input_fingerprint="f")  # fmt: skip
        records = [r.to_json() for r in ledger.releases()]
    assert userdp(["ledger", "show", *at]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "logs: caps in (ε, δ)-DP; zCDP releases converted at δ=1/10000000 (≈1e-07)"
    assert out[1].startswith("  whole scope    cap (ε=1, δ=1/1000000 (≈1e-06)); spent (ε=")
    assert out[2] == "  each period    cap (ε=1/2 (≈0.5), δ=1/1000000 (≈1e-06)) unless set"
    assert out[3] == (
        "  2025-W01       cap (ε=1/2 (≈0.5), δ=1/1000000 (≈1e-06)) (default); "
        "spent (ε=1/4 (≈0.25), δ=0); remaining (ε=1/4 (≈0.25), δ=1/1000000 (≈1e-06))"
    )
    assert out[4].startswith(
        "  2025-W02       cap (ε=1/3 (≈0.3333333333), δ=1/1000000 (≈1e-06)); spent (ε="
    )
    assert userdp(["ledger", "history", *at, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == records
    assert userdp(["ledger", "history", *at]) == 0
    text = capsys.readouterr().out
    assert "weekly-01 (completed): scope logs periods 2025-W01\n" in text
    assert "  cost ε=1/4 (≈0.25); counted (ε=1/4 (≈0.25), δ=0); conversion: none" in text
    assert "weekly-02 (reserved)" in text and "by zcdp_to_approx" in text
    assert userdp(["ledger", "history", *at, "--events"]) == 0
    events = capsys.readouterr().out.splitlines()
    assert [line.split(" ")[1] for line in events] == ["set-cap"] * 3 + [
        "reserve", "complete", "reserve"]  # fmt: skip
    assert userdp(["ledger", "show", *at, "--scope", "logs", "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert shown["cap"]["epsilon_exact"] == "1" and shown["periods"][0]["spent"]["epsilon"] == 0.25


def test_errors_exit_2_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    path = tmp_path / "ledger.sqlite"
    monkeypatch.delenv(LEDGER_ENV, raising=False)
    assert userdp(["ledger", "show"]) == 2
    assert "no ledger: pass --ledger PATH|URL or set $USERDP_LEDGER" in capsys.readouterr().err
    monkeypatch.setenv(LEDGER_ENV, str(path))
    assert userdp(["ledger", "history"]) == 2
    assert f"no ledger at {path}: set a cap first" in capsys.readouterr().err
    assert not path.exists()  # show and history never create a ledger
    path.touch(mode=0o600)  # nor fill an empty file with one
    assert userdp(["ledger", "show"]) == 2
    assert "is empty, not a ledger" in capsys.readouterr().err and path.stat().st_size == 0
    path.unlink()
    assert userdp(["ledger", "set-cap", "--scope", "logs", "--epsilon", "x"]) == 2
    assert (
        "--epsilon = 'x': expected a number such as 1, 0.5, 1/3 or 1e-6" in capsys.readouterr().err
    )
    assert userdp(["ledger", "set-cap", "--scope", "logs", "--rho", "-1"]) == 2
    assert "--rho = '-1': expected a number ≥ 0" in capsys.readouterr().err
    assert userdp(["ledger", "set-cap", "--scope", "logs", "--rho", "1/2"]) == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert userdp(["ledger", "set-cap", "--scope", "logs", "--epsilon", "1"]) == 2
    assert "scope 'logs' is capped in zcdp amounts" in capsys.readouterr().err
    assert userdp(["ledger", "show", "--scope", "other"]) == 2
    assert "scope 'other' is not in the ledger" in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"^2$"):  # argparse: a cap is ε or ρ, not both
        userdp(["ledger", "set-cap", "--scope", "logs", "--rho", "1", "--epsilon", "1"])
    assert "not allowed with argument" in capsys.readouterr().err
