"""Malformed input through the release job: schema problems stop it, row problems never do.

Corpora: for JSONL and for CSV, four files of 350 good rows and 260 malformed rows each (1,040
malformed rows per format), plus one all-good file (the JSONL fast path). The malformed rows are
null, empty and mixed-type person ids (``1`` is good; ``1.0``, ``"1"``, ``true``, ``[1]``, ``" 7"``,
an overflowing integer are not), null and wrongly typed keys, NaN, null and non-numeric values
(strings in the numeric column), lines that are not JSON objects (or nest too deeply, or are not
UTF-8), CSV rows with the wrong number of fields, CSV bytes that are not UTF-8. Good rows include
±inf and values outside the bounds, ``01``/``+1`` CSV ids (the integer 1) and blank JSONL lines.
Every tagged bad row carries a unique tag (a person id or a domain used by no good row), so each
dead letter can be matched to the row it came from.

(a) ``userdp run`` on inputs with a schema problem — a file missing a column, one column with
different types in different files, a disallowed type, an unreadable header — exits 2 with a message
naming the file and the column (the column list, for an unreadable file), holding no data value,
and writes nothing: no release, no manifest, no dead letters (the schema check runs before the
plan and the pipeline). JSONL files have no schema to check (their types come from the job file,
``[input] columns``): a missing column or a value of another type is a dead letter per row, in (b).

(b) ``userdp run`` on a corpus completes; the dead-letter files at the configured operator path
hold exactly the malformed rows, each with its reason and file (counted per reason and file);
±inf is never dead-lettered; the release directory holds only the outputs and the manifest, and
neither they nor the captured stdout/stderr contain a distinctive private value (a bad person id,
the dead rows' domains), which the dead letters do contain. With noise off (``run_release``
test hook) every released value equals the exact aggregate of the good rows alone, ±inf clamped.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from userdp.pipelines.cli import main
from userdp.pipelines.config import load_job
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

KEY = ReleaseKey(bytes(range(32)))
SECRET = "SECRET-ID-5f1c9e"  # a raw private value that may reach the dead letters only
DOMAINS = ("a.example", "b.example", "c.example", "d.example")
BOUNDS = (0.0, 600.0)
FILES, GOOD_PER_FILE, BAD_PER_FILE = 4, 350, 260
TAG_BASE = 700_000  # person-id tags: no good row has a person id this large


@dataclass
class Corpus:
    """Files written, the good rows (canonical person, domain, value) and the dead letters due."""

    good: list[tuple[int, str, float]] = field(default_factory=list)
    # (file name, reason, tag or None for rows whose fields are unknown) → count
    dead: Counter[tuple[str, str, str | None]] = field(default_factory=Counter)
    tags: set[str] = field(default_factory=set)


def _value(rng: random.Random) -> float | int:
    u = rng.random()
    if u < 0.05:
        return math.inf if u < 0.025 else -math.inf
    if u < 0.15:
        return rng.randrange(-50, 900)  # an integer (JSON int, CSV digits), maybe below 0
    return rng.uniform(-50.0, 900.0)


# JSONL bad rows: (column, value or MISSING, reason); the tag goes in another column.
MISSING = object()
JSONL_BAD: list[tuple[str, Any, str]] = [
    ("person_id", None, "null or empty person id"),
    ("person_id", MISSING, "null or empty person id"),
    ("person_id", 1.0, "person id type mismatch"),
    ("person_id", "1", "person id type mismatch"),
    ("person_id", "", "person id type mismatch"),
    ("person_id", SECRET, "person id type mismatch"),
    ("person_id", True, "person id type mismatch"),
    ("person_id", [1], "person id type mismatch"),
    ("person_id", "\ud800", "invalid UTF-8 text in person_id"),  # a lone surrogate
    ("domain", None, "null key in domain"),
    ("domain", MISSING, "null key in domain"),
    ("domain", 5, "key type mismatch in domain"),
    ("duration_s", math.nan, "NaN value in duration_s"),
    ("duration_s", None, "null value in duration_s"),
    ("duration_s", MISSING, "null value in duration_s"),
    ("duration_s", "abc", "non-numeric value in duration_s"),
    ("duration_s", "12.5", "non-numeric value in duration_s"),
    ("duration_s", True, "non-numeric value in duration_s"),
    ("duration_s", {"s": 1}, "non-numeric value in duration_s"),
]
JSONL_UNTAGGED = [b"{not json", b"[1, 2]", b'"x"', b"null", b"[" * 5000]
# An object whose read text is not UTF-8: its fields are known, its reason says which (as CSV's).
NOT_UTF8_JSONL = (b'{"person_id": 3, "domain": "\xff\xfe", "duration_s": 1.0}',
                  "invalid UTF-8 text in domain")  # fmt: skip

# CSV bad rows: (column, text, reason).
CSV_BAD: list[tuple[str, str, str]] = [
    ("person_id", "", "null or empty person id"),
    ("person_id", "1.0", "person id type mismatch"),
    ("person_id", SECRET, "person id type mismatch"),
    ("person_id", " 7", "person id type mismatch"),
    ("person_id", "99999999999999999999", "person id type mismatch"),
    ("domain", "", "null key in domain"),
    ("domain", "\udcff\udcfe", "invalid UTF-8 text in domain"),  # the bytes ff fe
    ("duration_s", "", "null value in duration_s"),
    ("duration_s", "abc", "non-numeric value in duration_s"),
    ("duration_s", "--1", "non-numeric value in duration_s"),
    ("duration_s", '"1,5"', "non-numeric value in duration_s"),
    ("duration_s", "nan", "NaN value in duration_s"),
    ("duration_s", "NaN", "NaN value in duration_s"),
]
CSV_UNTAGGED = [b"1,a.example", b"1,a.example,2,3"]  # wrong number of fields


def _tagged(kind: int, n: int, rng: random.Random, fmt: str) -> tuple[dict[str, Any], str, str]:
    """(row, reason, tag) of the n-th tagged bad row; the tag sits in a column that is fine."""
    column, value, reason = (JSONL_BAD if fmt == "jsonl" else CSV_BAD)[kind]
    tag_domain = column == "person_id"
    tag = f"dead-{n}.example" if tag_domain else str(TAG_BASE + n)
    row: dict[str, Any] = {
        "person_id": rng.randrange(1, 60) if tag_domain else TAG_BASE + n,
        "domain": tag if tag_domain else rng.choice(DOMAINS),
        "duration_s": 10.0,
        column: value,
    }
    if value is MISSING:
        del row[column]
    return row, reason, tag


def _csv_text(x: Any) -> str:
    return "inf" if x == math.inf else "-inf" if x == -math.inf else str(x)


def write_corpus(directory: Path, fmt: str, seed: int) -> Corpus:
    """Test data, not noise: ``random.Random`` with a fixed seed."""
    rng = random.Random(seed)
    directory.mkdir(parents=True)
    corpus = Corpus()
    kinds = len(JSONL_BAD if fmt == "jsonl" else CSV_BAD)
    untagged = JSONL_UNTAGGED if fmt == "jsonl" else CSV_UNTAGGED
    n = 0
    for i in range(FILES + 1):  # the last file is all good
        name = f"part-{i}.{fmt}"
        lines: list[bytes] = []
        for _ in range(GOOD_PER_FILE):
            p, d, v = rng.randrange(1, 60), rng.choice(DOMAINS), _value(rng)
            corpus.good.append((p, d, float(v)))
            if fmt == "jsonl":
                lines.append(json.dumps({"person_id": p, "domain": d, "duration_s": v}).encode())
            else:
                text = rng.choice([str(p), f"0{p}", f"+{p}"])  # all the integer p
                lines.append(f"{text},{d},{_csv_text(v)}".encode())
        for j in range(BAD_PER_FILE if i < FILES else 0):
            if j % 10 == 9:  # a row whose fields are unknown
                lines.append(untagged[j // 10 % len(untagged)])
                corpus.dead[(name, "malformed record", None)] += 1
                continue
            if j % 10 == 8 and fmt == "jsonl" and j // 10 % 6 == 5:
                lines.append(NOT_UTF8_JSONL[0])
                corpus.dead[(name, NOT_UTF8_JSONL[1], None)] += 1
                continue
            row, reason, tag = _tagged(n % kinds, n, rng, fmt)
            n += 1
            corpus.dead[(name, reason, tag)] += 1
            corpus.tags.add(tag)
            if fmt == "jsonl":
                lines.append(json.dumps(row).encode())
            else:
                fields = (_csv_text(row[c]) for c in ("person_id", "domain", "duration_s"))
                lines.append(",".join(fields).encode("utf-8", "surrogateescape"))
        rng.shuffle(lines)
        if fmt == "jsonl":
            lines.insert(len(lines) // 2, b"")  # a blank line is no row
        header = [b"person_id,domain,duration_s"] if fmt == "csv" else []
        (directory / name).write_bytes(b"\n".join(header + lines) + b"\n")
    return corpus


def job_toml(data: str, fmt: str, *, out: str = "release/", dead: str = "ops/rejected/") -> str:
    """Count, persons and mean by domain (private), sum by domain (public), count overall.

    L = 4 ≥ the number of domains and C = 10^4 ≥ any person's rows: with noise off the release is
    the exact aggregate of the clean rows.
    """
    per = '\nby = ["domain"]\nmax_partitions_per_person = 4'
    by = per + "\nmax_rows_per_partition = 10000"
    return f"""
[input]
path = "{data}"
format = "{fmt}"
person = "person_id"
person_type = "int"  # CSV/JSONL ids are strings unless the job file says otherwise
dead_letter = "{dead}"

[budget]
epsilon = 1.0
delta = 1e-6

[output]
path = "{out}"
format = "parquet"

[[queries]]
name = "visits"
metric = "count"{by}

[[queries]]
name = "persons"
metric = "persons"{per}

[[queries]]
name = "total_duration"
metric = "sum"
value = "duration_s"
bounds = [0.0, 600.0]
partitions = "domains.csv"{by}

[[queries]]
name = "mean_duration"
metric = "mean"
value = "duration_s"
bounds = [0.0, 600.0]{by}

[[queries]]
name = "all_visits"
metric = "count"
max_rows_per_partition = 10000
"""


def write_job(root: Path, data: str, fmt: str, **paths: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "domains.csv").write_text("domain\n" + "".join(d + "\n" for d in DOMAINS))
    job = root / "job.toml"
    job.write_text(job_toml(data, fmt, **paths))
    return job


def read_dead_letters(directory: Path) -> list[dict[str, Any]]:
    rows = []
    for path in sorted(directory.glob("dead_letter-*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows


def dead_letter_key(row: dict[str, Any], tags: set[str]) -> tuple[str, str, str | None]:
    found = [v for v in row["row"].values() if v in tags]
    assert len(found) <= 1, row
    return Path(row["file"]).name, row["reason"], found[0] if found else None


def expected_release(good: list[tuple[int, str, float]]) -> dict[str, dict[str, float]]:
    """Exact aggregates of the good rows (no bounding binds), values clamped to the bounds."""
    lo, hi = BOUNDS
    mid = (lo + hi) / 2
    out: dict[str, dict[str, float]] = {"visits": {}, "persons": {}, "total_duration": {}}
    out["mean_duration"] = {}
    for d in DOMAINS:
        rows = [(p, min(hi, max(lo, v))) for p, dom, v in good if dom == d]
        out["visits"][d] = len(rows)
        out["persons"][d] = len({p for p, _ in rows})
        out["total_duration"][d] = sum(v for _, v in rows)
        out["mean_duration"][d] = mid + sum(v - mid for _, v in rows) / len(rows)
    out["all_visits"] = {"": len(good)}
    return out


def released(path: str) -> dict[str, float]:
    return {r.get("domain", ""): r["value"] for r in pq.read_table(path).to_pylist()}


@pytest.fixture(scope="module", params=["jsonl", "csv"])
def corpus_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, Corpus]:
    fmt = request.param
    root = tmp_path_factory.mktemp(f"corpus-{fmt}")
    corpus = write_corpus(root / "logs", fmt, seed=11 if fmt == "jsonl" else 12)
    return fmt, root, corpus


def test_the_corpus_is_large_and_varied(corpus_run: tuple[str, Path, Corpus]) -> None:
    fmt, _, corpus = corpus_run
    assert sum(corpus.dead.values()) == FILES * BAD_PER_FILE >= 1000
    reasons = {reason for _, reason, _ in corpus.dead}
    assert len(reasons) >= 8 and {f for f, _, _ in corpus.dead} == {
        f"part-{i}.{fmt}" for i in range(FILES)
    }
    assert any(math.isinf(v) for _, _, v in corpus.good)


def test_row_problems_go_to_the_dead_letters_and_never_into_the_release(
    corpus_run: tuple[str, Path, Corpus], capfd: pytest.CaptureFixture[str]
) -> None:
    fmt, root, corpus = corpus_run
    job = write_job(root / "cli", str(root / "logs" / f"*.{fmt}"), fmt)
    assert main(["run", str(job)]) == 0
    out, err = capfd.readouterr()
    assert "released 5 queries" in out

    dead = read_dead_letters(root / "cli" / "ops" / "rejected")
    assert Counter(dead_letter_key(r, corpus.tags) for r in dead) == corpus.dead
    assert all(set(r["row"]) == {"person_id", "domain", "duration_s"} for r in dead)
    assert not [r for r in dead if r["row"]["duration_s"] in ("inf", "-inf", "Infinity")]
    assert any(SECRET in json.dumps(r) for r in dead)  # the search below can find it

    release = root / "cli" / "release"
    names = {"visits", "persons", "total_duration", "mean_duration", "all_visits"}
    assert {p.name for p in release.iterdir()} == {f"{n}.parquet" for n in names} | {
        "manifest.json",
        "report.html",
    }
    published = [out, err, (release / "manifest.json").read_text()]
    published.append((release / "report.html").read_text())  # DP outputs and parameters only
    for name in names:
        published.append(json.dumps(pq.read_table(release / f"{name}.parquet").to_pylist()))
        published.append((release / f"{name}.parquet").read_bytes().decode("latin-1"))
    private = [SECRET, *(t for t in corpus.tags if t.startswith("dead-"))]
    for text in published:
        assert not [s for s in private if s in text]
    for name in names:  # the dead rows' domains were never released
        assert set(released(str(release / f"{name}.parquet"))) <= {*DOMAINS, ""}, name


def test_noise_off_release_is_the_exact_aggregate_of_the_good_rows(
    corpus_run: tuple[str, Path, Corpus],
) -> None:
    fmt, root, corpus = corpus_run
    job = load_job(write_job(root / "exact", str(root / "logs" / f"*.{fmt}"), fmt))
    result = run_release(job, release_key=KEY, noise=False, num_shards=4)
    expected = expected_release(corpus.good)
    assert set(result.outputs) == set(expected)
    for name, path in result.outputs.items():
        got = released(path)
        assert set(got) == set(expected[name]), name
        for key, value in expected[name].items():
            # fixed-point sums: each clamped value is rounded to the query's 2^-30 grid
            assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-6), (name, key)
    dead = read_dead_letters(root / "exact" / "ops" / "rejected")
    assert Counter(dead_letter_key(r, corpus.tags) for r in dead) == corpus.dead


# (a) schema problems ------------------------------------------------------------------------


def _parquet(path: Path, columns: dict[str, pa.Array]) -> None:
    pq.write_table(pa.table(columns), path)


def _good_parquet(path: Path) -> None:
    _parquet(path, {"person_id": pa.array([1, 2], pa.int64()), "domain": ["a", "b"],
                    "duration_s": [1.0, 2.0]})  # fmt: skip


def _missing_csv(d: Path) -> tuple[Path, str | None]:
    (d / "a.csv").write_text("person_id,domain,duration_s\n1,a,1.0\n")
    bad = d / "b.csv"
    bad.write_text(f"person_id,duration_s\n1,1.0\n{SECRET},2.0\n")
    return bad, "domain"


def _mixed_parquet(d: Path) -> tuple[Path, str | None]:
    _good_parquet(d / "a.parquet")
    bad = d / "b.parquet"
    _parquet(bad, {"person_id": pa.array([SECRET, "u2"]), "domain": ["a", "b"],
                   "duration_s": [1.0, 2.0]})  # fmt: skip
    return bad, "person_id"


def _wrong_type_parquet(d: Path) -> tuple[Path, str | None]:
    bad = d / "a.parquet"
    _parquet(bad, {"person_id": pa.array([1, 2], pa.int64()), "domain": [0.5, 1.5],
                   "duration_s": [1.0, 2.0]})  # fmt: skip
    return bad, "domain"


def _wrong_type_avro(d: Path) -> tuple[Path, str | None]:
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "person_id", "type": "long"}, {"name": "domain", "type": "string"},
        {"name": "duration_s", "type": "string"}]}  # fmt: skip
    bad = d / "a.avro"
    with bad.open("wb") as f:
        rows = [{"person_id": 1, "domain": "a", "duration_s": SECRET}]
        fastavro.writer(f, fastavro.parse_schema(schema), rows)
    return bad, "duration_s"


def _float_person_parquet(d: Path) -> tuple[Path, str | None]:
    bad = d / "a.parquet"
    _parquet(bad, {"person_id": [1.5, 2.0], "domain": ["a", "b"], "duration_s": [1.0, 2.0]})
    return bad, "person_id"


def _unreadable_csv(d: Path) -> tuple[Path, str | None]:
    (d / "a.csv").write_text("person_id,domain,duration_s\n1,a,1.0\n")
    bad = d / "b.csv"
    bad.write_bytes(b"person_id,dom\xffain,duration_s\n1,a,1.0\n")  # the header is not text
    return bad, None


SCHEMA_PROBLEMS = {
    "csv-missing-column": ("csv", _missing_csv, "is missing"),
    "parquet-mixed-types": ("parquet", _mixed_parquet, "mixed types"),
    "parquet-wrong-type": ("parquet", _wrong_type_parquet, "(key) has type float"),
    "avro-wrong-type": ("avro", _wrong_type_avro, "(number) has type string"),
    "parquet-float-person": ("parquet", _float_person_parquet, "cast person ids to int or string"),
    "csv-unreadable": ("csv", _unreadable_csv, "the CSV header (first line) is not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_PROBLEMS))
def test_schema_problems_stop_before_planning_and_write_nothing(
    case: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    fmt, make, what = SCHEMA_PROBLEMS[case]
    (tmp_path / "logs").mkdir()
    bad_file, column = make(tmp_path / "logs")
    job = write_job(tmp_path, str(tmp_path / "logs" / f"*.{fmt}"), fmt)
    assert main(["run", str(job)]) == 2
    out, err = capfd.readouterr()
    assert out == ""
    # the message follows `userdp run`'s stage lines (pipelines/progress.py)
    err = "".join(x for x in err.splitlines(True) if not re.match(r"\[ *\d+\.\d s\] ", x))
    assert err.startswith("userdp run: ") and what in err, err
    assert str(bad_file) in err, err
    assert column is None or f"'{column}'" in err, err
    assert SECRET not in err
    assert not (tmp_path / "release").exists()
    assert not (tmp_path / "ops").exists()
