"""Tests of the final noisy combine (transforms.noisy_combine) on the FnApiRunner."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import apache_beam as beam
import pytest

from tests.beam_collect import run_and_collect
from userdp.transforms.bounding import PartitionStats
from userdp.transforms.mechanisms.additive import GaussianMechanism, LaplaceMechanism
from userdp.transforms.mechanisms.partition_selection import (
    GaussianThresholding,
    LaplaceThresholding,
    TruncatedGeometricSelection,
)
from userdp.transforms.mechanisms.rng import ReleaseKey
from userdp.transforms.noisy_combine import ReleaseNoisily, canonical_key_string
from userdp.transforms.params import BoundingParams, ReleaseParams

RELEASE_KEY = ReleaseKey(bytes(range(32)))
BOUNDS = BoundingParams(("domain",), "d", 0.0, 600.0, 1, 2)
Q = BOUNDS.quantum
STATS = [
    (("a.com",), PartitionStats(1, 2, round(500 / 2**Q), round(-100 / 2**Q))),
    (("b.com",), PartitionStats(1000, 1500, round(90000 / 2**Q), round(-360000 / 2**Q))),
]


def release_params(metric: str, **kw: Any) -> ReleaseParams:
    noise = (
        LaplaceMechanism(2 * 600.0, 1.0) if metric in ("sum", "mean") else LaplaceMechanism(2, 1.0)
    )
    if metric == "mean":
        kw.setdefault("count_noise", LaplaceMechanism(2, 1.0))
    if "public_partitions" not in kw:
        kw.setdefault("selection", LaplaceThresholding(1, 1e-6, 1))
    return ReleaseParams("q", metric, BOUNDS, noise, **kw)  # type: ignore[arg-type]


def run(
    params: ReleaseParams, stats: list[Any], key: ReleaseKey = RELEASE_KEY, noise: bool = True
) -> list[dict[str, Any]]:
    def build(p: beam.Pipeline) -> dict[str, Any]:
        rows = (
            p
            | "Create" >> beam.Create(stats)
            | "Release" >> ReleaseNoisily(params, key, noise=noise)
        )
        return {"rows": rows}

    rows = run_and_collect(build)["rows"]
    return sorted(rows, key=lambda r: tuple(r.get(c) for c in params.bounding.by))


def test_canonical_key_string_is_type_tagged() -> None:
    keys = [(1,), ("1",), (1.0,), (True,), (None,), (b"1",), ("a", "b"), ("ab",), ("a:", "b")]
    assert len({canonical_key_string(k) for k in keys}) == len(keys)
    assert canonical_key_string(()) == ""


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        ("count", [2.0, 1500.0]),
        ("persons", [1.0, 1000.0]),
        ("sum", [500.0, 90000.0]),
        ("mean", [250.0, 60.0]),
    ],
)
def test_noise_off_releases_exact_values(metric: str, expected: list[float]) -> None:
    rows = run(release_params(metric), STATS, noise=False)
    assert [r["domain"] for r in rows] == ["a.com", "b.com"]
    assert [r["value"] for r in rows] == pytest.approx(expected, abs=1e-6)
    assert all(r["stddev"] > 0 for r in rows)


def test_private_thresholding_drops_a_one_person_partition_and_keeps_big_ones() -> None:
    rows = run(release_params("count"), STATS)
    assert [r["domain"] for r in rows] == ["b.com"]
    assert rows[0]["value"] != 1500.0 and abs(rows[0]["value"] - 1500.0) < 50


@pytest.mark.parametrize(
    "selection",
    [GaussianThresholding(0.5, 1e-6, 1), TruncatedGeometricSelection(1, 1e-6, 1)],
)
def test_other_selection_rules(selection: Any) -> None:
    rows = run(release_params("persons", selection=selection), STATS)
    assert [r["domain"] for r in rows] == ["b.com"]
    assert abs(rows[0]["value"] - 1000.0) < 50


def test_thresholded_persons_releases_the_selection_noisy_count() -> None:
    params = release_params("persons", release_selection_count=True)
    rows = run(params, STATS)
    sel = params.selection
    assert isinstance(sel, LaplaceThresholding)
    decision = sel.decide(
        1000, RELEASE_KEY.for_query("q").rng(canonical_key_string(("b.com",)), "select")
    )
    q = math.exp(-1.0)  # discrete Laplace of scale L/ε = 1: Var = 2q/(1 − q)²
    std = math.sqrt(2 * q) / (1 - q)
    assert rows == [
        {"domain": "b.com", "value": float(decision.noisy_count), "stddev": pytest.approx(std)}
    ]


def test_persons_without_the_flag_draws_its_own_noise() -> None:
    # The plan split the budget between selection and value: the value gets its own draw.
    params = release_params("persons")
    rows = run(params, STATS)
    label = canonical_key_string(("b.com",))
    value = params.noise.release(Fraction(1000), RELEASE_KEY.for_query("q").rng(label, "value"))
    assert rows == [{"domain": "b.com", "value": value, "stddev": params.noise.std}]


def test_public_partitions_release_listed_keys_only() -> None:
    params = release_params("count", public_partitions=(("a.com",), ("c.com",)))
    rows = run(params, STATS)
    assert [r["domain"] for r in rows] == ["a.com", "c.com"]
    assert rows[1]["value"] != 0.0  # absent key: noise only (P(exactly 0) ≈ 0.24, fixed key)
    exact = run(params, STATS, noise=False)
    assert [r["value"] for r in exact] == [2.0, 0.0]


def test_no_by_releases_the_global_partition_even_without_data() -> None:
    bounds = BoundingParams((), None, 0.0, 0.0, 1, 2)
    params = ReleaseParams("total", "count", bounds, GaussianMechanism(2.0, 0.5))
    assert run(params, [], noise=False) == [{"value": 0.0, "stddev": pytest.approx(2.0)}]
    assert run(params, [((), PartitionStats(3, 5, 0, 0))], noise=False)[0]["value"] == 5.0


def test_same_key_same_outputs_different_key_different_noise() -> None:
    params = release_params("mean", public_partitions=(("a.com",), ("b.com",), ("c.com",)))
    first, second = run(params, STATS), run(params, STATS)
    other = run(params, STATS, key=ReleaseKey(bytes(32)))
    assert first == second
    assert [r["value"] for r in first] != [r["value"] for r in other]
    assert all(0.0 <= r["value"] <= 600.0 for r in first + other)


def test_rejects_a_raw_secret() -> None:
    with pytest.raises(TypeError, match="keys must be a ReleaseKey or ReleaseKeys, got bytes"):
        ReleaseNoisily(release_params("count"), bytes(32))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("metric", "noise", "needed"),
    [
        ("count", LaplaceMechanism(1.5, 1.0), "L1 ≥ 2.0"),  # C = 2 rows
        ("persons", GaussianMechanism(0.5, 0.5), "L2 ≥ 1.0"),
        ("sum", LaplaceMechanism(600.0, 1.0), "L1 ≥ 1200.0"),  # C · max(|lo|, |hi|)
        ("mean", LaplaceMechanism(599.0, 1.0), "L1 ≥ 600.0"),  # C · (hi − lo) / 2
    ],
)
def test_noise_below_the_sensitivity_the_bounds_imply_is_refused(
    metric: str, noise: Any, needed: str
) -> None:
    kw: dict[str, Any] = {"public_partitions": (("a.com",),)}
    if metric == "mean":
        kw["count_noise"] = LaplaceMechanism(2, 1.0)
    with pytest.raises(ValueError, match=f"calibrated to sensitivity .*{needed}.*plan_query"):
        ReleaseParams("q", metric, BOUNDS, noise, **kw)  # type: ignore[arg-type]
    kw_ok = dict(kw)
    release_params(metric, **kw_ok)  # the calibrated control is accepted
