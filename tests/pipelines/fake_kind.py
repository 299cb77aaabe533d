"""A minimal query kind used only by tests: the number of persons with at least one row, clamped
per person to one, plus Laplace noise — exercising every step of the kind interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
from apache_beam.pvalue import PCollection
from apache_beam.transforms import combiners

from userdp.pipelines.config import QueryConfig
from userdp.pipelines.config_fields import parse_shares
from userdp.pipelines.kinds.base import BuildContext, KindPlan, PlanContext, QuerySection
from userdp.transforms.columns import PERSON_COLUMN
from userdp.transforms.mechanisms.accounting import Budget, PureDP
from userdp.transforms.mechanisms.additive import LaplaceMechanism


@dataclass(frozen=True)
class FakePlan:
    name: str
    share: Budget
    mechanism: LaplaceMechanism
    label: str
    by: tuple[str, ...] = ()
    output_columns: tuple[tuple[str, str], ...] = (("value", "float64"), ("note", "string"))

    def to_manifest(self) -> dict[str, Any]:
        return {"name": self.name, "metric": "fake_persons", "scale": self.mechanism.scale}

    def plan_lines(self) -> list[str]:
        return [f"fake: Laplace scale {self.mechanism.scale:g}, label {self.label}"]


class FakeKind:
    metrics = ("fake_persons",)

    def parse(self, s: QuerySection) -> QueryConfig:
        s.allow_keys(("name", "metric", "label", "epsilon", "delta", "rho"))
        label = s.string("label", required=False) or "none"
        eps, delta, rho = parse_shares(s.v, s.raw, s.prefix, s.budget, spends_delta=None)
        name = s.string("name")
        return QueryConfig(
            name, "fake_persons", epsilon=eps, delta=delta, rho=rho, options={"label": label}
        )

    def needs_delta(self, query: QueryConfig, rho_total: bool) -> bool:
        return False

    def required_columns(self, query: QueryConfig) -> dict[str, str]:
        return {}

    def plan(self, query: QueryConfig, ctx: PlanContext) -> KindPlan:
        assert isinstance(ctx.share, PureDP)
        return FakePlan(
            query.name,
            ctx.share,
            LaplaceMechanism(1.0, float(ctx.share.epsilon)),
            str(query.options["label"]),
        )

    def expand(
        self, clean: PCollection[Any], plan: KindPlan, ctx: BuildContext
    ) -> PCollection[dict[str, Any]]:
        assert isinstance(plan, FakePlan)
        key, noise = ctx.keys.for_query(plan.name), ctx.noise  # this query's noise key only

        def release(persons: int) -> dict[str, Any]:
            rng = key.rng("value")
            value = plan.mechanism.release(persons, rng) if noise else float(persons)
            return {"value": float(value), "note": plan.label}

        released: PCollection[dict[str, Any]] = (
            clean
            | f"{plan.name}/Persons" >> beam.FlatMap(_persons)
            | f"{plan.name}/Distinct" >> beam.Distinct()
            | f"{plan.name}/Count" >> combiners.Count.Globally()
            | f"{plan.name}/Release" >> beam.Map(release)
        )
        return released


def _persons(table: pa.Table) -> list[str]:
    return [str(p) for p in pc.unique(table.column(PERSON_COLUMN)).to_pylist()]


KIND = FakeKind()
