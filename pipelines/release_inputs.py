"""Everything a release reads besides its data rows, as digests for the ledger's fingerprint.

The ledger lets a release id be re-run for free because the re-run draws the *same* noise (the
stored secret) on the *same* inputs, so it publishes the same bytes. If anything that shapes the
released values could change between the runs, the same noise would be added to a different
statistic, and the difference of the two outputs would be the exact, noise-free change (issue 12).
So the fingerprint covers, beside the input files (path, size, modification time):

- every file a query reads: public partition key files (by content);
- the source of every user function a query calls (``sample_aggregate``'s ``function``): the
  module's file, by content;
- the userdp code itself: its version and a digest of every module of ``transforms`` and
  ``pipelines`` (a change of a mechanism, a clamp or a rounding rule changes released values);
- the release secret file (``[release] secret_path``): a key check value, HMAC-SHA256 of a fixed
  label under the key — it identifies the key without revealing it.

A kind that reads another file or loads other code must add it here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .config import JobConfig
from .config_fields import ConfigError
from .publish import file_sha256
from .version import userdp_code_digest


def _file_digest(path: str) -> str:
    return "sha256:" + file_sha256(path)[0]


def function_source_digest(function: str) -> str:
    """The digest of the file that defines ``module:function`` (its module's source)."""
    module = function.split(":", 1)[0]
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not Path(spec.origin).is_file():
        return f"module {module} (no source file)"
    return _file_digest(spec.origin)


def release_artifacts(job: JobConfig, secret_check: str | None) -> dict[str, str]:
    """Name → digest of everything the release reads besides its input rows (module docstring)."""
    out = {"userdp": userdp_code_digest()}
    for i, q in enumerate(job.queries):
        if q.partitions not in (None, "private"):
            try:
                out[f"queries[{i}].partitions"] = _file_digest(str(q.partitions))
            except OSError as e:
                raise ConfigError(
                    f"queries[{i}].partitions", q.partitions, "a readable file", e.strerror or "",
                    job.source,
                ) from None  # fmt: skip
        function = q.options.get("function")
        if isinstance(function, str):
            out[f"queries[{i}].function"] = function_source_digest(function)
    if secret_check is not None:
        out["release.secret_path"] = secret_check
    return out
