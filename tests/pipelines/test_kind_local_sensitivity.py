"""The local-sensitivity query kinds in the release job (pipelines/kinds/local_sensitivity.py,
transforms/local_sensitivity.py): job-file checks, budget accounting, plan report and manifest,
exact values with noise off, the noise path keyed by (query, "value"), ⊥ rows, empty input, and the
issue's end-to-end run of a median, a PTR mean and a top domain through ``userdp run``."""

from __future__ import annotations

import io
import json
import math
import shutil
import sys
import types
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.stats_helpers import TEST_SECRET
from userdp.pipelines import kinds
from userdp.pipelines.cli import main
from userdp.pipelines.config import ConfigError, parse_job
from userdp.pipelines.generate import SCHEMA, generate
from userdp.pipelines.job import run_release
from userdp.pipelines.kinds import local_sensitivity
from userdp.pipelines.kinds.local_sensitivity_plan import PerPersonPlan, TopPartitionPlan
from userdp.pipelines.plan import plan_release
from userdp.pipelines.plan_text import print_plan
from userdp.transforms.mechanisms.accounting import ZCDP, ApproxDP, PureDP, zcdp_budget_for
from userdp.transforms.mechanisms.ptr import PTRMean, PTRQuantile
from userdp.transforms.mechanisms.ptr_ladder import LadderPTR, LadderRelease
from userdp.transforms.mechanisms.quantile_window import QuantileWindow, window_bound_for_reach
from userdp.transforms.mechanisms.rng import ReleaseKey
from userdp.transforms.mechanisms.smooth_sensitivity import (
    CauchyNoise,
    LaplaceLogNormalNoise,
    LaplaceNoise,
    SmoothQuantile,
)
from userdp.transforms.mechanisms.stability import StableTopPartition

EXAMPLE = Path(__file__).parents[2] / "examples" / "local_sensitivity_job.toml"
_SHIM = "tests.pipelines._local_sensitivity_quantile_shim"


@pytest.fixture(autouse=True)
def register(monkeypatch: pytest.MonkeyPatch) -> None:
    """The metrics → this module's kinds (median/quantile through a module exposing QUANTILE as
    KIND, standing in for the lead's method dispatcher)."""
    shim = types.ModuleType(_SHIM)
    shim.KIND = local_sensitivity.QUANTILE  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, _SHIM, shim)
    for metric in ("median", "quantile"):
        monkeypatch.setitem(kinds.METRIC_KINDS, metric, _SHIM)
    for metric in local_sensitivity.KIND.metrics:
        monkeypatch.setitem(kinds.METRIC_KINDS, metric, "userdp.pipelines.kinds.local_sensitivity")


def job(tmp_path: Path, *queries: dict[str, Any], **budget: Any) -> dict[str, Any]:
    return {
        "input": {"path": str(tmp_path / "data" / "*.parquet"), "person": "person_id"},
        "budget": budget or {"epsilon": 1.0, "delta": 1e-6},
        "output": {"path": str(tmp_path / "release")},
        "queries": list(queries),
    }


MEDIAN = {
    "name": "med",
    "metric": "median",
    "per_person": "mean",
    "value": "duration_s",
    "bounds": [0.0, 600.0],
}


# ------------------------------------------------------------------------------ job-file checks


@pytest.mark.parametrize(
    ("query", "budget", "match"),
    [
        ({**MEDIAN, "metric": "quantile", "q": 1.5}, {}, r"queries\[0\]\.q = 1\.5: expected a "),
        ({**MEDIAN, "metric": "quantile"}, {}, r"queries\[0\]\.q = \(missing\)"),
        ({**MEDIAN, "q": 0.5}, {}, r"queries\[0\]\.q = 0\.5: expected one of the keys"),
        ({**MEDIAN, "bounds": None}, {}, r"queries\[0\]\.bounds = None: expected \[lower, upper"),
        (
            {k: v for k, v in MEDIAN.items() if k != "bounds"},
            {},
            r"queries\[0\]\.bounds = \(missing\): expected \[lower, upper\]",
        ),
        ({**MEDIAN, "by": ["domain"]}, {}, r"queries\[0\]\.by = \['domain'\]: expected no `by`"),
        (
            {**MEDIAN, "metric": "ptr_mean", "by": "domain"},
            {},
            r"queries\[0\]\.by = 'domain': expected no `by`",
        ),
        (
            {**MEDIAN, "noise": "laplace"},
            {"epsilon": 1.0},
            r"queries\[0\]\.noise = 'laplace': expected a delta > 0 for laplace noise",
        ),
        (
            {**MEDIAN, "noise": "lln"},
            {"epsilon": 1.0},
            r"queries\[0\]\.noise = 'lln': expected cauchy under an epsilon total.*lln is ρ-zCDP",
        ),
        (
            {**MEDIAN, "noise": "laplace"},
            {"rho": 0.5},
            r"queries\[0\]\.noise = 'laplace': expected a delta > 0",
        ),
        ({**MEDIAN, "noise": "gaussian"}, {}, r"queries\[0\]\.noise = 'gaussian': expected one"),
        ({**MEDIAN, "noise": "laplace", "gamma": 2}, {}, r"queries\[0\]\.gamma = 2: expected no"),
        ({**MEDIAN, "noise": "cauchy", "gamma": 1}, {}, r"queries\[0\]\.gamma = 1: expected a "),
        ({**MEDIAN, "method": "shifted_inverse"}, {}, r"queries\[0\]\.method = 'shifted_inverse'"),
        ({**MEDIAN, "per_person": "median"}, {}, r"queries\[0\]\.per_person = 'median': expected"),
        (
            {k: v for k, v in MEDIAN.items() if k != "per_person"},
            {},
            r"queries\[0\]\.per_person = \(missing\): expected one of mean, sum, count",
        ),
        ({**MEDIAN, "per_person": "count"}, {}, r"queries\[0\]\.value = 'duration_s': expected no"),
        ({**MEDIAN, "per_person": "sum", "value": None}, {}, r"queries\[0\]\.value = None"),
        (
            {**MEDIAN, "metric": "ptr_mean"},
            {"epsilon": 1.0},
            r"queries\[0\]\.metric = 'ptr_mean': expected a delta > 0: ptr_mean is \(ε, δ\)-DP",
        ),
        ({**MEDIAN, "metric": "ptr_median", "bound": 0}, {}, r"queries\[0\]\.bound = 0: expected"),
        (
            {"name": "t", "metric": "top_partition"},
            {},
            r"queries\[0\]\.by = \(missing\): expected one or more partition columns",
        ),
        (
            {"name": "t", "metric": "top_partition", "by": ["domain"], "value": "url"},
            {},
            r"queries\[0\]\.value = 'url': expected one of the keys name, metric, by",
        ),
    ],
)
def test_bad_keys_are_refused_naming_the_key(
    tmp_path: Path, query: dict[str, Any], budget: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_job(job(tmp_path, query, **budget))


def test_an_overspent_delta_share_is_refused_at_planning(tmp_path: Path) -> None:
    ptr = {**MEDIAN, "metric": "ptr_median", "name": "p"}  # gets the remainder: δ = 0
    other = {**MEDIAN, "name": "o", "epsilon": 0.5, "delta": 1e-6}  # takes all of δ
    with pytest.raises(ConfigError, match=r"queries\[0\] = .*a share with delta > 0"):
        plan_release(parse_job(job(tmp_path, ptr, other)))


@pytest.mark.parametrize("metric", ["ptr_mean", "ptr_median"])
def test_a_ladder_whose_noise_overflows_is_a_config_error_at_planning(
    tmp_path: Path, metric: str
) -> None:
    # No `bound`: the ladder's top rung is hi − lo = 1.2e308, over ε/2 = 0.5 past the float range.
    # Before, only the selected rung was built, at release: an OverflowError whose rate moved with
    # the number of persons. Now every rung is built at planning.
    huge = {**MEDIAN, "metric": metric, "bounds": [-6e307, 6e307]}
    with pytest.raises(ConfigError, match=r"queries\[0\] = .*overflows a float; narrow the bounds"):
        plan_release(parse_job(job(tmp_path, huge)))


@pytest.mark.parametrize(
    ("budget", "noise", "says"),
    [
        ({"epsilon": 2e-5}, "cauchy", r"beta must be .*raise the query's"),
        ({"rho": 1e-12, "delta": 1e-6}, "lln", r"rho 1e-12 is below 2\^-15 .*use a larger share"),
    ],
)
def test_a_budget_too_small_for_the_smoothness_is_refused_at_planning(
    tmp_path: Path, budget: dict[str, float], noise: str, says: str
) -> None:
    """ε = 2e-5 gives the Cauchy rule β = ε/(2(γ+1)) = 2e-6, below the smallest β the bound's
    rounding margin allows (3.8e-6). The plan used to pass and every release to fail, on the
    first partition it met — whatever the data, but only once the job had been charged. The LLN
    noise refuses a ρ whose float set-aside would pass 2^−10 of it (before its β could fail)."""
    query = {**MEDIAN, "method": "smooth_sensitivity", "noise": noise}
    with pytest.raises(ConfigError, match=r"queries\[0\] = .*" + says):
        plan_release(parse_job(job(tmp_path, query, **budget)))


def test_an_epsilon_too_small_for_the_float_set_aside_is_refused_at_planning(
    tmp_path: Path,
) -> None:
    query = {**MEDIAN, "method": "smooth_sensitivity", "noise": "cauchy"}
    refused = r"queries\[0\] = .*epsilon 1e-05 is below 2\^-16 ≈ 1\.53e-05"
    with pytest.raises(ConfigError, match=refused):
        plan_release(parse_job(job(tmp_path, query, epsilon=1e-5)))


def test_userdp_plan_reports_an_overflowing_ladder_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = EXAMPLE.read_text().replace("bounds = [0.0, 200.0]", "bounds = [-6e307, 6e307]")
    text = text.replace("bound = 0.05 ", "# no bound: the ladder ")
    (tmp_path / "job.toml").write_text(text)
    assert main(["plan", str(tmp_path / "job.toml")]) == 2
    err = capsys.readouterr().err
    assert "queries[2] = " in err and "top rung b = upper − lower = 1.2e+308" in err
    assert "overflows a float" in err


# ------------------------------------------------------------------------- budget accounting


def test_default_noise_follows_the_total_and_is_counted_in_the_share(tmp_path: Path) -> None:
    pure = plan_release(parse_job(job(tmp_path, MEDIAN, epsilon=0.5))).queries[0]
    assert isinstance(pure, PerPersonPlan) and isinstance(pure.mechanism, SmoothQuantile)
    assert isinstance(pure.mechanism.noise, CauchyNoise) and pure.mechanism.noise.gamma == 4.0
    assert pure.guarantee == PureDP(Fraction(0.5)) and pure.method == "smooth_sensitivity"

    approx = plan_release(parse_job(job(tmp_path, MEDIAN, epsilon=0.5, delta=1e-6))).queries[0]
    assert isinstance(approx, PerPersonPlan) and isinstance(approx.mechanism, SmoothQuantile)
    assert isinstance(approx.mechanism.noise, LaplaceNoise)
    assert approx.guarantee == ApproxDP(Fraction(0.5), Fraction(1e-6))
    assert approx.guarantee.delta <= Fraction(1, 10**6)  # the float rounded down

    lln_query = {**MEDIAN, "noise": "lln"}
    lln = plan_release(parse_job(job(tmp_path, lln_query, epsilon=0.5, delta=1e-6))).queries[0]
    assert isinstance(lln, PerPersonPlan) and isinstance(lln.mechanism, SmoothQuantile)
    assert isinstance(lln.mechanism.noise, LaplaceLogNormalNoise)
    rho = zcdp_budget_for(ApproxDP(Fraction(1, 2), Fraction(1, 10**6))).rho
    assert lln.guarantee == ZCDP(rho)  # already a float: the largest ρ implying the share

    zc = plan_release(parse_job(job(tmp_path, MEDIAN, rho=0.125))).queries[0]
    assert isinstance(zc, PerPersonPlan) and isinstance(zc.mechanism, SmoothQuantile)
    assert isinstance(zc.mechanism.noise, LaplaceLogNormalNoise)
    assert zc.guarantee == ZCDP(Fraction(1, 8)) and zc.zcdp_delta == 0


def test_delta_mechanisms_under_rho_take_the_largest_epsilon_and_a_delta_share(
    tmp_path: Path,
) -> None:
    ptr = {**MEDIAN, "name": "p", "metric": "ptr_median"}
    cauchy = {**MEDIAN, "name": "c", "noise": "cauchy"}
    laplace = {**MEDIAN, "name": "l", "noise": "laplace"}
    plan = plan_release(parse_job(job(tmp_path, ptr, cauchy, laplace, rho=0.375, delta=3e-6)))
    rho = Fraction(1, 8)  # each query's third of ρ
    p, c, lap = plan.queries
    assert isinstance(p, PerPersonPlan) and isinstance(p.mechanism, LadderPTR)
    eps = p.mechanism.epsilon
    assert eps**2 / 2 <= rho < Fraction(math.nextafter(float(eps), 1.0)) ** 2 / 2
    half = Fraction(3, 2 * 10**6)  # budget.delta split over the two (ε, δ) queries
    assert p.mechanism.delta == half == p.zcdp_delta
    assert isinstance(c, PerPersonPlan) and c.zcdp_delta == 0  # pure ε: no δ
    assert c.guarantee == PureDP(eps)
    assert isinstance(lap, PerPersonPlan) and lap.zcdp_delta == half
    assert isinstance(lap.guarantee, ApproxDP) and lap.guarantee.epsilon == eps
    assert plan.spent == ZCDP(Fraction(3, 8))
    assert plan.spent_selection_delta == 2 * half  # the PTR and Laplace queries
    entry = plan.to_manifest()["queries"][2]
    assert entry["counted_as"]["delta"] == {"value": 1.5e-6, "exact": "3/2000000"}
    assert "δ-approximately ε²/2-zCDP" in entry["counted_as"]["rule"]


# ------------------------------------------------------------------------ plan and manifest


def test_plan_reports_beta_noise_rule_and_guarantee(tmp_path: Path) -> None:
    quantile = {**MEDIAN, "name": "q90", "metric": "quantile", "q": 0.9, "noise": "cauchy"}
    ptr = {**MEDIAN, "name": "pm", "metric": "ptr_mean", "bound": 2.0, "per_person": "max"}
    ladder = {**MEDIAN, "name": "pl", "metric": "ptr_median"}
    top = {"name": "top", "metric": "top_partition", "by": ["domain"]}
    cfg = parse_job(job(tmp_path, MEDIAN, quantile, ptr, ladder, top))
    plan = plan_release(cfg)
    out = io.StringIO()
    print_plan(plan, out)
    text = out.getvalue()
    # the Cauchy quantile is pure ε: budget.delta goes to the four queries that spend δ
    assert (
        "med: share (ε=0.2, δ=2.5e-07)\n"
        "  median of per-person mean(duration_s), clamped to [0, 600]: smooth sensitivity (NRS07)\n"
        "  noise: Laplace, β = ε'/(2 ln(2/δ₀)) = 0.006271 (δ₀ = 2.38e-07); value + 10·S(x)·Z "
        "(scale 2·S/ε'; ε' = ε − 2^-26 and δ·(1 − 2^-26), set aside for the float arithmetic)\n"
        "  memory: 2,324 per-person values around the rank on one worker (8 bytes each, "
        "whatever the person count; more only where distinct values crowd within 2^-48 of the "
        "bounds' span of the window's edges), found by 3 histograms of 65,536 counts\n"
        "  guarantee: (ε=0.2, δ=2.5e-07) for add/remove one person\n"
    ) in text
    assert "q90: share (ε=0.2, δ=0)\n" in text
    assert "quantile (q = 9/10) of per-person mean(duration_s)" in text
    assert "Cauchy-type 1/(1+|z|^4), β = ε'/(2(γ+1)) = 0.02; value + 50·S(x)·Z" in text
    assert "proposed bound b = 2: pass iff min(D(x, b), C) + DLap(2/ε) ≥ T = " in text
    assert "release: + Laplace scale 20 (b/(ε/2))" in text
    assert "no proposed bound: 24 rungs b = 7.153e-05 … 600 (×2), sparse vector" in text
    pm, pl = plan.queries[2].mechanism, plan.queries[3].mechanism
    assert isinstance(pm, PTRMean) and isinstance(pl, LadderPTR)
    assert f"else ⊥ (the cap C = {pm.calibration.cap}, where the test fails" in text
    assert f"threshold T = {pl.threshold}, distances capped at C = {pl.cap};" in text
    # what each releasing worker holds: the mean's sum, the ladder median's window
    assert "memory: the person count and the exact clamped sum (no per-person values)" in text
    bound = window_bound_for_reach(Fraction(1, 2), pl.reach)
    assert f"memory: {bound:,} per-person values around the rank on one worker" in text
    assert "top_partition by domain: the partition with the most persons" in text

    entries = plan.to_manifest()["queries"]
    med = entries[0]
    assert med["metric"] == "median" and med["method"] == "smooth_sensitivity"
    assert med["per_person"] == {"reduction": "mean", "value": "duration_s"}
    assert med["bounds"] == [0.0, 600.0]
    assert med["share"] == ApproxDP(Fraction(1, 5), Fraction(1, 4 * 10**6)).to_manifest()
    assert med["mechanism"]["noise"] == "laplace" and med["mechanism"]["beta"] > 0
    assert med["guarantee"]["kind"] == "approx"
    assert med["guarantee"]["neighbouring"] == "add/remove one person"
    assert entries[2]["mechanism"]["mechanism"] == "propose_test_release"
    assert entries[2]["mechanism"]["distance_cap"] == pm.calibration.cap
    assert entries[2]["gathered"].startswith("the person count and the exact clamped sum")
    assert entries[2]["per_person"] == {"reduction": "max", "value": "duration_s"}
    assert entries[3]["mechanism"]["mechanism"] == "propose_test_release_ladder"
    assert entries[4]["by"] == ["domain"] and entries[4]["mechanism"]["mechanism"] == "stability"
    assert "threshold" in entries[4]["mechanism"]


# ------------------------------------------------------------------------------ the pipeline


def per_person(
    table: pa.Table, reduction: str, value: str, lo: float = 0, hi: float = 600
) -> np.ndarray:
    """Per-person values as the release computes them: the reduction of the person's rows (a sum
    or mean over the rows sorted by value, on one thread: the release's fixed order), then
    clamped to [lo, hi] (the value, not each row)."""
    agg = {"count": "count", "distinct": "count_distinct"}.get(reduction, reduction)
    if reduction in ("sum", "mean"):
        table = table.take(pc.sort_indices(table.column(value)))
    grouped = table.group_by("person_id", use_threads=False).aggregate([(value, agg)])
    out = np.asarray(grouped.column(f"{value}_{agg}").to_numpy(), dtype=np.float64)
    return np.clip(out, lo, hi) if reduction in ("sum", "mean", "max", "min") else out


def quantile(values: np.ndarray, q: Fraction, lo: float, hi: float) -> float:
    xs = np.sort(np.clip(values, lo, hi))
    r = math.ceil(q * len(xs))
    return float(xs[r - 1]) if r >= 1 else lo


def top_domain(table: pa.Table) -> str:
    pairs = table.group_by(["person_id", "domain"]).aggregate([])
    counts = pairs.group_by("domain").aggregate([("person_id", "count")]).to_pylist()
    best = min(counts, key=lambda r: (-r["person_id_count"], r["domain"]))
    return str(best["domain"])


PIPELINE_QUERIES = (
    MEDIAN,
    {"name": "q90", "metric": "quantile", "q": 0.9, "per_person": "count", "bounds": [0, 600]},
    {**MEDIAN, "name": "pmean", "metric": "ptr_mean", "per_person": "sum", "bound": 40.0},
    {**MEDIAN, "name": "pmed", "metric": "ptr_median", "per_person": "max"},
    {**MEDIAN, "name": "urls", "metric": "median", "per_person": "distinct", "value": "url"},
    {"name": "top", "metric": "top_partition", "by": ["domain"]},
    # ⊥ with probability ≥ 1 − δ: D(x, b) = 0 (fewer than 600/0.001 persons)
    {**MEDIAN, "name": "bottom", "metric": "ptr_mean", "bound": 0.001},
)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("local_sensitivity")
    (root / "data").mkdir()
    generate(400, str(root / "data" / "logs.parquet"), seed=11)
    return root


def test_noise_off_releases_the_exact_statistics(logs: Path, tmp_path: Path) -> None:
    cfg = parse_job({**job(logs, *PIPELINE_QUERIES), "output": {"path": str(tmp_path)}})
    result = run_release(cfg, release_key=ReleaseKey(TEST_SECRET), noise=False, num_shards=3)
    rows = {name: pq.read_table(path).to_pylist() for name, path in result.outputs.items()}
    table = pq.read_table(logs / "data" / "logs.parquet")
    half = Fraction(1, 2)
    mean_duration = per_person(table, "mean", "duration_s")
    assert rows["med"] == [{"value": quantile(mean_duration, half, 0, 600), "released": True}]
    q90 = quantile(per_person(table, "count", "duration_s"), Fraction(9, 10), 0, 600)
    assert rows["q90"] == [{"value": q90, "released": True}]
    sums = np.clip(per_person(table, "sum", "duration_s"), 0, 600)
    assert rows["pmean"][0]["value"] == pytest.approx(float(np.mean(sums)), rel=1e-12)
    pmed = quantile(per_person(table, "max", "duration_s"), half, 0, 600)
    assert rows["pmed"] == [{"value": pmed, "released": True}]
    urls = quantile(per_person(table, "distinct", "url"), half, 0, 600)
    assert rows["urls"] == [{"value": urls, "released": True}]
    assert rows["top"] == [{"domain": top_domain(table), "released": True}]
    schema = pq.read_table(result.outputs["top"]).schema
    assert schema.names == ["domain", "released"] and schema.field("domain").type == pa.string()


def test_noise_on_is_the_core_mechanism_keyed_by_query_and_bottom_is_a_row(
    logs: Path, tmp_path: Path
) -> None:
    # ε = 1 per query, so the ladder's and the top partition's tests pass on 400 persons
    budget = {"epsilon": 7.0, "delta": 7e-6}
    cfg = parse_job({**job(logs, *PIPELINE_QUERIES, **budget), "output": {"path": str(tmp_path)}})
    key = ReleaseKey(TEST_SECRET)
    result = run_release(cfg, release_key=key, noise=True, num_shards=3)
    rows = {name: pq.read_table(path).to_pylist() for name, path in result.outputs.items()}
    table = pq.read_table(logs / "data" / "logs.parquet")
    plan = plan_release(cfg)
    for q in plan.queries:
        rng = key.for_query(q.name).rng("value")
        if isinstance(q, TopPartitionPlan):
            assert isinstance(q.mechanism, StableTopPartition)
            pairs = table.group_by(["person_id", "domain"]).aggregate([])
            counts = pairs.group_by("domain").aggregate([("person_id", "count")]).to_pylist()
            top = q.mechanism.release({(r["domain"],): r["person_id_count"] for r in counts}, rng)
            assert top == (top_domain(table),)  # released, and the exact answer
            assert rows[q.name] == [{"domain": top_domain(table), "released": True}]
            continue
        assert isinstance(q, PerPersonPlan)
        values = per_person(table, q.reduction, q.value or "duration_s")
        out = q.mechanism.release(values, rng)
        expected = out.value if isinstance(out, LadderRelease) else out
        assert rows[q.name] == [{"value": expected, "released": expected is not None}], q.name
        if q.name == "bottom":
            assert expected is None
        else:
            assert expected is not None and math.isfinite(expected)
        if isinstance(q.mechanism, SmoothQuantile):
            assert expected is not None and 0.0 <= expected <= 600.0
        else:
            assert isinstance(q.mechanism, (PTRMean, PTRQuantile, LadderPTR))


def test_a_job_whose_window_drops_most_persons_releases_the_core_release(tmp_path: Path) -> None:
    """3,000 persons at ε = 8 (Cauchy, β ≈ 0.8): the window keeps a few dozen values, and the
    released median and 0.9-quantile are the core's on every person's value."""
    (tmp_path / "data").mkdir()
    generate(3000, str(tmp_path / "data" / "logs.parquet"), seed=5)
    base = {
        "metric": "median",
        "method": "smooth_sensitivity",
        "value": "duration_s",
        "bounds": [0, 600],
    }
    queries = [
        {**base, "name": "med", "per_person": "mean"},
        {**base, "name": "q9", "metric": "quantile", "q": 0.9, "per_person": "sum"},
    ]
    cfg = parse_job(
        {
            "input": {"path": str(tmp_path / "data" / "*.parquet"), "person": "person_id"},
            "budget": {"epsilon": 16.0},
            "output": {"path": str(tmp_path / "release")},
            "queries": queries,
        }
    )
    key = ReleaseKey(TEST_SECRET)
    result = run_release(cfg, release_key=key, noise=True, num_shards=4)
    table = pq.read_table(tmp_path / "data" / "logs.parquet")
    for plan in plan_release(cfg).queries:
        assert isinstance(plan, PerPersonPlan) and isinstance(plan.mechanism, SmoothQuantile)
        values = per_person(table, plan.reduction, "duration_s", plan.lower, plan.upper)
        window = QuantileWindow.for_release(len(values), plan.mechanism.q, plan.mechanism.beta)
        assert window.size < len(values) / 10, plan.name
        want = plan.mechanism.release(values, key.for_query(plan.name).rng("value"))
        rows = pq.read_table(result.outputs[plan.name]).to_pylist()
        assert rows == [{"value": want, "released": True}], plan.name


def test_ptr_jobs_read_a_window_or_a_sum_and_release_the_core_release(tmp_path: Path) -> None:
    """PTR's medians (a proposed bound, and the ladder) gather the window of their capped
    distance, and its means only the count and exact sum: each released row is the core's
    release on every person's value, for the same noise key."""
    (tmp_path / "data").mkdir()
    generate(3000, str(tmp_path / "data" / "logs.parquet"), seed=6)
    base = {"per_person": "mean", "value": "duration_s", "bounds": [0, 600]}
    queries = [
        {**base, "name": "pmed", "metric": "ptr_median", "bound": 5.0},
        {**base, "name": "lmed", "metric": "ptr_median"},
        {**base, "name": "pmean", "metric": "ptr_mean", "bound": 1.0},
        {**base, "name": "lmean", "metric": "ptr_mean"},
    ]
    cfg = parse_job(
        {
            "input": {"path": str(tmp_path / "data" / "*.parquet"), "person": "person_id"},
            "budget": {"epsilon": 32.0, "delta": 1e-6},
            "output": {"path": str(tmp_path / "release")},
            "queries": queries,
        }
    )
    key = ReleaseKey(TEST_SECRET)
    result = run_release(cfg, release_key=key, noise=True, num_shards=4)
    table = pq.read_table(tmp_path / "data" / "logs.parquet")
    released = 0
    for plan in plan_release(cfg).queries:
        assert isinstance(plan, PerPersonPlan)
        m = plan.mechanism
        assert isinstance(m, (PTRQuantile, PTRMean, LadderPTR))
        values = per_person(table, plan.reduction, "duration_s", plan.lower, plan.upper)
        if not isinstance(m, PTRMean) and m.q is not None:
            window = QuantileWindow.for_reach(len(values), m.q, m.reach)
            assert window.size < len(values) / 5, plan.name
        out = m.release(values, key.for_query(plan.name).rng("value"))
        want = out.value if isinstance(out, LadderRelease) else out
        rows = pq.read_table(result.outputs[plan.name]).to_pylist()
        assert rows == [{"value": want, "released": want is not None}], plan.name
        released += want is not None
    assert released >= 3  # values were compared, not only ⊥


def test_empty_input_gives_one_row_per_query(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    pq.write_table(SCHEMA.empty_table(), tmp_path / "data" / "empty.parquet")
    queries = (MEDIAN, PIPELINE_QUERIES[2], PIPELINE_QUERIES[5])
    cfg = parse_job(job(tmp_path, *queries))
    result = run_release(cfg, release_key=ReleaseKey(TEST_SECRET), noise=False, num_shards=2)
    rows = {name: pq.read_table(path).to_pylist() for name, path in result.outputs.items()}
    assert rows["med"] == [{"value": 0.0, "released": True}]  # the quantile of ∅ is `lower`
    assert rows["pmean"] == [{"value": 300.0, "released": True}]  # the mean of ∅: the midpoint
    assert rows["top"] == [{"domain": None, "released": False}]  # no partition at all
    noisy = run_release(cfg, release_key=ReleaseKey(TEST_SECRET), noise=True, num_shards=2)
    rows = {name: pq.read_table(path).to_pylist() for name, path in noisy.outputs.items()}
    assert rows["pmean"] == [{"value": None, "released": False}]  # D = 0: ⊥
    assert rows["top"] == [{"domain": None, "released": False}]
    assert rows["med"][0]["released"] and 0.0 <= rows["med"][0]["value"] <= 600.0


def test_userdp_run_end_to_end_records_beta_noise_and_guarantees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(EXAMPLE, tmp_path / "job.toml")
    data = tmp_path / "data" / "logs.parquet"
    assert main(["generate", "--people", "600", "--out", str(data)]) == 0
    assert main(["plan", str(tmp_path / "job.toml")]) == 0
    printed = capsys.readouterr().out
    assert "β = ε'/(2(γ+1)) = 0.04" in printed and "guarantee: ε=0.4 for add/remove" in printed
    assert main(["run", str(tmp_path / "job.toml")]) == 0
    out = tmp_path / "release_local"
    manifest = json.loads((out / "manifest.json").read_text())
    median, trimmed, mean, top = manifest["queries"]
    assert trimmed["metric"] == "trimmed_mean" and trimmed["guarantee"]["kind"] == "pure"
    assert median["mechanism"]["beta"] == pytest.approx(0.04)
    assert median["mechanism"]["noise"] == "cauchy" and median["mechanism"]["gamma"] == 4.0
    assert median["guarantee"]["kind"] == "pure"
    assert mean["metric"] == "ptr_mean" and mean["mechanism"]["bound"] == 0.05
    assert mean["guarantee"]["kind"] == "approx"
    assert top["metric"] == "top_partition" and top["guarantee"]["kind"] == "approx"
    assert manifest["outputs"] == {
        "median_duration": "median_duration.parquet",
        "trimmed_duration": "trimmed_duration.parquet",
        "mean_visits": "mean_visits.parquet",
        "top_domain": "top_domain.parquet",
    }
    med_row = pq.read_table(out / "median_duration.parquet").to_pylist()
    assert len(med_row) == 1 and med_row[0]["released"] and 0 <= med_row[0]["value"] <= 600
    tm_row = pq.read_table(out / "trimmed_duration.parquet").to_pylist()
    assert len(tm_row) == 1 and tm_row[0]["released"] and 0 <= tm_row[0]["value"] <= 600
    # 600 persons are far fewer than 200/0.05 + T: the PTR test fails (probability ≥ 1 − δ)
    assert pq.read_table(out / "mean_visits.parquet").to_pylist() == [
        {"value": None, "released": False}
    ]
    top_row = pq.read_table(out / "top_domain.parquet").to_pylist()
    assert len(top_row) == 1 and set(top_row[0]) == {"domain", "released"}


def test_a_mean_whose_span_passes_the_float_range_is_a_config_error(tmp_path: Path) -> None:
    """bounds [−1e308, 1e308]: the span 2e308 is no float. Any kind's OverflowError at planning
    becomes a ConfigError naming the query (it was a bare traceback)."""
    mean = {"name": "mv", "metric": "mean", "value": "duration_s", "bounds": [-1e308, 1e308],
            "max_partitions_per_person": 1, "max_rows_per_partition": 1}  # fmt: skip
    with pytest.raises(ConfigError, match=r"queries\[0\] = .*noise fits a float.*narrow"):
        plan_release(parse_job(job(tmp_path, mean)))
