"""Draws per second of every sampler in the mechanisms core, on one core.

Two figures per sampler:
  * stream — many draws from one keyed stream (the sampler's own cost);
  * per label — a fresh KeyedRng per draw, as the final combine does for one value per partition
    (adds HMAC key derivation and the first SHAKE block).

Usage: python benchmarks/samplers.py [--seconds S]   (or `make bench`)
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from collections.abc import Callable
from fractions import Fraction

from userdp.transforms.mechanisms import heavy_tailed
from userdp.transforms.mechanisms.additive import GaussianMechanism, LaplaceMechanism
from userdp.transforms.mechanisms.discrete import (
    bernoulli_exp_neg,
    discrete_gaussian,
    discrete_laplace,
    geometric_exp,
)
from userdp.transforms.mechanisms.exponential import ExponentialMechanism
from userdp.transforms.mechanisms.rng import KeyedRng

SECRET = bytes(range(32))
Sampler = Callable[[KeyedRng], object]


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second, measured over at least ``seconds`` after a short warm-up."""
    for _ in range(200):
        fn()
    n, start = 0, time.perf_counter()
    while True:
        for _ in range(1000):
            fn()
        n += 1000
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed


def samplers() -> dict[str, Sampler]:
    lap = LaplaceMechanism(l1_sensitivity=1.0, epsilon=1.0)
    gau = GaussianMechanism(l2_sensitivity=1.0, rho=0.5)
    exp10 = ExponentialMechanism(epsilon=1.0, sensitivity=1.0)
    scores10 = [float(i % 4) for i in range(10)]
    return {
        "bernoulli_exp_neg(γ=1/3)": lambda r: bernoulli_exp_neg(r, Fraction(1, 3)),
        "geometric_exp(rate=1/10)": lambda r: geometric_exp(r, Fraction(1, 10)),
        "discrete_laplace(scale=1)": lambda r: discrete_laplace(r, 1),
        "discrete_laplace(scale=10)": lambda r: discrete_laplace(r, 10),
        "discrete_laplace(scale=1e6)": lambda r: discrete_laplace(r, 10**6),
        "discrete_gaussian(σ=1)": lambda r: discrete_gaussian(r, 1),
        "discrete_gaussian(σ=100)": lambda r: discrete_gaussian(r, 10**4),
        "LaplaceMechanism(Δ=1, ε=1)": lambda r: lap.release(12.5, r),
        "GaussianMechanism(Δ=1, ρ=0.5)": lambda r: gau.release(12.5, r),
        "ExponentialMechanism(10 candidates)": lambda r: exp10.select(scores10, r),
        "cauchy_type_noise(γ=4)": lambda r: heavy_tailed.cauchy_type_noise(r, 4.0),
        "laplace_log_normal_noise(σ=1)": lambda r: heavy_tailed.laplace_log_normal_noise(r, 1.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    print(f"{'sampler':40} {'stream draws/s':>15} {'per-label draws/s':>18}")
    for name, sample in samplers().items():
        stream = rate(_from_one_stream(sample, name), args.seconds)
        per_label = rate(_fresh_stream_each(sample, name), args.seconds)
        print(f"{name:40} {stream:15,.0f} {per_label:18,.0f}")


def _from_one_stream(sample: Sampler, name: str) -> Callable[[], object]:
    rng = KeyedRng(SECRET, "bench", name)
    return lambda: sample(rng)


def _fresh_stream_each(sample: Sampler, name: str) -> Callable[[], object]:
    counter = itertools.count()
    return lambda: sample(KeyedRng(SECRET, "bench", name, next(counter)))


if __name__ == "__main__":
    main()
