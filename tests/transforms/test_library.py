"""The public library (``import userdp.transforms as dp``): wiring and every kind of misuse.

Exact values come from the test hook ``Release._for_launcher(..., noise=False)``; each misuse
must fail when the transform is applied (pipeline construction), with a message saying what to do.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
from decimal import Decimal
from typing import Any, NamedTuple

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

import userdp.transforms as dp
from tests.beam_collect import run_and_collect
from userdp.pipelines.config_fields import ConfigError
from userdp.transforms.mechanisms.chunk_functions import resolve_function
from userdp.transforms.mechanisms.rng import ReleaseKey

KEY = ReleaseKey(bytes(range(32)))  # a fixed test secret

# 4 persons; "dan" has 5 rows on a.example (bounded to 2 by max_rows_per_partition)
ROWS = [
    {"person": "ann", "domain": "a.example", "duration_s": 10.0},
    {"person": "ann", "domain": "b.example", "duration_s": 20.0},
    {"person": "bob", "domain": "a.example", "duration_s": 30.0},
    {"person": "cat", "domain": "b.example", "duration_s": 40.0},
    *({"person": "dan", "domain": "a.example", "duration_s": 50.0} for _ in range(5)),
]
BAD = [
    {"person": None, "domain": "a.example", "duration_s": 1.0},  # no person id
    {"person": "eve", "domain": "a.example", "duration_s": "long"},  # not a number
    {"person": 7, "domain": "a.example", "duration_s": 1.0},  # an int id in a string column
    {"user": "fay", "domain": "a.example", "duration_s": 1.0},  # no person column: misspelt
]
PUBLIC = ["a.example", "b.example", "c.example"]


def exact_release(**budget: Any) -> dp.Release:
    return dp.Release._for_launcher(dp.Budget(**(budget or {"epsilon": 1})), KEY, noise=False)


def by_person(rows: Any, release: dp.Release) -> Any:
    return rows | release.ByPerson(
        "person", keys={"domain": "string"}, values=["duration_s"], person_type="string"
    )


def count(**extra: Any) -> Any:
    params = {"by": ["domain"], "max_partitions_per_person": 2, "max_rows_per_partition": 2}
    return dp.Count(**{**params, "public_partitions": PUBLIC, "epsilon": 0.5, **extra})


def test_count_with_public_partitions_is_exact_without_noise() -> None:
    release = exact_release()
    with beam.Pipeline() as p:
        people = by_person(p | beam.Create(ROWS + BAD), release)
        visits = people | "visits" >> count()
        assert_that(
            visits | beam.Map(lambda r: (r.domain, r.value)),
            equal_to([("a.example", 4.0), ("b.example", 2.0), ("c.example", 0.0)]),
        )
        reasons = people.dead_letter | beam.Map(lambda d: d["reason"])
        assert_that(
            reasons,
            equal_to(
                [
                    "null or empty person id",
                    "non-numeric value in duration_s",
                    "person id type mismatch",
                    "no column 'person' in the row",  # not "null": the name is what is wrong
                ]
            ),
            label="dead letters",
        )
    assert [q["name"] for q in release.manifest()["queries"]] == ["visits"]
    assert release.manifest()["spent"]["epsilon"] == 0.5


class Visit(NamedTuple):
    person: str
    domain: str
    duration_s: float


@dataclasses.dataclass(frozen=True)
class VisitRecord:
    person: str
    domain: str
    duration_s: float


def test_dicts_rows_namedtuples_dataclasses_and_arrow_batches_give_the_same_release() -> None:
    as_table = pa.Table.from_pylist(ROWS)
    inputs = {
        "dicts": ROWS,
        "rows": [beam.Row(**r) for r in ROWS],
        "namedtuples": [Visit(**r) for r in ROWS],
        "dataclasses": [VisitRecord(**r) for r in ROWS],
        "arrow": [as_table.slice(0, 4), as_table.slice(4).to_batches()[0]],
    }
    for name, elements in inputs.items():
        release = exact_release()
        with beam.Pipeline() as p:
            people = by_person(p | beam.Create(elements), release)
            mean = people | "mean" >> dp.Mean(
                by=["domain"], value="duration_s", bounds=[0, 100],
                max_partitions_per_person=2, max_rows_per_partition=2,
                public_partitions=PUBLIC[:2], epsilon=1,
            )  # fmt: skip
            # a.example: ann 10, bob 30, dan 50 + 50 (bounded to 2 rows); b.example: 20, 40
            assert_that(
                mean | beam.Map(lambda r: (r.domain, r.value)),
                equal_to([("a.example", 35.0), ("b.example", 30.0)]),
                label=name,
            )


def test_every_metric_transform_states_its_metric_and_a_guarantee() -> None:
    for name in dp.__all__:
        cls = getattr(dp, name)
        if isinstance(cls, type) and issubclass(cls, beam.PTransform) and hasattr(cls, "metric"):
            doc = cls.__doc__ or ""
            assert "docs/" in doc or "Guarantee" in doc, name


# --- misuse: one test per kind, each failing at construction with what to do -----------------


def test_a_metric_on_rows_that_did_not_go_through_by_person() -> None:
    with (
        beam.Pipeline() as p,
        pytest.raises(TypeError, match=r"must be applied to the output of release\.ByPerson"),
    ):
        _ = p | beam.Create(ROWS) | "visits" >> count()


def test_a_transform_applied_to_two_releases() -> None:
    visits = count()
    with beam.Pipeline() as p:
        _ = by_person(p | beam.Create(ROWS), exact_release()) | "a" >> visits
    with (
        pytest.raises(dp.ReleaseError, match="already applied to another release"),
        beam.Pipeline() as p2,
    ):
        _ = by_person(p2 | beam.Create(ROWS), exact_release()) | "b" >> visits


def test_a_release_used_by_two_pipelines() -> None:
    release = exact_release()
    with beam.Pipeline() as p:
        _ = by_person(p | beam.Create(ROWS), release) | "visits" >> count()
    with (
        pytest.raises(dp.ReleaseError, match="already used by another pipeline"),
        beam.Pipeline() as p2,
    ):
        _ = by_person(p2 | beam.Create(ROWS), release)


def test_a_name_reused_in_one_release() -> None:
    release = exact_release()
    with (
        pytest.raises(dp.ReleaseError, match=r"name 'Visits' is already used .*'visits'"),
        beam.Pipeline() as p,
    ):
        people = by_person(p | beam.Create(ROWS), release)
        _ = people | "visits" >> count()
        _ = people | "Count again" >> count(name="Visits")


def test_the_budget_exhausted_names_every_transform_and_its_share() -> None:
    release = exact_release(epsilon=1)
    with (
        pytest.raises(
            dp.ReleaseError,
            match=r"exhausted by the shares \{visits: .*0\.5.*more: .*0\.75.*\}: plan spends "
            r"[^;]*; reduce the explicit shares or raise the total$",  # the hint said once
        ),
        beam.Pipeline() as p,
    ):
        people = by_person(p | beam.Create(ROWS), release)
        _ = people | "visits" >> count()
        _ = people | "more" >> count(epsilon=0.75)
    assert [q["name"] for q in release.manifest()["queries"]] == ["visits"]  # nothing booked


def test_a_transform_without_a_share() -> None:
    with (
        pytest.raises(dp.ReleaseError, match=r"Count\('visits'\) has no share .* pass epsilon="),
        beam.Pipeline() as p,
    ):
        _ = by_person(p | beam.Create(ROWS), exact_release()) | "visits" >> dp.Count(
            by=["domain"], max_partitions_per_person=1, max_rows_per_partition=1,
            public_partitions=PUBLIC,
        )  # fmt: skip


def test_gaussian_noise_without_delta() -> None:
    with (
        pytest.raises(
            ConfigError, match=r"Count\('visits'\)\.noise = 'gaussian': expected .*delta"
        ),
        beam.Pipeline() as p,
    ):
        _ = by_person(p | beam.Create(ROWS), exact_release(epsilon=1)) | "visits" >> count(
            noise="gaussian"
        )


def test_a_delta_share_without_a_delta_total_names_the_budget_not_a_job_file_key() -> None:
    with (
        pytest.raises(
            ConfigError,
            match=r"Count\('visits'\)\.delta = 1e-07: expected no delta share: the total has no "
            r"delta.*library: Budget\(\.\.\., delta=\.\.\.\)",
        ),
        beam.Pipeline() as p,
    ):
        people = by_person(p | beam.Create(ROWS), exact_release(epsilon=1))
        _ = people | "visits" >> count(epsilon=0.5, delta=1e-7)


def test_budgets_take_exact_decimals_as_they_are() -> None:
    """``Decimal`` is the exact decimal a budget is documented to be; it was refused with a
    message that said "budgets are exact decimals". A non-finite one is still refused."""
    budget = dp.Budget(epsilon=Decimal("0.1"), delta=Decimal("1e-6"))
    assert budget.guarantee() == dp.Budget(epsilon=0.1, delta=1e-6).guarantee()
    with pytest.raises(ConfigError, match=r"budget\.epsilon = Decimal\('NaN'\): expected a finite"):
        dp.Budget(epsilon=Decimal("NaN"))
    # exact, but too exact to plan with: δ = 1e-2000 planned for 40 s, 1e-20000 crashed
    with pytest.raises(ConfigError, match=r"budget\.delta = .*1E-20000.*at most ~330 digits"):
        dp.Budget(epsilon=1, delta=Decimal("1e-20000"))
    with pytest.raises(ConfigError, match=r"Decimal\('0\.3333.*… \(3,013 characters\)"):
        dp.Budget(epsilon=Decimal("0." + "3" * 3000))
    assert dp.Budget(epsilon=1, delta=Decimal("1e-320")).guarantee()  # a float's range is fine


def test_aggregate_takes_no_share_of_its_own() -> None:
    """Each member takes its share; a share given to the Aggregate was a bare TypeError."""
    members = {"visits": dp.Count(max_rows_per_partition=1, epsilon=0.5, delta=5e-7)}
    with pytest.raises(TypeError, match=r"Aggregate takes no delta/epsilon: each metric takes"):
        dp.Aggregate(
            by=["domain"], max_partitions_per_person=1, metrics=members, epsilon=0.5, delta=1e-6
        )
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['partitions'\]"):
        dp.Aggregate(
            by=["domain"], max_partitions_per_person=1, metrics=members, partitions="private"
        )


def test_private_partitions_without_delta() -> None:
    with (
        pytest.raises(ConfigError, match=r"Count\('visits'\)\.partitions = 'private'"),
        beam.Pipeline() as p,
    ):
        people = by_person(p | beam.Create(ROWS), exact_release(epsilon=1))
        _ = people | "visits" >> dp.Count(
            by=["domain"], max_partitions_per_person=1, max_rows_per_partition=1, epsilon=1
        )


def test_a_sample_aggregate_function_that_cannot_be_pickled() -> None:
    rows_seen = (n for n in range(3))  # a generator: no pickler can send it to a worker

    def holds_a_generator(table: Any) -> float:
        return float(next(rows_seen, table.num_rows))

    with pytest.raises(TypeError, match=r"cannot be pickled .* define it at module level"):
        dp.SampleAggregate(function=holds_a_generator, columns=[], range=[0, 10], epsilon=1)


def test_a_column_not_declared_in_by_person() -> None:
    with (
        pytest.raises(ValueError, match=r"reads column 'url' as a key, but it was not declared"),
        beam.Pipeline() as p,
    ):
        _ = by_person(p | beam.Create(ROWS), exact_release()) | "visits" >> count(by=["url"])


def test_a_transform_without_a_name() -> None:
    with (
        pytest.raises(ValueError, match=r"Count needs a name: 'visits' >> Count"),
        beam.Pipeline() as p,
    ):
        _ = by_person(p | beam.Create(ROWS), exact_release()) | count()


def test_a_value_declared_as_a_key_type_and_arrow_types_that_do_not_match() -> None:
    with pytest.raises(ValueError, match="key types are"):
        exact_release().ByPerson("person", keys={"duration_s": "float"}, person_type="string")
    table = pa.table({"person": ["a"], "domain": [1.5], "duration_s": [1.0]})
    release = exact_release()

    def build(p: beam.Pipeline) -> dict[str, Any]:  # Arrow types: rows, not a failed run
        people = by_person(p | beam.Create([table]), release)
        return {"dead": people.dead_letter | beam.Map(lambda d: d["reason"])}

    assert run_and_collect(build)["dead"] == ["key type mismatch in domain"]


def test_a_release_never_pickles_its_secret() -> None:
    with pytest.raises(TypeError, match="stays on the launcher"):
        pickle.dumps(dp.Release(dp.Budget(epsilon=1)))


def test_one_release_has_one_privacy_unit() -> None:
    """Shares compose for one unit only: a second ByPerson on another person column (or type)
    is refused; another input keyed by the same column is fine. The manifest names the unit."""
    release = exact_release()
    with pytest.raises(ValueError, match="person_type"):  # a typo binds no unit
        release.ByPerson("person", person_type="strng")
    release.ByPerson(
        "person", keys={"domain": "string"}, values=["duration_s"], person_type="string"
    )
    release.ByPerson(
        "person", keys={"url": "string"}, person_type="string"
    )  # purchases, say: the same unit
    with pytest.raises(dp.ReleaseError, match="protects persons identified by 'person'"):
        release.ByPerson("device", keys={"domain": "string"}, person_type="string")
    with pytest.raises(dp.ReleaseError, match=r"not 'person' \('int'\): one release has one"):
        release.ByPerson("person", person_type="int")
    unit = release.manifest()["privacy_unit"]
    assert (unit["person_column"], unit["person_type"]) == ("person", "string")


@pytest.mark.parametrize(
    ("person", "keys", "values"),
    [
        ("person", {"__person__": "string"}, []),  # would replace the person id
        ("person", {"domain": "string"}, ["__reject__"]),  # would mark every row bad
        ("__person_hash__", {}, []),
    ],
)
def test_a_column_named_like_userdps_own_columns(
    person: str, keys: dict[str, str], values: list[str]
) -> None:
    """A key named __person__ made one person's 1,000 rows 1,000 persons (a library review)."""
    with pytest.raises(ValueError, match=r"column name\(s\) \['__\w+__'\] have the form __name__"):
        exact_release().ByPerson(person, keys=keys, values=values, person_type="string")


def test_a_second_release_in_one_pipeline() -> None:
    """Each release would state only its own budget while the same persons pay for both."""
    with (
        pytest.raises(dp.ReleaseError, match="this pipeline already has a Release"),
        beam.Pipeline() as p,
    ):
        rows = p | beam.Create(ROWS)
        _ = by_person(rows, exact_release()) | "visits" >> count()
        _ = rows | "Again" >> exact_release().ByPerson(
            "person", keys={"domain": "string"}, person_type="string"
        )


@pytest.mark.parametrize("column", ["value", "stddev"])
def test_a_by_column_named_like_a_released_column(column: str) -> None:
    """The key and the released value shared a name, and the key vanished from the rows."""
    rows = [{"person": f"p{i}", column: f"k{i % 2}"} for i in range(4)]
    with (
        pytest.raises(
            ConfigError,
            match=rf"Count\('c'\)\.by = \['{column}'\]: expected partition columns not named "
            r"value or stddev",
        ),
        beam.Pipeline() as p,
    ):
        people = (
            p
            | beam.Create(rows)
            | exact_release().ByPerson("person", keys={column: "string"}, person_type="string")
        )
        _ = people | "c" >> dp.Count(
            by=[column], max_partitions_per_person=1, max_rows_per_partition=1,
            epsilon=1, public_partitions=["k0", "k1"],
        )  # fmt: skip


def test_a_refused_aggregate_books_none_of_its_members() -> None:
    """Its second member overspends: nothing is booked, so the fixed Aggregate can follow."""
    release = exact_release(epsilon=1, delta=1e-6)

    def aggregate(eps: float) -> Any:
        return dp.Aggregate(by=["domain"], max_partitions_per_person=1, metrics={
            "m": dp.Count(max_rows_per_partition=1, epsilon=eps, delta=5e-7),
            "n": dp.Count(max_rows_per_partition=1, epsilon=eps, delta=5e-7),
        })  # fmt: skip

    with beam.Pipeline() as p:
        people = by_person(p | beam.Create(ROWS), release)
        with pytest.raises(dp.ReleaseError, match=r"exhausted by the shares \{m: .*n: "):
            _ = people | "too much" >> aggregate(0.6)
        assert release.spent is None
        assert release.manifest()["queries"] == [] and release.manifest()["selections"] == []
        _ = people | "fits" >> aggregate(0.5)
    assert [q["name"] for q in release.manifest()["queries"]] == ["m", "n"]


def test_aggregate_metric_names_that_differ_only_in_case() -> None:
    with pytest.raises(ValueError, match=r"metric names \['M', 'm'\] differ only in case"):
        dp.Aggregate(by=["domain"], max_partitions_per_person=1, metrics={
            "m": dp.Count(max_rows_per_partition=1, epsilon=0.5, delta=5e-7),
            "M": dp.Count(max_rows_per_partition=1, epsilon=0.5, delta=5e-7),
        })  # fmt: skip


def test_a_beam_label_that_cannot_name_an_output() -> None:
    """The label names the output file by default; name= keeps a label with a space."""
    with (
        pytest.raises(ValueError, match=r"the label 'Count visits' .* pass name='visits'"),
        beam.Pipeline() as p,
    ):
        _ = by_person(p | beam.Create(ROWS), exact_release()) | "Count visits" >> count()
    release = exact_release()
    with beam.Pipeline() as p:
        _ = by_person(p | beam.Create(ROWS), release) | "Count visits" >> count(name="visits")
    assert [q["name"] for q in release.manifest()["queries"]] == ["visits"]


def test_private_partitions_under_rho_without_a_delta_share() -> None:
    with (
        pytest.raises(
            dp.ReleaseError,
            match=r"Count\('visits'\) spends δ under the release's ρ budget .* pass delta=\.\.\. "
            r"as its share of the Budget's delta, or public_partitions",
        ),
        beam.Pipeline() as p,
    ):
        people = by_person(p | beam.Create(ROWS), exact_release(rho=0.5, delta=1e-6))
        _ = people | "visits" >> dp.Count(
            by=["domain"], max_partitions_per_person=1, max_rows_per_partition=1, rho=0.1
        )


def test_a_private_partitions_hint_speaks_of_the_library_too() -> None:
    with (
        pytest.raises(
            ConfigError,
            match=r"library: Budget\(\.\.\., delta=\.\.\.\).*library: "
            r"public_partitions=\[\.\.\.\]",
        ),  # fmt: skip
        beam.Pipeline() as p,
    ):
        people = by_person(p | beam.Create(ROWS), exact_release(epsilon=1))
        _ = people | "visits" >> dp.Count(
            by=["domain"], max_partitions_per_person=1, max_rows_per_partition=1, epsilon=1
        )


def _no_arguments() -> float:
    return 1.0


def _p(table: Any, q: float) -> float:
    return q


@functools.wraps(_p)
def _p90(table: Any) -> float:  # a wrapper of one argument around one of two
    return _p(table, 0.9)


def test_a_wrapped_chunk_function_is_judged_by_the_wrapper_that_is_called() -> None:
    """inspect.signature follows __wrapped__ to _p's two parameters; the wrapper takes one."""
    assert resolve_function(_p90) is _p90


def test_key_names_that_are_not_text() -> None:
    with pytest.raises(TypeError, match=r"keys must map column → type"):
        exact_release().ByPerson("person", keys={1: "string"}, person_type="string")  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("function", "match"),
    [
        (
            42,
            r"function = 42: expected an import path 'module:function' \(or, in the library, "
            r"a callable\)",
        ),
        (_no_arguments, r"takes \(\), but is called with one argument: the chunk"),
        (lambda a, b: 1.0, r"takes \(a, b\), but is called with one argument"),
    ],
)
def test_a_sample_aggregate_function_that_is_not_a_chunk_function(
    function: Any, match: str
) -> None:
    """A function of another arity failed on every chunk, and the release was the range's
    midpoint, silently."""
    with pytest.raises(ConfigError, match=match), beam.Pipeline() as p:
        _ = by_person(p | beam.Create(ROWS), exact_release()) | "f" >> dp.SampleAggregate(
            function=function, columns=["duration_s"], range=[0, 100], epsilon=1
        )
