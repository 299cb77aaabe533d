"""Issue 13: no input file, key file or row makes ``userdp run`` crash, hang, print private data
or burn budget. Every case of :mod:`tests.pipelines.malformed_corpus` runs and is held to this:

- exit 0 or 2 (the case says which), never 1, no traceback, no hang (in-process runs have a
  deadline; FIFO and byte-mutation cases run in a child process with a timeout);
- the case's canary is never in stdout, stderr or any file of the release directory;
- exit 2: the message names the file (and the column, where there is one) in a few lines, and the
  ledger's spend is unchanged;
- exit 0 with row faults: each bad row is a dead letter with a reason, naming its file; with noise
  off (the ``run_release`` test hook) the released count equals the good rows exactly;
- after any run, no ``beam-temp-*`` folder in the dead-letter or the output directory.

A failure lists every broken clause of the case. ``small`` is the fast tier; ``full`` (hundreds of
cases, minutes) runs with ``make fuzz`` (marker ``slow_fuzz``).
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.pipelines.malformed_corpus import SCOPE, Case, Planted, full_cases, small_cases
from userdp.pipelines.cli import main
from userdp.pipelines.config import load_job
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

KEY = ReleaseKey(bytes(range(32)))
TRACEBACK = "Traceback (most recent call last)"
DEADLINE_S = 300  # an in-process run that takes longer is a hang
SUBPROCESS_TIMEOUT_S = {"subprocess": 120, "nodac": 180}
FIFO_TIMEOUT_S = 60
MAX_MESSAGE_LINES = 4  # "one-line-ish": the error, and the line naming the operator's log
PROGRESS = re.compile(r"\[ *\d+\.\d s\] ")  # `userdp run`'s stage lines (pipelines/progress.py)
# Root ignores file permissions; a child process without these capabilities does not.
NO_DAC = "--bounding-set=-dac_override,-dac_read_search,-fowner"

SMALL = small_cases()
FULL = full_cases()


@dataclass
class Run:
    code: int | None
    out: str
    err: str
    cwd: Path
    escaped: str | None = None  # an exception that escaped main (type and traceback)
    hung: bool = False


class _Hang(BaseException):
    """Raised in the test process when an in-process run passes its deadline."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise _Hang()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _cli_quiet(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue() + err.getvalue()


def _set_cap(ledger: Path) -> None:
    code, text = _cli_quiet(
        ["ledger", "set-cap", "--ledger", str(ledger), "--scope", SCOPE,
         "--epsilon", "1000", "--delta", "1/2"]
    )  # fmt: skip
    assert code == 0, text


def _spent(ledger: Path) -> tuple[str, str]:
    code, text = _cli_quiet(["ledger", "show", "--ledger", str(ledger), "--scope", SCOPE, "--json"])
    assert code == 0, text
    spent = json.loads(text)[0]["spent"]
    return spent["epsilon_exact"], spent["delta_exact"]


def _release_status(ledger: Path, release_id: str) -> str | None:
    code, text = _cli_quiet(
        ["ledger", "history", "--ledger", str(ledger), "--scope", SCOPE, "--json"]
    )
    if code != 0:
        return None
    return next((r["status"] for r in json.loads(text) if r["release_id"] == release_id), None)


class _Stderr(logging.Handler):
    """What a real ``userdp run`` process would also print to stderr, but an in-process run under
    pytest does not: log records of level WARNING and above (Python's last-resort handler prints
    them), warnings, and "Exception ignored" notes of unraisable exceptions. Inside ``userdp
    run``'s own redirection (its operator log) none of these reach here."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def unraisable(self, u: Any) -> None:
        text = "".join(traceback.format_exception(u.exc_type, u.exc_value, u.exc_traceback))
        self.lines.append(f"Exception ignored in: {u.object!r}\n{text}")


@contextlib.contextmanager
def _like_a_process() -> Iterator[_Stderr]:
    sink = _Stderr()
    root = logging.getLogger()
    hook = sys.unraisablehook
    root.addHandler(sink)
    sys.unraisablehook = sink.unraisable
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            try:
                yield sink
            finally:
                gc.collect()  # unraisable exceptions of objects the run dropped
                sink.lines += [str(warnings.formatwarning(w.message, w.category, w.filename,
                                                          w.lineno)) for w in caught]  # fmt: skip
    finally:
        sys.unraisablehook = hook
        root.removeHandler(sink)


def _run_in_process(job: Path, cwd: Path, capfd: pytest.CaptureFixture[str]) -> Run:
    capfd.readouterr()
    before = os.getcwd()
    escaped, hung, code = None, False, None
    os.chdir(cwd)
    try:
        with _like_a_process() as sink, _deadline(DEADLINE_S):
            code = main(["run", str(job)])
    except _Hang:
        hung = True
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException as e:
        code = 1
        escaped = "".join(traceback.format_exception(e))  # a process would print it to stderr
    finally:
        os.chdir(before)
    out, err = capfd.readouterr()
    err += "".join(line + "\n" for line in sink.lines) + (escaped or "")
    return Run(code, out, err, cwd, escaped, hung)


def _run_child(job: Path, cwd: Path, planted: Planted, runner: str, fifo: bool) -> Run:
    cmd = [sys.executable, "-m", "userdp.pipelines.cli", "run", str(job)]
    if runner == "nodac" and os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: file permissions cannot be enforced")
        cmd = [setpriv, NO_DAC, *cmd]
    env = {**os.environ, "TMPDIR": str(planted.tmp)}
    timeout = FIFO_TIMEOUT_S if fifo else SUBPROCESS_TIMEOUT_S[runner]
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    hung = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(proc.pid, signal.SIGKILL)  # the child we started, and its own children
        out, err = proc.communicate()
    text = (out.decode("utf-8", "backslashreplace"), err.decode("utf-8", "backslashreplace"))
    return Run(None if hung else proc.returncode, *text, cwd, None, hung)


def _files(directory: Path) -> Iterator[Path]:
    if directory.is_dir():
        yield from (p for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


def _beam_temp(directory: Path) -> list[str]:
    if not directory.is_dir():
        return []
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("beam-temp-*"))


def _dead_letters(directory: Path) -> tuple[list[Any], list[str]]:
    """Every dead-letter object under ``directory`` (Beam's temporary folders excluded)."""
    rows: list[Any] = []
    problems: list[str] = []
    for path in sorted(_files(directory)):
        rel = path.relative_to(directory)
        if any(part.startswith("beam-temp-") for part in rel.parts) or path.suffix != ".jsonl":
            continue
        for n, line in enumerate(path.read_bytes().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                problems.append(
                    f"dead-letter file {rel} line {n} is not JSON ({e.__class__.__name__})"
                )
    return rows, problems


def _check_dead_letters(planted: Planted, directory: Path, which: str) -> list[str]:
    assert planted.bad is not None
    rows, problems = _dead_letters(directory)
    lo, hi = planted.bad
    if not lo <= len(rows) <= hi:
        want = f"{lo}" if lo == hi else f"{lo}–{hi}"
        problems.append(f"{which}: {len(rows)} dead letters, planted {want} bad rows")
    for d in rows:
        if not isinstance(d, dict) or not {"reason", "file", "row"} <= set(d):
            problems.append(f"{which}: a dead letter without reason/file/row: keys {sorted(d)}")
            break
        if not isinstance(d["reason"], str) or not d["reason"].strip():
            problems.append(f"{which}: a dead letter with an empty reason")
            break
        if Path(str(d["file"])).name not in planted.bad_files:
            problems.append(
                f"{which}: a dead letter ({d['reason']!r}) names file {Path(str(d['file'])).name}"
                f", where no bad row was planted (bad rows are in {sorted(planted.bad_files)})"
            )
            break
    return problems


def _redact(text: str, canary: str) -> str:
    return text.replace(canary, "<CANARY>")


def _summary(run: Run, canary: str) -> str:
    """What the run said, for the failure report (the canary redacted)."""
    if run.hung:
        return "no exit before the timeout (killed)"
    if run.escaped:
        last = run.escaped.strip().splitlines()[-1]
        return f"exception escaped main: {_redact(last, canary)[:300]}"
    lines = [ln for ln in run.err.splitlines() if ln.strip() and "library messages" not in ln]
    return _redact(" | ".join(lines), canary)[:400] or "(stderr empty)"


def _check_run(
    case: Case, planted: Planted, run: Run, before: tuple[str, str], after: tuple[str, str]
) -> list[str]:
    p: list[str] = []
    where = "" if run.cwd == planted.cwds[0] else f" (run from {run.cwd.name}/)"
    if run.hung:
        p.append(f"hang{where}: {_summary(run, case.canary)}")
    elif run.code not in case.exits:
        p.append(f"exit {run.code}{where}, expected {case.exits}: {_summary(run, case.canary)}")
    if run.escaped or TRACEBACK in run.err or TRACEBACK in run.out:
        p.append(f"traceback{where}")
    for stream, text in (("stdout", run.out), ("stderr", run.err)):
        if case.canary in text:
            p.append(f"canary in {stream}{where}")
    for path in _files(planted.output):
        if case.canary.encode() in path.read_bytes():
            p.append(f"canary in release file {path.relative_to(planted.output)}{where}")
    for label, directory in (("dead-letter", planted.dead_letter), ("output", planted.output)):
        left = _beam_temp(directory)
        if left:
            p.append(f"beam-temp left in the {label} directory{where}: {left}")
    if run.code == 2:
        missing = [n for n in planted.names if n not in run.err]
        if missing:
            p.append(f"exit-2 message does not name {missing}: {_summary(run, case.canary)}")
        # the message, not the progress lines before it (those name stages, never a value, and
        # are searched for the canary above like everything else)
        lines = [ln for ln in run.err.splitlines() if ln.strip() and not PROGRESS.match(ln)]
        if len(lines) > MAX_MESSAGE_LINES:
            p.append(f"exit-2 message is {len(lines)} lines long")
        if after != before:
            p.append(f"exit 2 but the ledger's spend changed: {before} → {after}")
    elif run.code != 0 and after != before:
        status = _release_status(planted.ledger, f"fuzz-{case.name}")
        p.append(
            f"failed after the charge: spend {before} → {after}, reservation {status!r} — "
            + ("kept: a re-run of the release id is free" if status == "reserved"
               else "NOT re-runnable for free")
        )  # fmt: skip
    if run.code == 0 and planted.bad is not None:
        p += _check_dead_letters(planted, planted.dead_letter, f"CLI run{where}")
    if run.code == 0 and planted.listed_keys is not None:
        column, keys = planted.listed_keys
        got = _released_keys(planted.output / "keyed.jsonl", column)
        if got != keys:
            p.append(
                f"key file accepted, but the released keys are {sorted(got)}, not {sorted(keys)}"
            )
    return p


def _released_keys(path: Path, column: str) -> frozenset[Any]:
    if not path.exists():
        return frozenset()
    return frozenset(json.loads(line)[column] for line in path.read_text().splitlines() if line)


def _check_exact(case: Case, planted: Planted) -> list[str]:
    """The same job without its ledger, noise off: the released count is the good rows."""
    assert planted.exact_job is not None and planted.good is not None
    try:
        job = load_job(str(planted.exact_job))
        with _like_a_process(), _deadline(DEADLINE_S):  # its messages are not checked
            result = run_release(job, noise=False, release_key=KEY)
    except _Hang:
        return ["exact run (noise off): no result before the deadline"]
    except Exception as e:
        return [
            f"exact run (noise off) raised {type(e).__name__}: {_redact(str(e), case.canary)[:300]}"
        ]
    problems = []
    lines = Path(result.outputs["rows"]).read_text().splitlines()
    values = [json.loads(line)["value"] for line in lines if line.strip()]
    if values != [planted.good] and not (len(values) == 1 and abs(values[0] - planted.good) < 1e-9):
        problems.append(
            f"exact run (noise off): released count {values}, planted {planted.good} good rows"
        )
    return problems + _check_dead_letters(
        planted, planted.exact_job.parent / "exact" / "dead", "exact run"
    )


def run_case(
    case: Case, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = case.build(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(planted.tmp))  # the operator log: in the case
    problems: list[str] = []
    notes: list[str] = []
    try:
        _set_cap(planted.ledger)
        for cwd in planted.cwds:
            before = _spent(planted.ledger)
            if case.runner == "inprocess":
                run = _run_in_process(planted.job, cwd, capfd)
            else:
                fifo = "fifo" in case.name
                run = _run_child(planted.job, cwd, planted, case.runner, fifo)
            after = _spent(planted.ledger)
            problems += _check_run(case, planted, run, before, after)
            notes.append(f"exit {run.code}: {_summary(run, case.canary)}")
        if planted.exact_job is not None:
            problems += _check_exact(case, planted)
    finally:
        for undo in planted.undo:
            undo()
    with capfd.disabled():  # shown with -s: what each run said (the canary redacted)
        print(f"\n{case.id}: " + "; ".join(notes))
    assert not problems, f"{case.id}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("case", SMALL, ids=[c.id for c in SMALL])
def test_malformed_input(
    case: Case, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_case(case, tmp_path, capfd, monkeypatch)


@pytest.mark.slow_fuzz
@pytest.mark.parametrize("case", FULL, ids=[c.id for c in FULL])
def test_malformed_input_full(
    case: Case, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_case(case, tmp_path, capfd, monkeypatch)


def test_the_corpus_is_deterministic_and_covers_issue_13(tmp_path: Path) -> None:
    """The same case writes the same bytes twice; every item of issue 13 has cases in the fast
    tier and all four formats appear; the full tier has hundreds of distinct cases."""
    groups = {c.group for c in SMALL}
    assert {f"item{i}" for i in range(1, 8)} <= groups
    assert {c.fmt for c in SMALL} == {"parquet", "avro", "csv", "jsonl"}
    assert len(SMALL) <= 45 and len(FULL) >= 300
    assert not {c.id for c in SMALL} & {c.id for c in FULL}
    for case in (SMALL[0], SMALL[5], next(c for c in FULL if "random" in c.name)):
        a, b = case.build(tmp_path / "a" / case.id), case.build(tmp_path / "b" / case.id)
        files_a = {p.relative_to(a.root): p.read_bytes() for p in _files(a.root)}
        files_b = {p.relative_to(b.root): p.read_bytes() for p in _files(b.root)}
        assert files_a == files_b, case.id
