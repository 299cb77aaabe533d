"""Each tuned query's recommendation from the noisy measurements and the plan (post-processing
only): the model of :mod:`userdp.transforms.mechanisms.bound_recommendation` over the candidate
L, C (and bounds, for a sum or a mean), the old and the new setting, and the curves the tuning
report draws."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from userdp.transforms.mechanisms.bound_recommendation import (
    ContributionModel,
    Setting,
    ValueModel,
    best,
    count_settings,
    persons_settings,
    value_setting,
    value_settings,
)

from .config import JobConfig
from .plan import ReleasePlan
from .tune_model import CELL_THRESHOLD, VALUE_THRESHOLD, TuneGroups, noise_model

NO_SIGNAL = (
    "kept as it is: the measurements hold too little above their noise at this tuning ε "
    "(spend more with --epsilon, or tune on more data)"
)


@dataclass(frozen=True)
class Recommendation:
    """One query's choice: the old and new settings with their modelled errors, the candidates
    along L and C (``settings``; for a sum or a mean each with its best bounds) and along the
    upper bound (``along_bound``), and the partitions count the bias was spread over."""

    query: str
    metric: str
    old: Setting
    new: Setting
    settings: tuple[Setting, ...]
    partitions: float
    partitions_from: str  # "public keys" or "noisy count of picked partitions"
    noise_exponent: float  # σ ∝ budget^(−this) (1 for ε, ½ for ρ)
    along_bound: tuple[Setting, ...] = ()
    note: str = ""  # why the current setting is kept (too little signal), or ""

    def to_manifest(self) -> dict[str, Any]:
        def one(s: Setting) -> dict[str, Any]:
            out: dict[str, Any] = {
                "max_partitions_per_person": s.L,
                "max_rows_per_partition": s.C,
                "expected_error": s.shown_error,
                "bias": s.shown_bias,
                "noise": s.noise,
            }
            if s.bounds is not None:
                out["bounds"] = list(s.bounds)
            return out

        return {
            "query": self.query,
            "metric": self.metric,
            "old": one(self.old),
            "new": one(self.new),
            "partitions": self.partitions,
            "partitions_from": self.partitions_from,
            "note": self.note,
        }


def recommend(
    job: JobConfig,
    plan: ReleasePlan,
    groups: TuneGroups,
    measurements: Mapping[str, Mapping[str, Any]],
) -> list[Recommendation]:
    """Each tuned query's recommendation from its measurements (DP values)."""
    structures = {p.name: p for p in groups.plans}
    value_plans = {p.name: p for p in groups.values}
    out = []
    for i, (q, planned) in enumerate(zip(job.queries, plan.queries, strict=True)):
        group = groups.of_query.get(q.name)
        if group is None:
            continue
        m = measurements[group]
        model = ContributionModel(structures[group].histogram, m["histogram"], CELL_THRESHOLD)
        n_public = planned.to_manifest().get("n_public_partitions")
        if n_public:
            k, source = float(n_public), "public keys"
        else:
            # the noisy count (measurements.json has it as drawn) can fall below 1, even below
            # 0, where few partitions hold persons; the error model divides by it, so it is
            # taken as at least 1 — and the report shows the value used, saying so
            noisy = float(m["partitions"] or 1.0)
            k, source = max(1.0, noisy), "noisy count of picked partitions"
            if noisy < 1:
                source += f" ({noisy:.4g}: taken as 1)"
        noise_abs, exponent = noise_model(job, i)
        L0, C0 = q.max_partitions_per_person, q.max_rows_per_partition
        along: list[Setting] = []
        values: ValueModel | None = None
        if q.metric == "persons":
            settings = persons_settings(model, k, noise_abs)
            old = persons_settings(model, k, noise_abs, [L0])[0]
        elif q.metric == "count":
            settings = count_settings(model, k, noise_abs)
            old = count_settings(model, k, noise_abs, [L0], [C0])[0]
        else:
            vname = groups.value_of_query[q.name]
            values = ValueModel(
                value_plans[vname].histogram, measurements[vname]["histogram"], VALUE_THRESHOLD
            )
            assert q.bounds is not None
            b0 = (float(q.bounds[0]), float(q.bounds[1]))
            settings, along = value_settings(
                model, values, k, noise_abs, metric=q.metric, bounds0=b0
            )
            old = value_setting(
                model, values, k, noise_abs, metric=q.metric, bounds0=b0, at=(L0, C0, b0)
            )
        new, note = best(settings), ""
        signal = model.has_signal() and (values is None or values.has_signal())
        if not signal:
            new, along = old, []
            note = NO_SIGNAL
        out.append(Recommendation(q.name, q.metric, old, new, tuple(settings), k,
                                  source, exponent, tuple(along), note))  # fmt: skip
    return out


def error_vs_budget(
    r: Recommendation, factors: Sequence[float]
) -> list[tuple[float, float, float]]:
    """(factor, error of the chosen setting, least error among the candidates at that budget):
    noise scales as factor^(−exponent), the bias stays. For a sum or mean the candidates keep
    the value bounds chosen at the job's budget (re-choosing them at each budget would lower
    the dashed curve by up to ~30%, an audit measured; the chart's label says so)."""
    out = []
    for f in factors:
        scale = f ** (-r.noise_exponent)
        chosen = r.new.shown_bias + r.new.noise * scale
        at_f = min(s.shown_bias + s.noise * scale for s in r.settings)
        out.append((f, chosen, at_f))
    return out


def relative(a: float, b: float) -> str:
    return "n/a" if not (math.isfinite(a) and math.isfinite(b) and b > 0) else f"{a / b:.2f}×"


def setting_text(s: Setting) -> str:
    """``L = 5, C = 3, bounds = [0.0, 600.0]`` (the parts the query has)."""
    parts = [f"L = {s.L}"] + ([f"C = {s.C}"] if s.C is not None else [])
    if s.bounds is not None:
        parts.append(f"bounds = [{s.bounds[0]:g}, {s.bounds[1]:g}]")
    return ", ".join(parts)
