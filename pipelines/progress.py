"""What a long release is doing: the launcher's stage and the time since it started.

``userdp run`` prints one line per stage to stderr — checking, charging, the pipeline (with a
"still running" line every ``heartbeat_s`` seconds while Beam works), checking the outputs,
publishing — each with the seconds since the run began. Only public facts appear: the job file's
settings, the runner, and file counts (the input listing the job file's glob names, and the output
files the job file fixes). Never a count of rows, persons or partitions, nor the input's size in
bytes: those depend on the data.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

HEARTBEAT_S = 30.0


class Progress:
    """Stage lines on ``out`` (None: silent, as for the library and tests)."""

    def __init__(
        self,
        out: TextIO | None,
        heartbeat_s: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._out, self._heartbeat_s, self._clock = out, heartbeat_s, clock
        self._start = clock()
        self._lock = threading.Lock()

    def stage(self, text: str) -> None:
        if self._out is None:
            return
        with self._lock:
            self._out.write(f"[{self._clock() - self._start:7.1f} s] {text}\n")
            self._out.flush()

    @contextmanager
    def running(self, text: str) -> Iterator[None]:
        """``text`` now; "still …" every heartbeat until the block ends; then how long it took."""
        self.stage(text + " …")
        began, done = self._clock(), threading.Event()

        def beat() -> None:
            while not done.wait(self._heartbeat_s):
                self.stage(f"still {text} ({self._clock() - began:.0f} s)")

        beater = threading.Thread(target=beat, name="userdp-progress", daemon=True)
        if self._out is not None:
            beater.start()
        try:
            yield
        finally:
            done.set()
            if beater.is_alive():
                beater.join()
        self.stage(f"{text}: done in {self._clock() - began:.1f} s")
