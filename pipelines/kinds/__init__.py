"""Query kinds: one module per family of mechanisms, one registry from metric to module.

Every metric belongs to a *kind*: a module in this package that exposes ``KIND``, an object with
the :class:`~.base.QueryKind` interface (parse its keys, plan it from its budget share, add its
steps to the pipeline). :data:`METRIC_KINDS` below is the only registry: adding a metric is its
module plus one line here. Variants of a metric chosen by one of its keys — the quantile's
``method``, ``bound = "auto"`` of count and sum — are routed by the metric's own kind
(:mod:`.quantile`, :mod:`.aggregate`), never by the job layer. Modules load only when a job uses
them, so ``userdp plan`` stays fast and a kind's dependencies (scipy, for instance) load only where
needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

from .base import QueryKind

if TYPE_CHECKING:
    from ..config import QueryConfig

# metric → module defining KIND.
METRIC_KINDS: dict[str, str] = {
    # bounded aggregates (L partitions, C rows, value bounds; bound = "auto" inside)
    "count": "userdp.pipelines.kinds.aggregate",
    "persons": "userdp.pipelines.kinds.aggregate",
    "sum": "userdp.pipelines.kinds.aggregate",
    "mean": "userdp.pipelines.kinds.aggregate",
    # order statistics: the method (smooth sensitivity, shifted inverse) is a key of the query
    "median": "userdp.pipelines.kinds.quantile",
    "quantile": "userdp.pipelines.kinds.quantile",
    # monotone statistics by the shifted inverse mechanism, no contribution bound (issue 5)
    "total": "userdp.pipelines.kinds.shifted_inverse",
    "max": "userdp.pipelines.kinds.shifted_inverse",
    "distinct": "userdp.pipelines.kinds.shifted_inverse",
    # local-sensitivity mechanisms on per-person values (issue 6)
    "ptr_mean": "userdp.pipelines.kinds.local_sensitivity",
    "ptr_median": "userdp.pipelines.kinds.local_sensitivity",
    "top_partition": "userdp.pipelines.kinds.local_sensitivity",
    # the mean between private quantiles (docs/trimmed_mean.md)
    "trimmed_mean": "userdp.pipelines.kinds.trimmed_mean",
    # any Python function on person-partitioned chunks (issue 7)
    "sample_aggregate": "userdp.pipelines.kinds.sample_aggregate",
}


def kind_for(metric: str) -> QueryKind:
    """The kind that handles ``metric`` (a KeyError for an unknown metric)."""
    module = importlib.import_module(METRIC_KINDS[metric])
    return cast(QueryKind, module.KIND)


def kind_of(query: QueryConfig) -> QueryKind:
    """The kind that plans and builds ``query``."""
    return kind_for(query.metric)
