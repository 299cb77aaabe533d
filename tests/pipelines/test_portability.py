"""The same release on three runners: byte-identical outputs for the same release secret.

The full release job — four queries (private and public partitions, Laplace and Gaussian noise,
count / persons / mean / sum), two Parquet input files one of which holds malformed rows, Parquet
output — runs on the Direct runner in ``in_memory`` mode (the reference), in ``multi_processing``
mode with 2 workers (set by command-line flags over a direct job file) and on the PortableRunner
with the embedded job service and LOOPBACK workers, the last two through ``userdp run``. Every
output file must be byte-identical to the reference, and the dead letters the same rows. (That
this comparison catches other noise is shown by the negative control in test_retry.py.)

The helpers here (the dataset, the job file) are shared with test_retry.py and test_translation.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import userdp.pipelines.job
from userdp.pipelines import cli
from userdp.pipelines.config import JobConfig, load_job
from userdp.pipelines.generate import SCHEMA, generate
from userdp.pipelines.job import run_release
from userdp.transforms.mechanisms.rng import ReleaseKey

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

SECRET = bytes(range(100, 132))  # a fixed test secret, never a real release's
KEY = ReleaseKey(SECRET)
PEOPLE = 1500
PUBLIC_DOMAINS = ("site00.example", "site03.example", "site07.example", "absent.example")
QUERIES = ("visits_per_domain", "persons_total", "mean_duration", "sum_duration")
JOB_FILE = """\
[input]
path = "{data}/*.parquet"
person = "person_id"
dead_letter = "ops/"

[budget]
epsilon = 8.0
delta = 1e-5

[runner]
name = "{runner}"
options = {options}

[output]
path = "release/"
format = "parquet"

[[queries]]
name = "visits_per_domain"
metric = "count"
by = ["domain"]
max_partitions_per_person = 3
max_rows_per_partition = 2

[[queries]]
name = "persons_total"
metric = "persons"

[[queries]]
name = "mean_duration"
metric = "mean"
by = ["domain"]
value = "duration_s"
bounds = [0.0, 300.0]
max_partitions_per_person = 3
max_rows_per_partition = 2
partitions = "{data}/public_domains.csv"

[[queries]]
name = "sum_duration"
metric = "sum"
by = ["domain"]
value = "duration_s"
bounds = [0.0, 300.0]
max_partitions_per_person = 3
max_rows_per_partition = 2
noise = "gaussian"
"""


@dataclass(frozen=True)
class Dataset:
    """Generated logs in ``dir``: ``part-0.parquet`` (clean), ``part-1.parquet`` (malformed)."""

    dir: Path
    bad_rows: int


def make_dataset(root: Path, people: int = PEOPLE) -> Dataset:
    generate(people, str(root / "part-0.parquet"), seed=11)
    nan = math.nan
    bad = {  # a null person, a null key, a NaN value: three dead letters, one reason each
        "person_id": [None, 7, 8],
        "url": ["u", "u", "u"],
        "domain": ["site00.example", None, "site01.example"],
        "timestamp": [1, 2, 3],
        "duration_s": [1.0, 2.0, nan],
    }
    pq.write_table(pa.table(bad, schema=SCHEMA), root / "part-1.parquet")
    keys = "domain\n" + "".join(f"{d}\n" for d in PUBLIC_DOMAINS)
    (root / "public_domains.csv").write_text(keys)
    return Dataset(root, bad_rows=3)


def write_job(directory: Path, data: Dataset, runner: str = "direct", options: str = "{ }") -> Path:
    """A job file in ``directory`` (its release goes to ``directory/release``)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "job.toml"
    path.write_text(JOB_FILE.format(data=data.dir.as_posix(), runner=runner, options=options))
    return path


@dataclass(frozen=True)
class Release:
    outputs: dict[str, bytes]  # query name → file bytes
    dead_letters: list[str]  # sorted JSON lines (shard files and their order are the runner's)
    manifest: dict[str, object]  # without config_hash (the [runner] table differs)


def read_release(job: JobConfig) -> Release:
    out = Path(job.output.path)
    outputs = {q: (out / f"{q}.parquet").read_bytes() for q in QUERIES}
    assert job.input.dead_letter is not None
    dead = Path(job.input.dead_letter)
    lines = sorted(line for f in dead.glob("dead_letter-*") for line in f.read_text().splitlines())
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["config_hash"]
    return Release(outputs, lines, manifest)


def run_reference(directory: Path, data: Dataset) -> Release:
    """The release on the Direct runner (in_memory) with the fixed key, checked for content."""
    job = load_job(write_job(directory, data))
    run_release(job, release_key=KEY)
    release = read_release(job)
    tables = {q: pq.read_table(pa.BufferReader(b)) for q, b in release.outputs.items()}
    assert tables["visits_per_domain"].num_rows >= 5  # private selection kept popular domains
    assert tables["sum_duration"].num_rows >= 5
    assert sorted(tables["mean_duration"].column("domain").to_pylist()) == sorted(PUBLIC_DOMAINS)
    assert tables["persons_total"].num_rows == 1
    assert len(release.dead_letters) == data.bad_rows
    return release


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return make_dataset(tmp_path_factory.mktemp("logs"))


@pytest.fixture(scope="module")
def reference(dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> Release:
    return run_reference(tmp_path_factory.mktemp("in_memory"), dataset)


def run_cli(monkeypatch: pytest.MonkeyPatch, job_file: Path, *beam_args: str) -> Release:
    """``userdp run`` with the release secret fixed to KEY (the CLI draws a fresh one)."""
    monkeypatch.setattr(userdp.pipelines.job, "new_release_secret", lambda: SECRET)
    assert cli.main(["run", str(job_file), *beam_args]) == 0
    return read_release(load_job(job_file))


def test_multi_processing_with_two_workers_gives_the_same_bytes(
    dataset: Dataset, reference: Release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_file = write_job(tmp_path, dataset)  # a direct job file; the flags switch the mode
    flags = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")
    assert run_cli(monkeypatch, job_file, *flags) == reference


def test_portable_runner_with_the_embedded_job_service_gives_the_same_bytes(
    dataset: Dataset, reference: Release, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = '{ job_endpoint = "embed", environment_type = "LOOPBACK" }'
    job_file = write_job(tmp_path, dataset, "portable", options)
    assert run_cli(monkeypatch, job_file) == reference


def test_userdp_run_stops_on_a_refused_runner_setting(
    dataset: Dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_file = write_job(tmp_path, dataset, "portable", '{ environment_type = "PROCESS" }')
    assert cli.main(["run", str(job_file)]) == 2
    assert "runner.options.environment_type = 'PROCESS'" in capsys.readouterr().err
    job_file = write_job(tmp_path, dataset)
    assert cli.main(["run", str(job_file), "--direct_running_mode=multi_threading"]) == 2
    err = capsys.readouterr().err
    assert "--direct_running_mode (command line) = 'multi_threading'" in err
    assert "silently lost" in err
    assert not (tmp_path / "release").exists()  # stopped before anything ran
