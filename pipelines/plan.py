"""Plan a release from its job config alone: budget split, sensitivities, calibrated mechanisms.

No data is read (public key files are public and are read). The order is fixed: first the total is
split over the queries with :func:`~transforms.mechanisms.accounting.split_budget` (explicit shares,
the rest evenly), so an overspend fails before anything else, with the numbers; then each query's
share is divided between partition selection and its statistic, and the mechanisms are calibrated.

Rules for a query's share (what the manifest records under ``selection`` and ``statistic``):

* Public partitions or no ``by``: the whole share goes to the statistic.
* Private partitions, Laplace noise, (ε, δ) share: ``LaplaceThresholding`` on the person count
  with ε/2 and all of δ; the statistic gets the other ε/2. For metric ``persons`` the thresholding's
  own noisy count *is* the released value, so selection takes the whole ε and no other noise is
  drawn (``QueryPlan.releases_selection_count``).
* Private partitions, Gaussian noise, (ε, δ) share: ρ = ``zcdp_budget_for((ε, δ/2))``;
  ``GaussianThresholding`` with ρ/2 and δ/2; the statistic gets ρ/2. The whole is ρ-zCDP → (ε, δ/2)
  for the counts plus δ/2 for the selection: (ε, δ)-DP.
* zCDP total (ρ, plus a δ for selection): ``GaussianThresholding`` with ρ/2 and the query's δ; the
  statistic gets ρ/2 (Gaussian, or Laplace with the largest ε such that ε²/2 ≤ its ρ).
* ``mean``: the statistic's budget is split evenly between the centred sum and the row count.

Sensitivities follow docs/release-job-contracts.md; bounds are widened to the fixed-point grid
(``transforms.params.quantum_exponent``) when they are not on it, so rounding cannot exceed them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, cast

from userdp.transforms.mechanisms.accounting import (
    ZCDP,
    ApproxDP,
    Budget,
    BudgetExceededError,
    PureDP,
    compose,
    epsilon_within_rho,
    float_down,
    float_up,
    split_budget,
    zcdp_budget_for,
)
from userdp.transforms.mechanisms.additive import GaussianMechanism, LaplaceMechanism
from userdp.transforms.mechanisms.discrete import discrete_laplace_std
from userdp.transforms.mechanisms.partition_selection import (
    GaussianThresholding,
    LaplaceThresholding,
)
from userdp.transforms.params import (
    BoundingParams,
    Metric,
    NoiseMechanism,
    ReleaseParams,
    SelectionRule,
    quantum_exponent,
)

from .config import ConfigError, JobConfig, QueryConfig
from .kinds import kind_of
from .kinds.base import KindPlan, PlanContext
from .public_keys import read_public_keys
from .version import userdp_code_digest, userdp_version

Z95 = 1.959963984540054  # two-sided 95% normal quantile
LN20 = math.log(20.0)  # Laplace: P(|X| > b·ln 20) = 0.05


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

    @property
    def name(self) -> str:
        return self.params.name

    def mean_stddev(self, rows: float) -> float:
        """≈ stddev of a noisy mean at ``rows`` rows: √(σ_s² + h²σ_c²)/rows, h = (hi − lo)/2 (the
        delta method with |mean − mid| ≤ h; ignores the max(1, ·) and the clamp)."""
        if self.count_stddev is None:
            raise ValueError(f"query {self.name!r} is not a mean")
        b = self.params.bounding
        h = (b.upper - b.lower) / 2
        return math.hypot(self.stddev, h * self.count_stddev) / max(1.0, rows)

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
                "mechanism": _describe(p.noise),
                "sensitivity": vars(self.sensitivity),
                "stddev": self.stddev,
                "error95_half_width": self.error95,
                "drawn_from": "selection noisy count" if self.releases_selection_count else "noise",
            },
        }
        if p.count_noise is not None and self.count_sensitivity is not None:
            out["statistic"]["count_mechanism"] = _describe(p.count_noise)
            out["statistic"]["count_sensitivity"] = vars(self.count_sensitivity)
            out["statistic"]["count_stddev"] = self.count_stddev
        out["selection"] = _describe_selection(p.selection, self.selection_delta)
        return out


@dataclass(frozen=True)
class ReleasePlan:
    queries: tuple[QueryPlan | KindPlan, ...]  # bounded aggregates, or another kind's plan
    total: Budget
    spent: Budget
    total_selection_delta: Fraction  # zCDP totals only: the δ for private selection
    spent_selection_delta: Fraction
    config_hash: str

    def to_manifest(self) -> dict[str, Any]:
        """Public facts only: the config, the plan, the mechanisms; nothing from the data."""
        extra = {}
        if isinstance(self.total, ZCDP):
            extra = {
                "total_selection_delta": _num(self.total_selection_delta),
                "spent_selection_delta": _num(self.spent_selection_delta),
            }
        return {
            "userdp_version": userdp_version(),
            # changes whenever released values can change (pipelines/version.py)
            "userdp_code": userdp_code_digest(),
            "config_hash": self.config_hash,
            "total": self.total.to_manifest(),
            "spent": self.spent.to_manifest(),
            **extra,
            "selection_rule": "Laplace: thresholding gets ε/2 and all of δ (persons: all of ε, "
            "its noisy count released); Gaussian: thresholding gets ρ/2 and the selection δ",
            "queries": [q.to_manifest() for q in self.queries],
        }


def plan_release(job: JobConfig) -> ReleasePlan:
    """Split the budget, then plan every query. Raises ConfigError on an overspend."""
    b = job.budget
    total: Budget
    if b.rho is not None:
        total = ZCDP(b.rho)
    elif b.delta:
        total = ApproxDP(b.epsilon or 0, b.delta)
    else:
        total = PureDP(b.epsilon or 0)
    explicit = {q.name: explicit_share(q, total) for q in job.queries}
    try:
        shares = split_budget(total, explicit)
    except BudgetExceededError as e:
        raise ConfigError(
            "queries[*] shares",
            {k: str(v) for k, v in explicit.items() if v},
            f"shares that fit in the total {total}",
            str(e),
            job.source,
        ) from e
    sel_deltas = _split_selection_delta(job, total)
    plans = tuple(
        plan_query(q, job_plan_context(job, i, shares[q.name], sel_deltas.get(q.name, Fraction(0))))
        for i, q in enumerate(job.queries)
    )
    spent = compose(*(p.share for p in plans))
    return ReleasePlan(
        plans,
        total,
        spent,
        Fraction(b.delta or 0) if b.rho else Fraction(0),
        sum(sel_deltas.values(), Fraction(0)),
        job.config_hash,
    )


def job_plan_context(job: JobConfig, i: int, share: Budget, sel_delta: Fraction) -> PlanContext:
    """The context of ``job.queries[i]``: errors name ``queries[i]``, keys come from its file."""
    q = job.queries[i]
    return PlanContext(
        f"queries[{i}]",
        job.source,
        job.input.person,
        share,
        sel_delta,
        lambda: read_public_keys(q, f"queries[{i}].partitions", job.source),
    )


def plan_query(q: QueryConfig, ctx: PlanContext) -> QueryPlan | KindPlan:
    """One query planned from its share: the bounded aggregates here, other metrics by their
    kind. The job file (after its split) and the library both plan through this one function."""
    kind = kind_of(q)
    return _plan_aggregate(q, ctx) if kind is None else kind.plan(q, ctx)


def spends_delta(q: QueryConfig) -> bool:
    """Does the query spend δ under a zCDP total (private selection, an (ε, δ) mechanism)?"""
    kind = kind_of(q)
    return kind.needs_delta(q) if kind is not None else q.private_partitions


def explicit_share(q: QueryConfig, total: Budget) -> Budget | None:
    if isinstance(total, ZCDP):
        return ZCDP(q.rho) if q.rho is not None else None
    if q.epsilon is None:
        return None
    return ApproxDP(q.epsilon, q.delta or 0) if isinstance(total, ApproxDP) else PureDP(q.epsilon)


def _split_selection_delta(job: JobConfig, total: Budget) -> dict[str, Fraction]:
    """Under a zCDP total: budget.delta over the queries that spend δ — private partitions or an
    (ε, δ) mechanism of some kind — explicit shares first, the rest evenly."""
    if not isinstance(total, ZCDP) or not job.budget.delta:
        return {}
    private = [q for q in job.queries if spends_delta(q)]
    given = {q.name: q.delta for q in private if q.delta is not None}
    rest = [q.name for q in private if q.delta is None]
    left = job.budget.delta - sum(given.values(), Fraction(0))
    if left < 0 or (rest and left == 0):
        raise ConfigError(
            "queries[*].delta",
            {k: float(v) for k, v in given.items()},
            f"delta shares summing to less than budget.delta = {float(job.budget.delta)}",
            f"the explicit shares leave {float(left)} for {rest or 'no query'}",
            job.source,
        )
    return {**given, **{name: left / len(rest) for name in rest}}


def _plan_aggregate(q: QueryConfig, ctx: PlanContext) -> QueryPlan:
    share, sel_delta = ctx.share, ctx.delta
    L, C = q.max_partitions_per_person, q.max_rows_per_partition
    lo, hi = q.bounds if q.bounds is not None else (0.0, 0.0)
    bounding = BoundingParams(q.by, q.value, lo, hi, L, C)
    keys = ctx.public_keys() if q.partitions not in (None, "private") else None
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
    selection: SelectionRule | None = None
    stat: Budget  # the statistic's budget, PureDP (Laplace) or ZCDP (Gaussian)
    if isinstance(share, ZCDP):
        if private:
            selection = GaussianThresholding(share.rho / 2, sel_delta, L)
        stat = ZCDP(share.rho / 2 if private else share.rho)
    elif isinstance(share, ApproxDP) and not laplace:
        rho = zcdp_budget_for(ApproxDP(share.epsilon, share.delta / 2 if private else share.delta))
        if private:
            selection = GaussianThresholding(rho.rho / 2, share.delta / 2, L)
        stat = ZCDP(rho.rho / 2 if private else rho.rho)
    else:
        eps = share.epsilon
        if private:
            assert isinstance(share, ApproxDP)  # config guarantees δ > 0 for private partitions
            selection = LaplaceThresholding(eps if persons_reuse else eps / 2, share.delta, L)
        stat = PureDP(eps / 2 if private and not persons_reuse else eps)

    sens, count_sens = _sensitivities(q, bounding)
    parts = 2 if q.metric == "mean" else 1
    noise = _mechanism(q.noise, stat, sens, parts)
    count_noise = _mechanism(q.noise, stat, count_sens, parts) if count_sens else None
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
        stddev, err = discrete_laplace_std(selection.scale), float(selection.scale) * LN20
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
    )


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


def _mechanism(noise: str, stat: Budget, sens: Sensitivity, parts: int) -> NoiseMechanism:
    if isinstance(stat, PureDP):
        return LaplaceMechanism(sens.l1, float_down(stat.epsilon / parts))
    assert isinstance(stat, ZCDP)
    rho = stat.rho / parts
    if noise == "gaussian":
        return GaussianMechanism(sens.l2, float_down(rho))
    return LaplaceMechanism(sens.l1, epsilon_within_rho(rho))  # Laplace inside a ρ share


def _error95(m: NoiseMechanism) -> float:
    return m.scale * LN20 if isinstance(m, LaplaceMechanism) else Z95 * m.std


def _describe(m: NoiseMechanism) -> dict[str, Any]:
    if isinstance(m, LaplaceMechanism):
        return {
            "kind": "laplace",
            "epsilon": m.epsilon,
            "l1_sensitivity": m.l1_sensitivity,
            "scale": m.scale,
            "granularity": m.granularity,
            "stddev": m.std,
        }
    return {
        "kind": "gaussian",
        "rho": m.rho,
        "l2_sensitivity": m.l2_sensitivity,
        "stddev": m.std,
        "granularity": m.granularity,
    }


def _describe_selection(s: SelectionRule | None, sel_delta: Fraction) -> dict[str, Any] | None:
    if isinstance(s, LaplaceThresholding):
        return {
            "rule": "laplace_thresholding",
            "epsilon": _num(s.epsilon),
            "delta": _num(s.delta),
            "max_partitions_per_person": s.max_partitions_per_person,
            "scale": _num(s.scale),
            "threshold": s.threshold,
            "delta_achieved": str(s.delta_achieved),
        }
    if isinstance(s, GaussianThresholding):
        return {
            "rule": "gaussian_thresholding",
            "rho": _num(s.rho),
            "delta": _num(s.delta),
            "max_partitions_per_person": s.max_partitions_per_person,
            "sigma2": _num(s.sigma2),
            "threshold": s.threshold,
            "delta_achieved": str(s.delta_achieved),
        }
    return None


def _num(x: Fraction) -> dict[str, Any]:
    return {"value": float(x), "exact": str(x)}
