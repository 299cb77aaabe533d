"""Issue 12, item 4: the job graph never holds the release secret, and with a key file no noise key.

The graph a runner receives is ``pipeline.to_runner_api()``: transforms whose payloads hold the
pickled functions (base64 of bz2- or zlib-compressed pickles, ``apache_beam.internal.pickler``).
The tests unpack every payload and search the raw pickles for key bytes. Positive controls make
sure the search can find what it looks for: the per-query keys are there without a key file, and
the bounding subkey (which may travel) is found in both cases.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from tests.pipelines.small_job import write_small_job
from userdp.pipelines.config import parse_job
from userdp.pipelines.job import build_pipeline, required_columns
from userdp.pipelines.plan import plan_release
from userdp.pipelines.sources import inspect_inputs
from userdp.transforms.keys import FileQueryKey, ReleaseKeys, read_key_file
from userdp.transforms.mechanisms.rng import QueryKey, derive_release_secret

pytestmark = pytest.mark.slow  # whole jobs and pipelines: `make test-all`

NONCE = bytes(range(100, 132))


def _unpacked(blob: bytes) -> Iterator[bytes]:
    """Raw pickles inside a payload (and the payload itself)."""
    yield blob
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        return
    for decompress in (bz2.decompress, zlib.decompress):
        try:
            yield decompress(raw)
        except (OSError, ValueError, zlib.error):
            continue


def graph_blobs(pipeline: beam.Pipeline) -> list[bytes]:
    """Every payload of the pipeline's runner-API graph, unpacked."""
    proto = pipeline.to_runner_api()
    out = [proto.SerializeToString()]
    for transform in proto.components.transforms.values():
        payload = transform.spec.payload
        out += _unpacked(payload)
        for kind in (beam_runner_api_pb2.ParDoPayload, beam_runner_api_pb2.CombinePayload):
            msg = kind()
            try:
                msg.ParseFromString(payload)
            except Exception:
                continue
            fn = getattr(msg, "do_fn", None) or getattr(msg, "combine_fn", None)
            if fn is not None and fn.payload:
                out += _unpacked(fn.payload)
            for side in getattr(msg, "side_inputs", {}).values():
                out += _unpacked(side.view_fn.payload)
    return out


def _query_key_bytes(keys: ReleaseKeys, name: str) -> bytes:
    key = keys.for_query(name)
    if isinstance(key, FileQueryKey):
        key = key._resolve()
    assert isinstance(key, QueryKey)
    return key.__reduce__()[1][0]


def _build(tmp_path: Path, keys: ReleaseKeys) -> tuple[beam.Pipeline, list[str]]:
    job = parse_job(write_small_job(tmp_path), base_dir=tmp_path)
    schema = inspect_inputs(
        job.input.path, job.input.format, required_columns(job), job.input.declared_types()
    )
    pipeline = beam.Pipeline(runner=FnApiRunner())
    build_pipeline(pipeline, job, plan_release(job), schema, keys, out_dir=str(tmp_path / "out"))
    return pipeline, [q.name for q in job.queries]


def test_without_a_key_file_only_per_query_keys_are_in_the_graph(tmp_path: Path) -> None:
    secret = bytes(range(32))
    keys = ReleaseKeys.from_secret(secret, None)
    pipeline, names = _build(tmp_path, keys)
    blobs = graph_blobs(pipeline)
    assert not any(secret in b for b in blobs), "the release secret is in the job graph"
    for name in names:  # positive control: each query's own key is there (and findable)
        assert any(_query_key_bytes(keys, name) in b for b in blobs), name
    assert any(keys.subkey("bounding") in b for b in blobs)


def test_with_a_key_file_no_noise_key_is_in_the_graph(tmp_path: Path) -> None:
    key_file = tmp_path / "key.bin"
    key_file.write_bytes(bytes(range(200, 232)))
    keys = ReleaseKeys.from_secret(NONCE, str(key_file))
    pipeline, names = _build(tmp_path, keys)
    blobs = graph_blobs(pipeline)
    release_secret = derive_release_secret(read_key_file(str(key_file)), NONCE)
    assert not any(release_secret in b for b in blobs)
    assert not any(key_file.read_bytes() in b for b in blobs)
    for name in names:
        assert not any(_query_key_bytes(keys, name) in b for b in blobs), name
    assert any(NONCE in b for b in blobs)  # control: the nonce travels, and the search works
    assert any(keys.subkey("bounding") in b for b in blobs)


def test_the_launcher_keys_refuse_to_be_pickled() -> None:
    import pickle  # noqa: PLC0415

    with pytest.raises(TypeError, match="must stay on the launcher"):
        pickle.dumps(ReleaseKeys.from_secret(bytes(32), None))


def test_negative_control_a_step_holding_the_secret_is_caught(tmp_path: Path) -> None:
    """What the old pipeline did (a ReleaseKey pickled into every noise step) is found."""
    from userdp.transforms.mechanisms.rng import ReleaseKey  # noqa: PLC0415

    secret = bytes(range(32))
    pipeline, _ = _build(tmp_path, ReleaseKeys.from_secret(secret, None))
    leaky = ReleaseKey(secret)
    _ = pipeline | "Leak" >> beam.Create([1]) | "HoldsTheSecret" >> beam.Map(lambda x: (x, leaky))
    assert any(secret in b for b in graph_blobs(pipeline))


def test_a_key_file_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    """A FIFO blocked the launcher's open forever (malformed-input review); too short, too long
    and missing files are named too."""
    from userdp.transforms.keys import KeyFileError  # noqa: PLC0415

    os.mkfifo(tmp_path / "fifo.key")
    with pytest.raises(KeyFileError, match=r"fifo\.key' is not a regular file"):
        read_key_file(str(tmp_path / "fifo.key"))
    with pytest.raises(KeyFileError, match=r"/dev/zero' is not a regular file"):
        read_key_file("/dev/zero")
    (tmp_path / "short.key").write_bytes(b"x" * 31)
    with pytest.raises(KeyFileError, match=r"holds 31 bytes; allowed: 32 to 4096"):
        read_key_file(str(tmp_path / "short.key"))
    with pytest.raises(KeyFileError, match=r"missing\.key' cannot be read"):
        read_key_file(str(tmp_path / "missing.key"))
    (tmp_path / "ok.key").write_bytes(bytes(range(32)))
    assert read_key_file(str(tmp_path / "ok.key")) == bytes(range(32))
