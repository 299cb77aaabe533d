"""``trimmed_mean``: the mean of one value per person between private τ- and (1 − τ)-quantiles.

Keys: ``per_person``, ``value``, ``bounds`` as for ``median``; ``trim`` (τ, the share of persons
trimmed from each end, in (0, 1/2), default 0.1); ``grid_bits`` (the thresholds' grid, default
20). The release (:class:`~userdp.transforms.mechanisms.trimmed_mean.TrimmedMean`) picks the two
thresholds by the exponential mechanism on a grid of the bounds, each a grid point and a split of
the persons tied at it (5/16 of the share each), and adds
discrete noise to the kept persons' centred sum and count (9/32 and 3/32). Guarantee: pure ε-DP
under an ε or (ε, δ) total (counted as (ε, 0)), ρ-zCDP under a ρ total; add/remove one person.
Derivation and brute-force check: ``docs/trimmed_mean.md``. Like the default median, it reads the
data only through a grid histogram, so no worker holds per-person values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from userdp.transforms.mechanisms.accounting import ZCDP, PureDP
from userdp.transforms.mechanisms.trimmed_mean import DEFAULT_TRIM, TrimmedMean, as_trim

from ..config import QueryConfig
from ..config_fields import parse_shares
from .base import BuildContext, KindPlan, PlanContext, QuerySection
from .exponential_quantile import parse_grid_bits
from .local_sensitivity import (
    PER_PERSON_KEYS,
    config_error,
    expand_per_person,
    parse_per_person,
    per_person_plan,
    quantile_config,
    refuse_by,
    value_columns,
)
from .local_sensitivity_plan import TRIMMED_COLUMNS

if TYPE_CHECKING:
    from apache_beam.pvalue import PCollection

METHOD = "private_thresholds"


class TrimmedMeanKind:
    """``trimmed_mean``: thresholds by the exponential mechanism, then a noisy mean between them."""

    metrics = ("trimmed_mean",)

    def parse(self, s: QuerySection) -> QueryConfig:
        metric = s.string("metric")
        refuse_by(s)
        s.allow_keys((*PER_PERSON_KEYS, "trim", "grid_bits"))
        common = parse_per_person(s, metric)
        trim = DEFAULT_TRIM
        if s.has("trim"):
            s.real("trim", low=0.0, high=0.5, open_low=True, open_high=True)
            trim = as_trim(s.get("trim"))  # exact: 0.1 is 1/10
        bits = parse_grid_bits(
            s, "2^grid_bits grid cells of the bounds for the thresholds; default 20"
        )
        shares = parse_shares(s.v, s.raw, s.prefix, s.budget, spends_delta=None)
        options = {"reduction": common["reduction"], "trim": trim, "grid_bits": bits}
        return quantile_config(s, metric, common, shares, options=options)

    def needs_delta(self, query: QueryConfig, rho_total: bool) -> bool:
        return False  # pure ε, or ρ-zCDP under a ρ total

    def required_columns(self, query: QueryConfig) -> dict[str, str]:
        return value_columns(query)

    def plan(self, query: QueryConfig, ctx: PlanContext) -> KindPlan:
        o = query.options
        assert query.bounds is not None
        share = ctx.share
        budget = ZCDP(share.rho) if isinstance(share, ZCDP) else PureDP(share.epsilon)
        try:
            mechanism = TrimmedMean(o["trim"], *query.bounds, budget, grid_bits=o["grid_bits"])
        except ValueError as e:
            raise config_error(ctx, e) from e
        return per_person_plan(query, ctx, METHOD, mechanism, TRIMMED_COLUMNS)

    def expand(
        self, clean: PCollection[Any], plan: KindPlan, ctx: BuildContext
    ) -> PCollection[dict[str, Any]]:
        return expand_per_person(clean, plan, ctx)


KIND = TrimmedMeanKind()
