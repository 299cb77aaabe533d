"""userdp inside your own Beam pipeline: the README's library example, run as it is by a test.

    python examples/library_pipeline.py [--logs 'logs/*.parquet'] [--out out/] [beam options]

Without ``--logs`` it first writes a small synthetic browsing log (``userdp generate``'s) into
``--out``. It reads the log with Beam's own Parquet reader, releases visits per domain and the
median visit duration with person-level differential privacy (ε = 1, δ = 10⁻⁶ in all), and
writes them as JSON lines with Beam's text sink; rejected rows go to the operator's folder.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

import userdp.transforms as dp


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", help="Parquet files of visits (default: generate some)")
    parser.add_argument("--out", default="library_release", help="output folder")
    args, beam_args = parser.parse_known_args(argv)
    out = Path(args.out)
    logs = args.logs or _demo_logs(out)

    ops = out.parent / "ops"  # raw private rows: a folder only its owner can open
    ops.mkdir(mode=0o700, parents=True, exist_ok=True)
    ops.chmod(0o700)

    release = dp.Release(dp.Budget(epsilon=1, delta=1e-6))
    with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
        rows = p | beam.io.ReadFromParquet(logs)  # dicts; Arrow batches work too
        people = rows | release.ByPerson(
            "person_id", person_type="int", keys={"domain": "string"}, values=["duration_s"]
        )
        visits = people | "visits" >> dp.Count(
            by=["domain"], max_partitions_per_person=5, max_rows_per_partition=3,
            epsilon=0.5, delta=1e-6,
        )  # fmt: skip
        median = people | "median_duration" >> dp.Median(
            value="duration_s", per_person="mean", bounds=[0, 600], epsilon=0.5
        )
        for name, released in (("visits", visits), ("median_duration", median)):
            _ = (
                released
                | f"{name}/json" >> beam.Map(lambda row: json.dumps(row.as_dict()))
                | f"{name}/write" >> beam.io.WriteToText(str(out / name), ".jsonl")
            )
        # raw private rows: only ever to the operator's path, never next to the release
        _ = people.dead_letter | beam.io.WriteToText(str(ops / "rejected"))
    (out / "manifest.json").write_text(json.dumps(release.manifest(), indent=2))
    print(f"released {release.spent} to {out}/ (manifest.json: what was spent, and how)")


def _demo_logs(out: Path) -> str:
    from userdp.pipelines.generate import generate  # noqa: PLC0415

    path = out.parent / "demo_logs" / "logs.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    generate(2000, str(path), seed=3)
    return str(path)


if __name__ == "__main__":
    main()
