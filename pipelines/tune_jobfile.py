"""The tuned job file: the original's text with each tuned query's L, C and bounds replaced.

Written beside the original as ``<stem>.tuned.toml`` (``<stem>.tuned-2.toml``, … when that exists:
an earlier recommendation is never overwritten either), the original untouched. The text is edited
line by line — comments, order and every other key stay as the user wrote them — and a comment
above each changed line says what it was and where the value came from. The result is parsed
again and must give the recommended values, or nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from .config import JobConfig, load_job
from .config_fields import ConfigError
from .tune_recommend import Recommendation

_QUERY_HEADER = re.compile(r"^\s*\[\[\s*queries\s*\]\]\s*(#.*)?$")
_TABLE_HEADER = re.compile(r"^\s*\[")


def tuned_job_path(job: JobConfig) -> str:
    if not job.source:
        raise ConfigError("job", None, "a job file (tune writes the new one beside it)")
    src = Path(job.source)
    candidate = src.with_name(f"{src.stem}.tuned.toml")
    n = 2
    while candidate.exists():
        candidate = src.with_name(f"{src.stem}.tuned-{n}.toml")
        n += 1
    return str(candidate)


def _blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(start, end) line ranges of each [[queries]] table, in order."""
    out, start = [], None
    for i, line in enumerate(lines):
        if _TABLE_HEADER.match(line):
            if start is not None:
                out.append((start, i))
                start = None
            if _QUERY_HEADER.match(line):
                start = i
    if start is not None:
        out.append((start, len(lines)))
    return out


def _replace(lines: list[str], span: tuple[int, int], key: str, value: str, old: str) -> bool:
    number = r"\[[^\]#]*\]" if key == "bounds" else r"\d+"
    pattern = re.compile(rf"^(\s*){key}\s*=\s*{number}\s*(#.*)?$")
    for i in range(*span):
        m = pattern.match(lines[i])
        if m:
            # the user's comment on the old value stays with the old value
            indent, note = m.group(1), f"  {m.group(2)}" if m.group(2) else ""
            lines[i] = f"{indent}# userdp tune: was {old}{note}\n{indent}{key} = {value}"
            return True
    return False


def _bounds(b: tuple[float, float]) -> str:
    return f"[{b[0]!r}, {b[1]!r}]"


def write_tuned_job(job: JobConfig, recs: Sequence[Recommendation], path: str) -> str:
    """Writes the new job file at ``path`` (see the module docstring); returns ``path``."""
    assert job.source
    lines = Path(job.source).read_text(encoding="utf-8").splitlines()
    blocks = _blocks(lines)
    names = [q.name for q in job.queries]
    if len(blocks) != len(names):
        raise ConfigError(
            "queries", None, "[[queries]] tables userdp tune can edit",
            "write the recommended bounds by hand", job.source,
        )  # fmt: skip
    for r in recs:
        span = blocks[names.index(r.query)]
        edits = [("max_partitions_per_person", str(r.new.L), str(r.old.L))]
        if r.new.C is not None and r.old.C is not None:
            edits.append(("max_rows_per_partition", str(r.new.C), str(r.old.C)))
        if r.new.bounds is not None and r.old.bounds is not None:
            edits.append(("bounds", _bounds(r.new.bounds), _bounds(r.old.bounds)))
        for key, new, old in edits:
            if new != old and not _replace(lines, span, key, new, old):
                raise ConfigError(
                    f"queries.{r.query}.{key}", old, f"a `{key} = <integer>` line to replace",
                    "write the recommended bounds by hand", job.source,
                )  # fmt: skip
    header = (
        f"# Written by `userdp tune` from {Path(job.source).name}: the contribution bounds it "
        "recommends\n# (see the tuning directory's report.html). Review before use.\n"
    )
    text = header + "\n".join(lines) + "\n"
    Path(path).write_text(text, encoding="utf-8")
    check = load_job(path)
    for r in recs:
        q = next(q for q in check.queries if q.name == r.query)
        bounds = None if q.bounds is None else (float(q.bounds[0]), float(q.bounds[1]))
        if (
            q.max_partitions_per_person != r.new.L
            or (r.new.C is not None and q.max_rows_per_partition != r.new.C)
            or (r.new.bounds is not None and bounds != r.new.bounds)
        ):
            Path(path).unlink()
            raise ConfigError(f"queries.{r.query}", None, "the recommended bounds", "", path)
    return path
