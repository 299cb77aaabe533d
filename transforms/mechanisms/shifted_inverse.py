"""The shifted inverse sensitivity mechanism for monotone statistics with no contribution bound.

Fang, Dong & Yi (CCS 2022), as presented in seed ``shifted-inverse-down-sensitivity.txt``: for a
statistic f that never decreases when a person is added (a *monotone* f: row counts, sums of
non-negative values, maxima, k-th largest values, distinct counts), release a value y from a public
grid Y with

    P[ f(x) − DS_f^{2τ}(x) ≤ M(x) ≤ f'(x) ] ≥ 1 − β,

f'(x) being f(x) rounded up to the grid (below), and DS_f^{2τ}(x) the *down sensitivity*: how
much removing the 2τ persons that matter most lowers f. No bound on any person's contribution is
needed; the error is what the heaviest few persons change, not what a worst-case person could.

Inputs. Every statistic reaches this module as its *down values* g(j) = f(x, j), j = 0 … C − 1:
f after removing the j persons whose removal lowers it most (non-increasing in j). They are
computed, without noise, by :mod:`.shifted_inverse_stats` (sums: total minus the top-j per-person
totals; selection; distinct counts). Only C = 2τ + 2 of them matter, because the losses are
clamped at C (see below), so the Beam side ships a top-K list, not the data.

The grid. Y = {y_0 = 0 < y_1 < … < y_{N−1} = D} is public
(:class:`~.shifted_inverse_grid.OutputGrid`): linear
{0, d, 2d, …, D}, or geometric (``"log"``) for statistics spanning orders of magnitude. The value
released is that of f'(x) = min(D, ⌈f(x)⌉_Y), f rounded *up* to the grid and capped at D (the
rounding of FDY22's artifact). Rounding and capping are non-decreasing maps, so f' is monotone
whenever f is, and every lemma of the seed applies to f' unchanged. With c_j the grid index of
f'(x, j), the seed's losses (Eq. 4 and footnote 4, Eq. A) at y_k are

    ℓ(x, y_k) = #{j : c_j > k},    ℓ̄(x, y_k) = #{j : c_j ≥ k},

clamped at C by counting j < C only. min(·, C) is 1-Lipschitz, so the clamped losses keep
sensitivity 1 (seed Proposition 3), and so does ℓ* = max(ℓ − τ, τ − ℓ̄) (Eq. B).

Searches (``ShiftedInverseParams.search``):

* ``"exponential"`` — the exponential mechanism with score −ℓ*, τ = ⌈(2/ε) ln(|Y|/β)⌉: pure ε-DP
  (seed Theorem 4). ℓ* is constant on at most 2C + 1 runs of grid indices, so the sampler draws a
  run with weight (run length)·exp(−ε·ℓ*/2) exactly with
  :func:`~.exponential.sample_exp_weights`, then a uniform index inside it; Y is never
  enumerated, so |Y| = 2^40 costs what |Y| = 100 does.
* ``"binary"`` — the seed's noisy binary search on ℓ with Laplace noise: pure ε-DP with
  σ = T/ε, or ρ-zCDP with σ = √(T/(2ρ)), τ = σ·ln(T/β) (seed Theorem 5), T = ⌈log₂|Y|⌉ steps;
  or, for ρ-zCDP, Gaussian noise (seed footnote 6). Noise is exact discrete Laplace / Gaussian.

Quantiles (:func:`shifted_inverse_quantile`) release a row count first, then a selection.
The derivations that are not in the seed (grid rounding, clamping, the run decomposition, the
binary-search start, the step count) are in ``docs/shifted_inverse.md``, with brute-force tests in
``tests/mechanisms/test_shifted_inverse.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from .accounting import ZCDP, PureDP
from .checks import Rational, as_fraction, positive
from .discrete import discrete_gaussian, discrete_laplace
from .exponential import sample_exp_weights
from .rng import KeyedRng
from .shifted_inverse_grid import GridKind, OutputGrid
from .shifted_inverse_loss import down_indices, loss_at, loss_runs
from .shifted_inverse_stats import kth_largest_down_values, quantile_k, sum_down_values

Search = Literal["exponential", "binary"]
BinaryNoise = Literal["laplace", "gaussian"]

_SQRT_BITS = 64  # σ = √(T/(2ρ)) is rounded up to a multiple of 2^−64


def _typed_budget(budget: object, search: str, noise: str) -> PureDP | ZCDP:
    """The budget, checked: PureDP(ε) or ZCDP(ρ), positive, and one the search can spend."""
    if not isinstance(budget, PureDP | ZCDP):
        raise TypeError(
            f"budget must be PureDP(epsilon) or ZCDP(rho), got {type(budget).__name__}: the "
            "exponential search is pure ε-DP, the binary search pure ε-DP or ρ-zCDP"
        )
    hint = "every query needs a positive share of the budget"
    if isinstance(budget, ZCDP) and search == "exponential":
        raise ValueError(
            "the exponential search is pure ε-DP: give PureDP(epsilon), or use search='binary' "
            "for a ρ-zCDP budget"
        )
    if noise == "gaussian" and isinstance(budget, PureDP):
        raise ValueError("noise='gaussian' gives ρ-zCDP, not pure DP: give ZCDP(rho) instead")
    if isinstance(budget, PureDP):
        positive(budget.epsilon, "epsilon", hint)
    else:
        positive(budget.rho, "rho", hint)
    return budget


def _ceil_sqrt(x: Fraction) -> Fraction:
    """A dyadic rational s ≥ √x with s − √x < 2^−64 (rounded up: more noise is the safe side)."""
    scaled = math.ceil(x * 4**_SQRT_BITS)
    r = math.isqrt(scaled)
    if r * r < scaled:
        r += 1
    return Fraction(r, 2**_SQRT_BITS)


@dataclass(frozen=True, kw_only=True)
class ShiftedInverseParams:
    """Public parameters of one shifted-inverse release, validated at construction.

    Guarantee: pure ε-DP (``budget=PureDP(ε)``; ``search="exponential"`` or ``"binary"``) or
    ρ-zCDP (``budget=ZCDP(ρ)``; ``search="binary"``) for adding or removing all rows of one
    person, for any monotone statistic whose down values are computed as
    :mod:`.shifted_inverse_stats` does. Proofs: seed
    ``shifted-inverse-down-sensitivity.txt`` (Proposition 3, Theorems 4–5, footnotes 4 and 6) and
    ``docs/shifted_inverse.md`` (grid, clamp, runs, binary-search start and step count).

    Attributes:
      upper: D, the largest releasable value (larger statistics are released as at most D).
      resolution: d, the grid step (near zero for a log grid).
      beta: the failure probability β of the accuracy guarantee (utility only, not privacy).
      budget: ``PureDP(ε)`` or ``ZCDP(ρ)`` — one typed value, checked when the params are made.
      search: ``"exponential"`` (pure ε) or ``"binary"`` (pure ε or ρ-zCDP).
      grid: ``"linear"`` or ``"log"``; ``growth`` is the log grid's ratio (> 1).
      noise: binary search under ρ-zCDP only: ``"laplace"`` (the seed) or ``"gaussian"``.
    """

    upper: Rational
    resolution: Rational
    beta: Rational = Fraction(1, 10)
    budget: PureDP | ZCDP
    search: Search = "exponential"
    grid: GridKind = "linear"
    growth: Rational | None = None
    noise: BinaryNoise = "laplace"
    output_grid: OutputGrid = field(init=False, repr=False)
    tau: int = field(init=False)
    noise_scale: Fraction = field(init=False, repr=False)  # binary: Laplace σ or Gaussian σ²
    steps: int = field(init=False, repr=False)  # binary search steps T; 0 otherwise
    _exponents: dict[int, Fraction] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        beta = as_fraction(self.beta, "beta")
        if not 0 < beta < 1:
            raise ValueError(f"beta must lie in (0, 1), got {self.beta!r}; 0.1 is usual")
        if self.search not in ("exponential", "binary"):
            raise ValueError(f"search must be 'exponential' or 'binary', got {self.search!r}")
        if self.noise not in ("laplace", "gaussian"):
            raise ValueError(f"noise must be 'laplace' or 'gaussian', got {self.noise!r}")
        budget = _typed_budget(self.budget, self.search, self.noise)
        grid = OutputGrid(
            as_fraction(self.upper, "upper"),
            as_fraction(self.resolution, "resolution"),
            self.grid,
            None if self.growth is None else as_fraction(self.growth, "growth"),
        )
        n = grid.size
        tau, scale, steps = 0, Fraction(0), 0
        if isinstance(budget, PureDP) and self.search == "exponential":
            eps = budget.epsilon
            tau = math.ceil(2 / float(eps) * (math.log(n) - math.log(float(beta))))
        else:
            steps = (n - 1).bit_length()  # ⌈log₂ N⌉: the most iterations the search can run
            if isinstance(budget, PureDP):  # each step is (1/σ)-DP; T steps compose to ε
                scale = steps / budget.epsilon
            else:  # each step is 1/(2σ²)-zCDP (Laplace via BS16 Prop. 1.4; Gaussian: CKS 2020)
                sigma2 = steps / (2 * budget.rho)
                scale = _ceil_sqrt(sigma2) if self.noise == "laplace" else sigma2
            s = math.sqrt(float(scale)) if self.noise == "gaussian" else float(scale)
            if self.noise == "laplace":  # P[|Z| > τ] ≤ exp(−τ/σ) per step (docs)
                tau = math.ceil(s * math.log(steps / float(beta)))
            else:  # P[|Z| > τ] ≤ 2·exp(−τ²/(2σ²)) per step
                tau = math.ceil(s * math.sqrt(2 * math.log(2 * steps / float(beta))))
        object.__setattr__(self, "output_grid", grid)
        object.__setattr__(self, "tau", max(tau, 1))
        object.__setattr__(self, "noise_scale", scale)
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "_exponents", {})

    @property
    def loss_cap(self) -> int:
        """C = 2τ + 2: losses are clamped at C, so only f(x, j) for j < C matter."""
        return 2 * self.tau + 2

    @property
    def down_values_needed(self) -> int:
        """How many down values f(x, 0 … C − 1) a release reads: C."""
        return self.loss_cap

    @property
    def top_k(self) -> int:
        """How many of the largest per-person contributions a sum needs: C − 1."""
        return self.loss_cap - 1

    @property
    def sigma(self) -> float:
        """The binary search's noise σ (Laplace scale or Gaussian standard deviation); 0 for the
        exponential search."""
        if self.noise == "gaussian":
            return math.sqrt(float(self.noise_scale))
        return float(self.noise_scale)

    @property
    def guarantee(self) -> PureDP | ZCDP:
        return self.budget

    def exponent(self, shifted_loss: int) -> Fraction:
        """ε·ℓ*/2, the exponential search's exponent for score −ℓ* (sensitivity 1), memoised:
        Fraction arithmetic dominated the cost of a draw."""
        q = self._exponents.get(shifted_loss)
        if q is None:
            if not isinstance(self.budget, PureDP):
                raise ValueError("the exponential search's exponents need a pure ε budget")
            q = self.budget.epsilon * shifted_loss / 2
            self._exponents[shifted_loss] = q
        return q

    def split(self, parts: int) -> ShiftedInverseParams:
        """The same release with 1/parts of the budget: for per-partition releases where one
        person reaches at most ``parts`` public partitions (basic composition over them)."""
        if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
            raise ValueError(f"parts must be a positive integer, got {parts!r}")
        if isinstance(self.budget, PureDP):
            return replace(self, budget=PureDP(self.budget.epsilon / parts))
        return replace(self, budget=ZCDP(self.budget.rho / parts))

    def to_manifest(self) -> dict[str, Any]:
        """Public facts only: the mechanism, its guarantee and its public parameters."""
        out: dict[str, Any] = {
            "mechanism": f"shifted_inverse_{self.search}",
            "guarantee": self.guarantee.to_manifest(),
            "neighbouring": "add/remove one person",
            "tau": self.tau,
            "loss_cap": self.loss_cap,
            "grid": self.grid,
            "grid_size": self.output_grid.size,
            "upper": float(self.output_grid.upper),
            "resolution": float(self.output_grid.resolution),
            "beta": float(as_fraction(self.beta, "beta")),
        }
        if self.grid == "log" and self.output_grid.growth is not None:
            out["growth"] = float(self.output_grid.growth)
        if self.search == "binary":
            out.update(noise=self.noise, steps=self.steps, sigma=self.sigma)
        return out


def _exponential_search(indices: list[int], params: ShiftedInverseParams, rng: KeyedRng) -> int:
    runs = loss_runs(indices, params.output_grid.size)
    tau = params.tau
    scores = [max(r.loss - tau, tau - r.loss_bar) for r in runs]  # ℓ* per run
    low = min(scores)  # shifted so the best run has exponent 0 (the sampler's own shift is slow)
    exponents = [params.exponent(s - low) for s in scores]
    run = runs[sample_exp_weights(rng, exponents, [r.length for r in runs])]
    return run.start + rng.randbelow(run.length)


def _binary_search(indices: list[int], params: ShiftedInverseParams, rng: KeyedRng) -> int:
    # i_min starts at a virtual index −1 (value below 0 ≤ f, so ℓ = ∞ > 0 there) and i_max at
    # N − 1 (ℓ(D) = 0): both invariants of the seed hold from the start (docs).
    lo, hi = -1, params.output_grid.size - 1
    gaussian = params.noise == "gaussian"
    while lo + 1 < hi:
        k = (lo + hi) // 2
        scale = params.noise_scale
        z = discrete_gaussian(rng, scale) if gaussian else discrete_laplace(rng, scale)
        if loss_at(indices, k) + z <= params.tau:
            hi = k
        else:
            lo = k
    return hi


def shifted_inverse_index(
    down_values: Sequence[Rational], params: ShiftedInverseParams, rng: KeyedRng
) -> int:
    """The released grid index (see :func:`shifted_inverse`)."""
    indices = down_indices(down_values, params)
    if params.search == "exponential":
        return _exponential_search(indices, params, rng)
    return _binary_search(indices, params, rng)


def shifted_inverse(
    down_values: Sequence[Rational], params: ShiftedInverseParams, rng: KeyedRng
) -> Fraction:
    """Release a grid value approximating the monotone statistic with these down values.

    Guarantee: ``params.guarantee`` (pure ε-DP or ρ-zCDP) for add/remove one person, provided
    ``down_values`` are f(x, j) of a monotone f as built by :mod:`.shifted_inverse_stats` (proof:
    seed Prop. 3 and Thms. 4–5; ``docs/shifted_inverse.md``). With probability ≥ 1 − β the output
    lies in [f(x) − DS_f^{2τ}(x), f'(x)], f'(x) = f(x) rounded up to the grid (capped at D).
    All randomness comes from ``rng``; draws are exact.
    """
    return params.output_grid.value(shifted_inverse_index(down_values, params, rng))


class QuantileRelease(NamedTuple):
    """A released quantile, with the released row count and the rank it targeted (all noisy)."""

    value: Fraction
    row_count: int
    k: int


def shifted_inverse_quantile(
    values: ArrayLike,
    persons: ArrayLike,
    q: Rational,
    *,
    count_params: ShiftedInverseParams,
    select_params: ShiftedInverseParams,
    count_rng: KeyedRng,
    select_rng: KeyedRng,
) -> QuantileRelease:
    """The q-quantile of the row values: count first, then selection (the budget is split
    between ``count_params`` and ``select_params`` by the caller).

    1. n̂ = a shifted-inverse release of the row count (f(x, j) = rows minus the j largest
       per-person row counts), on ``count_params``' grid (use an integer resolution);
    2. k = :func:`~.shifted_inverse_stats.quantile_k` (q, n̂), the rank from the top;
    3. a shifted-inverse release of the k-th largest value (selection).

    Guarantee: the basic composition of the two releases' guarantees (step 3 is private for
    every fixed k, and k depends on the data only through n̂), for add/remove one person. Accuracy
    is measured in rank error: step 3 lands, w.p. ≥ 1 − β, between the k-th and the (k + rows of
    the 2τ heaviest persons)-th largest value, rounded up to the grid.
    """
    ids = np.asarray(persons).reshape(-1)
    rows = len(ids)
    per_person = np.unique(ids, return_counts=True)[1] if rows else np.zeros(0, np.int64)
    top = np.sort(per_person)[::-1][: count_params.top_k].tolist()
    counts = sum_down_values(rows, top, count_params.down_values_needed)
    n_hat = math.floor(shifted_inverse(counts, count_params, count_rng))
    k = quantile_k(q, n_hat)
    down = kth_largest_down_values(values, ids, k, select_params.down_values_needed)
    return QuantileRelease(shifted_inverse(down, select_params, select_rng), n_hat, k)
