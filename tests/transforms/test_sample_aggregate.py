"""Sample-and-aggregate on Beam (transforms.sample_aggregate): person chunks, failing functions,
the release."""

from __future__ import annotations

import importlib.util
import logging
import math
import statistics
import sys
import warnings
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from tests.beam_collect import run_and_collect
from tests.stats_helpers import P_MIN
from userdp.pipelines import example_functions
from userdp.transforms.columns import PERSON_COLUMN
from userdp.transforms.mechanisms.chunk_functions import default_chunks
from userdp.transforms.mechanisms.rng import ReleaseKey
from userdp.transforms.mechanisms.sample_aggregate import SampleAggregateParams
from userdp.transforms.sample_aggregate import (
    AnswerPerChunk,
    SampleAndAggregate,
    answer_chunk,
    canonical_chunk,
    chunk_answers,
    chunk_ids,
    chunk_key,
    resolve_function,
)

HERE = "tests.transforms.test_sample_aggregate"
RELEASE_KEY = ReleaseKey(bytes(range(32)))
OTHER_KEY = ReleaseKey(bytes(range(1, 33)))
PERSONS = 25
RANGE = (0.0, 100.0)


# --- functions named by import path in the tests below ---------------------------------------


def mean_d(table: pa.Table) -> float:
    return float(np.mean(table.column("d").to_numpy()))


def first_d(table: pa.Table) -> float:
    """Order-sensitive on purpose: the chunk's row order must not depend on the input split."""
    return float(table.column("d")[0].as_py())


def pair_of_means(table: pa.Table) -> list[float]:
    d = table.column("d").to_numpy()
    return [float(d.mean()), float(d.max())]


class NotAnException(BaseException):
    """As asyncio.CancelledError or a framework's timeout: not an Exception subclass."""


def flaky(table: pa.Table) -> object:
    """Fails in a different way on chunks holding p3, p4, p5, p6, p7 or p9; else mean_d."""
    persons = set(table.column(PERSON_COLUMN).to_pylist())
    print(f"chunk persons: {sorted(persons)}")  # a debug print quoting the chunk's ids
    if "p3" in persons:
        raise ZeroDivisionError("chunk-dependent failure")
    if "p4" in persons:
        sys.exit(3)  # a function that exits the process must not end the job on these data
    if "p6" in persons:
        raise NotAnException("SECRET-p6")
    if "p5" in persons:
        return math.nan
    if "p7" in persons:
        return [1.0, 2.0]
    if "p9" in persons:
        return "12.5"
    return mean_d(table)


def pandas_mean(frame: Any) -> float:
    return float(frame["d"].mean())


NOT_CALLABLE = 3


def params(function: str = "mean_d", **kw: Any) -> SampleAggregateParams:
    base: dict[str, Any] = {
        "name": "saa",
        "function": f"{HERE}:{function}",
        "output_range": RANGE,
        "epsilon": 1.0,
        "chunks": 7,
    }
    base.update(kw)
    return SampleAggregateParams(**base)


def tables(seed: int = 0, count: int = 4, rows: int = 60) -> list[pa.Table]:
    rng = np.random.default_rng(seed)  # not noise: test data
    out = []
    for _ in range(count):
        out.append(
            pa.table(
                {
                    PERSON_COLUMN: pa.array([f"p{i}" for i in rng.integers(0, PERSONS, rows)]),
                    "domain": pa.array([f"d{i}" for i in rng.integers(0, 3, rows)]),
                    "d": pa.array(rng.uniform(-10.0, 120.0, rows)),
                }
            )
        )
    return out


def exact_chunk_rows(data: pa.Table, key: bytes, k: int) -> dict[int, pa.Table]:
    """Independent reference: group rows by the chunk of their person (no canonical sort)."""
    chunk = chunk_ids(data.column(PERSON_COLUMN), k, key)
    return {c: data.filter(pa.array(chunk == c)) for c in sorted(set(chunk.tolist()))}


# --- chunk assignment ------------------------------------------------------------------------


def test_all_rows_of_a_person_land_in_one_chunk() -> None:
    data = pa.concat_tables(tables())
    chunk = chunk_ids(data.column(PERSON_COLUMN), 5, chunk_key(RELEASE_KEY, "saa"))
    seen: dict[str, int] = {}
    for person, c in zip(data.column(PERSON_COLUMN).to_pylist(), chunk.tolist(), strict=True):
        assert seen.setdefault(person, c) == c
        assert 0 <= c < 5


def test_assignment_is_deterministic_per_key_and_differs_across_keys_and_queries() -> None:
    persons = pa.array([f"user{i}" for i in range(2000)])
    key = chunk_key(RELEASE_KEY, "saa")
    a = chunk_ids(persons, 10, key)
    # Same key, the persons in another order and split: the same chunk per person.
    b = chunk_ids(persons.take(pa.array(np.arange(1999, -1, -1))), 10, key)[::-1]
    assert np.array_equal(a, b)
    assert np.array_equal(a, chunk_ids(persons, 10, chunk_key(ReleaseKey(bytes(range(32))), "saa")))
    other_release = chunk_ids(persons, 10, chunk_key(OTHER_KEY, "saa"))
    other_query = chunk_ids(persons, 10, chunk_key(RELEASE_KEY, "saa2"))
    # Independent assignments agree on ~1/10 of persons; 2000 persons: far from all of them.
    assert (a == other_release).mean() < 0.2 and (a == other_query).mean() < 0.2
    assert chunk_key(RELEASE_KEY, "saa") != RELEASE_KEY.subkey("bounding")


def test_chunks_are_balanced() -> None:
    # χ² of 20,000 persons over 10 chunks against uniform: false rejection ≤ P_MIN.
    persons = pa.array([str(i) for i in range(20_000)])
    counts = np.bincount(chunk_ids(persons, 10, chunk_key(RELEASE_KEY, "balance")), minlength=10)
    assert stats.chisquare(counts).pvalue > P_MIN


# --- one chunk -------------------------------------------------------------------------------


def test_the_chunk_table_does_not_depend_on_input_split_or_order() -> None:
    data = pa.concat_tables(tables())
    shuffled = data.take(pa.array(np.random.default_rng(3).permutation(data.num_rows)))
    one = canonical_chunk([data])
    other = canonical_chunk([shuffled.slice(0, 7), shuffled.slice(7, 0), shuffled.slice(7)])
    assert one is not None and other is not None and one.equals(other)
    assert canonical_chunk([]) is None and canonical_chunk([data.slice(0, 0)]) is None
    # Rows equal but for the sign of a zero would sort as ties in input order: −0.0 becomes 0.0.
    zeros = pa.table({PERSON_COLUMN: ["a", "a"], "d": [-0.0, 0.0]})
    for t in (zeros, zeros.take(pa.array([1, 0]))):
        chunk = canonical_chunk([t])
        assert chunk is not None
        assert [math.copysign(1.0, v) for v in chunk.column("d").to_pylist()] == [1.0, 1.0]
    fn = resolve_function(f"{HERE}:first_d")
    p = params("first_d")
    assert answer_chunk([data], fn, p) == answer_chunk(
        [shuffled.slice(9), shuffled.slice(0, 9)], fn, p
    )


@pytest.mark.parametrize("function", ["flaky", "pair_of_means"])
def test_failing_answers_become_the_default(function: str) -> None:
    fn = resolve_function(f"{HERE}:{function}")
    p = params(function)
    base = {PERSON_COLUMN: ["p1", "p2"], "d": [10.0, 30.0]}
    expected_ok = (20.0,) if function == "flaky" else (50.0,)  # pair_of_means: wrong shape
    assert answer_chunk([pa.table(base)], fn, p) == expected_ok
    assert answer_chunk([], fn, p) == (50.0,)  # empty chunk: the midpoint of (0, 100)
    for bad in ("p3", "p4", "p5", "p6", "p7", "p9"):
        chunk = pa.table({PERSON_COLUMN: ["p1", bad], "d": [10.0, 30.0]})
        assert answer_chunk([chunk], fn, p) == (50.0,)


def test_a_function_prints_nothing_and_its_interrupts_still_stop_the_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A print quoting the chunk's rows would appear only when those rows are there: dropped.
    Ctrl-C or SIGTERM (a KeyboardInterrupt) lands wherever code runs: it still stops the run."""
    fn = resolve_function(f"{HERE}:flaky")
    answer_chunk([pa.table({PERSON_COLUMN: ["p1", "p2"], "d": [10.0, 30.0]})], fn, params("flaky"))
    assert capsys.readouterr() == ("", "")

    def interrupted(table: pa.Table) -> float:
        raise KeyboardInterrupt("the operator's Ctrl-C")

    with pytest.raises(KeyboardInterrupt, match="the operator's Ctrl-C"):
        answer_chunk([pa.table({PERSON_COLUMN: ["p1"], "d": [1.0]})], interrupted, params())


class _LoudAnswer(float):
    """An answer whose reading exits, prints and warns: code the function's answer runs."""

    how = ""

    def __float__(self) -> float:
        if self.how == "exit":
            raise SystemExit(2)
        print("the answer's rows: ...")
        warnings.warn("answer warned", UserWarning, stacklevel=1)
        return 1.0


def test_reading_the_answer_is_guarded_and_silenced_like_the_function(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The answer was read outside the guard: SystemExit from its __float__ ended the run, and
    its prints and warnings appeared, on some chunks only (a library audit). Log records the
    function emits are dropped too ("fit did not converge" on some data only)."""
    chunk = [pa.table({PERSON_COLUMN: ["p1"], "d": [1.0]})]
    exits, loud = _LoudAnswer(7.0), _LoudAnswer(7.0)
    exits.how, loud.how = "exit", "loud"
    assert answer_chunk(chunk, lambda t: exits, params()) == (50.0,)
    assert answer_chunk(chunk, lambda t: loud, params()) == (1.0,)

    def logs(table: pa.Table) -> float:
        logging.getLogger("mylib").warning("fit did not converge on %s", table.num_rows)
        return 2.0

    with caplog.at_level(logging.DEBUG):
        assert answer_chunk(chunk, logs, params()) == (2.0,)
        logging.getLogger("mylib").warning("after the call: logged again")
    assert capsys.readouterr() == ("", "")
    assert [r.getMessage() for r in caplog.records] == ["after the call: logged again"]


def test_vector_answers() -> None:
    fn = resolve_function(f"{HERE}:pair_of_means")
    p = params("pair_of_means", dimension=2, output_range=((0.0, 10.0), (0.0, 100.0)))
    assert answer_chunk([pa.table({PERSON_COLUMN: ["a"], "d": [4.0]})], fn, p) == (4.0, 4.0)
    assert answer_chunk([], fn, p) == (5.0, 50.0)


def test_bad_function_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot import module 'no_such_module_xyz'"):
        resolve_function("no_such_module_xyz:f")
    with pytest.raises(ValueError, match="has no attribute 'missing'"):
        resolve_function(f"{HERE}:missing")
    with pytest.raises(ValueError, match="not a callable"):
        resolve_function(f"{HERE}:NOT_CALLABLE")
    with pytest.raises(ValueError, match="'module:function'"):
        resolve_function("nocolon")
    with pytest.raises(ValueError, match="has no attribute"):
        AnswerPerChunk(params("missing"), chunk_key(RELEASE_KEY, "saa"))


def test_transform_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match="bounding key must be 32 bytes"):
        AnswerPerChunk(params(), b"short")
    with pytest.raises(ValueError, match="pass that k as a singleton PCollection"):
        AnswerPerChunk(params(chunks=None, count_epsilon=0.1), chunk_key(RELEASE_KEY, "saa"))
    with pytest.raises(TypeError, match="keys must be a ReleaseKey or ReleaseKeys, got bytes"):
        SampleAndAggregate(params(), bytes(32))  # type: ignore[arg-type]


def test_pandas_input() -> None:
    p = params("pandas_mean", input_kind="pandas")
    if importlib.util.find_spec("pandas") is None:
        with pytest.raises(ValueError, match="needs pandas, which is not installed"):
            SampleAndAggregate(p, RELEASE_KEY)
    else:
        fn = resolve_function(p.function)
        chunk = pa.table({PERSON_COLUMN: ["a", "b"], "d": [1.0, 3.0]})
        assert answer_chunk([chunk], fn, p) == (2.0,)


# --- pipelines -------------------------------------------------------------------------------


def run(branches: dict[str, Any], inputs: list[pa.Table]) -> dict[str, list[Any]]:
    """One pipeline; each branch transform is applied to the same input tables."""

    def build(p: beam.Pipeline) -> dict[str, Any]:
        data = p | "Create" >> beam.Create(inputs)
        return {tag: data | tag >> transform for tag, transform in branches.items()}

    return run_and_collect(build)


def test_every_chunk_answers_exactly_once_and_matches_the_reference() -> None:
    inputs = tables()
    p = params(chunks=40)  # 25 persons: at least 15 chunks are empty
    key = chunk_key(RELEASE_KEY, p.name)
    out = run({"Answers": AnswerPerChunk(p, key)}, inputs)["Answers"]
    assert sorted(c for c, _ in out) == list(range(40))
    expected = chunk_answers(pa.concat_tables(inputs), p, key, 40)
    assert [a for _, a in sorted(out)] == expected
    assert sum(a == (50.0,) for a in expected) >= 15


def test_noise_off_release_equals_mean_and_median_of_the_exact_chunk_answers() -> None:
    inputs = tables()
    data = pa.concat_tables(inputs)
    mean_q = params(name="m", chunks=6, output_range=(0.0, 50.0))
    median_q = params(name="med", chunks=6, aggregator="median", output_range=(0.0, 50.0))
    out = run(
        {
            "Mean": SampleAndAggregate(mean_q, RELEASE_KEY, noise=False),
            "Median": SampleAndAggregate(median_q, RELEASE_KEY, noise=False),
        },
        inputs,
    )
    for tag, q, aggregate in (("Mean", mean_q, statistics.mean), ("Median", median_q, None)):
        rows = exact_chunk_rows(data, chunk_key(RELEASE_KEY, q.name), 6)
        answers = [
            min(50.0, max(0.0, float(np.mean(rows[c].column("d").to_numpy()))))
            if c in rows
            else 25.0
            for c in range(6)
        ]
        expected = aggregate(answers) if aggregate else statistics.median(answers)
        [row] = out[tag]
        assert row["value"] == pytest.approx(expected, rel=1e-12)
        assert row["coordinate"] == 0 and row["chunks"] == 6
        assert (row["stddev"] is None) == (q.aggregator == "median")


def test_a_failing_function_on_some_chunks_does_not_stop_the_job() -> None:
    inputs = tables()
    data = pa.concat_tables(inputs)
    q = params("flaky", chunks=10)
    [row] = run({"Flaky": SampleAndAggregate(q, RELEASE_KEY, noise=False)}, inputs)["Flaky"]
    rows = exact_chunk_rows(data, chunk_key(RELEASE_KEY, q.name), 10)
    answers = []
    for c in range(10):
        persons = set(rows[c].column(PERSON_COLUMN).to_pylist()) if c in rows else set()
        if not persons or persons & {"p3", "p4", "p5", "p6", "p7", "p9"}:
            answers.append(50.0)
        else:
            answers.append(min(100.0, max(0.0, float(np.mean(rows[c].column("d").to_numpy())))))
    assert sum(a == 50.0 for a in answers) >= 1  # the test exercises the default
    assert row["value"] == pytest.approx(statistics.mean(answers), rel=1e-12)


def test_noisy_release_is_keyed_and_k_can_come_from_a_private_person_count() -> None:
    inputs = tables()
    q = params(chunks=8)
    auto = params(name="auto", chunks=None, count_epsilon=0.5)
    vector = params(
        "pair_of_means", name="vec", dimension=2, output_range=((0.0, 50.0), (0.0, 200.0))
    )
    out = run(
        {
            "A": SampleAndAggregate(q, RELEASE_KEY),
            "B": SampleAndAggregate(q, RELEASE_KEY),
            "Other": SampleAndAggregate(q, OTHER_KEY),
            "Exact": SampleAndAggregate(q, RELEASE_KEY, noise=False),
            "AutoExact": SampleAndAggregate(auto, RELEASE_KEY, noise=False),
            "Auto": SampleAndAggregate(auto, RELEASE_KEY),
            "Vector": SampleAndAggregate(vector, RELEASE_KEY),
        },
        inputs,
    )
    assert out["A"] == out["B"]  # same secret and label: a re-run publishes the same number
    assert out["A"][0]["value"] != out["Other"][0]["value"]
    assert out["A"][0]["value"] != out["Exact"][0]["value"]
    # Laplace scale (u − l)/(kε) = 12.5: P[|noise| > 12.5·ln(10^6)] ≤ 10^-6.
    assert abs(out["A"][0]["value"] - out["Exact"][0]["value"]) < 12.5 * math.log(1e6)
    assert out["A"][0]["stddev"] == pytest.approx(math.sqrt(2) * 12.5, rel=1e-9)
    assert out["AutoExact"][0]["chunks"] == default_chunks(PERSONS) == 10
    # Count noise Laplace(1/0.5): k = ⌊√n̂⌋ stays at the floor of 10 unless n̂ ≥ 121.
    assert out["Auto"][0]["chunks"] == 10
    assert sorted(r["coordinate"] for r in out["Vector"]) == [0, 1]


def test_the_person_count_for_k_counts_each_person_once_across_tables() -> None:
    """chunks = "auto" counts persons per bucket of a keyed hash (Arrow arrays through the
    shuffle, not one element per person): a person in several tables, or twice in one, counts
    once. 400 persons in three overlapping tables: k = ⌊√400⌋ = 20 with noise off (511, the
    count with overlaps, would give 22; 399 would give 19)."""

    def table(ids: range, repeat: int) -> pa.Table:
        persons = [f"p{i}" for i in ids for _ in range(repeat)]
        n = len(persons)
        return pa.table({PERSON_COLUMN: persons, "domain": ["d0"] * n, "d": [1.0] * n})

    inputs = [table(range(0, 250), 2), table(range(150, 400), 1), table(range(0, 11), 3)]
    auto = params(name="auto", chunks=None, count_epsilon=1.0)
    out = run({"Auto": SampleAndAggregate(auto, RELEASE_KEY, noise=False)}, inputs)
    assert out["Auto"][0]["chunks"] == 20


def test_no_input_at_all_still_releases_from_k_default_answers() -> None:
    q = params(chunks=5)
    auto = params(name="auto", chunks=None, count_epsilon=1.0)
    out = run(
        {
            "Fixed": SampleAndAggregate(q, RELEASE_KEY, noise=False),
            "Auto": SampleAndAggregate(auto, RELEASE_KEY, noise=False),
        },
        [],
    )
    std = q.aggregator_for(5).noise_std
    assert out["Fixed"] == [{"coordinate": 0, "value": 50.0, "stddev": std, "chunks": 5}]
    assert out["Auto"][0]["value"] == 50.0 and out["Auto"][0]["chunks"] == 10


# --- shipped example functions ---------------------------------------------------------------


def visits(persons: list[str], timestamps: list[float], durations: list[float]) -> pa.Table:
    return pa.table({PERSON_COLUMN: persons, "timestamp": timestamps, "duration_s": durations})


def test_example_slope_is_the_least_squares_slope_on_hour_of_day() -> None:
    day = 86_400.0
    hours = [0, 1, 5, 23, 12, 12]
    ts = [3 * day + h * 3600 + 59 for h in hours]  # other days and seconds: same hours
    t = visits(["a"] * 6, ts, [2.0 * h + 5.0 for h in hours])
    assert example_functions.duration_vs_hour_slope(t) == pytest.approx(2.0, rel=1e-12)
    with_inf = visits(["a"] * 7, [*ts, ts[0]], [*(2.0 * h + 5.0 for h in hours), math.inf])
    assert example_functions.duration_vs_hour_slope(with_inf) == pytest.approx(2.0, rel=1e-12)
    with pytest.raises(ValueError, match="at least two hours"):
        example_functions.duration_vs_hour_slope(visits(["a", "b"], [0.0, 60.0], [1.0, 2.0]))


def test_example_percentiles_and_sessions() -> None:
    # Person a: visits at 0, 1000, 2000 s (one session, gaps ≤ 30 min), then 10000 (a new one);
    # person b: one visit at 500 s — never merged with a's session.
    t = visits(
        ["a", "a", "a", "a", "b"],
        [2000.0, 0.0, 1000.0, 10_000.0, 500.0],
        [1.0, 2.0, 3.0, 40.0, 7.0],
    )
    assert sorted(example_functions.session_durations(t).tolist()) == [6.0, 7.0, 40.0]
    assert example_functions.session_duration_p90(t) == pytest.approx(
        float(np.percentile([6.0, 7.0, 40.0], 90))
    )
    assert example_functions.visit_duration_p90(t) == pytest.approx(
        float(np.percentile([1.0, 2.0, 3.0, 40.0, 7.0], 90))
    )
    empty = visits([], [], [])
    for fn in (example_functions.session_duration_p90, example_functions.visit_duration_p90):
        with pytest.raises(ValueError, match="at least one"):
            fn(empty)


def overflows_then_warns(table: pa.Table) -> object:
    """NumPy warns ("overflow encountered") on huge values; a plain warning on p2's chunks."""
    if "p2" in set(table.column(PERSON_COLUMN).to_pylist()):
        warnings.warn("a chunk-dependent warning", UserWarning, stacklevel=1)
        return 7.0
    return float(np.asarray(table.column("d").to_numpy()).sum())


def test_a_function_warning_on_some_chunks_prints_nothing() -> None:
    """A warning only some data raise would show on the worker only with those data; it is
    silenced, and a non-finite answer becomes the default as a failure does."""
    fn = resolve_function(f"{HERE}:overflows_then_warns")
    p = params("overflows_then_warns")
    huge = pa.table({PERSON_COLUMN: ["p1", "p3"], "d": [1e308, 1e308]})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert answer_chunk([huge], fn, p) == (50.0,)  # inf → the default
        assert answer_chunk([pa.table({PERSON_COLUMN: ["p2"], "d": [1.0]})], fn, p) == (7.0,)
    assert seen == []
