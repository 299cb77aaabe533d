"""A malformed-input corpus for ``userdp run`` (issue 13), generated deterministically.

Each :class:`Case` is one fault and the reaction the release owes it. ``Case.build(root)`` writes
the case into a fresh directory — input files, a job file with a ``[ledger]`` and a fixed release
id, the same job without the ledger (for the exact, noise-free run) — and returns a
:class:`Planted` saying what must be observed:

- row faults (groups ``row``, and the row faults of ``item1``, ``item2``, ``item7``): exit 0;
  ``good`` rows are used (the released ``count`` equals it with noise off) and between ``bad[0]``
  and ``bad[1]`` dead letters are written, each with a reason and naming one of ``bad_files``;
- zero-row files (``item6``): exit 0, nothing dead-lettered;
- file-level faults, malformed public-key files and unusable output locations (``item2``–``item5``,
  ``item7``, ``file``): exit 2 with a message naming every string of ``names`` (the file, and the
  column where there is one), the ledger's spend unchanged;
- byte mutations (full tier only): exit 0 or 2.

Every case plants ``Case.canary`` in its bad rows or fields and in one good person's key value. It
may reach the dead letters (operator-only), nothing else.

Tiers: :func:`small_cases` (the fast tier: about 40 cases, one or a few faults each) and
:func:`full_cases` (hundreds: every fault alone in every format it applies to, larger files,
seeded random mixes of row faults, seeded byte mutations). No network; all randomness is
``random.Random`` seeded from the case id, so a case writes the same bytes on every run.
"""

from __future__ import annotations

import io
import json
import math
import os
import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

SCOPE = "fuzz"
FORMATS = ("parquet", "avro", "csv", "jsonl")
DOMAINS = ("a.example", "b.example", "c.example")
HEADER = b"person_id,domain,duration_s"
MIB = 1 << 20

PARQUET_SCHEMA = pa.schema(
    [("person_id", pa.string()), ("domain", pa.string()), ("duration_s", pa.float64())]
)
KEYED_PARQUET_SCHEMA = pa.schema([*PARQUET_SCHEMA, ("code", pa.int64()), ("flag", pa.bool_())])


def _avro_schema(*extra: dict[str, Any]) -> dict[str, Any]:
    # Unions on purpose: a person id of the "long" branch, a value of the "string" branch are
    # rows of another type than the column's (the column's type is the first non-null branch).
    return {
        "type": "record",
        "name": "row",
        "fields": [
            {"name": "person_id", "type": ["null", "string", "long"]},
            {"name": "domain", "type": ["null", "string"]},
            {"name": "duration_s", "type": ["null", "double", "string"]},
            *extra,
        ],
    }


AVRO_SCHEMA = _avro_schema()
KEYED_AVRO_SCHEMA = _avro_schema(
    {"name": "code", "type": ["null", "long"]}, {"name": "flag", "type": ["null", "boolean"]}
)

QUERIES = """
[[queries]]
name = "rows"
metric = "count"
max_rows_per_partition = 10000

[[queries]]
name = "total"
metric = "sum"
value = "duration_s"
bounds = [0.0, 600.0]
max_rows_per_partition = 10000

[[queries]]
name = "by_domain"
metric = "count"
by = ["domain"]
max_partitions_per_person = 1
max_rows_per_partition = 1
"""


@dataclass(frozen=True)
class Raw:
    """Bytes for a Parquet or Avro *string* field that are not valid UTF-8."""

    data: bytes


MISSING: Any = object()  # a JSONL field left out of the object


@dataclass(frozen=True)
class Bad:
    """One planted bad row: a CSV/JSONL line (bytes) or a Parquet/Avro row (dict). It must give
    between ``lo`` and ``hi`` dead letters (more than one line: a pretty-printed object)."""

    item: Any
    lo: int = 1
    hi: int = 1


@dataclass
class Planted:
    """A built case: where things are and what the run must show (module docstring)."""

    root: Path
    job: Path
    exact_job: Path | None
    output: Path
    dead_letter: Path
    ledger: Path
    tmp: Path
    good: int | None
    bad: tuple[int, int] | None
    bad_files: frozenset[str]
    names: tuple[str, ...]
    cwds: tuple[Path, ...]
    listed_keys: tuple[str, frozenset[Any]] | None = None  # (column, keys) if exit 0 is allowed
    undo: list[Callable[[], None]] = field(default_factory=list)


@dataclass(frozen=True)
class Case:
    """One fault. ``runner``: ``inprocess`` (``pipelines.cli.main`` in the test process),
    ``subprocess`` (a child process with a timeout: FIFOs, byte mutations that might crash the
    interpreter) or ``nodac`` (a child process without the capabilities that let root ignore file
    permissions: unreadable files, read-only directories)."""

    group: str  # item1 … item7 (issue 13's list), row or file (the rest of the contract)
    name: str
    fmt: str
    exits: tuple[int, ...]
    plant: Callable[[CaseDir], None]
    runner: str = "inprocess"

    @property
    def id(self) -> str:
        return f"{self.group}-{self.name}"

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode())

    @property
    def canary(self) -> str:
        return f"CANARY-{self.name}-{random.Random(self.seed ^ 0x5EED).getrandbits(48):012x}"

    def build(self, root: Path) -> Planted:
        cd = CaseDir(self, root)
        self.plant(cd)
        return cd.finish()


# --- writing a case -------------------------------------------------------------------------


def _num(v: float) -> str:
    return "inf" if v == math.inf else "-inf" if v == -math.inf else repr(v)


def _toml(s: str) -> str:
    return json.dumps(s)  # a JSON string of printable ASCII is a TOML basic string


class CaseDir:
    """The directory of one case while it is written, and what the case expects."""

    def __init__(self, case: Case, root: Path) -> None:
        self.case, self.root = case, root
        self.dir = root / "job"  # the job file's directory: every path in it is relative
        self.data = self.dir / "data"
        self.elsewhere = root / "elsewhere"  # the CLI's working directory
        for d in (self.data, self.elsewhere, self.dir / "ledger", root / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(case.seed)
        self.canary = case.canary
        self.c = self.canary.encode()
        self.fmt = case.fmt
        self.input_path = f"data/*.{case.fmt}"
        self.person_type: str | None = None
        self.columns: dict[str, str] = {}
        self.output = "release/"
        self.dead = "ops/dead/"
        self.ledger_rel = "ledger/ledger.sqlite"
        self.keyed: tuple[str, str] | None = None  # (by column, key file name)
        self.exact = True
        self.good: int | None = 0
        self.bad_lo = self.bad_hi = 0
        self.bad_files: set[str] = set()
        self.names: tuple[str, ...] = ()
        self.cwds: tuple[Path, ...] = (self.elsewhere,)
        self.listed_keys: tuple[str, frozenset[Any]] | None = None
        self.undo: list[Callable[[], None]] = []
        self.odd_values = False  # ±inf and out-of-bounds values among good rows (still good)
        self._persons = 0
        self._canary_planted = False

    # expectations

    def expect_exit_2(self, *names: str) -> None:
        self.names, self.exact, self.good = names, False, None

    def unknown_rows(self) -> None:
        self.exact, self.good = False, None

    # rows

    def _person(self) -> Any:
        self._persons += 1
        return self._persons if self.person_type == "int" else f"u{self._persons}"

    def _value(self) -> float:
        if self.odd_values and self.rng.random() < 0.05:
            return self.rng.choice([math.inf, -math.inf, -1e300, 1e300, -0.0])
        return round(self.rng.uniform(-50.0, 900.0), 3)

    def good_rows(self, n: int, *, keyed: bool = False) -> list[dict[str, Any]]:
        """``n`` good rows of persons with 1–3 rows each; the first person's key holds the
        canary (a private value a reader must never see unless it passes partition selection,
        which one person cannot)."""
        rows: list[dict[str, Any]] = []
        while len(rows) < n:
            person = self._person()
            if self._canary_planted:
                domain = self.rng.choice(DOMAINS)
            else:
                domain, self._canary_planted = f"{self.canary}-good.example", True
            for _ in range(min(self.rng.randint(1, 3), n - len(rows))):
                row = {"person_id": person, "domain": domain, "duration_s": self._value()}
                if keyed:
                    row["code"] = self.rng.randint(1, 3)
                    row["flag"] = self.rng.random() < 0.5
                rows.append(row)
        if self.good is not None:
            self.good += n
        return rows

    def _encode(self, row: dict[str, Any], fmt: str) -> bytes:
        if fmt == "jsonl":
            return json.dumps(row).encode()
        out = []
        for v in row.values():
            if isinstance(v, bool):
                out.append("true" if v else "false")
            elif isinstance(v, float):
                out.append(_num(v))
            else:
                out.append(str(v))
        return ",".join(out).encode()

    def rows_file(
        self,
        name: str,
        n_good: int,
        bads: Sequence[Bad] = (),
        *,
        keyed: bool = False,
        shuffle: bool = True,
        newline: bytes = b"\n",
        row_group_size: int | None = None,
        codec: str = "null",
        sync_interval: int = 4000,
    ) -> Path:
        """A file of ``n_good`` good rows and the ``bads``, in the case's format."""
        items: list[tuple[bool, Any]] = [(True, r) for r in self.good_rows(n_good, keyed=keyed)]
        items += [(False, b.item) for b in bads]
        if shuffle:
            self.rng.shuffle(items)
        self.bad_lo += sum(b.lo for b in bads)
        self.bad_hi += sum(b.hi for b in bads)
        if bads:
            self.bad_files.add(name)
        path = self.data / name
        if self.fmt in ("csv", "jsonl"):
            lines = [self._encode(x, self.fmt) if good else x for good, x in items]
            header = HEADER + (b",code,flag" if keyed else b"")
            head = [header] if self.fmt == "csv" else []
            path.write_bytes(newline.join(head + lines) + newline)
        elif self.fmt == "parquet":
            schema = KEYED_PARQUET_SCHEMA if keyed else PARQUET_SCHEMA
            write_parquet(path, [x for _, x in items], schema, row_group_size=row_group_size)
        else:
            schema_a = KEYED_AVRO_SCHEMA if keyed else AVRO_SCHEMA
            self.avro(name, [x for _, x in items], schema_a, codec, sync_interval)
        return path

    def avro(
        self,
        name: str,
        rows: list[dict[str, Any]],
        schema: dict[str, Any] = AVRO_SCHEMA,
        codec: str = "null",
        sync_interval: int = 4000,
    ) -> tuple[bytes, bytes]:
        """Writes an Avro file (a seeded sync marker); returns (its bytes, the sync marker)."""
        sync = self.rng.randbytes(16)
        data = avro_bytes(rows, schema, codec, sync_interval, sync)
        (self.data / name).write_bytes(data)
        return data, sync

    # the job

    def _job(self, *, ledger: bool, output: str, dead: str) -> str:
        lines = [
            "[input]",
            f"path = {_toml(self.input_path)}",
            f"format = {_toml(self.fmt)}",
            'person = "person_id"',
            f"dead_letter = {_toml(dead)}",
        ]
        if self.person_type:
            lines.append(f"person_type = {_toml(self.person_type)}")
        if self.columns:
            table = ", ".join(f"{k} = {_toml(v)}" for k, v in self.columns.items())
            lines.append(f"columns = {{ {table} }}")
        lines += ["", "[budget]", "epsilon = 1.0", "delta = 1e-6", ""]
        lines += ["[output]", f"path = {_toml(output)}", 'format = "json"', ""]
        if ledger:
            lines += [
                "[ledger]",
                f"path = {_toml(self.ledger_rel)}",
                f"scope = {_toml(SCOPE)}",
                f"release_id = {_toml('fuzz-' + self.case.name)}",
                "",
            ]
        text = "\n".join(lines) + QUERIES
        if self.keyed:
            column, keys = self.keyed
            text += (
                f'\n[[queries]]\nname = "keyed"\nmetric = "count"\nby = ["{column}"]\n'
                "max_partitions_per_person = 1\nmax_rows_per_partition = 1\n"
                f"partitions = {_toml(keys)}\n"
            )
        return text

    def finish(self) -> Planted:
        job = self.dir / "job.toml"
        job.write_text(self._job(ledger=True, output=self.output, dead=self.dead))
        exact = None
        if self.exact:
            exact = self.dir / "exact.toml"
            exact.write_text(self._job(ledger=False, output="exact/release/", dead="exact/dead/"))
        bad = (self.bad_lo, self.bad_hi) if self.good is not None else None
        return Planted(
            root=self.root,
            job=job,
            exact_job=exact,
            output=self.dir / self.output,
            dead_letter=self.dir / self.dead,
            ledger=self.dir / self.ledger_rel,
            tmp=self.root / "tmp",
            good=self.good,
            bad=bad,
            bad_files=frozenset(self.bad_files),
            names=self.names,
            cwds=self.cwds,
            listed_keys=self.listed_keys,
            undo=self.undo,
        )


# --- file writers -----------------------------------------------------------------------------


def write_parquet(
    path: Path,
    rows: Sequence[dict[str, Any]],
    schema: pa.Schema,
    *,
    row_group_size: int | None = None,
    compression: str = "snappy",
) -> None:
    """Rows → a Parquet file; :class:`Raw` values land as invalid UTF-8 in a string column (the
    binary column's buffers reinterpreted: Arrow does not validate them)."""
    columns = {}
    for f in schema:
        values = [r.get(f.name) for r in rows]
        if pa.types.is_string(f.type) and any(isinstance(v, Raw) for v in values):
            raw = [
                v.data if isinstance(v, Raw) else None if v is None else v.encode() for v in values
            ]
            b = pa.array(raw, pa.binary())
            columns[f.name] = pa.Array.from_buffers(pa.string(), len(b), b.buffers(), b.null_count)
        else:
            columns[f.name] = pa.array(values, f.type)
    table = pa.table(columns, schema=schema)
    pq.write_table(table, path, row_group_size=row_group_size, compression=compression)


def avro_bytes(
    rows: Sequence[dict[str, Any]],
    schema: dict[str, Any],
    codec: str,
    sync_interval: int,
    sync: bytes,
) -> bytes:
    """Rows → Avro bytes; a :class:`Raw` value is written as a placeholder string of the same
    length and patched afterwards (an Avro string is a length and bytes: no check of UTF-8)."""
    patches: dict[bytes, bytes] = {}
    out = []
    for r in rows:
        row = {}
        for k, v in r.items():
            if isinstance(v, Raw):
                placeholder = f"@PH{len(patches):05d}@".ljust(len(v.data), "_")
                assert len(placeholder) == len(v.data), "a Raw value needs ≥ 9 bytes"
                patches[placeholder.encode()] = v.data
                row[k] = placeholder
            else:
                row[k] = v
        out.append(row)
    assert codec == "null" or not patches, "Raw values are patched into uncompressed blocks only"
    buf = io.BytesIO()
    fastavro.writer(
        buf, fastavro.parse_schema(schema), out, codec=codec, sync_interval=sync_interval,
        sync_marker=sync,
    )  # fmt: skip
    data = buf.getvalue()
    for marker, raw in patches.items():
        assert data.count(marker) == 1
        data = data.replace(marker, raw)
    return data


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos


def _zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def avro_blocks(data: bytes, sync: bytes) -> list[tuple[int, int, int, int]]:
    """(block start, data start, data end, object count) of every data block."""
    pos = data.index(sync) + 16  # the header ends with the sync marker
    blocks = []
    while pos < len(data):
        start = pos
        count, pos = _varint(data, pos)
        size, pos = _varint(data, pos)
        blocks.append((start, pos, pos + size, count))
        pos += size + 16
    return blocks


def parquet_data_end(data: bytes) -> int:
    """Where a Parquet file's footer (file metadata) starts."""
    footer = int.from_bytes(data[-8:-4], "little")
    return len(data) - 8 - footer


# --- row faults -----------------------------------------------------------------------------

Atom = Callable[[CaseDir], list[Bad]]


def _line(*fields: bytes) -> Bad:
    return Bad(b",".join(fields))


CSV_ATOMS: dict[str, Atom] = {
    "too-few-fields": lambda cd: [_line(cd.c, b"a.example")],
    "too-many-fields": lambda cd: [_line(b"u1", cd.c + b".example", b"1.0", b"9")],
    "unterminated-quote": lambda cd: [_line(cd.c, b'"a.example', b"1.0")],
    "invalid-utf8-person": lambda cd: [_line(cd.c + b"\xff\xfe", b"a.example", b"1.0")],
    "invalid-utf8-key": lambda cd: [_line(b"u1", cd.c + b"\xc3\x28.example", b"1.0")],
    "invalid-utf8-value": lambda cd: [_line(cd.c, b"a.example", b"1\xff")],
    "surrogate-bytes-key": lambda cd: [_line(b"u1", cd.c + b"\xed\xa0\x80", b"1.0")],
    "overlong-utf8-key": lambda cd: [_line(b"u1", cd.c + b"\xc0\xaf", b"1.0")],
    "empty-person": lambda cd: [_line(b"", cd.c + b".example", b"1.0")],
    "empty-key": lambda cd: [_line(cd.c, b"", b"1.0")],
    "empty-value": lambda cd: [_line(cd.c, b"a.example", b"")],
    "nan-value": lambda cd: [_line(cd.c, b"a.example", b"nan"), _line(cd.c, b"a.example", b"NaN")],
    "non-numeric-value": lambda cd: [
        _line(cd.c, b"a.example", v) for v in (b"abc", b"--1", b'"1,5"', b"1.2.3")
    ],
    "ragged-non-utf8": lambda cd: [_line(cd.c + b"\xff", b"a.example")],
}

# with person_type = "int": ids that are not integers in the int64 range (the canary is the key)
CSV_INT_ATOMS: dict[str, Atom] = {
    "person-text": lambda cd: [_line(cd.c, b"a.example", b"1.0")],
    "person-float-text": lambda cd: [_line(b"1.0", cd.c, b"1.0")],
    "person-leading-space": lambda cd: [_line(b" 7", cd.c, b"1.0")],
    "person-int64-overflow": lambda cd: [_line(b"99999999999999999999", cd.c, b"1.0")],
    "person-exponent": lambda cd: [_line(b"1e3", cd.c, b"1.0")],
    "person-hex": lambda cd: [_line(b"0x1f", cd.c, b"1.0")],
}


def _j(cd: CaseDir, **over: Any) -> Bad:
    """A JSONL object: person = the canary, a good key and value, unless overridden."""
    row = {"person_id": cd.canary, "domain": "a.example", "duration_s": 1.0, **over}
    return Bad(json.dumps({k: v for k, v in row.items() if v is not MISSING}).encode())


def _jraw(cd: CaseDir, person: bytes, domain: bytes = b'"a.example"', value: bytes = b"1.0") -> Bad:
    return Bad(b'{"person_id": %s, "domain": %s, "duration_s": %s}' % (person, domain, value))


def _pretty(cd: CaseDir, obj: Any) -> Bad:
    text = json.dumps(obj, indent=2).encode()
    return Bad(text, 1, len(text.splitlines()))


def _bad_key(cd: CaseDir) -> str:
    return f"{cd.canary}-bad.example"


JSONL_ATOMS: dict[str, Atom] = {
    "array-line": lambda cd: [Bad(b'[1, "' + cd.c + b'"]')],
    "string-line": lambda cd: [Bad(json.dumps(cd.canary).encode())],
    "null-line": lambda cd: [Bad(b"null")],
    "number-line": lambda cd: [Bad(b"42")],
    "invalid-json": lambda cd: [Bad(b'{"person_id": "' + cd.c + b'", "domain"')],
    "two-objects-one-line": lambda cd: [Bad(_j(cd).item + _j(cd).item)],
    "trailing-garbage": lambda cd: [Bad(_j(cd).item + b" x")],
    "deeply-nested-key": lambda cd: [
        _jraw(cd, b'"' + cd.c + b'"', b"[" * 100_000 + b"]" * 100_000)
    ],
    "deeply-nested-object-key": lambda cd: [
        _jraw(cd, b'"' + cd.c + b'"', b'{"a": ' * 5_000 + b"1" + b"}" * 5_000)
    ],
    "lone-surrogate-key": lambda cd: [_jraw(cd, b'"' + cd.c + b'"', b'"\\ud800x"')],
    "lone-surrogate-person": lambda cd: [_jraw(cd, b'"' + cd.c + b'\\udfff"')],
    "invalid-utf8-person": lambda cd: [_jraw(cd, b'"' + cd.c + b'\xff"')],
    "invalid-utf8-key": lambda cd: [_jraw(cd, b'"u1"', b'"' + cd.c + b'\xc3\x28"')],
    "null-person": lambda cd: [_j(cd, person_id=None, domain=_bad_key(cd))],
    "missing-person": lambda cd: [_j(cd, person_id=MISSING, domain=_bad_key(cd))],
    "empty-person": lambda cd: [_j(cd, person_id="", domain=_bad_key(cd))],
    "person-int": lambda cd: [_j(cd, person_id=1, domain=_bad_key(cd))],
    "person-float": lambda cd: [_j(cd, person_id=1.5, domain=_bad_key(cd))],
    "person-bool": lambda cd: [_j(cd, person_id=True, domain=_bad_key(cd))],
    "person-list": lambda cd: [_j(cd, person_id=[cd.canary])],
    "person-object": lambda cd: [_j(cd, person_id={"id": cd.canary})],
    "null-key": lambda cd: [_j(cd, domain=None)],
    "missing-key": lambda cd: [_j(cd, domain=MISSING)],
    "key-int": lambda cd: [_j(cd, domain=5)],
    "key-bool": lambda cd: [_j(cd, domain=False)],
    "key-object": lambda cd: [_j(cd, domain={"x": cd.canary})],
    "key-list": lambda cd: [_j(cd, domain=[cd.canary])],
    "nan-value": lambda cd: [_j(cd, duration_s=math.nan)],
    "null-value": lambda cd: [_j(cd, duration_s=None)],
    "missing-value": lambda cd: [_j(cd, duration_s=MISSING)],
    "string-value": lambda cd: [_j(cd, duration_s="abc")],
    "numeric-string-value": lambda cd: [_j(cd, duration_s="12.5")],
    "bool-value": lambda cd: [_j(cd, duration_s=True)],
    "object-value": lambda cd: [_j(cd, duration_s={"s": 1})],
    "duplicate-keys": lambda cd: [_jraw(cd, b'"u1", "person_id": "' + cd.c + b'"')],
    "pretty-printed-object": lambda cd: [
        _pretty(cd, {"person_id": cd.canary, "domain": "a.example", "duration_s": 1.0})
    ],
    "pretty-printed-array": lambda cd: [
        _pretty(cd, [{"person_id": cd.canary, "domain": d, "duration_s": 2.0} for d in DOMAINS])
    ],
}


def _p(cd: CaseDir, **over: Any) -> Bad:
    """A Parquet/Avro row: person = the canary, a good key and value, unless overridden."""
    return Bad({"person_id": cd.canary, "domain": "a.example", "duration_s": 1.0, **over})


PARQUET_ATOMS: dict[str, Atom] = {
    "null-person": lambda cd: [_p(cd, person_id=None, domain=_bad_key(cd))],
    "empty-person": lambda cd: [_p(cd, person_id="", domain=_bad_key(cd))],
    "invalid-utf8-person": lambda cd: [_p(cd, person_id=Raw(cd.c + b"\xff\xfe"))],
    "overlong-utf8-person": lambda cd: [_p(cd, person_id=Raw(cd.c + b"\xc0\xaf"))],
    "invalid-utf8-key": lambda cd: [_p(cd, person_id="u1", domain=Raw(cd.c + b"\xc3\x28"))],
    "surrogate-bytes-key": lambda cd: [_p(cd, person_id="u1", domain=Raw(cd.c + b"\xed\xa0\x80"))],
    "null-key": lambda cd: [_p(cd, domain=None)],
    "nan-value": lambda cd: [_p(cd, duration_s=math.nan)],
    "null-value": lambda cd: [_p(cd, duration_s=None)],
}

AVRO_ATOMS: dict[str, Atom] = {
    **PARQUET_ATOMS,
    "long-person": lambda cd: [_p(cd, person_id=12345, domain=_bad_key(cd))],
    "string-value": lambda cd: [_p(cd, duration_s=cd.canary)],
    "numeric-string-value": lambda cd: [_p(cd, duration_s="12.5")],
}

ATOMS: dict[str, dict[str, Atom]] = {
    "csv": CSV_ATOMS,
    "jsonl": JSONL_ATOMS,
    "parquet": PARQUET_ATOMS,
    "avro": AVRO_ATOMS,
}


def _null_key(cd: CaseDir) -> list[Bad]:
    """One row with a null (CSV: empty) key."""
    return ATOMS[cd.fmt]["empty-key" if cd.fmt == "csv" else "null-key"](cd)


def _rows_plant(
    atoms: Sequence[str],
    n_good: int,
    *,
    table: dict[str, Atom] | None = None,
    person_type: str | None = None,
    files: int = 2,
    odd: bool = False,
    newline: bytes = b"\n",
) -> Callable[[CaseDir], None]:
    """Good rows over ``files`` files; the atoms' bad rows shuffled into the last one."""

    def plant(cd: CaseDir) -> None:
        cd.person_type, cd.odd_values = person_type, odd
        found = table or ATOMS[cd.fmt]
        bads = [b for a in atoms for b in found[a](cd)]
        per = max(1, n_good // files)
        for i in range(files):
            last = i == files - 1
            n = n_good - per * (files - 1) if last else per
            cd.rows_file(f"part-{i}.{cd.fmt}", n, bads if last else (), newline=newline)

    return plant


def _random_rows_plant(cd: CaseDir) -> None:
    """Seeded: 1–3 files, 20–800 good rows each, 1–12 atoms drawn with replacement, random
    Parquet row groups, Avro codecs and block sizes, CSV line endings, odd good values."""
    rng = cd.rng
    cd.odd_values = cd.fmt != "jsonl"
    names = sorted(ATOMS[cd.fmt])
    files = rng.randint(1, 3)
    for i in range(files):
        atoms = [rng.choice(names) for _ in range(rng.randint(1, 12))]
        bads = [b for a in atoms for b in ATOMS[cd.fmt][a](cd)]
        has_raw = any(isinstance(v, Raw) for b in bads if isinstance(b.item, dict)
                      for v in b.item.values())  # fmt: skip
        cd.rows_file(
            f"part-{i}.{cd.fmt}", rng.randint(20, 800), bads,
            newline=rng.choice([b"\n", b"\r\n"]),
            row_group_size=rng.choice([None, 7, 64]),
            codec="null" if has_raw else rng.choice(["null", "deflate"]),
            sync_interval=rng.choice([200, 4000, 16000]),
        )  # fmt: skip


def _jsonl_missing_column_plant(cd: CaseDir) -> None:
    """No row of the second file has a ``domain`` field: JSONL has no header, so each row is a
    dead letter (a null key), not a schema error."""
    cd.rows_file("part-0.jsonl", 20)
    lines = [_j(cd, person_id=f"{cd.canary}-{i}", domain=MISSING) for i in range(6)]
    cd.rows_file("part-1.jsonl", 0, lines)


def _long_line_plant(cd: CaseDir) -> None:
    """A JSONL line over 8 MiB (the reader's line limit) among good rows."""
    big = Bad(_jraw(cd, b'"' + cd.c + b'"', b'"' + b"x" * (9 * MIB) + b'"').item)
    cd.rows_file("part-0.jsonl", 40, [big])


def _ragged_after_mib_plant(cd: CaseDir) -> None:
    """Issue 13 item 1: over 1 MiB of good rows (an unused wide column), then a row with the
    wrong number of fields and bytes that are not UTF-8, then more good rows."""
    note = b"n" * 2000
    good = cd.good_rows(700)
    lines = [b"person_id,domain,duration_s,note"]
    lines += [cd._encode(r, "csv") + b"," + note for r in good[:650]]
    lines.append(b"u1," + cd.c + b"\xff\xfe")  # 2 fields of 4
    lines += [cd._encode(r, "csv") + b"," + note for r in good[650:]]
    data = b"\n".join(lines) + b"\n"
    assert data.index(cd.c + b"\xff") > MIB
    (cd.data / "part-0.csv").write_bytes(data)
    cd.bad_lo = cd.bad_hi = 1
    cd.bad_files.add("part-0.csv")


def _ragged_first_mib_plant(cd: CaseDir) -> None:
    """Issue 13 item 6: one ragged non-UTF-8 row near the start of a CSV file: one dead letter,
    not a refused file."""
    good = cd.good_rows(60)
    lines = [HEADER] + [cd._encode(r, "csv") for r in good]
    lines.insert(3, cd.c + b"\xff,a.example")
    (cd.data / "part-0.csv").write_bytes(b"\n".join(lines) + b"\n")
    cd.bad_lo = cd.bad_hi = 1
    cd.bad_files.add("part-0.csv")


# --- zero-row files -------------------------------------------------------------------------


def _zero_rows_plant(kinds: Sequence[str], *, with_good: bool = True) -> Callable[[CaseDir], None]:
    """Files without rows (kinds: header-only, header-only-crlf, header-no-newline, zero-bytes,
    zero-rows), beside a file of good rows unless ``with_good`` is false."""

    def plant(cd: CaseDir) -> None:
        if with_good:
            cd.rows_file(f"part-0.{cd.fmt}", 30)
        for i, kind in enumerate(kinds, start=1):
            path = cd.data / f"part-{i}.{cd.fmt}"
            if kind == "zero-bytes":
                path.write_bytes(b"")
            elif kind == "header-only":
                path.write_bytes(HEADER + b"\n")
            elif kind == "header-only-crlf":
                path.write_bytes(HEADER + b"\r\n")
            elif kind == "header-no-newline":
                path.write_bytes(HEADER)
            elif cd.fmt == "parquet":
                write_parquet(path, [], PARQUET_SCHEMA)
            else:
                cd.avro(path.name, [])

    return plant


# --- file-level faults ----------------------------------------------------------------------


def _companion(cd: CaseDir) -> None:
    """A good file beside the faulty one (its rows hold the canary in a key)."""
    cd.rows_file(f"part-0.{cd.fmt}", 20)


def _avro_fault(kind: str) -> Callable[[CaseDir], None]:
    def plant(cd: CaseDir) -> None:
        _companion(cd)
        codec = "deflate" if kind == "corrupt-deflate-block" else "null"
        rows = cd.good_rows(300)
        for r in rows[:5]:
            r["domain"] = f"{cd.canary}-{r['domain']}"
        data, sync = cd.avro("part-1.avro", rows, codec=codec, sync_interval=600)
        blocks = avro_blocks(data, sync)
        assert len(blocks) >= 3
        start, dstart, dend, count = blocks[1]
        if kind == "truncated-mid-block":
            data = data[: dstart + (dend - dstart) // 2]
        elif kind == "bad-sync-marker":
            data = data[:dend] + bytes(b ^ 0x5A for b in sync) + data[dend + 16 :]
        elif kind == "corrupt-deflate-block":
            data = data[:dstart] + b"\xff" * 4 + data[dstart + 4 :]  # reserved block type
        elif kind == "block-count-too-large":
            _, pos = _varint(data, start)
            data = data[:start] + _zigzag(count * 1000 + 7) + data[pos:]
        elif kind == "negative-block-size":
            _, pos = _varint(data, start)
            _, pos2 = _varint(data, pos)
            data = data[:pos] + _zigzag(-(10**9)) + data[pos2:]
        elif kind == "garbage-after-header":
            head = blocks[0][0]
            data = data[:head] + cd.rng.randbytes(len(data) - head)
        else:
            raise AssertionError(kind)
        (cd.data / "part-1.avro").write_bytes(data)
        cd.expect_exit_2("part-1.avro")

    return plant


def _parquet_fault(kind: str) -> Callable[[CaseDir], None]:
    def plant(cd: CaseDir) -> None:
        _companion(cd)
        rows = cd.good_rows(400)
        for r in rows[:5]:
            r["domain"] = f"{cd.canary}-{r['domain']}"
        path = cd.data / "part-1.parquet"
        compression = "snappy" if kind == "garbage-pages-snappy" else "none"
        write_parquet(path, rows, PARQUET_SCHEMA, compression=compression)
        data = path.read_bytes()
        end = parquet_data_end(data)
        if kind in ("garbage-pages-intact-footer", "garbage-pages-snappy"):
            data = data[:4] + cd.rng.randbytes(end - 4) + data[end:]
        elif kind == "garbage-last-column-pages":
            mid = 4 + (end - 4) * 2 // 3
            data = data[:mid] + cd.rng.randbytes(end - mid) + data[end:]
        elif kind == "truncated-footer":
            data = data[:-100]
        elif kind == "not-parquet":
            data = cd.rng.randbytes(len(data))
        else:
            raise AssertionError(kind)
        path.write_bytes(data)
        cd.expect_exit_2("part-1.parquet")

    return plant


def _duplicate_column_plant(cd: CaseDir) -> None:
    _companion(cd)
    name = f"part-1.{cd.fmt}"
    path = cd.data / name
    rows = cd.good_rows(10)
    if cd.fmt == "parquet":
        arrays = [pa.array([r[c] for r in rows]) for c in ("person_id", "domain", "duration_s")]
        arrays.append(pa.array([cd.canary] * len(rows)))
        names = ["person_id", "domain", "duration_s", "domain"]
        pq.write_table(pa.Table.from_arrays(arrays, names=names), path)
    elif cd.fmt == "csv":
        lines = [HEADER + b",domain"] + [cd._encode(r, "csv") + b"," + cd.c for r in rows]
        path.write_bytes(b"\n".join(lines) + b"\n")
    else:  # avro: a fifth field renamed to "domain" in the header's schema (same length)
        schema = _avro_schema({"name": "zzzzzz", "type": "string"})
        data, _ = cd.avro(name, [{**r, "zzzzzz": cd.canary} for r in rows], schema)
        assert data.count(b'"zzzzzz"') == 1
        path.write_bytes(data.replace(b'"zzzzzz"', b'"domain"'))
    cd.expect_exit_2(name, "domain")


def _missing_column_plant(cd: CaseDir) -> None:
    _companion(cd)
    name = f"part-1.{cd.fmt}"
    path = cd.data / name
    rows = [{"person_id": cd.canary, "duration_s": 1.0}] * 5
    if cd.fmt == "parquet":
        schema = pa.schema([("person_id", pa.string()), ("duration_s", pa.float64())])
        write_parquet(path, rows, schema)
    elif cd.fmt == "csv":
        path.write_bytes(b"person_id,duration_s\n" + b"".join(cd.c + b",1.0\n" for _ in rows))
    else:
        schema = {
            "type": "record",
            "name": "row",
            "fields": [
                {"name": "person_id", "type": "string"},
                {"name": "duration_s", "type": "double"},
            ],
        }
        cd.avro(name, rows, schema)  # fmt: skip
    cd.expect_exit_2(name, "domain")


def _wrong_type_plant(cd: CaseDir) -> None:
    """A key column of a type no key may have (Parquet: float; Avro: double)."""
    _companion(cd)
    name = f"part-1.{cd.fmt}"
    rows = [{"person_id": cd.canary, "domain": 0.5, "duration_s": 1.0}] * 5
    if cd.fmt == "parquet":
        schema = pa.schema(
            [("person_id", pa.string()), ("domain", pa.float64()), ("duration_s", pa.float64())]
        )
        write_parquet(cd.data / name, rows, schema)
    else:
        schema_a = {"type": "record", "name": "row", "fields": [
            {"name": "person_id", "type": "string"}, {"name": "domain", "type": "double"},
            {"name": "duration_s", "type": "double"}]}  # fmt: skip
        cd.avro(name, rows, schema_a)
    cd.expect_exit_2(name, "domain")


def _csv_header_plant(kind: str) -> Callable[[CaseDir], None]:
    def plant(cd: CaseDir) -> None:
        _companion(cd)
        if kind == "not-utf8":
            header = b"person_id,dom\xffain,duration_s"
        else:  # over 1 MiB, no line break
            header = b"person_id,domain,duration_s," + b"x" * (MIB + 10)
        (cd.data / "part-1.csv").write_bytes(header + b"\n" + cd.c + b",a.example,1.0\n")
        cd.expect_exit_2("part-1.csv")

    return plant


# --- files that are not regular files -------------------------------------------------------


def _special_plant(kind: str) -> Callable[[CaseDir], None]:
    def plant(cd: CaseDir) -> None:
        _companion(cd)
        name = f"part-1.{cd.fmt}"
        path = cd.data / name
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
            (path / f"inner.{cd.fmt}").write_bytes(cd.c)
        elif kind == "dangling-symlink":
            os.symlink(f"missing-target.{cd.fmt}", path)
        elif kind == "symlink-loop":
            os.symlink(name, cd.data / "loop-b")
            os.symlink("loop-b", path)
        elif kind == "unreadable":
            cd.rows_file(name, 10)
            cd.good = None
            path.chmod(0)
            cd.undo.append(lambda: path.chmod(0o644))
        else:
            raise AssertionError(kind)
        cd.expect_exit_2(name)

    return plant


# --- public-key files (issue 13 item 4) -----------------------------------------------------

# (name, by column, key file, content with {C} for the canary, allowed exits, whether the
# message must name the column: faults of one key's value do; faults of the whole file need not)
KEY_FILES: list[tuple[str, str, str, bytes, tuple[int, ...], bool]] = [
    ("csv-not-utf8", "domain", "keys.csv", b"domain\na.example\n{C}\xff\xfe\n", (2,), False),
    ("json-not-utf8", "domain", "keys.json", b'["a.example", "{C}\xff"]', (2,), False),
    ("csv-bom", "domain", "keys.csv", b"\xef\xbb\xbfdomain\na.example\nb.example\n", (0, 2),
     False),
    ("json-bom", "domain", "keys.json", b'\xef\xbb\xbf["a.example", "b.example"]', (0, 2), False),
    ("csv-field-over-128kib", "domain", "keys.csv", b"domain\na.example\n" + b"{C}" * 8000, (2,),
     False),
    ("json-nested-100000-deep", "domain", "keys.json",
     b'["{C}", ' + b"[" * 100_000 + b"]" * 100_000 + b"]", (2,), False),
    ("json-5000-digit-int", "code", "keys.json", b"[1, " + b"9" * 5000 + b', "{C}"]', (2,), False),
    ("csv-5000-digit-int", "code", "keys.csv", b"code\n1\n" + b"9" * 5000 + b"\n{C}\n", (2,),
     True),
    ("json-object-as-key", "domain", "keys.json", b'["a.example", {"domain": {"{C}": 1}}]', (2,),
     True),
    ("json-list-as-key", "domain", "keys.json", b'["a.example", [["{C}"]]]', (2,), True),
    ("json-int-column-text", "code", "keys.json", b'[1, "{C}"]', (2,), True),
    ("csv-int-column-text", "code", "keys.csv", b"code\n1\n{C}\n", (2,), True),
    ("json-int-column-1.5", "code", "keys.json", b'[1, 1.5, "{C}"]', (2,), True),
    ("csv-int-column-1.5", "code", "keys.csv", b"code\n1\n1.5\n{C}\n", (2,), True),
    ("json-int-column-1e3", "code", "keys.json", b'[1, 1e3, "{C}"]', (2,), True),
    ("csv-int-column-1e3", "code", "keys.csv", b"code\n1\n1e3\n{C}\n", (2,), True),
    ("json-int-column-2pow70", "code", "keys.json", b'[1, 1180591620717411303424, "{C}"]', (2,),
     True),
    ("csv-int-column-2pow70", "code", "keys.csv", b"code\n1\n1180591620717411303424\n{C}\n",
     (2,), True),
    ("csv-bool-column-maybe", "flag", "keys.csv", b"flag\ntrue\nmaybe\n{C}\n", (2,), True),
    ("json-bool-column-maybe", "flag", "keys.json", b'[true, "maybe", "{C}"]', (2,), True),
    ("json-bool-column-2", "flag", "keys.json", b'[true, 2, "{C}"]', (2,), True),
    ("json-nan-string-column", "domain", "keys.json", b'["a.example", NaN, "{C}"]', (2,), True),
    ("json-infinity-string-column", "domain", "keys.json", b'["a.example", Infinity, "{C}"]',
     (2,), True),
    ("json-nan-int-column", "code", "keys.json", b'[1, NaN, "{C}"]', (2,), True),
    ("json-number-for-string-column", "domain", "keys.json", b'["a.example", 5, "{C}"]', (2,),
     True),
    ("csv-ragged-row", "domain", "keys.csv", b"domain\na.example\nb.example,{C}\n", (2,), False),
    ("csv-header-only", "domain", "keys.csv", b"domain\n", (2,), False),
    ("json-not-a-list", "domain", "keys.json", b'{"domain": "{C}"}', (2,), False),
    ("missing-file", "domain", "keys.csv", b"", (2,), False),
]  # fmt: skip
_KEY_TYPES = {"code": "int", "flag": "bool"}


def _keys_plant(name: str) -> Callable[[CaseDir], None]:
    _, column, file, content, exits, named = next(k for k in KEY_FILES if k[0] == name)

    def plant(cd: CaseDir) -> None:
        if column in _KEY_TYPES and cd.fmt in ("csv", "jsonl"):
            cd.columns[column] = _KEY_TYPES[column]
        cd.rows_file(f"part-0.{cd.fmt}", 30, keyed=True)
        if name != "missing-file":
            (cd.dir / file).write_bytes(content.replace(b"{C}", cd.c))
        cd.keyed = (column, file)
        if 0 in exits:  # a byte-order mark may be accepted: then the keys are exactly these
            cd.unknown_rows()
            cd.listed_keys = (column, frozenset({"a.example", "b.example"}))
        else:
            cd.expect_exit_2(file, column) if named else cd.expect_exit_2(file)

    return plant


# --- output locations and the ledger (issue 13 item 5) --------------------------------------


def _location_plant(kind: str) -> Callable[[CaseDir], None]:
    def plant(cd: CaseDir) -> None:
        cd.rows_file(f"part-0.{cd.fmt}", 30, _null_key(cd))
        if kind == "output-dir-read-only":
            out = cd.dir / "release"
            out.mkdir()
            out.chmod(0o555)
            cd.undo.append(lambda: out.chmod(0o755))
            cd.expect_exit_2("output.path")
        elif kind == "output-parent-read-only":
            cd.output = "pub/release/"
            pub = cd.dir / "pub"
            (pub / "release").mkdir(parents=True)
            pub.chmod(0o555)
            cd.undo.append(lambda: pub.chmod(0o755))
            cd.expect_exit_2("output.path")
        elif kind == "output-path-under-regular-file":
            (cd.dir / "blocker").write_bytes(b"")
            cd.output = "blocker/release/"
            cd.expect_exit_2("output.path")
        elif kind == "dead-letter-inside-output":
            cd.dead = "release/dead/"
            cd.expect_exit_2("input.dead_letter")
        elif kind == "dead-letter-under-regular-file":
            (cd.dir / "blocker").write_bytes(b"")
            cd.dead = "blocker/dead/"
            cd.expect_exit_2("input.dead_letter")
        elif kind == "dead-letter-read-only":
            dead = cd.dir / "ops" / "dead"
            dead.mkdir(parents=True)
            dead.chmod(0o555)
            cd.undo.append(lambda: dead.chmod(0o755))
            cd.expect_exit_2("input.dead_letter")
        elif kind == "ledger-inside-output":
            (cd.dir / "release").mkdir()
            cd.ledger_rel = "release/ledger.sqlite"
            cd.expect_exit_2("ledger.path")
        else:
            raise AssertionError(kind)

    return plant


# --- paths (issue 13 item 7) ----------------------------------------------------------------


def _relative_glob_plant(cd: CaseDir) -> None:
    """``path = "*.<ext>"``: data files beside the job file; run from elsewhere and from there."""
    cd.input_path = f"*.{cd.fmt}"
    cd.data = cd.dir
    cd.rows_file(f"part-0.{cd.fmt}", 20)
    cd.rows_file(f"part-1.{cd.fmt}", 20, _null_key(cd))
    cd.cwds = (cd.elsewhere, cd.dir)


# --- byte mutations (full tier) -------------------------------------------------------------


def _mutation_plant(cd: CaseDir) -> None:
    """A file of good rows and a few bad ones, then 1–4 seeded byte edits: flips, overwritten or
    deleted ranges, inserted or duplicated ranges, a truncation. Exit 0 or 2, never a crash."""
    rng = cd.rng
    cd.rows_file(f"part-0.{cd.fmt}", 30)
    names = sorted(n for n, a in ATOMS[cd.fmt].items() if "utf8" not in n and "surrogate" not in n)
    bads = [b for a in rng.sample(names, 3) for b in ATOMS[cd.fmt][a](cd)]
    path = cd.rows_file(f"part-1.{cd.fmt}", rng.randint(50, 400), bads, codec="null")
    data = bytearray(path.read_bytes())
    for _ in range(rng.randint(1, 4)):
        n = len(data)
        i = rng.randrange(n)
        width = rng.randint(1, 64)
        op = rng.choice(["flip", "overwrite", "delete", "insert", "duplicate", "truncate"])
        if op == "flip":
            data[i] ^= 1 << rng.randrange(8)
        elif op == "overwrite":
            data[i : i + width] = rng.randbytes(len(data[i : i + width]))
        elif op == "delete":
            del data[i : i + width]
        elif op == "insert":
            data[i:i] = rng.randbytes(width)
        elif op == "duplicate":
            data[i:i] = data[i : i + width]
        else:
            del data[max(1, i) :]
    path.write_bytes(bytes(data))
    cd.unknown_rows()


# --- the tiers ------------------------------------------------------------------------------


def _rows(group: str, fmt: str, name: str, atoms: Sequence[str], n: int, **kw: Any) -> Case:
    return Case(group, f"{fmt}-{name}", fmt, (0,), _rows_plant(atoms, n, **kw))


def _keys(name: str, fmt: str, *, suffix: bool = False) -> Case:
    exits = next(k[4] for k in KEY_FILES if k[0] == name)
    label = f"keys-{name}" + (f"-{fmt}-input" if suffix else "")
    return Case("item4", label, fmt, exits, _keys_plant(name))


def small_cases() -> list[Case]:
    """The fast tier: every item of issue 13 and every clause of the contract, a few faults per
    case, small files."""
    n = 40
    return [
        # item 1: a private row in stderr (ragged + not UTF-8 after the first MiB)
        Case("item1", "csv-ragged-non-utf8-row-after-first-mib", "csv", (0,),
             _ragged_after_mib_plant),
        # item 2: corrupt files that pass the schema check; invalid UTF-8 in Parquet strings
        Case("item2", "avro-truncated-mid-block", "avro", (2,), _avro_fault("truncated-mid-block")),
        Case("item2", "avro-bad-sync-marker", "avro", (2,), _avro_fault("bad-sync-marker")),
        Case("item2", "avro-corrupt-deflate-block", "avro", (2,),
             _avro_fault("corrupt-deflate-block")),
        Case("item2", "parquet-garbage-pages-intact-footer", "parquet", (2,),
             _parquet_fault("garbage-pages-intact-footer")),
        _rows("item2", "parquet", "invalid-utf8-person-and-key",
              ["invalid-utf8-person", "invalid-utf8-key", "surrogate-bytes-key"], n),
        # item 3: duplicate column names
        Case("item3", "parquet-duplicate-column-name", "parquet", (2,), _duplicate_column_plant),
        Case("item3", "csv-duplicate-column-name", "csv", (2,), _duplicate_column_plant),
        # item 4: malformed public-key files (input formats rotate)
        _keys("csv-not-utf8", "csv"),
        _keys("csv-field-over-128kib", "jsonl"),
        _keys("json-nested-100000-deep", "parquet"),
        _keys("json-5000-digit-int", "parquet"),
        _keys("json-object-as-key", "avro"),
        _keys("json-int-column-2pow70", "csv"),
        _keys("csv-bool-column-maybe", "parquet"),
        _keys("json-nan-string-column", "jsonl"),
        # item 5: output locations checked before the charge
        Case("item5", "output-dir-read-only", "csv", (2,),
             _location_plant("output-dir-read-only"), runner="nodac"),
        Case("item5", "output-path-under-regular-file", "csv", (2,),
             _location_plant("output-path-under-regular-file")),
        Case("item5", "dead-letter-inside-output", "jsonl", (2,),
             _location_plant("dead-letter-inside-output")),
        # item 6: zero-row files; one ragged non-UTF-8 row in the first MiB
        Case("item6", "csv-header-only-and-zero-byte-files", "csv", (0,),
             _zero_rows_plant(["header-only", "zero-bytes"])),
        Case("item6", "jsonl-zero-byte-file", "jsonl", (0,), _zero_rows_plant(["zero-bytes"])),
        Case("item6", "parquet-zero-row-file", "parquet", (0,), _zero_rows_plant(["zero-rows"])),
        Case("item6", "avro-zero-row-file", "avro", (0,), _zero_rows_plant(["zero-rows"])),
        Case("item6", "csv-ragged-non-utf8-row-in-first-mib", "csv", (0,),
             _ragged_first_mib_plant),
        # item 7: non-regular files in the glob, relative globs, pretty-printed JSON
        Case("item7", "csv-fifo-in-glob", "csv", (2,), _special_plant("fifo"),
             runner="subprocess"),
        Case("item7", "csv-directory-in-glob", "csv", (2,), _special_plant("directory")),
        Case("item7", "csv-dangling-symlink-in-glob", "csv", (2,),
             _special_plant("dangling-symlink")),
        Case("item7", "csv-relative-glob-from-job-dir-and-elsewhere", "csv", (0,),
             _relative_glob_plant),
        _rows("item7", "jsonl", "pretty-printed-json",
              ["pretty-printed-object", "pretty-printed-array"], n),
        # the rest of the contract: row faults in every format, unreadable and incomplete files
        _rows("row", "csv", "wrong-field-count-and-open-quote",
              ["too-few-fields", "too-many-fields", "unterminated-quote"], n),
        _rows("row", "csv", "invalid-utf8-fields",
              ["invalid-utf8-person", "invalid-utf8-key", "invalid-utf8-value",
               "surrogate-bytes-key", "overlong-utf8-key"], n),
        _rows("row", "csv", "empty-nan-non-numeric-fields",
              ["empty-person", "empty-key", "empty-value", "nan-value", "non-numeric-value"], n),
        _rows("row", "csv", "int-person-type-mismatch", sorted(CSV_INT_ATOMS), n,
              table=CSV_INT_ATOMS, person_type="int"),
        _rows("row", "jsonl", "not-an-object-or-not-json",
              ["array-line", "string-line", "null-line", "number-line", "invalid-json",
               "two-objects-one-line", "trailing-garbage"], n),
        _rows("row", "jsonl", "deeply-nested-values",
              ["deeply-nested-key", "deeply-nested-object-key"], n),
        _rows("row", "jsonl", "lone-surrogates-and-invalid-utf8",
              ["lone-surrogate-key", "lone-surrogate-person", "invalid-utf8-person",
               "invalid-utf8-key"], n),
        _rows("row", "jsonl", "null-missing-empty-fields",
              ["null-person", "missing-person", "empty-person", "null-key", "missing-key",
               "null-value", "missing-value"], n),
        _rows("row", "jsonl", "wrong-typed-values-nan-duplicate-keys",
              ["person-int", "person-bool", "person-list", "person-object", "key-int",
               "key-object", "key-list", "nan-value", "string-value", "numeric-string-value",
               "bool-value", "object-value", "duplicate-keys"], n),
        _rows("row", "parquet", "null-empty-nan", ["null-person", "empty-person", "null-key",
              "nan-value", "null-value"], n),
        _rows("row", "avro", "invalid-utf8-null-nan-union-mismatch", sorted(AVRO_ATOMS), n),
        Case("file", "csv-unreadable-file", "csv", (2,), _special_plant("unreadable"),
             runner="nodac"),
        Case("file", "csv-missing-column", "csv", (2,), _missing_column_plant),
    ]  # fmt: skip


def full_cases() -> list[Case]:
    """The slow tier: every fault alone in every format it applies to (300 good rows), seeded
    random mixes of row faults (up to 2,400 rows), seeded byte mutations, every key-file fault
    with every input format, every output-location fault."""
    cases: list[Case] = []
    for fmt in FORMATS:
        for atom in sorted(ATOMS[fmt]):
            cases.append(_rows("row", fmt, f"{atom}-alone", [atom, atom], 300, odd=fmt != "jsonl"))
    for atom in sorted(CSV_INT_ATOMS):
        cases.append(
            _rows("row", "csv", f"int-person-{atom}-alone", [atom, atom], 300,
                  table=CSV_INT_ATOMS, person_type="int")
        )  # fmt: skip
    everything = sorted(CSV_ATOMS)
    cases += [
        _rows("row", "csv", "all-faults-crlf", everything, 600, newline=b"\r\n", files=3),
        _rows("row", "csv", "all-faults-cr", everything, 600, newline=b"\r", files=3),
        Case("row", "jsonl-missing-column-in-every-row", "jsonl", (0,),
             _jsonl_missing_column_plant),
        Case("row", "jsonl-line-over-8mib", "jsonl", (0,), _long_line_plant),
    ]  # fmt: skip
    for fmt in FORMATS:
        for i in range(25):
            cases.append(Case("row", f"{fmt}-random-row-faults-{i:02d}", fmt, (0,),
                              _random_rows_plant))  # fmt: skip
    # zero-row files, beside good ones and alone
    zero = {"csv": ["header-only", "zero-bytes", "header-only-crlf", "header-no-newline"],
            "jsonl": ["zero-bytes"], "parquet": ["zero-rows"], "avro": ["zero-rows"]}  # fmt: skip
    for fmt, kinds in zero.items():
        cases.append(Case("item6", f"{fmt}-only-zero-row-files", fmt, (0,),
                          _zero_rows_plant(kinds, with_good=False)))  # fmt: skip
        if fmt == "csv":
            cases.append(Case("item6", "csv-all-kinds-of-empty-files-among-good", fmt, (0,),
                              _zero_rows_plant(kinds)))  # fmt: skip
    # file-level faults
    for kind in ("block-count-too-large", "negative-block-size", "garbage-after-header"):
        cases.append(Case("item2", f"avro-{kind}", "avro", (2,), _avro_fault(kind)))
    for kind in ("garbage-pages-snappy", "garbage-last-column-pages", "truncated-footer",
                 "not-parquet"):  # fmt: skip
        cases.append(Case("item2", f"parquet-{kind}", "parquet", (2,), _parquet_fault(kind)))
    cases.append(Case("item3", "avro-duplicate-field-name", "avro", (2,), _duplicate_column_plant))
    for fmt in ("parquet", "avro"):
        cases.append(Case("file", f"{fmt}-missing-column", fmt, (2,), _missing_column_plant))
        cases.append(Case("file", f"{fmt}-key-column-of-float-type", fmt, (2,), _wrong_type_plant))
    cases.append(Case("file", "csv-header-not-utf8", "csv", (2,), _csv_header_plant("not-utf8")))
    cases.append(Case("file", "csv-header-over-1mib", "csv", (2,), _csv_header_plant("long")))
    # files that are not regular files, in every format
    for fmt in FORMATS:
        for kind in ("fifo", "directory", "dangling-symlink", "symlink-loop", "unreadable"):
            if fmt == "csv" and kind != "symlink-loop":
                continue  # in the small tier
            runner = {"fifo": "subprocess", "unreadable": "nodac"}.get(kind, "inprocess")
            group = "file" if kind == "unreadable" else "item7"
            cases.append(Case(group, f"{fmt}-{kind}-in-glob", fmt, (2,), _special_plant(kind),
                              runner=runner))  # fmt: skip
        if fmt != "csv":
            cases.append(Case("item7", f"{fmt}-relative-glob-from-job-dir-and-elsewhere", fmt,
                              (0,), _relative_glob_plant))  # fmt: skip
    # every key-file fault with every input format (but the one the small tier runs)
    in_small = {c.name: c.fmt for c in small_cases() if c.group == "item4"}
    for name, *_ in KEY_FILES:
        for fmt in FORMATS:
            if in_small.get(f"keys-{name}") != fmt:
                cases.append(_keys(name, fmt, suffix=True))
    for kind in ("output-parent-read-only", "dead-letter-read-only"):
        cases.append(Case("item5", kind, "parquet", (2,), _location_plant(kind), runner="nodac"))
    for kind in ("dead-letter-under-regular-file", "ledger-inside-output",
                 "output-path-under-regular-file", "dead-letter-inside-output"):  # fmt: skip
        cases.append(Case("item5", f"{kind}-avro-input", "avro", (2,), _location_plant(kind)))
    # byte mutations: any outcome but a crash, a hang or a leak
    for fmt in FORMATS:
        for i in range(15):
            cases.append(Case("mutation", f"{fmt}-bytes-{i:02d}", fmt, (0, 2), _mutation_plant,
                              runner="subprocess"))  # fmt: skip
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return cases
