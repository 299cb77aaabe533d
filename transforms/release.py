"""A release: one privacy budget, one secret, and the queries that spend them (the library's root).

A :class:`Release` is created on the launcher (the machine that builds the pipeline). Every
metric transform applied to its persons (``people | "visits" >> Count(...)``) registers there at
*application* time — when the pipeline is built — with its name and its share of the budget; the
release refuses a reused name, a share of the wrong kind and an overspend right there, with the
names and shares of every transform. Nothing about the budget is decided on workers.

Why each transform states its share (``epsilon=...``, ``rho=...``) instead of "the rest, evenly"
as in a job file: a job file lists every query before anything is planned, while a Beam pipeline
applies transforms one at a time, and each must be calibrated when it is applied. A share that
depended on transforms applied later would have to be patched into steps already built.

Workers get only per-query derived keys (:mod:`.keys`), never the release secret; with
``secret_path`` the job graph holds no key at all (docs/threat-model.md).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from .arguments import plain_param
from .keys import ReleaseKeys, read_key_file
from .mechanisms.accounting import ZCDP, ApproxDP, PureDP, compose
from .mechanisms.accounting import Budget as Guarantee
from .mechanisms.budget_split import BudgetExceededError, split_budget
from .mechanisms.rng import ReleaseKey, new_release_secret

if TYPE_CHECKING:
    import apache_beam as beam

    from userdp.pipelines.config_model import BudgetConfig
    from userdp.pipelines.kinds.base import KindPlan
    from userdp.pipelines.kinds.shared_selection import SelectionPlan

    from .by_person import ByPerson


_PIPELINE_RELEASE = "_userdp_release"  # set on a pipeline: a weak reference to its Release


class ReleaseError(ValueError):
    """A release used against its rules: a reused name, an overspent budget, two pipelines."""


def _exact(x: object) -> object:
    """Floats as the decimals they print as (0.1 → 1/10), like numbers read from a job file;
    NumPy scalars as the Python numbers they hold."""
    x = plain_param(x)
    return Fraction(repr(x)) if isinstance(x, float) and math.isfinite(x) else x


class Budget:
    """A privacy budget: ``epsilon`` (pure ε-DP), ``epsilon`` + ``delta`` ((ε, δ)-DP), or ``rho``
    (ρ-zCDP, plus an optional ``delta`` spent beside ρ by private partition selection and the
    (ε, δ) mechanisms — PTR, top partition, smooth sensitivity's Laplace noise: δ-approximate
    ρ-zCDP, docs/accounting.md).

    The same keys and rules as a job file's ``[budget]`` table; numbers are exact decimals
    (``0.1`` is 1/10, not the nearest binary float); ``Fraction`` and ``Decimal`` are taken as
    they are.
    """

    def __init__(
        self,
        epsilon: float | Fraction | Decimal | None = None,
        delta: float | Fraction | Decimal | None = None,
        rho: float | Fraction | Decimal | None = None,
    ) -> None:
        from userdp.pipelines.config import parse_budget_table  # noqa: PLC0415

        raw = {
            k: _exact(v)
            for k, v in (("epsilon", epsilon), ("delta", delta), ("rho", rho))
            if v is not None
        }
        self.config: BudgetConfig = parse_budget_table(raw, source="Budget")

    def guarantee(self) -> Guarantee:
        """As an accounting object: PureDP, ApproxDP or ZCDP."""
        b = self.config
        if b.rho is not None:
            return ZCDP(b.rho)
        if b.delta:
            return ApproxDP(b.epsilon or 0, b.delta)
        return PureDP(b.epsilon or 0)

    def __repr__(self) -> str:
        parts = (f"{k}={float(v)!r}" for k, v in vars(self.config).items() if v is not None)
        return f"Budget({', '.join(parts)})"


@dataclass
class _Registered:
    plan: KindPlan
    # under a zCDP total: the δ this query spends beside ρ (its private partition selection, or
    # its (ε, δ) mechanism: PTR, smooth sensitivity with Laplace noise, a top partition)
    selection_delta: Fraction


@dataclass
class _State:
    queries: dict[str, _Registered] = field(default_factory=dict)  # every booked share
    selections: dict[str, SelectionPlan] = field(default_factory=dict)  # shared selections
    pipeline: beam.Pipeline | None = None
    person: tuple[str, str] | None = None  # the privacy unit: (column, person_type)


def _nothing(total: Guarantee) -> Guarantee:
    """A zero spend of the total's kind (a manifest before any transform was applied)."""
    if isinstance(total, ZCDP):
        return ZCDP(Fraction(0))
    return (
        ApproxDP(Fraction(0), Fraction(0)) if isinstance(total, ApproxDP) else PureDP(Fraction(0))
    )


class Release:
    """One release: a budget, a secret, and the metric transforms that spend them.

    ``budget``: the total (a :class:`Budget`). ``secret_path``: a key file (``userdp keygen``,
    any Beam filesystem) that workers read themselves, so no noise key travels in the job graph;
    without it, a fresh secret is drawn and per-query keys are pickled into the graph.

    Use one release per pipeline and per publication: every transform applied to
    ``release.ByPerson(...)``'s output spends part of ``budget`` when it is applied, and a
    second Release in the same pipeline is refused when it is first applied.

    Every Release draws new noise (a fresh nonce, mixed with the key file when there is one), so
    running a pipeline again publishes an independent answer and spends ``budget`` again: the
    library keeps no record of releases. Scheduled releases whose re-runs must redraw the same
    noise and not overspend go through a job file with a ``[ledger]`` (README, "The budget
    ledger"), which pins the noise per release id and refuses a re-run on changed inputs —
    pinning it here, without that check, would let a re-run on changed data publish the change.
    """

    def __init__(self, budget: Budget, *, secret_path: str | None = None) -> None:
        if not isinstance(budget, Budget):
            raise TypeError(
                f"budget must be a userdp Budget, e.g. Budget(epsilon=1); got {budget!r}"
            )
        secret = new_release_secret()
        keys = ReleaseKeys.from_secret(secret, secret_path)
        if secret_path is not None:
            read_key_file(secret_path)  # unreadable or too short: fail here, not on a worker
        self._init(budget, keys, noise=True)

    def _init(self, budget: Budget, keys: ReleaseKeys, *, noise: bool) -> None:
        self.budget = budget
        self._keys = keys
        self._noise = noise  # False only through the test hook: exact values
        self._state = _State()

    @classmethod
    def _for_launcher(
        cls, budget: Budget, keys: ReleaseKeys | ReleaseKey, *, noise: bool
    ) -> Release:
        """The job launcher's release: keys from the ledger or the key file; ``noise=False`` and a
        fixed :class:`ReleaseKey` are test hooks, never reachable from a job file."""
        release = cls.__new__(cls)
        release._init(
            budget, keys if isinstance(keys, ReleaseKeys) else ReleaseKeys(keys), noise=noise
        )
        return release

    def ByPerson(  # the public API's transform names are capitalised, as Beam's are
        self,
        person: str,
        *,
        keys: Mapping[str, str] | None = None,
        values: Sequence[str] = (),
        person_type: str | None = None,
        num_shards: int | None = None,
    ) -> ByPerson:
        """Validate rows, canonicalise person ids, and group them by person (see ByPerson).

        ``person_type`` (required): ``"string"`` or ``"int"``, the type of the person column's
        values. Ids of the other type are dead letters, never converted (so ``1`` and ``"1"``
        are never one person); it had a default, ``"string"``, which silently sent every row of
        a log with int ids to the dead letters.

        One release has one privacy unit: every ByPerson of it names the same person column and
        type (several inputs — e.g. visits and purchases keyed by the same user id — are fine).
        Budget shares compose only for one unit: ε for users and ε for devices is no ε for
        either, since one user's devices are many devices."""
        from .by_person import ByPerson  # noqa: PLC0415

        if person_type is None:
            raise TypeError(
                "ByPerson: person_type is required: 'string' or 'int', the type of the person "
                f"column {person!r}'s values (ids of the other type are dead letters, never "
                "converted, so 1 and '1' are never one person)"
            )
        unit = (person, person_type)
        if self._state.person is not None and self._state.person != unit:
            raise ReleaseError(
                f"this release protects persons identified by {self._state.person[0]!r} "
                f"(person_type {self._state.person[1]!r}), not {person!r} ({person_type!r}): "
                "one release has one privacy unit; use a Release per unit, each in its own "
                "pipeline with its own budget"
            )
        made = ByPerson(self, person, keys=keys or {}, values=values,
                        person_type=person_type, num_shards=num_shards)  # fmt: skip
        self._state.person = unit  # once the arguments are valid: a caught typo binds nothing
        return made

    # --- what metric transforms call when they are applied --------------------------------

    def _bind(self, pipeline: beam.Pipeline) -> None:
        if self._state.pipeline is None:
            bound = getattr(pipeline, _PIPELINE_RELEASE, None)
            if bound is not None and bound() is not None and bound() is not self:
                raise ReleaseError(
                    "this pipeline already has a Release: use one Release per pipeline, and "
                    "give each transform its share of that one budget (two releases in one "
                    "pipeline would each state only their own budget, while the same persons "
                    "pay for both)"
                )
            setattr(pipeline, _PIPELINE_RELEASE, weakref.ref(self))  # no secret on the pipeline
            self._state.pipeline = pipeline
        elif self._state.pipeline is not pipeline:
            raise ReleaseError(
                "this Release is already used by another pipeline: create one Release per "
                "pipeline (two pipelines sharing a secret and a budget would publish correlated "
                "noise and spend the budget twice)"
            )

    def _check_name(self, name: str) -> None:
        taken = {n.lower(): n for n in self._state.queries}
        if name.lower() in taken:
            raise ReleaseError(
                f"the name {name!r} is already used by another transform of this release "
                f"({taken[name.lower()]!r}; names are compared ignoring case): give each "
                "transform its own name, e.g. 'visits_by_day' >> Count(...)"
            )

    def _register(self, name: str, plan: KindPlan, selection_delta: Fraction) -> None:
        """Books ``plan.share``; raises before anything is built if the shares exceed the total."""
        self._check_name(name)
        self._check_shares({name: (plan.share, selection_delta)})
        self._state.queries[name] = _Registered(plan, selection_delta)

    def _check_shares(self, new: Mapping[str, tuple[Guarantee, Fraction]]) -> None:
        """Raises if the booked shares and ``new`` (name → (share, selection δ under a ρ total))
        together exceed the total. Books nothing: ``Aggregate`` checks all its members before
        applying any, so a refused member leaves none of them booked."""
        total = self.budget.guarantee()
        shares = {n: r.plan.share for n, r in self._state.queries.items()}
        shares.update({n: share for n, (share, _) in new.items()})
        listed = ", ".join(f"{n}: {s}" for n, s in shares.items())
        try:
            split_budget(total, shares)
        except BudgetExceededError as e:
            raise ReleaseError(
                f"the release's budget {total} is exhausted by the shares {{{listed}}}: {e}"
            ) from None
        if isinstance(total, ZCDP):
            booked = [r.selection_delta for r in self._state.queries.values()]
            deltas = sum((*booked, *(d for _, d in new.values())), Fraction(0))
            if deltas > (self.budget.config.delta or 0):
                raise ReleaseError(
                    f"the release's delta {float(self.budget.config.delta or 0)} (spent beside ρ "
                    "by private partition selection and (ε, δ) mechanisms) is exhausted by the "
                    f"transforms' delta shares ({float(deltas)} in all)"
                )

    def _register_selection(self, plan: SelectionPlan) -> None:
        """A shared selection, listed for the manifest; its share is paid from its members'
        (already booked). One per name: the name labels its noise stream."""
        self._check_selection_name(plan.name)
        self._state.selections[plan.name] = plan

    def _check_selection_name(self, name: str) -> None:
        if name in self._state.selections:
            raise ReleaseError(
                f"{name} is already selected in this release: one Aggregate per `by` and L "
                "(put all its metrics in one Aggregate)"
            )

    def _query_keys(self) -> ReleaseKeys:
        return self._keys

    # --- public facts -------------------------------------------------------------------------

    @property
    def spent(self) -> Guarantee | None:
        """What the transforms applied so far spend together (basic composition); None if none.
        Under a ρ total this is ρ; the δ spent beside it is the manifest's ``spent["delta"]``."""
        shares = [r.plan.share for r in self._state.queries.values()]
        return compose(*shares) if shares else None

    def manifest(self) -> dict[str, Any]:
        """Public facts only: the total, what was spent, every transform's mechanism and
        parameters. Nothing computed from the data. The same shape as a job's manifest.json."""
        from userdp.pipelines.plan import ReleasePlan  # noqa: PLC0415

        total = self.budget.guarantee()
        regs = list(self._state.queries.values())
        selections = self._state.selections
        plan = ReleasePlan(
            tuple(r.plan for r in regs),
            total,
            compose(*(r.plan.share for r in regs)) if regs else _nothing(total),
            Fraction(self.budget.config.delta or 0) if isinstance(total, ZCDP) else Fraction(0),
            sum((r.selection_delta for r in regs), Fraction(0)),
            config_hash="",
            selections=tuple(selections.values()),
            person=self._state.person,
            selection_deltas={n: r.selection_delta for n, r in self._state.queries.items()},
        )
        return plan.to_manifest()

    def __reduce__(self) -> Any:
        raise TypeError(
            "a Release holds the release secret and stays on the launcher: steps get derived "
            "per-query keys (docs/threat-model.md)"
        )
