"""What userdp reads of an Avro file's schema: the job's columns only, as plain Avro types,
and each column's type family (:func:`avro_families`; the rules in :mod:`.input_files`).

Two hazards sit in columns a job never reads, so they are settled from the file's schema
(metadata, the same for every row) before any record is decoded:

* **Logical types** (``timestamp-millis``, ``date``, ``uuid``, ``decimal`` …): fastavro converts
  every field of every record it decodes, following the *writer's* schema, and one row whose
  value lies outside what Python's ``datetime`` or ``uuid`` holds (a timestamp in the year 10000,
  a malformed uuid) raised in the middle of the file — one person's row failing the whole run.
  Records are therefore read through a *reader schema* (Avro schema resolution) that keeps only
  the job's columns, so the other fields are skipped, never converted; and a column the job reads
  may not have a logical type in any branch of its union, nor in a named type it uses by name
  (:func:`logical_types`, refused when the inputs are inspected), since the writer's logical
  type would still be applied to it. (The reader schema also drops ``logicalType`` keys; that
  alone does not stop fastavro.) Its price: fastavro's C reader resolves the schemas again for
  every value (~0.7 µs each), so a narrow file (4 columns, 3 read; 200,000 records, fastavro
  1.13.1) decodes in 1.5–2× the time of decoding every field, while one with many or costly
  unread fields decodes faster (20 columns: 0.55–0.67×; 8 with a timestamp: 0.8–0.9×). Safety
  first: the projection is always used.
* **Unions of string and bytes**: schema resolution promotes one to the other whichever order
  the reader's union lists them, so a bytes value came back as text — ``b"u1"`` and ``"u1"`` one
  person — and bytes that are not UTF-8 failed the read after the charge: one person's value
  decided whether the run released. A column the job reads with both branches is refused when
  the inputs are inspected.
* **Recursive named types** (a record with a field of its own type): decoding, or even skipping,
  a value nested a few thousand levels deep overflows the C stack of fastavro's decoder and kills
  the process (SIGSEGV) — one row again. No schema check can bound the depth of a recursive type,
  so a file whose schema has one is refused when the inputs are inspected, before any charge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_NAMED = ("record", "enum", "fixed", "error")
_AVRO_FAMILY = {
    "int": "integer",
    "long": "integer",
    "float": "float",
    "double": "float",
    "string": "string",
    "boolean": "bool",
    "null": "null",
}


def avro_families(avro_type: Any) -> tuple[str, ...]:
    """Families of an Avro field type, in declaration order, without ``null``."""
    if isinstance(avro_type, list):
        out: list[str] = []
        for branch in avro_type:
            out.extend(f for f in avro_families(branch) if f not in out)
        return tuple(out)
    if isinstance(avro_type, dict):
        if "logicalType" in avro_type:
            return (str(avro_type["logicalType"]),)
        return avro_families(avro_type.get("type"))
    family = _AVRO_FAMILY.get(str(avro_type), str(avro_type))
    return () if family == "null" else (family,)


def _named(t: dict[str, Any]) -> bool:
    return t.get("type") in _NAMED and isinstance(t.get("name"), str)


def _subtypes(t: Any) -> list[Any]:
    """The types directly inside ``t`` (a union's branches, a record's fields' types …)."""
    if isinstance(t, list):
        return t
    if not isinstance(t, dict):
        return []
    kind = t.get("type")
    if kind in ("record", "error"):
        return [fd.get("type") for fd in t.get("fields", [])]
    if kind in ("enum", "fixed"):
        return []
    if kind in ("array", "map"):
        return [t.get("items" if kind == "array" else "values")]
    return [kind]  # {"type": <a type>, "logicalType": …} and the like


def _definitions(schema: Any) -> dict[str, dict[str, Any]]:
    """Full name → definition of every named type in a parsed writer schema (full names)."""
    found: dict[str, dict[str, Any]] = {}

    def collect(t: Any) -> None:
        if isinstance(t, dict) and _named(t):
            found.setdefault(t["name"], t)
        for sub in _subtypes(t):
            collect(sub)

    for fd in schema.get("fields", []):
        collect(fd.get("type"))
    return found


def logical_types(t: Any, definitions: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """Every ``logicalType`` inside the Avro type ``t`` (a field's type), in order — also inside
    a named type that ``t`` uses by name (a ``fixed`` decimal defined by another column), which
    fastavro converts all the same. ``definitions``: :func:`_definitions` of the whole schema."""
    definitions = definitions or {}
    seen: set[str] = set()

    def walk(t: Any) -> list[str]:
        if isinstance(t, str):
            if t in seen or t not in definitions:
                return []
            seen.add(t)
            return walk(definitions[t])
        if isinstance(t, dict) and _named(t):
            seen.add(t["name"])
        found = [str(t["logicalType"])] if isinstance(t, dict) and "logicalType" in t else []
        for sub in _subtypes(t):
            found += walk(sub)
        return found

    return walk(t)


def recursive_type(schema: Any) -> str | None:
    """The full name of the first named type that contains a reference to itself (directly or
    through types defined inside it), or None. ``schema``: a parsed writer schema, whose names
    are full names (``fastavro.reader(f).writer_schema``). A named type can only be referenced
    after its definition begins, so a recursion is a reference to a type still being defined."""

    def walk(t: Any, open_names: tuple[str, ...]) -> str | None:
        if isinstance(t, str):
            return t if t in open_names else None
        inner = (*open_names, t["name"]) if isinstance(t, dict) and _named(t) else open_names
        return next((r for sub in _subtypes(t) if (r := walk(sub, inner)) is not None), None)

    return walk(schema, ())


def row_record(schema: Any) -> tuple[dict[str, Any], bool] | None:
    """The record type of a file's rows, and whether a row may be null: the top-level record,
    or the record of a ``["null", record]`` union (Kafka Connect's Avro converter writes an
    optional value schema so; a null row is a dead letter, ``malformed record``). None for any
    other top-level type: a union of records, an array, a primitive."""
    if isinstance(schema, dict) and schema.get("type") == "record":
        return schema, False
    if isinstance(schema, list) and len(schema) == 2 and "null" in schema:
        other = schema[1 - schema.index("null")]
        if isinstance(other, dict) and other.get("type") == "record":
            return other, True
    return None


def projection(schema: Any, names: Sequence[str]) -> Any:
    """A reader schema of the writer's row record (:func:`row_record`) holding only the fields
    ``names`` (in the writer's order), with every ``logicalType`` removed (module docstring);
    a ``["null", record]`` writer gets ``["null", that record]``. A named type that a kept field
    references but an unread field defined is defined again where first used."""
    found = row_record(schema)
    if found is None:
        raise ValueError("the Avro schema's rows are not records")  # refusal() says so first
    record, nullable = found
    definitions = _definitions(record)
    emitted: set[str] = set()

    def plain(t: Any) -> Any:
        if isinstance(t, list):
            return [plain(b) for b in t]
        if isinstance(t, str):
            return plain(definitions[t]) if t in definitions and t not in emitted else t
        if not isinstance(t, dict):
            return t
        out = {k: v for k, v in t.items() if k != "logicalType"}
        kind = out.get("type")
        if _named(out) and out["name"] in emitted:
            return out["name"]  # defined already (inlined where a kept field first used it)
        if _named(out):
            emitted.add(out["name"])
            if "fields" in out:
                out["fields"] = [{**fd, "type": plain(fd.get("type"))} for fd in out["fields"]]
        elif kind in ("array", "map"):
            key = "items" if kind == "array" else "values"
            out[key] = plain(out.get(key))
        elif isinstance(kind, str) and len(out) == 1:
            return plain(kind)  # {"type": "long"}: what a removed logicalType leaves
        else:
            out["type"] = plain(kind)
        return out

    wanted = set(names)
    fields = [
        {**fd, "type": plain(fd.get("type"))}
        for fd in record.get("fields", [])
        if fd.get("name") in wanted
    ]
    top = {k: v for k, v in record.items() if k not in ("fields", "logicalType")}
    projected = {**top, "fields": fields}
    return ["null", projected] if nullable else projected


def refusal(schema: Any, columns: Sequence[str]) -> str | None:
    """Why a file of this writer schema is not read (module docstring), or None: rows that are
    not records (:func:`row_record`), a recursive type anywhere, or a logical type in a column
    the job reads. One sentence, metadata only; the inspection (before any charge) and the
    reader (a file changed since) both ask it."""
    found = row_record(schema)
    if found is None:
        return (
            "its Avro schema is not a record (a union, array or primitive at the top): userdp "
            "reads one row per record, from a record or a ['null', record] schema; write the "
            "rows as records"
        )
    record = found[0]
    recursive = recursive_type(schema)
    if recursive is not None:
        return (
            f"its Avro schema has a recursive type {recursive!r} (a record holding a field of its "
            "own type); userdp does not read such files, since one deeply nested value would "
            "stop the reader: write the file without it"
        )
    read, definitions = set(columns), _definitions(record)
    for fd in record.get("fields", []):
        if fd.get("name") in read and (logical := logical_types(fd.get("type"), definitions)):
            return (
                f"column {fd['name']!r} has the Avro logical type {logical[0]!r}; a column the "
                "job reads must be a plain long, int, double, float, string or boolean in every "
                "branch (write it as its base type)"
            )
        if fd.get("name") in read and {"string", "bytes"} <= _branches(fd.get("type")):
            return (
                f"column {fd['name']!r} is a union of string and bytes; Avro schema resolution "
                "reads a bytes value as text (b'a' and 'a' one key, one person) and fails on "
                "bytes that are not UTF-8, so it cannot be read as written: write one of the two"
            )
    return None


def _branches(t: Any) -> set[str]:
    """The primitive type names among the branches of a field's type (a union or one type):
    ``"string"`` for ``"string"`` and for ``{"type": "string", ...}``."""
    if isinstance(t, list):
        return set().union(*(_branches(b) for b in t)) if t else set()
    if isinstance(t, dict):
        return _branches(t.get("type")) if isinstance(t.get("type"), str) else set()
    return {t} if isinstance(t, str) else set()
