"""The ``sample_aggregate`` query kind in the release job (pipelines/kinds/sample_aggregate.py
over transforms/sample_aggregate.py): job-file checks at parse and plan time, budget accounting,
plan report and manifest, exact values with noise off (against ``chunk_answers`` without Beam),
the noise path keyed by the query, a function failing on some chunks, empty input, and the issue's
end-to-end run through ``userdp run``."""

from __future__ import annotations

import io
import json
import math
import statistics
import subprocess
import sys
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
from userdp.pipelines.job import required_columns, run_release
from userdp.pipelines.kinds.sample_aggregate import SampleAggregatePlan
from userdp.pipelines.plan import plan_release
from userdp.pipelines.plan_text import print_plan
from userdp.transforms.columns import PERSON_COLUMN
from userdp.transforms.mechanisms.accounting import ZCDP, ApproxDP, PureDP, float_down
from userdp.transforms.mechanisms.additive import GaussianMechanism, LaplaceMechanism
from userdp.transforms.mechanisms.chunk_functions import Answer, default_chunks
from userdp.transforms.mechanisms.rng import ReleaseKey
from userdp.transforms.mechanisms.sample_aggregate_aggregators import ClippedMean, RankMedian
from userdp.transforms.sample_aggregate import chunk_answers, chunk_ids, chunk_key

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "sample_aggregate_job.toml"
HERE = __name__
KEY = ReleaseKey(TEST_SECRET)
PERSONS = 300
SAA = "userdp.pipelines.kinds.sample_aggregate"


@pytest.fixture(autouse=True)
def register(monkeypatch: pytest.MonkeyPatch) -> None:
    """sample_aggregate → this kind (the lead adds it to METRIC_KINDS)."""
    monkeypatch.setitem(kinds.METRIC_KINDS, "sample_aggregate", SAA)


# --- functions named by import path below -----------------------------------------------------


def odd_persons_fail(table: pa.Table) -> float:
    """Mean visit duration; raises on a chunk with an odd number of persons."""
    if len(pc.unique(table.column(PERSON_COLUMN))) % 2:
        raise ValueError("odd number of persons")
    return float(np.mean(table.column("duration_s").to_numpy()))


def chunk_view(table: pa.Table) -> float:
    """1 if the chunk holds exactly __person__, duration_s (float64), domain (text), else 0; text
    is large_string, as in every clean table (transforms/validate.py)."""
    types = [(f.name, f.type) for f in table.schema]
    text = pa.large_string()
    expected = [(PERSON_COLUMN, text), ("duration_s", pa.float64()), ("domain", text)]
    return 1.0 if types == expected else 0.0


def mean_and_max(table: pa.Table) -> list[float]:
    d = table.column("duration_s").to_numpy()
    return [float(d.mean()), float(d.max())]


NOT_CALLABLE = 3


def job(tmp_path: Path, *queries: dict[str, Any], **budget: Any) -> dict[str, Any]:
    return {
        "input": {"path": str(tmp_path / "data" / "*.parquet"), "person": "person_id"},
        "budget": budget or {"epsilon": 1.0},
        "output": {"path": str(tmp_path / "release")},
        "queries": list(queries),
    }


SLOPE = {
    "name": "slope",
    "metric": "sample_aggregate",
    "function": "userdp.pipelines.example_functions:duration_vs_hour_slope",
    "columns": ["timestamp", "duration_s"],
    "range": [-5.0, 5.0],
    "chunks": 8,
}
P90 = {
    "name": "p90",
    "metric": "sample_aggregate",
    "function": "userdp.pipelines.example_functions:visit_duration_p90",
    "columns": ["duration_s"],
    "range": [0.0, 1000.0],
    "chunks": 8,
    "aggregator": "median",
}
AUTO = {**SLOPE, "name": "auto", "chunks": "auto"}
ODD = {**P90, "name": "odd", "function": f"{HERE}:odd_persons_fail", "chunks": 10}
ODD["aggregator"] = "mean"
VIEW = {**P90, "name": "view", "function": f"{HERE}:chunk_view", "range": [0.0, 1.0], "chunks": 5}
VIEW.update(key_columns=["domain"], aggregator="mean")
VECTOR = {**P90, "name": "vec", "function": f"{HERE}:mean_and_max", "chunks": 6}
VECTOR.update(range=[[0.0, 1000.0], [0.0, 100_000.0]], aggregator="mean")


def plan_of(tmp_path: Path, *queries: dict[str, Any], **budget: Any) -> list[SampleAggregatePlan]:
    plans = plan_release(parse_job(job(tmp_path, *queries, **budget))).queries
    assert all(isinstance(p, SampleAggregatePlan) for p in plans)
    return [p for p in plans if isinstance(p, SampleAggregatePlan)]


# --- job-file checks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"function": "nocolon"}, r"queries\[0\]\.function = 'nocolon': expected an import path"),
        ({"function": "a b:c"}, r"queries\[0\]\.function = 'a b:c': expected an import path"),
        ({"function": 3}, r"queries\[0\]\.function = 3: expected an import path .module:function."),
        ({"range": [1.0, 0.0]}, r"queries\[0\]\.range = \[1\.0, 0\.0\]: expected \[lower, upper"),
        ({"range": [[0.0, 1.0], [2.0]]}, r"queries\[0\]\.range = \[\[0\.0, 1\.0\], \[2\.0\]\]"),
        ({"range": [0.0, math.inf]}, r"queries\[0\]\.range = \[0\.0, inf\]: expected"),
        ({"range": "wide"}, r"queries\[0\]\.range = 'wide': expected \[lower, upper\] or a list"),
        ({"range": None}, r"queries\[0\]\.range = None: expected"),
        ({"chunks": 1}, r"queries\[0\]\.chunks = 1: expected an integer in \[2, 1000000\] or"),
        ({"chunks": 2.5}, r"queries\[0\]\.chunks = 2\.5: expected an integer in \[2, "),
        ({"chunks": "many"}, r"queries\[0\]\.chunks = 'many': expected an integer"),
        ({"chunks": True}, r"queries\[0\]\.chunks = True: expected an integer"),
        ({"by": ["domain"]}, r"queries\[0\]\.by = \['domain'\]: expected no `by`"),
        ({"delta": 1e-7}, r"queries\[0\]\.delta = 1e-07: expected no delta share: .* pure ε-DP"),
        ({"aggregator": "trimmed"}, r"queries\[0\]\.aggregator = 'trimmed': expected one of mean"),
        ({"input": "polars"}, r"queries\[0\]\.input = 'polars': expected one of arrow, pandas"),
        ({"columns": None}, r"queries\[0\]\.columns = None: expected a list of distinct column"),
        ({"columns": ["d", "d"]}, r"queries\[0\]\.columns = \['d', 'd'\]: expected a list of dis"),
        ({"columns": ["__person__"]}, r"queries\[0\]\.columns = \['__person__'\]: expected"),
        ({"columns": ["__dur__"]}, r"queries\[0\]\.columns = '__dur__': expected a column name"),
        ({"key_columns": ["__d__"]}, r"queries\[0\]\.key_columns = '__d__': expected a column n"),
        ({"key_columns": "domain"}, r"queries\[0\]\.key_columns = 'domain': expected a list"),
        (
            {"key_columns": ["duration_s"]},
            r"queries\[0\]\.key_columns = \['duration_s'\]: expected columns not also in `columns`",
        ),
        ({"value": "duration_s"}, r"queries\[0\]\.value = 'duration_s': expected one of the keys"),
        ({"rho": 0.1}, r"queries\[0\]\.rho = 0\.1: expected shares of the total's kind"),
    ],
)
def test_bad_keys_are_refused_when_the_job_file_is_read(
    tmp_path: Path, change: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_job(job(tmp_path, {**SLOPE, **change}))


def test_a_missing_columns_key_is_refused(tmp_path: Path) -> None:
    query = {k: v for k, v in SLOPE.items() if k != "columns"}
    with pytest.raises(ConfigError, match=r"queries\[0\]\.columns = \(missing\): expected a list"):
        parse_job(job(tmp_path, query))
    with pytest.raises(ConfigError, match=r"queries\[0\]\.range = \(missing\): expected"):
        parse_job(job(tmp_path, {k: v for k, v in SLOPE.items() if k != "range"}))


def _broken_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "saa_module_that_raises.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "saa_module_that_raises:f"


@pytest.mark.parametrize(
    ("function", "match"),
    [
        (
            "no_such_module_xyz:f",
            r"queries\[0\]\.function = 'no_such_module_xyz:f': expected an importable callable "
            r".*cannot import module 'no_such_module_xyz'",
        ),
        (f"{HERE}:missing", r"queries\[0\]\.function = .*has no attribute 'missing'"),
        (f"{HERE}:NOT_CALLABLE", r"queries\[0\]\.function = .* is a int, not a callable"),
        ("broken", r"cannot import module 'saa_module_that_raises'.*RuntimeError.*boom at import"),
    ],
)
def test_a_function_that_does_not_resolve_is_refused_at_planning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, function: str, match: str
) -> None:
    if function == "broken":
        function = _broken_module(tmp_path, monkeypatch)
    cfg = parse_job(job(tmp_path, {**SLOPE, "function": function}))  # the syntax is fine
    with pytest.raises(ConfigError, match=match):
        plan_release(cfg)


def test_person_column_and_missing_pandas_are_refused_at_planning(tmp_path: Path) -> None:
    cfg = parse_job(job(tmp_path, {**SLOPE, "columns": ["person_id", "duration_s"]}))
    with pytest.raises(
        ConfigError,
        match=r"queries\[0\]\.columns = \['person_id', 'duration_s'\]: expected columns other "
        r"than the person column 'person_id'. the chunk holds the person id already",
    ):
        plan_release(cfg)
    pandas_query = parse_job(job(tmp_path, {**SLOPE, "input": "pandas"}))
    try:
        import pandas  # noqa: F401, PLC0415
    except ImportError:
        with pytest.raises(ConfigError, match=r"queries\[0\]\.input = 'pandas': .*needs pandas"):
            plan_release(pandas_query)
    else:
        [plan] = plan_of(tmp_path, {**SLOPE, "input": "pandas"})
        assert plan.params.input_kind == "pandas"


def test_userdp_plan_reports_a_bad_function_without_reading_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = EXAMPLE.read_text().replace(
        "userdp.pipelines.example_functions:visit_duration_p90",
        "userdp.pipelines.example_functions:p91",
    )
    (tmp_path / "job.toml").write_text(text)
    assert main(["plan", str(tmp_path / "job.toml")]) == 2
    err = capsys.readouterr().err
    assert "queries[1].function = 'userdp.pipelines.example_functions:p91'" in err
    assert "has no attribute 'p91'" in err


def test_planning_checks_the_function_without_loading_beam() -> None:
    code = (
        "import sys\n"
        "from userdp.pipelines import kinds\n"
        f"kinds.METRIC_KINDS['sample_aggregate'] = {SAA!r}\n"
        "from userdp.pipelines.config import load_job\n"
        "from userdp.pipelines.plan import plan_release\n"
        f"plan_release(load_job({str(EXAMPLE)!r}))\n"
        "print(any(m.startswith('apache_beam') for m in sys.modules),\n"
        "      'userdp.pipelines.example_functions' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.split() == ["False", "True"]  # the module was imported, Beam was not


def test_required_columns_are_the_numbers_and_keys_the_function_reads(tmp_path: Path) -> None:
    cfg = parse_job(job(tmp_path, VIEW, SLOPE))
    assert required_columns(cfg) == {
        "person_id": "person",
        "duration_s": "number",
        "domain": "key",
        "timestamp": "number",
    }


# --- budget accounting -------------------------------------------------------------------------


def test_fixed_and_auto_chunks_split_the_epsilon_share(tmp_path: Path) -> None:
    fixed, auto, share = plan_of(tmp_path, SLOPE, AUTO, {**P90, "epsilon": 0.3}, epsilon=1.3)
    assert fixed.share == PureDP(Fraction(1, 2)) and fixed.params.epsilon == 0.5
    assert fixed.params.count_epsilon is None and fixed.guarantee == PureDP(Fraction(1, 2))
    # auto: the person count gets float_down(E/10), the aggregator the rest, rounded down
    count = auto.params.count_epsilon
    assert count == float_down(Fraction(1, 20)) and auto.params.chunks is None
    assert auto.params.epsilon == float_down(Fraction(1, 2) - Fraction(count))
    assert Fraction(1, 2) - Fraction(1, 10**15) < auto.guarantee.epsilon <= Fraction(1, 2)
    assert share.params.epsilon == 0.3 and Fraction(share.params.epsilon) <= Fraction(3, 10)


def test_an_approx_total_counts_the_pure_guarantee(tmp_path: Path) -> None:
    [approx] = plan_of(tmp_path, SLOPE, epsilon=0.5, delta=1e-6)
    assert approx.share == ApproxDP(Fraction(1, 2), Fraction(0))  # δ is not booked: not spent
    assert approx.guarantee == PureDP(Fraction(1, 2))
    assert approx.to_manifest()["counted_as"] == {"rule": "ε-DP counts as (ε, 0)-DP"}


def test_a_zcdp_total_gives_the_aggregator_rho_and_gaussian_noise(tmp_path: Path) -> None:
    """Under ρ the mean adds Gaussian noise at the query's ρ (no ε²/2 conversion); with chunks =
    auto the person count takes the largest ε_count with ε_count²/2 ≤ ρ/10 and the mean the rest,
    all within the share exactly."""
    cfg = parse_job(job(tmp_path, SLOPE, AUTO, rho=0.02, delta=1e-6))
    plan = plan_release(cfg)
    assert plan.spent_selection_delta == 0  # needs_delta is False: no δ share is booked
    fixed, auto = plan.queries
    assert isinstance(fixed, SampleAggregatePlan) and isinstance(auto, SampleAggregatePlan)
    rho = Fraction(1, 100)
    assert fixed.params.epsilon is None and Fraction(fixed.params.rho) <= rho
    assert fixed.guarantee == ZCDP(Fraction(fixed.params.rho))
    mean = fixed.params.aggregator_for(8).mechanism
    assert isinstance(mean, GaussianMechanism)
    assert mean.std == pytest.approx(10 / 8 / math.sqrt(2 * 0.01), rel=1e-3)  # (u − l)/(k·√(2ρ))
    assert fixed.to_manifest()["counted_as"] == {"rule": "ρ-zCDP within the ρ share"}
    assert fixed.to_manifest()["noise"]["mechanism"] == "gaussian"

    count = Fraction(auto.params.count_epsilon)
    assert count**2 / 2 <= rho / 10 < Fraction(math.nextafter(float(count), 1.0)) ** 2 / 2
    assert auto.guarantee == ZCDP(Fraction(auto.params.rho) + count**2 / 2)
    assert auto.guarantee.rho <= rho
    assert rho - auto.guarantee.rho < Fraction(1, 10**15)  # nothing left over but rounding


# --- plan report and manifest ------------------------------------------------------------------


def test_plan_lines_and_manifest_record_k_range_aggregator_and_guarantee(tmp_path: Path) -> None:
    cfg = parse_job(job(tmp_path, SLOPE, P90, AUTO, VECTOR, VIEW, epsilon=2.5))
    plan = plan_release(cfg)
    out = io.StringIO()
    print_plan(plan, out)
    text = out.getvalue()
    mean_scale = ClippedMean(((-5.0, 5.0),), 8, 0.5).mechanism.scale
    assert mean_scale == pytest.approx(10 / 8 / 0.5, rel=1e-6)
    assert (
        "slope: share ε=0.5\n"
        "  sample-and-aggregate of userdp.pipelines.example_functions:duration_vs_hour_slope "
        "on k = 8 person chunks (keyed hash of the person id)\n"
        "  chunk: Arrow table of __person__, timestamp, duration_s; failing or empty chunk → "
        "[0.0] (midpoints)\n"
        f"  aggregate: mean of the answers clipped to [-5, 5] + Laplace scale {mean_scale:.4g} "
        f"(ε = 0.5), stddev {mean_scale * math.sqrt(2):.4g}, 95% error ±"
        f"{mean_scale * math.log(20):.4g}\n"
        "  guarantee: ε=0.5 for add/remove one person\n"
    ) in text
    assert (
        "aggregate: DP median of the answers in [0, 1000], exponential mechanism on 65537 grid "
        "points, rank score (sensitivity 1), ε = 0.5\n"
        "  warning: the median needs k well above 4·ln(G)/ε_c = 89 (ε_c per coordinate); "
        "k = 8 is below"
    ) in text
    assert "k = clamp(⌊√n̂⌋, 10, 10000), n̂ = persons + Laplace(1/ε_count), ε_count = 0.05" in text
    assert "scale 2.222 at k = 10, ×10/k for larger k" in text
    assert "clipped to [0, 1000], [0, 100000] + Laplace" in text
    assert "chunk: Arrow table of __person__, duration_s, domain;" in text

    slope, p90, auto, vector, _ = plan.to_manifest()["queries"]
    assert slope["metric"] == "sample_aggregate" and slope["name"] == "slope"
    assert slope["function"] == SLOPE["function"] and slope["columns"] == SLOPE["columns"]
    assert slope["chunks"] == 8 and slope["range"] == [[-5.0, 5.0]]
    assert slope["aggregator"] == "mean" and slope["default_answer"] == [0.0]
    assert slope["noise"]["mechanism"] == "laplace" and slope["noise"]["scale"] == mean_scale
    assert slope["guarantee"] == {
        "kind": "pure",
        "epsilon": 0.5,
        "epsilon_exact": "1/2",
        "neighbouring": "add/remove one person",
    }
    assert slope["share"] == PureDP(Fraction(1, 2)).to_manifest()
    assert p90["aggregator"] == "median" and p90["noise"]["mechanism"] == "exponential"
    assert auto["chunks"] == "auto" and "floor(sqrt(noisy persons))" in auto["chunks_rule"]
    assert auto["count_epsilon"] == float_down(Fraction(1, 20))
    assert vector["dimension"] == 2 and vector["range"] == [[0.0, 1000.0], [0.0, 100000.0]]
    json.dumps(plan.to_manifest())  # serialisable as it is


# --- the pipeline ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sample_aggregate")
    (root / "data").mkdir()
    generate(PERSONS, str(root / "data" / "logs.parquet"), seed=5)
    return root


def clean_table(logs: Path) -> pa.Table:
    """The clean rows the job hands to the kind: person id as text, numbers as float64 (text as
    large_string, as transforms/validate.py makes it)."""
    t = pq.read_table(logs / "data" / "logs.parquet")
    return pa.table(
        {
            PERSON_COLUMN: pc.cast(t.column("person_id"), pa.large_string()),
            "timestamp": pc.cast(t.column("timestamp"), pa.float64()),
            "duration_s": t.column("duration_s"),
            "domain": pc.cast(t.column("domain"), pa.large_string()),
        }
    )


def exact_answers(logs: Path, query: dict[str, Any], plan: SampleAggregatePlan, k: int) -> Any:
    """The k chunk answers without Beam, on the query's columns, with the release's chunk key."""
    columns = [PERSON_COLUMN, *query["columns"], *query.get("key_columns", [])]
    table = clean_table(logs).select(columns)
    return chunk_answers(table, plan.params, chunk_key(KEY, plan.name), k)


def clipped(answers: list[Answer], j: int, lo: float, hi: float) -> list[float]:
    return [min(hi, max(lo, a[j])) for a in answers]


def exact_mean(values: list[float]) -> float:
    return float(sum((Fraction(v) for v in values), Fraction(0)) / len(values))


def run(logs: Path, tmp_path: Path, queries: tuple[dict[str, Any], ...], noise: bool) -> Any:
    cfg = parse_job({**job(logs, *queries), "output": {"path": str(tmp_path)}})
    result = run_release(cfg, release_key=KEY, noise=noise, num_shards=2)
    rows = {name: pq.read_table(path).to_pylist() for name, path in result.outputs.items()}
    plans = {p.name: p for p in plan_release(cfg).queries if isinstance(p, SampleAggregatePlan)}
    return rows, plans, result


EXACT_QUERIES = (SLOPE, P90, AUTO, ODD, VIEW, VECTOR)


@pytest.fixture(scope="module")
def exact_run(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One run with noise off of every query the exact tests check."""
    with pytest.MonkeyPatch.context() as mp:  # module scope: before the autouse `register`
        mp.setitem(kinds.METRIC_KINDS, "sample_aggregate", SAA)
        return run(logs, tmp_path_factory.mktemp("exact"), EXACT_QUERIES, noise=False)


def test_noise_off_releases_the_mean_and_median_of_the_exact_chunk_answers(
    logs: Path, exact_run: Any
) -> None:
    rows, plans, result = exact_run
    schema = pq.read_table(result.outputs["slope"]).schema
    assert [(f.name, str(f.type)) for f in schema] == [
        ("coordinate", "int64"),
        ("value", "double"),
        ("stddev", "double"),
        ("chunks", "int64"),
    ]
    by_name = {q["name"]: q for q in EXACT_QUERIES}

    def check_mean(name: str, k: int) -> list[Answer]:
        answers = exact_answers(logs, by_name[name], plans[name], k)
        bounds = plans[name].params.bounds
        expected = [exact_mean(clipped(answers, j, lo, hi)) for j, (lo, hi) in enumerate(bounds)]
        std = plans[name].params.aggregator_for(k).noise_std
        assert rows[name] == [
            {"coordinate": j, "value": v, "stddev": std, "chunks": k}
            for j, v in enumerate(expected)
        ], name
        return answers

    check_mean("slope", 8)
    check_mean("auto", default_chunks(PERSONS))  # noise off: k from the exact person count
    check_mean("vec", 6)
    answers = exact_answers(logs, P90, plans["p90"], 8)
    median = statistics.median(clipped(answers, 0, 0.0, 1000.0))
    assert rows["p90"] == [{"coordinate": 0, "value": median, "stddev": None, "chunks": 8}]
    # The function sees __person__ and the query's own columns only: 1.0 on every chunk.
    check_mean("view", 5)
    assert rows["view"][0]["value"] == 1.0


def test_a_function_failing_on_some_chunks_gets_the_documented_default(
    logs: Path, exact_run: Any
) -> None:
    rows, plans, _ = exact_run
    table = clean_table(logs)
    chunk = chunk_ids(table.column(PERSON_COLUMN), 10, chunk_key(KEY, "odd"))
    expected = []
    for c in range(10):
        rows_c = table.filter(pa.array(chunk == c))
        persons = len(pc.unique(rows_c.column(PERSON_COLUMN)))
        durations = rows_c.column("duration_s").to_numpy()
        # odd: the function raises → the midpoint of [0, 1000] (docs/sample_aggregate.md §2)
        expected.append(500.0 if persons % 2 else min(1000.0, float(np.mean(durations))))
    assert 1 <= sum(a == 500.0 for a in expected) <= 9  # both cases occur with this key
    [row] = rows["odd"]
    assert row["value"] == pytest.approx(statistics.fmean(expected), rel=1e-12)
    answers = exact_answers(logs, ODD, plans["odd"], 10)
    assert [a[0] == 500.0 for a in answers] == [a == 500.0 for a in expected]
    assert row["value"] == exact_mean(clipped(answers, 0, 0.0, 1000.0)) and row["chunks"] == 10


def test_noise_on_is_the_core_release_keyed_by_the_query(logs: Path, tmp_path: Path) -> None:
    rows, plans, _ = run(logs, tmp_path, (SLOPE, P90, AUTO), noise=True)
    for name, query in (("slope", SLOPE), ("p90", P90)):
        params = plans[name].params
        answers = exact_answers(logs, query, plans[name], 8)
        rng = KEY.for_query(name).rng("sample_aggregate", "value")
        [value] = params.aggregator_for(8).release(answers, rng)
        assert rows[name] == [
            {
                "coordinate": 0,
                "value": value,
                "stddev": params.aggregator_for(8).noise_std,
                "chunks": 8,
            }
        ]
    params = plans["auto"].params
    assert params.count_epsilon is not None
    count = LaplaceMechanism(1.0, params.count_epsilon)
    k = default_chunks(
        count.release(PERSONS, KEY.for_query("auto").rng("sample_aggregate", "persons"))
    )
    answers = exact_answers(logs, AUTO, plans["auto"], k)
    [value] = params.aggregator_for(k).release(
        answers, KEY.for_query("auto").rng("sample_aggregate", "value")
    )
    assert rows["auto"] == [
        {"coordinate": 0, "value": value, "stddev": params.aggregator_for(k).noise_std, "chunks": k}
    ]
    assert rows["slope"][0]["value"] != rows["auto"][0]["value"]


def test_under_rho_the_job_releases_the_core_gaussian_mean_and_bounded_range_median(
    logs: Path, tmp_path: Path
) -> None:
    cfg = parse_job({**job(logs, SLOPE, P90, rho=0.5), "output": {"path": str(tmp_path)}})
    result = run_release(cfg, release_key=KEY, noise=True, num_shards=2)
    rows = {name: pq.read_table(path).to_pylist() for name, path in result.outputs.items()}
    plans = {p.name: p for p in plan_release(cfg).queries if isinstance(p, SampleAggregatePlan)}
    mean, median = plans["slope"].params.aggregator_for(8), plans["p90"].params.aggregator_for(8)
    assert isinstance(mean, ClippedMean) and isinstance(mean.mechanism, GaussianMechanism)
    assert isinstance(median, RankMedian) and median.rho == plans["p90"].params.rho
    for name, query in (("slope", SLOPE), ("p90", P90)):
        params = plans[name].params
        answers = exact_answers(logs, query, plans[name], 8)
        rng = KEY.for_query(name).rng("sample_aggregate", "value")
        [value] = params.aggregator_for(8).release(answers, rng)
        std = params.aggregator_for(8).noise_std
        assert rows[name] == [{"coordinate": 0, "value": value, "stddev": std, "chunks": 8}]


def test_empty_input_releases_from_k_default_answers(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    pq.write_table(SCHEMA.empty_table(), tmp_path / "data" / "empty.parquet")
    cfg = parse_job(job(tmp_path, SLOPE, AUTO, P90))
    result = run_release(cfg, release_key=KEY, noise=False, num_shards=2)
    rows = {name: pq.read_table(path).to_pylist() for name, path in result.outputs.items()}
    assert rows["slope"][0]["value"] == 0.0 and rows["slope"][0]["chunks"] == 8
    assert rows["auto"][0]["value"] == 0.0 and rows["auto"][0]["chunks"] == 10  # k ≥ 10
    assert rows["p90"] == [{"coordinate": 0, "value": 500.0, "stddev": None, "chunks": 8}]


def test_userdp_run_end_to_end_with_a_failing_function(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failing = (
        '\n[[queries]]\nname = "odd"\nmetric = "sample_aggregate"\n'
        f'function = "{HERE}:odd_persons_fail"\ncolumns = ["duration_s"]\n'
        "range = [0.0, 1000.0]\nchunks = 10\n"
    )
    (tmp_path / "job.toml").write_text(EXAMPLE.read_text() + failing)
    assert (
        main(["generate", "--people", "1500", "--out", str(tmp_path / "data" / "logs.parquet")])
        == 0
    )
    assert main(["plan", str(tmp_path / "job.toml")]) == 0
    printed = capsys.readouterr().out
    assert (
        "sample-and-aggregate of userdp.pipelines.example_functions:visit_duration_p90 on k = 100"
        in printed
    )
    assert main(["run", str(tmp_path / "job.toml")]) == 0
    out = tmp_path / "release_saa"
    manifest = json.loads((out / "manifest.json").read_text())
    slope, p90, odd = manifest["queries"]
    assert (slope["chunks"], slope["aggregator"], slope["range"]) == ("auto", "mean", [[-5.0, 5.0]])
    assert (p90["chunks"], p90["aggregator"], p90["range"]) == (100, "median", [[0.0, 1000.0]])
    assert p90["guarantee"]["kind"] == "pure" and p90["guarantee"]["epsilon_exact"] == "1/2"
    assert odd["guarantee"]["epsilon_exact"] == "1/4"  # the rest of ε split evenly
    assert manifest["spent"] == PureDP(Fraction(1)).to_manifest()
    assert manifest["outputs"] == {
        "duration_slope_per_hour": "duration_slope_per_hour.parquet",
        "visit_duration_p90": "visit_duration_p90.parquet",
        "odd": "odd.parquet",
    }
    [s] = pq.read_table(out / "duration_slope_per_hour.parquet").to_pylist()
    assert 10 <= s["chunks"] <= 100 and s["stddev"] > 0 and math.isfinite(s["value"])
    [p] = pq.read_table(out / "visit_duration_p90.parquet").to_pylist()
    assert p["chunks"] == 100 and p["stddev"] is None and 0.0 <= p["value"] <= 1000.0
    [o] = pq.read_table(out / "odd.parquet").to_pylist()
    assert o["chunks"] == 10 and math.isfinite(o["value"])  # the job completed
