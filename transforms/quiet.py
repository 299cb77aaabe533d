"""Silence for user code that runs on the data: its prints, warnings and log records dropped.

A chunk function (sample-and-aggregate) runs on a person's rows; anything it prints, warns or
logs appears only when those rows are there, so it must not reach the worker's output. Python's
switches for these — ``sys.stdout``/``sys.stderr``, the warnings filters, ``logging.disable`` —
are process-wide, and Beam runs bundles in several threads: a plain save-and-restore per call
could interleave (A saves, B saves A's silence, A restores, B restores the silence) and leave
the worker silent for good, the operator's own errors included. :func:`quiet` counts the
threads inside: the first one in switches output off, the last one out switches it back.
While any call is inside, other threads' Python-level output is dropped too; it only ever
removes output. Output written below Python, to the file descriptors, is not caught.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()
_inside = [0]  # threads inside quiet(), under _lock
_saved: dict[str, Any] = {}  # what the first one in switched off


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Drops prints, warnings and log records while the block runs (module docstring)."""
    with _lock:
        if _inside[0] == 0:
            caught = warnings.catch_warnings()
            caught.__enter__()
            warnings.simplefilter("ignore")
            _saved.update(
                stdout=sys.stdout,
                stderr=sys.stderr,
                disable=logging.root.manager.disable,
                warnings=caught,
            )
            sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
            logging.disable(logging.CRITICAL)
        _inside[0] += 1
    try:
        yield
    finally:
        with _lock:
            _inside[0] -= 1
            if _inside[0] == 0:
                sys.stdout, sys.stderr = _saved["stdout"], _saved["stderr"]
                logging.disable(_saved["disable"])
                _saved["warnings"].__exit__(None, None, None)
                _saved.clear()
