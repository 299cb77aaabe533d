"""Compressed CSV / JSONL inputs (pipelines/compression.py): the same release as the plain files,
and every misuse refused before anything is charged, by name."""

from __future__ import annotations

import bz2
import gzip
import lzma
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import zstandard

from userdp.pipelines.config import ConfigError, parse_job
from userdp.pipelines.generate import generate
from userdp.pipelines.job import ReleaseRunError, run_release
from userdp.pipelines.sources import SchemaError
from userdp.transforms.mechanisms.rng import ReleaseKey

KEY = ReleaseKey(bytes(range(32)))
CODECS: dict[str, Callable[[bytes], bytes]] = {
    "gz": gzip.compress,
    "bz2": bz2.compress,
    "zst": lambda b: zstandard.ZstdCompressor().compress(b),
    "xz": lzma.compress,
}


def job(tmp: Path, data: Path, **input_keys: Any) -> dict[str, Any]:
    return {
        "input": {"path": str(data), "person": "person_id", "person_type": "int"} | input_keys,
        "budget": {"epsilon": 4.0, "delta": 1e-6},
        "output": {"path": str(tmp / "release"), "format": "csv"},
        "queries": [
            {
                "name": "visits",
                "metric": "count",
                "by": ["domain"],
                "max_partitions_per_person": 3,
                "max_rows_per_partition": 2,
            },
            {
                "name": "total",
                "metric": "sum",
                "value": "duration_s",
                "bounds": [0, 600],
                "max_rows_per_partition": 4,
            },
        ],
    }


def release_bytes(tmp: Path, data: Path, **input_keys: Any) -> dict[str, bytes]:
    tmp.mkdir(parents=True, exist_ok=True)
    result = run_release(parse_job(job(tmp, data, **input_keys), base_dir=tmp), release_key=KEY)
    return {name: Path(path).read_bytes() for name, path in result.outputs.items()}


def compressed(plain: Path, codec: str, name: str | None = None) -> Path:
    out = plain.parent / (name or f"{plain.name}.{codec}")
    out.write_bytes(CODECS[codec](plain.read_bytes()))
    return out


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("plain")
    out = {fmt: d / f"logs.{fmt}" for fmt in ("csv", "jsonl")}
    for path in out.values():
        generate(600, str(path), seed=5)
    return out


@pytest.fixture(scope="module")
def reference(plain: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return {
        fmt: release_bytes(tmp_path_factory.mktemp(f"ref-{fmt}"), path)
        for fmt, path in plain.items()
    }


def test_a_gzipped_csv_gives_the_plain_files_release(
    plain: dict[str, Path], reference: dict[str, Any], tmp_path: Path
) -> None:
    # format and codec both from the name: logs.csv.gz is csv through gzip
    got = release_bytes(tmp_path, compressed(plain["csv"], "gz"))
    assert got == reference["csv"]
    assert got["visits"].count(b"\n") > 2  # a real release, not two empty files


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "codec"), [("jsonl", "gz"), ("csv", "bz2"), ("jsonl", "zst"), ("csv", "xz")]
)
def test_every_codec_gives_the_plain_files_release(
    plain: dict[str, Path], reference: dict[str, Any], tmp_path: Path, fmt: str, codec: str
) -> None:
    assert release_bytes(tmp_path, compressed(plain[fmt], codec)) == reference[fmt]


@pytest.mark.slow
def test_an_explicit_codec_reads_a_file_without_its_extension(
    plain: dict[str, Path], reference: dict[str, Any], tmp_path: Path
) -> None:
    data = compressed(plain["csv"], "gz", name="logs-gzipped.data")
    got = release_bytes(tmp_path, data, format="csv", compression="gzip")
    assert got == reference["csv"]


def parse(tmp: Path, data: Path, **input_keys: Any) -> Any:
    return parse_job(job(tmp, data, **input_keys), base_dir=tmp)


def test_misuse_is_refused_by_name_before_anything_runs(
    plain: dict[str, Path], tmp_path: Path
) -> None:
    parquet = tmp_path / "logs.parquet"
    generate(20, str(parquet), seed=1)
    with pytest.raises(ConfigError, match=r"input\.compression.*parquet compresses inside"):
        parse(tmp_path, parquet, compression="gzip")
    with pytest.raises(ConfigError, match=r"input\.compression.*one of auto, none, gzip"):
        parse(tmp_path, plain["csv"], compression="rar")
    # a whole-file codec on Parquet, from the name: refused before the ledger or the pipeline
    gz = compressed(parquet, "gz")
    with pytest.raises(SchemaError, match=r"logs\.parquet\.gz: a parquet file cannot be read "):
        run_release(parse(tmp_path, gz, format="parquet"), release_key=KEY)
    # a plain CSV file that its name calls gzip: the header cannot be read; no value is quoted
    liar = tmp_path / "plain.csv.gz"
    liar.write_bytes(plain["csv"].read_bytes())
    refused = r"read as csv compressed with gzip \(zlib\.error\); allowed"
    with pytest.raises(SchemaError, match=refused):
        run_release(parse(tmp_path, liar), release_key=KEY)
    # the same for JSONL, which has no header: its first bytes are decompressed all the same
    liar = tmp_path / "plain.jsonl.gz"
    liar.write_bytes(plain["jsonl"].read_bytes())
    with pytest.raises(SchemaError, match=r"read as jsonl compressed with gzip \(zlib\.error\)"):
        run_release(parse(tmp_path, liar, format="jsonl"), release_key=KEY)
    assert not (tmp_path / "release").exists()


def test_a_truncated_archive_fails_the_run_and_publishes_nothing(
    plain: dict[str, Path], tmp_path: Path
) -> None:
    whole = gzip.compress(plain["jsonl"].read_bytes() * 40)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])  # the header is fine; the end is missing
    with pytest.raises(ReleaseRunError, match=r"cut\.jsonl\.gz.*cannot be read as jsonl") as e:
        run_release(parse(tmp_path, cut), release_key=KEY)
    assert e.value.input_error
    assert not (tmp_path / "release").exists()
