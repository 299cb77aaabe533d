"""Ctrl-C and SIGTERM during a release: what the launcher raises, and how the CLI tells them.

A scheduler stops a job with SIGTERM; :func:`terminating_as_interrupt` turns it into a
:class:`Terminated` (a KeyboardInterrupt) in the main thread, so the run is cleaned up the way
Ctrl-C cleans it up — staged outputs discarded, the charge taken back when nothing was published
— instead of vanishing mid-step. Once cleaned up, ``pipelines/job.py`` raises
:class:`RunInterrupted`, which says when the run stopped and what became of its charge. Beam
re-raises an interrupt that lands inside a step as its own RuntimeError, so both are looked for
along the exception's cause chain (:func:`caused_by`).

Once a command's work is done — published and recorded, its exit code known — a SIGTERM has
nothing left to stop: :func:`command_finished` makes it a note on stderr, and in the console
script the process then exits at once with the command's own code (:func:`_exit_with`); after
the command returns, the console script ends the process itself (``entry.console``), since
Python runs no signal handler while the interpreter shuts down. Before, it killed the process
with exit code 143 and no message, so a scheduler read a published, charged release as
interrupted (and retried it: a new charge, without a fixed release id).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C or SIGTERM after its checks, cleaned up: ``when`` it stopped, and
    ``charge`` as for ``job.ReleaseRunError`` (``partial``: no ledger, and publishing had begun)."""

    def __init__(self, when: str, charge: str, release_id: str | None) -> None:
        super().__init__(when)
        self.when, self.charge, self.release_id = when, charge, release_id


def caused_by(e: BaseException | None, kind: type[BaseException]) -> bool:
    """Whether ``e`` is a ``kind``, or was caused by one (``__cause__``/``__context__``)."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, kind):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def exit_code(e: BaseException) -> int:
    """128 + the signal's number, as shells report a process a signal stopped."""
    return 128 + (signal.SIGTERM if caused_by(e, Terminated) else signal.SIGINT)


_finished: list[int] = []  # the running command's exit code, once its work is done
_console: list[bool] = []  # set by the console script: the process ends with its command


def _finished_note(code: int) -> str:
    return f"userdp: SIGTERM after the command had finished; its exit code {code} stands"


def _raise_terminated(signum: int, frame: Any) -> None:
    if _finished:
        print(_finished_note(_finished[-1]), file=sys.stderr)
        return
    raise Terminated()


def _exit_with(code: int) -> Callable[[int, Any], None]:
    def stop(signum: int, frame: Any) -> None:
        with contextlib.suppress(Exception):  # a closed stderr must not keep the process alive
            print(_finished_note(code), file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)  # the work is done: no shutdown (Beam's can hang) to wait for

    return stop


def command_finished(code: int) -> None:
    """The running command's work is done and ``code`` is its exit code: a SIGTERM from now on
    prints a note instead of interrupting, and in the console script
    (:func:`ending_with_the_command`) ends the process with ``code`` once the block has ended."""
    _finished.append(code)


@contextlib.contextmanager
def ending_with_the_command(console: bool) -> Iterator[None]:
    """The command runs in this block; ``console``: in the console script, whose process ends
    with the command (``entry.console``), so a SIGTERM after the command finished, until the
    process exits, notes it and exits with the command's code. Library callers pass False and
    keep their handlers."""
    if console:
        _console.append(True)
    try:
        yield
    finally:
        _console.clear()


@contextlib.contextmanager
def terminating_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` while the block runs (until :func:`command_finished`);
    the previous handler is put back after. Only the main thread may set handlers: elsewhere the
    block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    _finished.clear()
    try:
        yield
    finally:  # None: a handler set outside Python, which cannot be put back
        if _finished and _console:  # no gap until the console script's own handler
            signal.signal(signal.SIGTERM, _exit_with(_finished[-1]))
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        _finished.clear()


_HELD = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def interrupts_held(note: str) -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block ends, then reach the handlers they would have
    reached (re-raised with :func:`signal.raise_signal`), so nothing stops a step between two
    things that must happen together: the ledger's commit of a charge and the caller's record
    of it, without which the clean-up cannot take the charge back. A signal that arrives while
    held prints ``note`` (say what is being finished) on stderr; a second one is delivered at
    once, for an operator who will not wait (a ledger lock can hold the block for a minute).
    When the block raises, a held signal is dropped: the run stops with that error, whose exit
    code and message say more than "interrupted" would.

    Main thread only (elsewhere the block runs unchanged); a signal that is ignored, or whose
    handler was set outside Python, is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: h for s in _HELD if (h := signal.getsignal(s)) not in (None, signal.SIG_IGN)}
    pending: list[int] = []  # the first signal held; a second one is delivered at once

    def restore() -> None:
        for s, handler in previous.items():
            signal.signal(s, handler)

    def hold(signum: int, frame: Any) -> None:
        if pending:
            pending.clear()
            restore()
            signal.raise_signal(signum)
            return
        pending.append(signum)
        # a closed or busy stderr must not break the step being protected
        with contextlib.suppress(Exception):
            sys.stderr.write(f"userdp: {note} before stopping (a second interrupt stops now)\n")

    for s in previous:
        signal.signal(s, hold)
    try:
        yield
    except BaseException:
        restore()
        raise
    restore()
    if pending:
        signal.raise_signal(pending[0])
