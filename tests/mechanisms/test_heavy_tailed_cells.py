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

import pytest

from userdp.transforms.mechanisms.heavy_tailed import release_grid, release_heavy_tailed

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
