"""More than 2 GiB of text in one shard: clean tables hold text as ``large_string``.

Arrow's ``string`` has 32-bit offsets, so combining a shard's chunks past 2 GiB of text raised
(``offset overflow``) — on one person's long values, or on a shard of a large log that was near
the cap. Whether the run failed then depended on one person (a library audit). Heavy: the two
cases took 4 min 48 s and a peak of 18.9 GB resident on this project's 2-core machine
(``/usr/bin/time -v pytest -m slow_audit tests/transforms/test_large_text.py``), so they are
behind ``slow_audit`` (``make audit``), not in CI.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
import pyarrow as pa
import pytest

import userdp.transforms as dp
from tests.beam_collect import run_and_collect
from userdp.transforms.testing import exact_release

BIG = "x" * (1 << 20)  # 1 MiB
ROWS = 2100  # 2.05 GiB of one key's text


@pytest.mark.slow_audit
@pytest.mark.parametrize("arrow", [False, True])
def test_one_persons_text_past_2_gib_in_a_shard_does_not_fail_the_run(arrow: bool) -> None:
    """As Python rows and as one dictionary-encoded Arrow table (whose decoding to ``string``
    built a corrupt array instead of raising)."""
    others = [{"pid": f"p{i}", "k": "a", "v": 1.0} for i in range(5)]
    if arrow:
        key = pa.DictionaryArray.from_arrays(pa.array([0] * ROWS, pa.int32()), pa.array([BIG]))
        heavy: list[Any] = [pa.table({"pid": ["adv"] * ROWS, "k": key, "v": [1.0] * ROWS})]
    else:
        heavy = [{"pid": "adv", "k": BIG, "v": 1.0}] * ROWS
    release = exact_release(dp.Budget(epsilon=1))

    def build(p: beam.Pipeline) -> dict[str, Any]:
        people = (
            p
            | beam.Create([*others, *heavy])
            | release.ByPerson(
                "pid", keys={"k": "string"}, values=["v"], num_shards=1, person_type="string"
            )
        )
        rows = people | "rows" >> dp.Count(max_rows_per_partition=3, epsilon=1)
        return {"rows": rows | beam.Map(lambda r: r.value)}

    assert run_and_collect(build)["rows"] == [5 + 3]  # the heavy person's rows cut to C = 3
