"""The trimmed mean at private quantiles: its exact statistic, its noise law, its privacy loss on
every small input (brute force, with a mis-scaled variant that must fail), and its misuse."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from userdp.transforms.mechanisms.accounting import ZCDP, ApproxDP, PureDP
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.trimmed_mean import (
    COUNT_PART,
    SUM_PART,
    THRESHOLD_PART,
    TrimmedMean,
    TrimmedRelease,
    kept_sum_and_count,
)

from .test_split_quantile import naive_below, position_law

SECRET = bytes(range(32))
PINNED = TrimmedRelease(1426, 2812, -936, 115, 51.63404381793478, 592, 3865)


def naive_exact(mech: TrimmedMean, values: list[float]) -> float:
    """Thresholds at the first best-scoring positions (scores from their definition), then the
    mean grid index of the persons between them: with B persons below the lower position and B'
    below the upper, the sorted indices from the B-th to before the B'-th."""
    idx = sorted(mech.grid_histogram(values)[0].repeat(mech.grid_histogram(values)[1]).tolist())
    width = (1 << mech.split_bits) + 1
    ends = []
    for q in (mech.low_quantile, mech.high_quantile):
        law = position_law(q, values)
        f = law.index(max(law))
        ends.append((f, naive_below(q, values)[f]))
    (f_lo, below_lo), (f_hi, below_hi) = sorted(ends)
    a, b = f_lo // width, f_hi // width
    kept = idx[below_lo:below_hi]
    if not kept:
        return mech.grid_position_value(Fraction(a + b, 2))
    return mech.grid_position_value(Fraction(sum(kept), len(kept)))


@pytest.mark.parametrize("trim", [Fraction(1, 10), Fraction(1, 4), Fraction(2, 5)])
def test_exact_statistic_is_the_mean_between_the_best_thresholds(trim: Fraction) -> None:
    mech = TrimmedMean(trim, -1.0, 3.0, PureDP(1), grid_bits=4, split_bits=2)
    gen = np.random.default_rng(3)  # test data
    for n in (0, 1, 2, 7, 30):
        values = gen.normal(1.0, 1.5, n).round(1).tolist()  # ties on a 16-cell grid
        assert mech.exact(values) == naive_exact(mech, values)


def test_exact_statistic_splits_ties_as_the_classical_trimmed_mean() -> None:
    """200 row counts with heavy ties (Zipf): the best positions fall inside the tied groups and
    keep exactly the middle 160 persons, as the classical 10%-trimmed mean does. The negative
    control — every person tied with a threshold kept (whole grid points) — differs."""
    mech = TrimmedMean(Fraction(1, 10), 0.0, 64.0, PureDP(1), grid_bits=6)
    values = np.minimum(np.random.default_rng(1).zipf(1.6, 200), 64).astype(float)  # test data
    ordered = np.sort(values)
    assert ordered[19] == ordered[20] and ordered[179] == ordered[180]  # ties at both cuts
    classical = float(np.mean(ordered[20:180]))
    assert mech.exact(values) == pytest.approx(classical, abs=1e-12)
    whole = ordered[(ordered >= ordered[20]) & (ordered <= ordered[179])]
    assert float(np.mean(whole)) != pytest.approx(classical, abs=1e-3)


def test_exact_statistic_is_the_classical_trimmed_mean_on_distinct_grid_values() -> None:
    """100 distinct grid values, τ = 1/10: the best thresholds sit on the 11th and 90th values
    (ranks 10 and 89 from 0: 10 values below and 10 above), so the middle 80 are kept."""
    mech = TrimmedMean(Fraction(1, 10), 0.0, 1024.0, PureDP(1), grid_bits=10)
    values = np.arange(100, dtype=float) * 7 + 3  # on the grid: cell width 1
    got = mech.exact(values)
    assert got == pytest.approx(float(np.mean(np.sort(values)[10:90])), abs=0)
    # the negative control: the untrimmed mean differs
    assert got != pytest.approx(float(np.mean(values[10:])))


def test_release_draws_the_thresholds_as_the_two_quantiles_do() -> None:
    mech = TrimmedMean(Fraction(1, 5), 0.0, 10.0, PureDP(2), grid_bits=8)
    values = np.random.default_rng(1).uniform(0, 10, 50)
    hist = mech.grid_histogram(values)
    for i in range(20):
        parts = mech.release_parts(hist, KeyedRng(SECRET, "t", i))
        rng = KeyedRng(SECRET, "t", i)
        first = mech.low_quantile.release_position(hist, rng)
        second = mech.high_quantile.release_position(hist, rng)
        assert parts.positions == tuple(sorted((first, second)))
        assert parts.value == mech.value_of(parts.low, parts.high, *parts[2:4])
        assert parts.value == mech.release(values, KeyedRng(SECRET, "t", i))
        as_lists = (hist[0].tolist(), hist[1].tolist())  # any integer sequences, as arrays
        assert mech.release_parts(as_lists, KeyedRng(SECRET, "t", i)) == parts  # type: ignore[arg-type]
        lower, upper = mech.threshold_values(parts)
        assert (parts.low, parts.high) == (min(first, second)[0], max(first, second)[0])
        assert lower == mech.grid_position_value(Fraction(parts.low))
        assert upper == mech.grid_position_value(Fraction(parts.high))
        assert lower <= parts.value <= upper


def test_threshold_quantiles_spend_their_part_each() -> None:
    mech = TrimmedMean(Fraction(1, 10), 0.0, 1.0, PureDP(Fraction(3, 2)))
    assert Fraction(5, 16) == THRESHOLD_PART  # the split of docs/trimmed_mean.md §4
    assert mech.low_quantile.epsilon == mech.high_quantile.epsilon == Fraction(15, 32)
    assert (mech.low_quantile.q, mech.high_quantile.q) == (Fraction(1, 10), Fraction(9, 10))
    rho = Fraction(1, 2)
    z = TrimmedMean(Fraction(1, 10), 0.0, 1.0, ZCDP(rho))
    eps = z.low_quantile.epsilon  # ε-bounded-range is ε²/8-zCDP: ε²/8 ≤ (5/16)ρ, and tight
    assert eps**2 / 8 <= rho * THRESHOLD_PART < (eps * (1 + Fraction(1, 10**12))) ** 2 / 8


def _pit(noise: np.ndarray, pmf_cdf: tuple[object, object], gen: np.random.Generator) -> np.ndarray:
    """Randomised probability-integral transform of integer draws: uniform iff the law is right."""
    pmf, cdf = pmf_cdf
    return cdf(noise - 1) + gen.uniform(size=len(noise)) * pmf(noise)  # type: ignore[operator]


def _dlaplace(scale: np.ndarray) -> tuple[object, object]:
    q = np.exp(-1.0 / scale)

    def pmf(x: np.ndarray) -> np.ndarray:
        return (1 - q) / (1 + q) * q ** np.abs(x)

    def cdf(x: np.ndarray) -> np.ndarray:  # P(X ≤ x)
        below = q ** (-x) / (1 + q)  # x < 0: q^(−x)/(1 + q)
        return np.where(x < 0, below, 1 - q ** (x + 1) / (1 + q))

    return pmf, cdf


def _dgauss(sigma2: np.ndarray) -> tuple[object, object]:
    """The discrete Gaussian's pmf and CDF through the normal with a continuity correction:
    exact to far below the KS test's resolution for the σ ≥ 20 used here."""
    sigma = np.sqrt(sigma2)

    def pmf(x: np.ndarray) -> np.ndarray:
        return stats.norm.cdf((x + 0.5) / sigma) - stats.norm.cdf((x - 0.5) / sigma)

    def cdf(x: np.ndarray) -> np.ndarray:
        return stats.norm.cdf((x + 0.5) / sigma)

    return pmf, cdf


def _noise_draws(
    mech: TrimmedMean, values: object, releases: int, label: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(S̃ − S where b > a, the spans b − a of those, C̃ − C) over ``releases`` draws."""
    hist = mech.grid_histogram(values)  # type: ignore[arg-type]
    ds, dc, spans = [], [], []
    for i in range(releases):
        r = mech.release_parts(hist, KeyedRng(SECRET, label, i))
        s, c = kept_sum_and_count(hist, *r.positions, mech.split_bits)
        if r.high > r.low:
            ds.append(r.noisy_sum - s)
            spans.append(r.high - r.low)
        else:
            assert r.noisy_sum == s == 0
        dc.append(r.noisy_count - c)
    return np.array(ds), np.array(spans, dtype=float), np.array(dc)


def _uniform(draws: np.ndarray, law: tuple[object, object]) -> float:
    """The KS p-value of the randomised PIT of the draws under ``law``."""
    gen = np.random.default_rng(5)  # the PIT's tie-breaking, not the noise
    return float(stats.kstest(_pit(draws, law, gen), "uniform").pvalue)


def test_noise_on_sum_and_count_has_the_stated_discrete_laplace_law() -> None:
    """1,500 releases: the randomised PIT of S̃ − S at scale (b − a)/(9ε/32), and of C̃ − C at
    1/(3ε/32), is uniform (KS test; a correct sampler fails with probability 10^-3, the seeds are
    fixed). The same draws read as noise for a sensitivity of (b − a)/2 must be rejected."""
    eps = Fraction(1)
    mech = TrimmedMean(Fraction(1, 10), 0.0, 100.0, PureDP(eps), grid_bits=12)
    values = np.random.default_rng(4).normal(50, 15, 150)
    ds, spans, dc = _noise_draws(mech, values, 1500, "law")
    sum_scale = spans / float(eps * SUM_PART)
    assert np.array_equal(sum_scale, [float(mech.noise_scales(int(s))[0]) for s in spans])
    assert _uniform(ds, _dlaplace(sum_scale)) > 1e-3
    count_scale = np.full(len(dc), 1 / float(eps * COUNT_PART))
    assert _uniform(dc, _dlaplace(count_scale)) > 1e-3
    assert _uniform(ds, _dlaplace(sum_scale / 2)) < 1e-6


def test_under_rho_the_noise_has_the_stated_discrete_gaussian_law() -> None:
    """As above under ZCDP(ρ): S̃ − S ~ N_ℤ(0, (b − a)²/(2·(9/32)ρ)), C̃ − C ~ N_ℤ(0, 1/(2·(3/32)ρ))
    (KS, failure probability 10^-3 each, fixed seeds). Negative controls, which must be rejected
    on the same draws: a σ² that is not squared in b − a, and the whole ρ on each noise."""
    rho = Fraction(1, 100)
    mech = TrimmedMean(Fraction(1, 10), 0.0, 100.0, ZCDP(rho), grid_bits=12)
    values = np.random.default_rng(4).normal(50, 15, 150)
    ds, spans, dc = _noise_draws(mech, values, 1500, "gauss")
    sum_var = spans**2 / float(2 * rho * SUM_PART)
    count_var = np.full(len(dc), 1 / float(2 * rho * COUNT_PART))  # σ ≈ 23
    assert spans.min() >= 10  # σ ≥ 20 for every sum draw: the normal CDF is exact enough
    assert _uniform(ds, _dgauss(sum_var)) > 1e-3
    assert _uniform(dc, _dgauss(count_var)) > 1e-3
    assert _uniform(ds, _dgauss(spans / float(2 * rho * SUM_PART))) < 1e-6
    assert _uniform(ds, _dgauss(spans**2 / float(2 * rho))) < 1e-6
    assert _uniform(dc, _dgauss(count_var * float(COUNT_PART))) < 1e-6


def test_thresholds_one_cell_apart_still_noise_the_sum() -> None:
    """100 values at grid point 3 and 100 at 4: the thresholds are (3, 4) in every draw (other
    points score ≥ 100 below, e^(−13.9) at ε = 8), so b − a = 1 — the smallest span that hides
    S. Its noise is DLap(1/(9ε/32)): zero in ~81% of draws, so the test needs both the law and
    some nonzero draws."""
    eps = Fraction(8)
    mech = TrimmedMean(Fraction(1, 10), 0.0, 8.0, PureDP(eps), grid_bits=3)
    ds, spans, _ = _noise_draws(mech, [3.0] * 100 + [4.0] * 100, 1000, "one")
    assert len(ds) == 1000 and set(spans) == {1.0}
    assert np.count_nonzero(ds) > 100
    assert _uniform(ds, _dlaplace(np.full(len(ds), 1 / float(eps * SUM_PART)))) > 1e-3


def test_thresholds_two_cells_apart_noise_the_sum_for_a_span_of_two() -> None:
    """100 values at grid point 3 and 100 at 5: the thresholds' points are (3, 5) in every draw,
    so b − a = 2 and the sum's noise is DLap(2/(9ε/32)) (KS, failure probability 10^-3, fixed
    seeds). Noise for a span of one — the off-by-one that halves it — must be rejected."""
    eps = Fraction(8)
    mech = TrimmedMean(Fraction(1, 10), 0.0, 8.0, PureDP(eps), grid_bits=3)
    ds, spans, _ = _noise_draws(mech, [3.0] * 100 + [5.0] * 100, 1000, "two")
    assert len(ds) == 1000 and set(spans) == {2.0}
    scale = 2 / float(eps * SUM_PART)
    assert _uniform(ds, _dlaplace(np.full(len(ds), scale))) > 1e-3
    assert _uniform(ds, _dlaplace(np.full(len(ds), scale / 2))) < 1e-6


def test_equal_thresholds_still_noise_the_count() -> None:
    """200 values at one grid point, ε = 8: both thresholds fall inside it (a = b), S is 0 without
    noise,
    and C̃ − C has the count's law DLap(1/(3ε/32)) (KS, failure probability 10^-3, fixed seeds) —
    it is part of the release's integers even when the value is the grid point itself."""
    eps = Fraction(8)  # the empty grid points' positions score ≥ 27 nats below: a = b always
    mech = TrimmedMean(Fraction(1, 10), 0.0, 8.0, PureDP(eps), grid_bits=3)
    ds, _, dc = _noise_draws(mech, [3.0] * 200, 600, "same")
    assert len(ds) == 0 and np.count_nonzero(dc) > 300
    assert _uniform(dc, _dlaplace(np.full(len(dc), 1 / float(eps * COUNT_PART)))) > 1e-3


@pytest.mark.parametrize("split_bits", [0, 2, 16])
def test_the_release_keeps_the_persons_its_positions_name_at_any_split(split_bits: int) -> None:
    """At ε = 400 the noise is almost always 0: the released count is the kept count of the drawn
    positions with the mechanism's own J (not the default's), and the value their mean."""
    mech = TrimmedMean(Fraction(1, 10), 0.0, 8.0, PureDP(400), grid_bits=3, split_bits=split_bits)
    values = [1.0] * 40 + [2.0] * 100 + [6.0] * 60
    hist = mech.grid_histogram(values)
    exact = 0
    for i in range(50):
        r = mech.release_parts(hist, KeyedRng(SECRET, "split", split_bits, i))
        s, c = kept_sum_and_count(hist, *r.positions, split_bits)
        exact += (r.noisy_sum, r.noisy_count) == (s, c)
    assert exact >= 45


def test_crossed_threshold_draws_are_sorted() -> None:
    """With no values every grid point scores 0, so the two draws cross in about half the
    releases: (a, b) is (min, max) of them, and the value lies between."""
    mech = TrimmedMean(Fraction(1, 10), 0.0, 16.0, PureDP(1), grid_bits=4)
    empty = mech.grid_histogram([])
    crossed = 0
    for i in range(100):
        parts = mech.release_parts(empty, KeyedRng(SECRET, "cross", i))
        rng = KeyedRng(SECRET, "cross", i)
        first = mech.low_quantile.release_position(empty, rng)
        second = mech.high_quantile.release_position(empty, rng)
        crossed += first > second
        assert parts.positions == (min(first, second), max(first, second))
        assert parts.low <= parts.value <= parts.high  # grid value = index on [0, 16], 16 cells
    assert crossed > 20


def test_a_release_is_pinned_for_a_fixed_secret() -> None:
    """The draw order (thresholds low then high, the sum's noise, the count's) fixes released
    values for a secret: a change to it changes what a re-run publishes, so it must be on purpose
    (CHANGELOG) — this value was computed when the thresholds became positions that split ties."""
    mech = TrimmedMean(Fraction(1, 10), 0.0, 100.0, PureDP(1), grid_bits=12)
    values = np.random.default_rng(4).normal(50, 15, 150)
    parts = mech.release_parts(mech.grid_histogram(values), KeyedRng(SECRET, "pinned"))
    assert parts == PINNED


def _losses(
    mech: TrimmedMean, x: list[float], y: list[float], sum_scale_factor: float = 1.0
) -> tuple[float, float, float, float, float]:
    """sup over outputs of ln P_x/P_y, exactly (floats), for each part — the low threshold, the
    high threshold, S̃ given the two positions, C̃ given them — and for the joint output
    (both positions drawn, S̃, C̃). Threshold laws come from their definition; a discrete Laplace
    term's supremum over its outcomes is |S_x − S_y|/scale."""
    px = [position_law(q, x) for q in (mech.low_quantile, mech.high_quantile)]
    py = [position_law(q, y) for q in (mech.low_quantile, mech.high_quantile)]
    hx = mech.grid_histogram(x)
    hy = mech.grid_histogram(y)
    low = max(math.log(p / r) for p, r in zip(px[0], py[0], strict=True))
    high = max(math.log(p / r) for p, r in zip(px[1], py[1], strict=True))
    worst_sum = worst_count = joint = -math.inf
    width = (1 << mech.split_bits) + 1
    for k_lo, k_hi in itertools.product(range(len(px[0])), repeat=2):
        first, last = sorted((divmod(k_lo, width), divmod(k_hi, width)))
        (a, _), (b, _) = first, last
        sx, cx = kept_sum_and_count(hx, first, last, mech.split_bits)
        sy, cy = kept_sum_and_count(hy, first, last, mech.split_bits)
        sum_scale, count_scale = (float(x) for x in mech.noise_scales(b - a))  # what it draws
        sum_loss = 0.0
        if b > a:
            sum_loss = abs(sx - sy) / (sum_scale * sum_scale_factor)
        else:
            assert sx == sy == 0  # a = b: no noise, nothing to hide
        count_loss = abs(cx - cy) / count_scale
        worst_sum, worst_count = max(worst_sum, sum_loss), max(worst_count, count_loss)
        thresholds = math.log(px[0][k_lo] / py[0][k_lo]) + math.log(px[1][k_hi] / py[1][k_hi])
        joint = max(joint, thresholds + sum_loss + count_loss)
    return low, high, worst_sum, worst_count, joint


def _neighbours() -> list[tuple[list[float], list[float]]]:
    """Every multiset of ≤ 2 values on a 5-point grid, with one value more (up to 3 tied: more
    than the J = 2 splits of the brute-force tests)."""
    points = [0.0, 1.0, 2.0, 3.0, 4.0]
    pairs = []
    for n in range(3):
        for base in itertools.combinations_with_replacement(points, n):
            for extra in points:
                pairs.append((list(base), [*base, extra]))
    return pairs


def _worst(mech: TrimmedMean, sum_scale_factor: float = 1.0) -> np.ndarray:
    rows = [
        _losses(mech, x, y, sum_scale_factor)
        for pair in _neighbours()
        for x, y in (pair, pair[::-1])
    ]
    return np.max(np.array(rows), axis=0)


@pytest.mark.parametrize("trim", [Fraction(1, 10), Fraction(1, 3)])
def test_brute_force_privacy_loss_is_at_most_epsilon(trim: Fraction) -> None:
    """Every pair of neighbours (add/remove one value, both directions) on a 5-point grid: each
    part's privacy loss is within its share — the sum's and the count's are met exactly, so the
    sensitivities b − a and 1 are tight — and the joint loss is within ε. Positions split each
    grid point in J = 2 (3 positions per point, 15 in all)."""
    eps = Fraction(7, 10)
    mech = TrimmedMean(trim, 0.0, 4.0, PureDP(eps), grid_bits=2, split_bits=1)
    low, high, sum_loss, count_loss, joint = _worst(mech)
    tol = 1e-9
    assert low <= float(eps * THRESHOLD_PART) + tol and high <= float(eps * THRESHOLD_PART) + tol
    assert sum_loss == pytest.approx(float(eps * SUM_PART), abs=tol)
    assert count_loss == pytest.approx(float(eps * COUNT_PART), abs=tol)
    assert joint <= float(eps) + tol


def test_brute_force_catches_the_sum_noise_for_half_the_sensitivity() -> None:
    """The negative control: noise scaled as if the centred values moved S by (b − a)/2 — the
    slip of measuring the centred range in whole cells — overspends the sum's share twice."""
    eps = Fraction(7, 10)
    mech = TrimmedMean(Fraction(1, 10), 0.0, 4.0, PureDP(eps), grid_bits=2, split_bits=1)
    sum_loss = _worst(mech, 0.5)[2]
    assert sum_loss > float(eps * SUM_PART) * 1.9


def test_sensitivities_hold_on_every_small_neighbour_and_threshold_pair() -> None:
    """What the ρ form rests on too: |ΔS| ≤ b − a and |ΔC| ≤ 1 for every pair of positions
    (J = 4 splits, up to 3 tied persons); the kept count is never negative."""
    mech = TrimmedMean(Fraction(1, 4), 0.0, 4.0, ZCDP(1), grid_bits=2, split_bits=2)
    positions = list(itertools.product(range(5), range(5)))
    for x, y in _neighbours():
        hx, hy = mech.grid_histogram(x), mech.grid_histogram(y)
        for low, high in itertools.combinations_with_replacement(positions, 2):
            sx, cx = kept_sum_and_count(hx, low, high, 2)
            sy, cy = kept_sum_and_count(hy, low, high, 2)
            assert abs(sx - sy) <= high[0] - low[0] and abs(cx - cy) <= 1 and min(cx, cy) >= 0


def test_zcdp_noise_scales_are_the_gaussian_ones() -> None:
    rho = Fraction(1, 3)
    mech = TrimmedMean(Fraction(1, 10), 0.0, 1.0, ZCDP(rho))
    sum_var, count_var = mech.noise_scales(6)
    assert sum_var == Fraction(36) / (2 * rho * SUM_PART)  # Δ²/(2ρ'): ρ'-zCDP (CKS 2020 Thm 4)
    assert count_var == 1 / (2 * rho * COUNT_PART)
    assert mech.guarantee == ZCDP(rho)


def test_equal_thresholds_release_their_grid_point_without_sum_noise() -> None:
    mech = TrimmedMean(Fraction(1, 10), 0.0, 8.0, PureDP(400), grid_bits=3)
    values = [3.0] * 200
    for i in range(10):
        r = mech.release_parts(mech.grid_histogram(values), KeyedRng(SECRET, "eq", i))
        assert (r.low, r.high, r.noisy_sum, r.value) == (3, 3, 0, 3.0)


def test_kept_sum_is_exact_in_both_arithmetic_paths() -> None:
    idx = np.array([0, 5, 2**40], dtype=np.int64)
    for counts in ([3, 4, 5], [2**40, 2**40, 2**40]):
        c = np.array(counts, dtype=np.int64)
        s, n = kept_sum_and_count((idx, c), (0, 0), (2**40, 4096))  # every person kept
        assert n == sum(counts)
        assert s == sum(m * (2 * k - 2**40) for m, k in zip(counts, idx.tolist(), strict=True))
    assert kept_sum_and_count((idx[:0], idx[:0]), (1, 0), (3, 0)) == (0, 0)
    # inside one tied group: ⌊231·100/256⌋ − ⌊26·100/256⌋ = 90 − 10 of its 100 persons
    one = (np.array([1]), np.array([100]))
    assert kept_sum_and_count(one, (1, 26), (1, 231), 8) == (0, 80)
    assert kept_sum_and_count(one, (1, 26), (2, 0), 8) == (-90, 90)  # 2·1 − 1 − 2 each
    with pytest.raises(ValueError, match="not ordered splits"):
        kept_sum_and_count((idx, idx), (3, 0), (1, 0))
    with pytest.raises(ValueError, match="not ordered splits"):
        kept_sum_and_count((idx, idx), (1, 0), (3, 4097))


def test_wide_bounds_release_finite_values() -> None:
    mech = TrimmedMean(Fraction(1, 10), -1.7e308, 1.7e308, PureDP(1), grid_bits=20)
    values = [-1.7e308, 1e308, 1.7e308, 0.0, 5.0]
    for i in range(20):
        assert math.isfinite(mech.release(values, KeyedRng(SECRET, "wide", i)))
    assert math.isfinite(mech.exact(values))


@pytest.mark.parametrize(
    ("trim", "match"),
    [
        (0, "strictly between 0 and 1/2"),
        (0.5, "strictly between 0 and 1/2"),
        (0.7, "strictly between 0 and 1/2"),
        (-0.1, "strictly between 0 and 1/2"),
        (float("nan"), "strictly between 0 and 1/2"),
    ],
)
def test_trim_outside_zero_to_half_is_refused(trim: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TrimmedMean(trim, 0.0, 1.0, PureDP(1))


def test_misuse_is_refused() -> None:
    with pytest.raises(TypeError, match="trim must be a number"):
        TrimmedMean(True, 0.0, 1.0, PureDP(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="PureDP"):
        TrimmedMean(0.1, 0.0, 1.0, ApproxDP(1, Fraction(1, 10**6)))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lower < upper"):
        TrimmedMean(0.1, 1.0, 1.0, PureDP(1))
    with pytest.raises(ValueError, match="too small to split"):
        TrimmedMean(0.1, 0.0, 1.0, ZCDP(Fraction(1, 10**700)))
    with pytest.raises(ValueError, match="too small for a trimmed mean"):
        TrimmedMean(0.1, 0.0, 1.0, ZCDP(1e-320))
    with pytest.raises(ValueError, match="too small for a trimmed mean"):
        TrimmedMean(0.1, 0.0, 1.0, PureDP(1e-300), grid_bits=40)
    with pytest.raises(ValueError, match="3 shares with 2·threshold"):
        parts = (Fraction(1, 4), Fraction(1, 4), Fraction(1, 8))  # adds up to 7/8
        TrimmedMean(0.1, 0.0, 1.0, PureDP(1), parts=parts)
    mech = TrimmedMean(0.1, 0.0, 1.0, PureDP(1), grid_bits=4)
    bad = (np.array([3, 2]), np.array([1, 1]))
    with pytest.raises(ValueError, match="increasing indices"):
        mech.release_histogram(bad, KeyedRng(SECRET, "bad"))
    with pytest.raises(ValueError, match="increasing indices"):
        mech.exact_parts(bad)
    with pytest.raises(ValueError, match="NaN"):
        mech.release([1.0, float("nan")], KeyedRng(SECRET, "nan"))
