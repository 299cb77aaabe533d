"""Shifted-inverse query kinds: totals, maxima, distinct counts and quantiles with no contribution
bound (Fang, Dong & Yi, CCS 2022; ``docs/shifted_inverse.md``).

Two kind objects (``pipelines/kinds/base.py``'s interface):

* :data:`KIND` — metrics ``total`` (rows per person summed, or the sum of a non-negative
  ``value``), ``max`` (the largest — or, with ``k``, the k-th largest — per-person value:
  ``per_person`` = ``count`` (rows), ``sum`` or ``max`` of ``value``) and ``distinct`` (the number
  of distinct values of ``value``, e.g. URLs);
* :data:`QUANTILE` — ``median`` / ``quantile`` (``q``) with ``method = "shifted_inverse"``: the
  quantile of the row values of ``value`` (or, with ``per_person``, of one value per person),
  released as a row count, then a selection.

Shared keys: ``upper`` (D, default 2^40), ``resolution`` (d, default 1), ``beta`` (default 0.1),
``grid`` (``linear`` | ``log``, with ``growth``, default 1.01), ``search`` (``exponential``, the
default under ε totals, | ``binary``, the default under ρ), ``noise`` (binary search under ρ only:
``gaussian`` (default) | ``laplace``), and ``by`` with a file of public ``partitions`` and
``max_partitions_per_person`` (L). Guarantees and budget rules: :mod:`.shifted_inverse_plan`.
Values are clamped to [0, upper]: negative values count as 0.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any, cast

from userdp.transforms.mechanisms.quantile_sensitivity import as_quantile
from userdp.transforms.mechanisms.shifted_inverse import ShiftedInverseParams
from userdp.transforms.mechanisms.shifted_inverse_grid import OutputGrid
from userdp.transforms.params import free_sum_quantum

from ..config import ConfigError, QueryConfig
from ..config_fields import MISSING, finite_float, parse_by, parse_partitions, parse_shares
from ..public_keys import typed_public_keys
from .base import BuildContext, KindPlan, PlanContext, QuerySection
from .shifted_inverse_plan import ShiftedInversePlan, divide, shifted_inverse_params

if TYPE_CHECKING:
    from apache_beam.pvalue import PCollection


METHOD = "shifted_inverse"
SEARCHES = ("exponential", "binary")
GRIDS = ("linear", "log")
REDUCTIONS = ("count", "sum", "max")
DEFAULT_UPPER = Fraction(2**40)
DEFAULT_GROWTH = Fraction(101, 100)
_SHARES = ("epsilon", "delta", "rho")
_PARTITION_KEYS = ("by", "partitions", "max_partitions_per_person")
_GRID_KEYS = ("upper", "resolution", "beta", "grid", "growth", "search", "noise")
NO_PRIVATE_SELECTION = (  # (allowed, hint) of the error: see no_private_selection
    "a CSV/JSON file of public partition keys",
    "private partition selection is not available for these metrics; list the keys in a file",
)


def no_private_selection(error: ConfigError, key: str) -> bool:
    """Whether ``error`` is query ``key``'s "no private partition selection" refusal (the
    library rewords it: it takes keys as ``public_partitions=[...]``, not as a file)."""
    return (error.key, error.allowed, error.hint) == (f"{key}.partitions", *NO_PRIVATE_SELECTION)


def parse_partitioning(s: QuerySection) -> tuple[tuple[str, ...], str | None, int]:
    """``by``, a file of public ``partitions`` and L; without ``by`` neither may be given."""
    by = tuple(parse_by(s.v, s.raw, s.prefix))
    partitions = parse_partitions(s.v, s.raw, s.prefix, list(by))
    if partitions == "private":
        s.fail("partitions", s.get("partitions"), *NO_PRIVATE_SELECTION)
    L = s.integer("max_partitions_per_person", required=bool(by), default=1)
    if not by and s.has("max_partitions_per_person"):
        s.fail("max_partitions_per_person", L, "no L without `by`", "one partition: remove it")
    return by, partitions, L


def _grid_options(s: QuerySection) -> dict[str, Any]:
    """``upper``, ``resolution``, ``beta``, ``grid``, ``growth``, ``search``, ``noise``."""
    upper = s.number("upper", positive=True, hint="D, the largest value the grid can release")
    upper = upper or DEFAULT_UPPER
    resolution = s.number("resolution", positive=True, hint="d, the grid step near zero")
    resolution = resolution or Fraction(1)
    beta = s.number("beta", positive=True, below_one=True, hint="the failure probability β")
    beta = beta or Fraction(1, 10)
    grid = s.choice("grid", GRIDS, default="linear")
    if grid == "linear" and s.has("growth"):
        s.fail("growth", s.get("growth"), "no growth for a linear grid", 'or grid = "log"')
    growth = None
    if grid == "log":
        growth = s.number("growth", positive=True, hint="> 1: 1.01 for 1% steps") or DEFAULT_GROWTH
    for key, x in (("upper", upper), ("resolution", resolution), ("growth", growth)):
        if x is not None and not math.isfinite(finite_float(x)):  # 10^400: no float holds it
            s.fail(key, s.get(key), "a number below 1.8e308", "values are floats")
    try:
        OutputGrid(upper, resolution, grid, growth)
    except ValueError as e:
        if "upper / resolution" in str(e):
            s.fail("resolution", s.get("resolution"), "a resolution d that divides upper", str(e))
        if "growth must be" in str(e):
            s.fail("growth", s.get("growth"), "a growth > 1", str(e))
        s.fail("growth", s.get("growth"), "a log grid of at most 10^6 points", str(e))
    rho = s.budget.rho is not None
    search = s.choice("search", SEARCHES, default="binary" if rho else "exponential")
    zcdp = rho and search == "binary"
    if s.has("noise") and not zcdp:
        s.fail("noise", s.get("noise"), "no noise key", "noise is for search = 'binary' under rho")
    noise = s.choice("noise", ("gaussian", "laplace"), default="gaussian") if zcdp else "laplace"
    return dict(upper=upper, resolution=resolution, beta=beta, grid=grid, growth=growth,
                search=search, noise=noise)  # fmt: skip


def _reduction(s: QuerySection, default_with_value: str) -> tuple[str, str | None]:
    """``per_person`` and ``value``: count takes no value, sum and max read one."""
    value = s.string("value", required=False)
    reduction = s.choice(
        "per_person", REDUCTIONS, default="count" if value is None else default_with_value
    )
    if reduction == "count" and value is not None:
        s.fail("value", value, "no value for per_person = 'count'", "remove `value`")
    if reduction != "count" and value is None:
        s.fail("value", MISSING, f"a numeric column for per_person = {reduction!r}", "")
    return reduction, value


def _query(s: QuerySection, metric: str, value: str | None, options: dict[str, Any]) -> QueryConfig:
    by, partitions, L = parse_partitioning(s)
    eps, delta, rho = parse_shares(s.v, s.raw, s.prefix, s.budget, spends_delta=None)
    return QueryConfig(
        s.string("name"), metric, by, value, max_partitions_per_person=L, partitions=partitions,
        noise=options["noise"], epsilon=eps, delta=delta, rho=rho, options=options,
    )  # fmt: skip


class ShiftedInverseKind:
    """``total``, ``max`` and ``distinct``."""

    metrics: tuple[str, ...] = ("total", "max", "distinct")

    def parse(self, s: QuerySection) -> QueryConfig:
        metric = s.string("metric")
        common = ("name", "metric", "value", *_GRID_KEYS, *_PARTITION_KEYS, *_SHARES)
        extra = {"total": (), "max": ("per_person", "k"), "distinct": ()}[metric]
        s.allow_keys((*common, *extra))
        options = {"method": METHOD, "statistic": metric, **_grid_options(s)}
        if metric == "total":
            value = s.string("value", required=False)
            reduction = "count" if value is None else "sum"
        elif metric == "max":
            reduction, value = _reduction(s, "max")
            k = s.get("k")
            if k is not MISSING and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
                s.fail("k", k, "an integer ≥ 1", "k = 1 is the maximum, k = 2 the second largest")
            options["k"] = 1 if k is MISSING else k
        else:
            value, reduction = s.string("value"), None
        options["reduction"] = reduction
        return _query(s, metric, value, options)

    def needs_delta(self, query: QueryConfig, rho_total: bool) -> bool:
        return False  # pure ε or ρ-zCDP: never a δ

    def required_columns(self, query: QueryConfig) -> dict[str, str]:
        return required_columns(query)

    def plan(self, query: QueryConfig, ctx: PlanContext) -> KindPlan:
        return plan_query(query, ctx)

    def expand(
        self, clean: PCollection[Any], plan: KindPlan, ctx: BuildContext
    ) -> PCollection[dict[str, Any]]:
        return expand_query(clean, plan, ctx)


class ShiftedInverseQuantileKind(ShiftedInverseKind):
    """``median`` and ``quantile`` with ``method = "shifted_inverse"``."""

    metrics: tuple[str, ...] = ("median", "quantile")

    def parse(self, s: QuerySection) -> QueryConfig:
        metric = s.string("metric")
        common = ("name", "metric", "method", "value", "per_person", *_GRID_KEYS)
        s.allow_keys(
            (*common, *_PARTITION_KEYS, *_SHARES, *(("q",) if metric == "quantile" else ()))
        )
        if s.get("method") != METHOD:
            s.fail("method", s.get("method"), f'"{METHOD}" for this kind', "")
        q = Fraction(1, 2)
        if metric == "quantile":
            s.real("q", low=0.0, high=1.0, open_low=True, open_high=True)
            q = as_quantile(s.get("q"))  # exact: 0.9 is 9/10
        options: dict[str, Any] = {"method": METHOD, "statistic": "quantile", "q": q}
        options.update(_grid_options(s))
        if s.has("per_person"):
            options["reduction"], value = _reduction(s, "max")
        else:
            options["reduction"], value = None, s.string("value")
        return _query(s, metric, value, options)


def required_columns(query: QueryConfig) -> dict[str, str]:
    out = dict.fromkeys(query.by, "key")
    if query.value is not None:  # distinct counts values of any key type
        out[query.value] = "key" if query.options.get("statistic") == "distinct" else "number"
    return out


def public_keys(query: QueryConfig, ctx: PlanContext) -> tuple[tuple[Any, ...], ...]:
    """The public partition keys (read from the file; public), or ((),) without ``by``."""
    if not query.by:
        return ((),)

    return ctx.public_keys()


def config_error(ctx: PlanContext, err: ValueError) -> ConfigError:
    return ConfigError(
        ctx.key, str(ctx.share), "parameters the mechanism accepts", str(err), ctx.source,
    )  # fmt: skip


def plan_query(query: QueryConfig, ctx: PlanContext) -> ShiftedInversePlan:
    o, L = dict(query.options), query.max_partitions_per_person
    quantile = o["statistic"] == "quantile"
    part = divide(ctx.share, 2 * L if quantile else L)
    try:
        params = shifted_inverse_params(part, o, count=False)
        count = shifted_inverse_params(part, o, count=True) if quantile else None
    except ValueError as e:
        raise config_error(ctx, e) from e
    return ShiftedInversePlan(
        query.name, query.metric, o["statistic"], ctx.share, query.value, o["reduction"], params,
        count, o.get("k", 1), o.get("q"), query.by, public_keys(query, ctx), L,
    )  # fmt: skip


def expand_query(
    clean: PCollection[Any], plan: KindPlan, ctx: BuildContext
) -> PCollection[dict[str, Any]]:
    # Beam loads here, when the pipeline is built: `userdp plan` never imports it.
    from userdp.transforms.shifted_inverse_contributions import (  # noqa: PLC0415
        Contributions,
        Shape,
    )
    from userdp.transforms.shifted_inverse_release import (  # noqa: PLC0415
        ReleaseShiftedInverse,
        ShiftedInverseQuery,
        Statistic,
    )

    assert isinstance(plan, ShiftedInversePlan)
    p = plan.params
    shape = {"total": "totals", "max": "values", "distinct": "pairs"}.get(plan.statistic)
    if shape is None:  # a quantile: of one value per person, or of the row values
        shape = "values" if plan.reduction else "rows"
    spec = Contributions(
        cast(Shape, shape), plan.reduction or "count", plan.value,
        limit=float(p.output_grid.upper), quantum=_quantum(p), by=plan.by,
        public_keys=typed_public_keys(plan.public_keys, plan.by, ctx.schema),
        max_partitions=plan.max_partitions_per_person,
    )  # fmt: skip
    statistic = cast(Statistic, plan.statistic)
    query = ShiftedInverseQuery(plan.name, statistic, spec, p, plan.count_params, plan.k, plan.q)
    release = ReleaseShiftedInverse(
        query, keys=ctx.keys, noise=ctx.noise,
    )  # fmt: skip
    out: PCollection[dict[str, Any]] = ctx.shards() | f"{plan.name}/ShiftedInverse" >> release
    return out  # {by..., value}


def _quantum(p: ShiftedInverseParams) -> int:
    """The fixed-point exponent q for values in [0, upper]: upper/2^q ≤ 2^60 (``FREE_SUM_BITS``)."""
    return free_sum_quantum(float(p.output_grid.upper))


KIND = ShiftedInverseKind()
QUANTILE = ShiftedInverseQuantileKind()
