"""Accuracy of ``bound = "auto"`` beside the best clamp in hindsight and the shifted inverse total.

The statistic is the total of per-person contributions (a count of rows, or a sum of values)
over one partition, released three ways at the same total ε:

* ``auto``: userdp's private clamp choice (:mod:`transforms.mechanisms.auto_bound`, the job's
  defaults: ``auto_share`` of ε for the choice, the rest for Laplace noise on the clamped total);
* ``auto (old)``: the choice this design replaced — powers of two only, no prior — for the record;
* ``best clamp``: the clamp with the smallest error *in hindsight* (found by scanning a grid of 16
  clamps per octave on the true data, all of ε spent on the noise) — no private method can know
  it, so it is the bar;
* ``shifted inverse``: userdp's ``total`` (FDY22), D = 2^40, d = 1 (counts) or the data's unit.

Data families (NumPy's seeded generator — data, not noise; every noisy draw comes from a
KeyedRng), each with ``--people`` persons:

* ``uniform``: 1–7 rows per person (FDY22's TPC-H count per order);
* ``lognormal``: a sum of values, each person's total lognormal(μ = 3, σ = 1.2);
* ``zipf+bots``: Zipf(2) rows per person (capped at 10^4) and 5 bots with 10^5 rows each;
* ``zipf``: the same persons without the bots — the control that shows what keeping the bots
  costs where there are none (docs/accuracy.md: a choice that is ε_c-DP keeps 5 bots at most
  e^(5·ε_c) times as often as it picks a clamp that large on this family);
* ``constant``: exactly 1 row per person.

``--heavy`` adds three heavy-tailed families outside the issue's four, to show that the limit
in docs/accuracy.md ("Why this design cannot close the gap") is not an artefact of the bots or
of the control's cap:

* ``zipf-free``: Zipf(2) rows per person, capped only at 2^30 (the default ``bound_range``; the
  top three persons stand 5–16× above the fourth);
* ``zipf2.5``: Zipf(2.5) rows per person, a lighter power law;
* ``pareto``: a sum of values, each person's total 10·(1 + Pareto(1.5)).

``--bot-height H`` moves the 5 bots to H rows each (default 10^5), to show how the choice
behaves as the same 5 persons stand further above the rest.

``--rho`` reads each ε as a ρ-zCDP budget ρ = ε²/2 and runs the job's plan for it: Gaussian
noise, the choice at the largest ε with ε²/8 ≤ its ρ share (bounded range, docs/accounting.md);
``auto(old)`` is then the same with the ε²/2 rule, the best clamp has Gaussian noise with all of
ρ, and the shifted inverse column stays the pure-ε one (a stronger guarantee: not comparable).

Error = mean of the middle 60% of |released − true total| over ``--runs`` runs (FDY22's measure);
the best clamp's error is computed on the same standard Laplace draws for every clamp. Printed
per family and ε ∈ {0.1, 1, 8}: each method's error, and the ratios auto / best and
auto / shifted inverse. ``exact`` is auto / best over infinitely many runs, computed from the
choice's exact probabilities and the noise's law (:mod:`exact_error`): 200 sampled runs move the
ratio by ~10%, the size of the margins, so the targets are judged on it; the sampled ratio beside
it checks that the mechanism, run through the job's code, has that law. The issue's targets:
auto / best ≤ 2 (never above 4), auto ≤ shifted inverse.

Usage: python benchmarks/auto_bound.py [--people 100000] [--runs 200] [--auto-share 1/4]
                                        [--tune step_prior=1/3 ...] [--heavy] [--bot-height H]
                                        [--only FAMILY ...] [--rho]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import sys
from collections.abc import Callable
from fractions import Fraction

import numpy as np

# FDY22's error measure and the top-K helper, shared with the shifted inverse benchmark
# (benchmarks/ is sys.path[0] when a script here runs)
from exact_error import best_clamp_error, choice_error, gaussian_unit, laplace_unit
from shifted_inverse import top_values, trimmed_error

from userdp.pipelines.kinds.auto_bound import DEFAULT_AUTO_SHARE, SUM_OCTAVES
from userdp.pipelines.kinds.shifted_inverse_plan import auto_bound_parts, clamp_choice
from userdp.transforms.mechanisms.accounting import ZCDP, PureDP, epsilon_within_rho
from userdp.transforms.mechanisms.additive import gaussian_mechanism, laplace_mechanism
from userdp.transforms.mechanisms.auto_bound import ClampChoiceParams, target_clipped_for_noise
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.shifted_inverse import ShiftedInverseParams, shifted_inverse
from userdp.transforms.mechanisms.shifted_inverse_stats import sum_down_values

SECRET = hashlib.sha256(b"userdp.benchmark.auto_bound").digest()
EPSILONS = (Fraction(1, 10), Fraction(1), Fraction(8))
RANGE = (0, 30)  # the job file's default bound_range [1, 2^30]
TUNING: dict[str, object] = {}  # --tune field=value: ClampChoiceParams overrides of `auto`
CHOSEN: list[float] = []  # the clamps the last auto release chose, run by run
RHO = False  # --rho: each ε stands for ρ = ε²/2, Gaussian noise


def families(
    people: int, heavy: bool = False, bot_height: int = 100_000
) -> dict[str, tuple[np.ndarray, bool]]:
    """name → (per-person totals, is a count)."""
    gen = np.random.default_rng(2026)  # data, not noise
    zipf = np.minimum(gen.zipf(2.0, people), 10_000)
    out = {
        "uniform": (gen.integers(1, 8, people).astype(np.float64), True),
        "lognormal": (gen.lognormal(3.0, 1.2, people), False),
        "zipf+bots": (np.concatenate([zipf, np.full(5, bot_height)]).astype(np.float64), True),
        "zipf": (zipf.astype(np.float64), True),
        "constant": (np.ones(people), True),
    }
    if heavy:  # a second generator, so the four families above keep their bytes
        more = np.random.default_rng(2027)
        out["zipf-free"] = (np.minimum(more.zipf(2.0, people), 2**30).astype(np.float64), True)
        out["zipf2.5"] = (np.minimum(more.zipf(2.5, people), 2**30).astype(np.float64), True)
        out["pareto"] = (10.0 * (1.0 + more.pareto(1.5, people)), False)
    return out


def clamped_total(totals: np.ndarray, bound: float) -> float:
    return float(np.minimum(totals, bound).sum())


def auto_setting(
    count: bool, eps: Fraction, share: Fraction, old: bool
) -> tuple[ClampChoiceParams, Fraction | float, str]:
    """(the clamp choice, the noise's budget, its law: ``laplace`` at ε or ``gaussian`` at ρ) of
    ``auto`` or, with ``old``, of the replaced design — what a job's plan builds for ε and share.

    ``--rho``: the job under ρ = ε²/2 (Gaussian noise, the default there), with the choice's ε as
    the plan gives it (ε²/8 ≤ ρ_c, bounded range) or, ``old``, by the ε²/2 rule it replaced."""
    unit = 0 if count else RANGE[1] - SUM_OCTAVES
    if RHO:
        rho = eps**2 / 2
        eps_choice, _, rho_noise = auto_bound_parts(ZCDP(rho), 1, share, "gaussian")
        if old:
            eps_choice = Fraction(epsilon_within_rho(rho * share))
        assert rho_noise is not None
        return clamp_choice(eps_choice, RANGE, unit), rho_noise, "gaussian"
    eps_choice, eps_noise = eps * share, eps * (1 - share)
    if old:  # the replaced design: powers of two, m = s, no prior
        s = target_clipped_for_noise(Fraction(math.sqrt(2)) / eps_noise)
        choice = ClampChoiceParams(
            epsilon=eps_choice, min_exponent=RANGE[0], max_exponent=RANGE[1], target_clipped=s,
            unit_exponent=unit, per_octave=1, step_prior=0,
        )  # fmt: skip
    else:  # exactly what a job's plan builds
        choice = clamp_choice(eps_choice, RANGE, unit)
        if TUNING:
            choice = dataclasses.replace(choice, **TUNING)  # type: ignore[arg-type]
    return choice, eps_noise, "laplace"


def auto_release(
    totals: np.ndarray, count: bool, eps: Fraction, share: Fraction, old: bool
) -> Callable[[int], float]:
    """Run i → the released total with a privately chosen clamp (:func:`auto_setting`)."""
    choice, budget, law = auto_setting(count, eps, share, old)

    def noise(value: float, bound: float, rng: KeyedRng) -> float:
        if law == "gaussian":
            return gaussian_mechanism(value, sensitivity=bound, rho=float(budget), rng=rng)
        return laplace_mechanism(value, sensitivity=bound, epsilon=budget, rng=rng)

    tag = ("rho-old" if old else "rho") if RHO else ("old" if old else "auto")
    return _clamp_then_noise(totals, choice, noise, (tag, str(eps)))


def exact_ratio(totals: np.ndarray, count: bool, eps: Fraction, share: Fraction) -> float:
    """auto / best with both errors computed from their exact laws (:mod:`exact_error`)."""
    choice, budget, law = auto_setting(count, eps, share, old=False)
    if law == "gaussian":
        auto = choice_error(totals, choice, gaussian_unit(budget), law)
        return auto / best_clamp_error(totals, gaussian_unit(eps**2 / 2), law)
    auto = choice_error(totals, choice, laplace_unit(budget), law)
    return auto / best_clamp_error(totals, laplace_unit(eps), law)


def _clamp_then_noise(
    totals: np.ndarray,
    choice: ClampChoiceParams,
    noise: Callable[[float, float, KeyedRng], float],
    label: tuple[str, str],
) -> Callable[[int], float]:
    """Run i → choose the clamp (recorded in CHOSEN), then ``noise(clamped total, clamp, rng)``."""
    cands = np.array([float(c) for c in choice.candidates])
    hist = np.bincount(np.searchsorted(cands, totals, side="left"), minlength=len(cands) + 1)
    clamped = [clamped_total(totals, c) for c in cands]

    def run(i: int) -> float:
        k = choice.choose(hist.tolist(), KeyedRng(SECRET, *label, i, "bound"))
        CHOSEN.append(float(cands[k]))
        return noise(clamped[k], float(cands[k]), KeyedRng(SECRET, *label, i, "value"))

    return run


def best_clamp(totals: np.ndarray, eps: Fraction, runs: int) -> tuple[float, float]:
    """(clamp, error) of the best clamp in hindsight on a 16-per-octave grid, all ε on noise
    (``--rho``: Gaussian noise with all of ρ = ε²/2)."""

    def unit(i: int) -> float:  # noise at sensitivity 1 and ε = 1 (or ρ = ½)
        rng = KeyedRng(SECRET, "best", i)
        if RHO:
            return gaussian_mechanism(0.0, sensitivity=1.0, rho=0.5, rng=rng)
        return laplace_mechanism(0.0, sensitivity=1.0, epsilon=1.0, rng=rng)

    unit_noise = np.array([unit(i) for i in range(runs)])
    truth = float(totals.sum())
    top = max(float(totals.max()), 1.0)
    grid = 2.0 ** (np.arange(-10 * 16, math.ceil(math.log2(top)) * 16 + 17) / 16.0)
    grid = grid[(grid >= top / 2**20) & (grid <= top * 2)]
    grid = np.union1d(grid, np.arange(1.0, min(top, 1000.0) + 1))  # every whole clamp too
    best = (math.inf, math.inf)
    for c in grid:
        bias = clamped_total(totals, c) - truth
        err = trimmed_error(bias + unit_noise * (c / float(eps)))
        best = min(best, (err, float(c)))
    return best[1], best[0]


def shifted_inverse_total(totals: np.ndarray, count: bool, eps: Fraction) -> Callable[[int], float]:
    scale = 1 if count else 1024  # sums: whole 1/1024 units, as the job's fixed point
    ints = np.ceil(totals * scale).astype(np.int64)
    params = ShiftedInverseParams(
        upper=2**40, resolution=1, budget=PureDP(eps), beta=Fraction(1, 10)
    )
    top = top_values(ints, params.top_k)
    down = sum_down_values(int(ints.sum()), top, params.down_values_needed)
    return lambda i: (
        float(shifted_inverse(down, params, KeyedRng(SECRET, "si", str(eps), i))) / scale
    )


def report(
    people: int,
    runs: int,
    share: Fraction = DEFAULT_AUTO_SHARE,
    *,
    heavy: bool = False,
    bot_height: int = 100_000,
    only: tuple[str, ...] = (),
) -> bool:
    """Print the table; True when every cell meets the issue's targets."""
    print(f"auto bound vs best clamp in hindsight vs shifted inverse: {people:,} persons, "
          f"{runs} runs, auto_share {share}, bots at {bot_height:,}"
          + (" — ρ = ε²/2, Gaussian noise; auto(old): choice's ε by ε²/2 ≤ ρ" * RHO))  # fmt: skip
    head = f"{'family':<10} {'ε':>4} {'best B':>9} {'best':>10} {'auto':>10} {'auto(old)':>11}"
    print(head + f" {'shifted inv':>11} {'auto/best':>9} {'exact':>6} {'auto/SI':>8} "
          f"{'auto B p10/50/90':>22}")  # fmt: skip
    ok = True
    for name, (totals, count) in families(people, heavy, bot_height).items():
        if only and name not in only:
            continue
        truth = float(totals.sum())
        for eps in EPSILONS:
            bound, best = best_clamp(totals, eps, 1000)
            errs, chosen = {}, []
            for label, fn in (
                ("auto", auto_release(totals, count, eps, share, old=False)),
                ("old", auto_release(totals, count, eps, share, old=True)),
                ("si", shifted_inverse_total(totals, count, eps)),
            ):
                CHOSEN.clear()
                errs[label] = trimmed_error(np.array([fn(i) - truth for i in range(runs)]))
                chosen = chosen or list(CHOSEN)  # the first release is `auto`
            r_best, r_si = errs["auto"] / best, errs["auto"] / errs["si"]
            r_exact = exact_ratio(totals, count, eps, share)
            met = r_exact <= 2 and r_si <= 1  # the ratio to the best judged on its exact value
            ok &= met
            print(
                f"{name:<10} {float(eps):>4g} {bound:>9.4g} {best:>10.4g} {errs['auto']:>10.4g} "
                f"{errs['old']:>11.4g} {errs['si']:>11.4g} {r_best:>9.2f} {r_exact:>6.2f} "
                f"{r_si:>8.3f} "
                + "/".join(f"{q:.3g}" for q in np.percentile(chosen, [10, 50, 90]))
                + ("" if met else "  MISSED")
            )
    print("error: mean of the middle 60% of |released − true| (best: over 1000 draws per clamp);")
    print("exact: auto / best from both laws, no sampling (benchmarks/exact_error.py)")
    print("targets met" if ok else "TARGETS MISSED")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--people", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--auto-share", type=Fraction, default=DEFAULT_AUTO_SHARE)
    ap.add_argument("--tune", action="append", help="a ClampChoiceParams field=value")
    ap.add_argument("--heavy", action="store_true", help="add three heavy-tailed families")
    ap.add_argument("--bot-height", type=int, default=100_000, help="rows of each of the 5 bots")
    ap.add_argument("--only", action="append", default=[], help="run only this family")
    ap.add_argument("--rho", action="store_true", help="budgets ρ = ε²/2, Gaussian noise")
    args = ap.parse_args()
    global RHO  # noqa: PLW0603 (a run-wide mode, like TUNING)
    RHO = args.rho
    for item in args.tune or []:
        k, v = item.split("=")
        TUNING[k] = int(v) if k in ("per_octave", "unit_exponent") else Fraction(v)
    ok = report(
        args.people, args.runs, args.auto_share,
        heavy=args.heavy, bot_height=args.bot_height, only=tuple(args.only),
    )  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
