"""Frozen, validated parameters shared by the release job's Beam transforms.

The planner (``pipelines/plan.py``) builds these from the job file before any data is read; the
transforms only consume them. They hold plain values and core mechanism objects, all picklable.
See ``docs/release-job-contracts.md`` for how the pieces meet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from .mechanisms.additive import GaussianMechanism, LaplaceMechanism
from .mechanisms.partition_selection import (
    GaussianThresholding,
    LaplaceThresholding,
    TruncatedGeometricSelection,
)

Metric = Literal["count", "persons", "sum", "mean"]
METRICS: tuple[str, ...] = ("count", "persons", "sum", "mean")
NoiseMechanism = LaplaceMechanism | GaussianMechanism
SelectionRule = LaplaceThresholding | GaussianThresholding | TruncatedGeometricSelection

# Fixed-point sums: a value v is summed as round(v / 2^q) for a per-query quantum exponent q, so
# |v / 2^q| ≤ 2^VALUE_BITS and sums are exact integers whatever the combine order.
VALUE_BITS = 40


def quantum_exponent(lower: float, upper: float, bits: int = VALUE_BITS) -> int:
    """q with 2^q the fixed-point quantum for values clamped to [lower, upper] (public bounds):
    max(|lower|, |upper|)/2^q ≤ 2^bits."""
    m = max(abs(lower), abs(upper))
    if m == 0:
        return 0
    return math.frexp(m)[1] - bits


FREE_SUM_BITS = 60
"""Row values of the bound-free sums (shifted inverse, ``bound = "auto"``) are summed in units of
2^q with limit/2^q ≤ 2^60. Their limit is huge by default (D = 2^40, or 2^30 for the auto bound),
so the 40 bits of the bounded aggregates (whose limit is the user's bound) left a unit of 2 at
D = 2^40: every row of 1.0 rounded to 0 (ties to even). At 60 bits the unit is 2^−19 there and
2^−29 for the auto bound's default range [1, 2^30]: whole numbers and halves are exact, and a
row of any other value is off by at most half a unit (2^−20 ≈ 10^−6 at D = 2^40)."""


def free_sum_quantum(limit: float) -> int:
    """q for row values in [0, limit] summed in units of 2^q: limit/2^q ≤ 2^FREE_SUM_BITS."""
    return quantum_exponent(0.0, limit, FREE_SUM_BITS)


@dataclass(frozen=True)
class BoundingParams:
    """How one query bounds each person's contribution before aggregation.

    Attributes:
      by: partition columns (empty: one global partition).
      value: the value column for ``sum``/``mean`` (None for ``count``/``persons``).
      lower, upper: clamp bounds for the value (ignored without a value).
      max_partitions_per_person: L, how many partitions one person may contribute to.
      max_rows_per_partition: C, how many rows one person may contribute to one partition.
    """

    by: tuple[str, ...]
    value: str | None
    lower: float
    upper: float
    max_partitions_per_person: int
    max_rows_per_partition: int

    def __post_init__(self) -> None:
        for name in ("max_partitions_per_person", "max_rows_per_partition"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not self.by and self.max_partitions_per_person != 1:
            raise ValueError(
                "max_partitions_per_person must be 1 for a query without `by` (one partition), "
                f"got {self.max_partitions_per_person}"
            )
        if self.value is not None:
            if not (math.isfinite(self.lower) and math.isfinite(self.upper)):
                raise ValueError(f"bounds must be finite, got [{self.lower}, {self.upper}]")
            if not self.lower < self.upper:
                raise ValueError(
                    f"bounds must satisfy lower < upper, got [{self.lower}, {self.upper}]"
                )

    @property
    def quantum(self) -> int:
        """The fixed-point quantum exponent q for this query's value sums."""
        return quantum_exponent(self.lower, self.upper) if self.value is not None else 0


@dataclass(frozen=True)
class ReleaseParams:
    """What the final noisy combine does for one query.

    Attributes:
      name: the query name (the first part of every noise label).
      metric: ``count`` (rows), ``persons``, ``sum`` or ``mean``.
      bounding: the contribution bounds the statistics were computed under.
      noise: the calibrated mechanism for the released statistic; for ``mean`` the one for the
        centred sum, with ``count_noise`` for the row count.
      count_noise: only for ``mean``.
      public_partitions: the public key list (each key a tuple of ``by`` values), or None.
      selection: the private partition-selection rule when ``public_partitions`` is None and the
        query has ``by`` columns.
      release_selection_count: for ``persons`` with Laplace/Gaussian thresholding, the
        selection's noisy person count *is* the released value (the plan gave the selection the
        whole budget); no second draw may be made from ``noise``, or the query spends twice.
    """

    name: str
    metric: Metric
    bounding: BoundingParams
    noise: NoiseMechanism
    count_noise: NoiseMechanism | None = None
    public_partitions: tuple[tuple[object, ...], ...] | None = None
    selection: SelectionRule | None = None
    release_selection_count: bool = False

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")
        if (self.metric == "mean") != (self.count_noise is not None):
            raise ValueError("count_noise is required for metric 'mean' and only for it")
        if self.metric in ("sum", "mean") and self.bounding.value is None:
            raise ValueError(f"metric {self.metric!r} needs a value column")
        private = self.bounding.by and self.public_partitions is None
        if private and self.selection is None:
            raise ValueError(
                f"query {self.name!r}: private partitions need a selection rule "
                "(or give a file of public partition keys)"
            )
        if self.release_selection_count and not (
            self.metric == "persons"
            and isinstance(self.selection, (LaplaceThresholding, GaussianThresholding))
        ):
            raise ValueError(
                f"query {self.name!r}: only a persons query with threshold selection can release "
                "the selection's noisy count"
            )
        if not private and self.selection is not None:
            raise ValueError(
                f"query {self.name!r}: a selection rule is only for private partitions"
            )
        self._check_calibration()

    def _check_calibration(self) -> None:
        """Refuse noise calibrated to less than the bounds imply (add/remove one person).

        One person changes at most L partitions, each statistic by at most ``per_partition``:
        C rows (count), 1 (persons), C·max(|lo|, |hi|) (sum), C·(hi − lo)/2 for the centred sum of
        a mean and C for its row count. So the L1 sensitivity is at least L·per_partition and the
        L2 at least √L·per_partition. The planner adds a rounding margin on top; a mechanism
        below these floors (a hand-made plan) would not be private, whatever else holds.
        """
        b = self.bounding
        L, C = b.max_partitions_per_person, b.max_rows_per_partition
        lo, hi = Fraction(b.lower), Fraction(b.upper)
        by_metric: dict[str, list[tuple[NoiseMechanism | None, Fraction]]] = {
            "count": [(self.noise, Fraction(C))],
            "persons": [(self.noise, Fraction(1))],
            "sum": [(self.noise, C * max(abs(lo), abs(hi)))],
            "mean": [(self.noise, C * (hi - lo) / 2), (self.count_noise, Fraction(C))],
        }
        for mechanism, per_partition in by_metric[self.metric]:
            if isinstance(mechanism, LaplaceMechanism):
                low = Fraction(mechanism.l1_sensitivity) < L * per_partition
                stated, needed = mechanism.l1_sensitivity, f"L1 ≥ {float(L * per_partition)}"
            elif isinstance(mechanism, GaussianMechanism):
                low = Fraction(mechanism.l2_sensitivity) ** 2 < L * per_partition**2
                stated = mechanism.l2_sensitivity
                needed = f"L2 ≥ {math.sqrt(L) * float(per_partition)}"
            else:
                continue
            if low:
                raise ValueError(
                    f"query {self.name!r}: noise calibrated to sensitivity {stated}, below what "
                    f"its bounds imply for {self.metric} (L = {L}, C = {C}: {needed}); plan "
                    "queries with userdp.pipelines.plan.plan_query, which derives it"
                )
