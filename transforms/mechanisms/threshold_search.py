"""The smallest integer threshold T at which a monotone condition holds (false … false, true …).

Every threshold of the core is found this way: partition selection within a known bracket
(:func:`smallest_passing`), the PTR tests from T = 1 upwards (:func:`first_threshold`). Both
return a T at which the condition — the privacy condition — holds, whatever rounding does.
"""

from __future__ import annotations

from collections.abc import Callable


def smallest_passing(ok: Callable[[int], bool], lo: int, hi: int) -> int:
    """The least T in [lo, hi] with ok(T), for ok monotone (False … False True … True)."""
    if not ok(hi):
        raise RuntimeError(f"internal error: threshold search bracket [{lo}, {hi}] holds no T")
    if ok(lo):
        return lo
    while hi - lo > 1:  # invariant: not ok(lo), ok(hi)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def first_threshold(holds: Callable[[int], bool]) -> int:
    """The smallest integer T ≥ 1 with ``holds(T)``: doubling steps to a bracket, then
    :func:`smallest_passing`. O(log T) calls, where a scan took T ≈ ln(1/δ)/ε of them (seconds
    of planning at ε = 10^−4, minutes at 10^−6)."""
    low, high = 1, 1
    while not holds(high):
        low, high = high, 2 * high
    return smallest_passing(holds, low, high)
