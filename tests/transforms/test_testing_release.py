"""``userdp.transforms.testing.exact_release``: exact, contribution-bounded values for a library
user's own unit tests; refused on any runner that is not local; says "noise off" in its
manifest; misuse named."""

from __future__ import annotations

import sys
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

import userdp.transforms as dp
from userdp.transforms import testing
from userdp.transforms.release import ReleaseError
from userdp.transforms.testing import NOISE_OFF, exact_release

from ..beam_collect import run_and_collect

ROWS = [
    *({"pid": "ann", "dom": "a.example"} for _ in range(3)),  # 3 rows: C = 2 keeps 2
    {"pid": "bob", "dom": "a.example"},
    {"pid": "cy", "dom": "c.example"},  # a partition of one person: still released
    {"pid": "dan", "dom": "b.example"},  # two domains: L = 1 keeps one of them
    {"pid": "dan", "dom": "d.example"},
]


def released(rows: list[dict[str, Any]]) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    release = exact_release(dp.Budget(epsilon=1, delta=1e-6))

    def build(p: beam.Pipeline) -> dict[str, Any]:
        people = (
            p
            | beam.Create(rows)
            | release.ByPerson("pid", keys={"dom": "string"}, person_type="string")
        )
        visits = people | "visits" >> dp.Count(
            by=["dom"], max_partitions_per_person=1, max_rows_per_partition=2,
            epsilon=0.5, delta=5e-7,
        )  # fmt: skip
        return {"visits": visits | beam.Map(lambda r: (r.dom, r.value))}

    return run_and_collect(build)["visits"], release.manifest()


def test_values_are_exact_and_bounded_and_every_partition_is_kept() -> None:
    out, manifest = released(ROWS)
    by_dom = dict(out)
    assert len(out) == len(by_dom) == 3
    assert by_dom["a.example"] == 3 and by_dom["c.example"] == 1  # ann's 3 rows cut to 2
    # dan keeps one of his two domains (a keyed hash of his own rows decides which), so exactly
    # one of them holds a person and is released
    assert [d for d in ("b.example", "d.example") if d in by_dom] in (["b.example"], ["d.example"])
    assert by_dom.get("b.example", 0) + by_dom.get("d.example", 0) == 1
    assert manifest["noise"] == NOISE_OFF
    assert manifest["spent"]["epsilon"] == 0.5  # the budget is booked as in a real release
    for _ in range(2):  # the fixed seed: the same rows are kept in every run
        again, _ = released(ROWS)
        assert sorted(again) == sorted(out)


@pytest.mark.parametrize("runner", ["PortableRunner", "PrismRunner", "FlinkRunner"])
def test_a_non_local_runner_is_refused_when_the_first_transform_is_applied(runner: str) -> None:
    """Prism too: a portable runner, which submits to any --job_endpoint."""
    release = exact_release(dp.Budget(epsilon=1))
    p = beam.Pipeline(runner=runner)  # built, never run
    rows = p | beam.Create(ROWS)
    with pytest.raises(ReleaseError, match=rf"exact_release has no noise .* not {runner}"):
        _ = rows | release.ByPerson("pid", keys={"dom": "string"}, person_type="string")


def test_misuse_is_named() -> None:
    with pytest.raises(TypeError, match="budget must be a userdp Budget"):
        exact_release({"epsilon": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="seed must be bytes, got str"):
        exact_release(dp.Budget(epsilon=1), seed="s")  # type: ignore[arg-type]


def test_the_module_docstring_example_runs_as_written() -> None:
    doc = testing.__doc__ or ""
    block = doc.split("::\n\n", 1)[1].split("\n\nWith noise off", 1)[0]
    exec("\n".join(line[4:] for line in block.splitlines()), {})  # its assert_that must hold


@pytest.mark.parametrize("runner", [None, "DirectRunner", "SwitchingDirectRunner"])
@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--job_endpoint=localhost:1"], "job_endpoint"),
        (["--environment_type=EXTERNAL", "--environment_config=remote:1"], "=EXTERNAL"),
        (["--environment_type=DOCKER"], "=DOCKER"),
    ],
)
def test_options_that_send_the_work_elsewhere_are_refused_even_on_the_direct_runner(
    runner: str | None, flags: list[str], named: str
) -> None:
    """Beam's DirectRunner hands a pipeline to Prism, which submits it to the --job_endpoint
    server and runs it on the --environment_type workers: the exact values would be computed
    there (found by a library review, then by the review of that fix)."""
    release = exact_release(dp.Budget(epsilon=1))
    p = beam.Pipeline(runner=runner, options=PipelineOptions(flags))  # built, never run
    rows = p | beam.Create(ROWS)
    with pytest.raises(ReleaseError, match=rf"options send it elsewhere \(--\w*{named}"):
        _ = rows | release.ByPerson("pid", keys={"dom": "string"}, person_type="string")


def test_loopback_workers_are_local() -> None:
    release = exact_release(dp.Budget(epsilon=1))
    p = beam.Pipeline(options=PipelineOptions(["--environment_type=LOOPBACK"]))
    _ = (
        p
        | beam.Create(ROWS)
        | release.ByPerson("pid", keys={"dom": "string"}, person_type="string")
    )


def exact_per_domain(metric: Any, values: list[float], bounds: list[float]) -> list[float]:
    """The noise-off value of ``metric`` (Mean or Sum) over one domain, one row per person."""
    rows = [{"pid": f"p{i}", "dom": "a", "s": v} for i, v in enumerate(values)]
    release = exact_release(dp.Budget(epsilon=1))

    def build(p: beam.Pipeline) -> dict[str, Any]:
        people = (
            p
            | beam.Create(rows)
            | release.ByPerson("pid", keys={"dom": "string"}, values=["s"], person_type="string")
        )
        out = people | "stat" >> metric(
            by=["dom"], value="s", bounds=bounds, max_partitions_per_person=1,
            max_rows_per_partition=1, epsilon=1, public_partitions=["a"],
        )  # fmt: skip
        return {"value": out | beam.Map(lambda r: r.value)}

    value: list[float] = run_and_collect(build)["value"]
    return value


def test_a_mean_is_the_bounded_mean_correctly_rounded() -> None:
    """mid + Σ(v − mid)/n in floats is 16.666666666666686 for 10, 20, 20; the hook's mean is
    the exact ratio 50/3 rounded once, so a test can compare it with ==."""
    assert exact_per_domain(dp.Mean, [10.0, 20.0, 20.0], [0, 600]) == [50 / 3]


def test_an_exact_sum_past_the_float_range_saturates_as_a_noisy_one_does() -> None:
    """float() of the exact sum raised OverflowError in the noise-off path (a library audit);
    a noisy release saturates at ±max float, and so does the test hook now."""
    assert exact_per_domain(dp.Sum, [1e308] * 3, [0, 1e308]) == [sys.float_info.max]


def test_shifted_inverse_values_are_at_most_the_grid_top() -> None:
    """Every shifted-inverse release is at most D (the grid's top); the noise-off hook gave the
    uncapped 3000 for a Total with upper 1000, a value production never outputs (audit)."""
    release = exact_release(dp.Budget(epsilon=1))
    rows = [{"pid": f"p{i}", "v": 600.0, "u": f"u{i}"} for i in range(5)]

    def build(p: beam.Pipeline) -> dict[str, Any]:
        people = (
            p
            | beam.Create(rows)
            | release.ByPerson("pid", keys={"u": "string"}, values=["v"], person_type="string")
        )
        return {
            name: people | name >> metric | f"{name}/value" >> beam.Map(lambda r: r.value)
            for name, metric in {
                "total": dp.Total(value="v", upper=1000, epsilon=0.25),
                "under": dp.Total(value="v", upper=4000, epsilon=0.25),
                "distinct": dp.Distinct(value="u", upper=3, epsilon=0.25),
                "max": dp.Max(value="v", upper=500, epsilon=0.25),
            }.items()
        }

    out = run_and_collect(build)
    assert out == {"total": [1000.0], "under": [3000.0], "distinct": [3.0], "max": [500.0]}
