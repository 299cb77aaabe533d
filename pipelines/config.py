"""The job file: TOML → a frozen, validated :class:`JobConfig`.

The keys of the example in issue 3 (and ``examples/browsing_job.toml``) are the contract. Every
problem raises :class:`ConfigError` naming the key path (``queries[1].bounds``), the value, what is
allowed and a hint; unknown keys are errors, so a typo is never silently ignored.

Budget numbers are exact: a TOML float is read as the decimal it was written as
(``Fraction(repr(x))``, so ``0.1`` is 1/10). Relative paths are relative to the job file.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .compression import CODECS, STREAM_FORMATS, format_suffix
from .config_columns import check_columns
from .config_fields import (
    MISSING,
    ConfigError,
    Validator,
)
from .config_model import (
    BUDGET_KEYS,
    INPUT_KEYS,
    LEDGER_KEYS,
    OUTPUT_KEYS,
    QUERY_KEYS,
    RUNNER_KEYS,
    BudgetConfig,
    InputConfig,
    JobConfig,
    LedgerConfig,
    OutputConfig,
    QueryConfig,
    ReleaseConfig,
    RunnerConfig,
    canonical_hash,
)
from .config_paths import check_private_paths
from .kinds import METRIC_KINDS, kind_for
from .kinds.base import QuerySection
from .ledger.model import LEDGER_NAME_RULE, check_name
from .output_layout import MAX_OUTPUT_SHARDS, first_name_clash

__all__ = [
    "QUERY_KEYS",
    "BudgetConfig",
    "ConfigError",
    "InputConfig",
    "JobConfig",
    "LedgerConfig",
    "OutputConfig",
    "QueryConfig",
    "ReleaseConfig",
    "RunnerConfig",
    "load_job",
    "parse_job",
]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

INPUT_FORMATS = ("parquet", "avro", "csv", "jsonl")
OUTPUT_FORMATS = ("parquet", "avro", "csv", "json")
RUNNER_NAMES = ("direct", "portable", "flink", "dataflow")
PERSON_TYPES = ("string", "int")
COLUMN_TYPES = ("string", "int", "float", "bool")
_EXTENSIONS = {".parquet": "parquet", ".avro": "avro", ".csv": "csv", ".jsonl": "jsonl"}
_EXTENSIONS[".json"] = "jsonl"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
_RESERVED_NAMES = ("manifest",)  # <output>/manifest.json is the manifest

_LEDGER_WHERE = (
    "either path (a SQLite file) or url (postgresql://…)",
    "the ledger that records this release's charge; caps are set with `userdp ledger set-cap`",
)
_SECTIONS = ("input", "budget", "runner", "output", "queries", "ledger", "release")

# (what is allowed, a hint) for ConfigError messages
_OPTIONS = ("a table, e.g. options = { }", "its keys are Beam pipeline options")
_COLUMNS = (
    'a table of column = type, e.g. columns = { domain = "string", duration_s = "float" }',
    "types of CSV/JSONL columns (default: keys string, values float); never taken from values",
)
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


def load_job(path: str | Path) -> JobConfig:
    """Read and validate a TOML job file."""
    p = Path(path)
    try:
        if p.exists() and not (p.is_file() or p.is_dir()):  # a FIFO blocked the open forever
            raise ConfigError("job file", str(p), "a TOML file", "not a regular file")
        with p.open("rb") as f:
            # a byte-order mark (as Notepad writes UTF-8) is not TOML: tomllib said only
            # "Invalid statement (at line 1, column 1)"
            text = f.read().decode("utf-8").removeprefix("\ufeff")
        raw = tomllib.loads(text, parse_float=_exact_float)
    except FileNotFoundError as e:
        raise ConfigError("job file", str(p), "an existing TOML file", "check the path") from e
    except IsADirectoryError as e:
        raise ConfigError("job file", str(p), "a TOML file", "it is a directory") from e
    except OSError as e:  # unreadable: permissions, a FIFO that errs, an I/O error
        raise ConfigError("job file", str(p), "a readable TOML file", e.strerror or "") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("job file", str(p), "valid TOML", str(e)) from e
    except UnicodeDecodeError as e:  # TOML is UTF-8 (tomllib decodes before parsing)
        raise ConfigError(
            "job file", str(p), "valid TOML", f"not UTF-8 text at byte {e.start}"
        ) from e
    except RecursionError as e:  # 100,000 nested arrays: tomllib recurses per level
        raise ConfigError(
            "job file", str(p), "valid TOML", "arrays or tables nested too deeply to read"
        ) from e
    try:
        return parse_job(raw, source=str(p), base_dir=p.parent)
    except RecursionError as e:  # nested just below tomllib's limit: showing the value recursed
        raise ConfigError(
            "job file", str(p), "valid job file", "a value nested too deeply to show"
        ) from e


def _exact_float(text: str) -> Fraction | float:
    """TOML floats: the decimal exactly as written (``Fraction(repr(float))`` rounded 17-digit
    decimals to nearest first, so 9.99999999999999999e-7 became 1e-6: above what was written).
    inf/nan, and decimals beyond the float range (1e400), stay floats to be rejected with their
    key; one that underflows (1e-400) is the 0 a float holds."""
    x = float(text)
    if not math.isfinite(x):
        return x
    return Fraction(text.replace("_", "")) if x != 0 else Fraction(0)


def parse_job(
    raw: Mapping[str, Any], *, source: str = "", base_dir: str | Path | None = None
) -> JobConfig:
    """Validate a parsed job table (floats may be floats or exact Fractions)."""
    # absolute, so that a relative glob means the same from every working directory
    v = Validator(source, Path(base_dir).absolute() if base_dir is not None else Path.cwd())
    v.keys(raw, "", _SECTIONS)
    inp = v.table(raw, "input", required=True)
    v.keys(inp, "input.", INPUT_KEYS)
    budget = _parse_budget(v, v.table(raw, "budget", required=True))
    runner_raw = v.table(raw, "runner", required=False)
    v.keys(runner_raw, "runner.", RUNNER_KEYS)
    out_raw = v.table(raw, "output", required=True)
    v.keys(out_raw, "output.", OUTPUT_KEYS)
    queries_raw = raw.get("queries", MISSING)
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
    clash = first_name_clash([q.name for q in queries])
    if clash is not None:  # "visits" and "visits.parquet": publishing one deletes the other
        i, path, j = clash
        where = (
            "a file every release writes"
            if j is None
            else f"as may queries[{j}]'s ({queries[j].name!r})"
        )
        v.fail(
            f"queries[{i}].name",
            queries[i].name,
            "a name whose output files no other query or the release uses",
            f"its output may be {path!r}, {where}: publishing one would delete the other "
            "(a query writes <name>.<format> or <name>/ of shards, compared ignoring case)",
        )

    in_path = v.string(inp, "input.path")
    fmt = v.choice(inp, "input.format", (*INPUT_FORMATS, "json"), default=None)
    if fmt is None:
        fmt = _EXTENSIONS.get(format_suffix(in_path))  # logs.csv.gz: csv
        if fmt is None:
            v.fail(
                "input.format",
                MISSING,
                f"one of {', '.join(INPUT_FORMATS)}",
                f'cannot infer it from the path {in_path!r}; give format = "..."',
            )
    person_type = v.choice(inp, "input.person_type", PERSON_TYPES, default=None)
    person = v.string(inp, "input.person")
    columns = _parse_columns(v, inp.get("columns", {}), person, person_type)
    check_columns(v, person, columns, queries)
    dead = v.string(inp, "input.dead_letter", required=False)
    compression = v.choice(inp, "input.compression", CODECS, default=None)
    fmt = "jsonl" if fmt == "json" else fmt
    if compression not in (None, "auto", "none") and fmt not in STREAM_FORMATS:
        v.fail(
            "input.compression",
            compression,
            f"a codec of csv or jsonl files ({fmt} compresses inside the file)",
            'remove the key or give "none"',
        )
    name = v.choice(runner_raw, "runner.name", RUNNER_NAMES, default="direct")
    options = runner_raw.get("options", {})
    if not isinstance(options, Mapping):
        v.fail("runner.options", options, *_OPTIONS)
    written = JobConfig(
        input=InputConfig(in_path, fmt, person, person_type, dead, columns, compression),
        budget=budget,
        runner=RunnerConfig(name, MappingProxyType(dict(options))),
        output=OutputConfig(
            path=v.string(out_raw, "output.path"),
            format=v.choice(out_raw, "output.format", OUTPUT_FORMATS, default="parquet"),
            shards=_output_shards(v, out_raw),
        ),
        queries=queries,
        config_hash="",
        source=source,
    )
    # The hash covers the config with paths as written, so it does not depend on where it runs.
    dead_path = v.resolve(dead) if dead is not None else None
    resolved_input = InputConfig(**{**_fields(written.input), "path": v.resolve(in_path)})
    resolved_input = InputConfig(**{**_fields(resolved_input), "dead_letter": dead_path})
    ledger = _parse_ledger(v, raw) if "ledger" in raw else None
    release = _parse_release(v, raw)
    output = OutputConfig(
        v.resolve(written.output.path), written.output.format, written.output.shards
    )
    check_private_paths(
        output.path,
        {
            "input.dead_letter": dead_path,
            "input.path": resolved_input.path,
            "ledger.path": ledger.location if ledger and "://" not in ledger.location else None,
            "release.secret_path": release.secret_path,
        },
        source,
    )
    return JobConfig(
        input=resolved_input,
        budget=budget,
        runner=written.runner,
        output=output,
        queries=tuple(
            q if q.partitions in (None, "private") else _with_path(q, v.resolve(q.partitions))
            for q in queries
        ),
        config_hash=canonical_hash(written),
        source=source,
        ledger=ledger,
        release=release,
    )


def _parse_columns(
    v: Validator, raw: Any, person: str, person_type: str | None
) -> Mapping[str, str]:
    """``[input] columns``: column name → ``string`` | ``int`` | ``float`` | ``bool``."""
    if not isinstance(raw, Mapping) or not all(isinstance(c, str) and c for c in raw):
        v.fail("input.columns", raw, *_COLUMNS)
    for name, t in raw.items():
        if t not in COLUMN_TYPES:
            v.fail(f"input.columns.{name}", t, f"one of {', '.join(COLUMN_TYPES)}", _COLUMNS[1])
    declared = raw.get(person)
    if declared is not None and declared not in PERSON_TYPES:
        v.fail(f"input.columns.{person}", declared, "string or int for the person column", "")
    if declared is not None and person_type is not None and declared != person_type:
        v.fail("input.person_type", person_type, f"the type columns.{person} gives", "")
    return MappingProxyType(dict(raw))


def _parse_release(v: Validator, raw: Mapping[str, Any]) -> ReleaseConfig:
    t = v.table(raw, "release", required=False)
    v.keys(t, "release.", ("secret_path",))
    secret = v.string(t, "release.secret_path", required=False)
    return ReleaseConfig(v.resolve(secret) if secret is not None else None)


def _parse_ledger(v: Validator, raw: Mapping[str, Any]) -> LedgerConfig:
    t = v.table(raw, "ledger", required=True)
    v.keys(t, "ledger.", LEDGER_KEYS)
    path, url = (
        v.string(t, "ledger.path", required=False),
        v.string(t, "ledger.url", required=False),
    )
    if (path is None) == (url is None):
        v.fail("ledger", dict(t), *_LEDGER_WHERE)
    if url is not None and not url.startswith(("postgresql://", "postgres://")):
        v.fail("ledger.url", url, *_LEDGER_WHERE)
    periods = t.get("periods", [])
    if not isinstance(periods, list) or not all(isinstance(p, str) and p for p in periods):
        v.fail("ledger.periods", periods, "a list of period names", 'e.g. ["2025-W03"]')
    rule = v.string(t, "ledger.period_rule", required=False)
    if rule is not None and periods:
        v.fail("ledger.period_rule", rule, "periods or period_rule, not both", "")
    if rule is not None:
        try:
            re.compile(rule)
        except re.error as e:
            v.fail("ledger.period_rule", rule, "a regular expression", str(e))
    scope = v.string(t, "ledger.scope")
    release_id = v.string(t, "ledger.release_id", required=False)
    names = [("ledger.scope", scope), ("ledger.release_id", release_id)]
    names += [(f"ledger.periods[{i}]", p) for i, p in enumerate(periods)]
    for key, name in names:  # as the ledger checks them: here, exit 2 naming the key
        if name is not None:
            try:
                check_name(name, key.removeprefix("ledger."))
            except ValueError:
                v.fail(key, name, LEDGER_NAME_RULE, "names are safe in paths, shells and SQL")
    return LedgerConfig(
        location=url if url is not None else v.resolve(path),
        scope=scope,
        periods=tuple(periods),
        period_rule=rule,
        release_id=release_id,
    )


def _with_path(q: QueryConfig, path: str) -> QueryConfig:
    return QueryConfig(**{**_fields(q), "partitions": path})


def _fields(obj: Any) -> dict[str, Any]:
    return {k: getattr(obj, k) for k in obj.__dataclass_fields__}


def _output_shards(v: Validator, out_raw: Mapping[str, Any]) -> int | None:
    if "shards" not in out_raw:
        return None
    return v.integer(
        out_raw, "output.shards", required=True, default=1, maximum=MAX_OUTPUT_SHARDS,
        hint="files per partitioned query's output",
    )  # fmt: skip


MAX_EPSILON = Fraction(1000)
MAX_RHO = MAX_EPSILON**2 / 2  # the ρ of an ε-DP mechanism at that ε (Bun & Steinke 2016, 1.4)
TOO_LARGE_BUDGET = (
    "a budget this large promises nothing (e^1000 is past every float), and the exact rules "
    "built from it — selection tables and thresholds — grow with it until planning hangs"
)


def parse_budget_table(raw: Mapping[str, Any], *, source: str = "") -> BudgetConfig:
    """A ``[budget]`` table on its own (the library's ``Budget``): the job file's rules."""
    return _parse_budget(Validator(source, Path.cwd()), raw)


def parse_query_table(
    raw: Mapping[str, Any], budget: BudgetConfig, *, key: str, source: str = ""
) -> QueryConfig:
    """One ``[[queries]]`` table on its own (the library's metric transforms), with the job
    file's rules; errors name ``key`` (e.g. ``Count('visits')``) instead of ``queries[i]``."""
    return _parse_query(Validator(source, Path.cwd()), raw, 0, budget, prefix=key)


def _parse_budget(v: Validator, b: Mapping[str, Any]) -> BudgetConfig:
    v.keys(b, "budget.", BUDGET_KEYS)
    eps = v.number(b, "budget.epsilon", positive=True)
    rho = v.number(b, "budget.rho", positive=True)
    delta = v.number(b, "budget.delta", below_one=True)
    if eps is not None and rho is not None:
        v.fail("budget", {"epsilon": b["epsilon"], "rho": b["rho"]}, *_BOTH_BUDGETS)
    if eps is None and rho is None:
        v.fail("budget.epsilon", MISSING, *_NO_BUDGET)
    for key, x, top in (("epsilon", eps, MAX_EPSILON), ("rho", rho, MAX_RHO)):
        if x is not None and x > top:
            v.fail(f"budget.{key}", b[key], f"a number in (0, {int(top):,}]", TOO_LARGE_BUDGET)
    return BudgetConfig(epsilon=eps, delta=delta if delta else None, rho=rho)


def is_query_name(name: str) -> bool:
    """Can ``name`` name a query (it is the output's file name)?"""
    return bool(_NAME.fullmatch(name)) and name.lower() not in _RESERVED_NAMES


def _parse_query(
    v: Validator, q: Any, i: int, budget: BudgetConfig, prefix: str | None = None
) -> QueryConfig:
    k = prefix or f"queries[{i}]"
    if not isinstance(q, Mapping):
        v.fail(k, q, "a [[queries]] table", "")
    name = v.string(q, f"{k}.name")
    if not is_query_name(name):
        v.fail(f"{k}.name", name, *_BAD_NAME)
    metric = q.get("metric", MISSING)
    if metric not in tuple(METRIC_KINDS):
        v.fail(f"{k}.metric", metric, f"one of {', '.join(METRIC_KINDS)}", "")
    return kind_for(metric).parse(QuerySection(v, q, i, budget, prefix=k))
