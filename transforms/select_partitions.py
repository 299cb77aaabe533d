"""One private partition selection for several bounded aggregates: the kept keys, once.

:class:`PlannedSelection` runs a :class:`~userdp.pipelines.kinds.shared_selection.SelectionPlan`
on a release's persons: each person is bounded to L partitions (the same keyed choice every
bounded aggregate of the release makes, so a member's rows and the selection's persons agree),
the distinct persons of each partition are counted, and the plan's rule decides each partition
with noise from the selection's own stream, ``keys.for_query(plan.name).rng(key, "select")``. The
output, ``(partition key, noisy person count or None)`` for the kept keys only, is what every
member releases (:class:`~userdp.transforms.noisy_combine.ReleaseNoisily` ``selected=``). The
noisy count is passed on only when the plan's rule is Laplace thresholding whose count a
``persons`` member releases; otherwise it never leaves this step.

:class:`Aggregate` is the library's form of a job file's queries with the same ``by`` and L:
several metrics, one selection, planned by the same rule. Guarantee: the rule's ((ε, δ)-DP for
the kept keys, or ρ-zCDP plus δ), for add/remove one person (docs/partition_selection.md);
composed with the members' statistics by basic composition (pipelines/kinds/shared_selection.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import apache_beam as beam

from .aggregate import BoundAndAggregate
from .bounding import PartitionKey, PartitionStats
from .by_person import people_of
from .keys import NoiseKey
from .mechanisms.partition_selection import Decision
from .noisy_combine import canonical_key_string
from .params import BoundingParams, SelectionRule
from .release import ReleaseError

if TYPE_CHECKING:
    from apache_beam.pvalue import PCollection

    from userdp.pipelines.kinds.shared_selection import SelectionPlan


class _Decide:
    """(key, PartitionStats) → (key, noisy count or None) for kept keys (a Beam FlatMap)."""

    def __init__(self, rule: SelectionRule, key: NoiseKey, noise: bool, with_count: bool):
        self._rule, self._key, self._noise, self._with_count = rule, key, noise, with_count

    def __call__(
        self, key: PartitionKey, stats: PartitionStats
    ) -> Iterator[tuple[PartitionKey, int | None]]:
        if not self._noise:  # test hook: every partition with a person, exact counts
            if stats.persons >= 1:
                yield key, None
            return
        rng = self._key.rng(canonical_key_string(key), "select")
        decision = self._rule.decide(stats.persons, rng)
        if isinstance(decision, Decision):
            if decision.keep:
                yield key, decision.noisy_count if self._with_count else None
        elif decision:
            yield key, None


class PlannedSelection(beam.PTransform[Any, Any]):
    """A planned selection on a release's persons → its kept keys (module docstring). It books
    no share: a group's selection is paid from its members' shares, which they book."""

    def __init__(self, plan: SelectionPlan) -> None:
        super().__init__()
        self._plan = plan

    def expand(self, rows: PCollection[Any]) -> PCollection[Any]:
        plan = self._plan
        people = people_of(rows, f"SelectPartitions({plan.name!r})")
        release = people.release
        missing = [c for c in plan.by if c not in dict(people.schema.keys)]
        if missing:
            raise ValueError(
                f"SelectPartitions({plan.name!r}) partitions by {missing}, which were not declared "
                "as keys: declare them in release.ByPerson(..., keys=...)"
            )
        release._bind(rows.pipeline)
        release._register_selection(plan)
        keys = release._query_keys()
        counting = BoundingParams(plan.by, None, 0.0, 0.0, plan.max_partitions_per_person, 1)
        decide = _Decide(plan.rule, keys.for_query(plan.name), release._noise, plan.releases_count)
        kept: PCollection[Any] = (
            people.shards()
            | "BoundAndAggregate" >> BoundAndAggregate(counting, keys.subkey("bounding"))
            | "Decide" >> beam.FlatMapTuple(decide)
        )
        return kept


def _check_one_key_set(queries: list[Any], total: Any, labels: Mapping[str, str]) -> None:
    """An Aggregate of several metrics promises one key set: refuse a member the shared
    selection cannot take (the job file's grouping rule) rather than let it select its own."""
    from userdp.pipelines.kinds.shared_selection import selection_family  # noqa: PLC0415

    if len(queries) < 2:
        return
    # Members parsed here have private partitions and no bound = "auto" (refused with private
    # partitions): the one family they can fall out of is Gaussian noise under (ε, δ).
    for q in queries:
        if selection_family(q, total) is None:
            raise ReleaseError(
                f"{labels[q.name]} cannot share the Aggregate's one partition selection: "
                "Gaussian noise under an (ε, δ) budget is converted per query, so it would "
                "select its own keys. Give it Laplace noise (or the release a ρ budget), or "
                "apply it as a metric of its own outside the Aggregate"
            )


class Aggregate(beam.PTransform[Any, Any]):
    """Several bounded aggregates over the same partitions, with one private partition selection.

    ``metrics``: output name → ``Count``/``Persons``/``Sum``/``Mean`` made *without* ``by``,
    ``max_partitions_per_person`` or partitions (this transform gives them), each with its own
    share (``epsilon``/``delta`` or ``rho``/``delta``). Those with private partitions in the same
    family share one selection, planned exactly as a job file plans queries with the same ``by``
    and L (``pipelines/kinds/shared_selection.py``: each member gives 1/(k + 1) of its share and
    all its δ to it; a Laplace ``persons`` member gives all and releases its noisy count). The
    output is a dict name → PCollection of ``beam.Row``, each with exactly the selection's keys.
    A member the selection cannot take (Gaussian noise under an (ε, δ) total) is refused.

    Guarantee: the members' shares by basic composition, add/remove one person.
    """

    def __init__(
        self,
        *,
        by: list[str] | tuple[str, ...],
        max_partitions_per_person: int,
        metrics: Mapping[str, Any],
        **unknown: Any,
    ) -> None:
        super().__init__()
        from .arguments import plain_param  # noqa: PLC0415
        from .metrics import _Metric  # noqa: PLC0415

        if shares := sorted(k for k in unknown if k in ("epsilon", "delta", "rho")):
            raise TypeError(
                f"Aggregate takes no {'/'.join(shares)}: each metric takes its own share, e.g. "
                "metrics={'visits': Count(epsilon=0.5, delta=1e-7), ...}; the one selection is "
                "paid from the members' shares"
            )
        if unknown:
            raise TypeError(
                f"Aggregate got unexpected keyword argument(s) {sorted(unknown)}: it takes by, "
                "max_partitions_per_person and metrics"
            )
        if not by:
            raise ValueError("Aggregate needs `by`: the partition columns its metrics share")
        if not isinstance(metrics, Mapping):
            raise TypeError(
                f"Aggregate: metrics must be a dict name → metric, got {type(metrics).__name__}: "
                "metrics={'visits': Count(...), ...}"
            )
        if bad := [n for n in metrics if not isinstance(n, str)]:
            raise TypeError(f"Aggregate: metric names must be str (output names), got {bad[0]!r}")
        if len(metrics) < 1:
            raise ValueError("Aggregate needs metrics: {'visits': Count(...), ...}")
        lowered = [str(n).lower() for n in metrics]
        if twice := sorted({n for n in metrics if lowered.count(str(n).lower()) > 1}):
            raise ValueError(
                f"Aggregate: metric names {twice} differ only in case; names are output file "
                "names, compared ignoring case"
            )
        for name, m in metrics.items():
            if not isinstance(m, _Metric) or m.metric not in ("count", "persons", "sum", "mean"):
                raise TypeError(
                    f"Aggregate: metrics[{name!r}] must be Count, Persons, Sum or Mean, got "
                    f"{type(m).__name__}"
                )
            if m._name is not None and m._name != name:
                raise ValueError(
                    f"Aggregate: metrics[{name!r}] sets name={m._name!r}; in an Aggregate the "
                    f"dict key names the output: use {{{m._name!r}: {type(m).__name__}(...)}}"
                )
            given = [k for k in ("by", "max_partitions_per_person") if k in m._params]
            if given or m._public is not None:
                raise ValueError(
                    f"Aggregate: metrics[{name!r}] sets {given or 'public_partitions'}; the "
                    "Aggregate gives its metrics by and max_partitions_per_person, and selects "
                    "their partitions privately"
                )
        self._by, self._metrics = plain_param(by), dict(metrics)
        self._L = plain_param(max_partitions_per_person)

    def expand(self, rows: PCollection[Any]) -> dict[str, PCollection[Any]]:
        from userdp.pipelines.config import parse_query_table  # noqa: PLC0415
        from userdp.pipelines.config_fields import ConfigError  # noqa: PLC0415
        from userdp.pipelines.kinds.aggregate import PRIVATE_NEEDS_DELTA  # noqa: PLC0415
        from userdp.pipelines.kinds.shared_selection import group_selections  # noqa: PLC0415
        from userdp.pipelines.kinds.shifted_inverse import no_private_selection  # noqa: PLC0415

        from .metrics import (  # noqa: PLC0415
            PlannedQuery,
            check_columns,
            explicit_share_of,
            plan_member,
        )

        people = people_of(rows, "Aggregate")
        release = people.release
        queries, shares, deltas, labels = [], {}, {}, {}
        for name, m in self._metrics.items():
            label = f"Aggregate[{name!r}]"
            release._check_name(name)
            m._bind_release(release)
            raw = {"name": name, "metric": m.metric, "by": self._by,
                   "max_partitions_per_person": self._L, **m._params}  # fmt: skip
            try:
                q = parse_query_table(raw, release.budget.config, key=label)
            except ConfigError as e:
                if e.allowed == PRIVATE_NEEDS_DELTA[0]:  # its hint names public partitions,
                    raise ValueError(  # which an Aggregate's members cannot take
                        f"{label}: the Aggregate's shared selection is private and spends δ: "
                        "give the release a delta (Budget(..., delta=...)) and this metric "
                        "delta=... beside its epsilon or rho, or apply the metrics on their "
                        "own with public_partitions=[...]"
                    ) from None
                if not no_private_selection(e, label):
                    raise
                raise ValueError(  # the job file's wording names a file of keys
                    f"{label} has no private partition selection (bound = 'auto'), so it cannot "
                    "share the Aggregate's: apply it on its own with public_partitions=[...]"
                ) from None
            shares[name], deltas[name] = explicit_share_of(q, release, label)
            queries.append(q)
            labels[name] = label
        _check_one_key_set(queries, release.budget.guarantee(), labels)
        groups = group_selections(queries, shares, release.budget.guarantee(), deltas)
        # Every member planned and checked before any is applied: all of them are booked, or
        # none (a refused third member must not leave the first two and the selection booked).
        plans = {
            q.name: plan_member(
                q, people, labels[q.name], shares[q.name], deltas[q.name], shared=groups.get(q.name)
            )
            for q in queries
        }
        for q in queries:
            check_columns(q, people, labels[q.name])
        for selection in {s.name for s in groups.values()}:
            release._check_selection_name(selection)
        release._check_shares({n: (p.share, deltas[n]) for n, p in plans.items()})
        kept: dict[str, PCollection[Any]] = {}
        outs: dict[str, PCollection[Any]] = {}
        for q in queries:
            shared = groups.get(q.name)
            if shared is not None and shared.name not in kept:
                kept[shared.name] = rows | shared.name >> PlannedSelection(shared)
            selected = kept[shared.name] if shared is not None else None
            outs[q.name] = rows | q.name >> PlannedQuery(
                q, plans[q.name], labels[q.name], selected, delta=deltas[q.name]
            )
        return outs
