"""Smooth-sensitivity release of a quantile (median) of per-person values, with three noises.

Mechanism (Nissim, Raskhodnikova, Smith, STOC 2007; seed ``smooth-sensitivity-nrs07.txt``):
release f(x) + (S(x)/α)·Z, where f is the q-quantile of the per-person values clamped to
[lo, hi] (:mod:`.quantile_sensitivity`), S a β-smooth upper bound on its local sensitivity and Z
heavy-tailed noise. Neighbouring data sets add or remove one person (one value); S is smooth for
that relation (derivation: ``docs/local_sensitivity.md``). Three noise rules, each a frozen
parameter object validated at construction:

* :class:`CauchyNoise` — h(z) ∝ 1/(1 + |z|^γ), γ > 1, β = ε/(2(γ+1)), scale 2(γ+1)·S/ε:
  **pure ε-DP** (seed, "Main result (1D case)", item 1). Default γ = 4, the smallest integer with
  finite variance (needs γ > 3); docs §7 compares γ = 2.
* :class:`LaplaceNoise` — β = ε/(2 ln(2/δ₀)), scale 2S/ε: **(ε, δ₀/2·(e^{ε/2} + 1))-DP** (seed,
  item 2). The object takes the δ you want to state and sets δ₀ = 2δ/(e^{ε/2} + 1).
* :class:`LaplaceLogNormalNoise` — Z = X·e^{σY} (X ~ Laplace(1), Y ~ N(0, 1)), scale S/s with S
  t-smooth: **½ε²-zCDP** for ε = t/σ + e^{3σ²/2}·s (Bun & Steinke, NeurIPS 2019; seed
  ``lecture-ptr-lln-stability.txt``, Proposition 15.1). σ solves 5(ε/t)σ³ − 5σ² − 1 = 0 (the σ
  minimising the noise's standard deviation for given ε, t); t defaults to ε/(2√5), chosen
  without the data (docs §7).

Release arithmetic (docs §8). The statistic is centred on the bounds' midpoint, S is floored at
2^−20·(hi − lo) and raised by 2^−50·(hi − lo) (both keep it a β-smooth bound on the local
sensitivity of the *centred float* statistic), and :func:`.heavy_tailed.release_heavy_tailed`
is called with the **public** scale hi − lo, the factor S(x)/α folded into the noise's log|z|:
its output grid then depends only on public values (a grid derived from S(x) would reveal S(x)'s
binade). The result is clamped to [lo, hi] — post-processing. Floating-point caveats are those
of :mod:`.heavy_tailed`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from numpy.typing import ArrayLike

from .accounting import ZCDP, ApproxDP, PureDP
from .checks import Rational, positive_real
from .heavy_tailed import (
    LogNoise,
    cauchy_type_noise,
    exponential_noise,  # Exp(1) at fine resolution: Laplace(1) = ±E (see LaplaceNoise.sample)
    laplace_log_normal_noise,
    release_heavy_tailed,
)
from .quantile_sensitivity import (
    as_quantile,
    check_beta,
    check_bounds,
    log_smooth_sensitivity,
    quantile_of_sorted,
    sorted_clamped,
)
from .quantile_window import cost_reach
from .rng import KeyedRng

NoiseKind = Literal["cauchy", "laplace", "lln"]
NOISE_KINDS: tuple[str, ...] = ("cauchy", "laplace", "lln")
DEFAULT_GAMMA = 4.0
LLN_T_PER_EPSILON = 1.0 / (2.0 * math.sqrt(5.0))
"""Default t = ε/(2√5) ≈ 0.2236·ε: minimises the LLN noise's sd when S_t ∝ 1/t (docs §7)."""

_FLOOR_BITS = 20  # S ≥ 2^−20·(hi − lo)
_SLACK_BITS = 50  # S += 2^−50·(hi − lo): covers rounding of the centred statistic
_DOWN = 1.0 - 2.0**-40  # rounds a computed β, δ₀ or s down, far beyond the float error
_UP = 1.0 + 2.0**-40  # rounds a noise multiplier up


_BUDGET_HINT = "every query needs a positive share of the budget"

FLOAT_SLACK = 2.0**-26
"""ε the Cauchy and Laplace noises set aside for the float release: a released cell's probability
is the ideal one to a relative r ≈ 2^−30 (:mod:`.heavy_tailed`), which adds ln((1 + r)/(1 − r))
≈ 2^−29 to the privacy loss; they calibrate for ε − 2^−26 (and δ·(1 − 2^−26)), so the stated ε
and δ hold with 8× to spare. The LLN noise sets aside ρ instead: :func:`zcdp_float_slack`."""
_MIN_EPSILON = 2.0**-16  # below this, the set-aside would be more than 2^−10 of ε
_MIN_RHO = 2.0**-15  # the LLN noise's: below it, zcdp_float_slack would pass 2^−10 of ρ
CELL_ERROR = 2.0**-27
"""r, the relative error of a released cell's probability the set-asides are sized for: 8× the
~2^−30 the float release reaches (:mod:`.heavy_tailed`; ln((1 + r)/(1 − r)) ≈ 2r = FLOAT_SLACK)."""


def zcdp_float_slack(rho: float, r: float = CELL_ERROR) -> float:
    """How much a ρ-zCDP mechanism's ρ can grow when each output cell's probability is off by a
    relative error of at most r under every input: ln((1 + r)/(1 − r)) + 2r + e·r·ρ.

    For every order α > 1 the Rényi divergence grows by at most α times that (derivation:
    docs/local_sensitivity.md §8, "The LLN noise's set-aside"; brute force on perturbed discrete
    Gaussian pairs: ``tests/mechanisms/test_zcdp_float_slack.py``). A bound from the pointwise
    ratio alone (ln((1 + r)/(1 − r))) is not enough near α = 1, where the divergence weighs
    the perturbation by the privacy loss; the test's negative control shows it failing.
    """
    return math.log1p(r) - math.log1p(-r) + 2.0 * r + math.e * r * rho


def _calibration_epsilon(eps: float) -> float:
    """ε minus :data:`FLOAT_SLACK`, for a stated ε of at least 2^−16."""
    if not eps >= _MIN_EPSILON:
        raise ValueError(
            f"epsilon {eps:.3g} is below 2^-16 ≈ 1.53e-05, the smallest this noise takes (it sets "
            "2^-26 of ε aside for its float arithmetic); use a larger share"
        )
    return eps - FLOAT_SLACK


@dataclass(frozen=True)
class CauchyNoise:
    """Cauchy-type noise h(z) ∝ 1/(1 + |z|^γ): pure ε-DP with β = ε/(2(γ+1)), α = ε/(2(γ+1)).

    Guarantee: ε-DP for add/remove one person, given a β-smooth upper bound S on the local
    sensitivity for that relation (NRS07 via seed ``smooth-sensitivity-nrs07.txt``: the density is
    (ε/(2(γ+1)), ε/(2(γ+1)))-admissible with δ = 0). γ > 1; γ > 3 for a finite variance. β and
    the multiplier are computed for ε − :data:`FLOAT_SLACK`, which covers the float release.
    """

    epsilon: float
    gamma: float = DEFAULT_GAMMA
    beta: float = field(init=False)
    multiplier: float = field(init=False)
    kind: NoiseKind = field(default="cauchy", init=False)

    def __post_init__(self) -> None:
        eps = positive_real(self.epsilon, "epsilon", _BUDGET_HINT)
        g = positive_real(self.gamma, "gamma", "gamma > 1 (4 gives finite variance)")
        if not g > 1:
            raise ValueError(
                f"gamma must be > 1, got {self.gamma!r}: 1/(1+|z|^gamma) is not integrable "
                "for gamma <= 1; the default 4 gives finite variance"
            )
        eps = _calibration_epsilon(eps)
        object.__setattr__(self, "beta", eps / (2.0 * (g + 1.0)) * _DOWN)
        object.__setattr__(self, "multiplier", 2.0 * (g + 1.0) / eps * _UP)

    @property
    def guarantee(self) -> PureDP:
        return PureDP(Fraction(self.epsilon))

    def sample(self, rng: KeyedRng) -> LogNoise:
        return cauchy_type_noise(rng, self.gamma)

    def to_manifest(self) -> dict[str, object]:
        return {
            "noise": "cauchy",
            "gamma": self.gamma,
            "beta": self.beta,
            "scale": "2(γ+1)·S/ε', ε' = ε − 2^-26 (the float release's set-aside)",
            "guarantee": self.guarantee.to_manifest(),
        }


@dataclass(frozen=True)
class LaplaceNoise:
    """Laplace(1) noise, scale 2S/ε, β = ε/(2 ln(2/δ₀)): (ε, δ)-DP with δ = δ₀/2·(e^{ε/2} + 1).

    Guarantee: (ε, δ)-DP for add/remove one person with ``delta`` the stated δ; the seed's
    parameter is δ₀ = 2δ/(e^{ε/2} + 1) (``delta_seed``), as its theorem gives
    (ε, δ₀/2·(e^{ε/2} + 1)) (seed ``smooth-sensitivity-nrs07.txt``, Main result item 2). It is
    computed for ε − :data:`FLOAT_SLACK` and δ·(1 − FLOAT_SLACK), which cover the float release.
    """

    epsilon: float
    delta: float
    delta_seed: float = field(init=False)
    beta: float = field(init=False)
    multiplier: float = field(init=False)
    kind: NoiseKind = field(default="laplace", init=False)

    def __post_init__(self) -> None:
        eps = positive_real(self.epsilon, "epsilon", _BUDGET_HINT)
        d = positive_real(self.delta, "delta", "Laplace smooth-sensitivity noise needs δ in (0, 1)")
        if not d < 1:
            raise ValueError(f"delta must lie in (0, 1), got {self.delta!r}")
        eps = _calibration_epsilon(eps)
        d *= 1.0 - FLOAT_SLACK  # the float release multiplies δ by at most 1 + 2^−30
        d0 = 2.0 * d / (math.exp(eps / 2.0) + 1.0) * _DOWN  # rounded down: δ stays as stated
        object.__setattr__(self, "delta_seed", d0)
        object.__setattr__(self, "beta", eps / (2.0 * math.log(2.0 / d0)) * _DOWN)
        object.__setattr__(self, "multiplier", 2.0 / eps * _UP)

    @property
    def guarantee(self) -> ApproxDP:
        return ApproxDP(Fraction(self.epsilon), Fraction(self.delta))

    def sample(self, rng: KeyedRng) -> LogNoise:
        """Laplace(1) as (sign, ln E), E ~ Exp(1) from the heavy-tailed module's fine sampler."""
        return LogNoise(1 if rng.randbits(1) else -1, math.log(exponential_noise(rng)))

    def to_manifest(self) -> dict[str, object]:
        return {
            "noise": "laplace",
            "beta": self.beta,
            "delta_seed": self.delta_seed,
            "scale": "2·S/ε', ε' = ε − 2^-26, δ' = δ·(1 − 2^-26) (the float release's set-aside)",
            "guarantee": self.guarantee.to_manifest(),
        }


def lln_sigma(epsilon: float, t: float) -> float:
    """The root σ > 0 of 5(ε/t)σ³ − 5σ² − 1 = 0 (unique: the cubic is −1 at 0, decreasing, then
    increasing), by bisection to full float precision."""
    k = 5.0 * epsilon / t
    lo, hi = 0.0, 1.0
    while k * hi**3 - 5.0 * hi * hi - 1.0 <= 0:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if k * mid**3 - 5.0 * mid * mid - 1.0 > 0:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-16 * hi:
            break
    return hi


@dataclass(frozen=True)
class LaplaceLogNormalNoise:
    """LLN(σ) noise, scale S/s with S t-smooth: ½ε²-zCDP, ε = √(2ρ) = t/σ + e^{3σ²/2}·s.

    Guarantee: ρ-zCDP for add/remove one person (Bun & Steinke 2019, Proposition 15.1 of seed
    ``lecture-ptr-lln-stability.txt``), given |f(x) − f(x')| ≤ S(x) and e^{−t}S(x) ≤ S(x') ≤
    e^t·S(x) for neighbours, which a t-smooth upper bound on the local sensitivity satisfies.
    σ solves 5(ε/t)σ³ − 5σ² − 1 = 0; s = (ε − t/σ)·e^{−3σ²/2}, rounded down. ``t`` is the
    smoothness β, default ε/(2√5) (public: it depends on ρ only). All of these are computed for
    ρ' = ρ minus the float release's set-aside, :func:`zcdp_float_slack` (each released cell's
    probability is the ideal one to a relative ~2^−30, :mod:`.heavy_tailed`; until stop 36 the
    LLN noise set nothing aside). ρ below 2^−15 is refused: the set-aside would pass 2^−10 of it.
    """

    rho: float
    t: float | None = None
    beta: float = field(init=False)
    sigma: float = field(init=False)
    s: float = field(init=False)
    multiplier: float = field(init=False)
    kind: NoiseKind = field(default="lln", init=False)

    def __post_init__(self) -> None:
        rho = positive_real(self.rho, "rho", _BUDGET_HINT)
        if not rho >= _MIN_RHO:
            raise ValueError(
                f"rho {rho:.3g} is below 2^-15 ≈ 3.05e-05, the smallest the lln noise takes (it "
                "sets about 2^-25 of ρ aside for its float arithmetic); use a larger share"
            )
        # ρ' with ρ' + zcdp_float_slack(ρ') = ρ: the slack is affine in ρ'
        slack0 = zcdp_float_slack(0.0)
        rho_cal = (rho - slack0) / (1.0 + math.e * CELL_ERROR) * _DOWN
        eps = math.sqrt(2.0 * rho_cal) * _DOWN
        t = eps * LLN_T_PER_EPSILON if self.t is None else positive_real(self.t, "t", "t > 0")
        sigma = lln_sigma(eps, t)
        s = (eps - t / sigma) * math.exp(-1.5 * sigma * sigma) * _DOWN
        if not s > 0:
            raise ValueError(f"t = {t!r} is too large for ρ = {self.rho!r}: no room for s > 0")
        for name, v in (("beta", t), ("sigma", sigma), ("s", s), ("multiplier", _UP / s)):
            object.__setattr__(self, name, v)

    @property
    def guarantee(self) -> ZCDP:
        return ZCDP(Fraction(self.rho))

    def sample(self, rng: KeyedRng) -> LogNoise:
        return laplace_log_normal_noise(rng, self.sigma)

    def to_manifest(self) -> dict[str, object]:
        return {
            "noise": "lln",
            "beta": self.beta,
            "t": self.beta,
            "sigma": self.sigma,
            "s": self.s,
            "scale": "S/s, s for ρ' = ρ minus the float release's set-aside (zcdp_float_slack)",
            "guarantee": self.guarantee.to_manifest(),
        }


SmoothNoise = CauchyNoise | LaplaceNoise | LaplaceLogNormalNoise


def make_smooth_noise(
    kind: str,
    *,
    epsilon: float | None = None,
    delta: float | None = None,
    rho: float | None = None,
    gamma: float = DEFAULT_GAMMA,
    t: float | None = None,
) -> SmoothNoise:
    """The noise rule named by a job file's ``noise`` key: ``cauchy`` (needs ε), ``laplace``
    (ε and δ) or ``lln`` (ρ; optional t)."""
    if kind == "cauchy":
        if epsilon is None:
            raise ValueError("noise 'cauchy' needs epsilon (it is pure ε-DP)")
        return CauchyNoise(epsilon, gamma)
    if kind == "laplace":
        if epsilon is None or delta is None:
            raise ValueError("noise 'laplace' needs epsilon and delta (it is (ε, δ)-DP)")
        return LaplaceNoise(epsilon, delta)
    if kind == "lln":
        if rho is None:
            raise ValueError("noise 'lln' needs rho (it is ρ-zCDP, ρ = ε²/2)")
        return LaplaceLogNormalNoise(rho, t)
    raise ValueError(f"unknown noise {kind!r}; expected one of {', '.join(NOISE_KINDS)}")


def release_with_log_scale(
    value: float, log_s: float, noise: SmoothNoise, *, lower: float, upper: float, rng: KeyedRng
) -> float:
    """f(x) + multiplier·Ŝ·Z on the public grid, Ŝ = max(S, 2^−20·span) + 2^−50·span, where
    S = e^{log_s} must be a β-smooth bound (module docstring; docs §8). Clamped to [lo, hi]."""
    span = upper - lower
    mid = lower * 0.5 + upper * 0.5
    log_span = math.log(span)
    floor = max(log_s, log_span - _FLOOR_BITS * math.log(2.0))
    log_hat = floor + math.log1p(math.exp(log_span - _SLACK_BITS * math.log(2.0) - floor))
    z = noise.sample(rng)
    log_ratio = math.log(noise.multiplier) + log_hat - log_span
    y = release_heavy_tailed(
        value - mid,
        scale=span,
        noise=(z.sign, z.log_abs + log_ratio),
        lower=lower - mid,
        upper=upper - mid,
    )
    return min(max(y + mid, lower), upper) + 0.0


@dataclass(frozen=True, init=False)
class SmoothQuantile:
    """The q-quantile (median: q = 1/2) of per-person values in [lower, upper], released with
    smooth-sensitivity noise ``noise``.

    Guarantee: ``noise.guarantee`` (pure ε, (ε, δ) or ρ-zCDP) for add/remove one person — each
    person contributes one value, after the Beam side's per-person reduction. The quantile is
    x_{⌈qn⌉} of the clamped sorted values (lo when there are none). Proofs: module docstring,
    ``docs/local_sensitivity.md``.
    """

    q: Fraction
    lower: float
    upper: float
    noise: SmoothNoise

    def __init__(self, q: Rational, lower: float, upper: float, noise: SmoothNoise) -> None:
        lo, hi = check_bounds(lower, upper)
        if not isinstance(noise, (CauchyNoise, LaplaceNoise, LaplaceLogNormalNoise)):
            raise TypeError(
                f"noise must be CauchyNoise, LaplaceNoise or LaplaceLogNormalNoise, got "
                f"{type(noise).__name__}; build it with make_smooth_noise"
            )
        # β comes from the budget alone: a budget too small for the smoothness the bound needs
        # is refused here, when the query is planned, not on the first release (whatever the data)
        check_beta(noise.beta)
        for name, v in (("q", as_quantile(q)), ("lower", lo), ("upper", hi), ("noise", noise)):
            object.__setattr__(self, name, v)

    @property
    def beta(self) -> float:
        return self.noise.beta

    @property
    def reach(self) -> int:
        """The largest gap cost the release reads (:func:`.quantile_window.cost_reach`): the
        window ``QuantileWindow.for_reach(n, q, reach)`` holds all it needs."""
        return cost_reach(self.noise.beta)

    def log_sensitivity(self, values: ArrayLike) -> float:
        """ln Ŝ(x) before the floor (not private: for tests and diagnostics only)."""
        return log_smooth_sensitivity(
            values, q=self.q, lower=self.lower, upper=self.upper, beta=self.noise.beta
        )

    def release(self, values: ArrayLike, rng: KeyedRng) -> float:
        """The noisy quantile of ``values`` (one per person), all noise from ``rng``."""
        xs = sorted_clamped(values, self.lower, self.upper)
        log_s = log_smooth_sensitivity(
            xs, q=self.q, lower=self.lower, upper=self.upper, beta=self.noise.beta
        )
        value = quantile_of_sorted(xs, self.q, self.lower)
        return release_with_log_scale(
            value, log_s, self.noise, lower=self.lower, upper=self.upper, rng=rng
        )

    def to_manifest(self) -> dict[str, object]:
        return {
            "mechanism": "smooth_sensitivity",
            "statistic": "median" if self.q == Fraction(1, 2) else "quantile",
            "q": str(self.q),
            "bounds": [self.lower, self.upper],
            "neighbouring": "add/remove one person",
            **self.noise.to_manifest(),
        }
