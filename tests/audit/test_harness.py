"""Tests of the audit harness itself, on toy mechanisms whose ε is known exactly.

How the expected bounds below are computed: with m test draws a side and α = 10^-6, each
Clopper–Pearson end sits ≈ 4.9 standard errors out, so for an event with p = P[M(x) ∈ S] and
q = P[M(x') ∈ S], ε_lb ≈ ln(p/q) − 4.9·(√((1−p)/(m·p)) + √((1−q)/(m·q))), and ln(p̂/q̂) itself
has standard deviation σ ≈ √((1−p)/(m·p) + (1−q)/(m·q)). (A script evaluating the exact
Clopper–Pearson bounds at the expected counts agrees to ±0.005.)

Randomized response keeping the bit with probability 3/4 is exactly (ln 3)-DP, ln 3 ≈ 1.0986; its
best event is {y = 1}, p = 3/4, q = 1/4. At n = 4·10^4 (m = 2·10^4): ε_lb ≈ 1.019, σ ≈ 0.013. So
the true claim passes (exceeding ln 3 would take a 6σ fluke, and α bounds that anyway), and the
claim 0.8·ln 3 ≈ 0.879 is caught by ≈ 0.14 ≈ 11σ. The other toys use n = 10^5 (m = 5·10^4) and
are worked out next to their tests.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from tests.audit.harness import (
    AUDIT_SECRET,
    AuditResult,
    Event,
    _candidates,
    assert_caught,
    assert_private,
    audit,
    audit_outputs,
    clopper_pearson,
    draw,
)
from userdp.transforms.mechanisms.discrete import discrete_laplace
from userdp.transforms.mechanisms.rng import KeyedRng

LN3 = math.log(3)
N_TOY = 40_000  # randomized response: margins above; the other toys use the default n = 10^5


def randomized_response(bit: int, rng: KeyedRng) -> int:
    """Keeps the bit with probability 3/4: exactly (ln 3)-DP."""
    return bit if rng.randbelow(4) < 3 else 1 - bit


def randomized_response_words(bit: int, rng: KeyedRng) -> str:
    """The same mechanism with non-numeric outputs (exercises the hashable-value events)."""
    return ("no", "yes")[randomized_response(bit, rng)]


def abstaining_response(bit: int, rng: KeyedRng) -> int | None:
    """⊥ with probability 1/2 whatever the input, else randomized response: still exactly ln 3."""
    return None if rng.randbelow(2) else randomized_response(bit, rng)


def bot_leaks(bit: int, rng: KeyedRng) -> float | None:
    """⊥ with probability 3/4 for bit 0 and 1/4 for bit 1, else a uniform float: exactly ln 3.

    All the information is in whether the output is ⊥.
    """
    if rng.randbelow(4) < (3 if bit == 0 else 1):
        return None
    return rng.uniform_open01()


def grid_laplace(value: int, rng: KeyedRng) -> float:
    """value + Z/64 for discrete Laplace Z of scale 64: exactly 1-DP for |value − value'| ≤ 1.

    About 1500 distinct outputs in 10^5 draws, so the quantile-grid events are exercised.
    """
    return value + discrete_laplace(rng, 64) / 64


@pytest.mark.parametrize("mechanism", [randomized_response, randomized_response_words])
def test_randomized_response_with_exact_epsilon_passes(mechanism: object) -> None:
    result = assert_private(mechanism, 1, 0, epsilon=LN3, n=N_TOY)  # type: ignore[arg-type]
    assert result.epsilon_lb > 0.95, result  # expected ≈ 1.019 (σ ≈ 0.013): the audit has power
    assert result.larger == "x"
    assert result.event in (Event("value", value=1), Event("value", value="yes")) or (
        result.event == Event("range", 1.0, math.inf)
    ), result


@pytest.mark.parametrize("mechanism", [randomized_response, randomized_response_words])
def test_randomized_response_claiming_less_is_caught(mechanism: object) -> None:
    result = assert_caught(mechanism, 1, 0, epsilon=0.8 * LN3, n=N_TOY)  # type: ignore[arg-type]
    assert "VIOLATION" in str(result)


def leaky(data: int, rng: KeyedRng) -> str:
    """ "leak" w.p. 1/10 on input 1, never on input 0: (0, 0.1)-DP, not ε-DP for any ε."""
    return "leak" if data == 1 and rng.randbelow(10) == 0 else "fine"


@pytest.mark.parametrize(("x", "x_prime", "larger"), [(1, 0, "x"), (0, 1, "x'")])
def test_audit_looks_in_both_directions(x: int, x_prime: int, larger: str) -> None:
    # p = 1/10 on the leaking side, q = 0: at m = 2·10^4, p_lo ≈ 0.0896 and
    # q_hi = 1 − (α/2)^(1/m) ≈ 7.3·10^-4, so ε_lb ≈ 4.8.
    result = assert_caught(leaky, x, x_prime, epsilon=4.0, n=N_TOY)
    assert result.larger == larger
    assert result.event == Event("value", value="leak"), result
    assert result.hits[0 if x == 0 else 1] == 0  # the other side never leaks


def test_mechanism_with_independent_bot_outputs() -> None:
    # Best event {y = 1}: p = 3/8, q = 1/8, so ε_lb ≈ ln 3 − 4.9·(√(0.625/18750) + √(0.875/6250))
    # ≈ 1.01: passes at ln 3, caught at 0.8·ln 3 ≈ 0.879 by ≈ 0.13 (σ ≈ 0.013).
    passed = assert_private(abstaining_response, 1, 0, epsilon=LN3)
    assert passed.epsilon_lb > 0.95, passed
    assert_caught(abstaining_response, 1, 0, epsilon=0.8 * LN3)


def test_leak_through_bot_is_found() -> None:
    # {y = ⊥} (or its complement) has p = 3/4, q = 1/4, as randomized response: ε_lb ≈ 1.049.
    caught = assert_caught(bot_leaks, 0, 1, epsilon=0.8 * LN3)
    assert (None in caught.event) != (0.5 in caught.event), caught  # S separates ⊥ from values
    assert_private(bot_leaks, 0, 1, epsilon=LN3)


def test_real_outputs_on_a_quantile_grid() -> None:
    # As for continuous Laplace with ε = 1: {y ≥ c} with c ≈ 1 has p ≈ 0.51, q ≈ 0.19, so
    # ε_lb ≈ 0.93 (σ ≈ 0.010): passes at 1, caught at 0.8 by ≈ 0.13.
    passed = assert_private(grid_laplace, 0, 1, epsilon=1.0)
    assert 0.88 < passed.epsilon_lb <= 1.0, passed
    assert passed.event.kind == "range", passed
    assert_caught(grid_laplace, 0, 1, epsilon=0.8)


def test_delta_is_subtracted() -> None:
    # (0, 0.1)-DP holds and is tight: P[M(0) = "fine"] = 1 = e^0·P[M(1) = "fine"] + 0.1, so the
    # best event gives ε_lb just below 0 (p_lo ≈ 0.9993, q_hi ≈ 0.910: ln(0.8993/0.910) ≈ −0.012).
    result = assert_private(leaky, 1, 0, epsilon=0.0, delta=0.1, n=N_TOY)
    assert -0.05 < result.epsilon_lb <= 0.0, result
    # With δ = 0.05: ε_lb ≈ ln((0.0896 − 0.05)/7.3·10^-4) ≈ 4.0 > 3.
    caught = assert_caught(leaky, 1, 0, epsilon=3.0, delta=0.05, n=N_TOY)
    assert caught.event == Event("value", value="leak"), caught


@pytest.mark.parametrize("k", [0, 1, 17, 500, 983, 999, 1000])
@pytest.mark.parametrize("alpha", [1e-6, 0.05])
def test_clopper_pearson_matches_scipy(k: int, alpha: float) -> None:
    lo, hi = clopper_pearson(k, 1000, alpha)
    ci = stats.binomtest(k, 1000).proportion_ci(confidence_level=1 - alpha, method="exact")
    # scipy finds the ends with brentq (xtol 2·10^-12); ours are beta quantiles, exact to ~1 ulp.
    assert lo == pytest.approx(ci.low, rel=1e-9, abs=1e-11)
    assert hi == pytest.approx(ci.high, rel=1e-9, abs=1e-11)


@pytest.mark.parametrize("m", [1_000, 50_000])
def test_clopper_pearson_closed_forms(m: int) -> None:
    a = 1e-6 / 2
    # k = 0: the upper end solves P[Bin(m, p) = 0] = (1 − p)^m = a; k = m mirrors it.
    lo, hi = clopper_pearson(0, m, 1e-6)
    assert lo == 0.0 and hi == pytest.approx(1 - a ** (1 / m), rel=1e-12)
    lo, hi = clopper_pearson(m, m, 1e-6)
    assert lo == pytest.approx(a ** (1 / m), rel=1e-12) and hi == 1.0
    # k = 1: the lower end solves P[Bin(m, p) ≥ 1] = 1 − (1 − p)^m = a.
    assert clopper_pearson(1, m, 1e-6)[0] == pytest.approx(1 - (1 - a) ** (1 / m), rel=1e-9)


def test_training_counts_agree_with_event_membership() -> None:
    rng = KeyedRng(AUDIT_SECRET, "membership")
    train = tuple(
        [None if rng.randbelow(5) == 0 else rng.randbelow(1000) / 7 for _ in range(3000)]
        for _ in range(2)
    )
    cands = _candidates(train)  # type: ignore[arg-type]
    assert len(cands.events) > 1000
    for j in np.linspace(0, len(cands.events) - 1, 300).astype(int):
        event = cands.events[j]
        for side in range(2):
            assert cands.hits[side][j] == sum(y in event for y in train[side]), event


def test_audit_is_reproducible_and_label_selects_the_draws() -> None:
    first = audit(randomized_response, 1, 0, epsilon=LN3, n=2_000)
    again = audit(randomized_response, 1, 0, epsilon=LN3, n=2_000)
    assert again == first
    other = audit(randomized_response, 1, 0, epsilon=LN3, n=2_000, label="another")
    assert other.hits != first.hits


def test_report_names_the_numbers() -> None:
    result = audit(randomized_response, 1, 0, epsilon=LN3, n=2_000)
    text = str(result)
    for piece in ("PASSED", f"m = {result.test_size}", str(result.event), "p_lo", "q_hi"):
        assert piece in text
    failing = replace(result, epsilon=0.1)
    assert isinstance(failing, AuditResult) and not failing.passed
    assert "VIOLATION" in str(failing)
    assert "ε_lb = −∞ (no evidence)" in str(replace(result, epsilon_lb=-math.inf))


def test_assert_helpers_raise_with_the_report() -> None:
    with pytest.raises(AssertionError, match=r"failed its privacy audit:\nprivacy audit VIOLATION"):
        assert_private(randomized_response, 1, 0, epsilon=0.5, n=10_000)
    with pytest.raises(AssertionError, match=r"missed a mechanism.*\nprivacy audit PASSED"):
        assert_caught(randomized_response, 1, 0, epsilon=LN3, n=10_000)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n": 10}, ValueError, r"n = 10 draws per side is too small: need n ≥ 1000"),
        ({"n": 1e5}, TypeError, r"n must be an int, got float"),
        ({"alpha": 0.0}, ValueError, r"alpha must lie in \(0, 1\), got 0.0"),
        ({"alpha": 1.0}, ValueError, r"alpha must lie in \(0, 1\), got 1.0"),
        ({"epsilon": -0.1}, ValueError, r"epsilon must be finite and ≥ 0, got -0.1"),
        ({"epsilon": math.nan}, ValueError, r"epsilon must be finite and ≥ 0, got nan"),
        ({"delta": 1.0}, ValueError, r"delta must lie in \[0, 1\), got 1.0"),
        ({"delta": -1e-9}, ValueError, r"delta must lie in \[0, 1\), got -1e-09"),
    ],
)
def test_misuse_is_refused(kwargs: dict[str, float], error: type[Exception], match: str) -> None:
    args: dict[str, float] = {"epsilon": 1.0} | kwargs
    with pytest.raises(error, match=match):
        audit(randomized_response, 1, 0, **args)  # type: ignore[arg-type]


def test_nan_outputs_are_refused() -> None:
    with pytest.raises(ValueError, match="returned NaN; return None for ⊥"):
        audit(lambda data, rng: math.nan, 1, 0, epsilon=1.0, n=1_000)


def test_unhashable_outputs_are_refused() -> None:
    with pytest.raises(TypeError, match="outputs must be hashable"):
        audit(lambda data, rng: [data], 1, 0, epsilon=1.0, n=1_000)


def test_audit_outputs_needs_equal_sides() -> None:
    with pytest.raises(ValueError, match="same number of draws, got 1000 and 999"):
        audit_outputs([0] * 1000, [0] * 999, epsilon=1.0)


def test_audit_outputs_matches_audit() -> None:
    xs = draw(randomized_response, 1, 2_000, side="x")
    ys = draw(randomized_response, 0, 2_000, side="x'")
    assert audit_outputs(xs, ys, epsilon=LN3) == audit(
        randomized_response, 1, 0, epsilon=LN3, n=2_000
    )
