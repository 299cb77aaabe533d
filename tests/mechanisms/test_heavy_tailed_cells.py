"""How far the float release of heavy-tailed noise is from the ideal one, cell by cell.

For a value v, a public scale s and a positive noise s·e^L, the released cell is a monotone
function of the float L. The ideal mechanism (exact arithmetic, then the same snap) leaves a
cell of centre c at the real L* = ln((c ± g/2 − v)/s); the implementation leaves it at the
float L where its output changes, found by bisection over the floats. The difference of the two
boundaries' shifts, over the cell's width in L, is the relative error of that cell's
probability (the density of L is flat across one cell to ~2^−20): the float release's ε slack
is about twice the worst (transforms/mechanisms/heavy_tailed.py, "Residual floating-point
risk"). Before stop 33 the noise was exp(ln s + L), and this error reached 2^−13.9 for bounds
±8e307 (2^−24 for [0, 1]).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest

from userdp.transforms.mechanisms import heavy_tailed as ht
from userdp.transforms.mechanisms.heavy_tailed import release_grid, release_heavy_tailed
from userdp.transforms.mechanisms.smooth_sensitivity import (
    CauchyNoise,
    LaplaceNoise,
    SmoothQuantile,
)

WORST_ALLOWED = 2.0**-27  # the module docstring's bound (≈ 2^−28), with a factor 2 to spare


def _ordered(x: float) -> int:
    """An int whose order is the float order (positive and negative floats)."""
    i: int = struct.unpack("<q", struct.pack("<d", x))[0]
    return i if i >= 0 else -(i & 0x7FFF_FFFF_FFFF_FFFF)


def _float(i: int) -> float:
    bits = i if i >= 0 else (-i) | (1 << 63)
    x: float = struct.unpack("<d", struct.pack("<Q", bits))[0]
    return x


def _first_change(out: Callable[[float], float], a: float, b: float) -> float:
    """The smallest float L in (a, b] with out(L) > out(a), by bisection over the floats."""
    y = out(a)
    lo, hi = _ordered(a), _ordered(b)
    assert out(b) > y
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if out(_float(mid)) > y:
            hi = mid
        else:
            lo = mid
    return _float(hi)


@pytest.mark.parametrize("offset", [0.0, -0.3])  # the value, in spans from the centre
@pytest.mark.parametrize("bounds", [(0.0, 1.0), (0.0, 1e6), (-1e150, 1e150), (-8e307, 8e307)])
def test_cells_have_the_ideal_probability_to_2_to_the_minus_27(
    bounds: tuple[float, float], offset: float
) -> None:
    """Measured on this machine: 2^−32 to 2^−34 (2^−15 to 2^−24 before stop 33)."""
    lo, hi = bounds
    mid, span = lo * 0.5 + hi * 0.5, hi - lo
    g = release_grid(span)
    v = offset * span  # smooth_sensitivity centres the value (0); −0.3 spans: a value off centre

    def out(log_abs: float) -> float:
        return release_heavy_tailed(v, scale=span, noise=(1, log_abs), lower=lo - mid,
                                    upper=hi - mid)  # fmt: skip

    worst = 0.0
    with localcontext() as ctx:
        ctx.prec = 80
        for frac in (1e-4, 1e-3, 0.01, 0.1, 0.25, 0.37, 0.45, 0.4999):
            c = round((v + frac * span) / g) * g  # a cell's centre (a multiple of g)
            low = ((Decimal(c) - Decimal(g) / 2 - Decimal(v)) / Decimal(span)).ln()
            high = ((Decimal(c) + Decimal(g) / 2 - Decimal(v)) / Decimal(span)).ln()
            width = high - low
            shifts = []
            for ideal in (low, high):
                x, w = float(ideal), float(width)
                found = _first_change(out, x - w / 2, x + w / 2)
                shifts.append(Decimal(found) - ideal)
            worst = max(worst, abs(float((shifts[1] - shifts[0]) / width)))
    assert worst <= WORST_ALLOWED, f"a cell's probability is off by 2^{math.log2(worst):.1f}"


# --- The draws the samplers can make, cell by cell -------------------------------------------
#
# The test above bisects over *every* float log|z|. A sampler takes fewer: its fine uniforms are
# 2^−K·V, V = (2^52 + 2m + 1)/2^53 for a 51-bit m, with probability 2^−(K+1)·2^−51 each. At small
# ε smooth sensitivity resolves |z| ~ 2^−17 into cells of 2^−38 (heavy_tailed's module
# docstring), so what matters is how many of *those* draws a cell holds, and whether the cells'
# exact probabilities under two neighbours stay within e^ε. Until stop 36 the Cauchy body and
# E near 0 were plain (2m + 1)/2^53 uniforms: a cell held ~2^14 draws, off by ~2^−14, and the
# loss between x = [0.5] and x' = [0.5, 0.5] at ε = 3.82·10^−5 was 6.1·10^−5 = 1.6·ε.


class _Scripted:
    """Stands in for KeyedRng: the branch and acceptance uniforms accept at once, the sign is
    +, and ``_fine_uniform`` (monkeypatched) returns the scripted (K, V) draws in turn."""

    def uniform_open01(self) -> float:
        return 2.0**-53

    def randbits(self, k: int) -> int:
        return 1


def _v(m: int) -> float:
    return ((1 << 52) | (m << 1) | 1) * (1.0 / (1 << 53))


def _cell_weights(
    release: Callable[[int, int], float], y: float, levels: range
) -> tuple[float, int]:
    """(P(release = y) up to a constant common to both neighbours, the fewest draws a K with
    any draw in the cell puts there — the finest resolution the cell is made of)."""
    top = (1 << 51) - 1
    prob, fewest = 0.0, 1 << 62
    for k in levels:
        if not release(k, 0) <= y <= release(k, top):
            continue
        bounds = []
        for strict in (False, True):  # first m with release ≥ y, then first with release > y
            lo, hi = -1, top + 1
            while hi - lo > 1:
                mid = (lo + hi) // 2
                r = release(k, mid)
                if r > y or (r == y and not strict):
                    hi = mid
                else:
                    lo = mid
            bounds.append(hi)
        n = bounds[1] - bounds[0]
        if n:
            prob += math.ldexp(n, -k)
            fewest = min(fewest, n)
    return prob, fewest


def _releases(noise: object, values: list[float], monkeypatch: pytest.MonkeyPatch,
              pre: tuple[tuple[int, float], ...]) -> Callable[[int, int], float]:  # fmt: skip
    mech = SmoothQuantile(Fraction(1, 2), 0.0, 1.0, noise)  # type: ignore[arg-type]
    script: list[tuple[int, float]] = []
    monkeypatch.setattr(ht, "_fine_uniform", lambda rng: script.pop(0))

    def release(k: int, m: int) -> float:
        script[:] = [*pre, (k, _v(m))]
        out = mech.release(values, _Scripted())  # type: ignore[arg-type]
        assert not script, "the sampler took fewer fine uniforms than scripted"
        return out

    return release


@pytest.mark.parametrize(
    "kind, eps, pre",  # ε: near the smallest each takes (β = ε/10, ε/29.6 must be > 3.8e-6)
    [("cauchy", 3.82e-5, ()), ("laplace", 1.2e-4, ((0, 0.75),))],  # Laplace: E's K = 0, W's
)
def test_cells_near_the_value_hold_enough_draws(
    kind: str, eps: float, pre: tuple[tuple[int, float], ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At about the smallest ε each noise takes, every cell from 1 to 2^18 grid steps above the
    value holds ≥ 2^30 draws at its finest level, and its exact probability under x = [0.5] and
    x' = [0.5, 0.5] (S(x) ≠ S(x')) differs by less than e^ε."""
    noise = CauchyNoise(eps) if kind == "cauchy" else LaplaceNoise(eps, 1e-6)
    g = release_grid(1.0)
    worst_loss, fewest = 0.0, 1 << 62
    x = _releases(noise, [0.5], monkeypatch, pre)
    probs_x = {}
    cells = [0.5 + j * g for j in (*range(1, 9), *(1 << i for i in range(4, 19)))]
    for y in cells:
        probs_x[y], n = _cell_weights(x, y, range(64))
        fewest = min(fewest, n)
    x2 = _releases(noise, [0.5, 0.5], monkeypatch, pre)
    for y in cells:
        p2, n = _cell_weights(x2, y, range(64))
        fewest = min(fewest, n)
        worst_loss = max(worst_loss, abs(math.log(probs_x[y] / p2)))
    assert fewest >= 2**30, f"a cell holds only 2^{math.log2(fewest):.1f} draws"
    assert worst_loss < eps, f"privacy loss {worst_loss:.3g} on a cell, above ε = {eps:.3g}"
