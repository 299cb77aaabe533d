"""The exact LP bound of the distinct-count down values, by a concave envelope. No noise here.

LP(x, j) = max Σ_v w_v z_v s.t. z_v ≤ u_p for every holder p of v, Σ_p u_p ≤ j, 0 ≤ u, z ≤ 1 (v
ranges over classes of values with the same holders, w_v = how many). With F(S) = Σ{w_v : every
holder of v is in S}, LP(x, j) is the upper concave envelope, at j, of the points (|S|, F(S)) over
all sets S of persons (derivation: ``docs/shifted_inverse.md`` §4). The Eisner–Severance search
finds the envelope's points on [0, count − 1]: for a chord of slope λ = a/b between two known
points, max_S b·F(S) − a·|S| is a maximum closure, i.e. a minimum s–t cut. Everything is integer
arithmetic, so :func:`lp_values` returns the exact rationals LP(x, j) and :func:`distinct_lp_floors`
their exact floors, for every input (of matching lengths): nothing here can fail on data, so
whether a release happens never depends on the data.

Max flows use scipy's Dinic (int32 capacities) when every capacity and the flow value fit in int32,
and a pure-Python Dinic on Python integers otherwise — or when scipy's answer does not verify as a
maximum flow with a matching cut (never observed; a guard, not a path the data can steer to a
different output). Both give the same smallest minimum cut (the set reachable from the source in
the residual graph of any maximum flow), so which one ran is not observable in the result.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from fractions import Fraction
from math import gcd

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import sparse
from scipy.sparse.csgraph import breadth_first_order, maximum_flow

_INT32_MAX = 2**31 - 1  # scipy's max flow takes int32 capacities; larger ones go to Python
_SOURCE, _SINK = 0, 1

Classes = tuple[int, int, NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]


def _dense_codes(keys: ArrayLike) -> tuple[NDArray[np.int64], int]:
    uniq, codes = np.unique(np.asarray(keys), return_inverse=True)
    return codes.astype(np.int64).reshape(-1), len(uniq)


def holder_classes(values: ArrayLike, persons: ArrayLike) -> Classes:
    """(distinct values D, persons P, class weights w, class of each incidence, person of each
    incidence): values with the same set of holders merged into one class of weight = how many.
    (Merging leaves LP unchanged: average any solution over a class — docs §4.)"""
    vcode, _ = _dense_codes(values)
    pcode, n_persons = _dense_codes(persons)
    if len(vcode) != len(pcode):
        raise ValueError("values and persons must have the same length")
    if len(vcode) == 0:
        return 0, n_persons, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    pairs = np.unique(np.stack([vcode, pcode], axis=1), axis=0)  # sorted by value, then person
    starts = np.flatnonzero(np.r_[True, pairs[1:, 0] != pairs[:-1, 0]])
    holders = np.split(pairs[:, 1], starts[1:])
    classes: dict[bytes, int] = {}
    weights: list[int] = []
    members: list[NDArray[np.int64]] = []
    for h in holders:
        key = h.tobytes()
        if key in classes:
            weights[classes[key]] += 1
        else:
            classes[key] = len(weights)
            weights.append(1)
            members.append(h)
    inc_class = np.repeat(np.arange(len(members)), [len(m) for m in members])
    inc_person = np.concatenate(members) if members else np.zeros(0, dtype=np.int64)
    return len(holders), n_persons, np.asarray(weights, np.int64), inc_class, inc_person


class _Closure:
    """max_S b·F(S) − a·|S| for one holder structure, by a minimum cut.

    Network: source → shared class c (capacity b·w_c), c → each holder (b·w_c: as good as infinite,
    a class's inflow being at most b·w_c), source → person p (b·(weight of p's private classes)),
    person → sink (a). Nodes: 0 source, 1 sink, 2 … P + 1 persons, then the shared classes. The
    source side of the cut found by residual reachability gives the persons of the smallest
    maximiser S.
    """

    def __init__(
        self,
        n_persons: int,
        weights: NDArray[np.int64],
        inc_class: NDArray[np.int64],
        inc_person: NDArray[np.int64],
    ) -> None:
        size = np.bincount(inc_class, minlength=len(weights))
        alone = size[inc_class] == 1
        private = np.zeros(n_persons, dtype=np.int64)
        np.add.at(private, inc_person[alone], weights[inc_class[alone]])
        shared = np.flatnonzero(size >= 2)
        renum = np.full(len(weights), -1, dtype=np.int64)
        renum[shared] = np.arange(len(shared))
        self.sh_class, self.sh_person = renum[inc_class[~alone]], inc_person[~alone]
        self.sh_size, self.sh_weight = size[shared], weights[shared]
        self.private, self.n_persons = private, n_persons
        self.total = int(weights.sum())
        self.n_nodes = 2 + n_persons + len(shared)
        givers = np.flatnonzero(private > 0)
        self.rows = np.r_[
            np.zeros(len(givers) + len(shared), np.int64),
            2 + n_persons + self.sh_class,
            2 + np.arange(n_persons),
        ]
        self.cols = np.r_[
            2 + givers,
            2 + n_persons + np.arange(len(shared)),
            2 + self.sh_person,
            np.full(n_persons, _SINK),
        ]
        self.base = np.r_[private[givers], self.sh_weight, self.sh_weight[self.sh_class]]
        self.n_to_sink = n_persons
        self.widest = int(self.base.max()) if len(self.base) else 0

    def value(self, chosen: NDArray[np.bool_]) -> int:
        """F(S) for the persons ``chosen``: private weights plus classes held only inside S."""
        inside = np.bincount(
            self.sh_class, weights=chosen[self.sh_person], minlength=len(self.sh_size)
        )
        complete = inside.astype(np.int64) == self.sh_size
        return int(self.private[chosen].sum()) + int(self.sh_weight[complete].sum())

    def capacities(self, a: int, b: int) -> list[int]:
        return [b * int(c) for c in self.base.tolist()] + [a] * self.n_to_sink

    def maximiser(self, a: int, b: int) -> NDArray[np.bool_]:
        """The smallest S maximising b·F(S) − a·|S| (a, b ≥ 0 integers, b > 0)."""
        widest = max(b * self.widest, a)
        fits = max(widest, min(b * self.total, a * self.n_persons)) <= _INT32_MAX  # and the flow
        side = self._side_scipy(a, b) if fits else None
        if side is None:
            side = self._side_python(a, b)
        return side[2 : 2 + self.n_persons]

    def _side_scipy(self, a: int, b: int) -> NDArray[np.bool_] | None:
        """Source side by scipy's Dinic, or None if its flow does not verify: capacities respected,
        antisymmetric, conserved, and a cut of equal capacity (max-flow = min-cut certificate)."""
        n, rows, cols = self.n_nodes, self.rows, self.cols
        cap = np.asarray(self.capacities(a, b), dtype=np.int64)  # ≤ int32 max: checked above
        graph = sparse.csr_array((cap.astype(np.int32), (rows, cols)), shape=(n, n))
        result = maximum_flow(graph, _SOURCE, _SINK)
        flow = sparse.csr_array(result.flow, dtype=np.int64)
        residual = sparse.csr_array(graph, dtype=np.int64) - flow
        net = np.asarray(flow.sum(axis=1)).reshape(-1)
        valid = (
            (flow + flow.T).count_nonzero() == 0
            and (len(residual.data) == 0 or int(residual.data.min()) >= 0)
            and not np.any(net[2:])
            and int(net[_SOURCE]) == int(result.flow_value)
        )
        if not valid:
            return None
        residual.data = (residual.data > 0).astype(np.int64)
        residual.eliminate_zeros()
        reached = breadth_first_order(residual, _SOURCE, directed=True, return_predecessors=False)
        side = np.zeros(n, dtype=bool)
        side[reached] = True
        cut = int(cap[side[rows] & ~side[cols]].sum())
        return None if side[_SINK] or cut != int(result.flow_value) else side

    def _side_python(self, a: int, b: int) -> NDArray[np.bool_]:
        """Source side of a minimum cut by Dinic's algorithm on Python integers (any size)."""
        n = self.n_nodes
        head: list[list[int]] = [[] for _ in range(n)]
        to: list[int] = []
        cap: list[int] = []
        for u, v, c in zip(
            self.rows.tolist(), self.cols.tolist(), self.capacities(a, b), strict=True
        ):
            head[u].append(len(to))
            to.append(v)
            cap.append(c)
            head[v].append(len(to))  # the reverse edge of e is e ^ 1
            to.append(u)
            cap.append(0)
        while True:
            level = _levels(head, to, cap, n)
            if level[_SINK] < 0:  # no augmenting path: the reachable nodes are the source side
                return np.asarray([lv >= 0 for lv in level], dtype=bool)
            nxt = [0] * n  # current arc of each node
            while _augment(head, to, cap, level, nxt):
                pass


def _levels(head: list[list[int]], to: list[int], cap: list[int], n: int) -> list[int]:
    level = [-1] * n
    level[_SOURCE] = 0
    queue = deque([_SOURCE])
    while queue:
        u = queue.popleft()
        for e in head[u]:
            if cap[e] > 0 and level[to[e]] < 0:
                level[to[e]] = level[u] + 1
                queue.append(to[e])
    return level


def _augment(
    head: list[list[int]], to: list[int], cap: list[int], level: list[int], nxt: list[int]
) -> bool:
    """Push flow along one source–sink path of the level graph (iterative, current arcs)."""
    path: list[int] = []
    u = _SOURCE
    while u != _SINK:
        arcs = head[u]
        while nxt[u] < len(arcs):
            e = arcs[nxt[u]]
            if cap[e] > 0 and level[to[e]] == level[u] + 1:
                break
            nxt[u] += 1
        else:  # dead end: retreat
            if u == _SOURCE:
                return False
            e = path.pop()
            u = to[e ^ 1]
            nxt[u] += 1
            continue
        path.append(e)
        u = to[e]
    push = min(cap[e] for e in path)
    for e in path:
        cap[e] -= push
        cap[e ^ 1] += push
    return True


def envelope_points(
    n_persons: int,
    weights: NDArray[np.int64],
    inc_class: NDArray[np.int64],
    inc_person: NDArray[np.int64],
    count: int,
) -> dict[int, int]:
    """Points (k, F) of the upper concave envelope of {(|S|, F(S))}, enough that every integer
    j < ``count`` is a point or lies on the edge between two consecutive ones (Eisner–Severance)."""
    closure = _Closure(n_persons, weights, inc_class, inc_person)
    points = {0: 0, n_persons: closure.total}
    todo = [(0, 0, n_persons, closure.total)]
    while todo:
        k1, f1, k2, f2 = todo.pop()
        if k1 + 1 >= min(k2, count):
            continue  # no j < count strictly inside: nothing to refine
        g = gcd(f2 - f1, k2 - k1)
        a, b = (f2 - f1) // g, (k2 - k1) // g  # λ = a / b, the chord's slope
        chosen = closure.maximiser(a, b)
        k, f = int(chosen.sum()), closure.value(chosen)
        if b * f - a * k > b * f1 - a * k1:  # strictly above the chord: a new point inside
            points[k] = f
            todo += [(k1, f1, k, f), (k, f, k2, f2)]
    return dict(sorted(points.items()))


def lp_values(
    n_persons: int,
    weights: NDArray[np.int64],
    inc_class: NDArray[np.int64],
    inc_person: NDArray[np.int64],
    count: int,
) -> list[Fraction]:
    """LP(x, j) exactly, j < ``count``, for holder classes as :func:`holder_classes` returns."""
    if n_persons == 0:
        return [Fraction(0)] * count
    points = envelope_points(n_persons, weights, inc_class, inc_person, count)
    ks = list(points)
    out = []
    for j in range(count):
        if j >= n_persons:
            out.append(Fraction(points[n_persons]))
            continue
        i = bisect_right(ks, j) - 1
        k1, k2 = ks[i], ks[i + 1]  # ks[-1] = P > j
        f1, f2 = points[k1], points[k2]
        out.append(Fraction(f1) if k1 == j else f1 + Fraction((f2 - f1) * (j - k1), k2 - k1))
    return out


def distinct_lp_floors(values: ArrayLike, persons: ArrayLike, count: int) -> list[int]:
    """⌊LP(x, j)⌋ for j < ``count``: exact, in integer arithmetic, for every input."""
    _, n_persons, weights, inc_class, inc_person = holder_classes(values, persons)
    vals = lp_values(n_persons, weights, inc_class, inc_person, count)
    return [v.numerator // v.denominator for v in vals]
