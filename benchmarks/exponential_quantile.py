"""Speed of the exponential-mechanism quantile's release: integer scores against Fractions.

``ExponentialQuantile.release`` splits its candidate runs into near and far (exponent above the
rejection threshold) by an integer comparison of score gaps and builds a Fraction only for the
few hundred near runs (``exponential.sample_exp_weights_of_int_scores``). The general path
(``sample_exp_weights`` on ``ExponentialMechanism.exponents``) builds one Fraction per run — a
run per distinct grid value, so about one per person. Both draw from the same keyed stream, so
the benchmark also checks that they release the same value. One core; per-person values are a
seeded N(300, 100²) sample on bounds [0, 600] (data, not noise); the median at ε = 1.

Usage: python benchmarks/exponential_quantile.py [--persons 10000,100000,500000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from userdp.transforms.mechanisms import exponential
from userdp.transforms.mechanisms.exponential import sample_exp_weights
from userdp.transforms.mechanisms.exponential_quantile import ExponentialQuantile
from userdp.transforms.mechanisms.rng import KeyedRng

SECRET = bytes(range(32))


def general_path(mech: ExponentialQuantile, values: np.ndarray, rng: KeyedRng) -> float:
    """The release as it was: one Fraction exponent per run (its cache cleared: a job releases
    each quantile once, so the exponents are never cached there)."""
    exponential._exponents.cache_clear()
    scores, lengths, starts = mech.runs(values)
    t = sample_exp_weights(rng, mech.mechanism.exponents(scores), lengths)
    return mech.grid_value(starts[t] + rng.randbelow(lengths[t]))


def best_seconds(
    release: Callable[[ExponentialQuantile, np.ndarray, KeyedRng], float],
    mech: ExponentialQuantile,
    values: np.ndarray,
    repeat: int,
) -> tuple[float, float]:
    """(best wall time, released value) of ``repeat`` releases from the same keyed stream."""
    best, value = float("inf"), 0.0
    for _ in range(repeat):
        rng = KeyedRng(SECRET, "q", str(len(values)))
        start = time.perf_counter()
        value = release(mech, values, rng)
        best = min(best, time.perf_counter() - start)
    return best, value


def integer_path(mech: ExponentialQuantile, values: np.ndarray, rng: KeyedRng) -> float:
    return mech.release(values, rng)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--persons", default="10000,100000,500000")
    parser.add_argument("--repeat", type=int, default=3, help="releases per path (best is kept)")
    args = parser.parse_args()
    mech = ExponentialQuantile(Fraction(1, 2), 0.0, 600.0, 1.0)
    print(f"median, ε = 1, bounds [0, 600], grid of {mech.cells:,} cells; best of {args.repeat}")
    print(f"{'persons':>9} {'runs':>9} {'integer scores':>15} {'Fractions':>10} {'ratio':>6}  same")
    for n in (int(x) for x in args.persons.split(",")):
        values = np.random.default_rng(n).normal(300.0, 100.0, n)  # data, not noise
        runs = len(mech.runs(values)[0])
        fast, a = best_seconds(integer_path, mech, values, args.repeat)
        slow, b = best_seconds(general_path, mech, values, args.repeat)
        print(f"{n:>9,} {runs:>9,} {fast:>14.3f}s {slow:>9.3f}s {slow / fast:>6.1f}  {a == b}")


if __name__ == "__main__":
    main()
