"""``release.ByPerson(...)``: any PCollection of rows → the release's persons, validated once.

The one entry into a release. It turns elements — Python dicts, ``beam.Row``\\ s, NamedTuples
or dataclass instances (the convenient path), or ``pyarrow`` tables / record batches (the fast
path) — into the raw tables of ``docs/release-job-contracts.md`` and validates them exactly like
the job file's reader does (:mod:`.validate`): one canonical person id (a string), key columns
in their declared type, value columns as float64; a row with a null, NaN, an unparsable value or
a value of another type than declared goes to ``dead_letter`` (raw private data: the operator's
only).

Types come from the caller (``keys={"domain": "string"}``, ``values=["duration_s"]``,
``person_type``), never from the values: a column's type, and so the output schemas, cannot
depend on one person. An Arrow table without a declared column, or whose column has another
type family than declared, is read row by row like Python rows: its mistyped rows are dead
letters (Arrow infers types from values, so raising would let one person's batch fail the run).

The result is a PCollection of clean tables that carries the release: metric transforms applied
to it (``people | "visits" >> Count(...)``) find their release, the column types and the one
shuffle by person (built on first use, shared by every metric) there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.transforms.window import GlobalWindows

from .aggregate import ShardByPerson, check_num_shards
from .columns import is_reserved_column
from .release import ReleaseError
from .validate import ValidateRows

if TYPE_CHECKING:
    from apache_beam.pvalue import PCollection

    from userdp.pipelines.input_files import InputSchema

    from .release import Release

PEOPLE_ATTRIBUTE = "_userdp_people"  # set on ByPerson's output PCollection
BATCH_ROWS = 10_000  # Python rows per raw table
_KEY_TYPES = {"string": pa.string(), "int": pa.int64(), "bool": pa.bool_()}
DEFAULT_SHARDS = 8


@dataclass
class People:
    """What ByPerson's output carries for the metric transforms (launcher side only)."""

    release: Release
    schema: InputSchema
    num_shards: int
    _shards: Callable[[], PCollection[Any]]
    _built: list[PCollection[Any]] = field(default_factory=list)

    def shards(self) -> PCollection[Any]:
        """(shard, pa.Table): the release's one shuffle by person, built on first use."""
        if not self._built:
            self._built.append(self._shards())
        return self._built[0]


def people_of(pcoll: object, transform: str) -> People:
    """The release information of ``pcoll``; a clear error if it did not come from ByPerson."""
    people = getattr(pcoll, PEOPLE_ATTRIBUTE, None)
    if not isinstance(people, People):
        raise TypeError(
            f"{transform} must be applied to the output of release.ByPerson(...), not to "
            f"{type(pcoll).__name__} {getattr(pcoll, 'producer', None) and pcoll}: only rows "
            "validated and grouped by person can be bounded per person"
        )
    return people


def _check_one_batch(rows: PCollection[Any]) -> None:
    """A release is one batch: refuse windowed, triggered or unbounded input when building.

    Each window (or each pane of a trigger) would be bounded and released on its own — a person
    bounded to L·C per window, not overall — and noise is keyed by query and partition only, so
    every window would draw the *same* noise: two windows' difference is the exact difference of
    their true values. Re-window into ``beam.WindowInto(GlobalWindows())`` (default trigger)
    first; a stream has no final result to release once.
    """
    if rows.is_bounded is False:
        raise ReleaseError(
            "ByPerson: the input is unbounded (a stream); a release is computed once, over a "
            "bounded batch: read the period's data as a batch"
        )
    windowing = rows.windowing
    if not windowing.is_default():
        raise ReleaseError(
            f"ByPerson: the input is windowed or triggered ({_not_default(windowing)}); a "
            "release bounds each person and draws its noise once over the whole batch, and "
            "per-window releases would repeat the same noise in every window: apply "
            "beam.WindowInto(GlobalWindows()) with no other argument first"
        )


def _not_default(windowing: Any) -> str:
    """What makes ``windowing`` other than Beam's default (the parts ``is_default`` checks)."""
    from apache_beam.transforms.trigger import AccumulationMode, DefaultTrigger  # noqa: PLC0415
    from apache_beam.transforms.window import TimestampCombiner  # noqa: PLC0415

    parts = []
    if windowing.windowfn != GlobalWindows():
        parts.append(type(windowing.windowfn).__name__)
    if windowing.triggerfn != DefaultTrigger():
        parts.append(f"trigger {windowing.triggerfn}")
    if windowing.accumulation_mode != AccumulationMode.DISCARDING:
        parts.append("accumulating panes")
    if windowing.timestamp_combiner != TimestampCombiner.OUTPUT_AT_EOW:
        parts.append(f"timestamp combiner {windowing.timestamp_combiner}")
    if windowing.allowed_lateness != 0:  # a Duration
        micros = getattr(windowing.allowed_lateness, "micros", None)
        late = f"{micros / 1e6:g} s" if micros is not None else windowing.allowed_lateness
        parts.append(f"allowed lateness {late}")
    return ", ".join(parts) or "not Beam's default windowing"


def _as_record(element: Any) -> Any:
    """dict / any Mapping / beam.Row / NamedTuple / dataclass instance → dict; anything else is
    passed on (a malformed record: its text goes with its dead letter). A user's mapping whose
    reading raises is passed on as it is too: its row is a dead letter, never a failed step.
    A dataclass's fields are read one level deep (not ``dataclasses.asdict``, which deep-copies
    every value)."""
    try:
        if isinstance(element, Mapping):
            return element if isinstance(element, dict) else dict(element)
        if dataclasses.is_dataclass(element) and not isinstance(element, type):
            return {f.name: getattr(element, f.name) for f in dataclasses.fields(element)}
        as_dict = getattr(element, "_asdict", None)
        return as_dict() if callable(as_dict) else element
    except KeyboardInterrupt:
        raise
    except BaseException:
        return element


def _check_table(table: pa.Table, schema: InputSchema) -> pa.Table:
    """Arrow input → a raw table: the declared columns, each in its declared family (an integer
    column may stand for a float one; an all-null column for any). Text is not parsed, so Arrow
    and Python rows make the same persons (``"1"`` is never the int ``1``).

    A table without a declared column, or with one of another family, is read row by row as
    Python rows are (:func:`records_to_table`): each row whose value has another type, or lacks
    the column, is a dead letter with its reason. It does not raise: Arrow infers types from
    values (``from_pylist``, a per-person file), so one person's batch must not decide whether
    the run fails."""
    from userdp.pipelines.input_files import arrow_family  # noqa: PLC0415
    from userdp.pipelines.raw_records import checked_text, records_to_table  # noqa: PLC0415

    want = schema.arrow_schema()
    # exactly once: a name twice in one batch cannot be selected (Arrow raises on a worker)
    fits = all(table.column_names.count(c) == 1 for c in schema.columns)
    if fits:
        table = table.select(list(schema.columns))
        for i, f in enumerate(table.schema):
            have, expected = arrow_family(f.type), arrow_family(want.field(f.name).type)
            if have == "null":  # a column holding only nulls: its rows are dead letters
                table = table.set_column(
                    i, f.name, pa.nulls(table.num_rows, want.field(f.name).type)
                )
            elif not (have == expected or (expected == "float" and have == "integer")):
                fits = False
    if not fits:
        return records_to_table(_rows(table, schema.columns), schema, absent_is_named=True)
    return checked_text(table)  # bytes that are not UTF-8: dead letters, as in a job's Parquet


class _Unconvertible:
    """A value Arrow cannot give as a Python object (a timestamp past Python's range, say):
    of no declared type, so its row is a dead letter, shown as its Arrow type."""

    def __init__(self, arrow_type: pa.DataType) -> None:
        self._type = str(arrow_type)

    def __repr__(self) -> str:
        return f"<a {self._type} value>"


class _Ambiguous:
    """The value of a column whose name a batch holds more than once: which one is meant is
    not known, so it is of no declared type and its row a dead letter."""

    def __init__(self, copies: int) -> None:
        self._copies = copies

    def __repr__(self) -> str:
        return f"<one of {self._copies} columns of this name in the batch>"


def _rows(table: pa.Table, columns: Sequence[str]) -> list[dict[str, Any]]:
    """The declared columns a table has, as Python rows (the others are never converted); a
    column whose values Arrow cannot convert gives each row an :class:`_Unconvertible`."""
    present = [c for c in columns if c in table.column_names]
    values: dict[str, list[Any]] = {}
    for name in present:
        copies = table.column_names.count(name)
        if copies > 1:
            values[name] = [_Ambiguous(copies)] * table.num_rows
            continue
        column = table.column(name)
        try:
            values[name] = column.to_pylist()
        except Exception:  # e.g. OverflowError: a date32 or timestamp past Python's range
            values[name] = [_Unconvertible(column.type)] * table.num_rows
    return [{c: values[c][i] for c in present} for i in range(table.num_rows)]


class _ToRawTables(beam.DoFn):
    """Elements → raw tables: Arrow passes through (checked), Python rows are batched."""

    def __init__(self, schema: InputSchema) -> None:
        self._schema = schema
        self._rows: list[Any] = []

    def start_bundle(self) -> None:
        self._rows = []

    def process(self, element: Any) -> Iterator[pa.Table]:
        if isinstance(element, pa.RecordBatch):
            element = pa.Table.from_batches([element])
        if isinstance(element, pa.Table):
            yield _check_table(element, self._schema)
            return
        self._rows.append(_as_record(element))
        if len(self._rows) >= BATCH_ROWS:
            yield self._flush()

    def _flush(self) -> pa.Table:
        from userdp.pipelines.raw_records import records_to_table  # noqa: PLC0415

        rows, self._rows = self._rows, []
        return records_to_table(rows, self._schema, absent_is_named=True)

    def finish_bundle(self) -> Iterator[Any]:
        if self._rows:
            yield GlobalWindows.windowed_value(self._flush())


class ByPerson(beam.PTransform[Any, Any]):
    """Rows → the release's persons (module docstring). Made by ``release.ByPerson(person, ...)``.

    ``person``: the column identifying a person (the privacy unit). ``keys``: partition columns
    and their types (``"string"``, ``"int"``, ``"bool"``). ``values``: numeric columns (read as
    float64). ``person_type``: ``"string"`` or ``"int"`` — ids of the other type are dead
    letters, never converted (so ``1`` and ``"1"`` are never silently one person).
    ``num_shards``: person shards of the one shuffle (default 8; never changes released values).

    Output: a PCollection of clean tables; its ``dead_letter`` attribute is a PCollection of
    ``{"reason", "file", "row"}`` dicts — raw private rows, for the operator only.
    """

    def __init__(
        self,
        release: Release,
        person: str,
        *,
        keys: Mapping[str, str],
        values: Sequence[str],
        person_type: str | None = None,
        num_shards: int | None = None,
        schema: InputSchema | None = None,
    ) -> None:
        super().__init__()
        from userdp.pipelines.input_files import InputSchema  # noqa: PLC0415

        if schema is None:  # the library: types as declared by the caller
            assert person_type is not None  # Release.ByPerson requires it
            _check_declaration(person, keys, values, person_type)
            schema = InputSchema(
                "beam",
                (),
                person,
                person_type,
                tuple((k, _KEY_TYPES[t]) for k, t in keys.items()),
                tuple(values),
            )
        if num_shards is not None:
            check_num_shards(num_shards)
        self._release, self._schema = release, schema
        self._num_shards = num_shards or DEFAULT_SHARDS
        self._raw = schema.fmt != "beam"  # the job file's reader: raw tables already

    def __getstate__(self) -> dict[str, Any]:
        """Without its Release (it holds the secret and refuses to pickle): Beam pickles a
        transform whose ``expand`` raised as a leaf of the graph (``_Metric.__getstate__``)."""
        return {**self.__dict__, "_release": None}

    def expand(self, rows: PCollection[Any]) -> PCollection[Any]:
        _check_one_batch(rows)
        self._release._bind(rows.pipeline)
        s = self._schema
        tables = rows if self._raw else rows | "ToTables" >> beam.ParDo(_ToRawTables(s))
        validated = tables | "Validate" >> ValidateRows(
            s.person, s.person_type, dict(s.keys), list(s.numbers)
        )
        clean = validated.clean  # pa.Table: __person__ (string), keys, numbers (float64)
        bounding_key = self._release._query_keys().subkey("bounding")
        n = self._num_shards

        def shards() -> PCollection[Any]:
            out: PCollection[Any] = clean | "ShardByPerson" >> ShardByPerson(n, bounding_key)
            return out

        setattr(clean, PEOPLE_ATTRIBUTE, People(self._release, s, n, shards))
        clean.dead_letter = validated.dead_letter
        result: PCollection[Any] = clean
        return result


def _check_declaration(
    person: str, keys: Mapping[str, str], values: Sequence[str], person_type: str
) -> None:
    if not isinstance(person, str) or not person:
        raise TypeError(f"ByPerson: person must be a column name, got {person!r}")
    if person_type not in ("string", "int"):
        raise ValueError(f"ByPerson: person_type must be 'string' or 'int', got {person_type!r}")
    if not isinstance(keys, Mapping) or not all(isinstance(k, str) and k for k in keys):
        raise TypeError("ByPerson: keys must map column → type, e.g. {'domain': 'string'}")
    for name, t in keys.items():
        if t not in _KEY_TYPES:
            raise ValueError(
                f"ByPerson: key column {name!r} has type {t!r}; key types are "
                f"{sorted(_KEY_TYPES)} (numeric values go in values=[...])"
            )
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"ByPerson: values must be a list of column names, got {values!r}")
    roles = [person, *keys, *values]
    twice = sorted({c for c in roles if roles.count(c) > 1})
    if twice:
        raise ValueError(f"ByPerson: columns {twice} are declared in two roles")
    reserved = [c for c in roles if is_reserved_column(c)]
    if reserved:
        raise ValueError(
            f"ByPerson: column name(s) {reserved} have the form __name__, which userdp's own "
            "columns have (__person__ holds the person id): rename them before ByPerson"
        )
