"""The bounded aggregates' plan: ``count``, ``persons``, ``sum`` and ``mean`` from a budget share.

Each person is bounded to ``max_partitions_per_person`` (L) partitions and
``max_rows_per_partition`` (C) rows in each (values clamped to ``bounds``); the statistic gets
Laplace or Gaussian noise calibrated to the sensitivity those bounds imply, and private partitions
add a thresholding selection. Rules for a query's share (what the manifest records under
``selection`` and ``statistic``):

* Public partitions or no ``by``: the whole share goes to the statistic.
* Private partitions: the share is cut into equal parts, one per noise draw (a ``mean`` draws
  two) and one for the selection — the selection gets 1/2 of a count's share, 1/3 of a mean's, as
  PipelineDP splits an aggregation. Below, "ε/2" is that selection part.
* Private partitions, Laplace noise, (ε, δ) share: selection gets ε/2 and all of δ, with the rule
  that keeps the most partitions at that budget (:func:`~userdp.transforms.mechanisms.
  selection_choice.best_selection`: truncated geometric, or Gaussian thresholding converted to
  (ε/2, δ) — chosen from ε, δ and L only); the statistic gets the other ε/2. For metric
  ``persons`` a thresholding's own noisy count *is* the released value, so Laplace thresholding
  takes the whole ε and no other noise is drawn (``QueryPlan.releases_selection_count``).
* Private partitions, Gaussian noise, (ε, δ) share: ρ = ``zcdp_budget_for((ε, δ/2))``;
  ``GaussianThresholding`` with ρ/2 and δ/2; the statistic gets ρ/2. The whole is ρ-zCDP → (ε, δ/2)
  for the counts plus δ/2 for the selection: (ε, δ)-DP.
* zCDP total (ρ, plus a δ for selection): ``GaussianThresholding`` with ρ/2 and the query's δ; the
  statistic gets ρ/2 (Gaussian, or Laplace with the largest ε such that ε²/2 ≤ its ρ).
* ``mean``: the statistic's budget is split evenly between the centred sum and the row count.

Sensitivities follow docs/release-job-contracts.md; bounds are widened to the fixed-point grid
(``transforms.params.quantum_exponent``) when they are not on it, so rounding cannot exceed them.
Guarantee: the noise's (pure ε or ρ-zCDP) composed with the selection's (ε, δ), add/remove one
person; proofs in docs/release-job-contracts.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, cast

from userdp.transforms.mechanisms.accounting import (
    ZCDP,
    ApproxDP,
    Budget,
    PureDP,
    epsilon_within_rho,
    float_down,
    float_up,
    zcdp_budget_for,
)
from userdp.transforms.mechanisms.additive import GaussianMechanism, LaplaceMechanism
from userdp.transforms.mechanisms.discrete import discrete_laplace_error95, discrete_laplace_std
from userdp.transforms.mechanisms.partition_selection import (
    GaussianThresholding,
    LaplaceThresholding,
)
from userdp.transforms.mechanisms.selection_choice import best_selection
from userdp.transforms.params import (
    BoundingParams,
    Metric,
    NoiseMechanism,
    ReleaseParams,
    SelectionRule,
    quantum_exponent,
)

from ..config import ConfigError, QueryConfig
from .base import PlanContext
from .mechanism_manifest import describe_noise, describe_selection, describe_selection_count

if TYPE_CHECKING:
    from .shared_selection import SelectionPlan

Z95 = 1.959963984540054  # two-sided 95% normal quantile
LN20 = math.log(20.0)  # Laplace: P(|X| > b·ln 20) = 0.05
AGGREGATE_COLUMNS = (("value", "float64"), ("stddev", "float64"))
MEAN_ESTIMATOR = (
    "mid + noisy centred sum / max(1, noisy rows), clamped to bounds: the clamp bounds the error "
    "by the range and lowers it, but pulls partitions whose noise is comparable to the range "
    "towards mid; the noisy divisor adds a bias of about (mean - mid)·var(rows)/rows²"
)


@dataclass(frozen=True)
class Sensitivity:
    """Add/remove one person: change of one partition's statistic, L1 and L2 over partitions."""

    per_partition: float
    l1: float
    l2: float


@dataclass(frozen=True)
class QueryPlan:
    """One query, planned. ``stddev``/``error95`` are of the released statistic's noise; for
    ``mean`` they are of the noisy centred sum, ``count_stddev`` of the noisy row count, and
    :meth:`mean_stddev` gives the first-order stddev of the mean at n rows."""

    params: ReleaseParams
    share: Budget  # the query's share of the total, in the total's kind (as split)
    selection_delta: Fraction  # δ of the selection under a zCDP total (in ``share`` otherwise)
    statistic_budget: Budget  # what the statistic's noise spends (for mean: both sums together)
    sensitivity: Sensitivity  # of the released statistic (mean: of the centred sum)
    count_sensitivity: Sensitivity | None  # mean only: of the row count
    stddev: float
    error95: float
    count_stddev: float | None
    releases_selection_count: bool  # persons + Laplace thresholding: its noisy count is released
    n_public_partitions: int | None
    selection_budget: Budget | None = None  # what the selection spends, when it is (ε, δ)
    shared_selection: str | None = None  # the name of the group's selection it releases

    @property
    def name(self) -> str:
        return self.params.name

    @property
    def by(self) -> tuple[str, ...]:
        return self.params.bounding.by

    @property
    def output_columns(self) -> tuple[tuple[str, str], ...]:
        return AGGREGATE_COLUMNS

    def mean_stddev(self, rows: float) -> float:
        """≈ stddev of a noisy mean at ``rows`` rows: √(σ_s² + h²σ_c²)/rows, h = (hi − lo)/2 (the
        delta method with |mean − mid| ≤ h; ignores the max(1, ·) and the clamp)."""
        if self.count_stddev is None:
            raise ValueError(f"query {self.name!r} is not a mean")
        b = self.params.bounding
        h = (b.upper - b.lower) / 2
        return math.hypot(self.stddev, h * self.count_stddev) / max(1.0, rows)

    def _drawn_noise(self) -> dict[str, Any]:
        """The noise the released value carries: the statistic's own, or for ``persons`` read
        off the selection the selection's count (its ``budget`` is the share moved into it)."""
        s = self.params.selection
        if self.releases_selection_count and isinstance(s, LaplaceThresholding):
            return describe_selection_count(s)
        return describe_noise(self.params.noise)

    def to_manifest(self) -> dict[str, Any]:
        p, b = self.params, self.params.bounding
        out: dict[str, Any] = {
            "name": p.name,
            "metric": p.metric,
            "by": list(b.by),
            "value": b.value,
            "bounds": [b.lower, b.upper] if b.value is not None else None,
            "max_partitions_per_person": b.max_partitions_per_person,
            "max_rows_per_partition": b.max_rows_per_partition,
            "share": self.share.to_manifest(),
            "partitions": "private" if p.selection else "public" if b.by else "none",
            "n_public_partitions": self.n_public_partitions,
            "statistic": {
                "budget": self.statistic_budget.to_manifest(),
                "mechanism": self._drawn_noise(),
                "sensitivity": vars(self.sensitivity),
                "stddev": self.stddev,
                "error95_half_width": self.error95,
                "drawn_from": "selection noisy count" if self.releases_selection_count else "noise",
            },
        }
        if p.metric == "mean":
            out["statistic"]["estimator"] = MEAN_ESTIMATOR
        if p.count_noise is not None and self.count_sensitivity is not None:
            out["statistic"]["count_mechanism"] = describe_noise(p.count_noise)
            out["statistic"]["count_sensitivity"] = vars(self.count_sensitivity)
            out["statistic"]["count_stddev"] = self.count_stddev
        if self.shared_selection is not None:  # booked once, in the manifest's "selections"
            out["partitions"] = "private, shared"
            out["selection"] = {"shared": self.shared_selection}
            return out
        out["selection"] = describe_selection(p.selection, self.selection_delta)
        if out["selection"] is not None and self.selection_budget is not None:
            out["selection"]["budget"] = self.selection_budget.to_manifest()
        return out

    def plan_lines(self) -> list[str]:
        """``userdp plan``: bounds, selection, each noise's scale and 95% error half-width."""
        p, b = self.params, self.params.bounding
        values = f" values in [{b.lower:g}, {b.upper:g}]" if b.value is not None else ""
        lines = [
            f"{p.metric} by {', '.join(b.by) if b.by else '(everything)'}",
            f"bounds: L={b.max_partitions_per_person} C={b.max_rows_per_partition}{values}",
        ]
        if self.shared_selection is not None:
            lines.append(f"selection: shared, {self.shared_selection} (below)")
        elif p.selection is not None:
            s = p.selection
            budget = f"ε={float(s.epsilon):.4g}" if hasattr(s, "epsilon") else ""
            budget = budget or f"ρ={float(getattr(s, 'rho', 0)):.4g}"
            spends = f" {self.selection_budget}" if self.selection_budget is not None else ""
            lines.append(
                f"selection{spends}: {type(s).__name__} {budget}, δ={float(s.delta):.3g}, "
                f"keeps a partition with ≥ {s.half_keep_count} persons half the time"
            )
        elif self.n_public_partitions is not None:
            lines.append(f"partitions: {self.n_public_partitions} public keys")
        kind = f"{type(p.noise).__name__.removesuffix('Mechanism')} {self.statistic_budget}"
        if self.releases_selection_count:  # its noise is the selection's, at the selection's ε
            kind = (
                "the selection's noisy count (discrete Laplace at the selection's ε; given that "
                "it passed the threshold, so it leans high on partitions near it)"
            )
        what = "centred sum (with rows: half each)" if p.metric == "mean" else p.metric
        lines.append(
            f"{what}: {kind}, L1 sens {self.sensitivity.l1:g}, "
            f"L2 sens {self.sensitivity.l2:g}, stddev {self.stddev:.4g}, "
            f"95% error ±{self.error95:.4g}"
        )
        if self.count_stddev is not None:
            lines.append(
                f"rows: stddev {self.count_stddev:.4g}; mean: stddev ≤ "
                f"{self.mean_stddev(1.0):.4g}/n at n rows, 95% error ≤ "
                f"±{1.96 * self.mean_stddev(1.0):.4g}/n (the worst case, a mean at a bound; "
                "each row's stddev column states its own)"
            )
        return lines


def plan_aggregate(q: QueryConfig, ctx: PlanContext) -> QueryPlan:
    share, sel_delta = ctx.share, ctx.delta
    L, C = q.max_partitions_per_person, q.max_rows_per_partition
    lo, hi = q.bounds if q.bounds is not None else (0.0, 0.0)
    bounding = BoundingParams(q.by, q.value, lo, hi, L, C)
    shared = ctx.shared_selection
    keys = None
    selection: SelectionRule | None
    if shared is not None:  # one selection for the group (shared_selection.py)
        selection, selection_budget, stat, persons_reuse = _shared_split(q, share, shared)
    else:
        if q.partitions not in (None, "private"):
            keys = ctx.public_keys()
        selection, selection_budget, stat, persons_reuse = _own_split(q, ctx)
    sens, count_sens = _sensitivities(q, bounding)
    parts = 2 if q.metric == "mean" else 1
    spans = L if q.by else 1  # partitions one person changes, each released and rounded alone
    noise = _mechanism(q.noise, stat, sens, parts, spans)
    count_noise = _mechanism(q.noise, stat, count_sens, parts, spans) if count_sens else None
    metric = cast(Metric, q.metric)
    params = ReleaseParams(
        q.name,
        metric,
        bounding,
        noise,
        count_noise,
        keys,
        selection,
        release_selection_count=persons_reuse,
    )
    if persons_reuse and isinstance(selection, LaplaceThresholding):
        stddev = discrete_laplace_std(selection.scale)
        err = float(discrete_laplace_error95(selection.scale))  # an integer noise: ±m covers
    else:
        stddev, err = noise.std, _error95(noise)
    return QueryPlan(
        params=params,
        share=share,
        selection_delta=sel_delta,
        statistic_budget=stat,
        sensitivity=sens,
        count_sensitivity=count_sens,
        stddev=stddev,
        error95=err,
        count_stddev=count_noise.std if count_noise else None,
        releases_selection_count=persons_reuse,
        n_public_partitions=len(keys) if keys is not None else None,
        selection_budget=selection_budget,
        shared_selection=shared.name if shared is not None else None,
    )


def _shared_split(
    q: QueryConfig, share: Budget, shared: SelectionPlan
) -> tuple[SelectionRule, None, Budget, bool]:
    """A member of a shared selection: the group's rule; its statistic keeps
    ``statistic_fraction`` of the share (all of it when its value is the selection's count)."""
    f = shared.statistic_fraction
    persons_reuse = shared.releases_count and q.metric == "persons" and q.noise == "laplace"
    stat: Budget
    if isinstance(share, ZCDP):
        stat = ZCDP(share.rho * f)
    elif q.noise == "gaussian":
        assert isinstance(share, ApproxDP)  # the parser requires δ for Gaussian noise under ε
        stat = zcdp_budget_for(ApproxDP(share.epsilon * f, share.delta))
    else:
        stat = PureDP(share.epsilon if persons_reuse else share.epsilon * f)
    return shared.rule, None, stat, persons_reuse


def _own_split(
    q: QueryConfig, ctx: PlanContext
) -> tuple[SelectionRule | None, Budget | None, Budget, bool]:
    """The query's own selection (private partitions) and statistic from its share."""
    share, sel_delta, L = ctx.share, ctx.delta, q.max_partitions_per_person
    private = q.private_partitions
    laplace = q.noise == "laplace"
    persons_reuse = private and laplace and q.metric == "persons" and not isinstance(share, ZCDP)
    needs_delta = private or (not laplace and not isinstance(share, ZCDP))
    if needs_delta and isinstance(share, ApproxDP) and share.delta == 0:
        raise ConfigError(
            ctx.key,
            str(share),
            "a share with delta > 0",
            "private partitions and gaussian noise need δ; the other queries' "
            "explicit shares left none",
            ctx.source,
        )
    # One equal part of the share per noise draw (a mean draws two) and one for the selection,
    # as PipelineDP splits an aggregation's budget: the mean's selection gets 1/3, not 1/2.
    sel = Fraction(1, noise_draws(q) + 1) if private else Fraction(0)
    selection: SelectionRule | None = None
    selection_budget: Budget | None = None
    stat: Budget  # the statistic's budget, PureDP (Laplace) or ZCDP (Gaussian)
    if isinstance(share, ZCDP):
        if private:
            selection = GaussianThresholding(share.rho * sel, sel_delta, L)
        stat = ZCDP(share.rho * (1 - sel))
    elif isinstance(share, ApproxDP) and not laplace:
        rho = zcdp_budget_for(ApproxDP(share.epsilon, share.delta / 2 if private else share.delta))
        if private:
            selection = GaussianThresholding(rho.rho * sel, share.delta / 2, L)
        stat = ZCDP(rho.rho * (1 - sel))
    else:
        eps = share.epsilon
        if private:
            assert isinstance(share, ApproxDP)  # config guarantees δ > 0 for private partitions
            if persons_reuse:  # its noisy count is the released value: Laplace thresholding
                selection = LaplaceThresholding(eps, share.delta, L)
            else:  # keys only: the rule that keeps the most at its budget (selection_choice)
                selection = best_selection(eps * sel, share.delta, L)
            selection_budget = ApproxDP(eps if persons_reuse else eps * sel, share.delta)
        stat = PureDP(eps if persons_reuse else eps * (1 - sel))
    return selection, selection_budget, stat, persons_reuse


def noise_draws(q: QueryConfig) -> int:
    """Noise draws per partition of a bounded aggregate: a mean draws two (sum and rows)."""
    return 2 if q.metric == "mean" else 1


def _sensitivities(q: QueryConfig, b: BoundingParams) -> tuple[Sensitivity, Sensitivity | None]:
    L, C = b.max_partitions_per_person, b.max_rows_per_partition
    rows = _sens(Fraction(C), L)
    if q.metric == "persons":
        return _sens(Fraction(1), L), None
    if q.metric == "count":
        return rows, None
    g = Fraction(2) ** quantum_exponent(b.lower, b.upper)
    lo, hi = Fraction(b.lower), Fraction(b.upper)  # the clamp's exact binary values
    on_grid = all((x / g).denominator == 1 for x in (lo, hi, (lo + hi) / 2))
    margin = 0 if on_grid else g  # rounding to the grid may step one quantum past a bound
    if q.metric == "sum":
        return _sens(C * (max(abs(lo), abs(hi)) + margin), L), None
    return _sens(C * ((hi - lo) / 2 + margin), L), rows


def _sens(per_partition: Fraction, L: int) -> Sensitivity:
    # Rounded up to floats: a mechanism calibrated to a larger sensitivity is still private.
    l2 = math.sqrt(L) * float(per_partition)
    while Fraction(l2) ** 2 < L * per_partition**2:
        l2 = math.nextafter(l2, math.inf)
    return Sensitivity(float_up(per_partition), float_up(per_partition * L), l2)


def _mechanism(
    noise: str, stat: Budget, sens: Sensitivity, parts: int, spans: int
) -> NoiseMechanism:
    """One per-partition noise draw. The sensitivity covers the ``spans`` partitions one person
    changes, and each is rounded to the noise grid alone: the mechanism allows for ``spans``
    roundings, not one (additive.py's module docstring)."""
    if isinstance(stat, PureDP):
        return LaplaceMechanism(sens.l1, float_down(stat.epsilon / parts), spans=spans)
    assert isinstance(stat, ZCDP)
    rho = stat.rho / parts
    if noise == "gaussian":
        return GaussianMechanism(sens.l2, float_down(rho), spans=spans)
    return LaplaceMechanism(sens.l1, epsilon_within_rho(rho), spans=spans)  # inside a ρ share


def _error95(m: NoiseMechanism) -> float:
    return m.scale * LN20 if isinstance(m, LaplaceMechanism) else Z95 * m.std
