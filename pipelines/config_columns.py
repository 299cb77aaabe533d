"""The job's columns, checked across its queries when the job file is read (``parse_job``).

Which columns a job reads is known from the job file alone: the person column, and each query's
``by``, ``value`` and the like (``kind.required_columns``). These rules refuse what would
otherwise plan and then mislead: a column of userdp's own form, the person column read as data,
one column in two roles, a type declared for a column no query reads.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from userdp.transforms.columns import is_reserved_column

from .config_fields import Validator
from .config_model import QueryConfig
from .kinds import kind_of

_RESERVED_COLUMN = (
    "a column name not of the form __name__",
    "userdp's own columns have that form (__person__ holds the person id): rename the column",
)


def check_columns(
    v: Validator, person: str, columns: Mapping[str, str], queries: tuple[QueryConfig, ...]
) -> None:
    _refuse_reserved_columns(v, person, columns, queries)
    _refuse_person_as_data(v, person, queries)
    _refuse_mixed_roles(v, queries)
    _refuse_unread_columns(v, person, columns, queries)


def _refuse_unread_columns(
    v: Validator, person: str, columns: Mapping[str, str], queries: tuple[QueryConfig, ...]
) -> None:
    """A type declared for a column no query reads is a typo (``domian = "int"``): accepted,
    it left ``domain`` at its default type, so "01" and "1" became two keys."""
    read = {person} | {c for q in queries for c in kind_of(q).required_columns(q)}
    for name in columns:
        if name not in read:
            near = difflib.get_close_matches(name, sorted(read), n=1)
            v.fail(
                f"input.columns.{name}",
                columns[name],
                "a type for a column the job reads (input.person or a query's by, value, …)",
                f"did you mean {near[0]!r}?" if near else "no query reads it: remove it",
            )


def _refuse_person_as_data(v: Validator, person: str, queries: tuple[QueryConfig, ...]) -> None:
    """The person column identifies the privacy unit: no query may read it as a key or a value
    (``by = ["person_id"]`` would release one partition per person). It planned, and failed
    only when the pipeline was built, after the charge (exit 1)."""
    for i, q in enumerate(queries):
        if q.metric == "sample_aggregate":
            continue  # its planning says more: the chunk hands the function __person__ already
        if person in kind_of(q).required_columns(q):
            v.fail(
                f"queries[{i}].{_field_naming(q, person)}",
                person,
                "a column other than input.person",
                f"{person!r} is the person column (the privacy unit): a query cannot group by "
                'it or read it as a value; count persons with metric = "persons"',
            )


def _refuse_reserved_columns(
    v: Validator, person: str, columns: Mapping[str, str], queries: tuple[QueryConfig, ...]
) -> None:
    """No column the job reads or declares may have the form of userdp's own columns
    (``transforms.columns.is_reserved_column``: a key named ``__person__`` would replace the
    person id)."""
    if is_reserved_column(person):
        v.fail("input.person", person, *_RESERVED_COLUMN)
    for name in columns:
        if is_reserved_column(name):
            v.fail(f"input.columns.{name}", name, *_RESERVED_COLUMN)
    for i, q in enumerate(queries):
        for column in kind_of(q).required_columns(q):
            if is_reserved_column(column):
                v.fail(f"queries[{i}].{_field_naming(q, column)}", column, *_RESERVED_COLUMN)


def _refuse_mixed_roles(v: Validator, queries: tuple[QueryConfig, ...]) -> None:
    """A column is read one way in a job: as a key (``by``, ``per_person = "distinct"``'s value,
    a kind's key columns) or as a number. Rows are checked once, for every column in its one
    type (README, "A row is checked once"), so a column both ways could not be typed; it was
    found only while the pipeline was built, after the charge (exit 1)."""
    first: dict[str, tuple[int, str]] = {}
    for i, q in enumerate(queries):
        for column, role in kind_of(q).required_columns(q).items():
            j, seen = first.setdefault(column, (i, role))
            if seen != role:
                v.fail(
                    f"queries[{i}].{_field_naming(q, column)}",
                    column,
                    f"a column read as a {seen}, as queries[{j}] ({queries[j].name!r}) reads it",
                    f"this query reads it as a {role}; a job reads each column one way (its "
                    "rows are checked once, in one type): give one of the queries a job of "
                    "its own",
                )


def _field_naming(q: QueryConfig, column: str) -> str:
    """The query's key that names ``column``: ``by``, ``value`` or a kind's own (``columns``,
    ``key_columns``, …)."""
    if column in q.by:
        return "by"
    if q.value == column:
        return "value"
    for key, given in q.options.items():
        if given == column or (isinstance(given, (list, tuple)) and column in given):
            return str(key)
    return "by"
