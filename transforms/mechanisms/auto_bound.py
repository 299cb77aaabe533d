"""Choosing a per-person clamp privately, for ``bound = "auto"`` on bounded sums and counts.

Clamp-and-noise on a sum trades bias against noise: with each person's total t_i clamped at B,
the bias is Σ_i (t_i − B)₊ and the noise's standard deviation is s·B (s = √2/ε for Laplace,
1/√(2ρ) for Gaussian, per unit of sensitivity). The bias falls with slope −A(B),
A(B) = #{i : t_i > B}, and the noise rises with slope s, so the sum of the two is smallest where
A(B) ≈ s: clip about s persons. This module picks B from the powers of two 2^e,
e ∈ [min_exponent, max_exponent], with the exponential mechanism on the utility

    u(e) = −|A(2^e) − m|,    m = ``target_clipped`` (e.g. s),

whose sensitivity is 1: adding or removing one person changes every A(2^e) by at most 1
(derivation and brute-force test: ``docs/shifted_inverse.md`` §5,
``tests/mechanisms/test_shifted_inverse_auto_bound.py``). The input is a histogram of per-person
totals over power-of-two buckets, computed by the Beam side without noise and never published.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .accounting import PureDP
from .checks import Rational, as_fraction
from .exponential import sample_exp_weights
from .rng import KeyedRng

MAX_CANDIDATES = 2048


def _int(x: int, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"{name} must be an int, got {type(x).__name__} {x!r}")
    return x


def target_clipped_for_noise(std_per_unit: Rational) -> Fraction:
    """m = s: the number of persons to clip when the release adds noise of standard deviation
    s·B at clamp B (Laplace at ε: s = √2/ε; Gaussian at ρ: s = 1/√(2ρ))."""
    s = as_fraction(std_per_unit, "std_per_unit")
    if s <= 0:
        raise ValueError(f"std_per_unit must be positive, got {std_per_unit!r}")
    return s


@dataclass(frozen=True, kw_only=True)
class ClampChoiceParams:
    """Public parameters of one private clamp choice.

    Guarantee: pure ε-DP for adding or removing all rows of one person: the exponential mechanism
    (McSherry & Talwar 2007), sampled exactly by :func:`~.exponential.sample_exp_weights`, on a
    utility of sensitivity 1 over a candidate set fixed by the parameters (proof:
    ``docs/shifted_inverse.md`` §5). Compose it with the clamped release that follows.

    Attributes:
      epsilon: the budget spent on the choice.
      min_exponent, max_exponent: candidate clamps 2^e for min_exponent ≤ e ≤ max_exponent.
      target_clipped: m, how many persons the clamp should leave above it.
    """

    epsilon: Rational
    min_exponent: int
    max_exponent: int
    target_clipped: Rational

    def __post_init__(self) -> None:
        eps = as_fraction(self.epsilon, "epsilon")
        if eps <= 0:
            raise ValueError(f"epsilon must be positive, got {self.epsilon!r}")
        lo = _int(self.min_exponent, "min_exponent")
        hi = _int(self.max_exponent, "max_exponent")
        if hi < lo:
            raise ValueError(f"need min_exponent ≤ max_exponent, got {lo} > {hi}")
        if hi - lo + 1 > MAX_CANDIDATES:
            raise ValueError(f"at most {MAX_CANDIDATES} candidate clamps, got {hi - lo + 1}")
        if as_fraction(self.target_clipped, "target_clipped") < 0:
            raise ValueError(f"target_clipped must be ≥ 0, got {self.target_clipped!r}")

    @property
    def histogram_size(self) -> int:
        """Buckets: (−∞, 2^min], (2^min, 2^(min+1)], …, (2^(max−1), 2^max], (2^max, ∞)."""
        return self.max_exponent - self.min_exponent + 2

    @property
    def guarantee(self) -> PureDP:
        return PureDP(self.epsilon)

    def bucket(self, total: Rational) -> int:
        """The histogram bucket of one person's total (exact; for the Beam side, no noise)."""
        t = as_fraction(total, "total")
        if t <= Fraction(2) ** self.min_exponent:
            return 0
        e = _ceil_log2(t)  # the smallest e with t ≤ 2^e
        return min(e, self.max_exponent + 1) - self.min_exponent

    def scores(self, histogram: Sequence[int]) -> list[Fraction]:
        """u(e) = −|A(2^e) − m| for each candidate e, A from the histogram. Not private."""
        if len(histogram) != self.histogram_size:
            raise ValueError(
                f"expected a histogram of {self.histogram_size} buckets, got {len(histogram)}"
            )
        if any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in histogram):
            raise ValueError("histogram counts must be non-negative integers")
        m = as_fraction(self.target_clipped, "target_clipped")
        out, above = [], 0
        for b in range(self.histogram_size - 1, 0, -1):  # A(2^e) = persons in buckets > e − min
            above += histogram[b]
            out.append(-abs(above - m))
        return out[::-1]

    def choose(self, histogram: Sequence[int], rng: KeyedRng) -> int:
        """The chosen exponent e (the clamp is 2^e); pure ε-DP, see the class docstring."""
        # Weights exp(ε·u/(2Δ)), Δ = 1, in exact rationals (a float score could move by an ulp
        # more than Δ between neighbours).
        scores = self.scores(histogram)
        eps, top = as_fraction(self.epsilon, "epsilon"), max(scores)
        return self.min_exponent + sample_exp_weights(rng, [eps * (top - u) / 2 for u in scores])

    def to_manifest(self) -> dict[str, Any]:
        """Public facts only (the chosen bound is added by the caller once drawn)."""
        return {
            "mechanism": "clamp_choice_exponential",
            "guarantee": self.guarantee.to_manifest(),
            "neighbouring": "add/remove one person",
            "candidates": [self.min_exponent, self.max_exponent],
            "target_clipped": float(as_fraction(self.target_clipped, "target_clipped")),
        }


def _ceil_log2(t: Fraction) -> int:
    """⌈log₂ t⌉ for t > 0, exactly."""
    e = t.numerator.bit_length() - t.denominator.bit_length()  # 2^(e−1) < t < 2^(e+1)
    while Fraction(2) ** e < t:
        e += 1
    while Fraction(2) ** (e - 1) >= t:
        e -= 1
    return e
