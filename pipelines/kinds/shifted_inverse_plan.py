"""Planned shifted-inverse and auto-bound queries: budget arithmetic, mechanisms, what is reported.

Part of :mod:`pipelines.kinds.shifted_inverse` and :mod:`pipelines.kinds.auto_bound` (which parse
the keys and wire the pipeline). Public facts only; nothing here sees data.

How a query's share is spent (``counted_as`` in the manifest; ``docs/shifted_inverse.md`` §7):

* Per public partition: a person reaches at most L partitions, so each partition gets 1/L of the
  share in the share's own kind (ε/L, (ε/L, δ/L) or ρ/L); by basic composition the ≤ L releases one
  person can change spend at most the share. Without ``by``, L = 1.
* Quantiles: half of that to the row count, half to the selection.
* ``bound = "auto"``: ``auto_share`` (default 1/4) of it to the clamp choice, the rest to the noise.
* Within a part: pure-ε mechanisms (the exponential search, the pure binary search, the clamp
  choice, Laplace noise) take ε; (ε, δ) shares count them as (ε, 0); under ρ they take the largest
  float ε with ε²/2 ≤ ρ (ε-DP is ε²/2-zCDP, Bun & Steinke 2016 Prop. 1.4) — except the clamp
  choice, an exponential mechanism and so ε-bounded-range, which takes the largest ε with
  ε²/8 ≤ ρ (Cesar & Rogers 2021; docs/accounting.md "Bounded-range mechanisms"). (The shifted
  inverse's exponential search is bounded-range too, but its quantile composes two releases in
  one guarantee; it keeps ε²/2, and under ρ the binary search is the default.) The ρ-zCDP binary
  search and Gaussian noise take ρ; Gaussian noise under an (ε, δ) share takes the largest ρ whose
  conversion fits it (Canonne, Kamath & Steinke 2020 Cor. 13) — for ``bound = "auto"`` the
  conversion is of the L partitions' noise together, (ε·(1 − a), δ), whose ρ is then split L
  ways (zCDP composes by adding ρ), not of each partition's (ε·(1 − a)/L, δ/L).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from userdp.transforms.mechanisms.accounting import (
    ZCDP,
    ApproxDP,
    Budget,
    PureDP,
    compose,
    epsilon_within_rho,
    float_down,
    zcdp_budget_for,
)
from userdp.transforms.mechanisms.additive import GaussianMechanism, LaplaceMechanism
from userdp.transforms.mechanisms.auto_bound import ClampChoiceParams
from userdp.transforms.mechanisms.shifted_inverse import ShiftedInverseParams

from .local_sensitivity_plan import bounded_range_epsilon, counted_as

NEIGHBOURS = "add/remove one person"
LN20 = math.log(20.0)  # Laplace: P(|X| > b·ln 20) = 0.05
Z95 = 1.959963984540054
COUNT_UPPER = 2**40  # the quantile's row-count grid: 0 … 2^40 rows, step 1


def divide(share: Budget, parts: int) -> Budget:
    """The share split into ``parts`` equal parts of its own kind (exact)."""
    if isinstance(share, ZCDP):
        return ZCDP(share.rho / parts)
    if isinstance(share, ApproxDP):
        return ApproxDP(share.epsilon / parts, share.delta / parts)
    return PureDP(share.epsilon / parts)


def pure_epsilon(part: Budget) -> Fraction:
    """ε for a pure-ε mechanism counted in ``part`` (module docstring)."""
    if isinstance(part, ZCDP):
        return Fraction(epsilon_within_rho(part.rho))
    return part.epsilon


def shifted_inverse_params(part: Budget, o: dict[str, Any], *, count: bool) -> ShiftedInverseParams:
    """The core's parameters for one release from ``part`` of the budget (``count``: the
    quantile's row count, on the grid 0 … 2^40 step 1)."""
    grid: dict[str, Any] = {"upper": COUNT_UPPER, "resolution": 1}
    if not count:
        grid = {"upper": o["upper"], "resolution": o["resolution"], "grid": o["grid"]}
        grid["growth"] = o["growth"]
    if isinstance(part, ZCDP) and o["search"] == "binary":
        return ShiftedInverseParams(
            **grid, beta=o["beta"], budget=ZCDP(part.rho), search="binary", noise=o["noise"]
        )
    return ShiftedInverseParams(
        **grid, beta=o["beta"], budget=PureDP(pure_epsilon(part)), search=o["search"]
    )


def _counted(
    share: Budget, per_partition: Budget, parts: int, *, bounded_range: bool = False
) -> dict[str, Any]:
    rule = counted_as(share, per_partition, Fraction(0), bounded_range=bounded_range)["rule"]
    if parts > 1:
        rule += f"; per part, {parts} parts per person compose (basic composition)"
    return {"rule": rule, "parts_per_person": parts}


def _partitions(by: tuple[str, ...], keys: tuple[tuple[Any, ...], ...], L: int) -> dict[str, Any]:
    if not by:
        return {"by": [], "partitions": "none"}
    return {
        "by": list(by),
        "partitions": "public",
        "n_public_partitions": len(keys),
        "max_partitions_per_person": L,
        "partition_bounding": "each person keeps the L partitions where they have the most rows "
        "(ties: the smaller key); each partition gets 1/L of the share",
    }


def _partition_line(by: tuple[str, ...], keys: tuple[tuple[Any, ...], ...], L: int) -> list[str]:
    if not by:
        return []
    return [
        f"per public partition of {', '.join(by)} ({len(keys)} keys): each person keeps ≤ {L} "
        f"partitions (most rows first), each partition gets 1/{L} of the share"
    ]


def _grid_text(p: ShiftedInverseParams) -> str:
    g = p.output_grid
    if p.grid == "log":
        return f"log grid {float(g.resolution):g} … {float(g.upper):g} ×{float(g.growth or 0):g}"
    return f"linear grid 0 … {float(g.upper):g} step {float(g.resolution):g}"


def _search_text(p: ShiftedInverseParams) -> str:
    if p.search == "exponential":
        return f"exponential search, τ = ⌈(2/ε) ln(|Y|/β)⌉ = {p.tau}"
    return f"noisy binary search, {p.steps} steps of {p.noise} noise σ = {p.sigma:.4g}, τ = {p.tau}"


@dataclass(frozen=True)
class ShiftedInversePlan:
    """A planned shifted-inverse query (``total``, ``max``, ``distinct``, or a quantile with
    ``method = "shifted_inverse"``); ``params`` are per partition."""

    name: str
    metric: str
    statistic: str  # total | max | distinct | quantile
    share: Budget
    value: str | None
    reduction: str | None  # per person: count | sum | max; None for row values / distinct
    params: ShiftedInverseParams
    count_params: ShiftedInverseParams | None = None  # quantile: the row count's
    k: int = 1
    q: Fraction | None = None
    by: tuple[str, ...] = ()
    public_keys: tuple[tuple[Any, ...], ...] = ((),)
    max_partitions_per_person: int = 1
    method: str = "shifted_inverse"
    output_columns: tuple[tuple[str, str], ...] = (("value", "float64"),)

    @property
    def guarantee(self) -> Budget:
        """Per partition: the release's guarantee (the quantile's two releases composed)."""
        if self.count_params is None:
            return self.params.guarantee
        return compose(self.count_params.guarantee, self.params.guarantee)

    def _what(self) -> str:
        of = f"{self.reduction}({self.value})" if self.value else "rows"
        if self.reduction == "count":
            of = "rows"
        if self.statistic == "total":
            return f"total of {self.value} (negative values as 0)" if self.value else "total rows"
        if self.statistic == "max":
            rank = "largest" if self.k == 1 else f"k-th largest (k = {self.k})"
            return f"{rank} per-person {of}"
        if self.statistic == "distinct":
            return f"distinct values of {self.value} (LP relaxation, docs §4)"
        per = f"per-person {of}" if self.reduction else f"row values of {self.value}"
        return f"quantile q = {self.q} of {per}: row count first, then the k-th largest"

    def to_manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "metric": self.metric,
            "method": self.method,
            "statistic": self.statistic,
            "value": self.value,
            "per_person": self.reduction,
            **_partitions(self.by, self.public_keys, self.max_partitions_per_person),
            "share": self.share.to_manifest(),
            "mechanism": self.params.to_manifest(),
            "guarantee": {**self.guarantee.to_manifest(), "neighbouring": NEIGHBOURS},
            "counted_as": _counted(self.share, self.guarantee, self.max_partitions_per_person),
            "clamp": "values clamped to [0, upper] (negative values count as 0)"
            if self.value and self.statistic != "distinct"
            else None,
            "output": "one row per partition: value, a point of the grid (the statistic rounded "
            "up to the grid and capped at upper, less the down-sensitivity error)",
        }
        if self.count_params is not None:
            out["output"] = (
                "one row per partition: value, a point of the grid; "
                + self._quantile_accuracy().removeprefix("accuracy: ")
            )
        if self.statistic == "max":
            out["k"] = self.k
        if self.count_params is not None:
            out["q"] = {"value": float(self.q or 0), "exact": str(self.q)}
            out["count_mechanism"] = self.count_params.to_manifest()
        return out

    def _quantile_accuracy(self) -> str:
        """The rank interval of a shifted-inverse quantile (transforms.mechanisms.shifted_inverse:
        shifted_inverse_quantile): w.p. ≥ 1 − β_c the count step releases n̂ ≤ n, short by at
        most the rows of its 2τ_c heaviest persons (c), so the rank k̂ = k(n̂) from the top is up
        to ⌈(1 − q)·c⌉ above the true k — a bias towards larger values; the selection then lands
        between the k̂-th largest and r rows below it (r: rows above it of its 2τ heaviest
        persons)."""
        assert self.count_params is not None
        beta = float(self.params.beta) + float(self.count_params.beta)
        return (
            f"accuracy: w.p. ≥ {1 - beta:g} (both steps) the value's rank from the top lies "
            f"between k − ⌈(1 − q)·c⌉ and k + r, rounded up to the grid: k the true quantile's "
            f"rank, c the rows of the {2 * self.count_params.tau} persons with most rows (the "
            f"row count comes out short by up to c and not over, so the value leans high), r "
            f"the rows above it of its {2 * self.params.tau} heaviest persons"
        )

    def plan_lines(self) -> list[str]:
        p = self.params
        lines = [f"{self._what()}: shifted inverse, {_grid_text(p)} (|Y| = {p.output_grid.size})"]
        if self.count_params is not None:
            lines.append(f"row count: {_search_text(self.count_params)}, half of the budget")
        if self.count_params is None:
            lines.append(
                f"{_search_text(p)}: w.p. ≥ 1 − β = {1 - float(p.beta):g} the value lies between "
                f"f minus what removing the {2 * p.tau} heaviest persons changes and f rounded up"
            )
        else:
            lines.append(f"k-th largest: {_search_text(p)}")
            lines.append(self._quantile_accuracy())
        lines += _partition_line(self.by, self.public_keys, self.max_partitions_per_person)
        return [*lines, f"guarantee per partition: {self.guarantee} for {NEIGHBOURS}"]


def auto_bound_parts(
    share: Budget, parts: int, auto_share: Fraction, noise: str
) -> tuple[Fraction, float | None, float | None]:
    """(the choice's ε, the noise's ε or ρ) per partition (module docstring).

    Gaussian noise under an (ε, δ) share: the ρ that implies (ε·(1 − a), δ) for all ``parts``
    partitions together, split evenly — zCDP composes by adding ρ, so the parts are converted
    once, not each from (ε·(1 − a)/L, δ/L) (at L = 3 that needed ε ≈ 0.67 of what was booked)."""
    if noise == "gaussian" and isinstance(share, ApproxDP):
        rest_all = ApproxDP(share.epsilon * (1 - auto_share), share.delta)
        choice_part = PureDP(share.epsilon * auto_share / parts)
        return (
            bounded_range_epsilon(choice_part),
            None,
            float_down(zcdp_budget_for(rest_all).rho / parts),
        )
    part = divide(share, parts)
    choice: Budget
    rest: Budget
    if isinstance(part, ZCDP):
        choice = ZCDP(part.rho * auto_share)
        rest = ZCDP(part.rho * (1 - auto_share))
    elif isinstance(part, ApproxDP):
        choice, rest = (
            PureDP(part.epsilon * auto_share),
            ApproxDP(part.epsilon * (1 - auto_share), part.delta),
        )
    else:
        choice, rest = PureDP(part.epsilon * auto_share), PureDP(part.epsilon * (1 - auto_share))
    eps_choice = bounded_range_epsilon(choice)  # an exponential mechanism: ε²/8 ≤ ρ under ρ
    if noise == "laplace":
        return eps_choice, float_down(pure_epsilon(rest)), None
    if isinstance(rest, ZCDP):
        return eps_choice, None, float_down(rest.rho)
    assert isinstance(rest, ApproxDP)
    return eps_choice, None, float_down(zcdp_budget_for(rest).rho)


def unit_noise(epsilon: float | None, rho: float | None) -> LaplaceMechanism | GaussianMechanism:
    """The noise at sensitivity 1 (its std is the target of the clamp choice, per unit)."""
    return (
        LaplaceMechanism(1.0, epsilon) if epsilon is not None else GaussianMechanism(1.0, rho or 0)
    )


def clamp_choice(
    epsilon: Fraction, exponents: tuple[int, int], unit_exponent: int = 0
) -> ClampChoiceParams:
    """The clamp choice: clip as few persons as the prior allows (m = 0, the monotone utility).

    The optimum m = s (the noise's std per unit of bound) lies below the choice's resolution at
    every split (:mod:`transforms.mechanisms.auto_bound`), measured in
    ``benchmarks/auto_bound.py``; so the noise does not enter the choice.
    """
    return ClampChoiceParams(
        epsilon=epsilon, min_exponent=exponents[0], max_exponent=exponents[1],
        target_clipped=0, unit_exponent=unit_exponent,
    )  # fmt: skip


@dataclass(frozen=True)
class AutoBoundPlan:
    """A planned ``count``/``sum`` with ``bound = "auto"``; ``choice`` and the noise budget are per
    partition. The chosen bound is released in the output row (``bound``), not in the manifest."""

    name: str
    metric: str  # count | sum
    share: Budget
    value: str | None
    choice: ClampChoiceParams
    noise: str  # laplace | gaussian
    epsilon: float | None  # laplace: the noise's ε per partition
    rho: float | None  # gaussian: the noise's ρ per partition
    auto_share: Fraction
    quantum: int  # sums: fixed-point exponent of the values
    by: tuple[str, ...] = ()
    public_keys: tuple[tuple[Any, ...], ...] = ((),)
    max_partitions_per_person: int = 1
    output_columns: tuple[tuple[str, str], ...] = (
        ("value", "float64"),
        ("stddev", "float64"),
        ("bound", "float64"),
    )

    @property
    def noise_guarantee(self) -> Budget:
        return (
            PureDP(Fraction(self.epsilon))
            if self.epsilon is not None
            else ZCDP(Fraction(self.rho or 0))
        )

    def to_manifest(self) -> dict[str, Any]:
        noise = unit_noise(self.epsilon, self.rho)
        parts = self.max_partitions_per_person
        choice_counted = _counted(self.share, self.choice.guarantee, parts, bounded_range=True)
        return {
            "name": self.name,
            "metric": self.metric,
            "method": "auto_bound",
            "value": self.value,
            **_partitions(self.by, self.public_keys, parts),
            "share": self.share.to_manifest(),
            "auto_share": {"value": float(self.auto_share), "exact": str(self.auto_share)},
            "clamp_choice": self.choice.to_manifest(),
            "statistic": {
                "clamp": "each person's total (rows, or sum of the value with negative values as "
                "0) is clamped to the chosen bound B (a candidate of the grid)",
                "mechanism": self.noise,
                "guarantee": self.noise_guarantee.to_manifest(),
                "sensitivity": "B per partition (B is released in the output's `bound` column)",
                "stddev_per_unit_bound": noise.std,
            },
            "counted_as": {
                "clamp_choice": choice_counted,
                "statistic": self._statistic_counted(parts),
            },
            "output": "one row per partition: value, stddev (of the noise at the chosen bound), "
            "bound (the privately chosen clamp)",
        }

    def _statistic_counted(self, parts: int) -> dict[str, Any]:
        if isinstance(self.share, ApproxDP) and self.rho is not None and parts > 1:
            return {
                "rule": f"ρ-zCDP per part; the {parts} parts per person compose as zCDP (ρ "
                "adds), and their sum implies (ε·(1 − auto_share), δ) of the share (Canonne, "
                "Kamath & Steinke 2020, Cor. 13); basic composition with the clamp choice",
                "parts_per_person": parts,
            }
        return _counted(self.share, self.noise_guarantee, parts)

    def plan_lines(self) -> list[str]:
        c, noise = self.choice, unit_noise(self.epsilon, self.rho)
        what = f"sum of {self.value} (negative values as 0)" if self.value else "count of rows"
        err = noise.scale * LN20 if isinstance(noise, LaplaceMechanism) else Z95 * noise.std
        m, kappa = float(c.target_clipped), float(c.step_prior)
        resolution = kappa / float(c.epsilon)  # persons per grid step that outweigh the prior
        utility = "−(persons above B)" if m == 0 else f"−|persons above B − {m:.4g}|"
        double = math.exp(-kappa * c.per_octave)  # P[a whole octave above the data], flat tail
        return [
            f"{what}, each person's total clamped to a private bound B from "
            f"{len(c.candidates)} candidates in [2^{c.min_exponent}, 2^{c.max_exponent}] "
            f"({c.per_octave} per octave)",
            f"bound: exponential mechanism {c.guarantee} ({float(self.auto_share):g} of the "
            f"share), utility {utility}, prior e^-{kappa:g} per step up",
            f"noise: {self.noise} {self.noise_guarantee}, sensitivity B: stddev "
            f"{noise.std:.4g}·B, 95% error ±{err:.4g}·B",
            f"expected error: ±{err:.4g}·B from noise, plus the excess over B of the persons it "
            f"clips: the choice moves up a quarter-octave when ≳ {resolution:.3g} persons lie "
            f"above B there; B is ≥ 2× the largest total with probability about {double:.2g}",
            *_partition_line(self.by, self.public_keys, self.max_partitions_per_person),
        ]
