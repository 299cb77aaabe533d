"""``userdp tune``'s public side: which queries are tuned, the tuning budget's split, and the
noise each candidate setting would get (from the job's plan).

Tuned: ``count`` (L and C), ``persons`` (L), ``sum`` and ``mean`` (L, C and value bounds) per
partition, with contribution bounds given as numbers. Other queries are listed with the reason
they are not tuned. Queries with the same ``by`` and the same partitions (private, or one file of
public keys) share one structure measurement (it depends on the person and the partitions only);
queries reading the same value column over the same rows share one value measurement. A query
with public partitions is measured on the rows of its listed keys alone, because the release
drops the other rows before it bounds L: measured over all rows, a person's partitions would
count keys the release never reads, and the recommended L would be too large.

The noise of a setting comes from the job's own plan: the job is re-planned at each candidate L
(the mechanism, the selection rule and the budget split are the ones ``userdp run`` would use),
and the standard deviation scaled linearly in C, which only multiplies the per-partition
sensitivity (checked against re-planning at other (L, C) in ``tests/pipelines/test_tune.py``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from userdp.transforms.contribution_structure import StructurePlan, ValuePlan
from userdp.transforms.mechanisms.accounting import float_down
from userdp.transforms.mechanisms.additive import LaplaceMechanism
from userdp.transforms.mechanisms.bound_recommendation import (
    GAUSSIAN_ABS,
    LAPLACE_ABS,
    NoiseAbs,
)
from userdp.transforms.mechanisms.contribution_histogram import ContributionHistograms
from userdp.transforms.mechanisms.value_histogram import ValueHistogram

from .config import JobConfig, QueryConfig
from .config_fields import ConfigError
from .input_files import InputSchema
from .plan import plan_release
from .public_keys import read_public_keys, typed_public_keys

TUNED_METRICS = ("count", "persons", "sum", "mean")
PARTITIONS_SHARE = Fraction(1, 2)  # of a group's ε, for counting picked partitions (private)
HISTOGRAM_MAX_EXPONENT = 8  # L and C up to 256
# cells below this many standard units (× 1/ε) are set to 0 before the model reads them: with 17²
# cells, P(any empty cell survives) = 289 · ½e^(−11) ≈ 2.4·10^-3 (8 let one through in ~5% of
# runs, and 0.3–1.3% of runs landed 2–6× off; benchmarks/tune_threshold.py, docs/tuning.md)
CELL_THRESHOLD = 11.0
VALUE_THRESHOLD = 11.0  # a value histogram (83 buckets): 83 · ½e^(−11) ≈ 7·10^-4 (docs/tuning.md)


def untuned_reason(q: QueryConfig) -> str | None:
    """Why a query is not tuned, or None when it is."""
    if q.metric not in TUNED_METRICS:
        return f"metric {q.metric!r}: only count, persons, sum and mean per partition are tuned"
    if not q.by:
        return "no `by`: L and C do not apply"
    if q.options:
        return "its options choose another mechanism"
    if q.metric in ("sum", "mean") and (q.bounds is None or q.value is None):
        return "no numeric bounds to start from"
    return None


def group_name(by: Sequence[str], keys_file: str | None = None) -> str:
    """``structure[domain]``; ``structure[domain] keys=domains.csv`` for public partitions."""
    return "structure[" + ";".join(by) + "]" + _keys_suffix(keys_file)


def value_name(column: str, keys_file: str | None = None) -> str:
    return f"values[{column}]" + _keys_suffix(keys_file)


def _keys_suffix(keys_file: str | None) -> str:
    return "" if keys_file is None else f" keys={Path(keys_file).name}"


def _keys_file(q: QueryConfig) -> str | None:
    """The file of public keys whose rows alone the query reads, or None (every row)."""
    if q.partitions in (None, "private"):
        return None
    return os.path.normpath(str(q.partitions))  # keys.csv and ./keys.csv: one file, one group


@dataclass(frozen=True)
class TuneGroups:
    """Each measurement's plan, and which measurements each query reads."""

    plans: tuple[StructurePlan, ...]
    values: tuple[ValuePlan, ...]
    of_query: Mapping[str, str]  # query name → its structure measurement
    value_of_query: Mapping[str, str]  # sum / mean query name → its value measurement


def tuning_groups(job: JobConfig, epsilon: Fraction, schema: InputSchema) -> TuneGroups:
    """One structure measurement per distinct (``by``, partitions) and one value measurement per
    distinct (value column, rows read) of the tuned queries, ε split evenly between them.
    ``schema``: the inputs' (checked) schema, which types the public keys."""
    groups: dict[tuple[tuple[str, ...], str | None], list[QueryConfig]] = {}
    columns: dict[tuple[str, tuple[str, ...], str | None], list[QueryConfig]] = {}
    for q in job.queries:
        if untuned_reason(q) is None:
            f = _keys_file(q)
            groups.setdefault((tuple(q.by), f), []).append(q)
            if q.metric in ("sum", "mean"):
                columns.setdefault((str(q.value), tuple(q.by) if f else (), f), []).append(q)
    if not groups:
        return TuneGroups((), (), {}, {})
    share = epsilon / (len(groups) + len(columns))
    typed: dict[tuple[tuple[str, ...], str | None], tuple[tuple[Any, ...], ...] | None] = {}
    for (by, f), queries in groups.items():  # each key file read and typed once, as the release
        q = queries[0]
        i = job.queries.index(q)
        key = f"queries[{i}].partitions"
        typed[by, f] = None if f is None else typed_public_keys(
            read_public_keys(q, key, job.source), by, schema
        )  # fmt: skip
    names = _unique_names([group_name(by, f) for by, f in groups])
    plans, of_query = [], {}
    for name, ((by, f), queries) in zip(names, groups.items(), strict=True):
        counted = share * PARTITIONS_SHARE if f is None else None
        hist = ContributionHistograms(
            epsilon=share - (counted or 0), max_exponent=HISTOGRAM_MAX_EXPONENT
        )
        plans.append(StructurePlan(name, by, hist, counted, typed[by, f]))
        of_query.update({q.name: name for q in queries})
    vnames = _unique_names([value_name(c, f) for c, _, f in columns])
    values = tuple(
        ValuePlan(name, c, ValueHistogram(epsilon=share), by, typed[by, f] if f else None)
        for name, (c, by, f) in zip(vnames, columns, strict=True)
    )
    value_of = {q.name: n for n, qs in zip(vnames, columns.values(), strict=True) for q in qs}
    _check_noise(epsilon, plans, values)
    return TuneGroups(tuple(plans), values, of_query, value_of)


def _check_noise(
    epsilon: Fraction, plans: Sequence[StructurePlan], values: Sequence[ValuePlan]
) -> None:
    """Builds every measurement's noise now, from public numbers: an ε whose scale overflows a
    float (1e-300) or that no float holds (1e400) is exit 2 before the charge, not a worker's
    failure after it (CLI audit)."""
    try:
        for p in plans:
            p.histogram.mechanism()
            if p.partitions_epsilon is not None:
                LaplaceMechanism(1.0, float_down(p.partitions_epsilon))
        for v in values:
            v.histogram.mechanism()
    except (ValueError, OverflowError) as e:
        try:
            shown = f"{float(epsilon):g}"
        except OverflowError:
            shown = "above 1.8e308"
        raise ConfigError(
            "--epsilon", shown, "an ε whose noise scales a float can hold", str(e)
        ) from None


def _unique_names(names: list[str]) -> list[str]:
    """``names`` with a repeat numbered: ``… keys=k.csv (2)`` (key files of one name in two
    folders)."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n} ({seen[n]})")
    return out


def noise_model(job: JobConfig, i: int) -> tuple[NoiseAbs, float]:
    """(L, C) → a·σ(L, C) of query ``i`` from the job's own plan, and the exponent of σ in the
    budget (1 for ε, ½ for ρ). σ at each L is re-planned (the selection rule and the split may
    depend on L); within one L it is linear in C (C multiplies the per-partition sensitivity)."""
    q = job.queries[i]
    C0 = q.max_rows_per_partition
    cache: dict[int, tuple[float, float]] = {}

    def at(L: int) -> tuple[float, float]:
        if L not in cache:
            moved = dataclasses.replace(q, max_partitions_per_person=L)
            queries = tuple(moved if j == i else x for j, x in enumerate(job.queries))
            planned = plan_release(dataclasses.replace(job, queries=queries)).queries[i]
            statistic = planned.to_manifest()["statistic"]
            gaussian = "gauss" in str(statistic["mechanism"]["kind"])
            cache[L] = (float(statistic["stddev"]), GAUSSIAN_ABS if gaussian else LAPLACE_ABS)
        return cache[L]

    def noise_abs(L: int, C: int | None) -> float:
        sd, a = at(L)
        scale = 1.0 if C is None or q.metric == "persons" else C / C0
        return a * sd * scale

    rho = job.budget.rho is not None
    return noise_abs, 0.5 if rho else 1.0
