"""Flink and Dataflow: the release job translated offline — no network, no job server, no cloud.

* Flink: ``FlinkRunner`` is a PortableRunner, so the job it submits is the ``PrepareJobRequest`` of
  Beam's job API: the pipeline proto and the options. The test runs the real ``FlinkRunner`` through
  ``run_release`` with only its job service replaced by a stub that records that request, then
  checks what a Flink job server would receive.
* Dataflow: Beam's ``PipelineOptionsValidator`` on the resolved options; with ``apache-beam[gcp]``
  installed, also the ``DataflowRunner``'s ``--dry_run`` translation (skipped otherwise).
"""

from __future__ import annotations

import base64
import bz2
import zlib
from pathlib import Path
from typing import Any

import pytest
from apache_beam.internal import pickler
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
from apache_beam.portability import common_urns, python_urns
from apache_beam.portability.api import beam_job_api_pb2, beam_runner_api_pb2
from apache_beam.runners import pipeline_context
from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner
from apache_beam.runners.portability.flink_runner import FlinkRunner

import userdp.pipelines.job
from userdp.pipelines.config import JobConfig, load_job
from userdp.pipelines.job import ReleaseRunError, run_release
from userdp.pipelines.runners import pipeline_options, resolve, resolved_options

from .test_portability import KEY, QUERIES, Dataset, make_dataset, write_job

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

IMAGE = "registry.example/userdp-worker:0.1.0"  # an SDK image with userdp installed
FLINK = f'{{ flink_master = "flink-jm:8081", parallelism = 2, environment_config = "{IMAGE}" }}'
DATAFLOW = {
    "project": "userdp-test",
    "region": "europe-west1",
    "temp_location": "gs://userdp-test-bucket/tmp",
    "sdk_container_image": IMAGE,
    "max_num_workers": 4,
}
# Translate only: no job, no credentials, and no download of the Beam SDK to stage.
DRY_RUN = ("--dry_run=True", "--no_auth", "--sdk_location=container")
# Leaf transforms a portable runner executes itself; every other leaf runs in the Python workers.
RUNNER_PRIMITIVES = {
    common_urns.primitives.IMPULSE.urn,
    common_urns.primitives.GROUP_BY_KEY.urn,
}
SDK_LEAVES = {
    common_urns.primitives.PAR_DO.urn,
    common_urns.primitives.FLATTEN.urn,
    common_urns.primitives.ASSIGN_WINDOWS.urn,
    common_urns.combine_components.COMBINE_PER_KEY_PRECOMBINE.urn,
    common_urns.combine_components.COMBINE_PER_KEY_MERGE_ACCUMULATORS.urn,
    common_urns.combine_components.COMBINE_PER_KEY_EXTRACT_OUTPUTS.urn,
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return make_dataset(tmp_path_factory.mktemp("logs"), people=200)


class _Submitted(Exception):  # noqa: N818 (not an error: the stub stops at the submission)
    """Raised by the stub job service once it holds the job."""


class _RecordingJobService:
    """The two calls of Beam's job API that a submission makes before staging and running."""

    def __init__(self) -> None:
        self.request: beam_job_api_pb2.PrepareJobRequest | None = None

    def DescribePipelineOptions(self, request: Any, timeout: Any = None) -> Any:
        return beam_job_api_pb2.DescribePipelineOptionsResponse()

    def Prepare(self, request: Any, timeout: Any = None) -> Any:
        self.request = request
        raise _Submitted


def check_portable_proto(proto: beam_runner_api_pb2.Pipeline, image: str) -> None:
    """What any portable runner needs: one Docker environment with our image for every leaf
    it does not run itself, no special requirements, deterministic GroupByKey keys, picklable
    user code, and the release's stable step names."""
    components = proto.components
    envs = dict(components.environments)
    assert [e.urn for e in envs.values()] == [common_urns.environments.DOCKER.urn]
    (env_id,) = envs
    assert beam_runner_api_pb2.DockerPayload.FromString(envs[env_id].payload).container_image == (
        image
    )
    assert list(proto.requirements) == []  # no state, timers, bundle finalisation or SDF needs
    context = pipeline_context.PipelineContext(components)
    names = set()
    for t in components.transforms.values():
        names.add(t.unique_name)
        if t.subtransforms:
            continue
        urn = t.spec.urn
        if urn in RUNNER_PRIMITIVES:
            assert not t.environment_id, t.unique_name
        else:
            assert urn in SDK_LEAVES and t.environment_id == env_id, (t.unique_name, urn)
        if urn == common_urns.primitives.GROUP_BY_KEY.urn:
            (pcoll,) = t.inputs.values()
            coder = context.coders.get_by_id(components.pcollections[pcoll].coder_id)
            assert coder.key_coder().is_deterministic(), t.unique_name
        for fn in _user_fns(t):
            assert pickler.loads(fn.payload) is not None, t.unique_name
    for q in QUERIES:
        steps = {f"{q}/BoundAndAggregate", f"{q}/Release", f"{q}/Write", f"{q}/Write/Collect"}
        assert steps <= names, q
    assert {"Read", "ByPerson/Validate", "WriteDeadLetters"} <= names
    assert len([n for n in names if n.endswith("/ShardByPerson")]) == 1  # one shuffle by person


def _user_fns(t: beam_runner_api_pb2.PTransform) -> list[beam_runner_api_pb2.FunctionSpec]:
    urn = t.spec.urn
    if urn == common_urns.primitives.PAR_DO.urn:
        fn = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload).do_fn
        return [fn] if fn.urn == python_urns.PICKLED_DOFN_INFO else []
    if urn.startswith("beam:transform:combine_per_key_"):
        fn = beam_runner_api_pb2.CombinePayload.FromString(t.spec.payload).combine_fn
        assert fn.urn == python_urns.PICKLED_COMBINE_FN
        return [fn]
    return []


@pytest.fixture(scope="module")
def flink_job(
    dataset: Dataset, tmp_path_factory: pytest.TempPathFactory
) -> tuple[JobConfig, beam_job_api_pb2.PrepareJobRequest]:
    """The job file with ``name = "flink"`` and the request FlinkRunner submitted for it."""
    service = _RecordingJobService()

    class RecordingFlinkRunner(FlinkRunner):  # FlinkRunner, minus its job server
        def create_job_service(self, options: PipelineOptions) -> Any:
            return self.create_job_service_handle(service, options)

    def flink(*args: Any, **kwargs: Any) -> tuple[Any, PipelineOptions]:
        runner, options = pipeline_options(*args, **kwargs)
        assert runner == "FlinkRunner"
        return RecordingFlinkRunner(), options

    job = load_job(write_job(tmp_path_factory.mktemp("flink"), dataset, "flink", FLINK))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(userdp.pipelines.job, "pipeline_options", flink)
        with pytest.raises(ReleaseRunError) as failed:
            run_release(job, release_key=KEY)
        assert isinstance(failed.value.__cause__, _Submitted)  # stopped at the submission
    assert service.request is not None
    return job, service.request


def test_flink_runner_submits_a_portable_job_with_our_options(
    flink_job: tuple[JobConfig, beam_job_api_pb2.PrepareJobRequest],
) -> None:
    job, request = flink_job
    options = {k: v.string_value for k, v in request.pipeline_options.fields.items()}
    resolved = resolved_options(job.runner.name, job.runner.options)
    assert options["beam:option:flink_master:v1"] == "flink-jm:8081"
    assert options["beam:option:parallelism:v1"] == "2"
    assert options["beam:option:flink_version:v1"] == resolved["flink_version"]
    assert options["beam:option:environment_type:v1"] == "DOCKER"
    assert options["beam:option:environment_config:v1"] == IMAGE
    check_portable_proto(request.pipeline, IMAGE)
    assert not (Path(job.output.path) / "manifest.json").exists()  # nothing ran, nothing written


def test_the_submitted_job_carries_query_keys_but_never_the_release_secret(
    flink_job: tuple[JobConfig, beam_job_api_pb2.PrepareJobRequest],
) -> None:
    """What a reader of a job server, its UI or a staging bucket finds (docs/threat-model.md):
    never the release secret; without ``[release] secret_path`` the per-query noise keys — which
    is why those places must be operator-only, and what ``userdp plan`` says."""
    secret = KEY.__reduce__()[1][0]
    transforms = flink_job[1].pipeline.components.transforms.values()
    pickles = [_raw_pickle(fn.payload) for t in transforms for fn in _user_fns(t)]
    assert pickles and not any(secret in p for p in pickles)
    for q in QUERIES:  # the control: key bytes in a payload are found by this search
        query_key = KEY.for_query(q).__reduce__()[1][0]
        assert any(query_key in p for p in pickles), q


def _raw_pickle(payload: bytes) -> bytes:
    """Beam's pickler output (base64 of bz2, or of zlib) back to the pickle."""
    data = base64.b64decode(payload)
    try:
        return bz2.decompress(data)
    except OSError:
        return zlib.decompress(data)


def test_dataflow_options_pass_beams_validator(tmp_path: Path) -> None:
    options = PipelineOptions([*resolve("dataflow", DATAFLOW).flags, *DRY_RUN])
    assert PipelineOptionsValidator(options, DataflowRunner()).validate() == []
    # Negative control: the validator does check what it is given.
    flags = [f"--{k}={v}" for k, v in {**DATAFLOW, "project": "1234"}.items()]
    bad = PipelineOptions([*flags, "--dry_run=True"])  # dry run: no bucket checks over the network
    errors = PipelineOptionsValidator(bad, DataflowRunner()).validate()
    assert any("project" in e for e in errors), errors


def test_dataflow_dry_run_translates_the_release(
    dataset: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        import apache_beam.runners.dataflow.internal.apiclient  # noqa: F401, PLC0415
    except ImportError:
        pytest.skip("apache-beam[gcp] is not installed: the Dataflow dry run needs its client")
    runner = DataflowRunner()

    def dataflow(*args: Any, **kwargs: Any) -> tuple[Any, PipelineOptions]:
        name, _ = pipeline_options(*args, **kwargs)
        assert name == "DataflowRunner"  # userdp run refuses --dry_run: it is added here
        return runner, PipelineOptions([*resolve(*args, **kwargs).flags, *DRY_RUN])

    monkeypatch.setattr(userdp.pipelines.job, "pipeline_options", dataflow)
    opts = "{ " + ", ".join(f'{k} = "{v}"' for k, v in DATAFLOW.items() if k != "max_num_workers")
    job = load_job(write_job(tmp_path, dataset, "dataflow", opts + ", max_num_workers = 4 }"))
    run_release(job, release_key=KEY)
    assert runner.job.proto.type.name == "JOB_TYPE_BATCH"
    sent = runner.job.options.get_all_options()
    assert sent["temp_location"].startswith(f"{DATAFLOW['temp_location']}/")  # + a job dir
    assert {k: sent[k] for k in DATAFLOW if k != "temp_location"} == {
        k: v for k, v in DATAFLOW.items() if k != "temp_location"
    }
    check_portable_proto(runner.proto_pipeline, IMAGE)
