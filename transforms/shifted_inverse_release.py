"""Beam side of the shifted inverse mechanism and of ``bound = "auto"``: sufficient statistics.

Both mechanisms see the data through a few small statistics per partition, so the pipeline is

1. :class:`~transforms.aggregate.ShardByPerson` — all rows of a person in one table (the
   release's one shuffle by person, shared with its other queries);
2. per shard, **one reduction per person** (and partition): :func:`~.shifted_inverse_contributions.
   shard_contributions`, vectorised
   in numpy/pyarrow — rows are clamped to [0, ``limit``], each person keeps at most L public
   partitions, then one value per (person, partition) or, for distinct counts and quantiles of row
   values, the person's rows tagged with a person code;
3. a ``CombinePerKey`` (:mod:`.shifted_inverse_combiners`) whose CombineFn keeps only what the
   mechanism reads — the exact total and the
   top-K per-person totals (:class:`TopTotals`), the top-K per-person values (:class:`TopValues`),
   the histogram over the clamp grid with every candidate's clamped sum (:class:`ClampStats`),
   or the gathered rows (:class:`GatherRows`, distinct counts and quantiles only). Each is
   associative and lifted by Beam before the shuffle, and gives the same output whatever the
   split of the input;
4. one ``Map`` per partition that computes the down values and draws the release from
   the query's noise key, ``key.rng(partition, purpose)`` — the only randomness.

Nothing here is private on its own until step 4; nothing computed from the data leaves otherwise.
Guarantees (add/remove one person) are the core's: :class:`~.mechanisms.shifted_inverse.
ShiftedInverseParams` (pure ε or ρ-zCDP), :class:`~.mechanisms.auto_bound.ClampChoiceParams` (pure
ε) composed with Laplace / Gaussian noise of sensitivity the chosen clamp. Per public partition,
a person reaches at most L partitions, each released with 1/L of the budget
(``docs/shifted_inverse.md`` §3, §7).

Exactness. Counts are integers. Values are clamped to [0, limit] and summed in fixed point,
round(v/2^q) with q = ``quantum``, as exact integers (``docs/shifted_inverse.md`` §7), so the
statistic is a function of each person's multiset of rows, whatever the split into tables. Which
L partitions a person keeps (their L partitions with the most rows; ties: the smaller key) depends
only on that person's rows. ``noise=False`` is a test hook: the exact statistic, never from a job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import apache_beam as beam
import numpy as np
from apache_beam.pvalue import PCollection

from .keys import KeySource, NoiseKey
from .mechanisms.additive import GaussianMechanism, LaplaceMechanism
from .mechanisms.auto_bound import ClampChoiceParams
from .mechanisms.shifted_inverse import (
    ShiftedInverseParams,
    shifted_inverse,
    shifted_inverse_quantile,
)
from .mechanisms.shifted_inverse_stats import (
    distinct_down_values,
    max_down_values,
    quantile_k,
    sum_down_values,
)
from .noisy_combine import canonical_key_string
from .shifted_inverse_combiners import ClampStats, GatherRows, TopTotals, TopValues
from .shifted_inverse_contributions import ContributeShard, Contributions, Key

# --- step 4: the release, one Map per partition ------------------------------------------------

Statistic = Literal["total", "max", "distinct", "quantile"]


@dataclass(frozen=True)
class ShiftedInverseQuery:
    """A planned shifted-inverse release (public parameters, per partition).

    Attributes:
      name: the query name (first part of every noise label).
      statistic: ``total`` (Σ per-person totals), ``max`` (the k-th largest per-person value),
        ``distinct`` (distinct values of ``contributions.value``) or ``quantile`` (the q-quantile
        of row values, or of per-person values with ``contributions.shape == "values"``).
      contributions: what each shard contributes.
      params: the release's parameters, already split over L partitions; for ``quantile`` the
        selection's, with ``count_params`` for the row count released first.
      k, q: ``max``'s rank from the top; ``quantile``'s q.
    """

    name: str
    statistic: Statistic
    contributions: Contributions
    params: ShiftedInverseParams
    count_params: ShiftedInverseParams | None = None
    k: int = 1
    q: Fraction | None = None

    def __post_init__(self) -> None:
        shapes: dict[str, tuple[str, ...]] = {"total": ("totals",), "max": ("values",)}
        shapes.update(distinct=("pairs",), quantile=("rows", "values"))
        if self.contributions.shape not in shapes.get(self.statistic, ()):
            raise ValueError(f"statistic {self.statistic!r} cannot read {self.contributions.shape}")
        if (self.statistic == "quantile") != (self.count_params is not None and self.q is not None):
            raise ValueError("count_params and q are for (and required by) statistic 'quantile'")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"k must be a positive integer, got {self.k!r}")

    def combine_fn(self) -> beam.CombineFn:
        """The lifted combiner of this statistic's sufficient statistics."""
        if self.statistic == "total":
            return TopTotals(self.params.top_k)
        if self.statistic == "max":
            return TopValues(self.k - 1 + self.params.down_values_needed)
        if self.statistic == "quantile" and self.contributions.shape == "values":
            from .local_sensitivity import ConcatenateValues  # noqa: PLC0415

            return ConcatenateValues()
        return GatherRows()

    def exact(self, stats: Any) -> Fraction:
        """The statistic without noise (the ``noise=False`` test hook), at most the grid's top D
        as every release is: a test must not assert a value the mechanism can never output."""
        return min(self._uncapped(stats), Fraction(self.params.upper))

    def _uncapped(self, stats: Any) -> Fraction:
        unit = self.contributions.unit
        if self.statistic == "total":
            return Fraction(stats[0]) * unit
        if self.statistic == "max":
            return Fraction(stats[self.k - 1]) * unit if len(stats) >= self.k else Fraction(0)
        values = stats if isinstance(stats, np.ndarray) else stats[0]
        if self.statistic == "distinct":
            return Fraction(len(set(values.tolist())))
        assert self.q is not None
        ordered = np.sort(np.asarray(values, np.float64) * float(unit))[::-1]
        k = quantile_k(self.q, len(ordered))
        return Fraction(float(ordered[k - 1])) if len(ordered) else Fraction(0)

    def release(self, stats: Any, rng: _Rngs) -> Fraction:
        """The shifted-inverse release from the combined statistics (pure ε-DP or ρ-zCDP)."""
        p, unit, count = self.params, self.contributions.unit, self.params.down_values_needed
        if self.statistic == "total":
            total, top = stats
            down = sum_down_values(total * unit, [t * unit for t in top], count)
            return shifted_inverse(down, p, rng("value"))
        if self.statistic == "max":
            tops = [Fraction(v) * unit for v in stats[self.k - 1 :]]
            return shifted_inverse(max_down_values(tops, count), p, rng("value"))
        if self.statistic == "distinct":
            distinct = distinct_down_values(stats[0], stats[1], count)
            return shifted_inverse(distinct, p, rng("value"))
        assert self.count_params is not None and self.q is not None
        if isinstance(stats, np.ndarray):  # one value per person
            # A person's sum can pass the float range (many rows near a huge limit), and an inf
            # made kth_largest_down_values raise — a crash decided by the data alone. The
            # selection's grid tops out at D (a value above D takes D's index), so clamping at D
            # first releases the same index, and keeps every value finite.
            with np.errstate(over="ignore"):
                scaled = np.asarray(stats, dtype=np.float64) * float(unit)
            values, persons = np.minimum(scaled, float(p.upper)), np.arange(len(stats))
        else:
            values, persons = stats
        out = shifted_inverse_quantile(
            values, persons, self.q, count_params=self.count_params, select_params=p,
            count_rng=rng("count"), select_rng=rng("value"),
        )  # fmt: skip
        return out.value


@dataclass(frozen=True)
class AutoBoundQuery:
    """A planned ``count``/``sum`` with a privately chosen clamp (public parameters, per partition).

    The clamp c_k is drawn by ``choice`` (pure ε), then Σ min(t_i, c_k) over per-person totals
    t_i gets Laplace (``epsilon``) or Gaussian (``rho``) noise of sensitivity c_k: the composition
    of the two. Candidates must be whole fixed-point units (the choice's unit ≥
    ``contributions.quantum``).
    """

    name: str
    contributions: Contributions
    choice: ClampChoiceParams
    noise: Literal["laplace", "gaussian"]
    epsilon: float | None = None
    rho: float | None = None
    thresholds: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        c = self.contributions
        if c.shape != "totals":
            raise ValueError("an auto bound clamps per-person totals (shape 'totals')")
        if self.choice.unit_exponent < c.quantum:
            raise ValueError("the smallest candidate clamp is finer than the fixed-point unit")
        if (self.noise == "laplace") != (self.epsilon is not None) or (
            self.noise == "gaussian"
        ) != (self.rho is not None):
            raise ValueError("laplace noise takes epsilon, gaussian noise takes rho")
        unit = Fraction(2) ** c.quantum
        thresholds = tuple(int(b / unit) for b in self.choice.candidates)  # whole units
        object.__setattr__(self, "thresholds", thresholds)
        # The largest candidate's noise is checked when the query is planned
        # (pipelines/kinds/auto_bound.py), so mechanism(k) cannot overflow at release.

    def bound(self, index: int) -> float:
        """The clamp of candidate ``index`` (public once the index is released)."""
        return float(self.choice.candidates[index])

    def mechanism(self, index: int) -> LaplaceMechanism | GaussianMechanism:
        """The noise for candidate ``index``: sensitivity its clamp (``choice.sensitivity``)."""
        bound = self.choice.sensitivity(index)
        if self.epsilon is not None:
            return LaplaceMechanism(bound, self.epsilon)
        assert self.rho is not None
        return GaussianMechanism(bound, self.rho)


_Rngs = Any  # purpose → KeyedRng


class _ReleasePartition:
    """(partition key, combined statistics) → the output row; noise from (query, key, purpose)."""

    def __init__(
        self, query: ShiftedInverseQuery | AutoBoundQuery, key: NoiseKey, noise: bool
    ) -> None:
        self._query, self._key, self._noise = query, key, noise

    def __call__(self, key: Key, stats: Any) -> dict[str, Any]:
        q, label = self._query, canonical_key_string(key)

        def rng(purpose: str) -> Any:
            return self._key.rng(label, purpose)

        row: dict[str, Any] = dict(zip(q.contributions.by, key, strict=True))
        if isinstance(q, ShiftedInverseQuery):
            row["value"] = float(q.release(stats, rng) if self._noise else q.exact(stats))
            return row
        hist, clamped = stats
        k = q.choice.choose(hist, rng("bound")) if self._noise else q.choice.mode(hist)
        exact = clamped[k] * q.contributions.unit
        mechanism = q.mechanism(k)
        row["value"] = mechanism.release(exact, rng("value")) if self._noise else float(exact)
        row["stddev"], row["bound"] = mechanism.std, q.bound(k)
        return row


class ReleaseShiftedInverse(beam.PTransform[Any, Any]):
    """Person shards ((shard, pa.Table) from :class:`~transforms.aggregate.ShardByPerson`, shared
    by the release's queries) → one row per public partition ({by..., value}, + stddev, bound for
    an auto bound): a shifted-inverse release, or a count/sum with a privately chosen clamp.

    Args:
      query: a :class:`ShiftedInverseQuery` or :class:`AutoBoundQuery` (its guarantee is the
        release's, per partition; L partitions per person compose).
      keys: the query's noise key is ``keys.for_query(name)`` (derived here; the step holds only
        it), noise from ``key.rng(partition, purpose)``.
      noise: False only from tests: the exact statistic (auto bound: the best-scoring clamp).
    """

    def __init__(
        self,
        query: ShiftedInverseQuery | AutoBoundQuery,
        *,
        keys: KeySource,
        noise: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(query, (ShiftedInverseQuery, AutoBoundQuery)):
            raise TypeError(f"query must be a planned query, got {type(query).__name__}")
        self._query, self._noise, self._key = query, noise, keys.for_query(query.name)

    def expand(self, shards: PCollection[Any]) -> PCollection[Any]:
        q = self._query
        spec = q.contributions
        fn = q.combine_fn() if isinstance(q, ShiftedInverseQuery) else ClampStats(q.thresholds)
        contributions = (
            shards  # (shard, pa.Table): all rows of its persons
            | "Contributions" >> beam.FlatMapTuple(ContributeShard(spec))  # (key, contribution)
        )
        empty = shards.pipeline | "PublicKeys" >> beam.Create(
            [(k, spec.empty()) for k in spec.public_keys]
        )  # every public partition is released, absent ones from no data
        out: PCollection[Any] = (
            (contributions, empty)
            | "WithPublicKeys" >> beam.Flatten()
            | "Combine" >> beam.CombinePerKey(fn)  # (key, sufficient statistics), lifted
            | "Release" >> beam.MapTuple(_ReleasePartition(q, self._key, self._noise))
        )
        return out
