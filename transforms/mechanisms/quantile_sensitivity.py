"""Local and smooth sensitivity of a quantile of per-person values, for add/remove-one-person.

The statistic. Each person contributes one value (the Beam side reduces a person's rows first),
clamped to public bounds [lo, hi]. For the sorted values x_1 ≤ … ≤ x_n, padded with x_j = lo for
j ≤ 0 and x_j = hi for j ≥ n + 1, the q-quantile is f(x) = x_{r(n)} with rank r(n) = ⌈q·n⌉
(0 < q < 1, exact rational). So q = 1/2 is the lower median, and f(∅) = x_0 = lo. The rank is
defined for every n, and r(n ± 1) − r(n) ∈ {0, ±1}.

Neighbours add or remove one value anywhere in [lo, hi]; the distance d(x, y) = |x Δ y| (multiset
symmetric difference). The seed (``smooth-sensitivity-nrs07.txt``) works with replace-one and a
fixed n; ``docs/local_sensitivity.md`` derives the add/remove versions used here:

* A gap (i, j), 0 ≤ i < j ≤ n + 1, is the pair of padded order statistics (x_i, x_j). With
  B = i values at or below it and T = n + 1 − j at or above, making (x_i, x_j) the local-sensitivity
  gap of a data set costs c(i, j) = (j − i − 1) + s(B, T) add/remove steps: remove the j − i − 1
  values strictly inside, then add values at lo or hi (or remove outer ones) until the gap sits at
  the quantile's rank. s(B, T) = ⌊D/M⌋ if D ≥ 0, else max(0, ⌈−D/M⌉ − 1), with
  D = (1 − q)B − qT and M = max(q, 1 − q).
* The local sensitivity at distance k is A⁽ᵏ⁾(x) = max{x_j − x_i : c(i, j) ≤ k}, and the β-smooth
  sensitivity is S(x) = max_{i<j} (x_j − x_i)·e^(−β·c(i, j)).

Both are brute-force checked against the definitions on every small data set
(``tests/mechanisms/test_smooth_sensitivity.py``).

Computation. :func:`log_smooth_sensitivity` works in log space (S can be e^(−2000)·(hi − lo)
and underflow). The median (q = 1/2) needs only O(n) pairs: its optimum lies on two anti-diagonals.
Other quantiles split into a part solved in closed form and a Monge part solved by the monotone
divide and conquer of Nissim–Raskhodnikova–Smith over a staircase (:mod:`.monge_search`); pairs
that provably cannot beat a computed lower bound are pruned first, so typical data only touch the
values near the quantile. Worst case O(n log² n) numpy work, O(n log n)
Python steps; :func:`log_smooth_sensitivity_naive` is the O(n²) formula kept as the test oracle.

Floating point. Gaps x_j − x_i and the exponents are floats; to keep the result a β-smooth upper
bound despite rounding, it is computed for β' = β − 2·ln(1 + η) and multiplied by 1 + η,
η = 2^−20. Terms below K = (hi − lo)·e^(−C), C = 2000, are not resolved: the result is
M = max(S*_{β'}, K) (:func:`_log_floor`), so only terms with β'·c ≤ 3C enter the search and the
accumulated error is ≲ 2^−39 ≪ η for every n. M is β'-smooth (the maximum of a β'-smooth function
and a constant) and M ≤ Ŝ ≤ (1 + η)²·M, so Ŝ ≥ S*_β ≥ LS and Ŝ(x) ≤ e^β·Ŝ(x') for neighbours.
The release floors S at 2^−20·(hi − lo) ≫ K, so K never changes a released value.

Integers. Costs are exact: q's numerator and denominator multiply counts in int64 only when the
denominator is small (:func:`exact_counts`), else as Python ints.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .monge_search import a2_search, log_gap

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

ROUNDING_MARGIN = 2.0**-20
"""η: the computed bound is (1 + η)·S for β' = β − 2·ln(1 + η) (module docstring)."""

LOG_TERM_FLOOR = 2000.0
"""C: terms below K = (hi − lo)·e^(−C) are replaced by K (:func:`_log_floor`)."""

_BETA_CAP = 2.0 * LOG_TERM_FLOOR  # β' > C already sends every term with c ≥ 1 below the floor
_INT64_DENOMINATOR = 2**20  # q = a/b with b ≤ this keeps a·x, b·x < 2^60 for counts x < 2^40


# --------------------------------------------------------------------------- inputs and the rank


def as_quantile(q: object) -> Fraction:
    """``q`` as an exact rational in (0, 1). Floats are read as their shortest decimal repr, so
    0.9 means 9/10 (not the binary float's 0.90000000000000002220…), as a user would expect."""
    if isinstance(q, bool) or not isinstance(q, (int, float, Fraction)):
        raise TypeError(f"q must be a number in (0, 1), got {type(q).__name__} {q!r}")
    if isinstance(q, float):
        if not math.isfinite(q):
            raise ValueError(f"q must be a number in (0, 1), got {q!r}")
        f = Fraction(repr(q))
    else:
        f = Fraction(q)
    if not 0 < f < 1:
        raise ValueError(f"q must lie strictly between 0 and 1, got {q!r}; the median is q = 1/2")
    return f


def quantile_rank(n: int, q: Fraction) -> int:
    """r(n) = ⌈q·n⌉: the padded order statistic x_{r(n)} is the q-quantile of n values."""
    return -((-q.numerator * n) // q.denominator)


class SpanError(ValueError):
    """Public bounds whose span upper − lower is not a finite float (or lower ≥ upper)."""

    def __init__(self, lower: object, upper: object) -> None:
        self.bounds = [lower, upper]
        super().__init__(
            f"need lower < upper with a finite span, got lower={lower!r}, upper={upper!r}"
        )


def check_bounds(lower: object, upper: object) -> tuple[float, float]:
    """Finite public bounds with lower < upper and a finite span, as floats."""
    out = []
    for name, v in (("lower", lower), ("upper", upper)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{name} must be a real number, got {type(v).__name__} {v!r}")
        f = float(v)
        if not math.isfinite(f):
            raise ValueError(f"{name} must be finite, got {v!r}; declare finite clamp bounds")
        out.append(f)
    lo, hi = out
    if not lo < hi or not math.isfinite(hi - lo):
        raise SpanError(lower, upper)
    return lo, hi


def check_beta(beta: object) -> float:
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real):
        raise TypeError(f"beta must be a real number, got {type(beta).__name__} {beta!r}")
    b = float(beta)
    if not (math.isfinite(b) and b > 4 * math.log1p(ROUNDING_MARGIN)):
        raise ValueError(
            f"beta must be finite and > 4·ln(1 + 2^-20) ≈ 3.8e-6, got {beta!r}; it comes from "
            "the noise's parameter rule (e.g. ε/(2(γ+1)) for Cauchy-type noise): raise the "
            "query's budget"
        )
    return b


def sorted_clamped(values: ArrayLike, lower: float, upper: float) -> FloatArray:
    """The per-person values as a sorted float64 array, clamped to [lower, upper].

    NaN is refused (the pipeline's validation step must drop or replace it); ±∞ is clamped. The
    message never shows a value: values are private.
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    if np.isnan(x).any():
        raise ValueError(
            "per-person values contain NaN; drop or replace them in validation before the "
            "quantile mechanism"
        )
    return np.sort(np.clip(x, lower, upper))


def padded(xs: FloatArray, lower: float, upper: float) -> FloatArray:
    """[lo, x_1, …, x_n, hi]: index j holds x_j for j = 0 … n + 1."""
    return np.concatenate(([lower], xs, [upper]))


def quantile_of_sorted(xs: FloatArray, q: Fraction, lower: float) -> float:
    """f(x) = x_{r(n)} for sorted clamped values (lo for the empty data set)."""
    r = quantile_rank(len(xs), q)
    return float(xs[r - 1]) if r >= 1 else lower


# --------------------------------------------------------------------------- the cost c(i, l)


def exact_counts(x: ArrayLike, q: Fraction) -> NDArray[Any]:
    """Integer counts ``x`` as an array on which + − * // with q's numerator and denominator are
    exact: int64 when the denominator is ≤ 2^20 (products < 2^20·2^40 for any count numpy can
    index), else an object array of Python ints. Floats are read as decimals (:func:`as_quantile`):
    q = 0.3333333333333333 is 3333333333333333/10^16, whose int64 products wrap silently from
    counts of about 900. The choice depends on the public q alone."""
    arr = np.asarray(x, dtype=np.int64)
    return arr if q.denominator <= _INT64_DENOMINATOR else arr.astype(object)


def shift_cost(B: IntArray, T: IntArray, q: Fraction) -> IntArray:
    """s(B, T): the fewest adds/removes of outer values that put a gap with B values at or below
    and T at or above at the q-quantile's rank (docs/local_sensitivity.md, §2). Exact integers.

    s = φ(⌊D/M⌋), φ(w) = max(w, −w − 1): for D < 0, max(0, ⌈−D/M⌉ − 1) = −⌊D/M⌋ − 1 ≥ 0."""
    a, b = q.numerator, q.denominator
    d = (b - a) * exact_counts(B, q) - a * exact_counts(T, q)  # D·b
    w = np.asarray(d // max(a, b - a), dtype=np.int64)  # ⌊D/M⌋, |w| ≤ B + T + 1
    return np.maximum(w, -w - 1)


def pair_cost(i: IntArray, j: IntArray, n: int, q: Fraction) -> IntArray:
    """c(i, j) = (j − i − 1) + s(i, n + 1 − j) for padded indices 0 ≤ i < j ≤ n + 1."""
    i = np.asarray(i, dtype=np.int64)
    j = np.asarray(j, dtype=np.int64)
    return (j - i - 1) + shift_cost(i, n + 1 - j, q)


# ------------------------------------------------------------------------- oriented coordinates


def _oriented(xp: FloatArray, q: Fraction) -> tuple[FloatArray, IntArray]:
    """(padded values, g) such that c(i, l) = n − i − T + φ(g(i) − T), T = n + 1 − l,
    φ(w) = max(w, −w − 1) (docs §3). For q ≥ 1/2, g(B) = ⌊(1−q)B/q⌋ on the data as given; for
    q < 1/2 the data are mirrored (x ↦ −x, reversed) and g(B) = ⌈qB/(1−q)⌉ − 1. Either way g is
    nondecreasing, rises by 0 or 1 per step, and g(0) ∈ {0, −1}."""
    a, b = q.numerator, q.denominator
    B = exact_counts(np.arange(len(xp)), q)
    if 2 * a >= b:
        return xp, np.asarray(((b - a) * B) // a, dtype=np.int64)
    return -xp[::-1], np.asarray(-((-a * B) // (b - a)) - 1, dtype=np.int64)


def _log_floor(xp: FloatArray) -> float:
    """ln K, K = (hi − lo)·e^(−C): the value every unresolved term is replaced by.

    Why this keeps an upper bound. A term with β'·c > C is (x_j − x_i)·e^(−β'·c) < (hi − lo)·e^(−C)
    = K, so max(S*_{β'}, K) = max(terms with β'·c ≤ C, K) ≥ S*_{β'}: dropping those terms alone
    would *lower* S (e.g. n equal values, whose only non-zero gaps cost ~n/2), so K stands in for
    them. K is public (bounds and C only), and max(S*_{β'}, K) is β'-smooth. The release floors S
    at 2^−20·(hi − lo) > K, so outputs are those of the exact S*_{β'}. Precision, for every n: no
    exponent above ~3C reaches the Monge search (:func:`_raw_fast`), and a term evaluated on its
    own with a larger β'·c comes out below ln K however it rounds; so every term that can win errs
    by ≲ 2^−39 ≪ η, and no data size needs to be refused (β'·(2n + 2) ≤ 2^30 used to be checked:
    one person more could turn a release into an error).
    """
    return math.log(float(xp[-1] - xp[0])) - LOG_TERM_FLOOR


# ------------------------------------------------------------------------------- the naive oracle


def _raw_naive(xp: FloatArray, q: Fraction, beta: float) -> float:
    n = len(xp) - 2
    i, j = np.triu_indices(n + 2, k=1)
    return float(np.max(log_gap(xp, i, j) - beta * pair_cost(i, j, n, q)))


def log_smooth_sensitivity_naive(
    values: ArrayLike, *, q: object, lower: float, upper: float, beta: float
) -> float:
    """The same bound as :func:`log_smooth_sensitivity`, by the O(n²) formula over all gaps."""
    qf, (lo, hi), b = as_quantile(q), check_bounds(lower, upper), check_beta(beta)
    xp = padded(sorted_clamped(values, lo, hi), lo, hi)
    floor = _log_floor(xp)
    return max(_raw_naive(xp, qf, _inner_beta(b)), floor) + math.log1p(ROUNDING_MARGIN)


def _inner_beta(beta: float) -> float:
    """β' = β − 2·ln(1 + η), capped at 2C: beyond C every term with c ≥ 1 is below K already, so
    max(S*_{β'}, K) is unchanged, and the cap keeps β'·c finite (no overflow warning) for any n."""
    return min(beta - 2.0 * math.log1p(ROUNDING_MARGIN), _BETA_CAP)


# ------------------------------------------------------------------------------- the fast version


def _raw_median(xp: FloatArray, beta: float) -> float:
    """q = 1/2: c(i, l) = max(l − i − 1, 2l − n − 2, n − 2i − 1). For fixed l the cost is flat in
    i once 2l − n − 2 dominates, so the best i there is the smallest with i + l ≥ n + 1; likewise
    for fixed i. Hence the optimum lies on i + l ∈ {n, n + 1}, where c = l − i − 1 (docs §4)."""
    n = len(xp) - 2
    best = -math.inf
    for s in (n, n + 1):
        i = np.arange(0, (s + 1) // 2, dtype=np.int64)  # i < l = s − i
        i = i[s - i <= n + 1]
        if len(i):
            best = max(best, float(np.max(log_gap(xp, i, s - i) - beta * (s - 2 * i - 1))))
    return best


def _raw_fast(
    xp: FloatArray, q: Fraction, beta: float, *, prune: bool = True, floor: float = -math.inf
) -> float:
    """ln S for β (no margins), exact wherever it is ≥ ``floor``: the Monge search skips rows and
    columns that cannot beat max(candidates, floor) — with floor = ln K only pairs with β·c < 3C
    remain (a kept row has n − C/β < i + g(i), a kept column j + g(j − 1) < n + 1 + C/β, so
    j − i − 1 < 2C/β). ``prune=False`` skips the pruning (for tests of the search)."""
    if q == Fraction(1, 2):
        return _raw_median(xp, beta)
    xo, g = _oriented(xp, q)
    n = len(xp) - 2
    rows = np.arange(n + 1, dtype=np.int64)
    gr = g[: n + 1]
    h = rows - gr  # i − g(i), nondecreasing
    # (A1) pairs below the staircase cost K(i) = n − 1 − i − g(i), flat in l: take l = n − g(i).
    l1 = n - gr
    ok = l1 > rows
    best = -math.inf
    if ok.any():
        best = float(np.max(log_gap(xo, rows[ok], l1[ok]) - beta * (n - 1 - rows[ok] - gr[ok])))
    # (A2) pairs with l ≥ λ(i) = max(n + 1 − g(i), i + 1) cost U(i, l) = 2l − n − 2 − h(i).
    lam = np.maximum(n + 1 - gr, rows + 1)
    has = lam <= n + 1
    if has.any():
        r, lr = rows[has], lam[has]
        best = max(best, float(np.max(log_gap(xo, r, lr) - beta * (2 * lr - n - 2 - h[r]))))
        bound = max(best, floor) if prune else -math.inf
        best = max(best, a2_search(xo, n, h, lam, beta=beta, floor=bound))
    return best


def log_smooth_sensitivity(
    values: ArrayLike, *, q: object, lower: float, upper: float, beta: float
) -> float:
    """ln Ŝ(x): a β-smooth upper bound on the local sensitivity of the q-quantile (module
    docstring) for add/remove one person, within a factor (1 + 2^−20)² of the smallest one.

    Args:
      values: the per-person values (any order; clamped to [lower, upper] here).
      q: the quantile in (0, 1), exact (1/2 for the median; floats read as decimals).
      lower, upper: the public clamp bounds.
      beta: the smoothness the noise rule needs, e.g. ε/(2(γ+1)).

    Returns a float that may be far below −745 (S underflows as a float, not in log space), but
    never below ln(hi − lo) − 2000 + ln(1 + η): smaller terms are replaced by that public
    constant (:func:`_log_floor`), which keeps an upper bound and lets any data size through.
    Proof: docs/local_sensitivity.md §§2–5; the bound's smoothness follows from NRS07's lemma
    (seed ``smooth-sensitivity-nrs07.txt``: S* = max_y LS(y)·e^(−β·d(x,y)) is β-smooth for any
    metric whose neighbours are at distance 1).
    """
    qf, (lo, hi), b = as_quantile(q), check_bounds(lower, upper), check_beta(beta)
    xp = padded(sorted_clamped(values, lo, hi), lo, hi)
    floor = _log_floor(xp)
    return max(_raw_fast(xp, qf, _inner_beta(b), floor=floor), floor) + math.log1p(ROUNDING_MARGIN)


# --------------------------------------------------------------------- local sensitivity and PTR


def local_sensitivity(values: ArrayLike, *, q: object, lower: float, upper: float) -> float:
    """LS(x) = max over neighbours |f(x) − f(y)|: the largest gap with c(i, l) = 0. Not private;
    used by tests and as the negative control "noise scaled by raw local sensitivity"."""
    qf, (lo, hi) = as_quantile(q), check_bounds(lower, upper)
    xp = padded(sorted_clamped(values, lo, hi), lo, hi)
    n = len(xp) - 2
    i = np.arange(n + 1, dtype=np.int64)
    zero = pair_cost(i, i + 1, n, qf) == 0
    return float(np.max(xp[i[zero] + 1] - xp[i[zero]]))


def _first_reaching(xp: FloatArray, i: IntArray, bound: float) -> IntArray:
    """For each i, the smallest l with fl(x_l − x_i) ≥ bound (n + 2 if none)."""
    base = xp[i]
    with np.errstate(over="ignore"):
        v = base + bound
    with np.errstate(over="ignore", invalid="ignore"):  # nextafter(max float) is inf: handled
        for _ in range(4):  # step down while the predecessor still qualifies
            down = np.nextafter(v, -np.inf)
            v = np.where(np.isfinite(v) & (down - base >= bound), down, v)
        for _ in range(4):  # step up until v qualifies
            v = np.where(v - base >= bound, v, np.nextafter(v, np.inf))
    return np.searchsorted(xp, v, side="left").astype(np.int64)


def distance_to_sensitivity(
    values: ArrayLike, *, q: object, lower: float, upper: float, bound: float
) -> int | None:
    """D(x, b) = the fewest add/remove steps to a data set whose local sensitivity of the
    q-quantile reaches b (computed gaps fl(x_l − x_i) ≥ b), or None if none does (b > hi − lo).

    D = min{c(i, l) : fl(x_l − x_i) ≥ b}: for each i the smallest such l is best, since c is
    nondecreasing in l. D changes by at most 1 between neighbours (a distance to a set), and
    D ≥ 1 implies LS(x) < b exactly (a float gap rounds up to ≥ b whenever the exact one is ≥ b).
    Not private; the input of propose-test-release (docs/local_sensitivity.md §6).
    """
    qf, (lo, hi) = as_quantile(q), check_bounds(lower, upper)
    b = float(bound)
    if not (math.isfinite(b) and b > 0):
        raise ValueError(f"bound must be finite and > 0, got {bound!r}")
    xp = padded(sorted_clamped(values, lo, hi), lo, hi)
    n = len(xp) - 2
    i = np.arange(n + 1, dtype=np.int64)
    j = _first_reaching(xp, i, b)
    ok = j <= n + 1
    if not ok.any():
        return None
    return int(pair_cost(i[ok], j[ok], n, qf).min())
