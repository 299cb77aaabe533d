"""The interface every query kind implements, and the helpers it gets from the job layer.

A kind is three steps, each at its own time:

1. ``parse`` (reading the job file): validate the query's keys through :class:`QuerySection`, so
   every error names ``queries[i].key``, the value and what is allowed; return a
   :class:`~pipelines.config.QueryConfig` whose ``options`` hold the kind's own keys.
2. ``plan`` (before any data is read): turn the query's share of the total budget into calibrated
   mechanism parameters, and describe them (manifest entry, ``userdp plan`` lines). All budget
   arithmetic happens here, on the launcher, never on workers.
3. ``expand`` (building the pipeline): add the query's steps after validation. Its input is the
   clean rows (``pa.Table`` batches with ``__person__`` as a canonical string, the ``by`` key
   columns and float64 number columns); its output is a PCollection of one dict per released row
   with the ``by`` columns and the kind's :attr:`KindPlan.output_columns`. Noise is drawn only in
   the kind's final combine, from its own query's key ``ctx.keys.for_query(name)`` keyed by
   partition and purpose (the step holds that key only, never the release secret).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol

from ..config_fields import MISSING, Validator, finite_float

if TYPE_CHECKING:
    from apache_beam.pvalue import PCollection

    from userdp.transforms.keys import KeySource
    from userdp.transforms.mechanisms.accounting import Budget

    from ..config import BudgetConfig, QueryConfig
    from ..sources import InputSchema
    from .shared_selection import SelectionPlan

# Output column types a kind may declare (mapped to Arrow types by the writer).
COLUMN_TYPES = ("float64", "int64", "string", "bool")


class KindPlan(Protocol):
    """A planned query of some kind: public facts only."""

    @property
    def name(self) -> str: ...

    @property
    def share(self) -> Budget:
        """The query's share of the total, in the total's kind (what it spends)."""
        ...

    @property
    def by(self) -> tuple[str, ...]: ...

    @property
    def output_columns(self) -> tuple[tuple[str, str], ...]:
        """(name, type) of the released columns after the ``by`` columns; type in COLUMN_TYPES."""
        ...

    def to_manifest(self) -> dict[str, Any]:
        """The manifest entry: metric, mechanism, guarantee, parameters. Nothing from the data."""
        ...

    def plan_lines(self) -> list[str]:
        """Lines for ``userdp plan``: mechanism, guarantee, noise scale / error where known."""
        ...


@dataclass(frozen=True)
class PlanContext:
    """What ``plan`` may use: where the query came from, its share and (zCDP totals) its δ.

    The job file and the library (:mod:`userdp.transforms.library`) both plan through this: the
    job file with ``key = "queries[i]"`` and its path as ``source``, the library with the
    transform's name. ``public_keys()`` returns the query's public partition keys as written
    (read from the key file, or the list given to the transform); typed later against the input.
    """

    key: str  # how errors name the query: "queries[2]" or "Count('visits')"
    source: str  # the job file's path, or "" in the library
    person: str  # the person column
    share: Budget
    delta: Fraction  # under a rho total: the δ share this query asked for (needs_delta); else 0
    public_keys: Callable[[], tuple[tuple[Any, ...], ...]]
    # a bounded aggregate's group selection (shared_selection.py): its rule and statistic part
    shared_selection: SelectionPlan | None = None


@dataclass(frozen=True)
class BuildContext:
    """What ``expand`` may use when adding steps to the pipeline.

    ``shards()`` is the release's one shuffle by person: PCollection[(shard, pa.Table)] holding
    all rows of each person in one table (``transforms.aggregate.ShardByPerson`` with the
    bounding key), built on first use and shared by every query that needs whole persons.
    """

    schema: InputSchema
    keys: KeySource  # a query's noise key: keys.for_query(name); never the release secret
    noise: bool  # False only from tests (exact values); never from a job file
    num_shards: int
    shards: Callable[[], PCollection[Any]]
    # a member of a shared selection: its kept keys (transforms/select_partitions.py)
    selected: PCollection[Any] | None = None


class QueryKind(Protocol):
    metrics: tuple[str, ...]

    def parse(self, section: QuerySection) -> QueryConfig: ...

    def needs_delta(self, query: QueryConfig, rho_total: bool) -> bool:
        """Does this query spend δ under the total's kind — a ρ total (private partition
        selection, an (ε, δ) mechanism) or an (ε, δ) total (those, and Gaussian or other zCDP
        noise converted to (ε, δ))? Only such queries get a part of the budget's δ."""
        ...

    def required_columns(self, query: QueryConfig) -> dict[str, str]:
        """Column → "key" (a partition column) or "number" (a numeric value) the query reads."""
        ...

    def plan(self, query: QueryConfig, ctx: PlanContext) -> KindPlan: ...

    def expand(
        self, clean: PCollection[Any], plan: KindPlan, ctx: BuildContext
    ) -> PCollection[dict[str, Any]]: ...


class QuerySection:
    """One ``[[queries]]`` table being validated: ``queries[i].<key>`` errors, shared rules.

    The common keys (``name``, ``metric``, ``by``, ``value``, ``bounds``, the budget shares …) are
    read with the same rules as for the bounded aggregates; kinds add their own keys.
    """

    def __init__(
        self,
        v: Validator,
        raw: Mapping[str, Any],
        index: int,
        budget: BudgetConfig,
        prefix: str | None = None,
    ) -> None:
        self.v, self.raw, self.index, self.budget = v, raw, index, budget
        self.prefix = prefix or f"queries[{index}]"

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    def fail(self, name: str, value: object, allowed: str, hint: str = "") -> Any:
        self.v.fail(self.key(name), value, allowed, hint)

    def has(self, name: str) -> bool:
        return name in self.raw

    def get(self, name: str) -> Any:
        return self.raw.get(name, MISSING)

    def allow_keys(self, keys: tuple[str, ...]) -> None:
        self.v.keys(self.raw, f"{self.prefix}.", keys)

    def string(self, name: str, *, required: bool = True) -> Any:
        return self.v.string(self.raw, self.key(name), required=required)

    def choice(self, name: str, allowed: tuple[str, ...], default: Any = MISSING) -> Any:
        return self.v.choice(self.raw, self.key(name), allowed, default=default)

    def integer(self, name: str, *, required: bool, default: int, **limits: Any) -> int:
        """``limits``: ``maximum`` and ``hint`` of :meth:`Validator.integer`."""
        key = self.key(name)
        return self.v.integer(self.raw, key, required=required, default=default, **limits)

    def number(
        self, name: str, *, positive: bool = False, below_one: bool = False, hint: str = ""
    ) -> Fraction | None:
        """``hint``: what the number is, for the error (default: the budget's hint)."""
        return self.v.number(
            self.raw, self.key(name), positive=positive, below_one=below_one, hint=hint
        )

    def real(
        self,
        name: str,
        *,
        default: float | None = None,
        low: float | None = None,
        high: float | None = None,
        open_low: bool = False,
        open_high: bool = False,
    ) -> float:
        """A finite real in [low, high] (open ends when asked); ``default`` when absent."""
        x = self.raw.get(name, MISSING)
        if x is MISSING and default is not None:
            return default
        f = finite_float(x)
        ok = math.isfinite(f)
        if ok and low is not None:
            ok = f > low if open_low else f >= low
        if ok and high is not None:
            ok = f < high if open_high else f <= high
        if not ok:
            lo = "" if low is None else ("(" if open_low else "[") + f"{low:g}"
            hi = "" if high is None else f"{high:g}" + (")" if open_high else "]")
            rng = f" in {lo or '(-∞'}, {hi or '∞)'}" if low is not None or high is not None else ""
            self.fail(name, x, f"a finite number{rng}")
        return f
