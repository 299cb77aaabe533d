"""The bounded aggregates as a query kind: ``count``, ``persons``, ``sum``, ``mean``.

Like every other metric, they are one :class:`~.base.QueryKind`: ``parse`` reads the query's keys,
``plan`` calibrates the noise and the selection from the share (:mod:`.aggregate_plan`, which
states the rules and the guarantee), ``expand`` adds the steps — bound each person and aggregate
per shard (:class:`~userdp.transforms.aggregate.BoundAndAggregate`), then select partitions and
add noise in the one final combine (:class:`~userdp.transforms.noisy_combine.ReleaseNoisily`).

``count`` and ``sum`` with ``bound = "auto"`` choose their clamp privately instead of taking
``max_rows_per_partition`` and ``bounds``: that variant is :mod:`.auto_bound`, reached through
this kind (as the quantile methods are reached through :mod:`.quantile`), so the registry maps
each metric to exactly one module.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

from ..config import QueryConfig
from ..config_fields import parse_bounds, parse_by, parse_partitions, parse_shares
from ..config_model import QUERY_KEYS
from .aggregate_plan import QueryPlan, plan_aggregate
from .base import BuildContext, KindPlan, PlanContext, QueryKind, QuerySection

if TYPE_CHECKING:
    from apache_beam.pvalue import PCollection

METRICS = ("count", "persons", "sum", "mean")
NOISES = ("laplace", "gaussian")
AUTO_BOUND = "auto_bound"  # options["kind"] of a count/sum with bound = "auto"

_L_WITHOUT_BY = ("1 for a query without `by`", "without `by` there is one partition")
PRIVATE_NEEDS_DELTA = (
    "a delta > 0 for private partition selection",
    "give the total a delta (job file: [budget] delta; library: Budget(..., delta=...)) and "
    "this query's share one if it states epsilon, or use public partitions (job file: "
    "partitions = a file of public keys; library: public_partitions=[...])",
)
_GAUSSIAN_NEEDS_DELTA = (
    "laplace, or a delta > 0 for gaussian noise",
    "gaussian noise under an epsilon total needs delta (or use rho)",
)


def _auto_bound() -> QueryKind:
    from . import auto_bound  # noqa: PLC0415 (loads only for jobs that use it)

    return cast(QueryKind, auto_bound.KIND)


def _variant(query: QueryConfig) -> QueryKind | None:
    """The auto-bound kind for a ``bound = "auto"`` query; None for a bounded aggregate."""
    return _auto_bound() if query.options.get("kind") == AUTO_BOUND else None


class AggregateKind:
    metrics = METRICS

    def parse(self, s: QuerySection) -> QueryConfig:
        metric = s.raw["metric"]
        if metric in ("count", "sum") and s.has("bound"):  # bound = "auto": a private clamp
            return _auto_bound().parse(s)
        s.allow_keys(QUERY_KEYS)
        name, v, q, k = s.string("name"), s.v, s.raw, s.prefix
        by = parse_by(v, q, k)
        value = s.string("value", required=metric in ("sum", "mean"))
        if value is not None and metric in ("count", "persons"):
            s.fail("value", value, f"no value for metric {metric!r}", "remove `value`")
        if metric in ("count", "persons") and s.has("bounds"):
            s.fail("bounds", q["bounds"], f"no bounds for metric {metric!r}", "remove `bounds`")
        bounds = parse_bounds(v, q, k, required=metric in ("sum", "mean"), metric=metric)
        L = s.integer("max_partitions_per_person", required=bool(by), default=1)
        if not by and L != 1:
            s.fail("max_partitions_per_person", L, *_L_WITHOUT_BY)
        if metric == "persons" and s.has("max_rows_per_partition"):  # it would be recorded
            s.fail(  # in the manifest as if it bounded something
                "max_rows_per_partition",
                q["max_rows_per_partition"],
                "no max_rows_per_partition for metric 'persons'",
                "a person counts once per partition whatever their rows: remove the key",
            )
        C = s.integer("max_rows_per_partition", required=metric != "persons", default=1)
        partitions = parse_partitions(v, q, k, by)
        rho_total = s.budget.rho is not None
        noise = s.choice("noise", NOISES, default="gaussian" if rho_total else "laplace")
        private = partitions == "private"
        eps, delta, rho = parse_shares(
            v, q, k, s.budget,
            spends_delta=(s.key("partitions"), "private", *PRIVATE_NEEDS_DELTA)
            if private else None,
            delta_under_epsilon=(s.key("noise"), noise, *_GAUSSIAN_NEEDS_DELTA)
            if noise == "gaussian" else None,
        )  # fmt: skip
        return QueryConfig(
            name, metric, tuple(by), value, bounds, L, C, partitions, noise, eps, delta, rho
        )

    def needs_delta(self, query: QueryConfig, rho_total: bool) -> bool:
        variant = _variant(query)
        if variant is not None:
            return variant.needs_delta(query, rho_total)
        gaussian_as_approx = query.noise == "gaussian" and not rho_total  # (ε, δ) → ρ
        return query.private_partitions or gaussian_as_approx

    def required_columns(self, query: QueryConfig) -> dict[str, str]:
        variant = _variant(query)
        if variant is not None:
            return variant.required_columns(query)
        out = dict.fromkeys(query.by, "key")
        if query.value is not None:
            out[query.value] = "number"
        return out

    def plan(self, query: QueryConfig, ctx: PlanContext) -> KindPlan:
        variant = _variant(query)
        return variant.plan(query, ctx) if variant else plan_aggregate(query, ctx)

    def expand(
        self, clean: PCollection[Any], plan: KindPlan, ctx: BuildContext
    ) -> PCollection[dict[str, Any]]:
        if not isinstance(plan, QueryPlan):
            return _auto_bound().expand(clean, plan, ctx)
        # Beam loads here, when the pipeline is built: `userdp plan` never imports it.
        from userdp.transforms.aggregate import BoundAndAggregate  # noqa: PLC0415
        from userdp.transforms.noisy_combine import ReleaseNoisily  # noqa: PLC0415

        from ..public_keys import typed_public_keys  # noqa: PLC0415

        params = plan.params
        selected = ctx.selected if plan.shared_selection is not None else None
        if plan.shared_selection is not None and selected is None:
            raise ValueError(
                f"internal error in userdp: query {plan.name!r} shares "
                f"{plan.shared_selection!r}, but no selection was built for it"
            )
        if params.public_partitions is not None:
            typed = typed_public_keys(params.public_partitions, params.bounding.by, ctx.schema)
            params = dataclasses.replace(params, public_partitions=typed)
        bounding = BoundAndAggregate(
            params.bounding, ctx.keys.subkey("bounding"), params.public_partitions
        )
        out = (
            ctx.shards()
            | "BoundAndAggregate" >> bounding
            | "Release" >> ReleaseNoisily(params, ctx.keys, noise=ctx.noise, selected=selected)
        )
        return cast("PCollection[dict[str, Any]]", out)


KIND = AggregateKind()
