"""The quantile on positions (grid point, split of its tied persons): its ranks against their
definition, the exact law of its draws, its privacy loss on every small input (brute force,
with a mis-scaled variant that must fail), its noise-free position, and its misuse."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from userdp.transforms.mechanisms import split_quantile as split_module
from userdp.transforms.mechanisms.exponential import sample_near_or_far
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.split_quantile import (
    BLOCK_NATS,
    Position,
    Ranks,
    SplitQuantile,
)

SECRET = bytes(range(32))


def naive_below(mech: SplitQuantile, values: list[float]) -> list[int]:
    """B(k, j) = #{index < k} + ⌊j·#{index = k}/J⌋ at every position, in order."""
    idx = mech.grid.grid_indices(values).tolist()
    splits = 1 << mech.split_bits
    return [
        sum(i < k for i in idx) + j * sum(i == k for i in idx) // splits
        for k in range(mech.grid.cells + 1)
        for j in range(splits + 1)
    ]


def position_law(mech: SplitQuantile, values: list[float], factor: float = 1.0) -> list[float]:
    """P[position f], exactly from the definition: ∝ exp(ε·u/(2Δ)), u = −|d·B − a·n| (floats
    suffice at these sizes). ``factor`` scales the exponent: the negative control's slip."""
    a, d, n = mech.q.numerator, mech.q.denominator, len(values)
    eps = float(mech.epsilon) * factor
    w = [
        math.exp(-eps * abs(d * b - a * n) / (2 * mech.sensitivity))
        for b in naive_below(mech, values)
    ]
    return [x / sum(w) for x in w]


def flat(mech: SplitQuantile, position: Position) -> int:
    """The position's index f = k·(J + 1) + j, the order of :func:`naive_below`."""
    return position[0] * ((1 << mech.split_bits) + 1) + position[1]


def _samples(gen: np.random.Generator, n: int) -> list[float]:
    """Values on a 5-point grid of [0, 4], heavy ties (test data)."""
    return gen.choice([0.0, 1.0, 1.0, 1.0, 2.0, 4.0], n).tolist()


@pytest.mark.parametrize("split_bits", [0, 1, 3])
def test_ranks_follow_their_definition(split_bits: int) -> None:
    mech = SplitQuantile(Fraction(1, 4), 0.0, 4.0, 1, grid_bits=2, split_bits=split_bits)
    gen = np.random.default_rng(0)  # test data
    for n in (0, 1, 3, 9, 20):
        values = _samples(gen, n)
        naive = naive_below(mech, values)
        ranks = Ranks(mech.grid.grid_histogram(values), mech.grid.cells, split_bits)
        assert [ranks.below(f) for f in range(ranks.size)] == naive
        for beta in range(-1, n + 3):
            reach = [f for f, b in enumerate(naive) if b >= beta]
            assert ranks.first_reaching(beta) == (reach[0] if reach else ranks.size)


def _hist_below(mech: SplitQuantile, histogram: tuple[list[int], list[int]]) -> list[int]:
    """B at every position from a histogram, straight from the definition (counts may be huge)."""
    counts = dict(zip(*histogram, strict=True))
    splits = 1 << mech.split_bits
    out = []
    for k in range(mech.grid.cells + 1):
        below = sum(c for i, c in counts.items() if i < k)
        out.extend(below + j * counts.get(k, 0) // splits for j in range(splits + 1))
    return out


def _check_envelope(mech: SplitQuantile, histogram: tuple[list[int], list[int]]) -> None:
    """The draw's envelope covers every position exactly once — near blocks and far positions —
    with each position's exponent as defined, each block's floor within BLOCK_NATS below all of
    its positions' exponents (and ≤ the tail), and every far exponent above the tail."""
    hist = (np.array(histogram[0], dtype=np.int64), np.array(histogram[1], dtype=np.int64))
    env = mech._envelope(mech.ranks(hist))
    a, d = mech.q.numerator, mech.q.denominator
    n = sum(histogram[1])
    gaps = [abs(d * b - a * n) for b in _hist_below(mech, histogram)]
    factor = Fraction(mech.epsilon) / (2 * mech.sensitivity)
    q = [factor * (g - min(gaps)) for g in gaps]
    seen: list[int] = []
    for first, length, floor in zip(env.firsts, env.lengths, env.floors, strict=True):
        block = range(first, first + length)
        seen.extend(block)
        assert length > 0 and 0 <= floor <= env.tail
        assert all(floor <= q[f] <= floor + BLOCK_NATS for f in block)
    far = [env.far_position(u) for u in range(env.far)]
    assert all(q[f] > env.tail for f in far)
    assert sorted(seen + far) == list(range(len(q)))
    assert all(env.exponent(f) == q[f] for f in (*seen[:50], *far[:50]))


@pytest.mark.parametrize("tail", [None, Fraction(0), Fraction(1, 3), Fraction(5, 2)])
def test_the_envelope_covers_every_position_once(
    tail: Fraction | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On random small histograms, budgets from 10^-3 to 40 and tails down to 0 (so that blocks
    of many runs, single runs and far positions all occur), plus the cases that broke mutants:
    one grid point of 100 persons with no splits, two of 10^8 (the best score far from 0), and
    a median at ε = 160/513 (a run exactly one score unit past the near window)."""
    if tail is not None:
        monkeypatch.setattr(split_module, "tail_for", lambda size: tail)
    gen = np.random.default_rng(11)  # test data and budgets
    cases: list[tuple[SplitQuantile, tuple[list[int], list[int]]]] = []
    for _ in range(40):
        q = Fraction(int(gen.integers(1, 4)), 4)
        eps = Fraction(float(10 ** gen.uniform(-3, 1.6))).limit_denominator(1000)
        mech = SplitQuantile(q, 0.0, 4.0, eps, grid_bits=2, split_bits=int(gen.integers(0, 4)))
        idx = sorted(gen.choice(5, int(gen.integers(0, 4)), replace=False).tolist())
        counts = gen.integers(1, 12, len(idx)).tolist()
        cases.append((mech, (idx, counts)))
    grid0 = SplitQuantile(Fraction(1, 2), 0.0, 4.0, 1, grid_bits=2, split_bits=0)
    cases.append((grid0, ([0], [100])))
    cases.append((grid0, ([1, 3], [10**8, 10**8])))
    median = SplitQuantile(Fraction(1, 2), 0.0, 1.0, Fraction(160, 513), grid_bits=4, split_bits=2)
    uniform = median.grid.grid_histogram(np.random.default_rng(3).uniform(0, 1, 2000))
    cases.append((median, (uniform[0].tolist(), uniform[1].tolist())))
    for mech, histogram in cases:
        _check_envelope(mech, histogram)


def test_draws_have_the_exact_law() -> None:
    """4,000 draws on tied data against the law from the definition (χ², failure probability
    10^-3 for a correct sampler, fixed seeds); the law with the exponent doubled (the ε/Δ slip)
    must be rejected on the same draws."""
    mech = SplitQuantile(Fraction(1, 3), 0.0, 4.0, Fraction(3, 2), grid_bits=2, split_bits=2)
    values = [1.0] * 7 + [2.0] * 3 + [4.0]
    hist = mech.grid.grid_histogram(values)
    counts = Counter(
        flat(mech, mech.release_position(hist, KeyedRng(SECRET, "law", i))) for i in range(4000)
    )
    observed = np.array([counts[f] for f in range(mech.positions)])
    for factor, reject in ((1.0, False), (2.0, True)):
        expected = np.array(position_law(mech, values, factor)) * 4000
        p = stats.chisquare(observed, expected).pvalue
        assert (p < 1e-6) if reject else (p > 1e-3)


def test_blocks_of_several_runs_have_the_exact_law() -> None:
    """At ε = 1/8 for the median a block holds four values of B (factor·d = 1/8), so a draw
    accepts a uniform position of its block with probability e^(−(q − floor)): 4,000 draws match
    the exact law (χ², failure probability 10^-3, fixed seeds), and the envelope's own law — what
    skipping that acceptance would draw — is rejected on the same draws."""
    mech = SplitQuantile(Fraction(1, 2), 0.0, 4.0, Fraction(1, 8), grid_bits=2, split_bits=2)
    values = [0.0] * 9 + [1.0] * 12 + [3.0] * 7 + [4.0] * 12
    hist = mech.grid.grid_histogram(values)
    env = mech._envelope(mech.ranks(hist))
    assert max(env.lengths) > 1 and len(env.floors) < mech.positions  # blocks merge runs
    counts = Counter(
        flat(mech, mech.release_position(hist, KeyedRng(SECRET, "blocks", i))) for i in range(4000)
    )
    observed = np.array([counts[f] for f in range(mech.positions)])
    envelope = np.zeros(mech.positions)
    for first, length, floor in zip(env.firsts, env.lengths, env.floors, strict=True):
        envelope[first : first + length] = math.exp(-float(floor))
    for law, reject in ((np.array(position_law(mech, values)), False), (envelope, True)):
        p = stats.chisquare(observed, law / law.sum() * 4000).pvalue
        assert (p < 1e-6) if reject else (p > 1e-3)


def test_far_positions_have_the_exact_law(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the tail lowered to 1 nat, most positions are far and the far block is drawn often:
    the draws still have the exact law (χ², failure probability 10^-3, fixed seeds) — which a
    wrong map from a far draw to its position (or a wrong far exponent) would break."""
    monkeypatch.setattr(split_module, "tail_for", lambda size: Fraction(1))
    mech = SplitQuantile(Fraction(1, 3), 0.0, 4.0, Fraction(3, 2), grid_bits=2, split_bits=2)
    values = [1.0] * 7 + [2.0] * 3 + [4.0]
    hist = mech.grid.grid_histogram(values)
    counts = Counter(
        flat(mech, mech.release_position(hist, KeyedRng(SECRET, "lo", i))) for i in range(4000)
    )
    expected = np.array(position_law(mech, values)) * 4000
    observed = np.array([counts[f] for f in range(mech.positions)])
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_sample_near_or_far_has_the_exact_law() -> None:
    """The far block by rejection, at a tail of 1 nat so it is drawn often: 3 near candidates
    and 5 far ones against the normalised e^(−q) (χ², failure probability 10^-3, fixed seeds);
    the law with every far weight halved must be rejected."""
    near, mult = [Fraction(0), Fraction(1, 2), Fraction(1)], [2, 1, 3]
    far_q = [Fraction(3, 2), Fraction(2), Fraction(5, 4), Fraction(3), Fraction(6, 5)]
    counts = Counter(
        sample_near_or_far(
            KeyedRng(SECRET, "far", i),
            near,
            mult,
            5,
            far_exponent=far_q.__getitem__,
            tail=Fraction(1),
        )
        for i in range(6000)
    )
    observed = np.array([counts[t] for t in range(8)])
    weights = [m * math.exp(-float(q)) for q, m in zip(near, mult, strict=True)]
    far_w = [math.exp(-float(q)) for q in far_q]
    for scale, reject in ((1.0, False), (0.5, True)):
        w = np.array(weights + [scale * x for x in far_w])
        p = stats.chisquare(observed, w / w.sum() * 6000).pvalue
        assert (p < 1e-6) if reject else (p > 1e-3)


def test_sample_near_or_far_refuses_misplaced_exponents() -> None:
    rng = KeyedRng(SECRET, "bad")
    with pytest.raises(ValueError, match="near exponents must be in"):
        sample_near_or_far(
            rng, [Fraction(2)], [1], 1, far_exponent=lambda u: Fraction(3), tail=Fraction(1)
        )
    with pytest.raises(ValueError, match="far candidate 0 has exponent"):
        for _ in range(200):  # the far block is drawn with probability 1/(1 + e) per round
            sample_near_or_far(
                rng, [Fraction(0)], [1], 1, far_exponent=lambda u: Fraction(1, 2), tail=Fraction(1)
            )


def test_the_near_window_holds_every_candidate_within_the_tail() -> None:
    """10^4 tied persons at ε = 1: the listed runs are those within ⌊T/factor⌋ of the best, the
    far positions all beyond it — checked on the scores at every position of a coarse grid."""
    mech = SplitQuantile(Fraction(1, 10), 0.0, 16.0, 1, grid_bits=4, split_bits=6)
    gen = np.random.default_rng(2)  # test data
    values = np.minimum(gen.zipf(2.0, 10_000), 16).astype(float).tolist()
    hist = mech.grid.grid_histogram(values)
    naive = naive_below(mech, values)
    n, a, d = len(values), 1, 10
    gaps = [abs(d * b - a * n) for b in naive]
    best = min(gaps)
    cut = math.floor(Fraction(80) / (Fraction(1) / (2 * 9)))
    near = {f for f, g in enumerate(gaps) if g - best <= cut}
    assert 0 < len(near) < len(gaps)  # the test has both kinds
    drawn = {flat(mech, mech.release_position(hist, KeyedRng(SECRET, "w", i))) for i in range(300)}
    assert drawn <= near  # far positions have probability < e^-80 each


@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(1, 4), Fraction(2, 3)])
@pytest.mark.parametrize("split_bits", [1, 2])
def test_brute_force_epsilon_dp_for_add_remove_one_value(q: Fraction, split_bits: int) -> None:
    """Every multiset of ≤ 3 values on a 5-point grid, plus one more value: every position's
    probability ratio is at most e^ε, both directions — and the exponent doubled (the slip of
    reading the scores as monotone) overspends on some pair."""
    eps = Fraction(1)
    mech = SplitQuantile(q, 0.0, 4.0, eps, grid_bits=2, split_bits=split_bits)
    points = [0.0, 1.0, 2.0, 3.0, 4.0]
    worst = worst_slip = 0.0
    for size in range(4):
        for base in itertools.combinations_with_replacement(points, size):
            for extra in points:
                x, y = list(base), [*base, extra]
                for factor in (1.0, 2.0):
                    px, py = position_law(mech, x, factor), position_law(mech, y, factor)
                    loss = max(abs(math.log(p / r)) for p, r in zip(px, py, strict=True))
                    if factor == 1.0:
                        worst = max(worst, loss)
                    else:
                        worst_slip = max(worst_slip, loss)
    assert worst <= float(eps) + 1e-9
    assert worst_slip > float(eps) * 1.5


def test_best_position_splits_a_tie_at_the_quantile() -> None:
    """100 persons at one grid point, q = 1/10: the first best position has ⌊j·100/J⌋ = 10
    persons below it — inside the tie, where a grid point cannot be."""
    mech = SplitQuantile(Fraction(1, 10), 0.0, 4.0, 1, grid_bits=2, split_bits=8)
    hist = mech.grid.grid_histogram([1.0] * 100)
    k, j = mech.best_position(hist)
    assert k == 1 and (j * 100) >> 8 == 10 and ((j - 1) * 100) >> 8 == 9
    assert naive_below(mech, [1.0] * 100)[flat(mech, (k, j))] == 10


def test_empty_data_draws_a_uniform_position() -> None:
    mech = SplitQuantile(Fraction(1, 2), 0.0, 4.0, 1, grid_bits=2, split_bits=1)
    empty = mech.grid.grid_histogram([])
    draws = Counter(mech.release_position(empty, KeyedRng(SECRET, "e", i)) for i in range(1500))
    assert len(draws) == mech.positions == 15
    assert stats.chisquare(list(draws.values())).pvalue > 1e-3  # failure probability 10^-3


def test_misuse_is_refused() -> None:
    with pytest.raises(TypeError, match="split_bits must be an int"):
        SplitQuantile(Fraction(1, 2), 0.0, 1.0, 1, split_bits=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"split_bits must be in \[0, 24\]"):
        SplitQuantile(Fraction(1, 2), 0.0, 1.0, 1, split_bits=25)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        SplitQuantile(Fraction(3, 2), 0.0, 1.0, 1)
    mech = SplitQuantile(Fraction(1, 2), 0.0, 1.0, 1, grid_bits=4)
    with pytest.raises(ValueError, match="increasing indices"):
        mech.release_position((np.array([3, 2]), np.array([1, 1])), KeyedRng(SECRET, "bad"))
    with pytest.raises(ValueError, match="increasing indices"):
        mech.best_position((np.array([1]), np.array([0])))
