"""Accuracy of the smooth-sensitivity median (and friends), beside literature figures.

Part 1 — the setting of Bun & Steinke (2019): the median of 1,001 draws of N(0, 1), bounds
[−10, 10], ε = 1 (ρ = ½ for Laplace-log-normal). For each noise, the median over R runs of
|released − sample median|, fresh data every run. Literature figures for this setting (roughly):
Laplace δ = 10^−6 ≈ 0.05, Cauchy γ = 2 ≈ 0.06, Laplace-log-normal ≈ 0.02.

Part 2 — person level, on ``pipelines.generate.generate`` data: each person's mean visit duration
(numpy over the Parquet columns, read with pyarrow), then the median over persons, clamped to
[0, 300] s; smooth sensitivity with each noise beside the exponential-mechanism median at the same
ε (``transforms/mechanisms/exponential_quantile.py``, the default method, 2^20 grid cells). The
exponential mechanism is ε-bounded-range, hence ε²/8-zCDP (docs/accounting.md), so at ρ = ½ (the
Laplace-log-normal row's budget) the job runs it at ε = 2: printed as its own row.

Data generation uses numpy's seeded Generator (it is data, not noise); every noise draw comes from
a KeyedRng with a fixed benchmark secret, so the figures are reproducible.

Usage: python benchmarks/local_sensitivity.py [--runs 300] [--people 20000] [--pydp-python PATH]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from userdp.pipelines.generate import generate
from userdp.transforms.mechanisms.accounting import bounded_range_epsilon_within_rho
from userdp.transforms.mechanisms.exponential_quantile import ExponentialQuantile
from userdp.transforms.mechanisms.ptr_ladder import LadderPTR
from userdp.transforms.mechanisms.rng import KeyedRng
from userdp.transforms.mechanisms.smooth_sensitivity import (
    CauchyNoise,
    LaplaceLogNormalNoise,
    LaplaceNoise,
    SmoothNoise,
    SmoothQuantile,
)

SECRET = bytes(range(32))
# the default method at ε = 1, and as the job runs it inside ρ = ½ (ε-bounded-range: ε²/8 ≤ ρ)
EXPONENTIAL = [
    ("exponential mechanism (pure ε)", Fraction(1)),
    ("exponential, ρ = ½ (ε = 2)", Fraction(bounded_range_epsilon_within_rho(Fraction(1, 2)))),
]

NOISES: list[tuple[str, SmoothNoise, str]] = [
    ("laplace, δ = 1e-6", LaplaceNoise(1.0, 1e-6), "≈ 0.05"),
    ("cauchy, γ = 2", CauchyNoise(1.0, gamma=2.0), "≈ 0.06"),
    ("cauchy, γ = 4 (default)", CauchyNoise(1.0), "—"),
    ("laplace-log-normal, ρ = ½", LaplaceLogNormalNoise(0.5), "≈ 0.02"),
]


def median_abs_error(
    release: Callable[[np.ndarray, KeyedRng], float | None],
    data: Callable[[int], np.ndarray],
    runs: int,
    label: str,
) -> tuple[float, int]:
    """(median |error| over the runs that released, number of ⊥)."""
    errors, bottoms = [], 0
    for i in range(runs):
        x = data(i)
        y = release(x, KeyedRng(SECRET, "bench", label, i))
        if y is None:
            bottoms += 1
            continue
        errors.append(abs(y - float(np.sort(x)[math.ceil(len(x) / 2) - 1])))
    return (float(np.median(errors)) if errors else math.nan), bottoms


def part1(runs: int) -> None:
    print(f"Part 1: median of 1,001 N(0,1) draws, bounds [-10, 10], ε = 1, {runs} runs")
    print(f"  {'noise':32} {'ours':>8} {'literature':>11} {'β':>8}  ms/release")

    def data(i: int) -> np.ndarray:
        return np.random.default_rng(i).normal(size=1001)  # data, not noise

    for name, noise, lit in NOISES:
        mech = SmoothQuantile(Fraction(1, 2), -10.0, 10.0, noise)
        t0 = time.perf_counter()
        err, _ = median_abs_error(mech.release, data, runs, name)
        ms = (time.perf_counter() - t0) / runs * 1e3
        print(f"  {name:32} {err:8.4f} {lit:>11} {noise.beta:8.4f}  {ms:6.2f}")
    ladder = LadderPTR("quantile", -10.0, 10.0, 1, 1e-6, q=Fraction(1, 2))

    def ladder_release(x: np.ndarray, rng: KeyedRng) -> float | None:
        return ladder.release(x, rng).value

    err, bottoms = median_abs_error(ladder_release, data, runs, "ladder")
    print(f"  {'PTR ladder (ε, δ = 1e-6)':32} {err:8.4f} {'—':>11}   (⊥ in {bottoms}/{runs})")

    for label, eps in EXPONENTIAL:
        em = ExponentialQuantile(Fraction(1, 2), -10.0, 10.0, eps)
        t0 = time.perf_counter()
        err, _ = median_abs_error(em.release, data, runs, "em" + "-rho" * (eps != 1))
        ms = (time.perf_counter() - t0) / runs * 1e3
        print(f"  {label:32} {err:8.4f} {'—':>11} {'':>8}  {ms:6.2f}")


def per_person_mean_durations(people: int) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "logs.parquet"
        generate(people, str(path), seed=0)
        table = pq.read_table(path, columns=["person_id", "duration_s"])
    pid = table.column("person_id").to_numpy()
    dur = table.column("duration_s").to_numpy()
    _, inverse, counts = np.unique(pid, return_inverse=True, return_counts=True)
    return np.bincount(inverse, weights=dur) / counts


def part2(runs: int, people: int) -> None:
    means = per_person_mean_durations(people)
    lo, hi = 0.0, 300.0
    truth = float(np.sort(np.clip(means, lo, hi))[math.ceil(len(means) / 2) - 1])
    print(
        f"\nPart 2: person-level median of per-person mean duration, {len(means)} persons "
        f"(generate seed 0), bounds [0, 300] s, ε = 1, {runs} runs; true median {truth:.3f} s"
    )

    def data(_: int) -> np.ndarray:
        return means

    for name, noise, _lit in NOISES:
        mech = SmoothQuantile(Fraction(1, 2), lo, hi, noise)
        err, _ = median_abs_error(mech.release, data, runs, f"p2-{name}")
        print(f"  {name:32} {err:8.4f} s")

    for label, eps in EXPONENTIAL:
        em = ExponentialQuantile(Fraction(1, 2), lo, hi, eps)
        err, _ = median_abs_error(em.release, data, runs, "p2-em" + "-rho" * (eps != 1))
        print(f"  {label:32} {err:8.4f} s")


# The peer: Google's differential-privacy library through PyDP
# (``pydp.algorithms.laplacian.Median``, a bounded quantile tree, pure ε). It runs in a child of
# ``--pydp-python`` (PyDP pins its own dependencies) on the very same data: N(0, 1) draws from
# numpy's Generator seeded by the run index. Its noise comes from its own sampler, so its figure
# is reproducible only in distribution.
_PYDP_CHILD = """
import sys
import numpy as np
from pydp.algorithms.laplacian import Median
runs = int(sys.argv[1])
errors = []
for i in range(runs):
    x = np.random.default_rng(i).normal(size=1001)
    m = Median(epsilon=1.0, lower_bound=-10, upper_bound=10, dtype="float")
    errors.append(abs(m.quick_result(x.tolist()) - float(np.median(x))))
print(float(np.median(errors)))
"""


def peer_median(python: str, runs: int) -> None:
    import subprocess  # noqa: PLC0415

    out = subprocess.run(
        [python, "-c", _PYDP_CHILD, str(runs)], capture_output=True, text=True, check=True
    )
    err = float(out.stdout.strip().splitlines()[-1])
    print(f"  {'PyDP Median (Google DP, pure ε)':32} {err:8.4f} {'—':>11}   (same data, {python})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--people", type=int, default=20_000)
    parser.add_argument("--pydp-python", help="an interpreter with python-dp: the peer's median")
    args = parser.parse_args()
    part1(args.runs)
    if args.pydp_python:
        peer_median(args.pydp_python, args.runs)
    part2(args.runs, args.people)


if __name__ == "__main__":
    main()
