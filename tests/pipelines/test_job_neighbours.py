"""Neighbouring data sets through the whole release job (noise off): the manifest's bounds hold.

What is checked. Random small data sets (seeded; 2 to 31 persons, 2 to 6 ``domain`` partitions)
are released through the public library (``import userdp.transforms as dp``, noise off through
the test hook) with eight queries — ``count``, ``persons``,
``sum`` and ``mean`` by ``domain``, each once with private partitions and once with a file of
public keys (L = 2 partitions per person, C = 3 rows per partition). Every person of these sets is
removed in turn; one more set holds a "bot" (600 rows of −inf in every domain) and a heavy person
(10^5 rows), and those two and two random persons of it are removed. For every query and removal,
with Δ the change of the released statistic per partition (a partition missing from a release
counts as statistic 0):

- |Δ| ≤ ``statistic.sensitivity.per_partition`` of the manifest, Σ|Δ| ≤ ``l1`` and √ΣΔ² ≤ ``l2``;
  at most L partitions change; counts and person counts never grow when a person leaves;
- ``mean`` releases mid + Σ(v − mid)/max(1, rows), which hides its two sums. The ``count`` query
  with the same ``by``, L, C and partitions keeps the same rows (bounding is keyed by person and
  partition, not by query), so it gives ``rows``, and the centred sum is (mean − mid)·max(1, rows).
  That identity is itself checked against the public ``sum`` query over the same bounds. The two
  sums are held to ``sensitivity`` and ``count_sensitivity``;
- the bound is reached where it must be: removing the bot (−inf clamps to the lower bound) or the
  heavy person (≥ C rows in every domain) changes exactly L partitions by exactly C rows and
  1 person, and the bot's removal changes the sums by exactly C·|lo| and C·(hi − lo)/2 — so a job
  that let a person contribute more, or a manifest that claimed less, fails here.

With noise off, private selection keeps every partition with at least one person after bounding
(``transforms.noisy_combine``): a partition that loses its only person disappears, which is the
"Δ = its whole statistic" case above.

Speed: the pipeline runs twice. Each (data set, removed person) pair is a *case* with its own copy
of the data set — person ids and domain names prefixed by the case, so copies never share a person
or a partition — and all copies go through one run; the second run holds every copy without its
removed person. Bounding depends only on a person's own rows and the fixed release key, so each
copy is released exactly as it would be alone, and the two runs give one neighbouring pair per case.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import userdp.transforms as dp
from userdp.transforms.mechanisms.rng import ReleaseKey

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

KEY = ReleaseKey(bytes(range(32)))  # fixed test secret (with noise off only bounding uses it)
L, C = 2, 3
MEAN_BOUNDS = (0.0, 600.0)
SUM_BOUNDS = (-700.0, 600.0)  # private sum: max(|lo|, |hi|) = 700 is what the bot's −inf reaches
HEAVY_ROWS = 100_000
BOT_ROWS = 600
BOT, HEAVY = 900, 901  # local ids of the bot and the heavy person in the last data set
EXHAUSTIVE_SIZES = (2, 3, 4, 5, 12, 31)  # every person of these sets is removed in turn
# (metric, private?) of the eight queries; the query name is f"{metric}_{'priv' or 'pub'}".
QUERIES = [(m, private) for m in ("count", "persons", "sum", "mean") for private in (True, False)]

Rows = list[tuple[str, float]]  # (local domain, value)


@dataclass(frozen=True)
class Case:
    """One copy of one data set, and the person removed from it in the second run."""

    index: int
    rows: dict[int, Rows]  # local person id → rows
    domains: tuple[str, ...]  # local domain names
    victim: int  # local id
    heavy_set: bool  # the set with the bot and the heavy person (all its domains are public)

    def pid(self, local: int) -> int:
        return self.index * 10_000 + local

    def domain(self, local: str) -> str:
        return f"c{self.index}-{local}"

    def released(self, values: dict[str, float]) -> dict[str, float]:
        """This case's partitions of a query's released values."""
        prefix = self.domain("")
        return {d: v for d, v in values.items() if d.startswith(prefix)}


def _random_rows(rng: np.random.Generator, domains: tuple[str, ...], n: int) -> Rows:
    mine = rng.choice(len(domains), size=int(rng.integers(1, len(domains) + 1)), replace=False)
    extremes = [-1e9, -700.0, -math.inf, 0.0, 600.0, math.inf, 1e12]  # bounds and beyond
    out = []
    for _ in range(n):
        u = rng.random()
        v = float(rng.uniform(-800, 900)) if u < 0.8 else float(rng.choice(extremes))
        out.append((domains[int(rng.choice(mine))], v))
    return out


def make_cases(seed: int) -> list[Case]:
    """Test data, not noise: a seeded numpy generator is fine here."""
    rng = np.random.default_rng(seed)
    cases: list[Case] = []
    for n in (*EXHAUSTIVE_SIZES, 20):
        domains = tuple(f"d{j}" for j in range(int(rng.integers(2, 7))))
        rows = {i: _random_rows(rng, domains, int(rng.integers(1, 13))) for i in range(n)}
        victims = list(rows)
        heavy_set = n not in EXHAUSTIVE_SIZES
        if heavy_set:
            domains = (*domains, *(f"x{j}" for j in range(5 - len(domains))))  # ≥ 5 > L domains
            rows[BOT] = [(domains[i % len(domains)], -math.inf) for i in range(BOT_ROWS)]
            which = rng.integers(0, len(domains), HEAVY_ROWS)
            values = rng.uniform(-800, 900, HEAVY_ROWS)
            rows[HEAVY] = [(domains[d], float(v)) for d, v in zip(which, values, strict=True)]
            victims = [BOT, HEAVY, *(int(x) for x in rng.choice(n, size=2, replace=False))]
        for victim in victims:
            cases.append(Case(len(cases), rows, domains, victim, heavy_set))
    return cases


def public_keys(cases: list[Case]) -> list[str]:
    """All domains of the heavy set's copies, half of the others', and one absent key per case."""
    keys = []
    for case in cases:
        listed = case.domains if case.heavy_set else case.domains[: (len(case.domains) + 1) // 2]
        keys += [case.domain(d) for d in (*listed, "absent")]
    return keys


def query_name(metric: str, private: bool) -> str:
    return f"{metric}_{'priv' if private else 'pub'}"


def job_dict(inputs: Path, out: Path, keys: Path) -> dict[str, Any]:
    queries = []
    for metric, private in QUERIES:
        q: dict[str, Any] = {
            "name": query_name(metric, private),
            "metric": metric,
            "by": ["domain"],
            "max_partitions_per_person": L,
            "partitions": "private" if private else str(keys),
        }
        if metric != "persons":
            q["max_rows_per_partition"] = C
        if metric in ("sum", "mean"):
            bounds = SUM_BOUNDS if (metric, private) == ("sum", True) else MEAN_BOUNDS
            q.update(value="v", bounds=list(bounds))
        queries.append(q)
    return {
        "input": {"path": str(inputs / "*.parquet"), "person": "person_id"},
        "budget": {"epsilon": 1.0, "delta": 1e-6},
        "output": {"path": str(out), "format": "parquet"},
        "queries": queries,
    }


def write_inputs(directory: Path, cases: list[Case], without_victims: bool) -> None:
    """One Parquet file per data set (all its copies), so the job reads several files."""
    directory.mkdir(parents=True)
    files: dict[int, dict[str, list[Any]]] = {}
    for case in cases:
        cols = files.setdefault(id(case.rows), {"person_id": [], "domain": [], "v": []})
        for local, rows in case.rows.items():
            if without_victims and local == case.victim:
                continue
            cols["person_id"] += [case.pid(local)] * len(rows)
            cols["domain"] += [case.domain(d) for d, _ in rows]
            cols["v"] += [v for _, v in rows]
    for i, cols in enumerate(files.values()):
        table = pa.table({**cols, "person_id": pa.array(cols["person_id"], pa.int64())})
        pq.write_table(table, directory / f"set{i}.parquet")


Values = dict[str, dict[str, float]]  # query name → domain → released value


@dataclass(frozen=True)
class Release:
    values: Values
    manifest: dict[str, Any]


TRANSFORMS = {"count": dp.Count, "persons": dp.Persons, "sum": dp.Sum, "mean": dp.Mean}


def run(root: Path, cases: list[Case], keys: list[str], without_victims: bool) -> Release:
    """The eight queries through the public library (noise off), each with the share the job
    file would give it (an even eighth of ε = 1, δ = 10⁻⁶)."""
    write_inputs(root / "in", cases, without_victims)
    raw = job_dict(root / "in", root / "release", root / "unused.csv")
    release = dp.Release._for_launcher(dp.Budget(epsilon=1, delta=1e-6), KEY, noise=False)
    out = root / "release"
    with beam.Pipeline() as p:
        tables = p | beam.io.ReadFromParquetBatched(str(root / "in" / "*.parquet"))
        people = tables | release.ByPerson(
            "person_id", person_type="int", keys={"domain": "string"}, values=["v"], num_shards=4
        )
        for q in raw["queries"]:
            params = {k: v for k, v in q.items() if k not in ("name", "metric", "partitions")}
            if q["partitions"] != "private":
                params["public_partitions"] = keys
            share: dict[str, Fraction] = {"epsilon": Fraction(1, 8)}
            if q["partitions"] == "private":  # the public ones are pure ε: they take no δ
                share["delta"] = Fraction(1, 8_000_000)
            released = people | q["name"] >> TRANSFORMS[q["metric"]](**params, **share)
            _ = (
                released
                | f"{q['name']}/json" >> beam.Map(lambda r: json.dumps(r.as_dict()))
                | f"{q['name']}/write" >> beam.io.WriteToText(str(out / q["name"]), ".jsonl")
            )
    values: Values = {}
    for q in raw["queries"]:
        rows = [
            json.loads(x) for f in out.glob(f"{q['name']}-*") for x in f.read_text().splitlines()
        ]
        values[q["name"]] = {r["domain"]: r["value"] for r in rows}
    return Release(values, release.manifest())


@dataclass(frozen=True)
class Runs:
    cases: list[Case]
    keys: list[str]
    full: Release
    neighbours: Release  # every case without its victim


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("neighbours")
    cases = make_cases(seed=20240611)
    keys = public_keys(cases)
    full = run(root / "full", cases, keys, without_victims=False)
    neighbours = run(root / "neighbours", cases, keys, without_victims=True)
    return Runs(cases, keys, full, neighbours)


def stated(manifest: dict[str, Any], name: str, stat: str) -> dict[str, float]:
    """The manifest's sensitivity of a query's statistic ("value", or "count" for ``mean``)."""
    (query,) = [q for q in manifest["queries"] if q["name"] == name]
    sens: dict[str, float] = query["statistic"][
        "sensitivity" if stat == "value" else "count_sensitivity"
    ]
    return sens


def statistics(release: Release, metric: str, private: bool) -> dict[str, dict[str, float]]:
    """The statistics that carry the stated sensitivities: statistic → domain → value.

    ``mean``: its centred sum (mean − mid)·max(1, rows), rows from the matching ``count`` query.
    """
    own = release.values[query_name(metric, private)]
    if metric != "mean":
        return {"value": own}
    rows = release.values[query_name("count", private)]
    mid = sum(MEAN_BOUNDS) / 2
    assert set(rows) == set(own)  # the same partitions are released
    centred = {d: (own[d] - mid) * max(1.0, rows[d]) for d in own}
    return {"value": centred, "count": rows}


def changes(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """before − after per partition, a missing partition counting as 0; unchanged ones left out."""
    diffs = {d: before.get(d, 0.0) - after.get(d, 0.0) for d in set(before) | set(after)}
    return {d: x for d, x in diffs.items() if abs(x) > 1e-9 * (1 + abs(before.get(d, 0.0)))}


def neighbour_changes(runs: Runs) -> Iterator[tuple[str, str, Case, dict[str, float]]]:
    """(query, statistic, case, per-partition changes) for every case, query and statistic."""
    for metric, private in QUERIES:
        full = statistics(runs.full, metric, private)
        rest = statistics(runs.neighbours, metric, private)
        for stat in full:
            for case in runs.cases:
                diff = changes(case.released(full[stat]), case.released(rest[stat]))
                yield query_name(metric, private), stat, case, diff


def test_cases_cover_every_person_of_the_small_sets_and_the_heavy_ones(runs: Runs) -> None:
    removed: dict[int, set[int]] = {}
    for case in runs.cases:
        removed.setdefault(id(case.rows), set()).add(case.victim)
    sizes = {len(case.rows): removed[id(case.rows)] == set(case.rows) for case in runs.cases}
    assert sizes == {**dict.fromkeys(EXHAUSTIVE_SIZES, True), 22: False}
    assert sum(1 for c in runs.cases if c.victim in (BOT, HEAVY)) == 2
    heavy = max(len(rows) for c in runs.cases for rows in c.rows.values())
    assert heavy == HEAVY_ROWS


def test_partitions_released_with_noise_off(runs: Runs) -> None:
    """Public: exactly the listed keys (absent ones with zero); private: only keys in the data."""
    in_data = {c.domain(d) for c in runs.cases for rows in c.rows.values() for d, _ in rows}
    for metric, private in QUERIES:
        released = runs.full.values[query_name(metric, private)]
        if private:
            assert set(released) <= in_data, metric
            assert all(case.released(released) for case in runs.cases), metric
        else:
            assert set(released) == set(runs.keys), metric
            absent = {released[k] for k in runs.keys if k.endswith("-absent")}
            assert absent == {sum(MEAN_BOUNDS) / 2 if metric == "mean" else 0.0}, metric


def test_mean_is_the_centred_sum_over_the_rows_of_the_count_query(runs: Runs) -> None:
    """mean = mid + (sum − mid·rows)/max(1, rows), from the public sum and count (same bounds)."""
    mid = sum(MEAN_BOUNDS) / 2
    for release in (runs.full, runs.neighbours):
        mean, total, rows = (release.values[query_name(m, False)] for m in ("mean", "sum", "count"))
        for d, m in mean.items():
            expected = mid + (total[d] - mid * rows[d]) / max(1.0, rows[d])
            assert m == pytest.approx(expected, rel=1e-12, abs=1e-9), d
            assert MEAN_BOUNDS[0] <= m <= MEAN_BOUNDS[1]


def test_removing_one_person_changes_no_statistic_beyond_the_manifest(runs: Runs) -> None:
    checked = 0
    for name, stat, case, diff in neighbour_changes(runs):
        sens = stated(runs.full.manifest, name, stat)
        where = f"{name} ({stat}) of case {case.index} without person {case.victim}: {diff}"
        tol = 1e-9 * max(1.0, sens["l1"])
        assert len(diff) <= L, where
        assert all(abs(x) <= sens["per_partition"] + tol for x in diff.values()), where
        assert sum(abs(x) for x in diff.values()) <= sens["l1"] + tol, where
        assert math.sqrt(sum(x * x for x in diff.values())) <= sens["l2"] + tol, where
        if name.startswith(("count", "persons")) or stat == "count":
            assert all(x > 0 for x in diff.values()), where  # leaving never adds
        if name in ("count_priv", "persons_priv"):
            assert diff, where  # every person keeps ≥ 1 row: the release really changes
        checked += 1
    assert checked == len(runs.cases) * (len(QUERIES) + 2)


def bot_contribution(name: str, stat: str) -> float:
    """What the bot adds to each of its L kept partitions: C rows of −inf, clamped to ``lo``."""
    metric = name.split("_", maxsplit=1)[0]
    if metric == "count" or stat == "count":
        return C
    if metric == "persons":
        return 1
    lower = SUM_BOUNDS[0] if name == "sum_priv" else MEAN_BOUNDS[0]
    return C * lower if metric == "sum" else C * (lower - sum(MEAN_BOUNDS) / 2)


def test_the_bot_and_the_heavy_person_reach_the_bound_exactly(runs: Runs) -> None:
    """Each has ≥ C rows in every domain, so it keeps exactly L partitions with C rows each."""
    seen = 0
    for name, stat, case, diff in neighbour_changes(runs):
        sens = stated(runs.full.manifest, name, stat)
        where = (name, stat, case.victim, diff)
        if case.victim == BOT:
            added = bot_contribution(name, stat)
            if name == "sum_pub":  # −inf clamps to 0 under [0, 600]: nothing changes
                assert added == 0.0 and diff == {}, where
            else:
                assert diff == pytest.approx(dict.fromkeys(diff, added)), where
                assert len(diff) == L, where
                assert abs(added) == sens["per_partition"], where  # the bound, reached
                assert sum(abs(x) for x in diff.values()) == pytest.approx(sens["l1"]), where
        elif case.victim == HEAVY and (name.startswith(("count", "persons")) or stat == "count"):
            assert len(diff) == L and set(diff.values()) == {sens["per_partition"]}, where
            assert sum(diff.values()) == sens["l1"], where
        else:
            continue
        seen += 1
    assert seen == (len(QUERIES) + 2) + 6  # the bot: every statistic; the heavy person: counts
