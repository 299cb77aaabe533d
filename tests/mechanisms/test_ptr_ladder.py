"""The PTR ladder builds every rung's release mechanism when it is constructed (planning).

A ladder whose top rung's noise scale b/(ε/2) overflows a float is refused with ValueError at
construction; before, only the rung the sparse-vector test picked was built, at release, so the
OverflowError came and went with the data (a few percent of runs at n ≈ 125 persons). Releases of
ladders that worked before are pinned to values recorded before the change (same draws).
"""

from __future__ import annotations

import sys
from fractions import Fraction

import numpy as np
import pytest

from tests.stats_helpers import TEST_SECRET
from userdp.transforms.mechanisms.accounting import float_down, float_up
from userdp.transforms.mechanisms.additive import LaplaceMechanism
from userdp.transforms.mechanisms.ptr_ladder import LadderPTR, LadderRelease
from userdp.transforms.mechanisms.rng import KeyedRng

OVERFLOW = r"PTR ladder's top rung b = upper − lower = .* overflows a float; narrow the bounds"


@pytest.mark.parametrize(
    ("statistic", "q", "lower", "upper", "epsilon"),
    [
        ("mean", None, -6e307, 6e307, 1.0),  # the audit's job: ptr_mean, no bound
        ("quantile", Fraction(1, 2), -6e307, 6e307, 1.0),
        ("mean", None, 0.0, 1e308, 0.5),
        ("mean", None, -5e-324, sys.float_info.max, 1.0),  # exact span rounds up past max
    ],
)
def test_a_ladder_whose_noise_scale_overflows_is_refused_at_construction(
    statistic: str, q: Fraction | None, lower: float, upper: float, epsilon: float
) -> None:
    with pytest.raises(ValueError, match=OVERFLOW):
        LadderPTR(statistic, lower, upper, epsilon, 1e-6, q=q)  # type: ignore[arg-type]


def test_an_accepted_ladder_near_the_float_limit_releases_for_every_n() -> None:
    # 8e307/(ε/2 = 0.5) = 1.6e308 is finite: accepted, and no n makes a release raise.
    mech = LadderPTR("mean", -4e307, 4e307, 1.0, 1e-6)
    for n in range(90, 150):
        for i in range(5):
            out = mech.release(np.zeros(n), KeyedRng(TEST_SECRET, "ladder-near-max", n, i))
            assert out == LadderRelease(None, None) or out.bound in [float(b) for b in mech.bounds]


def test_every_rung_has_its_release_mechanism_from_construction() -> None:
    mech = LadderPTR("quantile", -3.0, 7.0, Fraction(3, 5), 1e-6, q=0.5, rungs=9, ratio=3)
    eps_release = float_down(mech.epsilon / 2)
    assert mech.mechanisms == tuple(LaplaceMechanism(float_up(b), eps_release) for b in mech.bounds)


# Recorded with the code before the change (the rung's mechanism built at release): float.hex().
PINNED: list[tuple[str, object, float, float, float, float, dict[str, object], list[object]]] = [
    ("mean", None, -3.0, 7.0, 1.0, 1e-6, {}, [
        ("0x1.f4b2e44ce8800p+0", "0x1.4000000000000p-4"),
        ("0x1.dccf969347500p+0", "0x1.4000000000000p-6"),
        ("0x1.e7fa9bf783680p+0", "0x1.4000000000000p-7"),
        ("0x1.f20ebe21bfa00p+0", "0x1.4000000000000p-7"),
    ]),
    ("quantile", 0.5, -3.0, 7.0, 1.0, 1e-6, {}, [
        ("-0x1.06ce3630e8000p+3", "0x1.4000000000000p+2"),
        ("0x1.396d21513c000p+1", "0x1.4000000000000p+1"),
        ("0x1.b901dbf960000p+0", "0x1.4000000000000p+0"),
        ("0x1.f6a7514ae2000p+0", "0x1.4000000000000p-1"),
    ]),
    ("mean", None, 0.0, 1e6, 0.3, 1e-7, {"rungs": 30, "ratio": 3}, [
        (None, None),
        ("0x1.46085379a6000p+14", "0x1.01339f140436dp+12"),
        ("0x1.b87d88af53000p+15", "0x1.01339f140436dp+12"),
        ("-0x1.9564ef9796000p+13", "0x1.56ef7ec55af3bp+10"),
    ]),
    ("quantile", Fraction(1, 3), -3.0, 7.0, 2, 1e-5, {"rungs": 10, "ratio": Fraction(3, 2)}, [
        ("0x1.3b383f97ae000p+1", "0x1.511e8d2b3183bp+0"),
        ("0x1.93b2e44578000p-2", "0x1.c17e118eecaf9p-1"),
        ("0x1.3504c27754000p-1", "0x1.c17e118eecaf9p-1"),
        ("0x1.0b9f36f175800p+0", "0x1.8f8c8162997fap-2"),
    ]),
]  # fmt: skip


@pytest.mark.parametrize("case", PINNED)
def test_releases_are_unchanged_draw_for_draw(case: tuple[object, ...]) -> None:
    statistic, q, lower, upper, epsilon, delta, kw, expected = case
    data = np.random.default_rng(5).uniform(-3, 7, size=2000)  # data, not noise
    mech = LadderPTR(statistic, lower, upper, epsilon, delta, q=q, **kw)  # type: ignore[arg-type]
    for i, (value, bound) in enumerate(expected):  # type: ignore[arg-type]
        key = KeyedRng(TEST_SECRET, "ladder-pin", statistic, i)
        out = mech.release(data[: 400 * (i + 1)], key)
        want = LadderRelease(
            None if value is None else float.fromhex(value),
            None if bound is None else float.fromhex(bound),
        )
        assert out == want
