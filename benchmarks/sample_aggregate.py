"""Sample-and-aggregate on synthetic browsing logs: error against the whole-data answer, and time.

For each example function (``pipelines/example_functions.py``) on ``userdp generate`` data, and
each number of chunks k, prints

* ``bias``: the exact (noise-free) clipped mean of the k chunk answers minus f(whole data) —
  the cost of answering on chunks of n/k persons, averaged over the release keys;
* ``rmse mean`` / ``rmse median``: root mean square error of the private release (clipped mean +
  Laplace, rank median) against f(whole data), over ``--repeats`` release keys (each key gives
  another chunking and another noise draw);
* ``time``: wall time of one private release without Beam (chunking, k calls of f, aggregation),
  beside the time of one call of f on the whole data.

``--count`` only times the exact person count that ``chunks = "auto"`` makes before it chooses
k: read + validate + the count on FnApiRunner, the transform's Arrow arrays per hash bucket
beside one Python string per person through ``Distinct`` (the steps it replaced).

With ``--beam`` it also times, for the default k, one job-shaped pipeline per function on Beam's
FnApiRunner: read the Parquet file, validate, ``SampleAndAggregate``. Usage::

    python benchmarks/sample_aggregate.py [--people 100000] [--epsilon 1] [--repeats 10]
        [--chunks 10 32 100 316 1000] [--beam]

(``--chunks`` with no values skips the error table, e.g. to time only the Beam runs.)

``--rho R`` instead compares, at a ρ-zCDP share R, the rmse of both aggregators as the plan now
spends ρ (Gaussian noise for the mean; the median's exponential mechanism at the ε_c with
ε_c²/8 ≤ ρ, bounded range) against the rule it replaced (pure ε with ε²/2 ≤ ρ: Laplace mean,
median at that ε), on the same chunk answers.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from fractions import Fraction
from functools import partial
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

from userdp.pipelines import example_functions
from userdp.pipelines.generate import generate
from userdp.pipelines.input_files import InputSchema
from userdp.pipelines.sources import ReadArrowTables, inspect_inputs
from userdp.transforms.aggregate import split_by_shard
from userdp.transforms.mechanisms.accounting import epsilon_within_rho
from userdp.transforms.mechanisms.chunk_functions import default_chunks, sanitize_answer
from userdp.transforms.mechanisms.rng import ReleaseKey
from userdp.transforms.mechanisms.sample_aggregate import SampleAggregateParams
from userdp.transforms.sample_aggregate import (
    NOISE_LABEL,
    CountDistinctPersons,
    SampleAndAggregate,
    canonical_chunk,
    chunk_answers,
    chunk_key,
)
from userdp.transforms.validate import ValidateRows, split_table

FUNCTIONS: dict[str, tuple[float, float]] = {  # name → output range (public, chosen a priori)
    "duration_vs_hour_slope": (-5.0, 5.0),
    "visit_duration_p90": (0.0, 1000.0),
    "session_duration_p90": (0.0, 1000.0),
}


def clean_logs(people: int) -> pa.Table:
    """``userdp generate`` output, validated into the clean table the pipeline would carry."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "logs.parquet")
        generate(people, path)
        raw = pq.read_table(path, columns=["person_id", "timestamp", "duration_s"])
    clean, dead = split_table(raw, "person_id", "int", {}, ["timestamp", "duration_s"])
    assert not dead
    return clean


def params(
    name: str, epsilon: float | None, chunks: int, aggregator: str, rho: float | None = None
) -> SampleAggregateParams:
    return SampleAggregateParams(
        name,
        f"userdp.pipelines.example_functions:{name}",
        FUNCTIONS[name],
        epsilon,
        aggregator=aggregator,  # type: ignore[arg-type]
        chunks=chunks,
        rho=rho,
    )


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def answers_for_all(table: pa.Table, key: bytes, k: int) -> dict[str, list[tuple[float, ...]]]:
    """Every function's k chunk answers for one chunking (chunks built once, as answer_chunk)."""
    parts: dict[int, list[pa.Table]] = {}
    for c, part in split_by_shard(table, k, key):
        parts.setdefault(c, []).append(part)
    out: dict[str, list[tuple[float, ...]]] = {name: [] for name in FUNCTIONS}
    for c in range(k):
        chunk = canonical_chunk(parts.get(c, []))
        for name, (lo, hi) in FUNCTIONS.items():
            default = (lo / 2 + hi / 2,)
            raw: object = None
            if chunk is not None:
                try:
                    raw = getattr(example_functions, name)(chunk)
                except ValueError:
                    raw = None
            out[name].append(sanitize_answer(raw, 1, default))
    return out


def release_once(table: pa.Table, q: SampleAggregateParams, k: int, key: ReleaseKey) -> object:
    """One private release without Beam: chunking, k calls of the function, the aggregator."""
    answers = chunk_answers(table, q, chunk_key(key, "time"), k)
    return q.aggregator_for(k).release(answers, key.rng("time"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--people", type=int, default=100_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--chunks", type=int, nargs="*", default=[10, 32, 100, 316, 1000])
    parser.add_argument("--beam", action="store_true", help="also time one run on FnApiRunner")
    parser.add_argument("--rho", type=float, help="a ρ-zCDP share instead of ε (see docstring)")
    parser.add_argument(
        "--count", action="store_true", help="only time chunks = 'auto''s person count (docstring)"
    )
    args = parser.parse_args()
    if args.count:
        time_person_count(args.people)
        return
    if args.rho is not None:
        compare_rho(clean_logs(args.people), args.rho, args.repeats, args.chunks)
        return

    table, t_gen = timed(lambda: clean_logs(args.people))
    assert isinstance(table, pa.Table)
    n_persons = len(set(table.column("__person__").to_pylist()))
    print(
        f"data: {args.people} persons, {table.num_rows} rows (generate + validate {t_gen:.1f} s); "
        f"ε = {args.epsilon}, {args.repeats} release keys per k, "
        f"default k = {default_chunks(n_persons)}"
    )
    truth: dict[str, float] = {}
    for name in FUNCTIONS:
        value, seconds = timed(partial(getattr(example_functions, name), table))
        assert isinstance(value, float)
        truth[name] = value
        print(f"  {name}: whole data = {value:.5g}, one call {seconds:.2f} s")

    keys = [ReleaseKey(bytes([r]) * 32) for r in range(args.repeats)]
    print(
        f"\n{'function':<24}{'k':>6}{'bias':>11}{'rmse mean':>11}{'rmse median':>13}"
        f"{'noise sd':>10}{'time':>9}"
    )
    for k in args.chunks:
        errors: dict[str, tuple[list[float], list[float], list[float]]] = {
            name: ([], [], []) for name in FUNCTIONS
        }
        for key in keys:
            answers = answers_for_all(table, chunk_key(key, "bench"), k)
            for name in FUNCTIONS:
                bias, mean_err, median_err = errors[name]
                mean_agg = params(name, args.epsilon, k, "mean").aggregator_for(k)
                median_agg = params(name, args.epsilon, k, "median").aggregator_for(k)
                exact = float(mean_agg.statistic(answers[name])[0])
                bias.append(exact - truth[name])
                rng = key.rng("bench", name, "value")
                mean_err.append(mean_agg.release(answers[name], rng)[0] - truth[name])
                median_err.append(median_agg.release(answers[name], rng)[0] - truth[name])
        for name in FUNCTIONS:
            q = params(name, args.epsilon, k, "mean")
            _, seconds = timed(partial(release_once, table, q, k, keys[0]))
            bias, mean_err, median_err = errors[name]
            std = q.aggregator_for(k).noise_std
            assert std is not None
            print(
                f"{name:<24}{k:>6}{np.mean(bias):>11.4g}"
                f"{math.sqrt(np.mean(np.square(mean_err))):>11.4g}"
                f"{math.sqrt(np.mean(np.square(median_err))):>13.4g}{std:>10.4g}{seconds:>8.2f}s"
            )

    if args.beam:
        time_beam(args.people, args.epsilon, default_chunks(n_persons), keys[0])


def compare_rho(table: pa.Table, rho: float, repeats: int, chunk_counts: list[int]) -> None:
    """``--rho``: rmse of each aggregator under the ρ share as the plan spends it now (Gaussian
    mean, bounded-range median) beside the rule it replaced (everything pure ε with ε²/2 ≤ ρ)."""
    eps = epsilon_within_rho(Fraction(rho))
    truth = {name: getattr(example_functions, name)(table) for name in FUNCTIONS}
    keys = [ReleaseKey(bytes([r]) * 32) for r in range(repeats)]
    print(f"ρ = {rho}: now (Gaussian mean, median at ε_c with ε_c²/8 ≤ ρ) vs the ε²/2 rule "
          f"(ε = {eps:.4g}, Laplace mean); {repeats} release keys per k")  # fmt: skip
    print(f"{'function':<24}{'k':>6}{'rmse mean':>11}{'was':>9}{'rmse median':>13}{'was':>9}")
    for k in chunk_counts:
        err: dict[tuple[str, str, str], list[float]] = {}
        for key in keys:
            answers = answers_for_all(table, chunk_key(key, "bench"), k)
            for name, agg, rule in itertools.product(FUNCTIONS, ("mean", "median"), ("now", "was")):
                q = params(name, None, k, agg, rho) if rule == "now" else params(name, eps, k, agg)
                rng = key.rng("bench", name, agg, rule)
                value = q.aggregator_for(k).release(answers[name], rng)[0]
                err.setdefault((name, agg, rule), []).append(value - truth[name])
        for name in FUNCTIONS:
            rmse = {(a, r): math.sqrt(np.mean(np.square(e))) for (n, a, r), e in err.items()
                    if n == name}  # fmt: skip
            print(f"{name:<24}{k:>6}{rmse['mean', 'now']:>11.4g}{rmse['mean', 'was']:>9.4g}"
                  f"{rmse['median', 'now']:>13.4g}{rmse['median', 'was']:>9.4g}")  # fmt: skip


def _read_clean(p: beam.Pipeline, schema: InputSchema) -> Any:
    """The job's first steps: read the inspected files, validate, keep the clean tables."""
    return (
        p
        | "Read" >> ReadArrowTables(schema)
        | "Validate" >> ValidateRows(schema.person, schema.person_type, {}, list(schema.numbers))
    ).clean


def _ids_per_table(table: pa.Table) -> list[str]:
    persons: list[str] = pc.unique(table.column("__person__")).to_pylist()
    return persons


def time_person_count(people: int) -> None:
    """``--count``: chunks = "auto" counts persons exactly before it chooses k. Read + validate +
    the count, on FnApiRunner, with ``CountDistinctPersons`` (an Arrow array per hash bucket and
    table) beside the steps it replaced (each table's ids as Python strings, ``Distinct``,
    ``Count.Globally``); both counts must agree."""
    columns = {"person_id": "person", "duration_s": "number"}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "logs.parquet")
        rows = generate(people, path)
        schema = inspect_inputs(path, "parquet", columns)
        steps = {
            "arrays per bucket (now)": CountDistinctPersons(bytes(32)),
            "Distinct (before)": beam.FlatMap(_ids_per_table)
            | beam.Distinct()
            | beam.combiners.Count.Globally(),
        }
        found: dict[str, tuple[float, int]] = {}
        for i, (name, count) in enumerate(steps.items()):
            out = os.path.join(tmp, f"count-{i}.txt")
            start = time.perf_counter()
            with beam.Pipeline(runner=FnApiRunner()) as p:
                clean = _read_clean(p, schema)
                _ = clean | "Count" >> count | beam.io.WriteToText(out, shard_name_template="")
            with open(out) as f:
                found[name] = (time.perf_counter() - start, int(f.read()))
        print(f"{rows:,} rows, {people:,} persons: read + validate + the exact person count")
        for name, (seconds, n) in found.items():
            print(f"  {name:<24} {seconds:6.2f} s   count {n:,}")
        (now, a), (before, b) = found.values()
        print(f"  ratio {before / now:.2f}; counts agree: {a == b}")


def time_beam(people: int, epsilon: float, k: int, key: ReleaseKey) -> None:
    """One job-shaped pipeline per function: read Parquet → validate → sample-and-aggregate."""
    columns = {"person_id": "person", "timestamp": "number", "duration_s": "number"}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "logs.parquet")
        generate(people, path)
        schema = inspect_inputs(path, "parquet", columns)
        for name in FUNCTIONS:
            q = params(name, epsilon, k, "mean")
            out = os.path.join(tmp, f"{name}.jsonl")
            start = time.perf_counter()
            with beam.Pipeline(runner=FnApiRunner()) as p:
                clean = _read_clean(p, schema)
                _ = (
                    clean
                    | "SAA" >> SampleAndAggregate(q, key)
                    | "Json" >> beam.Map(json.dumps)
                    | "Write" >> beam.io.WriteToText(out, shard_name_template="")
                )
            seconds = time.perf_counter() - start
            with open(out) as f:
                [row] = [json.loads(line) for line in f]
            # The same release without Beam (same key and labels) must give the same number.
            agg = q.aggregator_for(k)
            answers = chunk_answers(clean_logs(people), q, chunk_key(key, q.name), k)
            # SampleAndAggregate draws from the query's derived key (keys.for_query), as every
            # query's noise does; the same stream here, or the two paths are not comparable.
            again = agg.release(answers, key.for_query(q.name).rng(NOISE_LABEL, "value"))[0]
            print(
                f"beam FnApiRunner, read + validate + {name}, k = {k}: {seconds:.1f} s; "
                f"released {row['value']:.6g} (without Beam: {again:.6g})"
            )
            if row["value"] != again:
                sys.exit(f"the Beam release {row['value']!r} is not the pure path's {again!r}")


if __name__ == "__main__":
    main()
