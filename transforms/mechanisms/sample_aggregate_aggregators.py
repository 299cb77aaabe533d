"""The aggregators of sample-and-aggregate: a clipped mean with additive noise, a rank median.

:class:`ClippedMean` (each chunk answer clipped to its range, mean over the k chunks, Laplace
noise of L1 sensitivity Σ(u − l)/k for pure ε, or Gaussian noise of L2 sensitivity √Σ(u − l)²/k
for ρ-zCDP) and :class:`RankMedian` (the exponential mechanism on a grid of the range, per
coordinate; pure ε, or ρ-zCDP as bounded range). Guarantees are for add/remove one person given
chunks by person, which changes one of the k answers (``docs/sample_aggregate.md``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from .accounting import bounded_range_epsilon_within_rho, float_down, float_up, sqrt_up
from .additive import GaussianMechanism, LaplaceMechanism
from .checks import as_fraction, positive
from .chunk_functions import (
    CHUNKS_LIMIT,
    DEFAULT_MEDIAN_GRID,
    MAX_DIMENSION,
    MAX_MEDIAN_GRID,
    Answer,
)
from .exponential import ExponentialMechanism, sample_exp_weights
from .rng import KeyedRng


def _check_answers(answers: Sequence[Answer], chunks: int, dimension: int) -> None:
    if len(answers) != chunks:
        raise ValueError(
            f"expected one answer per chunk ({chunks}), got {len(answers)}; every chunk, empty "
            "or not, must contribute exactly one answer"
        )
    for a in answers:
        if len(a) != dimension:
            raise ValueError(
                f"expected answers of dimension {dimension}, got one of {len(a)}; "
                "pass answers through sanitize_answer first"
            )


def _clip(v: float, lo: float, hi: float) -> float:
    if not math.isfinite(v):
        raise ValueError(f"answer {v!r} is not finite; pass answers through sanitize_answer")
    return min(hi, max(lo, v))


def _exact_sum(values: Sequence[float]) -> Fraction:
    """Σ values exactly: floats are n/2^e, so every denominator divides the largest."""
    ratios = [v.as_integer_ratio() for v in values]
    den = max((d for _, d in ratios), default=1)
    return Fraction(sum(n * (den // d) for n, d in ratios), den)


def check_bounds(bounds: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    out = []
    for j, pair in enumerate(bounds):
        if len(pair) != 2:
            raise ValueError(f"range {j} must be a pair (lower, upper), got {pair!r}")
        lo, hi = (as_fraction(x, f"range {j}") for x in pair)
        if not lo < hi:
            raise ValueError(
                f"range {j} must satisfy lower < upper, got [{pair[0]}, {pair[1]}]; it bounds "
                "the function's answer on one chunk"
            )
        out.append((float(pair[0]), float(pair[1])))
    if not 1 <= len(out) <= MAX_DIMENSION:
        raise ValueError(f"need 1 to {MAX_DIMENSION} ranges (one per coordinate), got {len(out)}")
    return tuple(out)


def check_chunks(chunks: int) -> None:
    if isinstance(chunks, bool) or not isinstance(chunks, int):
        raise TypeError(f"chunks must be an int, got {type(chunks).__name__} {chunks!r}")
    if not 1 <= chunks <= CHUNKS_LIMIT:
        raise ValueError(
            f"chunks must lie in [1, {CHUNKS_LIMIT}], got {chunks}; more chunks means less "
            "noise but fewer persons per chunk"
        )


SHARE_HINT = "every query needs a budget share"


@dataclass(frozen=True)
class ClippedMean:
    """Mean of the k chunk answers clipped to the ranges, plus Laplace noise (or, given ``rho``
    instead of ``epsilon``, Gaussian noise).

    Guarantee, given chunks by person (module docstring), for add/remove one person: one clipped
    answer moves by at most u_j − l_j per coordinate, so the mean vector moves by at most
    Δ₁ = Σ_j (u_j − l_j)/k in L1 and Δ₂ = √(Σ_j (u_j − l_j)²)/k in L2.

    * ``epsilon``: pure ε-DP — :class:`~.additive.LaplaceMechanism` with Δ₁ (rounded up to a
      float). Proof: seed ``local-sensitivity-ptr-saa.txt``, "Sample and Aggregate", Definition
      20, and DMNS06 for the L1 vector form. For d = 1 the noise is Laplace((u − l)/(kε)); for
      vectors each coordinate gets Laplace(Δ₁/ε), which equals splitting ε over coordinates in
      proportion to their range widths.
    * ``rho``: ρ-zCDP — :class:`~.additive.GaussianMechanism` with Δ₂ (rounded up), Bun & Steinke
      2016, Prop. 1.6 (its discrete form: CKS 2020). Each coordinate's σ is Δ₂/√(2ρ); Laplace at
      the ε with ε²/2 = ρ has standard deviation Δ₁/√ρ, √2·Δ₁/Δ₂ times more: √2 for d = 1, √(2d)
      for d equal widths — which is why a ρ share uses Gaussian noise (``docs/sample_aggregate.md``
      §3).
    """

    bounds: tuple[tuple[float, float], ...]
    chunks: int
    epsilon: float | None
    rho: float | None = None
    mechanism: LaplaceMechanism | GaussianMechanism = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", check_bounds(self.bounds))
        check_chunks(self.chunks)
        widths = [Fraction(hi) - Fraction(lo) for lo, hi in self.bounds]
        d = len(self.bounds)
        if (self.epsilon is None) == (self.rho is None):
            raise ValueError(
                "give exactly one budget for the clipped mean: epsilon (Laplace noise, pure ε) "
                f"or rho (Gaussian noise, ρ-zCDP), got epsilon={self.epsilon!r}, rho={self.rho!r}"
            )
        mechanism: LaplaceMechanism | GaussianMechanism
        try:
            if self.rho is not None:
                positive(self.rho, "rho", SHARE_HINT)
                l2 = sqrt_up(sum((w * w for w in widths), Fraction(0)) / self.chunks**2)
                mechanism = GaussianMechanism(l2, self.rho, dimension=d)
            else:
                positive(self.epsilon, "epsilon", SHARE_HINT)  # type: ignore[arg-type]
                l1 = float_up(sum(widths, Fraction(0)) / self.chunks)  # exact, rounded up
                mechanism = LaplaceMechanism(l1, self.epsilon, dimension=d)  # type: ignore[arg-type]
        except OverflowError as e:  # planning only: public ranges and budget, never data
            raise ValueError(
                "the noise's scale for these ranges, chunks and budget overflows a float; "
                "narrow the range (it should bound a chunk's answer tightly) or raise the budget"
            ) from e
        object.__setattr__(self, "mechanism", mechanism)

    @property
    def noise_std(self) -> float:
        """The public standard deviation of the noise on each coordinate."""
        return self.mechanism.std

    def statistic(self, answers: Sequence[Answer]) -> tuple[Fraction, ...]:
        """The exact clipped mean per coordinate (a rational: no float rounding before noise)."""
        _check_answers(answers, self.chunks, len(self.bounds))
        return tuple(
            _exact_sum([_clip(a[j], lo, hi) for a in answers]) / self.chunks
            for j, (lo, hi) in enumerate(self.bounds)
        )

    def release(self, answers: Sequence[Answer], rng: KeyedRng) -> tuple[float, ...]:
        """The noisy clipped mean per coordinate; all draws from ``rng``."""
        return tuple(self.mechanism.release_vector(list(self.statistic(answers)), rng))


@lru_cache(maxsize=4096)  # audits release the same answers many times
def _grid_index(a: float, lo: float, hi: float, grid: int) -> int:
    """round((a − lo)/(hi − lo)·G), ties to even, exactly: the grid point nearest a clipped a."""
    c = Fraction(_clip(a, lo, hi))
    return round((c - Fraction(lo)) * grid / (Fraction(hi) - Fraction(lo)))


@lru_cache(maxsize=4096)
def _grid_value(j: int, lo: float, hi: float, grid: int) -> float:
    """l + j·(u − l)/G computed exactly, correctly rounded to a float."""
    return float(Fraction(lo) + (Fraction(hi) - Fraction(lo)) * j / grid)


@lru_cache(maxsize=64)
def median_groups(
    indices: tuple[int, ...], grid: int
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The grid points 0..G grouped into runs of equal rank score, for answers at ``indices``.

    Returns (scores, sizes, starts): run r covers points starts[r] … starts[r] + sizes[r] − 1,
    each with score −max(#{i: indices_i < j}, #{i: indices_i > j}). Runs: the gaps between
    distinct answer points and the points themselves, at most 2m + 1 for m distinct points.
    """
    k = len(indices)
    values, counts = np.unique(np.asarray(indices, dtype=np.int64), return_counts=True)
    scores: list[int] = []
    sizes: list[int] = []
    starts: list[int] = []

    def run(start: int, size: int, below: int, above: int) -> None:
        if size > 0:
            scores.append(-max(below, above))
            sizes.append(size)
            starts.append(start)

    below, prev = 0, -1
    for v, c in zip(values.tolist(), counts.tolist(), strict=True):
        run(prev + 1, v - prev - 1, below, k - below)  # the open gap before v
        run(v, 1, below, k - below - c)  # the point v itself
        below += c
        prev = v
    run(prev + 1, grid - prev, k, 0)  # the gap after the last point
    return tuple(scores), tuple(sizes), tuple(starts)


@dataclass(frozen=True)
class RankMedian:
    """A DP median of the k chunk answers: the exponential mechanism on a grid of the range.

    Candidates are the G + 1 public grid points y_j = l + j·(u − l)/G (G = ``grid``). Each answer
    is clipped and rounded to its nearest grid point, and y_j scores
    u(y_j) = −max(#{answers below y_j}, #{answers above y_j}); y_j is released with probability
    ∝ exp(ε·u(y_j)/(2d)) for a d-dimensional answer (one selection per coordinate).

    Guarantee, for add/remove one person given chunks by person: that changes one answer, hence
    each count by at most 1 and every score by at most 1, so each coordinate is the exponential
    mechanism with ε_c and Δ = 1 (McSherry & Talwar 2007; Dwork & Roth 2014, Thm. 3.10). The
    candidate set depends only on the public range and G. Derivation and the brute-force check:
    ``docs/sample_aggregate.md``.

    * ``epsilon``: pure ε-DP, ε_c = ε/d; d coordinates compose to ε.
    * ``rho``: ρ-zCDP. Each coordinate's selection is ε_c-bounded-range (its privacy loss spans at
      most ε_c), hence ε_c²/8-zCDP (Cesar & Rogers 2021; ``docs/accounting.md``, "Bounded-range
      mechanisms"), and d of them compose to d·ε_c²/8 ≤ ρ (:attr:`total_epsilon`) — for d = 1
      twice the ε of the ε²/2 rule, for d coordinates 2√d times the ε/d of splitting that ε.
      Brute force: ``tests/mechanisms/test_bounded_range.py``.

    Sampling is exact (:func:`~.exponential.sample_exp_weights`, runs of equal score as
    multiplicities, then a uniform point of the run).

    Accuracy: the output lands among the answers of rank k/2 ± t with probability at least
    1 − (G + 1)·exp(−ε_c·t/2) per coordinate, so it needs k ≳ 4·ln(G)/ε_c chunks but only a range
    that contains the answers, however wide.
    """

    bounds: tuple[tuple[float, float], ...]
    chunks: int
    epsilon: float | None
    grid: int = DEFAULT_MEDIAN_GRID
    rho: float | None = None
    mechanism: ExponentialMechanism = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", check_bounds(self.bounds))
        check_chunks(self.chunks)
        g = self.grid
        if isinstance(g, bool) or not isinstance(g, int) or not 1 <= g <= MAX_MEDIAN_GRID:
            raise ValueError(f"grid must be an int in [1, 2^40] (cells of the range), got {g!r}")
        if (self.epsilon is None) == (self.rho is None):
            raise ValueError(
                "give exactly one budget for the rank median: epsilon (pure ε) or rho (ρ-zCDP, "
                f"bounded range), got epsilon={self.epsilon!r}, rho={self.rho!r}"
            )
        # Weights exp(E·u/(2d)): ε_c = E/d per coordinate with Δ = 1, exactly (rationals).
        object.__setattr__(
            self, "mechanism", ExponentialMechanism(self.total_epsilon, len(self.bounds))
        )

    @property
    def total_epsilon(self) -> float:
        """E = d·ε_c: the given ε, or under ρ the largest float with E²/(8d) ≤ ρ — so that
        d·(E/d)²/8 ≤ ρ holds exactly for the E/d each coordinate runs at."""
        if self.rho is None:
            eps = positive(self.epsilon, "epsilon", SHARE_HINT)  # type: ignore[arg-type]
            return float_down(Fraction(eps))  # a Fraction share must not round up
        d = len(self.bounds)
        return bounded_range_epsilon_within_rho(d * positive(self.rho, "rho", SHARE_HINT))

    @property
    def coordinate_epsilon(self) -> Fraction:
        """ε_c = E/d, each coordinate's selection (exact)."""
        return Fraction(self.total_epsilon) / len(self.bounds)

    @property
    def noise_std(self) -> None:
        """No additive noise: the exponential mechanism's error has no standard deviation."""
        return None

    def statistic(self, answers: Sequence[Answer]) -> tuple[float, ...]:
        """The exact median of the clipped answers per coordinate (mean of the middle two for
        even k): what the release estimates; released only with ``noise=False`` in tests."""
        _check_answers(answers, self.chunks, len(self.bounds))
        return tuple(
            float(statistics.median(_clip(a[j], lo, hi) for a in answers))
            for j, (lo, hi) in enumerate(self.bounds)
        )

    def grid_point(self, j: int, coordinate: int = 0) -> float:
        """y_j = l + j·(u − l)/G of a coordinate's range, correctly rounded to a float."""
        lo, hi = self.bounds[coordinate]
        return _grid_value(j, lo, hi, self.grid)

    def scores(self, answers: Sequence[Answer], coordinate: int = 0) -> tuple[Any, ...]:
        """(scores, sizes, starts) of :func:`median_groups` for one coordinate."""
        _check_answers(answers, self.chunks, len(self.bounds))
        lo, hi = self.bounds[coordinate]
        indices = tuple(sorted(_grid_index(a[coordinate], lo, hi, self.grid) for a in answers))
        return median_groups(indices, self.grid)

    def release(self, answers: Sequence[Answer], rng: KeyedRng) -> tuple[float, ...]:
        """One grid point per coordinate; all draws from ``rng``, coordinates in order."""
        out = []
        for j in range(len(self.bounds)):
            scores, sizes, starts = self.scores(answers, j)
            run = sample_exp_weights(rng, self.mechanism.exponents(scores), sizes)
            out.append(self.grid_point(starts[run] + rng.randbelow(sizes[run]), j))
        return tuple(out)


AggregatorMechanism = ClippedMean | RankMedian
