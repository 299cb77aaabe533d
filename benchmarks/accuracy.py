"""Accuracy of count, persons, sum and mean per domain: userdp beside PipelineDP, one run.

Same generated log for both (``--family``: ``within-bounds``, where no person exceeds L or C so
the raw and the bounded truth agree, or ``browsing``, ``userdp generate``'s log), same
parameters for both libraries: ε = 1 and δ = 10^-6 *per metric* (each metric is its own release,
so neither library shares a selection), Laplace noise, L = 5 partitions per person, C = 3 rows per
partition, durations clamped to [0, 600] s; private partition selection, and public partitions
(every domain of the generator). ``--runs`` runs per library; userdp's noise comes from fixed
per-run secrets (so the run is reproducible), PipelineDP's from its own samplers.

Printed per metric and partition mode, for each library:

* partitions released (mean over runs);
* median and p90 |released − raw truth| over the partitions *both* libraries released in the same
  run index (so a library is not penalised for releasing smaller partitions);
* for userdp also against the contribution-bounded truth (the same release with the noise off
  through the test hook, under the same secret: bounding is keyed by it) and, for the mean, the
  average of released − bounded truth (bias) and the sd of (released − bounded)/stddev (1 when the
  stated stddev is right).

PipelineDP runs in a child process of ``--pipelinedp-python`` (it pins its own dependencies;
``python -m venv /tmp/venv-pipelinedp && /tmp/venv-pipelinedp/bin/pip install pipeline-dp==0.3.1
apache-beam pyarrow``); without one, only userdp's rows are printed.

``--auto-bound`` prints instead the table of ``bound = "auto"`` beside the best clamp in hindsight
and the shifted inverse total (``benchmarks/auto_bound.py``, 100,000 persons, 200 runs).

Usage: python benchmarks/accuracy.py [--family within-bounds|browsing] [--people 5000] [--runs 10]
                                    [--pipelinedp-python PATH] [--auto-bound]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq

PERSON, DOMAIN, VALUE = "person_id", "domain", "duration_s"
L, C, LO, HI = 5, 3, 0.0, 600.0
EPSILON, DELTA = 1.0, 1e-6
METRICS = ("count", "persons", "sum", "mean")
MODES = ("private", "public")
Results = dict[str, dict[str, float]]  # "metric/mode" → {domain: released value}


def within_bounds_log(people: int, path: Path, seed: int = 7) -> tuple[str, int]:
    """A log no contribution bound cuts: each person visits 1–5 distinct domains (Zipf(1.1)
    popularity over 2,000 domains) with 1–3 rows each and durations uniform in [0, 600] s, so the
    contribution-bounded truth equals the raw truth for both libraries and every error is the
    mechanisms' own (noise and selection)."""
    import pyarrow as pa  # noqa: PLC0415

    if path.exists():
        return str(path), pq.ParquetFile(path).metadata.num_rows
    gen = np.random.default_rng(seed)  # data, not noise
    weights = 1.0 / np.arange(1, 2001) ** 1.1
    weights /= weights.sum()
    persons, domains, durations = [], [], []
    for p in range(people):
        k = int(gen.integers(1, L + 1))
        for d in gen.choice(2000, size=k, replace=False, p=weights):
            r = int(gen.integers(1, C + 1))
            persons += [p] * r
            domains += [f"d{int(d):04d}.example"] * r
            durations += gen.uniform(LO, HI, r).tolist()
    table = pa.table({PERSON: pa.array(persons, pa.int64()), DOMAIN: domains, VALUE: durations})
    pq.write_table(table, path)
    return str(path), table.num_rows


def _domains(data: str) -> list[str]:
    return sorted(set(pq.read_table(data, columns=[DOMAIN]).column(DOMAIN).to_pylist()))


def raw_truth(data: str) -> Results:
    t = pq.read_table(data, columns=[PERSON, DOMAIN, VALUE])
    g = t.group_by(DOMAIN).aggregate(
        [(PERSON, "count"), (PERSON, "count_distinct"), (VALUE, "sum"), (VALUE, "mean")]
    )
    d = g.column(DOMAIN).to_pylist()
    cols = {
        "count": f"{PERSON}_count",
        "persons": f"{PERSON}_count_distinct",
        "sum": f"{VALUE}_sum",
        "mean": f"{VALUE}_mean",
    }
    out: Results = {}
    for m, c in cols.items():
        values = dict(zip(d, g.column(c).to_pylist(), strict=True))
        for mode in MODES:
            out[f"{m}/{mode}"] = values
    return out


def _read_rows(tmp: str) -> dict[str, list[list[Any]]]:
    """ "metric/mode" → the JSON rows its sink wrote (the files ``{metric}_{mode}-*``)."""
    return {
        f"{m}/{mode}": [
            json.loads(line)
            for f in Path(tmp).glob(f"{m}_{mode}-*")
            for line in f.read_text().splitlines()
        ]
        for m in METRICS
        for mode in MODES
    }


# --- userdp --------------------------------------------------------------------------------------


def run_userdp(data: str, run: int, *, noise: bool) -> tuple[Results, Results]:
    """(values, stddevs) of the eight releases of run ``run`` (each its own Release)."""
    import userdp.transforms as dp  # noqa: PLC0415 (not needed by the PipelineDP child)
    from userdp.transforms.mechanisms.rng import ReleaseKey  # noqa: PLC0415

    domains = _domains(data)
    transforms = {"count": dp.Count, "persons": dp.Persons, "sum": dp.Sum, "mean": dp.Mean}
    with tempfile.TemporaryDirectory() as tmp:
        for m in METRICS:
            for mode in MODES:
                name = f"{m}_{mode}"
                secret = hashlib.sha256(f"userdp.bench.accuracy/{run}/{name}".encode()).digest()
                release = dp.Release._for_launcher(  # fixed secret: a test hook
                    dp.Budget(epsilon=EPSILON, delta=DELTA), ReleaseKey(secret), noise=noise
                )
                params: dict[str, Any] = {"by": [DOMAIN], "max_partitions_per_person": L}
                if m != "persons":
                    params["max_rows_per_partition"] = C
                if m in ("sum", "mean"):
                    params |= {"value": VALUE, "bounds": [LO, HI]}
                if mode == "public":
                    params["public_partitions"] = domains
                # δ only where it is spent: Laplace noise on public keys is pure ε
                delta = {"delta": DELTA} if mode == "private" else {}
                # each release its own pipeline, as the library requires (one Release per
                # pipeline): eight separate publications of one log
                with beam.Pipeline() as p:
                    rows = p | beam.io.ReadFromParquetBatched(data, columns=[PERSON, DOMAIN, VALUE])
                    people = rows | f"{name}/ByPerson" >> release.ByPerson(
                        PERSON, person_type="int", keys={DOMAIN: "string"}, values=[VALUE]
                    )
                    out = people | name >> transforms[m](epsilon=EPSILON, **delta, **params)
                    _ = (
                        out
                        | f"{name}/json"
                        >> beam.Map(lambda r: json.dumps([r.domain, r.value, r.stddev]))
                        | f"{name}/write" >> beam.io.WriteToText(f"{tmp}/{name}")
                    )
        rows = _read_rows(tmp)
    values = {key: {r[0]: r[1] for r in lines} for key, lines in rows.items()}
    stddevs = {key: {r[0]: r[2] for r in lines} for key, lines in rows.items()}
    return values, stddevs


# --- PipelineDP (child process) ------------------------------------------------------------------


def run_pipelinedp(data: str, runs: int) -> list[Results]:
    import pipeline_dp  # noqa: PLC0415 (only in the child's interpreter)
    from pipeline_dp import private_beam  # noqa: PLC0415

    domains = _domains(data)
    results: list[Results] = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            accountants = []
            with beam.Pipeline() as p:
                rows = p | beam.io.ReadFromParquet(data, columns=[PERSON, DOMAIN, VALUE])
                for m in METRICS:
                    for mode in MODES:
                        name = f"{m}_{mode}"
                        acc = pipeline_dp.NaiveBudgetAccountant(EPSILON, DELTA)
                        accountants.append(acc)
                        private = rows | f"{name}/MakePrivate" >> private_beam.MakePrivate(
                            budget_accountant=acc, privacy_id_extractor=lambda r: r[PERSON]
                        )
                        public = domains if mode == "public" else None
                        common: dict[str, Any] = {
                            "noise_kind": pipeline_dp.NoiseKind.LAPLACE,
                            "max_partitions_contributed": L,
                            "partition_extractor": lambda r: r[DOMAIN],
                        }
                        if m == "persons":
                            t = private_beam.PrivacyIdCount(
                                pipeline_dp.PrivacyIdCountParams(**common), public_partitions=public
                            )
                        elif m == "count":
                            t = private_beam.Count(
                                pipeline_dp.CountParams(
                                    max_contributions_per_partition=C, **common
                                ),
                                public_partitions=public,
                            )
                        else:
                            params_cls = (
                                pipeline_dp.SumParams if m == "sum" else pipeline_dp.MeanParams
                            )
                            t = (private_beam.Sum if m == "sum" else private_beam.Mean)(
                                params_cls(
                                    max_contributions_per_partition=C, min_value=LO, max_value=HI,
                                    value_extractor=lambda r: r[VALUE], **common,
                                ),
                                public_partitions=public,
                            )  # fmt: skip
                        out = private | name >> t
                        _ = (
                            out
                            | f"{name}/json" >> beam.Map(lambda kv: json.dumps([kv[0], kv[1]]))
                            | f"{name}/write" >> beam.io.WriteToText(f"{tmp}/{name}")
                        )
                for acc in accountants:
                    acc.compute_budgets()
            rows = _read_rows(tmp)
            results.append({key: {r[0]: float(r[1]) for r in lines} for key, lines in rows.items()})
    return results


# --- the table -----------------------------------------------------------------------------------


def _errors(
    runs: list[Results], other: list[Results] | None, truth: list[Results], key: str
) -> list[float]:
    out = []
    for i, res in enumerate(runs):
        keys = set(res[key]) if other is None else set(res[key]) & set(other[i][key])
        out += [abs(res[key][k] - truth[i][key][k]) for k in keys if k in truth[i][key]]
    return out


def _fmt(errors: list[float]) -> str:
    if not errors:
        return "      —         —"
    return f"{np.median(errors):9.3g} {np.percentile(errors, 90):9.3g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--people", type=int, default=5000)
    ap.add_argument(
        "--family",
        choices=["within-bounds", "browsing"],
        default="within-bounds",
        help="within-bounds: no person exceeds L or C (raw truth = bounded truth); browsing: "
        "`userdp generate`'s log, where bounding cuts",
    )
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--pipelinedp-python")
    ap.add_argument("--data-dir", default=str(Path(tempfile.gettempdir()) / "userdp-bench"))
    ap.add_argument("--only", choices=["pipelinedp"])
    ap.add_argument("--data-file")
    ap.add_argument("--result")
    ap.add_argument("--auto-bound", action="store_true", help="the auto bound's table instead")
    args = ap.parse_args()
    if args.auto_bound:
        from auto_bound import report  # noqa: PLC0415 (benchmarks/ is sys.path[0])

        report(people=100_000, runs=200)
        return
    if args.only == "pipelinedp":  # the child
        Path(args.result).write_text(json.dumps(run_pipelinedp(args.data_file, args.runs)))
        return

    from throughput import ensure_data  # noqa: PLC0415 (benchmarks/ is sys.path[0])

    Path(args.data_dir).mkdir(parents=True, exist_ok=True)
    if args.family == "browsing":
        data, rows, _ = ensure_data(args.people, Path(args.data_dir))
    else:
        data, rows = within_bounds_log(
            args.people, Path(args.data_dir) / f"within-{args.people}.parquet"
        )
    raw = raw_truth(data)
    ours = [run_userdp(data, r, noise=True) for r in range(args.runs)]
    bounded = [run_userdp(data, r, noise=False)[0] for r in range(args.runs)]
    values = [v for v, _ in ours]
    peer: list[Results] | None = None
    if args.pipelinedp_python:
        with tempfile.TemporaryDirectory() as tmp:
            result = Path(tmp) / "pdp.json"
            cmd = [args.pipelinedp_python, __file__, "--only", "pipelinedp"]
            cmd += ["--data-file", data, "--runs", str(args.runs), "--result", str(result)]
            subprocess.run(cmd, check=True)
            peer = json.loads(result.read_text())
    raws = [raw] * args.runs
    print(
        f"{args.family}: {args.people:,} persons, {rows:,} rows, {len(_domains(data))} domains; "
        f"ε = {EPSILON}, "
        f"δ = {DELTA} per metric, L = {L}, C = {C}, values in [{LO:g}, {HI:g}]; {args.runs} runs"
    )
    print(
        "| metric | partitions | library | released | median / p90 \\|err\\| vs raw "
        "(both released) | median / p90 \\|err\\| vs bounded |"
    )
    print("|---|---|---|---|---|---|")
    for m in METRICS:
        for mode in MODES:
            key = f"{m}/{mode}"
            table = [("userdp", values, peer, _fmt(_errors(values, None, bounded, key)))]
            if peer is not None:
                table.append(("PipelineDP", peer, values, "n/a"))
            for lib, runs, other, vs_bounded in table:
                kept = statistics.mean(len(r[key]) for r in runs)
                vs_raw = _fmt(_errors(runs, other, raws, key))
                print(f"| {m} | {mode} | {lib} | {kept:.1f} | {vs_raw} | {vs_bounded} |")
    for mode in MODES:
        key = f"mean/{mode}"
        diffs, zs = [], []
        for (v, s), t in zip(ours, bounded, strict=True):
            for k, x in v[key].items():
                diffs.append(x - t[key][k])
                zs.append((x - t[key][k]) / s[key][k] if s[key][k] > 0 else 0.0)
        print(
            f"userdp mean ({mode}): average released − bounded truth {np.mean(diffs):+.3g}, "
            f"sd of z = (released − bounded)/stddev {np.std(zs):.3g}"
        )


if __name__ == "__main__":
    sys.exit(main())
