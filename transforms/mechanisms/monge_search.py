"""The Monge part of the quantile's smooth sensitivity: row maxima over a staircase.

For quantiles other than the median, :mod:`.quantile_sensitivity` reduces the smooth sensitivity to
a closed-form part and the maximum of F(i, j) = ln(x_j − x_i) − β·(2j − n − 2 − h(i)) over pairs
with j ≥ λ(i) (``docs/local_sensitivity.md`` §5). F is Monge (the log-gap by Nissim,
Raskhodnikova and Smith's argument, the cost being a function of j minus one of i), so on a
rectangle of pairs the rows' largest argmaxima are nondecreasing and the divide and conquer on rows
finds every row maximum with O((rows + columns)·log rows) evaluations. The feasible region is a
staircase, covered here by rectangles whose columns are disjoint at each level of the
decomposition. Everything is numpy, batched per level. Pure arithmetic: no data leaves.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

_CHUNK = 1 << 21  # elements evaluated per numpy batch in the divide and conquer
_PRUNE_TOL = 1e-9  # log-space slack when discarding rows/columns that cannot beat the bound


def log_gap(xp: FloatArray, i: IntArray, j: IntArray) -> FloatArray:
    """ln(x_j − x_i) elementwise; ln 0 = −inf (a zero gap never wins)."""
    gap = xp[j] - xp[i]
    with np.errstate(divide="ignore"):
        out: FloatArray = np.log(gap)
    return out


def a2_search(
    xo: FloatArray, n: int, h: IntArray, lam: IntArray, *, beta: float, floor: float
) -> float:
    """max over the pairs i < j ≤ n + 1 with j ≥ λ(i) of ln(x_j − x_i) − β·U(i, j),
    U(i, j) = 2j − n − 2 − h(i), given a value ``floor`` already attained (−inf: no pruning).

    Args:
      xo: padded sorted values (oriented: mirrored for q < 1/2), length n + 2.
      h: h(i) = i − g(i) for rows 0 … n (nondecreasing); lam: λ(i) for rows 0 … n.

    Rows and columns that cannot beat ``floor`` are dropped (a row's best is at most
    ln(hi − x_i) − β·U(i, λ(i)); a column's at most ln(x_j − lo) − β·(2j − n − 2 − h(j − 1))),
    as are rows that are not the last of a run of ties and columns not the first (a tie partner
    has the same gaps at no more cost, or is the closed-form candidate). The rest is Monge.
    """
    rows = np.arange(n + 1, dtype=np.int64)
    cols = np.arange(1, n + 2, dtype=np.int64)
    lo_v, hi_v = xo[0], xo[n + 1]
    with np.errstate(divide="ignore"):
        row_ub = np.log(hi_v - xo[rows]) - beta * (2 * lam - n - 2 - h)
        col_ub = np.log(xo[cols] - lo_v) - beta * (2 * cols - n - 2 - h[cols - 1])
    keep_r = (lam <= n + 1) & (xo[rows + 1] > xo[rows]) & (row_ub > floor - _PRUNE_TOL)
    keep_c = (xo[cols - 1] < xo[cols]) & (col_ub > floor - _PRUNE_TOL)
    R, C = rows[keep_r], cols[keep_c]
    if len(R) == 0 or len(C) == 0:
        return -math.inf
    lampos = np.searchsorted(C, lam[R], side="left").astype(np.int64)
    # Rows with λ(i) = n + 1 − g(i) > i + 1 form a staircase (λ nonincreasing); the others
    # (λ = i + 1, nondecreasing) are one monotone problem.
    stair = lam[R] > R + 1
    n_stair = int(np.count_nonzero(stair))  # a prefix of R: n + 1 − g(i) − i − 1 is decreasing
    segs = _staircase_rectangles(lampos[:n_stair], len(C))
    if n_stair < len(R):
        segs.append((n_stair, len(R) - 1, 0, len(C) - 1))
    if not segs:
        return -math.inf

    def evaluate(ri: IntArray, ci: IntArray) -> FloatArray:
        i, j = R[ri], C[ci]
        out: FloatArray = log_gap(xo, i, j) - beta * (2 * j - n - 2 - h[i])
        return out

    return _monotone_max(evaluate, lampos, np.array(segs, dtype=np.int64))


def _staircase_rectangles(lampos: IntArray, ncols: int) -> list[tuple[int, int, int, int]]:
    """Cover rows 0..P−1 with column ranges [lampos[p], ncols − 1] (lampos nonincreasing) by
    rectangles (rows [m, r2] × columns [lampos[m], c_hi]), each row's range split among
    O(log P) of them, every decomposition level using disjoint columns (docs §5)."""
    out: list[tuple[int, int, int, int]] = []
    stack = [(0, len(lampos) - 1, ncols - 1)]
    while stack:
        r1, r2, ch = stack.pop()
        if r1 > r2 or ch < 0:
            continue
        m = (r1 + r2) // 2
        cl = int(lampos[m])
        if cl <= ch:
            out.append((m, r2, cl, ch))
            stack.append((r1, m - 1, ch))
            stack.append((m + 1, r2, cl - 1))
        else:  # rows above m start even later: nothing for them; rows below keep [.., ch]
            stack.append((m + 1, r2, ch))
    return out


def _monotone_max(
    evaluate: Callable[[IntArray, IntArray], FloatArray], lampos: IntArray, segs: IntArray
) -> float:
    """Max of a Monge matrix over segments (row range, column range), all levels batched.

    Each segment is solved by the divide and conquer on rows: the middle row's largest argmax
    splits the columns for the rows above and below it. A row's own start ``lampos`` also bounds
    its range (nondecreasing within a segment, so an empty middle row empties the rows after it).
    All segments of one level are evaluated in a few numpy calls, in chunks of ≤ 2^21 elements.
    """
    best = -math.inf
    while len(segs):
        rlo, rhi, clo, chi = segs.T
        mid = (rlo + rhi) // 2
        start = np.maximum(clo, lampos[mid])
        length = chi - start + 1
        empty = length <= 0
        children = [np.stack([rlo, mid - 1, clo, chi], axis=1)[empty & (rlo <= mid - 1)]]
        ne = np.flatnonzero(~empty)
        pos = 0
        while pos < len(ne):
            cum = np.cumsum(length[ne[pos:]])
            stop = pos + max(1, int(np.searchsorted(cum, _CHUNK, side="right")))
            idx = ne[pos:stop]
            pos = stop
            lens = length[idx]
            offsets = np.concatenate(([0], np.cumsum(lens)[:-1]))
            seg_of = np.repeat(np.arange(len(idx)), lens)
            flat = np.arange(int(lens.sum()), dtype=np.int64)
            colpos = flat - offsets[seg_of] + start[idx][seg_of]
            vals = evaluate(mid[idx][seg_of], colpos)
            segmax = np.maximum.reduceat(vals, offsets)
            best = max(best, float(segmax.max()))
            arg = np.maximum.reduceat(np.where(vals == segmax[seg_of], colpos, -1), offsets)
            m = mid[idx]
            left = np.stack([rlo[idx], m - 1, clo[idx], arg], axis=1)
            right = np.stack([m + 1, rhi[idx], arg, chi[idx]], axis=1)
            children.append(left[rlo[idx] <= m - 1])
            children.append(right[m + 1 <= rhi[idx]])
        segs = np.concatenate(children) if children else np.empty((0, 4), dtype=np.int64)
    return best
