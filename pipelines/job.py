"""The release job's launcher: job file → checks → charge → pipeline into staging → publication.

Order matters and is fixed here (``run_release``):

1. **Check** everything that can be known before the ledger is charged: runner options, the input
   files and their schemas (no row read), the plan (budget split; user functions imported), public
   key files (read and typed), the secret file, and that the dead-letter, output and staging
   locations can be written. A problem here costs nothing: ``ConfigError``, ``SchemaError``,
   ``OutputLocationError`` or ``KeyFileError`` (exit 2).
2. **Charge** the ledger, if the job has one, with a fingerprint of everything the release reads
   (:mod:`.release_inputs`), so a free re-run is refused if anything changed.
3. **Run** the pipeline (:mod:`.release_graph`) into a staging directory. If it fails, nothing was
   published: the staging directory is removed, and so are Beam's temporary folders of raw
   dead-letter rows; the ledger's charge is taken back (a re-run of an earlier charge keeps it).
4. **Publish** (:mod:`.publishing`, :mod:`.publish`): check every output, have the ledger fix
   the manifest's hash for this release id (a later run of the id that would publish other bytes
   is refused, even if this run dies half-way through publishing), then move the outputs and
   write the manifest — public facts from the plan, the files' sizes and hashes, nothing
   computed from the data otherwise — last.

Failures after step 1 raise :class:`ReleaseRunError`, whose message names at most a file and the
kind of fault: library exceptions may quote data and are never shown.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apache_beam as beam

from userdp.transforms.keys import KeyFileError, ReleaseKeys, read_key_file
from userdp.transforms.mechanisms.rng import ReleaseKey, key_check_value, new_release_secret

from . import charging
from .config import JobConfig
from .config_paths import check_input_files_not_dead_letters, check_input_files_outside
from .dead_letters import (
    make_private_directory,
    restrict_dead_letters,
    settle_failed_dead_letters,
)
from .input_listing import list_input_files
from .interrupts import RunInterrupted, caused_by, interrupts_held
from .ledger import Reservation
from .output_layout import RELEASE_FORMATS, QueryFiles, query_files
from .plan import ReleasePlan, plan_release
from .progress import Progress
from .public_keys import check_public_keys
from .publish import (
    OutputLocationError,
    Staging,
    check_staging_name,
    probe_writable,
    staging_parent,
)
from .publishing import ReleaseResult, ReleaseRunError, files_text, publish_release, refund
from .release_graph import build_pipeline, default_shards, required_columns
from .release_inputs import release_artifacts
from .runners import check_worker_paths, pipeline_options
from .sources import InputSchema, input_error_message, inspect_inputs

__all__ = [
    "KeyFileError",
    "OutputLocationError",
    "ReleaseResult",
    "ReleaseRunError",
    "RunInterrupted",
    "build_pipeline",
    "default_shards",
    "required_columns",
    "run_release",
]


@dataclass(frozen=True)
class _Checked:
    """What step 1 established."""

    runner: str
    options: Any
    schema: InputSchema
    plan: ReleasePlan
    secret_check: str | None  # key check value of [release] secret_path, if any


def check_job(job: JobConfig, beam_args: Sequence[str]) -> _Checked:
    """Step 1 (module docstring); raises before anything is charged."""
    base_dir = Path(job.source).parent if job.source else None
    runner, options = pipeline_options(
        job.runner.name, job.runner.options, beam_args, base_dir=base_dir
    )
    check_worker_paths(job.runner.name, job.worker_paths())
    listed = list_input_files(job.input.path)  # once: checked here, then inspected
    # before the files are read: a dead letter is no input file
    check_input_files_not_dead_letters(job.input.dead_letter, listed[0], job.source)
    schema = inspect_inputs(
        job.input.path,
        job.input.format,
        required_columns(job),
        job.input.declared_types(),
        job.input.compression or "auto",
        listed=listed,
    )
    check_input_files_outside(job.output.path, schema.files, job.source)
    plan = plan_release(job)  # imports user functions: a missing one is a ConfigError here
    check_public_keys(job, schema)
    if job.ledger is not None:  # a path the period rule misses is a job mistake: refuse it here,
        charging.release_periods(job.ledger, schema.files)  # before "charging the ledger"
    key_file = job.release.secret_path
    secret_check = key_check_value(read_key_file(key_file)) if key_file else None
    if job.input.dead_letter:  # made owner-only now and kept: a probe that made it with the
        # umask's mode and removed it again raced a concurrent launcher's private directory
        with contextlib.suppress(OSError):  # the probe then says why it cannot be written
            make_private_directory(job.input.dead_letter)
        probe_writable(job.input.dead_letter, "input.dead_letter")
    probe_writable(job.output.path, "output.path")
    probe_writable(staging_parent(job.output.path), "the directory of output.path (for staging)")
    check_staging_name(job.output.path)
    return _Checked(runner, options, schema, plan, secret_check)


def _release_keys(
    job: JobConfig, reservation: Reservation | None, release_key: ReleaseKey | None
) -> ReleaseKeys:
    if release_key is not None:  # test hook: a fixed secret
        if job.ledger is not None or job.release.secret_path is not None:
            raise ValueError(
                "release_key is a test hook for jobs without a [ledger] or secret_path: those "
                "take their secret from the ledger or the key file"
            )
        return ReleaseKeys(release_key)
    secret = reservation.secret if reservation is not None else new_release_secret()
    return ReleaseKeys.from_secret(secret, job.release.secret_path)


def _run_into_staging(
    job: JobConfig,
    c: _Checked,
    keys: ReleaseKeys,
    staging: Staging,
    layout: Mapping[str, QueryFiles],
    *,
    noise: bool,
    num_shards: int | None,
) -> dict[str, list[dict[str, object]]]:
    """Step 3: the pipeline writes every output into ``staging``; their sizes and hashes.
    Dead letters (raw rows) go to an owner-only directory and end owner-only (:mod:`.publish`)."""
    make_private_directory(job.input.dead_letter)
    with beam.Pipeline(runner=c.runner, options=c.options) as pipeline:
        build_pipeline(
            pipeline, job, c.plan, c.schema, keys,
            out_dir=staging.path, noise=noise, num_shards=num_shards, files=layout,
        )  # fmt: skip
    restrict_dead_letters(job.input.dead_letter)
    return staging.file_facts(layout)


def output_layout(job: JobConfig, plan: ReleasePlan) -> dict[str, QueryFiles]:
    """Each query's output files, fixed before the run from the job file and its public key
    files alone (:mod:`.output_layout`)."""
    queries = [
        (q.name, bool(q.by), p.to_manifest().get("n_public_partitions"))
        for q, p in zip(job.queries, plan.queries, strict=True)
    ]
    return query_files(queries, RELEASE_FORMATS[job.output.format], job.output.shards)


def run_release(
    job: JobConfig,
    beam_args: Sequence[str] = (),
    *,
    release_key: ReleaseKey | None = None,
    release_id: str | None = None,
    noise: bool = True,
    num_shards: int | None = None,
    progress: Progress | None = None,
) -> ReleaseResult:
    """Checks, charges, runs into staging and publishes a release (module docstring).

    Raises ``ConfigError``/``SchemaError``/``OutputLocationError``/``KeyFileError`` before
    anything is charged, the ledger's errors when it refuses, :class:`ReleaseRunError` after.

    ``release_id`` overrides ``[ledger] release_id``. ``release_key`` and ``noise=False`` are test
    hooks (a fixed secret; exact values), not reachable from the job file or the command line.
    ``progress``: where stage lines go (:mod:`.progress`; default: nowhere).
    """
    progress = progress or Progress(None)
    progress.stage(f"checking the job file, its inputs and the output location ({job.source})")
    c = check_job(job, beam_args)
    n = len(c.schema.files)
    progress.stage(
        # no size: the input's bytes depend on every person's rows (docs/threat-model.md)
        f"{n} input file{'s' * (n != 1)}, {len(job.queries)} "
        f"quer{'y' if len(job.queries) == 1 else 'ies'}, runner {job.runner.name}"
    )
    reservation: Reservation | None = None
    staging: Staging | None = None
    try:  # from the charge on, whatever stops the run (an interrupt too) takes the charge back
        if job.ledger is not None:
            progress.stage("charging the ledger")
            artifacts = release_artifacts(job, c.secret_check)
            with interrupts_held("finishing the ledger's charge"):  # so it can be taken back
                reservation = charging.reserve(job, c.plan, c.schema.files, release_id, artifacts)
        keys = _release_keys(job, reservation, release_key)
        staging = Staging.create(job.output.path, private=_workers_are_the_launcher(job, c))
        layout = output_layout(job, c.plan)
        rid = reservation.release_id if reservation is not None else None
        outputs_text = files_text(layout)
    except BaseException as e:
        if staging is not None:
            staging.discard()
        charge = refund(job, reservation)
        if caused_by(e, KeyboardInterrupt):
            raise RunInterrupted(
                "before the pipeline ran", charge,
                reservation.release_id if reservation is not None else None,
            ) from e  # fmt: skip
        raise
    try:
        with progress.running(f"running the pipeline on {job.runner.name} ({outputs_text})"):
            files = _run_into_staging(
                job, c, keys, staging, layout, noise=noise, num_shards=num_shards
            )
    except BaseException as e:
        staging.discard()
        settle_failed_dead_letters(job.input.dead_letter)
        # Interrupted, a remote runner's job may go on writing outputs under this secret (Beam
        # does not cancel it): its charge stays. Only the embedded runner stops with us.
        interrupted = caused_by(e, KeyboardInterrupt)  # Beam re-raises it as its own error
        remote = interrupted and job.runner.name != "direct"
        charge = "kept" if remote and reservation is not None else refund(job, reservation)
        if interrupted:  # cleaned up; the CLI says what became of it
            when = "while the pipeline ran" + (
                f" (the {job.runner.name} job may still be running: cancel it there)" * remote
            )
            raise RunInterrupted(when, charge, rid) from e
        if not isinstance(e, Exception):
            raise  # SystemExit and the like: cleaned up, then passed on
        found = input_error_message(e)
        message = found or f"the pipeline failed ({type(e).__name__}); nothing was published"
        if isinstance(e, OutputLocationError):  # the run ended without writing an output
            message = str(e)  # names the query and the file, never a value
        raise ReleaseRunError(
            message,
            input_error=found is not None,
            charge=charge,
            release_id=rid,
        ) from e
    return publish_release(
        job, c.plan, staging, layout, files, reservation=reservation, progress=progress
    )


def _workers_are_the_launcher(job: JobConfig, c: _Checked) -> bool:
    """Direct, or the portable runner's embedded job service with LOOPBACK workers (the options
    as resolved: command-line flags override the file): every worker is this process, so an
    owner-only staging directory cannot lock a worker out."""
    if job.runner.name == "direct":
        return True
    options = c.options.get_all_options()
    return (
        job.runner.name == "portable"
        and options.get("job_endpoint") == "embed"
        and options.get("environment_type") == "LOOPBACK"
    )
