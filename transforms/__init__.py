"""userdp's library: person-level differential privacy inside your own Beam pipeline.

Read this first. A release holds a privacy budget and a secret; ``release.ByPerson`` validates
your rows and groups them by person (the privacy unit: one value of the person column); each
metric transform applied to those persons spends a stated share of the budget when it is applied
(pipeline construction, on the launcher) and returns a PCollection of ``beam.Row`` — the ``by``
columns, then the released columns — that you write with any Beam sink::

    import apache_beam as beam
    import userdp.transforms as dp

    release = dp.Release(dp.Budget(epsilon=1, delta=1e-6))
    with beam.Pipeline() as p:
        rows = p | beam.Create([{"person_id": "ann", "domain": "a.example", "duration_s": 12.0}])
        people = rows | release.ByPerson(
            "person_id", person_type="string", keys={"domain": "string"}, values=["duration_s"])
        visits = people | "visits" >> dp.Count(
            by=["domain"], max_partitions_per_person=5, max_rows_per_partition=3,
            epsilon=0.5, delta=1e-6)
        median = people | "median" >> dp.Median(
            value="duration_s", per_person="mean", bounds=[0, 600], epsilon=0.5)
        _ = people.dead_letter | beam.Map(print)   # raw private rows: the operator's only
    print(release.manifest())                       # public facts: mechanisms, what was spent

Every metric of the job file is here with the same keyword names and rules (it is parsed and
planned by the same code; ``userdp run`` builds its pipeline through these transforms): ``Count``,
``Persons``, ``Sum``, ``Mean``, ``Median``, ``Quantile``, ``Total``, ``Max``, ``Distinct``,
``PtrMean``, ``PtrMedian``, ``TopPartition``, ``SampleAggregate``, ``TrimmedMean``.
``Aggregate`` applies several of ``Count``/``Persons``/``Sum``/``Mean`` over the same partitions
with one private partition selection (one key set, its budget paid once), as a job file does
for queries with the same ``by`` and L. Guarantees: each class's docstring, the manifest, and
``docs/``; the neighbouring relation is always add/remove one person.

Misuse fails when the transform is applied, with what to do: a metric on rows that did not go
through ``ByPerson``, a column not declared there, a reused name, a share that does not fit in
what is left, Gaussian noise or private partitions without δ, a function that cannot be pickled.

For your own unit tests, :mod:`userdp.transforms.testing` gives a release with the noise off
(exact, contribution-bounded values; local runners only; not private).

Below this module: the Beam steps (``aggregate``, ``noisy_combine`` …, not private on their own:
use the metric transforms) and :mod:`userdp.transforms.mechanisms`, the pure core (no Beam).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names for type checkers; at run time they load lazily below
    from .by_person import ByPerson as ByPerson
    from .metrics import (
        Count as Count,
    )
    from .metrics import (
        Distinct as Distinct,
    )
    from .metrics import (
        Max as Max,
    )
    from .metrics import (
        Mean as Mean,
    )
    from .metrics import (
        Median as Median,
    )
    from .metrics import (
        Persons as Persons,
    )
    from .metrics import (
        PtrMean as PtrMean,
    )
    from .metrics import (
        PtrMedian as PtrMedian,
    )
    from .metrics import (
        Quantile as Quantile,
    )
    from .metrics import (
        SampleAggregate as SampleAggregate,
    )
    from .metrics import (
        Sum as Sum,
    )
    from .metrics import (
        TopPartition as TopPartition,
    )
    from .metrics import (
        Total as Total,
    )
    from .metrics import (
        TrimmedMean as TrimmedMean,
    )
    from .release import Budget as Budget
    from .release import Release as Release
    from .release import ReleaseError as ReleaseError
    from .select_partitions import Aggregate as Aggregate

# Loaded on first use (PEP 562): importing a step or the mechanisms core (as workers and the job
# layer do) must not import the job layer that the public transforms plan with.
_EXPORTS = {
    "Budget": "release",
    "Release": "release",
    "ReleaseError": "release",
    "ByPerson": "by_person",
    "Aggregate": "select_partitions",
    **dict.fromkeys(
        (
            "Count", "Persons", "Sum", "Mean", "Median", "Quantile", "Total", "Max", "Distinct",
            "PtrMean", "PtrMedian", "TopPartition", "SampleAggregate", "TrimmedMean",
        ),
        "metrics",
    ),
}  # fmt: skip
__all__ = [
    "Aggregate",
    "Budget",
    "ByPerson",
    "Count",
    "Distinct",
    "Max",
    "Mean",
    "Median",
    "Persons",
    "PtrMean",
    "PtrMedian",
    "Quantile",
    "Release",
    "ReleaseError",
    "SampleAggregate",
    "Sum",
    "TopPartition",
    "Total",
    "TrimmedMean",
]  # fmt: skip
assert sorted(__all__) == sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'userdp.transforms' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
