"""Propose-test-release without a proposed bound: a geometric ladder tested with sparse vector.

The rungs b_0 < … < b_{J−1} = hi − lo are tested in order with AboveThreshold (Dwork & Roth 2014,
Alg. 1 / Thm. 3.23) on the queries min(D(x, b_j), C) of :mod:`.ptr` (sensitivity 1 each), with
exact discrete Laplace noise; the first rung that passes sets the Laplace release's scale. The δ
covers every rung: P(a rung with D(x, b_j) = 0 is selected) ≤ J·P(ν − ρ ≥ T) ≤ δ
(docs/local_sensitivity.md §6). The public cap C = T + R, P(ν − ρ ≤ −R) ≤ 2^−64, changes each
rung's outcome with probability at most 2^−64 and lets a quantile's release read only a window of
order statistics (:mod:`.quantile_window`). Neighbouring relation: add/remove one person.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Literal, NamedTuple, cast

import numpy as np
from numpy.typing import ArrayLike

from .accounting import ApproxDP, float_down, float_up
from .additive import LaplaceMechanism
from .checks import Rational, as_fraction
from .discrete import discrete_laplace
from .ptr import (
    CAP_SLACK,
    INFINITE_DISTANCE,
    ClampedSum,
    PTRMean,
    capped,
    check_delta,
    check_epsilon,
    mean_distance,
)
from .quantile_sensitivity import (
    as_quantile,
    check_bounds,
    distance_to_sensitivity,
    quantile_of_sorted,
    sorted_clamped,
)
from .rng import KeyedRng
from .threshold_search import first_threshold


def svt_failure_bound(epsilon_svt: Fraction, threshold: int) -> Decimal:
    """P(ν − ρ ≥ T) for T ≥ 1, ν ~ DLap(4/ε), ρ ~ DLap(2/ε), in closed form (docs §6), rounded
    up by 10^−30 relative: with a = e^(−ε/4), c = a², K = (1 − c)/((1 + c)(1 + a)),
    K·[a^(T+1)(1 − a^(T−1))/(1 − a) + a^T/(1 − a³)] + c^T/(1 + c) − K·c^T·a/(1 − a³).

    In decimals, not floats: at small ε the float form lost more than any fixed margin (a^T
    multiplies a's rounding by T ~ 10^9, and 1 − c cancels), and undershot the true tail by
    3·10^−8 relative at ε = 2·10^−7. The precision grows with the digits 1 − a cancels (~log10
    of 4/ε), powers are exp(−x·n), and the 40 digits kept beyond the cancellation leave an error
    far below the 10^−30 added."""
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
        raise ValueError(f"threshold must be an int ≥ 1, got {threshold!r}")
    eps = Fraction(epsilon_svt)
    cancelled = len(str(4 * eps.denominator // eps.numerator))  # digits of 4/ε
    with localcontext() as ctx:
        ctx.prec = 40 + cancelled
        ctx.Emin, ctx.Emax = -(10**9), 10**9
        x = Decimal(eps.numerator) / Decimal(eps.denominator) / 4
        t = threshold

        def power(n: int) -> Decimal:  # a^n = e^(−x·n)
            return (-x * n).exp()

        a, c = power(1), power(2)
        k = (1 - c) / ((1 + c) * (1 + a))
        one_minus_a3 = 1 - power(3)
        above = power(t + 1) * (1 - power(t - 1)) / (1 - a) + power(t) / one_minus_a3
        below = power(2 * t) / (1 + c) - k * power(2 * t) * a / one_minus_a3
        return (k * above + below) * (1 + Decimal(10) ** -30)


def _rung_mechanisms(
    bounds: tuple[Fraction, ...], eps_release: float
) -> tuple[LaplaceMechanism, ...]:
    """Laplace(b_j/ε_release) for every rung, b rounded up and ε down (more noise, never less).

    Planning only (public bounds and budget): a scale that overflows a float is a ValueError
    here, so a release never meets it on whichever rung the data select."""
    top = bounds[-1]
    why = (
        f"the PTR ladder's top rung b = upper − lower = {float(top)!r} over ε/2 = {eps_release!r} "
        "gives a Laplace noise scale that overflows a float; narrow the bounds [lower, upper] "
        "(or raise the budget)"
    )
    if not math.isfinite(float_up(top)):  # the exact span can round up past the largest float
        raise ValueError(why)
    try:
        return tuple(LaplaceMechanism(float_up(b), eps_release) for b in bounds)
    except OverflowError as e:
        raise ValueError(why) from e


class LadderRelease(NamedTuple):
    """The outcome of :class:`LadderPTR`: ``value`` None is ⊥ (then ``bound`` is None too)."""

    value: float | None
    bound: float | None


@dataclass(frozen=True, init=False)
class LadderPTR:
    """PTR without a proposed bound: the smallest rung of b_j = (hi − lo)·ratio^(j − J + 1) that
    the sparse vector technique finds far from high sensitivity.

    AboveThreshold over the queries D(x, b_0), …, D(x, b_{J−1}) (sensitivity 1 each): noisy
    threshold T + ρ, ρ ~ DLap(2/ε_svt); the first j with D(x, b_j) + ν_j ≥ T + ρ,
    ν_j ~ DLap(4/ε_svt), is selected (ε_svt-DP, Dwork & Roth 2014 Thm. 3.23; exact integers keep
    the proof's shifts). Then f(x) + Laplace(b_j/ε_release). None selected: ⊥. Every rung's
    distance is capped at ``cap`` (module docstring), so a quantile's release reads only the
    gaps of cost ≤ ``reach``; a mean's distances read only n (and its release the exact
    clamped sum).

    Guarantee: (ε, δ)-DP for add/remove one person, ε = ε_svt + ε_release (split evenly). The
    release step is ε_release-DP whenever D(x, b_j) ≥ 1, and P(a rung with D(x, b_j) = 0 is
    selected) ≤ J·P(ν − ρ ≥ T) ≤ δ fixes T (docs/local_sensitivity.md §6).

    Every rung's Laplace mechanism is built here, from public numbers only: a ladder whose noise
    scale b_j/ε_release overflows a float is refused with ValueError now, at planning, rather than
    failing at release on the rung the data happen to select (a crash that depends on the data).

    Args:
      statistic: ``"quantile"`` (with ``q``) or ``"mean"``.
      rungs: J ≥ 2; ratio: > 1, the factor between rungs.
    """

    statistic: Literal["quantile", "mean"]
    lower: float
    upper: float
    epsilon: Fraction
    delta: Fraction
    q: Fraction | None
    rungs: int
    ratio: Fraction
    bounds: tuple[Fraction, ...]
    threshold: int
    cap: int
    mechanisms: tuple[LaplaceMechanism, ...] = field(repr=False, compare=False)

    def __init__(
        self,
        statistic: Literal["quantile", "mean"],
        lower: float,
        upper: float,
        epsilon: Rational,
        delta: Rational,
        *,
        q: Rational | None = None,
        rungs: int = 24,
        ratio: Rational = 2,
    ) -> None:
        if statistic not in ("quantile", "mean"):
            raise ValueError(f"statistic must be 'quantile' or 'mean', got {statistic!r}")
        if statistic == "quantile":
            qf: Fraction | None = as_quantile(q)
        elif q is not None:
            raise ValueError("q is only for statistic='quantile'")
        else:
            qf = None
        eps, d = check_epsilon(epsilon), check_delta(delta)
        lo, hi = check_bounds(lower, upper)
        if isinstance(rungs, bool) or not isinstance(rungs, int) or rungs < 2:
            raise ValueError(f"rungs must be an int ≥ 2, got {rungs!r}")
        r = as_fraction(ratio, "ratio")
        if r <= 1:
            raise ValueError(f"ratio must be > 1, got {ratio!r}; 2 halves the bound per rung")
        span = Fraction(hi) - Fraction(lo)
        bounds = tuple(span / r ** (rungs - 1 - j) for j in range(rungs))
        mechanisms = _rung_mechanisms(bounds, float_down(eps / 2))
        t = first_threshold(
            # d/rungs as a Fraction: Decimal vs Fraction compares exactly (rungs · bound would
            # round to nearest in the ambient 28-digit context, past the bound's 10^−30)
            lambda t: svt_failure_bound(eps / 2, t) <= d / rungs
        )
        # ν − ρ is symmetric, so P(ν − ρ ≤ −R) = P(ν − ρ ≥ R)
        slack = first_threshold(lambda r: svt_failure_bound(eps / 2, r) <= CAP_SLACK)
        fields = {
            "statistic": statistic,
            "lower": lo,
            "upper": hi,
            "epsilon": eps,
            "delta": d,
            "q": qf,
            "rungs": rungs,
            "ratio": r,
            "bounds": bounds,
            "threshold": t,
            "cap": t + slack,
            "mechanisms": mechanisms,
        }
        for name, v in fields.items():
            object.__setattr__(self, name, v)

    @property
    def guarantee(self) -> ApproxDP:
        return ApproxDP(self.epsilon, self.delta)

    @property
    def reach(self) -> int:
        """The largest gap cost a quantile's capped tests read: C − 1."""
        return self.cap - 1

    def _quantile_distance(self, xs: np.ndarray, j: int) -> int:
        d = distance_to_sensitivity(
            xs, q=self.q, lower=self.lower, upper=self.upper, bound=float_down(self.bounds[j])
        )
        return INFINITE_DISTANCE if d is None else cast(int, capped(d, self.cap))

    def _mean_distance(self, n: int, j: int) -> int:
        d = mean_distance(n, self.lower, self.upper, self.bounds[j])
        return INFINITE_DISTANCE if d is None else cast(int, capped(d, self.cap))

    def release(self, values: ArrayLike, rng: KeyedRng) -> LadderRelease:
        if self.statistic == "mean":
            return self.release_sum(ClampedSum.of(values, self.lower, self.upper), rng)
        assert self.q is not None
        xs = sorted_clamped(values, self.lower, self.upper)
        q = self.q
        return self._climb(
            lambda j: self._quantile_distance(xs, j),
            lambda: quantile_of_sorted(xs, q, self.lower),
            rng,
        )

    def release_sum(self, clamped: ClampedSum, rng: KeyedRng) -> LadderRelease:
        """A mean's release from the count and exact clamped sum alone (all it reads)."""
        if self.statistic != "mean":
            raise ValueError("release_sum is for statistic='mean'; a quantile reads its values")
        return self._climb(
            lambda j: self._mean_distance(clamped.count, j),
            lambda: clamped.mean(self.lower, self.upper),
            rng,
        )

    def _climb(
        self,
        distance: Callable[[int], int],
        statistic: Callable[[], float | Fraction],
        rng: KeyedRng,
    ) -> LadderRelease:
        """AboveThreshold up the rungs, then the selected rung's Laplace release."""
        eps_svt = self.epsilon / 2
        noisy_threshold = self.threshold + discrete_laplace(rng, 2 / eps_svt)
        for j in range(self.rungs):
            if distance(j) + discrete_laplace(rng, 4 / eps_svt) >= noisy_threshold:
                noisy = self.mechanisms[j].release(
                    statistic(), rng
                )  # built and checked in __init__
                return LadderRelease(noisy, float(self.bounds[j]))
        return LadderRelease(None, None)

    def to_manifest(self) -> dict[str, object]:
        return {
            "mechanism": "propose_test_release_ladder",
            "statistic": self.statistic,
            **({"q": str(self.q)} if self.q is not None else {}),
            "rungs": [float(b) for b in self.bounds],
            "threshold": self.threshold,
            "distance_cap": self.cap,
            "epsilon_svt": float(self.epsilon / 2),
            "epsilon_release": float(self.epsilon / 2),
            "bounds": [self.lower, self.upper],
            "neighbouring": "add/remove one person",
            "guarantee": self.guarantee.to_manifest(),
        }


def reads_clamped_sum(mechanism: object) -> bool:
    """Does the mechanism read only the count and the exact clamped sum (PTR's means, with a
    bound or the ladder)? Then a pipeline combines :class:`~.ptr.ClampedSum`, not values."""
    return isinstance(mechanism, PTRMean) or (
        isinstance(mechanism, LadderPTR) and mechanism.statistic == "mean"
    )
