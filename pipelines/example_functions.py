"""Example functions for sample-and-aggregate on the browsing logs of ``userdp generate``.

Each takes one chunk as a ``pa.Table`` — every row of the chunk's persons, with the clean-table
columns ``__person__`` (string), ``timestamp`` (Unix seconds, float64 or int64) and
``duration_s`` (float64) — and returns a float. None is private on its own: they are named in a
``sample_aggregate`` query (``"userdp.pipelines.example_functions:session_duration_p90"``) and their
answers on the k person chunks are released by a private aggregator (docs/sample_aggregate.md).

A function may raise on a chunk where its answer is undefined (e.g. too few rows); the framework
then uses the query's default answer for that chunk, so these raise rather than guess.
Rows with a non-finite duration (the clean table keeps ±inf) are ignored.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

PERSON = "__person__"
TIMESTAMP = "timestamp"
DURATION = "duration_s"
SECONDS_PER_HOUR = 3600
HOURS_PER_DAY = 24
SESSION_GAP_S = 30 * 60
"""A new session starts when a person's next visit begins more than 30 minutes after the last."""

F64 = npt.NDArray[np.float64]


def _column(table: pa.Table, name: str) -> F64:
    return np.asarray(table.column(name).to_numpy(), dtype=np.float64)


def _finite_rows(table: pa.Table) -> pa.Table:
    duration = table.column(DURATION)
    return table.filter(pc.is_finite(duration))


def hour_of_day(timestamps: F64) -> F64:
    """Hour of day in UTC, 0–23, of Unix timestamps in seconds."""
    day_seconds = np.mod(np.floor(timestamps), SECONDS_PER_HOUR * HOURS_PER_DAY)
    out: F64 = np.floor(day_seconds / SECONDS_PER_HOUR)
    return out


def duration_vs_hour_slope(table: pa.Table) -> float:
    """Least-squares slope of visit duration (seconds) on hour of day (UTC): seconds per hour.

    Raises ValueError on fewer than two rows or a single hour (the slope is undefined).
    """
    t = _finite_rows(table)
    x = hour_of_day(_column(t, TIMESTAMP))
    y = _column(t, DURATION)
    if len(x) < 2:
        raise ValueError("the slope needs at least two visits")
    dx = x - x.mean()
    sxx = float(np.dot(dx, dx))
    if sxx == 0.0:
        raise ValueError("the slope needs visits in at least two hours of the day")
    return float(np.dot(dx, y - y.mean()) / sxx)


def visit_duration_p90(table: pa.Table) -> float:
    """The 90th percentile of visit duration (seconds), linear interpolation between ranks."""
    y = _column(_finite_rows(table), DURATION)
    if len(y) == 0:
        raise ValueError("the percentile needs at least one visit")
    return float(np.percentile(y, 90.0))


def session_durations(table: pa.Table) -> F64:
    """Total visit duration (seconds) of every session in the table.

    A session is a maximal run of one person's visits, in time order, in which each visit starts
    at most 30 minutes after the previous one. Needs all rows of each person in one table, which
    person chunks guarantee (row chunks would cut sessions apart).
    """
    t = _finite_rows(table)
    if t.num_rows == 0:
        return np.zeros(0, dtype=np.float64)
    person = pc.dictionary_encode(t.column(PERSON)).combine_chunks()
    codes = np.asarray(person.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    ts = _column(t, TIMESTAMP)
    duration = _column(t, DURATION)
    order = np.lexsort((ts, codes))
    codes, ts, duration = codes[order], ts[order], duration[order]
    new = np.ones(len(ts), dtype=bool)
    new[1:] = (codes[1:] != codes[:-1]) | (np.diff(ts) > SESSION_GAP_S)
    session = np.cumsum(new) - 1
    return np.asarray(np.bincount(session, weights=duration), dtype=np.float64)


def session_duration_p90(table: pa.Table) -> float:
    """The 90th percentile of session duration (seconds; see :func:`session_durations`)."""
    sessions = session_durations(table)
    if len(sessions) == 0:
        raise ValueError("the percentile needs at least one session")
    return float(np.percentile(sessions, 90.0))
