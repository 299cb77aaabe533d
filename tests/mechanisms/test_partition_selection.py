"""Tests for private partition selection: exact δ, exact DP of the optimal table, seeded sampling.

Layers: (1) exact math — δ(T) against brute-force sums of the noise pmf, the optimal table checked
in rational arithmetic against rigorous bounds on e^ε; (2) wiring — the exact samplers are really
called; (3) seeded distribution tests with a stated failure probability (fixed secret: no flakes);
(4) one ``pytest.raises(match=...)`` per misuse.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import pickle
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction

import pytest

from tests.stats_helpers import P_MIN, TEST_SECRET, chisquare_pvalue
from userdp.transforms.mechanisms import partition_selection as ps
from userdp.transforms.mechanisms.checks import Rational
from userdp.transforms.mechanisms.partition_selection import (
    Decision,
    GaussianThresholding,
    LaplaceThresholding,
    TruncatedGeometricSelection,
)
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.selection_tails import discrete_laplace_tail, gaussian_tail_fn

Rule = LaplaceThresholding | GaussianThresholding | TruncatedGeometricSelection

N_DECISIONS = 100_000
BETA = 1e-9  # per-check false-rejection probability of the frequency tests under a fresh secret


# ---------------------------------------------------------------------------------------------
# Reference computations, independent of the module's closed forms
# ---------------------------------------------------------------------------------------------


def laplace_pmf(scale: float) -> Callable[[int], float]:
    q = math.exp(-1.0 / scale)
    return lambda z: (1 - q) / (1 + q) * q ** abs(z)


def gaussian_pmf(sigma2: float, span: int = 2000) -> Callable[[int], float]:
    norm = math.fsum(math.exp(-z * z / (2 * sigma2)) for z in range(-span, span + 1))
    return lambda z: math.exp(-z * z / (2 * sigma2)) / norm


def brute_delta(pmf: Callable[[int], float], threshold: int, L: int, span: int) -> float:
    """P(some of the person's L single-person partitions is kept), by direct summation.

    L = 1: Σ_{z ≥ T−1} pmf(z). L = 2: the double sum over independent (z1, z2) of the indicator that
    1 + z1 ≥ T or 1 + z2 ≥ T — no use of the product formula 1 − (1 − p)^L.
    """
    zs = range(-span, span + 1)
    if L == 1:
        return math.fsum(pmf(z) for z in zs if 1 + z >= threshold)
    assert L == 2
    w = {z: pmf(z) for z in zs}
    return math.fsum(
        w[z1] * w[z2] for z1 in zs for z2 in zs if 1 + z1 >= threshold or 1 + z2 >= threshold
    )


def exp_bounds(x: Fraction, digits: int = 150) -> tuple[Fraction, Fraction]:
    """Rationals lo ≤ e^x ≤ hi for rational x ≥ 0, |hi − lo| < 10^−(digits−5).

    lo: a Taylor partial sum (all terms positive), rounded down to the grid 10^−digits. hi: the
    partial sum up to K plus 2·t_{K+1}, which bounds the remainder once x/(K + 2) ≤ 1/2 (the terms
    then shrink at least geometrically by 1/2), rounded up.
    """
    total, term, k = Fraction(0), Fraction(1), 0
    while term > Fraction(1, 10 ** (digits + 5)) or 2 * x > k + 2:
        total += term
        k += 1
        term = term * x / k
    grid = 10**digits
    lo = Fraction(math.floor(total * grid), grid)
    hi = Fraction(math.ceil((total + 2 * term) * grid), grid)
    return lo, hi


def bernstein_tolerance(p: float, n: int, beta: float = BETA) -> float:
    """t with P(|p̂ − p| ≥ t) ≤ β for the mean p̂ of n Bernoulli(p) draws (Bernstein's inequality).

    P(|p̂ − p| ≥ t) ≤ 2·exp(−n t² / (2(p(1−p) + t/3))); solving 2·exp(…) = β for t.
    """
    c = math.log(2 / beta)
    return (2 * c / 3 + math.sqrt((2 * c / 3) ** 2 + 8 * n * c * p * (1 - p))) / (2 * n)


# ---------------------------------------------------------------------------------------------
# Thresholding rules: exact δ and minimal T
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [Fraction(1, 2), 1, 2, Fraction(37, 10)])
def test_laplace_tail_closed_form_matches_pmf_sum(scale: Rational) -> None:
    pmf = laplace_pmf(float(scale))
    for k in range(-6, 15):
        brute = math.fsum(pmf(z) for z in range(k, k + 3000))
        assert float(discrete_laplace_tail(scale, k)) == pytest.approx(brute, rel=1e-12, abs=0)


LAPLACE_CASES = [
    (eps, delta, L)
    for eps, L in [(1, 1), (2, 1), (1, 2), (Fraction(1, 2), 2)]
    for delta in [0.75, 0.2, 1e-3, 1e-6]
]


@pytest.mark.parametrize(("eps", "delta", "L"), LAPLACE_CASES)
def test_laplace_delta_exact_and_threshold_minimal(eps: Rational, delta: float, L: int) -> None:
    rule = LaplaceThresholding(eps, delta, L)
    assert rule.scale == Fraction(L) / Fraction(eps)
    pmf, T = laplace_pmf(float(rule.scale)), rule.threshold
    span = 150
    for t in (T - 1, T, T + 1):
        assert float(rule.delta_at(t)) == pytest.approx(brute_delta(pmf, t, L, span), rel=1e-9)
    assert brute_delta(pmf, T, L, span) <= delta < brute_delta(pmf, T - 1, L, span)
    assert rule.delta_achieved == rule.delta_at(T) <= Fraction(delta)


@pytest.mark.parametrize("make", [LaplaceThresholding, GaussianThresholding])
def test_the_threshold_margin_is_applied_exactly(make: Callable[..., Rule]) -> None:
    """T is accepted only if δ(T)·(1 + 10^−30) ≤ δ. The product was formed in the ambient
    28-digit decimal context, where 1 + 10^−30 is 1 and the rounding may go down: a δ just
    below δ(T)·(1 + 10^−30) was accepted at T (review). Now exactly, on both sides of the line."""
    base = make(Fraction(1, 2), Fraction(1, 10**6), 2)
    T = base.threshold
    line = Fraction(base.delta_at(T)) * (1 + Fraction(1, 10**30))
    # δ(T) is computed at a precision set by δ's magnitude: take it at the line's own
    line = Fraction(make(Fraction(1, 2), line, 2).delta_at(T)) * (1 + Fraction(1, 10**30))
    at = make(Fraction(1, 2), line, 2)
    below = make(Fraction(1, 2), line * (1 - Fraction(1, 10**45)), 2)
    assert at.threshold == T
    assert below.threshold == T + 1


GAUSSIAN_CASES = [
    (rho, delta, L)
    for rho, L in [
        (Fraction(1, 2), 1),
        (Fraction(1, 8), 1),
        (Fraction(1, 2), 2),
        (Fraction(1, 8), 2),
    ]
    for delta in [0.75, 1e-3, 1e-6]
] + [(Fraction(1, 1000), 1e-6, 1)]  # σ² = 500: a long pmf table


@pytest.mark.parametrize(("rho", "delta", "L"), GAUSSIAN_CASES)
def test_gaussian_delta_exact_and_threshold_minimal(rho: Fraction, delta: float, L: int) -> None:
    rule = GaussianThresholding(rho, delta, L)
    assert rule.sigma2 == Fraction(L) / (2 * rho)
    pmf, T = gaussian_pmf(float(rule.sigma2)), rule.threshold
    span = 60 if L == 2 else 400
    for t in (T - 1, T, T + 1):
        assert float(rule.delta_at(t)) == pytest.approx(brute_delta(pmf, t, L, span), rel=1e-9)
    assert brute_delta(pmf, T, L, span) <= delta < brute_delta(pmf, T - 1, L, span)
    assert rule.delta_achieved <= Fraction(delta)


def test_example_thresholds() -> None:
    """The planning examples (ε = 1, δ = 1e−5; ρ = 1/2 for Gaussian) — pinned as a regression."""
    expected = {1: (13, 6, 23, 12), 4: (51, 11, 88, 44)}
    for L, (lap_t, gau_t, opt_always, opt_half) in expected.items():
        lap, gau = LaplaceThresholding(1, 1e-5, L), GaussianThresholding(Fraction(1, 2), 1e-5, L)
        opt = TruncatedGeometricSelection(1, 1e-5, L)
        assert (lap.threshold, lap.half_keep_count) == (lap_t, lap_t)
        assert (gau.threshold, gau.half_keep_count) == (gau_t, gau_t)
        assert (opt.always_keep_count, opt.half_keep_count) == (opt_always, opt_half)


@pytest.mark.parametrize(
    "rule",
    [
        LaplaceThresholding(1, 1e-5, 1),
        LaplaceThresholding(Fraction(1, 3), 0.9, 3),  # threshold ≤ 0: half-keep count clamps to 1
        GaussianThresholding(Fraction(1, 2), 1e-5, 4),
        TruncatedGeometricSelection(1, 1e-5, 1),
        TruncatedGeometricSelection(Fraction(1, 2), 1e-8, 3),
    ],
    ids=repr,
)
def test_half_keep_count(rule: Rule) -> None:
    h = rule.half_keep_count
    assert rule.keep_probability(h) >= 0.5
    assert h == 1 or rule.keep_probability(h - 1) < 0.5


# ---------------------------------------------------------------------------------------------
# Optimal rule: the table, exactly
# ---------------------------------------------------------------------------------------------

OPTIMAL_CASES = [
    (1, 1e-5, 1),
    (1, 1e-5, 4),
    (Fraction(1, 2), 1e-3, 2),
    (3, 1e-8, 1),
    (0.1, 1e-6, 1),
    (1, 1e-30, 1),
    (Fraction(12), 0.3, 1),
]


@pytest.mark.parametrize(("eps", "delta", "L"), OPTIMAL_CASES)
def test_optimal_table_satisfies_dp_exactly(eps: Rational, delta: float, L: int) -> None:
    rule = TruncatedGeometricSelection(eps, delta, L)
    e, d = rule.epsilon_per_partition, rule.delta_per_partition
    assert (e, d) == (Fraction(eps) / L, Fraction(delta) / L)
    e_lo, _ = exp_bounds(e)  # e_lo ≤ e^ε: both right-hand sides grow with e^ε, so this is safe
    pi = rule.probabilities
    assert pi[0] == 0 and pi[-1] == 1 and all(p < 1 for p in pi[:-1])
    assert all(isinstance(p, Fraction) for p in pi)
    for prev, cur in itertools.pairwise(pi):
        assert prev <= cur  # monotone: the two remaining DP inequalities hold trivially
        assert cur <= e_lo * prev + d  # P(keep | n) ≤ e^ε P(keep | n−1) + δ
        assert 1 - prev <= e_lo * (1 - cur) + d  # P(drop | n−1) ≤ e^ε P(drop | n) + δ


@pytest.mark.parametrize(("eps", "delta", "L"), OPTIMAL_CASES)
def test_optimal_table_is_the_largest(eps: Rational, delta: float, L: int) -> None:
    rule = TruncatedGeometricSelection(eps, delta, L)
    e, d = rule.epsilon_per_partition, rule.delta_per_partition
    _, e_hi = exp_bounds(e)
    pi = rule.probabilities
    # Each step is within 1e−15 of the largest value the DP inequalities allow after pi[n−1]:
    # min(e^ε π + δ, 1 − e^−ε(1 − π − δ), 1) ≤ the bound below (e^ε ≤ e_hi).
    for prev, cur in itertools.pairwise(pi):
        largest = min(e_hi * prev + d, 1 - (1 - prev - d) / e_hi, Fraction(1))
        assert largest - cur < Fraction(1, 10**15)
    # And the table is the paper's recursion (as in Google's PreAggSelectPartition), in floats.
    fe, fd, p = float(e), float(d), 0.0
    for n in range(1, len(pi) + 5):
        p = min(math.exp(fe) * p + fd, 1 - math.exp(-fe) * (1 - p - fd), 1.0)
        assert float(rule.keep_probability(n)) == pytest.approx(p, abs=1e-12)


def test_zero_persons_never_kept_by_optimal_rule() -> None:
    rule = TruncatedGeometricSelection(1, 0.5, 1)  # large δ: π(1) = 1/2, π(0) must still be 0
    assert rule.keep_probability(0) == 0
    assert not any(rule.decide(0, KeyedRng(TEST_SECRET, "zero", i)) for i in range(2000))


# ---------------------------------------------------------------------------------------------
# Wiring: the exact samplers are the ones used
# ---------------------------------------------------------------------------------------------


def test_thresholding_uses_exact_samplers(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, Fraction]] = []

    def fake_laplace(rng: KeyedRng, scale: Fraction) -> int:
        calls.append(("laplace", scale))
        return 0

    def fake_gaussian(rng: KeyedRng, sigma2: Fraction) -> int:
        calls.append(("gaussian", sigma2))
        return 0

    monkeypatch.setattr(ps, "discrete_laplace", fake_laplace)
    monkeypatch.setattr(ps, "discrete_gaussian", fake_gaussian)
    rng = KeyedRng(TEST_SECRET, "wiring")
    for rule in (LaplaceThresholding(1, 1e-5, 2), GaussianThresholding(1, 1e-5, 2)):
        T = rule.threshold
        assert rule.decide(T, rng) == Decision(True, T)
        assert rule.decide(T - 1, rng) == (False, T - 1)
    assert calls == [("laplace", Fraction(2))] * 2 + [("gaussian", Fraction(1))] * 2


def test_optimal_rule_uses_exact_bernoulli(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Fraction] = []

    def spy(rng: KeyedRng, p: Fraction) -> bool:
        seen.append(p)
        return True

    monkeypatch.setattr(ps, "bernoulli_rational", spy)
    rule = TruncatedGeometricSelection(1, 1e-5, 1)
    rng = KeyedRng(TEST_SECRET, "wiring")
    n_star = rule.always_keep_count
    assert rule.decide(0, rng) is False and rule.decide(n_star, rng) is True
    assert rule.decide(n_star + 100, rng) is True
    assert seen == []  # certain outcomes draw nothing
    assert rule.decide(5, rng) is True
    assert seen == [rule.probabilities[5]]


# ---------------------------------------------------------------------------------------------
# Seeded distribution tests (fixed secret: deterministic; BETA is the rate for a fresh secret)
# ---------------------------------------------------------------------------------------------


def _keep_rate_and_noise(rule: Rule, n: int) -> tuple[int, list[int]]:
    rng = KeyedRng(TEST_SECRET, "partition_selection", type(rule).__name__, n)
    kept, noise = 0, []
    for _ in range(N_DECISIONS):
        out = rule.decide(n, rng)
        if isinstance(out, Decision):
            kept += out.keep
            noise.append(out.noisy_count - n)
        else:
            kept += out
    return kept, noise


def test_laplace_frequencies_and_noise() -> None:
    rule = LaplaceThresholding(1, 1e-5, 1)
    T, noise = rule.threshold, []
    for n in (T - 2, T, T + 1):
        kept, z = _keep_rate_and_noise(rule, n)
        p = float(discrete_laplace_tail(rule.scale, T - n))
        assert abs(kept / N_DECISIONS - p) <= bernstein_tolerance(p, N_DECISIONS)
        noise += z
    assert chisquare_pvalue(noise, laplace_pmf(float(rule.scale))) > P_MIN


def test_gaussian_frequencies_and_noise() -> None:
    rule = GaussianThresholding(Fraction(1, 2), 1e-5, 4)
    T, noise = rule.threshold, []
    for n in (T - 2, T + 1):
        kept, z = _keep_rate_and_noise(rule, n)
        p = rule.keep_probability(n)
        assert abs(kept / N_DECISIONS - p) <= bernstein_tolerance(p, N_DECISIONS)
        noise += z
    assert chisquare_pvalue(noise, gaussian_pmf(float(rule.sigma2))) > P_MIN


def test_optimal_frequencies() -> None:
    rule = TruncatedGeometricSelection(1, 1e-5, 1)
    n_high = max(n for n, p in enumerate(rule.probabilities) if p <= Fraction(99, 100))
    for n in (8, rule.half_keep_count, n_high):
        p = float(rule.keep_probability(n))
        assert 0.001 < p <= 0.99
        kept, _ = _keep_rate_and_noise(rule, n)
        tol = bernstein_tolerance(p, N_DECISIONS)
        assert abs(kept / N_DECISIONS - p) <= tol
        # Negative control: the same draws are told apart from the neighbouring counts' rates.
        for m in (n - 1, n + 1):
            assert abs(kept / N_DECISIONS - float(rule.keep_probability(m))) > tol


# ---------------------------------------------------------------------------------------------
# Parameter objects and misuse
# ---------------------------------------------------------------------------------------------

ALL_RULES: list[Callable[..., Rule]] = [
    LaplaceThresholding,
    GaussianThresholding,
    TruncatedGeometricSelection,
]


@pytest.mark.parametrize("make", ALL_RULES)
def test_frozen_and_picklable(make: Callable[..., Rule]) -> None:
    rule = make(1, 1e-5, 2)
    assert pickle.loads(pickle.dumps(rule)) == rule
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'delta'"):
        rule.delta = Fraction(1, 2)  # type: ignore[misc]


@pytest.mark.parametrize("make", ALL_RULES)
@pytest.mark.parametrize("bad", [0, -1, Fraction(-1, 2)])
def test_non_positive_epsilon_or_rho(make: Callable[..., Rule], bad: Rational) -> None:
    with pytest.raises(ValueError, match=r"(epsilon|rho) must be positive, got"):
        make(bad, 1e-5, 1)


@pytest.mark.parametrize("make", ALL_RULES)
def test_non_finite_epsilon(make: Callable[..., Rule]) -> None:
    with pytest.raises(ValueError, match="must be finite"):
        make(float("nan"), 1e-5, 1)


@pytest.mark.parametrize("make", ALL_RULES)
@pytest.mark.parametrize("bad", [0, 1, 1.5, -1e-5])
def test_delta_outside_open_unit_interval(make: Callable[..., Rule], bad: float) -> None:
    with pytest.raises(ValueError, match=r"delta must lie in the open interval \(0, 1\)"):
        make(1, bad, 1)


@pytest.mark.parametrize("make", ALL_RULES)
def test_max_partitions_below_one(make: Callable[..., Rule]) -> None:
    with pytest.raises(ValueError, match="max_partitions_per_person must be ≥ 1, got 0"):
        make(1, 1e-5, 0)


@pytest.mark.parametrize("make", ALL_RULES)
@pytest.mark.parametrize("bad", [1.5, True, "2"])
def test_max_partitions_not_int(make: Callable[..., Rule], bad: object) -> None:
    with pytest.raises(TypeError, match="max_partitions_per_person must be an int"):
        make(1, 1e-5, bad)


@pytest.mark.parametrize("make", ALL_RULES)
@pytest.mark.parametrize("bad", [1.5, 2.0, True, Fraction(3)])
def test_non_integer_count(make: Callable[..., Rule], bad: object) -> None:
    rule, rng = make(1, 1e-5, 1), KeyedRng(TEST_SECRET, "misuse")
    with pytest.raises(TypeError, match=r"count must be an int \(a number of distinct persons\)"):
        rule.decide(bad, rng)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="count must be an int"):
        rule.keep_probability(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("make", ALL_RULES)
def test_negative_count_is_refused_without_echoing_it(make: Callable[..., Rule]) -> None:
    rule, rng = make(1, 1e-5, 1), KeyedRng(TEST_SECRET, "misuse")
    with pytest.raises(ValueError, match="count must be a non-negative") as info:
        rule.decide(-7, rng)
    assert "7" not in str(info.value)  # counts are private: never in an error message


def test_a_huge_rho_is_tabulated_without_underflow_or_refused_by_name() -> None:
    """ρ = 10^7: a = e^(−1/(2σ²)) = e^(−10^7) underflowed Decimal's default range to 0 and the
    remainder bound divided 0 by 0 (decimal.InvalidOperation at planning, a traceback). Now the
    widest exponent range holds it, the stated δ stays a positive upper bound, and a σ² whose a
    passes even that range is refused naming the cause."""
    sel = ps.GaussianThresholding(1e7, 1e-6, 1)
    assert 0 < sel.delta_achieved <= Decimal("1e-4000000") and sel.threshold == 2
    with pytest.raises(ValueError, match=r"σ² = 1e-20 is too narrow to tabulate; choose a smaller"):
        gaussian_tail_fn(Fraction(1, 10**20), Decimal(10) ** -46, 30)


def test_the_optimal_table_at_a_huge_epsilon_is_the_table_at_100() -> None:
    """Its decimal precision grew as ε/ln 10 digits: ε = 10^6 took minutes. A table that is
    (100, δ)-DP is (ε, δ)-DP for any larger ε; and at 100 it is already 0, δ', 1 − ~e^−100, 1."""
    delta = Fraction(1, 10**6)
    big = ps._optimal_table(Fraction(10**6), delta)
    assert big == ps._optimal_table(ps.TABLE_MAX_EPSILON, delta)
    assert len(big) == 4 and big[-1] == 1 and 0 < big[1] < delta
    # the table's grid (10^−41 at this δ) cannot even tell e^−99 from e^−100: the cap costs nothing
    assert ps._optimal_table(Fraction(99), delta) == big
