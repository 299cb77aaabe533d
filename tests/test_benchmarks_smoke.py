"""Smoke tests of ``benchmarks/throughput.py`` and ``benchmarks/median_histogram.py`` on tiny
data sets (speed is not asserted here).

What is asserted: the script runs end to end, prints rows/s of both pipelines, and its plain
per-element pipeline (b) bounds contributions exactly like userdp — the untimed check finds the
same per-key counts — while a different bounding key, a negative control, is caught; the
whole-process runs print rows/s and peak RSS.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_scripts import load_benchmark
from userdp.pipelines.config import load_job
from userdp.pipelines.generate import generate
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "throughput.py"


@pytest.fixture(scope="module")
def throughput() -> ModuleType:
    return load_benchmark("throughput")  # registered: Beam pickles BoundPerson by module name


def test_runs_end_to_end_and_both_pipelines_count_alike(
    throughput: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ratio = throughput.main(["--people", "300", "--repeat", "1", "--data", str(tmp_path)])
    out = capsys.readouterr().out
    assert ratio > 0
    assert out.count("rows/s") >= 4  # (a) and (b) in the run line and in the median line
    assert "per-key counts identical" in out
    assert re.search(r"\(a\) userdp run .* rows/s +peak RSS [\d,]+ MiB", out)
    assert re.search(r"\(b\) per-element Beam .* rows/s +peak RSS [\d,]+ MiB", out)
    assert (tmp_path / "logs-300p-seed0.parquet").exists()  # cached for the next run


def test_a_different_bounding_rule_is_caught(throughput: ModuleType, tmp_path: Path) -> None:
    data = str(tmp_path / "logs.parquet")
    generate(300, data, seed=1)  # includes 3 "bot" persons visiting all 50 domains (> L = 5)
    release = str(tmp_path / "release")
    job = load_job(throughput.write_job(tmp_path, data, release))
    run_release(job, release_key=throughput.CHECK_KEY, noise=False)
    exact = {d: int(v) for d, v in throughput.read_release(release).items()}

    out = str(tmp_path / "plain.json")
    throughput.run_plain(data, out, throughput.CHECK_KEY.subkey("bounding"))
    assert throughput.read_plain(out) == exact
    other = ReleaseKey(bytes(range(1, 33))).subkey("bounding")
    throughput.run_plain(data, out, other)
    assert throughput.read_plain(out) != exact


def test_auto_bound_benchmark_prints_every_family_and_epsilon() -> None:
    import subprocess  # noqa: PLC0415

    script = SCRIPT.with_name("auto_bound.py")
    out = subprocess.run(
        [sys.executable, str(script), "--people", "400", "--runs", "10"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in FAMILIES]
    names = [f[0] for f in FAMILIES]
    assert [(r[0], r[1]) for r in rows] == [(f, e) for f in names for e in ("0.1", "1", "8")]
    # auto/best sampled and exact, auto/SI
    assert all(float(r[7]) > 0 and float(r[8]) > 0 and float(r[9]) > 0 for r in rows)
    assert out.rstrip().endswith(("targets met", "TARGETS MISSED"))


def test_auto_bound_benchmark_heavy_families_and_bot_height() -> None:
    """--heavy adds the heavy tails, --only picks families, --bot-height moves the 5 bots."""
    import subprocess  # noqa: PLC0415

    script = SCRIPT.with_name("auto_bound.py")
    out = subprocess.run(
        [sys.executable, str(script), "--people", "400", "--runs", "10", "--heavy",
         "--only", "pareto", "--only", "zipf+bots", "--bot-height", "1000000"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    names = {"uniform", "lognormal", "zipf+bots", "zipf", "constant", "zipf-free", "zipf2.5"}
    rows = [r for r in map(str.split, out.splitlines()) if r[:1] and r[0] in names | {"pareto"}]
    assert [r[0] for r in rows] == ["zipf+bots"] * 3 + ["pareto"] * 3
    assert "bots at 1,000,000" in out
    # with the bots at 10^6 rows the best clamp keeps them at ε = 8: best B ≈ 10^6
    assert 5e5 < float(rows[2][2]) <= 2e6


def test_auto_bound_benchmark_rho_mode_runs_the_jobs_zcdp_plan() -> None:
    import subprocess  # noqa: PLC0415

    script = SCRIPT.with_name("auto_bound.py")
    out = subprocess.run(
        [sys.executable, str(script), "--people", "400", "--runs", "10", "--rho",
         "--only", "constant"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    assert "ρ = ε²/2, Gaussian noise" in out
    rows = [r for r in map(str.split, out.splitlines()) if r[:1] == ["constant"]]
    assert [r[1] for r in rows] == ["0.1", "1", "8"]
    assert all(r[2] == "1" for r in rows)  # one row per person: the best clamp is 1


FAMILIES = [["uniform"], ["lognormal"], ["zipf+bots"], ["zipf"], ["constant"]]


def _script(name: str) -> Path:
    return SCRIPT.parent / f"{name}.py"


@pytest.mark.slow
def test_the_accuracy_and_shared_selection_benchmarks_run(tmp_path: Path) -> None:
    """Both print their tables on tiny data (userdp only: PipelineDP is an opt-in child)."""
    import subprocess  # noqa: PLC0415

    acc = subprocess.run(
        [sys.executable, str(_script("accuracy")), "--people", "400", "--runs", "1",
         "--data-dir", str(tmp_path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = [line for line in acc.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 8  # the header, then 4 metrics × 2 partition modes
    assert "userdp mean (private)" in acc.stdout
    shared = subprocess.run(
        [sys.executable, str(_script("shared_selection")), "--people", "400", "--runs", "1"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "shared selection" in shared.stdout and "runs with two key sets 0/1" in shared.stdout


def test_auto_bound_plot_draws_the_benchmarks_exact_ratios(tmp_path: Path) -> None:
    """The picture's panels carry the same exact auto / best as the benchmark's table."""
    import subprocess  # noqa: PLC0415

    out_png = tmp_path / "auto-bound.png"
    out = subprocess.run(
        [sys.executable, str(_script("auto_bound_plot")), "--people", "400", "--out",
         str(out_png)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    drawn = re.findall(r"^(\S+) +ε = (\S+) +auto / best = (\S+)$", out, re.M)
    table = subprocess.run(
        [sys.executable, str(_script("auto_bound")), "--people", "400", "--runs", "10"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    exact = {(r[0], r[1]): r[8] for r in map(str.split, table.splitlines()) if r[:1] in FAMILIES}
    assert len(drawn) == 12
    assert all(exact[(name, eps)] == ratio for name, eps, ratio in drawn)


def test_the_median_histogram_benchmark_releases_one_value_both_ways(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """benchmarks/median_histogram.py: gathered values and merged histograms release the same
    value in every row, and the histogram of row counts is far smaller than the values."""
    load_benchmark("median_histogram").main(["--persons", "3000,20000"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    rows = [r for r in rows if r and r[0] in ("continuous", "counts")]
    assert len(rows) == 4 and all(r[-1] == "True" for r in rows)
    for r in rows:  # family persons | bytes peak s | bytes peak s shards_s | same
        values, histogram = int(r[3].replace(",", "")), int(r[7].replace(",", ""))
        assert values == 8 * int(r[1].replace(",", ""))
        if r[0] == "counts":  # ~600 distinct indices against 8 bytes per person
            assert histogram * 10 < values


def test_the_smooth_window_benchmark_releases_one_value_both_ways(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """benchmarks/smooth_window.py: every value and the window release the same value in every
    row, and the window keeps the same few values at 3,000 and 30,000 persons."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # as when it runs: it imports a sibling
    load_benchmark("smooth_window").main(["--persons", "3000,30000"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    rows = [r[1:] for r in rows if r and r[0] == "smooth"]
    assert len(rows) == 12 and all(r[-1] == "True" for r in rows)
    for r in rows:  # q family persons | bytes peak s | bytes values peak s | same
        assert int(r[4].replace(",", "")) == 8 * int(r[2].replace(",", ""))
        assert int(r[9].replace(",", "")) == (148 if r[0] == "1/2" else 1320)


def test_the_ptr_window_benchmark_releases_one_value_both_ways(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--ptr``: PTR's quantiles keep their window (117, 1,045 and 489 values at most), its means
    gather nothing, and every row releases the same value both ways."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    load_benchmark("smooth_window").main(["--persons", "3000", "--ptr"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    rows = [r for r in rows if r and r[0] in ("ptr", "ladder")]
    assert len(rows) == 15 and all(r[-1] == "True" for r in rows)
    bound = {"1/2": 117, "9/10": 1045, "mean": 0}
    for r in rows:  # kind q family persons | bytes peak s | bytes values peak s | same
        limit = 489 if r[:2] == ["ladder", "1/2"] else bound[r[1]]
        assert 0.9 * limit <= int(r[10].replace(",", "")) <= limit or limit == 0
        assert int(r[10].replace(",", "")) <= limit
