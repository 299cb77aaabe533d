"""The ``sample_aggregate`` query kind: any Python function on person chunks, privately aggregated.

Keys of a ``metric = "sample_aggregate"`` query (``docs/sample_aggregate.md`` §9):

* ``function`` — ``"module:function"``. Its syntax is checked when the job file is read; the import
  (module, attribute, callable) when the release is planned, so ``userdp plan`` reports a path that
  does not resolve as a ConfigError naming ``queries[i].function``.
* ``columns`` (required, may be empty) — numeric columns the function reads: float64 in its table;
  ``key_columns`` (optional) — string, integer or bool columns it reads as they are (``domain``).
  The function's chunk table holds exactly ``__person__``, the ``columns``, then the
  ``key_columns``: never another query's columns.
* ``range`` — ``[lower, upper]``, or one ``[lower, upper]`` pair per coordinate of a vector answer
  (the dimension is the number of pairs). Answers are clipped to it; a failing or empty chunk
  answers its midpoint.
* ``chunks`` — k ≥ 2, or ``"auto"`` (default): k = clamp(⌊√n̂⌋, 10, 10^4) from a private person
  count. ``aggregator`` — ``"mean"`` (default, clipped mean + Laplace; Gaussian under ρ) or
  ``"median"`` (exponential mechanism). ``input`` — ``"arrow"`` (default, a ``pa.Table``) or
  ``"pandas"``.
* ``epsilon`` / ``rho``: the query's share, as for every query. No ``delta`` (the mechanism is
  pure ε-DP, or ρ-zCDP under a ρ total) and no ``by`` (one answer, per coordinate, over all
  persons).

Budget under an ε or (ε, δ) total: the share's ε, E (ε-DP counts as (ε, 0)-DP: a δ share is left
unspent). A fixed k gives the aggregator all of E (rounded down to a float). With
``chunks = "auto"`` the person count gets E/10 and the aggregator the rest (both rounded down):
k ≈ √n̂ barely moves with the count's Laplace(10/E) noise, while the aggregate's noise grows like
1/ε, so 9/10 of E costs it only 11 % more noise. Guarantee: pure (ε + ε_count)-DP ≤ E.

Under a ρ total the aggregator spends ρ as ρ — Gaussian noise for the mean, the median's
selections at their bounded-range ε_c (d·ε_c²/8 ≤ ρ) — and with ``chunks = "auto"`` the Laplace
count gets the largest ε_count with ε_count²/2 ≤ ρ/10, the aggregator the rest. Guarantee:
(ρ_aggregator + ε_count²/2)-zCDP ≤ ρ. The rule this replaced turned the share into one pure ε with
ε²/2 ≤ ρ: √2 more noise on a scalar mean, √(2d) on d equal-width coordinates, and a median per
coordinate at 1/(2√d) of the ε (``docs/sample_aggregate.md`` §3–§4, §9).

For adding or removing all rows of one person —
:class:`~transforms.mechanisms.sample_aggregate.SampleAggregateParams` (proofs:
``docs/sample_aggregate.md``). Output: one row per coordinate with ``coordinate``, ``value``,
``stddev`` (the Laplace or Gaussian noise's; null for the median) and ``chunks`` (k: public, or
private when chosen from the count).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from userdp.transforms.columns import PERSON_COLUMN
from userdp.transforms.mechanisms.accounting import (
    ZCDP,
    PureDP,
)
from userdp.transforms.mechanisms.chunk_functions import (
    AGGREGATORS,
    CHUNKS_LIMIT,
    INPUT_KINDS,
    MAX_DIMENSION,
    check_function_path,
    check_input_kind,
    resolve_function,
)
from userdp.transforms.mechanisms.sample_aggregate import SampleAggregateParams

from ..config import ConfigError, QueryConfig
from ..config_fields import MISSING, is_num, parse_shares, shown
from .base import BuildContext, KindPlan, PlanContext, QuerySection
from .sample_aggregate_plan import (
    METRIC,
    SampleAggregatePlan,
    aggregator_budget,
)

if TYPE_CHECKING:
    from apache_beam.pvalue import PCollection

_KEYS = ("name", "metric", "function", "columns", "key_columns", "range", "chunks", "aggregator")
_ALLOWED = (*_KEYS, "input", "epsilon", "rho")
_RANGE = (
    "[lower, upper] or a list of [lower, upper] pairs (one per coordinate), finite numbers "
    "with lower < upper",
    "the function's answer on a chunk is clipped to it and a failing chunk answers its midpoint; "
    "choose it without looking at the data",
)
_CHUNKS = (
    f'an integer in [2, {CHUNKS_LIMIT}] or "auto"',
    "k, the number of person chunks: more chunks, less noise, fewer persons per chunk",
)
_COLUMNS = (
    "a list of distinct column names (other than __person__)",
    'e.g. columns = ["timestamp", "duration_s"]; the function\'s chunk holds __person__ and '
    "only the listed columns",
)


def _pair(raw: object) -> tuple[float, float] | None:
    """``[lower, upper]`` as finite floats with lower < upper, else None."""
    if not (isinstance(raw, list) and len(raw) == 2 and all(is_num(x) for x in raw)):
        return None
    try:
        lo, hi = float(raw[0]), float(raw[1])
    except OverflowError:
        return None
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) and lo < hi else None


def _parse_range(s: QuerySection) -> tuple[tuple[float, float], ...]:
    raw = s.get("range")
    flat = isinstance(raw, list) and len(raw) == 2 and all(is_num(x) for x in raw)
    pairs = [raw] if flat else raw
    if not isinstance(pairs, list) or not 1 <= len(pairs) <= MAX_DIMENSION:
        s.fail("range", shown(raw), *_RANGE)
    out = [_pair(p) for p in pairs]
    if any(p is None for p in out):
        s.fail("range", shown(raw), *_RANGE)
    return tuple(p for p in out if p is not None)


def _parse_chunks(s: QuerySection) -> int | None:
    raw = s.get("chunks")
    if raw is MISSING or raw == "auto":
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 2 <= raw <= CHUNKS_LIMIT:
        s.fail("chunks", raw, *_CHUNKS)
    return int(raw)


def _parse_columns(s: QuerySection, key: str, *, required: bool) -> tuple[str, ...]:
    raw = s.get(key)
    if raw is MISSING and not required:
        return ()
    ok = isinstance(raw, list) and all(isinstance(c, str) and c for c in raw)
    if not ok or len(set(raw)) != len(raw) or PERSON_COLUMN in raw:
        s.fail(key, raw, *_COLUMNS)
    return tuple(raw)


def select_columns(table: pa.Table, names: tuple[str, ...]) -> pa.Table:
    """The function's view of a clean table: ``__person__`` and the query's own columns."""
    return table.select(list(names))


class SampleAggregateKind:
    """``sample_aggregate``: parse, plan (budget → params), expand (chunks → release)."""

    metrics = (METRIC,)

    def parse(self, s: QuerySection) -> QueryConfig:
        if s.has("by"):
            s.fail(
                "by",
                s.get("by"),
                "no `by`: sample-and-aggregate releases one answer over all persons",
                "remove `by`; a function can read key columns itself (key_columns)",
            )
        if s.has("delta"):
            s.fail(
                "delta",
                s.get("delta"),
                "no delta share: sample-and-aggregate is pure ε-DP (ρ-zCDP under a ρ total)",
                "remove delta; state only epsilon to leave the total's δ to other queries",
            )
        s.allow_keys(_ALLOWED)
        function = s.get("function")  # a callable only from the library (SampleAggregate)
        if not (callable(function) or isinstance(function, str)):
            allowed = "an import path 'module:function' (or, in the library, a callable)"
            s.fail("function", function, allowed, "")
        if not callable(function):
            function = s.string("function")
        try:
            if not callable(function):
                check_function_path(function)
        except ValueError:
            example = "userdp.pipelines.example_functions:visit_duration_p90"
            hint = f'e.g. "{example}"; imported when planned'
            s.fail("function", function, "an import path 'module:function'", hint)
        columns = _parse_columns(s, "columns", required=True)
        key_columns = _parse_columns(s, "key_columns", required=False)
        if both := sorted(set(columns) & set(key_columns)):
            hint = f"{both} in both: a column is read either as a number or as it is"
            s.fail("key_columns", list(key_columns), "columns not also in `columns`", hint)
        eps, _, rho = parse_shares(s.v, s.raw, s.prefix, s.budget, spends_delta=None)
        options = {
            "function": function,
            "columns": columns,
            "key_columns": key_columns,
            "range": _parse_range(s),
            "chunks": _parse_chunks(s),
            "aggregator": s.choice("aggregator", AGGREGATORS, default="mean"),
            "input": s.choice("input", INPUT_KINDS, default="arrow"),
        }
        return QueryConfig(s.string("name"), METRIC, epsilon=eps, rho=rho, options=options)

    def needs_delta(self, query: QueryConfig, rho_total: bool) -> bool:
        return False  # pure ε-DP, or ρ-zCDP under a ρ total: no δ either way

    def required_columns(self, query: QueryConfig) -> dict[str, str]:
        o = query.options
        return {**dict.fromkeys(o["columns"], "number"), **dict.fromkeys(o["key_columns"], "key")}

    def plan(self, query: QueryConfig, ctx: PlanContext) -> KindPlan:
        o, key, source = query.options, ctx.key, ctx.source
        try:
            resolve_function(o["function"])  # imports the module, on the launcher
        except ValueError as e:
            allowed = "an importable callable 'module:function'"
            raise ConfigError(f"{key}.function", o["function"], allowed, str(e), source) from e
        try:
            check_input_kind(o["input"])
        except ValueError as e:
            raise ConfigError(f"{key}.input", o["input"], "arrow", str(e), source) from e
        person = ctx.person
        for name in ("columns", "key_columns"):
            if person in o[name]:
                raise ConfigError(
                    f"{key}.{name}",
                    list(o[name]),
                    f"columns other than the person column {person!r}",
                    f"the chunk holds the person id already, as {PERSON_COLUMN!r} (a string)",
                    source,
                )
        epsilon, rho, count = aggregator_budget(ctx.share, counted=o["chunks"] is None)
        try:
            params = SampleAggregateParams(
                query.name,
                o["function"],
                o["range"],
                epsilon,
                rho=rho,
                aggregator=o["aggregator"],
                chunks=o["chunks"],
                count_epsilon=count,
                dimension=len(o["range"]),
                input_kind=o["input"],
            )
        except ValueError as e:
            allowed = "a share the mechanism accepts"
            raise ConfigError(key, str(ctx.share), allowed, str(e), source) from e
        g, share = params.guarantee(), ctx.share  # rounded down: never more than the share
        if isinstance(share, ZCDP):
            assert isinstance(g, ZCDP) and g.rho <= share.rho
        else:
            assert isinstance(g, PureDP) and g.epsilon <= share.epsilon
        return SampleAggregatePlan(query.name, ctx.share, params, o["columns"], o["key_columns"])

    def expand(
        self, clean: PCollection[Any], plan: KindPlan, ctx: BuildContext
    ) -> PCollection[dict[str, Any]]:
        # Beam loads here, when the pipeline is built: `userdp plan` never imports it.
        import apache_beam as beam  # noqa: PLC0415

        from userdp.transforms.sample_aggregate import SampleAndAggregate  # noqa: PLC0415

        assert isinstance(plan, SampleAggregatePlan)
        name = plan.name
        release = SampleAndAggregate(plan.params, ctx.keys, noise=ctx.noise)
        out: PCollection[dict[str, Any]] = (
            clean
            # pa.Table: __person__, the query's columns, its key columns (nothing else)
            | f"{name}/SelectColumns" >> beam.Map(select_columns, plan.chunk_columns)
            # {coordinate, value, stddev, chunks} per coordinate
            | f"{name}/SampleAndAggregate" >> release
        )
        return out


KIND = SampleAggregateKind()
