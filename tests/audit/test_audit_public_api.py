"""End-to-end privacy audits through the public library (``import userdp.transforms as dp``).

The core audits (``test_audit_core`` and friends) sample a mechanism 10^5 times from Python. A
Beam pipeline cannot be run 10^5 times, but one run can hold many independent trials: with
public partitions, every partition's noise comes from its own keyed stream, so the released
values of partitions that hold the same true data are i.i.d. draws of the mechanism's output.

The pipeline: ``release.ByPerson`` → ``dp.Count(by=["page"], public_partitions=...)`` with
L = 1 partition per person and C = 1 row per partition, so removing one person changes one
partition's count by one. Each of ``N`` partitions ``x-i`` holds 5 persons and each of ``N``
partitions ``y-i`` holds 6 (the neighbour: one more person); every person also sends a second,
duplicate row that the bound C = 1 must drop. The released values at ``x-*`` and ``y-*`` are the
two sides handed to the harness (:func:`tests.audit.harness.audit_outputs`, α = 10^-6).

Expected bounds (the harness's formula, m = N/2 test draws per side). Laplace-type noise of scale
1/ε on a count, ε = 1, event {y ≥ 6}: p ≈ 0.51, q ≈ 0.19, so at m = 5,000
ε_lb ≈ 1 − 4.9·(0.014 + 0.029) ≈ 0.79. Negative controls, both caught by far more than the
margin: (1) noise for ε = 2.5, claim ε = 1: ε_lb ≈ 2.5 − 4.9·(0.014 + 0.06) ≈ 2.1; (2) the
contribution bound skipped (every person sends 4 rows, the count is told C = 1 but the bounding
step keeps every row): the neighbour moves the count by 4, so ε_lb approaches 4 − margin ≈ 3.3.
Measured with the fixed secret: 0.788 (pass), 2.131 and 3.299 (both caught).

The same device audits the shifted inverse mechanism end to end: ``dp.Total(by=["page"],
public_partitions=..., L = 1)`` releases each public partition's total from its own keyed
stream, so partitions ``x-i`` (six persons with 3 rows) and ``y-i`` (the same plus one heavy
person with 25 rows) are i.i.d. draws of M(x) and M(x'), the pair of
``test_audit_shifted_inverse`` (exponential search, D = 20, d = 1, β = ½, ε = 1: τ = 8). A person
with 25 rows already exceeds D, so it acts as the core audit's person with 10^6. Expected (exact
output laws of that audit): event {y ≤ 0}, P_x = 0.5015, P_x' = 0.2701, so at m = 5,000
ε_lb ≈ 0.619 − 4.9·(0.0141 + 0.0233) ≈ 0.44. Negative control: noise for ε = 4 claimed as ε = 1
(τ and the weights both move, so the expected bound comes from a measurement, not a formula).
Measured with the fixed secret: 0.452 (pass), 1.842 (caught).

``dp.Sum`` checks that the bounds reach the noise: bounds [0, 8], L = C = 1, five persons with
value 0 in every ``x-i`` and the same plus one person with value 8 in ``y-i``; the noise scale must
be 8/ε, so the pair is the Count audit's scaled by 8 (expected ε_lb ≈ 0.79). Negative control: the
clamp is skipped where the rows are bounded (upper 15.99 applied instead of 8: the same
fixed-point quantum, so only the clamp changes) and the extra person's value is 15.9; the true
loss is ≈ 2ε, expected ε_lb ≈ 2 − 4.9·(0.014 + 0.06) ≈ 1.6.
Measured with the fixed secret: 0.789 (pass), 1.494 (caught).

``dp.Count(bound="auto")`` with ``by`` and public partitions chooses a clamp per partition with its
own stream, so the released ``bound`` column is audited the same way, against the choice's share
(auto_share = 1/4 of ε = 4: ε = 1 for the choice; the bound is post-processing of the choice
alone). The pair is ``test_audit_auto_bound``'s: totals (3, 8) in ``x-i`` against (3, 8, 5) in
``y-i``, candidates 1 … 8 (``bound_range = [1, 8]``): p ≈ 0.127, q ≈ 0.051, so at m = 5,000
ε_lb ≈ 0.92 − 4.9·(0.037 + 0.061) ≈ 0.44. Negative control: the share for a choice with ε = 3
claimed as ε = 1. Measured with the fixed secret: 0.511 (pass), 1.871 (caught).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pytest

import userdp.transforms as dp
from tests.audit.harness import AuditResult, audit_outputs
from userdp.transforms import aggregate
from userdp.transforms.mechanisms.rng import ReleaseKey

pytestmark = pytest.mark.slow  # one Beam pipeline of ~10^5 rows per audit

N = 10_000  # partitions per side: m = 5,000 test draws
KEY = ReleaseKey(bytes(range(32)))  # the harness's fixed-secret discipline: reproducible


def _rows(rows_per_person: int) -> pa.Table:
    """5 persons in every ``x-i``, 6 in every ``y-i``, each sending ``rows_per_person`` rows."""
    persons: list[str] = []
    pages: list[str] = []
    for side, size in (("x", 5), ("y", 6)):
        for i in range(N):
            for j in range(size):
                persons += [f"{side}{i}.{j}"] * rows_per_person
                pages += [f"{side}-{i}"] * rows_per_person
    return pa.table({"person": persons, "page": pages})


def _release(
    metric: Callable[[list[str]], beam.PTransform[Any, Any]],
    epsilon: float,
    rows: pa.Table,
    out_dir: Path,
    *,
    values: list[str] | None = None,
    column: str = "value",
) -> tuple[list[float], list[float]]:
    """Releases ``metric(public keys)`` on ``rows`` → (``column`` at ``x-*``, at ``y-*``)."""
    release = dp.Release._for_launcher(dp.Budget(epsilon=epsilon), KEY, noise=True)
    public = [f"{s}-{i}" for s in "xy" for i in range(N)]
    with beam.Pipeline() as p:
        people = (
            p
            | beam.Create([rows])
            | release.ByPerson(
                "person", keys={"page": "string"}, values=values or [], person_type="string"
            )
        )
        released = people | "released" >> metric(public)
        _ = (
            released
            | beam.Map(lambda r: json.dumps([r.page, getattr(r, column)]))
            | beam.io.WriteToText(str(out_dir / "released"))
        )
    lines = [line for f in out_dir.glob("released*") for line in f.read_text().splitlines()]
    out = dict(json.loads(line) for line in lines)
    xs = [out[f"x-{i}"] for i in range(N)]
    ys = [out[f"y-{i}"] for i in range(N)]
    return xs, ys


def _release_counts(
    epsilon: float, rows: pa.Table, out_dir: Path
) -> tuple[list[float], list[float]]:
    return _release(
        lambda public: dp.Count(
            by=["page"],
            max_partitions_per_person=1,
            max_rows_per_partition=1,
            public_partitions=public,
            epsilon=epsilon,
        ),
        epsilon,
        rows,
        out_dir,
    )


def _totals_rows() -> pa.Table:
    """Six persons with 3 rows in every ``x-i``; the same plus one person with 25 in ``y-i``."""
    persons: list[str] = []
    pages: list[str] = []
    for side, heavy in (("x", 0), ("y", 25)):
        for i in range(N):
            for j, rows in enumerate([3] * 6 + ([heavy] if heavy else [])):
                persons += [f"{side}{i}.{j}"] * rows
                pages += [f"{side}-{i}"] * rows
    return pa.table({"person": persons, "page": pages})


def _release_totals(epsilon: float, out_dir: Path) -> tuple[list[float], list[float]]:
    return _release(
        lambda public: dp.Total(
            by=["page"],
            public_partitions=public,
            max_partitions_per_person=1,
            upper=20,
            resolution=1,
            beta=0.5,
            search="exponential",
            epsilon=epsilon,
        ),
        epsilon,
        _totals_rows(),
        out_dir,
    )


def _sum_rows(extra: float) -> pa.Table:
    """Five persons with value 0 in every ``x-i``; the same plus one with ``extra`` in ``y-i``."""
    persons: list[str] = []
    pages: list[str] = []
    values: list[float] = []
    for side, size in (("x", 5), ("y", 6)):
        for i in range(N):
            persons += [f"{side}{i}.{j}" for j in range(size)]
            pages += [f"{side}-{i}"] * size
            values += [0.0] * 5 + [extra] * (size - 5)
    return pa.table({"person": persons, "page": pages, "v": values})


def _release_sums(rows: pa.Table, out_dir: Path) -> tuple[list[float], list[float]]:
    return _release(
        lambda public: dp.Sum(
            by=["page"],
            value="v",
            bounds=[0, 8],
            max_partitions_per_person=1,
            max_rows_per_partition=1,
            public_partitions=public,
            epsilon=1,
        ),
        1.0,
        rows,
        out_dir,
        values=["v"],
    )


def _auto_bound_rows() -> pa.Table:
    """Persons with 3 and 8 rows in every ``x-i``; the same plus one with 5 rows in ``y-i``."""
    persons: list[str] = []
    pages: list[str] = []
    for side, totals in (("x", (3, 8)), ("y", (3, 8, 5))):
        for i in range(N):
            for j, rows in enumerate(totals):
                persons += [f"{side}{i}.{j}"] * rows
                pages += [f"{side}-{i}"] * rows
    return pa.table({"person": persons, "page": pages})


def _release_bounds(choice_epsilon: float, out_dir: Path) -> tuple[list[float], list[float]]:
    """The auto bound chosen per public partition, with ``choice_epsilon`` for the choice."""
    share = 4 * choice_epsilon  # auto_share = 1/4 of the share chooses the bound
    return _release(
        lambda public: dp.Count(
            by=["page"],
            max_partitions_per_person=1,
            bound="auto",
            bound_range=[1, 8],
            auto_share=0.25,
            public_partitions=public,
            epsilon=share,
        ),
        share,
        _auto_bound_rows(),
        out_dir,
        column="bound",
    )


def _audit(xs: list[float], ys: list[float]) -> AuditResult:
    return audit_outputs(xs, ys, epsilon=1.0, delta=0.0)


def test_count_through_the_public_api_passes_the_audit(tmp_path: Path) -> None:
    result = _audit(*_release_counts(1.0, _rows(2), tmp_path))
    assert result.passed, str(result)
    assert result.epsilon_lb >= 0.79 - 0.15, str(result)  # near tight, so the pass means much


def test_negative_control_too_little_noise_is_caught(tmp_path: Path) -> None:
    result = _audit(*_release_counts(2.5, _rows(2), tmp_path))
    assert not result.passed, str(result)


def test_negative_control_skipped_bounding_is_caught(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = aggregate.bound_and_aggregate

    def unbounded(table: pa.Table, params: Any, key: bytes) -> Any:  # C = 1 claimed, not applied
        return real(table, dataclasses.replace(params, max_rows_per_partition=10**6), key)

    monkeypatch.setattr(aggregate, "bound_and_aggregate", unbounded)
    result = _audit(*_release_counts(1.0, _rows(4), tmp_path))
    assert not result.passed, str(result)


def test_total_through_the_public_api_passes_the_audit(tmp_path: Path) -> None:
    result = _audit(*_release_totals(1.0, tmp_path))
    assert result.passed, str(result)
    assert result.epsilon_lb >= 0.44 - 0.15, str(result)


def test_total_negative_control_too_little_noise_is_caught(tmp_path: Path) -> None:
    result = _audit(*_release_totals(4.0, tmp_path))
    assert not result.passed, str(result)


def test_sum_through_the_public_api_passes_the_audit(tmp_path: Path) -> None:
    result = _audit(*_release_sums(_sum_rows(8.0), tmp_path))
    assert result.passed, str(result)
    assert result.epsilon_lb >= 0.79 - 0.15, str(result)


def test_sum_negative_control_skipped_clamp_is_caught(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = aggregate.bound_and_aggregate

    def unclamped(table: pa.Table, params: Any, key: bytes) -> Any:  # [0, 8] claimed, not applied
        return real(table, dataclasses.replace(params, upper=15.99), key)

    monkeypatch.setattr(aggregate, "bound_and_aggregate", unclamped)
    result = _audit(*_release_sums(_sum_rows(15.9), tmp_path))
    assert not result.passed, str(result)


def test_auto_bound_choice_through_the_public_api_passes_the_audit(tmp_path: Path) -> None:
    result = _audit(*_release_bounds(1.0, tmp_path))
    assert result.passed, str(result)
    assert result.epsilon_lb >= 0.44 - 0.15, str(result)


def test_auto_bound_negative_control_larger_choice_share_is_caught(tmp_path: Path) -> None:
    result = _audit(*_release_bounds(3.0, tmp_path))
    assert not result.passed, str(result)
