"""`userdp tune`: exact measurements with noise off, the recommendation is the model's best, the
new job file beside the original, the ledger books the spend, the noise model matches the plan,
and misuse is refused by name."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from userdp.pipelines import tune
from userdp.pipelines.cli import main
from userdp.pipelines.config import ConfigError, load_job
from userdp.pipelines.generate import LogShape, generate
from userdp.pipelines.plan import plan_release
from userdp.pipelines.tune import run_tune
from userdp.pipelines.tune_model import CELL_THRESHOLD, noise_model
from userdp.transforms.mechanisms.bound_recommendation import (
    ContributionModel,
    best,
    count_settings,
)
from userdp.transforms.mechanisms.contribution_histogram import ContributionHistograms
from userdp.transforms.mechanisms.rng import ReleaseKey
from userdp.transforms.mechanisms.value_histogram import ValueHistogram

KEY = ReleaseKey(bytes(range(32)))
JOB = """\
# a job to tune
[input]
path = "{data}"
person = "person_id"

[budget]
epsilon = 1.0
delta = 1e-6

[output]
path = "release/"
{ledger}
[[queries]]
name = "visits"
metric = "count"
by = ["domain"]
max_partitions_per_person = 1   # a guess
max_rows_per_partition = 1

[[queries]]
name = "people"
metric = "persons"
by = ["domain"]
max_partitions_per_person = 1

[[queries]]
name = "mean_duration"
metric = "mean"
by = ["domain"]
value = "duration_s"
bounds = [0.0, 600.0]
max_partitions_per_person = 2
max_rows_per_partition = 2
"""


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tune")
    generate(3000, str(root / "logs.parquet"), seed=3, shape=LogShape(domains=12))
    return root


def write_job(root: Path, where: str, ledger: str = "") -> Path:
    """The job file in its own directory ``root/where`` (tune writes beside it)."""
    (root / where).mkdir()
    path = root / where / "job.toml"
    path.write_text(JOB.format(data=root / "logs.parquet", ledger=ledger))
    return path


def ledger_job(root: Path, where: str, cap: str) -> tuple[Path, Path]:
    """A job with a [ledger] whose scope ``logs`` is capped at ε = ``cap``: (job file, ledger)."""
    ledger = root / f"ledger-{where}.sqlite"
    path = write_job(root, where, f'[ledger]\npath = "{ledger}"\nscope = "logs"\n')
    assert main(["ledger", "set-cap", "--scope", "logs", "--epsilon", cap,
                 "--ledger", str(ledger)]) == 0  # fmt: skip
    return path, ledger


def spent(ledger: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The scope's exact ε spent, as the ledger shows it."""
    capsys.readouterr()
    assert main(["ledger", "show", "--json", "--ledger", str(ledger)]) == 0
    (account,) = json.loads(capsys.readouterr().out)
    assert account["scope"] == "logs"
    return str(account["spent"]["epsilon_exact"])


def exact_pairs(root: Path) -> dict[str, dict[str, int]]:
    table = pq.read_table(root / "logs.parquet", columns=["person_id", "domain"]).to_pylist()
    per: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in table:
        per[str(row["person_id"])][row["domain"]] += 1
    return per


def test_noise_off_measures_the_exact_histogram_and_recommends_the_models_best(
    logs: Path,
) -> None:
    job = load_job(write_job(logs, "exact"))
    result = run_tune(job, Fraction(1), str(logs / "out"), release_key=KEY, noise=False)
    measured = json.loads((logs / "out" / "measurements.json").read_text())
    m = measured["structure[domain]"]
    per = exact_pairs(logs)
    h = ContributionHistograms(epsilon=Fraction(1, 4), max_exponent=8)  # ε/2 each, picks ½
    assert m["histogram"] == h.exact([list(d.values()) for d in per.values()])
    # each person picks one partition: between 1 and every domain are picked
    assert 1 <= m["partitions"] <= 12
    visits, people, mean = result.recommendations
    model = ContributionModel(h, m["histogram"], CELL_THRESHOLD)
    noise_abs, _ = noise_model(job, 0)
    assert visits.new == best(count_settings(model, m["partitions"], noise_abs))
    assert (visits.old.L, visits.old.C) == (1, 1) and people.new.C is None
    assert visits.new.error < visits.old.error  # L = C = 1 clips most rows of this log
    assert result.untuned == {}
    # the value histogram: each person's durations weighted 1/n, exactly
    durations: dict[str, list[float]] = defaultdict(list)
    for row in pq.read_table(
        logs / "logs.parquet", columns=["person_id", "duration_s"]
    ).to_pylist():
        durations[str(row["person_id"])].append(row["duration_s"])
    v = ValueHistogram(epsilon=Fraction(1, 2))
    assert measured["values[duration_s]"]["histogram"] == pytest.approx(
        v.exact(list(durations.values())), rel=1e-12
    )
    assert mean.new.bounds is not None and mean.old.bounds == (0.0, 600.0)


def test_a_noisy_partition_count_below_one_is_used_as_one_and_the_report_says_so(
    logs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With few partitions the noisy count can fall below 0; the report showed −160.3 while the
    model used 1 (user-journey review). The value used is shown, with the drawn one beside."""
    real = tune.recommend

    def drawn_negative(job, plan, groups, measurements):  # type: ignore[no-untyped-def]
        changed = {
            g: {**m, "partitions": -160.3} if "partitions" in m else m
            for g, m in measurements.items()
        }
        return real(job, plan, groups, changed)

    monkeypatch.setattr(tune, "recommend", drawn_negative)
    job = load_job(write_job(logs, "negative"))
    result = run_tune(job, Fraction(1), str(logs / "neg"), release_key=KEY, noise=False)
    visits = result.recommendations[0]
    assert visits.partitions == 1.0
    assert visits.partitions_from == "noisy count of picked partitions (-160.3: taken as 1)"
    report = (logs / "neg" / "report.html").read_text()
    assert "<td>1 (noisy count of picked partitions (-160.3: taken as 1))</td>" in report


PUBLIC_JOB = """\
[input]
path = "{data}"
person = "person_id"

[budget]
epsilon = 1.0
delta = 1e-6

[output]
path = "release/"

[[queries]]
name = "visits"
metric = "count"
by = ["domain"]
partitions = "{keys}"
max_partitions_per_person = 8
max_rows_per_partition = 1

[[queries]]
name = "mean_duration"
metric = "mean"
by = ["domain"]
value = "duration_s"
bounds = [0.0, 600.0]
partitions = "{keys}"
max_partitions_per_person = 8
max_rows_per_partition = 1

[[queries]]
name = "people"
metric = "persons"
by = ["domain"]
max_partitions_per_person = 8
"""


def test_public_partitions_are_measured_on_the_rows_of_listed_keys_alone(logs: Path) -> None:
    """The release drops unlisted keys' rows before it bounds L; tune measures what it reads:
    a person's P counts listed partitions only, and a mean's values are those of listed keys."""
    listed = ["site00.example", "site01.example"]
    (logs / "public").mkdir()
    keys = logs / "public" / "domains.csv"
    keys.write_text("domain\n" + "\n".join(listed) + "\n")
    path = logs / "public" / "job.toml"
    path.write_text(PUBLIC_JOB.format(data=logs / "logs.parquet", keys=keys))
    job = load_job(path)
    result = run_tune(job, Fraction(1), str(logs / "public-out"), release_key=KEY, noise=False)
    measured = json.loads((logs / "public-out" / "measurements.json").read_text())
    assert set(measured) == {
        "structure[domain] keys=domains.csv",  # the two public queries share one measurement
        "structure[domain]",  # the private one reads every row
        "values[duration_s] keys=domains.csv",
    }
    thirds = Fraction(1, 3)  # ε = 1 over three measurements; picks take half of the private one
    per = exact_pairs(logs)
    only_listed = [[n for d, n in row.items() if d in listed] for row in per.values()]
    public = measured["structure[domain] keys=domains.csv"]
    h = ContributionHistograms(epsilon=thirds, max_exponent=8)
    assert public["histogram"] == h.exact([r for r in only_listed if r])
    assert public["partitions"] is None
    assert public["histogram"] != h.exact([list(d.values()) for d in per.values()])
    private = measured["structure[domain]"]
    with_picks = ContributionHistograms(epsilon=thirds / 2, max_exponent=8)
    assert private["histogram"] == with_picks.exact([list(d.values()) for d in per.values()])
    durations: dict[str, list[float]] = defaultdict(list)
    rows = pq.read_table(logs / "logs.parquet", columns=["person_id", "domain", "duration_s"])
    for row in rows.to_pylist():
        if row["domain"] in listed:
            durations[str(row["person_id"])].append(row["duration_s"])
    assert measured["values[duration_s] keys=domains.csv"]["histogram"] == pytest.approx(
        ValueHistogram(epsilon=thirds).exact(list(durations.values())), rel=1e-12
    )
    # nobody touches more than two listed partitions: L above 2 only adds noise
    visits, mean, people = result.recommendations
    assert visits.new.L <= 2 and mean.new.L <= 2
    assert visits.partitions_from == "public keys" and visits.partitions == 2
    assert people.new.L > 2  # the private query's persons touch more of the 12 domains
    manifest = json.loads((logs / "public-out" / "manifest.json").read_text())
    rows_read = {m["name"]: m["rows"] for m in manifest["measurements"]}
    assert rows_read["structure[domain] keys=domains.csv"] == "those of the 2 public keys"
    assert rows_read["structure[domain]"] == "all"


def test_the_new_job_file_is_written_beside_and_the_original_untouched(logs: Path) -> None:
    path = write_job(logs, "beside")
    original = path.read_text()
    first = run_tune(load_job(path), Fraction(1), str(logs / "t1"), release_key=KEY)
    second = run_tune(load_job(path), Fraction(1), str(logs / "t2"), release_key=KEY)
    assert path.read_text() == original
    assert first.job_file == str(logs / "beside" / "job.tuned.toml")
    assert second.job_file == str(logs / "beside" / "job.tuned-2.toml")  # never overwritten either
    tuned = load_job(first.job_file)
    for r in first.recommendations:
        q = next(q for q in tuned.queries if q.name == r.query)
        assert q.max_partitions_per_person == r.new.L
    text = Path(first.job_file).read_text()
    assert "# userdp tune: was 1  # a guess" in text  # the user's comment stays with its value
    mean = next(r for r in first.recommendations if r.query == "mean_duration")
    assert mean.new.bounds is not None
    assert tuned.queries[2].bounds == mean.new.bounds
    assert "# userdp tune: was [0.0, 600.0]" in text
    assert "# a guess" not in Path(first.job_file).read_text().split("was 1")[1].split("\n")[1]
    manifest = json.loads((logs / "t1" / "manifest.json").read_text())
    assert manifest["kind"] == "tuning" and manifest["spent"]["epsilon"] == pytest.approx(1.0)
    assert set(manifest["files"]) == {"measurements.json", "report.html"}
    # the workers' copy of the measurements (written beside, read by the launcher) is gone
    assert sorted(p.name for p in (logs / "t1").iterdir()) == sorted(
        ["manifest.json", "measurements.json", "report.html"]
    )
    assert manifest["tuned_job_file"] == first.job_file
    # the report says what its number leaves out, and what each curve holds fixed (an audit:
    # a mean's "error vs L" changed its bounds at every point without saying so)
    report = (logs / "t1" / "report.html").read_text()
    assert "as far as the measurements show it" in report
    assert "mean_duration: error vs L" in report and "each point at its own best bounds" in report
    assert "value bounds as chosen at × 1" in report


def test_a_job_file_tune_cannot_edit_still_gets_its_report(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bounds written over two lines: the recommendation is printed and reported, the job file is
    left to the user (the measurement was paid for: its results are not thrown away)."""
    path = write_job(logs, "layout")
    path.write_text(
        path.read_text().replace("bounds = [0.0, 600.0]", "bounds = [\n  0.0,\n  600.0,\n]")
    )
    assert main(["tune", str(path), "--epsilon", "1", "--out", str(logs / "layout" / "t")]) == 0
    out = capsys.readouterr().out
    assert "no new job file: " in out and "write the recommended bounds by hand" in out
    manifest = json.loads((logs / "layout" / "t" / "manifest.json").read_text())
    assert manifest["tuned_job_file"] is None and "bounds" in manifest["tuned_job_file_error"]
    assert (logs / "layout" / "t" / "report.html").exists()
    assert not (logs / "layout" / "job.tuned.toml").exists()


def test_too_little_signal_keeps_the_bounds_and_says_so(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """3,000 persons at the default ε = 0.1: the histograms hold less than ten thresholds of
    persons, so nothing is recommended (all-noise histograms would make every bound look free)."""
    path = write_job(logs, "weak")
    assert main(["tune", str(path), "--out", str(logs / "weak" / "t")]) == 0
    out = capsys.readouterr().out
    assert out.count("kept as it is: the measurements hold too little") == 3
    assert "no new job file" in out and not (logs / "weak" / "job.tuned.toml").exists()


def test_the_noise_model_matches_re_planning_at_other_bounds(logs: Path) -> None:
    job = load_job(write_job(logs, "model"))
    plan = plan_release(job)
    for i, (L, C) in enumerate([(8, 4), (3, None)]):
        q = job.queries[i]
        noise_abs, _ = noise_model(job, i)
        moved = dataclasses.replace(
            q, max_partitions_per_person=L, max_rows_per_partition=C or q.max_rows_per_partition
        )
        queries = tuple(moved if j == i else x for j, x in enumerate(job.queries))
        again = plan_release(dataclasses.replace(job, queries=queries))
        sd = again.queries[i].to_manifest()["statistic"]["stddev"]
        assert noise_abs(L, C) / noise_abs(q.max_partitions_per_person, 1) == pytest.approx(
            sd / plan.queries[i].to_manifest()["statistic"]["stddev"], rel=1e-6
        )


def test_the_ledger_books_the_tuning_spend_and_refuses_an_overspend(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, ledger = ledger_job(logs, "ledger", "0.25")
    assert main(["tune", str(path), "--epsilon", "0.2", "--out", str(logs / "t3")]) == 0
    out = capsys.readouterr().out
    assert "charged" in out and "tuning run logs-tune-" in out
    # the account after the charge, as `userdp run` prints it
    assert "  scope 'logs': spent (ε=1/5 (≈0.2), δ=0) of (ε=1/4 (≈0.25), δ=0); remaining" in out
    manifest = json.loads((logs / "t3" / "manifest.json").read_text())
    assert manifest["ledger"]["scope"] == "logs"
    assert spent(ledger, capsys) == "1/5"
    # a second tuning run would spend 0.4 > 0.25: refused, nothing measured
    assert main(["tune", str(path), "--epsilon", "0.2", "--out", str(logs / "t4")]) == 3
    assert not (logs / "t4").exists()


@pytest.mark.parametrize(
    ("flag", "message"),
    [("0", r"--epsilon = '0': expected a positive number"),
     ("abc", r"--epsilon = 'abc': expected a positive number"),
     # noise scales no float holds: exit 1 on a worker, after the charge (CLI audit)
     ("1e-300", r"--epsilon = '1e-300': expected an ε whose noise scales a float can hold"),
     ("1e400", r"--epsilon = '1e400': expected at most 1,000\. a budget this large promises"),
     ("0." + "3" * 400, r"--epsilon = '0\.3{38}…': expected a number of at most ~330 digits")],
)  # fmt: skip
def test_misuse_is_refused_by_name(
    logs: Path, flag: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_job(logs, f"misuse-{flag[:12]}")
    assert main(["tune", str(path), "--epsilon", flag]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_an_unwritable_tuning_directory_is_refused_before_the_charge(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, ledger = ledger_job(logs, "unwritable", "1")
    blocker = logs / "unwritable" / "a-file"
    blocker.write_text("")
    assert main(["tune", str(path), "--out", str(blocker / "tune")]) == 2
    assert re.search(r"--out \(the tuning directory\) '.*a-file/tune' cannot be written",
                     capsys.readouterr().err)  # fmt: skip
    assert spent(ledger, capsys) == "0"


def test_a_job_without_a_file_needs_an_output_directory(logs: Path) -> None:
    job = dataclasses.replace(load_job(write_job(logs, "nofile")), source="")
    with pytest.raises(ConfigError, match=r"--out = None: expected a directory"):
        run_tune(job, Fraction(1, 10), None, release_key=KEY)


@pytest.mark.parametrize("where", ["release", "release/tune", "other-release"])
def test_a_tuning_directory_on_a_release_is_refused_before_the_charge(
    logs: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tuning replaces manifest.json and report.html: pointed at a published release (or into
    it) it replaced the release's manifest and left a directory `verify` rejects (CLI audit)."""
    path, ledger = ledger_job(logs, f"onrelease-{where.replace('/', '-')}", "1")
    other = path.parent / "other-release"
    other.mkdir()
    (other / "manifest.json").write_text('{"queries": []}\n')  # a release's, not a tuning's
    assert main(["tune", str(path), "--out", str(path.parent / where)]) == 2
    err = capsys.readouterr().err
    if where == "other-release":
        assert "it holds a manifest.json that is not a tuning manifest" in err
        assert (other / "manifest.json").read_text() == '{"queries": []}\n'
    else:
        assert re.search(r"--out = '.*': expected a directory apart from output\.path", err)
    assert spent(ledger, capsys) == "0"
