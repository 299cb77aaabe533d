"""Library messages that may quote data go to an operator-only file, never to the console.

A library's log record, warning or "exception ignored" note can quote a data value (pyarrow's CSV
errors quote the row), and whether one is emitted at all can depend on one person's rows (an
overflow warning). The console is an observable of the release, so ``userdp run`` sends all of
them to a file readable by the operator only (mode 0600, created on the first message) and says
where it is; the console gets only userdp's own sentences, which name files and kinds of faults.
Full tracebacks of failed runs go to the same file.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import traceback
import warnings
from types import TracebackType
from typing import Any, TextIO


class _LazyFileHandler(logging.Handler):
    def __init__(self, owner: PrivateLog) -> None:
        super().__init__(logging.DEBUG)
        self._owner = owner

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._owner.write(self.format(record))
        except Exception:
            self.handleError(record)


class PrivateLog:
    """Context manager: while active, logging, warnings and unraisable-exception notes go to a
    private file (``path`` once something was written)."""

    def __init__(self, directory: str | None = None) -> None:
        self._directory = directory or tempfile.gettempdir()
        self._stream: TextIO | None = None
        self.path: str | None = None
        self._saved: dict[str, Any] = {}
        self._warnings = warnings.catch_warnings()

    def write(self, text: str) -> None:
        if self._stream is None:
            fd, self.path = tempfile.mkstemp(prefix="userdp-", suffix=".log", dir=self._directory)
            os.chmod(self.path, 0o600)
            self._stream = os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")
        self._stream.write(text.rstrip("\n") + "\n")
        self._stream.flush()

    def exception(self, error: BaseException) -> None:
        """The full traceback of ``error`` (it may quote data): only into the private file."""
        self.write("".join(traceback.format_exception(error)))

    def __enter__(self) -> PrivateLog:
        root = logging.getLogger()
        self._saved = {
            "handlers": root.handlers[:],
            "level": root.level,
            "unraisable": sys.unraisablehook,
        }
        self._warnings.__enter__()  # restores the filters and showwarning on exit
        handler = _LazyFileHandler(self)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.handlers = [handler]
        root.setLevel(logging.INFO)
        logging.captureWarnings(True)
        warnings.simplefilter("default")
        sys.unraisablehook = self._unraisable
        return self

    def _unraisable(self, u: Any) -> None:
        self.write(f"exception ignored in {u.object!r}: {u.exc_type.__name__}: {u.exc_value}")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        root = logging.getLogger()
        root.handlers = self._saved["handlers"]
        root.setLevel(self._saved["level"])
        logging.captureWarnings(False)
        self._warnings.__exit__(None, None, None)
        sys.unraisablehook = self._saved["unraisable"]
        if self._stream is not None:
            self._stream.close()
