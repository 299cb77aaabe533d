"""Sample-and-aggregate: private aggregates of k chunk answers of an arbitrary function.

Framework (Nissim, Raskhodnikova & Smith, STOC 2007; seed ``local-sensitivity-ptr-saa.txt``,
"Sample and Aggregate"): split the persons into k disjoint chunks, compute any function f on each
chunk, and release a private aggregate of the k answers. The Beam layer
(:mod:`transforms.sample_aggregate`) assigns chunks by a keyed hash of the person id, so

* all rows of a person lie in one chunk, and the assignment does not depend on the data;
* the answer on a chunk is a function of that chunk's rows only (a failing f, a non-finite or
  ill-shaped answer and an empty chunk all give the public :func:`default_answer`).

Hence adding or removing one person (all of their rows) changes **exactly one** of the k answers,
arbitrarily, and no other. Every aggregator here is private for that relation on the vector of k
answers ("replace one of k answers"), which is userdp's add/remove-one-person relation on the data:

* :class:`ClippedMean` — mean of the answers clipped to [l, u] plus Laplace((u − l)/(kε)) per
  coordinate (L1 sensitivity Σ_j (u_j − l_j)/k for vectors): pure ε-DP (seed, Definition 20;
  the vector form is DMNS06's L1 Laplace mechanism).
* :class:`RankMedian` — the exponential mechanism over a public grid of the range with the rank
  score −max(#{a < y}, #{a > y}) (sensitivity 1): pure ε-DP (McSherry & Talwar 2007); it needs
  only a wide range, not a tight one. Derivation and brute-force check:
  ``docs/sample_aggregate.md``.

k is public: given by the user, or :func:`default_chunks` of a differentially private person count
whose budget is part of the query's guarantee (:meth:`SampleAggregateParams.guarantee`).
This module is pure (no Beam); all noise comes from :class:`~.rng.KeyedRng` streams.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .accounting import ZCDP, PureDP
from .additive import LaplaceMechanism
from .checks import positive
from .chunk_functions import (
    AGGREGATORS,
    CHUNKS_RULE,
    DEFAULT_MEDIAN_GRID,
    INPUT_KINDS,
    MAX_DIMENSION,
    MIN_CHUNKS,
    NEIGHBOURS,
    Aggregator,
    Answer,
    ChunkFunction,
    InputKind,
    check_function_path,
    default_answer,
    function_name,
)
from .sample_aggregate_aggregators import (
    SHARE_HINT,
    AggregatorMechanism,
    ClippedMean,
    RankMedian,
    check_bounds,
    check_chunks,
)


@dataclass(frozen=True)
class SampleAggregateParams:
    """One sample-and-aggregate query, validated at construction (no data read).

    Attributes:
      name: the query name (the first part of every noise label and of the chunk key's label).
      function: the function's import path ``"module:function"``, resolved on the workers; it gets
        one chunk (all rows of its persons) and returns a float or ``dimension`` floats.
      output_range: (lower, upper) for every coordinate, or one pair for all of them (the answer
        is clipped to it; its midpoint is the answer of a failing or empty chunk).
      epsilon: the aggregator's budget (pure ε-DP); or, instead,
      rho: the aggregator's budget as ρ-zCDP (Gaussian noise for the mean, bounded-range
        accounting for the median).
      aggregator: ``"mean"`` (clipped mean + Laplace) or ``"median"`` (exponential mechanism).
      chunks: k, or None for :func:`default_chunks` of a Laplace person count (``count_epsilon``).
      count_epsilon: the person count's budget; required exactly when ``chunks`` is None.
      dimension: the answer's length d (1 for a float).
      input_kind: ``"arrow"`` (a ``pa.Table``) or ``"pandas"`` (a DataFrame) per chunk.
      median_grid: G, grid cells of each range for the median aggregator.

    Guarantee, for add/remove all rows of one person: the count is Laplace with sensitivity 1
    (pure ``count_epsilon``-DP), k is post-processing of it, and for every k the aggregator is
    ε-DP, or ρ-zCDP when ``rho`` is given instead (see :class:`ClippedMean`,
    :class:`RankMedian`); sequential composition adds them — pure (ε + count_epsilon)-DP, or
    (ρ + count_epsilon²/2)-zCDP (an ε-DP count is ε²/2-zCDP, Bun & Steinke 2016, Prop. 1.4).
    """

    name: str
    function: str | ChunkFunction  # an import path; a pickled callable from the library
    output_range: tuple[float, float] | tuple[tuple[float, float], ...]
    epsilon: float | None = None
    aggregator: Aggregator = "mean"
    chunks: int | None = None
    count_epsilon: float | None = None
    dimension: int = 1
    input_kind: InputKind = "arrow"
    median_grid: int = DEFAULT_MEDIAN_GRID
    rho: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        if not callable(self.function):
            check_function_path(self.function)
        if self.aggregator not in AGGREGATORS:
            raise ValueError(f"aggregator must be one of {AGGREGATORS}, got {self.aggregator!r}")
        if self.input_kind not in INPUT_KINDS:
            raise ValueError(f"input_kind must be one of {INPUT_KINDS}, got {self.input_kind!r}")
        d = self.dimension
        if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= MAX_DIMENSION:
            raise ValueError(f"dimension must be an int in [1, {MAX_DIMENSION}], got {d!r}")
        bounds = self.bounds
        if len(bounds) != d:
            raise ValueError(
                f"got {len(bounds)} ranges for answers of dimension {d}; give one (lower, upper) "
                "pair for all coordinates or one per coordinate"
            )
        if (self.epsilon is None) == (self.rho is None):
            raise ValueError(
                "give exactly one budget for the aggregator: epsilon (pure ε) or rho (ρ-zCDP), "
                f"got epsilon={self.epsilon!r}, rho={self.rho!r}"
            )
        positive(self.epsilon if self.rho is None else self.rho,  # type: ignore[arg-type]
                 "epsilon" if self.rho is None else "rho", SHARE_HINT)  # fmt: skip
        if self.chunks is None:
            if self.count_epsilon is None:
                raise ValueError(
                    "chunks is None (the default from a private person count), so count_epsilon "
                    "must give that count's budget; or set chunks"
                )
            positive(self.count_epsilon, "count_epsilon", SHARE_HINT)
            # built once here from public numbers: a scale that overflows (ε = 1e-300) is a
            # planning error, not a failure while the pipeline is built (CLI audit)
            LaplaceMechanism(1.0, self.count_epsilon)
        else:
            check_chunks(self.chunks)
            if self.count_epsilon is not None:
                raise ValueError(
                    f"count_epsilon is only for chunks=None, got chunks={self.chunks}; drop it "
                    "(a fixed k needs no person count)"
                )
        self.aggregator_for(self.chunks or MIN_CHUNKS)  # validates grid and the ranges

    @property
    def bounds(self) -> tuple[tuple[float, float], ...]:
        """One (lower, upper) per coordinate."""
        r: Any = self.output_range
        if not isinstance(r, (tuple, list)) or len(r) == 0:
            raise ValueError(f"output_range must be (lower, upper) or pairs, got {r!r}")
        if all(isinstance(x, (int, float, Fraction)) for x in r):
            return check_bounds([tuple(r)] * self.dimension)
        return check_bounds([tuple(p) for p in r])

    @property
    def default(self) -> Answer:
        """The answer of a failing or empty chunk: the midpoint of each range."""
        return default_answer(self.bounds)

    def aggregator_for(self, chunks: int) -> AggregatorMechanism:
        """The calibrated aggregator for k = ``chunks`` (the fixed k, or the one chosen from n̂)."""
        if self.aggregator == "mean":
            return ClippedMean(self.bounds, chunks, self.epsilon, rho=self.rho)
        return RankMedian(self.bounds, chunks, self.epsilon, self.median_grid, rho=self.rho)

    def guarantee(self) -> PureDP | ZCDP:
        """The query's total guarantee: the aggregator's, plus the person count's when k is
        chosen (ε-DP counted as ε²/2-zCDP beside a ρ aggregator)."""
        count = Fraction(0) if self.count_epsilon is None else Fraction(self.count_epsilon)
        if self.rho is not None:
            return ZCDP(Fraction(self.rho) + count * count / 2)
        return PureDP(Fraction(self.epsilon) + count)  # type: ignore[arg-type]

    def to_manifest(self) -> dict[str, Any]:
        """Public facts only: the function, k, ranges, aggregator, noise and guarantee."""
        noise: dict[str, Any]
        agg = self.aggregator_for(self.chunks or MIN_CHUNKS)  # the median's ε_c is k-free
        if isinstance(agg, RankMedian):
            noise = {
                "mechanism": "exponential",
                "score": "-max(#answers below, #answers above), sensitivity 1",
                "grid_cells": self.median_grid,
                "epsilon_per_coordinate": float(agg.coordinate_epsilon),
            }
            if self.rho is not None:
                noise["counted_as"] = "ε-bounded-range per coordinate: d·ε²/8 ≤ ρ"
        elif isinstance(agg.mechanism, LaplaceMechanism):
            noise = {"mechanism": "laplace", "l1_sensitivity": "sum of range widths / chunks"}
            if self.chunks is not None:
                noise.update(scale=agg.mechanism.scale)
        else:
            noise = {"mechanism": "gaussian", "l2_sensitivity": "√(sum of squared widths) / chunks"}
        if isinstance(agg, ClippedMean) and self.chunks is not None:  # the noise at the fixed k
            noise.update(stddev=agg.mechanism.std, granularity=agg.mechanism.granularity)
        return {
            "metric": "sample_aggregate",
            "function": function_name(self.function),
            "input": self.input_kind,
            "chunks": self.chunks if self.chunks is not None else "auto",
            "chunks_rule": None if self.chunks is not None else CHUNKS_RULE,
            "chunking": "keyed hash of the person id mod chunks",
            "range": [list(b) for b in self.bounds],
            "dimension": self.dimension,
            "aggregator": self.aggregator,
            "default_answer": list(self.default),
            "epsilon": self.epsilon,
            "rho": self.rho,
            "count_epsilon": self.count_epsilon,
            "noise": noise,
            "neighbouring": NEIGHBOURS,
            "guarantee": self.guarantee().to_manifest(),
        }
