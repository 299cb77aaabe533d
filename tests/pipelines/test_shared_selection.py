"""Queries with the same ``by`` and L share one private partition selection: one key set, booked
once (pipelines/kinds/shared_selection.py), through the job file and through ``dp.Aggregate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import userdp.transforms as dp
from userdp.pipelines.config import parse_job
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey

KEY = ReleaseKey(bytes(range(3, 35)))
DOMAINS = 40
BY = {"by": ["domain"], "max_partitions_per_person": 2, "max_rows_per_partition": 3}


def _rows() -> pa.Table:
    """Domain i has about 600·0.88^i persons (so some pass a selection and some do not)."""
    gen = np.random.default_rng(11)  # test data, not noise
    persons, domains, durations = [], [], []
    person = 0
    for i in range(DOMAINS):
        for _ in range(int(600 * 0.88**i)):
            for _ in range(int(gen.integers(1, 4))):
                persons.append(person)
                domains.append(f"d{i:02d}")
                durations.append(float(gen.uniform(0, 600)))
            person += 1
    return pa.table({"person_id": persons, "domain": domains, "duration_s": durations})


def _keys(path: Path) -> set[str]:
    return set(pq.read_table(path).column("domain").to_pylist())


def test_a_job_releases_one_key_set_and_books_one_selection(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    pq.write_table(_rows(), tmp_path / "data/l.parquet")
    queries = [
        {"name": "visits", "metric": "count", **BY},
        {"name": "seconds", "metric": "sum", "value": "duration_s", "bounds": [0, 600], **BY},
        {"name": "mean_s", "metric": "mean", "value": "duration_s", "bounds": [0, 600], **BY},
        {"name": "other_L", "metric": "count", **{**BY, "max_partitions_per_person": 1}},
    ]
    raw = {
        "input": {"path": "data/*.parquet", "person": "person_id"},
        "budget": {"epsilon": 4.0, "delta": 1e-5},
        "output": {"path": "release/"},
        "queries": queries,
    }
    result = run_release(parse_job(raw, base_dir=tmp_path), release_key=KEY, num_shards=4)
    out = tmp_path / "release"
    sets = {q["name"]: _keys(out / f"{q['name']}.parquet") for q in queries}
    assert sets["visits"] == sets["seconds"] == sets["mean_s"]  # one key set
    assert 0 < len(sets["visits"]) < DOMAINS  # not vacuous: the selection kept some, not all
    manifest = json.loads(Path(result.manifest).read_text())
    (selection,) = manifest["selections"]  # booked once
    assert selection["members"] == ["visits", "seconds", "mean_s"]
    assert selection["name"] == "selection[domain;L=2]"
    entries = {q["name"]: q for q in manifest["queries"]}
    assert all(
        entries[n]["selection"] == {"shared": selection["name"]} for n in selection["members"]
    )
    assert entries["other_L"]["selection"]["rule"]  # another L: its own selection
    assert manifest["spent"] == manifest["total"]


def _aggregate(people: Any, **metrics: Any) -> Any:
    return people | "per_domain" >> dp.Aggregate(
        by=["domain"], max_partitions_per_person=2, metrics=metrics
    )


def test_the_library_aggregate_releases_one_key_set(tmp_path: Path) -> None:
    release = dp.Release._for_launcher(dp.Budget(epsilon=3, delta=1e-5), KEY, noise=True)
    with beam.Pipeline() as p:
        people = (
            p
            | beam.Create([_rows()])
            | release.ByPerson(
                "person_id", keys={"domain": "string"}, values=["duration_s"], person_type="int"
            )
        )
        outs = _aggregate(
            people,
            visits=dp.Count(max_rows_per_partition=3, epsilon=1, delta=2e-6),
            persons=dp.Persons(epsilon=1, delta=2e-6),
            mean_s=dp.Mean(value="duration_s", bounds=[0, 600], max_rows_per_partition=3,
                           epsilon=1, delta=2e-6),
        )  # fmt: skip
        for name, released in outs.items():
            _ = (
                released
                | f"{name}/json" >> beam.Map(lambda r: r.domain)
                | f"{name}/write" >> beam.io.WriteToText(str(tmp_path / name))
            )
    sets = {
        name: {line for f in tmp_path.glob(f"{name}*") for line in f.read_text().splitlines()}
        for name in ("visits", "persons", "mean_s")
    }
    assert sets["visits"] == sets["persons"] == sets["mean_s"]
    assert 0 < len(sets["visits"]) < DOMAINS
    manifest = release.manifest()
    (selection,) = manifest["selections"]
    assert selection["members"] == ["visits", "persons", "mean_s"]
    assert selection["noisy_count_released_by"] == "the persons member"
    persons = next(q for q in manifest["queries"] if q["name"] == "persons")
    assert persons["statistic"]["drawn_from"] == "selection noisy count"
    # the noise it states is the selection's draw, not a Laplace draw that is never made
    assert persons["statistic"]["mechanism"]["kind"] == "discrete_laplace"
    assert persons["statistic"]["mechanism"]["scale"] == selection["rule"]["scale"]
    assert (
        manifest["spent"]["epsilon_exact"] == "3" and manifest["spent"]["delta_exact"] == "3/500000"
    )


def _people() -> Any:
    release = dp.Release._for_launcher(dp.Budget(epsilon=3, delta=1e-5), KEY, noise=True)
    p = beam.Pipeline()
    rows = p | beam.Create([{"person_id": "a", "domain": "x"}])
    return rows | release.ByPerson("person_id", keys={"domain": "string"}, person_type="string")


def test_aggregate_misuse_is_refused() -> None:
    count = {"max_rows_per_partition": 1, "epsilon": 1, "delta": 1e-6}
    with pytest.raises(ValueError, match="gives its metrics by and max_partitions_per_person"):
        dp.Aggregate(by=["domain"], max_partitions_per_person=1,
                     metrics={"v": dp.Count(by=["domain"], **count)})  # fmt: skip
    with pytest.raises(ValueError, match="selects their partitions privately"):
        dp.Aggregate(by=["domain"], max_partitions_per_person=1,
                     metrics={"v": dp.Count(public_partitions=["x"], **count)})  # fmt: skip
    with pytest.raises(TypeError, match=r"metrics\['m'\] must be Count, Persons, Sum or Mean"):
        dp.Aggregate(by=["domain"], max_partitions_per_person=1,
                     metrics={"m": dp.Median(value="v", bounds=[0, 1], epsilon=1)})  # fmt: skip
    with pytest.raises(ValueError, match="needs `by`"):
        dp.Aggregate(by=[], max_partitions_per_person=1, metrics={"v": dp.Count(**count)})
    with pytest.raises(ValueError, match="needs metrics"):
        dp.Aggregate(by=["domain"], max_partitions_per_person=1, metrics={})
    with pytest.raises(TypeError, match="partitions by public_partitions"):
        dp.Count(partitions="private", **count)
    # the library audit's: a list or non-str names (AttributeErrors), a member's own name
    # (silently dropped for the dict key)
    with pytest.raises(TypeError, match=r"metrics must be a dict name → metric, got list"):
        dp.Aggregate(by=["domain"], max_partitions_per_person=1,
                     metrics=[dp.Count(**count)])  # type: ignore[arg-type]  # fmt: skip
    with pytest.raises(TypeError, match=r"metric names must be str \(output names\), got 1"):
        dp.Aggregate(by=["domain"], max_partitions_per_person=1, metrics={1: dp.Count(**count)})
    with pytest.raises(ValueError, match=r"metrics\['c'\] sets name='visits'; .* use \{'visits'"):
        dp.Aggregate(by=["domain"], max_partitions_per_person=1,
                     metrics={"c": dp.Count(name="visits", **count)})  # fmt: skip


def test_an_aggregate_under_a_pure_epsilon_release_asks_for_a_delta() -> None:
    """The job file's hint names public partitions, which an Aggregate's members refuse."""
    release = dp.Release._for_launcher(dp.Budget(epsilon=1), KEY, noise=True)
    with beam.Pipeline() as p:
        rows = p | beam.Create([{"person_id": "a", "domain": "x"}])
        people = rows | release.ByPerson(
            "person_id", keys={"domain": "string"}, person_type="string"
        )
        with pytest.raises(ValueError, match=r"shared selection is private and spends δ: give"):
            _ = people | dp.Aggregate(
                by=["domain"], max_partitions_per_person=1,
                metrics={"c": dp.Count(max_rows_per_partition=1, epsilon=0.5)},
            )  # fmt: skip


def test_two_aggregates_over_the_same_partitions_are_refused() -> None:
    people = _people()
    count = {"max_rows_per_partition": 1, "epsilon": 0.5, "delta": 1e-6}
    _aggregate(people, a=dp.Count(**count), b=dp.Count(**count))
    with pytest.raises(dp.ReleaseError, match="one Aggregate per `by` and L"):
        people | "again" >> dp.Aggregate(
            by=["domain"], max_partitions_per_person=2,
            metrics={"c": dp.Count(**count), "d": dp.Count(**count)},
        )  # fmt: skip


def test_aggregate_members_spend_their_stated_shares() -> None:
    people = _people()
    count = {"max_rows_per_partition": 1, "epsilon": 2, "delta": 1e-6}
    with pytest.raises(dp.ReleaseError, match="exhausted"):
        _aggregate(people, a=dp.Count(**count), b=dp.Count(**count))
