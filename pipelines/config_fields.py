"""Validation helpers for the job file: :class:`ConfigError` and the key-by-key validator.

Every check names the key path (``queries[1].bounds``), the value as written, what is allowed and a
hint. Query kinds (``pipelines/kinds/``) use the same :class:`Validator` for their own keys, so
every error in a job file reads the same way.
"""

from __future__ import annotations

import datetime
import difflib
import math
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from .config import BudgetConfig


_BOUNDS = (
    "[lower, upper], finite numbers with lower < upper",
    "values are clamped to these public bounds; choose them without looking at the data",
)
PARTITIONS_WITHOUT_BY = (
    "no partitions for a query without `by`",
    "remove `partitions` or add `by`",
)
_DELTA_WITHOUT_TOTAL = (
    "no delta share: the total has no delta",
    "give the total a delta first (job file: [budget] delta; library: Budget(..., delta=...))",
)
_DELTA_WITHOUT_EPS = (
    "an epsilon share next to the delta share",
    "an explicit (ε, δ) share states both; omit both to take an even share",
)
_DELTA_NOT_SPENT = (
    "a delta share only on a query that spends δ (private partitions or an (ε, δ) mechanism)",
    "under rho, delta is spent only by private partition selection and (ε, δ) mechanisms",
)
_DELTA_NOT_SPENT_UNDER_EPSILON = (
    "a delta share only on a query that spends δ (private partitions, gaussian noise or an "
    "(ε, δ) mechanism)",
    "this query is pure ε-DP: remove its delta (the budget's δ goes to the queries that spend it)",
)


class ConfigError(ValueError):
    """A job file that cannot be run: names the key path, the value, what is allowed, a hint."""

    def __init__(
        self, key: str, value: object, allowed: str, hint: str = "", source: str = ""
    ) -> None:
        self.key, self.value, self.allowed, self.hint, self.source = (
            key,
            value,
            allowed,
            hint,
            source,
        )
        msg = f"{source}: " * bool(source) + f"{key} = {_as_written(value)}: expected {allowed}"
        super().__init__(f"{msg}. {hint}" if hint else msg)


def _as_written(value: object) -> str:
    """A value as the job file wrote it, not as Python holds it: an exact decimal (a Fraction)
    as its float, a TOML date or time as TOML writes it (``Fraction(3, 2)`` and
    ``datetime.date(1979, 5, 27)`` meant nothing to the job file's author)."""
    if isinstance(value, Fraction):
        try:
            return repr(float(value))
        except OverflowError:
            return str(value)
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return f"{value.isoformat()} (a TOML date or time)"
    return repr(value)


MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "(missing)"})()
MAX_INTEGER = 2**53  # Validator.integer's cap
EXACT_BITS = 1100
"""An exact number's denominator stays below 2^1100 (~330 digits): every float fits (a float's
is at most 2^1074), and every decimal of up to 17 significant digits not below ~1e-313, while
δ = 1e-20000 or ε written with thousands of digits made the exact rules built from them —
selection tables, thresholds, their manifest entries — grow until planning took minutes or
failed on printing. (Numerators are left to each key's range check: a budget is at most 1,000,
a grid's top below 1.8e308.)"""
TOO_EXACT = (
    "an exact number written with hundreds of digits, or below ~1e-330, grows the arithmetic "
    "built from it until planning hangs; round it (a budget down: a smaller ε or δ is always safe)"
)


def is_modest_fraction(f: Fraction) -> bool:
    """Is f's denominator below 2^EXACT_BITS?"""
    return f.denominator.bit_length() <= EXACT_BITS


_CONTRIBUTION_HINT = (
    "a contribution bound: choose it from what one person plausibly contributes, not from the data"
)


def is_num(x: object) -> bool:
    return isinstance(x, (int, float, Fraction)) and not isinstance(x, bool)


def finite_float(x: object) -> float:
    """``x`` as a float, or NaN when it is not a number or no finite float holds it (a TOML
    integer of 400 digits: float() raised OverflowError, a traceback instead of exit 2)."""
    if not is_num(x):
        return math.nan
    try:
        f = float(x)  # type: ignore[arg-type]
    except OverflowError:
        return math.nan
    return f if math.isfinite(f) else math.nan


class _Table:
    """How a whole TOML table is shown in an error: by its keys, not as a Python dict."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys

    def __repr__(self) -> str:
        return f"a table with keys {', '.join(self.keys)}" if self.keys else "an empty table"


def shown(x: Any) -> Any:
    """Values as written: exact Fractions back to the floats they came from; a table by its keys."""
    if isinstance(x, list):
        return [shown(e) for e in x]
    if isinstance(x, Mapping):
        return _Table([str(k) for k in x])
    return float(x) if isinstance(x, Fraction) else x


class Validator:
    def __init__(self, source: str, base_dir: Path) -> None:
        self.source, self.base_dir = source, base_dir

    def fail(self, key: str, value: object, allowed: str, hint: str) -> NoReturn:
        raise ConfigError(key, shown(value), allowed, hint, self.source)

    def keys(self, table: Mapping[str, Any], prefix: str, allowed: tuple[str, ...]) -> None:
        for key in table:
            if key not in allowed:
                near = difflib.get_close_matches(str(key), allowed, n=1)
                self.fail(
                    f"{prefix}{key}",
                    table[key],
                    f"one of the keys {', '.join(allowed)}",
                    f"unknown key (did you mean {near[0]!r}?)" if near else "unknown key (a typo?)",
                )

    def table(self, raw: Mapping[str, Any], key: str, *, required: bool) -> Mapping[str, Any]:
        t = raw.get(key, MISSING)
        if t is MISSING and not required:
            return {}
        if not isinstance(t, Mapping):
            self.fail(key, t, f"a [{key}] table", "see examples/browsing_job.toml")
        return t

    def string(self, t: Mapping[str, Any], key: str, *, required: bool = True) -> Any:
        x = t.get(key.rsplit(".", 1)[-1], MISSING)
        if x is MISSING and not required:
            return None
        if not isinstance(x, str) or not x:
            self.fail(key, x, "a non-empty string", "")
        if "\x00" in x:  # no path, column or name holds one (os calls refuse it with a traceback)
            self.fail(key, x, "a string without NUL characters", "")
        return x

    def choice(
        self, t: Mapping[str, Any], key: str, allowed: tuple[str, ...], default: Any = MISSING
    ) -> Any:
        x = t.get(key.rsplit(".", 1)[-1], default)
        if x not in allowed and not (x is default and default is not MISSING):
            self.fail(key, x, f"one of {', '.join(allowed)}", "")
        return x

    def integer(
        self,
        t: Mapping[str, Any],
        key: str,
        *,
        required: bool,
        default: int,
        maximum: int = MAX_INTEGER,
        hint: str = _CONTRIBUTION_HINT,
    ) -> int:
        """A count-like setting in [1, ``maximum``]: contribution bounds L and C (at most 2^53 by
        default), grid bits, shards. The cap keeps every product the bounding steps form in
        int64 and exact in a float (a C of 2^63 passed the check and then overflowed on a
        worker, and only when a person's rows reached the step — a failure that depended on the
        data)."""
        x = t.get(key.rsplit(".", 1)[-1], MISSING)
        if x is MISSING and not required:
            return default
        if isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= maximum:
            top = "2^53" if maximum == MAX_INTEGER else str(maximum)
            self.fail(key, x, f"an integer in [1, {top}]", hint)
        return int(x)

    def number(
        self,
        t: Mapping[str, Any],
        key: str,
        *,
        positive: bool = False,
        below_one: bool = False,
        hint: str = "",
    ) -> Fraction | None:
        """An exact decimal (a float's shortest repr as a Fraction; an int, Fraction or finite
        ``Decimal`` as it is); ``hint`` says what it is (default: a budget's)."""
        x = t.get(key.rsplit(".", 1)[-1], MISSING)
        if x is MISSING:
            return None
        f = Fraction(repr(x)) if isinstance(x, float) and math.isfinite(x) else x
        if isinstance(x, Decimal) and x.is_finite():  # the library's exact decimals, as they are
            f = Fraction(x)
        ok = is_num(f) and not isinstance(f, float)
        if ok and positive and not f > 0:
            ok = False
        if ok and below_one and not 0 <= f < 1:
            ok = False
        if not ok:
            allowed = "a finite number > 0"
            if below_one:
                allowed = "a number in (0, 1)" if positive else "a number in [0, 1)"
            self.fail(key, x, allowed, hint or "budgets are exact decimals, e.g. 1.0 or 1e-6")
        exact = Fraction(f)
        if not is_modest_fraction(exact):
            self.fail(key, _abbreviated(x), f"a number of at most ~330 digits (2^{EXACT_BITS})",
                      TOO_EXACT)  # fmt: skip
        return exact

    def resolve(self, path: str) -> str:
        """A job file's path: relative ones from the job file's directory; ``file://`` is a local
        path (Beam's filesystems serve no ``file://``: an output there failed as a "bug")."""
        path = path.removeprefix("file://")
        if "://" in path or Path(path).is_absolute():
            return path
        resolved = str(self.base_dir / path)
        return resolved + "/" if path.endswith("/") and not resolved.endswith("/") else resolved


# Rules shared by every query kind.


def parse_by(v: Validator, q: Mapping[str, Any], k: str) -> list[str]:
    """``by``: a column name or a list of distinct column names (default: no partitions)."""
    by = q.get("by", [])
    if isinstance(by, str):
        by = [by]
    if not isinstance(by, list) or not all(isinstance(c, str) and c for c in by):
        v.fail(f"{k}.by", by, "a list of column names", 'e.g. by = ["domain"]')
    if len(set(by)) != len(by):
        v.fail(f"{k}.by", by, "distinct column names", "remove the repeated column")
    return list(by)


def parse_bounds(
    v: Validator, q: Mapping[str, Any], k: str, *, required: bool, metric: str
) -> tuple[float, float] | None:
    """``bounds = [lower, upper]``: finite, lower < upper; None when absent and not required."""
    raw = q.get("bounds", MISSING)
    if raw is MISSING:
        if required:
            v.fail(
                f"{k}.bounds",
                raw,
                "[lower, upper], finite numbers with lower < upper",
                f"metric {metric!r} clamps each value to its bounds",
            )
        return None
    ok = isinstance(raw, list) and len(raw) == 2
    lo, hi = (finite_float(raw[0]), finite_float(raw[1])) if ok else (math.nan, math.nan)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        v.fail(f"{k}.bounds", shown(raw), *_BOUNDS)
    return lo, hi


def parse_partitions(v: Validator, q: Mapping[str, Any], k: str, by: list[str]) -> str | None:
    """``partitions``: "private" (the default with ``by``) or a path to public keys."""
    raw = q.get("partitions", MISSING)
    if not by:
        if raw is not MISSING:
            v.fail(f"{k}.partitions", raw, *PARTITIONS_WITHOUT_BY)
        return None
    if raw is MISSING:
        return "private"
    if not isinstance(raw, str) or not raw:
        v.fail(f"{k}.partitions", raw, '"private" or a path to a CSV/JSON file of public keys', "")
    return str(raw)


# (key, value, what is allowed, hint): the error to raise when a query needs δ and has none.
DeltaNeed = tuple[str, object, str, str]


def parse_shares(
    v: Validator,
    q: Mapping[str, Any],
    k: str,
    b: BudgetConfig,
    *,
    spends_delta: DeltaNeed | None,
    delta_under_epsilon: DeltaNeed | None = None,
) -> tuple[Fraction | None, Fraction | None, Fraction | None]:
    """A query's optional explicit share (epsilon, delta, rho), checked against the total.

    ``spends_delta``: the query spends δ under any total (private selection, an (ε, δ)
    mechanism) — the error to raise when it would get none. ``delta_under_epsilon``: it needs δ
    only under an epsilon total (Gaussian noise: under rho it is plain ρ-zCDP).
    """
    eps = v.number(q, f"{k}.epsilon", positive=True)
    rho = v.number(q, f"{k}.rho", positive=True)
    delta = v.number(q, f"{k}.delta", below_one=True)
    kind = "rho (+ delta)" if b.rho is not None else "epsilon" + (" (+ delta)" if b.delta else "")
    if (b.rho is not None and eps is not None) or (b.epsilon is not None and rho is not None):
        key = f"{k}.epsilon" if eps is not None else f"{k}.rho"
        v.fail(
            key,
            eps if eps is not None else rho,
            f"shares of the total's kind: {kind}",
            "a query's share is stated like the total ([budget] in a job file, Budget in the "
            "library)",
        )
    if delta is not None and not b.delta:
        v.fail(f"{k}.delta", delta, *_DELTA_WITHOUT_TOTAL)
    if b.epsilon is not None and delta is not None and eps is None:
        v.fail(f"{k}.epsilon", MISSING, *_DELTA_WITHOUT_EPS)
    if b.rho is not None and delta is not None and spends_delta is None:
        v.fail(f"{k}.delta", delta, *_DELTA_NOT_SPENT)
    spends_under_epsilon = spends_delta is not None or delta_under_epsilon is not None
    if b.rho is None and delta and not spends_under_epsilon:  # delta = 0 states the obvious
        v.fail(f"{k}.delta", delta, *_DELTA_NOT_SPENT_UNDER_EPSILON)
    no_delta = not b.delta or (b.epsilon is not None and eps is not None and not delta)
    if spends_delta is not None and no_delta:
        v.fail(*spends_delta)
    if delta_under_epsilon is not None and b.rho is None and no_delta:
        v.fail(*delta_under_epsilon)
    return eps, delta, rho


def _abbreviated(x: object) -> object:
    """A number too long to print whole (str() of a 5,000-digit int fails): its first characters.
    A job file's exact Fraction is shown as its float (:func:`shown`)."""
    if isinstance(x, Fraction):
        return x
    text = repr(x) if not isinstance(x, int) or x.bit_length() < 4000 else "a huge integer"
    return text if len(text) <= 60 else text[:40] + f"… ({len(text):,} characters)"
