"""The shifted-inverse and auto-bound query kinds in the release job (pipelines/kinds/
shifted_inverse.py, auto_bound.py, transforms/shifted_inverse_*.py): job-file checks, budget
accounting, plan report and manifest, the combiners' independence from how the input is split,
exact values with noise off, the noise path keyed by (query, partition, purpose), per-partition
releases with L, empty input, and the issue's end-to-end run through ``userdp run``."""

from __future__ import annotations

import io
import json
import math
import shutil
from collections import Counter, defaultdict
from fractions import Fraction
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.beam_collect import run_and_collect
from tests.stats_helpers import TEST_SECRET
from userdp.pipelines import kinds
from userdp.pipelines.cli import main
from userdp.pipelines.config import ConfigError, parse_job
from userdp.pipelines.generate import SCHEMA, generate
from userdp.pipelines.job import run_release
from userdp.pipelines.kinds.shifted_inverse_plan import AutoBoundPlan, ShiftedInversePlan
from userdp.pipelines.plan import plan_release
from userdp.pipelines.plan_text import print_plan
from userdp.transforms import Budget, Max, Sum, Total
from userdp.transforms import shifted_inverse_contributions as contributions
from userdp.transforms.mechanisms.accounting import ZCDP, ApproxDP, PureDP, zcdp_budget_for
from userdp.transforms.mechanisms.auto_bound import ClampChoiceParams
from userdp.transforms.mechanisms.rng import ReleaseKey
from userdp.transforms.mechanisms.shifted_inverse import shifted_inverse, shifted_inverse_quantile
from userdp.transforms.mechanisms.shifted_inverse_stats import (
    distinct_down_values,
    max_down_values,
    quantile_k,
    sum_down_values,
)
from userdp.transforms.noisy_combine import canonical_key_string
from userdp.transforms.shifted_inverse_combiners import ClampStats, GatherRows, TopTotals, TopValues
from userdp.transforms.shifted_inverse_contributions import Contributions, shard_contributions
from userdp.transforms.shifted_inverse_release import AutoBoundQuery
from userdp.transforms.testing import exact_release

EXAMPLE = Path(__file__).parents[2] / "examples" / "shifted_inverse_job.toml"
SI = "userdp.pipelines.kinds.shifted_inverse"


@pytest.fixture(autouse=True)
def register(monkeypatch: pytest.MonkeyPatch) -> None:
    """total / max / distinct → the shifted-inverse kind (the lead adds them to METRIC_KINDS);
    median / quantile reach it through the real method dispatcher, auto bounds through the
    aggregate kind."""
    for metric in ("total", "max", "distinct"):
        monkeypatch.setitem(kinds.METRIC_KINDS, metric, SI)


def job(root: Path, *queries: dict[str, Any], **budget: Any) -> dict[str, Any]:
    return {
        "input": {"path": str(root / "data" / "*.parquet"), "person": "person_id"},
        "budget": budget or {"epsilon": 1.0},
        "output": {"path": str(root / "release")},
        "queries": list(queries),
    }


TOTAL = {"name": "t", "metric": "total"}
MEDIAN = {"name": "m", "metric": "median", "method": "shifted_inverse", "value": "duration_s"}
AUTO = {"name": "a", "metric": "count", "bound": "auto"}


# ------------------------------------------------------------------------------ job-file checks


@pytest.mark.parametrize(
    ("query", "budget", "match"),
    [
        ({**TOTAL, "per_person": "sum"}, {}, r"queries\[0\]\.per_person = 'sum': expected one of"),
        ({**TOTAL, "resolution": 0.3}, {}, r"queries\[0\]\.resolution = 0\.3: .*whole number"),
        (
            {**TOTAL, "beta": 1.5},
            {},
            r"queries\[0\]\.beta = 1\.5: expected a number in \(0, 1\)\. the failure probability",
        ),
        ({**TOTAL, "growth": 1.1}, {}, r"queries\[0\]\.growth = 1\.1: expected no growth"),
        (
            {**TOTAL, "grid": "log", "growth": 1},
            {},
            r"queries\[0\]\.growth = 1: expected a growth > 1\. growth must be > 1, got 1$",
        ),
        (
            {**TOTAL, "upper": -5},
            {},
            r"queries\[0\]\.upper = -5: expected a finite number > 0\. D, the largest value",
        ),
        (
            {**TOTAL, "upper": 10, "resolution": 3},
            {},
            r"resolution = 3: expected a resolution d that divides upper\. upper / resolution "
            r"must be a whole number, got 10 / 3;",
        ),
        (
            {**TOTAL, "resolution": 0},
            {},
            r"queries\[0\]\.resolution = 0: expected a finite number > 0\. d, the grid step",
        ),
        ({**TOTAL, "search": "ternary"}, {}, r"queries\[0\]\.search = 'ternary': expected one of"),
        ({**TOTAL, "noise": "laplace"}, {}, r"queries\[0\]\.noise = 'laplace': expected no noise"),
        (
            {**TOTAL, "by": ["domain"], "partitions": "keys.csv"},
            {},
            r"queries\[0\]\.max_partitions_per_person = \(missing\): expected an integer",
        ),
        (
            {**TOTAL, "by": ["domain"], "max_partitions_per_person": 2},
            {},
            r"queries\[0\]\.partitions = \(missing\): expected a CSV/JSON file of public",
        ),
        (
            {**TOTAL, "max_partitions_per_person": 2},
            {},
            r"queries\[0\]\.max_partitions_per_person = 2: expected no L without `by`",
        ),
        ({**TOTAL, "delta": 1e-6}, {}, r"queries\[0\]\.delta = 1e-06: expected no delta share"),
        (
            {"name": "x", "metric": "max", "per_person": "count", "value": "duration_s"},
            {},
            r"queries\[0\]\.value = 'duration_s': expected no value for per_person = 'count'",
        ),
        (
            {"name": "x", "metric": "max", "per_person": "sum"},
            {},
            r"queries\[0\]\.value = \(missing\): expected a numeric column",
        ),
        (
            {"name": "x", "metric": "max", "k": 0},
            {},
            r"queries\[0\]\.k = 0: expected an integer ≥ 1. k = 1",
        ),
        (
            {"name": "x", "metric": "distinct"},
            {},
            r"queries\[0\]\.value = \(missing\): expected a non",
        ),
        ({**MEDIAN, "bounds": [0, 1]}, {}, r"queries\[0\]\.bounds = \[0, 1\]: expected one of"),
        ({**MEDIAN, "metric": "quantile"}, {}, r"queries\[0\]\.q = \(missing\): expected a finite"),
        ({**MEDIAN, "per_person": "mean"}, {}, r"queries\[0\]\.per_person = 'mean': expected"),
        ({**AUTO, "bound": "manual"}, {}, r"queries\[0\]\.bound = 'manual': expected \"auto\""),
        ({**AUTO, "value": "duration_s"}, {}, r"queries\[0\]\.value = 'duration_s': expected no"),
        ({**AUTO, "metric": "sum"}, {}, r"queries\[0\]\.value = \(missing\): expected a non-empty"),
        ({**AUTO, "bound_range": [3, 3]}, {}, r"queries\[0\]\.bound_range = \[3, 3\]: expected"),
        (
            {**AUTO, "bound_range": [0.5, 4]},
            {},
            r"queries\[0\]\.bound_range = \[0\.5, 4\]: expected a range starting at 1",
        ),
        (
            {**AUTO, "metric": "sum", "value": "duration_s", "bound_range": [1e-6, 1e9]},
            {},
            r"queries\[0\]\.bound_range = .*at most 2\^40 from lowest to highest",
        ),
        ({**AUTO, "auto_share": 1.5}, {}, r"queries\[0\]\.auto_share = 1\.5: expected a number"),
        (
            {**AUTO, "max_rows_per_partition": 3},
            {},
            r"queries\[0\]\.max_rows_per_partition = 3: expected no fixed clamp with bound = "
            r"'auto'",
        ),
        ({**AUTO, "noise": "gaussian"}, {}, r"queries\[0\]\.noise = 'gaussian': expected laplace"),
    ],
)
def test_bad_keys_are_refused_naming_the_key(
    tmp_path: Path, query: dict[str, Any], budget: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_job(job(tmp_path, query, **budget))


def test_partitions_private_is_refused(tmp_path: Path) -> None:
    q = {**AUTO, "by": "domain", "max_partitions_per_person": 2, "partitions": "private"}
    with pytest.raises(ConfigError, match=r"partitions = 'private': expected a CSV/JSON file"):
        parse_job(job(tmp_path, q))


# ------------------------------------------------------------------------- budget accounting


def test_pure_share_goes_to_the_search_and_is_split_over_partitions(tmp_path: Path) -> None:
    keys = tmp_path / "domains.csv"
    keys.write_text("domain\nsite00.example\nsite01.example\n")
    dom = {**TOTAL, "name": "d", "by": ["domain"], "partitions": str(keys)}
    dom["max_partitions_per_person"] = 4
    plan = plan_release(parse_job(job(tmp_path, TOTAL, dom, MEDIAN, epsilon=0.75)))
    t, d, m = plan.queries
    assert isinstance(t, ShiftedInversePlan) and t.params.budget == PureDP(Fraction(1, 4))
    assert t.params.search == "exponential" and t.params.tau == math.ceil(
        8 * (math.log(2**40 + 1) - math.log(0.1))
    )
    assert isinstance(d, ShiftedInversePlan) and d.params.budget == PureDP(Fraction(1, 16))
    assert d.public_keys == (("site00.example",), ("site01.example",))
    assert isinstance(m, ShiftedInversePlan) and m.count_params is not None
    assert m.count_params.budget == m.params.budget == PureDP(Fraction(1, 8))  # half each
    assert m.guarantee == PureDP(Fraction(1, 4)) and plan.spent == PureDP(Fraction(3, 4))


def test_rho_share_defaults_to_the_zcdp_binary_search(tmp_path: Path) -> None:
    expo = {**TOTAL, "name": "e", "search": "exponential"}
    lap = {**TOTAL, "name": "l", "noise": "laplace"}
    plan = plan_release(parse_job(job(tmp_path, TOTAL, expo, lap, rho=0.375)))
    t, e, lap_plan = plan.queries
    assert isinstance(t, ShiftedInversePlan) and t.params.budget == ZCDP(Fraction(1, 8))
    assert t.params.search == "binary" and t.params.noise == "gaussian"
    assert t.guarantee == ZCDP(Fraction(1, 8))
    assert isinstance(e, ShiftedInversePlan) and isinstance(e.params.budget, PureDP)
    eps = e.params.budget.epsilon  # the largest float ε with ε²/2 ≤ ρ
    assert eps**2 / 2 <= Fraction(1, 8) < Fraction(math.nextafter(float(eps), 2)) ** 2 / 2
    assert "ε-DP is ε²/2-zCDP" in e.to_manifest()["counted_as"]["rule"]
    assert isinstance(lap_plan, ShiftedInversePlan) and lap_plan.params.noise == "laplace"
    assert plan.spent == ZCDP(Fraction(3, 8))


def test_auto_bound_splits_its_share_between_choice_and_noise(tmp_path: Path) -> None:
    gauss = {**AUTO, "name": "g", "noise": "gaussian", "auto_share": 0.5}
    plan = plan_release(parse_job(job(tmp_path, AUTO, gauss, epsilon=2.0, delta=1e-6)))
    a, g = plan.queries
    assert isinstance(a, AutoBoundPlan) and a.choice.epsilon == Fraction(1, 4)  # default share 1/4
    assert a.epsilon == 0.75 and a.rho is None and a.noise == "laplace"
    assert (a.choice.min_exponent, a.choice.max_exponent) == (0, 30)
    assert a.choice.target_clipped == 0  # the monotone utility: as few clipped as the prior allows
    assert isinstance(g, AutoBoundPlan) and g.choice.epsilon == Fraction(1, 2)
    # all of δ: the Laplace query spends none (plan.py, _delta_to_spenders)
    rho = zcdp_budget_for(ApproxDP(Fraction(1, 2), Fraction(1, 10**6))).rho
    assert g.rho is not None and Fraction(g.rho) <= rho and g.rho == pytest.approx(float(rho))
    zc = plan_release(parse_job(job(tmp_path, AUTO, rho=0.5))).queries[0]
    assert isinstance(zc, AutoBoundPlan) and zc.noise == "gaussian" and zc.rho == 0.375
    # the choice is ε-bounded-range, so ε²/8-zCDP: its ρ = 1/8 buys ε = 1 (ε²/2 would give 1/2)
    assert zc.choice.epsilon == 1
    counted = zc.to_manifest()["counted_as"]
    assert "ε²/8-zCDP" in counted["clamp_choice"]["rule"]
    assert "ρ-zCDP within" in counted["statistic"]["rule"]  # the Gaussian noise: its own ρ


def test_gaussian_auto_bound_converts_its_partitions_once(tmp_path: Path) -> None:
    """Under (ε, δ) the L partitions' Gaussian noise is one ρ that implies (ε·(1 − a), δ),
    split L ways (zCDP adds), not L conversions of (ε·(1 − a)/L, δ/L): more ρ per partition."""
    keys = tmp_path / "domains.csv"
    keys.write_text("domain\nsite00.example\nsite01.example\n")
    g = {**AUTO, "noise": "gaussian", "by": ["domain"], "partitions": str(keys)}
    g["max_partitions_per_person"] = 3
    (q,) = plan_release(parse_job(job(tmp_path, g, epsilon=1.0, delta=1e-6))).queries
    assert isinstance(q, AutoBoundPlan) and q.rho is not None
    whole = zcdp_budget_for(ApproxDP(Fraction(3, 4), Fraction(1, 10**6))).rho
    assert Fraction(q.rho) <= whole / 3 and q.rho == pytest.approx(float(whole / 3), rel=1e-12)
    each = zcdp_budget_for(ApproxDP(Fraction(1, 4), Fraction(1, 3 * 10**6))).rho
    assert q.rho > 1.5 * float(each)  # what the per-partition conversion gave
    assert q.choice.epsilon == Fraction(1, 12)  # the choice: pure ε·a/L per partition
    rule = q.to_manifest()["counted_as"]["statistic"]["rule"]
    assert "the 3 parts per person compose as zCDP (ρ adds)" in rule


# ------------------------------------------------------------------------ plan and manifest


def test_plan_lines_and_manifest_hold_public_facts_only(tmp_path: Path) -> None:
    maxq = {"name": "x", "metric": "max", "value": "duration_s", "k": 3, "grid": "log"}
    cfg = parse_job(job(tmp_path, TOTAL, maxq, MEDIAN, AUTO, epsilon=4.0))
    plan = plan_release(cfg)
    out = io.StringIO()
    print_plan(plan, out)
    text = out.getvalue()
    assert (
        "t: share ε=1\n"
        "  total rows: shifted inverse, linear grid 0 … 1.09951e+12 step 1 "
        "(|Y| = 1099511627777)\n"
        "  exponential search, τ = ⌈(2/ε) ln(|Y|/β)⌉ = 61: w.p. ≥ 1 − β = 0.9 the value lies "
        "between f minus what removing the 122 heaviest persons changes and f rounded up\n"
        "  guarantee per partition: ε=1 for add/remove one person\n"
    ) in text
    assert "k-th largest (k = 3) per-person max(duration_s): shifted inverse, log grid 1" in text
    assert "quantile q = 1/2 of row values of duration_s: row count first" in text
    assert (
        "bound: exponential mechanism ε=0.25 (0.25 of the share), utility −(persons above B)"
        in text
    )
    assert "noise: laplace ε=0.75, sensitivity B: stddev 1.886·B, 95% error ±3.994·B" in text
    assert "expected error: ±3.994·B from noise, plus the excess over B" in text

    t, x, m, a = plan.to_manifest()["queries"]
    assert t["method"] == "shifted_inverse" and t["statistic"] == "total"
    assert t["mechanism"]["mechanism"] == "shifted_inverse_exponential"
    assert t["mechanism"]["tau"] == 61 and t["mechanism"]["upper"] == 2.0**40
    assert t["guarantee"] == {"kind": "pure", "epsilon": 1.0, "epsilon_exact": "1",
                              "neighbouring": "add/remove one person"}  # fmt: skip
    assert x["k"] == 3 and x["mechanism"]["grid"] == "log" and x["mechanism"]["growth"] == 1.01
    assert x["per_person"] == "max" and x["clamp"].startswith("values clamped to [0, upper]")
    assert m["count_mechanism"]["upper"] == 2.0**40 and m["q"]["exact"] == "1/2"
    assert a["method"] == "auto_bound" and a["clamp_choice"]["candidates"] == [0, 30]
    assert a["clamp_choice"]["mechanism"] == "clamp_choice_exponential"
    assert a["clamp_choice"]["guarantee"]["epsilon_exact"] == "1/4"
    assert a["statistic"]["guarantee"]["kind"] == "pure"
    assert "bound" not in a  # the chosen bound is released in the output row, not here


# ---------------------------------------------------------- combiners: lifting is correctness


def _lifted(fn: Any, chunks: list[Any], seed: int) -> Any:
    """Add the chunks into a random number of accumulators, merge them in a random tree."""
    gen = np.random.default_rng(seed)  # not noise: a random split of the input
    accs = [fn.create_accumulator() for _ in range(int(gen.integers(1, 5)))]
    for c in chunks:
        i = int(gen.integers(len(accs)))
        accs[i] = fn.add_input(accs[i], c)
    while len(accs) > 1:
        gen.shuffle(accs)
        accs = [fn.merge_accumulators(accs[:2]), *accs[2:]]
    return fn.extract_output(accs[0])


def _chunks(values: np.ndarray, seed: int) -> list[np.ndarray]:
    gen = np.random.default_rng(seed)  # not noise
    cuts = np.sort(gen.integers(0, len(values) + 1, size=int(gen.integers(0, 8))))
    return list(np.split(gen.permutation(values), cuts))


def test_combiners_give_the_same_output_for_any_split() -> None:
    gen = np.random.default_rng(5)  # not noise: per-person totals, heavy tailed
    totals = np.concatenate([gen.integers(1, 20, 300), gen.integers(1, 10**6, 5)]).astype(np.int64)
    huge = np.array([2**62, 2**62, 3], dtype=object)  # Python ints past int64 sums
    for values in (totals, huge):
        want = (sum(int(v) for v in values), sorted((int(v) for v in values), reverse=True)[:7])
        for seed in range(6):
            assert _lifted(TopTotals(7), _chunks(values, seed), seed) == want
    floats = gen.lognormal(3, 1, 200)
    for seed in range(6):
        assert _lifted(TopValues(9), _chunks(floats, seed), seed) == sorted(floats)[::-1][:9]
    rows = (np.arange(50, dtype=np.float64), np.arange(50, dtype=np.int64) % 7)
    parts = [(rows[0][i : i + 9], rows[1][i : i + 9]) for i in range(0, 50, 9)]
    for seed in range(4):
        v, c = _lifted(GatherRows(), parts, seed)
        assert sorted(zip(v.tolist(), c.tolist(), strict=True)) == sorted(
            zip(rows[0].tolist(), rows[1].tolist(), strict=True)
        )


def test_clamp_stats_match_the_core_buckets_and_clamped_sums() -> None:
    choice = ClampChoiceParams(
        epsilon=1, min_exponent=2, max_exponent=9, target_clipped=3, per_octave=1
    )
    fn = ClampStats([2**e for e in range(2, 10)])
    gen = np.random.default_rng(8)  # not noise
    totals = np.concatenate([gen.integers(0, 1200, 400), [4, 5, 512, 513, 2**40]]).astype(np.int64)
    hist = Counter(choice.bucket(int(t)) for t in totals)
    want_hist = [hist.get(b, 0) for b in range(choice.histogram_size)]
    want_sums = [sum(min(int(t), 2**e) for t in totals) for e in range(2, 10)]
    for seed in range(6):
        assert _lifted(fn, _chunks(totals, seed), seed) == (want_hist, want_sums)


def test_contributions_depend_on_each_persons_rows_only() -> None:
    """Row order and the other persons never change what a person contributes; each person keeps
    the L partitions with the most rows (ties: the smaller key)."""
    table = pa.table(
        {
            "__person__": ["a", "a", "a", "a", "b", "b", "b", "c"],
            "domain": ["x", "y", "y", "z", "z", "x", "w", "w"],
            "v": [1.0, -2.0, 3.5, float("inf"), 2.0, 1.0, 1.0, 9.0],
        }
    )
    keys = (("w",), ("x",), ("y",), ("z",))
    spec = Contributions("totals", "count", by=("domain",), public_keys=keys, max_partitions=2)
    got = {k: sorted(v.tolist()) for k, v in shard_contributions(0, table, spec)}
    # a: y (2 rows), then x and z tie at 1 row: x is the smaller key. b: one row each: w, x.
    assert got == {("w",): [1, 1], ("x",): [1, 1], ("y",): [2]}
    order = pa.array(np.random.default_rng(0).permutation(table.num_rows))  # not noise
    shuffled = {k: sorted(v.tolist()) for k, v in shard_contributions(0, table.take(order), spec)}
    assert shuffled == got
    alone = table.filter(pa.compute.equal(table.column("__person__"), "b"))
    assert {k: v.tolist() for k, v in shard_contributions(0, alone, spec)} == {
        ("w",): [1],
        ("x",): [1],
    }
    sums = Contributions("values", "sum", "v", limit=3.0, quantum=-2)
    assert [sorted(v.tolist()) for _, v in shard_contributions(0, table, sums)] == [[12, 16, 28]]
    # a: 1 + 0 + 3 + 3 (inf → limit, −2 → 0) = 7 → 28 quarters; b: 4 → 16; c: 3 → 12


def test_fixed_point_sums_are_exact_up_to_2_to_the_60_in_any_grouping() -> None:
    """Row quanta up to 2^60 (the bound-free sums' range), summed per group in three limbs:
    the Python-int sums, in int64 while they fit and as Python ints past 2^62."""
    gen = np.random.default_rng(8)
    for top, rows, groups in ((2**20, 5000, 7), (2**60, 5000, 300), (2**60, 64, 2)):
        x = gen.integers(0, top, rows, dtype=np.int64, endpoint=True)
        group = gen.integers(0, groups, rows, dtype=np.int64)
        got = contributions._group_sums(group, x, groups)
        want = [sum(int(v) for v in x[group == g].tolist()) for g in range(groups)]
        assert [int(v) for v in got.tolist()] == want
        assert got.dtype == (object if max(want) >= 2**62 else np.int64)


@pytest.mark.parametrize(
    ("values", "total"),
    [([1.0] * 2000, 2000.0), ([5.0, 7.0, 1.0], 13.0), ([0.5] * 8, 4.0), ([0.01] * 1000, 10.0)],
)
def test_bound_free_sums_keep_small_values_at_the_default_upper(
    values: list[float], total: float
) -> None:
    """At D = 2^40 the 40-bit fixed point had a unit of 2: rows of 1.0 (and 0.5) rounded to 0
    half to even and a Total of 2,000 ones released 0. In units of 2^−19 they are exact, and a
    decimal is off by at most half a unit per row. Noise off; one row per person."""
    rows = [{"u": f"p{i}", "items": v} for i, v in enumerate(values)]
    release = exact_release(Budget(epsilon=10))

    def build(p: beam.Pipeline) -> dict[str, Any]:
        people = (
            p
            | beam.Create(rows)
            | release.ByPerson("u", keys={}, values=["items"], person_type="string")
        )
        return {
            "total": people | "t" >> Total(value="items", epsilon=2),
            "max": people | "m" >> Max(value="items", per_person="sum", epsilon=2),
            "auto": people | "a" >> Sum(value="items", bound="auto", epsilon=2),
        }

    out = run_and_collect(build)
    half_unit = len(values) * 2.0**-20
    assert abs(out["total"][0].value - total) <= half_unit
    assert abs(out["max"][0].value - max(values)) <= 2.0**-20
    if all((v * 2**19).is_integer() for v in values):  # whole units: no rounding at all
        assert out["total"][0].value == total
    (auto,) = out["auto"]  # the clamped sum at its chosen bound (units of 2^−29 by default)
    assert abs(auto.value - sum(min(v, auto.bound) for v in values)) <= len(values) * 2.0**-30


def test_misuse_of_the_beam_parameters_is_refused() -> None:
    with pytest.raises(ValueError, match="count takes no value column"):
        Contributions("totals", "count", "v")
    with pytest.raises(ValueError, match="public_keys: one or more tuples"):
        Contributions("totals", by=("d",))
    with pytest.raises(ValueError, match="max_partitions: L ≥ 1, and 1 without `by`"):
        Contributions("totals", max_partitions=2)
    choice = ClampChoiceParams(
        epsilon=1, min_exponent=-3, max_exponent=4, target_clipped=1, unit_exponent=-3
    )
    spec = Contributions("totals", "sum", "v", limit=16.0, quantum=-2)
    with pytest.raises(ValueError, match="finer than the fixed-point unit"):
        AutoBoundQuery("a", spec, choice, "laplace", epsilon=1.0)
    whole = ClampChoiceParams(epsilon=1, min_exponent=0, max_exponent=4, target_clipped=1)
    with pytest.raises(ValueError, match="laplace noise takes epsilon"):
        AutoBoundQuery("a", Contributions("totals"), whole, "laplace", rho=1.0)


# ------------------------------------------------------------------------------ the pipeline


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shifted_inverse")
    (root / "data").mkdir()
    generate(150, str(root / "data" / "logs.parquet"), seed=11)
    (root / "domains.csv").write_text("domain\nsite00.example\nsite02.example\nnowhere.example\n")
    return root


def by_person(table: pa.Table, value: str, agg: str) -> np.ndarray:
    grouped = table.group_by("person_id").aggregate([(value, agg)])
    return np.asarray(grouped.column(f"{value}_{agg}").to_numpy(), dtype=np.float64)


def domain_rows(table: pa.Table, keys: list[str], L: int) -> dict[str, list[int]]:
    """Per public domain, each person's rows there, every person keeping their L domains with
    the most rows (ties: the smaller domain)."""
    rows: dict[Any, Counter[str]] = defaultdict(Counter)
    for person, domain in zip(table.column("person_id").to_pylist(),
                              table.column("domain").to_pylist(), strict=True):  # fmt: skip
        if domain in keys:
            rows[person][domain] += 1
    out: dict[str, list[int]] = {k: [] for k in keys}
    for counts in rows.values():
        for d, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:L]:
            out[d].append(n)
    return out


UPPER = 2**20
PIPELINE = (
    {**TOTAL, "upper": UPPER, "epsilon": 1.0},
    # D above the data (total ~7·10^6, 7,600 urls): a release is at most D, as the noise-off value
    {**TOTAL, "name": "dur", "value": "duration_s", "upper": 2**23, "resolution": 0.25},
    {"name": "maxv", "metric": "max", "upper": UPPER},
    {"name": "max3", "metric": "max", "value": "duration_s", "k": 3, "upper": UPPER},
    {"name": "urls", "metric": "distinct", "value": "url", "upper": 16384, "epsilon": 4.0},
    {**MEDIAN, "upper": 4096, "resolution": 0.5},
    {
        "name": "p90",
        "metric": "quantile",
        "method": "shifted_inverse",
        "q": 0.9,
        "per_person": "count",
    },
    {**AUTO, "bound_range": [1, 2**16], "epsilon": 1.0},
)


def test_noise_off_releases_the_exact_statistics(logs: Path, tmp_path: Path) -> None:
    keys = str(logs / "domains.csv")
    dom = {**TOTAL, "name": "dom", "by": ["domain"], "partitions": keys}
    dom["max_partitions_per_person"] = 2
    cfg = parse_job({**job(logs, *PIPELINE, dom, epsilon=9.0), "output": {"path": str(tmp_path)}})
    result = run_release(cfg, release_key=ReleaseKey(TEST_SECRET), noise=False, num_shards=3)
    rows = {name: pq.read_table(path).to_pylist() for name, path in result.outputs.items()}
    table = pq.read_table(logs / "data" / "logs.parquet")
    durations = table.column("duration_s").to_numpy()
    counts = by_person(table, "duration_s", "count")
    assert rows["t"] == [{"value": float(table.num_rows)}]
    quantum = Fraction(1, 2**36)  # values in [0, 2^23] are summed in units of 2^(24 − 60)
    fixed = sum(round(Fraction(v) / quantum) for v in durations.tolist()) * quantum
    assert fixed < 2**23 and rows["dur"] == [{"value": float(fixed)}]
    assert rows["dur"][0]["value"] == pytest.approx(float(np.sum(durations)), rel=1e-9)
    assert rows["maxv"] == [{"value": float(counts.max())}]
    assert rows["max3"] == [{"value": float(np.sort(by_person(table, "duration_s", "max"))[-3])}]
    assert rows["urls"] == [{"value": float(len(set(table.column("url").to_pylist())))}]
    median = float(np.quantile(durations, 0.5, method="inverted_cdf"))  # ⌈n/2⌉-th smallest
    assert rows["m"] == [{"value": median}]
    assert rows["p90"] == [{"value": float(np.quantile(counts, 0.9, method="inverted_cdf"))}]
    # the auto bound without noise: the best-scoring clamp, and the exact clamped sum
    plan = plan_release(cfg)
    auto = plan.queries[7]
    assert isinstance(auto, AutoBoundPlan)
    # the mode of P[k] ∝ exp(−ε·A(c_k) − κ·h_k) (m = 0), written out from the definition
    c = auto.choice
    lam = [c.epsilon * int(np.sum(counts > b)) + c.step_prior * h
           for b, h in zip(c.candidates, c.heights, strict=True)]  # fmt: skip
    b = c.candidates[lam.index(min(lam))]
    assert rows["a"] == [{"value": float(np.minimum(counts, b).sum()),
                          "stddev": auto.to_manifest()["statistic"]["stddev_per_unit_bound"] * b,
                          "bound": float(b)}]  # fmt: skip
    per_domain = domain_rows(table, ["site00.example", "site02.example", "nowhere.example"], 2)
    want = {d: sum(n) for d, n in per_domain.items()}
    assert {r["domain"]: r["value"] for r in rows["dom"]} == {d: float(n) for d, n in want.items()}
    assert len(rows["dom"]) == 3
    assert want["nowhere.example"] == 0 and want["site02.example"] > 0
    schema = pq.read_table(result.outputs["dom"]).schema
    assert schema.names == ["domain", "value"] and schema.field("value").type == pa.float64()
    assert pq.read_table(result.outputs["a"]).schema.names == ["value", "stddev", "bound"]


def test_noise_on_is_the_core_mechanism_keyed_by_query_partition_and_purpose(
    logs: Path, tmp_path: Path
) -> None:
    dom = {**TOTAL, "name": "dom", "by": ["domain"], "partitions": str(logs / "domains.csv")}
    dom.update(max_partitions_per_person=2, upper=UPPER)
    queries = job(logs, *PIPELINE, dom, epsilon=12.0)
    cfg = parse_job({**queries, "output": {"path": str(tmp_path)}})
    key = ReleaseKey(TEST_SECRET)
    result = run_release(cfg, release_key=key, noise=True, num_shards=3)
    rows = {name: pq.read_table(path).to_pylist() for name, path in result.outputs.items()}
    table = pq.read_table(logs / "data" / "logs.parquet")
    ids = table.column("person_id").to_numpy()
    durations = table.column("duration_s").to_numpy()
    counts = by_person(table, "duration_s", "count").astype(np.int64)

    def rng(name: str, purpose: str = "value") -> Any:
        return key.for_query(name).rng(
            "", purpose
        )  # "" is the one partition of a query without `by`

    expected: dict[str, Fraction] = {}
    plans = {q.name: q for q in plan_release(cfg).queries}
    for name in ("t", "maxv", "urls", "m", "p90"):
        p = plans[name]
        assert isinstance(p, ShiftedInversePlan)
        c = p.params.down_values_needed
        if name == "t":
            top = sorted(counts.tolist(), reverse=True)
            down: list[Any] = sum_down_values(int(counts.sum()), top[: c - 1], c)
        elif name == "maxv":
            down = max_down_values(sorted(counts.tolist(), reverse=True)[:c], c)
        elif name == "urls":
            down = distinct_down_values(np.asarray(table.column("url").to_pylist()), ids, c)
        else:
            assert p.count_params is not None and p.q is not None
            values = np.clip(durations, 0, 4096) if name == "m" else counts.astype(np.float64)
            persons = ids if name == "m" else np.arange(len(counts))
            expected[name] = shifted_inverse_quantile(
                values, persons, p.q, count_params=p.count_params, select_params=p.params,
                count_rng=rng(name, "count"), select_rng=rng(name),
            ).value  # fmt: skip
            continue
        expected[name] = shifted_inverse(down, p.params, rng(name))
    for name, value in expected.items():
        assert rows[name] == [{"value": float(value)}], name
    p = plans["dom"]
    assert isinstance(p, ShiftedInversePlan) and p.share == PureDP(1)
    assert p.params.budget == PureDP(Fraction(1, 2))  # per partition: the share / L
    c, released = p.params.down_values_needed, {r["domain"]: r["value"] for r in rows["dom"]}
    for domain, per_person in domain_rows(table, list(released), 2).items():
        top = sorted(per_person, reverse=True)[: c - 1]
        down = sum_down_values(sum(per_person), top, c)
        label = canonical_key_string((domain,))  # the partition is part of the noise label
        assert released[domain] == float(
            shifted_inverse(down, p.params, key.for_query("dom").rng(label, "value"))
        )
    for name, p in plans.items():  # every release is a point of its grid
        if isinstance(p, ShiftedInversePlan):
            v = Fraction(rows[name][0]["value"])
            assert 0 <= v <= p.params.output_grid.upper
            assert p.params.output_grid.value(p.params.output_grid.ceil_index(v)) == v, name
    auto = plans["a"]
    assert isinstance(auto, AutoBoundPlan)
    choice = auto.choice
    hist = Counter(choice.bucket(int(t)) for t in counts)
    k = choice.choose([hist.get(b, 0) for b in range(choice.histogram_size)], rng("a", "bound"))
    noise = AutoBoundQuery("a", Contributions("totals"), choice, "laplace", epsilon=auto.epsilon)
    mechanism = noise.mechanism(k)
    b = choice.candidates[k]
    value = mechanism.release(Fraction(int(np.minimum(counts, b).sum())), rng("a"))
    assert rows["a"] == [{"value": value, "stddev": mechanism.std, "bound": float(b)}]

    # Reproducible with the same key, whatever the number of shards.
    subset = parse_job({**job(logs, PIPELINE[0], PIPELINE[7], epsilon=9.0),
                        "output": {"path": str(tmp_path / "again")}})  # fmt: skip
    again = run_release(subset, release_key=key, noise=True, num_shards=1)
    for name, path in again.outputs.items():
        assert pq.read_table(path).to_pylist() == rows[name]


def test_empty_input_gives_one_row_per_partition(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    pq.write_table(SCHEMA.empty_table(), tmp_path / "data" / "empty.parquet")
    (tmp_path / "keys.json").write_text('["a.example", "b.example"]')
    dom = {**TOTAL, "name": "dom", "by": "domain", "partitions": str(tmp_path / "keys.json")}
    dom["max_partitions_per_person"] = 1
    queries = (TOTAL, {"name": "urls", "metric": "distinct", "value": "url"}, MEDIAN, AUTO, dom)
    cfg = parse_job(job(tmp_path, *queries, epsilon=5.0))
    exact = run_release(cfg, release_key=ReleaseKey(TEST_SECRET), noise=False, num_shards=2)
    rows = {name: pq.read_table(path).to_pylist() for name, path in exact.outputs.items()}
    assert rows["t"] == rows["urls"] == rows["m"] == [{"value": 0.0}]
    assert rows["a"][0]["value"] == 0.0 and rows["a"][0]["bound"] == 1.0
    assert rows["dom"] == [{"domain": "a.example", "value": 0.0},
                           {"domain": "b.example", "value": 0.0}]  # fmt: skip
    noisy = run_release(cfg, release_key=ReleaseKey(TEST_SECRET), noise=True, num_shards=2)
    for name, path in noisy.outputs.items():
        for row in pq.read_table(path).to_pylist():
            assert math.isfinite(row["value"]), name


# ----------------------------------------------------------------------- the end to end


def test_userdp_run_end_to_end_total_max_distinct_and_auto_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(EXAMPLE, tmp_path / "job.toml")
    data = tmp_path / "data" / "logs.parquet"
    assert main(["generate", "--people", "150", "--out", str(data)]) == 0
    assert main(["plan", str(tmp_path / "job.toml")]) == 0
    printed = capsys.readouterr().out
    assert (
        "visits: share ε=0.8\n  total rows: shifted inverse, linear grid 0 … 1.07374e+09" in printed
    )
    assert "distinct values of url (LP relaxation" in printed
    assert main(["run", str(tmp_path / "job.toml")]) == 0
    out = tmp_path / "release_shifted_inverse"
    manifest = json.loads((out / "manifest.json").read_text())
    entries = {q["name"]: q for q in manifest["queries"]}
    assert [entries[n]["statistic"] for n in ("visits", "max_visits", "distinct_urls")] == [
        "total", "max", "distinct",
    ]  # fmt: skip
    assert entries["median_duration"]["method"] == "shifted_inverse"
    assert entries["visits_auto"]["clamp_choice"]["candidates"] == [0, 20]
    for q in manifest["queries"]:
        assert q["share"]["epsilon_exact"] == "4/5"
    table = pq.read_table(data)
    for name in ("visits", "max_visits", "distinct_urls", "median_duration"):
        (row,) = pq.read_table(out / f"{name}.parquet").to_pylist()
        assert set(row) == {"value"} and 0 <= row["value"] <= entries[name]["mechanism"]["upper"]
    (auto,) = pq.read_table(out / "visits_auto.parquet").to_pylist()
    assert set(auto) == {"value", "stddev", "bound"} and math.isfinite(auto["value"])
    grid = ClampChoiceParams(epsilon=1, min_exponent=0, max_exponent=20, target_clipped=0)
    assert auto["bound"] in [float(c) for c in grid.candidates] and auto["stddev"] > 0
    assert table.num_rows > 0


def test_per_person_sums_beyond_the_float_range_release_as_at_the_top(tmp_path: Path) -> None:
    """A quantile of per-person sums with ``upper`` = 1e308: two rows of 1e308 per person sum to
    2e308, past the float range. That made the release raise (an exit code decided by the data
    alone); the values are now clamped at D first, which the grid does anyway, so the release
    equals the one where every person's sum is exactly D — same key, same rows."""
    query = {**MEDIAN, "value": "v", "per_person": "sum", "upper": 1e308}
    rows = {}
    for per_person in (1, 2):
        root = tmp_path / f"rows{per_person}"
        (root / "data").mkdir(parents=True)
        ids = [f"p{i}" for i in range(100) for _ in range(per_person)]
        table = pa.table({"person_id": ids, "v": [1e308] * len(ids)})
        pq.write_table(table, root / "data" / "d.parquet")
        cfg = parse_job(job(root, query, epsilon=50.0))
        result = run_release(cfg, release_key=ReleaseKey(TEST_SECRET), noise=True, num_shards=2)
        rows[per_person] = pq.read_table(result.outputs["m"]).to_pylist()
    assert rows[2] == rows[1]
    assert 0 < rows[1][0]["value"] <= 1e308  # ε = 50: τ is small enough to release near D


def test_an_auto_bound_whose_top_candidate_noise_overflows_is_refused_at_planning(
    tmp_path: Path,
) -> None:
    """bound_range up to 1.7e308 at ε = 0.5: the largest candidate's Laplace scale passes the
    float range. It was built only when the private choice landed there, at release — 300 persons
    at 8.98e307 failed the job, at 1e305 not. Now the plan refuses it, whatever the data."""
    query = {**AUTO, "metric": "sum", "value": "v", "bound_range": [8.8e304, 1.7e308]}
    with pytest.raises(ConfigError, match=r"largest candidate bound .* overflows a float"):
        plan_release(parse_job(job(tmp_path, query, epsilon=0.5)))
    [ok] = plan_release(parse_job(job(tmp_path, {**query, "bound_range": [1e260, 1e270]}))).queries
    assert isinstance(ok, AutoBoundPlan)


def test_under_rho_too_an_auto_bound_whose_top_noise_overflows_is_refused_at_planning(
    tmp_path: Path,
) -> None:
    """The same range under ρ = 0.01: the Gaussian scale 1.7e308/√0.02 passes the float range.
    The Gaussian mechanism used to accept it silently (an infinite scale, a wrong grid), so the
    plan passed and the release crashed only when the choice landed on a top candidate — with
    300 persons at 8.98e307 it did: an exit code set by the data."""
    query = {**AUTO, "metric": "sum", "value": "v", "bound_range": [8.8e304, 1.7e308]}
    with pytest.raises(ConfigError, match=r"largest candidate bound .* overflows a float"):
        plan_release(parse_job(job(tmp_path, query, rho=0.01)))
    ok = {**query, "bound_range": [1e260, 1e270]}
    [plan] = plan_release(parse_job(job(tmp_path, ok, rho=0.01))).queries
    assert isinstance(plan, AutoBoundPlan)


def test_an_auto_bound_whose_top_noise_std_overflows_is_refused_at_planning(
    tmp_path: Path,
) -> None:
    """ε = 0.8 (0.6 on the noise): the top candidate 2^1023's Laplace scale 1.5e308 fits a float,
    its std √2·b does not — the released stddev was inf exactly when the data chose the top
    candidate (a reviewer saw it with 300 persons at 8.98e307, not at 1e305)."""
    query = {**AUTO, "metric": "sum", "value": "v", "bound_range": [8.8e304, 1.7e308]}
    with pytest.raises(ConfigError, match=r"largest candidate bound .* overflows a float"):
        plan_release(parse_job(job(tmp_path, query, epsilon=0.8)))
    ok = {**query, "bound_range": [8.8e304, 5e307]}  # top 2^1022: std 1.06e308
    [plan] = plan_release(parse_job(job(tmp_path, ok, epsilon=0.8))).queries
    assert isinstance(plan, AutoBoundPlan)


def test_the_auto_bounds_noise_never_declares_less_than_its_clamp() -> None:
    """A clamp above 2^53 was declared as float(c), rounded to nearest: 4 of 9 candidates in
    [2^60, 2^62] fell below the clamp applied (review). Each is now rounded up."""
    choice = ClampChoiceParams(
        epsilon=Fraction(1), min_exponent=60, max_exponent=62, target_clipped=0
    )
    noise = AutoBoundQuery("a", Contributions("totals"), choice, "laplace", epsilon=1.0)
    below = [c for c in choice.candidates if Fraction(float(c)) < c]
    assert below  # not vacuous: some candidates round down as floats
    for k, c in enumerate(choice.candidates):
        assert Fraction(noise.mechanism(k).l1_sensitivity) >= c


def test_a_quantiles_stated_rank_interval_holds_and_the_value_leans_high(tmp_path: Path) -> None:
    """The plan's accuracy line for a shifted-inverse quantile (rank from the top between
    k − ⌈(1 − q)·c⌉ and k + r, w.p. ≥ 1 − 2β) over 60 releases, on 2,000 persons with 1–5 rows.
    The row count is not over n (w.p. ≥ 1 − β), so the value leans high: most releases sit above
    the median rounded up — what the line said before stop 36 ("between f − …, f rounded up")
    missed.
    A correct release leaves the interval w.p. ≤ 2β = 0.2; ≥ 36 of 60 inside fails w.p. < 10^−5
    (binomial tail) when it is right."""
    query = {**MEDIAN, "upper": 4096, "resolution": 1}
    plan = plan_release(parse_job(job(tmp_path, query, epsilon=16.0)))
    (p,) = plan.queries
    assert isinstance(p, ShiftedInversePlan) and p.count_params is not None and p.q is not None
    text = io.StringIO()
    print_plan(plan, text)
    assert "the value's rank from the top lies between k − ⌈(1 − q)·c⌉ and k + r" in text.getvalue()
    gen = np.random.default_rng(7)  # data only; the noise comes from the keyed samplers
    rows = gen.integers(1, 6, size=2000)
    persons = np.repeat(np.arange(2000), rows)
    values = gen.integers(0, 4000, size=len(persons)).astype(np.float64)
    desc = np.sort(values)[::-1]
    k = quantile_k(p.q, len(values))
    heaviest = np.sort(rows)[::-1]
    c = int(heaviest[: 2 * p.count_params.tau].sum())
    r = int(heaviest[: 2 * p.params.tau].sum())
    hi, lo = desc[k - math.ceil((1 - p.q) * c) - 1], desc[k + r - 1]
    inside = above_median = 0
    for i in range(60):
        key = ReleaseKey(TEST_SECRET[:31] + bytes([i]))
        out = shifted_inverse_quantile(
            values, persons, p.q, count_params=p.count_params, select_params=p.params,
            count_rng=key.rng("count"), select_rng=key.rng("select"),
        ).value  # fmt: skip
        inside += lo <= out <= math.ceil(hi)  # the grid is the integers: rounded up
        above_median += out > math.ceil(desc[k - 1])
    assert inside >= 36, inside
    assert above_median >= 30, above_median  # leans high, as the line says
