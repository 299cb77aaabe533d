"""Query kinds beyond the bounded aggregates: one module per family of mechanisms.

The four bounded aggregates (``count``, ``persons``, ``sum``, ``mean``) are planned by
``pipelines/plan.py`` and built by ``pipelines/job.py``. Every other metric belongs to a *kind*: a
module in this package that exposes ``KIND``, an object with the :class:`~.base.QueryKind`
interface (parse its keys, plan it from its budget share, add its steps to the pipeline). The table
below maps each metric to its module; modules load only when a job uses them, so ``userdp plan``
stays fast and a kind's dependencies (scipy, for instance) load only where needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

from .base import QueryKind

if TYPE_CHECKING:
    from ..config import QueryConfig

# metric → module defining KIND. The bounded aggregates are not here (see the docstring).
METRIC_KINDS: dict[str, str] = {
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
    # trimmed_mean is refused with the reason (docs §11)
    "trimmed_mean": "userdp.pipelines.kinds.local_sensitivity",
    # any Python function on person-partitioned chunks (issue 7)
    "sample_aggregate": "userdp.pipelines.kinds.sample_aggregate",
}


# Kinds chosen by a key of a bounded-aggregate metric rather than by the metric itself:
# ``count``/``sum`` with ``bound = "auto"`` choose their clamp privately (issue 5). Such a kind's
# parse stores ``options["kind"]`` so planning and building find it again.
OPTION_KINDS: dict[str, str] = {"auto_bound": "userdp.pipelines.kinds.auto_bound"}


def kind_for(metric: str) -> QueryKind:
    """The kind that handles ``metric`` (a KeyError for the bounded aggregates or unknowns)."""
    module = importlib.import_module(METRIC_KINDS[metric])
    return cast(QueryKind, module.KIND)


def option_kind(name: str) -> QueryKind:
    """The kind registered in :data:`OPTION_KINDS` under ``name``."""
    module = importlib.import_module(OPTION_KINDS[name])
    return cast(QueryKind, module.KIND)


def kind_of(query: QueryConfig) -> QueryKind | None:
    """The kind that plans and builds ``query``; None for a bounded aggregate."""
    if query.metric in METRIC_KINDS:
        return kind_for(query.metric)
    name = query.options.get("kind")
    return option_kind(str(name)) if name is not None else None
