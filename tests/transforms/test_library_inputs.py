"""The library's inputs as users hold them: NumPy scalars and other Python types in rows, Arrow
tables with text or all-null columns, NumPy and tuple parameters, public keys given wrongly, and
a pipeline that goes on after a caught mistake.

A value no column type can hold must make its row a dead letter — never an exception on a worker,
whose occurrence would depend on one person's row. Exact values come from the test hook
``Release._for_launcher(..., noise=False)``.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Mapping
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

import userdp.transforms as dp
from tests.beam_collect import run_and_collect
from userdp.pipelines.input_files import InputSchema
from userdp.pipelines.raw_records import records_to_table
from userdp.transforms.mechanisms.rng import ReleaseKey

KEY = ReleaseKey(bytes(range(32)))


def exact_release(**budget: Any) -> dp.Release:
    return dp.Release._for_launcher(dp.Budget(**(budget or {"epsilon": 1})), KEY, noise=False)


def count(**extra: Any) -> Any:
    params = {"by": ["k"], "max_partitions_per_person": 1, "max_rows_per_partition": 5}
    return dp.Count(**{**params, "public_partitions": ["x"], "epsilon": 0.5, **extra})


def released_and_dead(rows: list[Any], person_type: str = "int") -> tuple[list[Any], list[Any]]:
    """(released (k, value) pairs, dead letters' (reason, line) pairs) of a count per k."""
    release = exact_release()

    def build(p: beam.Pipeline) -> dict[str, Any]:
        people = (
            p
            | beam.Create(rows)
            | release.ByPerson("pid", keys={"k": "string"}, values=["v"], person_type=person_type)
        )
        visits = people | "visits" >> count()
        return {
            "released": visits | beam.Map(lambda r: (r.k, r.value)),
            "dead": people.dead_letter | beam.Map(lambda d: (d["reason"], d.get("line"))),
        }

    out = run_and_collect(build)
    return sorted(out["released"]), sorted(out["dead"], key=str)


def test_numpy_scalars_read_as_the_python_numbers_they_hold() -> None:
    """np.int64(1) and 1 are one person (one canonical id); NumPy numbers are values like any."""
    rows = [
        {"pid": 1, "k": "x", "v": 1.0},
        {"pid": np.int64(1), "k": np.str_("x"), "v": np.float32(2.5)},
        {"pid": np.int32(2), "k": "x", "v": np.int64(3)},
    ]
    released, dead = released_and_dead(rows)
    assert (released, dead) == ([("x", 3.0)], [])
    # Person 1's two rows are one person's: with at most one row per partition, 2 rows remain.
    release = exact_release()
    with beam.Pipeline() as p:
        people = (
            p
            | beam.Create(rows)
            | release.ByPerson("pid", keys={"k": "string"}, values=["v"], person_type="int")
        )
        one_row = people | "one" >> count(max_rows_per_partition=1)
        assert_that(one_row | beam.Map(lambda r: r.value), equal_to([2.0]))


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        ("v", b"3", "non-numeric value in v"),
        ("v", decimal.Decimal("1.5"), "non-numeric value in v"),
        ("v", np.bool_(True), "non-numeric value in v"),
        ("k", datetime.date(2026, 1, 1), "key type mismatch in k"),
        ("k", np.datetime64("2026-01-01"), "key type mismatch in k"),
        ("pid", b"7", "person id type mismatch"),
        ("pid", {1, 2}, "person id type mismatch"),
        # past Python's 4,300-digit int-to-text limit: json.dumps raised on the worker
        pytest.param("pid", int("f" * 3600, 16), "person id type mismatch", id="huge-int-pid"),
        pytest.param("k", int("f" * 3600, 16), "key type mismatch in k", id="huge-int-key"),
    ],
)
def test_a_value_no_column_type_holds_is_a_dead_letter_not_a_worker_crash(
    column: str, value: Any, reason: str
) -> None:
    good = {"pid": 1, "k": "x", "v": 1.0}
    released, dead = released_and_dead([good, {**good, column: value}])
    assert released == [("x", 1.0)]
    assert [r for r, _ in dead] == [reason]


def test_a_row_that_is_not_a_mapping_carries_its_text_to_the_dead_letter() -> None:
    released, dead = released_and_dead([("ann", "x", 1.0), {"pid": 1, "k": "x", "v": 1.0}])
    assert released == [("x", 1.0)]
    assert dead == [("malformed record", '["ann", "x", 1.0]')]  # its JSON text


def _arrow_people(table: pa.Table, person_type: str = "int") -> list[Any]:
    release = exact_release()

    def build(p: beam.Pipeline) -> dict[str, Any]:
        people = (
            p
            | beam.Create([table])
            | release.ByPerson("pid", keys={"k": "string"}, values=["v"], person_type=person_type)
        )
        visits = people | "visits" >> count()
        return {
            "value": visits | beam.Map(lambda r: r.value),
            "dead": people.dead_letter | beam.Map(lambda d: d["reason"]),
        }

    out = run_and_collect(build)
    return [out["value"], sorted(out["dead"])]


def test_arrow_text_is_not_parsed_into_int_ids() -> None:
    """As Python rows, where "1" is never the int 1: "01", "+1" and "1" are not made one person;
    the table is read row by row, and each such id is a dead letter (it raised on the worker:
    whether the run failed depended on one batch's inferred types, found by a library audit)."""
    table = pa.table({"pid": ["1", "01", "+1"], "k": ["x"] * 3, "v": [1.0] * 3})
    assert _arrow_people(table) == [[0.0], ["person id type mismatch"] * 3]


@pytest.mark.parametrize(
    ("table", "reasons"),
    [
        # one person's batch with bools inferred where numbers are declared
        (
            pa.table({"pid": [9, 9], "k": ["x", "x"], "v": [True, False]}),
            ["non-numeric value in v"] * 2,
        ),
        # a zero-row table typed otherwise: nothing to read, nothing raised
        (
            pa.table(
                {
                    "pid": pa.array([], pa.binary()),
                    "k": pa.array([], pa.string()),
                    "v": pa.array([], pa.float64()),
                }
            ),
            [],
        ),
        # a column missing from one batch
        (pa.table({"pid": [9], "k": ["x"]}), ["no column 'v' in the row"]),
    ],
)
def test_an_arrow_batch_of_other_types_makes_dead_letters_not_a_failed_run(
    table: pa.Table, reasons: list[str]
) -> None:
    good = pa.table({"pid": [1, 2], "k": ["x", "x"], "v": [1.0, 2.0]})
    release = exact_release()

    def build(p: beam.Pipeline) -> dict[str, Any]:
        people = (
            p
            | beam.Create([good, table])
            | release.ByPerson("pid", keys={"k": "string"}, values=["v"], person_type="int")
        )
        visits = people | "visits" >> count()
        return {
            "value": visits | beam.Map(lambda r: r.value),
            "dead": people.dead_letter | beam.Map(lambda d: d["reason"]),
        }

    out = run_and_collect(build)
    assert out["value"] == [2.0] and sorted(out["dead"]) == reasons


class _Quantity(float):
    def __float__(self) -> float:
        raise TypeError("use .to(unit)")


class _ExitingRepr:
    def __repr__(self) -> str:
        raise SystemExit(1)


class _GoneMapping(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise OSError("gone")

    def __iter__(self) -> Any:
        raise OSError("gone")

    def __len__(self) -> int:
        return 3


class _HostileClass:
    @property  # type: ignore[misc]
    def __class__(self) -> Any:  # isinstance() reads it
        raise RuntimeError("boom")


def test_a_row_whose_class_raises_is_a_malformed_record() -> None:
    """records_to_table asked isinstance(row, dict) outside its guard (a review). Beam's own
    coders cannot send such an object between steps, so the reader is called directly."""
    schema = InputSchema("beam", (), "pid", "int", (("k", pa.string()),), ("v",))
    table = records_to_table([{"pid": 1, "k": "x", "v": 1.0}, _HostileClass()], schema)
    assert table.column("__reject__").to_pylist() == [None, "malformed record"]


def test_an_arrow_batch_read_row_by_row_converts_only_declared_columns() -> None:
    """A batch missing a declared column fell back to to_pylist() of every column, and an
    undeclared date past Python's range raised (a review); a declared one is a dead letter."""
    far = pa.array([2**31 - 1], pa.date32())  # year ~5.8 million: no Python date holds it
    missing_v = pa.table({"pid": [9], "k": ["x"], "when": far})
    assert _arrow_people(missing_v) == [[0.0], ["no column 'v' in the row"]]
    far_v = pa.table({"pid": [9], "k": ["x"], "v": far})
    assert _arrow_people(far_v) == [[0.0], ["non-numeric value in v"]]


REASON_OF_AMBIGUOUS = {
    "pid": "person id type mismatch",
    "k": "key type mismatch in k",
    "v": "non-numeric value in v",
}


@pytest.mark.parametrize("twice", ["pid", "k", "v"])
def test_a_declared_column_twice_in_a_batch_makes_dead_letters_not_a_failed_run(
    twice: str,
) -> None:
    """Arrow raised on a worker selecting a name a batch holds twice ("Field exists 2 times"),
    so one batch decided whether the run failed (library audit). Which copy is meant is not
    known: the batch's rows are dead letters; the other batches are read as usual."""
    columns = {"pid": pa.array([9, 8]), "k": pa.array(["x", "x"]), "v": pa.array([1.0, 2.0])}
    names = [*columns, twice]
    table = pa.Table.from_arrays([*columns.values(), columns[twice]], names=names)
    value, dead = _arrow_people(table)
    assert value == [0.0]  # nobody counted
    assert dead == 2 * [REASON_OF_AMBIGUOUS[twice]]


def test_python_objects_that_raise_when_read_make_malformed_records() -> None:
    """raw_records promises that nothing there raises on a value (a library audit found three
    objects that did: a float subclass whose __float__ raises, an id whose __repr__ exits, a
    mapping whose iteration raises)."""
    rows = [
        {"pid": 1, "k": "x", "v": 1.0},
        {"pid": 2, "k": "x", "v": _Quantity(3.0)},
        {"pid": _ExitingRepr(), "k": "x", "v": 1.0},
        _GoneMapping(),
    ]
    released, dead = released_and_dead(rows)
    assert released == [("x", 1.0)]
    # the float that cannot be read: its row; the id whose repr exits: a mistyped id, shown as
    # its type's name
    assert sorted(r for r, _ in dead) == [
        "malformed record",
        "malformed record",
        "person id type mismatch",
    ]


def test_an_all_null_arrow_column_makes_dead_letters() -> None:
    """pa.table infers type null for a column of Nones: those rows are dead letters, as nulls."""
    table = pa.table({"pid": [1, 2], "k": ["x", "x"], "v": [None, None]})
    assert table.schema.field("v").type == pa.null()
    assert _arrow_people(table) == [[0.0], ["null value in v", "null value in v"]]


def test_numpy_and_tuple_parameters_read_as_a_job_file_would() -> None:
    rows = [{"pid": "a", "k": "x", "v": 5.0}, {"pid": "b", "k": "x", "v": 0.5}]
    release = dp.Release._for_launcher(dp.Budget(epsilon=np.float64(1)), KEY, noise=False)
    with beam.Pipeline() as p:
        people = (
            p
            | beam.Create(rows)
            | release.ByPerson("pid", keys={"k": "string"}, values=["v"], person_type="string")
        )
        sums = [
            people
            | name
            >> dp.Sum(
                by=("k",),
                value="v",
                bounds=bounds,
                max_partitions_per_person=np.int64(1),
                max_rows_per_partition=np.int32(1),
                public_partitions=np.array(["x"]),
                epsilon=np.float64(0.25),
            )
            for name, bounds in (("t", (0, 1)), ("a", np.array([0.0, 1.0])))
        ]
        for name, s in zip("ta", sums, strict=True):
            pairs = s | f"pairs {name}" >> beam.Map(lambda r: (r.k, r.value))
            assert_that(pairs, equal_to([("x", 1.5)]), label=name)
    assert release.manifest()["spent"]["epsilon"] == 0.5
    # a 0-d array is a number too (it raised NumPy's "iteration over a 0-d array")
    assert dp.Budget(epsilon=np.array(1.0)).config.epsilon == 1


def test_public_partitions_given_wrongly_say_what_is_wrong() -> None:
    release = exact_release()
    with beam.Pipeline() as p:
        people = (
            p
            | beam.Create([{"pid": 1, "k": "x", "v": 1.0}])
            | release.ByPerson("pid", keys={"k": "string"}, values=["v"], person_type="int")
        )
        with pytest.raises(ValueError, match=r"public_partitions\[0\] = \('a', 'b'\) is not a key"):
            _ = people | "pairs" >> count(public_partitions=[("a", "b")])
        with pytest.raises(TypeError, match="not a PCollection"):
            _ = people | "pcoll" >> count(public_partitions=p | "keys" >> beam.Create(["x"]))
        with pytest.raises(TypeError, match="a list of keys, got str 'x'"):
            _ = people | "str" >> count(public_partitions="x")
        for i, key in enumerate(({"k": "x"}, beam.Row(k="x"))):  # was "unhashable type: 'dict'"
            with pytest.raises(
                TypeError, match=r"public_partitions\[0\] is a (dict|Row): a key is"
            ):
                _ = people | f"mapping {i}" >> count(public_partitions=[key])
        with pytest.raises(
            ValueError, match=r"'int'\): public_partitions\[1\], column 'k': not a string"
        ):
            _ = people | "int" >> count(public_partitions=["x", 3])
        with pytest.raises(ValueError, match=r"Median.*public_partitions is for the metrics that"):
            _ = people | "median" >> dp.Median(
                value="v", bounds=[0, 1], epsilon=0.1, public_partitions=["x"]
            )
        # without by, the missing by is named (it said "Count takes none")
        with pytest.raises(ValueError, match=r"public_partitions lists keys of the by columns"):
            _ = people | "noby" >> dp.Count(
                max_rows_per_partition=1, epsilon=0.1, public_partitions=["x"]
            )


class _Text(str):
    """A caller's str subclass (in a notebook, a class in __main__)."""


def test_public_partitions_are_typed_once_and_counted_as_released() -> None:
    """Library audit: lists as multi-column keys raised "unhashable type: 'list'"; "1", "01" and
    "+1" for an int column released one key while the manifest counted 3; a lone surrogate
    failed in Beam's coder. Keys typed alike are refused; a str subclass becomes a str."""
    release = exact_release()
    with beam.Pipeline() as p:
        rows = p | beam.Create([{"pid": 1, "k": "x", "n": 1}])
        people = rows | release.ByPerson("pid", keys={"k": "string", "n": "int"}, person_type="int")
        _ = people | "lists" >> count(by=["k", "n"], public_partitions=[["x", 1], ["y", 2]])
        # library keys are Python values of the column's type: text is not read as an int (a
        # key file's is), so "1", "01" and "+1" cannot become one key (library-user review)
        with pytest.raises(
            ValueError,
            match=r"public_partitions\[0\], column 'n': not an integer in the int64 range "
            r"\(an int, not text\)",
        ):
            _ = people | "alike" >> count(by=["n"], public_partitions=["1", "01", "+1"])
        with pytest.raises(ValueError, match=r"public_partitions\[0\], column 'k': not UTF-8"):
            _ = people | "surrogate" >> count(public_partitions=["\ud800"])
        _ = people | "subclass" >> count(public_partitions=[_Text("x")])
    assert release.manifest()["queries"][0]["n_public_partitions"] == 2


def test_public_partitions_are_python_values_of_the_columns_types() -> None:
    """The library used the key file's text parsing: " 3" became the int 3 and "1" the bool
    True, while 1 was refused for a bool column "(true/false or 1/0)" (library-user review)."""
    release = exact_release()
    with beam.Pipeline() as p:
        rows = p | beam.Create([{"pid": 1, "day": 2, "weekend": True}])
        people = rows | release.ByPerson(
            "pid", keys={"day": "int", "weekend": "bool"}, person_type="int"
        )
        _ = people | "ok" >> count(by=["day", "weekend"], public_partitions=[(2, True), (3, False)])
        for i, (by, key, match) in enumerate(
            [
                (["day"], " 3", r"public_partitions\[0\], column 'day': not an integer"),
                (["day"], True, r"public_partitions\[0\], column 'day': not an integer"),
                (["weekend"], "1", r"public_partitions\[0\], column 'weekend': not a bool "),
                (["weekend"], 1, r"not a bool \(True or False\)"),
            ]
        ):
            with pytest.raises(ValueError, match=match):
                _ = people | f"bad_{i}" >> count(by=by, public_partitions=[key])


def test_a_pipeline_goes_on_after_a_caught_mistake() -> None:
    """A notebook's loop: a transform fails when applied (a typo), the next cell applies a fixed
    one. The failed transform stays in Beam's graph as a leaf, which Beam pickles — it must not
    hold the Release (its secret refuses to pickle), or the whole pipeline could not run."""
    release = exact_release()
    p = beam.Pipeline()
    people = (
        p
        | beam.Create([{"pid": 1, "k": "x", "v": 1.0}])
        | release.ByPerson("pid", keys={"k": "string"}, values=["v"], person_type="int")
    )
    with pytest.raises(ValueError, match="did you mean 'epsilon'"):
        _ = people | "typo" >> count(epsilom=0.5)
    visits = people | "visits" >> count()
    assert_that(visits | beam.Map(lambda r: r.value), equal_to([1.0]))
    p.run().wait_until_finish()


def test_public_partitions_are_kept_before_each_persons_partitions_are_picked() -> None:
    """30 persons, each in 10 domains, 2 of them listed, L = 2: each person's two partitions are
    the two listed ones (PipelineDP's order). Picked among all 10 first, a listed domain kept
    about 6 of its 30 persons."""
    rows = [{"pid": p, "k": f"d{d}", "v": 1.0} for p in range(30) for d in range(10)]
    release = exact_release()
    with beam.Pipeline() as p:
        people = (
            p
            | beam.Create(rows)
            | release.ByPerson("pid", keys={"k": "string"}, values=["v"], person_type="int")
        )
        listed = people | "visits" >> count(
            public_partitions=["d0", "d1", "d99"], max_partitions_per_person=2,
            max_rows_per_partition=1,
        )  # fmt: skip
        pairs = listed | beam.Map(lambda r: (r.k, r.value))
        assert_that(pairs, equal_to([("d0", 30.0), ("d1", 30.0), ("d99", 0.0)]))


def test_arrow_text_that_is_not_utf8_is_a_dead_letter_not_a_worker_crash() -> None:
    """A writer that does not check UTF-8 (here a binary column viewed as string) can give a
    library user's table bytes such as 0xff: the pipeline raised UnicodeDecodeError, quoting the
    byte, where a job reading the same Parquet file dead-letters the row."""

    def text(values: list[bytes]) -> pa.Array:
        return pa.array(values, pa.binary()).view(pa.string())

    table = pa.table({"pid": [1, 2, 3], "k": text([b"x", b"\xff", b"x"]), "v": [1.0] * 3})
    assert _arrow_people(table) == [[2.0], ["invalid UTF-8 text in k"]]
    ids = pa.table({"pid": text([b"a", b"b\xfe"]), "k": ["x", "x"], "v": [1.0, 1.0]})
    assert _arrow_people(ids, person_type="string") == [[1.0], ["invalid UTF-8 text in pid"]]
