"""The distributed selection of a quantile's window of ranks (transforms/rank_window.py).

(1) the pure steps, as the Beam graph runs them (level 0 over all values, two refinements, the
distinct values gathered), against ``np.sort`` on adversarial data: heavy ties, values crowded
below a bucket's width, ±0, subnormals, the bounds themselves, a degenerate range, empty and tiny
inputs, any split into shards; (2) the Beam transform end to end. A release job whose window
drops most persons is in tests/pipelines/test_kind_local_sensitivity.py.
"""

from __future__ import annotations

from fractions import Fraction

import apache_beam as beam
import numpy as np
import pytest

from tests.beam_collect import run_and_collect
from userdp.transforms import rank_window as rw
from userdp.transforms.mechanisms.quantile_window import QuantileWindow, cost_reach

LO, HI = 0.0, 600.0


def select(shards: list[np.ndarray], q: Fraction, beta: float, lo: float = LO, hi: float = HI):
    """The transform's steps without Beam: (window, gathered distinct count, window values)."""
    whole = rw.Narrowing(1, 0, 0, (), lo, hi)
    counts = sum((whole.histogram(s) for s in shards), np.zeros(rw.BUCKETS, dtype=np.int64))
    window = QuantileWindow.for_release(int(counts.sum()), q, beta)
    nw = rw.Narrowing.start(window, lo, hi).refine(counts)
    for _ in range(1, rw.LEVELS):
        counts = sum((nw.histogram(s) for s in shards), np.zeros(rw.BUCKETS, dtype=np.int64))
        nw = nw.refine(counts)
    merge = rw.MergeDistinct()
    acc = merge.create_accumulator()
    for s in shards:
        acc = merge.add_input(acc, rw._selected_distinct(s, nw))
    distinct, tally = merge.extract_output(merge.merge_accumulators([acc]))
    return window, len(distinct), nw.window_values(distinct, tally)


def families(gen: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {
        "uniform": gen.uniform(LO, HI, n),
        "ties": gen.integers(0, 4, n).astype(np.float64) * 150.0,
        "crowded": 300.0 + gen.uniform(0, 1e-10, n),  # far below a level-2 bucket (2^-32·600)
        "tiny": np.concatenate([gen.uniform(0, 1e-300, n // 2), np.full(n - n // 2, -0.0)]),
        "bounds": gen.choice([LO, HI], n),
        "lognormal": np.minimum(gen.lognormal(2, 3, n), HI),
    }


@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(9, 10), Fraction(1, 100)], ids=str)
@pytest.mark.parametrize("n", [0, 1, 17, 5000])
def test_the_selection_is_the_sorted_window_whatever_the_data(q: Fraction, n: int) -> None:
    gen = np.random.default_rng(n)
    for name, values in families(gen, n).items():
        shards = np.array_split(gen.permutation(values), 7)
        for beta in (0.05, 1.0):
            window, _, got = select(shards, q, beta)
            want = np.sort(values)[window.first - 1 : window.last]
            np.testing.assert_array_equal(got, want, err_msg=f"{name} β={beta}")
            assert (np.signbit(got) == np.signbit(want)).all() or name == "tiny"


def test_ties_collapse_and_the_gather_stays_near_the_window() -> None:
    gen = np.random.default_rng(1)
    n = 200_000
    ties = gen.integers(0, 600, n).astype(np.float64)  # whole seconds: 333 persons per value
    window, distinct, got = select(np.array_split(ties, 4), Fraction(1, 2), 0.5)
    assert window.size < 40 and distinct <= 2  # the window's few values, not 200,000
    spread = gen.uniform(LO, HI, n)
    window, distinct, got = select(np.array_split(spread, 4), Fraction(1, 2), 0.5)
    assert distinct < window.size + 10
    np.testing.assert_array_equal(got, np.sort(spread)[window.first - 1 : window.last])


def test_a_degenerate_range_is_still_exact() -> None:
    """All values equal and the bounds equal to them at a level: buckets 0 and last only."""
    values = np.full(1000, 5.0)
    window, _, got = select([values], Fraction(1, 2), 1.0, lo=5.0, hi=5.0 + 2**-40)
    np.testing.assert_array_equal(got, values[window.first - 1 : window.last])
    assert rw.bucket_of(np.array([4.0, 5.0, 6.0]), 5.0, 5.0).tolist() == [0, 0, rw.BUCKETS - 1]


def test_bucket_indices_never_decrease_along_sorted_values() -> None:
    gen = np.random.default_rng(2)
    v = np.sort(np.concatenate([gen.uniform(-1, 2, 10_000), [0.1 * k for k in range(10)]]))
    for low, high in ((0.0, 1.0), (0.1, 0.1 + 3e-16), (-1e-300, 1e-300)):
        assert (np.diff(rw.bucket_of(v, low, high)) >= 0).all()


def test_the_beam_transform_gathers_the_window() -> None:
    gen = np.random.default_rng(3)
    values = gen.uniform(LO, HI, 3000)
    shards = np.array_split(values, 5)
    q, beta = Fraction(1, 3), 0.7
    out = run_and_collect(
        lambda p: {
            "w": p
            | beam.Create(shards, reshuffle=False)
            | rw.GatherQuantileWindow(q, cost_reach(beta), LO, HI)
        }
    )
    window = QuantileWindow.for_release(3000, q, beta)
    (got,) = out["w"]
    np.testing.assert_array_equal(got, np.sort(values)[window.first - 1 : window.last])
    assert window.size < 300
