"""What the default median's releasing worker holds and does: gathered values vs grid histograms.

The exponential-mechanism quantile reads its data only through the histogram of grid indices
(``ExponentialQuantile.grid_histogram``), so the pipeline's person shards send their histograms
and one combine adds them (``transforms.local_sensitivity.MergeGridHistograms``) where it used to
gather every per-person value on one worker (``ConcatenateValues``). This script runs both
combines, as the pipeline wires them, on the same per-person values split into 64 shards, and
prints per person count:

* the bytes the combine's output holds on the releasing worker (values: 8 per person;
  histogram: 16 per distinct grid index, at most 2^20 + 1 at the default grid), and the most
  an accumulator held while merging ("peak": pending histograms are merged past 2^21 entries);
* the seconds on that worker (combine + release), and the seconds of the per-shard histograms
  (spread over the workers that hold the shards; summed here, one core);
* that both release the same value from the same keyed stream.

Two value families (seeded NumPy data, not noise): ``continuous`` (a per-person mean duration,
lognormal on [0, 600]; nearly every person its own grid index at 10^5, the grid's 2^20 cells at
10^7) and ``counts`` (a per-person row count, Zipf(2) on [0, 600]: ~600 distinct indices).
The median at ε = 1, the default grid (2^20 cells).

Usage: python benchmarks/median_histogram.py [--persons 100000,1000000,10000000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from userdp.transforms.local_sensitivity import ConcatenateValues, MergeGridHistograms
from userdp.transforms.mechanisms.exponential_quantile import ExponentialQuantile
from userdp.transforms.mechanisms.rng import KeyedRng

SECRET = bytes(range(32))
SHARDS = 64


def family(name: str, persons: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    if name == "continuous":
        return np.clip(rng.lognormal(4.0, 1.0, persons), 0, 600)
    return np.clip(rng.zipf(2.0, persons), 0, 600).astype(np.float64)


class PeakMerge(MergeGridHistograms):
    """The pipeline's combine, recording the most histogram bytes an accumulator held."""

    peak = 0

    def _compacted(self, acc: list[Any]) -> list[Any]:
        held = sum(h[0].nbytes + h[1].nbytes for h in acc)
        self.peak = max(self.peak, held)
        return super()._compacted(acc)


def combine(fn: Any, inputs: list[Any]) -> Any:
    """The CombineFn as a runner drives it: one accumulator per shard group, then a merge."""
    accs = []
    for group in np.array_split(np.arange(len(inputs)), 4):  # four bundles
        acc = fn.create_accumulator()
        for i in group:
            acc = fn.add_input(acc, inputs[i])
        accs.append(acc)
    return fn.extract_output(fn.merge_accumulators(accs))


def timed(f: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = f()
    return time.perf_counter() - start, out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--persons", default="100000,1000000,10000000")
    args = parser.parse_args(argv)
    mech = ExponentialQuantile(Fraction(1, 2), 0.0, 600.0, 1)
    print(f"median, ε = 1, {mech.cells:,} grid cells, {SHARDS} person shards\n")
    print(
        f"{'family':<11} {'persons':>11} | {'values: bytes':>14} {'s':>6} | "
        f"{'histogram: bytes':>16} {'peak bytes':>12} {'s':>6} {'shards s':>8} | "
        "ratio bytes  same value"
    )
    for name in ("continuous", "counts"):
        for persons in (int(float(p)) for p in args.persons.split(",")):
            values = family(name, persons)
            shards = np.array_split(values, SHARDS)
            rng = KeyedRng(SECRET, "median", name, str(persons))
            t_old, gathered = timed(lambda s=shards: combine(ConcatenateValues(), s))
            t_rel, old = timed(lambda g=gathered, r=rng: mech.release(g, r))
            t_shards, hists = timed(lambda s=shards: [mech.grid_histogram(x) for x in s])
            merge = PeakMerge()
            t_new, merged = timed(lambda h=hists, m=merge: combine(m, h))
            rng = KeyedRng(SECRET, "median", name, str(persons))
            t_rel2, new = timed(lambda m=merged, r=rng: mech.release_histogram(m, r))
            old_bytes = gathered.nbytes
            new_bytes = merged[0].nbytes + merged[1].nbytes
            print(
                f"{name:<11} {persons:>11,} | {old_bytes:>14,} {t_old + t_rel:>6.2f} | "
                f"{new_bytes:>16,} {merge.peak:>12,} {t_new + t_rel2:>6.2f} {t_shards:>8.2f} | "
                f"{old_bytes / new_bytes:>11.1f}  {old == new}"
            )


if __name__ == "__main__":
    main()
