"""The auto bound's error without sampling: its exact distribution, FDY22's measure integrated.

A clamp-then-noise release with a private clamp choice has a simple law: the choice picks
candidate k with a probability the mechanism states exactly (P[k] ∝ exp(−λ_k),
:meth:`~transforms.mechanisms.auto_bound.ClampChoiceParams.exponents`), and given k the error is
the clamp's bias plus noise of scale c_k times the noise's scale per unit of sensitivity. So the
error is a mixture of shifted Laplace (or Gaussian) laws with a closed-form CDF, and the measure
the benchmarks use — the mean of the middle 60% of |error| over runs, FDY22's — is, over
infinitely many runs, the mean of the quantile function of |error| over [0.2, 0.8]. It is
computed here on 400 quantile levels, each by bisection of the CDF.

Why: a sampled ratio over 200 runs moves by ~10% from seed to seed (the Zipf + bots cell at ε = 8
read 2.17 sampled and is 1.99 exactly), which is the size of the margins the issue's targets are
judged by. The sampled column stays: it runs the mechanism itself, through the job's own code and
keyed sampler, so the two agreeing checks the implementation. Continuous laws: the samplers'
granularity (a power of two far below the scale) is ignored.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from scipy.special import ndtr

from userdp.transforms.mechanisms.auto_bound import ClampChoiceParams

LEVELS = (np.arange(400) + 0.5) / 400 * 0.6 + 0.2  # midpoints of [0.2, 0.8] in 400 steps


def _laplace_cdf(z: np.ndarray) -> np.ndarray:
    """The standard Laplace CDF: ½e^z below 0, 1 − ½e^−z above."""
    half = 0.5 * np.exp(-np.abs(z))
    out: np.ndarray = np.where(z < 0, half, 1.0 - half)
    return out


def _cdf(law: str) -> Callable[[np.ndarray], np.ndarray]:
    return _laplace_cdf if law == "laplace" else ndtr


def trimmed_abs_error(
    p: np.ndarray, shift: np.ndarray, scale: np.ndarray, law: str = "laplace"
) -> float:
    """Mean of the middle 60% of |X|, X = shift_k + scale_k·Z with probability p_k, Z standard
    Laplace (density e^−|z|/2) or, ``law = "gaussian"``, standard normal.

    P[|X| ≤ x] = Σ_k p_k·(G((x − a_k)/b_k) − G((−x − a_k)/b_k)), G the standard CDF; its quantiles
    at ``LEVELS`` by 80 halvings of [0, max |a| + 60·max b], averaged.
    """
    cdf_of = _cdf(law)
    keep = p > 1e-15 * p.max()
    p, a, b = p[keep] / p[keep].sum(), shift[keep], scale[keep]
    lo = np.zeros_like(LEVELS)
    hi = np.full_like(LEVELS, float(np.abs(a).max() + 60 * b.max()))
    for _ in range(80):
        mid = (lo + hi) / 2
        x = mid[:, None]
        cdf = (p * (cdf_of((x - a) / b) - cdf_of((-x - a) / b))).sum(axis=1)
        below = cdf < LEVELS
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return float(((lo + hi) / 2).mean())


def clamp_grid(totals: np.ndarray) -> np.ndarray:
    """The clamps ``auto_bound.best_clamp`` scans: 16 per octave from 2^20 below the top to twice
    the top, and every whole c ≤ 1000."""
    top = max(float(totals.max()), 1.0)
    grid = 2.0 ** (np.arange(-10 * 16, math.ceil(math.log2(top)) * 16 + 17) / 16.0)
    out: np.ndarray = np.union1d(
        grid[(grid >= top / 2**20) & (grid <= top * 2)], np.arange(1.0, 1001.0)
    )
    return out


def clamp_errors(
    totals: np.ndarray, grid: np.ndarray, unit_scale: float, law: str = "laplace"
) -> np.ndarray:
    """The error of each fixed clamp c in ``grid``: its bias plus noise of scale c·``unit_scale``.

    Each clamp is one component (p = 1), so all clamps are bisected at once, row by row."""
    truth = float(totals.sum())
    ordered = np.sort(totals)  # Σ min(t, c) = Σ_{t ≤ c} t + c·#{t > c}
    below = np.searchsorted(ordered, grid, side="right")
    prefix = np.concatenate([[0.0], np.cumsum(ordered)])
    a = (prefix[below] + grid * (len(ordered) - below) - truth)[:, None]
    b = (grid * unit_scale)[:, None]
    cdf_of = _cdf(law)
    lo = np.zeros((len(grid), len(LEVELS)))
    hi = np.abs(a) + 60 * b + lo
    for _ in range(80):
        mid = (lo + hi) / 2
        below_level = cdf_of((mid - a) / b) - cdf_of((-mid - a) / b) < LEVELS
        lo, hi = np.where(below_level, mid, lo), np.where(below_level, hi, mid)
    out: np.ndarray = ((lo + hi) / 2).mean(axis=1)
    return out


def best_clamp_error(totals: np.ndarray, unit_scale: float, law: str = "laplace") -> float:
    """The best clamp in hindsight, noise of scale c·``unit_scale`` at clamp c, over
    :func:`clamp_grid`."""
    return float(clamp_errors(totals, clamp_grid(totals), unit_scale, law).min())


def choice_law(
    totals: np.ndarray, choice: ClampChoiceParams
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(candidates c_k, the probability that ``choice`` picks each, each clamp's bias) on these
    totals — the choice's exact law, P[k] ∝ exp(−λ_k)."""
    cands = np.array([float(c) for c in choice.candidates])
    hist = np.bincount(np.searchsorted(cands, totals, side="left"), minlength=len(cands) + 1)
    lam = np.array([float(x) for x in choice.exponents(hist.tolist())])
    weights = np.exp(-(lam - lam.min()))
    truth = float(totals.sum())
    bias = np.array([np.minimum(totals, c).sum() - truth for c in cands])
    return cands, weights / weights.sum(), bias


def choice_error(
    totals: np.ndarray, choice: ClampChoiceParams, unit_scale: float, law: str = "laplace"
) -> float:
    """The error of ``choice`` then noise of scale c_k·``unit_scale``: exact choice law."""
    cands, p, bias = choice_law(totals, choice)
    return trimmed_abs_error(p, bias, cands * unit_scale, law)


def laplace_unit(epsilon: Fraction | float) -> float:
    """Laplace scale per unit of sensitivity at ε (1/ε)."""
    return 1.0 / float(epsilon)


def gaussian_unit(rho: Fraction | float) -> float:
    """Gaussian standard deviation per unit of sensitivity at ρ (1/√(2ρ))."""
    return 1.0 / math.sqrt(2.0 * float(rho))
