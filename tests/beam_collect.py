"""Run a small Beam pipeline and read back what its branches produced, without shared state.

Wiring tests used module-level lists filled by a ``beam.Map`` — which works only while the runner
executes in the test's own process. Here every branch is written to text files (each element
pickled, base64 on one line) in a temporary directory and read back after the run, so the helper
holds nothing between runs and works on any runner that shares the local filesystem. Tests that
know the exact expected output use ``apache_beam.testing.util.assert_that`` directly.
"""

from __future__ import annotations

import base64
import pickle
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner


def _encode(element: Any) -> str:
    return base64.b64encode(pickle.dumps(element)).decode("ascii")


def run_and_collect(
    build: Callable[[beam.Pipeline], Mapping[str, Any]],
) -> dict[str, list[Any]]:
    """``build(p)`` adds steps and returns tag → PCollection; returns tag → its elements."""
    with tempfile.TemporaryDirectory(prefix="userdp-test-") as tmp:
        with beam.Pipeline(runner=FnApiRunner()) as p:
            branches = dict(build(p))
            for tag, pcoll in branches.items():
                _ = (
                    pcoll
                    | f"Encode[{tag}]" >> beam.Map(_encode)
                    | f"Write[{tag}]" >> beam.io.WriteToText(str(Path(tmp) / tag))
                )
        return {
            tag: [
                pickle.loads(base64.b64decode(line))
                for f in sorted(Path(tmp).glob(f"{tag}-*"))
                for line in f.read_text().splitlines()
            ]
            for tag in branches
        }
