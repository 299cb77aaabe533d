"""The job file: TOML → a frozen, validated :class:`JobConfig`.

The keys of the example in issue 3 (and ``examples/browsing_job.toml``) are the contract. Every
problem raises :class:`ConfigError` naming the key path (``queries[1].bounds``), the value, what is
allowed and a hint; unknown keys are errors, so a typo is never silently ignored.

Budget numbers are exact: a TOML float is read as the decimal it was written as
(``Fraction(repr(x))``, so ``0.1`` is 1/10). Relative paths are relative to the job file.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

INPUT_FORMATS = ("parquet", "avro", "csv", "jsonl")
OUTPUT_FORMATS = ("parquet", "avro", "csv", "json")
RUNNER_NAMES = ("direct", "portable", "flink", "dataflow")
METRICS = ("count", "persons", "sum", "mean")
NOISES = ("laplace", "gaussian")
PERSON_TYPES = ("string", "int")
_EXTENSIONS = {".parquet": "parquet", ".avro": "avro", ".csv": "csv", ".jsonl": "jsonl"}
_EXTENSIONS[".json"] = "jsonl"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
_RESERVED_NAMES = ("manifest",)  # <output>/manifest.json is the manifest

_SECTIONS = ("input", "budget", "runner", "output", "queries")

# (what is allowed, a hint) for ConfigError messages
_OPTIONS = ("a table, e.g. options = { }", "its keys are Beam pipeline options")
_BOTH_BUDGETS = (
    "epsilon (+ delta) or rho",
    "not both: rho is a zCDP total, epsilon a pure or (ε, δ) total",
)
_NO_BUDGET = (
    "a positive number (or budget.rho for zCDP)",
    "the total privacy budget, e.g. epsilon = 1.0 and delta = 1e-6",
)
_BAD_NAME = (
    "1-100 of A-Z a-z 0-9 _ . - (not starting with . or -), not 'manifest'",
    "the name is the output file name",
)
_L_WITHOUT_BY = ("1 for a query without `by`", "without `by` there is one partition")
_BOUNDS = (
    "[lower, upper], finite numbers with lower < upper",
    "values are clamped to these public bounds; choose them without looking at the data",
)
_PARTITIONS_WITHOUT_BY = (
    "no partitions for a query without `by`",
    "remove `partitions` or add `by`",
)
_DELTA_WITHOUT_TOTAL = ("no delta share: the total has no delta", "add delta to [budget] first")
_DELTA_WITHOUT_EPS = (
    "an epsilon share next to the delta share",
    "an explicit (ε, δ) share states both; omit both to take an even share",
)
_DELTA_NOT_PRIVATE = (
    "a delta share only on a query with private partitions",
    "under rho, delta is spent only by private partition selection",
)
_PRIVATE_NEEDS_DELTA = (
    "a delta > 0 for private partition selection",
    "give delta in [budget] (and in this query's share if it states epsilon), or "
    "partitions = a file of public keys",
)
_GAUSSIAN_NEEDS_DELTA = (
    "laplace, or a delta > 0 for gaussian noise",
    "gaussian noise under an epsilon total needs delta (or use rho)",
)


class ConfigError(ValueError):
    """A job file that cannot be run: names the key path, the value, what is allowed, a hint."""

    def __init__(
        self, key: str, value: object, allowed: str, hint: str = "", source: str = ""
    ) -> None:
        self.key, self.value, self.allowed, self.hint, self.source = (
            key,
            value,
            allowed,
            hint,
            source,
        )
        msg = f"{source}: " * bool(source) + f"{key} = {value!r}: expected {allowed}"
        super().__init__(f"{msg}. {hint}" if hint else msg)


_MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "(missing)"})()


@dataclass(frozen=True)
class InputConfig:
    path: str
    format: str
    person: str
    person_type: str | None = None  # None: taken from the data's schema
    dead_letter: str | None = None  # operator-only path for rejected (raw, private) rows


@dataclass(frozen=True)
class BudgetConfig:
    """The total: ``epsilon`` (+ optional ``delta``) or ``rho`` (+ optional ``delta``, spent only by
    private partition selection). Exact fractions."""

    epsilon: Fraction | None = None
    delta: Fraction | None = None
    rho: Fraction | None = None


@dataclass(frozen=True)
class RunnerConfig:
    name: str = "direct"
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class OutputConfig:
    path: str
    format: str = "parquet"


@dataclass(frozen=True)
class QueryConfig:
    """One query. ``partitions`` is "private", a resolved path to public keys, or None (no ``by``).
    ``epsilon``/``delta``/``rho`` are optional explicit shares of the total."""

    name: str
    metric: str
    by: tuple[str, ...] = ()
    value: str | None = None
    bounds: tuple[float, float] | None = None
    max_partitions_per_person: int = 1
    max_rows_per_partition: int = 1
    partitions: str | None = None
    noise: str = "laplace"
    epsilon: Fraction | None = None
    delta: Fraction | None = None
    rho: Fraction | None = None

    @property
    def private_partitions(self) -> bool:
        return self.partitions == "private"


# The job file's keys are these dataclasses' fields.
_INPUT_KEYS, _BUDGET_KEYS, _RUNNER_KEYS, _OUTPUT_KEYS, _QUERY_KEYS = (
    tuple(c.__dataclass_fields__)
    for c in (InputConfig, BudgetConfig, RunnerConfig, OutputConfig, QueryConfig)
)


@dataclass(frozen=True)
class JobConfig:
    input: InputConfig
    budget: BudgetConfig
    runner: RunnerConfig
    output: OutputConfig
    queries: tuple[QueryConfig, ...]
    config_hash: str  # sha256 of the canonical JSON of the parsed config (paths as written)
    source: str = ""


def load_job(path: str | Path) -> JobConfig:
    """Read and validate a TOML job file."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = tomllib.load(f, parse_float=_exact_float)
    except FileNotFoundError as e:
        raise ConfigError("job file", str(p), "an existing TOML file", "check the path") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("job file", str(p), "valid TOML", str(e)) from e
    return parse_job(raw, source=str(p), base_dir=p.parent)


def _exact_float(text: str) -> Fraction | float:
    # TOML floats: keep the decimal as written; inf/nan stay floats to be rejected with their key.
    x = float(text)
    return Fraction(repr(x)) if math.isfinite(x) else x


def parse_job(
    raw: Mapping[str, Any], *, source: str = "", base_dir: str | Path | None = None
) -> JobConfig:
    """Validate a parsed job table (floats may be floats or exact Fractions)."""
    v = _Validator(source, Path(base_dir) if base_dir is not None else Path.cwd())
    v.keys(raw, "", _SECTIONS)
    inp = v.table(raw, "input", required=True)
    v.keys(inp, "input.", _INPUT_KEYS)
    budget = _parse_budget(v, v.table(raw, "budget", required=True))
    runner_raw = v.table(raw, "runner", required=False)
    v.keys(runner_raw, "runner.", _RUNNER_KEYS)
    out_raw = v.table(raw, "output", required=True)
    v.keys(out_raw, "output.", _OUTPUT_KEYS)
    queries_raw = raw.get("queries", _MISSING)
    if not isinstance(queries_raw, list) or not queries_raw:
        v.fail("queries", queries_raw, "one or more [[queries]] tables", "add a [[queries]] table")
    queries = tuple(_parse_query(v, q, i, budget) for i, q in enumerate(queries_raw))
    seen: dict[str, int] = {}
    for i, q in enumerate(queries):
        if q.name.lower() in seen:
            v.fail(
                f"queries[{i}].name",
                q.name,
                "a name not used by another query",
                f"queries[{seen[q.name.lower()]}] has the same name (names are compared "
                "ignoring case, as output file names)",
            )
        seen[q.name.lower()] = i

    in_path = v.string(inp, "input.path")
    fmt = v.choice(inp, "input.format", (*INPUT_FORMATS, "json"), default=None)
    if fmt is None:
        fmt = _EXTENSIONS.get(Path(in_path.rstrip("/")).suffix.lower())
        if fmt is None:
            v.fail(
                "input.format",
                _MISSING,
                f"one of {INPUT_FORMATS}",
                f'cannot infer it from the path {in_path!r}; give format = "..."',
            )
    person_type = v.choice(inp, "input.person_type", PERSON_TYPES, default=None)
    dead = v.string(inp, "input.dead_letter", required=False)
    name = v.choice(runner_raw, "runner.name", RUNNER_NAMES, default="direct")
    options = runner_raw.get("options", {})
    if not isinstance(options, Mapping):
        v.fail("runner.options", options, *_OPTIONS)
    written = JobConfig(
        input=InputConfig(
            in_path,
            "jsonl" if fmt == "json" else fmt,
            v.string(inp, "input.person"),
            person_type,
            dead,
        ),
        budget=budget,
        runner=RunnerConfig(name, MappingProxyType(dict(options))),
        output=OutputConfig(
            path=v.string(out_raw, "output.path"),
            format=v.choice(out_raw, "output.format", OUTPUT_FORMATS, default="parquet"),
        ),
        queries=queries,
        config_hash="",
        source=source,
    )
    # The hash covers the config with paths as written, so it does not depend on where it runs.
    dead_path = v.resolve(dead) if dead is not None else None
    resolved_input = InputConfig(**{**_fields(written.input), "path": v.resolve(in_path)})
    resolved_input = InputConfig(**{**_fields(resolved_input), "dead_letter": dead_path})
    return JobConfig(
        input=resolved_input,
        budget=budget,
        runner=written.runner,
        output=OutputConfig(v.resolve(written.output.path), written.output.format),
        queries=tuple(
            q if q.partitions in (None, "private") else _with_path(q, v.resolve(q.partitions))
            for q in queries
        ),
        config_hash=_canonical_hash(written),
        source=source,
    )


def _with_path(q: QueryConfig, path: str) -> QueryConfig:
    return QueryConfig(**{**_fields(q), "partitions": path})


def _fields(obj: Any) -> dict[str, Any]:
    return {k: getattr(obj, k) for k in obj.__dataclass_fields__}


def _canonical_hash(cfg: JobConfig) -> str:
    def enc(x: Any) -> Any:
        if hasattr(x, "__dataclass_fields__"):
            return {k: enc(v) for k, v in _fields(x).items() if k not in ("config_hash", "source")}
        if isinstance(x, Fraction):
            return {"fraction": str(x)}
        if isinstance(x, Mapping):
            return {str(k): enc(v) for k, v in x.items()}
        if isinstance(x, (tuple, list)):
            return [enc(v) for v in x]
        return x if x is None or isinstance(x, (str, int, float, bool)) else repr(x)

    text = json.dumps(enc(cfg), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _parse_budget(v: _Validator, b: Mapping[str, Any]) -> BudgetConfig:
    v.keys(b, "budget.", _BUDGET_KEYS)
    eps = v.number(b, "budget.epsilon", positive=True)
    rho = v.number(b, "budget.rho", positive=True)
    delta = v.number(b, "budget.delta", below_one=True)
    if eps is not None and rho is not None:
        v.fail("budget", {"epsilon": b["epsilon"], "rho": b["rho"]}, *_BOTH_BUDGETS)
    if eps is None and rho is None:
        v.fail("budget.epsilon", _MISSING, *_NO_BUDGET)
    return BudgetConfig(epsilon=eps, delta=delta if delta else None, rho=rho)


def _parse_query(v: _Validator, q: Any, i: int, budget: BudgetConfig) -> QueryConfig:
    k = f"queries[{i}]"
    if not isinstance(q, Mapping):
        v.fail(k, q, "a [[queries]] table", "")
    v.keys(q, f"{k}.", _QUERY_KEYS)
    name = v.string(q, f"{k}.name")
    if not _NAME.fullmatch(name) or name.lower() in _RESERVED_NAMES:
        v.fail(f"{k}.name", name, *_BAD_NAME)
    metric = v.choice(q, f"{k}.metric", METRICS)
    by = q.get("by", [])
    if isinstance(by, str):
        by = [by]
    if not isinstance(by, list) or not all(isinstance(c, str) and c for c in by):
        v.fail(f"{k}.by", by, "a list of column names", 'e.g. by = ["domain"]')
    if len(set(by)) != len(by):
        v.fail(f"{k}.by", by, "distinct column names", "remove the repeated column")
    value = v.string(q, f"{k}.value", required=metric in ("sum", "mean"))
    if value is not None and metric in ("count", "persons"):
        v.fail(f"{k}.value", value, f"no value for metric {metric!r}", "remove `value`")
    bounds = _parse_bounds(v, q, k, metric)
    L = v.integer(q, f"{k}.max_partitions_per_person", required=bool(by), default=1)
    if not by and L != 1:
        v.fail(f"{k}.max_partitions_per_person", L, *_L_WITHOUT_BY)
    C = v.integer(q, f"{k}.max_rows_per_partition", required=metric != "persons", default=1)
    partitions = _parse_partitions(v, q, k, by)
    is_rho = budget.rho is not None
    noise = v.choice(q, f"{k}.noise", NOISES, default="gaussian" if is_rho else "laplace")
    eps = v.number(q, f"{k}.epsilon", positive=True)
    rho = v.number(q, f"{k}.rho", positive=True)
    delta = v.number(q, f"{k}.delta", below_one=True)
    _check_shares(v, k, budget, noise=noise, partitions=partitions, eps=eps, rho=rho, delta=delta)
    return QueryConfig(
        name, metric, tuple(by), value, bounds, L, C, partitions, noise, eps, delta, rho
    )


def _parse_bounds(
    v: _Validator, q: Mapping[str, Any], k: str, metric: str
) -> tuple[float, float] | None:
    raw = q.get("bounds", _MISSING)
    if raw is _MISSING:
        if metric in ("sum", "mean"):
            v.fail(
                f"{k}.bounds",
                raw,
                "[lower, upper], finite numbers with lower < upper",
                f"metric {metric!r} clamps each value to its bounds",
            )
        return None
    if metric in ("count", "persons"):
        v.fail(f"{k}.bounds", raw, f"no bounds for metric {metric!r}", "remove `bounds`")
    ok = isinstance(raw, list) and len(raw) == 2 and all(_is_num(x) for x in raw)
    lo, hi = (float(raw[0]), float(raw[1])) if ok else (math.nan, math.nan)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        v.fail(f"{k}.bounds", _shown(raw), *_BOUNDS)
    return lo, hi


def _parse_partitions(v: _Validator, q: Mapping[str, Any], k: str, by: list[str]) -> str | None:
    raw = q.get("partitions", _MISSING)
    if not by:
        if raw is not _MISSING:
            v.fail(f"{k}.partitions", raw, *_PARTITIONS_WITHOUT_BY)
        return None
    if raw is _MISSING:
        return "private"
    if not isinstance(raw, str) or not raw:
        v.fail(f"{k}.partitions", raw, '"private" or a path to a CSV/JSON file of public keys', "")
    return str(raw)


def _check_shares(
    v: _Validator,
    k: str,
    b: BudgetConfig,
    *,
    noise: str,
    partitions: str | None,
    eps: Fraction | None,
    rho: Fraction | None,
    delta: Fraction | None,
) -> None:
    kind = "rho (+ delta)" if b.rho is not None else "epsilon" + (" (+ delta)" if b.delta else "")
    if (b.rho is not None and eps is not None) or (b.epsilon is not None and rho is not None):
        key = f"{k}.epsilon" if eps is not None else f"{k}.rho"
        v.fail(
            key,
            eps if eps is not None else rho,
            f"shares of the total's kind: {kind}",
            "a query's share is stated like the [budget] total",
        )
    if delta is not None and not b.delta:
        v.fail(f"{k}.delta", delta, *_DELTA_WITHOUT_TOTAL)
    if b.epsilon is not None and delta is not None and eps is None:
        v.fail(f"{k}.epsilon", _MISSING, *_DELTA_WITHOUT_EPS)
    private = partitions == "private"
    if b.rho is not None and delta is not None and not private:
        v.fail(f"{k}.delta", delta, *_DELTA_NOT_PRIVATE)
    no_delta = not b.delta or (b.epsilon is not None and eps is not None and not delta)
    if private and no_delta:
        v.fail(f"{k}.partitions", "private", *_PRIVATE_NEEDS_DELTA)
    if noise == "gaussian" and b.rho is None and no_delta:
        v.fail(f"{k}.noise", noise, *_GAUSSIAN_NEEDS_DELTA)


def _is_num(x: object) -> bool:
    return isinstance(x, (int, float, Fraction)) and not isinstance(x, bool)


def _shown(x: Any) -> Any:
    """Values as written: exact Fractions back to the floats they came from."""
    if isinstance(x, list):
        return [_shown(e) for e in x]
    return float(x) if isinstance(x, Fraction) else x


class _Validator:
    def __init__(self, source: str, base_dir: Path) -> None:
        self.source, self.base_dir = source, base_dir

    def fail(self, key: str, value: object, allowed: str, hint: str) -> NoReturn:
        raise ConfigError(key, _shown(value), allowed, hint, self.source)

    def keys(self, table: Mapping[str, Any], prefix: str, allowed: tuple[str, ...]) -> None:
        for key in table:
            if key not in allowed:
                self.fail(
                    f"{prefix}{key}",
                    table[key],
                    f"one of the keys {', '.join(allowed)}",
                    "unknown key (a typo?)",
                )

    def table(self, raw: Mapping[str, Any], key: str, *, required: bool) -> Mapping[str, Any]:
        t = raw.get(key, _MISSING)
        if t is _MISSING and not required:
            return {}
        if not isinstance(t, Mapping):
            self.fail(key, t, f"a [{key}] table", "see examples/browsing_job.toml")
        return t

    def string(self, t: Mapping[str, Any], key: str, *, required: bool = True) -> Any:
        x = t.get(key.rsplit(".", 1)[-1], _MISSING)
        if x is _MISSING and not required:
            return None
        if not isinstance(x, str) or not x:
            self.fail(key, x, "a non-empty string", "")
        return x

    def choice(
        self, t: Mapping[str, Any], key: str, allowed: tuple[str, ...], default: Any = _MISSING
    ) -> Any:
        x = t.get(key.rsplit(".", 1)[-1], default)
        if x not in allowed and not (x is default and default is not _MISSING):
            self.fail(key, x, f"one of {', '.join(allowed)}", "")
        return x

    def integer(self, t: Mapping[str, Any], key: str, *, required: bool, default: int) -> int:
        x = t.get(key.rsplit(".", 1)[-1], _MISSING)
        if x is _MISSING and not required:
            return default
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            self.fail(
                key,
                x,
                "an integer ≥ 1",
                "a contribution bound: choose it from what one "
                "person plausibly contributes, not from the data",
            )
        return int(x)

    def number(
        self, t: Mapping[str, Any], key: str, *, positive: bool = False, below_one: bool = False
    ) -> Fraction | None:
        x = t.get(key.rsplit(".", 1)[-1], _MISSING)
        if x is _MISSING:
            return None
        f = Fraction(repr(x)) if isinstance(x, float) and math.isfinite(x) else x
        ok = _is_num(f) and not isinstance(f, float)
        if ok and positive and not f > 0:
            ok = False
        if ok and below_one and not 0 <= f < 1:
            ok = False
        if not ok:
            allowed = "a number in [0, 1)" if below_one else "a finite number > 0"
            self.fail(key, x, allowed, "budgets are exact decimals, e.g. 1.0 or 1e-6")
        return Fraction(f)

    def resolve(self, path: str) -> str:
        if "://" in path or Path(path).is_absolute():
            return path
        resolved = str(self.base_dir / path)
        return resolved + "/" if path.endswith("/") and not resolved.endswith("/") else resolved
