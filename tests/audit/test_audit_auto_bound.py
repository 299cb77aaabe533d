"""Privacy audit of the ``bound = "auto"`` clamp choice, with a negative control.

The mechanism under test is :meth:`ClampChoiceParams.choose` as the job layer builds it (m = 0:
the monotone utility −A with weights exp(ε·u), four candidates per octave, the prior e^−κ·h).
Each neighbouring pair is the one a search over small multisets (≤ 6 totals from
{1, 2, 3, 5, 8, 100} plus one more person) found to give the largest expected audit bound. For the
job's mechanism: (3, 8) against (3, 8, 5): the new person raises A at the candidates 1 … 4 only,
moving the mass of the candidates 5 … 8 from q ≈ 0.051 to p ≈ 0.127 (ln ratio 0.92 ≤ ε = 1),
expected ε_lb ≈ 0.76 at m = 5·10^4.

Negative control: the same weights exp(ε·u) on the *non-monotone* utility u = −|A − 2| — the
shortcut that is only valid for m = 0 (McSherry & Talwar's factor 2 dropped). Its pair is
(2, 5, 5, 5, 8, 100) against the same plus one more person at 100; the exact probabilities of
candidate 8 are p ≈ 0.125 and q ≈ 0.019, so the audit's expected bound is
ε_lb ≈ ln(p/q) − 4.9·(√((1−p)/(m·p)) + √((1−q)/(m·q))) ≈ 1.67 at m = 5·10^4: caught by a wide
margin. The correct mechanism's exact worst log-ratio on its own pair is ≤ ε
(``tests/mechanisms/test_shifted_inverse_auto_bound.py`` brute force), so its audit passes
(harness false-alarm probability ≤ α = 10^-6).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest

from tests.audit.harness import assert_caught, assert_private
from userdp.transforms.mechanisms.auto_bound import ClampChoiceParams
from userdp.transforms.mechanisms.rng import KeyedRng

JOB = ClampChoiceParams(epsilon=1, min_exponent=0, max_exponent=3, target_clipped=0)
X, X_PRIME = (3, 8), (3, 8, 5)
BAD_X, BAD_X_PRIME = (2, 5, 5, 5, 8, 100), (2, 5, 5, 5, 8, 100, 100)
N = 100_000


def _hist(params: ClampChoiceParams, totals: tuple[int, ...]) -> list[int]:
    h = [0] * params.histogram_size
    for t in totals:
        h[params.bucket(t)] += 1
    return h


def _choice(params: ClampChoiceParams, monotone_shortcut: bool = False):  # type: ignore[no-untyped-def]
    def run(totals: tuple[int, ...], rng: KeyedRng) -> int:
        hist = _hist(params, totals)
        if not monotone_shortcut:
            return params.choose(hist, rng)
        # the broken variant: weights exp(ε·u) although u = −|A − m| is not monotone, which is
        # the correct mechanism at twice the ε (its exponents are ε·(top − u)/2 + κ·h)
        return dataclasses.replace(params, epsilon=2 * Fraction(params.epsilon)).choose(hist, rng)

    return run


@pytest.mark.slow
def test_the_auto_bound_choice_passes_the_audit() -> None:
    result = assert_private(_choice(JOB), X, X_PRIME, epsilon=1.0, n=N, label="auto-bound")
    assert result.epsilon_lb > 0.6, f"the audit lost power (expected ≈ 0.76):\n{result}"


@pytest.mark.slow
def test_negative_control_the_monotone_shortcut_on_a_non_monotone_utility_is_caught() -> None:
    broken = dataclasses.replace(JOB, target_clipped=2)
    assert_caught(_choice(broken, monotone_shortcut=True), BAD_X, BAD_X_PRIME, epsilon=1.0, n=N,
                  label="auto-bound-shortcut")  # fmt: skip
