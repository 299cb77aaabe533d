"""Sample-and-aggregate: private aggregates of k chunk answers of an arbitrary function.

Framework (Nissim, Raskhodnikova & Smith, STOC 2007; seed ``local-sensitivity-ptr-saa.txt``,
"Sample and Aggregate"): split the persons into k disjoint chunks, compute any function f on each
chunk, and release a private aggregate of the k answers. The Beam layer
(:mod:`transforms.chunking`) assigns chunks by a keyed hash of the person id, so

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

import importlib
import importlib.util
import math
import numbers
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any, Literal

import numpy as np

from .accounting import PureDP, float_up
from .additive import LaplaceMechanism
from .checks import as_fraction, positive
from .exponential import ExponentialMechanism, sample_exp_weights
from .rng import KeyedRng

Aggregator = Literal["mean", "median"]
AGGREGATORS: tuple[str, ...] = ("mean", "median")
InputKind = Literal["arrow", "pandas"]
INPUT_KINDS: tuple[str, ...] = ("arrow", "pandas")
Answer = tuple[float, ...]
ChunkFunction = Callable[[Any], object]

MIN_CHUNKS = 10
"""The default rule never uses fewer chunks (fewer makes the noise (u − l)/(kε) useless)."""
MAX_CHUNKS = 10_000
"""The default rule never uses more chunks (each chunk is one Beam element and one call of f)."""
CHUNKS_LIMIT = 1_000_000
"""The largest k accepted at all: the k answers are combined on one worker."""
DEFAULT_MEDIAN_GRID = 1 << 16
"""Grid cells per range for :class:`RankMedian`: the released median is one of G + 1 points."""
MAX_MEDIAN_GRID = 1 << 40
MAX_DIMENSION = 1_000

_FUNCTION_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_CHUNKS_RULE = (
    f"clamp(floor(sqrt(noisy persons)), {MIN_CHUNKS}, {MAX_CHUNKS}); "
    "noisy persons: Laplace mechanism, sensitivity 1, budget count_epsilon"
)
_NEIGHBOURS = "add or remove all rows of one person (changes one of the k chunk answers)"


def default_chunks(noisy_persons: float) -> int:
    """The default number of chunks from a (noisy) person count n̂: ⌊√n̂⌋, within [10, 10^4].

    Why √n: with n persons in k chunks of m = n/k, the aggregate's noise shrinks like
    (u − l)/(kε) while the bias of f on a chunk of m persons typically grows like 1/m; both are
    of order 1/√n at k = √n, and the variance of the mean of k chunk answers (≈ var(f)/n) does not
    depend on k. Post-processing of n̂ only: any finite or infinite float is accepted.
    """
    n = float(noisy_persons)
    if math.isnan(n) or n <= 0:
        return MIN_CHUNKS
    if n >= float(MAX_CHUNKS) ** 2:
        return MAX_CHUNKS
    return min(MAX_CHUNKS, max(MIN_CHUNKS, math.isqrt(int(n))))


def default_answer(bounds: Sequence[tuple[float, float]]) -> Answer:
    """The answer used for a chunk whose function fails or that holds no person: the midpoints.

    A constant: it depends on no data, so the answer on a chunk stays a function of that chunk.
    """
    return tuple(lo / 2 + hi / 2 for lo, hi in bounds)


def check_function_path(path: object) -> str:
    """``path`` if it is a well-formed import path ``"module:function"`` (no import is tried)."""
    if not isinstance(path, str) or not _FUNCTION_PATH.match(path):
        raise ValueError(
            f"function must be an import path 'module:function', got {path!r}; "
            "e.g. 'userdp.pipelines.example_functions:session_duration_p90'"
        )
    return path


def function_name(function: str | ChunkFunction) -> str:
    """How the manifest and ``userdp plan`` name a function: its path, or module:qualname."""
    if isinstance(function, str):
        return function
    module = getattr(function, "__module__", "?")
    return f"{module}:{getattr(function, '__qualname__', type(function).__name__)} (a callable)"


def resolve_function(path: str | ChunkFunction) -> ChunkFunction:
    """``"package.module:function"`` (or ``module:Class.method``) → the callable.

    Imports the module (the launcher checks this when planning, the workers when they start), so
    a module that fails to import — for any reason — is a ValueError naming the path. A callable
    (the library's ``SampleAggregate(function=...)``, pickled into the job graph) is returned as
    it is.
    """
    if callable(path):
        return path
    module_name, _, attr = check_function_path(path).partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as err:  # ImportError, or anything the module raises while importing
        raise ValueError(
            f"function {path!r}: cannot import module {module_name!r} ({err!r}); it must be "
            "importable on the launcher and on every worker"
        ) from err
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"function {path!r}: {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"function {path!r} is a {type(obj).__name__}, not a callable")
    fn: ChunkFunction = obj
    return fn


def check_input_kind(input_kind: str) -> None:
    """``"pandas"`` needs pandas installed (userdp itself does not depend on it)."""
    if input_kind == "pandas" and importlib.util.find_spec("pandas") is None:
        raise ValueError(
            "input_kind 'pandas' needs pandas, which is not installed; install pandas or let "
            "the function take the chunk as a pyarrow Table (input_kind 'arrow')"
        )


def _real_scalar(x: object) -> float | None:
    """``x`` as a finite float if it is a real number (not a bool), else None."""
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x[()]
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def _as_answer(raw: object, dimension: int) -> Answer | None:
    """``raw`` as ``dimension`` finite floats, or None if it is not that."""
    if dimension == 1 and (v := _real_scalar(raw)) is not None:
        return (v,)
    items: Sequence[object] | None = None
    if isinstance(raw, np.ndarray) and raw.ndim == 1:
        items = list(raw)
    elif isinstance(raw, (list, tuple)):
        items = raw
    if items is None or len(items) != dimension:
        return None
    values = [_real_scalar(item) for item in items]
    return None if any(v is None for v in values) else tuple(v for v in values if v is not None)


def sanitize_answer(raw: object, dimension: int, default: Answer) -> Answer:
    """A function's raw answer on one chunk → a tuple of ``dimension`` finite floats.

    Accepted: a real number (``dimension == 1``), or a list, tuple or 1-D numpy array of
    ``dimension`` real numbers; bools are not numbers here. Anything else — NaN or ±inf anywhere,
    a wrong length, a non-numeric value, an object whose conversion raises — gives ``default``
    for the whole answer. Never raises: a strange answer must not stop the job.
    """
    try:
        answer = _as_answer(raw, dimension)
    except Exception:  # any failure of a user object (e.g. __float__ raising) → the default
        return default
    return default if answer is None else answer


def _check_answers(answers: Sequence[Answer], chunks: int, dimension: int) -> None:
    if len(answers) != chunks:
        raise ValueError(
            f"expected one answer per chunk ({chunks}), got {len(answers)}; every chunk, empty "
            "or not, must contribute exactly one answer"
        )
    for a in answers:
        if len(a) != dimension:
            raise ValueError(
                f"expected answers of dimension {dimension}, got one of {len(a)}; "
                "pass answers through sanitize_answer first"
            )


def _clip(v: float, lo: float, hi: float) -> float:
    if not math.isfinite(v):
        raise ValueError(f"answer {v!r} is not finite; pass answers through sanitize_answer")
    return min(hi, max(lo, v))


def _exact_sum(values: Sequence[float]) -> Fraction:
    """Σ values exactly: floats are n/2^e, so every denominator divides the largest."""
    ratios = [v.as_integer_ratio() for v in values]
    den = max((d for _, d in ratios), default=1)
    return Fraction(sum(n * (den // d) for n, d in ratios), den)


def _check_bounds(bounds: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    out = []
    for j, pair in enumerate(bounds):
        if len(pair) != 2:
            raise ValueError(f"range {j} must be a pair (lower, upper), got {pair!r}")
        lo, hi = (as_fraction(x, f"range {j}") for x in pair)
        if not lo < hi:
            raise ValueError(
                f"range {j} must satisfy lower < upper, got [{pair[0]}, {pair[1]}]; it bounds "
                "the function's answer on one chunk"
            )
        out.append((float(pair[0]), float(pair[1])))
    if not 1 <= len(out) <= MAX_DIMENSION:
        raise ValueError(f"need 1 to {MAX_DIMENSION} ranges (one per coordinate), got {len(out)}")
    return tuple(out)


def _check_chunks(chunks: int) -> None:
    if isinstance(chunks, bool) or not isinstance(chunks, int):
        raise TypeError(f"chunks must be an int, got {type(chunks).__name__} {chunks!r}")
    if not 1 <= chunks <= CHUNKS_LIMIT:
        raise ValueError(
            f"chunks must lie in [1, {CHUNKS_LIMIT}], got {chunks}; more chunks means less "
            "noise but fewer persons per chunk"
        )


_SHARE_HINT = "every query needs a budget share"


@dataclass(frozen=True)
class ClippedMean:
    """Mean of the k chunk answers clipped to the ranges, plus Laplace noise.

    Guarantee: pure ε-DP for add/remove one person, given chunks by person (module docstring):
    one clipped answer moves by at most u_j − l_j per coordinate, so the mean vector moves by at
    most Δ₁ = Σ_j (u_j − l_j)/k in L1, and :class:`~.additive.LaplaceMechanism` with that Δ₁
    (rounded up to a float) is ε-DP. Proof: seed ``local-sensitivity-ptr-saa.txt``, "Sample and
    Aggregate", Definition 20, and DMNS06 for the L1 vector form. For d = 1 the noise is
    Laplace((u − l)/(kε)); for vectors each coordinate gets Laplace(Δ₁/ε), which equals splitting ε
    over coordinates in proportion to their range widths.
    """

    bounds: tuple[tuple[float, float], ...]
    chunks: int
    epsilon: float
    mechanism: LaplaceMechanism = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", _check_bounds(self.bounds))
        _check_chunks(self.chunks)
        positive(self.epsilon, "epsilon", _SHARE_HINT)
        width = sum((Fraction(hi) - Fraction(lo) for lo, hi in self.bounds), Fraction(0))
        l1 = float_up(width / self.chunks)  # exact, rounded up: never under-declared
        object.__setattr__(
            self, "mechanism", LaplaceMechanism(l1, self.epsilon, dimension=len(self.bounds))
        )

    @property
    def noise_std(self) -> float:
        """The public standard deviation of the noise on each coordinate."""
        return self.mechanism.std

    def statistic(self, answers: Sequence[Answer]) -> tuple[Fraction, ...]:
        """The exact clipped mean per coordinate (a rational: no float rounding before noise)."""
        _check_answers(answers, self.chunks, len(self.bounds))
        return tuple(
            _exact_sum([_clip(a[j], lo, hi) for a in answers]) / self.chunks
            for j, (lo, hi) in enumerate(self.bounds)
        )

    def release(self, answers: Sequence[Answer], rng: KeyedRng) -> tuple[float, ...]:
        """The noisy clipped mean per coordinate; all draws from ``rng``."""
        return tuple(self.mechanism.release_vector(list(self.statistic(answers)), rng))


@lru_cache(maxsize=4096)  # audits release the same answers many times
def _grid_index(a: float, lo: float, hi: float, grid: int) -> int:
    """round((a − lo)/(hi − lo)·G), ties to even, exactly: the grid point nearest a clipped a."""
    c = Fraction(_clip(a, lo, hi))
    return round((c - Fraction(lo)) * grid / (Fraction(hi) - Fraction(lo)))


@lru_cache(maxsize=4096)
def _grid_value(j: int, lo: float, hi: float, grid: int) -> float:
    """l + j·(u − l)/G computed exactly, correctly rounded to a float."""
    return float(Fraction(lo) + (Fraction(hi) - Fraction(lo)) * j / grid)


@lru_cache(maxsize=64)
def median_groups(
    indices: tuple[int, ...], grid: int
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """The grid points 0..G grouped into runs of equal rank score, for answers at ``indices``.

    Returns (scores, sizes, starts): run r covers points starts[r] … starts[r] + sizes[r] − 1,
    each with score −max(#{i: indices_i < j}, #{i: indices_i > j}). Runs: the gaps between
    distinct answer points and the points themselves, at most 2m + 1 for m distinct points.
    """
    k = len(indices)
    values, counts = np.unique(np.asarray(indices, dtype=np.int64), return_counts=True)
    scores: list[int] = []
    sizes: list[int] = []
    starts: list[int] = []

    def run(start: int, size: int, below: int, above: int) -> None:
        if size > 0:
            scores.append(-max(below, above))
            sizes.append(size)
            starts.append(start)

    below, prev = 0, -1
    for v, c in zip(values.tolist(), counts.tolist(), strict=True):
        run(prev + 1, v - prev - 1, below, k - below)  # the open gap before v
        run(v, 1, below, k - below - c)  # the point v itself
        below += c
        prev = v
    run(prev + 1, grid - prev, k, 0)  # the gap after the last point
    return tuple(scores), tuple(sizes), tuple(starts)


@dataclass(frozen=True)
class RankMedian:
    """A DP median of the k chunk answers: the exponential mechanism on a grid of the range.

    Candidates are the G + 1 public grid points y_j = l + j·(u − l)/G (G = ``grid``). Each answer
    is clipped and rounded to its nearest grid point, and y_j scores
    u(y_j) = −max(#{answers below y_j}, #{answers above y_j}); y_j is released with probability
    ∝ exp(ε·u(y_j)/(2d)) for a d-dimensional answer (one selection per coordinate).

    Guarantee: pure ε-DP for add/remove one person, given chunks by person: that changes one
    answer, hence each count by at most 1 and every score by at most 1, so each coordinate is the
    exponential mechanism with ε/d and Δ = 1 (McSherry & Talwar 2007; Dwork & Roth 2014,
    Thm. 3.10), and d of them compose to ε. The candidate set depends only on the public range and
    G. Derivation and the brute-force check: ``docs/sample_aggregate.md``. Sampling is exact
    (:func:`~.exponential.sample_exp_weights`, runs of equal score as multiplicities, then a
    uniform point of the run).

    Accuracy: the output lands among the answers of rank k/2 ± t with probability at least
    1 − (G + 1)·exp(−ε·t/(2d)), so it needs k ≳ 4d·ln(G)/ε chunks but only a range that
    contains the answers, however wide.
    """

    bounds: tuple[tuple[float, float], ...]
    chunks: int
    epsilon: float
    grid: int = DEFAULT_MEDIAN_GRID
    mechanism: ExponentialMechanism = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bounds", _check_bounds(self.bounds))
        _check_chunks(self.chunks)
        positive(self.epsilon, "epsilon", _SHARE_HINT)
        g = self.grid
        if isinstance(g, bool) or not isinstance(g, int) or not 1 <= g <= MAX_MEDIAN_GRID:
            raise ValueError(f"grid must be an int in [1, 2^40] (cells of the range), got {g!r}")
        # Sensitivity d with ε: weights exp(ε·u/(2d)), i.e. ε/d per coordinate with Δ = 1, exactly.
        object.__setattr__(self, "mechanism", ExponentialMechanism(self.epsilon, len(self.bounds)))

    @property
    def noise_std(self) -> None:
        """No additive noise: the exponential mechanism's error has no standard deviation."""
        return None

    def statistic(self, answers: Sequence[Answer]) -> tuple[float, ...]:
        """The exact median of the clipped answers per coordinate (mean of the middle two for
        even k): what the release estimates; released only with ``noise=False`` in tests."""
        _check_answers(answers, self.chunks, len(self.bounds))
        return tuple(
            float(statistics.median(_clip(a[j], lo, hi) for a in answers))
            for j, (lo, hi) in enumerate(self.bounds)
        )

    def grid_point(self, j: int, coordinate: int = 0) -> float:
        """y_j = l + j·(u − l)/G of a coordinate's range, correctly rounded to a float."""
        lo, hi = self.bounds[coordinate]
        return _grid_value(j, lo, hi, self.grid)

    def scores(self, answers: Sequence[Answer], coordinate: int = 0) -> tuple[Any, ...]:
        """(scores, sizes, starts) of :func:`median_groups` for one coordinate."""
        _check_answers(answers, self.chunks, len(self.bounds))
        lo, hi = self.bounds[coordinate]
        indices = tuple(sorted(_grid_index(a[coordinate], lo, hi, self.grid) for a in answers))
        return median_groups(indices, self.grid)

    def release(self, answers: Sequence[Answer], rng: KeyedRng) -> tuple[float, ...]:
        """One grid point per coordinate; all draws from ``rng``, coordinates in order."""
        out = []
        for j in range(len(self.bounds)):
            scores, sizes, starts = self.scores(answers, j)
            run = sample_exp_weights(rng, self.mechanism.exponents(scores), sizes)
            out.append(self.grid_point(starts[run] + rng.randbelow(sizes[run]), j))
        return tuple(out)


AggregatorMechanism = ClippedMean | RankMedian


@dataclass(frozen=True)
class SampleAggregateParams:
    """One sample-and-aggregate query, validated at construction (no data read).

    Attributes:
      name: the query name (the first part of every noise label and of the chunk key's label).
      function: the function's import path ``"module:function"``, resolved on the workers; it gets
        one chunk (all rows of its persons) and returns a float or ``dimension`` floats.
      output_range: (lower, upper) for every coordinate, or one pair for all of them (the answer
        is clipped to it; its midpoint is the answer of a failing or empty chunk).
      epsilon: the aggregator's budget (pure ε-DP).
      aggregator: ``"mean"`` (clipped mean + Laplace) or ``"median"`` (exponential mechanism).
      chunks: k, or None for :func:`default_chunks` of a Laplace person count (``count_epsilon``).
      count_epsilon: the person count's budget; required exactly when ``chunks`` is None.
      dimension: the answer's length d (1 for a float).
      input_kind: ``"arrow"`` (a ``pa.Table``) or ``"pandas"`` (a DataFrame) per chunk.
      median_grid: G, grid cells of each range for the median aggregator.

    Guarantee: pure (ε + count_epsilon)-DP for add/remove all rows of one person: the count is
    Laplace with sensitivity 1, k is post-processing of it, and for every k the aggregator is
    ε-DP (see :class:`ClippedMean`, :class:`RankMedian`); sequential composition adds them.
    """

    name: str
    function: str | ChunkFunction  # an import path; a pickled callable from the library
    output_range: tuple[float, float] | tuple[tuple[float, float], ...]
    epsilon: float
    aggregator: Aggregator = "mean"
    chunks: int | None = None
    count_epsilon: float | None = None
    dimension: int = 1
    input_kind: InputKind = "arrow"
    median_grid: int = DEFAULT_MEDIAN_GRID

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
        positive(self.epsilon, "epsilon", _SHARE_HINT)
        if self.chunks is None:
            if self.count_epsilon is None:
                raise ValueError(
                    "chunks is None (the default from a private person count), so count_epsilon "
                    "must give that count's budget; or set chunks"
                )
            positive(self.count_epsilon, "count_epsilon", _SHARE_HINT)
        else:
            _check_chunks(self.chunks)
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
            return _check_bounds([tuple(r)] * self.dimension)
        return _check_bounds([tuple(p) for p in r])

    @property
    def default(self) -> Answer:
        """The answer of a failing or empty chunk: the midpoint of each range."""
        return default_answer(self.bounds)

    def aggregator_for(self, chunks: int) -> AggregatorMechanism:
        """The calibrated aggregator for k = ``chunks`` (the fixed k, or the one chosen from n̂)."""
        if self.aggregator == "mean":
            return ClippedMean(self.bounds, chunks, self.epsilon)
        return RankMedian(self.bounds, chunks, self.epsilon, self.median_grid)

    def guarantee(self) -> PureDP:
        """The query's total guarantee: ε, plus the person count's budget when k is chosen."""
        count = Fraction(0) if self.count_epsilon is None else Fraction(self.count_epsilon)
        return PureDP(Fraction(self.epsilon) + count)

    def to_manifest(self) -> dict[str, Any]:
        """Public facts only: the function, k, ranges, aggregator, noise and guarantee."""
        noise: dict[str, Any]
        if self.aggregator == "mean":
            noise = {"mechanism": "laplace", "l1_sensitivity": "sum of range widths / chunks"}
            if self.chunks is not None:
                m = ClippedMean(self.bounds, self.chunks, self.epsilon).mechanism
                noise.update(scale=m.scale, stddev=m.std, granularity=m.granularity)
        else:
            noise = {
                "mechanism": "exponential",
                "score": "-max(#answers below, #answers above), sensitivity 1",
                "grid_cells": self.median_grid,
            }
        return {
            "metric": "sample_aggregate",
            "function": function_name(self.function),
            "input": self.input_kind,
            "chunks": self.chunks if self.chunks is not None else "auto",
            "chunks_rule": None if self.chunks is not None else _CHUNKS_RULE,
            "chunking": "keyed hash of the person id mod chunks",
            "range": [list(b) for b in self.bounds],
            "dimension": self.dimension,
            "aggregator": self.aggregator,
            "default_answer": list(self.default),
            "epsilon": self.epsilon,
            "count_epsilon": self.count_epsilon,
            "noise": noise,
            "neighbouring": _NEIGHBOURS,
            "guarantee": self.guarantee().to_manifest(),
        }
