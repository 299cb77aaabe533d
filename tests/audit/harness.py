"""Privacy audits: a statistical lower bound on a mechanism's ε, computed from samples.

An audit checks one claim: "``mechanism`` is (ε, δ)-DP on the neighbouring inputs ``x`` and
``x_prime``" (they differ by adding or removing one person). By definition the claim implies, for
every set of outputs S and in both directions,

    P[M(x) ∈ S] ≤ e^ε · P[M(x') ∈ S] + δ    and    P[M(x') ∈ S] ≤ e^ε · P[M(x) ∈ S] + δ.

:func:`audit` looks for an S that breaks this. It chooses S on one sample and tests it on a fresh
one, as StatDP does (Ding, Wang, Wang, Zhang & Kifer, "Detecting Violations of Differential
Privacy", CCS 2018), and turns the test counts into an ε lower bound with exact Clopper–Pearson
intervals, as in auditing of private learning (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021):

1. **Sampling.** Draw ``n`` outputs per side; draw i of side s ∈ {``"x"``, ``"x'"``} gets its own
   stream ``KeyedRng(secret, label, s, i)``. The secret is fixed (:data:`AUDIT_SECRET` unless
   given), so an audit draws the same samples on every run: it is reproducible and never flaky.
   The mechanism must take all its randomness from that stream.
2. **Choosing the event, on training halves.** Each side's first ⌊n/2⌋ draws are its training
   half. Candidate events are
   - real outputs (``int`` or ``float``): half-lines {y ≤ c} and {y ≥ c} with c on a grid of
     pooled training quantiles (denser in the tails), and intervals {a ≤ y ≤ b} on a coarser grid;
     when there are at most :data:`SMALL_SUPPORT` distinct values, every value is a grid point and
     the single values {y = v} are candidates too (so ``int`` outputs get "= v", "≤ v", "≥ v");
   - other hashable outputs: every single value {y = v} and its complement {y ≠ v};
   - ⊥ (``None``): {y = ⊥} and {y ≠ ⊥}, and every real-output event also with ⊥ added.

   For every candidate and both directions (x over x', x' over x) the training halves give the
   lower bound of step 3; the event and direction with the largest one win. Ranking by a lower
   bound rather than by the raw ratio p̂/q̂ keeps the audit from picking tiny events whose ratio
   is mostly noise.
3. **Testing, on fresh halves.** With the remaining draws (m per side), count hits of the chosen S
   and take Clopper–Pearson bounds, each one-sided at confidence 1 − α/2
   (``scipy.stats.beta.ppf``): p_lo ≤ P[M(numerator side) ∈ S] and q_hi ≥ P[M(other side) ∈ S].
   Then ε_lb = ln((p_lo − δ) / q_hi), or −∞ when p_lo ≤ δ (no evidence). The audit **passes** iff
   ε_lb ≤ ε.

False alarms. The event is fixed before the test halves are looked at, so step 3 is one test. If the
mechanism is (ε, δ)-DP and both bounds hold (probability ≥ 1 − α), then p_lo − δ ≤ p − δ ≤ e^ε·q ≤
e^ε·q_hi, so ε_lb ≤ ε. Hence a correct mechanism fails an audit with probability ≤ α over the
draws (over the choice of secret, modelling the keyed stream as truly random). With the fixed
secret the outcome is deterministic; α bounds the chance that the secret is an unlucky one.

Power. ε_lb is a lower bound: even a tight mechanism shows ε_lb below its true ε, by a margin
shrinking like 1/√(m·q); the tests that use this harness compute the expected margin by hand.

Usage::

    def mechanism(value, rng):
        return laplace_mechanism(value, sensitivity=1, epsilon=1, rng=rng)

    assert_private(mechanism, 0.0, 1.0, epsilon=1.0)      # raises AssertionError with the report
    assert_caught(too_little_noise, 0.0, 1.0, epsilon=1.0)  # for negative controls
    result = audit(mechanism, 0.0, 1.0, epsilon=1.0)      # or inspect the AuditResult yourself
    # One set of draws, several claims (steps 2-3 only):
    xs, ys = draw(mechanism, 0.0, n, side="x"), draw(mechanism, 1.0, n, side="x'")
    audit_outputs(xs, ys, epsilon=1.0, delta=0.0)
"""

from __future__ import annotations

import hashlib
import math
import numbers
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from userdp.transforms.mechanisms.rng import KeyedRng

AUDIT_SECRET = hashlib.sha256(b"userdp.audit.v1").digest()
"""The fixed release secret audits draw from unless told otherwise (32 bytes)."""

MIN_SAMPLES = 1_000
"""Smallest ``n`` accepted: each half needs enough draws for a useful Clopper–Pearson bound."""

SMALL_SUPPORT = 256
"""Real outputs with at most this many distinct training values get every value as a candidate."""

_FINE_LEVELS = 99  # quantile levels 1%, 2%, …, 99% for half-line thresholds
_TAIL_LEVELS = 32  # plus this many log-spaced levels in each tail
_COARSE_LEVELS = 40  # quantile levels for interval end points

Mechanism = Callable[[Any, KeyedRng], object]
"""``mechanism(data, rng) -> output``: a float, an int, any hashable value, or ``None`` for ⊥."""

Side = Literal["x", "x'"]
_SIDES: tuple[Side, Side] = ("x", "x'")
_Halves = tuple[Sequence[object], Sequence[object]]  # one half of the draws of each side
IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


# --- Events ---------------------------------------------------------------------------------------


def _is_real(y: object) -> bool:
    """Real numbers (int, float, numpy scalars) but not bools, which are categories."""
    if type(y) in (int, float):
        return True
    return isinstance(y, numbers.Real) and not isinstance(y, (bool, np.bool_))


def _show(y: object) -> str:
    if y is None:
        return "⊥"
    if isinstance(y, float):
        return f"{y:.6g}"
    return repr(y)


@dataclass(frozen=True)
class Event:
    """A set S of outputs. ``y in event`` tests membership.

    Kinds: ``"range"`` is {lo ≤ y ≤ hi} over real outputs (lo or hi may be infinite), plus ⊥ if
    ``with_bot``; ``"value"`` is {y = value}; ``"other_than"`` is {y ≠ value} (⊥ is ``None``).
    """

    kind: Literal["range", "value", "other_than"]
    lo: float = -math.inf
    hi: float = math.inf
    value: Hashable = None
    with_bot: bool = False

    def __contains__(self, y: object) -> bool:
        if self.kind == "value":
            return bool(y == self.value) if y is not None else self.value is None
        if self.kind == "other_than":
            return not (bool(y == self.value) if y is not None else self.value is None)
        if y is None:
            return self.with_bot
        return _is_real(y) and self.lo <= y <= self.hi  # type: ignore[operator]

    def __str__(self) -> str:
        if self.kind == "value":
            return f"{{y = {_show(self.value)}}}"
        if self.kind == "other_than":
            return f"{{y ≠ {_show(self.value)}}}"
        if self.lo == self.hi:
            body = f"y = {_show(self.lo)}"
        elif self.lo == -math.inf:
            body = f"y ≤ {_show(self.hi)}"
        elif self.hi == math.inf:
            body = f"y ≥ {_show(self.lo)}"
        else:
            body = f"{_show(self.lo)} ≤ y ≤ {_show(self.hi)}"
        return f"{{{body}}} ∪ {{⊥}}" if self.with_bot else f"{{{body}}}"


# --- Clopper–Pearson ------------------------------------------------------------------------------


def _cp_lower(k: IntArray, m: int, a: float) -> FloatArray:
    """One-sided lower confidence bounds, level 1 − a, on p from k successes in m trials."""
    k = np.asarray(k, dtype=np.int64)
    safe = np.maximum(k, 1)
    return np.where(k == 0, 0.0, stats.beta.ppf(a, safe, m - safe + 1))


def _cp_upper(k: IntArray, m: int, a: float) -> FloatArray:
    """One-sided upper confidence bounds, level 1 − a, on p from k successes in m trials."""
    k = np.asarray(k, dtype=np.int64)
    safe = np.minimum(k, m - 1)
    return np.where(k == m, 1.0, stats.beta.ppf(1.0 - a, safe + 1, m - safe))


def clopper_pearson(k: int, m: int, alpha: float) -> tuple[float, float]:
    """The exact two-sided (1 − α) Clopper–Pearson interval for k successes in m trials.

    Each end is a one-sided bound at level 1 − α/2, as used by :func:`audit`.
    """
    if not 0 <= k <= m:
        raise ValueError(f"need 0 ≤ k ≤ m, got k={k}, m={m}")
    ks = np.array([k])
    return float(_cp_lower(ks, m, alpha / 2)[0]), float(_cp_upper(ks, m, alpha / 2)[0])


def _epsilon_lb(
    k_num: IntArray, k_den: IntArray, m: int, *, delta: float, alpha: float
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(ε_lb, p_lo, q_hi) per event from hits in m draws a side: ln((p_lo − δ)/q_hi), or −∞."""
    p_lo = _cp_lower(k_num, m, alpha / 2)
    q_hi = _cp_upper(k_den, m, alpha / 2)
    excess = p_lo - delta
    positive = excess > 0
    with np.errstate(divide="ignore"):
        eps = np.where(positive, np.log(np.where(positive, excess, 1.0)) - np.log(q_hi), -np.inf)
    return eps, p_lo, q_hi


# --- Candidate events on the training halves ------------------------------------------------------


@dataclass(frozen=True)
class _Candidates:
    events: list[Event]
    hits: tuple[IntArray, IntArray]  # training hits of every event, for x and for x'


def _real_candidates(train: _Halves) -> _Candidates:
    sides = []
    for outs in train:
        vals = np.array([y for y in outs if y is not None], dtype=np.float64)
        sides.append((np.sort(vals), len(outs) - len(vals)))
    pooled = np.sort(np.concatenate([s for s, _ in sides]))
    any_bot = any(b > 0 for _, b in sides)
    support = np.unique(pooled)
    if len(support) <= SMALL_SUPPORT:
        cuts, ends, points = support, support, support
    else:
        tail = np.geomspace(min(0.01, 10.0 / len(pooled)), 0.01, _TAIL_LEVELS, endpoint=False)
        levels = np.concatenate([tail, np.linspace(0.01, 0.99, _FINE_LEVELS), 1.0 - tail])
        cuts = _quantiles(pooled, levels)
        ends = _quantiles(pooled, np.linspace(0.0, 1.0, _COARSE_LEVELS))
        points = np.empty(0)
    lo_idx, hi_idx = np.triu_indices(len(ends), k=1)
    ranges = [
        (np.full(len(cuts), -np.inf), cuts),  # {y ≤ c}
        (cuts, np.full(len(cuts), np.inf)),  # {y ≥ c}
        (ends[lo_idx], ends[hi_idx]),  # {a ≤ y ≤ b}
        (points, points),  # {y = v}
    ]
    lo = np.concatenate([r[0] for r in ranges])
    hi = np.concatenate([r[1] for r in ranges])
    range_hits = [
        np.searchsorted(s, hi, side="right") - np.searchsorted(s, lo, side="left") for s, _ in sides
    ]
    events = [Event("range", float(a), float(b)) for a, b in zip(lo, hi, strict=True)]
    hits = [h.astype(np.int64) for h in range_hits]
    if any_bot:
        events += [Event("range", e.lo, e.hi, with_bot=True) for e in events]
        events += [Event("value", value=None), Event("other_than", value=None)]
        for j, (s, n_bot) in enumerate(sides):
            hits[j] = np.concatenate([hits[j], hits[j] + n_bot, [n_bot, len(s)]])
    return _Candidates(events, (hits[0], hits[1]))


def _quantiles(pooled: FloatArray, levels: FloatArray) -> FloatArray:
    """Sample values (not interpolations) at the given quantile levels, deduplicated."""
    idx = np.clip(np.round(levels * (len(pooled) - 1)).astype(np.int64), 0, len(pooled) - 1)
    return np.unique(pooled[idx])


def _discrete_candidates(train: _Halves) -> _Candidates:
    counts = []
    for outs in train:
        try:
            counts.append(Counter(outs))
        except TypeError as err:
            raise TypeError(
                f"mechanism outputs must be hashable (or real numbers, or None): {err}"
            ) from err
    values = list(dict.fromkeys([*counts[0], *counts[1]]))
    events = [Event("value", value=v) for v in values] + [
        Event("other_than", value=v) for v in values
    ]
    hits = []
    for c, outs in zip(counts, train, strict=True):
        k = np.array([c[v] for v in values], dtype=np.int64)
        hits.append(np.concatenate([k, len(outs) - k]))
    return _Candidates(events, (hits[0], hits[1]))


def _candidates(train: _Halves) -> _Candidates:
    if all(_is_real(y) for outs in train for y in outs if y is not None):
        return _real_candidates(train)
    return _discrete_candidates(train)


# --- The audit ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditResult:
    """The outcome of :func:`audit`; ``str(result)`` explains it in a few lines.

    ``larger`` names the side whose probability of S is bounded from below (the numerator):
    ε_lb = ln((p_lo − δ)/q_hi) with p_lo ≤ P[M(larger) ∈ S] and q_hi ≥ P[M(other) ∈ S].
    """

    epsilon_lb: float
    epsilon: float
    delta: float
    alpha: float
    n: int
    event: Event
    larger: Side
    test_size: int  # m, draws per side in the test halves
    hits: tuple[int, int]  # test-half hits of S by M(x) and by M(x')
    p_lo: float
    q_hi: float
    train_epsilon_lb: float  # the chosen event's bound on the training halves

    @property
    def passed(self) -> bool:
        """True iff ε_lb ≤ ε: the samples are consistent with the claimed guarantee."""
        return self.epsilon_lb <= self.epsilon

    @property
    def smaller(self) -> Side:
        return "x'" if self.larger == "x" else "x"

    def __str__(self) -> str:
        eps_lb = "−∞ (no evidence)" if self.epsilon_lb == -math.inf else f"{self.epsilon_lb:.4f}"
        claim = f"ε = {self.epsilon:.6g}, δ = {self.delta:.3g}"
        verdict = (
            f"PASSED: ε_lb = {eps_lb} ≤ claimed {claim}"
            if self.passed
            else f"VIOLATION: ε_lb = {eps_lb} > claimed {claim}"
        )
        big, small = self.larger, self.smaller
        k_big, k_small = self.hits if big == "x" else self.hits[::-1]
        m = self.test_size
        return "\n".join(
            [
                f"privacy audit {verdict}",
                f"  α = {self.alpha:.3g}, n = {self.n} draws per side; event S = {self.event} "
                f"chosen on the training halves (training ε_lb = {self.train_epsilon_lb:.4f})",
                f"  test halves, m = {m} per side: M({big}) ∈ S {k_big} times "
                f"(p̂ = {k_big / m:.5g}, p_lo = {self.p_lo:.5g}); M({small}) ∈ S {k_small} times "
                f"(q̂ = {k_small / m:.5g}, q_hi = {self.q_hi:.5g})",
                "  ε_lb = ln((p_lo − δ) / q_hi); a correct mechanism exceeds its ε here with "
                "probability ≤ α",
            ]
        )


def _check_args(n: int, epsilon: float, delta: float, alpha: float) -> None:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n must be an int, got {type(n).__name__} {n!r}")
    if n < MIN_SAMPLES:
        raise ValueError(
            f"n = {n} draws per side is too small: need n ≥ {MIN_SAMPLES}, and 10^5 for a "
            "useful bound (each half must resolve the event's probability)"
        )
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}; 1e-6 is the usual choice")
    if not 0 <= epsilon < math.inf:
        raise ValueError(f"epsilon must be finite and ≥ 0, got {epsilon!r}")
    if not 0 <= delta < 1:
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}; δ ≥ 1 promises nothing")


def draw(
    mechanism: Mechanism,
    data: object,
    n: int,
    *,
    side: Side,
    secret: bytes = AUDIT_SECRET,
    label: str = "audit",
) -> list[object]:
    """``n`` outputs of ``mechanism(data, ·)``; draw i uses ``KeyedRng(secret, label, side, i)``."""
    return [mechanism(data, KeyedRng(secret, label, side, i)) for i in range(n)]


def audit(
    mechanism: Mechanism,
    x: object,
    x_prime: object,
    *,
    epsilon: float,
    delta: float = 0.0,
    n: int = 100_000,
    alpha: float = 1e-6,
    secret: bytes = AUDIT_SECRET,
    label: str = "audit",
) -> AuditResult:
    """Audit the claim "``mechanism`` is (ε, δ)-DP" on the neighbours ``x``, ``x_prime``.

    Args:
      mechanism: ``mechanism(data, rng) -> output`` (float, int, hashable, or None for ⊥), drawing
        all its randomness from ``rng``.
      x, x_prime: neighbouring inputs (one person added or removed), passed as ``data``.
      epsilon, delta: the claimed guarantee; 0 ≤ ε < ∞, 0 ≤ δ < 1.
      n: draws per side (half for choosing the event, half for testing it); at least 1000.
      alpha: the false-alarm probability for a correct mechanism, in (0, 1).
      secret, label: where the draws come from; change ``label`` for independent samples.

    Returns the :class:`AuditResult`; the procedure is in the module docstring.
    """
    _check_args(n, epsilon, delta, alpha)
    outputs = [
        draw(mechanism, data, n, side=side, secret=secret, label=label)
        for data, side in zip((x, x_prime), _SIDES, strict=True)
    ]
    return audit_outputs(outputs[0], outputs[1], epsilon=epsilon, delta=delta, alpha=alpha)


def audit_outputs(
    outputs_x: Sequence[object],
    outputs_x_prime: Sequence[object],
    *,
    epsilon: float,
    delta: float = 0.0,
    alpha: float = 1e-6,
) -> AuditResult:
    """Steps 2 and 3 of :func:`audit` on outputs already drawn, e.g. with :func:`draw`.

    Lets one set of draws be audited against several claims (say a loose and a tight (ε, δ)).
    Both sides need the same number of draws n ≥ 1000, independent of one another.
    """
    n = len(outputs_x)
    if len(outputs_x_prime) != n:
        raise ValueError(
            f"both sides need the same number of draws, got {n} and {len(outputs_x_prime)}"
        )
    _check_args(n, epsilon, delta, alpha)
    outs = (outputs_x, outputs_x_prime)
    if any(isinstance(y, (float, np.floating)) and math.isnan(y) for side in outs for y in side):
        raise ValueError("the mechanism returned NaN; return None for ⊥ instead")
    half = n // 2
    train = (outs[0][:half], outs[1][:half])
    test = (outs[0][half:], outs[1][half:])

    cands = _candidates(train)
    hx, hxp = cands.hits
    forward, _, _ = _epsilon_lb(hx, hxp, half, delta=delta, alpha=alpha)  # x over x'
    backward, _, _ = _epsilon_lb(hxp, hx, half, delta=delta, alpha=alpha)  # x' over x
    scores = np.concatenate([forward, backward])
    best = int(np.argmax(scores))
    event = cands.events[best % len(cands.events)]
    larger: Side = "x" if best < len(cands.events) else "x'"

    m = n - half
    hits = (sum(y in event for y in test[0]), sum(y in event for y in test[1]))
    k_big, k_small = hits if larger == "x" else hits[::-1]
    eps_lb, p_lo, q_hi = _epsilon_lb(
        np.array([k_big]), np.array([k_small]), m, delta=delta, alpha=alpha
    )
    return AuditResult(
        epsilon_lb=float(eps_lb[0]),
        epsilon=float(epsilon),
        delta=float(delta),
        alpha=float(alpha),
        n=n,
        event=event,
        larger=larger,
        test_size=m,
        hits=hits,
        p_lo=float(p_lo[0]),
        q_hi=float(q_hi[0]),
        train_epsilon_lb=float(scores[best]),
    )


def assert_private(mechanism: Mechanism, x: object, x_prime: object, **claim: Any) -> AuditResult:
    """:func:`audit` (same keyword arguments), raising AssertionError with the report if it finds
    a violation."""
    result = audit(mechanism, x, x_prime, **claim)
    if not result.passed:
        raise AssertionError(f"the mechanism failed its privacy audit:\n{result}")
    return result


def assert_caught(mechanism: Mechanism, x: object, x_prime: object, **claim: Any) -> AuditResult:
    """:func:`audit` of a negative control (same keyword arguments), raising AssertionError if it
    is *not* caught."""
    result = audit(mechanism, x, x_prime, **claim)
    if result.passed:
        raise AssertionError(f"the audit missed a mechanism that violates its claim:\n{result}")
    return result
