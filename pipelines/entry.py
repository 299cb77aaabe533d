"""The ``userdp`` console script: loads the command line, which loads Beam (seconds).

A Ctrl-C while those modules load would otherwise end in a Python traceback through Beam's
import machinery; here it is the same short message and exit code 130 as an interrupted command
(:mod:`.cli`), before anything ran. A reader that closes stdout early (``userdp plan JOB | head``)
ends the command with exit code 141, as a shell's SIGPIPE would, not a traceback. This module
imports nothing heavy itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

INTERRUPTED = 130
STDOUT_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from .cli import main as run  # noqa: PLC0415 (the slow import this guards)
    except KeyboardInterrupt:
        print("userdp: interrupted while starting; nothing ran", file=sys.stderr)
        return INTERRUPTED
    try:
        code = run(argv)
        sys.stdout.flush()  # here, not at exit, so a closed pipe is caught here
    except BrokenPipeError:
        silence_stdout()
        return STDOUT_CLOSED
    return code


def silence_stdout() -> None:
    """Points stdout at /dev/null once its reader has gone, so that nothing more — not even
    Python's flush at exit — fails writing to it."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
