"""The planned ``sample_aggregate`` query: how its share is spent, and what the plan reports.

Split from :mod:`.sample_aggregate` (parsing, planning and the Beam expansion) so that each stays
small; the budget rule and the reports are documented there and in ``docs/sample_aggregate.md``
§9.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from userdp.transforms.columns import PERSON_COLUMN
from userdp.transforms.mechanisms.accounting import (
    ZCDP,
    ApproxDP,
    Budget,
    PureDP,
    epsilon_within_rho,
    float_down,
)
from userdp.transforms.mechanisms.additive import GaussianMechanism
from userdp.transforms.mechanisms.chunk_functions import MAX_CHUNKS, MIN_CHUNKS, function_name
from userdp.transforms.mechanisms.sample_aggregate import SampleAggregateParams
from userdp.transforms.mechanisms.sample_aggregate_aggregators import RankMedian

from .local_sensitivity_plan import counted_as

METRIC = "sample_aggregate"
NEIGHBOURS = "add/remove one person"
COUNT_FRACTION = Fraction(1, 10)
"""With ``chunks = "auto"``: the person count's part of the query's ε (module docstring)."""
OUTPUT_COLUMNS = (
    ("coordinate", "int64"),
    ("value", "float64"),
    ("stddev", "float64"),
    ("chunks", "int64"),
)
LN20 = math.log(20.0)  # Laplace: P(|X| > b·ln 20) = 0.05
Z975 = 1.959963984540054  # Gaussian: P(|X| > 1.96·σ) = 0.05


def aggregator_budget(
    share: Budget, *, counted: bool
) -> tuple[float | None, float | None, float | None]:
    """(ε, ρ, ε_count) of the aggregator and of the person count (module docstring).

    Under ε or (ε, δ): the count gets E/10 of the share's ε E, the aggregator the rest. Under ρ:
    the count gets the largest ε_count with ε_count²/2 ≤ ρ/10, the aggregator ρ − ε_count²/2 as
    ρ-zCDP (Gaussian noise or bounded-range selections). All rounded down."""
    if isinstance(share, ZCDP):
        count = epsilon_within_rho(share.rho * COUNT_FRACTION) if counted else None
        spent = Fraction(count or 0) ** 2 / 2
        return None, float_down(share.rho - spent), count
    total = share.epsilon
    count = float_down(total * COUNT_FRACTION) if counted else None
    return float_down(total - Fraction(count or 0)), None, count


def _ranges_text(bounds: tuple[tuple[float, float], ...]) -> str:
    shown_ = ", ".join(f"[{lo:g}, {hi:g}]" for lo, hi in bounds[:4])
    return shown_ + (f", … ({len(bounds)} coordinates)" if len(bounds) > 4 else "")


@dataclass(frozen=True)
class SampleAggregatePlan:
    """A planned sample-and-aggregate query: the core's params, and what is reported."""

    name: str
    share: Budget
    params: SampleAggregateParams
    columns: tuple[str, ...]
    key_columns: tuple[str, ...]
    metric: str = METRIC
    by: tuple[str, ...] = ()
    output_columns: tuple[tuple[str, str], ...] = OUTPUT_COLUMNS

    @property
    def guarantee(self) -> PureDP | ZCDP:
        return self.params.guarantee()

    @property
    def chunk_columns(self) -> tuple[str, ...]:
        """The columns of the function's chunk table, in order."""
        return (PERSON_COLUMN, *self.columns, *self.key_columns)

    def to_manifest(self) -> dict[str, Any]:
        p = self.params
        return {
            "name": self.name,
            **p.to_manifest(),  # metric, function, chunks, range, aggregator, noise, epsilons
            "columns": list(self.columns),
            "key_columns": list(self.key_columns),
            "chunk_table": list(self.chunk_columns),
            "share": self.share.to_manifest(),
            "budget_split": "fixed chunks: the aggregator gets the share; chunks = auto: the "
            "person count gets 1/10 of it (under ρ: ε_count with ε_count²/2 ≤ ρ/10), the "
            "aggregator the rest (floats rounded down)",
            "guarantee": {**self.guarantee.to_manifest(), "neighbouring": NEIGHBOURS},
            "counted_as": counted_as(self.share, self.guarantee, Fraction(0)),
            "failing_chunks": "a chunk whose function raises or returns NaN, ±inf, a non-number "
            "or the wrong shape, and a chunk with no person, answer default_answer",
            "output": "one row per coordinate: coordinate, value, stddev (null for the median), "
            "chunks (k)",
        }

    def plan_lines(self) -> list[str]:
        p = self.params
        cols = ", ".join(self.chunk_columns)
        table = "pandas DataFrame" if p.input_kind == "pandas" else "Arrow table"
        k = "k" if p.chunks is None else f"k = {p.chunks}"
        lines = [
            f"sample-and-aggregate of {function_name(p.function)} on {k} person chunks "
            "(keyed hash of the person id)"
        ]
        if p.chunks is None:
            lines.append(
                f"k = clamp(⌊√n̂⌋, {MIN_CHUNKS}, {MAX_CHUNKS}), n̂ = persons + Laplace(1/ε_count), "
                f"ε_count = {p.count_epsilon:.4g}"
            )
        lines += [
            f"chunk: {table} of {cols}; failing or empty chunk → {list(p.default)} (midpoints)",
            self._aggregate_line(),
        ]
        return [*lines, *self._accuracy_warning(), self._guarantee_line()]

    def _aggregate_line(self) -> str:
        p = self.params
        ranges = _ranges_text(p.bounds)
        agg = p.aggregator_for(p.chunks or MIN_CHUNKS)
        if isinstance(agg, RankMedian):
            per = f"ε = {float(agg.coordinate_epsilon):.4g}" + " per coordinate" * (p.dimension > 1)
            if p.rho is not None:
                per += f" (bounded range: d·ε²/8 ≤ ρ = {p.rho:.4g})"
            return (
                f"aggregate: DP median of the answers in {ranges}, exponential mechanism on "
                f"{p.median_grid + 1} grid points, rank score (sensitivity 1), {per}"
            )
        m = agg.mechanism
        if isinstance(m, GaussianMechanism):
            head = f"aggregate: mean of the answers clipped to {ranges} + Gaussian"
            if p.chunks is None:
                return (
                    f"{head}(σ = √Σ(u − l)²/(k·√(2ρ))), ρ = {p.rho:.4g}: stddev {m.std:.4g} at "
                    f"k = {MIN_CHUNKS}, ×{MIN_CHUNKS}/k for larger k"
                )
            return f"{head} stddev {m.std:.4g} (ρ = {p.rho:.4g}), 95% error ±{m.std * Z975:.4g}"
        head = f"aggregate: mean of the answers clipped to {ranges} + Laplace"
        if p.chunks is None:
            return (
                f"{head}(Σ(u − l)/(k·ε)), ε = {p.epsilon:.4g}: scale {m.scale:.4g} at k = "
                f"{MIN_CHUNKS}, ×{MIN_CHUNKS}/k for larger k"
            )
        return (
            f"{head} scale {m.scale:.4g} (ε = {p.epsilon:.4g}), stddev {m.std:.4g}, "
            f"95% error ±{m.scale * LN20:.4g}"
        )

    def _accuracy_warning(self) -> list[str]:
        """The median needs k well above 4·ln(G)/ε_c, ε_c per coordinate (= 4·d·ln(G)/ε under a
        pure ε; docs/sample_aggregate.md §4)."""
        p = self.params
        agg = p.aggregator_for(p.chunks or MIN_CHUNKS)
        if not isinstance(agg, RankMedian):
            return []
        need = 4 * math.log(p.median_grid) / float(agg.coordinate_epsilon)
        if p.chunks is not None and p.chunks >= need:
            return []
        k = f"k = {p.chunks} is" if p.chunks is not None else "k may be"
        return [
            f"warning: the median needs k well above 4·ln(G)/ε_c = {need:.0f} (ε_c per "
            f"coordinate); {k} below, where the release is close to uniform on the range"
        ]

    def _guarantee_line(self) -> str:
        g = self.guarantee
        line = f"guarantee: {g} for {NEIGHBOURS}"
        count = self.params.count_epsilon
        if isinstance(self.share, ZCDP) and count is not None:
            line += f" (the person count's ε_count = {count:.4g} as ε²/2-zCDP); within the share"
        elif isinstance(self.share, ZCDP):
            line += "; within the share"
        elif isinstance(self.share, ApproxDP):
            line += "; counted as (ε, 0): no δ spent"
        return line
