"""Choosing a per-person clamp privately, for ``bound = "auto"`` on bounded sums and counts.

Clamp-and-noise on a sum trades bias against noise: with each person's total t_i clamped at B,
the bias is Σ_i (t_i − B)₊ and the noise's standard deviation is s·B (s = √2/ε for Laplace,
1/√(2ρ) for Gaussian, per unit of sensitivity). The bias falls with slope −A(B),
A(B) = #{i : t_i > B}, and the noise rises with slope s, so the sum of the two is smallest where
A(B) ≈ s: clip about s persons.

The candidates are a public grid of ``per_octave`` clamps per octave, c_k = ⌈2^(k/p)⌉ in whole
units 2^u (``unit_exponent``), for 2^min ≤ c ≤ 2^max (four per octave by default, so a chosen
clamp is at most ~19% above the grid point it stands for; for counts, u = 0 gives 1, 2, 3, …, 8,
10, 12, 14, 16, 20, …). The choice is the exponential mechanism with the utility

    u(k) = −|A(c_k) − m|,    m = ``target_clipped``,

of sensitivity 1, over a public *prior* that weighs a candidate twice as large as another by
e^−(κ·p) (κ = ``step_prior``; h_k = p·log₂(c_k/c_0), the candidate's height on the grid):

    P[k] ∝ exp(ε·u(k)/2 − κ·h_k),   or   exp(ε·u(k) − κ·h_k) when m = 0.

With m = 0 the utility −A is monotone (adding a person lowers every score or leaves it), which
halves the noise of the choice (McSherry & Talwar 2007); the job layer uses m = 0, because the
optimum s = √2/ε_noise is below the choice's resolution (about 1/ε_choice persons) at every
budget split it uses, so aiming at s instead of 0 buys nothing and costs the factor 2.

Why the prior. Every candidate above the largest total clips nobody, so all of them score the
same; without a prior the mechanism picks uniformly among them, and with a range of 2^30 that is
almost always a clamp thousands of times too large (the design this one replaced; measured in
``benchmarks/auto_bound.py``, docs/accuracy.md). The prior is data-independent, so the guarantee
is the exponential mechanism's with a base measure; it makes the candidates above the data a
geometric tail (each quarter-octave e^−κ ≈ 0.61 times as likely as the one below), while wherever
A changes by more than κ/ε persons per step the data outweighs it. Derivation, sensitivity proof
and the exact formula tested: ``docs/shifted_inverse.md`` §5; brute force and χ² test:
``tests/mechanisms/test_shifted_inverse_auto_bound.py``. The input is a histogram of per-person
totals over the candidates' buckets, computed by the Beam side without noise and never published.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .accounting import PureDP, float_up
from .checks import Rational, as_fraction, positive
from .exponential import sample_exp_weights
from .rng import KeyedRng

MAX_CANDIDATES = 2048
DEFAULT_PER_OCTAVE = 4
DEFAULT_STEP_PRIOR = Fraction(1, 2)


def _int(x: int, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"{name} must be an int, got {type(x).__name__} {x!r}")
    return x


def target_clipped_for_noise(std_per_unit: Rational) -> Fraction:
    """m = s: the number of persons to clip when the release adds noise of standard deviation
    s·B at clamp B (Laplace at ε: s = √2/ε; Gaussian at ρ: s = 1/√(2ρ))."""
    return positive(std_per_unit, "std_per_unit")


def ceil_root_of_power_of_two(a: int, p: int) -> int:
    """⌈2^(a/p)⌉ exactly, for integers a and p ≥ 1 (1 when a ≤ 0)."""
    if a <= 0:
        return 1
    target = 1 << a
    x: int = max(1, round(2.0 ** (a / p)))
    while x**p < target:
        x += 1
    while x > 1 and (x - 1) ** p >= target:
        x -= 1
    return x


def clamp_grid(
    min_exponent: int, max_exponent: int, per_octave: int, unit_exponent: int
) -> tuple[Fraction, ...]:
    """The candidate clamps: ⌈2^(k/p)⌉ in units 2^u, for 2^min ≤ 2^(k/p) ≤ 2^max, deduplicated."""
    unit = Fraction(2) ** unit_exponent
    out: list[Fraction] = []
    for k in range(per_octave * min_exponent, per_octave * max_exponent + 1):
        c = ceil_root_of_power_of_two(k - per_octave * unit_exponent, per_octave) * unit
        if not out or c > out[-1]:
            out.append(c)
    return tuple(out)


HEIGHT_DENOMINATOR = 1024


def grid_height(ratio: Fraction, per_octave: int) -> Fraction:
    """⌊1024·p·log₂(ratio)⌋ / 1024 for a ratio ≥ 1, exactly (integer arithmetic only).

    2^j ≤ r^N ⟺ j ≤ N·log₂ r, so with r = a/b: ⌊N·log₂ r⌋ is the largest j with b^N·2^j ≤ a^N.
    """
    n = HEIGHT_DENOMINATOR * per_octave
    a, b = ratio.numerator**n, ratio.denominator**n
    j = a.bit_length() - b.bit_length()  # b·2^(j−1) < a < b·2^(j+1)
    while b << j > a if j >= 0 else b > a >> -j:
        j -= 1
    while (b << (j + 1) <= a) if j + 1 >= 0 else (b <= a >> -(j + 1)):
        j += 1
    return Fraction(j, HEIGHT_DENOMINATOR)


@dataclass(frozen=True, kw_only=True)
class ClampChoiceParams:
    """Public parameters of one private clamp choice.

    Guarantee: pure ε-DP for adding or removing all rows of one person: the exponential mechanism
    (McSherry & Talwar 2007; the monotone form when m = 0) with a data-independent prior,
    sampled exactly by :func:`~.exponential.sample_exp_weights`, on a utility of sensitivity 1
    over a candidate set fixed by the parameters (proof: ``docs/shifted_inverse.md`` §5).
    Compose it with the clamped release that follows. It is also ε-bounded-range (its privacy
    loss spans at most ε over the candidates), hence ε²/8-zCDP, which is how a ρ share counts it
    (``docs/accounting.md``, "Bounded-range mechanisms"; brute force:
    ``tests/mechanisms/test_bounded_range.py``).

    Attributes:
      epsilon: the budget spent on the choice.
      min_exponent, max_exponent: the candidates lie in [2^min_exponent, 2^max_exponent].
      target_clipped: m, how many persons the clamp should leave above it.
      per_octave: grid points per octave (p).
      unit_exponent: candidates are whole multiples of 2^unit_exponent (the fixed-point unit).
      step_prior: κ, the prior's log-weight per step up the grid.
      candidates: the grid, increasing (derived).
      heights: p·log₂(c_k / c_0) of each candidate, rounded down to 1/1024 (derived): the
        prior's steps, so a candidate twice another is p steps above it wherever it lies.
    """

    epsilon: Rational
    min_exponent: int
    max_exponent: int
    target_clipped: Rational
    per_octave: int = DEFAULT_PER_OCTAVE
    unit_exponent: int = 0
    step_prior: Rational = DEFAULT_STEP_PRIOR
    candidates: tuple[Fraction, ...] = field(init=False, repr=False)
    heights: tuple[Fraction, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        positive(self.epsilon, "epsilon")
        lo = _int(self.min_exponent, "min_exponent")
        hi = _int(self.max_exponent, "max_exponent")
        p = _int(self.per_octave, "per_octave")
        u = _int(self.unit_exponent, "unit_exponent")
        if hi < lo:
            raise ValueError(f"need min_exponent ≤ max_exponent, got {lo} > {hi}")
        if not 1 <= p <= 64:
            raise ValueError(f"per_octave must lie in [1, 64], got {p}")
        if p * (hi - lo) + 1 > MAX_CANDIDATES:
            raise ValueError(
                f"at most {MAX_CANDIDATES} candidate clamps, got {p * (hi - lo) + 1}; "
                "narrow the range or use fewer per octave"
            )
        if as_fraction(self.target_clipped, "target_clipped") < 0:
            raise ValueError(f"target_clipped must be ≥ 0, got {self.target_clipped!r}")
        if as_fraction(self.step_prior, "step_prior") < 0:
            raise ValueError(f"step_prior must be ≥ 0, got {self.step_prior!r}")
        grid = clamp_grid(lo, hi, p, u)
        object.__setattr__(self, "candidates", grid)
        object.__setattr__(self, "heights", tuple(grid_height(c / grid[0], p) for c in grid))

    @property
    def histogram_size(self) -> int:
        """Buckets: (−∞, c_0], (c_0, c_1], …, (c_{K−2}, c_{K−1}], (c_{K−1}, ∞)."""
        return len(self.candidates) + 1

    @property
    def guarantee(self) -> PureDP:
        return PureDP(self.epsilon)

    def bucket(self, total: Rational) -> int:
        """The histogram bucket of one person's total, #{k : c_k < t} (exact; no noise)."""
        return bisect_left(self.candidates, as_fraction(total, "total"))

    def scores(self, histogram: Sequence[int]) -> list[Fraction]:
        """u(k) = −|A(c_k) − m| for each candidate, A from the histogram. Not private."""
        if len(histogram) != self.histogram_size:
            raise ValueError(
                f"expected a histogram of {self.histogram_size} buckets, got {len(histogram)}"
            )
        if any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in histogram):
            raise ValueError("histogram counts must be non-negative integers")
        m = as_fraction(self.target_clipped, "target_clipped")
        out, above = [], 0
        for b in range(self.histogram_size - 1, 0, -1):  # A(c_k) = persons in buckets > k
            above += histogram[b]
            out.append(-abs(above - m))
        return out[::-1]

    def exponents(self, histogram: Sequence[int]) -> list[Fraction]:
        """λ_k with P[k] ∝ exp(−λ_k): ε·(max u − u(k))/2 (or ε·(max u − u(k)) when m = 0) + κ·h_k.

        Exact rationals throughout.

        (A float score could move by an ulp more than Δ = 1 between neighbours; rationals cannot.)
        """
        scores = self.scores(histogram)
        eps, top = as_fraction(self.epsilon, "epsilon"), max(scores)
        kappa = as_fraction(self.step_prior, "step_prior")
        # m = 0: u = −A is monotone (adding a person lowers every score or leaves it), so the
        # weights may be exp(ε·u) instead of exp(ε·u/2) (McSherry & Talwar 2007, §3).
        half = 1 if as_fraction(self.target_clipped, "target_clipped") == 0 else 2
        return [
            eps * (top - u) / half + kappa * h for h, u in zip(self.heights, scores, strict=True)
        ]

    def choose(self, histogram: Sequence[int], rng: KeyedRng) -> int:
        """The chosen candidate's index k (the clamp is ``candidates[k]``); pure ε-DP."""
        return sample_exp_weights(rng, self.exponents(histogram))

    def sensitivity(self, k: int) -> float:
        """The noise's sensitivity for clamp k: the clamp rounded up to a float (to nearest, a
        clamp above 2^53 could be declared below the one applied)."""
        return float_up(Fraction(self.candidates[k]))

    def mode(self, histogram: Sequence[int]) -> int:
        """The most likely index (ties: the smallest): the choice with noise switched off."""
        lam = self.exponents(histogram)
        return lam.index(min(lam))

    def to_manifest(self) -> dict[str, Any]:
        """Public facts only (the chosen bound is released in the output rows)."""
        return {
            "mechanism": "clamp_choice_exponential",
            "guarantee": self.guarantee.to_manifest(),
            "neighbouring": "add/remove one person",
            "candidates": [self.min_exponent, self.max_exponent],
            "candidates_are": f"⌈2^(k/{self.per_octave})⌉ in units of 2^{self.unit_exponent}",
            "per_octave": self.per_octave,
            "step_prior": str(as_fraction(self.step_prior, "step_prior")),
            "target_clipped": float(as_fraction(self.target_clipped, "target_clipped")),
        }
