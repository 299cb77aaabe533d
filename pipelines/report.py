"""``report.html``: a release as a reader would want to see it — one self-contained file.

For each query: its released table (the first ``MAX_ROWS`` rows, the largest values first) and a
plot of the values with their 95% error bars (the noise's 95% interval from its public stddev:
±ln 20/√2 ≈ 2.12 stddevs for Laplace noise, ±1.96 for Gaussian — the half-width ``userdp plan``
states); for the whole
release: the budget split as a chart and the manifest's totals. Plots are drawn with matplotlib
(Agg) as SVG and embedded inline, with text as paths, so the file needs no network, no fonts and
no script to render. Its bytes are deterministic (fixed SVG id salt, no date): the manifest lists
its SHA-256, and a re-run of a release must write the same manifest.

**Only DP outputs and public parameters.** The tables and plots read the released files (already
noisy) and the manifest (public facts of the plan); nothing else about the data is read, so the
report can go wherever the release goes. Ordering rows by released value is post-processing.
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

MAX_ROWS = 30  # rows shown per query: the largest released values
STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 64em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0 1em; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
th { background: #f3f3f3; } td.key { text-align: left; }
.note { color: #555; font-size: 0.9em; } figure { margin: 0.5em 0; }
"""


def _svg(fig: Any) -> str:
    """A matplotlib figure as inline SVG (text as paths: no font is fetched)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    buf = io.StringIO()
    # no date and no Matplotlib version: the report's bytes are in the manifest, which a re-run
    # of the release id must reproduce (the library's version is in the fingerprint anyway)
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _pyplot() -> Any:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "path"
    # the same release gives the same bytes (a re-run compares the manifest, which hashes this
    # file): element ids from a fixed salt, no date
    matplotlib.rcParams["svg.hashsalt"] = "userdp-report"
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def budget_chart(queries: Sequence[Mapping[str, Any]]) -> str | None:
    """Each query's share of the budget (ε, or ρ under zCDP) as horizontal bars."""
    unit = "epsilon" if any("epsilon" in q.get("share", {}) for q in queries) else "rho"
    shares = [(str(q["name"]), float(q.get("share", {}).get(unit, 0.0))) for q in queries]
    if not any(v > 0 for _, v in shares):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(shares) + 1.0))
    names = [n for n, _ in shares][::-1]
    values = [v for _, v in shares][::-1]
    ax.barh(names, values, color="#4a7fb5")
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.4g}", va="center", fontsize=9)
    ax.set_xlabel("ε" if unit == "epsilon" else "ρ (zCDP)")
    ax.set_title("budget split: each query's share")
    ax.margins(x=0.2)
    return _svg(fig)


def _label(row: Mapping[str, Any], keys: Sequence[str]) -> str:
    return " / ".join(str(row[k]) for k in keys) or "(all)"


LAPLACE_Z95 = math.log(20) / math.sqrt(2)  # P(|X| > ln 20·b) = 0.05, σ = √2·b
GAUSSIAN_Z95 = 1.959963984540054


def z95(query: Mapping[str, Any]) -> float:
    """The query's 95% half-width in stddevs of its noise: the plan's own ratio where it states
    both, else by the noise's kind (Laplace ±2.12σ: a ±1.96σ bar covered 93.75%)."""
    stat = query.get("statistic")
    if not isinstance(stat, Mapping):  # the shifted inverse names its statistic ("total")
        stat = {}
    width, sd = stat.get("error95_half_width"), stat.get("stddev")
    if isinstance(width, (int, float)) and isinstance(sd, (int, float)) and sd > 0:
        return float(width) / float(sd)
    return GAUSSIAN_Z95 if "gaussian" in _kinds(query) else LAPLACE_Z95


def _kinds(x: Any) -> set[str]:
    """Every noise named anywhere in a manifest entry (a mean names two noises): as a mechanism's
    ``kind``, or as a ``"mechanism"`` string (the auto bound's and sample-and-aggregate's noise)."""
    if isinstance(x, Mapping):
        own = {str(x["kind"])} if "kind" in x else set()
        if isinstance(x.get("mechanism"), str):
            own.add(x["mechanism"])
        return own.union(*(_kinds(v) for v in x.values()))
    if isinstance(x, (list, tuple)):
        return set().union(*(_kinds(v) for v in x))
    return set()


def values_chart(
    name: str, rows: Sequence[Mapping[str, Any]], keys: Sequence[str], z: float = LAPLACE_Z95
) -> str | None:
    """Released values with their 95% error bars (±``z`` stddevs), one row per partition."""
    shown = [r for r in rows if isinstance(r.get("value"), (int, float))]
    shown = [r for r in shown if math.isfinite(float(r["value"]))]
    if not shown:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.32 * len(shown) + 1.2))
    labels = [_label(r, keys) for r in shown][::-1]
    values = [float(r["value"]) for r in shown][::-1]
    errors = [z * float(r.get("stddev") or 0.0) for r in shown][::-1]
    ax.errorbar(values, range(len(values)), xerr=errors, fmt="o", color="#b5524a", capsize=3)
    ax.set_yticks(range(len(values)), labels, fontsize=8)
    if any("stddev" in r for r in shown):
        ax.set_xlabel(f"released value (bars: the noise's 95% interval, ±{z:.3g} stddevs)")
    else:  # order statistics, the trimmed mean: no stddev column, so no bar to draw
        ax.set_xlabel("released value (no stddev column: the error is in `userdp plan`)")
    ax.set_title(name)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return html.escape(str(v))


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], keys: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="key">{_cell(r[c])}</td>' if c in keys else f"<td>{_cell(r[c])}</td>"
            for c in columns
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _largest_first(table: pa.Table) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = table.to_pylist()
    if "value" in table.column_names:
        rows.sort(key=lambda r: -float(r["value"]) if r["value"] is not None else math.inf)
    return rows[:MAX_ROWS]


def render(manifest: Mapping[str, Any], tables: Mapping[str, tuple[pa.Table, int]]) -> str:
    """The report's HTML from the manifest and, per query, its largest released rows (at most
    ``MAX_ROWS``, :func:`read_largest`) and how many rows it released."""
    queries = list(manifest.get("queries", []))
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>userdp release report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>Release report</h1>",
        "<p class='note'>Every number here is a differentially private output or a public "
        "parameter of the release. Values are noisy by design; a bar is the 95% interval of "
        "the noise around the contribution-bounded truth.</p>",
        f"<p>total budget {html.escape(_budget_text(manifest.get('total', {})))}, spent "
        f"{html.escape(_budget_text(manifest.get('spent', {})))}; userdp "
        f"{html.escape(str(manifest.get('userdp_version', '?')))}</p>",
    ]
    chart = budget_chart(queries)
    if chart:
        parts.append(f'<h2>Budget</h2><figure id="plot-budget">{chart}</figure>')
    for q in queries:
        name = str(q["name"])
        table, released = tables.get(name, (None, 0))
        parts.append(f'<h2 id="query-{html.escape(name)}">{html.escape(name)}</h2>')
        parts.append(f"<p class='note'>{html.escape(_describe(q))}</p>")
        if table is None:
            continue
        keys = [k for k in q.get("by", []) if k in table.column_names]
        rows = _largest_first(table)
        more = released - len(rows)
        chart = values_chart(name, rows, keys, z95(q))
        if chart:
            parts.append(f'<figure class="plot" id="plot-{html.escape(name)}">{chart}</figure>')
        parts.append(_table(rows, table.column_names, keys))
        if more > 0:
            parts.append(f"<p class='note'>… {more} more rows in the output files.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


_SYMBOLS = {"epsilon": "ε", "delta": "δ", "rho": "ρ"}


def _budget_text(b: Mapping[str, Any]) -> str:
    return ", ".join(f"{sym}={b[k]:.4g}" for k, sym in _SYMBOLS.items() if k in b) or "—"


def _describe(q: Mapping[str, Any]) -> str:
    by = ", ".join(q.get("by", []) or []) or "the whole input"
    share = _budget_text(q.get("share", {}))
    return f"{q.get('metric', '?')} by {by}; share {share}"


def read_largest(paths: Sequence[str], fmt: str) -> tuple[pa.Table, int]:
    """(the ``MAX_ROWS`` largest released rows, the number of rows) of a query's files, read one
    file at a time, so a sharded output is never held whole by the launcher."""
    top: pa.Table | None = None
    total = 0
    for path in paths:
        table = _read_file(path, fmt)
        if not table.num_columns:
            continue
        total += table.num_rows
        merged = (
            table if top is None else pa.concat_tables([top, table], promote_options="permissive")
        )
        top = pa.Table.from_pylist(_largest_first(merged), schema=merged.schema)
    return (top if top is not None else pa.table({})), total


def _read_file(path: str, fmt: str) -> pa.Table:
    """One released file, in any output format."""
    import pyarrow.csv as pcsv  # noqa: PLC0415
    import pyarrow.json as pjson  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415
    from apache_beam.io.filesystems import FileSystems  # noqa: PLC0415

    with FileSystems.open(path) as f:
        data = f.read()
    if fmt == "parquet":
        return pq.read_table(pa.BufferReader(data))
    if fmt == "csv":
        return pcsv.read_csv(pa.BufferReader(data))
    if fmt == "json":
        return pjson.read_json(pa.BufferReader(data)) if data else pa.table({})
    import fastavro  # noqa: PLC0415

    return pa.Table.from_pylist(list(fastavro.reader(io.BytesIO(data))))
