"""``transforms.quiet.quiet``: silence for user code, counted across threads.

A save-and-restore per call left a worker silent for good when two threads' calls interleaved
(A in, B in, A out, B out: B restored A's silence; a review found it with logging.disable)."""

from __future__ import annotations

import logging
import sys
import threading
import warnings

import pytest

from userdp.transforms.quiet import quiet


def test_interleaved_calls_in_two_threads_restore_every_switch() -> None:
    before = (sys.stdout, sys.stderr, logging.root.manager.disable, list(warnings.filters))
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def a() -> None:
        with quiet():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b() -> None:
        a_in.wait(5)
        with quiet():
            b_in.set()
            a_out.wait(5)  # A leaves first: B is the last one out

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    after = (sys.stdout, sys.stderr, logging.root.manager.disable, list(warnings.filters))
    assert after == before


def test_inside_nothing_is_printed_warned_or_logged(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        with quiet():
            print("a row")
            warnings.warn("a warning", UserWarning, stacklevel=1)  # an error outside: filtered
            logging.getLogger("mylib").error("a row")
        logging.getLogger("mylib").error("after")
    assert capsys.readouterr() == ("", "")
    assert [r.getMessage() for r in caplog.records] == ["after"]


def test_an_exception_inside_still_restores() -> None:
    before = (sys.stdout, logging.root.manager.disable)
    with pytest.raises(SystemExit, match=r"^1$"), quiet():
        raise SystemExit(1)
    assert (sys.stdout, logging.root.manager.disable) == before
