"""Planned local-sensitivity queries: the budget arithmetic, the mechanisms, and what is reported.

Part of :mod:`pipelines.kinds.local_sensitivity` (which parses the keys and wires the pipeline):
here a query's share of the total becomes a calibrated core mechanism, and the plan says what the
manifest and ``userdp plan`` show. Public facts only; nothing here sees data.

How each mechanism's guarantee is counted against the query's share (``counted_as`` in the
manifest):

* ε total: an ε-DP mechanism (Cauchy-type smooth noise) gets the share's ε (rounded down to a
  float). (ε, δ) mechanisms and ρ-zCDP noise are refused when the job file is read.
* (ε, δ) total: (ε, δ)-DP mechanisms get the share's (ε, δ); an ε-DP one counts as (ε, 0);
  Laplace-log-normal noise gets the largest ρ whose zCDP → (ε, δ) conversion (CKS 2020 Cor. 13,
  :func:`~transforms.mechanisms.accounting.zcdp_budget_for`) fits in the share.
* ρ total (+ δ): ρ-zCDP noise gets ρ; an ε-DP mechanism gets the largest float ε with ε²/2 ≤ ρ
  (ε-DP is ε²/2-zCDP, Bun & Steinke 2016 Prop. 1.4) — the exponential-mechanism quantile, being
  ε-bounded-range, the largest with ε²/8 ≤ ρ (Cesar & Rogers 2021; docs/accounting.md, "Bounded-
  range mechanisms"), twice that ε; an (ε, δ)-DP mechanism gets the ε of ε²/2 ≤ ρ and the
  query's δ share, and counts as δ-approximately ε²/2-zCDP (Bun & Steinke 2016, Def. 8.1: (ε, δ)-DP
  is δ-approximate (ε, 0)-zCDP, and the conditioned pair, being ε-indistinguishable, is
  ε²/2-zCDP). The δ is booked like private partition selection's (``plan.spent_selection_delta``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from userdp.transforms.mechanisms.accounting import (
    ZCDP,
    ApproxDP,
    Budget,
    PureDP,
    bounded_range_epsilon_within_rho,
    epsilon_within_rho,
    float_down,
    zcdp_budget_for,
)
from userdp.transforms.mechanisms.exponential_quantile import ExponentialQuantile
from userdp.transforms.mechanisms.ptr import PTRMean, PTRQuantile
from userdp.transforms.mechanisms.ptr_ladder import LadderPTR, reads_clamped_sum
from userdp.transforms.mechanisms.quantile_window import (
    SEARCH_BUCKETS,
    SEARCH_LEVELS,
    window_bound_for_reach,
)
from userdp.transforms.mechanisms.smooth_sensitivity import (
    CauchyNoise,
    LaplaceNoise,
    SmoothNoise,
    SmoothQuantile,
    make_smooth_noise,
)
from userdp.transforms.mechanisms.split_quantile import SplitQuantile
from userdp.transforms.mechanisms.stability import StableTopPartition
from userdp.transforms.mechanisms.trimmed_mean import TrimmedMean

if TYPE_CHECKING:  # Beam loads only when the pipeline is built, not for `userdp plan`
    from userdp.transforms.local_sensitivity import PerPersonMechanism

LN20 = math.log(20.0)  # Laplace: P(|X| > b·ln 20) = 0.05
NEIGHBOURS = "add/remove one person"
NUMERIC_COLUMNS = (("value", "float64"), ("released", "bool"))
# the trimmed mean also publishes the thresholds it averaged between (free: docs/trimmed_mean.md)
TRIMMED_COLUMNS = (
    ("value", "float64"),
    ("lower_threshold", "float64"),
    ("upper_threshold", "float64"),
    ("released", "bool"),
)


@dataclass(frozen=True)
class DPBudget:
    """What an ε-DP or (ε, δ)-DP mechanism may spend."""

    epsilon: Fraction
    delta: Fraction  # 0 under an ε total; under a ρ total, the query's δ share


def dp_budget(share: Budget, zcdp_delta: Fraction) -> DPBudget:
    """(ε, δ) for an ε- or (ε, δ)-DP mechanism from the query's share (module docstring)."""
    if isinstance(share, ZCDP):
        return DPBudget(Fraction(epsilon_within_rho(share.rho)), zcdp_delta)
    if isinstance(share, ApproxDP):
        return DPBudget(share.epsilon, share.delta)
    return DPBudget(share.epsilon, Fraction(0))


def bounded_range_epsilon(share: Budget) -> Fraction:
    """ε for an ε-bounded-range mechanism (the exponential mechanism) from the query's share: the
    share's ε, or under a ρ total the largest float ε with ε²/8 ≤ ρ (module docstring)."""
    if isinstance(share, ZCDP):
        return Fraction(bounded_range_epsilon_within_rho(share.rho))
    return share.epsilon


def is_bounded_range(mechanism: object) -> bool:
    """Whether the mechanism's privacy loss spans at most its ε (so ε²/8-zCDP): the exponential
    quantile. Smooth-sensitivity noise, PTR and stability are not counted so."""
    return isinstance(mechanism, ExponentialQuantile)


def zcdp_rho(share: Budget) -> Fraction:
    """ρ for a ρ-zCDP mechanism: the share's ρ, or the largest ρ that implies an (ε, δ) share."""
    if isinstance(share, ZCDP):
        return share.rho
    if isinstance(share, ApproxDP):
        return zcdp_budget_for(share).rho
    raise ValueError(f"a ρ-zCDP mechanism cannot be counted in the pure share {share}")


def smooth_noise(kind: str, gamma: float, share: Budget, zcdp_delta: Fraction) -> SmoothNoise:
    """The smooth-sensitivity noise rule ``kind`` calibrated to the share (floats rounded down)."""
    if kind == "lln":
        return make_smooth_noise("lln", rho=float_down(zcdp_rho(share)))
    b = dp_budget(share, zcdp_delta)
    if kind == "laplace":
        return make_smooth_noise(
            "laplace", epsilon=float_down(b.epsilon), delta=float_down(b.delta)
        )
    return make_smooth_noise("cauchy", epsilon=float_down(b.epsilon), gamma=gamma)


def _rank_error(m: ExponentialQuantile | SplitQuantile) -> float:
    """Ranks from q·n the release misses by at most, with probability ≥ 95%.

    The exponential mechanism's utility bound (Dwork & Roth 2014, Thm. 3.11): the released score
    is within 2Δ·ln(R/β)/ε of the best (which is within Δ of 0), R the number of candidates
    (G + 1 grid points, or (G + 1)·(J + 1) positions). The score is −|d·B − a·n| up to ties for
    q = a/d, so d ranks of B move it by d: the rank error is the score error over d, with
    Δ = max(a, d − a) and β = 5%.
    """
    a, d = m.q.numerator, m.q.denominator
    delta = max(a, d - a)
    candidates = m.positions if isinstance(m, SplitQuantile) else m.cells + 1
    return (2 * math.log(candidates / 0.05) / float(m.epsilon) + 1) * delta / d


BOUNDED_RANGE_RULE = (
    "ε-bounded-range (the exponential mechanism) is ε²/8-zCDP (Cesar & Rogers 2021; "
    "docs/accounting.md), ε²/8 ≤ ρ"
)


def counted_as(
    share: Budget, guarantee: Budget, zcdp_delta: Fraction, *, bounded_range: bool = False
) -> dict[str, Any]:
    """How ``guarantee`` (the mechanism's) is counted in ``share`` (the manifest's
    ``counted_as``): the rule, and under a ρ total the δ booked beside ρ. ``bounded_range``: the
    mechanism is ε-bounded-range, counted as ε²/8 under ρ (:func:`bounded_range_epsilon`)."""
    if isinstance(share, ZCDP) and bounded_range and isinstance(guarantee, PureDP):
        return {"rule": BOUNDED_RANGE_RULE}
    if isinstance(share, ZCDP):
        rule = {
            PureDP: "ε-DP is ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4), ε²/2 ≤ ρ",
            ApproxDP: "(ε, δ)-DP is δ-approximately ε²/2-zCDP (Bun & Steinke 2016, Def. 8.1), "
            "ε²/2 ≤ ρ; δ is the query's δ share, booked beside ρ",
            ZCDP: "ρ-zCDP within the ρ share",
        }[type(guarantee)]
    elif isinstance(share, ApproxDP):
        rule = {
            PureDP: "ε-DP counts as (ε, 0)-DP",
            ApproxDP: "(ε, δ)-DP within the (ε, δ) share",
            ZCDP: "ρ-zCDP implies the (ε, δ) share (Canonne, Kamath & Steinke 2020, Cor. 13)",
        }[type(guarantee)]
    else:
        rule = "ε-DP within the ε share"
    out: dict[str, Any] = {"rule": rule}
    if isinstance(share, ZCDP) and isinstance(guarantee, ApproxDP):
        out["delta"] = {"value": float(zcdp_delta), "exact": str(zcdp_delta)}
    return out


def _guarantee_line(
    share: Budget, guarantee: Budget, zcdp_delta: Fraction, *, bounded_range: bool = False
) -> str:
    line = f"guarantee: {guarantee} for {NEIGHBOURS}"
    if isinstance(share, ZCDP) and not isinstance(guarantee, ZCDP):
        br = bounded_range and isinstance(guarantee, PureDP)  # the rule counted_as applies
        rho = Fraction(guarantee.epsilon) ** 2 / (8 if br else 2)
        line += " (ε-bounded-range: ρ = ε²/8)" * br
        extra = f", δ={float(zcdp_delta):.3g} booked beside ρ" * isinstance(guarantee, ApproxDP)
        line += f"; counted as ρ={float(rho):.6g} ≤ share{extra}"
    elif isinstance(share, ApproxDP) and isinstance(guarantee, ZCDP):
        line += f"; implies the share {share} (CKS 2020 Cor. 13)"
    return line


def _noise_line(noise: SmoothNoise) -> str:
    m = f"value + {noise.multiplier:.4g}·S(x)·Z"
    if isinstance(noise, CauchyNoise):
        return (
            f"noise: Cauchy-type 1/(1+|z|^{noise.gamma:g}), β = ε'/(2(γ+1)) = {noise.beta:.4g}; "
            f"{m} (scale 2(γ+1)·S/ε'; ε' = ε − 2^-26, set aside for the float arithmetic)"
        )
    if isinstance(noise, LaplaceNoise):
        return (
            f"noise: Laplace, β = ε'/(2 ln(2/δ₀)) = {noise.beta:.4g} (δ₀ = {noise.delta_seed:.3g});"
            f" {m} (scale 2·S/ε'; ε' = ε − 2^-26 and δ·(1 − 2^-26), set aside for the float "
            "arithmetic)"
        )
    return (
        f"noise: Laplace-log-normal σ = {noise.sigma:.4g}, t = β = {noise.beta:.4g} "
        f"(default ε/(2√5)); {m} (scale S/s, s = {noise.s:.4g})"
    )


def _trimmed_lines(m: TrimmedMean) -> list[str]:
    """The trimmed mean's parts: thresholds (with their rank error), then the noise on the mean.

    The mean's noise from the sum is Z_S/(2C) grid cells for thresholds b − a cells apart, Z_S's
    std being std(1)·(b − a): so (v_b − v_a)·std(1)/(2C) in value units, v_a, v_b the thresholds'
    values (the count's noise adds a term scaled by the kept values' offset from the middle)."""
    lo, hi = m.low_quantile, m.high_quantile
    unit, _ = m.noise_scales(1)  # the sum's noise scale (σ² under ρ) for b − a = 1
    s, c = m.parts[1:]
    if isinstance(m.budget, ZCDP):
        std = math.sqrt(float(unit))
        noise = (
            f"discrete Gaussian σ² = (b−a)²/(2·({s})·ρ) and 1/(2·({c})·ρ), "
            f"ρ={float(m.budget.rho):.4g}"
        )
    else:
        std = math.sqrt(2.0) * float(unit)  # a Laplace's std is √2·scale
        noise = f"discrete Laplace (b−a)/(({s})·ε) and 1/(({c})·ε), ε={float(m.budget.epsilon):.4g}"
    return [
        f"thresholds: exponential mechanism at q = {lo.q} and {hi.q}, ε={float(lo.epsilon):.4g} "
        f"each, {m.cells:,} grid cells split {1 << m.split_bits:,} ways among tied persons; "
        f"rank error ≤ {_rank_error(lo):.3g} persons each with probability ≥ 95% (plus c/"
        f"{1 << m.split_bits:,} at a grid point of c tied persons)",
        f"kept persons' centred sum and count + {noise}; noise on the mean: std ≈ "
        f"{std / 2:.3g}·(upper threshold − lower threshold) / kept persons",
    ]


def _ptr_lines(m: PTRQuantile | PTRMean | LadderPTR) -> list[str]:
    if isinstance(m, LadderPTR):
        return [
            f"no proposed bound: {m.rungs} rungs b = {float(m.bounds[0]):.4g} … "
            f"{float(m.bounds[-1]):.4g} (×{m.ratio}), sparse vector with ε/2, threshold "
            f"T = {m.threshold}, distances capped at C = {m.cap}; then + Laplace(b_j/(ε/2)); "
            "⊥ if no rung passes"
        ]
    c = m.calibration
    scale = c.mechanism.scale
    return [
        f"proposed bound b = {float(c.bound):g}: pass iff min(D(x, b), C) + DLap(2/ε) ≥ T = "
        f"{c.threshold}, else ⊥ (the cap C = {c.cap}, where the test fails with probability "
        "≤ 2^-64, lets it read only values near the rank)",
        f"release: + Laplace scale {scale:.4g} (b/(ε/2)), 95% error ±{scale * LN20:.4g}",
    ]


def guarantee_of(mechanism: PerPersonMechanism | StableTopPartition) -> Budget:
    """The mechanism's own guarantee (a smooth-sensitivity quantile's is its noise rule's)."""
    if isinstance(mechanism, SmoothQuantile):
        return mechanism.noise.guarantee
    return mechanism.guarantee


@dataclass(frozen=True)
class PerPersonPlan:
    """A planned query over one value per person: smooth-sensitivity quantile or PTR."""

    name: str
    metric: str
    method: str  # "smooth_sensitivity" or "propose_test_release"
    share: Budget
    zcdp_delta: Fraction  # under a ρ total: the δ share this query spends (else 0)
    reduction: str
    value: str | None
    mechanism: PerPersonMechanism
    by: tuple[str, ...] = ()
    output_columns: tuple[tuple[str, str], ...] = NUMERIC_COLUMNS

    @property
    def guarantee(self) -> Budget:
        return guarantee_of(self.mechanism)

    @property
    def lower(self) -> float:
        return self.mechanism.lower

    @property
    def upper(self) -> float:
        return self.mechanism.upper

    def to_manifest(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "metric": self.metric,
            "method": self.method,
            "per_person": {"reduction": self.reduction, "value": self.value},
            "bounds": [self.lower, self.upper],
            "share": self.share.to_manifest(),
            "mechanism": self.mechanism.to_manifest(),
            "guarantee": {**self.guarantee.to_manifest(), "neighbouring": NEIGHBOURS},
            "counted_as": counted_as(
                self.share,
                self.guarantee,
                self.zcdp_delta,
                bounded_range=is_bounded_range(self.mechanism),
            ),
            "output": self.output_text,
            "gathered": self.gathered,
        }

    @property
    def output_text(self) -> str:
        if isinstance(self.mechanism, TrimmedMean):
            return (
                "one row: value, lower_threshold and upper_threshold (the private quantiles the "
                "mean is taken between), released (always true)"
            )
        return "one row: value (null for ⊥), released (false for ⊥)"

    @property
    def gathered(self) -> str:
        """What the releasing worker holds (transforms/local_sensitivity.py and
        transforms/grid_histogram.py, which choose by the public grid size), for the manifest."""
        m = self.mechanism
        if isinstance(m, (ExponentialQuantile, TrimmedMean)):
            if m.dense_counts:
                return (
                    f"one count per grid point on one worker ({m.cells + 1:,} counts of 8 bytes, "
                    "whatever the person count)"
                )
            return "the distinct grid points on one worker (16 bytes each, up to one per person)"
        if reads_clamped_sum(m):
            return "the person count and the exact clamped sum (no per-person values)"
        assert not isinstance(m, PTRMean) and m.q is not None  # a quantile: it reads a window
        return _window_text(m.q, m.reach)

    def plan_lines(self) -> list[str]:
        m = self.mechanism
        of = f"per-person {self.reduction}" + (f"({self.value})" if self.value else "")
        q = getattr(m, "q", None)
        what = f"{self.metric} (q = {q})" if self.metric == "quantile" else self.metric
        head = f"{what} of {of}, clamped to [{self.lower:g}, {self.upper:g}]: "
        if isinstance(m, SmoothQuantile):
            lines = [head + "smooth sensitivity (NRS07)", _noise_line(m.noise)]
        elif isinstance(m, TrimmedMean):
            lo, hi = m.low_quantile.q, m.high_quantile.q
            kept = f"the values between private {lo} and {hi} quantiles"
            lines = [head + f"mean of {kept} (trim {m.trim} per end)", *_trimmed_lines(m)]
        elif isinstance(m, ExponentialQuantile):
            lines = [
                head + "exponential mechanism on a grid",
                f"ε={float(m.epsilon):.4g}, {m.cells:,} grid cells of width "
                # each bound divided first: upper − lower overflows for bounds near ±1e308
                f"{m.upper / m.cells - m.lower / m.cells:.3g}; rank error ≤ "
                f"{_rank_error(m):.3g} persons with probability ≥ 95%",
            ]
        else:
            lines = [head + "propose-test-release", *_ptr_lines(m)]
        lines.append(f"memory: {self.gathered}")  # sizing a cluster's releasing worker
        br = is_bounded_range(m)
        guarantee = _guarantee_line(self.share, self.guarantee, self.zcdp_delta, bounded_range=br)
        return [*lines, guarantee]


WINDOW_TEXT_LIMIT = 10**9  # a window bound past this is "every value" for any real log


def _window_text(q: Fraction, reach: int) -> str:
    """A quantile's releasing worker: the window of order statistics its release reads
    (transforms/rank_window.py), bounded by the reach (from β, or PTR's distance cap) and q
    alone."""
    bound = window_bound_for_reach(q, reach)
    if bound > WINDOW_TEXT_LIMIT:  # q = a/b with a huge b: no values can be dropped
        return (
            f"every per-person value on one worker (8 bytes per person): q = {q} has "
            f"denominator {q.denominator:,}, so no value can be left out; a q with a small "
            "denominator (0.25, 0.9) keeps a window of the values"
        )
    return (
        f"{bound:,} per-person values around the rank on one worker (8 bytes each, whatever "
        "the person count; more only where distinct values crowd within 2^-48 of the bounds' "
        f"span of the window's edges), found by {SEARCH_LEVELS} histograms of "
        f"{SEARCH_BUCKETS:,} counts"
    )


@dataclass(frozen=True)
class TopPartitionPlan:
    """A planned top-partition query: the ``by`` key with the most persons, exactly, or ⊥."""

    name: str
    share: Budget
    zcdp_delta: Fraction
    by: tuple[str, ...]
    mechanism: StableTopPartition
    metric: str = "top_partition"
    method: str = "stability"
    output_columns: tuple[tuple[str, str], ...] = (("released", "bool"),)

    def to_manifest(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "metric": self.metric,
            "method": self.method,
            "by": list(self.by),
            "share": self.share.to_manifest(),
            "mechanism": self.mechanism.to_manifest(),
            "guarantee": {
                **self.mechanism.guarantee.to_manifest(),
                "neighbouring": NEIGHBOURS,
            },
            "counted_as": counted_as(self.share, self.mechanism.guarantee, self.zcdp_delta),
            "output": "one row: the by columns (null for ⊥), released (false for ⊥)",
        }

    def plan_lines(self) -> list[str]:
        by = ", ".join(self.by)
        return [
            f"top_partition by {by}: the partition with the most persons, exactly, or ⊥ "
            "(stability: distance to instability)",
            f"release iff dist − 1 + DLap(1/ε) ≥ T = {self.mechanism.threshold}",
            _guarantee_line(self.share, self.mechanism.guarantee, self.zcdp_delta),
        ]
