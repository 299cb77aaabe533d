"""``ContributionStructure`` and ``ValueStructure``: the private measurements ``userdp tune``
chooses L, C and value bounds from.

Applied to a release's persons (``release.ByPerson(...)``'s output), for one set of ``by`` columns:

1. per person shard (the release's one shuffle by person), each person's row count in each
   partition they touch and their number of partitions P — pure pyarrow/numpy, no noise;
   summed as integer pair counts per (P, bucket of r) over shards, in any order. With public
   partitions (``public_keys``) only the rows of listed keys are read, as the release itself
   drops the other rows before it bounds L (:func:`.bounding.rows_of_listed_keys`): P is then
   the number of *listed* partitions a person touches, the number L is spent on;
2. optionally, for private partitions, the partitions *someone picked*: each person picks one of
   their partitions by a keyed hash of (person, partition) — a function of their own rows only —
   and the distinct picks are counted (Beam's ``Distinct``, spread over workers): removing a
   person removes at most their pick, so the count has sensitivity 1. It estimates how many
   partitions hold enough persons to matter (a partition with many persons is almost surely
   someone's pick); the tuner divides the clipped rows by it;
3. one final step adds the noise: Laplace(1/ε_h) on every cell of the joint histogram
   (:mod:`.mechanisms.contribution_histogram`) and Laplace(1/ε_k) on the count of picks.

Guarantee: pure (ε_h + ε_k)-DP for adding or removing one person (basic composition of two
Laplace mechanisms on L1 sensitivity 1, seed ``calibrating-noise-dmns06.txt``); the share is
booked with the release when the transform is applied, like any metric's. Output: one dict
``{"histogram": [[float]], "partitions": float | None}`` — DP values only.

``ValueStructure`` measures one value column the same way: per shard, each person's values
counted per (their number of values n, bucket), summed as integers, then the weighted histogram
(1/n per value) with Laplace noise in the final step — pure ε-DP
(:mod:`.mechanisms.value_histogram`); with public partitions, only the values in rows of listed
keys, which are the values the release reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.pvalue import PCollection
from apache_beam.transforms.combiners import Count

from .bounding import rows_of_listed_keys
from .by_person import people_of
from .columns import PERSON_COLUMN
from .keys import NoiseKey
from .mechanisms.accounting import PureDP, float_down
from .mechanisms.additive import laplace_mechanism
from .mechanisms.contribution_histogram import ContributionHistograms, Grid
from .mechanisms.value_histogram import ValueHistogram
from .noisy_combine import canonical_key_string

PairCounts = dict[tuple[int, int], int]


def _laplace(epsilon: Fraction, **what: Any) -> dict[str, Any]:
    """A manifest entry of one Laplace release of L1 sensitivity 1 (the measurements' only kind)."""
    return {"mechanism": "laplace", "epsilon": float(epsilon), "l1_sensitivity": 1.0, **what}


class _Measurement:
    """What the release's booking asks of a plan besides its share: no released columns."""

    @property
    def output_columns(self) -> tuple[tuple[str, str], ...]:
        return ()


@dataclass(frozen=True)
class StructurePlan(_Measurement):
    """Public facts of one measurement: its name, ``by``, the histogram, the picks' ε and, for
    public partitions, the listed keys (each a tuple in the ``by`` columns' input types)."""

    name: str
    by: tuple[str, ...]
    histogram: ContributionHistograms
    partitions_epsilon: Fraction | None  # None: the partitions are public, nothing is counted
    public_keys: tuple[tuple[Any, ...], ...] | None = None  # None: every row is read

    def __post_init__(self) -> None:
        if self.public_keys is not None and self.partitions_epsilon is not None:
            raise ValueError(f"{self.name}: public partitions have no picks to count")

    @property
    def share(self) -> PureDP:
        eps = Fraction(self.histogram.epsilon) + (self.partitions_epsilon or 0)
        return PureDP(eps)

    def to_manifest(self) -> dict[str, Any]:
        h = self.histogram
        return {
            "name": self.name,
            "measurement": "contribution_structure",
            "by": list(self.by),
            "neighbouring": "add/remove one person",
            "share": self.share.to_manifest(),
            "histogram": _laplace(
                Fraction(h.epsilon),
                buckets=list(h.edges),
                cells="1/P per (person, partition) at (bucket of P, bucket of rows)",
            ),
            "partitions": None
            if self.partitions_epsilon is None
            else _laplace(
                self.partitions_epsilon,
                counts="distinct partitions picked by a person (one pick each)",
            ),
            "rows": _rows_read(self.public_keys),
        }

    def plan_lines(self) -> list[str]:
        rows = "" if self.public_keys is None else f" (rows of {len(self.public_keys)} public keys)"
        eps = float(self.share.epsilon)
        return [f"contribution structure by {list(self.by)}{rows}: pure ε = {eps:.4g}"]


def _rows_read(keys: tuple[tuple[Any, ...], ...] | None) -> str:
    return "all" if keys is None else f"those of the {len(keys)} public keys"


def _pick_hash(key: bytes, person: str, partition: str) -> bytes:
    return hashlib.blake2b(f"{person}\0{partition}".encode(), key=key, digest_size=8).digest()


def shard_structure(
    table: pa.Table,
    by: tuple[str, ...],
    h: ContributionHistograms,
    pick_key: bytes | None,
    public_keys: tuple[tuple[Any, ...], ...] | None = None,
) -> tuple[PairCounts, set[str]]:
    """One person shard (all rows of its persons): pair counts per (P, bucket of r) and the
    canonical keys the shard's persons picked (empty without ``pick_key``), over the rows of
    ``public_keys`` when given. Not private."""
    if public_keys is not None:
        table = rows_of_listed_keys(table, by, public_keys)
    if table.num_rows == 0:
        return {}, set()
    pairs = table.group_by([PERSON_COLUMN, *by]).aggregate([([], "count_all")])
    persons = pairs.column(PERSON_COLUMN).to_numpy(zero_copy_only=False)
    _, inverse, per_person = np.unique(persons, return_inverse=True, return_counts=True)
    p = per_person[inverse]
    r = pairs.column("count_all").to_numpy()
    rb = h.buckets(r)
    cells, n = np.unique(np.stack([p, rb], axis=1), axis=0, return_counts=True)
    counts = {(int(a), int(b)): int(c) for (a, b), c in zip(cells, n, strict=True)}
    picks: set[str] = set()
    if pick_key is not None:
        keys = zip(*(pairs.column(c).to_pylist() for c in by), strict=True)
        best: dict[str, tuple[bytes, str]] = {}
        for person, key in zip(persons.tolist(), keys, strict=True):
            text = canonical_key_string(key)
            digest = _pick_hash(pick_key, person, text)
            if person not in best or (digest, text) < best[person]:
                best[person] = (digest, text)
        picks = {text for _, text in best.values()}
    return counts, picks


class _SumCounts(beam.CombineFn):
    """Sums integer counts per cell; any order gives the same totals. The accumulator is updated
    in place (the combine this replaced copied its dict, and a set of every pick, on each input:
    O(n²) in the shards; 2,000 shards of 500 picks took 37 s)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Beam is unannotated

    def create_accumulator(self) -> PairCounts:
        return {}

    def add_input(self, acc: PairCounts, element: PairCounts) -> PairCounts:
        for k, v in element.items():
            acc[k] = acc.get(k, 0) + v
        return acc

    def merge_accumulators(self, accs: Iterable[PairCounts]) -> PairCounts:
        it = iter(accs)
        out = next(it, {})
        for acc in it:
            self.add_input(out, acc)
        return out

    def extract_output(self, acc: PairCounts) -> PairCounts:
        return acc


class _AddNoise:
    def __init__(self, plan: StructurePlan, key: NoiseKey, noise: bool) -> None:
        self._plan, self._key, self._noise = plan, key, noise

    def __call__(self, counts: PairCounts, picked: int | None) -> dict[str, Any]:
        h = self._plan.histogram
        partitions: float | None = None
        if self._noise:  # each term rounded to the noise's grid: sensitivity as calibrated
            grid: Grid = h.release_pair_counts(counts, self._key.rng("histogram"))
        else:
            grid = h.from_pair_counts(counts)
        if self._plan.partitions_epsilon is not None:
            partitions = float(picked or 0)
            if self._noise:
                eps = float_down(Fraction(self._plan.partitions_epsilon))
                rng = self._key.rng("partitions")
                partitions = laplace_mechanism(partitions, sensitivity=1.0, epsilon=eps, rng=rng)
        return {"name": self._plan.name, "histogram": grid, "partitions": partitions}


class ContributionStructure(beam.PTransform[Any, Any]):
    """Persons → one dict of DP measurements (module docstring). ``plan``: public parameters."""

    def __init__(self, plan: StructurePlan) -> None:
        super().__init__()
        self._plan = plan

    def expand(self, rows: PCollection[Any]) -> PCollection[Any]:
        people = people_of(rows, "ContributionStructure")
        release, plan = people.release, self._plan
        missing = [c for c in plan.by if c not in dict(people.schema.keys)]
        if missing:
            raise ValueError(f"ContributionStructure: {missing} are not key columns of ByPerson")
        release._bind(rows.pipeline)
        release._register(plan.name, plan, Fraction(0))
        keys = release._query_keys()
        pick_key = keys.subkey("tune-pick", plan.name) if plan.partitions_epsilon else None
        h, by, listed = plan.histogram, plan.by, plan.public_keys
        per_shard = people.shards() | "Structure" >> beam.MapTuple(
            lambda _, t: shard_structure(t, by, h, pick_key, listed)
        )
        counts = (
            per_shard
            | "Counts" >> beam.Map(lambda c_p: c_p[0])
            | "Merge" >> beam.CombineGlobally(_SumCounts())
        )
        picked: Any = None
        if pick_key is not None:  # distinct picks counted by Beam: no set of them on one worker
            picked = beam.pvalue.AsSingleton(
                per_shard
                | "Picks" >> beam.FlatMap(lambda c_p: c_p[1])
                | "DistinctPicks" >> beam.Distinct()
                | "CountPicks" >> Count.Globally()
            )
        noise = _AddNoise(plan, keys.for_query(plan.name), release._noise)
        out: PCollection[Any] = counts | "Noise" >> beam.Map(noise, picked)
        return out


@dataclass(frozen=True)
class ValuePlan(_Measurement):
    """Public facts of one value measurement: its name, the column, the histogram and, for
    public partitions, the listed keys of the ``keys_by`` columns whose rows alone are read."""

    name: str
    column: str
    histogram: ValueHistogram
    keys_by: tuple[str, ...] = ()
    public_keys: tuple[tuple[Any, ...], ...] | None = None  # None: every row is read

    def __post_init__(self) -> None:
        if (self.public_keys is None) != (not self.keys_by):
            raise ValueError(f"{self.name}: public keys need their `by` columns, and only they")

    @property
    def by(self) -> tuple[str, ...]:
        return ()

    @property
    def share(self) -> PureDP:
        return PureDP(Fraction(self.histogram.epsilon))

    def to_manifest(self) -> dict[str, Any]:
        h = self.histogram
        return {
            "name": self.name,
            "measurement": "value_histogram",
            "value": self.column,
            "neighbouring": "add/remove one person",
            "share": self.share.to_manifest(),
            "histogram": _laplace(
                Fraction(h.epsilon),
                buckets=f"signed powers of two, 2^{h.min_exponent} … 2^{h.max_exponent}",
                cells="1/n per value of a person with n values",
            ),
            "rows": _rows_read(self.public_keys),
        }

    def plan_lines(self) -> list[str]:
        rows = "" if self.public_keys is None else f" (rows of {len(self.public_keys)} public keys)"
        return [f"values of {self.column}{rows}: pure ε = {float(self.share.epsilon):.4g}"]


def shard_values(
    table: pa.Table,
    column: str,
    h: ValueHistogram,
    keys_by: tuple[str, ...] = (),
    public_keys: tuple[tuple[Any, ...], ...] | None = None,
) -> PairCounts:
    """One person shard: values per (n, bucket), n the person's number of values (over the rows
    of ``public_keys`` when given). Not private."""
    if public_keys is not None:
        table = rows_of_listed_keys(table, keys_by, public_keys)
    if table.num_rows == 0:
        return {}
    persons = table.column(PERSON_COLUMN).to_numpy(zero_copy_only=False)
    _, inverse, per_person = np.unique(persons, return_inverse=True, return_counts=True)
    x = table.column(column).to_numpy(zero_copy_only=False).astype(np.float64)
    cells, n = np.unique(
        np.stack([per_person[inverse], h.buckets(x)], axis=1), axis=0, return_counts=True
    )
    return {(int(a), int(b)): int(c) for (a, b), c in zip(cells, n, strict=True)}


class _NoisyValues:
    def __init__(self, plan: ValuePlan, key: NoiseKey, noise: bool) -> None:
        self._plan, self._key, self._noise = plan, key, noise

    def __call__(self, counts: PairCounts) -> dict[str, Any]:
        h = self._plan.histogram
        if self._noise:  # each term rounded to the noise's grid: sensitivity as calibrated
            hist = h.release_counts(counts, self._key.rng("values"))
        else:
            hist = h.from_counts(counts)
        return {"name": self._plan.name, "histogram": hist}


class ValueStructure(beam.PTransform[Any, Any]):
    """Persons → one dict ``{"name", "histogram"}``: the values of one column, each person
    weighing 1 (:mod:`.mechanisms.value_histogram`), noised in the final step."""

    def __init__(self, plan: ValuePlan) -> None:
        super().__init__()
        self._plan = plan

    def expand(self, rows: PCollection[Any]) -> PCollection[Any]:
        people = people_of(rows, "ValueStructure")
        release, plan = people.release, self._plan
        if plan.column not in people.schema.numbers:
            raise ValueError(f"ValueStructure: {plan.column!r} is not a value column of ByPerson")
        missing = [c for c in plan.keys_by if c not in dict(people.schema.keys)]
        if missing:
            raise ValueError(f"ValueStructure: {missing} are not key columns of ByPerson")
        release._bind(rows.pipeline)
        release._register(plan.name, plan, Fraction(0))
        keys = release._query_keys()
        column, h, by, listed = plan.column, plan.histogram, plan.keys_by, plan.public_keys
        out: PCollection[Any] = (
            people.shards()
            | "Values" >> beam.MapTuple(lambda _, t: shard_values(t, column, h, by, listed))
            | "Merge" >> beam.CombineGlobally(_SumCounts())
            | "Noise" >> beam.Map(_NoisyValues(plan, keys.for_query(plan.name), release._noise))
        )
        return out
