"""Parameter checks shared by every mechanism: one home, one wording of each refusal.

Mechanisms take their parameters from the planner, but they are public classes too, so each one
checks what it is given and names the parameter (and, where it helps, what to do) in the error.
Two number types are in use: exact rationals (``Fraction``) for everything a sampler reads
exactly (discrete noise, budgets), and finite floats for the smooth-sensitivity and heavy-tailed
noise, which are floating-point by design (their modules say how the rounding is covered).
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

Rational = int | Fraction | float


class NoiseScaleOverflowError(OverflowError, ValueError):
    """A mechanism's noise scale, or its standard deviation, passes the largest float.

    Raised by the constructors of the additive mechanisms from public numbers only (sensitivity
    and budget), so a planner that builds its mechanisms refuses the job before any data is read:
    a release can never meet it on whichever candidate or rung the data select. An OverflowError
    (the planners' guards catch that) and a ValueError (it is a bad parameter)."""


def as_fraction(x: Rational, name: str) -> Fraction:
    """``x`` as an exact Fraction; refuses NaN, infinities and booleans, naming the parameter.

    A float converts exactly (every finite float is a dyadic rational).
    """
    if isinstance(x, bool):
        raise TypeError(f"{name} must be a number, got bool {x!r}")
    if isinstance(x, float) and not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x!r}")
    if not isinstance(x, (int, Fraction, float)):
        raise TypeError(f"{name} must be int, Fraction or float, got {type(x).__name__}")
    return Fraction(x)


def positive(x: Rational, name: str, hint: str = "") -> Fraction:
    """``x`` as a positive exact Fraction, or ValueError naming the parameter (and a hint)."""
    f = as_fraction(x, name)
    if f <= 0:
        raise ValueError(f"{name} must be positive, got {x!r}" + (f"; {hint}" if hint else ""))
    return f


def finite_real(x: object, name: str) -> float:
    """``x`` as a finite float; refuses booleans, non-numbers, NaN and ±∞, naming the parameter."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__} {x!r}")
    try:
        f = float(x)
    except OverflowError:
        f = math.inf
    if not math.isfinite(f):
        raise ValueError(f"{name} must be finite, got {x!r}")
    return f


def positive_real(x: object, name: str, hint: str = "") -> float:
    """``x`` as a finite float > 0, or TypeError / ValueError naming the parameter (and a hint)."""
    f = finite_real(x, name)
    if not f > 0:
        why = f"; {hint}" if hint else ""
        raise ValueError(f"{name} must be finite and > 0, got {x!r}{why}")
    return f
