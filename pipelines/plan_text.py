"""``userdp plan``'s report: the budget split and, per query, its mechanism and expected error.

Everything printed comes from the plan (the job file and public key files), never from the data.
"""

from __future__ import annotations

from typing import TextIO

from .plan import QueryPlan, ReleasePlan


def print_plan(plan: ReleasePlan, out: TextIO) -> None:
    """The budget split, each query's mechanism, noise scale and 95% error half-width."""
    w = out.write
    w(f"budget: total {plan.total}; spent {plan.spent}")
    if plan.total_selection_delta:
        w(
            f"; selection δ {float(plan.spent_selection_delta):.3g} of "
            f"{float(plan.total_selection_delta):.3g}"
        )
    w("\n")
    for q in plan.queries:
        if not isinstance(q, QueryPlan):
            w(f"\n{q.name}: share {q.share}\n")
            w("".join(f"  {line}\n" for line in q.plan_lines()))
            continue
        p, b = q.params, q.params.bounding
        by = ", ".join(b.by) if b.by else "(everything)"
        w(f"\n{q.name}: {p.metric} by {by}; share {q.share}\n")
        w(f"  bounds: L={b.max_partitions_per_person} C={b.max_rows_per_partition}")
        w(f" values in [{b.lower:g}, {b.upper:g}]\n" if b.value is not None else "\n")
        if p.selection is not None:
            s = p.selection
            budget = f"ε={float(s.epsilon):.4g}" if hasattr(s, "epsilon") else ""
            budget = budget or f"ρ={float(getattr(s, 'rho', 0)):.4g}"
            w(
                f"  selection: {type(s).__name__} {budget}, δ={float(s.delta):.3g}, "
                f"keeps a partition with ≥ {s.half_keep_count} persons half the time\n"
            )
        elif q.n_public_partitions is not None:
            w(f"  partitions: {q.n_public_partitions} public keys\n")
        kind = type(p.noise).__name__.removesuffix("Mechanism")
        if q.releases_selection_count:
            kind = "the selection's noisy count (discrete Laplace)"
        what = "centred sum (with rows: half each)" if p.metric == "mean" else p.metric
        w(
            f"  {what}: {kind} {q.statistic_budget}, L1 sens {q.sensitivity.l1:g}, "
            f"L2 sens {q.sensitivity.l2:g}, stddev {q.stddev:.4g}, "
            f"95% error ±{q.error95:.4g}\n"
        )
        if q.count_stddev is not None:
            w(
                f"  rows: stddev {q.count_stddev:.4g}; mean: stddev ≈ "
                f"{q.mean_stddev(1.0):.4g}/n at n rows, 95% error ≈ "
                f"±{1.96 * q.mean_stddev(1.0):.4g}/n\n"
            )
