"""Accuracy of ``trimmed_mean`` (the mean between private quantiles), beside the best in hindsight.

For each data family (one value per person) and budget, R releases on one seeded data set; the
error is |released − the classical τ-trimmed mean| (drop the ⌊τn⌋ smallest and largest clamped
values, average the rest), τ = 0.1, summarised as the median and 90th percentile over the runs.

Rows:

* ``userdp`` — :class:`~userdp.transforms.mechanisms.trimmed_mean.TrimmedMean` as a job runs it
  (thresholds 5ε/16 each, centred sum 9ε/32, count 3ε/32);
* ``split 1/4`` and ``split 3/8`` — the same with each threshold at 1/4 (sum 3/8, count 1/8) or
  3/8 (sum 3/16, count 1/16) of ε: the neighbours of the default split (docs/trimmed_mean.md §4);
* ``known thresholds`` — the best in hindsight: the thresholds at the exact quantiles'
  positions (grid point and split of its tied persons), free, and all of ε on the kept sum
  (3/4) and count (1/4). Not private; what the release would reach if the thresholds cost
  nothing;
* ``mean`` — the untrimmed bounded mean on the public bounds (ε/2 sum, ε/2 count, as the job's
  ``mean``): its error against the trimmed mean (what using ``mean`` for a robust average
  gives), and in brackets against its own target, the clamped mean.

Families (bounds [0, 1000] unless said): ``normal`` N(100, 20); ``lognormal`` e^N(3, 1) on
[0, 10^4]; ``contaminated`` N(100, 20) with 5% of persons at 900 (bots); ``zipf`` integer row
counts (Zipf(2), many ties). n = 10^4 persons at ε ∈ {0.1, 1, 8}; n = 10^3 and 10^5 at ε = 1.
Data from numpy's seeded Generator (data, not noise); noise from KeyedRng with a fixed secret.

``--sweep`` prints instead the evidence for the default split: for candidate threshold shares,
the error ratio to the known-thresholds release, geometric mean (and worst) over the normal,
lognormal and contaminated rows (docs/trimmed_mean.md §4; ~5 min at ``--runs 100``).

Usage: python benchmarks/trimmed_mean.py [--runs 60] [--sweep]
"""

from __future__ import annotations

import argparse
import time
from fractions import Fraction

import numpy as np

from userdp.transforms.mechanisms.accounting import PureDP
from userdp.transforms.mechanisms.discrete import discrete_laplace
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.split_quantile import Position
from userdp.transforms.mechanisms.trimmed_mean import (
    DEFAULT_PARTS,
    TrimmedMean,
    kept_sum_and_count,
)

SECRET = bytes(range(32))
TRIM = Fraction(1, 10)
SPLITS = {
    "userdp": DEFAULT_PARTS,
    "split 1/4": (Fraction(1, 4), Fraction(3, 8), Fraction(1, 8)),
    "split 3/8": (Fraction(3, 8), Fraction(3, 16), Fraction(1, 16)),
}


def family(name: str, n: int, seed: int) -> tuple[np.ndarray, float]:
    """(values, upper bound); lower bound 0."""
    gen = np.random.default_rng(seed)
    if name == "normal":
        return gen.normal(100, 20, n), 1000.0
    if name == "lognormal":
        return gen.lognormal(3, 1, n), 1e4
    if name == "contaminated":
        x = gen.normal(100, 20, n)
        x[: n // 20] = 900.0
        return x, 1000.0
    if name == "zipf":
        return np.minimum(gen.zipf(2.0, n), 1000).astype(float), 1000.0
    raise ValueError(name)


def trimmed_truth(values: np.ndarray, upper: float) -> float:
    x = np.sort(np.clip(values, 0.0, upper))
    k = int(TRIM * len(x))
    return float(x[k : len(x) - k].mean())


def noisy_mean(
    mech: TrimmedMean, hist: object, ends: tuple[Position, Position], eps: Fraction, *,
    parts: tuple[Fraction, ...], rng: KeyedRng,
) -> float:  # fmt: skip
    """The mean between fixed threshold positions ``ends`` = ((a, j_a), (b, j_b)), in order,
    with (sum, count) shares ``parts`` of ε."""
    (a, _), (b, _) = ends
    s, c = kept_sum_and_count(hist, *ends)  # type: ignore[arg-type]
    if b > a:
        s += discrete_laplace(rng, Fraction(b - a) / (eps * parts[0]))
    c += discrete_laplace(rng, 1 / (eps * parts[1]))
    return mech.value_of(a, b, s, c)


def errors(
    name: str, n: int, eps: Fraction, runs: int, splits: dict[str, tuple[Fraction, ...]] = SPLITS
) -> dict[str, tuple[np.ndarray, ...]]:
    values, upper = family(name, n, seed=n + 7)
    truth = trimmed_truth(values, upper)
    clamped_mean = float(np.clip(values, 0.0, upper).mean())
    out: dict[str, tuple[np.ndarray, ...]] = {}
    for row, parts in splits.items():
        mech = TrimmedMean(TRIM, 0.0, upper, PureDP(eps), parts=parts)
        hist = mech.grid_histogram(values)
        got = [mech.release_histogram(hist, KeyedRng(SECRET, name, row, i)) for i in range(runs)]
        out[row] = (np.abs(np.array(got) - truth),)
    mech = TrimmedMean(TRIM, 0.0, upper, PureDP(eps))
    hist = mech.grid_histogram(values)
    low, high = sorted(
        (mech.low_quantile.best_position(hist), mech.high_quantile.best_position(hist))
    )
    known = [
        noisy_mean(mech, hist, (low, high), eps, parts=(Fraction(3, 4), Fraction(1, 4)),
                   rng=KeyedRng(SECRET, name, "known", i))
        for i in range(runs)
    ]  # fmt: skip
    out["known thresholds"] = (np.abs(np.array(known) - truth),)
    half = (Fraction(1, 2), Fraction(1, 2))
    plain = np.array(
        [noisy_mean(mech, hist, ((0, 0), (mech.cells, 1 << mech.split_bits)), eps, parts=half,
                    rng=KeyedRng(SECRET, name, "mean", i))
         for i in range(runs)]
    )  # fmt: skip
    out["mean"] = (np.abs(plain - truth), np.abs(plain - clamped_mean))
    return out


CELLS = [(10**4, Fraction(e)) for e in ("0.1", "1", "8")] + [
    (10**3, Fraction(1)),
    (10**5, Fraction(1)),
]
# candidate splits for --sweep: (each threshold, sum, count); labels are part of the noise streams
SWEEP = {
    "1/4": (Fraction(1, 4), Fraction(3, 8), Fraction(1, 8)),
    "5/16": (Fraction(5, 16), Fraction(9, 32), Fraction(3, 32)),
    "3/8": (Fraction(3, 8), Fraction(3, 16), Fraction(1, 16)),
    "3/8b": (Fraction(3, 8), Fraction(5, 24), Fraction(1, 24)),
}


def sweep(runs: int) -> None:
    """Error ratios of candidate splits to the known-thresholds release (§4's table)."""
    ratios: dict[str, list[tuple[float, float]]] = {k: [] for k in SWEEP}
    for fam in ("normal", "lognormal", "contaminated"):
        for n, eps in CELLS:
            e = errors(fam, n, eps, runs, SWEEP)
            known = e["known thresholds"][0]
            for k in SWEEP:
                med = float(np.median(e[k][0]) / np.median(known))
                p90 = float(np.quantile(e[k][0], 0.9) / np.quantile(known, 0.9))
                ratios[k].append((med, p90))
    print("| t : s : c | median error / known | p90 error / known | worst median ratio |")
    print("|---|---|---|---|")
    for k, rs in ratios.items():
        geo = np.exp(np.log(np.array(rs)).mean(axis=0))
        split = " : ".join(str(p) for p in SWEEP[k])
        print(f"| {split} | {geo[0]:.2f} | {geo[1]:.2f} | {max(r[0] for r in rs):.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--sweep", action="store_true", help="compare budget splits (§4)")
    args = ap.parse_args()
    if args.sweep:
        sweep(args.runs)
        return
    cells = CELLS
    rows = [*SPLITS, "known thresholds", "mean"]
    print(f"trimmed mean, τ = {TRIM}: median | p90 of |error| over {args.runs} runs\n")
    print("| family | n | ε | " + " | ".join(rows) + " | userdp / known |")
    print("|---|---|---|" + "---|" * (len(rows) + 1))
    t0 = time.perf_counter()
    for fam in ("normal", "lognormal", "contaminated", "zipf"):
        for n, eps in cells:
            errs = errors(fam, n, eps, args.runs)
            shown = []
            for row in rows:
                e = errs[row][0]
                cell = f"{np.median(e):.3g} \\| {np.quantile(e, 0.9):.3g}"
                if row == "mean":
                    cell += f" ({np.median(errs[row][1]):.3g})"
                shown.append(cell)
            ratio = np.median(errs["userdp"][0]) / np.median(errs["known thresholds"][0])
            print(f"| {fam} | {n:,} | {float(eps):g} | " + " | ".join(shown) + f" | {ratio:.2g} |")
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
