"""The user's chunk function and its answers: types, k, path checks, import, sanitising.

A sample-and-aggregate query names a function ``module:function`` that maps a chunk of persons'
rows to a number or a fixed-length vector. This module checks the path when the job file is read,
imports the function when the pipeline runs, and turns whatever it returns (or raises) into an
answer the aggregators accept — a tuple of finite floats of the declared dimension, or the
default (the midpoint of each range) — so no answer can make a release fail or depend on one
person's rows beyond the chunk's. Also :func:`default_chunks`, k from a private person count.
The mechanisms: :mod:`.sample_aggregate_aggregators`; the parameters: :mod:`.sample_aggregate`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import numbers
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

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
CHUNKS_RULE = (
    f"clamp(floor(sqrt(noisy persons)), {MIN_CHUNKS}, {MAX_CHUNKS}); "
    "noisy persons: Laplace mechanism, sensitivity 1, budget count_epsilon"
)
NEIGHBOURS = "add or remove all rows of one person (changes one of the k chunk answers)"


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
        return _called_with_one_argument(path, function_name(path))
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
    return _called_with_one_argument(fn, path)


def _called_with_one_argument(fn: ChunkFunction, name: str) -> ChunkFunction:
    """``fn`` if it can be called with one argument, the chunk: a function of another arity
    would fail on every chunk, and every chunk would answer the midpoint — a release of the
    range's middle, silently. Refused when planned instead. A callable whose signature Python
    cannot read (some builtins) is taken as it is."""
    try:
        signature = inspect.signature(fn, follow_wrapped=False)  # the wrapper is what is called
    except (TypeError, ValueError):
        return fn
    try:
        signature.bind(None)
    except TypeError:
        parameters = signature.replace(return_annotation=inspect.Signature.empty)
        raise ValueError(
            f"function {name} takes {parameters}, but is called with one argument: the chunk "
            "(a table of the chunk's rows)"
        ) from None
    return fn


def check_input_kind(input_kind: str) -> None:
    """``"pandas"`` needs pandas installed (userdp itself does not depend on it)."""
    if input_kind == "pandas" and importlib.util.find_spec("pandas") is None:
        raise ValueError(
            "a pandas chunk needs pandas, which is not installed (userdp does not depend on "
            "it): install pandas, or let the function take the chunk as a pyarrow Table "
            "(input = 'arrow')"
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
    except KeyboardInterrupt:
        raise
    except BaseException:  # any failure of a user object (__float__ raising, even SystemExit)
        return default
    return default if answer is None else answer
