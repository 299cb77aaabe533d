"""The ``userdp`` console script: loads the command line, which loads Beam (seconds).

A Ctrl-C while those modules load would otherwise end in a Python traceback through Beam's
import machinery; here it is the same short message and exit code 130 as an interrupted command
(:mod:`.cli`), before anything ran. A reader that closes stdout early (``userdp plan JOB | head``)
ends the command with exit code 141, as a shell's SIGPIPE would, not a traceback. This module
imports nothing heavy itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import sys
from collections.abc import Callable, Sequence

INTERRUPTED = 130
STDOUT_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away


def console() -> None:
    """The ``userdp`` console script: :func:`main`, then the process ends at once with its code.

    Once the command has returned, its work is published and recorded and its files closed;
    what is left is Beam's and the interpreter's shutdown, a fraction of a second in which
    Python no longer runs signal handlers, so a scheduler's SIGTERM there ended a finished,
    charged release with exit 143 and no message (an audit; a review). So the process does not
    wait for it: stdout and stderr are flushed, logging shut down, and ``os._exit`` ends it.
    Library callers use :func:`main`, which leaves the process alone."""
    code = main(sys.argv[1:], console_process=True)
    with contextlib.suppress(Exception):
        logging.shutdown()
        flush_stdout()
        sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None, *, console_process: bool = False) -> int:
    try:
        from .cli import main as run  # noqa: PLC0415 (the slow import this guards)
        from .interrupts import ending_with_the_command  # noqa: PLC0415 (loaded by .cli)
    except KeyboardInterrupt:
        print("userdp: interrupted while starting; nothing ran", file=sys.stderr)
        return INTERRUPTED
    try:
        with ending_with_the_command(console_process):
            code = run(argv)
        flush_stdout()  # here, not at exit, so that a closed pipe is caught here
    except BrokenPipeError:
        if not stdout_gone():  # another pipe (an output FIFO, say): a failure like any other
            raise
        silence_stdout()
        return STDOUT_CLOSED
    return code


def print_summary(show: Callable[[], None], command: str, done: str) -> None:
    """Prints a finished command's summary (``show``). Its work is done — published, charged —
    so a reader that went away only loses the summary: one line on stderr says what ``done``
    and the command goes on to exit 0 (a scheduler retrying a nonzero exit would spend again)."""
    try:
        show()
        flush_stdout()
    except BrokenPipeError:
        if not stdout_gone():
            raise
        silence_stdout()
        print(f"userdp {command}: {done}; stdout was closed before the summary", file=sys.stderr)


def flush_stdout() -> None:
    if sys.stdout is not None:  # None when the command started with stdout closed (>&-)
        sys.stdout.flush()


def stdout_gone() -> bool:
    """Is stdout a pipe or socket whose reader has gone (POLLERR / POLLHUP on its descriptor)?"""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return False
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))


def silence_stdout() -> None:
    """Points stdout at /dev/null once its reader has gone, so that nothing more — not even
    Python's flush at exit — fails writing to it."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


if __name__ == "__main__":
    console()
