"""``ContributionStructure`` / ``ValueStructure`` on Beam: exact measurements with noise off.

``userdp tune`` covers them end to end (``tests/pipelines/test_tune.py``); here the transforms
alone, over many person shards, so the merge of shard counts and the distinct count of the
partitions persons picked are checked against brute force.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from fractions import Fraction
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

import userdp.transforms as dp
from userdp.transforms.columns import PERSON_COLUMN
from userdp.transforms.contribution_structure import (
    ContributionStructure,
    StructurePlan,
    ValuePlan,
    ValueStructure,
    shard_structure,
)
from userdp.transforms.mechanisms.contribution_histogram import ContributionHistograms
from userdp.transforms.mechanisms.rng import ReleaseKey
from userdp.transforms.mechanisms.value_histogram import ValueHistogram
from userdp.transforms.noisy_combine import canonical_key_string

KEY = ReleaseKey(bytes(range(32)))
HIST = ContributionHistograms(epsilon=Fraction(1, 2), max_exponent=6)


def visits(persons: int, domains_of: Any) -> list[dict[str, Any]]:
    """Rows: person i visits each domain of ``domains_of(i)`` (i % 3) + 1 times."""
    return [
        {"person": f"p{i}", "domain": d, "duration_s": float(i % 7)}
        for i in range(persons)
        for d in domains_of(i)
        for _ in range(i % 3 + 1)
    ]


def measure(rows: list[dict[str, Any]], plan: Any, transform: type, want: dict[str, Any]) -> None:
    """``transform(plan)`` over 16 person shards, noise off, yields ``want`` and its name."""
    release = dp.Release._for_launcher(dp.Budget(epsilon=1), KEY, noise=False)
    with beam.Pipeline() as p:
        people = (
            p
            | beam.Create(rows)
            | release.ByPerson(
                "person",
                keys={"domain": "string"},
                values=["duration_s"],
                num_shards=16,
                person_type="string",
            )
        )
        assert_that(people | transform(plan), equal_to([{"name": plan.name, **want}]))


def rows_per_domain(rows: list[dict[str, Any]]) -> list[list[int]]:
    """For each person, their row count in each domain they visit (the exact histogram's input)."""
    per: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        per[r["person"]][r["domain"]] += 1
    return [list(d.values()) for d in per.values()]


def test_structure_sums_every_shard_and_counts_each_picked_partition_once() -> None:
    # 300 persons, each in exactly one of 40 domains: the picks are exactly the domains in use
    rows = visits(300, lambda i: [f"d{(i * 7) % 40}.example"])
    want = {
        "histogram": HIST.exact(rows_per_domain(rows)),
        "partitions": float(len({r["domain"] for r in rows})),
    }
    plan = StructurePlan("structure[domain]", ("domain",), HIST, Fraction(1, 4))
    measure(rows, plan, ContributionStructure, want)


def test_structure_with_public_partitions_counts_no_picks() -> None:
    rows = visits(120, lambda i: [f"d{j}.example" for j in range(i % 4 + 1)])
    want = {"histogram": HIST.exact(rows_per_domain(rows)), "partitions": None}
    plan = StructurePlan("structure[domain]", ("domain",), HIST, None)
    measure(rows, plan, ContributionStructure, want)


def test_structure_with_public_partitions_reads_the_rows_of_listed_keys_alone() -> None:
    rows = visits(120, lambda i: [f"d{j}.example" for j in range(i % 4 + 1)])
    listed = [("d1.example",), ("d3.example",)]
    kept = [r for r in rows if (r["domain"],) in listed]
    want = {"histogram": HIST.exact(rows_per_domain(kept)), "partitions": None}
    plan = StructurePlan("structure[domain]", ("domain",), HIST, None, tuple(listed))
    measure(rows, plan, ContributionStructure, want)
    h = ValueHistogram(epsilon=Fraction(1, 2))
    per: dict[str, list[float]] = defaultdict(list)
    for r in kept:
        per[r["person"]].append(r["duration_s"])
    values = ValuePlan("values[duration_s]", "duration_s", h, ("domain",), tuple(listed))
    measure(rows, values, ValueStructure, {"histogram": h.exact(list(per.values()))})


def test_plans_refuse_public_keys_they_cannot_use() -> None:
    with pytest.raises(ValueError, match="public partitions have no picks to count"):
        StructurePlan("s", ("domain",), HIST, Fraction(1, 4), (("d1",),))
    h = ValueHistogram(epsilon=Fraction(1, 2))
    with pytest.raises(ValueError, match="public keys need their `by` columns"):
        ValuePlan("v", "duration_s", h, (), (("d1",),))
    with pytest.raises(ValueError, match="public keys need their `by` columns"):
        ValuePlan("v", "duration_s", h, ("domain",), None)


def test_values_sum_every_shard() -> None:
    rows = visits(200, lambda i: [f"d{j}.example" for j in range(i % 3 + 1)])
    h = ValueHistogram(epsilon=Fraction(1, 2))
    per: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        per[r["person"]].append(r["duration_s"])
    want = {"histogram": h.exact(list(per.values()))}
    measure(rows, ValuePlan("values[duration_s]", "duration_s", h), ValueStructure, want)


def test_each_person_picks_the_partition_of_smallest_keyed_hash() -> None:
    """Brute force: the pick is argmin over the person's partitions of BLAKE2b(key, person, p)."""
    key = hashlib.sha256(b"pick").digest()
    table = pa.table(
        {
            PERSON_COLUMN: ["a", "a", "a", "b", "b", "c"],
            "domain": ["x", "y", "z", "y", "y", "z"],
        }
    )
    _, picks = shard_structure(table, ("domain",), HIST, key)

    def digest(person: str, domain: str) -> bytes:
        text = canonical_key_string((domain,))
        return hashlib.blake2b(f"{person}\0{text}".encode(), key=key, digest_size=8).digest()

    want = {
        canonical_key_string((min(ds, key=lambda d, p=p: digest(p, d)),))
        for p, ds in {"a": "xyz", "b": "y", "c": "z"}.items()
    }
    assert picks == want
    assert shard_structure(table, ("domain",), HIST, None)[1] == set()
