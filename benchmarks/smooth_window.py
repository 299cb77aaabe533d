"""What a smooth-sensitivity or PTR release's worker holds: every value vs its window (or sum).

The smooth-sensitivity quantile and PTR's quantiles (a proposed bound, or the ladder) read only
the order statistics within a window of ranks around the quantile
(``transforms/mechanisms/quantile_window.py``, docs/local_sensitivity.md §4, §6), found by three
levels of histograms (``transforms/rank_window.py``); PTR's means read only the count and the
exact clamped sum (``SumClampedValues``). This script runs both paths as the pipeline wires
them, on the same per-person values split into 64 shards (the CombineFns driven as a runner
drives them: an accumulator per bundle of shards, then their merge), each followed by the
release, and prints per person count:

* the values the releasing worker gathers (all of them, 8 bytes each; or the window's distinct
  values with their counts, 16 bytes each, plus three histograms of 2^16 counts);
* the peak memory of the combines and the release together, above their inputs (``tracemalloc``);
* the seconds of each path (the window's: its four passes over the shards, summed on one core);
* that both release the same value from the same keyed stream.

Three families (seeded NumPy data, not noise): ``continuous`` (lognormal per-person mean
durations on [0, 600]), ``counts`` (Zipf(2) row counts: heavy ties), ``crowded`` (values within
10^−9 of 300: the buckets cannot split them until the last level). The median and the 0.9
quantile with Cauchy noise at ε = 1 (β ≈ 0.1); with ``--ptr``, PTR's median and 0.9 quantile
(proposed bound 5) and ladder median, and its mean (bound 0.05) and ladder mean, at ε = 1 and
δ = 10^−6.

Usage: python benchmarks/smooth_window.py [--persons 100000,1000000,10000000] [--ptr]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

# benchmarks/ is sys.path[0] when a script here runs
from median_histogram import peak_bytes, timed

from userdp.transforms import rank_window as rw
from userdp.transforms.local_sensitivity import ConcatenateValues, SumClampedValues
from userdp.transforms.mechanisms.ptr import PTRMean, PTRQuantile
from userdp.transforms.mechanisms.ptr_ladder import LadderPTR, reads_clamped_sum
from userdp.transforms.mechanisms.quantile_window import QuantileWindow
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.smooth_sensitivity import SmoothQuantile, make_smooth_noise

SECRET = bytes(range(32))
SHARDS = 64
LO, HI = 0.0, 600.0


def family(name: str, persons: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    if name == "continuous":
        return np.clip(rng.lognormal(4.0, 1.0, persons), LO, HI)
    if name == "counts":
        return np.clip(rng.zipf(2.0, persons), LO, HI).astype(np.float64)
    return 300.0 + rng.uniform(0, 1e-9, persons)


def combine(fn: Any, shards: list[Any], per_shard: Callable[[Any], Any] = lambda s: s) -> Any:
    """The CombineFn as a runner drives it: one accumulator per bundle (four), each shard's
    input made when it is added (as a worker maps a shard and adds it), then the merge."""
    accs = []
    for group in np.array_split(np.arange(len(shards)), 4):
        acc = fn.create_accumulator()
        for i in group:
            acc = fn.add_input(acc, per_shard(shards[i]))
        accs.append(acc)
    return fn.extract_output(fn.merge_accumulators(accs))


def window_path(shards: list[np.ndarray], q: Fraction, reach: int) -> tuple[Any, np.ndarray]:
    """``GatherQuantileWindow``'s steps: level-0 histogram, two refinements, the distinct values."""
    whole = rw.Narrowing(1, 0, 0, (), LO, HI)
    counts = combine(rw.SumCounts(rw.BUCKETS), shards, whole.histogram)
    window = QuantileWindow.for_reach(int(counts.sum()), q, reach)
    nw = rw.Narrowing.start(window, LO, HI).refine(counts)
    for _ in range(1, rw.LEVELS):
        nw = nw.refine(combine(rw.SumCounts(rw.BUCKETS), shards, nw.histogram))
    pairs = combine(rw.MergeDistinct(), shards, lambda s: rw._selected_distinct(s, nw))
    return pairs, nw.window_values(*pairs)


def mechanisms(ptr: bool) -> list[tuple[str, Any]]:
    if not ptr:
        noise = make_smooth_noise("cauchy", epsilon=1.0)
        return [(f"smooth {q}", SmoothQuantile(q, LO, HI, noise)) for q in (HALF, NINE_TENTHS)]
    return [
        *((f"ptr {q}", PTRQuantile(q, LO, HI, bound=5, epsilon=1, delta=1e-6)) for q in QS),
        ("ladder 1/2", LadderPTR("quantile", LO, HI, 1, 1e-6, q=HALF)),
        ("ptr mean", PTRMean(LO, HI, bound=0.05, epsilon=1, delta=1e-6)),
        ("ladder mean", LadderPTR("mean", LO, HI, 1, 1e-6)),
    ]


HALF, NINE_TENTHS = Fraction(1, 2), Fraction(9, 10)
QS = (HALF, NINE_TENTHS)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--persons", default="100000,1000000,10000000")
    parser.add_argument("--ptr", action="store_true", help="PTR's quantiles and means instead")
    args = parser.parse_args(argv)
    what = "PTR at ε = 1, δ = 10^-6" if args.ptr else "Cauchy noise at ε = 1"
    print(f"{what}, {SHARDS} person shards (MB = 10^6 B)\n")
    print(
        f"{'mechanism':<12} {'family':<11} {'persons':>11} | {'all: bytes':>12} {'peak MB':>8} "
        f"{'s':>6} | {'window: bytes':>13} {'values':>7} {'peak MB':>8} {'s':>6} | same value"
    )
    for label, mech in mechanisms(args.ptr):
        means = reads_clamped_sum(mech)
        reach = 0 if means else mech.reach
        for name in ("continuous", "counts", "crowded"):
            for persons in (int(float(p)) for p in args.persons.split(",")):
                shards = np.array_split(family(name, persons), SHARDS)
                key = (label, name, str(persons))

                def gather(s: list[Any] = shards, lab: tuple[str, ...] = key, m: Any = mech) -> Any:
                    values = combine(ConcatenateValues(), s)
                    return values, m.release(values, KeyedRng(SECRET, *lab))

                def window(
                    s: list[Any] = shards,
                    lab: tuple[str, ...] = key,
                    m: Any = mech,
                    means: bool = means,
                    reach: int = reach,
                ) -> Any:
                    if means:  # the count and the exact clamped sum, no values
                        total = combine(SumClampedValues(LO, HI), s)
                        return None, None, m.release_sum(total, KeyedRng(SECRET, *lab))
                    pairs, kept = window_path(s, m.q, reach)
                    return pairs, kept, m.release(kept, KeyedRng(SECRET, *lab))

                t_all, (values, old) = timed(gather)
                t_win, (pairs, kept, new) = timed(window)
                if means:
                    held, n_kept = 0, 0
                else:
                    held = pairs[0].nbytes + pairs[1].nbytes + rw.LEVELS * rw.BUCKETS * 8
                    n_kept = len(kept)
                print(
                    f"{label:<12} {name:<11} {persons:>11,} | {values.nbytes:>12,} "
                    f"{peak_bytes(gather) / 1e6:>8.1f} {t_all:>6.2f} | {held:>13,} "
                    f"{n_kept:>7,} {peak_bytes(window) / 1e6:>8.1f} {t_win:>6.2f} | "
                    f"{old == new}"
                )


if __name__ == "__main__":
    main()
