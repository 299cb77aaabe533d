"""Which order statistics a smooth-sensitivity quantile release reads: a window around the rank.

:class:`~.smooth_sensitivity.SmoothQuantile` releases x_{⌈qn⌉} with noise scaled by
Ŝ = max(S, F), F = 2^−20·(hi − lo) (:func:`~.smooth_sensitivity.release_with_log_scale`), where S
is the maximum over gaps (i, j) of (x_j − x_i)·e^(−β'·c(i, j)) (:mod:`.quantile_sensitivity`). A
gap that costs more than K add/remove steps, with β'·(K + 1) ≥ 21·ln 2, contributes at most
(hi − lo)·2^−21·(1 + 2^−20) < F (the last factor the bound's rounding margin): it can never
raise Ŝ. So the release reads only the gaps of cost ≤ K, and
those lie in a window of ranks around ⌈qn⌉ whose width follows β alone, not n.

The release is run on the window itself, with no new formula: dropping m·a of the smallest and
m·(b − a) of the largest values (q = a/b in lowest terms) leaves every cost unchanged —
c(i, j) = (j − i − 1) + s(B, T) with D = (1 − q)·B − q·T, and B → B − m·a, T → T − m·(b − a)
keeps D (and j − i) — and keeps the quantile, ⌈q(n − m·b)⌉ = ⌈qn⌉ − m·a. The kept values' gaps
of cost ≤ K are exactly the data's; every other gap of the kept values costs more than K (the
kept padding lo, hi stands at a dropped index), so its term is below F too. Hence
``mechanism.release(kept values, rng)`` is the release of all the values, bit for bit, for the
same rng: the guarantee is the mechanism's, unchanged. Derivation: docs/local_sensitivity.md §4;
checked against the release on all values in ``tests/mechanisms/test_quantile_window.py``.

Which gaps cost ≤ K. With j = i + 1 + g and B = i, T = n + 1 − j, D = i − qn + q·g, and
c = g + s ≤ K needs s ≤ K − g, i.e. −(K − g + 1)·M ≤ D < (K − g + 1)·M, M = max(q, 1 − q). So
i ≥ qn − (K + 1)·M + g·(M − q) ≥ qn − (K + 1)·M, and
j = i + 1 + g < qn + (K + 1)·M + 1 − g·(M − (1 − q)) ≤ qn + (K + 1)·M + 1 (M ≥ q, 1 − q):
every gap of cost ≤ K has ⌈qn − (K + 1)·M⌉ ≤ i < j ≤ ⌈qn + (K + 1)·M⌉ (padded indices, exact
rationals). The window keeps at most (K + 1)·M / min(q, 1 − q) + b values (:func:`window_bound`):
K + 3 for the median, whatever n.

Everything here is public: n is not (the Beam side computes the window from the exact count,
and only the mechanism's noisy output leaves); K, q and the bounds are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .quantile_sensitivity import _inner_beta, as_quantile, check_beta

SEARCH_BUCKETS = 1 << 16
SEARCH_LEVELS = 3
"""How the Beam side finds the window (``transforms/rank_window.py``): histograms of this many
buckets, refined this many times (a bucket of the last level spans (hi − lo)·2^−48). Public
constants, here so that planning states them without importing Beam."""

FLOOR_MARGIN_BITS = 21
"""K is the largest cost a term can have and still reach F = 2^−20·(hi − lo): one bit below F
covers the (1 + 2^−20) rounding margin and the float rounding of the terms with room to spare."""


def cost_reach(beta: float) -> int:
    """K: the largest gap cost whose term (x_j − x_i)·e^(−β'·c) can reach the release's floor F;
    every gap with c ≥ K + 1 has β'·c ≥ 21·ln 2 (β' the margin-reduced β the bound is computed
    with, :func:`~.quantile_sensitivity._inner_beta`)."""
    inner = _inner_beta(check_beta(beta))
    nats = FLOOR_MARGIN_BITS * math.log(2.0)
    steps = max(1, math.ceil(nats / inner))  # K + 1, checked in floats below
    while steps * inner < nats:
        steps += 1
    return steps - 1


@dataclass(frozen=True)
class QuantileWindow:
    """The sorted values a release reads: ranks ``first`` … ``last`` (1-based) of n.

    ``drop_below`` = m·a of the smallest and ``drop_above`` = m·(b − a) of the largest values are
    dropped (module docstring); m = 0 keeps everything (small n, or a β so small that the
    window covers the data)."""

    n: int
    drop_below: int
    drop_above: int

    @classmethod
    def for_release(cls, n: int, q: object, beta: float) -> QuantileWindow:
        """The narrowest window of the module docstring for n values, quantile q, smoothness β."""
        return cls.for_reach(n, q, cost_reach(beta))

    @classmethod
    def for_reach(cls, n: int, q: object, reach: int) -> QuantileWindow:
        """The narrowest window that holds every gap of cost ≤ ``reach`` of n values exactly (and
        whose other gaps cost more): the smooth release's K, or PTR's capped distance
        (:func:`~.ptr.distance_cap`) less one."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be a count (an int ≥ 0), got {n!r}")
        k = _check_reach(reach)
        qf = as_quantile(q)
        a, b = qf.numerator, qf.denominator
        m_half = max(qf, 1 - qf)
        i_low = math.ceil(qf * n - (k + 1) * m_half)  # every gap of cost ≤ K has i ≥ i_low
        j_high = math.ceil(qf * n + (k + 1) * m_half)  # … and j ≤ j_high
        # the kept padding (indices m·a and n + 1 − m·(b − a)) must lie outside every such gap
        m = min((i_low - 1) // a, (n - j_high) // (b - a)) if n else 0
        m = max(m, 0)
        return cls(n, m * a, m * (b - a))

    @property
    def first(self) -> int:
        return self.drop_below + 1

    @property
    def last(self) -> int:
        return self.n - self.drop_above

    @property
    def size(self) -> int:
        return self.last - self.first + 1


def window_bound(q: object, beta: float) -> int:
    """An upper bound on ``QuantileWindow.for_release(n, q, beta).size`` for every n (public: for
    the plan's memory line); :func:`window_bound_for_reach` with K = :func:`cost_reach` (β)."""
    return window_bound_for_reach(q, cost_reach(beta))


def window_bound_for_reach(q: object, reach: int) -> int:
    """An upper bound on ``QuantileWindow.for_reach(n, q, reach).size`` for every n. The size is
    n − m·b = max(n − b·X, n − b·Y) for the two limits X, Y of m; with i_low ≥ qn − (K + 1)M and
    n − j_high > (1 − q)n − (K + 1)M − 1 each is at most (K + 1)·M / q + b, resp.
    (K + 1)·M / (1 − q) + b."""
    qf = as_quantile(q)
    k = _check_reach(reach)
    m_half = max(qf, 1 - qf)
    return math.ceil((k + 1) * m_half / min(qf, 1 - qf)) + qf.denominator


def _check_reach(reach: object) -> int:
    if isinstance(reach, bool) or not isinstance(reach, int) or reach < 0:
        raise ValueError(f"reach must be a gap cost (an int ≥ 0), got {reach!r}")
    return reach
