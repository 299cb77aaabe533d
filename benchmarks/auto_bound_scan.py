"""Every setting of the auto-bound design on a grid, scored exactly: is any within the targets?

``benchmarks/auto_bound.py`` measures the job's defaults by running the mechanism. This script
asks the question behind issue 15's remaining cell — does *any* setting of this design meet the
targets on the issue's four families? — over a grid of ``auto_share`` (the choice's part of ε),
``step_prior`` (κ) and ``per_octave`` (p). Each setting is scored without sampling
(:mod:`exact_error`: the choice's exact probabilities, the noise's exact law, FDY22's measure
integrated), and so is the best clamp in hindsight; so two settings differ only by what they are,
not by draws.

Printed: one line per setting (its largest ratio auto / best over the four families and three ε,
the bots' cells, and the largest ratio on the other three families); then, per ε, the setting
whose largest ratio at that ε is smallest — a design tuned separately for each ε on this very
data, more than any rule fixed in advance could reach — and the smallest bots-at-ε = 1 ratio.

``--free-choice`` asks instead what *not splitting* ε could buy at most: the same choice, but
the noise at the whole ε as if the choice were free (NOT differentially private at ε: a ceiling
for any design whose release is a clamped sum plus noise), for the choice at ε/4 and at ε with
κ = 1/2, and at ε with κ = 1/4 (docs/accuracy.md, "What not splitting could buy").

Usage: python benchmarks/auto_bound_scan.py [--people 100000] [--shares 1/8,1/4,...]
                                             [--kappas 1/4,1/2,...] [--per-octave 2,4,8]
       python benchmarks/auto_bound_scan.py --free-choice
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from fractions import Fraction

import numpy as np

# benchmarks/ is sys.path[0] when a script here runs
from auto_bound import EPSILONS, RANGE, families
from exact_error import best_clamp_error, choice_error, laplace_unit

from userdp.pipelines.kinds.auto_bound import SUM_OCTAVES
from userdp.pipelines.kinds.shifted_inverse_plan import clamp_choice

TARGET = ("uniform", "lognormal", "zipf+bots", "constant")  # the four families


Setting = tuple[Fraction, Fraction, int]  # (auto_share, step_prior κ, per_octave p)


def auto_error(totals: np.ndarray, count: bool, eps: Fraction, setting: Setting) -> float:
    """The auto bound's error at this setting: exact choice distribution, exact noise law."""
    share, kappa, p = setting
    choice = clamp_choice(eps * share, RANGE, 0 if count else RANGE[1] - SUM_OCTAVES)
    choice = dataclasses.replace(choice, step_prior=kappa, per_octave=p)
    return choice_error(totals, choice, laplace_unit(eps * (1 - share)))


def free_choice(data: dict[str, tuple[np.ndarray, bool]]) -> int:
    """The ceiling of ``--free-choice`` (module docstring): exact laws, ratios to the best clamp."""
    settings = {  # label → (the choice's ε as a part of ε, κ); the noise always at all of ε
        "now: ε/4 + 3ε/4": None,
        "ε/4 + ε, κ 1/2": (Fraction(1, 4), Fraction(1, 2)),
        "ε + ε, κ 1/2": (Fraction(1), Fraction(1, 2)),
        "ε + ε, κ 1/4": (Fraction(1), Fraction(1, 4)),
    }
    print("auto / best clamp, exact; the last three columns spend more than ε (not private)")
    print(f"{'family':<10} {'ε':>4} " + " ".join(f"{k:>17}" for k in settings))
    for name, (totals, count) in data.items():
        for e in EPSILONS:
            best = best_clamp_error(totals, laplace_unit(e))
            cells = []
            for s in settings.values():
                if s is None:
                    err = auto_error(totals, count, e, (Fraction(1, 4), Fraction(1, 2), 4))
                else:
                    choice = clamp_choice(e * s[0], RANGE, 0 if count else RANGE[1] - SUM_OCTAVES)
                    choice = dataclasses.replace(choice, step_prior=s[1])
                    err = choice_error(totals, choice, laplace_unit(e))
                cells.append(err / best)
            print(f"{name:<10} {float(e):>4g} " + " ".join(f"{x:>17.2f}" for x in cells))
    return 0


def fractions(text: str) -> list[Fraction]:
    return [Fraction(x) for x in text.split(",")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--people", type=int, default=100_000)
    ap.add_argument("--shares", type=fractions, default=fractions("1/8,1/6,1/4,1/3,3/8,1/2"))
    ap.add_argument("--kappas", type=fractions, default=fractions("1/8,1/4,3/8,1/2,3/4,1"))
    ap.add_argument("--per-octave", type=lambda s: [int(x) for x in s.split(",")],
                    default=[2, 4, 8])  # fmt: skip
    ap.add_argument("--free-choice", action="store_true", help="the ceiling of not splitting ε")
    args = ap.parse_args()
    if args.free_choice:
        kept = (*TARGET, "zipf")
        return free_choice({n: v for n, v in families(args.people).items() if n in kept})
    data = {n: v for n, v in families(args.people).items() if n in TARGET}
    best = {(n, e): best_clamp_error(t, laplace_unit(e)) for n, (t, _) in data.items()
            for e in EPSILONS}  # fmt: skip
    print(f"auto / best clamp, exact, {args.people:,} persons; families {', '.join(TARGET)}")
    print(f"{'share':>6} {'κ':>5} {'p':>2} {'max':>6}  {'worst cell':<15} "
          f"{'bots@0.1':>8} {'bots@1':>7} {'bots@8':>7} {'others max':>10}")  # fmt: skip
    rows = []
    for share in args.shares:
        for kappa in args.kappas:
            for p in args.per_octave:
                r = {
                    (n, e): auto_error(t, c, e, (share, kappa, p)) / best[n, e]
                    for n, (t, c) in data.items()
                    for e in EPSILONS
                }
                rows.append(((share, kappa, p), r))
                worst = max(r, key=lambda k: r[k])
                others = max(v for (n, _), v in r.items() if n != "zipf+bots")
                bots = [r["zipf+bots", e] for e in EPSILONS]
                print(f"{share!s:>6} {kappa!s:>5} {p:>2} {r[worst]:>6.2f}  "
                      f"{worst[0] + '@' + format(float(worst[1]), 'g'):<15} "
                      + " ".join(f"{x:>7.2f}" for x in bots) + f" {others:>10.2f}",
                      flush=True)  # fmt: skip
    print("\nper ε, the setting whose largest ratio at that ε is smallest (tuned on this data):")
    for e in EPSILONS:
        s, r = min(rows, key=lambda row: max(v for (_, x), v in row[1].items() if x == e))
        cells = ", ".join(f"{n} {v:.2f}" for (n, x), v in r.items() if x == e)
        print(f"  ε = {float(e):g}: share {s[0]}, κ {s[1]}, p {s[2]}: {cells}")
    s, r = min(rows, key=lambda row: row[1]["zipf+bots", Fraction(1)])
    print(
        f"smallest Zipf + bots ratio at ε = 1: {r['zipf+bots', Fraction(1)]:.2f} "
        f"(share {s[0]}, κ {s[1]}, p {s[2]}; that setting's largest: {max(r.values()):.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
