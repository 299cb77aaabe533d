"""Shifted inverse mechanism: grid, losses, sensitivity (brute force), samplers (χ²), misuse."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import pytest
from scipy import stats

from tests.stats_helpers import P_MIN, TEST_SECRET, chisquare_pvalue
from userdp.transforms.mechanisms.accounting import ZCDP, PureDP
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.shifted_inverse import (
    ShiftedInverseParams,
    shifted_inverse,
    shifted_inverse_index,
)
from userdp.transforms.mechanisms.shifted_inverse_grid import OutputGrid
from userdp.transforms.mechanisms.shifted_inverse_loss import (
    LossRun,
    down_indices,
    loss_at,
    loss_runs,
)
from userdp.transforms.mechanisms.shifted_inverse_stats import sum_down_values

HALF = Fraction(1, 2)


def _params(**kw: object) -> ShiftedInverseParams:
    """Params with ``epsilon=`` / ``rho=`` as shorthands for ``budget=PureDP(…)`` / ``ZCDP(…)``."""
    if "epsilon" in kw:
        kw["budget"] = PureDP(kw.pop("epsilon"))  # type: ignore[arg-type]
    if "rho" in kw:
        kw["budget"] = ZCDP(kw.pop("rho"))  # type: ignore[arg-type]
    return ShiftedInverseParams(**{"upper": 12, "resolution": 1, "beta": HALF, **kw})  # type: ignore[arg-type]


def _down(totals: list[int], params: ShiftedInverseParams) -> list[Fraction]:
    top = sorted(totals, reverse=True)
    return sum_down_values(sum(top), top, params.down_values_needed)


def _profile(totals: list[int], params: ShiftedInverseParams) -> tuple[list[int], list[int]]:
    """(ℓ, ℓ̄) at every grid index, expanded from the runs."""
    runs = loss_runs(down_indices(_down(totals, params), params), params.output_grid.size)
    loss = [0] * params.output_grid.size
    loss_bar = [0] * params.output_grid.size
    for r in runs:
        for k in range(r.start, r.start + r.length):
            loss[k], loss_bar[k] = r.loss, r.loss_bar
    return loss, loss_bar


def _shifted(totals: list[int], params: ShiftedInverseParams, factor: int = 1) -> list[int]:
    loss, loss_bar = _profile(totals, params)
    t = params.tau
    return [factor * max(a - t, t - b) for a, b in zip(loss, loss_bar, strict=True)]


# --- the grid ---------------------------------------------------------------------------------


def test_linear_grid_rounds_up_and_caps() -> None:
    grid = OutputGrid(Fraction(12), Fraction(3))
    assert grid.size == 5
    assert [grid.value(k) for k in range(5)] == [0, 3, 6, 9, 12]
    cases = {-1: 0, 0: 0, Fraction(1, 10): 1, 3: 1, Fraction(31, 10): 2, 12: 4, 10**9: 4}
    assert {v: grid.ceil_index(v) for v in cases} == cases


def test_log_grid_points_hand_computed() -> None:
    # m: 1, 2, 3, ⌈4.5⌉=5, ⌈7.5⌉=8, 12, 18, ⌈40.5⌉=41 after 27, ⌈61.5⌉=62, 93, then capped 100.
    grid = OutputGrid(Fraction(100), Fraction(1), "log", Fraction(3, 2))
    points = [grid.value(k) for k in range(grid.size)]
    assert points == [0, 1, 2, 3, 5, 8, 12, 18, 27, 41, 62, 93, 100]
    assert grid.ceil_index(4) == 4 and grid.ceil_index(Fraction(1, 2)) == 1
    assert grid.ceil_index(100) == grid.ceil_index(10**6) == 12


@pytest.mark.parametrize(
    "grid",
    [OutputGrid(Fraction(20), Fraction(2)), OutputGrid(Fraction(50), HALF, "log", Fraction(5, 4))],
)
def test_ceil_index_is_monotone_and_is_the_smallest_point_above(grid: OutputGrid) -> None:
    prev = 0
    for i in range(-4, 300):
        v = Fraction(i, 4)
        k = grid.ceil_index(v)
        assert k >= prev  # rounding up to the grid is non-decreasing: f' stays monotone
        prev = k
        if 0 < v <= grid.upper:
            assert grid.value(k) >= v and (k == 0 or grid.value(k - 1) < v)
        elif v > grid.upper:
            assert k == grid.size - 1


# --- parameters -------------------------------------------------------------------------------


@pytest.mark.parametrize(("epsilon", "tau"), [(1, 47), (Fraction(1, 8), 375), (8, 6)])
def test_tau_matches_the_fdy22_artifact(epsilon: Fraction, tau: int) -> None:
    # D = 1.5·10^10, d = 10, β = 0.1: the artifact's files hold 2τ + 1 = 95, 751, 13 values.
    p = ShiftedInverseParams(upper=15 * 10**9, resolution=10, budget=PureDP(epsilon))
    assert p.output_grid.size == 15 * 10**8 + 1
    assert p.tau == tau and p.loss_cap == 2 * tau + 2 == p.down_values_needed == p.top_k + 1


def test_binary_search_settings() -> None:
    pure = _params(upper=3, epsilon=1, search="binary")
    assert (pure.steps, pure.noise_scale, pure.tau) == (2, 2, 3)  # σ = T/ε, τ = ⌈σ ln(T/β)⌉
    lap = _params(upper=3, rho=Fraction(1, 8), search="binary")
    s = lap.noise_scale  # σ = √(T/(2ρ)) = √8, rounded up to a multiple of 2^−64
    assert s * s >= 8 > (s - Fraction(1, 2**64)) ** 2
    assert lap.tau == 4
    gau = _params(upper=3, rho=Fraction(1, 4), search="binary", noise="gaussian")
    assert gau.noise_scale == 4 and gau.sigma == 2  # σ² = T/(2ρ)
    assert gau.tau == math.ceil(2 * math.sqrt(2 * math.log(8)))
    assert _params(upper=16, epsilon=1, search="binary").steps == 5  # ⌈log₂ 17⌉


def test_guarantee_manifest_and_split() -> None:
    p = _params(epsilon=Fraction(1, 2))
    assert p.guarantee == PureDP(Fraction(1, 2))
    m = p.to_manifest()
    assert m["mechanism"] == "shifted_inverse_exponential" and m["tau"] == p.tau
    assert m["guarantee"]["kind"] == "pure" and m["grid_size"] == 13
    assert set(m) == {
        "mechanism", "guarantee", "neighbouring", "tau", "loss_cap", "grid", "grid_size",
        "upper", "resolution", "beta",
    }  # fmt: skip
    z = _params(rho=1, search="binary", grid="log", growth=2)
    assert z.guarantee == ZCDP(1)
    assert {"noise", "steps", "sigma", "growth"} <= set(z.to_manifest())
    assert p.split(4).budget == PureDP(Fraction(1, 8)) and z.split(2).budget == ZCDP(HALF)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"epsilon": 0}, "epsilon must be positive"),
        ({"rho": 1}, "exponential search is pure"),
        ({"epsilon": 1, "search": "binary", "noise": "gaussian"}, r"give ZCDP\(rho\) instead"),
        ({"epsilon": 1, "beta": 1}, r"beta must lie in \(0, 1\)"),
        ({"epsilon": 1, "search": "linear"}, "search must be"),
        ({"epsilon": 1, "noise": "cauchy"}, "noise must be"),
        ({"epsilon": 1, "upper": 10, "resolution": 3}, "whole number"),
        ({"epsilon": 1, "resolution": -1}, "resolution must be positive"),
        ({"epsilon": 1, "grid": "log"}, "needs growth"),
        ({"epsilon": 1, "grid": "log", "growth": 1}, "growth must be > 1"),
        ({"epsilon": 1, "growth": 2}, "log' only"),
        ({"epsilon": 1, "grid": "sqrt"}, "grid must be"),
        (
            {"epsilon": 1, "upper": 10**9, "grid": "log", "growth": 1 + 1e-9},
            "over the limit of 1000000",
        ),
    ],
)
def test_misuse_of_params_is_refused(kw: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _params(**kw)


def test_misuse_of_split_and_down_values_is_refused() -> None:
    p = _params(epsilon=1)
    with pytest.raises(ValueError, match="parts must be a positive integer"):
        p.split(0)
    good = _down([3, 2], p)
    with pytest.raises(ValueError, match="need the first 16 down values"):
        down_indices(good[:5], p)
    with pytest.raises(ValueError, match="non-increasing"):
        down_indices([1, 2, *good[2:]], p)
    with pytest.raises(ValueError, match="negative"):
        down_indices([-1] * 16, p)
    with pytest.raises(ValueError, match="not finite"):
        down_indices([math.inf] * 16, p)
    with pytest.raises(TypeError, match="int, Fraction or float"):
        down_indices(["3"] * 16, p)  # type: ignore[list-item]


# --- losses -------------------------------------------------------------------------------------


def test_exact_losses_hand_computed() -> None:
    # Totals 5, 3, 2, 1, 1: f(x, j) = 12, 7, 4, 2, 1, 0, … On {0, 2, …, 12} (d = 2), rounded up to
    # indices c = 6, 4, 2, 1, 1, 0, … (C = 2τ + 2 = 14 of them, 9 zeros). τ = ⌈2 ln(7/β)⌉ = 6.
    p = _params(epsilon=1, resolution=2)
    assert p.tau == 6
    c = down_indices(_down([5, 3, 2, 1, 1], p), p)
    assert c == [6, 4, 2, 1, 1] + [0] * 9
    assert loss_runs(c, 7) == [
        LossRun(6, 1, 0, 1),  # y = 12: ℓ = 0 (f ≤ 12), ℓ̄ = 1 (one removal gives f < 12)
        LossRun(5, 1, 1, 1),  # y = 10
        LossRun(4, 1, 1, 2),  # y = 8: f(x, 1) = 7 → 8 ≤ 8, f(x, 2) = 4 < 8
        LossRun(3, 1, 2, 2),
        LossRun(2, 1, 2, 3),  # y = 4
        LossRun(1, 1, 3, 5),  # y = 2: f(x, 3) = 2 and f(x, 4) = 1 both round to 2
        LossRun(0, 1, 5, 14),  # y = 0: five removals, and ℓ̄ = ∞ clamped at C
    ]
    assert [loss_at(c, k) for k in range(7)] == [5, 3, 2, 2, 1, 1, 0]
    assert [r.shifted(p.tau) for r in loss_runs(c, 7)] == [5, 5, 4, 4, 3, 1, -1]


def _by_definition(totals: list[int], grid: OutputGrid, cap: int) -> tuple[list[int], list[int]]:
    """ℓ(y) = min{|S| : f'(x ∖ S) ≤ y}, ℓ̄ with <, by enumerating every set S of persons."""
    n = len(totals)
    best: dict[int, int] = {}  # grid index of f'(x ∖ S) → fewest removals reaching it
    for r in range(n + 1):
        for removed in itertools.combinations(range(n), r):
            rest = sum(t for i, t in enumerate(totals) if i not in removed)
            k = grid.ceil_index(Fraction(rest))
            best[k] = min(best.get(k, n + 1), r)
    loss, loss_bar = [], []
    for k in range(grid.size):
        le = min((v for i, v in best.items() if i <= k), default=math.inf)
        lt = min((v for i, v in best.items() if i < k), default=math.inf)
        loss.append(int(min(le, cap)))
        loss_bar.append(int(min(lt, cap)))
    return loss, loss_bar


GRIDS = [
    pytest.param({"resolution": 1}, id="linear-d1"),
    pytest.param({"resolution": 3}, id="linear-d3"),
    pytest.param({"upper": 64, "grid": "log", "growth": Fraction(3, 2)}, id="log"),
]
MULTISETS = [
    list(m) for n in range(5) for m in itertools.combinations_with_replacement([1, 2, 5], n)
]


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("epsilon", [8, 4])  # τ = 1 and τ = 2 on |Y| = 13, β = 1/2
def test_losses_match_their_definition_by_enumeration(
    grid: dict[str, object], epsilon: int
) -> None:
    p = _params(epsilon=epsilon, **grid)
    for totals in [*MULTISETS, [7, 1, 1, 1, 1, 1], [40, 3, 3]]:
        assert _profile(totals, p) == _by_definition(totals, p.output_grid, p.loss_cap), totals


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("epsilon", [8, 4, 2])
def test_shifted_loss_has_sensitivity_one(grid: dict[str, object], epsilon: int) -> None:
    # Every small multiset of per-person totals, and every person one could add to it (including
    # a very heavy one): ℓ* moves by at most 1 at every grid point. The doubled loss (a negative
    # control for this check) moves by 2 somewhere.
    p = _params(epsilon=epsilon, **grid)
    worst = worst_doubled = 0
    for totals in MULTISETS:
        base, base2 = _shifted(totals, p), _shifted(totals, p, 2)
        for extra in (1, 2, 5, 10**6):
            moved = _shifted([*totals, extra], p)
            moved2 = _shifted([*totals, extra], p, 2)
            worst = max(worst, *(abs(a - b) for a, b in zip(base, moved, strict=True)))
            worst_doubled = max(
                worst_doubled, *(abs(a - b) for a, b in zip(base2, moved2, strict=True))
            )
    assert worst == 1 and worst_doubled == 2


# --- samplers -----------------------------------------------------------------------------------

EM_TOTALS = list(range(1, 13))  # f(x) = 78; |Y| = 101, β = 1/2, ε = 1: τ = 11, C = 24
EM_DRAWS = 30_000


def _em_pmf(totals: list[int], params: ShiftedInverseParams, epsilon: float) -> list[float]:
    """P[index = k] ∝ exp(−ε·ℓ*(k)/2), computed per index from the definition."""
    loss, loss_bar = _by_definition(totals, params.output_grid, params.loss_cap)
    t = params.tau
    w = [math.exp(-epsilon * max(a - t, t - b) / 2) for a, b in zip(loss, loss_bar, strict=True)]
    return [x / sum(w) for x in w]


def test_exponential_search_frequencies_match_with_controls() -> None:
    # χ² over the grid indices (pooled where expected counts are small), 3·10^4 seeded draws:
    # false rejection ≤ P_MIN. Controls: the same draws against ε ×0.7 and ×1.3 are rejected.
    p = _params(epsilon=1, upper=100)
    assert p.tau == 11
    down = _down(EM_TOTALS[:8], p)  # f = 36: the top run (36, 100] has 64 points
    rng = KeyedRng(TEST_SECRET, "shifted-inverse", "em")
    samples = [shifted_inverse_index(down, p, rng) for _ in range(EM_DRAWS)]
    for eps, expect_fit in ((1.0, True), (0.7, False), (1.3, False)):
        pmf = _em_pmf(EM_TOTALS[:8], p, eps)
        mode = max(range(len(pmf)), key=pmf.__getitem__)
        pvalue = chisquare_pvalue(
            samples, lambda k, pmf=pmf: pmf[k] if 0 <= k < len(pmf) else 0.0, mode
        )
        assert (pvalue > P_MIN) == expect_fit, (eps, pvalue)


def _binary_pmf(loss: list[int], params: ShiftedInverseParams, cdf: object) -> list[float]:
    """Exact output law of the binary search, by recursion over its comparisons."""
    out = [0.0] * len(loss)

    def walk(lo: int, hi: int, prob: float) -> None:
        if lo + 1 >= hi:
            out[hi] += prob
            return
        k = (lo + hi) // 2
        left = cdf(params.tau - loss[k])  # type: ignore[operator]
        walk(lo, k, prob * left)
        walk(k, hi, prob * (1 - left))

    walk(-1, len(loss) - 1, 1.0)
    return out


def _laplace_cdf(scale: float) -> object:
    r = math.exp(-1 / scale)
    return lambda t: 1 - r ** (t + 1) / (1 + r) if t >= 0 else r ** (-t) / (1 + r)


def _gaussian_cdf(sigma2: float) -> object:
    zs = range(-60, 61)
    w = {z: math.exp(-z * z / (2 * sigma2)) for z in zs}
    total = sum(w.values())
    return lambda t: sum(v for z, v in w.items() if z <= t) / total


@pytest.mark.parametrize(
    ("kw", "cdf_of"),
    [
        ({"epsilon": 4}, _laplace_cdf),
        ({"rho": 2, "noise": "gaussian"}, _gaussian_cdf),
    ],
    ids=["pure-laplace", "zcdp-gaussian"],
)
def test_binary_search_frequencies_match_with_controls(
    kw: dict[str, object], cdf_of: object
) -> None:
    # |Y| = 16 (T = 4 steps), σ = 1 (Laplace scale or Gaussian sd), τ = 3. The exact law comes
    # from recursing over the comparisons with the noise CDF; controls at σ ×0.7 and ×1.3.
    p = _params(upper=15, search="binary", **kw)
    assert (p.steps, p.sigma, p.tau) == (4, 1.0, 3)
    totals = [3, 2, 2, 1, 1, 1]
    loss, _ = _profile(totals, p)
    assert loss == [
        6,
        5,
        4,
        3,
        3,
        2,
        2,
        1,
        1,
        1,
        0,
        0,
        0,
        0,
        0,
        0,
    ]  # f(x, j) = 10, 7, 5, 3, 2, 1, 0
    rng = KeyedRng(TEST_SECRET, "shifted-inverse", "binary", str(kw))
    down = _down(totals, p)
    counts = Counter(shifted_inverse_index(down, p, rng) for _ in range(20_000))
    observed = [counts.get(k, 0) for k in range(16)]
    for factor, expect_fit in ((1.0, True), (0.7, False), (1.3, False)):
        scale = float(p.noise_scale) * (factor if "epsilon" in kw else factor**2)
        pmf = _binary_pmf(loss, p, cdf_of(scale))  # type: ignore[operator]
        cells = [k for k in range(16) if pmf[k] * 20_000 >= 5]
        exp = [pmf[k] * 20_000 for k in cells]
        obs = [observed[k] for k in cells]
        rest_exp, rest_obs = 20_000 - sum(exp), 20_000 - sum(obs)
        pvalue = float(stats.chisquare([*obs, rest_obs], [*exp, rest_exp]).pvalue)
        assert (pvalue > P_MIN) == expect_fit, (factor, pvalue)


@pytest.mark.parametrize("search", ["exponential", "binary"])
def test_huge_grid_is_accurate(search: str) -> None:
    # |Y| = 2^40 + 1 is never enumerated (if it were, this test would not end; its speed is
    # benchmarks/shifted_inverse.py's). 1000 persons with 1–7 rows; with β = 10^-3 every one of
    # 20 draws lies in [f(x, 2τ), f(x)] (each misses with probability ≤ β).
    p = ShiftedInverseParams(
        upper=2**40,
        resolution=1,
        budget=PureDP(1),
        beta=Fraction(1, 1000),
        search=search,  # type: ignore[arg-type]
    )
    totals = [1 + (i * 7919) % 7 for i in range(1000)]
    down = _down(totals, p)
    low, high = down[2 * p.tau], down[0]
    for i in range(20):
        y = shifted_inverse(down, p, KeyedRng(TEST_SECRET, "huge", search, i))
        assert low <= y <= high
