"""The job file's model: frozen dataclasses, one per section (parsed in :mod:`.config`).

The job file's keys are these dataclasses' fields; a query kind's own keys live in
``QueryConfig.options`` and are validated by the kind's parser.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class InputConfig:
    path: str
    format: str
    person: str
    person_type: str | None = None  # None: the Parquet/Avro schema's, "string" for CSV/JSONL
    dead_letter: str | None = None  # operator-only path for rejected (raw, private) rows
    # declared column types (string | int | float | bool): the types of CSV/JSONL columns, which
    # carry none, and a check of Parquet/Avro schemas — never inferred from values (issue 12)
    columns: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # the codec of every input file (pipelines/compression.py); None: from each file's extension
    compression: str | None = None

    def declared_types(self) -> dict[str, str]:
        """``columns`` with the person column's type from ``person_type`` when it is given."""
        out = dict(self.columns)
        if self.person_type is not None:
            out[self.person] = self.person_type
        return out


@dataclass(frozen=True)
class ReleaseConfig:
    """``[release]``: ``secret_path`` is a key file (local or any Beam filesystem) that workers
    read at setup, so that no noise key travels in the job graph (docs/threat-model.md)."""

    secret_path: str | None = None


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
    # files per partitioned query's output (pipelines/output_layout.py); None: from the input size
    shards: int | None = None


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
    # a query kind's own keys (pipelines/kinds/), validated by its parser; empty for aggregates
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def private_partitions(self) -> bool:
        return self.partitions == "private"


# The job file's keys are these dataclasses' fields (a query kind's own keys live in `options`).
INPUT_KEYS, BUDGET_KEYS, RUNNER_KEYS, OUTPUT_KEYS = (
    tuple(c.__dataclass_fields__) for c in (InputConfig, BudgetConfig, RunnerConfig, OutputConfig)
)
QUERY_KEYS = tuple(f for f in QueryConfig.__dataclass_fields__ if f != "options")


@dataclass(frozen=True)
class LedgerConfig:
    """Where the release is charged (docs/ledger.md). ``location``: a SQLite path (resolved) or a
    ``postgresql://`` URL; ``periods`` or ``period_rule`` (a regex over input paths) say which
    data periods the release reads; ``release_id`` None means a new release on every run."""

    location: str
    scope: str
    periods: tuple[str, ...] = ()
    period_rule: str | None = None
    release_id: str | None = None


LEDGER_KEYS = ("path", "url", "scope", "periods", "period_rule", "release_id")


@dataclass(frozen=True)
class JobConfig:
    input: InputConfig
    budget: BudgetConfig
    runner: RunnerConfig
    output: OutputConfig
    queries: tuple[QueryConfig, ...]
    # sha256 of the canonical JSON of what determines the release's values: input, budget,
    # output and queries, paths as written. Not the runner (every runner gives the same bytes)
    # nor the ledger (moving the ledger does not change the release).
    config_hash: str
    source: str = ""
    ledger: LedgerConfig | None = None
    release: ReleaseConfig = field(default_factory=ReleaseConfig)

    def worker_paths(self) -> dict[str, str | None]:
        """Job-file key → every path the pipeline's workers read or write (runners check them)."""
        return {
            "input.path": self.input.path,
            "output.path": self.output.path,
            "input.dead_letter": self.input.dead_letter,
            "release.secret_path": self.release.secret_path,
        }


_HASHED_WHEN_SET = ("shards",)


def canonical_hash(cfg: JobConfig) -> str:
    """The job file's hash as the ledger and the manifest use it: every field that can change a
    released value, in a canonical JSON form (locations and runner excluded: below)."""

    def enc(x: Any) -> Any:
        if hasattr(x, "__dataclass_fields__"):
            # the secret file's content is in the ledger's fingerprint (a key check value), not
            # its location: moving the file changes no released value
            # nor the input's codec: the files' bytes are in the ledger's fingerprint, and a
            # codec that reads the same rows from them gives the same release
            skip = ("config_hash", "source", "runner", "ledger", "release", "compression")
            return {
                k: enc(v)
                for k, v in {k: getattr(x, k) for k in x.__dataclass_fields__}.items()
                # a key added later hashes only when set, so older job files keep their hash
                if k not in skip and not (k in _HASHED_WHEN_SET and v is None)
            }
        if isinstance(x, Fraction):
            return {"fraction": str(x)}
        if isinstance(x, Mapping):
            return {str(k): enc(v) for k, v in x.items()}
        if isinstance(x, (tuple, list)):
            return [enc(v) for v in x]
        return x if x is None or isinstance(x, (str, int, float, bool)) else repr(x)

    text = json.dumps(enc(cfg), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()
