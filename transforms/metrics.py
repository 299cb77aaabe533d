"""The metric transforms: sealed composites from a release's persons to released ``beam.Row``\\ s.

Each takes the job file's query keys as keyword arguments, with the same names and rules
(``by``, ``max_partitions_per_person``, ``bounds``, ``method``, ``epsilon`` …), because it is
parsed by the same parser (:func:`userdp.pipelines.config.parse_query_table`) and planned by the
same planner (:func:`userdp.pipelines.plan.plan_query`): nobody calibrates a mechanism or states a
sensitivity by hand, and the CLI and the library cannot disagree — ``userdp run`` builds its
pipeline through :class:`PlannedQuery`, the step every metric transform ends in.

When applied (pipeline construction), a metric transform checks its input came from
``release.ByPerson``, that its columns were declared there in the right role, books its share
with the release (a reused name or an overspend fails here), and adds its steps. Its output is a
PCollection of ``beam.Row`` with the ``by`` columns, then the released columns (``value``,
``stddev`` for the bounded aggregates; each kind's own otherwise).
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

import apache_beam as beam
from apache_beam.pvalue import PCollection, Row

from .arguments import check_key_arity, check_key_types, key_tuples, plain_param
from .by_person import People, people_of
from .release import ReleaseError

if TYPE_CHECKING:
    from userdp.pipelines.config_model import QueryConfig
    from userdp.pipelines.kinds.base import KindPlan
    from userdp.pipelines.kinds.shared_selection import SelectionPlan

    from .release import Release

PUBLIC_PARTITIONS = "public (listed in the transform)"  # `partitions` of a library query


def query_columns(q: QueryConfig) -> dict[str, str]:
    """Column → role ("key" or "number") the query reads, as its kind states."""
    from userdp.pipelines.kinds import kind_of  # noqa: PLC0415

    return kind_of(q).required_columns(q)


def check_columns(q: QueryConfig, people: People, label: str) -> None:
    keys, numbers = dict(people.schema.keys), set(people.schema.numbers)
    for column, role in query_columns(q).items():
        declared = "keys" if column in keys else "values" if column in numbers else None
        wanted = "keys" if role == "key" else "values"
        if declared != wanted:
            where = f"it is in {declared}" if declared else "it was not declared"
            raise ValueError(
                f"{label} reads column {column!r} as a {role}, but {where}: declare it in "
                f"release.ByPerson(..., {wanted}=...) (types are declared, never guessed)"
            )


def _to_row(element: dict[str, Any], order: tuple[str, ...]) -> Any:
    return Row(**{c: element[c] for c in order})


class PlannedQuery(beam.PTransform[Any, Any]):
    """A planned query on a release's persons → released rows. The one path of every metric.

    ``plan`` comes from :func:`userdp.pipelines.plan.plan_query` (the job file plans all its
    queries first; a metric transform plans itself from its share). Books the plan's share with
    the release, then adds the steps of the query's kind (for the bounded aggregates: bound and
    aggregate, then the noisy combine). Not a public name: a plan made by
    hand could claim a share that does not match its noise.
    """

    def __init__(
        self,
        query: QueryConfig,
        plan: KindPlan,
        label: str,
        selected: PCollection[Any] | None = None,
        *,
        delta: Fraction,
    ) -> None:
        super().__init__()
        self._query, self._plan, self._what = query, plan, label
        self._selected = selected  # a shared selection's kept keys (its members only)
        # under a ρ total, the δ the query spends beside ρ — private selection or an (ε, δ)
        # mechanism (PTR, smooth sensitivity with Laplace noise, top partition): booked with
        # the release, which refuses δ shares above the Budget's delta
        self._delta = delta

    def expand(self, rows: PCollection[Any]) -> PCollection[Any]:
        from userdp.pipelines.kinds import kind_of  # noqa: PLC0415
        from userdp.pipelines.kinds.base import BuildContext  # noqa: PLC0415

        people = people_of(rows, self._what)
        release, q, plan = people.release, self._query, self._plan
        check_columns(q, people, self._what)
        release._bind(rows.pipeline)
        release._register(q.name, plan, self._delta)
        ctx = BuildContext(
            people.schema,
            release._query_keys(),
            release._noise,
            people.num_shards,
            people.shards,
            self._selected,
        )
        released = kind_of(q).expand(rows, plan, ctx)
        order = (*q.by, *(c for c, _ in plan.output_columns))
        out: PCollection[Any] = released | "ToRows" >> beam.Map(_to_row, order)
        return out


class _Metric(beam.PTransform[Any, Any]):
    """A metric transform: the job file's query keys as keyword arguments (module docstring).

    ``name``: the output's name and the noise streams' label; by default the transform's label
    (``"visits" >> Count(...)``). ``public_partitions``: a list of keys (a value per key for one
    ``by`` column, a tuple for several) to release exactly, instead of private partition
    selection. The share of the release's budget is ``epsilon`` (+ ``delta``) or ``rho``
    (+ ``delta``), of the release total's kind.
    """

    metric: ClassVar[str]

    def __init__(
        self,
        *,
        name: str | None = None,
        public_partitions: Iterable[Any] | None = None,
        **params: Any,
    ) -> None:
        super().__init__()
        if "metric" in params or "partitions" in params:
            raise TypeError(
                f"{type(self).__name__}: the metric is set by the class, and partitions by "
                "public_partitions=[...] (or privately; Aggregate shares one selection)"
            )
        self._name, self._params = name, {k: plain_param(v) for k, v in params.items()}
        self._release: Release | None = None
        self._public = None if public_partitions is None else key_tuples(public_partitions)

    def __getstate__(self) -> dict[str, Any]:
        """Without its Release: Beam pickles a transform whose ``expand`` raised (a caught typo,
        fixed in the next notebook cell) as a leaf of the graph, and the Release, which holds
        the secret, refuses to pickle (so the whole pipeline could no longer run)."""
        return {**self.__dict__, "_release": None}

    def _label_name(self) -> str:
        from userdp.pipelines.config import is_query_name  # noqa: PLC0415

        name = self._name or self._user_label
        what = type(self).__name__
        if not name:
            raise ValueError(
                f"{what} needs a name: 'visits' >> {what}(...) "
                "or name='visits' (it names the output and the query's noise streams)"
            )
        if self._name is None and not is_query_name(str(name)):
            raise ValueError(
                f"{what}: the label {name!r} is the output's name by default, and a name is "
                "1-100 of A-Z a-z 0-9 _ . - (not 'manifest'); keep the label and pass "
                f"name='visits', say: {name!r} >> {what}(name='visits', ...)"
            )
        return str(name)

    def expand(self, rows: PCollection[Any]) -> PCollection[Any]:
        from userdp.pipelines.config import parse_query_table  # noqa: PLC0415
        from userdp.pipelines.config_fields import (  # noqa: PLC0415
            PARTITIONS_WITHOUT_BY,
            ConfigError,
        )
        from userdp.pipelines.kinds.shifted_inverse import no_private_selection  # noqa: PLC0415

        what = type(self).__name__
        people = people_of(rows, what)
        self._bind_release(people.release)
        name = self._label_name()
        label = f"{what}({name!r})"
        people.release._check_name(name)  # before planning: the clearer error first
        raw: dict[str, Any] = {"name": name, "metric": self.metric, **self._params}
        if self._public is not None:
            raw["partitions"] = PUBLIC_PARTITIONS
        try:
            q = parse_query_table(raw, people.release.budget.config, key=label)
        except ConfigError as e:
            if e.key != f"{label}.partitions":
                raise
            if self._public is not None and e.allowed == PARTITIONS_WITHOUT_BY[0]:
                raise ValueError(
                    f"{label}: public_partitions lists keys of the by columns, and {what} has "
                    "no by: give by=[...] (the columns the keys are values of), or drop "
                    "public_partitions for one total"
                ) from None
            if self._public is not None:
                raise ValueError(
                    f"{label}: public_partitions is for the metrics that release a value per "
                    f"partition (Count, Persons, Sum, Mean); {what} takes none"
                ) from None
            if not no_private_selection(e, label):
                raise
            # The job file's wording names a file of keys; the library takes them as a list.
            kind = f"{what} with bound='auto'" if self._params.get("bound") == "auto" else what
            raise ValueError(
                f"{label}: by={self._params.get('by')!r} needs public_partitions=[...] "
                f"(the keys to release): {kind} has no private partition selection"
            ) from None
        if self._public is not None:
            check_key_arity(self._public, q.by, label)
            check_key_types(self._public, q.by, people, label)
        share, sel_delta = explicit_share_of(q, people.release, label)
        plan = plan_member(q, people, label, share, sel_delta, public=self._public)
        out: PCollection[Any] = rows | PlannedQuery(q, plan, label, delta=sel_delta)
        return out

    def _bind_release(self, release: Release) -> None:
        if self._release is None:
            self._release = release
        elif self._release is not release:
            raise ReleaseError(
                f"this {type(self).__name__} was already applied to another release's persons: "
                "a transform belongs to one release; create a new transform for each release"
            )


def explicit_share_of(q: QueryConfig, release: Release, label: str) -> tuple[Any, Fraction]:
    """The query's explicit share (the library has no "rest, evenly") and, under a ρ total, the
    δ its selection spends."""
    from userdp.pipelines.plan import explicit_share, spends_delta  # noqa: PLC0415

    share = explicit_share(q, release.budget.guarantee())
    if share is None:
        kind = "rho=..." if release.budget.config.rho is not None else "epsilon=..."
        raise ReleaseError(
            f"{label} has no share of the release's budget {release.budget!r}: pass {kind} "
            "(each transform states its share when it is applied; see userdp.transforms.release)"
        )
    zcdp = release.budget.config.rho is not None
    spends = zcdp and spends_delta(q, rho_total=True)
    if spends and not q.delta:
        raise ReleaseError(
            f"{label} spends δ under the release's ρ budget (private partition selection, or "
            "an (ε, δ) mechanism) but states none: pass delta=... as its share of the Budget's "
            "delta" + (", or public_partitions=[...]" if q.partitions == "private" else "")
        )
    return share, Fraction(q.delta or 0) if spends else Fraction(0)


def plan_member(
    q: QueryConfig,
    people: People,
    label: str,
    share: Any,
    sel_delta: Fraction,
    *,
    shared: SelectionPlan | None = None,
    public: tuple[tuple[Any, ...], ...] | None = None,
) -> KindPlan:
    """The query's plan from its share (``shared``: the selection of its Aggregate group)."""
    from userdp.pipelines.kinds.base import PlanContext  # noqa: PLC0415
    from userdp.pipelines.plan import plan_query  # noqa: PLC0415

    keys = public or ()
    ctx = PlanContext(label, "", people.schema.person, share, sel_delta, lambda: keys)
    return plan_query(q, ctx, shared)


# --- the metrics (docs: README "Metrics"; each kind's module states its guarantee and proof) ---


class Count(_Metric):
    """Rows per partition, each person bounded to ``max_partitions_per_person`` partitions and
    ``max_rows_per_partition`` rows in each (or ``bound = "auto"``: a privately chosen clamp).
    Laplace (pure ε) or Gaussian (ρ-zCDP) noise on the bounded count; private partitions add
    (ε, δ) selection. Add/remove one person. Proof: docs/release-job-contracts.md."""

    metric = "count"


class Persons(_Metric):
    """Distinct persons per partition (each counted once in up to ``max_partitions_per_person``
    partitions). Guarantee as :class:`Count`."""

    metric = "persons"


class Sum(_Metric):
    """Sum of ``value`` clamped to ``bounds`` per partition (or ``bound = "auto"``). Guarantee as
    :class:`Count`, sensitivity from the bounds."""

    metric = "sum"


class Mean(_Metric):
    """Mean of ``value`` clamped to ``bounds``: mid + noisy Σ(v − mid) / max(1, noisy rows),
    clamped to ``bounds``; the statistic's budget split evenly between the two sums (with private
    partitions the selection gets a third of the share). Guarantee as :class:`Count`.

    Bias traded for error: clamping the ratio to the bounds never lets the error exceed the
    range and lowers it, but on partitions whose noise is comparable to the range it pulls the
    released mean towards the middle of the bounds; dividing by a noisy count adds a second-order
    bias of about (mean − mid)·σ_rows²/rows². Both vanish as rows grow (measured in
    docs/accuracy.md); ``stddev`` is a delta-method estimate from the noisy values."""

    metric = "mean"


class Median(_Metric):
    """Median of per-person values (``method``: the exponential mechanism, the default; smooth
    sensitivity; or the shifted inverse mechanism). Guarantee per method:
    docs/local_sensitivity.md, docs/shifted_inverse.md."""

    metric = "median"


class Quantile(_Metric):
    """The ``q``-quantile of per-person values; methods as :class:`Median`, each with its
    guarantee in docs/local_sensitivity.md and docs/shifted_inverse.md."""

    metric = "quantile"


class Total(_Metric):
    """Sum of per-person totals without a contribution bound: the shifted inverse mechanism
    (pure ε, add/remove one person; docs/shifted_inverse.md).

    Its error is one-sided, from below: w.p. ≥ 1 − β the release lies between the statistic
    without its 2τ largest persons and the statistic itself (τ is in the manifest: tens of
    persons at ε = 1), so with fewer than about 2τ persons it may be 0 (docs/shifted_inverse.md)."""

    metric = "total"


class Max(_Metric):
    """Largest per-person value, by the shifted inverse mechanism (pure ε;
    docs/shifted_inverse.md).

    Its error is one-sided, from below: w.p. ≥ 1 − β the release lies between the statistic
    without its 2τ largest persons and the statistic itself (τ is in the manifest: tens of
    persons at ε = 1), so with fewer than about 2τ persons it may be 0 (docs/shifted_inverse.md)."""

    metric = "max"


class Distinct(_Metric):
    """Distinct values of ``value``, by the shifted inverse mechanism on the exact LP floors
    (pure ε; docs/shifted_inverse.md §4).

    Its error is one-sided, from below: w.p. ≥ 1 − β the release lies between the statistic
    without its 2τ largest persons and the statistic itself (τ is in the manifest: tens of
    persons at ε = 1), so with fewer than about 2τ persons it may be 0 (docs/shifted_inverse.md)."""

    metric = "distinct"


class TrimmedMean(_Metric):
    """Mean of per-person values between their private ``trim`` and 1 − ``trim`` quantiles
    (default trim 0.1): thresholds by the exponential mechanism, then noisy sum and count of the
    values between them; the row also holds the two thresholds (``lower_threshold``,
    ``upper_threshold``). Pure ε (ρ-zCDP under a ρ total), add/remove one person; derivation and
    brute-force check in docs/trimmed_mean.md. A threshold can fall inside a group of tied values,
    so integer values are trimmed as the classical trimmed mean trims them."""

    metric = "trimmed_mean"


class PtrMean(_Metric):
    """Mean of per-person values by propose-test-release ((ε, δ); docs/local_sensitivity.md)."""

    metric = "ptr_mean"


class PtrMedian(_Metric):
    """Median by propose-test-release ((ε, δ); docs/local_sensitivity.md)."""

    metric = "ptr_median"


class TopPartition(_Metric):
    """The partition with the most persons, by stability-based release ((ε, δ);
    docs/local_sensitivity.md)."""

    metric = "top_partition"


class SampleAggregate(_Metric):
    """Any Python function on person chunks, privately aggregated (sample-and-aggregate; pure ε,
    or ρ-zCDP under a ρ total: Gaussian mean, bounded-range median; docs/sample_aggregate.md).
    ``function``: a callable that pickles (checked when the transform is made) or an import path
    ``"module:function"``.

    The function receives one chunk of whole persons: a ``pyarrow.Table`` with ``__person__``
    (the canonical person id) and the listed ``columns`` and ``key_columns`` only (each
    declared by the ``ByPerson``), sorted by every column (a pandas DataFrame with
    ``input="pandas"``). It returns a float, or one float per pair of ``range`` (a list, tuple
    or 1-D array; ``range`` is ``[lo, hi]`` or a list of such pairs, one per coordinate). If it
    raises, or returns NaN, ±inf or the wrong shape, the chunk answers the midpoint of
    ``range`` — silently, under ``exact_release`` too (which chunks failed depends on the data,
    so it is never reported), and its prints, warnings and logs are dropped. Try the function on
    a table of your own before a release."""

    metric = "sample_aggregate"

    def __init__(self, *, function: Any, **params: Any) -> None:
        super().__init__(function=_function_reference(function), **params)


def _function_reference(function: Any) -> Any:
    """An importable module-level function → its import path (as in a job file, so the CLI and
    the library plan the same query); another callable must pickle, checked now."""
    if not callable(function):
        return function  # a path: the parser checks it
    module, qualname = getattr(function, "__module__", None), getattr(function, "__qualname__", "")
    if module and module != "__main__" and "<" not in qualname:
        import importlib  # noqa: PLC0415

        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        if obj is function:
            return f"{module}:{qualname}"
    from apache_beam.internal import pickler  # noqa: PLC0415

    try:
        pickler.loads(pickler.dumps(function))
    except Exception as e:
        raise TypeError(
            f"SampleAggregate: function {function!r} cannot be pickled ({type(e).__name__}), so "
            "it cannot be sent to the workers; define it at module level or drop what it "
            "captures (open files, locks, clients)"
        ) from e
    return function
