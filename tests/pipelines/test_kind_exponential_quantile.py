"""The default median/quantile (the exponential mechanism) in the job: how its share is counted.

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

from userdp.pipelines.config import parse_job
from userdp.pipelines.kinds.local_sensitivity_plan import PerPersonPlan
from userdp.pipelines.plan import plan_release
from userdp.pipelines.plan_text import print_plan
from userdp.transforms.mechanisms.accounting import ZCDP, PureDP
from userdp.transforms.mechanisms.exponential_quantile import ExponentialQuantile

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
    q, entry, _ = planned(tmp_path, epsilon=0.5, delta=1e-6)
    assert q.mechanism.epsilon == Fraction(1, 2)
    assert entry["counted_as"] == {"rule": "ε-DP counts as (ε, 0)-DP"}
