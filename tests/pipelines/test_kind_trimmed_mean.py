"""``metric = "trimmed_mean"`` in a job: its keys and their misuse, how its share is counted under
each kind of total, what the plan and manifest say, and that the pipeline's draw (shards send grid
histograms) is the core mechanism's draw from all per-person values — with the noise-off hook,
the exact statistic."""

from __future__ import annotations

import io
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.stats_helpers import TEST_SECRET
from userdp.pipelines.config import parse_job
from userdp.pipelines.config_fields import ConfigError
from userdp.pipelines.generate import SCHEMA, generate
from userdp.pipelines.job import run_release
from userdp.pipelines.kinds.local_sensitivity_plan import PerPersonPlan
from userdp.pipelines.plan import plan_release
from userdp.pipelines.plan_text import print_plan
from userdp.transforms.mechanisms.accounting import ZCDP, PureDP
from userdp.transforms.mechanisms.rng import ReleaseKey
from userdp.transforms.mechanisms.trimmed_mean import TrimmedMean

from .test_kind_exponential_quantile import release_graph_labels
from .test_kind_local_sensitivity import per_person

TRIMMED = {
    "name": "tm",
    "metric": "trimmed_mean",
    "per_person": "mean",
    "value": "duration_s",
    "bounds": [0.0, 600.0],
}


def job(tmp_path: Path, queries: list[dict[str, Any]], **budget: Any) -> dict[str, Any]:
    return {
        "input": {"path": str(tmp_path / "data" / "*.parquet"), "person": "person_id"},
        "budget": budget or {"epsilon": 1.0},
        "output": {"path": str(tmp_path / "release")},
        "queries": queries,
    }


def planned(tmp_path: Path, query: dict[str, Any], **budget: Any) -> tuple[Any, Any, str]:
    plan = plan_release(parse_job(job(tmp_path, [query], **budget)))
    (q,) = plan.queries
    assert isinstance(q, PerPersonPlan) and isinstance(q.mechanism, TrimmedMean)
    out = io.StringIO()
    print_plan(plan, out)
    return q, plan.to_manifest()["queries"][0], out.getvalue()


def test_defaults_and_the_epsilon_share(tmp_path: Path) -> None:
    q, entry, text = planned(tmp_path, TRIMMED, epsilon=0.8)
    m = q.mechanism
    assert (m.trim, m.grid_bits, m.budget) == (Fraction(1, 10), 20, PureDP(Fraction(4, 5)))
    assert m.low_quantile.epsilon == Fraction(1, 4) and m.high_quantile.q == Fraction(9, 10)
    assert entry["method"] == "private_thresholds"
    assert entry["mechanism"]["kind"] == "trimmed_mean"
    assert entry["mechanism"]["budget_parts"] == {
        "each_threshold": "5/16", "centred_sum": "9/32", "count": "3/32"}  # fmt: skip
    assert entry["counted_as"]["rule"] == "ε-DP within the ε share"
    assert "one count per grid point" in entry["gathered"]
    assert entry["output"].startswith("one row: value, lower_threshold and upper_threshold")
    assert q.output_columns == (("value", "float64"), ("lower_threshold", "float64"),
                                ("upper_threshold", "float64"), ("released", "bool"))  # fmt: skip
    assert "mean of the values between private 1/10 and 9/10 quantiles (trim 1/10" in text
    assert "thresholds: exponential mechanism at q = 1/10 and 9/10, ε=0.25 each" in text
    assert "discrete Laplace (b−a)/((9/32)·ε) and 1/((3/32)·ε), ε=0.8" in text
    # std of the mean's noise ≈ √2·(1/(9ε/32))/2·(threshold span)/kept: 3.143 at ε = 0.8
    assert "std ≈ 3.14·(upper threshold − lower threshold) / kept persons" in text


def test_under_rho_it_is_rho_zcdp_and_under_epsilon_delta_pure(tmp_path: Path) -> None:
    q, entry, text = planned(tmp_path, {**TRIMMED, "trim": 0.25, "grid_bits": 12}, rho=0.4)
    assert q.mechanism.budget == ZCDP(Fraction(2, 5)) and q.guarantee == ZCDP(Fraction(2, 5))
    assert q.mechanism.low_quantile.epsilon == 1  # ε²/8 = 5ρ/16 = 1/8
    assert entry["counted_as"]["rule"] == "ρ-zCDP within the ρ share"
    assert "discrete Gaussian σ² = (b−a)²/(2·(9/32)·ρ) and 1/(2·(3/32)·ρ), ρ=0.4" in text
    assert "4,096 grid cells" in text
    q, entry, _ = planned(tmp_path, TRIMMED, epsilon=1.0, delta=1e-6)
    assert q.guarantee == PureDP(1) and entry["counted_as"]["rule"] == "ε-DP counts as (ε, 0)-DP"


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"trim": 0.5}, r"queries\[0\]\.trim = 0\.5: expected a finite number in \(0, 0\.5\)"),
        ({"trim": 0}, r"queries\[0\]\.trim = 0: expected a finite number in \(0, 0\.5\)"),
        ({"trim": "10%"}, r"queries\[0\]\.trim = '10%': expected a finite number"),
        ({"grid_bits": 41}, r"queries\[0\]\.grid_bits = 41"),
        ({"by": ["domain"]}, r"queries\[0\]\.by = \['domain'\]: expected no `by`"),
        ({"q": 0.5}, r"queries\[0\]\.q"),
        ({"noise": "laplace"}, r"queries\[0\]\.noise"),
        ({"bounds": None}, r"queries\[0\]\.bounds = None: expected \[lower, upper"),
        ({"per_person": "median"}, r"queries\[0\]\.per_person = 'median': expected one of"),
    ],
)
def test_misuse_is_refused_with_the_key(tmp_path: Path, change: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_job(job(tmp_path, [{**TRIMMED, **change}]))


@pytest.mark.parametrize("metric", ["trimmed_mean", "median"])
def test_bounds_too_close_for_a_grid_are_the_bounds_fault(tmp_path: Path, metric: str) -> None:
    query = {**TRIMMED, "metric": metric, "bounds": [0.0, 5e-324]}
    with pytest.raises(ConfigError, match=r"queries\[0\]\.bounds = \[0\.0, 5e-324\]: expected .*"
                       r"further apart.*too close to tell apart on a grid"):  # fmt: skip
        plan_release(parse_job(job(tmp_path, [query])))


def test_a_rho_share_too_small_to_split_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"queries\[0\].*too small for a trimmed mean"):
        planned(tmp_path, TRIMMED, rho=1e-320)


def row_of(m: TrimmedMean, parts: Any) -> dict[str, Any]:
    lower, upper = m.threshold_values(parts)
    return {"value": parts.value, "lower_threshold": lower, "upper_threshold": upper,
            "released": True}  # fmt: skip


def _release(tmp_path: Path, queries: list[dict[str, Any]], noise: bool, shards: int) -> Any:
    cfg = parse_job(job(tmp_path, queries, epsilon=2.0))
    key = ReleaseKey(TEST_SECRET)
    result = run_release(cfg, release_key=key, noise=noise, num_shards=shards)
    return cfg, key, result


QUERIES = [
    TRIMMED,
    {**TRIMMED, "name": "tm_sum", "per_person": "sum", "trim": 0.25, "grid_bits": 8},
    {**TRIMMED, "name": "tm_rows", "per_person": "count", "bounds": [0, 50], "value": None},
    {**TRIMMED, "name": "tm_fine", "grid_bits": 30},  # above DENSE_CELLS: the sparse combine
]


@pytest.mark.parametrize("shards", [1, 3])
def test_the_pipeline_draws_what_the_core_draws_from_all_per_person_values(
    tmp_path: Path, shards: int
) -> None:
    (tmp_path / "data").mkdir()
    generate(300, str(tmp_path / "data" / "logs.parquet"), seed=5)
    queries = [{k: v for k, v in q.items() if v is not None} for q in QUERIES]
    cfg, key, result = _release(tmp_path, queries, noise=True, shards=shards)
    table = pq.read_table(tmp_path / "data" / "logs.parquet")
    for q in plan_release(cfg).queries:
        assert isinstance(q, PerPersonPlan) and isinstance(q.mechanism, TrimmedMean)
        # count: rows per person (of any non-null column; the mechanism clamps to the bounds)
        values = per_person(table, q.reduction, q.value or "duration_s", q.lower, q.upper)
        m = q.mechanism
        parts = m.release_parts(m.grid_histogram(values), key.for_query(q.name).rng("value"))
        rows = pq.read_table(result.outputs[q.name]).to_pylist()
        assert rows == [row_of(m, parts)], q.name
        assert rows[0]["value"] == m.release(values, key.for_query(q.name).rng("value"))


def test_noise_off_releases_the_exact_trimmed_mean(tmp_path: Path) -> None:
    """The test hook: the exact statistic on the grid histogram, which for these distinct
    continuous values is the classical 10%-trimmed mean up to grid rounding."""
    (tmp_path / "data").mkdir()
    generate(300, str(tmp_path / "data" / "logs.parquet"), seed=6)
    cfg, _, result = _release(tmp_path, [TRIMMED], noise=False, shards=2)
    (q,) = plan_release(cfg).queries
    assert isinstance(q, PerPersonPlan) and isinstance(q.mechanism, TrimmedMean)
    values = per_person(pq.read_table(tmp_path / "data" / "logs.parquet"), "mean",
                        "duration_s", 0.0, 600.0)  # fmt: skip
    (row,) = pq.read_table(result.outputs["tm"]).to_pylist()
    m = q.mechanism
    assert row == row_of(m, m.exact_parts(m.grid_histogram(values)))
    assert row["value"] == m.exact(values)
    # the thresholds cut a tenth of the persons off each end (to a person: n/10 need not be whole)
    half_cell = 600 / 2**21
    below = int(np.sum(values < row["lower_threshold"] - half_cell))
    above = int(np.sum(values > row["upper_threshold"] + half_cell))
    assert abs(below - len(values) / 10) <= 1 and abs(above - len(values) / 10) <= 1
    xs = sorted(values)
    k = len(xs) // 10
    classical = sum(xs[k : len(xs) - k]) / (len(xs) - 2 * k)
    assert row["value"] == pytest.approx(classical, abs=3 * 600 / 2**20)
    assert row["value"] != pytest.approx(sum(xs) / len(xs), abs=1e-3)  # not the plain mean


def test_empty_input_releases_the_draw_from_no_values(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    pq.write_table(SCHEMA.empty_table(), tmp_path / "data" / "empty.parquet")
    cfg, key, result = _release(tmp_path, [TRIMMED], noise=True, shards=2)
    (q,) = plan_release(cfg).queries
    assert isinstance(q, PerPersonPlan)
    m = q.mechanism
    assert isinstance(m, TrimmedMean)
    parts = m.release_parts(m.grid_histogram([]), key.for_query("tm").rng("value"))
    assert pq.read_table(result.outputs["tm"]).to_pylist() == [row_of(m, parts)]


def test_the_graph_combines_histograms_with_noise_on_and_off() -> None:
    mech = TrimmedMean(Fraction(1, 10), 0.0, 600.0, PureDP(1))
    for noise in (True, False):
        seen = release_graph_labels(mech, "tm", noise)
        assert {"tm/GridHistogram", "tm/MergeHistograms"} <= seen, noise
        assert not any("Gather" in label for label in seen), noise
