"""``userdp tune``'s public side: which queries are tuned, the tuning budget's split, and each
query's recommendation from the measurements (post-processing of DP values and the plan).

Tuned: ``count`` (L and C) and ``persons`` (L) per partition with contribution bounds given as
numbers. Other queries are listed with the reason they are not tuned (no L or C to choose, or
bounds on values, whose quantiles the tuner does not measure yet). Queries with the same ``by``
share one measurement (the contribution structure depends on the person and the partitions only).

The noise of a setting comes from the job's own plan: the job is re-planned at each candidate L
(the mechanism, the selection rule and the budget split are the ones ``userdp run`` would use),
and the standard deviation scaled linearly in C, which only multiplies the per-partition
sensitivity (checked against re-planning at other (L, C) in ``tests/pipelines/test_tune.py``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from userdp.transforms.contribution_structure import StructurePlan
from userdp.transforms.mechanisms.bound_recommendation import (
    GAUSSIAN_ABS,
    LAPLACE_ABS,
    ContributionModel,
    NoiseAbs,
    Setting,
    best,
    count_settings,
    persons_settings,
)
from userdp.transforms.mechanisms.contribution_histogram import ContributionHistograms

from .config import JobConfig, QueryConfig
from .plan import ReleasePlan, plan_release

TUNED_METRICS = ("count", "persons")
PARTITIONS_SHARE = Fraction(1, 2)  # of a group's ε, for counting picked partitions (private)
HISTOGRAM_MAX_EXPONENT = 8  # L and C up to 256
# cells below this many standard units (× 1/ε) are set to 0 before the model reads them: with 17²
# cells, P(any empty cell survives) = 289 · ½e^(−8) ≈ 0.05 (docs/tuning.md)
CELL_THRESHOLD = 8.0


def untuned_reason(q: QueryConfig) -> str | None:
    """Why a query is not tuned, or None when it is."""
    if q.metric not in TUNED_METRICS:
        return f"metric {q.metric!r}: only count and persons per partition are tuned"
    if not q.by:
        return "no `by`: L and C do not apply"
    if q.options:
        return "its options choose another mechanism"
    return None


def group_name(by: Sequence[str]) -> str:
    return "structure[" + ";".join(by) + "]"


@dataclass(frozen=True)
class TuneGroups:
    """Each measured ``by`` with its plan, and which query reads which."""

    plans: tuple[StructurePlan, ...]
    of_query: Mapping[str, str]  # query name → group name


def tuning_groups(job: JobConfig, epsilon: Fraction) -> TuneGroups:
    """One measurement per distinct ``by`` of a tuned query, ε split evenly between them."""
    groups: dict[tuple[str, ...], list[QueryConfig]] = {}
    for q in job.queries:
        if untuned_reason(q) is None:
            groups.setdefault(tuple(q.by), []).append(q)
    if not groups:
        return TuneGroups((), {})
    share = epsilon / len(groups)
    plans, of_query = [], {}
    for by, queries in groups.items():
        private = any(q.partitions in (None, "private") for q in queries)
        counted = share * PARTITIONS_SHARE if private else None
        hist = ContributionHistograms(
            epsilon=share - (counted or 0), max_exponent=HISTOGRAM_MAX_EXPONENT
        )
        plans.append(StructurePlan(group_name(by), by, hist, counted))
        of_query.update({q.name: group_name(by) for q in queries})
    return TuneGroups(tuple(plans), of_query)


@dataclass(frozen=True)
class Recommendation:
    """One query's choice: the old and new settings with their modelled errors, every candidate
    (for the curves), and the partitions count the bias was spread over."""

    query: str
    metric: str
    old: Setting
    new: Setting
    settings: tuple[Setting, ...]
    partitions: float
    partitions_from: str  # "public keys" or "noisy count of picked partitions"
    noise_exponent: float  # σ ∝ budget^(−this) (1 for ε with Laplace, ½ for ρ)

    def to_manifest(self) -> dict[str, Any]:
        def one(s: Setting) -> dict[str, Any]:
            return {
                "max_partitions_per_person": s.L,
                "max_rows_per_partition": s.C,
                "expected_error": s.shown_error,
                "bias": s.shown_bias,
                "noise": s.noise,
            }

        return {
            "query": self.query,
            "metric": self.metric,
            "old": one(self.old),
            "new": one(self.new),
            "partitions": self.partitions,
            "partitions_from": self.partitions_from,
        }


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


def recommend(
    job: JobConfig,
    plan: ReleasePlan,
    groups: TuneGroups,
    measurements: Mapping[str, Mapping[str, Any]],
) -> list[Recommendation]:
    """Each tuned query's recommendation from its group's measurements (DP values)."""
    by_name = {p.name: p for p in groups.plans}
    out = []
    for q, planned in zip(job.queries, plan.queries, strict=True):
        group = groups.of_query.get(q.name)
        if group is None:
            continue
        m = measurements[group]
        model = ContributionModel(by_name[group].histogram, m["histogram"], CELL_THRESHOLD)
        manifest = planned.to_manifest()
        n_public = manifest.get("n_public_partitions")
        if n_public:
            k, source = float(n_public), "public keys"
        else:
            k, source = float(m["partitions"] or 1.0), "noisy count of picked partitions"
        noise_abs, exponent = noise_model(job, job.queries.index(q))
        if q.metric == "persons":
            settings = persons_settings(model, k, noise_abs)
            old = persons_settings(model, k, noise_abs, [q.max_partitions_per_person])[0]
        else:
            settings = count_settings(model, k, noise_abs)
            old = count_settings(
                model, k, noise_abs, [q.max_partitions_per_person], [q.max_rows_per_partition]
            )[0]
        out.append(
            Recommendation(
                q.name, q.metric, old, best(settings), tuple(settings), k, source, exponent
            )
        )
    return out


def error_vs_budget(
    r: Recommendation, factors: Sequence[float]
) -> list[tuple[float, float, float]]:
    """(factor, error of the chosen setting, error of the best setting at that budget): noise
    scales as factor^(−exponent), the bias stays."""
    out = []
    for f in factors:
        scale = f ** (-r.noise_exponent)
        chosen = r.new.shown_bias + r.new.noise * scale
        at_f = min(s.shown_bias + s.noise * scale for s in r.settings)
        out.append((f, chosen, at_f))
    return out


def relative(a: float, b: float) -> str:
    return "n/a" if not (math.isfinite(a) and math.isfinite(b) and b > 0) else f"{a / b:.2f}×"
