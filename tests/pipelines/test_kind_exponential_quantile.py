"""The default median/quantile (the exponential mechanism) in the job: how its share is counted,
and that the pipeline's draw (shards send grid histograms, no per-person values gathered) is the
core mechanism's draw from all per-person values.

Under a ρ total it is ε-bounded-range, so ε²/8-zCDP (docs/accounting.md "Bounded-range
mechanisms"; brute force in ``tests/mechanisms/test_bounded_range.py``): a ρ share buys the
largest ε with ε²/8 ≤ ρ, and the manifest and ``userdp plan`` say which rule counted it.
"""

from __future__ import annotations

import io
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.stats_helpers import TEST_SECRET
from userdp.pipelines.config import parse_job
from userdp.pipelines.generate import SCHEMA, generate
from userdp.pipelines.job import run_release
from userdp.pipelines.kinds.local_sensitivity_plan import PerPersonPlan
from userdp.pipelines.plan import plan_release
from userdp.pipelines.plan_text import print_plan
from userdp.transforms.grid_histogram import (
    AddGridHistograms,
    MergeSparseGridHistograms,
    grid_histogram_combine,
)
from userdp.transforms.local_sensitivity import ReleasePerPersonStatistic
from userdp.transforms.mechanisms.accounting import ZCDP, PureDP
from userdp.transforms.mechanisms.exponential_quantile import DENSE_CELLS, ExponentialQuantile
from userdp.transforms.mechanisms.rng import ReleaseKey

from .test_kind_local_sensitivity import per_person

MEDIAN = {
    "name": "med",
    "metric": "median",
    "per_person": "mean",
    "value": "duration_s",
    "bounds": [0.0, 600.0],
}


def planned(tmp_path: Path, **budget: Any) -> tuple[PerPersonPlan, dict[str, Any], str]:
    """(the plan, its manifest entry, the ``userdp plan`` text) of the median under ``budget``."""
    job = {
        "input": {"path": str(tmp_path / "data" / "*.parquet"), "person": "person_id"},
        "budget": budget,
        "output": {"path": str(tmp_path / "release")},
        "queries": [MEDIAN],
    }
    plan = plan_release(parse_job(job))
    (q,) = plan.queries
    assert isinstance(q, PerPersonPlan) and isinstance(q.mechanism, ExponentialQuantile)
    out = io.StringIO()
    print_plan(plan, out)
    return q, plan.to_manifest()["queries"][0], out.getvalue()


def test_under_rho_the_exponential_quantile_takes_the_epsilon_of_eps_squared_over_8(
    tmp_path: Path,
) -> None:
    q, entry, text = planned(tmp_path, rho=0.125)
    eps = q.mechanism.epsilon
    assert eps == 1  # ε²/8 = 1/8 exactly; the ε²/2 rule would have given 1/2
    assert eps**2 / 8 <= Fraction(1, 8) < Fraction(math.nextafter(float(eps), 2.0)) ** 2 / 8
    assert q.share == ZCDP(Fraction(1, 8)) and q.guarantee == PureDP(1) and q.zcdp_delta == 0
    assert "ε-bounded-range (the exponential mechanism) is ε²/8-zCDP" in entry["counted_as"]["rule"]
    assert "ε-bounded-range: ρ = ε²/8" in text and "counted as ρ=0.125 ≤ share" in text


def test_under_epsilon_totals_the_share_is_spent_as_it_is(tmp_path: Path) -> None:
    q, entry, _ = planned(tmp_path, epsilon=0.5)
    assert q.mechanism.epsilon == Fraction(1, 2)
    assert entry["counted_as"] == {"rule": "ε-DP within the ε share"}
    assert entry["gathered"] == (
        "one count per grid point on one worker (1,048,577 counts of 8 bytes, whatever the "
        "person count)"
    )
    q, entry, _ = planned(tmp_path, epsilon=0.5, delta=1e-6)
    assert q.mechanism.epsilon == Fraction(1, 2)
    assert entry["counted_as"] == {"rule": "ε-DP counts as (ε, 0)-DP"}


def test_the_plan_states_a_finite_cell_width_for_bounds_near_the_float_range(
    tmp_path: Path,
) -> None:
    job = {
        "input": {"path": str(tmp_path / "data" / "*.parquet"), "person": "person_id"},
        "budget": {"epsilon": 1.0},
        "output": {"path": str(tmp_path / "release")},
        "queries": [{**MEDIAN, "bounds": [-1e308, 1e308]}],
    }
    out = io.StringIO()
    print_plan(plan_release(parse_job(job)), out)
    assert "1,048,576 grid cells of width 1.91e+302" in out.getvalue()  # was "width inf"
    assert "memory: one count per grid point on one worker (1,048,577 counts" in out.getvalue()


@pytest.mark.parametrize("shards", [1, 5])
def test_the_pipeline_draws_what_the_core_draws_from_all_per_person_values(
    tmp_path: Path, shards: int
) -> None:
    """Shards send grid histograms, merged before the release (dense counts, and sparse lists
    for the 2^30-cell grid): the same draw, from the same stream, as the core mechanism on
    every person's value at once."""
    (tmp_path / "data").mkdir()
    generate(300, str(tmp_path / "data" / "logs.parquet"), seed=4)
    queries = [
        MEDIAN,
        {**MEDIAN, "name": "q90", "metric": "quantile", "q": 0.9, "per_person": "sum"},
        {**MEDIAN, "name": "coarse", "per_person": "max", "grid_bits": 3},
        {**MEDIAN, "name": "fine", "grid_bits": 30},  # above DENSE_CELLS: the sparse combine
    ]
    job = {
        "input": {"path": str(tmp_path / "data" / "*.parquet"), "person": "person_id"},
        "budget": {"epsilon": 3.0},
        "output": {"path": str(tmp_path / "release")},
        "queries": queries,
    }
    cfg = parse_job(job)
    key = ReleaseKey(TEST_SECRET)
    result = run_release(cfg, release_key=key, noise=True, num_shards=shards)
    table = pq.read_table(tmp_path / "data" / "logs.parquet")
    for q in plan_release(cfg).queries:
        assert isinstance(q, PerPersonPlan) and isinstance(q.mechanism, ExponentialQuantile)
        assert q.value is not None
        values = per_person(table, q.reduction, q.value, q.lower, q.upper)
        want = q.mechanism.release(values, key.for_query(q.name).rng("value"))
        rows = pq.read_table(result.outputs[q.name]).to_pylist()
        assert rows == [{"value": want, "released": True}], q.name


def test_empty_input_releases_the_draw_from_no_values(tmp_path: Path) -> None:
    """No shard sends a histogram: the combine's default (empty) is released, as the core
    releases from no values (uniform over the grid)."""
    (tmp_path / "data").mkdir()
    pq.write_table(SCHEMA.empty_table(), tmp_path / "data" / "empty.parquet")
    job = {
        "input": {"path": str(tmp_path / "data" / "*.parquet"), "person": "person_id"},
        "budget": {"epsilon": 1.0},
        "output": {"path": str(tmp_path / "release")},
        "queries": [MEDIAN],
    }
    cfg = parse_job(job)
    key = ReleaseKey(TEST_SECRET)
    result = run_release(cfg, release_key=key, noise=True, num_shards=2)
    (q,) = plan_release(cfg).queries
    assert isinstance(q, PerPersonPlan)
    want = q.mechanism.release([], key.for_query("med").rng("value"))
    assert pq.read_table(result.outputs["med"]).to_pylist() == [{"value": want, "released": True}]


def drive(combine: Any, bundles: list[list[Any]], ship: bool) -> Any:
    """A runner's use of the combine: one accumulator per bundle, optionally compacted as if
    sent between workers, then one merge and the output."""
    accs = []
    for bundle in bundles:
        acc = combine.create_accumulator()
        for h in bundle:
            acc = combine.add_input(acc, h)
        accs.append(combine.compact(acc) if ship else acc)
    return combine.extract_output(combine.merge_accumulators(accs))


def test_dense_counts_add_the_histograms_however_they_are_split_and_shipped() -> None:
    """The default grid's combine: one int64 count per grid point. Empty bundles, accumulators
    sent as histograms (compact) or as arrays, in any grouping: the histogram of all values."""
    mech = ExponentialQuantile(Fraction(1, 2), 0.0, 1.0, 1, grid_bits=10)
    rng = np.random.default_rng(3)
    shards = [mech.grid_histogram(rng.uniform(0, 1, n)) for n in (0, 40, 400, 3, 900, 30, 30)]
    idx = np.concatenate([np.repeat(h[0], h[1]) for h in shards])
    want = np.unique(idx, return_counts=True)
    combine = grid_histogram_combine(mech)
    assert isinstance(combine, AddGridHistograms)
    for ship in (False, True):
        for bundles in ([shards], [shards[:2], [], shards[2:5], shards[5:]], [[h] for h in shards]):
            uniq, counts = drive(combine, bundles, ship)
            assert uniq.tolist() == want[0].tolist() and counts.tolist() == want[1].tolist()
            assert uniq.dtype == counts.dtype == np.int64
    acc = combine.add_input(combine.create_accumulator(), shards[1])
    assert isinstance(acc, np.ndarray) and acc.shape == (mech.cells + 1,)  # one count per point
    assert drive(combine, [[], []], ship=True)[0].tolist() == []  # nothing: the empty histogram


def test_finer_grids_merge_sparse_lists_within_their_bound() -> None:
    """Above DENSE_CELLS the combine keeps lists of histograms: the output is the sum, and a list
    never holds more than max(COMPACT_AT, twice the merged histogram) entries plus one input —
    here 40 shards over 60 distinct points send 1,200 entries against a bound of 150, so a
    combine that never merged, or merged only at four times the largest, would break it."""
    mech = ExponentialQuantile(Fraction(1, 2), 0.0, 1.0, 1, grid_bits=30)
    assert mech.cells > DENSE_CELLS
    rng = np.random.default_rng(4)
    points = rng.uniform(0, 1, 60)  # 60 distinct grid points at 2^30 cells
    shards = [mech.grid_histogram(rng.choice(points, 30, replace=False)) for _ in range(40)]
    idx = np.concatenate([np.repeat(h[0], h[1]) for h in shards])
    want = np.unique(idx, return_counts=True)
    combine = grid_histogram_combine(mech)
    assert isinstance(combine, MergeSparseGridHistograms)
    combine.COMPACT_AT = 50
    bound = max(combine.COMPACT_AT, 2 * len(want[0])) + 30
    assert bound == 150 and len(idx) == 1200
    accs = []
    for bundle in (shards[:15], shards[15:], []):
        acc = combine.create_accumulator()
        for h in bundle:
            acc = combine.add_input(acc, h)
            assert sum(len(x[0]) for x in acc) <= bound
        accs.append(acc)
    merged = combine.merge_accumulators(accs)
    assert sum(len(x[0]) for x in merged) <= bound
    uniq, counts = combine.extract_output(merged)
    assert uniq.tolist() == want[0].tolist() and counts.tolist() == want[1].tolist()


def release_graph_labels(mechanism: Any, name: str, noise: bool) -> set[str]:
    """The full labels of every step (composite or not) of a per-person release's graph."""
    from apache_beam.pipeline import PipelineVisitor  # noqa: PLC0415

    class Labels(PipelineVisitor):  # type: ignore[misc]  # Beam is unannotated
        def __init__(self) -> None:
            self.seen: set[str] = set()

        def enter_composite_transform(self, node: Any) -> None:
            self.seen.add(node.full_label)

        def visit_transform(self, node: Any) -> None:
            self.seen.add(node.full_label)

    p = beam.Pipeline()
    release = ReleasePerPersonStatistic(
        mechanism, "mean", "duration_s", keys=ReleaseKey(TEST_SECRET), query=name, noise=noise
    )
    _ = p | beam.Create([]) | name >> release
    visitor = Labels()
    p.visit(visitor)
    return visitor.seen


def test_the_default_median_does_not_gather_per_person_values() -> None:
    """The pipeline graph: shards send grid histograms to the dense combine; no step gathers
    the values (the noise-off test hook still does, for its exact statistic)."""
    mech = ExponentialQuantile(Fraction(1, 2), 0.0, 600.0, 1)
    labels = {noise: release_graph_labels(mech, "med", noise) for noise in (True, False)}
    assert {"med/GridHistogram", "med/MergeHistograms"} <= labels[True]
    assert not any("Gather" in label for label in labels[True])
    assert "med/GatherValues" in labels[False]
