"""Local-sensitivity query kinds: smooth-sensitivity quantiles, propose-test-release, stability.

Two kind objects (``pipelines/kinds/base.py``'s interface):

* :data:`QUANTILE` — metrics ``median`` and ``quantile`` (with ``q``), ``method =
  "smooth_sensitivity"``: the q-quantile of one value per person, clamped to ``bounds``, plus noise
  scaled to its β-smooth sensitivity (Nissim, Raskhodnikova & Smith 2007). ``noise`` chooses the
  rule: ``cauchy`` (pure ε; default under an ε total; ``gamma``, default 4), ``laplace`` ((ε, δ);
  default under an (ε, δ) total) or ``lln`` (Laplace-log-normal, ρ-zCDP; default under a ρ total).
* :data:`KIND` — ``ptr_mean`` / ``ptr_median`` (propose-test-release on one value per person,
  with a proposed ``bound`` on the local sensitivity, or without one: the sparse-vector ladder),
  ``top_partition`` (the ``by`` key held by the most persons, exactly, or ⊥). (``trimmed_mean``
  is :mod:`.trimmed_mean`: private thresholds, not smooth sensitivity.)

Guarantees, for add/remove one person, are the core mechanisms' (``transforms/mechanisms``:
``smooth_sensitivity``, ``ptr``, ``ptr_ladder``, ``stability``; proofs in
``docs/local_sensitivity.md``); how each is counted against the query's share is in
:mod:`.local_sensitivity_plan`. ⊥ is an ordinary outcome: the output row has ``released`` false,
and the budget is spent either way.

Per-person values: ``per_person`` reduces each person's rows to one value (``mean``, ``sum``,
``count`` (rows; no ``value``), ``max``, ``min`` of ``value``, or ``distinct`` values of
``value``) — so adding or removing a person adds or removes exactly one value. Smooth
sensitivity and PTR's quantiles gather only the window of order statistics their release reads
(:mod:`transforms.rank_window`: a number of values that follows β, or PTR's public distance
cap, not the person count); PTR's means combine only the count and the exact clamped sum; the
default method, the exponential mechanism (:mod:`.exponential_quantile`), and the
trimmed mean gather a histogram of grid indices.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

from userdp.transforms.mechanisms.exponential_quantile import GridBoundsError
from userdp.transforms.mechanisms.ptr import PTRMean, PTRQuantile
from userdp.transforms.mechanisms.ptr_ladder import LadderPTR
from userdp.transforms.mechanisms.quantile_sensitivity import SpanError, as_quantile
from userdp.transforms.mechanisms.smooth_sensitivity import DEFAULT_GAMMA, SmoothQuantile
from userdp.transforms.mechanisms.stability import StableTopPartition

from ..config import ConfigError, QueryConfig
from ..config_fields import MISSING, parse_bounds, parse_by, parse_shares
from .base import BuildContext, KindPlan, PlanContext, QuerySection
from .local_sensitivity_plan import (
    NUMERIC_COLUMNS,
    PerPersonPlan,
    TopPartitionPlan,
    dp_budget,
    smooth_noise,
)

if TYPE_CHECKING:
    from apache_beam.pvalue import PCollection

    from userdp.transforms.local_sensitivity import PerPersonMechanism

# The per-person reductions a job file may name (transforms.per_person.REDUCTIONS).
REDUCTIONS = ("mean", "sum", "count", "max", "min", "distinct")
SMOOTH_NOISES = ("cauchy", "laplace", "lln")
METHOD = "smooth_sensitivity"
_SHARES = ("epsilon", "delta", "rho")
PER_PERSON_KEYS = ("name", "metric", "value", "per_person", "bounds", *_SHARES)
_NO_BY = (
    "no `by`: this metric releases one value over all persons",
    "remove `by` (top_partition releases the partition with the most persons)",
)


def refuse_by(s: QuerySection) -> None:
    if s.has("by"):
        s.fail("by", s.get("by"), *_NO_BY)


def parse_per_person(s: QuerySection, metric: str) -> dict[str, Any]:
    """``per_person``, ``value`` and ``bounds``: the common keys of the per-person metrics."""
    reduction = s.choice("per_person", REDUCTIONS)
    if reduction == "count":
        if s.has("value"):
            s.fail("value", s.get("value"), "no value for per_person = 'count'", "remove `value`")
        value = None
    else:
        value = s.string("value")
    bounds = parse_bounds(s.v, s.raw, s.prefix, required=True, metric=metric)
    return {"reduction": reduction, "value": value, "bounds": bounds}


def _needs_delta(s: QuerySection, metric: str) -> tuple[str, object, str, str]:
    return (
        s.key("metric"),
        metric,
        f"a delta > 0: {metric} is (ε, δ)-DP",
        "give the total a delta (job file: [budget] delta; library: Budget(..., delta=...)) "
        "and this query's share one if it states epsilon (under rho, the total's delta)",
    )


def config_error(ctx: PlanContext, err: ValueError) -> ConfigError:
    if isinstance(err, GridBoundsError):  # the bounds' fault too
        return ConfigError(
            f"{ctx.key}.bounds",
            err.bounds,
            "[lower, upper] further apart than the smallest float step",
            str(err),
            ctx.source,
        )
    if isinstance(err, SpanError):  # the bounds' fault, not the share's
        return ConfigError(
            f"{ctx.key}.bounds",
            err.bounds,
            "[lower, upper] with upper − lower a finite float",
            "this method scales its noise by the span; narrow the bounds (the default "
            "exponential method of median and quantile accepts them)",
            ctx.source,
        )
    return ConfigError(
        ctx.key,
        str(ctx.share),
        "a share the mechanism accepts",
        str(err),
        ctx.source,
    )


def _require_delta(ctx: PlanContext, delta: object, metric: str) -> None:
    if delta == 0:
        raise ConfigError(
            ctx.key,
            str(ctx.share),
            "a share with delta > 0",
            f"{metric} is (ε, δ)-DP; the other queries' explicit shares left no δ",
            ctx.source,
        )


def parse_quantile_head(
    s: QuerySection, own_keys: tuple[str, ...]
) -> tuple[str, Fraction, dict[str, Any]]:
    """The keys every quantile method shares: (metric, q, per-person keys); no ``by``; the
    method's ``own_keys`` allowed besides."""
    metric = s.string("metric")
    refuse_by(s)
    keys = (*PER_PERSON_KEYS, "method", *own_keys)
    s.allow_keys((*keys, "q") if metric == "quantile" else keys)
    if metric == "quantile":
        s.real("q", low=0.0, high=1.0, open_low=True, open_high=True)
        q = as_quantile(s.get("q"))  # exact: 0.9 is 9/10
    else:
        q = Fraction(1, 2)
    return metric, q, parse_per_person(s, metric)


def quantile_config(
    s: QuerySection, metric: str, common: dict[str, Any], shares: tuple[Any, Any, Any], **kw: Any
) -> QueryConfig:
    """The QueryConfig of a per-person metric (a quantile method, the trimmed mean): name, value,
    bounds, shares, its ``options``."""
    eps, delta, rho = shares
    return QueryConfig(
        s.string("name"), metric, value=common["value"], bounds=common["bounds"],
        epsilon=eps, delta=delta, rho=rho, **kw,
    )  # fmt: skip


class SmoothQuantileKind:
    """``median`` and ``quantile`` by smooth sensitivity (``method = "smooth_sensitivity"``)."""

    metrics = ("median", "quantile")

    def parse(self, s: QuerySection) -> QueryConfig:
        metric, q, common = parse_quantile_head(s, ("noise", "gamma"))
        method = s.get("method")
        if method is not MISSING and method != METHOD:
            s.fail("method", method, f'"{METHOD}" for this kind', "the default; omit `method`")
        budget = s.budget
        default = "lln" if budget.rho is not None else "laplace" if budget.delta else "cauchy"
        noise = s.choice("noise", SMOOTH_NOISES, default=default)
        if noise != "cauchy" and s.has("gamma"):
            s.fail("gamma", s.get("gamma"), "no gamma for this noise", "gamma is for cauchy")
        gamma = s.real("gamma", default=DEFAULT_GAMMA, low=1.0, open_low=True)
        spends = (
            (s.key("noise"), noise, "a delta > 0 for laplace noise ((ε, δ)-DP)", "or cauchy")
            if s.has("noise")
            else (
                s.key("delta"),
                MISSING,
                "a delta share: the default noise under an (ε, δ) total is laplace, which spends δ",
                "give this query delta (a share of the budget's), or noise = 'cauchy' (pure ε)",
            )
        )
        lln = (
            s.key("noise"),
            noise,
            "cauchy under an epsilon total without delta",
            "lln is ρ-zCDP: use a rho total, or give delta to convert",
        )
        shares = parse_shares(
            s.v,
            s.raw,
            s.prefix,
            budget,
            spends_delta=spends if noise == "laplace" else None,
            delta_under_epsilon=lln if noise == "lln" else None,
        )
        options = {"method": METHOD, "q": q, "reduction": common["reduction"], "gamma": gamma}
        return quantile_config(s, metric, common, shares, noise=noise, options=options)

    def needs_delta(self, query: QueryConfig, rho_total: bool) -> bool:
        # laplace is (ε, δ)-DP; lln is ρ-zCDP, converted from an (ε, δ) share under (ε, δ)
        return query.noise == "laplace" or (query.noise == "lln" and not rho_total)

    def required_columns(self, query: QueryConfig) -> dict[str, str]:
        return value_columns(query)

    def plan(self, query: QueryConfig, ctx: PlanContext) -> KindPlan:
        o = query.options
        if query.noise == "laplace":
            _require_delta(ctx, dp_budget(ctx.share, ctx.delta).delta, query.metric)
        assert query.bounds is not None
        try:
            noise = smooth_noise(query.noise, o["gamma"], ctx.share, ctx.delta)
            mechanism = SmoothQuantile(o["q"], *query.bounds, noise)
        except ValueError as e:
            raise config_error(ctx, e) from e
        return per_person_plan(query, ctx, METHOD, mechanism)

    def expand(
        self, clean: PCollection[Any], plan: KindPlan, ctx: BuildContext
    ) -> PCollection[dict[str, Any]]:
        return expand_per_person(clean, plan, ctx)


class LocalSensitivityKind:
    """``ptr_mean``, ``ptr_median``, ``top_partition``."""

    metrics = ("ptr_mean", "ptr_median", "top_partition")

    def parse(self, s: QuerySection) -> QueryConfig:
        metric = s.string("metric")
        name = s.string("name")
        if metric == "top_partition":
            s.allow_keys(("name", "metric", "by", *_SHARES))
            by = parse_by(s.v, s.raw, s.prefix)
            if not by:
                s.fail("by", s.get("by"), "one or more partition columns", 'e.g. by = ["domain"]')
            eps, delta, rho = parse_shares(
                s.v, s.raw, s.prefix, s.budget, spends_delta=_needs_delta(s, metric)
            )
            return QueryConfig(name, metric, tuple(by), epsilon=eps, delta=delta, rho=rho)
        refuse_by(s)
        s.allow_keys((*PER_PERSON_KEYS, "bound"))
        common = parse_per_person(s, metric)
        bound = s.real("bound", low=0.0, open_low=True) if s.has("bound") else None
        eps, delta, rho = parse_shares(
            s.v, s.raw, s.prefix, s.budget, spends_delta=_needs_delta(s, metric)
        )
        return QueryConfig(
            name,
            metric,
            value=common["value"],
            bounds=common["bounds"],
            epsilon=eps,
            delta=delta,
            rho=rho,
            options={"reduction": common["reduction"], "bound": bound},
        )

    def needs_delta(self, query: QueryConfig, rho_total: bool) -> bool:
        return True  # every metric of this kind is (ε, δ)-DP

    def required_columns(self, query: QueryConfig) -> dict[str, str]:
        if query.metric == "top_partition":
            return dict.fromkeys(query.by, "key")
        return value_columns(query)

    def plan(self, query: QueryConfig, ctx: PlanContext) -> KindPlan:
        b = dp_budget(ctx.share, ctx.delta)
        _require_delta(ctx, b.delta, query.metric)
        try:
            if query.metric == "top_partition":
                top = StableTopPartition(b.epsilon, b.delta)
                return TopPartitionPlan(query.name, ctx.share, ctx.delta, query.by, top)
            assert query.bounds is not None
            lo, hi = query.bounds
            bound = query.options["bound"]
            mechanism: PTRQuantile | PTRMean | LadderPTR
            if bound is None:
                if query.metric == "ptr_mean":
                    mechanism = LadderPTR("mean", lo, hi, b.epsilon, b.delta)
                else:
                    mechanism = LadderPTR("quantile", lo, hi, b.epsilon, b.delta, q=Fraction(1, 2))
            elif query.metric == "ptr_mean":
                mechanism = PTRMean(lo, hi, bound=bound, epsilon=b.epsilon, delta=b.delta)
            else:
                mechanism = PTRQuantile(
                    Fraction(1, 2), lo, hi, bound=bound, epsilon=b.epsilon, delta=b.delta
                )
        except ValueError as e:
            raise config_error(ctx, e) from e
        return per_person_plan(query, ctx, "propose_test_release", mechanism)

    def expand(
        self, clean: PCollection[Any], plan: KindPlan, ctx: BuildContext
    ) -> PCollection[dict[str, Any]]:
        return expand_per_person(clean, plan, ctx)


def value_columns(query: QueryConfig) -> dict[str, str]:
    if query.value is None:
        return {}
    # distinct counts values of any key type; the other reductions read a number
    kind = "key" if query.options["reduction"] == "distinct" else "number"
    return {query.value: kind}


def per_person_plan(
    query: QueryConfig,
    ctx: PlanContext,
    method: str,
    mechanism: PerPersonMechanism,
    output_columns: tuple[tuple[str, str], ...] = NUMERIC_COLUMNS,
) -> PerPersonPlan:
    return PerPersonPlan(
        query.name,
        query.metric,
        method,
        ctx.share,
        ctx.delta,  # > 0 only for an (ε, δ) mechanism under a ρ total
        query.options["reduction"],
        query.value,
        mechanism,
        output_columns=output_columns,
    )


def expand_per_person(
    clean: PCollection[Any], plan: KindPlan, ctx: BuildContext
) -> PCollection[dict[str, Any]]:
    # Beam loads here, when the pipeline is built: `userdp plan` never imports it.
    from userdp.transforms.local_sensitivity import (  # noqa: PLC0415
        ReleasePerPersonStatistic,
        ReleaseTopPartition,
    )

    key, name = ctx.keys, plan.name
    if isinstance(plan, TopPartitionPlan):
        top = ReleaseTopPartition(
            plan.mechanism,
            plan.by,
            keys=key,
            query=name,
            noise=ctx.noise,
        )
        out: PCollection[dict[str, Any]] = ctx.shards() | f"{name}/TopPartition" >> top
        return out  # {by..., released}
    assert isinstance(plan, PerPersonPlan)
    release = ReleasePerPersonStatistic(
        plan.mechanism,
        plan.reduction,
        plan.value,
        keys=key,
        query=name,
        noise=ctx.noise,
    )
    out = ctx.shards() | f"{plan.name}/LocalRelease" >> release
    return out  # {value, released}


QUANTILE = SmoothQuantileKind()
KIND = LocalSensitivityKind()
