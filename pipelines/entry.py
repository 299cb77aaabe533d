"""The ``userdp`` console script: loads the command line, which loads Beam (seconds).

A Ctrl-C while those modules load would otherwise end in a Python traceback through Beam's
import machinery; here it is the same short message and exit code 130 as an interrupted command
(:mod:`.cli`), before anything ran. This module imports nothing heavy itself.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from .cli import main as run  # noqa: PLC0415 (the slow import this guards)
    except KeyboardInterrupt:
        print("userdp: interrupted while starting; nothing ran", file=sys.stderr)
        return INTERRUPTED
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
