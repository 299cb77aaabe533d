"""Private histograms of how persons contribute: the measurements ``userdp tune`` will choose L
and C from (issue 17; the command itself is not built yet).

Over a public grid of buckets — the clamp grid of :mod:`.auto_bound`, ``per_octave`` per octave
(1, 2, 3, …, 8, 10, 12, …, 2^max) plus one bucket above — two histograms:

* **partitions per person**: each person adds 1 to the bucket of P, the number of distinct
  partitions they touch;
* **rows per (person, partition)**: each person adds 1/P to the bucket of the row count of each of
  their P partitions — weight 1 per person in total, however many partitions they touch.

Guarantee: pure ε-DP for each histogram, for adding or removing all rows of one person. A person's
contribution vector has L1 norm exactly 1 in both (one unit in one bucket; P weights of 1/P), so
the exact histogram has L1 sensitivity 1, and Laplace noise of scale 1/ε on every bucket of the
fixed grid is the Laplace mechanism on global sensitivity (Dwork, McSherry, Nissim & Smith 2006;
``../shared/seeds``), drawn by the secure sampler of :mod:`.additive`. Releasing both histograms
spends 2ε (basic composition): split the tuning budget before calling. Weighting by 1/P is what
keeps the second histogram's sensitivity at 1: counting each (person, partition) pair once would
let one person move it by P (the negative control of
``tests/audit/test_audit_contribution_histogram.py``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from .accounting import PureDP
from .additive import laplace_mechanism
from .auto_bound import clamp_grid
from .checks import Rational, positive
from .rng import KeyedRng


@dataclass(frozen=True, kw_only=True)
class ContributionHistograms:
    """Public parameters: ``epsilon`` per histogram, buckets up to 2^``max_exponent``."""

    epsilon: Rational
    max_exponent: int = 16
    per_octave: int = 4
    edges: tuple[Fraction, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        positive(self.epsilon, "epsilon")
        if not 1 <= self.max_exponent <= 40 or not 1 <= self.per_octave <= 16:
            raise ValueError(
                "max_exponent must lie in [1, 40] and per_octave in [1, 16], got "
                f"{self.max_exponent} and {self.per_octave}"
            )
        grid = clamp_grid(0, self.max_exponent, self.per_octave, 0)
        object.__setattr__(self, "edges", grid)

    @property
    def guarantee(self) -> PureDP:
        """Per histogram; both together spend twice this."""
        return PureDP(self.epsilon)

    @property
    def size(self) -> int:
        """Buckets: [1, e_0], (e_0, e_1], …, (e_{K−2}, e_{K−1}], (e_{K−1}, ∞)."""
        return len(self.edges) + 1

    def bucket(self, count: int) -> int:
        """The bucket of a count ≥ 1 (no noise)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"a contribution count is an integer ≥ 1, got {count!r}")
        return bisect_left(self.edges, count)

    def exact(self, persons: Iterable[Sequence[int]]) -> tuple[list[float], list[float]]:
        """(partitions per person, rows per (person, partition) weighted 1/P): not private.

        ``persons``: for each person, the row count of each partition they touch (P ≥ 1 counts).
        """
        partitions, rows = [0.0] * self.size, [0.0] * self.size
        for counts in persons:
            if not counts:
                raise ValueError("every person touches at least one partition")
            partitions[self.bucket(len(counts))] += 1.0
            weight = 1.0 / len(counts)
            for c in counts:
                rows[self.bucket(c)] += weight
        return partitions, rows

    def release(
        self, persons: Iterable[Sequence[int]], rng: KeyedRng
    ) -> tuple[list[float], list[float]]:
        """Both histograms with Laplace(1/ε) on every bucket: ε-DP each (module docstring)."""
        eps = float(Fraction(self.epsilon))
        return tuple(  # type: ignore[return-value]
            [laplace_mechanism(v, sensitivity=1.0, epsilon=eps, rng=rng) for v in hist]
            for hist in self.exact(persons)
        )
