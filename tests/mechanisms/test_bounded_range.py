"""ε-bounded-range ⇒ ε²/8-zCDP, checked by brute force on the exponential mechanisms that use it.

Under a ρ total, the clamp choice of ``bound = "auto"``, the exponential-mechanism quantile and
sample-and-aggregate's rank median run with the largest ε such that ε²/8 ≤ ρ
(:func:`bounded_range_epsilon_within_rho`; the proof is in docs/accounting.md, "Bounded-range
mechanisms"). Here, for every pair of neighbouring inputs on small grids, from the mechanisms' own
exponents and runs: the privacy loss spans at most ε over the outputs (bounded range), and the
Rényi divergence of every order α tried, both ways, is at most α·ε²/8 (ρ-zCDP with ρ = ε²/8).
Negative control: randomized response, ε-DP but with a loss spanning 2ε, breaks α·ε²/8 — so the
check can fail.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from fractions import Fraction

import pytest

from userdp.transforms.mechanisms.auto_bound import ClampChoiceParams
from userdp.transforms.mechanisms.exponential_quantile import ExponentialQuantile
from userdp.transforms.mechanisms.sample_aggregate_aggregators import RankMedian

ORDERS = (1.001, 1.1, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 100.0, 1000.0)
EPS = Fraction(3, 2)


def renyi(p: Sequence[float], q: Sequence[float], alpha: float) -> float:
    """D_α(P‖Q) = ln(Σ p^α q^(1−α)) / (α − 1), summed in log space."""
    logs = [alpha * math.log(a) + (1 - alpha) * math.log(b) for a, b in zip(p, q, strict=True)]
    top = max(logs)
    return (top + math.log(math.fsum(math.exp(x - top) for x in logs))) / (alpha - 1)


def softmax(neg_log_weights: Sequence[Fraction | float]) -> list[float]:
    low = min(neg_log_weights)
    w = [math.exp(-float(x - low)) for x in neg_log_weights]
    return [x / math.fsum(w) for x in w]


def worst(pairs: list[tuple[list[float], list[float]]]) -> tuple[float, float]:
    """(largest loss span, largest D_α/α over the orders and both directions)."""
    span = max(
        max(d) - min(d)
        for p, q in pairs
        for d in [[math.log(a / b) for a, b in zip(p, q, strict=True)]]
    )
    zcdp = max(renyi(x, y, a) / a for p, q in pairs for x, y in ((p, q), (q, p)) for a in ORDERS)
    return span, zcdp


def clamp_law(choice: ClampChoiceParams, totals: Sequence[int]) -> list[float]:
    hist = [0] * choice.histogram_size
    for t in totals:
        hist[choice.bucket(t)] += 1
    return softmax(choice.exponents(hist))


@pytest.mark.parametrize("target", [0, 2])  # m = 0: monotone weights e^(ε·u); m = 2: e^(ε·u/2)
def test_clamp_choice_is_bounded_range_and_zcdp_at_eps_squared_over_8(target: int) -> None:
    """Every log of ≤ 3 persons with totals in 1 … 9, and the same log plus one person."""
    choice = ClampChoiceParams(
        epsilon=EPS, min_exponent=0, max_exponent=3, target_clipped=target, per_octave=2
    )
    pairs = []
    for n in range(4):
        for log in itertools.combinations_with_replacement(range(1, 10), n):
            p = clamp_law(choice, log)
            pairs += [(p, clamp_law(choice, [*log, extra])) for extra in (1, 2, 3, 5, 9, 40)]
    span, zcdp = worst(pairs)
    assert span <= float(EPS) + 1e-9
    assert zcdp <= float(EPS) ** 2 / 8 + 1e-12
    assert zcdp > 0.5 * float(EPS) ** 2 / 8  # not vacuous: some pairs come close to the bound


def quantile_law(mech: ExponentialQuantile, values: Sequence[float]) -> list[float]:
    """P[grid index = k] for every k, from the runs and exponents the sampler uses."""
    scores, lengths, _ = mech.runs(list(values))
    exps = mech.mechanism.exponents(scores)
    per_point = [e for e, m in zip(exps, lengths, strict=True) for _ in range(m)]
    return softmax(per_point)


@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(1, 3)])
def test_exponential_quantile_is_bounded_range_and_zcdp_at_eps_squared_over_8(q: Fraction) -> None:
    """Every multiset of ≤ 3 values on a 5-point grid, and the same plus one value."""
    mech = ExponentialQuantile(q, 0.0, 4.0, EPS, grid_bits=2)
    points = [0.0, 1.0, 2.0, 3.0, 4.0]
    pairs = []
    for n in range(4):
        for x in itertools.combinations_with_replacement(points, n):
            p = quantile_law(mech, x)
            pairs += [(p, quantile_law(mech, [*x, extra])) for extra in points]
    span, zcdp = worst(pairs)
    assert span <= float(EPS) + 1e-9
    assert zcdp <= float(EPS) ** 2 / 8 + 1e-12
    assert zcdp > 0.5 * float(EPS) ** 2 / 8


def rank_median_law(mech: RankMedian, answers: Sequence[float]) -> list[float]:
    """P[grid point j] for every j of coordinate 0, from the runs and exponents the sampler uses."""
    scores, sizes, _ = mech.scores([(a,) for a in answers])
    exps = mech.mechanism.exponents(scores)
    return softmax([e for e, m in zip(exps, sizes, strict=True) for _ in range(m)])


def test_rank_median_under_rho_is_bounded_range_at_its_coordinate_epsilon() -> None:
    """Sample-and-aggregate's median under ρ: every vector of k = 3 answers on a 5-point grid and
    every vector with one answer replaced (one person moves one chunk's answer). The loss spans at
    most ε_c and D_α/α ≤ ε_c²/8, with ε_c = E/d the largest with d·ε_c²/8 ≤ ρ (d = 1 here)."""
    mech = RankMedian(((0.0, 4.0),), 3, None, grid=4, rho=float(EPS) ** 2 / 8)
    eps_c = float(mech.coordinate_epsilon)
    assert eps_c**2 / 8 <= float(EPS) ** 2 / 8 and eps_c == pytest.approx(float(EPS), rel=1e-12)
    points = [0.0, 1.0, 2.0, 3.0, 4.0]
    pairs = []
    for x in itertools.product(points, repeat=3):
        p = rank_median_law(mech, x)
        pairs += [(p, rank_median_law(mech, (y, *x[1:]))) for y in points if y != x[0]]
    span, zcdp = worst(pairs)
    assert span <= eps_c + 1e-9
    assert zcdp <= eps_c**2 / 8 + 1e-12
    assert zcdp > 0.5 * eps_c**2 / 8


def test_negative_control_randomized_response_is_eps_dp_but_not_eps_squared_over_8() -> None:
    """Randomized response flips a bit with probability 1/(1 + e^ε): ε-DP, loss ±ε (span 2ε).
    The same check must reject it at ε²/8, and accept it at ε²/2 (Bun & Steinke 2016)."""
    e = math.exp(float(EPS))
    p, q = [e / (1 + e), 1 / (1 + e)], [1 / (1 + e), e / (1 + e)]
    span, zcdp = worst([(p, q)])
    assert span == pytest.approx(2 * float(EPS))
    assert zcdp > float(EPS) ** 2 / 8  # caught
    assert zcdp <= float(EPS) ** 2 / 2 + 1e-12
