"""``count`` / ``sum`` with ``bound = "auto"``: the per-person clamp chosen privately, then noise.

Instead of ``max_rows_per_partition`` and ``bounds``, a share of the query's budget (``auto_share``,
default 1/4) picks the clamp B for each person's total — rows for ``count``, the sum of ``value``
for ``sum`` (negative values count as 0) — with the exponential mechanism of
:mod:`transforms.mechanisms.auto_bound` on a histogram of per-person totals, among a grid of four
candidates per octave inside ``bound_range`` (default [1, 2^30]): the fewest persons clipped,
against a prior for small clamps. The rest of the share adds Laplace (``noise = "laplace"``, the
default under ε totals) or Gaussian (the default under ρ) noise of sensitivity B to
Σ_i min(t_i, B). Guarantee: the choice (pure ε) composed with the noise, for add/remove one
person (``docs/shifted_inverse.md`` §5, §7); under a ρ total the choice, ε-bounded-range, runs
with the largest ε with ε²/8 ≤ ρ (``docs/accounting.md``, "Bounded-range mechanisms").

The chosen B is data-dependent but released by a DP mechanism, so it is published in the output
row (``bound``, with ``value`` and ``stddev``); the manifest records only public facts — the
candidates, the choice's mechanism and budget, the noise's budget. ``by`` with a file of public
``partitions`` and ``max_partitions_per_person`` (L) chooses a bound per partition with 1/L of the
share each. Reached through the ``count``/``sum`` kind (:mod:`.aggregate`), which routes a query
with ``bound`` here.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from userdp.transforms.mechanisms.additive import GaussianMechanism, LaplaceMechanism
from userdp.transforms.mechanisms.checks import NoiseScaleOverflowError
from userdp.transforms.params import free_sum_quantum

from ..config import QueryConfig
from ..config_fields import MISSING, finite_float, parse_shares
from ..public_keys import typed_public_keys
from .base import BuildContext, KindPlan, PlanContext, QuerySection
from .shifted_inverse import config_error, parse_partitioning, public_keys
from .shifted_inverse_plan import AutoBoundPlan, auto_bound_parts, clamp_choice

if TYPE_CHECKING:
    from apache_beam.pvalue import PCollection

DEFAULT_RANGE = (Fraction(1), Fraction(2**30))
DEFAULT_AUTO_SHARE = Fraction(1, 4)  # measured best of 1/4, 1/3, 1/2: docs/accuracy.md
SUM_OCTAVES = 40  # sums: candidates within 2^40 of each other (fixed point, docs §7)
_KEYS = ("name", "metric", "bound", "value", "bound_range", "auto_share", "noise")
_PARTITION_KEYS = ("by", "partitions", "max_partitions_per_person")
_RANGE = (
    "[lowest, highest] positive numbers holding at least one power of two",
    "candidate clamps lie between the powers of two in this range; choose it without the data",
)


def _ceil_log2(x: Fraction) -> int:
    e = x.numerator.bit_length() - x.denominator.bit_length()
    while Fraction(2) ** e < x:
        e += 1
    while Fraction(2) ** (e - 1) >= x:
        e -= 1
    return e


def _exponents(s: QuerySection, metric: str) -> tuple[int, int]:
    """(e_min, e_max): the powers of two 2^e inside ``bound_range``."""
    raw = s.get("bound_range")
    if raw is MISSING:
        lo, hi = DEFAULT_RANGE
    else:
        ok = isinstance(raw, list) and len(raw) == 2
        ok = ok and all(math.isfinite(finite_float(x)) and x > 0 for x in raw)
        if not ok:
            s.fail("bound_range", raw, *_RANGE)
        lo, hi = Fraction(raw[0]), Fraction(raw[1])
    e_min, e_max = _ceil_log2(lo), _ceil_log2(hi)
    e_max -= Fraction(2) ** e_max > hi  # the largest e with 2^e ≤ hi
    if e_min > e_max:
        s.fail("bound_range", raw, *_RANGE)
    if metric == "count" and e_min < 0:
        s.fail("bound_range", raw, "a range starting at 1 or more", "count clamps whole rows")
    if metric == "sum" and e_max - e_min > SUM_OCTAVES:
        s.fail("bound_range", raw, f"at most 2^{SUM_OCTAVES} from lowest to highest", "")
    return e_min, e_max


def _check_top_noise(top: float, epsilon: float | None, rho: float | None) -> None:
    """The largest candidate's noise must fit a float (every smaller one's then does): refused
    here, at planning, rather than when the private choice lands on it at release. Both
    constructors refuse a scale past the float range (NoiseScaleOverflowError); the stated
    std must fit too, or the output's stddev would be inf only when the data chose the top."""
    try:
        m: LaplaceMechanism | GaussianMechanism = (
            LaplaceMechanism(top, epsilon)
            if epsilon is not None
            else GaussianMechanism(top, rho or 0)
        )
        if not math.isfinite(m.std):  # Laplace's √2·b can pass the float range where b does not
            raise NoiseScaleOverflowError(f"the noise's std for the bound {top:.3g} is inf")
    except NoiseScaleOverflowError as e:
        raise ValueError(
            f"the noise for the largest candidate bound {top:.3g} overflows a float; lower the "
            "top of bound_range or raise the budget"
        ) from e


class AutoBoundKind:
    metrics = ("count", "sum")

    def parse(self, s: QuerySection) -> QueryConfig:
        metric = s.choice("metric", self.metrics)
        for fixed in ("max_rows_per_partition", "bounds"):  # the bounded kinds' clamp
            if s.has(fixed):
                s.fail(fixed, s.get(fixed), "no fixed clamp with bound = 'auto'",
                       "bound = 'auto' chooses each person's clamp privately: remove "
                       f"{fixed}, or drop bound = 'auto' to give the clamp yourself")  # fmt: skip
        s.allow_keys((*_KEYS, *_PARTITION_KEYS, "epsilon", "delta", "rho"))
        if s.get("bound") != "auto":
            s.fail("bound", s.get("bound"), '"auto"', "or give bounds / max_rows_per_partition")
        value = s.string("value", required=metric == "sum")
        if metric == "count" and value is not None:
            s.fail("value", value, "no value for metric 'count'", "remove `value`")
        exponents = _exponents(s, metric)
        auto_share = s.number(
            "auto_share", positive=True, below_one=True,
            hint="the fraction of the query's share spent choosing the bound",
        ) or DEFAULT_AUTO_SHARE  # fmt: skip
        by, partitions, L = parse_partitioning(s)
        rho = s.budget.rho is not None
        noise = s.choice("noise", ("laplace", "gaussian"), default="gaussian" if rho else "laplace")
        gaussian = (
            s.key("noise"),
            noise,
            "laplace, or a delta > 0 for gaussian noise",
            "gaussian noise under an epsilon total needs delta (or use rho)",
        )
        eps, delta, rho_share = parse_shares(
            s.v,
            s.raw,
            s.prefix,
            s.budget,
            spends_delta=None,
            delta_under_epsilon=gaussian if noise == "gaussian" else None,
        )
        options = {"kind": "auto_bound", "auto_share": auto_share, "exponents": exponents}
        return QueryConfig(
            s.string("name"), metric, by, value, max_partitions_per_person=L,
            partitions=partitions, noise=noise, epsilon=eps, delta=delta, rho=rho_share,
            options=options,
        )  # fmt: skip

    def needs_delta(self, query: QueryConfig, rho_total: bool) -> bool:
        # under a ρ total both parts are ρ-zCDP (or pure ε); under (ε, δ), Gaussian noise is
        # converted from (ε, δ) to ρ
        return query.noise == "gaussian" and not rho_total

    def required_columns(self, query: QueryConfig) -> dict[str, str]:
        out = dict.fromkeys(query.by, "key")
        if query.value is not None:
            out[query.value] = "number"
        return out

    def plan(self, query: QueryConfig, ctx: PlanContext) -> KindPlan:
        o, L = query.options, query.max_partitions_per_person
        e_min, e_max = o["exponents"]
        try:
            eps_choice, eps, rho = auto_bound_parts(ctx.share, L, o["auto_share"], query.noise)
            quantum = free_sum_quantum(2.0**e_max) if query.metric == "sum" else 0
            choice = clamp_choice(eps_choice, (e_min, e_max), quantum)
            _check_top_noise(choice.sensitivity(len(choice.candidates) - 1), eps, rho)
        except ValueError as e:
            raise config_error(ctx, e) from e
        return AutoBoundPlan(
            query.name, query.metric, ctx.share, query.value, choice, query.noise, eps, rho,
            o["auto_share"], quantum, query.by, public_keys(query, ctx), L,
        )  # fmt: skip

    def expand(
        self, clean: PCollection[Any], plan: KindPlan, ctx: BuildContext
    ) -> PCollection[dict[str, Any]]:
        # Beam loads here, when the pipeline is built: `userdp plan` never imports it.
        from userdp.transforms.shifted_inverse_contributions import (  # noqa: PLC0415
            Contributions,
        )
        from userdp.transforms.shifted_inverse_release import (  # noqa: PLC0415
            AutoBoundQuery,
            ReleaseShiftedInverse,
        )

        assert isinstance(plan, AutoBoundPlan)
        spec = Contributions(
            "totals", "sum" if plan.value else "count", plan.value,
            limit=2.0**plan.choice.max_exponent, quantum=plan.quantum, by=plan.by,
            public_keys=typed_public_keys(plan.public_keys, plan.by, ctx.schema),
            max_partitions=plan.max_partitions_per_person,
        )  # fmt: skip
        noise: Literal["laplace", "gaussian"] = (
            "gaussian" if plan.noise == "gaussian" else "laplace"
        )
        query = AutoBoundQuery(plan.name, spec, plan.choice, noise, plan.epsilon, plan.rho)
        release = ReleaseShiftedInverse(query, keys=ctx.keys, noise=ctx.noise)
        out: PCollection[dict[str, Any]] = ctx.shards() | f"{plan.name}/AutoBound" >> release
        return out  # {by..., value, stddev, bound}


KIND = AutoBoundKind()
