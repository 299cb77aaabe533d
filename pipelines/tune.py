"""``userdp tune JOB.toml``: measure how persons contribute, privately, and recommend L and C.

Order (``run_tune``), as in a release (:mod:`.job`):

1. **Check** the job as ``userdp run`` would (runner options, input files and schemas, the plan)
   and fix the tuning's split (:mod:`.tune_model`): one measurement per ``by`` of a tuned query.
2. **Charge** the ledger, when the job has one, with the tuning's ε under its own release id
   (``<scope>-tune-<time>``), in the kind of the job's total (pure ε-DP is ε²/2-zCDP, Bun &
   Steinke 2016, Prop. 1.4, for a ρ ledger). Nothing is charged when the job has no ledger; the
   spend is still stated in the tuning manifest.
3. **Measure** on Beam (:class:`~userdp.transforms.contribution_structure.ContributionStructure`):
   the same reader and ByPerson as a release, all noise in the measurement's final step.
4. **Recommend** (post-processing of the noisy measurements and the plan) and write, in the
   tuning directory (default ``<job>.tune/`` beside the job file): ``measurements.json`` (the DP
   values), ``report.html`` (:mod:`.tune_report`), ``manifest.json`` (what was spent, with which
   mechanisms, the ledger's charge, every file's SHA-256); and beside the job file a new job file
   with the recommended bounds (:mod:`.tune_jobfile`) — the original is never touched.

A failed pipeline takes its charge back (nothing was computed from the data that left it). Rows
the reader rejects are left out of the measurements exactly as a release leaves them out of its
statistics; their dead-letter file is written by ``userdp run``, not by tuning.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from userdp.transforms.by_person import ByPerson
from userdp.transforms.contribution_structure import ContributionStructure, ValueStructure
from userdp.transforms.keys import ReleaseKeys
from userdp.transforms.mechanisms.accounting import ZCDP, ApproxDP, PureDP
from userdp.transforms.mechanisms.accounting import Budget as Guarantee
from userdp.transforms.mechanisms.rng import ReleaseKey, new_release_secret
from userdp.transforms.release import Budget, Release

from . import charging
from .config import JobConfig
from .config_fields import ConfigError
from .config_paths import paths_overlap
from .interrupts import RunInterrupted, caused_by, interrupts_held
from .job import check_job
from .ledger import Cost, Reservation
from .progress import Progress
from .publish import file_sha256, probe_writable
from .release_graph import default_shards
from .release_inputs import release_artifacts
from .runners import check_worker_paths
from .sources import ReadArrowTables
from .tune_jobfile import tuned_job_path, write_tuned_job
from .tune_model import TuneGroups, tuning_groups, untuned_reason
from .tune_recommend import Recommendation, recommend

MEASUREMENTS = "measurements.json"
DEFAULT_EPSILON = Fraction(1, 10)


@dataclass(frozen=True)
class TuneResult:
    recommendations: list[Recommendation]
    untuned: dict[str, str]  # query → why it is not tuned
    directory: str
    job_file: str | None  # the new job file (None: nothing to change)
    epsilon: Fraction
    reservation: Reservation | None
    job_file_error: str | None = None  # why no new job file was written, when one was due


def tuning_cost(total: Guarantee, epsilon: Fraction) -> Cost:
    """The tuning's pure ε in the kind of the job's total (module docstring)."""
    if isinstance(total, ZCDP):
        return Cost(ZCDP(epsilon * epsilon / 2))
    if isinstance(total, ApproxDP):
        return Cost(ApproxDP(epsilon, Fraction(0)))
    return Cost(PureDP(epsilon))


def default_directory(job: JobConfig) -> str:
    if not job.source:
        raise ConfigError("--out", None, "a directory (the job has no file to put it beside)")
    src = Path(job.source)
    return str(src.with_name(src.stem + ".tune"))


def _measure(
    job: JobConfig,
    checked: Any,
    *,
    groups: TuneGroups,
    keys: ReleaseKeys,
    epsilon: Fraction,
    noise: bool,
    workdir: str,
) -> dict[str, Any]:
    """The measurements' pipeline; it writes them (DP values) under ``workdir``, a place the
    runner's workers can reach (beside the tuning directory), where the launcher reads them."""
    release = Release._for_launcher(Budget(epsilon=epsilon), keys, noise=noise)
    schema = checked.schema
    shards = default_shards(job.runner.name, checked.options, schema.total_bytes)
    prefix = FileSystems.join(workdir, "measurements")
    with beam.Pipeline(runner=checked.runner, options=checked.options) as pipeline:
        tables = pipeline | "Read" >> ReadArrowTables(schema)
        people = tables | "ByPerson" >> ByPerson(
            release, schema.person, keys={}, values=(), num_shards=shards, schema=schema
        )
        measured = [people | p.name >> ContributionStructure(p) for p in groups.plans]
        measured += [people | v.name >> ValueStructure(v) for v in groups.values]
        _ = (
            measured
            | "All" >> beam.Flatten()
            | "Json" >> beam.Map(lambda m: json.dumps(m, sort_keys=True))
            | "Write"
            >> beam.io.WriteToText(prefix, shard_name_template="", file_name_suffix=".jsonl")
        )
    with FileSystems.open(prefix + ".jsonl") as f:
        rows = [json.loads(line) for line in f.read().decode().splitlines() if line.strip()]
    return {r["name"]: r for r in rows}


class MeasuredError(RuntimeError):
    """Tuning failed after its noisy measurements were taken: a charge stays (the CLI says so,
    instead of its generic "taken back"). The message is the cause's type, never its text."""

    def __init__(self, what: str, *, charged: bool) -> None:
        super().__init__(what)
        self.charged = charged


def _charge_and_measure(
    job: JobConfig,
    checked: Any,
    groups: TuneGroups,
    eps: Fraction,
    directory: str,
    *,
    release_key: ReleaseKey | None,
    noise: bool,
    progress: Progress,
) -> tuple[Reservation | None, dict[str, Any]]:
    """Charges the ledger (if any) and measures; whatever stops the measuring once charged, an
    interrupt too, takes the charge back (:class:`RunInterrupted` says so) — except an interrupt
    on a remote runner, whose job Beam does not cancel: that charge stays."""
    reservation: Reservation | None = None
    rid: str | None = None
    workdir = FileSystems.join(directory, f".measuring-{secrets.token_hex(6)}")
    try:
        if job.ledger is not None:
            progress.stage(f"charging the ledger ε = {float(eps):g} for tuning")
            rid = charging.new_release_id(job.ledger.scope + "-tune")
            artifacts = release_artifacts(job, checked.secret_check)
            cost = tuning_cost(checked.plan.total, eps)
            with interrupts_held("finishing the ledger's charge"):  # so it can be taken back
                reservation = charging.reserve_cost(
                    job,
                    cost,
                    files=checked.schema.files,
                    release_id=rid,
                    artifacts=artifacts,
                    config_hash=job.config_hash + "+tune",
                )
        if release_key is not None:
            keys = ReleaseKeys(release_key)
        else:
            secret = reservation.secret if reservation is not None else new_release_secret()
            keys = ReleaseKeys.from_secret(secret, job.release.secret_path)
        with progress.running(f"measuring contributions on {job.runner.name}"):
            measurements = _measure(
                job, checked, groups=groups, keys=keys, epsilon=eps, noise=noise, workdir=workdir
            )
    except BaseException as e:
        # Interrupted, a remote runner's job may go on measuring under this secret (Beam does
        # not cancel it): its charge stays, as a release's does (job.py).
        interrupted = caused_by(e, KeyboardInterrupt)
        remote = interrupted and job.runner.name != "direct"
        if reservation is not None and not remote:
            charging.cancel(job, reservation)
        if interrupted:
            charge = "none" if reservation is None else "kept" if remote else "released"
            when = "while measuring" if reservation is not None else "before measuring"
            when += f" (the {job.runner.name} job may still be running: cancel it there)" * remote
            raise RunInterrupted(when, charge, rid) from e
        raise
    finally:
        _remove(workdir)
    return reservation, measurements


def _check_tuning_directory(job: JobConfig, directory: str) -> None:
    """Refuses a tuning directory that overlaps the release's ``output.path`` or holds another
    kind of manifest: tuning replaces manifest.json and report.html, and a published release
    whose manifest it replaced was no longer a release (CLI audit)."""
    if paths_overlap(directory, job.output.path):
        raise ConfigError(
            "--out", directory, "a directory apart from output.path",
            f"the release in {job.output.path} keeps its manifest.json and report.html there",
        )  # fmt: skip
    manifest = FileSystems.join(directory, "manifest.json")
    if not FileSystems.exists(manifest):
        return
    try:
        with FileSystems.open(manifest) as f:
            kind = json.loads(f.read()).get("kind")
    except Exception:  # unreadable, not JSON, not an object: not ours to replace
        kind = None
    if kind != "tuning":
        raise ConfigError(
            "--out", directory, "a new directory or one of an earlier tuning",
            "it holds a manifest.json that is not a tuning manifest (a release?): tuning would "
            "replace it",
        )  # fmt: skip


def run_tune(
    job: JobConfig,
    epsilon: Fraction | None = None,
    out_dir: str | None = None,
    beam_args: Sequence[str] = (),
    *,
    release_key: ReleaseKey | None = None,
    noise: bool = True,
    progress: Progress | None = None,
) -> TuneResult:
    """Checks, charges, measures and recommends (module docstring). ``release_key`` and
    ``noise=False`` are test hooks (a fixed secret; exact measurements)."""
    progress = progress or Progress(None)
    eps = Fraction(epsilon) if epsilon is not None else DEFAULT_EPSILON
    if eps <= 0:
        raise ConfigError("--epsilon", float(eps), "a positive number")
    directory = out_dir or default_directory(job)
    progress.stage(f"checking the job file and its inputs ({job.source})")
    checked = check_job(job, beam_args)
    check_worker_paths(job.runner.name, {"--out": directory})  # workers write measurements there
    _check_tuning_directory(job, directory)
    probe_writable(directory, "--out (the tuning directory)")  # before anything is charged
    if job.source:
        probe_writable(str(Path(job.source).parent), "the job file's directory (for the new one)")
    untuned = {q.name: r for q in job.queries if (r := untuned_reason(q)) is not None}
    groups = tuning_groups(job, eps, checked.schema)
    if not groups.plans:
        return TuneResult([], untuned, directory, None, Fraction(0), None)
    reservation, measurements = _charge_and_measure(
        job, checked, groups, eps, directory, release_key=release_key, noise=noise,
        progress=progress,
    )  # fmt: skip
    try:  # the noisy measurements exist now: an interrupt leaves the charge standing
        recs = recommend(job, checked.plan, groups, measurements)
        job_file, job_file_error = None, None
        if any((r.new.L, r.new.C, r.new.bounds) != (r.old.L, r.old.C, r.old.bounds) for r in recs):
            try:
                job_file = write_tuned_job(job, recs, tuned_job_path(job))
            except ConfigError as e:  # a layout we cannot edit: the recommendation still stands
                job_file_error = str(e)
        manifest = _write_outputs(
            directory, job, groups=groups, measurements=measurements, recs=recs,
            untuned=untuned, eps=eps, reservation=reservation, job_file=(job_file, job_file_error),
        )  # fmt: skip
        if reservation is not None:
            charging.complete(job, reservation, {"tune": directory}, manifest)
    except KeyboardInterrupt as e:
        charge = "kept" if reservation is not None else "none"
        rid = reservation.release_id if reservation is not None else None
        raise RunInterrupted("while writing its results", charge, rid) from e
    except Exception as e:  # the job file's directory, the tuning directory, the ledger …
        raise MeasuredError(type(e).__name__, charged=reservation is not None) from e
    return TuneResult(recs, untuned, directory, job_file, eps, reservation, job_file_error)


def _remove(path: str) -> None:
    try:
        if FileSystems.exists(path):
            FileSystems.delete([path])
    except Exception:
        pass  # a leftover folder of DP values; never fails the run


def _put(path: str, data: bytes) -> dict[str, object]:
    with FileSystems.create(path) as f:
        f.write(data)
    sha, size = file_sha256(path)
    return {"bytes": size, "sha256": sha}


def _write_outputs(
    directory: str,
    job: JobConfig,
    *,
    groups: TuneGroups,
    measurements: dict[str, Any],
    recs: list[Recommendation],
    untuned: dict[str, str],
    eps: Fraction,
    reservation: Reservation | None,
    job_file: tuple[str | None, str | None],
) -> bytes:
    """measurements.json, report.html and, last, manifest.json (module docstring), on any Beam
    filesystem; returns the manifest's bytes."""
    from .tune_report import render_tuning  # noqa: PLC0415 (matplotlib loads slowly)

    _remove(FileSystems.join(directory, "manifest.json"))  # incomplete until written again
    page = render_tuning(recs, untuned, float(eps)).encode()
    files = {
        MEASUREMENTS: _put(
            FileSystems.join(directory, MEASUREMENTS),
            (json.dumps(measurements, indent=1, sort_keys=True) + "\n").encode(),
        ),
        "report.html": _put(FileSystems.join(directory, "report.html"), page),
    }
    manifest = {
        "kind": "tuning",
        "job": job.source,
        "config_hash": job.config_hash,
        "spent": PureDP(eps).to_manifest(),
        "neighbouring": "add/remove one person",
        "measurements": [p.to_manifest() for p in groups.plans]
        + [v.to_manifest() for v in groups.values],
        "recommendations": [r.to_manifest() for r in recs],
        "not_tuned": untuned,
        "tuned_job_file": job_file[0],
        "tuned_job_file_error": job_file[1],
        "files": files,
    }
    if reservation is not None:
        manifest["ledger"] = reservation.to_manifest()
    data = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    _put(FileSystems.join(directory, "manifest.json"), data)
    return data
