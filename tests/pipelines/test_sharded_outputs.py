"""Sharded outputs (pipelines/output_layout.py) and publication (pipelines/publish.py): a release is
complete, with every file its manifest lists, or it has no manifest; `userdp verify` tells which."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

import userdp.pipelines.query_output
from userdp.pipelines.cli import main
from userdp.pipelines.config import parse_job
from userdp.pipelines.generate import generate
from userdp.pipelines.job import ReleaseRunError, run_release
from userdp.pipelines.output_layout import auto_shards, query_files, shard_of
from userdp.pipelines.release_graph import default_shards
from userdp.pipelines.verify import verify_release
from userdp.transforms.mechanisms.rng import ReleaseKey

KEY = ReleaseKey(bytes(range(32)))
SHARDS = 4


def job_dict(data: Path, out: Path, shards: int | None) -> dict[str, Any]:
    return {
        "input": {"path": str(data), "person": "person_id"},
        "budget": {"epsilon": 4.0, "delta": 1e-6},
        "output": {"path": str(out), "format": "parquet"}
        | ({} if shards is None else {"shards": shards}),
        "queries": [
            {
                "name": "visits",
                "metric": "count",
                "by": ["domain"],
                "max_partitions_per_person": 3,
                "max_rows_per_partition": 2,
            },
            {"name": "people", "metric": "persons"},
        ],
    }


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "logs.parquet"
    generate(800, str(path), seed=11)
    return path


def run(data: Path, out: Path, shards: int | None = SHARDS, **kw: Any) -> Any:
    return run_release(parse_job(job_dict(data, out, shards)), release_key=KEY, **kw)


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_shards_are_byte_identical_across_runs_and_hold_the_unsharded_rows(
    data: Path, tmp_path: Path
) -> None:
    first = run(data, tmp_path / "a")
    again = run(data, tmp_path / "b")
    files = tree(tmp_path / "a")
    other = tree(tmp_path / "b")  # the manifests differ only in the output path's config hash
    manifests = [json.loads(t.pop("manifest.json")) for t in (dict(files), dict(other))]
    assert {k: v for k, v in files.items() if k != "manifest.json"} == {
        k: v for k, v in other.items() if k != "manifest.json"
    }
    assert manifests[0]["files"] == manifests[1]["files"]
    parts = [f"visits/part-{i:05d}-of-{SHARDS:05d}.parquet" for i in range(SHARDS)]
    assert sorted(files) == sorted([*parts, "people.parquet", "report.html", "manifest.json"])
    assert first.outputs["visits"] == str(tmp_path / "a" / "visits") + "/"
    assert again.outputs["people"] == str(tmp_path / "b" / "people.parquet")
    # the same rows as the one-file release under the same secret, each in its key's shard
    single = run(data, tmp_path / "one", shards=1, noise=False)
    sharded = run(data, tmp_path / "four", noise=False)
    rows = []
    for i in range(SHARDS):
        part = pq.read_table(Path(sharded.outputs["visits"]) / f"part-{i:05d}-of-00004.parquet")
        assert all(shard_of((r["domain"],), SHARDS) == i for r in part.to_pylist())
        assert [r["domain"] for r in part.to_pylist()] == sorted(
            r["domain"] for r in part.to_pylist()
        )
        rows += part.to_pylist()
    expected = pq.read_table(single.outputs["visits"]).to_pylist()
    assert len(expected) > SHARDS and sorted(rows, key=str) == sorted(expected, key=str)
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["outputs"] == {"visits": "visits/", "people": "people.parquet"}
    assert [f["file"] for f in manifest["files"]["visits"]] == parts
    assert verify_release(str(tmp_path / "a")) == []


def test_the_shard_count_follows_the_job_file_never_the_data() -> None:
    """From the public key file (its size bounds the rows), else 1: never from the input files'
    size, which one person's rows change."""
    assert auto_shards(None) == 1  # private partitions: set [output] shards for a large output
    assert auto_shards(1) == 1
    assert auto_shards(1_000_000) == 1
    assert auto_shards(1_000_001) == 2
    assert auto_shards(10**15) == 1024
    layout = query_files([("a", True, None), ("b", True, 2_500_000), ("c", False, None)], ".csv",
                         None)  # fmt: skip
    assert [layout[n].shards for n in "abc"] == [1, 3, 1]
    assert [f.shards for f in query_files([("a", True, None), ("c", False, None)], ".csv", 4)
            .values()] == [4, 1]  # fmt: skip
    # person shards too: their memory follows input / shards, so the count grows with the input
    direct = PipelineOptions([])
    assert default_shards("direct", direct, 0) == 8
    assert default_shards("direct", direct, 1 << 30) == 16
    assert default_shards("direct", PipelineOptions(["--direct_num_workers=4"]), 0) == 16
    assert default_shards("flink", direct, 0) == 64
    assert default_shards("dataflow", direct, 10 << 30) == 160
    with pytest.raises(Exception, match=r"output\.shards.*an integer in \[1, 1024\]"):
        parse_job(job_dict(Path("x.parquet"), Path("out"), shards=5000))
    with pytest.raises(Exception, match=r"output\.shards.*an integer in \[1, 1024\]"):
        parse_job(job_dict(Path("x.parquet"), Path("out"), shards=0))


def test_an_output_missing_after_the_run_is_refused_before_the_manifest(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runner that finishes "successfully" without writing one file (seen on Beam's DaskRunner)
    publishes nothing; the previous complete release in the directory stays as it was."""
    out = tmp_path / "release"
    run(data, out)
    before = tree(out)
    real = userdp.pipelines.query_output.write_file

    def drop_shard_2(rows: Any, by: Any, columns: Any, path: str, fmt: str) -> str:
        return path if "part-00002" in path else real(rows, by, columns, path, fmt)

    monkeypatch.setattr(userdp.pipelines.query_output, "write_file", drop_shard_2)
    with pytest.raises(
        ReleaseRunError, match=r"query 'visits' was not written \(visits/part-00002"
    ):
        run(data, out)
    assert tree(out) == before and verify_release(str(out)) == []
    assert not list(tmp_path.glob(".release.userdp-staging-*"))  # the staging was removed


def test_userdp_verify_tells_complete_from_incomplete(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "release"
    run(data, out)
    assert main(["verify", str(out)]) == 0
    (out / "visits" / "part-00009-of-00010.parquet").write_bytes(b"stale")  # an earlier layout
    assert main(["verify", str(out)]) == 1
    (out / "visits" / "part-00009-of-00010.parquet").unlink()
    part = out / "visits" / "part-00001-of-00004.parquet"
    part.write_bytes(part.read_bytes() + b"\0")
    assert verify_release(str(out)) == [
        "visits/part-00001-of-00004.parquet: differs from the manifest (size or SHA-256)"
    ]
    (out / "manifest.json").unlink()
    assert verify_release(str(out))[0].startswith("no manifest.json: not a complete release")
    assert verify_release(str(tmp_path / "typo")) == [
        f"{tmp_path / 'typo'} is not a directory: give a release directory (the job's output.path)"
    ]


def test_a_release_with_other_queries_leaves_no_file_of_the_one_before(
    data: Path, tmp_path: Path
) -> None:
    """Release Y (visits, people) then release Z (people only) into one directory: Y's visits
    must not sit beside Z's manifest, and verify flags any file the manifest does not list."""
    out = tmp_path / "release"
    run(data, out)
    assert (out / "visits").is_dir()
    only_people = job_dict(data, out, SHARDS)
    only_people["queries"] = only_people["queries"][1:]
    run_release(parse_job(only_people), release_key=KEY)
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        "people.parquet",
        "report.html",
    ]
    assert verify_release(str(out)) == []
    (out / "notes.txt").write_text("an operator's file")  # published with the release, unlisted
    assert verify_release(str(out)) == [
        "notes.txt: in the release directory but not part of this release"
    ]
    # a manifest that is not userdp's (or names '.') removes nothing: only listed output files go
    (out / "manifest.json").write_text('{"outputs": {"x": "."}, "files": {"x": [{"file": "."}]}}')
    run(data, out)
    assert (out / "notes.txt").exists() and (out / "visits").is_dir()


# A child process that runs the release and is killed — os._exit, like SIGKILL: no cleanup, no
# finally — at the n-th call of a step: inside the pipeline, or between the renames of publishing.
KILLED_RUN = textwrap.dedent(
    """
    import os, sys, json
    from pathlib import Path
    import userdp.pipelines.query_output as qo
    from apache_beam.io.filesystems import FileSystems
    from userdp.pipelines.config import parse_job
    from userdp.pipelines.job import run_release
    from userdp.transforms.mechanisms.rng import ReleaseKey

    where, n = sys.argv[2], int(sys.argv[3])
    calls = [0]
    def killing(real):
        def step(*args, **kw):
            calls[0] += 1
            if calls[0] == n:
                os._exit(9)
            return real(*args, **kw)
        return step
    if where == "write":
        qo.write_file = killing(qo.write_file)
    else:
        FileSystems.rename = killing(FileSystems.rename)
    job = parse_job(json.loads(sys.argv[1]))
    run_release(job, release_key=ReleaseKey(bytes(range(32))))
    """
)


@pytest.mark.parametrize(
    ("where", "n"),
    [("write", 1), ("write", 3), ("rename", 1), ("rename", 3), ("rename", 6), ("rename", 7)],
)
def test_a_run_killed_at_any_point_leaves_no_complete_looking_release(
    data: Path, tmp_path: Path, where: str, n: int
) -> None:
    """Killed during the pipeline (the n-th file write) or during publishing (the n-th rename:
    5 outputs, the report 6th, the manifest 7th): over an earlier complete release of the same
    job, the directory afterwards verifies as complete only if it is exactly the earlier release
    — never a mixture — and a re-run replaces it with a complete one."""
    out = tmp_path / "release"
    run(data, out)
    before = tree(out)
    spec = json.dumps(job_dict(data, out, SHARDS))
    child = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, spec, where, str(n)], capture_output=True, check=False
    )
    assert child.returncode == 9, child.stderr.decode()[-2000:]
    problems = verify_release(str(out))
    if where == "write":  # nothing published yet: the earlier release is untouched
        assert problems == [] and tree(out) == before
    else:  # the manifest went first: incomplete until the re-run
        assert problems and problems[0].startswith("no manifest.json")
    run(data, out)
    assert verify_release(str(out)) == [] and tree(out) == before
