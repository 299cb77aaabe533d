"""What the default median's releasing worker holds and does: gathered values vs grid histograms.

The exponential-mechanism quantile reads its data only through the histogram of grid indices
(``ExponentialQuantile.grid_histogram``), so the pipeline's person shards send their histograms
and one combine adds them (``transforms.grid_histogram``: one int64 count per grid point at the
default grid) where it used to gather every per-person value on one worker
(``ConcatenateValues``). This script runs both combines, as the pipeline wires them, on the same
per-person values split into 64 shards (four bundles, then their merge), each followed by the
release, and prints per person count:

* the bytes of the combine's output (values: 8 per person; histogram: 16 per distinct grid
  index, at most 2^20 + 1 at the default grid);
* the peak memory of the combine and the release together, above what their inputs hold
  (``tracemalloc``, which sees NumPy's buffers and the release's Python lists of runs);
* the seconds of the combine and the release (a run without tracing), and of the per-shard
  histograms (spread over the workers that hold the shards; summed here, one core);
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
import tracemalloc
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from userdp.transforms.grid_histogram import grid_histogram_combine
from userdp.transforms.local_sensitivity import ConcatenateValues
from userdp.transforms.mechanisms.exponential_quantile import ExponentialQuantile
from userdp.transforms.mechanisms.rng import KeyedRng

SECRET = bytes(range(32))
SHARDS = 64


def family(name: str, persons: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    if name == "continuous":
        return np.clip(rng.lognormal(4.0, 1.0, persons), 0, 600)
    return np.clip(rng.zipf(2.0, persons), 0, 600).astype(np.float64)


def combine(fn: Any, inputs: list[Any]) -> Any:
    """The CombineFn as a runner drives it: one accumulator per bundle (four), each compacted
    as it is sent on, then their merge on the releasing worker."""
    accs = []
    for group in np.array_split(np.arange(len(inputs)), 4):
        acc = fn.create_accumulator()
        for i in group:
            acc = fn.add_input(acc, inputs[i])
        accs.append(fn.compact(acc))
    return fn.extract_output(fn.merge_accumulators(accs))


def timed(f: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = f()
    return time.perf_counter() - start, out


def peak_bytes(f: Callable[[], Any]) -> int:
    """The most memory ``f`` held at once above what was allocated before it (tracemalloc)."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    f()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - base


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--persons", default="100000,1000000,10000000")
    args = parser.parse_args(argv)
    mech = ExponentialQuantile(Fraction(1, 2), 0.0, 600.0, 1)
    print(f"median, ε = 1, {mech.cells:,} grid cells, {SHARDS} person shards (MB = 10^6 bytes)\n")
    print(
        f"{'family':<11} {'persons':>11} | {'values: bytes':>14} {'peak MB':>8} {'s':>6} | "
        f"{'histogram: bytes':>16} {'peak MB':>8} {'s':>6} {'shards s':>8} | same value"
    )
    for name in ("continuous", "counts"):
        for persons in (int(float(p)) for p in args.persons.split(",")):
            values = family(name, persons)
            shards = np.array_split(values, SHARDS)
            t_shards, hists = timed(lambda s=shards: [mech.grid_histogram(x) for x in s])

            def gather(s: list[Any] = shards, n: str = name, k: int = persons) -> Any:
                gathered = combine(ConcatenateValues(), s)
                return gathered, mech.release(gathered, KeyedRng(SECRET, "median", n, str(k)))

            def merge(h: list[Any] = hists, n: str = name, k: int = persons) -> Any:
                merged = combine(grid_histogram_combine(mech), h)
                rng = KeyedRng(SECRET, "median", n, str(k))
                return merged, mech.release_histogram(merged, rng)

            t_old, (gathered, old) = timed(gather)
            t_new, (merged, new) = timed(merge)
            old_peak, new_peak = peak_bytes(gather) / 1e6, peak_bytes(merge) / 1e6
            new_bytes = merged[0].nbytes + merged[1].nbytes
            print(
                f"{name:<11} {persons:>11,} | {gathered.nbytes:>14,} {old_peak:>8.1f} "
                f"{t_old:>6.2f} | {new_bytes:>16,} {new_peak:>8.1f} {t_new:>6.2f} "
                f"{t_shards:>8.2f} | {old == new}"
            )


if __name__ == "__main__":
    main()
