"""``userdp plan``'s report: the budget split and, per query, its mechanism and expected error.

Everything printed comes from the plan (the job file and public key files), never from the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from .config import JobConfig
from .plan import ReleasePlan


def print_plan(plan: ReleasePlan, out: TextIO) -> None:
    """The budget split, each query's mechanism, noise scale and 95% error half-width."""
    w = out.write
    w(f"budget: total {plan.total}; spent {plan.spent}")
    if plan.total_selection_delta:
        w(
            f"; selection δ {float(plan.spent_selection_delta):.3g} of "
            f"{float(plan.total_selection_delta):.3g}"
        )
    w("\n")
    for q in plan.queries:
        w(f"\n{q.name}: share {q.share}\n")
        w("".join(f"  {line}\n" for line in q.plan_lines()))
    for s in plan.selections:
        w(f"\n{s.name}: share {s.share} (from its members' shares)\n")
        w("".join(f"  {line}\n" for line in s.plan_lines()))


def print_ledger_quote(job: JobConfig, plan: ReleasePlan, out: TextIO) -> None:
    """What the run would charge in the ledger and what would remain (reads no data)."""
    from .charging import quote  # noqa: PLC0415 (the ledger loads only for jobs that use one)

    assert job.ledger is not None
    files = None
    if job.ledger.period_rule is not None:  # periods come from input paths: list them (no data)
        from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415

        files = [m.path for m in FileSystems.match([job.input.path])[0].metadata_list]
    q = quote(job, plan, files, None)
    w = out.write
    w(f"\nledger {job.ledger.location}, scope {job.ledger.scope!r}:\n")
    if q is None:
        w("  no ledger file yet (create it with `userdp ledger set-cap`)\n")
        return
    if q.existing is not None:
        w(f"  release {q.existing.release_id!r} is in the ledger: a re-run charges nothing\n")
    w(f"  this run would charge {q.counted} ({q.conversion})\n" if q.counted else "")
    for a in q.accounts:
        cap = "no cap" if a.cap is None else f"cap {a.cap}"
        w(f"  {a.name}: {cap}; spent {a.spent}; remaining {a.remaining}\n")
    if q.refusal:
        w(f"  REFUSED: {q.refusal}\n")


def print_runner(job: JobConfig, beam_args: Sequence[str], out: TextIO) -> None:
    """The runner and its resolved Beam options (job file, then command-line flags). Paths the
    runner's workers cannot reach are refused here too, as `userdp run` refuses them."""
    from .runners import check_worker_paths, resolved_options  # noqa: PLC0415

    base_dir = Path(job.source).parent if job.source else None
    resolved = resolved_options(job.runner.name, job.runner.options, beam_args, base_dir=base_dir)
    check_worker_paths(job.runner.name, job.worker_paths())
    out.write(f"\nrunner {job.runner.name}:\n")
    for key, value in resolved.items():
        out.write(f"  {key} = {value!r}\n")


def print_keys(job: JobConfig, out: TextIO) -> None:
    """Where the noise keys live: in the job graph, or in a key file the workers read."""
    if job.release.secret_path is None:
        out.write(
            "\nnoise keys: derived per query from the release secret and carried INSIDE THE JOB "
            "GRAPH: whoever can read the submitted job (a Dataflow staging bucket, a Flink job "
            "server) can recompute the noise. Set [release] secret_path to a key file the workers "
            "read (`userdp keygen PATH`) to keep them out (docs/threat-model.md).\n"
        )
    else:
        out.write(
            f"\nnoise keys: derived on the workers from the key file {job.release.secret_path} "
            "(release.secret_path); the job graph holds only its path and a per-release nonce.\n"
        )
