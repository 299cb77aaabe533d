"""Privacy audits of sample-and-aggregate: person chunks + aggregator, and chunking by rows.

The neighbouring pair removes one *heavy* person with 10^4 rows: x holds 100 light persons with 10
rows of value 0 each plus the heavy person with 10^4 rows of value 1; x' lacks the heavy person.
The function is the mean of the value column on a chunk, range [0, 1], k = 10 chunks, ε = 1.

The mechanism audited is the release path of
:class:`transforms.sample_aggregate.SampleAndAggregate`: ``chunk_answers`` (the pure reference of
``AnswerPerChunk``: keyed person hash, canonical chunk, sanitised answers;
``tests/transforms/test_sample_aggregate.py`` checks the Beam transform against it) then the
aggregator's ``release``. The chunk key is the release secret's, the same for x and x', so the
chunk answers are fixed per side and computed once; each draw is one release with fresh
noise (``KeyedRng(AUDIT_SECRET, label, side, i)``).

Expected bounds, worked out by hand (z ≈ 4.9 standard errors, m = n/2 test draws a side; see
``tests/audit/test_audit_core.py`` for the formula); measured values in brackets:

* Clipped mean, chunks by person. The heavy person's chunk c holds n_c light persons; its answer
  is 10^4/(10^4 + 10·n_c) on x and 0 on x' (the light rows stay; the default 1/2 if there were
  none). With this key n_c = 6, a_c = 0.99404, so the means differ by 0.0994 = 0.994·Δ with
  Δ = (u − l)/k = 0.1 and Laplace scale Δ/ε: the true privacy loss is 0.994, and as for the core
  Laplace audit the best half-line gives ε_lb ≈ 0.93 at n = 10^5 (σ ≈ 0.010) [0.924], ≈ 0.97 at
  10^6. Pass; the test also requires ε_lb ≥ 0.82 (power: ≥ 10σ below the expectation).
* Negative control, chunks by row (each row its own unit): every chunk gets ~10^3 heavy rows and
  ~10^2 light ones, so every answer moves by ≈ 0.91 and the mean by ≈ 9.1·Δ: a true loss of ≈ 9.1
  for a claim of 1. At n = 2·10^4 the event {y ≥ 0.8} has p ≈ 0.78 on x and q ≈ e^−8/2 on x':
  no hits, q_hi ≈ 14.5/10^4, so ε_lb ≈ ln(0.77/0.00145) ≈ 6.3 [6.27]. Caught by a wide margin.
* Rank median (G = 64), chunks by person: on x' all answers are 0, so the point 0 scores 0 and
  every other point −10: P[y = 0] = 1/(1 + 64·e^−5) = 0.699. On x one answer sits at the top
  point: 0 scores −1, the others −9: P[y = 0] = 1/(1 + 64·e^−4) = 0.460. The largest loss is on
  {y > 0}: ln(0.540/0.301) = 0.58 < 1; ε_lb ≈ 0.47 at 2·10^4 [0.474]. Pass; power: ≥ 0.35.
* Negative control, median with chunks by row: all answers move 0 → ≈ 0.91. On x the point 0
  scores −10 against ≥ −5 near 0.91: P[y = 0] ≈ 0.012; on x' it is 0.699. ε_lb ≈ 3.6 [3.62] at
  2·10^4. Caught.

Default suite: the mean pass at n = 10^5, the others at 2·10^4 (their margins are huge); all at
10^6 under ``@pytest.mark.slow_audit``.

The same four under a ρ total (ρ = ½; the tests at the end of the file): the Gaussian mean against
the exact Gaussian privacy profile at μ = 1 (ε = 1, δ ≈ 0.1269), the median against the pure ε = 2
its selection runs at; their expected values are in the tests' docstrings.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from tests.audit.harness import AUDIT_SECRET, assert_caught, assert_private
from userdp.transforms.columns import PERSON_COLUMN
from userdp.transforms.mechanisms.chunk_functions import Answer
from userdp.transforms.mechanisms.rng import KeyedRng, ReleaseKey
from userdp.transforms.mechanisms.sample_aggregate import SampleAggregateParams
from userdp.transforms.sample_aggregate import chunk_answers, chunk_key

LIGHT, LIGHT_ROWS, HEAVY_ROWS, K = 100, 10, 10_000, 10
N_DEFAULT, N_CONTROL, N_SLOW = 100_000, 20_000, 1_000_000
KEY = chunk_key(ReleaseKey(AUDIT_SECRET), "audit-saa")


def mean_v(table: pa.Table) -> float:
    return float(np.mean(table.column("v").to_numpy()))


def params(aggregator: str, rho: float | None = None) -> SampleAggregateParams:
    return SampleAggregateParams(
        "audit-saa",
        "tests.audit.test_audit_sample_aggregate:mean_v",
        (0.0, 1.0),
        1.0 if rho is None else None,
        aggregator=aggregator,  # type: ignore[arg-type]
        chunks=K,
        median_grid=64,
        rho=rho,
    )


def data(heavy: bool) -> pa.Table:
    persons = [f"light{i}" for i in range(LIGHT) for _ in range(LIGHT_ROWS)]
    values = [0.0] * len(persons)
    if heavy:
        persons += ["heavy"] * HEAVY_ROWS
        values += [1.0] * HEAVY_ROWS
    return pa.table({PERSON_COLUMN: persons, "v": values})


def by_row(table: pa.Table) -> pa.Table:
    """The bug the issue forbids: each row becomes its own chunking unit."""
    rows = pa.array([f"row{i}" for i in range(table.num_rows)])
    return table.set_column(table.schema.get_field_index(PERSON_COLUMN), PERSON_COLUMN, rows)


@cache
def answers(heavy: bool, rows: bool) -> tuple[Answer, ...]:
    table = data(heavy)
    return tuple(chunk_answers(by_row(table) if rows else table, params("mean"), KEY, K))


def release(aggregator: str, rho: float | None = None) -> object:
    agg = params(aggregator, rho).aggregator_for(K)

    def mechanism(side: tuple[bool, bool], rng: KeyedRng) -> float:
        return agg.release(answers(*side), rng)[0]

    return mechanism


def test_the_neighbouring_pair_is_the_intended_one() -> None:
    with_heavy, without = answers(True, False), answers(False, False)
    moved = [i for i in range(K) if with_heavy[i] != without[i]]
    assert len(moved) == 1  # one person, one chunk
    assert with_heavy[moved[0]][0] == pytest.approx(10_000 / (10_000 + 60))  # n_c = 6
    assert all(a == (0.0,) for a in without)
    assert all(a[0] > 0.85 for a in answers(True, True))  # by rows: every chunk moves


@pytest.mark.parametrize(
    "n",
    [
        pytest.param(N_DEFAULT, id="n=1e5", marks=pytest.mark.slow),
        pytest.param(N_SLOW, id="n=1e6", marks=pytest.mark.slow_audit),
    ],
)
def test_clipped_mean_with_person_chunks_passes(n: int) -> None:
    result = assert_private(
        release("mean"), (True, False), (False, False), epsilon=1.0, n=n, label="saa-mean"
    )
    assert result.epsilon_lb >= {N_DEFAULT: 0.82, N_SLOW: 0.87}[n], f"lost power:\n{result}"


CONTROL_SIZES = [
    pytest.param(N_CONTROL, id="n=2e4"),
    pytest.param(N_SLOW, id="n=1e6", marks=pytest.mark.slow_audit),
]


@pytest.mark.parametrize("n", CONTROL_SIZES)
def test_clipped_mean_with_row_chunks_is_caught(n: int) -> None:
    result = assert_caught(
        release("mean"), (True, True), (False, True), epsilon=1.0, n=n, label="saa-mean-rows"
    )
    assert result.epsilon_lb > 3.0, str(result)


@pytest.mark.parametrize("n", CONTROL_SIZES)
def test_rank_median_with_person_chunks_passes(n: int) -> None:
    result = assert_private(
        release("median"), (True, False), (False, False), epsilon=1.0, n=n, label="saa-median"
    )
    assert result.epsilon_lb >= 0.35, f"lost power:\n{result}"


@pytest.mark.parametrize("n", CONTROL_SIZES)
def test_rank_median_with_row_chunks_is_caught(n: int) -> None:
    result = assert_caught(
        release("median"), (True, True), (False, True), epsilon=1.0, n=n, label="saa-median-rows"
    )
    assert result.epsilon_lb > 3.0, str(result)


# --- under a ρ total (docs/sample_aggregate.md §3–§4) ----------------------------------------
RHO = 0.5


def gaussian_delta(epsilon: float, mu: float) -> float:
    """δ(ε) of a Gaussian mechanism with Δ₂/σ = μ (Balle & Wang 2018, Thm. 8): the exact privacy
    profile, as ``tests/audit/test_audit_core.py`` audits the core Gaussian against."""
    return float(
        stats.norm.cdf(-epsilon / mu + mu / 2)
        - math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2)
    )


@pytest.mark.parametrize(
    "n",
    [
        pytest.param(N_DEFAULT, id="n=1e5", marks=pytest.mark.slow),
        pytest.param(N_SLOW, id="n=1e6", marks=pytest.mark.slow_audit),
    ],
)
def test_gaussian_mean_under_rho_passes_at_its_exact_profile(n: int) -> None:
    """Δ₂ = 1/10 and σ = Δ₂/√(2ρ) ≈ 0.1 at ρ = ½: the claim is the Gaussian profile at μ = 1,
    δ(1) ≈ 0.1269; the heavy person moves the mean by 0.0994 (μ ≈ 0.994), so a pass is near
    tight: expected ε_lb ≈ 0.86 at 10^5 (the core audit's 0.870 at μ = 1)."""
    agg = params("mean", RHO).aggregator_for(K)
    assert agg.noise_std == pytest.approx(0.1, rel=1e-3)
    delta = gaussian_delta(1.0, mu=1.0)
    result = assert_private(
        release("mean", RHO), (True, False), (False, False),
        epsilon=1.0, delta=delta, n=n, label="saa-mean-rho",
    )  # fmt: skip
    assert result.epsilon_lb >= {N_DEFAULT: 0.75, N_SLOW: 0.85}[n], f"lost power:\n{result}"


@pytest.mark.parametrize("n", CONTROL_SIZES)
def test_gaussian_mean_under_rho_with_row_chunks_is_caught(n: int) -> None:
    """By rows every chunk moves ≈ 0.91, the mean ≈ 9·Δ₂: μ ≈ 9 against the claim at μ = 1."""
    result = assert_caught(
        release("mean", RHO), (True, True), (False, True),
        epsilon=1.0, delta=gaussian_delta(1.0, mu=1.0), n=n, label="saa-mean-rho-rows",
    )  # fmt: skip
    assert result.epsilon_lb > 3.0, str(result)


@pytest.mark.parametrize("n", CONTROL_SIZES)
def test_rank_median_under_rho_passes_at_its_bounded_range_epsilon(n: int) -> None:
    """At ρ = ½, d = 1 the selection runs at E = 2 (E²/8 = ρ), a pure 2-DP exponential mechanism:
    P_x[y > 0] = 64e^−9/(e^−1 + 64e^−9) ≈ 0.0210 against P_x'[y > 0] ≈ 0.00291 — a loss of 1.98,
    near the claim 2. With ~29 hits of M(x') per 10^4 the α = 10^−6 bound is loose: measured
    ε_lb = 0.815 at 2·10^4; power: ≥ 0.6."""
    assert params("median", RHO).aggregator_for(K).total_epsilon == 2.0
    result = assert_private(
        release("median", RHO), (True, False), (False, False),
        epsilon=2.0, n=n, label="saa-median-rho",
    )  # fmt: skip
    assert result.epsilon_lb >= 0.6, f"lost power:\n{result}"


@pytest.mark.parametrize("n", CONTROL_SIZES)
def test_rank_median_under_rho_with_row_chunks_is_caught(n: int) -> None:
    result = assert_caught(
        release("median", RHO), (True, True), (False, True),
        epsilon=2.0, n=n, label="saa-median-rho-rows",
    )  # fmt: skip
    assert result.epsilon_lb > 4.0, str(result)
