"""Splitting a total budget over named shares, exactly: explicit shares first, the rest evenly.

:func:`split_budget` refuses shares of another kind than the total, shares that exceed it, and
a remainder of zero for the queries that need one (:class:`BudgetExceededError`, naming the
shares and the excess). Budgets and their composition: :mod:`.accounting`.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from .accounting import (
    ZCDP,
    ApproxDP,
    Budget,
    PureDP,
    format_fraction,
    pure_to_approx,
    pure_to_zcdp,
    require_budget,
)

# ------------------------------------------------------------------------------------ splitting


class BudgetExceededError(ValueError):
    """A plan's explicit shares exceed the total budget, or leave nothing for the other queries."""


def _parts(b: Budget) -> tuple[Fraction, ...]:
    if isinstance(b, PureDP):
        return (b.epsilon,)
    if isinstance(b, ApproxDP):
        return (b.epsilon, b.delta)
    return (b.rho,)


def _like(total: Budget, parts: tuple[Fraction, ...]) -> Budget:
    if isinstance(total, ApproxDP):
        return ApproxDP(parts[0], parts[1])
    return PureDP(parts[0]) if isinstance(total, PureDP) else ZCDP(parts[0])


def _symbols(b: Budget) -> tuple[str, ...]:
    return ("ε", "δ") if isinstance(b, ApproxDP) else ("ε",) if isinstance(b, PureDP) else ("ρ",)


def _show(kind_of: Budget, parts: tuple[Fraction, ...]) -> str:
    """``parts`` written like a budget of ``kind_of``'s kind (without validating them)."""
    shown = ", ".join(
        f"{sym}={format_fraction(x)}" for sym, x in zip(_symbols(kind_of), parts, strict=True)
    )
    return f"({shown})" if len(parts) > 1 else shown


def _in_kind_of(total: Budget, share: Budget, name: str) -> Budget:
    """``share`` as counted against ``total``: same kind, or PureDP embedded exactly."""
    require_budget(share, f"the share of query {name!r}")
    if type(share) is type(total):
        return share
    if isinstance(share, PureDP) and isinstance(total, ZCDP):
        return pure_to_zcdp(share)
    if isinstance(share, PureDP) and isinstance(total, ApproxDP):
        return pure_to_approx(share)
    hint = {
        (ZCDP, ApproxDP): "state it as ApproxDP; zcdp_to_approx(share, delta) gives its cost",
        (ApproxDP, ZCDP): "state the total as ApproxDP, or give this query a ZCDP share",
    }.get((type(share), type(total)), f"state the share as {type(total).__name__}")
    raise TypeError(
        f"query {name!r} has a {type(share).__name__} share {share} but the total is "
        f"{type(total).__name__} {total}; shares must be of the total's kind "
        f"(a PureDP share is accepted in any total): {hint}"
    )


def split_budget(total: Budget, shares: Mapping[str, Budget | None]) -> dict[str, Budget]:
    """Each query's budget: its explicit share, or an equal part of what the explicit shares leave.

    Computed from the plan alone, before any data is read, so it reveals nothing about the data.
    The shares compose to at most ``total`` by :func:`compose` (basic composition).

    * A query mapped to a budget gets exactly that budget, returned as given. It must be of the
      total's kind, except that a PureDP share is accepted in a ZCDP total (counted as ε²/2, exact,
      BS16 Prop. 1.4) or in an ApproxDP total (counted as (ε, 0)): a Laplace query inside a
      Gaussian plan then keeps its exact ε instead of an irrational √(2ρ).
    * Queries mapped to ``None`` split the remainder evenly, every component (ε and δ for
      ApproxDP) divided exactly; they get budgets of the total's kind. An ApproxDP remainder with
      ε > 0 but δ = 0 is allowed: it suits pure-DP mechanisms.

    Raises :class:`BudgetExceededError` when the explicit shares exceed the total in any component,
    or leave ε (or ρ) = 0 for the queries mapped to ``None``; the message lists every query.
    ``ValueError`` for an empty plan, ``TypeError`` for a share of the wrong kind.
    """
    require_budget(total, "the total budget")
    if not shares:
        raise ValueError(f"the plan has no queries: nothing to split the total {total} over")
    spent = tuple(Fraction(0) for _ in _parts(total))
    for name, share in shares.items():
        if share is not None:
            counted = _parts(_in_kind_of(total, share, name))
            spent = tuple(s + p for s, p in zip(spent, counted, strict=True))
    rest = [name for name, share in shares.items() if share is None]
    left = tuple(t - s for t, s in zip(_parts(total), spent, strict=True))
    if any(x < 0 for x in left) or (rest and left[0] == 0):
        raise BudgetExceededError(_overspend_message(total, shares, spent, left))
    even = _like(total, tuple(x / len(rest) for x in left)) if rest else total
    return {name: share if share is not None else even for name, share in shares.items()}


def _overspend_message(
    total: Budget,
    shares: Mapping[str, Budget | None],
    spent: tuple[Fraction, ...],
    left: tuple[Fraction, ...],
) -> str:
    listing = ", ".join(
        f"{name} (gets the remainder)" if s is None else f"{name} {s}" for name, s in shares.items()
    )
    over = [
        (sym, -x, t)
        for sym, x, t in zip(_symbols(total), left, _parts(total), strict=True)
        if x < 0
    ]
    if over:
        by = ", ".join(f"{sym}={format_fraction(x)}" for sym, x, _ in over)
        head = (
            f"plan spends {_show(total, spent)} but the total is {total}: {listing} (over by {by})"
        )
    else:
        head = (
            f"plan spends {_show(total, spent)} of the total {total} and leaves nothing for the "
            f"queries without an explicit share: {listing}"
        )
    msg = f"{head}; reduce the explicit shares or raise the total"
    if over and all(x <= t * Fraction(1, 10**9) for _, x, t in over):
        msg += (
            " (the excess is tiny: a float such as 0.1 is not the decimal 0.1; "
            "pass decimal budgets as fractions.Fraction('0.1'))"
        )
    return msg
