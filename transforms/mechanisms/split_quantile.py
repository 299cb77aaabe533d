"""The q-quantile as a position that can split the persons tied in one grid cell: the trimmed
mean's thresholds.

:class:`~.exponential_quantile.ExponentialQuantile` releases a grid point; every value rounded
to that point is on neither side of it. A trimmed mean that keeps the persons between two such
points keeps every person tied with a threshold, so on integer data (row counts per person) it
cannot drop exactly a share τ of the persons: an error floor more ε does not remove
(``docs/trimmed_mean.md`` §5). Here a candidate is a **position** (k, j): grid point k and a split
j ∈ {0, …, J} of its cell (J = 2^split_bits, public), read as "⌊j·c_k/J⌋ of the c_k persons at
k lie below the position". With n persons and d_k the number whose grid index is below k,

    B(k, j) = d_k + ⌊j·c_k/J⌋      (persons below the position)
    u(k, j) = −|d·B(k, j) − a·n|   for q = a/d in lowest terms,

which is 0 where the position splits the persons q : (1 − q). The (G + 1)·(J + 1) positions are
public (G = 2^grid_bits grid cells); the release picks one with probability ∝ exp(ε·u/(2Δ)),
Δ = max(a, d − a) (McSherry & Talwar 2007; Dwork & Roth 2014, Thm. 3.10).

**Guarantee: pure ε-DP, add/remove one person** (one value per person), and ε-bounded-range,
hence ε²/8-zCDP (``docs/accounting.md``). Sensitivity: adding one person moves n by one and
every B(k, j) by 0 or 1 — a person below cell k adds one to d_k; one in cell k moves
⌊j·c/J⌋ to ⌊j·(c + 1)/J⌋, which is the same or one more because j/J ≤ 1; one above moves
nothing — so d·B − a·n moves by d − a or −a, at most Δ. Derivation and the brute-force checks
(every small neighbouring pair, the exact law of the draws): ``docs/trimmed_mean.md`` §2–3,
``tests/mechanisms/test_split_quantile.py``.

Sampling is exact and reads only the grid histogram. B is nondecreasing along the positions in
order, so the positions with one value β of B form one run, of exponent
q = factor·(|d·β − a·n| − best) (factor = ε/(2Δ), best the least |d·β − a·n| over the values B
takes). The positions whose exponent is at most T (the sampler's tail: 80 nats, raised by the
positions' bits past 48, :func:`~.exponential.tail_for`) are cut into **blocks** of consecutive
runs on one side of a·n/d, each spanning at most ``BLOCK_NATS`` of exponent — one run per block
at large ε, many at small ε, so there are at most about 2T/``BLOCK_NATS`` + 2 of them whatever
ε, n or J — and the rest, the positions before and after them, are one **far** block.
:func:`~.exponential.sample_near_or_far` draws a block by its envelope weight
length·e^(−floor) (floor: the exponent at its end nearer a·n/d, or 0) or a far position by its
own weight (by rejection from e^(−T)); a uniform position of a drawn block is accepted with
probability e^(−(q − floor)), else the draw starts again. That is rejection sampling under an
envelope that is at least the target everywhere, so each position is drawn with probability
exactly ∝ e^(−q); a round is accepted with probability ≥ e^(−1/2). Each block boundary costs two
binary searches.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from .accounting import PureDP
from .checks import Rational
from .discrete import bernoulli_exp_neg
from .exponential import exponent_factor, sample_near_or_far, tail_for
from .exponential_quantile import DEFAULT_GRID_BITS, ExponentialQuantile, GridHistogram
from .rng import KeyedRng

SPLIT_BITS = 12
"""J = 2^12 splits per grid cell: a threshold inside a cell of c tied persons lands within
c/4096 persons of any rank (docs/trimmed_mean.md §5)."""
MAX_SPLIT_BITS = 24
BLOCK_NATS = Fraction(1, 2)
"""The most a near block's exponents differ by: a uniform position of a block is accepted with
probability ≥ e^(−1/2), so a draw takes fewer than 1.7 rounds on average."""

Position = tuple[int, int]
"""(grid index k, split j): ⌊j·c_k/J⌋ of the persons at grid point k lie below it."""


class Ranks:
    """A grid histogram as the function B(f) of the position index f = k·(J + 1) + j.

    Held as Python lists (binary search by :mod:`bisect`): a release asks for a few thousand
    values of B at most, and a NumPy call per value costs more than the search."""

    def __init__(self, histogram: GridHistogram, cells: int, split_bits: int) -> None:
        self.idx: list[int] = np.asarray(histogram[0]).tolist()
        self.counts: list[int] = np.asarray(histogram[1]).tolist()
        # values below data index i, and (from index 1) up to and including index i − 1
        self.below_at: list[int] = [0, *itertools.accumulate(self.counts)]
        self.n: int = self.below_at[-1]
        self.bits: int = split_bits
        self.width = (1 << split_bits) + 1  # J + 1 splits per grid point
        self.size = (cells + 1) * self.width

    def below(self, f: int) -> int:
        """B(f): persons below position f."""
        k, j = divmod(f, self.width)
        i = bisect.bisect_left(self.idx, k)
        c = self.counts[i] if i < len(self.idx) and self.idx[i] == k else 0
        return self.below_at[i] + ((j * c) >> self.bits)

    def first_reaching(self, beta: int) -> int:
        """The first position f with B(f) ≥ beta (``size`` if none): where beta's run starts."""
        if beta <= 0:
            return 0
        if beta > self.n:
            return self.size
        # the first data index whose persons up to and including it reach beta; B reaches it
        # inside that cell, at the least j with d + ⌊j·c/J⌋ ≥ beta, j = ⌈m·J/c⌉ (1 ≤ m ≤ c)
        i = bisect.bisect_left(self.below_at, beta, 1) - 1
        c, m = self.counts[i], beta - self.below_at[i]
        return self.idx[i] * self.width + (-((-m << self.bits) // c))


@dataclass(frozen=True)
class _Envelope:
    """What a draw samples: near blocks of positions, each with a floor under its positions'
    exponents that is within ``BLOCK_NATS`` of every one of them, and the far positions (before
    ``start`` and from ``stop`` on), whose exponents all exceed ``tail``.

    A position f's exponent is q(f) = factor·(|d·B(f) − a·n| − best) ≥ 0, best the least
    |d·β − a·n| over the values β that B takes."""

    ranks: Ranks
    a: int
    d: int
    factor: Fraction
    best: int
    tail: Fraction
    start: int
    stop: int
    firsts: list[int]
    lengths: list[int]
    floors: list[Fraction]

    @property
    def far(self) -> int:
        return self.start + (self.ranks.size - self.stop)

    def far_position(self, u: int) -> int:
        """The u-th far position, u < :attr:`far`."""
        return u if u < self.start else self.stop + (u - self.start)

    def exponent(self, f: int) -> Fraction:
        return self.factor * (abs(self.d * self.ranks.below(f) - self.a * self.ranks.n) - self.best)


@dataclass(frozen=True)
class SplitQuantile:
    """The q-quantile as a position (grid point, split of its cell) on 2^grid_bits cells.

    Guarantee: pure ε-DP (and ε²/8-zCDP) for adding or removing one person's value; proof in the
    module docstring (McSherry & Talwar 2007), derivation ``docs/trimmed_mean.md`` §3.
    """

    q: Fraction
    epsilon: Fraction
    split_bits: int
    grid: ExponentialQuantile = field(repr=False)  # the grid, its rounding and histogram checks

    def __init__(
        self,
        q: Rational,
        lower: float,
        upper: float,
        epsilon: Rational,
        *,
        grid_bits: int = DEFAULT_GRID_BITS,
        split_bits: int = SPLIT_BITS,
    ) -> None:
        grid = ExponentialQuantile(q, lower, upper, epsilon, grid_bits)
        if isinstance(split_bits, bool) or not isinstance(split_bits, int):
            raise TypeError(f"split_bits must be an int, got {split_bits!r}")
        if not 0 <= split_bits <= MAX_SPLIT_BITS:
            raise ValueError(f"split_bits must be in [0, {MAX_SPLIT_BITS}], got {split_bits}")
        for name, value in (("q", grid.q), ("epsilon", grid.epsilon), ("split_bits", split_bits),
                            ("grid", grid)):  # fmt: skip
            object.__setattr__(self, name, value)

    @property
    def guarantee(self) -> PureDP:
        return PureDP(self.epsilon)

    @property
    def sensitivity(self) -> int:
        return max(self.q.numerator, self.q.denominator - self.q.numerator)

    @property
    def positions(self) -> int:
        """(G + 1)·(J + 1): the number of candidates, for the rank-error bound."""
        return (self.grid.cells + 1) * ((1 << self.split_bits) + 1)

    def ranks(self, histogram: GridHistogram) -> Ranks:
        """The histogram, checked, as B(f): one serves every draw from it (both of a trimmed
        mean's thresholds share the grid and J)."""
        self.grid.check_histogram(histogram)
        return Ranks(histogram, self.grid.cells, self.split_bits)

    def _best(self, ranks: Ranks) -> tuple[int, int]:
        """(the best |d·β − a·n| over the values β of B, the least such β)."""
        a, d = self.q.numerator, self.q.denominator
        f = ranks.first_reaching(-((-a * ranks.n) // d))  # the first β ≥ a·n/d
        betas = []
        if f > 0:
            betas.append(ranks.below(f - 1))  # the last β below it
        if f < ranks.size:
            betas.append(ranks.below(f))
        return min((abs(d * b - a * ranks.n), b) for b in betas)

    def _envelope(self, ranks: Ranks) -> _Envelope:
        """The near blocks and far positions of a draw (module docstring, "Sampling")."""
        a, d, n = self.q.numerator, self.q.denominator, ranks.n
        best, _ = self._best(ranks)
        factor = exponent_factor(self.epsilon, self.sensitivity, False)  # type: ignore[arg-type]  # exact rationals are accepted
        tail = tail_for(ranks.size)
        reach = best + math.floor(tail / factor)  # near: |d·β − a·n| − best ≤ ⌊T/factor⌋
        start = ranks.first_reaching(-((reach - a * n) // d))  # β ≥ (a·n − reach)/d
        stop = ranks.first_reaching((a * n + reach) // d + 1)  # β ≤ (a·n + reach)/d
        # A block is up to `width` consecutive values of B on one side of a·n/d, where |d·β − a·n|
        # is monotone: its floor is the exponent at the end nearer a·n/d (at least 0, the least
        # exponent of any position), and its other end is at most factor·d·(width − 1) ≤
        # BLOCK_NATS above it.
        split = (a * n) // d  # β ≤ split: d·β ≤ a·n
        width = max(1, math.floor(BLOCK_NATS / (factor * d)))
        firsts: list[int] = []
        lengths: list[int] = []
        floors: list[Fraction] = []
        f = start
        while f < stop:
            beta = ranks.below(f)
            last = min(beta + width - 1, split) if beta <= split else beta + width - 1
            nearest = last if beta <= split else beta
            end = min(ranks.first_reaching(last + 1), stop)
            firsts.append(f)
            lengths.append(end - f)
            floors.append(max(Fraction(0), factor * (abs(d * nearest - a * n) - best)))
            f = end
        return _Envelope(ranks, a, d, factor, best, tail, start, stop, firsts, lengths, floors)

    def release_position(self, histogram: GridHistogram, rng: KeyedRng) -> Position:
        """One ε-DP draw of the position from the values' grid histogram (:meth:`draw`)."""
        return self.draw(self.ranks(histogram), rng)

    def draw(self, ranks: Ranks, rng: KeyedRng) -> Position:
        """One ε-DP draw of the position from :meth:`ranks` of the histogram: a block by its
        envelope weight (length·e^(−floor)), or a far position by its exact weight
        (:func:`~.exponential.sample_near_or_far`); a uniform position of a block is accepted with
        probability e^(−(q − floor)), else the draw starts again. Each position f is then drawn
        with probability ∝ e^(−q(f)), exactly (rejection sampling under an envelope ≥ it)."""
        env = self._envelope(ranks)
        near = len(env.floors)
        while True:
            t = sample_near_or_far(
                rng,
                env.floors,
                env.lengths,
                env.far,
                far_exponent=lambda u: env.exponent(env.far_position(u)),
                tail=env.tail,
            )
            if t >= near:
                f = env.far_position(t - near)
                break
            f = env.firsts[t] + rng.randbelow(env.lengths[t])
            excess = env.exponent(f) - env.floors[t]
            if excess == 0 or bernoulli_exp_neg(rng, excess):
                break
        return divmod(f, env.ranks.width)

    def best_position(self, histogram: GridHistogram) -> Position:
        """The first position of the best score: the quantile without noise (test hooks)."""
        return self.best(self.ranks(histogram))

    def best(self, ranks: Ranks) -> Position:
        """:meth:`best_position` from :meth:`ranks` of the histogram."""
        _, beta = self._best(ranks)
        return divmod(ranks.first_reaching(beta), ranks.width)
