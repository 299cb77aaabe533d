"""The final noisy combine: the only step of the release job that draws noise.

:class:`ReleaseNoisily` turns exact per-partition statistics (:mod:`transforms.aggregate`) into
output rows ``{<by columns>: key values, "value": float, "stddev": float}``. Every draw comes from
the query's noise key, ``key.rng(canonical_key_string(partition key), purpose)``, purpose one of
``"select"``, ``"value"``, ``"count"``: a retry or a re-run with the same release secret publishes
the same numbers, and different partitions or purposes draw independent noise.

Partitions:

* public (``params.public_partitions``, and the single ``()`` partition of a query without ``by``):
  every listed key is released — a key absent from the data from zero statistics, i.e. noise only —
  and keys not listed are dropped;
* private: a key is released only if ``params.selection.decide(persons, rng)`` keeps it; with
  Laplace/Gaussian thresholding the returned noisy person count is the released value of a
  ``persons`` query (it is already noised; releasing it is covered by the selection's guarantee).

Values (q the fixed-point exponent, mid = (lower + upper)/2):
``count`` = rows, ``persons`` = persons, ``sum`` = sum_q·2^q, each plus ``params.noise``;
``mean`` = mid + noisy(centred_sum_q·2^q) / max(1, noisy rows), clamped to [lower, upper].
``stddev`` is the noise's public standard deviation; for ``mean`` a delta-method approximation
computed from the noisy values only (post-processing).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator
from fractions import Fraction
from typing import Any

import apache_beam as beam
from apache_beam.pvalue import PCollection

from .bounding import ZERO_STATS, PartitionKey, PartitionStats
from .keys import KeySource, NoiseKey
from .mechanisms.discrete import discrete_laplace_std
from .mechanisms.partition_selection import (
    Decision,
    GaussianThresholding,
    LaplaceThresholding,
)
from .params import ReleaseParams


def _key_part(v: object) -> str:
    if v is None:
        body, tag = "", "n"
    elif isinstance(v, bool):
        body, tag = str(int(v)), "b"
    elif isinstance(v, int):
        body, tag = str(v), "i"
    elif isinstance(v, float):
        body, tag = repr(v), "f"
    elif isinstance(v, str):
        body, tag = v, "s"
    elif isinstance(v, bytes):
        body, tag = v.hex(), "y"
    else:
        body, tag = f"{type(v).__module__}.{type(v).__qualname__}:{v!r}", "o"
    return f"{tag}{len(body)}:{body}"


def canonical_key_string(key: PartitionKey) -> str:
    """An injective, type-tagged string for a partition key: (1,) and ("1",) differ.

    Each part is ``<tag><length>:<text>`` (tags: i int, s str, f float as repr, b bool, n None,
    y bytes as hex, o other types with their qualified name and repr), concatenated.
    """
    return "".join(_key_part(v) for v in key)


def _selection_std(rule: LaplaceThresholding | GaussianThresholding) -> float:
    """Standard deviation of the thresholding noise on the person count (public)."""
    if isinstance(rule, LaplaceThresholding):
        return discrete_laplace_std(rule.scale)
    return math.sqrt(float(rule.sigma2))  # the discrete Gaussian's σ is at most this


class _ReleasePartition:
    """Releases one partition (pure given the rng labels; wrapped by a Beam FlatMap)."""

    def __init__(self, params: ReleaseParams, key: NoiseKey, noise: bool) -> None:
        self._params = params
        self._key = key
        self._noise = noise

    def __call__(self, key: PartitionKey, stats: PartitionStats) -> Iterator[dict[str, Any]]:
        selection = self._params.selection
        label = canonical_key_string(key)  # once per partition: every draw's label
        noisy_persons: int | None = None
        if selection is not None and not self._noise:
            if stats.persons < 1:
                return
        elif selection is not None:
            rng = self._key.rng(label, "select")
            decision = selection.decide(stats.persons, rng)
            if isinstance(decision, Decision):
                if not decision.keep:
                    return  # the noisy count of a dropped partition must never leave
                noisy_persons = decision.noisy_count
            elif not decision:
                return
        yield self._row(key, label, stats, noisy_persons)

    def _row(
        self, key: PartitionKey, label: str, stats: PartitionStats, noisy_persons: int | None
    ) -> dict[str, Any]:
        value, std = self._value(label, stats, noisy_persons)
        row: dict[str, Any] = dict(zip(self._params.bounding.by, key, strict=True))
        row["value"] = value
        row["stddev"] = std
        return row

    def _release(
        self, exact: int | Fraction, label: str, purpose: str, count: bool = False
    ) -> float:
        """``exact`` plus noise; the statistic reaches the mechanism as an exact rational."""
        p = self._params
        mechanism = p.count_noise if count else p.noise
        if not self._noise or mechanism is None:  # the test hook: the exact value, saturated
            try:  # past the float range as a noisy release is (additive._noisy)
                return float(exact)
            except OverflowError:
                return sys.float_info.max if exact > 0 else -sys.float_info.max
        return mechanism.release(Fraction(exact), self._key.rng(label, purpose))

    def _value(
        self, label: str, stats: PartitionStats, noisy_persons: int | None
    ) -> tuple[float, float]:
        p = self._params
        b = p.bounding
        if p.metric == "persons":
            if p.release_selection_count:
                # The plan gave the selection the whole budget: its noisy count is the value,
                # and no second draw is made (that would spend the query's budget twice).
                assert isinstance(p.selection, LaplaceThresholding | GaussianThresholding)
                std = _selection_std(p.selection)
                if noisy_persons is None:  # noise off
                    return float(stats.persons), std
                return float(noisy_persons), std
            return self._release(stats.persons, label, "value"), p.noise.std
        if p.metric == "count":
            return self._release(stats.rows, label, "value"), p.noise.std
        unit = Fraction(2) ** b.quantum  # fixed-point sums back to value units, exactly
        if p.metric == "sum":
            return self._release(stats.sum_q * unit, label, "value"), p.noise.std
        # mean
        assert p.count_noise is not None  # ReleaseParams guarantees it for 'mean'
        centred = self._release(stats.centred_sum_q * unit, label, "value")
        rows = max(1.0, self._release(stats.rows, label, "count", count=True))
        mid = b.lower / 2 + b.upper / 2  # as bounding.py: (lower + upper)/2 can overflow
        mean = min(b.upper, max(b.lower, mid + centred / rows))
        if not self._noise:  # test hook: the bounded mean as one correctly rounded ratio
            exact = Fraction(mid) + Fraction(stats.centred_sum_q) * unit / max(1, stats.rows)
            mean = min(b.upper, max(b.lower, float(exact)))
        # Delta method on the noisy values (post-processing): Var ≈ σ_s²/n² + (s/n²)²·σ_n².
        # s/n/n, not s/n²: n² overflows once the noisy count passes 1.3e154 (tiny budgets).
        std = math.hypot(p.noise.std / rows, centred / rows / rows * p.count_noise.std)
        return mean, min(std, (b.upper - b.lower) / 2)


class _ReleaseSelected(_ReleasePartition):
    """Releases one partition a shared selection kept: (key, (stats, the selection's noisy
    person count or None)); the decision was made once, for every member of the group."""

    def __call__(  # type: ignore[override]  # the selection's output, not raw stats
        self, key: PartitionKey, kept: tuple[PartitionStats, int | None]
    ) -> Iterator[dict[str, Any]]:
        stats, noisy_persons = kept
        yield self._row(key, canonical_key_string(key), stats, noisy_persons)


def _join_public(
    key: PartitionKey, grouped: dict[str, Iterable[Any]]
) -> Iterator[tuple[PartitionKey, PartitionStats]]:
    if not list(grouped["public"]):
        return  # not a listed key: dropped
    total = ZERO_STATS
    for stats in grouped["stats"]:
        total = total.add(stats)
    yield key, total


def _join_selected(
    key: PartitionKey, grouped: dict[str, Iterable[Any]]
) -> Iterator[tuple[PartitionKey, tuple[PartitionStats, int | None]]]:
    kept = list(grouped["selected"])
    if not kept:
        return  # not kept by the shared selection: dropped
    total = ZERO_STATS
    for stats in grouped["stats"]:
        total = total.add(stats)
    yield key, (total, kept[0])


class ReleaseNoisily(beam.PTransform[Any, Any]):
    """PCollection[(partition_key, PartitionStats)] → PCollection[dict]: the noisy release.

    Args:
      params: the query's release parameters (metric, mechanisms, partition policy).
      keys: where the query's noise key comes from (``keys.for_query(params.name)``, derived
        here: the step holds only this query's key, never the release secret).
      noise: **test hook only**, never set from a job file: ``False`` releases exact values and
        keeps every private partition with at least one person, so wiring tests can assert exact
        numbers. Outputs with ``noise=False`` are not private.
      selected: for a member of a shared selection (``pipelines/kinds/shared_selection.py``),
        the selection's kept keys ``(key, noisy person count or None)``: exactly these keys are
        released (zero statistics where the query has no rows), and ``params.selection`` — the
        group's rule — is not applied again.
    """

    def __init__(
        self,
        params: ReleaseParams,
        keys: KeySource,
        *,
        noise: bool = True,
        selected: PCollection[Any] | None = None,
    ):
        super().__init__()
        if not hasattr(keys, "for_query"):
            raise TypeError(f"keys must be a ReleaseKey or ReleaseKeys, got {type(keys).__name__}")
        self._params = params
        self._key = keys.for_query(params.name)
        self._noise = noise
        public = params.public_partitions
        if public is None and not params.bounding.by:
            public = ((),)  # the one partition of a query without `by` is always released
        self._public = None if public is None else tuple(dict.fromkeys(public))
        if selected is not None and (params.selection is None or self._public is not None):
            raise ValueError(
                f"query {params.name!r}: a shared selection's keys need private partitions"
            )
        self._selected = selected

    def expand(self, stats: PCollection[Any]) -> PCollection[Any]:
        if self._selected is not None:
            released: PCollection[Any] = (
                {"selected": self._selected, "stats": stats}
                # (partition_key, {"selected": [noisy count] or [], "stats": [PartitionStats]})
                | "JoinSelectedKeys" >> beam.CoGroupByKey()
                | "KeepSelectedKeys" >> beam.FlatMapTuple(_join_selected)
                | "ReleasePartition"
                >> beam.FlatMapTuple(_ReleaseSelected(self._params, self._key, self._noise))
            )
            return released
        if self._public is not None:
            listed = (
                stats.pipeline
                # (partition_key, None) per listed key
                | "CreatePublicKeys" >> beam.Create([(k, None) for k in self._public])
            )
            stats = (
                {"public": listed, "stats": stats}
                # (partition_key, {"public": [None] or [], "stats": [PartitionStats]})
                | "JoinPublicKeys" >> beam.CoGroupByKey()
                # (partition_key, PartitionStats): listed keys only, zero stats when absent
                | "KeepListedKeys" >> beam.FlatMapTuple(_join_public)
            )
        rows: PCollection[Any] = (
            stats
            # {<by columns>: ..., "value": float, "stddev": float}
            | "ReleasePartition"
            >> beam.FlatMapTuple(_ReleasePartition(self._params, self._key, self._noise))
        )
        return rows
