"""Retry safety: a bundle that fails and is retried changes nothing in the release.

Beam's ``BundleBasedDirectRunner`` retries a failed bundle (up to 4 attempts) and discards the
failed attempt's outputs, as cluster runners do. Every stage of the release gets one injected
failure — after it has already emitted output where the stage's function is a generator — and the
release must be byte-identical to the reference run on the FnApiRunner without failures: no row
lost, none duplicated, no partition released with two different noise values.

Failures are counted with marker files, so they fire once per stage whatever Beam pickles or
copies. The negative control shows the comparison catches a stage whose retried output differs
(noise drawn from another stream on the retry).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io import textio
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.transforms import combiners

import userdp.pipelines.job
import userdp.pipelines.query_output
import userdp.pipelines.sinks
import userdp.pipelines.sources
import userdp.transforms.aggregate
import userdp.transforms.noisy_combine
import userdp.transforms.validate
from userdp.pipelines.config import load_job
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey

from .test_portability import KEY, Dataset, Release, make_dataset, read_release, run_reference
from .test_portability import write_job as write_job_file

# (stage, object, attribute, fails "before" the call or "midway" after the first output)
STAGES: list[tuple[str, Any, str, str]] = [
    ("read parquet", userdp.pipelines.sources._ReadParquetRowGroups, "process", "midway"),
    ("tag file", userdp.pipelines.sources, "_with_file", "before"),
    ("validate", userdp.transforms.validate._Validate, "process", "midway"),
    ("split by shard", userdp.transforms.aggregate, "split_by_shard", "midway"),
    ("concatenate shard", userdp.transforms.aggregate, "_concatenate", "before"),
    ("bound shard", userdp.transforms.aggregate._AggregateShard, "__call__", "midway"),
    (
        "combine per partition",
        userdp.transforms.aggregate.CombinePartitionStats,
        "add_input",
        "before",
    ),
    ("keep listed keys", userdp.transforms.noisy_combine, "_join_public", "midway"),
    ("release partition", userdp.transforms.noisy_combine._ReleasePartition, "__call__", "midway"),
    ("collect", combiners.ToListCombineFn, "add_input", "before"),
    ("write output", userdp.pipelines.query_output, "write_file", "before"),
    ("dead letter to json", userdp.pipelines.sinks, "_json_line", "before"),
    ("write dead letters", textio._TextSink, "write_encoded_record", "before"),
]


# Beam leaves the temporary file of a failed WriteToText attempt unclosed (the retry writes a new
# one; finalisation deletes both): the warning when Python collects it, in any test, is Beam's.
pytestmark = [
    pytest.mark.slow,  # whole jobs: `make test-all`
    pytest.mark.filterwarnings(
        r"ignore:Exception ignored in. <_io.FileIO name=.*beam-temp-dead_letter"
        ":pytest.PytestUnraisableExceptionWarning"
    ),
]


class InjectedError(RuntimeError):
    """The one failure injected into a stage."""


def fail_once(fn: Callable[..., Any], marker: Path, where: str) -> Callable[..., Any]:
    """``fn`` that raises once (the first call creates ``marker``), before or midway."""

    def first_call() -> bool:
        try:
            marker.touch(exist_ok=False)
        except FileExistsError:
            return False
        return True

    if where == "before":

        @functools.wraps(fn)
        def before(*args: Any, **kwargs: Any) -> Any:
            if first_call():
                raise InjectedError(marker.name)
            return fn(*args, **kwargs)

        return before

    @functools.wraps(fn)
    def midway(*args: Any, **kwargs: Any) -> Iterator[Any]:
        failing = first_call()
        for n, out in enumerate(fn(*args, **kwargs)):
            yield out
            if failing and n == 0:
                raise InjectedError(marker.name)
        if failing:  # the call had no output: fail at its end
            raise InjectedError(marker.name)

    return midway


def run_on_bundle_based_runner(job_file: Path) -> Release:
    job = load_job(job_file)
    run_release(job, release_key=KEY)
    return read_release(job)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return make_dataset(tmp_path_factory.mktemp("logs"), people=600)


@pytest.fixture(scope="module")
def reference(dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> Release:
    return run_reference(tmp_path_factory.mktemp("in_memory"), dataset)


@pytest.fixture
def bundle_based(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_release on the retrying BundleBasedDirectRunner instead of the FnApiRunner."""
    runner = lambda *a, **k: (BundleBasedDirectRunner(), PipelineOptions([]))  # noqa: E731
    monkeypatch.setattr(userdp.pipelines.job, "pipeline_options", runner)


@pytest.mark.usefixtures("bundle_based")
def test_one_failure_in_every_stage_leaves_the_release_byte_identical(
    dataset: Dataset, reference: Release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "failed"
    markers.mkdir()
    for stage, owner, attribute, where in STAGES:
        original = getattr(owner, attribute)
        monkeypatch.setattr(owner, attribute, fail_once(original, markers / stage, where))
    release = run_on_bundle_based_runner(write_job_file(tmp_path / "job", dataset))
    assert sorted(p.name for p in markers.iterdir()) == sorted(s[0] for s in STAGES)  # all fired
    for name, data in release.outputs.items():
        table = pq.read_table(pa.BufferReader(data))
        keys = table.drop_columns(["value", "stddev"]).to_pylist()
        assert len({tuple(k.values()) for k in keys}) == len(keys), name  # no duplicated partition
    assert release == reference
    ops = Path(load_job(tmp_path / "job" / "job.toml").input.dead_letter or "")
    assert [p.name for p in ops.iterdir() if not p.name.startswith("dead_letter-")] == []


@pytest.mark.usefixtures("bundle_based")
def test_negative_control_a_retry_drawing_other_noise_is_caught(
    dataset: Dataset, reference: Release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "failed"
    markers.mkdir()
    release_partition = userdp.transforms.noisy_combine._ReleasePartition.__call__
    failing = fail_once(release_partition, markers / "release partition", "before")

    def other_stream_after_the_failure(self: Any, *args: Any) -> Any:
        if (markers / "release partition").exists():  # the retry: noise from another secret
            self = copy.copy(self)
            self._key = ReleaseKey(bytes(32))
        return failing(self, *args)

    monkeypatch.setattr(
        userdp.transforms.noisy_combine._ReleasePartition,
        "__call__",
        other_stream_after_the_failure,
    )
    release = run_on_bundle_based_runner(write_job_file(tmp_path / "job", dataset))
    assert (markers / "release partition").exists()
    assert release.outputs != reference.outputs
    assert release.dead_letters == reference.dead_letters
