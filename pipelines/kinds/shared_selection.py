"""One private partition selection shared by the bounded aggregates that partition alike.

Two ``count``/``persons``/``sum``/``mean`` queries with private partitions over the same ``by``
columns and the same L (``max_partitions_per_person``) would otherwise each run a selection: two
key sets that may differ, and the selection's budget spent twice. A :class:`SelectionPlan` is the
one selection of such a *group*; its members release exactly its key set, each adding only its
own statistic's noise — what PipelineDP does for the metrics of one aggregation.

**The job file's rule.** Queries are grouped when they are bounded aggregates (not ``bound =
"auto"``) with private partitions, the same ``by`` (in order) and L, and the same family: Laplace
noise under an (ε, δ) total, or any noise under a ρ total (Gaussian noise under an (ε, δ) total
is converted per query and is not grouped). A group of one keeps the per-query plan. For a group,
with k the noise draws per partition of the members that draw their own noise (a ``mean`` draws
two), each of them gives 1/(k + 1) of its share to the selection and keeps k/(k + 1) for its
statistic — for one query alone this is its own split (1/2 for a count, 1/3 for a mean), and for
a count and a mean with equal shares the selection gets a quarter of the group's total; a
``persons`` query with Laplace noise gives all of its share, and then the selection is Laplace
thresholding whose noisy count is that query's released value (no second draw). All members' δ
(under a ρ total: their selection δ) goes to the selection. Otherwise the selection uses the rule
that keeps the most at its budget (:func:`~userdp.transforms.mechanisms.selection_choice.
best_selection`; Gaussian thresholding under ρ).

**Guarantee.** Add/remove one person. The selection is (ε_sel, δ_sel)-DP for its keys (and its
noisy counts, for Laplace thresholding), or ρ_sel-zCDP plus δ_sel; each member's statistic is
ε_i·k/(k + 1)-DP (or ρ-zCDP) given the keys; by basic composition the group spends exactly the
sum of its members' shares, so the release's total is unchanged (docs/release-job-contracts.md
§2). Everything here is computed from the job file alone.

**The library**: :class:`userdp.transforms.Aggregate` groups its metrics by the same rule, so
the CLI and the library release the same keys and bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from userdp.transforms.mechanisms.accounting import ZCDP, ApproxDP, Budget, PureDP
from userdp.transforms.mechanisms.partition_selection import (
    GaussianThresholding,
    LaplaceThresholding,
)
from userdp.transforms.mechanisms.selection_choice import best_selection
from userdp.transforms.params import SelectionRule

from ..config_model import QueryConfig
from .aggregate_plan import noise_draws
from .mechanism_manifest import describe_selection

AGGREGATES = ("count", "persons", "sum", "mean")


@dataclass(frozen=True)
class SelectionPlan:
    """A private partition selection shared by ``members`` (public facts only).

    ``name`` labels its noise stream and its manifest entry; it never equals a query name (query
    names cannot hold ``[``). ``share`` is what it spends (an (ε, δ) or ρ budget; under ρ its δ
    is ``selection_delta``). ``statistic_fraction``: the part of each member's share left to
    its statistic. ``releases_count``: Laplace thresholding whose noisy count a ``persons``
    member releases as its value.
    """

    name: str
    by: tuple[str, ...]
    max_partitions_per_person: int
    rule: SelectionRule
    share: Budget
    selection_delta: Fraction
    members: tuple[str, ...]
    statistic_fraction: Fraction
    releases_count: bool

    def to_manifest(self) -> dict[str, Any]:
        rule = describe_selection(self.rule, self.selection_delta)
        return {
            "name": self.name,
            "by": list(self.by),
            "max_partitions_per_person": self.max_partitions_per_person,
            "members": list(self.members),
            "share": self.share.to_manifest(),
            "statistic_fraction_of_member_shares": str(self.statistic_fraction),
            "rule": rule,
            "noisy_count_released_by": "the persons member" if self.releases_count else None,
        }

    def plan_lines(self) -> list[str]:
        s = self.rule
        return [
            f"shared by {', '.join(self.members)}: one key set by {', '.join(self.by)}, "
            f"L={self.max_partitions_per_person}",
            f"{type(s).__name__}, keeps a partition with ≥ {s.half_keep_count} persons half the "
            "time",
        ]


def selection_name(by: Sequence[str], max_partitions_per_person: int) -> str:
    return f"selection[{','.join(by)};L={max_partitions_per_person}]"


def selection_family(q: QueryConfig, total: Budget) -> str | None:
    """The grouping family of ``q`` under ``total``; None if it is never grouped."""
    if q.metric not in AGGREGATES or "kind" in q.options or not q.private_partitions:
        return None
    if isinstance(total, ZCDP):
        return "zcdp"
    return "laplace" if q.noise == "laplace" else None


def _reuses_count(q: QueryConfig, total: Budget) -> bool:
    return q.metric == "persons" and not isinstance(total, ZCDP) and q.noise == "laplace"


def group_selections(
    queries: Sequence[QueryConfig],
    shares: Mapping[str, Budget],
    total: Budget,
    selection_deltas: Mapping[str, Fraction],
) -> dict[str, SelectionPlan]:
    """Member name → its group's selection, for every group of two or more (module docstring)."""
    groups: dict[tuple[Any, ...], list[QueryConfig]] = {}
    for q in queries:
        family = selection_family(q, total)
        if family is not None:
            groups.setdefault((family, q.by, q.max_partitions_per_person), []).append(q)
    out: dict[str, SelectionPlan] = {}
    for (family, by, L), members in groups.items():
        if len(members) < 2:
            continue
        plan = _group_plan(
            family, by, L, members, shares=shares, total=total, selection_deltas=selection_deltas
        )
        out.update(dict.fromkeys(plan.members, plan))
    return out


def _group_plan(
    family: str,
    by: tuple[str, ...],
    L: int,
    members: list[QueryConfig],
    *,
    shares: Mapping[str, Budget],
    total: Budget,
    selection_deltas: Mapping[str, Fraction],
) -> SelectionPlan:
    reuse = [q for q in members if _reuses_count(q, total)]
    drawing = [q for q in members if not _reuses_count(q, total)]
    k = sum(noise_draws(q) for q in drawing)  # noise draws per partition (a mean draws two)
    keep = Fraction(k, k + 1)  # each drawing member's statistic part
    names = tuple(q.name for q in members)
    rule: SelectionRule
    if family == "zcdp":
        rho = sum((_rho(shares[q.name]) for q in members), Fraction(0)) / (k + 1)
        delta = sum((selection_deltas.get(q.name, Fraction(0)) for q in members), Fraction(0))
        rule = GaussianThresholding(rho, delta, L)
        return SelectionPlan(
            selection_name(by, L), by, L, rule, ZCDP(rho), delta, names, keep, False
        )
    given = [shares[q.name] for q in members]
    delta = sum((_delta(s) for s in given), Fraction(0))
    eps = sum((_eps(shares[q.name]) for q in reuse), Fraction(0))
    eps += sum((_eps(shares[q.name]) for q in drawing), Fraction(0)) / (k + 1)
    rule = LaplaceThresholding(eps, delta, L) if reuse else best_selection(eps, delta, L)
    share = ApproxDP(eps, delta)
    return SelectionPlan(
        selection_name(by, L), by, L, rule, share, Fraction(0), names, keep, bool(reuse)
    )


def _eps(b: Budget) -> Fraction:
    assert isinstance(b, PureDP | ApproxDP)
    return b.epsilon


def _delta(b: Budget) -> Fraction:
    return b.delta if isinstance(b, ApproxDP) else Fraction(0)


def _rho(b: Budget) -> Fraction:
    assert isinstance(b, ZCDP)
    return b.rho
