"""Smooth sensitivity of quantiles under add/remove one person, and its noisy release.

Layers: (1) the add/remove formulas of docs/local_sensitivity.md against brute force over every
data set of up to 6 values on {0, …, 4} and all their neighbours; (2) the fast algorithm against
the O(n²) formula on 1,200 random inputs; (3) the noise rules' parameter arithmetic; (4) the
release's distribution (KS, p > P_MIN = 1e-6, fixed secret so deterministic; the same samples
tested at scale ×1.3 must be rejected); (5) misuse.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import optimize, stats

from tests.mechanisms import local_bruteforce as bf
from tests.stats_helpers import P_MIN, TEST_SECRET, ks_pvalue
from userdp.transforms.mechanisms import quantile_sensitivity as qs
from userdp.transforms.mechanisms import smooth_sensitivity as ss
from userdp.transforms.mechanisms.heavy_tailed import release_grid
from userdp.transforms.mechanisms.rng import KeyedRng

QUANTILES = [Fraction(1, 2), Fraction(1, 3), Fraction(3, 4), Fraction(1, 10), Fraction(9, 10)]
MAX_N = 6
ETA = qs.ROUNDING_MARGIN


def small_data_sets() -> list[np.ndarray]:
    return list(bf.universe(MAX_N))


def pairs_and_costs(xs: np.ndarray, q: Fraction) -> tuple[np.ndarray, np.ndarray]:
    n = len(xs)
    xp = qs.padded(xs, bf.LO, bf.HI)
    i, j = np.triu_indices(n + 2, k=1)
    return xp[j] - xp[i], qs.pair_cost(i, j, n, q)


# --------------------------------------------------------------------- (1) brute force, exact


@pytest.mark.parametrize("q", QUANTILES, ids=str)
def test_sensitivity_at_distance_k_matches_the_definition(q: Fraction) -> None:
    """A⁽ᵏ⁾(x) = max{x_j − x_i : c(i, j) ≤ k} for every k ≤ |x| (docs §2)."""
    checked = 0
    for x in small_data_sets():
        gaps, costs = pairs_and_costs(bf.values_of(x), q)
        for k, expected in enumerate(bf.sensitivity_at_distance(x, q)):
            assert gaps[costs <= k].max() == expected, (x, k)
            checked += 1
    assert checked == 2772  # 462 data sets, k = 0 … |x|


@pytest.mark.parametrize("q", QUANTILES, ids=str)
def test_local_sensitivity_matches_the_definition(q: Fraction) -> None:
    ls = bf.local_sensitivities(MAX_N, q)
    for x, expected in zip(bf.universe(MAX_N), ls, strict=True):
        got = qs.local_sensitivity(bf.values_of(x), q=q, lower=bf.LO, upper=bf.HI)
        assert got == expected, x


@pytest.mark.parametrize("beta", [0.05, 0.3, 1.5])
@pytest.mark.parametrize("q", QUANTILES, ids=str)
def test_smooth_bound_is_an_upper_bound_and_beta_smooth(q: Fraction, beta: float) -> None:
    """S(x) ≥ LS(x), S(x) ≤ e^β·S(x') for every neighbour x', and S is (1+η)·S*_{β'} exactly."""
    beta_inner = beta - 2 * math.log1p(ETA)
    log_s = {}
    for x in small_data_sets():
        log_s[x.tobytes()] = qs.log_smooth_sensitivity(
            bf.values_of(x), q=q, lower=bf.LO, upper=bf.HI, beta=beta
        )
    ls = bf.local_sensitivities(MAX_N, q)
    for x, ls_x in zip(small_data_sets(), ls, strict=True):
        s_x = log_s[x.tobytes()]
        assert s_x >= math.log(ls_x) if ls_x > 0 else True
        expected = math.log(bf.smooth_sensitivity(x, q, beta_inner)) + math.log1p(ETA)
        assert s_x == pytest.approx(expected, abs=1e-12)
        for y in bf.neighbours(x):
            if y.sum() <= MAX_N:
                assert s_x <= beta + log_s[y.tobytes()] + 1e-12, (x, y)


def test_seed_example_zero_local_sensitivity_next_to_a_jump() -> None:
    """The seed's example: LS(x) = 0 but a neighbour has LS = Λ, so S(x) ≥ e^(−β)·Λ."""
    x = [0.0, 0.0, 0.0, 10.0, 10.0]  # n = 5: the median's gap is (x_2, x_3) = (0, 0)
    x_prime = [0.0, 0.0, 10.0, 10.0]  # n = 4: lower median 0, gap (x_2, x_3) = (0, 10)
    assert qs.local_sensitivity(x, q=0.5, lower=0, upper=10) == 0.0
    assert qs.local_sensitivity(x_prime, q=0.5, lower=0, upper=10) == 10.0
    beta = 0.1
    log_s = qs.log_smooth_sensitivity(x, q=0.5, lower=0, upper=10, beta=beta)
    assert log_s == pytest.approx(math.log(10.0) - (beta - 2 * math.log1p(ETA)) + math.log1p(ETA))


def test_quantile_rank_and_value() -> None:
    half = Fraction(1, 2)
    assert [qs.quantile_rank(n, half) for n in range(6)] == [0, 1, 1, 2, 2, 3]
    assert qs.quantile_rank(10, Fraction(9, 10)) == 9
    assert qs.as_quantile(0.9) == Fraction(9, 10)  # decimal reading, not the binary float
    xs = qs.sorted_clamped([5.0, -20.0, 3.0, np.inf], -10.0, 10.0)
    assert list(xs) == [-10.0, 3.0, 5.0, 10.0]
    assert qs.quantile_of_sorted(xs, half, -10.0) == 3.0
    assert qs.quantile_of_sorted(xs[:0], half, -10.0) == -10.0


# ------------------------------------------------------------------ (2) fast == naive formula


def random_inputs(count: int) -> list[tuple[np.ndarray, Fraction, float]]:
    """Data generation only (not noise): numpy's seeded generator is fine here."""
    gen = np.random.default_rng(20240606)
    cases = []
    qs_list = [*QUANTILES, Fraction(37, 100), Fraction(99, 100), Fraction(1, 100)]
    for t in range(count):
        n = int(gen.integers(0, 70))
        kind = t % 4
        if kind == 0:
            x = gen.normal(size=n)
        elif kind == 1:
            x = gen.integers(-3, 4, size=n).astype(float)  # many ties
        elif kind == 2:
            x = np.concatenate([gen.normal(size=n // 2), np.full(n - n // 2, 9.0)])  # clamped
        else:
            x = gen.standard_cauchy(size=n)
        beta = float(gen.choice([1e-4, 0.01, 0.1, 0.5, 3.0]))
        cases.append((x, qs_list[t % len(qs_list)], beta))
    return cases


def test_fast_equals_naive_on_random_inputs() -> None:
    lo, hi = -4.0, 4.5
    for x, q, beta in random_inputs(1200):
        xp = qs.padded(qs.sorted_clamped(x, lo, hi), lo, hi)
        naive = qs._raw_naive(xp, q, beta)
        assert qs._raw_fast(xp, q, beta) == pytest.approx(naive, abs=1e-12), (len(x), q, beta)
        # The search itself, without the pruning that usually leaves it little to do:
        assert qs._raw_fast(xp, q, beta, prune=False) == pytest.approx(naive, abs=1e-12)
    x, q, beta = random_inputs(1)[0]
    assert qs.log_smooth_sensitivity(
        x, q=q, lower=lo, upper=hi, beta=beta
    ) == qs.log_smooth_sensitivity_naive(x, q=q, lower=lo, upper=hi, beta=beta)


def test_large_inputs_stay_in_log_space() -> None:
    # 10^5 equal values: the only non-zero gaps involve a bound: (lo, x_n) = 10 needs the other
    # n − 1 values removed, (lo, hi) = 20 all n. S = max(10·e^(−β'(n−1)), 20·e^(−β'n))·(1 + η)
    # ≈ e^(−998) at β = 0.01: far below the float range, fine in log space.
    n, beta = 100_000, 0.01
    log_s = qs.log_smooth_sensitivity(np.zeros(n), q=0.5, lower=-10.0, upper=10.0, beta=beta)
    b = beta - 2 * math.log1p(ETA)
    expected = max(math.log(10.0) - b * (n - 1), math.log(20.0) - b * n) + math.log1p(ETA)
    assert log_s == pytest.approx(expected, rel=1e-12)
    # At β = 0.05, S ≈ e^(−4997) is below K = 20·e^(−2000), which stands in for it (an upper bound).
    log_s = qs.log_smooth_sensitivity(np.zeros(n), q=0.5, lower=-10.0, upper=10.0, beta=0.05)
    assert log_s == math.log(20.0) - qs.LOG_TERM_FLOOR + math.log1p(ETA)
    x = np.zeros(100_000)
    log_s = qs.log_smooth_sensitivity(x, q=0.9, lower=-10.0, upper=10.0, beta=0.05)
    assert math.isfinite(log_s) and log_s < -400


# ------------------------------------------------------------------------- (3) noise rules


def test_cauchy_rule() -> None:
    noise = ss.CauchyNoise(1.0)
    assert noise.gamma == ss.DEFAULT_GAMMA == 4.0
    calibrated = 1.0 - ss.FLOAT_SLACK  # ε set aside for the float release
    assert noise.beta == pytest.approx(calibrated / 10, rel=1e-11) and noise.beta <= calibrated / 10
    assert noise.multiplier == pytest.approx(10.0 / calibrated, rel=1e-11)
    assert noise.multiplier >= 10.0 / calibrated
    assert noise.to_manifest()["guarantee"] == {
        "kind": "pure",
        "epsilon": 1.0,
        "epsilon_exact": "1",
    }


def test_laplace_rule_states_the_seeds_delta() -> None:
    eps, delta = 1.0, 1e-6
    noise = ss.LaplaceNoise(eps, delta)
    # The seed's theorem: (ε, δ₀/2·(e^{ε/2} + 1))-DP with β = ε/(2 ln(2/δ₀)), for the ε and δ
    # left after the float release's set-aside.
    e, d = eps - ss.FLOAT_SLACK, delta * (1 - ss.FLOAT_SLACK)
    assert noise.delta_seed / 2 * (math.exp(e / 2) + 1) <= d
    assert noise.delta_seed / 2 * (math.exp(e / 2) + 1) == pytest.approx(d, rel=1e-10)
    assert noise.beta <= e / (2 * math.log(2 / noise.delta_seed))
    assert noise.beta == pytest.approx(0.0338076, rel=1e-5)
    assert noise.multiplier == pytest.approx(2.0 / e, rel=1e-11)


@pytest.mark.parametrize("kind", ["cauchy", "laplace"])
def test_an_epsilon_below_two_to_the_minus_16_is_refused(kind: str) -> None:
    """The float release's set-aside (2^−26 of ε) would be more than 2^−10 of such an ε."""
    refused = r"epsilon 1e-05 is below 2\^-16 ≈ 1\.53e-05, the smallest this noise takes"
    with pytest.raises(ValueError, match=refused):
        ss.make_smooth_noise(kind, epsilon=1e-5, delta=1e-6)
    assert ss.make_smooth_noise(kind, epsilon=2.0**-16, delta=1e-6).multiplier > 0


def test_an_lln_rho_below_two_to_the_minus_15_is_refused() -> None:
    """Its float set-aside (zcdp_float_slack, ≈ 2^−25 + 2^−25.6·ρ) would be more than 2^−10 of ρ."""
    with pytest.raises(ValueError, match=r"rho 3e-05 is below 2\^-15 ≈ 3\.05e-05"):
        ss.LaplaceLogNormalNoise(3e-5)
    assert ss.LaplaceLogNormalNoise(2.0**-15).s > 0
    assert ss.zcdp_float_slack(2.0**-15) < 2.0**-15 / 1000


def test_lln_rule_and_its_default_t() -> None:
    rho = 0.5
    noise = ss.LaplaceLogNormalNoise(rho)
    # calibrated for ρ' = ρ minus the float release's set-aside: ρ' + slack(ρ') ≤ ρ
    rho_cal = (rho - ss.zcdp_float_slack(0.0)) / (1 + math.e * ss.CELL_ERROR)
    assert rho_cal + ss.zcdp_float_slack(rho_cal) == pytest.approx(rho, rel=1e-15)
    assert rho - rho_cal == pytest.approx(2**-25 + math.e * 2**-27 * rho, rel=1e-6)
    eps = math.sqrt(2 * rho_cal)
    t, sigma, s = noise.beta, noise.sigma, noise.s
    assert t == pytest.approx(eps / (2 * math.sqrt(5)), rel=1e-11)
    assert 5 * (eps / t) * sigma**3 - 5 * sigma**2 - 1 == pytest.approx(0, abs=1e-9)
    assert t / sigma + math.exp(1.5 * sigma**2) * s <= eps  # ½ε²-zCDP holds
    assert sigma == pytest.approx(1 / math.sqrt(5), rel=1e-12)

    # The default t minimises the noise's sd, e^{σ²}/s (up to constants), times S_t ∝ 1/t.
    def sd_times_t_inverse(u: float) -> float:
        n = ss.LaplaceLogNormalNoise(rho, u * eps)
        return math.exp(n.sigma**2) / (n.s * u)

    best = optimize.minimize_scalar(sd_times_t_inverse, bounds=(0.01, 1.0), method="bounded")
    assert best.x == pytest.approx(ss.LLN_T_PER_EPSILON, abs=1e-4)


def test_make_smooth_noise_names() -> None:
    assert isinstance(ss.make_smooth_noise("cauchy", epsilon=1), ss.CauchyNoise)
    assert isinstance(ss.make_smooth_noise("laplace", epsilon=1, delta=1e-6), ss.LaplaceNoise)
    assert isinstance(ss.make_smooth_noise("lln", rho=0.5), ss.LaplaceLogNormalNoise)


# ------------------------------------------------------------------- (4) release distribution

DIST_DRAWS = 20_000
SPAN_LO, SPAN_HI = -1000.0, 1000.0
DATA = np.arange(-100, 101) / 10.0  # median 0.0; S is a few tenths


def _scale(mech: ss.SmoothQuantile) -> float:
    """The noise multiplier times Ŝ, as the release computes it (floor and slack included)."""
    span = mech.upper - mech.lower
    s_hat = max(math.exp(mech.log_sensitivity(DATA)), span * 2.0**-20) + span * 2.0**-50
    return mech.noise.multiplier * s_hat


def _noise_samples(mech: ss.SmoothQuantile, label: str) -> np.ndarray:
    value = qs.quantile_of_sorted(DATA, mech.q, mech.lower)
    out = [mech.release(DATA, KeyedRng(TEST_SECRET, label, i)) for i in range(DIST_DRAWS)]
    return (np.array(out) - value) / _scale(mech)


def _laplace_cdf(z: np.ndarray) -> np.ndarray:
    return np.where(z < 0, 0.5 * np.exp(np.minimum(z, 0)), 1 - 0.5 * np.exp(-np.maximum(z, 0)))


@pytest.mark.parametrize(
    ("noise", "cdf"),
    [
        (ss.CauchyNoise(1.0, gamma=2.0), stats.cauchy.cdf),  # γ = 2: the standard Cauchy
        (ss.LaplaceNoise(1.0, 1e-6), _laplace_cdf),
    ],
    ids=["cauchy2", "laplace"],
)
def test_release_is_value_plus_scaled_noise(noise: ss.SmoothNoise, cdf: object) -> None:
    """KS of (y − f(x))/(multiplier·Ŝ) against the noise's CDF. Clamping to ±1000 moves < 0.3%
    of the mass (far below the KS tolerance ≈ 0.019 at p = 1e-6), the grid 2^−19 nothing."""
    assert callable(cdf)
    mech = ss.SmoothQuantile(Fraction(1, 2), SPAN_LO, SPAN_HI, noise)
    z = _noise_samples(mech, f"ss-dist-{noise.kind}")
    assert ks_pvalue(z, cdf) > P_MIN
    assert ks_pvalue(z / 1.3, cdf) < P_MIN  # the same draws read at scale ×1.3: rejected


def test_release_lands_on_a_public_grid() -> None:
    """Outputs are multiples of a grid fixed by the bounds, never by S(x) (whose binade would
    otherwise show in the output's lattice)."""
    grid = release_grid(SPAN_HI - SPAN_LO)
    for data in (DATA, DATA * 0.001, np.zeros(3)):
        mech = ss.SmoothQuantile(0.5, SPAN_LO, SPAN_HI, ss.CauchyNoise(1.0))
        for i in range(200):
            y = mech.release(data, KeyedRng(TEST_SECRET, "grid", i))
            assert y in (SPAN_LO, SPAN_HI) or (y / grid).is_integer()


def test_release_is_deterministic_per_stream_and_clamped() -> None:
    mech = ss.SmoothQuantile(Fraction(1, 3), 0.0, 1.0, ss.make_smooth_noise("lln", rho=0.5))
    data = np.linspace(0.0, 1.0, 101)
    a = mech.release(data, KeyedRng(TEST_SECRET, "det"))
    assert a == mech.release(data[::-1], KeyedRng(TEST_SECRET, "det"))
    outs = [mech.release(data, KeyedRng(TEST_SECRET, "det", i)) for i in range(300)]
    assert all(0.0 <= y <= 1.0 for y in outs)
    assert len(set(outs)) > 250  # real noise, not a constant
    assert abs(float(np.median(outs)) - 0.33) < 0.05


def test_manifest_records_beta_noise_and_guarantee() -> None:
    mech = ss.SmoothQuantile(0.5, -10, 10, ss.LaplaceLogNormalNoise(0.5))
    m = mech.to_manifest()
    assert m["statistic"] == "median" and m["noise"] == "lln" and m["q"] == "1/2"
    assert m["beta"] == mech.beta and m["guarantee"] == {
        "kind": "zcdp",
        "rho": 0.5,
        "rho_exact": "1/2",
    }
    assert m["neighbouring"] == "add/remove one person"


# ---------------------------------------------------------------------------------- (5) misuse


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: qs.as_quantile(1.0), ValueError, "strictly between 0 and 1"),
        (lambda: qs.as_quantile(0), ValueError, "strictly between 0 and 1"),
        (lambda: qs.as_quantile("0.5"), TypeError, "q must be a number"),
        (lambda: qs.as_quantile(math.nan), ValueError, "q must be a number"),
        (lambda: qs.check_bounds(1.0, 1.0), ValueError, "lower < upper"),
        (lambda: qs.check_bounds(-math.inf, 1.0), ValueError, "lower must be finite"),
        (lambda: qs.check_bounds(-1e308, 1e308), ValueError, "finite span"),
        (lambda: qs.check_bounds(0, True), TypeError, "upper must be a real number"),
        (lambda: qs.check_beta(1e-7), ValueError, "beta must be finite and >"),
        (lambda: qs.check_beta(None), TypeError, "beta must be a real number"),
        (
            lambda: qs.log_smooth_sensitivity([1.0, math.nan], q=0.5, lower=0, upper=1, beta=1),
            ValueError,
            "contain NaN",
        ),
        (
            lambda: qs.distance_to_sensitivity([1.0], q=0.5, lower=0, upper=1, bound=0),
            ValueError,
            "bound must be finite and > 0",
        ),
        (lambda: ss.CauchyNoise(1.0, gamma=1.0), ValueError, "gamma must be > 1"),
        (lambda: ss.CauchyNoise(0.0), ValueError, "epsilon must be finite and > 0"),
        (lambda: ss.CauchyNoise(True), TypeError, "epsilon must be a real number"),
        (lambda: ss.LaplaceNoise(1.0, 1.0), ValueError, "delta must lie in \\(0, 1\\)"),
        (lambda: ss.LaplaceNoise(1.0, 0.0), ValueError, "delta must be finite and > 0"),
        (lambda: ss.LaplaceLogNormalNoise(-1.0), ValueError, "rho must be finite and > 0"),
        (lambda: ss.LaplaceLogNormalNoise(0.5, t=0.0), ValueError, "t must be finite and > 0"),
        (lambda: ss.make_smooth_noise("gauss", epsilon=1), ValueError, "unknown noise 'gauss'"),
        (lambda: ss.make_smooth_noise("cauchy"), ValueError, "needs epsilon"),
        (lambda: ss.make_smooth_noise("laplace", epsilon=1), ValueError, "needs epsilon and delta"),
        (lambda: ss.make_smooth_noise("lln", epsilon=1), ValueError, "needs rho"),
        (
            lambda: ss.SmoothQuantile(0.5, 0, 1, noise="cauchy"),  # type: ignore[arg-type]
            TypeError,
            "noise must be CauchyNoise",
        ),
        (lambda: ss.SmoothQuantile(0.5, 1, 0, ss.CauchyNoise(1)), ValueError, "lower < upper"),
    ],
)
def test_misuse_is_refused(call: object, error: type[Exception], match: str) -> None:
    assert callable(call)
    with pytest.raises(error, match=match):
        call()
