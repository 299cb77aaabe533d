"""Planning: budget split, sensitivities, calibration, and the manifest (no data is read)."""

from __future__ import annotations

import json
import math
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from tests.pipelines.test_config import EXAMPLE, job, query
from userdp.pipelines.config import ConfigError, load_job, parse_job
from userdp.pipelines.kinds.aggregate_plan import Z95
from userdp.pipelines.plan import plan_release
from userdp.transforms.mechanisms.accounting import (
    ZCDP,
    ApproxDP,
    PureDP,
    float_down,
    zcdp_budget_for,
)
from userdp.transforms.mechanisms.additive import GaussianMechanism, LaplaceMechanism
from userdp.transforms.mechanisms.discrete import discrete_laplace_std
from userdp.transforms.mechanisms.partition_selection import (
    GaussianThresholding,
    LaplaceThresholding,
)
from userdp.transforms.mechanisms.selection_choice import best_selection

EPS_HALF = ApproxDP(Fraction(1, 2), Fraction(1, 2 * 10**6))


def single(raw: dict[str, Any]) -> dict[str, Any]:
    """The job with its first query only (no shared selection: the per-query split)."""
    return {**raw, "queries": raw["queries"][:1]}


def test_a_private_mean_gives_a_third_to_its_selection() -> None:
    raw = job()
    raw["queries"] = raw["queries"][1:]  # the mean alone
    (mean,) = plan_release(parse_job(raw)).queries
    # three equal parts: selection, centred sum, row count (as PipelineDP splits a mean)
    assert mean.selection_budget == ApproxDP(Fraction(1, 3), Fraction(1, 10**6))
    assert mean.statistic_budget == PureDP(Fraction(2, 3))
    assert mean.params.noise == LaplaceMechanism(4500, float_down(Fraction(1, 3)), spans=5)


def test_one_private_query_splits_its_share_with_its_own_selection() -> None:
    plan = plan_release(parse_job(single(job())))
    (count,) = plan.queries
    assert count.share == plan.total and not plan.selections
    # count, private, Laplace: selection ε/2 with all of δ, statistic ε/2. At L = 5 the rule that
    # keeps the most is Gaussian thresholding converted to (ε/2, δ).
    assert count.params.selection == best_selection(Fraction(1, 2), Fraction(1, 10**6), 5)
    assert count.selection_budget == ApproxDP(Fraction(1, 2), Fraction(1, 10**6))
    assert count.statistic_budget == PureDP(Fraction(1, 2))
    assert count.params.noise == LaplaceMechanism(15, 0.5, spans=5)


def test_example_plan_split_and_sensitivities() -> None:
    plan = plan_release(load_job(EXAMPLE))  # data/ does not exist: nothing is read
    assert plan.total == ApproxDP(1, Fraction(1, 10**6))
    assert plan.spent == plan.total  # every query takes its even share
    count, mean = plan.queries
    assert count.share == mean.share == EPS_HALF

    # Both are private by domain with L = 5: one shared selection. The count draws once and the
    # mean twice (k = 3), so each gives 1/(k+1) = 1/4 of its ε and all of its δ to it:
    # (1/4, 10^-6); each statistic keeps ε = 3/8.
    (shared,) = plan.selections
    assert shared.members == ("visits_per_domain", "mean_duration_per_domain")
    assert shared.share == ApproxDP(Fraction(1, 4), Fraction(1, 10**6))
    assert shared.rule == best_selection(Fraction(1, 4), Fraction(1, 10**6), 5)
    assert count.params.selection == mean.params.selection == shared.rule
    assert count.shared_selection == mean.shared_selection == shared.name
    assert count.statistic_budget == mean.statistic_budget == PureDP(Fraction(3, 8))
    # rows: C, L·C, √L·C.
    assert (count.sensitivity.per_partition, count.sensitivity.l1) == (3, 15)
    assert count.sensitivity.l2 == pytest.approx(3 * math.sqrt(5), rel=1e-15)
    assert count.sensitivity.l2 >= 3 * math.sqrt(5)
    noise = count.params.noise
    assert isinstance(noise, LaplaceMechanism)
    assert noise == LaplaceMechanism(15, float_down(Fraction(3, 8)), spans=5)
    assert noise.scale == pytest.approx(40, rel=1e-9)
    assert count.error95 == pytest.approx(40 * math.log(20), rel=1e-9)
    assert count.stddev == pytest.approx(40 * math.sqrt(2), rel=1e-6)

    # mean: centred sum C·(hi−lo)/2 = 900 per partition, 4500 L1; the statistic's ε = 3/8 is
    # split evenly: 3/16 for the centred sum and 3/16 for the row count.
    assert (mean.sensitivity.per_partition, mean.sensitivity.l1) == (900, 4500)
    assert mean.count_sensitivity is not None and mean.count_sensitivity.l1 == 15
    assert mean.params.noise == LaplaceMechanism(4500, float_down(Fraction(3, 16)), spans=5)
    assert mean.params.count_noise == LaplaceMechanism(15, float_down(Fraction(3, 16)), spans=5)
    assert mean.stddev == pytest.approx(24000 * math.sqrt(2), rel=1e-6)
    assert mean.count_stddev == pytest.approx(80 * math.sqrt(2), rel=1e-6)
    assert mean.mean_stddev(100) == pytest.approx(
        math.hypot(mean.stddev, 300 * (mean.count_stddev or 0.0)) / 100
    )


def test_queries_with_another_by_or_L_keep_their_own_selection() -> None:
    for change in ({"by": ["page"]}, {"max_partitions_per_person": 4}, {"noise": "gaussian"}):
        plan = plan_release(parse_job(query(1, **change)))
        assert not plan.selections
        assert all(q.shared_selection is None for q in plan.queries)  # type: ignore[attr-defined]


def test_a_persons_member_releases_the_shared_laplace_count() -> None:
    plan = plan_release(parse_job(query(0, metric="persons", max_rows_per_partition=None)))
    persons, mean = plan.queries
    (shared,) = plan.selections
    # persons gives all of ε = 1/2, the mean 1/(k+1) = 1/3 of its 1/2 (k = 2: it draws twice)
    assert shared.releases_count and isinstance(shared.rule, LaplaceThresholding)
    assert shared.share == ApproxDP(Fraction(2, 3), Fraction(1, 10**6))
    assert persons.releases_selection_count and persons.params.release_selection_count
    assert mean.statistic_budget == PureDP(Fraction(1, 3))
    assert persons.stddev == pytest.approx(discrete_laplace_std(shared.rule.scale))


def test_persons_with_laplace_selection_releases_the_thresholding_count() -> None:
    plan = plan_release(parse_job(single(query(0, metric="persons", max_rows_per_partition=None))))
    q = plan.queries[0]
    sel = q.params.selection
    assert q.releases_selection_count
    assert isinstance(sel, LaplaceThresholding) and sel.epsilon == 1  # all of ε
    assert sel.scale == 5  # L/ε
    r = math.exp(-1 / 5)
    assert q.stddev == pytest.approx(math.sqrt(2 * r) / (1 - r))
    assert q.error95 == 15  # the least integer m with 2r^(m+1)/(1 + r) ≤ 0.05: not 5·ln 20
    assert 2 * r**16 / (1 + r) <= 0.05 < 2 * r**15 / (1 + r)  # P(|X| > 15), P(|X| > 14)
    assert (q.sensitivity.per_partition, q.sensitivity.l1) == (1, 5)


def test_zcdp_total_gaussian_selection_and_delta_split() -> None:
    plan = plan_release(parse_job(single(job(budget={"rho": 0.5, "delta": 1e-6}))))
    assert plan.total == plan.spent == ZCDP(Fraction(1, 2))
    assert plan.spent_selection_delta == plan.total_selection_delta == Fraction(1, 10**6)
    q = plan.queries[0]
    sel = q.params.selection
    assert isinstance(sel, GaussianThresholding)
    assert (sel.rho, sel.delta) == (Fraction(1, 4), Fraction(1, 10**6))
    assert q.statistic_budget == ZCDP(Fraction(1, 4))
    assert q.params.noise == GaussianMechanism(q.sensitivity.l2, 0.25, spans=5)
    assert q.stddev == pytest.approx(3 * math.sqrt(5) / math.sqrt(0.5), rel=1e-9)
    assert q.error95 == pytest.approx(Z95 * q.stddev)


def test_zcdp_total_shared_selection() -> None:
    plan = plan_release(parse_job(job(budget={"rho": 0.5, "delta": 1e-6})))
    assert plan.total == plan.spent == ZCDP(Fraction(1, 2))
    (shared,) = plan.selections
    # each member: ρ = 1/4 and selection δ = 5·10^-7; with k = 3 draws (count 1, mean 2) the
    # selection gets 1/4 of each ρ and all δ
    assert shared.share == ZCDP(Fraction(1, 8)) and shared.selection_delta == Fraction(1, 10**6)
    assert shared.rule == GaussianThresholding(Fraction(1, 8), Fraction(1, 10**6), 5)
    assert [q.statistic_budget for q in plan.queries] == [ZCDP(Fraction(3, 16))] * 2


def test_laplace_under_zcdp_uses_epsilon_with_eps2_over_2_at_most_rho() -> None:
    raw = query(0, by=None, max_partitions_per_person=None, noise="laplace")
    q = plan_release(parse_job({**raw, "budget": {"rho": 0.5, "delta": 1e-6}})).queries[0]
    noise = q.params.noise
    assert isinstance(noise, LaplaceMechanism)
    assert Fraction(noise.epsilon) ** 2 / 2 <= Fraction(1, 4)
    assert noise.epsilon == pytest.approx(math.sqrt(0.5), rel=1e-15)


def test_gaussian_under_approx_total() -> None:
    raw = query(0, noise="gaussian", partitions=None, by=None, max_partitions_per_person=None)
    plan = plan_release(parse_job(raw))
    q = plan.queries[0]
    rho = zcdp_budget_for(EPS_HALF)
    assert q.statistic_budget == rho and q.params.selection is None
    assert q.params.noise == GaussianMechanism(3.0, float(rho.rho))
    # private: ρ for (ε, δ/2), selection ρ/2 and δ/2
    q = plan_release(parse_job(query(0, noise="gaussian"))).queries[0]
    rho = zcdp_budget_for(ApproxDP(Fraction(1, 2), Fraction(1, 4 * 10**6)))
    sel = q.params.selection
    assert isinstance(sel, GaussianThresholding)
    assert (sel.rho, sel.delta) == (rho.rho / 2, Fraction(1, 4 * 10**6))


def test_explicit_shares_and_exact_remainder() -> None:
    plan = plan_release(parse_job(query(0, epsilon=0.4, delta=2e-7)))
    assert plan.queries[0].share == ApproxDP(Fraction(2, 5), Fraction(2, 10**7))
    assert plan.queries[1].share == ApproxDP(Fraction(3, 5), Fraction(8, 10**7))
    assert plan.spent == plan.total


def test_overspent_shares_name_the_queries() -> None:
    raw = query(0, epsilon=0.7, delta=1e-7)
    raw["queries"][1].update(epsilon=0.6, delta=1e-7)
    with pytest.raises(ConfigError, match=r"visits.*mean_duration.*over by ε=0\.3"):
        plan_release(parse_job(raw))
    raw = query(0, epsilon=1.0, delta=1e-7)  # leaves ε = 0 for the other query
    with pytest.raises(ConfigError, match=r"leaves nothing.*mean_duration"):
        plan_release(parse_job(raw))
    # all of δ: the private query 1 (not in query 0's selection: another L) would get δ = 0
    raw = query(0, epsilon=0.5, delta=1e-6, max_partitions_per_person=4)
    with pytest.raises(ConfigError, match=r"queries\[1\] = '\(ε=0\.5, δ=0\)'.*delta > 0"):
        plan_release(parse_job(raw))
    raw = query(0, delta=2e-6)
    with pytest.raises(ConfigError, match=r"queries\[\*\]\.delta.*budget\.delta"):
        plan_release(parse_job({**raw, "budget": {"rho": 0.5, "delta": 1e-6}}))


@pytest.mark.parametrize(("i", "column"), [(0, "value"), (1, "stddev")])
def test_a_by_column_named_like_a_released_column_is_refused_when_planned(
    i: int, column: str
) -> None:
    """The key and the released column shared a name: the run failed writing its output, after
    the ledger's charge (a library review)."""
    with pytest.raises(
        ConfigError,
        match=rf"queries\[{i}\]\.by = \['{column}'\]: expected partition columns not named value "
        rf"or stddev\. '{column}' is also a column this query releases",
    ):
        plan_release(parse_job(query(i, by=[column])))


def test_no_by_is_one_partition_without_selection() -> None:
    raw = query(1, by=None, max_partitions_per_person=None)
    q = plan_release(parse_job(raw)).queries[1]
    assert q.params.selection is None and q.params.public_partitions is None
    assert q.params.bounding.max_partitions_per_person == 1
    assert (q.sensitivity.l1, q.sensitivity.l2) == (900, 900)


def test_sum_sensitivity_is_c_times_max_abs_bound() -> None:
    raw = query(1, metric="sum", bounds=[-50.0, 20.0], by=None, max_partitions_per_person=None)
    q = plan_release(parse_job(raw)).queries[1]
    assert q.sensitivity.per_partition == 150 and q.count_sensitivity is None
    # Bounds off the fixed-point grid are widened by at most one quantum.
    raw = query(1, metric="sum", bounds=[0.1, 0.7], by=None, max_partitions_per_person=None)
    s = plan_release(parse_job(raw)).queries[1].sensitivity.per_partition
    assert 3 * 0.7 < s < 3 * 0.7 * (1 + 1e-11)


def test_per_partition_noise_allows_for_l_roundings() -> None:
    """Each of the L partitions a person changes is rounded to the noise grid alone: the
    mechanisms allow L roundings (docs/noise.md §1), the count's and the mean's both."""
    raw = query(1, metric="mean", bounds=[0.0, 0.1], max_partitions_per_person=8)
    q = plan_release(parse_job(raw)).queries[1]
    assert q.params.noise.spans == 8 and q.params.count_noise.spans == 8
    raw = query(1, metric="sum", bounds=[0.0, 0.1], by=None, max_partitions_per_person=None)
    assert plan_release(parse_job(raw)).queries[1].params.noise.spans == 1  # one partition


@pytest.mark.parametrize("fmt", ["csv", "json_lists", "json_scalars", "json_objects"])
def test_public_partitions_from_file(tmp_path: Path, fmt: str) -> None:
    keys = ["a.com", "b.org", "a.com"]
    body: dict[str, Any] = {
        "csv": "domain\n" + "\n".join(keys) + "\n",
        "json_lists": json.dumps([[k] for k in keys]),
        "json_scalars": json.dumps(keys),
        "json_objects": json.dumps([{"domain": k} for k in keys]),
    }
    name = "keys.csv" if fmt == "csv" else "keys.json"
    (tmp_path / name).write_text(body[fmt])
    plan = plan_release(parse_job(query(0, partitions=name), base_dir=tmp_path))
    q = plan.queries[0]
    assert q.params.public_partitions == (("a.com",), ("b.org",))
    assert q.params.selection is None and q.n_public_partitions == 2
    assert q.params.noise == LaplaceMechanism(15, 0.5, spans=5)  # the whole ε: no selection


def test_bad_public_key_files(tmp_path: Path) -> None:
    (tmp_path / "k.csv").write_text("site\nx\n")
    (tmp_path / "e.json").write_text("[]")
    os.mkfifo(tmp_path / "fifo.csv")  # open() blocked forever; /dev/zero was read to the OOM
    cases = [
        ("nope.csv", "readable"),
        ("k.csv", "not one naming the by columns"),
        ("e.json", "non-empty"),
        ("fifo.csv", "expected a regular file of public keys. not a regular file"),
        ("/dev/zero", "expected a regular file of public keys. not a regular file"),
    ]
    for name, match in cases:
        with pytest.raises(ConfigError, match=rf"queries\[0\]\.partitions.*{match}"):
            plan_release(parse_job(query(0, partitions=name), base_dir=tmp_path))


def test_manifest_is_public_json() -> None:
    cfg = load_job(EXAMPLE)
    plan = plan_release(cfg)
    m = plan.to_manifest()
    text = json.dumps(m, allow_nan=False)
    assert json.loads(text) == m
    assert plan_release(load_job(EXAMPLE)).to_manifest() == m  # a function of the config alone
    assert m["config_hash"] == cfg.config_hash and m["userdp_version"]
    assert m["total"]["epsilon_exact"] == "1" and m["spent"] == m["total"]
    q0 = m["queries"][0]
    (shared,) = plan.selections
    assert q0["selection"] == {"shared": shared.name} == m["queries"][1]["selection"]
    (s0,) = m["selections"]  # booked once
    assert s0["members"] == ["visits_per_domain", "mean_duration_per_domain"]
    assert s0["rule"]["rule"] == "gaussian_thresholding"
    assert s0["rule"]["threshold"] == shared.rule.threshold  # type: ignore[union-attr]
    assert s0["share"]["delta_exact"] == "1/1000000"  # all of the members' δ
    assert q0["statistic"]["sensitivity"]["l1"] == 15
    assert m["queries"][1]["bounds"] == [0.0, 600.0]
    # Operator-only paths (input, dead letters) and anything from the data stay out; the
    # person column is named once, as the privacy unit (config, what the guarantee is about).
    assert cfg.input.path not in text and "rejected" not in text
    assert text.count('"person_id"') == 1 and m["privacy_unit"]["person_column"] == "person_id"


def test_a_mechanism_refusing_its_budget_is_a_config_error_naming_the_query() -> None:
    """ρ = 1e-300 for private partitions: the selection's discrete Gaussian is too wide to
    tabulate. Its ValueError escaped planning as a traceback ("a bug in userdp") after building
    10^7 terms; it is now refused at once, as the job file's error (exit 2) naming the query —
    or the budget, when the selection is shared by several queries."""
    one = job(budget={"rho": 1e-300, "delta": 1e-6})
    one["queries"] = one["queries"][:1]
    with pytest.raises(
        ConfigError, match=r"queries\[0\] = .*expected parameters the mechanism accepts\. discrete"
    ):
        plan_release(parse_job(one))
    two = job(budget={"rho": 1e-300, "delta": 1e-6})
    two["queries"] = [one["queries"][0], {**one["queries"][0], "name": "again"}]
    with pytest.raises(ConfigError, match=r"^budget = .*shared partition selections can be bu"):
        plan_release(parse_job(two))


MEDIAN = {
    "name": "med",
    "metric": "median",
    "value": "duration_s",
    "per_person": "mean",
    "bounds": [0.0, 600.0],
}


def test_under_epsilon_delta_only_queries_that_spend_delta_get_it(tmp_path: Path) -> None:
    """A Laplace count on public keys and an exponential median are pure ε: (ε/n, 0). The
    budget's δ goes to the private count alone, and only what is spent is charged."""
    (tmp_path / "keys.csv").write_text("domain\na.com\n")
    raw = job(
        queries=[
            {**job()["queries"][0], "name": "private"},
            {**job()["queries"][0], "name": "public", "partitions": "keys.csv"},
            MEDIAN,
            {**job()["queries"][0], "name": "gauss", "partitions": "keys.csv", "noise": "gaussian"},
        ]
    )
    plan = plan_release(parse_job(raw, base_dir=tmp_path))
    private, public, med, gauss = plan.queries
    quarter, half_delta = Fraction(1, 4), Fraction(1, 2 * 10**6)
    assert private.share == ApproxDP(quarter, half_delta)  # selection
    assert gauss.share == ApproxDP(quarter, half_delta)  # Gaussian converted from (ε, δ)
    assert public.share == med.share == ApproxDP(quarter, Fraction(0))
    assert plan.spent == ApproxDP(Fraction(1), Fraction(1, 10**6))
    # all pure: nothing spends δ, so nothing of it is booked (or charged by a ledger)
    raw["queries"] = raw["queries"][1:3]
    plan = plan_release(parse_job(raw, base_dir=tmp_path))
    assert plan.spent == ApproxDP(Fraction(1), Fraction(0))
    # explicit shares keep their δ; the rest of δ goes to the spenders without one
    raw = job(
        queries=[
            {**job()["queries"][0], "name": "a", "epsilon": 0.5, "delta": 3e-7},
            {**job()["queries"][0], "name": "b"},
            MEDIAN,
        ]
    )
    a, b, med = plan_release(parse_job(raw)).queries
    assert a.share == ApproxDP(Fraction(1, 2), Fraction(3, 10**7))
    assert b.share == ApproxDP(Fraction(1, 4), Fraction(7, 10**7))
    assert med.share == ApproxDP(Fraction(1, 4), Fraction(0))


def test_an_explicit_delta_on_a_pure_query_is_refused() -> None:
    raw = job(queries=[{**MEDIAN, "epsilon": 0.5, "delta": 1e-7}])
    with pytest.raises(ConfigError, match=r"queries\[0\]\.delta = 1e-07.*this query is pure ε-DP"):
        parse_job(raw)
    public = {**job()["queries"][0], "partitions": "keys.csv", "epsilon": 0.5, "delta": 1e-7}
    with pytest.raises(ConfigError, match=r"queries\[0\]\.delta.*spends δ \(private partitions"):
        parse_job(job(queries=[public]))


def test_a_persons_count_from_the_selection_names_the_selections_budget() -> None:
    """The persons line printed the query's share (ε = 0.8) beside a stddev that is the
    selection's discrete Laplace at the selection's ε (accuracy check): it names that now."""
    raw = job()
    raw["queries"] = [
        {"name": "people", "metric": "persons", "by": ["domain"], "max_partitions_per_person": 5}
    ]
    (people,) = plan_release(parse_job(raw)).queries
    assert people.releases_selection_count
    line = next(x for x in people.plan_lines() if x.startswith("persons:"))
    assert line.startswith("persons: the selection's noisy count (discrete Laplace at the selec")
    assert "ε=" not in line
