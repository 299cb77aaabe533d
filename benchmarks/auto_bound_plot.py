"""A picture of ``bound = "auto"``: where the private choice lands beside every clamp's error.

For each of issue 15's four data families (``auto_bound.families``) and ε ∈ {0.1, 1, 8}, one
panel, all computed exactly (:mod:`exact_error`: laws, not draws):

* the curve: the error of a *fixed* clamp B with all of ε on its Laplace noise (FDY22's measure,
  the mean of the middle 60% of |released − true total|), against B — its minimum is the best
  clamp in hindsight, the bar of ``benchmarks/auto_bound.py``;
* the bars (right axis): the probability that the auto bound, at the job's defaults, picks each
  candidate clamp — its exact law (``ClampChoiceParams.exponents``);
* dashed: the auto bound's error (its choice then noise on the rest of ε); dotted: twice the best,
  the issue's target.

A table says whether a cell meets its target; the picture says why one does not: on Zipf(2) with
5 bots at ε = 1 the bars sit an octave and more below the gap the bots open, and the curve shows
what clipping them costs. Nothing here is a release: the data are the benchmark's generated
families (seeded NumPy), and no noise is drawn at all.

Usage: python benchmarks/auto_bound_plot.py [--people 100000] [--out docs/images/auto-bound.png]
"""

from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

# benchmarks/ is sys.path[0] when a script here runs
from auto_bound import EPSILONS, auto_setting, families
from exact_error import choice_error, choice_law, clamp_errors, clamp_grid, laplace_unit

from userdp.pipelines.kinds.auto_bound import DEFAULT_AUTO_SHARE

FAMILIES = {  # issue 15's four families, with the titles the docs use
    "uniform": "uniform 1–7 rows",
    "lognormal": "lognormal sum",
    "zipf+bots": "Zipf(2) + 5 bots",
    "constant": "constant 1",
}


def panel_data(
    totals: np.ndarray, count: bool, eps: Fraction, share: Fraction
) -> dict[str, np.ndarray | float]:
    """One panel's numbers: the clamp grid and each clamp's error, the choice's candidates and
    probabilities, the auto bound's error and the best clamp's."""
    choice, budget, _ = auto_setting(count, eps, share, old=False)
    cands, p, _ = choice_law(totals, choice)
    # the best clamp's grid, extended to where the choice's last 0.1% of mass begins
    reach = float(cands[min(int(np.searchsorted(np.cumsum(p), 0.999)), len(cands) - 1)])
    grid = clamp_grid(totals)
    grid = np.union1d(grid, grid.max() * 2.0 ** (np.arange(1, 161) / 16.0))
    grid = grid[grid <= max(reach, float(totals.max()) * 2)]
    curve = clamp_errors(totals, grid, laplace_unit(eps))
    return {
        "grid": grid,
        "curve": curve,
        "cands": cands,
        "p": p,
        "auto": choice_error(totals, choice, laplace_unit(budget)),
        "best": float(curve.min()),
    }


def draw(people: int, share: Fraction, out: Path) -> list[str]:
    """Draw the 4 × 3 panels to ``out``; returns one line per panel (family, ε, auto / best)."""
    import matplotlib  # noqa: PLC0415 (loads slowly; only this script draws)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    data = families(people)
    fig, axes = plt.subplots(len(FAMILIES), len(EPSILONS), figsize=(13, 12.5), squeeze=False)
    lines = []
    for row, (name, title) in enumerate(FAMILIES.items()):
        totals, count = data[name]
        for col, eps in enumerate(EPSILONS):
            d = panel_data(totals, count, eps, share)
            ax = axes[row][col]
            grid, curve, best, auto = d["grid"], d["curve"], float(d["best"]), float(d["auto"])
            ax.plot(grid, curve, color="#1f4e79", lw=1.4, label="fixed clamp B, all ε on noise")
            ax.axhline(auto, color="#c0392b", ls="--", lw=1.2, label="auto bound (exact)")
            ax.axhline(2 * best, color="#555", ls=":", lw=1.2, label="2 × best (target)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            top = float(np.max(grid))
            ax.set_xlim(max(float(np.min(grid)), 0.5), top)
            ax.set_ylim(best / 2, max(float(curve[grid <= top].max()), 4 * auto))
            twin = ax.twinx()
            cands, p = np.asarray(d["cands"]), np.asarray(d["p"])
            shown = (cands >= ax.get_xlim()[0]) & (cands <= top)
            # a bar per candidate, as wide as its step on the log axis
            twin.bar(cands[shown], p[shown], width=cands[shown] * 0.16, color="#e67e22",
                     alpha=0.55, align="center", label="P(auto picks B)")  # fmt: skip
            twin.set_ylim(0, max(float(p.max()) * 1.15, 0.05))
            twin.tick_params(axis="y", labelsize=7, colors="#b9770e")
            ratio = auto / best
            ax.set_title(f"{title}, ε = {float(eps):g}: auto / best = {ratio:.2f}", fontsize=9,
                         color="#c0392b" if ratio > 2 else "black")  # fmt: skip
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.25, which="both")
            if row == len(FAMILIES) - 1:
                ax.set_xlabel("clamp B per person", fontsize=8)
            if col == 0:
                ax.set_ylabel("error (middle-60% mean of |err|)", fontsize=8)
            if row == 0 and col == 0:
                handles, labels = ax.get_legend_handles_labels()
                more, more_labels = twin.get_legend_handles_labels()
                fig.legend(handles + more, labels + more_labels, loc="upper center", ncol=4,
                           fontsize=9, bbox_to_anchor=(0.5, 0.965))  # fmt: skip
            lines.append(f"{name:<10} ε = {float(eps):<4g} auto / best = {ratio:.2f}")
    fig.suptitle(
        f'bound = "auto" (auto_share {share}) vs every fixed clamp — {people:,} persons, '
        "exact laws (benchmarks/auto_bound_plot.py)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.945))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--people", type=int, default=100_000)
    ap.add_argument("--auto-share", type=Fraction, default=DEFAULT_AUTO_SHARE)
    ap.add_argument("--out", type=Path, default=Path("docs/images/auto-bound.png"))
    args = ap.parse_args()
    for line in draw(args.people, args.auto_share, args.out):
        print(line)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
