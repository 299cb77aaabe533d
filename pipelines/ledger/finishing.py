"""The end of a release's life in the ledger: publishing begun, completed, or its charge taken
back. A mixin of :class:`.store.LedgerStore` (kept apart for size; the protocol is described
there): every method is one serialised write transaction.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from .errors import LedgerError, ReleaseConflictError
from .model import Amount, check_name
from .reading import Tx, load_release, load_scope, period_charges
from .records import AccountStatus, ReleaseRecord
from .rules import assess, manifest_hash_text

T = TypeVar("T")


class FinishingMixin(ABC):
    """begin_publishing → complete, or cancel; see :class:`.store.LedgerStore`."""

    for_update: ClassVar[str]

    @abstractmethod
    def _write(self, body: Callable[[Tx], T]) -> T: ...

    @abstractmethod
    def _now(self) -> str: ...

    @abstractmethod
    def _event(
        self, tx: Tx, event: str, detail: Mapping[str, Any], **where: str | None
    ) -> None: ...

    @staticmethod
    @abstractmethod
    def _set_spend(tx: Tx, acc: AccountStatus, spent: Amount, now: str) -> None: ...

    def _locked_release(self, tx: Tx, rid: str, why_needed: str) -> ReleaseRecord:
        """The release's record, locked for this transaction; LedgerError if there is none."""
        found = load_release(tx, rid, self.for_update, with_secret=False)
        if found is None:
            raise LedgerError(f"release {rid!r} is not in the ledger: {why_needed}")
        return found[0]

    # ------------------------------------------------------------------------------ complete

    def begin_publishing(self, release_id: str, manifest_hash: str) -> None:
        """Records the hash of the manifest a run is about to publish, before any file moves.

        The first run of an id to reach publishing fixes its bytes: a later run of the same id
        (a re-run after a crash while publishing, or a concurrent one) must bring the same hash,
        or it is refused (:class:`ReleaseConflictError`) before it publishes anything. Without
        this, a run killed half-way through publishing left a reservation with no recorded hash,
        and a re-run whose inputs changed in a way the fingerprint misses (a module its
        sample-and-aggregate function imports) published a second statistic under the same
        noise — the difference of the two, for one charge. One serialised transaction, so two
        runs cannot both be first.
        """
        rid = check_name(release_id, "release id")
        mh = manifest_hash_text(manifest_hash)

        def body(tx: Tx) -> None:
            record = self._locked_release(tx, rid, "a release publishes only after its reservation")
            if record.manifest_hash is not None:
                if record.manifest_hash != mh:
                    # Not this run's hash: under the same noise it commits to the exact change
                    # of the statistic, which anyone holding the published release could find by
                    # hashing guesses. The published hash is public.
                    raise ReleaseConflictError(
                        f"release {rid!r} re-ran but its outputs differ from the published ones "
                        f"(manifest hash {record.manifest_hash}, fixed when a run of this id "
                        "began publishing): nothing was published. A re-run must write identical "
                        "bytes: check whether its inputs or code the release runs (a module its "
                        "functions import) changed since, else report a bug"
                    )
                return
            tx.execute("UPDATE ledger_releases SET manifest_hash = ? WHERE release_id = ?",
                       (mh, rid))  # fmt: skip
            self._event(tx, "publish", {"manifest_hash": mh}, scope=record.scope, release_id=rid)

        self._write(body)

    def complete(
        self, release_id: str, outputs: Mapping[str, str], manifest_hash: str
    ) -> ReleaseRecord:
        """Records a finished run's outputs (name → path) and its manifest's hash.

        Completing a completed release again (a re-run) is accepted only with the same manifest
        hash and outputs: anything else means the re-run was not byte-identical. So is completing
        a release whose publishing began (:meth:`begin_publishing`) with another hash.
        """
        rid = check_name(release_id, "release id")
        mh = manifest_hash_text(manifest_hash)
        outs = {str(k): str(v) for k, v in outputs.items()}

        def body(tx: Tx) -> ReleaseRecord:
            record = self._locked_release(
                tx, rid, "a release is completed only after its reservation"
            )
            if record.status == "reserved" and record.manifest_hash not in (None, mh):
                raise ReleaseConflictError(  # not this run's hash (see begin_publishing)
                    f"release {rid!r} began publishing with another manifest hash "
                    f"({record.manifest_hash}): do not publish these outputs, report a bug"
                )
            if record.status == "completed":
                if record.manifest_hash != mh or dict(record.outputs or {}) != outs:
                    raise ReleaseConflictError(
                        f"release {rid!r} was completed on {record.completed_at} with manifest "
                        f"hash {record.manifest_hash} and outputs {dict(record.outputs or {})}; "
                        f"this run produced another manifest or outputs {outs}. A re-run must "
                        "write identical bytes: do not publish these outputs, report a bug"
                    )
                return record
            tx.execute(
                "UPDATE ledger_releases SET status = 'completed', completed_at = ?, outputs = ?, "
                "manifest_hash = ? WHERE release_id = ?",
                (self._now(), json.dumps(outs, sort_keys=True), mh, rid),
            )
            detail = {"manifest_hash": mh, "outputs": outs}
            self._event(tx, "complete", detail, scope=record.scope, release_id=rid)
            done = load_release(tx, rid, "", with_secret=False)
            assert done is not None  # written in this transaction
            return done[0]

        return self._write(body)

    # -------------------------------------------------------------------------------- cancel

    def cancel(self, release_id: str) -> bool:
        """Takes back the charge of a reservation whose run published nothing; True when taken
        back, False when kept because another run joined the reservation.

        Only the launcher that made the reservation calls this, and only when its pipeline failed
        before anything was published (``pipelines/publish.py``): no output computed under the
        release's secret left the operator's machines, so the budget was not spent. The release's
        row and its period links are removed (the same id may be reserved again, with a new
        secret); the event log keeps a ``cancel`` entry. A completed release is never cancelled.

        A re-run of the same id that started while this one was running (a ``rerun`` event since
        the release's latest ``reserve``) holds the same secret and may still publish: the charge
        stays, and the event log says so (``keep``). Without this, one launcher's failure could
        take back the charge of a release another launcher then published.
        """
        rid = check_name(release_id, "release id")

        def body(tx: Tx) -> bool:
            record = self._locked_release(tx, rid, "nothing to cancel")
            if record.status != "reserved":
                raise LedgerError(
                    f"release {rid!r} is {record.status}: a published release keeps its charge"
                )
            if record.manifest_hash is not None:  # a run began publishing: files may be out
                self._event(tx, "keep", {"reason": "a run began publishing"},
                            scope=record.scope, release_id=rid)  # fmt: skip
                return False
            joined = tx.all(
                "SELECT id FROM ledger_events WHERE release_id = ? AND event = 'rerun' AND id > "
                "(SELECT MAX(id) FROM ledger_events WHERE release_id = ? AND event = 'reserve')",
                (rid, rid),
            )
            if joined:
                self._event(tx, "keep", {"reason": "a re-run joined the reservation"},
                            scope=record.scope, release_id=rid)  # fmt: skip
                return False
            s = load_scope(tx, record.scope, self.for_update)
            assert s is not None  # a release's scope is never deleted
            _, _, accounts = assess(
                tx, s, record.scope, periods=record.periods, cost=record.cost,
                for_update=self.for_update, create_periods=False, charging=False,
            )  # fmt: skip
            now = self._now()
            charged = period_charges(tx, rid, s.kind)  # as stored when it was reserved
            for acc in accounts:
                amount = record.counted if acc.period is None else charged[acc.period]
                self._set_spend(tx, acc, acc.spent.minus_clamped(amount), now)
            tx.execute("DELETE FROM ledger_release_periods WHERE release_id = ?", (rid,))
            tx.execute("DELETE FROM ledger_releases WHERE release_id = ?", (rid,))
            detail = {"counted": str(record.counted), "periods": list(record.periods)}
            self._event(tx, "cancel", detail, scope=record.scope, release_id=rid)
            return True

        return self._write(body)
