"""Steps 4–5 of a release (:mod:`.job`): the report and the manifest, the ledger's fixing of the
manifest's hash, publishing, and recording the charge as complete.

Split from :mod:`.job` (checks, charge, pipeline) so that each stays small. What a failure here
leaves behind, in order:

* before the ledger fixed the hash — nothing was published: the staged outputs are discarded
  and the charge taken back (an interrupt) or left to the caller (an error);
* after it, before or while publishing — the charge stays: every later run of the release id
  must bring the same manifest, so a re-run finishes the release for free and publishes nothing
  else (docs/ledger.md);
* after publishing, before the ledger recorded it — the release is out; a re-run of the id
  records it.

Messages name at most a file and the kind of fault: library exceptions may quote data and are
never shown.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from apache_beam.io.filesystems import FileSystems

from . import charging
from .config import JobConfig
from .interrupts import RunInterrupted
from .ledger import LedgerError, ReleaseConflictError, Reservation
from .output_layout import MANIFEST, REPORT, QueryFiles
from .plan import ReleasePlan
from .progress import Progress
from .publish import Staging, file_sha256


@dataclass(frozen=True)
class ReleaseResult:
    """What a finished run wrote: one output per query and the manifest (paths only)."""

    outputs: dict[str, str]
    manifest: str
    reservation: Reservation | None = None  # the ledger's charge (None: the job has no ledger)


class ReleaseRunError(RuntimeError):
    """A run that stopped after its checks: in the pipeline or while publishing.

    ``input_error``: an input file turned out unreadable while it was read (exit 2).
    ``charge``: what became of the ledger's charge — ``"none"`` (no ledger), ``"released"``
    (nothing was published, the charge was taken back), ``"kept"`` (the charge of an earlier run of
    this release id, or publishing failed part-way: re-run the release id to finish without a new
    charge). The message never holds a data value: library errors are named by their type only.
    """

    def __init__(
        self, message: str, *, input_error: bool, charge: str, release_id: str | None
    ) -> None:
        super().__init__(message)
        self.input_error, self.charge, self.release_id = input_error, charge, release_id


def refund(job: JobConfig, reservation: Reservation | None) -> str:
    """After a failure before publishing: the charge's fate, for :class:`ReleaseRunError`."""
    if reservation is None:
        return "none"
    if reservation.rerun:
        return "kept"  # an earlier run of this id may have published: its charge stands
    return "released" if charging.cancel(job, reservation) else "kept"  # kept: a re-run joined


def files_text(layout: Mapping[str, QueryFiles]) -> str:
    n = sum(f.shards for f in layout.values())
    return f"{n} output file{'s' * (n != 1)}"


def stage_report(
    plan: ReleasePlan,
    staging: Staging,
    layout: Mapping[str, QueryFiles],
    fmt: str,
    progress: Progress,
) -> dict[str, object] | None:
    """report.html (:mod:`.report`) from the staged outputs and the plan, staged beside them;
    its size and hash for the manifest. A report that cannot be drawn costs the release
    nothing: the run goes on without it (its inputs are DP outputs, so the failure is public)."""
    from .report import read_largest, render  # noqa: PLC0415 (matplotlib loads slowly)

    try:
        tables = {
            name: read_largest([staging.staged(f) for f in files.files], fmt)
            for name, files in layout.items()
        }
        page = render(plan.to_manifest(), tables).encode()
        with FileSystems.create(staging.staged(REPORT)) as f:
            f.write(page)
        sha256, size = file_sha256(staging.staged(REPORT))
    except Exception as e:
        # Its inputs are DP outputs and the plan, so this is a bug of userdp, never the data's.
        progress.stage(
            f"{REPORT} not written ({type(e).__name__}: a bug in userdp, please report it with "
            "the job file); the release goes on without it"
        )
        return None
    return {"file": REPORT, "bytes": size, "sha256": sha256}


def release_manifest(
    plan: ReleasePlan,
    layout: Mapping[str, QueryFiles],
    files: Mapping[str, Any],
    reservation: Reservation | None,
    report: Mapping[str, object] | None = None,
) -> bytes:
    """manifest.json's bytes: the plan's public facts, the outputs' names, sizes and hashes,
    the report's, and the ledger's charge — nothing else computed from the data."""
    manifest = plan.to_manifest()
    manifest["outputs"] = {name: f.output for name, f in layout.items()}
    manifest["files"] = dict(files)
    if report is not None:
        manifest["report"] = dict(report)
    if reservation is not None:
        manifest["ledger"] = reservation.to_manifest()
    return json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n"


def _ledger_step(
    call: Callable[[], object], failed: Callable[[LedgerError], str], release_id: str
) -> None:
    """One ledger call around publishing. A conflict stays the ledger's refusal (exit 3); a
    ledger that cannot be reached is a failed run (exit 1) whose charge stays reserved:
    ``failed(error)`` says what was and was not published."""
    try:
        call()
    except ReleaseConflictError:
        raise
    except LedgerError as e:
        raise ReleaseRunError(
            failed(e), input_error=False, charge="kept", release_id=release_id
        ) from e


def publish_release(
    job: JobConfig,
    plan: ReleasePlan,
    staging: Staging,
    layout: Mapping[str, QueryFiles],
    files: Mapping[str, Any],
    *,
    reservation: Reservation | None,
    progress: Progress,
) -> ReleaseResult:
    """Steps 4–5 (module docstring): report, manifest, the ledger's hash, publishing, the
    charge completed. Interrupted before publishing, the staged outputs are discarded and the
    charge taken back (nothing left the staging directory) unless the ledger had fixed the
    hash: from then on the charge stays."""
    rid = reservation.release_id if reservation is not None else None
    try:
        report = stage_report(plan, staging, layout, job.output.format, progress)
        manifest = release_manifest(plan, layout, files, reservation, report)
        if reservation is not None:  # the ledger fixes these bytes for every run of this id
            _ledger_step(
                lambda: charging.begin_publishing(job, reservation, manifest),
                lambda e: (
                    "the ledger could not record the release's manifest before "
                    f"publishing ({e}); nothing was published"
                ),
                reservation.release_id,
            )
    except BaseException as e:
        staging.discard()  # nothing was published: the outputs were only staged
        if isinstance(e, KeyboardInterrupt):
            raise RunInterrupted("before publishing", refund(job, reservation), rid) from e
        raise
    progress.stage(f"publishing {files_text(layout)} and the manifest in {job.output.path}")
    try:
        published = staging.publish(layout, manifest, extra=(REPORT,) if report else ())
    except KeyboardInterrupt as e:
        raise RunInterrupted(
            "while publishing (the directory may lack its manifest: no complete release)",
            "kept" if reservation is not None else "partial",
            rid,
        ) from e
    except Exception as e:
        raise ReleaseRunError(
            f"publishing the outputs in {job.output.path} failed ({type(e).__name__}): the "
            "directory has no manifest, i.e. no complete release",
            input_error=False,
            charge="kept" if reservation is not None else "none",
            release_id=rid,
        ) from e
    if reservation is not None:
        try:  # published: from here only the ledger's record is unfinished
            _ledger_step(
                lambda: charging.complete(job, reservation, published, manifest),
                lambda e: (
                    f"the release is published in {job.output.path}, but the ledger "
                    f"could not record it ({e})"
                ),
                reservation.release_id,
            )
        except KeyboardInterrupt as e:
            raise RunInterrupted(
                "after publishing, before the ledger recorded it", "kept", rid
            ) from e
    return ReleaseResult(published, FileSystems.join(job.output.path, MANIFEST), reservation)
