"""Library messages that may quote data go to an operator-only file, never to the console.

A library's log record, warning or "exception ignored" note can quote a data value (pyarrow's CSV
errors quote the row), and whether one is emitted at all can depend on one person's rows (an
overflow warning). The console is an observable of the release, so ``userdp run`` sends all of
them to a file readable by the operator only (mode 0600, created on the first message) and says
where it is; the console gets only userdp's own sentences, which name files and kinds of faults.
Full tracebacks of failed runs go to the same file.

With ``capture_fds`` (the command line) the process's file descriptors 1 and 2 point at the file
too while the context is active, and userdp's own ``sys.stdout``/``sys.stderr`` are reopened on
the console. What writes to the descriptors rather than through Python's streams goes to the
file: C extensions, and above all the SDK worker processes of Beam's ``multi_processing`` mode,
which inherit the launcher's descriptors and log there (the shard counts of a dead-letter write,
say, which depend on the data). The file is then created up front and removed on exit if
nothing reached it.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import traceback
import warnings
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

from .interrupts import command_finished, exit_code, terminating_as_interrupt


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

    def __init__(self, directory: str | None = None, *, capture_fds: bool = False) -> None:
        self._directory = directory or tempfile.gettempdir()
        self._stream: TextIO | None = None
        self.path: str | None = None
        self._saved: dict[str, Any] = {}
        self._warnings = warnings.catch_warnings()
        self._capture_fds = capture_fds
        self._console_fds: dict[int, int] = {}  # 1, 2 → a duplicate of the console's
        self._reopened: dict[str, tuple[TextIO, TextIO]] = {}  # name → (original, on console)

    def _open(self) -> TextIO:
        if self._stream is None:
            fd, self.path = tempfile.mkstemp(prefix="userdp-", suffix=".log", dir=self._directory)
            os.chmod(self.path, 0o600)
            self._stream = os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")
        return self._stream

    def write(self, text: str) -> None:
        stream = self._open()
        stream.write(text.rstrip("\n") + "\n")
        stream.flush()

    def _redirect(self) -> None:
        """Descriptors 1 and 2 → the file; the console's own Python streams reopened on copies
        of the console descriptors (a test harness's replacement streams are left alone)."""
        target = self._open().fileno()
        for fd, name in ((1, "stdout"), (2, "stderr")):
            current = getattr(sys, name)
            if current is not None:
                current.flush()
            self._console_fds[fd] = os.dup(fd)
            if current is not None and current is getattr(sys, f"__{name}__"):
                console = os.fdopen(
                    os.dup(self._console_fds[fd]), "w", buffering=1,
                    encoding=current.encoding, errors=current.errors,
                )  # fmt: skip
                self._reopened[name] = (current, console)
                setattr(sys, name, console)
            os.dup2(target, fd)

    def _restore(self) -> None:
        for name, (original, console) in self._reopened.items():
            console.flush()
            setattr(sys, name, original)
            console.close()
        self._reopened.clear()
        for fd, saved in self._console_fds.items():
            os.dup2(saved, fd)
            os.close(saved)
        self._console_fds.clear()

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
        if self._capture_fds:
            self._redirect()
        return self

    def _unraisable(self, u: Any) -> None:
        self.write(f"exception ignored in {u.object!r}: {u.exc_type.__name__}: {u.exc_value}")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._restore()
        root = logging.getLogger()
        root.handlers = self._saved["handlers"]
        root.setLevel(self._saved["level"])
        logging.captureWarnings(False)
        self._warnings.__exit__(None, None, None)
        sys.unraisablehook = self._saved["unraisable"]
        if self._stream is not None:
            self._stream.close()
            if self.path is not None and os.path.getsize(self.path) == 0:
                os.remove(self.path)  # made up front for the descriptors, and nothing came
                self.path = None


def logged_command(name: str, body: Callable[[PrivateLog], int]) -> int:
    """Runs a command that reads the data (``userdp run``, ``userdp tune``): SIGTERM as Ctrl-C,
    file descriptors 1 and 2 to the operator-only log while ``body(log)`` runs, and the log's
    path said at the end. ``body`` handles its own interrupts once loaded; one that comes before
    (while Beam loads) is exit 130/143 with one line."""
    with terminating_as_interrupt(), PrivateLog(capture_fds=True) as log:
        try:
            code = body(log)
        except KeyboardInterrupt as e:
            print(f"userdp {name}: interrupted while starting; nothing ran", file=sys.stderr)
            code = exit_code(e)
        command_finished(code)
    if log.path is not None:
        print(
            f"userdp {name}: library messages and details (they may quote private data; for "
            f"the operator only) are in {log.path}",
            file=sys.stderr,
        )
    return code
