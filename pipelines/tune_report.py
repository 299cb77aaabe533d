"""The tuning run's ``report.html``: the expected error against L, C and the budget, with the
current and the recommended settings marked.

Every curve is the model of :mod:`userdp.transforms.mechanisms.bound_recommendation` evaluated on
the *noisy* measurements and the plan (post-processing): bias (clipped rows spread over the
partitions) plus the noise's mean absolute value, per partition. Same page conventions as the
release report (:mod:`.report`): inline SVG, text as paths, no script, no network.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from userdp.transforms.mechanisms.bound_recommendation import Setting

from .report import STYLE, _pyplot, _svg
from .tune_recommend import Recommendation, error_vs_budget, relative, setting_text

FACTORS = tuple(2.0**k for k in range(-4, 5))


def _finish(fig: Any, ax: Any, xlabel: str, title: str) -> str:
    """The axes every tuning plot shares: log-log, the error per partition, a legend; as SVG."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("expected |error| per partition")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return _svg(fig)


def _curves(ax: Any, xs: Sequence[float], settings: Sequence[Setting], what: str) -> None:
    ax.plot(xs, [s.shown_error for s in settings], marker="o", label="expected error")
    ax.plot(xs, [s.shown_bias for s in settings], linestyle="--", label=f"bias ({what})")
    ax.plot(xs, [s.noise for s in settings], linestyle=":", label="noise")


def _curve_chart(r: Recommendation, axis: str) -> str | None:
    """Error against L (C at the recommendation) or against C (L at the recommendation)."""
    if axis == "C" and r.new.C is None:
        return None
    fixed = r.new.C if axis == "L" else r.new.L
    points = sorted(
        ((s.L if axis == "L" else s.C or 0), s)
        for s in r.settings
        if (s.C if axis == "L" else s.L) == fixed
    )
    if len(points) < 2:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    _curves(ax, [x for x, _ in points], [s for _, s in points], "clipping")
    new_x = r.new.L if axis == "L" else r.new.C
    ax.scatter([new_x], [r.new.shown_error], s=120, color="#2a9d55", zorder=5,
               label=f"recommended {axis} = {new_x}")  # fmt: skip
    old_x = r.old.L if axis == "L" else r.old.C
    if (r.old.C if axis == "L" else r.old.L) == fixed:
        ax.scatter([old_x], [r.old.shown_error], s=120, marker="x", color="#b5524a", zorder=5,
                   label=f"current {axis} = {old_x}")  # fmt: skip
    else:
        ax.axvline(old_x, color="#b5524a", linestyle="-.", label=f"current {axis} = {old_x}")
    other = "C" if axis == "L" else "L"
    xlabel = "L: partitions per person" if axis == "L" else "C: rows per person and partition"
    title = f"{r.query}: error vs {axis}" + (f" ({other} = {fixed})" if fixed else "")
    if r.new.bounds is not None:  # a sum or mean: each (L, C) was scored at its own best bounds
        title += ", each point at its own best bounds"
    return _finish(fig, ax, xlabel, title)


def _bound_chart(r: Recommendation) -> str | None:
    """Error against the upper value bound (each with its best lower bound) at the chosen L, C."""
    points = [(s.bounds[1], s) for s in r.along_bound if s.bounds and s.bounds[1] > 0]
    if len(points) < 2 or r.new.bounds is None:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    _curves(ax, [x for x, _ in points], [s for _, s in points], "clamping")
    ax.scatter([r.new.bounds[1]], [r.new.shown_error], s=120, color="#2a9d55", zorder=5,
               label=f"recommended bounds {list(r.new.bounds)}")  # fmt: skip
    if r.old.bounds is not None and r.old.bounds[1] > 0:
        ax.axvline(r.old.bounds[1], color="#b5524a", linestyle="-.",
                   label=f"current bounds {list(r.old.bounds)}")  # fmt: skip
    title = f"{r.query}: error vs the upper bound (L = {r.new.L}, C = {r.new.C})"
    return _finish(fig, ax, "upper bound of the values", title)


def _budget_chart(r: Recommendation) -> str:
    plt = _pyplot()
    points = error_vs_budget(r, FACTORS)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    xs = [f for f, _, _ in points]
    ax.plot(xs, [c for _, c, _ in points], marker="o", label="recommended bounds, fixed")
    best = "best (L, C) at each budget"  # bounds, for a sum or mean, as chosen at × 1
    best += ", value bounds as chosen at × 1" if r.new.bounds is not None else ""
    ax.plot(xs, [b for _, _, b in points], linestyle="--", label=best)
    ax.scatter([1.0], [r.new.shown_error], s=120, color="#2a9d55", zorder=5,
               label="this job (its share × 1)")  # fmt: skip
    xlabel = "the query's budget, as a multiple of its share in this job"
    return _finish(fig, ax, xlabel, f"{r.query}: error vs budget")


def _row(r: Recommendation) -> str:
    return (
        f"<tr><td class='key'>{html.escape(r.query)}</td><td>{r.metric}</td>"
        f"<td>{setting_text(r.old)}</td><td>{r.old.shown_error:.4g}</td>"
        f"<td>{setting_text(r.new)}</td><td>{r.new.shown_error:.4g}</td>"
        f"<td>{relative(r.old.shown_error, r.new.shown_error)}</td>"
        f"<td>{r.partitions:.4g} ({html.escape(r.partitions_from)})</td></tr>"
    )


def render_tuning(
    recs: Sequence[Recommendation], untuned: Mapping[str, str], epsilon: float
) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>userdp tuning report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>Tuning report</h1>",
        f"<p class='note'>Contribution bounds chosen from differentially private measurements "
        f"(pure ε = {epsilon:.4g}, charged to the ledger when the job has one). Every curve is "
        "a model evaluated on those noisy measurements and the job's plan: the expected absolute "
        "error per partition against the unbounded truth — rows clipped by the bounds, spread "
        "over the partitions, plus the noise's mean absolute value — <b>as far as the "
        "measurements show it</b>: histogram cells below the noise threshold and rows beyond "
        "256 per person and partition are left out, so where many persons each hold a few of "
        "the rows, or a few hold very many (heavy tails), the true error is larger, up to "
        "10–100× on a Zipf log (docs/tuning.md, 'What the stated error leaves out').</p>",
        "<table><tr><th>query</th><th>metric</th><th>current</th><th>expected error</th>"
        "<th>recommended</th><th>expected error</th><th>current / recommended</th>"
        "<th>partitions</th></tr>",
        *(_row(r) for r in recs),
        "</table>",
    ]
    for r in recs:
        name = html.escape(r.query)
        parts.append(f'<h2 id="query-{name}">{name}</h2>')
        if r.note:
            parts.append(f"<p class='note'>Not changed: {html.escape(r.note)}.</p>")
        for axis in ("L", "C"):
            chart = _curve_chart(r, axis)
            if chart:
                parts.append(f'<figure class="plot" id="plot-{name}-{axis}">{chart}</figure>')
        chart = _bound_chart(r)
        if chart:
            parts.append(f'<figure class="plot" id="plot-{name}-bounds">{chart}</figure>')
        budget = _budget_chart(r)
        parts.append(f'<figure class="plot" id="plot-{name}-budget">{budget}</figure>')
    if untuned:
        parts.append("<h2>Not tuned</h2><ul>")
        parts += [f"<li>{html.escape(q)}: {html.escape(why)}</li>" for q, why in untuned.items()]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)
