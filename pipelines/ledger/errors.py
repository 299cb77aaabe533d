"""The ledger's errors. Every message names the scope, period or release and the numbers."""

from __future__ import annotations

from userdp.transforms.mechanisms.budget_split import BudgetExceededError


class LedgerError(Exception):
    """A ledger operation that cannot be done as asked (bad arguments, a missing cap, ...)."""


class CapExceededError(BudgetExceededError, LedgerError):
    """A reservation would exceed a cap. Nothing was charged.

    ``scope``/``period`` name the account (``period`` is None for the scope's own cap); the
    amounts are :class:`~pipelines.ledger.model.Amount` values of the scope's kind.
    """

    def __init__(
        self,
        message: str,
        *,
        scope: str,
        period: str | None,
        cap: object,
        spent: object,
        requested: object,
    ) -> None:
        super().__init__(message)
        self.scope, self.period = scope, period
        self.cap, self.spent, self.requested = cap, spent, requested


class ReleaseConflictError(LedgerError):
    """A release id that is already in the ledger, asked for with different input, config, scope,
    periods or cost. Re-running it would publish a second output under the same noise key."""


class UnknownScopeError(LedgerError):
    """A scope (or a period) without a cap: nothing may be charged to it until one is set."""


class IncompatibleCostError(LedgerError):
    """A cost that cannot be counted in the scope's kind (e.g. (ε, δ) against a ρ cap)."""


class LedgerPermissionError(LedgerError):
    """The SQLite ledger file is readable by group or others: it holds release secrets."""


class LedgerSchemaError(LedgerError):
    """The ledger's schema is newer than this userdp, or the ledger cannot be opened."""


class LedgerCorruptError(LedgerError):
    """A stored value the ledger cannot read (an edited or damaged file): a ledger that cannot be
    used, refused like any other (``userdp run`` exit 3), never a crash."""
