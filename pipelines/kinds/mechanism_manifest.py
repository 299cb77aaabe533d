"""Manifest entries of the additive noise mechanisms and of the partition-selection rules.

Public parameters only (ε or ρ, sensitivities, scales, thresholds, δ): what a privacy engineer
needs to check a release's calibration, nothing computed from the data. Exact rationals are
written both as a float and as their exact fraction (:func:`exact_number`).
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

from userdp.transforms.mechanisms.additive import LaplaceMechanism
from userdp.transforms.mechanisms.discrete import discrete_laplace_std
from userdp.transforms.mechanisms.partition_selection import (
    GaussianThresholding,
    LaplaceThresholding,
    TruncatedGeometricSelection,
)
from userdp.transforms.params import (
    NoiseMechanism,
    SelectionRule,
)

if TYPE_CHECKING:
    pass


def describe_noise(m: NoiseMechanism) -> dict[str, Any]:
    if isinstance(m, LaplaceMechanism):
        return {
            "kind": "laplace",
            "epsilon": m.epsilon,
            "l1_sensitivity": m.l1_sensitivity,
            "scale": m.scale,
            "granularity": m.granularity,
            "stddev": m.std,
        }
    return {
        "kind": "gaussian",
        "rho": m.rho,
        "l2_sensitivity": m.l2_sensitivity,
        "stddev": m.std,
        "granularity": m.granularity,
    }


def describe_selection_count(s: LaplaceThresholding) -> dict[str, Any]:
    """The noise of a ``persons`` value read off the selection's noisy count: that draw's
    discrete Laplace, not a noise of its own (none is drawn)."""
    return {
        "kind": "discrete_laplace",
        "scale": exact_number(s.scale),
        "stddev": discrete_laplace_std(s.scale),
        "of": "the partition selection's noisy count of persons, released as the value "
        "(conditioned on passing the selection's threshold: biased up near it)",
    }


def describe_selection(s: SelectionRule | None, sel_delta: Fraction) -> dict[str, Any] | None:
    if s is None:
        return None
    head = {
        "delta": exact_number(s.delta),
        "max_partitions_per_person": s.max_partitions_per_person,
    }
    if isinstance(s, LaplaceThresholding):
        return {
            "rule": "laplace_thresholding",
            "epsilon": exact_number(s.epsilon),
            **head,
            "scale": exact_number(s.scale),
            "threshold": s.threshold,
            "delta_achieved": str(s.delta_achieved),
        }
    if isinstance(s, TruncatedGeometricSelection):
        return {
            "rule": "truncated_geometric",
            "epsilon": exact_number(s.epsilon),
            **head,
            "per_partition": "(ε/L, δ/L), basic composition over a person's L partitions",
            "always_keep_count": s.always_keep_count,
            "half_keep_count": s.half_keep_count,
        }
    if isinstance(s, GaussianThresholding):
        return {
            "rule": "gaussian_thresholding",
            "rho": exact_number(s.rho),
            **head,
            "sigma2": exact_number(s.sigma2),
            "threshold": s.threshold,
            "delta_achieved": str(s.delta_achieved),
        }
    return None


def exact_number(x: Fraction) -> dict[str, Any]:
    return {"value": float(x), "exact": str(x)}
