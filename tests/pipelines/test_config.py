"""Job-file parsing: the contract keys, exact budgets, and one ConfigError per misuse."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from userdp.pipelines import config
from userdp.pipelines.config import ConfigError, load_job, parse_job

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "browsing_job.toml"


def job(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "input": {"path": "logs/*.parquet", "person": "person_id"},
        "budget": {"epsilon": 1.0, "delta": 1e-6},
        "output": {"path": "release/"},
        "queries": [
            {
                "name": "visits",
                "metric": "count",
                "by": ["domain"],
                "max_partitions_per_person": 5,
                "max_rows_per_partition": 3,
            },
            {
                "name": "mean_duration",
                "metric": "mean",
                "by": ["domain"],
                "value": "duration_s",
                "bounds": [0.0, 600.0],
                "max_partitions_per_person": 5,
                "max_rows_per_partition": 3,
            },
        ],
    }
    for k, v in overrides.items():
        base[k] = v
    return copy.deepcopy(base)


def query(i: int = 0, **changes: Any) -> dict[str, Any]:
    j = job()
    j["queries"][i].update(changes)
    for k, v in changes.items():
        if v is None:
            del j["queries"][i][k]
    return j


def test_example_job_loads(tmp_path: Path) -> None:
    cfg = load_job(EXAMPLE)
    assert cfg.input.format == "parquet"
    assert cfg.input.path == str(EXAMPLE.parent / "data/*.parquet")
    assert cfg.output.path == str(EXAMPLE.parent / "release") + "/"
    assert cfg.budget.epsilon == 1 and cfg.budget.delta == Fraction(1, 10**6)
    assert cfg.runner.name == "direct" and dict(cfg.runner.options) == {}
    assert [q.name for q in cfg.queries] == ["visits_per_domain", "mean_duration_per_domain"]
    assert cfg.queries[1].partitions == "private"  # the default with `by`
    assert cfg.queries[1].bounds == (0.0, 600.0) and cfg.queries[0].noise == "laplace"
    assert len(cfg.config_hash) == 64
    # The hash does not depend on where the job file lives.
    moved = tmp_path / "job.toml"
    moved.write_text(EXAMPLE.read_text())
    assert load_job(moved).config_hash == cfg.config_hash


def test_budget_floats_are_read_as_written(tmp_path: Path) -> None:
    text = EXAMPLE.read_text().replace("epsilon = 1.0", "epsilon = 0.1")
    p = tmp_path / "j.toml"
    p.write_text(text)
    cfg = load_job(p)
    assert cfg.budget.epsilon == Fraction(1, 10)
    assert cfg.budget.delta == Fraction(1, 10**6)
    assert parse_job(job(budget={"epsilon": 0.3, "delta": 1e-6})).budget.epsilon == Fraction(3, 10)
    # 17+ digits: exactly as written, not rounded to a float first (that went above: review)
    p.write_text(text.replace("epsilon = 0.1", "epsilon = 9.99999999999999999e-7"))
    assert load_job(p).budget.epsilon == Fraction(999999999999999999, 10**24)
    p.write_text(text.replace("epsilon = 0.1", "epsilon = 1_00.5"))
    assert load_job(p).budget.epsilon == Fraction(201, 2)


def test_hash_changes_with_the_config() -> None:
    a = parse_job(job())
    b = parse_job(job(budget={"epsilon": 2.0, "delta": 1e-6}))
    assert a.config_hash != b.config_hash
    assert parse_job(job()).config_hash == a.config_hash


def test_defaults_and_inference() -> None:
    j = job(input={"path": "x/part-0.JSON", "person": "p"}, budget={"rho": 0.5, "delta": 1e-6})
    cfg = parse_job(j)
    assert cfg.input.format == "jsonl" and cfg.budget.rho == Fraction(1, 2)
    assert all(q.noise == "gaussian" for q in cfg.queries)
    cfg = parse_job(query(0, by=None, max_partitions_per_person=None))
    assert cfg.queries[0].by == () and cfg.queries[0].partitions is None
    assert cfg.queries[0].max_partitions_per_person == 1
    cfg = parse_job(job(input={"path": "logs/", "person": "p", "format": "avro"}))
    assert cfg.input.format == "avro"
    # file:// is a local path: Beam serves no file:// (an output there exited 1, "a bug")
    cfg = parse_job(job(output={"path": "file:///srv/release/"}))
    assert cfg.output.path == "/srv/release/"


def test_public_partitions_path_is_relative_to_the_job(tmp_path: Path) -> None:
    cfg = parse_job(query(0, partitions="keys.csv"), base_dir=tmp_path)
    assert cfg.queries[0].partitions == str(tmp_path / "keys.csv")


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (job(input=None), r"input = \(missing\): expected a \[input\] table"),
        (job(input={"person": "p"}), r"input\.path = \(missing\)"),
        (job(input={"path": "a.parquet"}), r"input\.person"),
        (job(input={"path": "a.parquet", "person": 3}), r"input\.person = 3: expected a non-emp"),
        (job(input={"path": "logs/", "person": "p"}), r"input\.format.*cannot infer"),
        (job(input={"path": "a.txt", "person": "p", "format": "xls"}), r"one of parquet, avro"),
        (
            job(input={"path": "a.csv", "person": "p", "person_typ": "int"}),
            r"input\.person_typ = 'int': expected one of the keys path, format, person, person_t",
        ),
        (job(input={"path": "a.csv", "person": "p", "person_type": "float"}), r"string, int"),
        (job(budgett={}), r"budgett = an empty table: expected one of the keys input, budget"),
        (
            job(budgets={"epsilon": 1.0, "delta": 1e-6}),  # a table by its keys, not a Python dict
            r"budgets = a table with keys epsilon, delta: .*unknown key \(did you mean 'budget'",
        ),
        (query(0, max_row_per_partition=3), r"did you mean 'max_rows_per_partition'\?"),
        (job(budget={}), r"budget\.epsilon = \(missing\)"),
        (job(budget={"epsilon": 1.0, "rho": 0.5}), r"budget = .*epsilon \(\+ delta\) or rho"),
        (job(budget={"epsilon": "1"}), r"budget\.epsilon = '1': expected a finite number > 0"),
        (job(budget={"epsilon": 0}), r"budget\.epsilon = 0"),
        (job(budget={"epsilon": float("inf")}), r"budget\.epsilon = inf"),
        (job(budget={"epsilon": True}), r"budget\.epsilon = True"),
        # values as the job file wrote them, not as Python holds them (malformed-input review)
        (
            job(budget={"epsilon": datetime.date(1979, 5, 27)}),
            r"budget\.epsilon = 1979-05-27 \(a TOML date or time\): expected a finite number",
        ),
        # the person column as a key or value: it planned, then failed after the charge (exit 1)
        (
            query(0, by=["domain", "person_id"], max_partitions_per_person=1),
            r"queries\[0\]\.by = 'person_id': expected a column other than input\.person",
        ),
        # planning a table or threshold at ε = 10^6 hung, at 2^63 − 1 ran out of memory
        (
            job(budget={"epsilon": 1e6}),
            r"budget\.epsilon = 1000000.0: expected a number in \(0, 1,000\]",
        ),
        (job(budget={"epsilon": 2**63 - 1}), r"budget\.epsilon = 9223372036854775807: .*promises"),
        (
            job(budget={"rho": 5e11, "delta": 1e-6}),
            r"budget\.rho = 500000000000.0: .*\(0, 500,000\]",
        ),
        (job(budget={"epsilon": 1.0, "delta": 1.5}), r"budget\.delta = 1\.5: expected a number in"),
        # a type for a column no query reads: a typo left `domain` at its default type
        (
            job(input={"path": "l/*.csv", "person": "person_id", "columns": {"domian": "int"}}),
            r"input\.columns\.domian = 'int': expected a type for a column the job reads "
            r"\(input\.person or a query's by, value, …\)\. did you mean 'domain'\?",
        ),
        (
            job(input={"path": "l/*.csv", "person": "person_id", "columns": {"zz": "int"}}),
            r"input\.columns\.zz = 'int': .*no query reads it: remove it",
        ),
        # ledger names the ledger refuses: exit 1 "a bug in userdp" after "charging the ledger"
        (
            job(ledger={"path": "l.sqlite", "scope": "browsing logs"}),
            r"ledger\.scope = 'browsing logs': expected 1-200 of A-Z a-z 0-9 _ \. : @ \+ = - "
            r"starting with a letter, digit or _",
        ),
        (
            job(ledger={"path": "l.sqlite", "scope": "logs", "release_id": "a b"}),
            r"ledger\.release_id = 'a b': expected 1-200 of",
        ),
        (
            job(ledger={"path": "l.sqlite", "scope": "logs", "periods": ["2025-W03", "bad one"]}),
            r"ledger\.periods\[1\] = 'bad one': expected 1-200 of",
        ),
        # an exact δ of 1e-2000 planned for 40 s, 1e-20000 failed printing its manifest entry;
        # ε written with 3,000 digits (a job file's decimals are exact) slowed every rule
        (
            job(budget={"epsilon": 1.0, "delta": Fraction(1, 10**2000)}),
            r"budget\.delta = 0\.0: expected a number of at most ~330 digits \(2\^1100\)\. an "
            r"exact number written with hundreds of digits, or below ~1e-330",
        ),
        (
            job(budget={"epsilon": Fraction(10**3000 // 3, 10**3000)}),
            r"budget\.epsilon = 0\.333.*: expected a number of at most ~330 digits",
        ),
        (
            query(0, epsilon=Fraction(1, 3 * 2**1100)),
            r"queries\[0\]\.epsilon = .*: expected a number of at most ~330 digits",
        ),
        (
            job(runner={"name": "spark"}),
            r"runner\.name = 'spark': expected one of direct, portable",
        ),
        (job(runner={"options": 3}), r"runner\.options = 3: expected a table"),
        (job(output={"path": "r/", "format": "xml"}), r"output\.format = 'xml'"),
        (job(queries=[]), r"queries = \[\]: expected one or more"),
        (
            query(1, metric="mode"),
            r"queries\[1\]\.metric = 'mode': expected one of count, pers.*trimmed_mean, sample_a",
        ),
        (query(1, metric=["count"]), r"queries\[1\]\.metric = \['count'\]: expected one of"),
        (query(0, name="a/b"), r"queries\[0\]\.name = 'a/b'"),
        (query(0, name="manifest"), r"queries\[0\]\.name = 'manifest'"),
        # userdp's own column names: a key named __person__ would replace the person id
        (
            job(input={"path": "l/*.csv", "person": "__person__"}),
            r"input\.person = '__person__': expected a column name not of the form __name__",
        ),
        (
            job(input={"path": "l/*.csv", "person": "p", "columns": {"__x__": "string"}}),
            r"input\.columns\.__x__ = '__x__': expected a column name not of the form",
        ),
        (query(0, by=["__person__"]), r"queries\[0\]\.by = '__person__': expected a column"),
        (query(1, value="__reject__"), r"queries\[1\]\.value = '__reject__': expected a colu"),
        (query(0, colour="red"), r"queries\[0\]\.colour.*unknown key"),
        (
            query(0, max_rows_per_partition=0),
            r"queries\[0\]\.max_rows_per_partition = 0: expected an integer in \[1, 2\^53\]",
        ),
        (  # 2^63 passed and overflowed on a worker once a person's rows reached the bound
            query(0, max_rows_per_partition=2**63),
            r"max_rows_per_partition = 9223372036854775808: expected an integer in \[1, 2\^53\]",
        ),
        (query(0, max_partitions_per_person=0), r"queries\[0\]\.max_partitions_per_person = 0"),
        (query(0, max_partitions_per_person=2.5), r"max_partitions_per_person = 2\.5"),
        (query(0, max_partitions_per_person=None), r"max_partitions_per_person = \(missing\)"),
        (query(0, by=None), r"queries\[0\]\.max_partitions_per_person = 5: expected 1 for a q"),
        (query(0, by=["d", "d"]), r"queries\[0\]\.by = \['d', 'd'\]: expected distinct"),
        (query(0, by=[1]), r"queries\[0\]\.by = \[1\]: expected a list of column names"),
        (query(1, bounds=None), r"queries\[1\]\.bounds = \(missing\).*lower < upper"),
        (query(1, value=None), r"queries\[1\]\.value = \(missing\)"),
        (query(1, bounds=[600.0, 0.0]), r"queries\[1\]\.bounds = \[600\.0, 0\.0\]"),
        (query(1, bounds=[0.0, 0.0]), r"queries\[1\]\.bounds"),
        (query(1, bounds=[0.0, float("inf")]), r"queries\[1\]\.bounds = \[0\.0, inf\]"),
        (query(1, bounds=[0.0, "9"]), r"queries\[1\]\.bounds"),
        (query(1, bounds=[0.0]), r"queries\[1\]\.bounds = \[0\.0\]"),
        (query(0, bounds=[0.0, 1.0]), r"queries\[0\]\.bounds.*no bounds for metric 'count'"),
        (  # a C persons never applies was recorded in the manifest as its bound (library audit)
            query(0, metric="persons"),
            r"queries\[0\]\.max_rows_per_partition = 3: expected no max_rows_per_partition",
        ),
        (query(0, value="x"), r"queries\[0\]\.value = 'x'"),
        (query(0, noise="exponential"), r"queries\[0\]\.noise = 'exponential'"),
        (query(0, partitions=""), r"queries\[0\]\.partitions"),
        (
            query(0, by=None, max_partitions_per_person=None, partitions="private"),
            r"queries\[0\]\.partitions = 'private': expected no partitions",
        ),
        (query(1, name="VISITS"), r"queries\[1\]\.name = 'VISITS'.*queries\[0\] has the same"),
        # one query's file is another's: publishing the second deleted the first (exit 0)
        (
            query(1, name="Visits.parquet"),
            r"queries\[1\]\.name = 'Visits.parquet'.*output may be 'visits.parquet', as may "
            r"queries\[0\]'s \('visits'\)",
        ),
        (query(1, name="visits.csv"), r"may be 'visits.csv', as may queries\[0\]'s"),
        # a 400-digit TOML integer where a float goes: float() raised OverflowError (exit 1)
        (query(1, bounds=[0, 10**400]), r"queries\[1\]\.bounds = \[0, 1000.*expected"),
        (
            job(
                queries=[
                    {
                        "name": "m",
                        "metric": "quantile",
                        "q": 10**400,
                        "value": "v",
                        "bounds": [0, 1],
                        "per_person": "mean",
                    }
                ]
            ),
            r"queries\[0\]\.q = 1000.*: expected",
        ),
        (
            job(
                queries=[
                    {"name": "c", "metric": "count", "bound": "auto", "bound_range": [1, 10**400]}
                ]
            ),
            r"queries\[0\]\.bound_range = \[1, 1000.*: expected",
        ),
        (
            job(queries=[{"name": "t", "metric": "total", "upper": 10**400}]),
            r"queries\[0\]\.upper = 1000.*: expected a number below 1\.8e308",
        ),
        (
            job(output={"path": "rel\x00x"}),
            r"output\.path = 'rel\\x00x': expected a string without NUL",
        ),
        (query(0, name="report.html"), r"may be 'report.html', a file every release writes"),
        (query(1, name="Manifest.json"), r"may be 'manifest.json', a file every release writes"),
        (query(0, rho=0.1), r"queries\[0\]\.rho = 0\.1: expected shares of the total's kind"),
        (query(0, delta=1e-7), r"queries\[0\]\.epsilon = \(missing\).*next to the delta"),
        (query(0, epsilon=0.5), r"queries\[0\]\.partitions = 'private': expected a delta > 0"),
        (job(budget={"epsilon": 1.0}), r"queries\[0\]\.partitions = 'private'.*public keys"),
        (job(budget={"rho": 0.5}), r"queries\[0\]\.partitions = 'private'.*give the total a delta"),
        (
            job(
                budget={"epsilon": 1.0},
                queries=[
                    {
                        "name": "n",
                        "metric": "count",
                        "max_rows_per_partition": 1,
                        "noise": "gaussian",
                    }
                ],
            ),
            r"queries\[0\]\.noise",
        ),
        (  # a column read as a key by one query and as a number by another (was exit 1)
            query(
                0,
                metric="median",
                per_person="distinct",
                value="duration_s",
                bounds=[0.0, 600.0],
                by=None,
                max_partitions_per_person=None,
                max_rows_per_partition=None,
            ),
            r"queries\[1\]\.value = 'duration_s': expected a column read as a key, as "
            r"queries\[0\] \('visits'\)",
        ),
        (  # the same, the other way round: by a column another query sums
            query(0, by=["duration_s"]),
            r"queries\[1\]\.value = 'duration_s': expected a column read as a key",
        ),
    ],
)
def test_misuse_raises_config_error(raw: dict[str, Any], match: str) -> None:
    raw = {k: v for k, v in raw.items() if v is not None}
    with pytest.raises(ConfigError, match=match):
        parse_job(raw, source="job.toml")


def test_error_message_names_source_value_allowed_and_hint() -> None:
    with pytest.raises(ConfigError) as info:
        parse_job(query(1, bounds=[5.0, 1.0]), source="job.toml")
    e = info.value
    assert isinstance(e, ValueError)
    assert (e.key, e.value) == ("queries[1].bounds", [5.0, 1.0])
    assert str(e).startswith("job.toml: queries[1].bounds = [5.0, 1.0]: expected [lower, upper]")
    assert "choose them without looking at the data" in str(e)


def test_load_job_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="an existing TOML file"):
        load_job(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[input\npath = 1")
    with pytest.raises(ConfigError, match="valid TOML"):
        load_job(bad)
    # each of these was exit 1 with a traceback (a "bug in userdp")
    bad.write_bytes(b'[input]\npath = "d\xff.csv"\n')
    with pytest.raises(ConfigError, match=r"expected valid TOML\. not UTF-8 text at byte 17"):
        load_job(bad)
    bad.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ConfigError, match=r"valid TOML\. arrays or tables nested too deeply"):
        load_job(bad)
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(ConfigError, match=r"expected a TOML file\. it is a directory"):
        load_job(tmp_path / "dir.toml")
    # a FIFO blocked the open forever (malformed-input review)
    os.mkfifo(tmp_path / "fifo.toml")
    with pytest.raises(ConfigError, match=r"expected a TOML file\. not a regular file"):
        load_job(tmp_path / "fifo.toml")


def test_a_job_file_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    """Notepad writes UTF-8 with a BOM; tomllib said "Invalid statement (at line 1, column 1)"."""
    plain, bommed = tmp_path / "plain.toml", tmp_path / "bommed.toml"
    plain.write_bytes(EXAMPLE.read_bytes())
    bommed.write_bytes(b"\xef\xbb\xbf" + EXAMPLE.read_bytes())
    assert dataclasses.replace(load_job(bommed), source="") == dataclasses.replace(
        load_job(plain), source=""
    )


def test_a_value_too_deep_to_show_is_a_job_file_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A few hundred nested arrays parse in tomllib (its limit depends on the stack left) and
    then recursed in the message showing the value: exit 1 with a traceback (review)."""
    nested: Any = "x"
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(RecursionError):
        parse_job(query(0, by=nested))
    monkeypatch.setattr(config, "parse_job", lambda *a, **k: parse_job(query(0, by=nested)))
    with pytest.raises(ConfigError, match=r"valid job file\. a value nested too deeply to show"):
        load_job(EXAMPLE)


PRIVATE_INSIDE_OUTPUT = [
    ("input.dead_letter", {"input": {"path": "logs/*.parquet", "person": "person_id",
                                     "dead_letter": "release/rejected/"}}),
    ("input.dead_letter", {"input": {"path": "logs/*.parquet", "person": "person_id",
                                     "dead_letter": "./release"}}),  # the same directory
    ("input.path", {"input": {"path": "release/logs/*.parquet", "person": "person_id"}}),
    ("ledger.path", {"ledger": {"path": "release/ledger.sqlite", "scope": "s"}}),
    ("release.secret_path", {"release": {"secret_path": "release/keys/secret.key"}}),
]  # fmt: skip


@pytest.mark.parametrize(("key", "override"), PRIVATE_INSIDE_OUTPUT)
def test_operator_only_paths_inside_the_release_are_refused(
    key: str, override: dict[str, Any], tmp_path: Path
) -> None:
    """Issue 12, item 6: whatever sits under output.path is published with the release."""
    with pytest.raises(ConfigError, match=rf"{key} = .*output\.path .* is published whole"):
        parse_job(job(**override), base_dir=tmp_path)


def test_a_symlinked_spelling_of_the_release_is_the_release(tmp_path: Path) -> None:
    (tmp_path / "release").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "release")
    raw = job(input={"path": "logs/*.parquet", "person": "person_id", "dead_letter": "alias/dl/"})
    with pytest.raises(ConfigError, match=r"input\.dead_letter = .*is published whole"):
        parse_job(raw, base_dir=tmp_path)


def test_operator_paths_beside_the_release_are_fine(tmp_path: Path) -> None:
    """The control: a sibling whose name starts like the release's is not inside it, and the
    release may sit inside the input directory (an input glob matches only its own files)."""
    raw = job(
        input={"path": "*.parquet", "person": "person_id", "dead_letter": "release2/dl/"},
        ledger={"path": "releases.sqlite", "scope": "s"},
        release={"secret_path": "release.key"},
    )
    parsed = parse_job(raw, base_dir=tmp_path)
    assert (parsed.input.dead_letter or "").startswith(str(tmp_path / "release2"))


def test_errors_show_values_as_the_job_file_wrote_them() -> None:
    """``Fraction(3, 2)`` (a runner option's exact decimal) meant nothing to the job file's
    author; nor did ``datetime.time(7, 32)``."""
    assert "k = 1.5: expected" in str(ConfigError("k", Fraction(3, 2), "an integer"))
    assert "k = 07:32:00 (a TOML date or time)" in str(ConfigError("k", datetime.time(7, 32), "x"))
    assert "k = 'x': expected" in str(ConfigError("k", "x", "y"))
