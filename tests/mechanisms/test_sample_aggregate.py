"""Sample-and-aggregate core: answer sanitising, the clipped mean, the rank median, params."""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats

from tests.stats_helpers import P_MIN, TEST_SECRET, ks_pvalue
from userdp.transforms.mechanisms.accounting import ZCDP, float_up
from userdp.transforms.mechanisms.additive import GaussianMechanism
from userdp.transforms.mechanisms.chunk_functions import (
    MAX_CHUNKS,
    MIN_CHUNKS,
    default_answer,
    default_chunks,
    sanitize_answer,
)
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.sample_aggregate import SampleAggregateParams
from userdp.transforms.mechanisms.sample_aggregate_aggregators import (
    ClippedMean,
    RankMedian,
    median_groups,
)

CONTROLS = (0.7, 1.3)
DEFAULT = (5.0,)


def params(**kw: Any) -> SampleAggregateParams:
    base: dict[str, Any] = {
        "name": "q",
        "function": "userdp.pipelines.example_functions:visit_duration_p90",
        "output_range": (0.0, 10.0),
        "epsilon": 1.0,
        "chunks": 20,
    }
    base.update(kw)
    return SampleAggregateParams(**base)


# --- default k and default answer -------------------------------------------------------------


@pytest.mark.parametrize(
    ("noisy", "k"),
    [
        (-5.0, MIN_CHUNKS),
        (float("nan"), MIN_CHUNKS),
        (float("-inf"), MIN_CHUNKS),
        (50.0, MIN_CHUNKS),
        (10_000.0, 100),
        (10_000.9, 100),
        (1e5, 316),
        (1e12, MAX_CHUNKS),
        (float("inf"), MAX_CHUNKS),
    ],
)
def test_default_chunks_is_floor_sqrt_clamped(noisy: float, k: int) -> None:
    assert default_chunks(noisy) == k


def test_default_answer_is_the_midpoint_of_each_range() -> None:
    assert default_answer([(0.0, 10.0), (-3.0, 1.0)]) == (5.0, -1.0)
    assert default_answer([(-1e308, 1e308)]) == (0.0,)  # no overflow on wide ranges


# --- sanitising a function's answer ----------------------------------------------------------


class _BadFloat(float):
    def __float__(self) -> float:
        raise RuntimeError("boom")


@pytest.mark.parametrize(
    ("raw", "dimension", "expected"),
    [
        (3.5, 1, (3.5,)),
        (7, 1, (7.0,)),
        (np.float32(0.5), 1, (0.5,)),
        (np.int64(-2), 1, (-2.0,)),
        (np.array(1.25), 1, (1.25,)),
        ([4.0], 1, (4.0,)),
        ((1, 2.5), 2, (1.0, 2.5)),
        (np.array([1.0, -2.0]), 2, (1.0, -2.0)),
        (Fraction(1, 4), 1, (0.25,)),
    ],
)
def test_valid_answers_become_tuples_of_floats(raw: object, dimension: int, expected: Any) -> None:
    got = sanitize_answer(raw, dimension, (0.0,) * dimension)
    assert got == expected and all(type(v) is float for v in got)


@pytest.mark.parametrize(
    ("raw", "dimension"),
    [
        (float("nan"), 1),
        (float("inf"), 1),
        (-float("inf"), 1),
        ("1.0", 1),
        (None, 1),
        (True, 1),
        (np.bool_(False), 1),
        ([1.0, 2.0], 1),
        (1.0, 2),
        ([1.0], 2),
        ([1.0, float("nan")], 2),
        ([1.0, "2"], 2),
        (np.ones((2, 1)), 2),
        ({"a": 1.0}, 1),
        (_BadFloat(1.0), 1),
        (10**400, 1),  # float() overflows
        (object(), 1),
    ],
)
def test_invalid_answers_become_the_default(raw: object, dimension: int) -> None:
    default = (5.0,) * dimension
    assert sanitize_answer(raw, dimension, default) == default


# --- clipped mean ---------------------------------------------------------------------------


def test_clipped_mean_statistic_is_exact() -> None:
    agg = ClippedMean(((0.0, 10.0),), 4, 1.0)
    answers = [(-3.0,), (2.5,), (0.1,), (99.0,)]
    assert agg.statistic(answers) == ((Fraction(0) + Fraction(2.5) + Fraction(0.1) + 10) / 4,)


def test_clipped_mean_sensitivity_is_range_over_k_rounded_up() -> None:
    agg = ClippedMean(((0.1, 0.7),), 3, 0.5)
    exact = (Fraction(0.7) - Fraction(0.1)) / 3
    assert agg.mechanism.l1_sensitivity == float_up(exact) >= exact
    assert agg.mechanism.epsilon == 0.5
    assert agg.mechanism.scale == pytest.approx(0.6 / 3 / 0.5, rel=1e-9)
    vec = ClippedMean(((0.0, 1.0), (-4.0, 4.0)), 10, 1.0)
    assert vec.mechanism.l1_sensitivity == 0.9 and vec.mechanism.dimension == 2


def test_clipped_mean_noise_is_laplace_of_range_over_k_epsilon_with_controls() -> None:
    # KS of 2·10^4 seeded draws (false rejection ≤ P_MIN); the same draws against scale ×0.7 and
    # ×1.3 must be rejected. Expected scale (u − l)/(kε) = 40/(8·2) = 2.5.
    agg = ClippedMean(((-20.0, 20.0),), 8, 2.0)
    answers = [(float(v),) for v in (-30, -5, 0, 1, 2, 3, 19, 25)]
    exact = float(agg.statistic(answers)[0])
    rng = KeyedRng(TEST_SECRET, "saa-mean")
    noise = np.array([agg.release(answers, rng)[0] - exact for _ in range(20_000)])
    assert ks_pvalue(noise, lambda x: stats.laplace.cdf(x, scale=2.5)) > P_MIN
    for f in CONTROLS:
        assert ks_pvalue(noise, lambda x, f=f: stats.laplace.cdf(x, scale=2.5 * f)) < P_MIN
    assert agg.noise_std == pytest.approx(math.sqrt(2) * 2.5, rel=1e-9)


def test_clipped_mean_under_rho_adds_gaussian_noise_of_the_l2_sensitivity() -> None:
    """Widths 3 and 4 over k = 5 chunks: Δ₂ = √(9 + 16)/5 = 1 exactly (Δ₁ would be 7/5), so
    σ = 1/√(2ρ). KS of 2·10^4 seeded draws of coordinate 1 (false rejection ≤ P_MIN); the same
    draws against σ ×0.7 and ×1.3 must be rejected."""
    agg = ClippedMean(((0.0, 3.0), (-2.0, 2.0)), 5, None, rho=0.125)
    assert isinstance(agg.mechanism, GaussianMechanism)
    assert agg.mechanism.l2_sensitivity == 1.0 and agg.mechanism.dimension == 2
    sigma = 1 / math.sqrt(2 * 0.125)
    assert agg.noise_std == pytest.approx(sigma, rel=1e-3)  # the grid inflates σ by < 0.1%
    answers = [(0.0, -5.0), (1.0, 0.0), (2.0, 1.0), (3.0, 1.5), (9.0, 2.0)]
    exact = float(agg.statistic(answers)[1])
    rng = KeyedRng(TEST_SECRET, "saa-mean-rho")
    noise = np.array([agg.release(answers, rng)[1] - exact for _ in range(20_000)])
    assert ks_pvalue(noise, lambda x: stats.norm.cdf(x, scale=agg.noise_std)) > P_MIN
    for f in CONTROLS:
        assert ks_pvalue(noise, lambda x, f=f: stats.norm.cdf(x, scale=agg.noise_std * f)) < P_MIN


def test_rank_median_under_rho_runs_each_coordinate_at_its_bounded_range_epsilon() -> None:
    """d = 4 coordinates at ρ: E²/(8d) ≤ ρ with E the largest such float, ε_c = E/d = √(8ρ/d) —
    2√d = 4 times the ε/d of the ε²/2 rule's ε = √(2ρ)."""
    rho = 0.5
    agg = RankMedian(((0.0, 1.0),) * 4, 20, None, grid=8, rho=rho)
    e = Fraction(agg.total_epsilon)
    assert e**2 / (8 * 4) <= Fraction(rho) < Fraction(math.nextafter(float(e), 9.0)) ** 2 / 32
    assert agg.coordinate_epsilon == e / 4
    assert float(agg.coordinate_epsilon) == pytest.approx(math.sqrt(8 * rho / 4), rel=1e-12)
    assert float(agg.coordinate_epsilon) == pytest.approx(4 * math.sqrt(2 * rho) / 4, rel=1e-12)
    assert agg.mechanism.exponents([0, -1]) == (Fraction(0), e / 8)  # E·(max − u)/(2d)


@pytest.mark.parametrize("cls", [ClippedMean, RankMedian])
def test_an_aggregator_takes_exactly_one_budget(cls: type) -> None:
    with pytest.raises(ValueError, match="exactly one budget"):
        cls(((0.0, 1.0),), 3, 1.0, rho=0.5)
    with pytest.raises(ValueError, match="exactly one budget"):
        cls(((0.0, 1.0),), 3, None)
    with pytest.raises(ValueError, match="rho must be positive"):
        cls(((0.0, 1.0),), 3, None, rho=0.0)


def test_params_under_rho_compose_the_count_as_eps_squared_over_2() -> None:
    p = params(epsilon=None, rho=0.25, chunks=None, count_epsilon=0.1)
    assert p.guarantee() == ZCDP(Fraction(0.25) + Fraction(0.1) ** 2 / 2)
    m = p.to_manifest()
    assert m["rho"] == 0.25 and m["noise"]["mechanism"] == "gaussian"
    assert m["guarantee"]["kind"] == "zcdp"
    median = params(epsilon=None, rho=0.25, aggregator="median").to_manifest()["noise"]
    assert median["epsilon_per_coordinate"] == pytest.approx(math.sqrt(2), rel=1e-12)
    assert "bounded-range" in median["counted_as"]
    with pytest.raises(ValueError, match="exactly one budget for the aggregator"):
        params(rho=0.25)


def test_clipped_mean_release_is_deterministic_per_stream() -> None:
    agg = ClippedMean(((0.0, 1.0), (0.0, 2.0)), 2, 1.0)
    answers = [(0.5, 1.0), (0.25, 3.0)]
    a = agg.release(answers, KeyedRng(TEST_SECRET, "det"))
    assert a == agg.release(answers, KeyedRng(TEST_SECRET, "det"))
    assert a != agg.release(answers, KeyedRng(TEST_SECRET, "other"))
    assert len(a) == 2


# --- rank median ----------------------------------------------------------------------------


def _naive_scores(indices: list[int], grid: int) -> list[int]:
    return [-max(sum(i < j for i in indices), sum(i > j for i in indices)) for j in range(grid + 1)]


def _expand(groups: tuple[tuple[int, ...], ...]) -> list[int]:
    scores, sizes, starts = groups
    out: dict[int, int] = {}
    for s, m, a in zip(scores, sizes, starts, strict=True):
        for j in range(a, a + m):
            assert j not in out
            out[j] = s
    return [out[j] for j in range(len(out))]


def test_median_groups_match_the_naive_score_at_every_grid_point() -> None:
    rng = np.random.default_rng(1)  # not noise: test inputs
    for _ in range(300):
        grid = int(rng.integers(1, 12))
        k = int(rng.integers(1, 8))
        indices = sorted(int(v) for v in rng.integers(0, grid + 1, size=k))
        assert _expand(median_groups(tuple(indices), grid)) == _naive_scores(indices, grid)


def _exact_pmf(answers: list[float], lo: float, hi: float, grid: int, eps: float) -> list[float]:
    """Brute force: round each answer to its nearest grid point, score every point naively."""
    idx = [round((min(hi, max(lo, a)) - lo) / (hi - lo) * grid) for a in answers]
    w = [math.exp(eps * u / 2) for u in _naive_scores(idx, grid)]
    return [x / sum(w) for x in w]


def test_rank_median_matches_the_brute_force_distribution_with_controls() -> None:
    # χ² over the 9 grid points from 10^5 seeded draws (false rejection ≤ P_MIN); the same draws
    # against the pmf at ε ×0.7 and ×1.3 must be rejected.
    answers = [0.1, 0.3, 0.35, 0.9, 5.0]  # 5.0 clips to the top of [0, 1]
    agg = RankMedian(((0.0, 1.0),), 5, 1.0, grid=8)
    rng = KeyedRng(TEST_SECRET, "saa-median")
    draws = Counter(agg.release([(a,) for a in answers], rng)[0] for _ in range(100_000))
    points = [agg.grid_point(j) for j in range(9)]
    assert set(draws) <= set(points)
    observed = [draws[p] for p in points]
    for f, ok in ((1.0, True), *((f, False) for f in CONTROLS)):
        pmf = _exact_pmf(answers, 0.0, 1.0, 8, 1.0 * f)
        p = stats.chisquare(observed, [q * 100_000 for q in pmf]).pvalue
        assert bool(p > P_MIN) is ok, (f, p)


def test_rank_median_is_epsilon_dp_on_every_neighbouring_pair_brute_force() -> None:
    # All answer vectors of k = 3 chunks on a grid of 4 cells, and every replacement of one
    # answer (what adding or removing one person does): exact pmfs, max ratio ≤ e^ε.
    eps, grid, k = 1.0, 4, 3
    domain = [j / grid for j in range(grid + 1)]
    worst = 0.0
    for x in itertools.product(domain, repeat=k):
        p = _exact_pmf(list(x), 0.0, 1.0, grid, eps)
        for i, v in itertools.product(range(k), domain):
            y = list(x)
            y[i] = v
            q = _exact_pmf(y, 0.0, 1.0, grid, eps)
            worst = max(worst, *(math.log(a / b) for a, b in zip(p, q, strict=True)))
    assert worst <= eps + 1e-12
    assert worst > eps / 2  # the score really moves: the bound is not vacuous


def test_rank_median_statistic_and_concentration() -> None:
    answers = [(float(v),) for v in (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5)]
    agg = RankMedian(((0.0, 10.0),), 11, 60.0, grid=100)
    assert agg.statistic(answers) == (statistics.median([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]),)
    # Sorted: 1 1 2 3 3 [4] 5 5 5 6 9. At ε = 60 the median point 4.0 scores −5 and every other
    # point ≤ −6, so P[other] ≤ 100·e^−30 (weights exp(ε·u/2)): the draw is exactly the median.
    assert agg.release(answers, KeyedRng(TEST_SECRET, "conc")) == (4.0,)
    even = RankMedian(((0.0, 10.0),), 4, 1.0)
    assert even.statistic([(1.0,), (2.0,), (3.0,), (40.0,)]) == (2.5,)


def test_vector_median_spends_epsilon_over_d_per_coordinate() -> None:
    agg = RankMedian(((0.0, 1.0), (0.0, 1.0)), 3, 1.0, grid=4)
    q = agg.mechanism.exponents([0, -1, -3])
    assert q == (Fraction(0), Fraction(1, 4), Fraction(3, 4))  # ε·(max − u)/(2·d)
    out = agg.release([(0.0, 1.0), (0.5, 1.0), (1.0, 1.0)], KeyedRng(TEST_SECRET, "vec"))
    assert len(out) == 2 and all(v in (0.0, 0.25, 0.5, 0.75, 1.0) for v in out)


def test_wrong_number_of_answers_is_refused() -> None:
    with pytest.raises(ValueError, match="expected one answer per chunk"):
        ClippedMean(((0.0, 1.0),), 3, 1.0).statistic([(0.0,), (1.0,)])
    with pytest.raises(ValueError, match="expected answers of dimension 1"):
        RankMedian(((0.0, 1.0),), 2, 1.0).statistic([(0.0,), (1.0, 2.0)])
    with pytest.raises(ValueError, match="not finite"):
        ClippedMean(((0.0, 1.0),), 1, 1.0).statistic([(float("nan"),)])


# --- params ---------------------------------------------------------------------------------


def test_params_build_the_calibrated_aggregator() -> None:
    p = params(output_range=((0.0, 1.0), (2.0, 4.0)), dimension=2)
    assert p.bounds == ((0.0, 1.0), (2.0, 4.0))
    assert p.default == (0.5, 3.0)
    agg = p.aggregator_for(30)
    assert isinstance(agg, ClippedMean) and agg.mechanism.l1_sensitivity == pytest.approx(0.1)
    assert params(output_range=(1.0, 3.0), dimension=3).bounds == ((1.0, 3.0),) * 3
    median = params(aggregator="median", median_grid=64).aggregator_for(7)
    assert isinstance(median, RankMedian) and median.grid == 64 and median.chunks == 7


def test_manifest_states_k_range_aggregator_and_guarantee() -> None:
    m = params().to_manifest()
    assert m["chunks"] == 20 and m["range"] == [[0.0, 10.0]] and m["aggregator"] == "mean"
    assert m["guarantee"] == {"kind": "pure", "epsilon": 1.0, "epsilon_exact": "1"}
    assert m["noise"]["scale"] == pytest.approx(10 / 20, rel=1e-9)
    assert m["default_answer"] == [5.0] and "one person" in m["neighbouring"]
    auto = params(chunks=None, count_epsilon=0.1, aggregator="median").to_manifest()
    assert auto["chunks"] == "auto" and "sqrt" in auto["chunks_rule"]
    assert auto["guarantee"]["epsilon_exact"] == str(Fraction(1.0) + Fraction(0.1))
    assert auto["noise"]["mechanism"] == "exponential"


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"name": ""}, ValueError, "name must be a non-empty string"),
        ({"function": "no_colon"}, ValueError, "import path 'module:function'"),
        ({"function": "a:b c"}, ValueError, "import path"),
        ({"aggregator": "trimmed"}, ValueError, "aggregator must be one of"),
        ({"input_kind": "polars"}, ValueError, "input_kind must be one of"),
        ({"dimension": 0}, ValueError, "dimension must be an int"),
        ({"dimension": True}, ValueError, "dimension must be an int"),
        ({"output_range": ((0.0, 1.0),), "dimension": 2}, ValueError, "got 1 ranges"),
        ({"output_range": (1.0, 1.0)}, ValueError, "lower < upper"),
        ({"output_range": (0.0, math.inf)}, ValueError, "must be finite"),
        ({"output_range": (0.0, 1.0, 2.0)}, ValueError, "must be a pair"),
        ({"output_range": ()}, ValueError, "output_range must be"),
        ({"epsilon": 0.0}, ValueError, "epsilon must be positive"),
        ({"epsilon": math.nan}, ValueError, "epsilon must be finite"),
        ({"chunks": None}, ValueError, "count_epsilon must give"),
        ({"chunks": None, "count_epsilon": -1.0}, ValueError, "count_epsilon must be positive"),
        ({"count_epsilon": 0.1}, ValueError, "count_epsilon is only for chunks=None"),
        (  # the person count's noise overflowed only once the pipeline was built (exit 1)
            {"chunks": None, "count_epsilon": 1e-301, "aggregator": "median"},
            ValueError,
            r"Laplace noise for sensitivity 1 at ε = 1e-301 has a scale that overflows",
        ),
        ({"chunks": 0}, ValueError, r"chunks must lie in \[1, 1000000\]"),
        ({"chunks": 2.0}, TypeError, "chunks must be an int"),
        ({"chunks": True}, TypeError, "chunks must be an int"),
        ({"aggregator": "median", "median_grid": 0}, ValueError, "grid must be an int"),
        (
            {"output_range": ((-1e308, 1e308),) * 5, "dimension": 5, "chunks": 2},
            ValueError,
            "overflows a float",
        ),
        (
            {
                "epsilon": None,
                "rho": 0.5,
                "output_range": ((-1e308, 1e308),) * 5,
                "dimension": 5,
                "chunks": 2,
            },
            ValueError,
            "overflows a float",
        ),
        (  # the sensitivity 2e307 fits; its Gaussian σ = 2e307/√(2·1e-4) does not
            {"epsilon": None, "rho": 1e-4, "output_range": (-1e307, 1e307), "chunks": 1},
            ValueError,
            "noise's scale for these ranges, chunks and budget overflows a float",
        ),
    ],
)
def test_bad_params_are_refused(kw: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        params(**kw)
