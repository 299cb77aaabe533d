"""Privacy audits of the core mechanisms (Laplace, Gaussian, exponential), with negative controls.

Every audit runs at n = 10^5 draws per side by default and again at n = 10^6 under
``@pytest.mark.slow_audit`` (``make audit``). The harness (:mod:`tests.audit.harness`) fails a
correct mechanism with probability ≤ α = 10^-6, and its draws come from a fixed secret, so these
tests are deterministic.

Expected bounds, worked out before the tests were written (so that none is borderline). With m
test draws a side (m = n/2) each Clopper–Pearson end sits z ≈ 4.9 standard errors out, so for an
event with p = P[M(larger side) ∈ S], q = P[M(other side) ∈ S]:

    ε_lb ≈ ln((p − δ)/q) − z·(√((1−p)/(m·p)) + √((1−q)/(m·q))),
    σ = sd of ln(p̂/q̂) ≈ √((1−p)/(m·p) + (1−q)/(m·q)).

The figures below maximise the exact Clopper–Pearson bound over the event family at the expected
counts (the harness picks its event on the training half, so measured values scatter by ~σ):

* Laplace, Δ = 1, ε = 1, x = 0 vs x' = 1. For {y ≥ c} with 0 ≤ c ≤ 1 (x' over x),
  p = 1 − e^(c−1)/2, q = e^(−c)/2; for c ≥ 1, p/q = e exactly. Best c ≈ 1: p ≈ 0.51, q ≈ 0.19:
  ε_lb ≈ 1 − 4.9·(0.0044 + 0.0092) ≈ 0.933 at m = 5·10^4 (σ ≈ 0.010), 0.979 at m = 5·10^5
  (σ ≈ 0.003). Passing is certain up to α; exceeding 1 would also need a > 6σ fluke.
* Negative control 1: noise for ε = 1.25 (scale 0.8), claim ε = 1. Same event, q ≈ 0.146:
  ε_lb ≈ 1.176 (σ ≈ 0.012) at 10^5, 1.226 at 10^6. Caught by 0.18 ≈ 15σ.
* Gaussian, ρ = 0.5, Δ₂ = 1 so σ = Δ₂/√(2ρ) = 1; δ = 10^-5 gives ε = 4.73 (CKS conversion, via
  :func:`~transforms.mechanisms.accounting.zcdp_to_approx`; Bun–Steinke's ρ + 2√(ρ ln(1/δ)) gives
  5.30). Best event {y ≥ 2.9}: p ≈ 0.027, q ≈ 0.0017: ε_lb ≈ 2.14 (10^5, σ ≈ 0.11), 2.77 (10^6,
  at c ≈ 3.55). Far below 4.73, but the conversion is loose, so this pass says little; hence two
  extra audits against the Gaussian's exact privacy profile (Balle & Wang 2018, Thm. 8): with
  μ = Δ₂/σ = 1, ε = 1 holds with δ(1) = Φ(−1/μ + μ/2) − e·Φ(−1/μ − μ/2) ≈ 0.1269, and nothing
  smaller. Event {y ≥ 1.4}
  (p ≈ 0.34, q ≈ 0.08): ε_lb ≈ 0.870 (10^5, σ ≈ 0.018), 0.957 (10^6), so a pass is near tight;
  and noise for ρ = 0.78125 (σ = 0.8) against that claim gives ε_lb ≈ 1.349 (10^5, σ ≈ 0.027),
  1.465 (10^6): caught by ≥ 0.35 ≈ 13σ. Both reuse one set of draws per ρ (``audit_outputs``).
* Exponential mechanism, 10 candidates, Δ = 1, ε = 1 (weights exp(ε·u/(2Δ))). The neighbouring
  pair must move every score, in opposite directions: x = (1, 0, …, 0), x' = (0, 1, …, 1). On
  S = {0}, P_x = e^½/(e^½ + 9) ≈ 0.155 and P_x' = 1/(1 + 9e^½) ≈ 0.063: true ln-ratio 0.897,
  ε_lb ≈ 0.762 (σ ≈ 0.020) at 10^5, 0.854 at 10^6. Passes.
* Negative control 2: scores move by Δ = 1 but the mechanism is told Δ/2, claim ε = 1 (weights
  exp(ε·u/Δ)). On the same pair, S = {0}: P_x = e/(e + 9) ≈ 0.232, P_x' = 1/(1 + 9e) ≈ 0.039,
  true 1.776, ε_lb ≈ 1.629 (σ ≈ 0.024) at 10^5, 1.730 at 10^6: caught by 0.63 ≈ 27σ.
  Why this pair: with x' = (0, …, 0) (only the winner's score moves) the true loss of the
  under-declared mechanism is only ln(0.232/0.1) = 0.84 < 1 (ε_lb ≈ 0.74), so it would pass; the
  violation needs the normaliser to move against the winner, which takes all other scores rising.

The pass tests also check ε_lb ≥ expected − 0.1 (≥ 5σ below the expectation in every case, σ ≤ 0.02
at 10^5), except the loosely converted Gaussian one: a mechanism that adds far more noise than it
states passes every audit, so the bound has to come close to the claim for a pass to mean much.
"""

from __future__ import annotations

import math
from functools import cache

import pytest
from scipy import stats

from tests.audit.harness import (
    AuditResult,
    Mechanism,
    assert_caught,
    assert_private,
    audit_outputs,
    draw,
)
from userdp.transforms.mechanisms.accounting import ZCDP, zcdp_to_approx
from userdp.transforms.mechanisms.additive import gaussian_mechanism, laplace_mechanism
from userdp.transforms.mechanisms.exponential import exponential_mechanism
from userdp.transforms.mechanisms.rng import KeyedRng

N_DEFAULT = 100_000
N_SLOW = 1_000_000
SIZES = [
    pytest.param(N_DEFAULT, id="n=1e5", marks=pytest.mark.slow),
    pytest.param(N_SLOW, id="n=1e6", marks=pytest.mark.slow_audit),
]
# Expected ε_lb at each n (module docstring); a pass must reach expected − POWER_SLACK.
POWER_SLACK = 0.1

DELTA_1 = 1.0  # the sensitivity Δ of every audited statistic
CANDIDATES = 10
SCORES_X = (DELTA_1,) + (0.0,) * (CANDIDATES - 1)
SCORES_X_PRIME = (0.0,) + (DELTA_1,) * (CANDIDATES - 1)

RHO = 0.5  # σ = Δ₂/√(2ρ) = 1
RHO_UNDER_NOISED = 0.78125  # σ = 0.8
GAUSS_DELTA = 1e-5


def laplace(epsilon: float) -> Mechanism:
    def mechanism(value: float, rng: KeyedRng) -> float:
        return laplace_mechanism(value, sensitivity=DELTA_1, epsilon=epsilon, rng=rng)

    return mechanism


def gaussian(rho: float) -> Mechanism:
    def mechanism(value: float, rng: KeyedRng) -> float:
        return gaussian_mechanism(value, sensitivity=DELTA_1, rho=rho, rng=rng)

    return mechanism


def exponential(declared_sensitivity: float) -> Mechanism:
    def mechanism(scores: tuple[float, ...], rng: KeyedRng) -> int:
        return exponential_mechanism(scores, epsilon=1.0, sensitivity=declared_sensitivity, rng=rng)

    return mechanism


def _power(result: AuditResult, expected: dict[int, float], n: int) -> None:
    assert result.epsilon_lb >= expected[n] - POWER_SLACK, f"the audit lost power:\n{result}"


@pytest.mark.parametrize("n", SIZES)
def test_laplace_passes(n: int) -> None:
    result = assert_private(laplace(1.0), 0.0, DELTA_1, epsilon=1.0, n=n, label="laplace")
    _power(result, {N_DEFAULT: 0.933, N_SLOW: 0.979}, n)


@pytest.mark.parametrize("n", SIZES)
def test_laplace_calibrated_for_more_epsilon_is_caught(n: int) -> None:
    assert_caught(laplace(1.25), 0.0, DELTA_1, epsilon=1.0, n=n, label="laplace-1.25")


@cache
def _gaussian_draws(rho: float, n: int) -> tuple[list[object], list[object]]:
    """One set of Gaussian draws per (ρ, n), audited against several claims."""
    label = f"gaussian-{rho}"
    return (
        draw(gaussian(rho), 0.0, n, side="x", label=label),
        draw(gaussian(rho), DELTA_1, n, side="x'", label=label),
    )


def _exact_gaussian_delta(epsilon: float, mu: float) -> float:
    """δ(ε) of the Gaussian mechanism with Δ₂/σ = μ (Balle & Wang 2018, Theorem 8)."""
    return float(
        stats.norm.cdf(-epsilon / mu + mu / 2)
        - math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2)
    )


@pytest.mark.parametrize("n", SIZES)
def test_gaussian_passes_at_converted_epsilon(n: int) -> None:
    claim = zcdp_to_approx(ZCDP(RHO), GAUSS_DELTA)
    epsilon = float(claim.epsilon)
    assert 4.6 < epsilon <= 0.5 + 2 * math.sqrt(0.5 * math.log(1e5))  # CKS ≤ Bun–Steinke
    result = audit_outputs(*_gaussian_draws(RHO, n), epsilon=epsilon, delta=GAUSS_DELTA)
    # No power check: the event sits in the tail (≈ 90 expected hits of M(x)), so σ ≈ 0.1 here;
    # the exact-profile audit below is the one that would notice too little noise.
    assert result.passed, str(result)


@pytest.mark.parametrize("n", SIZES)
def test_gaussian_passes_at_its_exact_privacy_profile(n: int) -> None:
    delta = _exact_gaussian_delta(1.0, mu=1.0)
    assert delta == pytest.approx(0.12694, abs=1e-5)
    result = audit_outputs(*_gaussian_draws(RHO, n), epsilon=1.0, delta=delta)
    assert result.passed, str(result)
    _power(result, {N_DEFAULT: 0.870, N_SLOW: 0.957}, n)


@pytest.mark.parametrize("n", SIZES)
def test_gaussian_with_too_little_noise_is_caught(n: int) -> None:
    delta = _exact_gaussian_delta(1.0, mu=1.0)  # the profile of σ = 1, claimed for σ = 0.8
    result = audit_outputs(*_gaussian_draws(RHO_UNDER_NOISED, n), epsilon=1.0, delta=delta)
    assert not result.passed, str(result)


@pytest.mark.parametrize("n", SIZES)
def test_exponential_mechanism_passes(n: int) -> None:
    result = assert_private(
        exponential(DELTA_1), SCORES_X, SCORES_X_PRIME, epsilon=1.0, n=n, label="exponential"
    )
    _power(result, {N_DEFAULT: 0.762, N_SLOW: 0.854}, n)


@pytest.mark.parametrize("n", SIZES)
def test_exponential_mechanism_with_underdeclared_sensitivity_is_caught(n: int) -> None:
    result = assert_caught(
        exponential(DELTA_1 / 2),
        SCORES_X,
        SCORES_X_PRIME,
        epsilon=1.0,
        n=n,
        label="exponential-half-sensitivity",
    )
    assert 0 in result.event and 1 not in result.event, result
