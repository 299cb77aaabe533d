"""The LLN noise's float set-aside (``smooth_sensitivity.zcdp_float_slack``), brute-forced.

Lemma (docs/local_sensitivity.md §8): if P, Q satisfy D_α(P‖Q), D_α(Q‖P) ≤ αρ for every α > 1,
and P', Q' put on every cell a probability within a relative r of P's and Q's, then
D_α(P'‖Q') ≤ α·(ρ + ln((1 + r)/(1 − r)) + 2r + e·r·ρ). Checked here on discretised Gaussian
pairs (whose ρ is known), with random perturbations and an adversarial one that raises P' where
the privacy loss is high and lowers it where it is low — the perturbation the divergence near
α = 1 is most sensitive to. The negative control: against that one, the pointwise bound
ρ + ln((1 + r)/(1 − r)) alone fails for ρ ≥ 2, so the moment term is needed.

The r here (10^−2, 10^−3) is far above the release's 2^−27, so that a bound too small by its
moment term shows; the lemma's form does not depend on r's size.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import logsumexp

from userdp.transforms.mechanisms.smooth_sensitivity import zcdp_float_slack

ORDERS = 1 + np.logspace(-6, 3, 300)  # α from 1 + 10^−6 to 1001


def _rho(log_p: np.ndarray, log_q: np.ndarray) -> float:
    """max over the orders and both directions of D_α/α (D_α = log Σ P^α Q^(1−α) / (α − 1))."""
    return max(
        float(logsumexp(a * x + (1 - a) * y)) / (a - 1) / a
        for a in ORDERS
        for x, y in ((log_p, log_q), (log_q, log_p))
    )


def _gaussian_pair(rho: float) -> tuple[np.ndarray, np.ndarray]:
    """N(0, 1) and N(√(2ρ), 1) on 401 points: ρ-zCDP (D_α = αρ), up to the discretisation."""
    mu = math.sqrt(2 * rho)
    x = np.linspace(-12 - mu, 12 + mu, 401)
    lp, lq = -(x**2) / 2, -((x - mu) ** 2) / 2
    return np.exp(lp - logsumexp(lp)), np.exp(lq - logsumexp(lq))


def _perturbed(p: np.ndarray, a: np.ndarray, r: float) -> np.ndarray:
    a = a - float(np.sum(p * a))  # still a probability: Σ P·a = 0
    assert np.abs(a).max() <= r
    return p * (1 + a)


def _weighted_median(v: np.ndarray, w: np.ndarray) -> float:
    order = np.argsort(v)
    return float(v[order][np.searchsorted(np.cumsum(w[order]), 0.5)])


@pytest.mark.parametrize("rho", [0.01, 0.5, 2.0, 8.0, 20.0])
@pytest.mark.parametrize("r", [1e-2, 1e-3])
def test_perturbed_cells_stay_within_the_set_aside(rho: float, r: float) -> None:
    p, q = _gaussian_pair(rho)
    base = _rho(np.log(p), np.log(q))
    assert base == pytest.approx(rho, rel=1e-6)
    loss = np.log(p / q)
    gen = np.random.default_rng(int(rho * 100) + int(1 / r))  # perturbations only
    cases = [  # adversarial: P' up where the loss is high, Q' the other way
        (0.9 * r * np.sign(loss - _weighted_median(loss, p)),
         -0.9 * r * np.sign(loss - _weighted_median(loss, q))),
        *((0.5 * r * gen.uniform(-1, 1, p.size), 0.5 * r * gen.uniform(-1, 1, p.size))
          for _ in range(3)),
    ]  # fmt: skip
    pointwise_only = base + math.log((1 + r) / (1 - r))
    for i, (a, b) in enumerate(cases):
        got = _rho(np.log(_perturbed(p, a, r)), np.log(_perturbed(q, b, r)))
        assert got <= base + zcdp_float_slack(base, r), (i, got)
        if i == 0 and rho >= 2:  # the negative control: the moment term is needed
            assert got > pointwise_only, (got, pointwise_only)
