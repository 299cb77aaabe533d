"""Plan a release from its job config alone: the budget split, then each query by its kind.

No data is read (public key files are public and are read). The order is fixed: first the total is
split over the queries with :func:`~transforms.mechanisms.budget_split.split_budget` (explicit
shares, the rest evenly), so an overspend fails before anything else, with the numbers; then each
query's share is divided between partition selection and its statistic, and the mechanisms are
calibrated.

Each query is then planned by its kind (:mod:`pipelines.kinds`): the bounded aggregates' rules
for dividing a share between selection and noise are in :mod:`pipelines.kinds.aggregate_plan`.

``budget.delta`` goes only to the queries that spend δ (each kind's ``needs_delta``): explicit
shares first, the rest evenly. Under a zCDP total that is the selection δ beside ρ; under an
(ε, δ) total a query that spends no δ (a Laplace count on public partitions, an exponential
median) gets (ε, 0), so δ is neither wasted on it nor charged to the ledger for it: a job whose
queries are all pure ε is charged δ = 0 whatever ``budget.delta`` says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from userdp.transforms.mechanisms.accounting import (
    ZCDP,
    ApproxDP,
    Budget,
    PureDP,
    compose,
    float_up,
)
from userdp.transforms.mechanisms.budget_split import BudgetExceededError, split_budget

from .config import ConfigError, JobConfig, QueryConfig
from .kinds import kind_of
from .kinds.base import KindPlan, PlanContext
from .kinds.mechanism_manifest import exact_number
from .kinds.shared_selection import SelectionPlan, group_selections
from .public_keys import read_public_keys
from .version import userdp_code_digest, userdp_version


@dataclass(frozen=True)
class ReleasePlan:
    queries: tuple[KindPlan, ...]  # each query's plan, made by its kind
    total: Budget
    spent: Budget
    total_selection_delta: Fraction  # zCDP totals only: the δ for private selection
    spent_selection_delta: Fraction
    config_hash: str
    selections: tuple[SelectionPlan, ...] = ()  # shared selections, each booked once
    person: tuple[str, str] | None = None  # the privacy unit: (person column, person_type)
    # zCDP totals only: the δ each query spends beside ρ (private selection, (ε, δ) mechanisms)
    selection_deltas: Mapping[str, Fraction] = field(default_factory=dict)

    def to_manifest(self) -> dict[str, Any]:
        """Public facts only: the config, the plan, the mechanisms; nothing from the data."""
        extra = {}
        total, spent = self.total.to_manifest(), self.spent.to_manifest()
        if isinstance(self.total, ZCDP):
            extra = {  # the same δ as total/spent's "delta", kept under their first names
                "total_selection_delta": exact_number(self.total_selection_delta),
                "spent_selection_delta": exact_number(self.spent_selection_delta),
            }
            if self.total_selection_delta:  # δ-approximate ρ-zCDP (docs/accounting.md), as the
                total = {**total, **_delta(self.total_selection_delta)}  # ledger's "zcdp" kind
                spent = {**spent, **_delta(self.spent_selection_delta)}
        return {
            "userdp_version": userdp_version(),
            # changes whenever released values can change (pipelines/version.py)
            "userdp_code": userdp_code_digest(),
            "config_hash": self.config_hash,
            "total": total,
            "spent": spent,
            **extra,
            # the rule of pipelines/kinds/aggregate_plan.py (_own_split) and shared_selection.py
            "selection_rule": "a query with private partitions gives its selection 1/(k+1) of "
            "its share, k its noise draws per partition (1; a mean 2). Laplace noise: the rule "
            "that keeps the most at (ε/(k+1), all of δ) (persons: Laplace thresholding with all "
            "of ε, its noisy count released); Gaussian: thresholding at ρ/(k+1) and the "
            "selection δ (δ/2 under an (ε, δ) total). Queries with the same by and L share one "
            "selection (selections): each gives it 1/(k+1) of its share",
            "queries": [q.to_manifest() for q in self.queries],
            "selections": [s.to_manifest() for s in self.selections],
            **({"privacy_unit": privacy_unit(*self.person)} if self.person else {}),
        }


def _delta(delta: Fraction) -> dict[str, float | str]:
    """A zCDP total's δ beside ρ (private selection, the (ε, δ) mechanisms), as the accounting
    objects write theirs: the float rounded up, and the exact value."""
    return {"delta": float_up(delta), "delta_exact": str(delta)}


def privacy_unit(column: str, person_type: str) -> dict[str, str]:
    """The manifest's statement of who is protected: the person column is public config."""
    return {
        "person_column": column,
        "person_type": person_type,
        "neighbouring": "add/remove all rows of one person (one canonical id of person_column)",
    }


def plan_release(job: JobConfig) -> ReleasePlan:
    """Split the budget, then plan every query. Raises ConfigError on an overspend."""
    b = job.budget
    total: Budget
    if b.rho is not None:
        total = ZCDP(b.rho)
    elif b.delta:
        total = ApproxDP(b.epsilon or 0, b.delta)
    else:
        total = PureDP(b.epsilon or 0)
    explicit = {q.name: explicit_share(q, total) for q in job.queries}
    try:
        shares = _delta_to_spenders(job, total, explicit, split_budget(total, explicit))
    except BudgetExceededError as e:
        raise ConfigError(
            "queries[*] shares",
            {k: str(v) for k, v in explicit.items() if v},
            f"shares that fit in the total {total}",
            str(e),
            job.source,
        ) from e
    sel_deltas = _split_selection_delta(job, total)
    try:
        groups = group_selections(job.queries, shares, total, sel_deltas)
    except ConfigError:
        raise
    except (ValueError, ArithmeticError) as e:  # a shared selection refusing its budget share
        raise ConfigError(
            "budget", str(total), "a budget whose shared partition selections can be built",
            str(e), job.source,
        ) from e  # fmt: skip
    plans = tuple(
        plan_query(
            q,
            job_plan_context(job, i, shares[q.name], sel_deltas.get(q.name, Fraction(0))),
            groups.get(q.name),
        )
        for i, q in enumerate(job.queries)
    )
    spent = compose(*(p.share for p in plans))
    return ReleasePlan(
        plans,
        total,
        spent,
        Fraction(b.delta or 0) if b.rho else Fraction(0),
        sum(sel_deltas.values(), Fraction(0)),
        job.config_hash,
        tuple(dict.fromkeys(groups.values())),
        (job.input.person, job.input.person_type or "as the input's schema declares it"),
        sel_deltas,
    )


def job_plan_context(job: JobConfig, i: int, share: Budget, sel_delta: Fraction) -> PlanContext:
    """The context of ``job.queries[i]``: errors name ``queries[i]``, keys come from its file."""
    q = job.queries[i]
    return PlanContext(
        f"queries[{i}]",
        job.source,
        job.input.person,
        share,
        sel_delta,
        lambda: read_public_keys(q, f"queries[{i}].partitions", job.source),
    )


_ADVICE = "narrow the bounds or raise the budget"


def _with_advice(reason: str) -> str:
    """The overflow's reason and the advice, once (the core's message may already give it)."""
    reason = reason.removesuffix("; " + _ADVICE)
    return f"{reason}); {_ADVICE}"


def plan_query(q: QueryConfig, ctx: PlanContext, shared: SelectionPlan | None = None) -> KindPlan:
    """One query planned from its share, by its kind (``shared``: the selection of its group).
    The job file (after its split) and the library both plan through this one function."""
    if shared is not None:
        ctx = dataclasses.replace(ctx, shared_selection=shared)
    try:
        plan = kind_of(q).plan(q, ctx)
    except ConfigError:
        raise
    except OverflowError as e:  # a public number past the float range (bounds near ±1e308)
        raise ConfigError(
            ctx.key, str(ctx.share), "parameters whose noise fits a float",
            "a bound, range or budget puts a noise scale or a span past the largest float "
            f"({_with_advice(str(e))}", ctx.source,
        ) from e  # fmt: skip
    except (ValueError, ArithmeticError) as e:  # a mechanism refusing its public parameters
        # (a budget so small or large that its noise cannot be built): the job file's mistake,
        # exit 2 naming the query, never a traceback. Planning reads no data, so the message
        # holds only parameters.
        why = str(e) or type(e).__name__
        raise ConfigError(
            ctx.key, str(ctx.share), "parameters the mechanism accepts", why, ctx.source
        ) from e
    released = [c for c, _ in plan.output_columns]
    if clash := [c for c in q.by if c in released]:
        raise ConfigError(
            f"{ctx.key}.by", list(q.by), f"partition columns not named {' or '.join(released)}",
            f"{clash[0]!r} is also a column this query releases; rename the input column",
            ctx.source,
        )  # fmt: skip
    return plan


def spends_delta(q: QueryConfig, rho_total: bool) -> bool:
    """Does the query spend δ under a total of this kind (its kind's ``needs_delta``)?"""
    return kind_of(q).needs_delta(q, rho_total)


def _delta_to_spenders(
    job: JobConfig,
    total: Budget,
    explicit: dict[str, Budget | None],
    shares: dict[str, Budget],
) -> dict[str, Budget]:
    """Under an (ε, δ) total: the δ the explicit shares leave, evenly over the queries without
    an explicit share that spend δ; the others keep their even ε with δ = 0. (``split_budget``
    divided δ over all of them.) The parser refuses an explicit δ on a query that spends none."""
    if not isinstance(total, ApproxDP):
        return shares
    rest = [q for q in job.queries if explicit[q.name] is None]
    spenders = [q.name for q in rest if spends_delta(q, rho_total=False)]
    given = sum((s.delta for s in explicit.values() if isinstance(s, ApproxDP)), Fraction(0))
    left = total.delta - given
    out = dict(shares)
    for q in rest:
        even = shares[q.name]
        assert isinstance(even, ApproxDP)
        delta = left / len(spenders) if q.name in spenders else Fraction(0)
        out[q.name] = ApproxDP(even.epsilon, delta)
    return out


def explicit_share(q: QueryConfig, total: Budget) -> Budget | None:
    if isinstance(total, ZCDP):
        return ZCDP(q.rho) if q.rho is not None else None
    if q.epsilon is None:
        return None
    return ApproxDP(q.epsilon, q.delta or 0) if isinstance(total, ApproxDP) else PureDP(q.epsilon)


def _split_selection_delta(job: JobConfig, total: Budget) -> dict[str, Fraction]:
    """Under a zCDP total: budget.delta over the queries that spend δ — private partitions or an
    (ε, δ) mechanism of some kind — explicit shares first, the rest evenly."""
    if not isinstance(total, ZCDP) or not job.budget.delta:
        return {}
    private = [q for q in job.queries if spends_delta(q, rho_total=True)]
    given = {q.name: q.delta for q in private if q.delta is not None}
    rest = [q.name for q in private if q.delta is None]
    left = job.budget.delta - sum(given.values(), Fraction(0))
    if left < 0 or (rest and left == 0):
        raise ConfigError(
            "queries[*].delta",
            {k: float(v) for k, v in given.items()},
            f"delta shares summing to less than budget.delta = {float(job.budget.delta)}",
            f"the explicit shares leave {float(left)} for {rest or 'no query'}",
            job.source,
        )
    return {**given, **{name: left / len(rest) for name in rest}}
