"""``median`` and ``quantile``: one metric, several mechanisms, chosen by the query's ``method``.

* ``method = "exponential"`` (default): the exponential mechanism on a public grid of the
  bounds, pure ε (``pipelines/kinds/exponential_quantile.py``) — the lowest measured error;
* ``method = "smooth_sensitivity"`` (the default when ``noise`` or ``gamma`` is set): smooth
  sensitivity of the quantile of per-person values with Cauchy-type, Laplace or
  Laplace-log-normal noise (``pipelines/kinds/local_sensitivity.py``, issue 6);
* ``method = "shifted_inverse"``: the shifted inverse mechanism on the rank error, no bounds on
  the values needed beyond the output grid (``pipelines/kinds/shifted_inverse.py``, issue 5).

Each method's module exposes ``QUANTILE``, a query kind whose parse reads ``method`` itself and
whose plans carry a ``method`` attribute, so that planning and pipeline building find their way
back to the same module. This dispatcher only routes.
"""

from __future__ import annotations

import importlib
from typing import Any, cast

from apache_beam.pvalue import PCollection

from ..config import QueryConfig
from .base import BuildContext, KindPlan, PlanContext, QueryKind, QuerySection

METHODS: dict[str, str] = {
    "exponential": "userdp.pipelines.kinds.exponential_quantile",
    "smooth_sensitivity": "userdp.pipelines.kinds.local_sensitivity",
    "shifted_inverse": "userdp.pipelines.kinds.shifted_inverse",
}
# The method with the lowest measured error under every budget kind (docs/accuracy.md); a query
# that sets smooth sensitivity's own keys (noise, gamma) means that method.
DEFAULT_METHOD = "exponential"
SMOOTH_KEYS = ("noise", "gamma")


def _method_kind(method: str) -> QueryKind:
    return cast(QueryKind, importlib.import_module(METHODS[method]).QUANTILE)


def _of(query: QueryConfig) -> QueryKind:
    return _method_kind(str(query.options.get("method", DEFAULT_METHOD)))


class QuantileKind:
    metrics = ("median", "quantile")

    def parse(self, section: QuerySection) -> QueryConfig:
        smooth = any(section.has(k) for k in SMOOTH_KEYS)
        default = "smooth_sensitivity" if smooth else DEFAULT_METHOD
        method = section.choice("method", tuple(METHODS), default=default)
        return _method_kind(method).parse(section)

    def needs_delta(self, query: QueryConfig, rho_total: bool) -> bool:
        return _of(query).needs_delta(query, rho_total)

    def required_columns(self, query: QueryConfig) -> dict[str, str]:
        return _of(query).required_columns(query)

    def plan(self, query: QueryConfig, ctx: PlanContext) -> KindPlan:
        return _of(query).plan(query, ctx)

    def expand(
        self, clean: PCollection[Any], plan: KindPlan, ctx: BuildContext
    ) -> PCollection[dict[str, Any]]:
        method = str(getattr(plan, "method", DEFAULT_METHOD))
        return _method_kind(method).expand(clean, plan, ctx)


KIND = QuantileKind()
