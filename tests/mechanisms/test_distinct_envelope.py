"""The exact distinct-count LP bound: brute force over all person sets, HiGHS, both max flows."""

from __future__ import annotations

import itertools
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import sparse
from scipy.optimize import linprog

from userdp.transforms.mechanisms import distinct_envelope as de

Instance = tuple[list[int], list[int]]  # (values, persons), one entry per (value, holder)


def _random_instance(gen: np.random.Generator, max_persons: int, max_values: int) -> Instance:
    """Random holder sets: each value held by a random non-empty subset of the persons."""
    n_persons = int(gen.integers(1, max_persons + 1))
    values, persons = [], []
    for v in range(int(gen.integers(1, max_values + 1))):
        holders = gen.choice(n_persons, size=int(gen.integers(1, n_persons + 1)), replace=False)
        values += [v] * len(holders)
        persons += [int(p) for p in holders]
    return values, persons


def _zipf_instance(gen: np.random.Generator, n_persons: int) -> Instance:
    """Persons with 1–19 rows of Zipf(1.3) values: few shared values, many private ones."""
    persons = np.repeat(np.arange(n_persons), gen.integers(1, 20, size=n_persons))
    values = gen.zipf(1.3, size=len(persons)) % (5 * n_persons)
    return values.tolist(), persons.tolist()


def _envelope_by_enumeration(values: list[int], persons: list[int], count: int) -> list[Fraction]:
    """The upper concave envelope of (k, M(k)), M(k) = max over |S| = k of F(S), at j < count."""
    ids = sorted(set(persons))
    holders: dict[int, set[int]] = {}
    for v, p in zip(values, persons, strict=True):
        holders.setdefault(v, set()).add(ids.index(p))
    n = len(ids)
    best = [
        max(sum(h <= set(s) for h in holders.values()) for s in itertools.combinations(range(n), k))
        for k in range(n + 1)
    ]
    out = []
    for j in range(count):
        if j >= n:
            out.append(Fraction(best[n]))
            continue
        chords = (
            best[k1] + Fraction((best[k2] - best[k1]) * (j - k1), k2 - k1)
            for k1 in range(j)
            for k2 in range(j + 1, n + 1)
        )
        out.append(max([Fraction(best[j]), *chords]))
    return out


def _lp_values(values: list[int], persons: list[int], count: int) -> list[Fraction]:
    _, n_persons, weights, inc_class, inc_person = de.holder_classes(values, persons)
    return de.lp_values(n_persons, weights, inc_class, inc_person, count)


@pytest.mark.parametrize("seed", range(12))
def test_floors_match_the_envelope_of_all_person_sets(seed: int) -> None:
    gen = np.random.default_rng(seed)  # test data
    for _ in range(10):
        values, persons = _random_instance(gen, 7, 12)
        count = len(set(persons)) + 2
        want = _envelope_by_enumeration(values, persons, count)
        assert _lp_values(values, persons, count) == want, (values, persons)
        floors = de.distinct_lp_floors(values, persons, count)
        assert floors == [v.numerator // v.denominator for v in want]


def test_hand_computed_envelopes() -> None:
    # Triangle (each value held by two of three persons): F = 0, 0, 1, 3 for |S| = 0 … 3, so the
    # envelope is the chord to (3, 3): LP(j) = j.
    assert _lp_values([0, 0, 1, 1, 2, 2], [0, 1, 1, 2, 2, 0], 5) == [0, 1, 2, 3, 3]
    # Person 0 holds three values, one shared with person 1: F = 0, 2 (person 0), 3 — concave.
    assert _lp_values([0, 1, 2, 0], [0, 0, 0, 1], 4) == [0, 2, 3, 3]
    # A star: a shared value of persons 0 … 3 and one private value each; F(S) = |S| + [S = all].
    assert _lp_values([9, 9, 9, 9, 0, 1, 2, 3], [0, 1, 2, 3, 0, 1, 2, 3], 6) == [
        Fraction(5 * j, 4) for j in range(5)
    ] + [5]
    assert de.distinct_lp_floors([], [], 3) == [0, 0, 0]


def test_only_needed_segments_are_refined(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    maximiser = de._Closure.maximiser

    def counted(self: de._Closure, a: int, b: int) -> np.ndarray:
        calls.append((a, b))
        return maximiser(self, a, b)

    monkeypatch.setattr(de._Closure, "maximiser", counted)
    values, persons = _zipf_instance(np.random.default_rng(3), 300)  # test data
    assert de.distinct_lp_floors(values, persons, 1) == [0]
    assert calls == []  # LP(0) = 0: no flow at all
    few = de.distinct_lp_floors(values, persons, 4)
    assert 0 < len(calls) <= 12
    assert de.distinct_lp_floors(values, persons, 40)[:4] == few


def _highs_lp(values: list[int], persons: list[int], j: int) -> float:
    """LP(x, j) by HiGHS on the unmerged LP (one z per value), as a float."""
    vs, ps = np.unique(values, return_inverse=True)[1], np.unique(persons, return_inverse=True)[1]
    pairs = np.unique(np.stack([vs, ps], axis=1), axis=0)
    n_v, n_p, n_i = int(vs.max()) + 1, int(ps.max()) + 1, len(pairs)
    rows = np.r_[np.arange(n_i), np.arange(n_i), np.full(n_p, n_i)]
    cols = np.r_[n_p + pairs[:, 0], pairs[:, 1], np.arange(n_p)]
    data = np.r_[np.ones(n_i), -np.ones(n_i), np.ones(n_p)]
    a_ub = sparse.csr_array((data, (rows, cols)), shape=(n_i + 1, n_p + n_v))
    cost = np.r_[np.zeros(n_p), -np.ones(n_v)]
    tol = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}
    res = linprog(cost, A_ub=a_ub, b_ub=np.r_[np.zeros(n_i), j], bounds=(0, 1), options=tol)
    assert res.status == 0
    return -float(res.fun)


def test_exact_values_match_highs_on_medium_instances() -> None:
    # HiGHS solves the same LP in floating point: its optimum must agree with the exact value, and
    # wherever its float is clearly away from an integer (where the former certificate could
    # certify its floor), the floors must agree too.
    gen = np.random.default_rng(11)  # test data
    clear = 0
    for n_persons in (20, 40, 80, 150):
        for _ in range(2):
            values, persons = _zipf_instance(gen, n_persons)
            exact = _lp_values(values, persons, 12)
            floors = de.distinct_lp_floors(values, persons, 12)
            for j in range(1, 12):
                approx = _highs_lp(values, persons, j)
                assert abs(approx - float(exact[j])) < 1e-7, (n_persons, j)
                if abs(approx - round(approx)) > 1e-6:
                    clear += 1
                    assert floors[j] == int(np.floor(approx)), (n_persons, j)
    assert clear >= 10  # the floor comparison did happen on fractional optima


@pytest.mark.parametrize("seed", range(4))
def test_python_and_scipy_max_flows_give_the_same_cut(seed: int) -> None:
    gen = np.random.default_rng(100 + seed)  # test data
    values, persons = _zipf_instance(gen, int(gen.integers(30, 120)))
    extra, holders = _random_instance(gen, 25, 30)  # denser sharing among 25 persons
    _, n_persons, weights, inc_class, inc_person = de.holder_classes(
        values + [v + 10**6 for v in extra], persons + holders
    )
    closure = de._Closure(n_persons, weights, inc_class, inc_person)
    for _ in range(15):
        a, b = int(gen.integers(0, 40)), int(gen.integers(1, 12))
        by_scipy = closure._side_scipy(a, b)
        assert by_scipy is not None
        assert np.array_equal(by_scipy, closure._side_python(a, b)), (a, b)


def test_the_pure_python_path_gives_the_same_floors(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = np.random.default_rng(5)  # test data
    cases = [_zipf_instance(gen, 200), _zipf_instance(gen, 60), _random_instance(gen, 20, 40)]
    want = [de.distinct_lp_floors(v, p, 30) for v, p in cases]
    for limit in (0, 2000):  # every flow in Python; large capacities only
        monkeypatch.setattr(de, "_INT32_MAX", limit)
        assert [de.distinct_lp_floors(v, p, 30) for v, p in cases] == want


def test_a_wrong_scipy_flow_is_caught_and_recomputed(monkeypatch: pytest.MonkeyPatch) -> None:
    # If scipy returned a flow that is not a verified maximum flow (here: no flow at all, or a
    # value that is not the flow's), the answer comes from the exact Python path — same floors.
    values, persons = _zipf_instance(np.random.default_rng(8), 120)  # test data
    want = de.distinct_lp_floors(values, persons, 20)
    for scale in (0, 2):

        def wrong(graph: sparse.csr_array, source: int, sink: int, s: int = scale) -> object:
            return SimpleNamespace(flow=sparse.csr_array(graph.shape, dtype=np.int32), flow_value=s)

        monkeypatch.setattr(de, "maximum_flow", wrong)
        assert de.distinct_lp_floors(values, persons, 20) == want
