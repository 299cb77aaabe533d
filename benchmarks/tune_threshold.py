"""Which cell threshold should ``userdp tune`` use? Many simulated tuning runs per threshold,
scored by the true expected error of the recommended (L, C) against the best (L, C) in hindsight.

``ContributionModel`` zeroes every cell of the noisy joint histogram below
``CELL_THRESHOLD``/ε_h (docs/tuning.md, section 2). A low threshold lets an empty cell far from the
data survive now and then (289 cells: ≈ 289·½e^−T per run) and its phantom rows make a large L or
C look cheap; a high one hides more of a heavy tail. This script measures the trade-off cheaply:

1. per family, the log is generated once and the **exact** histogram the tuner noises is built by
   the tuner's own code: ``shard_structure`` (the Beam side's per-shard statistic; the whole log
   is one shard, which holds all rows of its persons) and ``ContributionHistograms.grid_sums``
   (each n/P rounded to the noise grid 2^k, as ``release_pair_counts`` does);
2. each simulated run adds the mechanism's noise to it: per cell, a discrete Laplace integer of the
   mechanism's own grid scale t = (1 + 289·g)/(ε_h·g) (``LaplaceMechanism``: P(x) ∝ e^(−|x|/t)),
   drawn as the difference of two i.i.d. geometric variables with q = e^(−1/t), then
   (units + noise)·g as ``_noisy`` does. numpy's RNG (not the secure sampler): nothing here is
   released;
3. the recommendation is the real ``tune_recommend.recommend`` (``ContributionModel``,
   ``count_settings``, ``best``, the no-signal rule) with ``CELL_THRESHOLD`` set per run; only the
   job's noise per L (``noise_model``, re-planned at each L, deterministic) is cached across runs;
4. the score is ``benchmarks/tuning.py``'s ``true_error`` of the recommendation over the best of
   its grid (plus the tuner's own candidates).

The same noisy histograms serve every threshold and both query budgets (common random numbers;
the tuning measurement does not depend on the query's ε).

``--validate N`` also runs the real ``run_tune`` (Beam, Direct runner) N times on the first family
and compares: the exact histogram (``noise=False``) with step 1's, the real noise (real − exact)
with step 2's distribution, the real recommendation with step 3 applied to the real noisy
histogram, and the real recommendations' distribution with the simulated one at threshold 8.

    .venv/bin/python benchmarks/tune_threshold.py --runs 500 --validate 10   # ~30 min, one core
    (about 39 ms per recommendation: families × runs × 6 thresholds × 2 budgets of them; the
    validation needs threshold 8 among --thresholds)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tuning as bench

from userdp.pipelines import tune_recommend
from userdp.pipelines.config import load_job
from userdp.pipelines.generate import PAGES, SCHEMA, SPAN, START, generate
from userdp.pipelines.job import check_job
from userdp.pipelines.tune import MEASUREMENTS, run_tune
from userdp.pipelines.tune_model import CELL_THRESHOLD, noise_model, tuning_groups
from userdp.transforms.columns import PERSON_COLUMN
from userdp.transforms.contribution_structure import shard_structure
from userdp.transforms.mechanisms.rng import ReleaseKey

THRESHOLDS = (6.0, 8.0, 10.0, 11.0, 12.0, 14.0)


# --- heavy-tailed logs (same columns as userdp generate) ------------------------------------------


def _truncated_zipf(rng: np.random.Generator, s: float, cap: int, size: int) -> np.ndarray:
    """Integers in 1…cap with P(k) ∝ k^−s."""
    p = 1.0 / np.arange(1, cap + 1) ** s
    return rng.choice(cap, size=size, p=p / p.sum()) + 1


def zipf_log(out: Path, people: int, seed: int, spec: dict[str, Any]) -> int:
    """A browsing log with heavy tails. ``spec["kind"]``:

    * ``visits``: visits per person ~ Zipf(``visits``) up to ``cap``, each visit's domain
      Zipf(``skew``) over ``domains`` (the generator's model with Zipf visits, no bots);
    * ``pr``: partitions per person P ~ Zipf(``p``) up to ``domains``, the P domains drawn without
      replacement with Zipf(``skew``) weights, rows per (person, domain) ~ Zipf(``r``) up to
      ``cap``.
    """
    rng = np.random.default_rng(1000 + seed)  # synthetic data, not noise
    k = spec["domains"]
    w = 1.0 / np.arange(1, k + 1) ** spec["skew"]
    w /= w.sum()
    if spec["kind"] == "visits":
        visits = _truncated_zipf(rng, spec["visits"], spec["cap"], people)
        person = np.repeat(np.arange(people, dtype=np.int64), visits)
        domain = rng.choice(k, size=len(person), p=w)
    else:
        P = _truncated_zipf(rng, spec["p"], k, people)
        logw = np.log(w)
        doms = []
        for n in P:  # Gumbel top-n: n domains without replacement, weights w
            g = logw + rng.gumbel(size=k)
            doms.append(np.argpartition(-g, n - 1)[:n] if n < k else np.arange(k))
        pair_domain = np.concatenate(doms)
        pair_person = np.repeat(np.arange(people, dtype=np.int64), P)
        rows = _truncated_zipf(rng, spec["r"], spec["cap"], len(pair_domain))
        person, domain = np.repeat(pair_person, rows), np.repeat(pair_domain, rows)
    n = len(person)
    names = pa.array([f"site{d:03d}.example" for d in range(k)])
    dom = pc.take(names, pa.array(domain))
    page = pc.cast(pa.array(_truncated_zipf(rng, 1.0, PAGES, n) - 1), pa.string())
    url = pc.binary_join_element_wise("https://", dom, "/p/", page, "")
    table = pa.table(
        [pa.array(person + 1_000_000), url, dom,
         pa.array(START + rng.integers(0, SPAN, size=n, dtype=np.int64)),
         pa.array(rng.lognormal(mean=3.5, sigma=1.2, size=n))],
        schema=SCHEMA,
    )  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)
    return n


HEAVY = {
    "zipf visits (Zipf(1.6) visits ≤ 10^4, 200 domains)": dict(
        kind="visits", visits=1.6, cap=10_000, domains=200, skew=1.1, people=100_000
    ),
    "zipf P, r (Zipf(2) both, 500 domains)": dict(
        kind="pr", p=2.0, r=2.0, cap=10_000, domains=500, skew=1.0, people=100_000
    ),
    "zipf P, r (P Zipf(1.5), r Zipf(1.8), 300 domains)": dict(
        kind="pr", p=1.5, r=1.8, cap=10_000, domains=300, skew=1.0, people=50_000
    ),
}


# --- the simulation -------------------------------------------------------------------------------


class Family:
    """One log: its true pairs (for the score), the exact histogram the tuner noises, and one job
    per query ε (plan, groups, cached noise per L)."""

    def __init__(self, name: str, data: Path, epsilons: list[Fraction], tune_eps: Fraction):
        self.name, self.data = name, data
        self.d, self.r, self.p, names = bench.pairs(str(data))
        self.k = len(names)
        keys = data.parent / "keys.json"
        keys.write_text(json.dumps(names))
        self.jobs: dict[Fraction, dict[str, Any]] = {}
        for eps in epsilons:
            path = data.parent / f"job-{float(eps):g}.toml"
            path.write_text(bench.JOB.format(data=data, eps=float(eps), out=data.parent / "out",
                                             partitions=f'"{keys}"', delta=""))  # fmt: skip
            job = load_job(path)
            checked = check_job(job, ())
            groups = tuning_groups(job, tune_eps, checked.schema)
            (plan,) = groups.plans
            sd = checked.plan.to_manifest()["queries"][0]["statistic"]["stddev"]
            b1 = sd / math.sqrt(2) / 15  # Laplace scale per unit of L·C (the job has L·C = 15)
            scores = {
                (L, C): bench.true_error(self.d, self.r, self.p, k=self.k, b1=b1, L=L, C=C)
                for L in sorted(set(bench.GRID) | set(plan.histogram.edges))
                for C in sorted(set(bench.GRID) | set(plan.histogram.edges))
            }
            (bl, bc), best = min(scores.items(), key=lambda kv: kv[1])
            self.jobs[eps] = dict(job=job, checked=checked, groups=groups, scores=scores,
                                  best=best, best_lc=(bl, bc),
                                  noise=noise_model(job, 0))  # fmt: skip
        self.plan = plan  # the structure measurement: same for every query ε
        h = plan.histogram
        self.mech = h.mechanism()
        table = pq.read_table(data, columns=["person_id", "domain"]).rename_columns(
            [PERSON_COLUMN, "domain"]
        )
        pairs, _ = shard_structure(table, plan.by, h, None, plan.public_keys)
        self.pairs = pairs
        g = Fraction(2) ** self.mech.grid_exponent
        self.units = np.array([int(v / g) for v in h.grid_sums(pairs, self.mech.grid_exponent)],
                              dtype=np.int64)  # fmt: skip
        self.exact = [float(v) for v in h.grid_sums(pairs, self.mech.grid_exponent)]

    def noisy(self, rng: np.random.Generator) -> list[list[float]]:
        """One simulated release: discrete Laplace of the mechanism's grid scale on every cell."""
        t = float(self.mech._grid_scale)
        q = -math.expm1(-1.0 / t)  # P(success) of the geometric: 1 − e^(−1/t)
        n = self.units.size
        x = self.units + (rng.geometric(q, n) - rng.geometric(q, n))
        flat = [math.ldexp(float(v), self.mech.grid_exponent) for v in x]
        s = self.plan.histogram.size
        return [flat[i * s : (i + 1) * s] for i in range(s)]

    def recommend(
        self, eps: Fraction, grid: list[list[float]], threshold: float
    ) -> tuple[int, int, bool]:
        """The real ``recommend`` at ``threshold`` on one noisy histogram."""
        j = self.jobs[eps]
        cached = j["noise"]
        tune_recommend.CELL_THRESHOLD = threshold
        tune_recommend.noise_model = lambda job, i: cached  # type: ignore[assignment]
        try:
            m = {self.plan.name: {"histogram": grid, "partitions": None}}
            (rec,) = tune_recommend.recommend(j["job"], j["checked"].plan, j["groups"], m)
        finally:
            tune_recommend.CELL_THRESHOLD = CELL_THRESHOLD
            tune_recommend.noise_model = noise_model
        return rec.new.L, rec.new.C or 1, bool(rec.note)

    def score(self, eps: Fraction, L: int, C: int) -> float:
        return self.jobs[eps]["scores"][(L, C)] / self.jobs[eps]["best"]


def simulate(fam: Family, runs: int, thresholds: list[float], seed: int) -> dict[Any, Any]:
    rng = np.random.default_rng(seed)
    out: dict[Any, Any] = {(e, t): [] for e in fam.jobs for t in thresholds}
    for _ in range(runs):
        grid = fam.noisy(rng)
        for eps in fam.jobs:
            for t in thresholds:
                out[(eps, t)].append(fam.recommend(eps, grid, t))
    return out


def summary(fam: Family, eps: Fraction, recs: list[tuple[int, int, bool]]) -> dict[str, Any]:
    ratios = np.array([fam.score(eps, L, C) for L, C, _ in recs])
    common = Counter(f"{L},{C}" for L, C, _ in recs).most_common(2)
    return dict(
        median=float(np.median(ratios)), p90=float(np.quantile(ratios, 0.9)),
        p99=float(np.quantile(ratios, 0.99)), max=float(ratios.max()),
        over2=float(np.mean(ratios > 2)), nosignal=sum(n for *_, n in recs),
        common=" ".join(f"{c} ({n})" for c, n in common),
    )  # fmt: skip


# --- validation against the real run_tune ---------------------------------------------------------


def validate(fam: Family, n: int, sims: dict[Any, Any], tune_eps: Fraction, tmp: Path) -> None:
    print(f"\n## validation: {n} real run_tune runs, family {fam.name!r}\n")
    eps0 = next(iter(fam.jobs))
    job = fam.jobs[eps0]["job"]
    t0 = time.time()
    res = run_tune(job, tune_eps, str(tmp / "tune-exact"), noise=False)
    exact = json.loads((Path(res.directory) / MEASUREMENTS).read_text())[fam.plan.name]
    same = np.allclose(np.array(exact["histogram"]).ravel(), fam.exact, rtol=0, atol=1e-9)
    print(f"- exact histogram (run_tune noise=False) equals the simulation's: {same}")
    residuals, real = [], {e: [] for e in fam.jobs}
    agree = total = 0
    for run in range(n):
        res = run_tune(job, tune_eps, str(tmp / f"tune-{run}"),
                       release_key=ReleaseKey(bytes([run, 77]) * 16))  # fmt: skip
        grid = json.loads((Path(res.directory) / MEASUREMENTS).read_text())[fam.plan.name][
            "histogram"
        ]
        residuals.append(np.array(grid).ravel() - np.array(fam.exact))
        (rec,) = res.recommendations
        for eps in fam.jobs:  # the same real histogram, the other query budget: model only
            L, C, ns = fam.recommend(eps, grid, CELL_THRESHOLD)
            real[eps].append((L, C, ns))
            if eps == eps0:
                total += 1
                agree += (L, C) == (rec.new.L, rec.new.C)
    print(f"- {n} real runs in {time.time() - t0:.0f} s; simulated recommend() on the real noisy "
          f"histogram = run_tune's recommendation: {agree}/{total}")  # fmt: skip
    res_all = np.concatenate(residuals)
    b = fam.mech.scale
    from scipy import stats  # noqa: PLC0415

    ks = stats.kstest(res_all, stats.laplace(scale=b).cdf)
    sim = np.concatenate([np.array(fam.noisy(np.random.default_rng(5 + i))).ravel() - fam.exact
                          for i in range(n)])  # fmt: skip
    ks2 = stats.ks_2samp(res_all, sim)
    print(
        f"- real noise over {res_all.size} cells: mean {res_all.mean():+.3f}, mean |x| "
        f"{np.abs(res_all).mean():.3f} (Laplace b = {b:.4f}), P(x ≥ 8b) "
        f"{np.mean(res_all >= 8 * b):.4f} (e^-8/2 = {math.exp(-8) / 2:.4f}); KS vs Laplace(b) "
        f"p = {ks.pvalue:.2f}; two-sample KS vs simulated noise p = {ks2.pvalue:.2f}"
    )
    for eps in fam.jobs:
        s_recs = sims[(eps, CELL_THRESHOLD)]
        sim_freq = Counter((L, C) for L, C, _ in s_recs)
        real_freq = Counter((L, C) for L, C, _ in real[eps])
        rs, ss = summary(fam, eps, real[eps]), summary(fam, eps, s_recs)
        rows = sorted(set(real_freq) | {lc for lc, _ in sim_freq.most_common(6)},
                      key=lambda lc: -sim_freq[lc])  # fmt: skip
        print(
            f"\nquery ε = {float(eps):g}: real (n = {n}) vs simulated (n = {len(s_recs)}) "
            f"at threshold {CELL_THRESHOLD:g}; tuned/best median real {rs['median']:.3f} sim "
            f"{ss['median']:.3f}, max real {rs['max']:.2f} sim p90 {ss['p90']:.2f}\n"
        )
        print("| L,C | real runs | real share | simulated share | tuned/best |")
        print("|---|---|---|---|---|")
        for lc in rows:
            print(f"| {lc[0]},{lc[1]} | {real_freq[lc]} | {real_freq[lc] / n:.2f} | "
                  f"{sim_freq[lc] / len(s_recs):.3f} | {fam.score(eps, *lc):.3f} |")  # fmt: skip
        # chance of the real counts under the simulated distribution (multinomial χ² on
        # choices pooled into the simulated top-3 and the rest)
        top = [lc for lc, _ in sim_freq.most_common(3)]
        p_sim = [sim_freq[lc] / len(s_recs) for lc in top]
        p_sim.append(1 - sum(p_sim))
        obs = [real_freq[lc] for lc in top]
        obs.append(n - sum(obs))
        exp = np.array(p_sim) * n
        chi2 = float(sum((o - e) ** 2 / e for o, e in zip(obs, exp, strict=True) if e > 0))
        df = sum(1 for e in exp if e > 0) - 1
        print(f"\nχ² (real counts vs simulated shares, top-3 + rest) = {chi2:.2f}, df {df}, "
              f"p = {stats.chi2.sf(chi2, df):.2f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--people", type=int, default=100_000, help="persons of the generator's logs")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--tune-epsilon", default="0.1")
    ap.add_argument("--epsilons", default="1,0.1", help="budgets of the count query")
    ap.add_argument("--thresholds", default=",".join(f"{t:g}" for t in THRESHOLDS))
    ap.add_argument("--families", default="", help="comma-separated indices (default: all)")
    ap.add_argument("--validate", type=int, default=0, help="real run_tune runs on family 0")
    ap.add_argument("--json", default="", help="write the raw recommendations here")
    args = ap.parse_args()
    tune_eps = Fraction(args.tune_epsilon)
    epsilons = [Fraction(e) for e in args.epsilons.split(",")]
    thresholds = [float(t) for t in args.thresholds.split(",")]
    specs: list[tuple[str, Any]] = [(n, s) for n, s in bench.FAMILIES.items()]
    specs += list(HEAVY.items())
    chosen = [int(i) for i in args.families.split(",")] if args.families else range(len(specs))
    tmp = Path(tempfile.mkdtemp(prefix="userdp-threshold-bench-"))
    print(
        f"{args.runs} simulated tuning runs per family (tuning ε = {args.tune_epsilon}), "
        f"thresholds {thresholds} × 1/ε_h; ratio = true error of tuned (L, C) / best\n"
    )
    results, raw = [], {}
    for fi in chosen:
        name, spec = specs[fi]
        t0 = time.time()
        data = tmp / f"f{fi}" / "logs.parquet"
        if isinstance(spec, dict):
            rows = zipf_log(data, spec["people"], fi, spec)
        else:
            rows = generate(args.people, str(data), seed=fi, shape=spec)
        fam = Family(name, data, epsilons, tune_eps)
        t1 = time.time()
        sims = simulate(fam, args.runs, thresholds, seed=fi)
        t2 = time.time()
        print(f"{name}: {rows:,} rows, {len(fam.r):,} pairs, {fam.k} partitions; built in "
              f"{t1 - t0:.0f} s, simulated in {t2 - t1:.0f} s", flush=True)  # fmt: skip
        for eps in epsilons:
            for t in thresholds:
                results.append((name, eps, t, fam.jobs[eps], summary(fam, eps, sims[(eps, t)])))
            raw[f"{name} | {float(eps):g}"] = {
                f"{t:g}": [[L, C, int(ns)] for L, C, ns in sims[(eps, t)]] for t in thresholds
            }
        if args.validate and fi == chosen[0]:
            validate(fam, args.validate, sims, tune_eps, tmp)
    print("\n## results\n")
    head = ("family", "ε", "best L,C", "T", "median", "p90", "p99", "max", "> 2×",
            "no signal", "most frequent (runs)")  # fmt: skip
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for name, eps, t, j, s in results:
        print(f"| {name} | {float(eps):g} | {j['best_lc'][0]},{j['best_lc'][1]} | {t:g} | "
              f"{s['median']:.2f} | {s['p90']:.2f} | {s['p99']:.2f} | {s['max']:.2f} | "
              f"{s['over2']:.3f} | {s['nosignal']} | {s['common']} |")  # fmt: skip
    print("\nworst family's p99 / p90 / max / share > 2× per threshold:\n")
    print("| T | worst p99 | worst p90 | worst max | worst share > 2× |\n|---|---|---|---|---|")
    for t in thresholds:
        rows_t = [s for _, _, tt, _, s in results if tt == t]
        print(f"| {t:g} | {max(s['p99'] for s in rows_t):.2f} | "
              f"{max(s['p90'] for s in rows_t):.2f} | {max(s['max'] for s in rows_t):.2f} | "
              f"{max(s['over2'] for s in rows_t):.3f} |")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(raw))


if __name__ == "__main__":
    main()
