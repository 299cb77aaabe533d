"""Scheduled releases through `userdp run` with a ledger: weekly inputs charge their period and
the scope, the run that would overspend is refused before anything is written, a re-run of a
finished release id is free and byte-identical, and the manifest agrees with the ledger."""

from __future__ import annotations

import csv
import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from userdp.pipelines.cli import main
from userdp.pipelines.config import load_job
from userdp.pipelines.generate import generate
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

WEEKS = ("2025-W01", "2025-W02", "2025-W03")
PERSONS = '[[queries]]\nname = "persons"\nmetric = "persons"\n'


JOB = """
[input]
path = "data/week={week}/*.parquet"
person = "person_id"

[budget]
epsilon = {epsilon}

[output]
path = "release/{week}/"

[ledger]
path = "ledger.sqlite"
scope = "logs"
period_rule = 'week=(?P<period>\\d{{4}}-W\\d{{2}})'
release_id = "{release_id}"

[[queries]]
name = "visits"
metric = "count"
max_rows_per_partition = 10

[[queries]]
name = "persons"
metric = "persons"
"""


@pytest.fixture(scope="module")
def weekly(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("weekly")
    for i, week in enumerate(WEEKS):
        (root / "data" / f"week={week}").mkdir(parents=True)
        generate(80, str(root / "data" / f"week={week}" / "logs.parquet"), seed=i)
    return root


def write_job(root: Path, week: str, release_id: str, epsilon: str = "1.0") -> Path:
    job = root / f"{release_id}.toml"
    job.write_text(JOB.format(week=week, release_id=release_id, epsilon=epsilon))
    return job


def ledger(root: Path, *args: str) -> int:
    return main(["ledger", *args, "--ledger", str(root / "ledger.sqlite")])


def release_bytes(root: Path, week: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "release" / week).iterdir())}


def test_weekly_schedule_stops_exactly_at_the_cap_and_reruns_are_free(
    weekly: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = weekly
    assert ledger(root, "set-cap", "--scope", "logs", "--epsilon", "2.5") == 0
    assert ledger(root, "set-cap", "--scope", "logs", "--each-period", "--epsilon", "1") == 0
    capsys.readouterr()

    # weeks 1 and 2: ε = 1 each, within the scope's 2.5 and each week's 1
    for week in WEEKS[:2]:
        assert main(["run", str(write_job(root, week, f"logs-{week}"))]) == 0
        out = capsys.readouterr().out
        assert f"charged (ε=1, δ=0) to 'logs'; (ε=1, δ=0) to each of periods ['{week}']" in out
        assert f"period '{week}' of scope 'logs': spent (ε=1, δ=0) of (ε=1, δ=0)" in out

    # a re-run of week 1 under its id: free, and the same bytes (the ledger keeps the secret)
    before = release_bytes(root, WEEKS[0])
    assert main(["run", str(write_job(root, WEEKS[0], f"logs-{WEEKS[0]}"))]) == 0
    assert "re-run: nothing charged" in capsys.readouterr().out
    assert release_bytes(root, WEEKS[0]) == before

    # week 3 would bring the scope to 3 > 2.5: refused before anything runs or is written
    assert main(["run", str(write_job(root, WEEKS[2], f"logs-{WEEKS[2]}"))]) == 3
    err = capsys.readouterr().err
    assert "refused" in err and "scope 'logs'" in err and "cap" in err and "requested" in err
    assert not (root / "release" / WEEKS[2]).exists()

    # a second release of week 2 (new id, ε = 0.5) would exceed that week's own cap of 1
    job = write_job(root, WEEKS[1], "logs-2025-W02-again", epsilon="0.5")
    assert main(["run", str(job)]) == 3
    assert "period '2025-W02'" in capsys.readouterr().err

    # the same id with a changed job file is refused: it would publish the difference
    job = write_job(root, WEEKS[0], f"logs-{WEEKS[0]}", epsilon="0.5")
    assert main(["run", str(job)]) == 3
    assert "logs-2025-W01" in capsys.readouterr().err

    # manifests and the ledger's history agree on every charge
    assert ledger(root, "history", "--json") == 0
    history = {r["release_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(history) == {f"logs-{w}" for w in WEEKS[:2]}
    for week in WEEKS[:2]:
        manifest = json.loads((root / "release" / week / "manifest.json").read_text())
        charge = manifest["ledger"]
        assert charge["release_id"] == f"logs-{week}" and charge["periods"] == [week]
        record = history[f"logs-{week}"]
        for field in ("scope", "periods", "counted", "cost", "conversion"):
            assert charge[field] == record[field], field
        assert "input_fingerprint" not in charge  # a digest of data-dependent file sizes
        assert manifest["config_hash"] == record["config_hash"]
        digest = hashlib.sha256((root / "release" / week / "manifest.json").read_bytes())
        assert record["manifest_hash"] == "sha256:" + digest.hexdigest()
        assert record["status"] == "completed"
        assert manifest["spent"] == manifest["total"]


def test_plan_shows_the_cost_and_what_remains(
    weekly: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ledger(weekly, "set-cap", "--scope", "logs", "--epsilon", "2.5") == 0
    assert ledger(weekly, "set-cap", "--scope", "logs", "--each-period", "--epsilon", "1") == 0
    job = write_job(weekly, WEEKS[2], "plan-only")
    assert main(["plan", str(job)]) == 0
    out = capsys.readouterr().out
    assert (
        "scope 'logs'" in out and "this run would charge (ε=1, δ=0)" in out and "remaining" in out
    )


def test_a_pure_release_under_an_epsilon_delta_budget_is_charged_no_delta(
    weekly: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its queries spend no δ, so none is booked: a scope capped at δ = 0 takes it (before,
    the even split booked budget.delta and the ledger refused the run, exit 3)."""
    assert ledger(weekly, "set-cap", "--scope", "pure", "--epsilon", "5") == 0  # δ cap 0
    assert ledger(weekly, "set-cap", "--scope", "pure", "--each-period", "--epsilon", "1") == 0
    job = weekly / "pure.toml"
    text = JOB.format(week=WEEKS[0], release_id="pure-1", epsilon="1.0\ndelta = 1e-6")
    job.write_text(text.replace('scope = "logs"', 'scope = "pure"'))
    capsys.readouterr()
    assert main(["run", str(job)]) == 0
    out = capsys.readouterr().out
    assert "(ε=1, δ=0)" in out
    assert ledger(weekly, "show", "--json") == 0
    (account,) = [a for a in json.loads(capsys.readouterr().out) if a["scope"] == "pure"]
    assert account["spent"]["delta_exact"] == "0"


def test_run_release_id_without_a_ledger_is_a_config_error(
    weekly: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = weekly / "no-ledger.toml"
    job.write_text(
        JOB.format(week=WEEKS[0], release_id="x", epsilon="1").split("[ledger]")[0]
        + '[[queries]]\nname = "persons"\nmetric = "persons"\n'
    )
    assert main(["run", "--release-id", "r1", str(job)]) == 2
    assert "--release-id = 'r1': expected a job file with a [ledger]" in capsys.readouterr().err
    # after the job file it would be read as a Beam option: said plainly instead
    assert main(["run", str(job), "--release-id", "r1"]) == 2
    assert "--release-id = 'r1': expected the option before the job file" in capsys.readouterr().err


def test_a_release_id_the_ledger_would_refuse_is_a_config_error(
    weekly: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was exit 1, "a bug in userdp", after "charging the ledger" (malformed-input review)."""
    job = weekly / "job.toml"
    job.write_text(JOB.format(week=WEEKS[0], release_id="r0", epsilon="1"))
    assert main(["run", "--release-id", "x y", str(job)]) == 2
    err = capsys.readouterr().err
    assert "--release-id = 'x y': expected 1-200 of A-Z a-z 0-9 _ . : @ + = -" in err
    assert "charging the ledger" not in err and "bug" not in err


def test_an_input_path_without_its_period_is_a_job_error_exit_2(
    weekly: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rule names months, the paths weeks: a job or input mistake (exit 2, naming the key),
    not a ledger refusal (exit 3, which the exit-code table keeps for caps and re-runs)."""
    job = write_job(weekly, WEEKS[0], "no-period")
    job.write_text(job.read_text().replace("week=(?P<period>", "month=(?P<period>"))
    assert main(["run", str(job)]) == 2
    err = capsys.readouterr().err
    assert "ledger.period_rule = 'month=" in err and "does not match the period rule" in err
    assert "charging the ledger" not in err  # refused with the other checks, before the ledger
    # a rule that can match nothing (an empty period): the same kind of mistake
    job.write_text(job.read_text().replace("month=(?P<period>", "(?P<period>x*)(?P<rest>"))
    assert main(["run", str(job)]) == 2
    err = capsys.readouterr().err
    assert "ledger.period_rule = '(?P<period>x*)" in err and "bug in userdp" not in err


def test_input_files_a_glob_matches_inside_the_output_are_refused(
    weekly: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The glob's root (data/) is outside the output, but the files it matches in
    data/week=W01/ are not: publishing would hand them to the release's readers."""
    job = weekly / "into-input.toml"
    text = JOB.format(week=WEEKS[0], release_id="into", epsilon="1").split("[ledger]")[0]
    text = text.replace(f"data/week={WEEKS[0]}/*.parquet", "data/*/*.parquet")
    job.write_text(text.replace(f"release/{WEEKS[0]}/", f"data/week={WEEKS[0]}/") + PERSONS)
    assert main(["run", str(job)]) == 2
    err = capsys.readouterr().err
    assert "input.path = " in err and "1 of the 3 input files lie inside output.path" in err
    assert not (weekly / "data" / f"week={WEEKS[0]}" / "manifest.json").exists()


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        ("UPDATE ledger_scopes SET spent_main = '-5/1'", "the ledger is corrupt"),
        ("UPDATE ledger_scopes SET spent_main = 'abc'", "the ledger is corrupt"),
        ("UPDATE ledger_releases SET secret = x'00'", "1-byte secret: the ledger is corrupt"),
    ],
)
def test_a_hand_edited_ledger_is_refused_exit_3_not_a_crash(
    tmp_path: Path, weekly: Path, edit: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "edited"
    root.mkdir()
    (root / "data").symlink_to(weekly / "data")
    assert ledger(root, "set-cap", "--scope", "logs", "--epsilon", "9") == 0
    assert ledger(root, "set-cap", "--scope", "logs", "--each-period", "--epsilon", "9") == 0
    job = write_job(root, WEEKS[0], "first")
    assert main(["run", str(job)]) == 0
    with sqlite3.connect(root / "ledger.sqlite") as db:
        db.execute(edit)
    capsys.readouterr()
    assert main(["run", str(job)]) == 3  # a re-run reads its release and the scope
    err = capsys.readouterr().err
    assert says in err and "bug in userdp" not in err


def test_one_periods_rows_move_a_multi_period_release_by_two_persons(tmp_path: Path) -> None:
    """Why a release reading several periods charges each one at the group-of-two rate
    (ledger.model.period_amount): removing a person's week-3 rows — a period cap's neighbour —
    keeps their week-2 rows, and bounding (L = 1 partition per person) then keeps week 2's
    partition instead. Noise off: the counts move by 2 in L1, twice L·C = 1."""
    (tmp_path / "keys.csv").write_text("domain\nA\nB\n")
    counts = []
    for name, p_in_week3 in (("D", True), ("D-week3", False)):
        for week, rows in (
            ("2025-W02", [*(f"q{i},B" for i in range(5)), "p,B"]),
            ("2025-W03", [*(f"r{i},A" for i in range(5)), *(["p,A"] * p_in_week3)]),
        ):
            d = tmp_path / name / f"week={week}"
            d.mkdir(parents=True)
            (d / "part.csv").write_text("person_id,domain\n" + "\n".join(rows) + "\n")
        job = tmp_path / f"{name}.toml"
        job.write_text(
            f'[input]\npath = "{name}/week=*/part.csv"\nperson = "person_id"\n'
            f'[budget]\nepsilon = 1.0\n[output]\npath = "out-{name}/"\nformat = "csv"\n'
            '[[queries]]\nname = "visits"\nmetric = "count"\nby = ["domain"]\n'
            'max_partitions_per_person = 1\nmax_rows_per_partition = 1\npartitions = "keys.csv"\n'
        )
        run_release(load_job(job), release_key=ReleaseKey(b"\x07" * 32), noise=False)
        (out,) = (tmp_path / f"out-{name}").glob("visits*")
        with out.open() as f:
            counts.append({r["domain"]: float(r["value"]) for r in csv.DictReader(f)})
    assert counts == [{"A": 6.0, "B": 5.0}, {"A": 5.0, "B": 6.0}]
