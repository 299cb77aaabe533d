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
from typing import cast

from .base import QueryKind

# metric → module defining KIND. The bounded aggregates are not here (see the docstring).
METRIC_KINDS: dict[str, str] = {
    # order statistics: the method (smooth sensitivity, shifted inverse) is a key of the query
    "median": "pipelines.kinds.quantile",
    "quantile": "pipelines.kinds.quantile",
    # local-sensitivity mechanisms on per-person values (issue 6)
    "ptr_mean": "pipelines.kinds.local_sensitivity",
    "ptr_median": "pipelines.kinds.local_sensitivity",
    "top_partition": "pipelines.kinds.local_sensitivity",
    "trimmed_mean": "pipelines.kinds.local_sensitivity",  # refused with the reason (docs §11)
}


def kind_for(metric: str) -> QueryKind:
    """The kind that handles ``metric`` (a KeyError for the bounded aggregates or unknowns)."""
    module = importlib.import_module(METRIC_KINDS[metric])
    return cast(QueryKind, module.KIND)
