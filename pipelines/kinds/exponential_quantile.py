"""``median`` / ``quantile`` by the exponential mechanism (``method = "exponential"``, the default).

The q-quantile of one value per person (``per_person``, ``value``, ``bounds`` as for the other
methods) by :class:`~userdp.transforms.mechanisms.exponential_quantile.ExponentialQuantile`: a
public grid of 2^``grid_bits`` cells of the bounds (default 20), each point scored by how far it is
from splitting the values q : (1 − q). Guarantee: pure ε-DP for add/remove one person (proof in
the mechanism's module and ``docs/local_sensitivity.md`` §13); under a ρ total it runs with the
largest ε such that ε²/8 ≤ ρ: the exponential mechanism is ε-bounded-range, hence ε²/8-zCDP
(Cesar & Rogers 2021; proof and brute-force check: docs/accounting.md "Bounded-range
mechanisms", ``tests/mechanisms/test_bounded_range.py``) — twice the ε that the ε²/2 of an
arbitrary ε-DP mechanism would allow. It needs no δ.

Why it is the default: the median of 1,001 N(0, 1) draws on [−10, 10] at ε = 1 has median error
≈ 0.002 here against 0.02–0.05 for smooth sensitivity's noises (``benchmarks/local_sensitivity.py``,
table in ``docs/accuracy.md``), and it has no δ to pay. Smooth sensitivity stays selectable
(``method = "smooth_sensitivity"``; a query that sets ``noise`` or ``gamma`` means it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from userdp.transforms.mechanisms.exponential_quantile import (
    DEFAULT_GRID_BITS,
    MAX_GRID_BITS,
    ExponentialQuantile,
)

from ..config import QueryConfig
from ..config_fields import MISSING, parse_shares
from .base import BuildContext, KindPlan, PlanContext, QuerySection
from .local_sensitivity import (
    config_error,
    expand_per_person,
    parse_quantile_head,
    per_person_plan,
    quantile_config,
    value_columns,
)
from .local_sensitivity_plan import bounded_range_epsilon

if TYPE_CHECKING:
    from apache_beam.pvalue import PCollection

METHOD = "exponential"


def parse_grid_bits(s: QuerySection, hint: str) -> int:
    """``grid_bits``: the exponent of the public grid's cell count (default 20, at most 40)."""
    if s.get("grid_bits") is MISSING:
        return DEFAULT_GRID_BITS
    return s.integer(
        "grid_bits", required=True, default=DEFAULT_GRID_BITS, maximum=MAX_GRID_BITS, hint=hint
    )


class ExponentialQuantileKind:
    """``median`` and ``quantile`` by the exponential mechanism on a grid."""

    metrics = ("median", "quantile")

    def parse(self, s: QuerySection) -> QueryConfig:
        metric, q, common = parse_quantile_head(s, ("grid_bits",))
        bits = parse_grid_bits(s, "2^grid_bits grid cells of the bounds; default 20")
        shares = parse_shares(s.v, s.raw, s.prefix, s.budget, spends_delta=None)
        options = {"method": METHOD, "q": q, "reduction": common["reduction"], "grid_bits": bits}
        return quantile_config(s, metric, common, shares, options=options)

    def needs_delta(self, query: QueryConfig, rho_total: bool) -> bool:
        return False  # pure ε (ε²/8-zCDP under ρ)

    def required_columns(self, query: QueryConfig) -> dict[str, str]:
        return value_columns(query)

    def plan(self, query: QueryConfig, ctx: PlanContext) -> KindPlan:
        o = query.options
        assert query.bounds is not None
        epsilon = bounded_range_epsilon(ctx.share)  # under ρ: ε²/8 ≤ ρ (bounded range)
        try:
            mechanism = ExponentialQuantile(o["q"], *query.bounds, epsilon, o["grid_bits"])
        except ValueError as e:
            raise config_error(ctx, e) from e
        return per_person_plan(query, ctx, METHOD, mechanism)

    def expand(
        self, clean: PCollection[Any], plan: KindPlan, ctx: BuildContext
    ) -> PCollection[dict[str, Any]]:
        return expand_per_person(clean, plan, ctx)


QUANTILE = ExponentialQuantileKind()
