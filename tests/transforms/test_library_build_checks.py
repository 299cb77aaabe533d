"""Misuse the library refuses while the pipeline is built, found by the library audit.

* Under a ρ total, the δ a transform spends beside ρ is booked with its release. Private
  partition selection was booked; PTR, smooth sensitivity with Laplace noise and the top
  partition — (ε, δ) mechanisms counted beside ρ — were not, so one ``PtrMean(delta=0.5)`` ran
  under a Budget whose delta was 10^-6. A job file was already refused
  (``pipelines/plan.py``: ``_split_selection_delta``).
* Integers a worker cannot hold (a C or a shard count of 2^63) are refused, not met on a worker.
* Windowed, triggered or unbounded input is refused: each window was bounded and released on its
  own with the same noise, so two windows' difference was one person's contribution.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_stream as beam_stream
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import trigger, window

import userdp.transforms as dp
from userdp.pipelines.config_fields import ConfigError
from userdp.transforms.mechanisms.rng import ReleaseKey

KEY = ReleaseKey(bytes(range(32)))
ROWS = [{"person": "ann", "domain": "a.example", "duration_s": 10.0}]
MEAN = {"value": "duration_s", "per_person": "mean", "bounds": [0, 600]}


def _release() -> dp.Release:
    return dp.Release._for_launcher(dp.Budget(rho=1, delta=1e-6), KEY, noise=False)


def _people(p: Any, release: dp.Release) -> Any:
    rows = p | beam.Create(ROWS)
    return rows | release.ByPerson(
        "person", keys={"domain": "string"}, values=["duration_s"], person_type="string"
    )


TRANSFORMS = {
    "ptr_mean": lambda d: dp.PtrMean(**MEAN, rho=0.1, delta=d),
    "ptr_median": lambda d: dp.PtrMedian(**MEAN, rho=0.1, delta=d),
    "top_partition": lambda d: dp.TopPartition(by=["domain"], rho=0.1, delta=d),
    "smooth_median": lambda d: dp.Median(
        **MEAN, rho=0.1, delta=d, method="smooth_sensitivity", noise="laplace"
    ),
    "private_count": lambda d: dp.Count(
        by=["domain"], max_partitions_per_person=1, max_rows_per_partition=1, rho=0.1, delta=d
    ),
}


@pytest.mark.parametrize("kind", TRANSFORMS)
def test_a_delta_share_above_the_budget_is_refused(kind: str) -> None:
    with (
        pytest.raises(
            dp.ReleaseError,
            match=r"the release's delta 1e-06 \(spent beside ρ .*\) is exhausted by the "
            r"transforms' delta shares \(0\.5 in all\)",
        ),
        beam.Pipeline() as p,
    ):
        _ = _people(p, _release()) | kind >> TRANSFORMS[kind](0.5)


@pytest.mark.parametrize("first", TRANSFORMS)
@pytest.mark.parametrize("second", ["ptr_mean", "top_partition", "private_count"])
def test_delta_shares_add_up_across_kinds(first: str, second: str) -> None:
    """6·10^-7 twice is 1.2·10^-6 > 10^-6: the second is refused, whichever kinds they are."""
    with (
        pytest.raises(dp.ReleaseError, match=r"delta shares \(1\.2e-06 in all\)"),
        beam.Pipeline() as p,
    ):
        people = _people(p, _release())
        _ = people | "a" >> TRANSFORMS[first](6e-7)
        _ = people | "b" >> TRANSFORMS[second](6e-7)


def test_the_manifest_books_every_delta_spent_beside_rho() -> None:
    release = _release()
    with beam.Pipeline() as p:
        people = _people(p, release)
        _ = people | "ptr" >> TRANSFORMS["ptr_mean"](Fraction(3, 10**7))
        _ = people | "top" >> TRANSFORMS["top_partition"](Fraction(3, 10**7))
        _ = people | "visits" >> TRANSFORMS["private_count"](Fraction(4, 10**7))
    manifest = release.manifest()
    spent = manifest["spent_selection_delta"]
    assert Fraction(spent["exact"]) == Fraction(10, 10**7)
    # the guarantee itself says so: δ-approximate ρ-zCDP, total and spent (it held ρ only)
    assert Fraction(manifest["spent"]["delta_exact"]) == Fraction(10, 10**7)
    assert manifest["spent"]["kind"] == manifest["total"]["kind"] == "zcdp"
    assert Fraction(manifest["total"]["delta_exact"]) == release.budget.config.delta


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda r: r.ByPerson(
                "person", keys={"domain": "string"}, num_shards=2**63, person_type="string"
            ),
            r"num_shards must be an integer in \[1, 1048576\], got 9223372036854775808",
        ),
        (
            lambda r: dp.Count(max_rows_per_partition=2**63, epsilon=1),
            r"max_rows_per_partition = 9223372036854775808: expected an integer in \[1, 2\^53\]",
        ),
        (
            lambda r: dp.Count(
                by=["domain"], max_partitions_per_person=10**30, max_rows_per_partition=1,
                public_partitions=["a.example"], epsilon=1,
            ),
            r"max_partitions_per_person = 10{30}: expected an integer in \[1, 2\^53\]",
        ),
    ],
)  # fmt: skip
def test_integers_too_large_for_the_workers_are_refused_while_building(
    make: Any, match: str
) -> None:
    """A C or a shard count of 2^63 passed the checks, and a worker overflowed — only when a
    person's rows reached it, so whether the run failed depended on the data (library audit)."""
    release = dp.Release(dp.Budget(epsilon=1))
    with pytest.raises((ValueError, ConfigError), match=match), beam.Pipeline() as p:
        rows = p | beam.Create(ROWS)
        transform = make(release)
        if isinstance(transform, dp.Count):
            people = rows | release.ByPerson(
                "person", keys={"domain": "string"}, person_type="string"
            )
            _ = people | "visits" >> transform
        else:
            _ = rows | transform


def _windowed(p: Any, how: str) -> Any:
    rows = p | beam.Create(ROWS) | beam.Map(lambda r: window.TimestampedValue(r, 0))
    if how == "fixed windows":
        return rows | beam.WindowInto(window.FixedWindows(60))
    if how == "sessions":
        return rows | beam.WindowInto(window.Sessions(60))
    if how == "global window, allowed lateness":
        return rows | beam.WindowInto(window.GlobalWindows(), allowed_lateness=60)
    # the global window, but fired per element: one release per pane
    return rows | beam.WindowInto(
        window.GlobalWindows(),
        trigger=trigger.Repeatedly(trigger.AfterCount(1)),
        accumulation_mode=trigger.AccumulationMode.DISCARDING,
    )


@pytest.mark.parametrize(
    ("how", "named"),
    [
        ("fixed windows", "FixedWindows"),
        ("sessions", "Sessions"),
        ("global window, early trigger", "trigger Repeatedly"),
        ("global window, allowed lateness", "allowed lateness 60 s"),
    ],
)
def test_windowed_input_is_refused(how: str, named: str) -> None:
    """Each window would be bounded and released on its own with the same noise key, so two
    windows' difference was one person's exact contribution (library audit). The message names
    what is not the default (a global window with allowed lateness was refused as if windowed)."""
    with (
        pytest.raises(
            dp.ReleaseError, match=rf"ByPerson: the input is windowed or triggered \({named}"
        ),
        beam.Pipeline() as p,
    ):
        _ = _windowed(p, how) | _release().ByPerson(
            "person", keys={"domain": "string"}, values=[], person_type="string"
        )


def test_input_rewindowed_into_the_global_window_is_one_release() -> None:
    release = _release()
    with beam.Pipeline() as p:
        rows = _windowed(p, "fixed windows") | "Global" >> beam.WindowInto(window.GlobalWindows())
        people = rows | release.ByPerson(
            "person", keys={"domain": "string"}, values=[], person_type="string"
        )
        out = people | "visits" >> dp.Count(
            by=["domain"],
            max_partitions_per_person=1,
            max_rows_per_partition=1,
            public_partitions=["a.example"],
            rho=0.5,
        )
        assert_that(out | beam.Map(lambda r: (r.domain, r.value)), equal_to([("a.example", 1.0)]))


def test_unbounded_input_is_refused() -> None:
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    stream = p | beam_stream.TestStream().add_elements(ROWS)
    with pytest.raises(dp.ReleaseError, match=r"ByPerson: the input is unbounded \(a stream\)"):
        _ = stream | _release().ByPerson(
            "person", keys={"domain": "string"}, values=[], person_type="string"
        )


def test_aggregate_refuses_a_member_that_cannot_share_its_selection() -> None:
    """Gaussian noise under (ε, δ) is converted per query and never grouped: the member ran a
    selection of its own, so an Aggregate released two key sets where it promises one."""
    release = dp.Release._for_launcher(dp.Budget(epsilon=2, delta=1e-5), KEY, noise=False)
    count = {"max_rows_per_partition": 1, "epsilon": 1, "delta": 5e-6}
    with (
        pytest.raises(
            dp.ReleaseError,
            match=r"Aggregate\['visits_g'\] cannot share the Aggregate's one partition "
            r"selection: Gaussian noise under an \(ε, δ\) budget",
        ),
        beam.Pipeline() as p,
    ):
        _ = _people(p, release) | dp.Aggregate(
            by=["domain"],
            max_partitions_per_person=1,
            metrics={"visits": dp.Count(**count), "visits_g": dp.Count(**count, noise="gaussian")},
        )


def test_a_metric_without_private_selection_asks_for_public_partitions() -> None:
    with (
        pytest.raises(
            ValueError,
            match=r"Total\('t'\): by=\['domain'\] needs public_partitions=\[\.\.\.\] \(the keys "
            r"to release\): Total has no private partition selection",
        ),
        beam.Pipeline() as p,
    ):
        _ = _people(p, _release()) | "t" >> dp.Total(
            value="duration_s", by=["domain"], max_partitions_per_person=1, upper=100, rho=0.1
        )


@pytest.mark.parametrize("method", ["smooth_median", "ptr_mean"])
def test_bounds_whose_span_overflows_are_named_as_the_bounds(method: str) -> None:
    """The message blamed the budget share ("expected a share the mechanism accepts")."""
    huge = {**MEAN, "bounds": [-1e308, 1e308]}
    transform = (
        dp.Median(**huge, rho=0.1, delta=1e-7, method="smooth_sensitivity", noise="laplace")
        if method == "smooth_median"
        else dp.PtrMean(**huge, rho=0.1, delta=1e-7)
    )
    with (
        pytest.raises(
            ConfigError,
            match=r"\.bounds = \[-1e\+308, 1e\+308\]: expected \[lower, upper\] with upper − "
            r"lower a finite float",
        ),
        beam.Pipeline() as p,
    ):
        _ = _people(p, _release()) | method >> transform


def test_aggregate_names_an_auto_bound_member_as_unable_to_share() -> None:
    with (
        pytest.raises(
            ValueError,
            match=r"Aggregate\['auto'\] has no private partition selection \(bound = 'auto'\), "
            r"so it cannot share the Aggregate's: apply it on its own with public_partitions",
        ),
        beam.Pipeline() as p,
    ):
        _ = _people(p, _release()) | dp.Aggregate(
            by=["domain"],
            max_partitions_per_person=1,
            metrics={
                "visits": dp.Count(max_rows_per_partition=1, rho=0.1, delta=1e-7),
                "auto": dp.Count(bound="auto", rho=0.1, delta=1e-7),
            },
        )


def _eps_delta_release() -> dp.Release:
    return dp.Release._for_launcher(dp.Budget(epsilon=1, delta=1e-6), KEY, noise=False)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        # "Count has no private partition selection": a plain Count has one; bound="auto" not
        (
            lambda: dp.Count(bound="auto", by=["domain"], max_partitions_per_person=1, epsilon=1),
            ValueError,
            r"needs public_partitions=\[\.\.\.\] \(the keys to release\): Count with "
            r"bound='auto' has no private partition selection",
        ),
        # was "unknown key (a typo?)" and "did you mean 'bound'?"
        (
            lambda: dp.Count(bound="auto", max_rows_per_partition=3, epsilon=1),
            ConfigError,
            r"Count\('q'\)\.max_rows_per_partition = 3: expected no fixed clamp with bound = "
            r"'auto'\. bound = 'auto' chooses each person's clamp privately: remove "
            r"max_rows_per_partition",
        ),
        (
            lambda: dp.Sum(value="duration_s", bound="auto", bounds=[0, 10], epsilon=1),
            ConfigError,
            r"Sum\('q'\)\.bounds = \[0, 10\]: expected no fixed clamp with bound = 'auto'",
        ),
        # was "noise = 'laplace': expected a delta > 0": the user never set noise
        (
            lambda: dp.Median(**MEAN, method="smooth_sensitivity", epsilon=1),
            ConfigError,
            r"Median\('q'\)\.delta = \(missing\): expected a delta share: the default noise "
            r"under an \(ε, δ\) total is laplace, which spends δ\. give this query delta",
        ),
    ],
)
def test_misuse_of_bound_auto_and_default_noise_is_named(
    make: Any, error: type, match: str
) -> None:
    """Messages the library-user review found misleading (stop 42)."""
    with pytest.raises(error, match=match), beam.Pipeline() as p:
        _ = _people(p, _eps_delta_release()) | "q" >> make()


def test_an_overflowing_noise_scale_gives_its_advice_once() -> None:
    release = dp.Release._for_launcher(dp.Budget(epsilon=1e-300), KEY, noise=False)
    with pytest.raises(ConfigError) as e, beam.Pipeline() as p:
        _ = _people(p, release) | "q" >> dp.Count(max_rows_per_partition=1, epsilon=1e-300)
    assert str(e.value).count("narrow the bounds or raise the budget") == 1
    assert "has a scale that overflows a float" in str(e.value)


def test_person_type_is_required() -> None:
    """Its default, "string", sent every row of a log with int ids to the dead letters with no
    sign at build time (library-user review); no warning could say so later, since how many rows
    are dead letters depends on the data."""
    release = _release()
    with pytest.raises(TypeError, match=r"ByPerson: person_type is required: 'string' or 'int'"):
        release.ByPerson("person", keys={"domain": "string"})
    with pytest.raises(ValueError, match=r"person_type must be 'string' or 'int', got 'float'"):
        release.ByPerson("person", person_type="float")
