"""PipelineDP's ``private_beam.Count`` per key on a Parquet log: the peer in throughput.py.

Run by ``benchmarks/throughput.py --pipelinedp PYTHON`` with an interpreter that has PipelineDP
(``python -m venv /tmp/venv-pipelinedp && /tmp/venv-pipelinedp/bin/pip install pipeline-dp==0.3.1
apache-beam pyarrow``), so it imports nothing of userdp. The same release as userdp's count: ε = 1,
δ = 10⁻⁶, Laplace noise, L = 5 partitions per person, C = 3 rows per partition, private partition
selection; on Beam's FnApiRunner in memory, as ``userdp run`` runs ``direct``. Writes the released
counts as one JSON object to OUT.

Usage: PYTHON benchmarks/pipelinedp_count.py DATA.parquet BY_COLUMN OUT.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

import apache_beam as beam
import pipeline_dp  # type: ignore[import-not-found, unused-ignore]
from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner
from apache_beam.transforms import combiners
from pipeline_dp import private_beam  # type: ignore[import-not-found, unused-ignore]

PERSON, L, C, EPSILON, DELTA = "person_id", 5, 3, 1.0, 1e-6


def write(counts: list[tuple[Any, float]], path: str) -> None:
    with open(path, "w") as f:
        json.dump({str(k): v for k, v in counts}, f)


def main(data: str, by: str, out: str) -> None:
    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=DELTA)
    params = pipeline_dp.CountParams(
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        max_partitions_contributed=L,
        max_contributions_per_partition=C,
        partition_extractor=lambda row: row[by],
    )
    with beam.Pipeline(runner=FnApiRunner()) as p:
        rows = p | "Read" >> beam.io.ReadFromParquet(data, columns=[PERSON, by])
        private = rows | "MakePrivate" >> private_beam.MakePrivate(
            budget_accountant=accountant, privacy_id_extractor=lambda row: row[PERSON]
        )
        counts = private | "Count" >> private_beam.Count(params)
        accountant.compute_budgets()
        _ = counts | "Collect" >> combiners.ToList() | "Write" >> beam.Map(write, out)


if __name__ == "__main__":
    main(*sys.argv[1:4])
