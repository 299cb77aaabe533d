"""Privacy audits, through the public library, of the mechanisms that release one value per query.

The partition device of ``test_audit_public_api`` (one i.i.d. trial per public partition) does not
apply to ``dp.Median`` or ``dp.SampleAggregate``: they have no ``by`` and release once per query,
and a Beam pipeline costs ~0.15 s per query (measured: 400 Median queries in one pipeline ran in
63 s), so 10^4 draws a side would take hours. These audits split the release at the only point
where it is deterministic:

1. the pipeline is built and run through ``userdp.transforms`` (``Release`` → ``ByPerson`` →
   ``dp.Median`` / ``dp.SampleAggregate``) on x, with the noise on and a fixed secret; the
   mechanism the public API planned (its calibration: the planner's, not the test's) is read from
   the release's booking;
2. the pipeline's output must equal one draw of that planned mechanism on the same deterministic
   input under the query's own noise stream — so the pipeline *is* the audited mechanism, draw
   for draw;
3. the planned mechanism is then audited with many draws (harness, α = 10^-6) on the neighbouring
   pair.

Pairs and expected bounds (formulae: ``test_audit_core``; m = n/2 test draws a side):

* Median, smooth sensitivity under (ε, δ) = (1, 10^-6) (Laplace noise), bounds [0, 10],
  per-person means: x = (0, 0, 10, 10, 10) against
  x' = (0, 0, 10, 10) (``test_audit_local_sensitivity``'s JUMP_MEDIAN: the median moves from 10 to
  0). Expected ε_lb ≈ 0.36 at n = 2·10^4 (that audit's figure for the same mechanism). Negative
  control: the mechanism planned from a share of ε = 8 claimed as ε = 1 (the budget split is
  where a wiring bug would sit): measured, not derived (the smooth bound moves with ε).
* Median by the exponential mechanism (the default method), ε = 1, bounds [0, 10], a grid of 4
  cells (points 0, 2.5, 5, 7.5, 10): x = (0, 0, 0, 2.5, 7.5, 7.5) against x' = x + (10), the pair
  a search over every multiset of ≤ 6 grid values plus one found best. Exact laws: P[y = 0] =
  0.1614 vs 0.0672, ln-ratio 0.877 (< ε: the normaliser moves only partly), expected
  ε_lb ≈ 0.67 at n = 4·10^4. Negative control: the share ε = 3 claimed as ε = 1: P[y = 0] =
  0.0388 vs 0.0020, ln-ratio 2.96, expected ε_lb ≈ 2.0.
* Sample-and-aggregate, clipped mean of ``v`` on k = 10 person chunks, range [0, 1], ε = 1:
  ``test_audit_sample_aggregate``'s pair (100 light persons with 10 rows of 0; x adds one heavy
  person with 10^4 rows of 1). Expected ε_lb ≈ 0.93 at n = 10^5 (that audit's). Negative control:
  the planned aggregator fed answers of chunks built by row instead of by person (every chunk
  moves): expected ε_lb ≈ 6.3 at n = 2·10^4.

* Top partition (stability-based release), (ε, δ) = (1, 10^-6): 20 persons in ``a`` and 7 in
  ``b`` against 19 and 7 (``test_audit_local_sensitivity``'s pair, tight: ln-ratio exactly ε;
  its distances 14 and 13 straddle the threshold T = 14). Expected ε_lb ≈ 0.84 at n = 4·10^4.
  Negative control: the share ε = 3/2 claimed as ε = 1, on the pair that straddles *its*
  threshold (the planner lowers T with ε, so the ε = 1 pair would be released almost always):
  ln-ratio 1.5, expected ε_lb ≈ 1.26.
* PTR mean of per-person values in [0, 1], proposed bound b = 1/200, (ε, δ) = (1, 10^-6):
  200 + T persons with value 0 against the same plus one with 1 (``test_audit_local_sensitivity``'s
  pair: distances T and T + 1 straddle the threshold T = 27). Expected ε_lb ≈ 0.53 at
  n = 4·10^4. Negative control: the share ε = 3 claimed as ε = 1, on the pair at its own
  threshold (T = 10): the best event's ln-ratio grows with ε, expected well above 1.

Measured with the fixed secrets: median 0.368 (pass), 3.532 (caught); exponential median 0.683
(pass), 1.857 (caught); sample-and-aggregate 0.916
(pass), 6.019 (caught); top partition 0.837 (pass), 1.271 (caught, T = 10 at ε = 3/2);
PTR mean 0.473 (pass), 1.315 (caught).
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest

import userdp.transforms as dp
from tests.audit.harness import assert_caught, assert_private
from tests.audit.test_audit_sample_aggregate import by_row
from tests.audit.test_audit_sample_aggregate import data as saa_data
from userdp.transforms.mechanisms.ptr import PTRMean, distance_threshold
from userdp.transforms.mechanisms.rng import KeyedRng, ReleaseKey
from userdp.transforms.mechanisms.stability import top_partition_distance
from userdp.transforms.sample_aggregate import chunk_answers, chunk_key

pytestmark = pytest.mark.slow  # Beam pipelines and 10^4–10^5 draws a side

X_EM, X_PRIME_EM = (0.0, 0.0, 0.0, 2.5, 7.5, 7.5), (0.0, 0.0, 0.0, 2.5, 7.5, 7.5, 10.0)
EM_FLOOR = 0.67 - 0.15  # expected ε_lb minus a margin (module docstring)
Counts = tuple[tuple[str, int], ...]  # (partition, persons) pairs
KEY = ReleaseKey(bytes(range(32)))
DELTA = 1e-6
X_MEDIAN, X_PRIME_MEDIAN = (0.0, 0.0, 10.0, 10.0, 10.0), (0.0, 0.0, 10.0, 10.0)
N_MEDIAN, N_SAA, N_CONTROL, N_TOP = 20_000, 100_000, 20_000, 40_000


def _run(
    rows: pa.Table,
    metric: beam.PTransform[Any, Any],
    budget: dp.Budget,
    out_dir: Path,
    *,
    keys: dict[str, str] | None = None,
) -> tuple[list[dict[str, Any]], Any]:
    """Runs ``"q" >> metric`` on ``rows`` (person column ``person``, value ``v``) through the
    public API → (released rows as dicts, the plan the release booked for ``q``)."""
    release = dp.Release._for_launcher(budget, KEY, noise=True)
    with beam.Pipeline() as p:
        people = (
            p
            | beam.Create([rows])
            | release.ByPerson(
                "person", keys=keys or {}, values=[] if keys else ["v"], person_type="string"
            )
        )
        released = people | "q" >> metric
        _ = (
            released
            | beam.Map(lambda r: json.dumps(r._asdict()))
            | beam.io.WriteToText(str(out_dir / "released"))
        )
    lines = [line for f in out_dir.glob("released*") for line in f.read_text().splitlines()]
    return [json.loads(line) for line in lines], release._state.queries["q"].plan


# ----------------------------------------------------------------------------- median


def _median(epsilon: float, out_dir: Path) -> Any:
    """The public API's planned smooth-sensitivity median, after checking the pipeline on x."""
    rows = pa.table({"person": [f"p{i}" for i in range(5)], "v": list(X_MEDIAN)})
    metric = dp.Median(
        value="v", per_person="mean", bounds=[0, 10], method="smooth_sensitivity",
        noise="laplace", epsilon=epsilon, delta=DELTA,
    )  # fmt: skip
    out, plan = _run(rows, metric, dp.Budget(epsilon=epsilon, delta=DELTA), out_dir)
    mechanism = plan.mechanism
    draw = mechanism.release(np.array(X_MEDIAN), KEY.for_query("q").rng("value"))
    assert out == [{"value": float(draw), "released": True}]  # the pipeline is one draw of it
    return mechanism


def _median_draw(mechanism: Any) -> Any:
    def run(values: tuple[float, ...], rng: KeyedRng) -> float:
        return float(mechanism.release(np.array(values), rng))

    return run


def test_median_through_the_public_api_passes_the_audit(tmp_path: Path) -> None:
    mechanism = _median(1.0, tmp_path)
    assert type(mechanism.noise).__name__ == "LaplaceNoise"  # the pair's expected bound assumes it
    result = assert_private(
        _median_draw(mechanism), X_MEDIAN, X_PRIME_MEDIAN,
        epsilon=1.0, delta=DELTA, n=N_MEDIAN, label="api-median",
    )  # fmt: skip
    assert result.epsilon_lb >= 0.36 - 0.15, str(result)


def test_median_negative_control_share_not_the_claim_is_caught(tmp_path: Path) -> None:
    assert_caught(
        _median_draw(_median(8.0, tmp_path)), X_MEDIAN, X_PRIME_MEDIAN,
        epsilon=1.0, delta=DELTA, n=N_MEDIAN, label="api-median-control",
    )  # fmt: skip


def _em_median(epsilon: float, out_dir: Path) -> Any:
    """The public API's planned exponential-mechanism median (the default method)."""
    rows = pa.table({"person": [f"p{i}" for i in range(len(X_EM))], "v": list(X_EM)})
    metric = dp.Median(value="v", per_person="mean", bounds=[0, 10], grid_bits=2, epsilon=epsilon)
    out, plan = _run(rows, metric, dp.Budget(epsilon=epsilon), out_dir)
    mechanism = plan.mechanism
    assert plan.method == "exponential"  # the default
    draw = mechanism.release(np.array(X_EM), KEY.for_query("q").rng("value"))
    assert out == [{"value": float(draw), "released": True}]
    return mechanism


def test_exponential_median_through_the_public_api_passes_the_audit(tmp_path: Path) -> None:
    result = assert_private(
        _median_draw(_em_median(1.0, tmp_path)), X_EM, X_PRIME_EM,
        epsilon=1.0, n=N_TOP, label="api-em-median",
    )  # fmt: skip
    assert result.epsilon_lb >= EM_FLOOR, str(result)


def test_exponential_median_negative_control_is_caught(tmp_path: Path) -> None:
    assert_caught(
        _median_draw(_em_median(3.0, tmp_path)), X_EM, X_PRIME_EM,
        epsilon=1.0, n=N_TOP, label="api-em-median-control",
    )  # fmt: skip


# -------------------------------------------------------------------- sample-and-aggregate


def _saa(out_dir: Path) -> tuple[Any, bytes]:
    """The public API's planned sample-and-aggregate params and chunk key, after checking that
    the pipeline's release on x is one draw of the planned aggregator."""
    table = saa_data(heavy=True)
    rows = table.rename_columns(["person", "v"])
    metric = dp.SampleAggregate(
        function="tests.audit.test_audit_sample_aggregate:mean_v",
        columns=["v"], range=[0, 1], chunks=10, aggregator="mean", epsilon=1,
    )  # fmt: skip
    out, plan = _run(rows, metric, dp.Budget(epsilon=1), out_dir)
    params, ckey = plan.params, chunk_key(KEY, "q")
    answers = chunk_answers(table, params, ckey, 10)
    [value] = params.aggregator_for(10).release(
        answers, KEY.for_query("q").rng("sample_aggregate", "value")
    )
    assert [r["value"] for r in out] == [float(value)]
    return params, ckey


def _saa_draw(params: Any, ckey: bytes) -> Any:
    aggregator = params.aggregator_for(10)
    cache: dict[tuple[bool, bool], list[Any]] = {}

    def run(side: tuple[bool, bool], rng: KeyedRng) -> float:
        if side not in cache:
            heavy, rows = side
            table = saa_data(heavy=heavy)
            cache[side] = chunk_answers(by_row(table) if rows else table, params, ckey, 10)
        return float(aggregator.release(cache[side], rng)[0])

    return run


def test_sample_aggregate_through_the_public_api_passes_the_audit(tmp_path: Path) -> None:
    run = _saa_draw(*_saa(tmp_path))
    result = assert_private(
        run, (True, False), (False, False), epsilon=1.0, n=N_SAA, label="api-saa"
    )
    assert result.epsilon_lb >= 0.82, str(result)


def test_sample_aggregate_negative_control_row_chunks_is_caught(tmp_path: Path) -> None:
    run = _saa_draw(*_saa(tmp_path))
    assert_caught(
        run, (True, True), (False, True), epsilon=1.0, n=N_CONTROL, label="api-saa-control"
    )


# ------------------------------------------------------------------------------ top partition


def _top_pair(threshold: int) -> tuple[Counts, Counts]:
    """The pair at threshold T: ``a`` leads ``b`` (7 persons) by distance T, then T − 1."""
    return (("a", threshold + 6), ("b", 7)), (("a", threshold + 5), ("b", 7))


def _top_partition(epsilon: float, out_dir: Path) -> tuple[Any, tuple[Counts, Counts]]:
    """The public API's planned stability mechanism and the pair at its threshold, after
    checking the pipeline's release on x."""
    metric = dp.TopPartition(by=["page"], epsilon=epsilon, delta=DELTA)
    budget = dp.Budget(epsilon=epsilon, delta=DELTA)
    threshold = distance_threshold(Fraction(epsilon), Fraction(DELTA))
    x, x_prime = _top_pair(threshold)
    pages = [page for page, persons in x for _ in range(persons)]
    rows = pa.table({"person": [f"p{i}" for i in range(len(pages))], "page": pages})
    out, plan = _run(rows, metric, budget, out_dir, keys={"page": "string"})
    assert plan.mechanism.threshold == threshold
    assert top_partition_distance(dict(x)) == ("a", threshold)
    top = plan.mechanism.release({(k,): c for k, c in x}, KEY.for_query("q").rng("value"))
    assert out == [{"page": None if top is None else top[0], "released": top is not None}]
    return plan.mechanism, (x, x_prime)


def _top_draw(mechanism: Any) -> Any:
    def run(counts: Counts, rng: KeyedRng) -> object:
        return mechanism.release({(k,): c for k, c in counts}, rng)

    return run


def test_top_partition_through_the_public_api_passes_the_audit(tmp_path: Path) -> None:
    mechanism, (x, x_prime) = _top_partition(1.0, tmp_path)
    assert mechanism.threshold == 14  # the pair of test_audit_local_sensitivity
    result = assert_private(
        _top_draw(mechanism), x, x_prime,
        epsilon=1.0, delta=DELTA, n=N_TOP, label="api-top",
    )  # fmt: skip
    assert result.epsilon_lb >= 0.7, str(result)


def test_top_partition_negative_control_share_not_the_claim_is_caught(tmp_path: Path) -> None:
    mechanism, (x, x_prime) = _top_partition(1.5, tmp_path)
    assert_caught(
        _top_draw(mechanism), x, x_prime,
        epsilon=1.0, delta=DELTA, n=N_TOP, label="api-top-control",
    )  # fmt: skip


# ----------------------------------------------------------------------------------- PTR mean


def _ptr_mean(epsilon: float, out_dir: Path) -> tuple[Any, tuple[Any, Any]]:
    """The public API's planned PTR mean and the pair at its threshold, after checking the
    pipeline's release on x."""
    b = Fraction(1, 200)
    threshold = PTRMean(0, 1, bound=b, epsilon=Fraction(epsilon), delta=Fraction(DELTA))
    x = np.zeros(200 + threshold.calibration.threshold)
    x_prime = np.append(x, 1.0)
    rows = pa.table({"person": [f"p{i}" for i in range(len(x))], "v": x})
    metric = dp.PtrMean(
        value="v", per_person="mean", bounds=[0, 1], bound=b, epsilon=epsilon, delta=DELTA
    )
    out, plan = _run(rows, metric, dp.Budget(epsilon=epsilon, delta=DELTA), out_dir)
    mechanism = plan.mechanism
    assert mechanism.calibration.threshold == threshold.calibration.threshold
    draw = mechanism.release(x, KEY.for_query("q").rng("value"))
    assert out == [{"value": None if draw is None else float(draw), "released": draw is not None}]
    return mechanism, (tuple(x), tuple(x_prime))


def _ptr_draw(mechanism: Any) -> Any:
    def run(values: tuple[float, ...], rng: KeyedRng) -> float | None:
        out = mechanism.release(np.array(values), rng)
        return None if out is None else float(out)

    return run


def test_ptr_mean_through_the_public_api_passes_the_audit(tmp_path: Path) -> None:
    mechanism, (x, x_prime) = _ptr_mean(1.0, tmp_path)
    assert mechanism.calibration.threshold == 27  # the pair of test_audit_local_sensitivity
    result = assert_private(
        _ptr_draw(mechanism), x, x_prime,
        epsilon=1.0, delta=DELTA, n=N_TOP, label="api-ptr-mean",
    )  # fmt: skip
    assert result.epsilon_lb >= 0.4, str(result)


def test_ptr_mean_negative_control_share_not_the_claim_is_caught(tmp_path: Path) -> None:
    mechanism, (x, x_prime) = _ptr_mean(3.0, tmp_path)
    assert_caught(
        _ptr_draw(mechanism), x, x_prime,
        epsilon=1.0, delta=DELTA, n=N_TOP, label="api-ptr-mean-control",
    )  # fmt: skip
