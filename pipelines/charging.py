"""The launcher's side of the ledger: charge a release before its pipeline, record it after.

Only the launcher calls these (``pipelines/job.py`` and the CLI); Beam workers never see the
ledger. The order in :func:`pipelines.job.run_release` is: check inputs, key files, output and
staging locations → plan → :func:`reserve` (one serialised transaction; refuses before anything
runs) → pipeline with the reservation's key, writing into staging → manifest (with the charge) →
:func:`begin_publishing` (the ledger fixes the manifest's hash) → publish → :func:`complete`. A
run whose pipeline fails has published nothing (its outputs were only staged), so :func:`cancel`
takes its charge back; a run that began publishing keeps it, and every later run of its id must
publish the same bytes.
Re-running the same release id with the same inputs (:mod:`.release_inputs`: files, key files,
user code, userdp's code, the secret file) costs nothing and, with the stored secret, writes the
same bytes.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

from .config import JobConfig, LedgerConfig
from .config_fields import ConfigError
from .ledger import (
    POSTGRES_SCHEMES,
    AccountStatus,
    Cost,
    LedgerError,
    Quote,
    Reservation,
    input_fingerprint,
    open_ledger,
    periods_from_paths,
)
from .ledger.model import period_amount
from .plan import ReleasePlan


def release_periods(cfg: LedgerConfig, files: Sequence[str]) -> tuple[str, ...]:
    """The data periods the release reads: as listed, or derived from every input path."""
    if cfg.period_rule is not None:
        try:
            return periods_from_paths(files, cfg.period_rule)
        except (LedgerError, ValueError) as e:  # a job or input mistake (exit 2), not a ledger
            # refusal (3): a path the rule misses, or a period it finds empty or unusable
            raise ConfigError(
                "ledger.period_rule", cfg.period_rule, "a rule that every input path matches",
                f"{e}; name each input file by its period, e.g. logs/week=2025-W03/part-0.parquet",
            ) from None  # fmt: skip
    return cfg.periods


def new_release_id(scope: str) -> str:
    """A fresh id for a run without ``release_id``: time-ordered and unique (a new charge)."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{scope}-{stamp}-{secrets.token_hex(4)}"


def release_cost(plan: ReleasePlan) -> Cost:
    return Cost(plan.spent, plan.spent_selection_delta)


def reserve(
    job: JobConfig,
    plan: ReleasePlan,
    files: Sequence[str],
    release_id: str | None,
    artifacts: Mapping[str, str],
) -> Reservation:
    """Charges the release (or finds its earlier charge); raises the ledger's refusal errors.

    ``artifacts``: digests of everything else the release reads (``release_inputs``), part of the
    fingerprint so that a re-run on anything changed is refused before it runs."""
    cfg = _ledger(job)
    rid = release_id or cfg.release_id or new_release_id(cfg.scope)
    return reserve_cost(
        job,
        release_cost(plan),
        files=files,
        release_id=rid,
        artifacts=artifacts,
        config_hash=job.config_hash,
    )


def reserve_cost(
    job: JobConfig,
    cost: Cost,
    *,
    files: Sequence[str],
    release_id: str,
    artifacts: Mapping[str, str],
    config_hash: str,
) -> Reservation:
    """Charges ``cost`` under ``release_id`` to the job's scope and the files' periods: a
    release's plan (:func:`reserve`) or another run that reads the data, such as ``userdp tune``."""
    cfg = _ledger(job)
    fingerprint = input_fingerprint(list(files), artifacts).digest
    with open_ledger(cfg.location) as ledger:
        return ledger.reserve(
            release_id,
            scope=cfg.scope,
            periods=release_periods(cfg, files),
            cost=cost,
            config_hash=config_hash,
            input_fingerprint=fingerprint,
        )


def begin_publishing(job: JobConfig, reservation: Reservation, manifest: bytes) -> None:
    """Fixes the bytes this release id publishes, before any file moves; refuses a run whose
    manifest differs from the one an earlier run of the id began or finished publishing
    (``LedgerStore.begin_publishing``)."""
    with open_ledger(_ledger(job).location) as ledger:
        ledger.begin_publishing(reservation.release_id, manifest_hash(manifest))


def complete(
    job: JobConfig, reservation: Reservation, outputs: Mapping[str, str], manifest: bytes
) -> None:
    """Records the finished release's outputs and the hash of its manifest's bytes."""
    with open_ledger(_ledger(job).location) as ledger:
        ledger.complete(reservation.release_id, outputs, manifest_hash(manifest))


def cancel(job: JobConfig, reservation: Reservation) -> bool:
    """Takes back the charge of a run that published nothing (see the module docstring); False
    when the charge stays because a re-run of the same id joined it (``LedgerStore.cancel``)."""
    with open_ledger(_ledger(job).location) as ledger:
        return ledger.cancel(reservation.release_id)


def manifest_hash(manifest: bytes) -> str:
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


def quote(
    job: JobConfig, plan: ReleasePlan, files: Sequence[str] | None, release_id: str | None
) -> Quote | None:
    """What the release would be charged and what would remain, for ``userdp plan``; None when
    the periods come from input paths that are not known yet (``files`` None) or the SQLite
    ledger does not exist yet."""
    cfg = _ledger(job)
    if cfg.period_rule is not None and files is None:
        return None
    if not cfg.location.startswith(POSTGRES_SCHEMES) and not os.path.exists(cfg.location):
        return None  # no ledger yet: `userdp ledger set-cap` creates it; plan creates nothing
    rid = release_id or cfg.release_id
    with open_ledger(cfg.location) as ledger:
        return ledger.quote(
            cfg.scope, release_periods(cfg, files or ()), release_cost(plan), release_id=rid
        )


def _ledger(job: JobConfig) -> LedgerConfig:
    if job.ledger is None:
        raise ValueError("the job file has no [ledger] section")
    return job.ledger


def accounts_after(job: JobConfig, reservation: Reservation) -> list[AccountStatus]:
    """The scope's and the release's periods' accounts as they stand now (after the charge)."""
    with open_ledger(_ledger(job).location) as ledger:
        (status,) = ledger.status(reservation.scope)
    return [status.scope, *(p for p in status.periods if p.period in reservation.periods)]


def charge_lines(job: JobConfig, reservation: Reservation, what: str) -> list[str]:
    """What a finished command prints about its charge: the amount for the scope and for each
    period (a release reading several periods charges each of them more than its share, so
    the scope's amount alone understates what a period lost), then each account as it stands.
    ``what`` names the charge: ``release id …`` or ``tuning run …``."""
    r = reservation
    each = period_amount(r.counted, len(r.periods), r.scope)
    charged = (
        f"charged {r.counted} to {r.scope!r}"
        + (f"; {each} to each of periods {list(r.periods)}" * bool(r.periods))
        + f" ({what})"
    )
    return [charged, *account_lines(job, r)]


def account_lines(job: JobConfig, reservation: Reservation) -> list[str]:
    """The scope's and the release's periods' accounts after the charge, one line each."""
    return [
        f"  {a.name}: spent {a.spent} of {a.cap}; remaining {a.remaining}"
        for a in accounts_after(job, reservation)
    ]
