"""Privacy audits of the local-sensitivity mechanisms: smooth sensitivity (three noises),
propose-test-release and stability-based release, with the negative controls that must be caught.

Neighbouring pairs (add/remove one person), all with bounds [0, 10]:

* JUMP_LS — x = (0, 0, 0, 10, 10), x' = (0, 0, 10, 10): both medians are 0, but LS(x) = 0 and
  LS(x') = 10 (the seed's example of a local-sensitivity jump).
* JUMP_MEDIAN — x = (0, 0, 10, 10, 10), x' = (0, 0, 10, 10): the median moves from 10 to 0.

The audits precompute the deterministic, not private, part of each release — f and S for smooth
sensitivity (then :func:`release_with_log_scale`, the very call :meth:`SmoothQuantile.release`
ends with; ``test_audit_shortcut_is_the_release`` checks they agree draw for draw), the distance
for PTR and stability — and draw only the noise. Defaults: n = 2·10^4 or 4·10^4 draws per side
(the file ≈ 25 s); ``@pytest.mark.slow_audit`` repeats every audit at n = 10^6.

Expected bounds, worked out as in docs/audit.md (m = n/2 test draws a side; each Clopper–Pearson
end ≈ 4.9 standard errors out; σ = sd of ln(p̂/q̂)):

* Smooth sensitivity, every noise: NRS07's calibration spends ε/2 on sliding and ε/2 on
  dilation with slack, and with bounds [0, 10] most outputs clamp; no event comes near ε. On
  JUMP_LS the loss is dilation only (S changes by ≤ e^β) and ε_lb ≈ 0; on JUMP_MEDIAN ε_lb ≈ 0.36
  (Laplace, claim (1, 10^−6)), 0.28 (LLN, claim ρ = ½ → (5.22, 10^−6) by CKS), ≈ 0 (Cauchy
  γ = 4, scale 100 for a shift of 10). These audits can only find violations; they pass.
* Negative control — noise scaled by the raw local sensitivity: on JUMP_LS, M(x) = 0 every time
  (LS = 0) while M(x') has scale 2(γ+1)·10/ε = 100: {y ≥ 4} has p ≈ 0.48, q = 0, ε_lb ≈
  ln(0.46/0.0015) ≈ 5.8 at m = 10^4. Caught.
* PTR on JUMP_MEDIAN, b = 1: D(x, 1) = D(x', 1) = 0, so both sides give ⊥ except w.p. ≤ δ:
  passes. Negative control — the test skipped: Laplace(b/(ε/2)) = Laplace(2) around 10 vs 0; an
  event {y ≥ c} has p ≈ 0.5, q ≈ 0.004: ε_lb ≈ 4.1. Caught.
* PTR mean, power: x = 227 zeros, x' = x + (1.0); b = 1/200, ε = 1, δ = 10^−6, T = 27, so
  D(x) = 27 = T and D(x') = 28. P(⊥) = 1 − 1/(1 + e^−½) = 0.3775 vs e^−1/(1 + e^−½) = 0.2345;
  releases add the Laplace shift (1/228)/0.01 = 0.44. The best event, {released, y ≥ c}, has
  p ≈ 0.398, q ≈ 0.209 (ln-ratio 0.64): ε_lb ≈ 0.64 − 0.11 = 0.53 at n = 4·10^4 (σ ≈ 0.016);
  must be ≥ 0.4.
* Stability, top partition: {a: 20, b: 7} vs {a: 19, b: 7}, ε = 1, δ = 10^−6, T = 14: d = 13 vs
  12, P("a") = e^−1/(1 + e^−1) = 0.269 vs e^−2/(1 + e^−1) = 0.099, ln-ratio exactly ε = 1
  (tight): ε_lb ≈ 1 − 0.16 = 0.84 at n = 4·10^4 (σ ≈ 0.024); must be ≥ 0.7. Negative control:
  noise for ε = 1.5 claimed as ε = 1: P = 0.182 vs 0.0406, ln-ratio 1.5, ε_lb ≈ 1.5 − 0.24 =
  1.26, caught by ≈ 0.26 ≈ 7σ.
* Stability, bucketed median: 14 values 1.5 with 5 values 0.5 and 5 values 2.5 (edges 0, 1, 2,
  3) vs one 1.5 fewer: dist 14 vs 13, the same 0.269 vs 0.099: ε_lb ≈ 1 − 0.23 = 0.77 at
  n = 2·10^4 (σ ≈ 0.034); must be ≥ 0.6.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from tests.audit.harness import AuditResult, Mechanism, assert_caught, assert_private
from userdp.transforms.mechanisms import ptr
from userdp.transforms.mechanisms import quantile_sensitivity as qs
from userdp.transforms.mechanisms import smooth_sensitivity as ss
from userdp.transforms.mechanisms import stability as st
from userdp.transforms.mechanisms.accounting import ZCDP, zcdp_to_approx
from userdp.transforms.mechanisms.discrete import discrete_laplace
from userdp.transforms.mechanisms.heavy_tailed import release_heavy_tailed
from userdp.transforms.mechanisms.rng import KeyedRng

LO, HI = 0.0, 10.0
JUMP_LS = (np.array([0.0, 0.0, 0.0, 10.0, 10.0]), np.array([0.0, 0.0, 10.0, 10.0]))
JUMP_MEDIAN = (np.array([0.0, 0.0, 10.0, 10.0, 10.0]), np.array([0.0, 0.0, 10.0, 10.0]))
DELTA = 1e-6

N_SMALL, N_MID, N_SLOW = 20_000, 40_000, 1_000_000


def sizes(default: int) -> list[object]:
    return [
        pytest.param(default, id=f"n={default:.0e}"),
        pytest.param(N_SLOW, id="n=1e6", marks=pytest.mark.slow_audit),
    ]


# ---------------------------------------------------------------------- smooth sensitivity


NOISES: dict[str, tuple[ss.SmoothNoise, float, float]] = {
    "cauchy": (ss.CauchyNoise(1.0), 1.0, 0.0),
    "laplace": (ss.LaplaceNoise(1.0, DELTA), 1.0, DELTA),
    "lln": (
        ss.LaplaceLogNormalNoise(0.5),
        float(zcdp_to_approx(ZCDP(Fraction(1, 2)), Fraction(1, 10**6)).epsilon),
        DELTA,
    ),
}


def precomputed(mech: ss.SmoothQuantile, data: np.ndarray) -> tuple[float, float]:
    """(f(x), ln Ŝ(x)): the deterministic, not private, part of the release."""
    xs = qs.sorted_clamped(data, mech.lower, mech.upper)
    return qs.quantile_of_sorted(xs, mech.q, mech.lower), mech.log_sensitivity(xs)


def smooth_mechanism(mech: ss.SmoothQuantile) -> Mechanism:
    def run(pre: tuple[float, float], rng: KeyedRng) -> float:
        return ss.release_with_log_scale(
            pre[0], pre[1], mech.noise, lower=mech.lower, upper=mech.upper, rng=rng
        )

    return run


def test_audit_shortcut_is_the_release() -> None:
    for noise, _, _ in NOISES.values():
        mech = ss.SmoothQuantile(0.5, LO, HI, noise)
        for data in (*JUMP_LS, *JUMP_MEDIAN):
            run = smooth_mechanism(mech)
            pre = precomputed(mech, data)
            for i in range(20):
                rng_a, rng_b = KeyedRng(b"\x01" * 32, "s", i), KeyedRng(b"\x01" * 32, "s", i)
                assert mech.release(data, rng_a) == run(pre, rng_b)


@pytest.mark.parametrize("pair", ["jump_ls", "jump_median"])
@pytest.mark.parametrize("kind", list(NOISES))
@pytest.mark.parametrize("n", sizes(N_SMALL))
def test_smooth_median_passes(kind: str, pair: str, n: int) -> None:
    noise, epsilon, delta = NOISES[kind]
    mech = ss.SmoothQuantile(0.5, LO, HI, noise)
    x, x_prime = JUMP_LS if pair == "jump_ls" else JUMP_MEDIAN
    assert_private(
        smooth_mechanism(mech),
        precomputed(mech, x),
        precomputed(mech, x_prime),
        epsilon=epsilon,
        delta=delta,
        n=n,
        label=f"smooth-{kind}-{pair}",
    )


def raw_ls_mechanism(noise: ss.SmoothNoise) -> Mechanism:
    """Negative control: noise scaled by the raw local sensitivity instead of S."""

    def run(pre: tuple[float, float], rng: KeyedRng) -> float:
        value, ls = pre
        z = noise.sample(rng)
        if ls == 0:
            return value
        return release_heavy_tailed(value, scale=noise.multiplier * ls, noise=z, lower=LO, upper=HI)

    return run


@pytest.mark.parametrize("n", sizes(N_SMALL))
def test_noise_scaled_by_raw_local_sensitivity_is_caught(n: int) -> None:
    sides = []
    for data in JUMP_LS:
        xs = qs.sorted_clamped(data, LO, HI)
        ls = qs.local_sensitivity(xs, q=0.5, lower=LO, upper=HI)
        sides.append((qs.quantile_of_sorted(xs, Fraction(1, 2), LO), ls))
    assert [ls for _, ls in sides] == [0.0, 10.0]
    assert_caught(raw_ls_mechanism(ss.CauchyNoise(1.0)), *sides, epsilon=1.0, n=n, label="raw-ls")


# ----------------------------------------------------------------------------------- PTR


def ptr_mechanism(cal: ptr.PTRCalibration, *, skip_test: bool = False) -> Mechanism:
    def run(pre: tuple[int | None, float | Fraction], rng: KeyedRng) -> float | None:
        if skip_test:  # negative control: release whatever the distance
            discrete_laplace(rng, 2 / cal.epsilon)
            return cal.mechanism.release(pre[1], rng)
        return cal.finish(pre[0], pre[1], rng)

    return run


def ptr_quantile_inputs(mech: ptr.PTRQuantile, data: np.ndarray) -> tuple[int | None, float]:
    xs = qs.sorted_clamped(data, LO, HI)
    return mech.distance(xs), qs.quantile_of_sorted(xs, mech.q, LO)


@pytest.mark.parametrize("skip_test", [False, True], ids=["ptr", "test-skipped"])
@pytest.mark.parametrize("n", sizes(N_SMALL))
def test_ptr_median(n: int, skip_test: bool) -> None:
    mech = ptr.PTRQuantile(0.5, LO, HI, bound=1, epsilon=1, delta=DELTA)
    x, x_prime = (ptr_quantile_inputs(mech, d) for d in JUMP_MEDIAN)
    assert x[0] == 0 and x_prime[0] == 0  # LS ≥ b already: the test must stop both
    check = assert_caught if skip_test else assert_private
    check(
        ptr_mechanism(mech.calibration, skip_test=skip_test),
        x,
        x_prime,
        epsilon=1.0,
        delta=DELTA,
        n=n,
        label=f"ptr-median-{skip_test}",
    )


@pytest.mark.parametrize("n", sizes(N_MID))
def test_ptr_mean_passes_near_its_claim(n: int) -> None:
    mech = ptr.PTRMean(LO, 1.0, bound=Fraction(1, 200), epsilon=1, delta=DELTA)
    t = mech.calibration.threshold
    assert t == 27
    x = np.zeros(200 + t)
    x_prime = np.append(x, 1.0)
    inputs = [
        (ptr.mean_distance(len(d), LO, 1.0, mech.bound), ptr.exact_mean(d, LO, 1.0))
        for d in (x, x_prime)
    ]
    assert [d for d, _ in inputs] == [t, t + 1]
    result = assert_private(
        ptr_mechanism(mech.calibration), *inputs, epsilon=1.0, delta=DELTA, n=n, label="ptr-mean"
    )
    _power(result, 0.4)


def _power(result: AuditResult, floor: float) -> None:
    assert result.epsilon_lb >= floor, f"the audit lost power:\n{result}"


# ------------------------------------------------------------------------------- stability


def stability_mechanism(epsilon: Fraction, threshold: int) -> Mechanism:
    def run(pre: tuple[object, int], rng: KeyedRng) -> object:
        answer, dist = pre
        return answer if ptr.passes_test(dist - 1, epsilon, threshold, rng) else None

    return run


@pytest.mark.parametrize("noise_epsilon", [1, Fraction(3, 2)], ids=["eps=1", "eps=1.5"])
@pytest.mark.parametrize("n", sizes(N_MID))
def test_stable_top_partition(n: int, noise_epsilon: Fraction) -> None:
    mech = st.StableTopPartition(noise_epsilon, DELTA)
    sides = [st.top_partition_distance(c) for c in ({"a": 20, "b": 7}, {"a": 19, "b": 7})]
    assert sides == [("a", 14), ("a", 13)] and st.StableTopPartition(1, DELTA).threshold == 14
    run = stability_mechanism(mech.epsilon, 14)  # the threshold of the claimed ε = 1
    check = assert_private if noise_epsilon == 1 else assert_caught
    result = check(run, *sides, epsilon=1.0, delta=DELTA, n=n, label=f"top-{noise_epsilon}")
    if noise_epsilon == 1:
        _power(result, 0.7)


@pytest.mark.parametrize("n", sizes(N_SMALL))
def test_stable_bucketed_median(n: int) -> None:
    mech = st.StableBucketedQuantile(0.5, (0.0, 1.0, 2.0, 3.0), 1, DELTA)
    x = np.concatenate([np.full(14, 1.5), np.full(5, 0.5), np.full(5, 2.5)])
    sides = [mech.bucket_and_distance(d) for d in (x, x[1:])]
    assert sides == [(1, 14), (1, 13)]
    run = stability_mechanism(mech.epsilon, mech.threshold)
    result = assert_private(run, *sides, epsilon=1.0, delta=DELTA, n=n, label="bucketed")
    _power(result, 0.6)
    assert math.isfinite(result.epsilon_lb)
