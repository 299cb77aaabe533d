"""Down values f(x, j) of each statistic: hand values, brute force over removals, LP properties."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.optimize
from scipy import sparse

from userdp.transforms.mechanisms import distinct_envelope
from userdp.transforms.mechanisms.shifted_inverse_stats import (
    distinct_down_values,
    kth_largest_down_values,
    max_down_values,
    quantile_k,
    rank_error,
    sum_down_values,
)

Rows = list[tuple[int, int]]  # (person, value)


def _by_removal(rows: Rows, f: Callable[[list[int]], int], count: int) -> list[int]:
    """f(x, j) = min over sets of j removed persons of f(rest), by enumeration (f monotone, so
    removing min(j, n) persons is enough)."""
    persons = sorted({p for p, _ in rows})
    out = []
    for j in range(count):
        out.append(
            min(
                f([v for p, v in rows if p not in removed])
                for removed in itertools.combinations(persons, min(j, len(persons)))
            )
        )
    return out


def _kth(k: int) -> Callable[[list[int]], int]:
    return lambda vals: sorted(vals, reverse=True)[k - 1] if len(vals) >= k else 0


def _random_rows(gen: np.random.Generator, persons: int, alphabet: int) -> Rows:
    return [
        (p, int(v))
        for p in range(persons)
        for v in gen.integers(0, alphabet, size=int(gen.integers(1, 5)))
    ]


DATASETS = [_random_rows(np.random.default_rng(seed), 5, 8) for seed in range(40)]  # test data


# --- sums -------------------------------------------------------------------------------------


def test_sum_down_values_hand_computed() -> None:
    assert sum_down_values(12, [5, 3, 2, 1, 1], 8) == [12, 7, 4, 2, 1, 0, 0, 0]
    assert sum_down_values(12, [5, 3], 3) == [12, 7, 4]  # only the top count − 1 matter
    assert sum_down_values(3, [2, 1], 5) == [3, 1, 0, 0, 0]  # fewer persons than needed
    assert sum_down_values(Fraction(7, 2), [Fraction(5, 2), 1.0], 3) == [Fraction(7, 2), 1, 0]


def test_sum_and_max_match_removal_by_enumeration() -> None:
    for rows in DATASETS:
        totals = sorted(
            (sum(v for p, v in rows if p == q) for q in {p for p, _ in rows}), reverse=True
        )
        assert sum_down_values(sum(totals), totals, 7) == _by_removal(rows, sum, 7)
        maxima = sorted(max(v for p, v in rows if p == q) for q in {p for p, _ in rows})[::-1]
        assert max_down_values(maxima, 7) == _by_removal(rows, _kth(1), 7)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((12.0, [5, 3], 3), TypeError, "exact int or Fraction"),
        ((12, [3, 5], 3), ValueError, "non-increasing"),
        ((12, [5, -3], 3), ValueError, "non-negative"),
        ((12, [5, 3], 4), ValueError, "fewer top per-person totals than the 3 needed"),
        ((7, [5, 3], 3), ValueError, "smaller than the sum"),
        ((12, [5, 3], 0), ValueError, "positive integer"),
    ],
)
def test_sum_misuse_is_refused(args: tuple[object, ...], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        sum_down_values(*args)  # type: ignore[arg-type]


def test_max_misuse_is_refused() -> None:
    assert max_down_values([9, 7, 7], 5) == [9, 7, 7, 0, 0]
    with pytest.raises(ValueError, match="non-increasing"):
        max_down_values([7, 9], 3)
    with pytest.raises(ValueError, match="non-negative"):
        max_down_values([-1], 3)


# --- selection --------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 3, 5, 9, 30])
def test_kth_largest_matches_removal_by_enumeration(k: int) -> None:
    for rows in DATASETS:
        persons = [p * 7 + 100 for p, _ in rows]  # arbitrary ids
        values = [v for _, v in rows]
        got = kth_largest_down_values(values, persons, k, 7)
        assert got == _by_removal(rows, _kth(k), 7), (rows, k)


def test_kth_largest_with_one_value_per_person_is_the_k_plus_j_th() -> None:
    values = np.arange(1.0, 101.0)
    got = kth_largest_down_values(values, np.arange(100), 5, 10)
    assert got == [float(100 - 4 - j) for j in range(10)]
    assert kth_largest_down_values([], [], 1, 3) == [0.0, 0.0, 0.0]


def test_kth_largest_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match="k must be a positive integer"):
        kth_largest_down_values([1.0], [1], 0, 3)
    with pytest.raises(ValueError, match="same length"):
        kth_largest_down_values([1.0, 2.0], [1], 1, 3)
    with pytest.raises(ValueError, match="finite and non-negative"):
        kth_largest_down_values([1.0, -2.0], [1, 2], 1, 3)
    with pytest.raises(ValueError, match="finite and non-negative"):
        kth_largest_down_values([np.nan], [1], 1, 3)


def test_quantile_rank_and_rank_error() -> None:
    assert quantile_k(Fraction(1, 2), 10) == 6  # the 5th smallest of 10 is the 6th largest
    assert quantile_k(Fraction(99, 100), 100) == 2
    assert (quantile_k(0, 10), quantile_k(1, 10), quantile_k(0.5, 0)) == (10, 1, 1)
    with pytest.raises(ValueError, match=r"q must lie in \[0, 1\]"):
        quantile_k(1.5, 10)
    vals = [5, 4, 4, 3, 1]
    assert [rank_error(vals, k, 4) for k in (1, 2, 3, 4)] == [1, 0, 0, 1]
    assert (rank_error(vals, 1, 10), rank_error(vals, 1, 2), rank_error(vals, 5, 0)) == (0, 4, 1)


# --- distinct values ----------------------------------------------------------------------------


def test_distinct_lp_hand_computed_triangle() -> None:
    # Persons A, B, C; values ab, bc, ca each held by two of them. Exact f(x, j) = 3, 3, 2, 0; the
    # LP puts u = j/3 on everyone and removes 3·(j/3) = j values: f̃ = 3, 2, 1, 0, 0.
    values = ["ab", "ab", "bc", "bc", "ca", "ca"]
    persons = ["A", "B", "B", "C", "C", "A"]
    assert distinct_down_values(values, persons, 5) == [3, 2, 1, 0, 0]
    code = {"ab": 0, "bc": 1, "ca": 2}
    rows = [(ord(p), code[v]) for p, v in zip(persons, values, strict=True)]
    assert _by_removal(rows, lambda r: len(set(r)), 5) == [3, 3, 2, 0, 0]


def _distinct(rows: Rows, count: int) -> list[int]:
    return distinct_down_values([v for _, v in rows], [p for p, _ in rows], count)


def test_distinct_lp_bound_has_the_properties_the_proof_needs() -> None:
    # docs/shifted_inverse.md §4: f̃(x, 0) = f(x), f̃ non-increasing and ≤ the exact f(x, j), and
    # for x' = x plus one person: f̃(x', j + 1) ≤ f̃(x, j) ≤ f̃(x', j).
    gen = np.random.default_rng(7)  # test data
    for rows in DATASETS[:25]:
        got = _distinct(rows, 7)
        exact = _by_removal(rows, lambda r: len(set(r)), 7)
        assert got[0] == exact[0] and all(a >= b for a, b in itertools.pairwise(got))
        assert all(g <= e for g, e in zip(got, exact, strict=True))
        extra = [(99, int(v)) for v in gen.integers(0, 10, size=int(gen.integers(1, 5)))]
        bigger = _distinct(rows + extra, 8)
        for j in range(7):
            assert bigger[j + 1] <= got[j] <= bigger[j], (rows, extra, j)


def test_distinct_merges_values_with_the_same_holders() -> None:
    # 50 values private to person 0 behave as one class of weight 50: removing person 0 (j = 1)
    # takes all of them; person 1's single value needs a second removal.
    values = [f"v{i}" for i in range(50)] + ["w"]
    persons = [0] * 50 + [1]
    assert distinct_down_values(values, persons, 4) == [51, 1, 0, 0]
    assert distinct_down_values([], [], 3) == [0, 0, 0]


def test_distinct_never_fails_where_the_certificate_or_the_solver_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The former code solved each LP with HiGHS and raised when its float solution could not be
    # certified (or HiGHS failed): a data-dependent abort. Now neither HiGHS nor any certificate is
    # consulted, and a max flow from scipy that does not verify is recomputed exactly in Python:
    # with the solver and scipy's max flow both made to fail, the exact floors still come back.
    gen = np.random.default_rng(17)  # test data
    cases = [([v for _, v in rows], [p for p, _ in rows]) for rows in DATASETS[:10]]
    persons = np.repeat(np.arange(300), gen.integers(1, 20, size=300))
    cases.append(((gen.zipf(1.3, size=len(persons)) % 1500).tolist(), persons.tolist()))
    want = [distinct_down_values(v, p, 12) for v, p in cases]

    def fails(*args: object, **kwargs: object) -> object:
        raise AssertionError("a solver that fails, or returns an uncertifiable solution")

    def no_flow(graph: sparse.csr_array, source: int, sink: int) -> object:
        return SimpleNamespace(flow=sparse.csr_array(graph.shape, dtype=np.int32), flow_value=0)

    monkeypatch.setattr(scipy.optimize, "linprog", fails)
    monkeypatch.setattr(distinct_envelope, "maximum_flow", no_flow)
    assert [distinct_down_values(v, p, 12) for v, p in cases] == want
    assert want[-1][0] > want[-1][11] > 0  # a real instance: values do go with removals
