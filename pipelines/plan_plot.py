"""``userdp plan --plot``: each query's expected error as the budget grows — public, no data read.

The job's budget (and every explicit share in it) is scaled by factors from 1/16 to 16, the job is
planned at each (the same split, mechanisms and sensitivities as ``userdp run`` would use), and
each query's 95% error half-width from the plan (``statistic.error95_half_width``: the noise's,
around the contribution-bounded truth) is drawn against the total ε (or ρ), log-log, with the
job's own budget marked. Queries whose error has no closed form before the data is seen (the
shifted inverse, sample-and-aggregate, PTR) are listed under the plot instead.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from .config import JobConfig
from .plan import plan_release

FACTORS = tuple(Fraction(2) ** k for k in range(-4, 5))  # 1/16 … 16


def _scaled(job: JobConfig, f: Fraction) -> JobConfig:
    def times(x: Fraction | None) -> Fraction | None:
        return None if x is None else x * f

    budget = dataclasses.replace(
        job.budget, epsilon=times(job.budget.epsilon), rho=times(job.budget.rho)
    )
    queries = tuple(
        dataclasses.replace(q, epsilon=times(q.epsilon), rho=times(q.rho)) for q in job.queries
    )
    return dataclasses.replace(job, budget=budget, queries=queries)


def error_curves(job: JobConfig) -> tuple[str, dict[str, list[tuple[float, float]]], float]:
    """(budget unit "ε" or "ρ", query → [(total, 95% error half-width)], the job's own total)."""
    rho = job.budget.rho is not None
    unit, own = ("ρ", job.budget.rho) if rho else ("ε", job.budget.epsilon)
    label = {
        # a mean's noise is on its sum and row count: the error drawn is its sum's
        q.name: f"{q.name} (its noisy sum; the mean's error is this ÷ rows)"
        if q.metric == "mean"
        else q.name
        for q in job.queries
    }
    curves: dict[str, list[tuple[float, float]]] = {label[q.name]: [] for q in job.queries}
    for f in FACTORS:
        manifest = plan_release(_scaled(job, f)).to_manifest()
        for q in manifest["queries"]:
            # the shifted inverse's entry names its statistic ("total") instead: no closed form
            stat = q.get("statistic")
            err = stat.get("error95_half_width") if isinstance(stat, dict) else None
            if isinstance(err, (int, float)) and err > 0:
                curves[label[q["name"]]].append((float((own or 0) * f), float(err)))
    return unit, curves, float(own or 0)


def plot_error_curves(job: JobConfig, path: str) -> list[str]:
    """Writes the figure (``.svg`` or ``.png``) to ``path``; returns the queries not drawn."""
    import matplotlib  # noqa: PLC0415 (only `plan --plot` draws)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    unit, curves, own = error_curves(job)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    skipped = []
    for name, points in curves.items():
        if not points:
            skipped.append(name)
            continue
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, marker="o", label=name)
    ax.axvline(own, color="#888", linestyle="--", label=f"this job: {unit} = {own:.4g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"total {unit} of the job (shares scale with it)")
    ax.set_ylabel("95% error half-width (noise only)")
    ax.set_title("expected error vs budget — from the plan, no data read")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    if skipped:
        fig.text(0.01, -0.02, "no closed-form error: " + ", ".join(skipped), fontsize=8)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return skipped
