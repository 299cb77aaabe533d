"""Exact releases for unit tests of pipelines built on userdp. NOT PRIVATE: no noise at all.

A team testing its own pipeline wants to assert exact numbers: that its rows reach ``ByPerson``
with the right columns, that its ``by`` keys group as intended, that contribution bounds cut
what it expects. :func:`exact_release` gives a :class:`~userdp.transforms.release.Release`
whose metrics release the *contribution-bounded* values with the noise switched off — the same
hook userdp's own tests use — so a test can compare them with values computed by hand::

    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to
    import userdp.transforms as dp
    from userdp.transforms.testing import exact_release

    rows = [{"pid": "ann", "dom": "a.example"}] * 3 + [{"pid": "bob", "dom": "a.example"}]
    release = exact_release(dp.Budget(epsilon=1, delta=1e-6))
    with TestPipeline() as p:
        people = p | beam.Create(rows) | release.ByPerson(
            "pid", person_type="string", keys={"dom": "string"})
        visits = people | "visits" >> dp.Count(
            by=["dom"], max_partitions_per_person=1, max_rows_per_partition=2,
            epsilon=1, delta=1e-6)
        # ann's 3 rows are cut to C = 2, bob adds 1
        assert_that(visits | beam.Map(lambda r: (r.dom, r.value)), equal_to([("a.example", 3)]))

With noise off: every partition holding a person is released (private selection keeps them all),
counts, sums and means are the bounded values, order statistics return the q-quantile of the
per-person values as the core defines it, x_(⌈q·n⌉) of the n sorted values (for an even n
the median is the *lower* middle value, where the exponential mechanism's most likely answers
lie anywhere between the two middle values), a trimmed mean is the mean between the exact
quantiles *on its grid* (values rounded to the nearest of 2^``grid_bits`` points of the bounds:
assert it with a tolerance of one grid step, not ``equal_to``), a sample-and-aggregate chunk
whose function fails answers the range's midpoint as in a real release, and ``stddev`` still
states the noise a real release would add. Everything else —
validation, dead letters, the budget's booking and its misuse errors — is what a real release
does.

Why this cannot publish raw values by accident: the release refuses to be used by a pipeline on
any runner but Beam's local ones (Direct, FnApi), or with a ``--job_endpoint`` or an
``--environment_type`` other than LOOPBACK (the DirectRunner hands pipelines to Prism, which
would submit to that server or run on those workers), so a Dataflow or Flink job built
with it fails when its first transform is applied; and its manifest says ``"noise": "off …"``
where a real release says nothing. Privacy on Beam keeps the same kind of helper apart, in
``pbeamtest`` (no noise, every partition kept, contribution bounding still applied).
"""

from __future__ import annotations

import hashlib
from typing import Any

from .mechanisms.rng import ReleaseKey
from .release import Budget, Release, ReleaseError

# Prism is left out: it is a portable runner, and with --job_endpoint it submits to any server
LOCAL_RUNNERS = frozenset(
    {"DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner", "FnApiRunner"}
)
NOISE_OFF = (
    "off: userdp.transforms.testing.exact_release — exact values, NOT differentially private"
)


class _ExactRelease(Release):
    """A Release with noise off that binds only to pipelines on local runners."""

    def _bind(self, pipeline: Any) -> None:
        runner = type(getattr(pipeline, "runner", None)).__name__
        if runner not in LOCAL_RUNNERS:
            raise ReleaseError(
                f"exact_release has no noise and is for tests on a local runner, not {runner}: "
                "use userdp.transforms.Release for a real release"
            )
        if remote := _remote_option(pipeline):
            # Beam's DirectRunner hands a pipeline to Prism, which submits it to the job server
            # --job_endpoint names, and runs it on the SDK workers --environment_type names:
            # exact values would be computed on another machine.
            raise ReleaseError(
                "exact_release has no noise and is for tests on a local runner, but the "
                f"pipeline's options send it elsewhere ({remote}), as the DirectRunner would: "
                "drop the option in tests"
            )
        super()._bind(pipeline)

    def manifest(self) -> dict[str, Any]:
        return {"noise": NOISE_OFF, **super().manifest()}


def _remote_option(pipeline: Any) -> str | None:
    """The option that would run the pipeline's work off this machine, if one is set: a job
    server (``--job_endpoint``) or SDK workers other than Beam's in-process loopback
    (``--environment_type``: EXTERNAL names any address; DOCKER and PROCESS are left out too,
    a test needs none of them)."""
    from apache_beam.options.pipeline_options import PortableOptions  # noqa: PLC0415

    options = getattr(pipeline, "options", None) or getattr(pipeline, "_options", None)
    if options is None:
        return None
    portable = options.view_as(PortableOptions)
    if portable.job_endpoint:
        return "--job_endpoint"
    environment = portable.environment_type
    if environment and str(environment).upper() != "LOOPBACK":
        return f"--environment_type={environment}"
    return None


def exact_release(budget: Budget, *, seed: bytes = b"userdp.testing") -> Release:
    """A release whose metrics give exact, contribution-bounded values (module docstring).
    ``seed`` fixes the bounding key, so which rows a person keeps above L or C is the same in
    every run of the test (a real release draws a fresh secret)."""
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a userdp Budget, e.g. Budget(epsilon=1); got {budget!r}")
    if not isinstance(seed, bytes):
        raise TypeError(f"seed must be bytes, got {type(seed).__name__}")
    key = ReleaseKey(hashlib.sha256(b"userdp.testing\0" + seed).digest())
    release = _ExactRelease._for_launcher(budget, key, noise=False)
    assert isinstance(release, _ExactRelease)
    return release
