"""report.html: one self-contained page (inline CSS, images as data URIs, no scripts) with the
plots and tables of a run directory, several run directories, or a sweep's results table.

Figures: tier occupancy over time (AutoTiering, seed 002, fig. 3 style: one row per node, colour =
share of the node in use), pages per hotness level per node over time (seed 002 fig. 11, drawn
when the time series has `hot_0`..`hot_8` columns), migrations per epoch per node, latency CDFs
from the run's latency histogram (latency_hist.parquet; the summary's percentiles for run
directories written before it existed), execution time normalised to a baseline, and a metrics table.
Plots are drawn with matplotlib's Agg backend, so no display is needed and output does not
depend on one.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import math
import os
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

import tiersim
from tiersim._native import TiersimError
from tiersim._result import (
    CONFIG_FILE,
    LATENCY_HIST_FILE,
    REPORT_FILE,
    SUMMARY_FILE,
    TIMESERIES_FILE,
    aggregate_float,
    regime_rows,
    run_warnings,
    writing,
)
from tiersim.bound import bound_lines

HOT_COLUMN = re.compile(r"^hot_(?P<level>\d)$")
HOT_LEVELS = 9  # AutoTiering's LAP levels 0..8 (8-bit access history)
MAX_DETAIL_RUNS = 12  # runs of a sweep that get their own occupancy / migration figures
MAX_BAR_GROUPS = 40
MAX_CDF_LINES = 16

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999), ("max", 1.0))


# ---------------------------------------------------------------------------------------------
# loading


@dataclass
class Run:
    """A run directory: its summary, time series and resolved config."""

    path: Path
    label: str
    summary: dict[str, Any]
    timeseries: pl.DataFrame
    config: str
    # None for a run directory written before latency_hist.parquet existed.
    latency_hist: pl.DataFrame | None = None

    @property
    def nodes(self) -> list[dict[str, Any]]:
        return list(self.summary.get("nodes", []))


def load_run(path: str | os.PathLike[str], label: str | None = None) -> Run:
    p = Path(path)
    if not (p / SUMMARY_FILE).is_file():
        raise TiersimError(f"'{p}' is not a run directory (no {SUMMARY_FILE}); `tiersim run -o DIR` writes one")
    try:
        summary = json.loads((p / SUMMARY_FILE).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise TiersimError(f"{p / SUMMARY_FILE}: not valid JSON: {exc}") from None
    if not isinstance(summary, dict) or "execution_time_ns" not in summary:
        raise TiersimError(f"{p / SUMMARY_FILE}: not a tiersim summary (no execution_time_ns)")
    ts_path = p / TIMESERIES_FILE
    try:
        ts = pl.read_parquet(ts_path) if ts_path.is_file() else pl.DataFrame()
    except Exception as exc:  # noqa: BLE001 - polars raises several kinds for a damaged file
        raise TiersimError(f"{ts_path}: cannot read: {exc}") from None
    config = (p / CONFIG_FILE).read_text(encoding="utf-8") if (p / CONFIG_FILE).is_file() else ""
    return Run(p, label or p.name, summary, ts, config, _read_latency_hist(p))


def _read_latency_hist(run_dir: Path) -> pl.DataFrame | None:
    path = run_dir / LATENCY_HIST_FILE
    if not path.is_file():
        return None
    try:
        hist = pl.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - polars raises several kinds for a damaged file
        raise TiersimError(f"{path}: cannot read: {exc}") from None
    missing = [c for c in ("node", "low_ns", "high_ns", "count") if c not in hist.columns]
    if missing:
        raise TiersimError(f"{path}: not a latency histogram (no column {', '.join(missing)})")
    return hist


# ---------------------------------------------------------------------------------------------
# figures


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # A fixed hash salt keeps SVG ids, and so SVG bytes, the same from one report to the next.
    matplotlib.rcParams["svg.hashsalt"] = "tiersim"
    return plt


def _encode(fig: Any, fmt: str) -> str:
    buf = io.BytesIO()
    metadata = {"Software": None} if fmt == "png" else {"Date": None, "Creator": None}
    fig.savefig(buf, format=fmt, dpi=100, metadata=metadata)
    _plt().close(fig)
    mime = "image/png" if fmt == "png" else "image/svg+xml"
    return f"data:{mime};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"


def _node_order(run: Run) -> list[str]:
    """Nodes by tier then name, then swap if the time series has it."""
    nodes = sorted(run.nodes, key=lambda n: (n.get("tier", 0), str(n.get("name"))))
    names = [str(n["name"]) for n in nodes]
    if run.timeseries.height and "swap" in set(run.timeseries["node"].to_list()):
        names.append("swap")
    return names


def _capacity_pages(run: Run) -> dict[str, float]:
    caps = {str(n["name"]): float(n.get("capacity_pages") or 0) for n in run.nodes}
    swap = run.summary.get("swap") or {}
    caps["swap"] = float(swap.get("capacity_pages") or 0)
    return caps


def _epochs(ts: pl.DataFrame) -> pl.DataFrame:
    return ts.group_by("epoch").agg(pl.col("t_start_ns").min(), pl.col("t_end_ns").max()).sort("epoch")


def occupancy_figure(run: Run, fmt: str) -> str | None:
    """Heatmap: one row per node (fastest tier on top), time on x, colour = pages in use /
    capacity. The AutoTiering paper's fig. 3 shows the same axes for Graph500's nodes."""
    ts = run.timeseries
    if ts.height == 0 or "pages" not in ts.columns:
        return None
    plt = _plt()
    names = _node_order(run)
    caps = _capacity_pages(run)
    epochs = _epochs(ts)
    wide = ts.pivot(on="node", index="epoch", values="pages", aggregate_function="max").sort("epoch")
    import numpy as np

    grid = np.zeros((len(names), wide.height))
    for i, name in enumerate(names):
        if name in wide.columns:
            pages = wide[name].fill_null(0).to_numpy().astype(float)
            grid[i] = pages / caps[name] if caps.get(name) else 0.0
    t_end_ms = aggregate_float(epochs["t_end_ns"].max()) / 1e6
    t0_ms = aggregate_float(epochs["t_start_ns"].min()) / 1e6
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(names) + 1.6), constrained_layout=True)
    im = ax.imshow(
        grid,
        aspect="auto",
        interpolation="nearest",
        cmap="viridis",
        vmin=0.0,
        vmax=1.0,
        extent=(t0_ms, t_end_ms, len(names) - 0.5, -0.5),
    )
    ax.set_yticks(range(len(names)), [f"{n} ({_tier_label(run, n)})" for n in names])
    ax.set_xlabel("simulated time (ms)")
    ax.set_title(f"{run.label}: tier occupancy over time")
    fig.colorbar(im, ax=ax, label="pages in use / capacity")
    return _encode(fig, fmt)


def _tier_label(run: Run, name: str) -> str:
    if name == "swap":
        return "swap"
    for n in run.nodes:
        if n.get("name") == name:
            return f"tier {n.get('tier', '?')}, {n.get('device', '?')}"
    return "?"


def hot_columns(ts: pl.DataFrame) -> dict[str, list[tuple[int, str]]]:
    """node -> [(level, column)]. The engine writes `hot_0`..`hot_8` (pages at each hotness
    level) on every node's own rows when the policy keeps an access history."""
    cols = sorted((int(m["level"]), c) for c in ts.columns if (m := HOT_COLUMN.match(c)))
    if not cols:
        return {}
    nodes = [n for n in ts["node"].unique(maintain_order=True).to_list() if n != "swap"]
    return {n: cols for n in nodes}


def _hot_matrix(ts: pl.DataFrame, cols: list[tuple[int, str]], node: str) -> Any:
    """levels x epochs of `node`'s pages."""
    import numpy as np

    rows = ts.filter(pl.col("node") == node).sort("epoch")
    return np.vstack([rows[c].fill_null(0).to_numpy().astype(float) for _, c in cols])


def hotness_figures(run: Run, fmt: str) -> list[tuple[str, str]]:
    """Per node: pages by hotness level over time, as stacked areas (fig. 3 colouring: dark red
    = hot) and as a level x time histogram (fig. 11)."""
    ts = run.timeseries
    hot = hot_columns(ts)
    if not hot:
        return []
    plt = _plt()
    epochs = _epochs(ts)
    t_ms = ((epochs["t_start_ns"] + epochs["t_end_ns"]) / 2e6).to_numpy()
    names = [n for n in _node_order(run) if n in hot] + sorted(set(hot) - set(_node_order(run)))
    cmap = plt.get_cmap("YlOrRd")
    out = []
    fig, axes = plt.subplots(
        len(names), 2, figsize=(11, 2.4 * len(names) + 0.6), squeeze=False, constrained_layout=True
    )
    for row, name in zip(axes, names, strict=True):
        cols = hot[name]
        levels = [lv for lv, _ in cols]
        m = _hot_matrix(ts, cols, name)
        colors = [cmap(0.15 + 0.85 * lv / max(HOT_LEVELS - 1, 1)) for lv in levels]
        row[0].stackplot(t_ms, m, colors=colors, labels=[f"level {lv}" for lv in levels], linewidth=0)
        row[0].set_ylabel(f"{name}\npages")
        row[0].set_xlabel("simulated time (ms)")
        im = row[1].imshow(
            m,
            aspect="auto",
            origin="lower",
            interpolation="nearest",
            cmap="Reds",
            extent=(
                float(t_ms[0]) if len(t_ms) else 0,
                float(t_ms[-1]) if len(t_ms) else 1,
                levels[0] - 0.5,
                levels[-1] + 0.5,
            ),
        )
        row[1].set_ylabel("hotness level")
        row[1].set_xlabel("simulated time (ms)")
        fig.colorbar(im, ax=row[1], label="pages")
    axes[0][0].set_title("pages by hotness level (dark red = hot; seed 002 fig. 3)")
    axes[0][1].set_title("hotness histogram over time (seed 002 fig. 11)")
    axes[0][0].legend(loc="upper left", fontsize=6, ncol=3)
    out.append((_encode(fig, fmt), f"{run.label}: pages per hotness level and node"))
    return out


def migration_figure(run: Run, fmt: str) -> str | None:
    """Pages migrated into (+) and out of (-) each node per epoch. Into the fastest tier is a
    promotion, into a lower tier a demotion (exact with two tiers)."""
    ts = run.timeseries
    if ts.height == 0 or "migrated_in" not in ts.columns:
        return None
    plt = _plt()
    import numpy as np

    fig, ax = plt.subplots(figsize=(9, 3.2), constrained_layout=True)
    names = [n for n in _node_order(run) if n != "swap"]
    colors = plt.get_cmap("tab10")
    for i, name in enumerate(names):
        sub = ts.filter(pl.col("node") == name).sort("epoch")
        if sub.height == 0:
            continue
        # Stairs over the epochs' own edges: one path per series instead of a bar per epoch.
        edges = np.append(sub["t_start_ns"].to_numpy(), sub["t_end_ns"][-1]) / 1e6
        ax.stairs(
            sub["migrated_in"].to_numpy(),
            edges,
            fill=True,
            color=colors(i),
            label=f"into {name} ({_tier_label(run, name)})",
        )
        ax.stairs(
            -sub["migrated_out"].to_numpy(), edges, fill=True, color=colors(i), alpha=0.45, label=f"out of {name}"
        )
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xlabel("simulated time (ms)")
    ax.set_ylabel("pages per epoch")
    t = run.summary.get("tiering") or {}
    ax.set_title(
        f"{run.label}: migrations ({t.get('promotions', 0):,} promotions, {t.get('demotions', 0):,} demotions)"
    )
    ax.legend(fontsize=7, ncol=2, loc="upper right")
    return _encode(fig, fmt)


Curve = tuple[str, list[float], list[float]]  # label, latency (ns), fraction of accesses at or below


def latency_cdf(hist: pl.DataFrame, node: str = "all") -> tuple[list[float], list[float]]:
    """The CDF of one histogram of latency_hist.parquet (node "all": the whole run): at each
    non-empty bin's upper bound, the fraction of accesses with a latency at or below it. The last
    point is (the highest bin's upper bound, 1.0); empty lists for a node without accesses."""
    rows = hist.filter(pl.col("node") == node).sort("high_ns")
    counts = rows["count"].to_list()
    total = sum(counts)
    if total == 0:
        return [], []
    cumulative = itertools.accumulate(counts)
    return [float(x) for x in rows["high_ns"]], [c / total for c in cumulative]


def percentile_cdf(lat: dict[str, Any]) -> tuple[list[float], list[float]]:
    """The CDF points a summary keeps (p50, p90, p99, p99.9, max), for runs without a histogram;
    empty when the summary lacks them."""
    if not lat or not all(isinstance(lat.get(k), (int, float)) for k, _ in QUANTILES[:4]):
        return [], []
    points = [(float(lat[k]), q) for k, q in QUANTILES if isinstance(lat.get(k), (int, float))]
    return [x for x, _ in points], [q for _, q in points]


def run_cdf(run: Run, node: str = "all") -> tuple[list[float], list[float], bool]:
    """A run's latency CDF from its histogram when it has one (exact: True), else from the summary's
    percentiles (overall only)."""
    if run.latency_hist is not None:
        return (*latency_cdf(run.latency_hist, node), True)
    if node != "all":
        return [], [], False
    return (*percentile_cdf(run.summary.get("latency_ns") or {}), False)


def latency_cdf_figure(curves: Sequence[Curve], fmt: str, title: str) -> str | None:
    """Access latency CDFs as steps. The y axis is -log10(1 - fraction), so the tail gets room:
    0.5, 0.9, 0.99, 0.999 ... are evenly spaced, up to the finest fraction a curve resolves (one
    access in its total); the top line is each curve's maximum. Curves with only a few points
    (summary percentiles) are drawn with markers."""
    curves = [c for c in curves if c[1]]
    if not curves:
        return None
    finite = [-math.log10(1 - f) for _, _, fs in curves for f in fs if f < 1]
    decades = max(3, math.ceil(max(finite, default=0.0) - 1e-9))
    ymax = decades + 0.6
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4), constrained_layout=True)
    for label, xs, fs in curves[:MAX_CDF_LINES]:
        ys = [(-math.log10(1 - f) if f < 1 else ymax) for f in fs]
        few = len(xs) <= len(QUANTILES)
        ax.step(
            [max(xs[0], 1e-3)] + xs, [0.0] + ys, where="post", label=label, marker="o" if few else None, markersize=3
        )
    ax.set_xscale("log")
    from matplotlib.ticker import LogLocator, ScalarFormatter

    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(LogLocator(subs="all"))
    ticks = [0.0, math.log10(2)] + [float(d) for d in range(1, decades + 1)] + [ymax]
    labels = ["0", "0.5"] + ["0." + "9" * d for d in range(1, decades + 1)] + ["max"]
    ax.set_yticks(ticks, labels)
    ax.set_ylim(0, ymax + 0.1)
    ax.set_xlabel("access latency (ns)")
    ax.set_ylabel("fraction of accesses at or below")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return _encode(fig, fmt)


def exec_bars_figure(rows: Sequence[dict[str, Any]], baseline: str, fmt: str) -> str | None:
    """Grouped bars: per group (same trace, platform, grid values, seed), each policy's execution
    time / the baseline policy's. 1.0 = baseline, lower is faster. Each row has its `group`, its
    `normalized` time and its bar's label: `bar` (sweep_rows) or else `policy`."""
    groups: dict[str, dict[str, float]] = {}
    for r in rows:
        if r.get("normalized") is not None:
            bar: str = r["bar"] if "bar" in r else r["policy"]
            groups.setdefault(r["group"], {})[bar] = r["normalized"]
    if not groups:
        return None
    plt = _plt()
    import numpy as np

    names = list(groups)[:MAX_BAR_GROUPS]
    policies = list(dict.fromkeys(p for g in names for p in groups[g]))
    fig, ax = plt.subplots(figsize=(max(7.0, 0.35 * len(names) * len(policies) + 2), 4.2), constrained_layout=True)
    width = 0.8 / max(len(policies), 1)
    x = np.arange(len(names))
    for i, pol in enumerate(policies):
        vals = [groups[g].get(pol, np.nan) for g in names]
        bars = ax.bar(x + (i - (len(policies) - 1) / 2) * width, vals, width, label=pol)
        for b, v in zip(bars, vals, strict=True):
            if v == v:
                ax.annotate(f"{v:.2f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=6)
    ax.axhline(1.0, color="black", linewidth=0.7, linestyle="--")
    ax.set_xticks(
        x, names, rotation=30 if len(names) > 3 else 0, ha="right" if len(names) > 3 else "center", fontsize=7
    )
    ax.set_ylabel(f"execution time / {baseline}")
    ax.set_title(f"execution time normalised to {baseline} (lower is faster)")
    ax.legend(fontsize=7)
    return _encode(fig, fmt)


# Grid columns whose sweep gets a sensitivity plot: the time-scale knobs of docs/model.md.
SENSITIVITY_KNOBS = (
    "set.os.daemon_time_scale",
    "set.scale",
    "param.scan_period_min",
    "param.scan_period_max",
    "param.scan_size",
)


def sensitivity_knobs(results: pl.DataFrame) -> list[str]:
    """Time-scale knobs the sweep varies over at least three values."""
    return [c for c in SENSITIVITY_KNOBS if c in results.columns and results[c].drop_nulls().n_unique() >= 3]


_UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9, "b": 1.0, "kib": 2.0**10, "mib": 2.0**20, "gib": 2.0**30}


def _knob_value(v: Any) -> float | None:
    """A knob's value as a number: plain, or a duration/size string in ns/bytes ("100ms", "64MiB")."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([A-Za-z]*)\s*", str(v))
    if not m or m[2].lower() not in _UNITS | {"": 1.0}:
        return None
    try:
        return float(m[1]) * (_UNITS | {"": 1.0})[m[2].lower()]
    except ValueError:
        return None


def sensitivity_figure(rows: Sequence[dict[str, Any]], knob: str, fmt: str) -> str | None:
    """Execution time against a time-scale knob (log axis), one line per trace and policy name:
    a flat line is a result that does not hang on the knob."""
    lines: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        x = _knob_value(r.get(knob))
        if r["status"] != "ok" or x is None or not r.get("execution_time_ns"):
            continue
        lines.setdefault(f"{r['trace']} / {r.get('policy_name') or r['policy']}", []).append(
            (x, r["execution_time_ns"] / 1e6)
        )
    if not lines:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.5), constrained_layout=True)
    for label, pts in lines.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(knob.split(".", 1)[1])
    ax.set_ylabel("execution time (ms)")
    ax.set_title(f"sensitivity to {knob.split('.', 1)[1]}")
    ax.legend(fontsize=6, ncol=2)
    return _encode(fig, fmt)


# ---------------------------------------------------------------------------------------------
# the page


@dataclass
class Report:
    """An HTML page built from sections; `html()` returns it whole."""

    title: str
    parts: list[str] = field(default_factory=list)
    images: int = 0

    def heading(self, text: str, level: int = 2) -> None:
        self.parts.append(f"<h{level}>{html.escape(text)}</h{level}>")

    def paragraph(self, text: str, cls: str = "") -> None:
        attr = f' class="{cls}"' if cls else ""
        self.parts.append(f"<p{attr}>{html.escape(text)}</p>")

    def note(self, text: str) -> None:
        self.paragraph(text, "note")

    def figure(self, data_uri: str | None, caption: str, missing: str = "") -> None:
        if data_uri is None:
            if missing:
                self.note(missing)
            return
        self.images += 1
        self.parts.append(
            f'<figure><img src="{data_uri}" alt="{html.escape(caption)}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )

    def table(self, header: Sequence[str], rows: Iterable[Sequence[Any]], caption: str = "", cls: str = "") -> None:
        out = [f'<table class="{cls}">' if cls else "<table>"]
        if caption:
            out.append(f"<caption>{html.escape(caption)}</caption>")
        out.append("<thead><tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in header) + "</tr></thead><tbody>")
        for row in rows:
            cells = []
            for v in row:
                text = _fmt(v)
                klass = ' class="num"' if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
                if text in ("agree", "ok"):
                    klass = ' class="good"'
                elif text in ("disagree", "failed"):
                    klass = ' class="bad"'
                cells.append(f"<td{klass}>{html.escape(text)}</td>")
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</tbody></table>")
        self.parts.append("".join(out))

    def html(self) -> str:
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(self.title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{html.escape(self.title)}</h1>"
            f'<p class="meta">tiersim {html.escape(tiersim.__version__)}</p>'
            + "\n".join(self.parts)
            + "</body></html>\n"
        )

    def write(self, path: str | os.PathLike[str]) -> Path:
        out = Path(path)
        if out.is_dir():
            raise TiersimError(f"report output '{out}' is a directory; give a file name")
        if not out.parent.is_dir():
            raise TiersimError(f"cannot write '{out}': directory '{out.parent}' does not exist")
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        try:
            with writing(out):
                tmp.write_text(self.html(), encoding="utf-8")
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
        return out


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{font-size:1.3em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
h3{font-size:1.1em}.meta{color:#777;font-size:.9em}.note{color:#7a5a00;background:#fff8e1;padding:.4em .7em;border-left:3px solid #e0b000}
figure{margin:1em 0}img{max-width:100%;height:auto;border:1px solid #eee}figcaption{font-size:.85em;color:#555}
table{border-collapse:collapse;font-size:.82em;margin:.8em 0;display:block;overflow-x:auto}
caption{text-align:left;font-weight:600;padding:.3em 0}
th,td{border:1px solid #ddd;padding:.25em .5em;text-align:left;white-space:nowrap}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
table.claims td{white-space:normal;min-width:6em}h4{font-size:1em}
td.good{background:#e6f4ea;color:#1e6b34;font-weight:600}td.bad{background:#fce8e6;color:#a50e0e;font-weight:600}
"""


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v != v:
            return "-"
        if v == 0:
            return "0"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.4g}"
    return str(v)


# ---------------------------------------------------------------------------------------------
# metrics shared by report and compare


def _lens(summary: dict[str, Any]) -> str | None:
    lens = summary.get("lens")
    if not lens:
        return None
    mark = "" if lens.get("consistent") else " (differ)"
    return f"{_fmt(lens.get('scale'))} / {_fmt(lens.get('daemon_time_scale'))}{mark}"


def run_metrics(summary: dict[str, Any]) -> list[tuple[str, Any]]:
    """(label, value) rows of the key metrics of one run, in display order."""
    lat = summary.get("latency_ns") or {}
    t = summary.get("tiering") or {}
    swap = summary.get("swap") or {}
    faults = summary.get("faults") or {}
    rows: list[tuple[str, Any]] = [
        ("platform", summary.get("platform")),
        ("policy", summary.get("policy")),
        ("trace", summary.get("trace")),
        ("seed", summary.get("seed")),
        ("scale / daemon_time_scale", _lens(summary)),
        ("execution time (ms)", summary.get("execution_time_ns", 0) / 1e6),
        ("accesses", summary.get("accesses")),
        ("fast-tier hit ratio", summary.get("fast_tier_hit_ratio")),
        ("latency mean (ns)", lat.get("mean")),
        ("latency p50 (ns)", lat.get("p50")),
        ("latency p99 (ns)", lat.get("p99")),
        ("latency p99.9 (ns)", lat.get("p999")),
        ("first-touch faults", faults.get("first_touch")),
        ("promotions", t.get("promotions")),
        ("demotions", t.get("demotions")),
        ("migrated MiB", (t.get("migrated_bytes") or 0) / 2**20 if t else None),
        ("hint faults", t.get("hint_faults")),
        ("ping-pong", t.get("ping_pong")),
        ("swap-ins / swap-outs", f"{swap.get('swap_ins', 0):,} / {swap.get('swap_outs', 0):,}" if swap else None),
        *regime_rows(summary),
    ]
    for n in summary.get("nodes", []):
        rows.append((f"{n.get('name')} share of accesses", n.get("share")))
        rows.append((f"{n.get('name')} bandwidth (GB/s)", n.get("bandwidth_gbs")))
        rows.append(
            (f"{n.get('name')} final / capacity pages", f"{n.get('final_pages', 0):,} / {n.get('capacity_pages', 0):,}")
        )
    return rows


def compared_metrics(summaries: Sequence[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """run_metrics of several runs side by side: every row any of them has, in the order first
    seen (runs on different platforms have different nodes), None where a run has none; with
    more than one run, each run's execution time over the first's before the times."""
    metrics = [dict(run_metrics(s)) for s in summaries]
    names = list(dict.fromkeys(label for m in metrics for label in m))
    rows = [(label, [m.get(label) for m in metrics]) for label in names]
    if len(summaries) > 1:
        base = summaries[0].get("execution_time_ns") or 0
        ratios = [s.get("execution_time_ns", 0) / base if base else None for s in summaries]
        rows.insert(5, ("time / first", ratios))
    return rows


# ---------------------------------------------------------------------------------------------
# run reports


def _run_detail(report: Report, run: Run, fmt: str) -> None:
    report.figure(
        occupancy_figure(run, fmt),
        f"{run.label}: pages in use / capacity per node and epoch",
        missing=f"{run.label}: the time series is empty; no occupancy figure.",
    )
    hot = hotness_figures(run, fmt)
    for uri, caption in hot:
        report.figure(uri, caption)
    if not hot:
        report.note(
            f"{run.label}: hotness histograms per node (seed 002 fig. 11) need the time-series columns "
            "hot_0..hot_8 (a node's pages at each hotness level per epoch, written by policies that keep "
            "an access history such as autotiering_*); this run's "
            "timeseries.parquet has none, so the figure is omitted."
        )
    report.figure(
        migration_figure(run, fmt),
        f"{run.label}: pages migrated per epoch",
        missing=f"{run.label}: the time series has no migrated_in/migrated_out columns; no migration timeline.",
    )


def runs_report(runs: Sequence[Run], fmt: str = "png", title: str | None = None) -> Report:
    """One run, or several compared with the first as the baseline."""
    if not runs:
        raise TiersimError("no runs to report")
    report = Report(title or (f"tiersim run {runs[0].label}" if len(runs) == 1 else f"tiersim: {len(runs)} runs"))
    for run in runs:
        for w in run_warnings(run.summary):
            report.note(f"{run.label}: warning: {w}")
        for line in bound_lines(run.summary):
            report.note(f"{run.label}: {line}")
    report.heading("Metrics")
    header = ["metric"] + [r.label for r in runs]
    report.table(header, [[label, *values] for label, values in compared_metrics([r.summary for r in runs])])
    if len(runs) > 1:
        report.heading("Execution time")
        bar_rows = [
            {
                "group": "runs",
                "policy": r.label,
                "normalized": r.summary["execution_time_ns"] / runs[0].summary["execution_time_ns"],
            }
            for r in runs
            if runs[0].summary.get("execution_time_ns")
        ]
        report.figure(exec_bars_figure(bar_rows, runs[0].label, fmt), f"execution time normalised to {runs[0].label}")
    report.heading("Latency")
    if len(runs) == 1 and runs[0].latency_hist is not None:
        # One run: the whole run and each node that served accesses.
        names = [str(node.get("name")) for node in runs[0].nodes]
        cdfs = [("all nodes", *run_cdf(runs[0]))] + [(name, *run_cdf(runs[0], name)) for name in names]
    else:
        cdfs = [(r.label, *run_cdf(r)) for r in runs]
    exact = all(c[3] for c in cdfs if c[1])
    report.figure(
        latency_cdf_figure([c[:3] for c in cdfs], fmt, "access latency CDF"),
        "access latency CDF (from the latency histogram)"
        if exact
        else "access latency CDF (from latency_hist.parquet where the run has one, else the summary's percentiles)",
        missing="no latency histogram or percentiles in the run directories.",
    )
    for run in runs:
        report.heading(f"Over time: {run.label}")
        _run_detail(report, run, fmt)
    report.heading("Configuration")
    for run in runs:
        report.parts.append(
            f"<details><summary>{html.escape(run.label)}: config.toml</summary><pre>{html.escape(run.config)}</pre></details>"
        )
    return report


# ---------------------------------------------------------------------------------------------
# sweep reports

_GROUP_EXCLUDE = {
    "hash",
    "index",
    "policy",
    "policy_name",
    "policy_params",
    "status",
    "error",
    "wall_time_s",
    "run_dir",
    "trace_source",
    "trace_digest",
    "platform_source",
    "overrides",
}


def _sweep_baseline(results: pl.DataFrame, sweep_dir: Path, baseline: str | None) -> str:
    policies = results.sort("index")["policy"].unique(maintain_order=True).to_list()
    if baseline is None:
        spec = sweep_dir / "sweep.toml"
        if spec.is_file():
            try:
                baseline = tomllib.loads(spec.read_text()).get("sweep", {}).get("baseline")
            except tomllib.TOMLDecodeError:
                baseline = None
    baseline = baseline or policies[0]
    if baseline not in policies:
        raise TiersimError(f"baseline '{baseline}' is not a policy of this sweep (policies: {', '.join(policies)})")
    return baseline


def sweep_rows(results: pl.DataFrame, baseline: str, compare: str = "policy") -> list[dict[str, Any]]:
    """One dict per run with `group` (every config column but `compare`) and `normalized`
    (execution time / that of the run whose `compare` column is `baseline` in the same group;
    None without an ok baseline run). `bar` is the run's `compare` value."""
    group_cols = [c for c in ("trace", "platform", "policy") if c != compare]
    group_cols += [c for c in results.columns if c.startswith("set.")]
    rows = []
    base: dict[str, float] = {}
    for r in results.sort("index").iter_rows(named=True):
        parts = [str(r[c]) if not c.startswith("set.") else f"{c[4:]}={r[c]}" for c in group_cols if r[c] is not None]
        if results["seed"].n_unique() > 1:
            parts.append(f"seed {r['seed']}")
        r = dict(r, group=" / ".join(parts), bar=str(r[compare]))
        rows.append(r)
        if r["bar"] == baseline and r["status"] == "ok" and r.get("execution_time_ns"):
            base[r["group"]] = float(r["execution_time_ns"])
    for r in rows:
        b = base.get(r["group"])
        r["normalized"] = (
            (float(r["execution_time_ns"]) / b) if b and r["status"] == "ok" and r.get("execution_time_ns") else None
        )
    return rows


def sweep_report(
    results: pl.DataFrame,
    sweep_dir: Path,
    fmt: str = "png",
    baseline: str | None = None,
    title: str | None = None,
    detail: bool = True,
    compare: str = "policy",
) -> Report:
    """detail: also draw occupancy and migrations over time for the first runs. compare: the
    config column whose values are set side by side (policy, or platform)."""
    baseline = baseline if compare != "policy" else _sweep_baseline(results, sweep_dir, baseline)
    assert baseline is not None
    rows = sweep_rows(results, baseline, compare)
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] != "ok"]
    report = Report(title or f"tiersim sweep {sweep_dir.name}")
    report.paragraph(f"{len(rows)} runs: {len(ok)} ok, {len(failed)} failed. Baseline {compare}: {baseline}.")
    report.heading("Execution time")
    report.figure(
        exec_bars_figure(rows, baseline, fmt),
        f"execution time normalised to {baseline}, per group",
        missing=f"no group has both an ok {baseline} run and other runs; no execution-time bars.",
    )
    if len({r["group"] for r in rows}) > MAX_BAR_GROUPS:
        report.note(f"only the first {MAX_BAR_GROUPS} groups are drawn; the table below has all runs.")
    for knob in sensitivity_knobs(results):
        report.heading(f"Sensitivity to {knob.split('.', 1)[1]}")
        report.figure(
            sensitivity_figure(rows, knob, fmt),
            f"execution time against {knob.split('.', 1)[1]}: a result that moves with it depends on the time "
            'scale, not only on the policy (docs/model.md, "When a result can be trusted")',
        )
    report.heading("Metrics")
    grid_cols = [c for c in results.columns if c.startswith(("set.", "param."))]
    header = [
        "trace",
        "platform",
        "policy",
        *grid_cols,
        "seed",
        "status",
        "exec time (ms)",
        f"time / {baseline}",
        "fast-tier hit ratio",
        "p99 latency (ns)",
        "promotions",
        "demotions",
        "swap-outs",
    ]
    report.table(
        header,
        [
            [
                r["trace"],
                r["platform"],
                r["policy"],
                *(r.get(c) for c in grid_cols),
                r["seed"],
                r["status"],
                (r.get("execution_time_ns") or 0) / 1e6 if r["status"] == "ok" else None,
                r["normalized"],
                r.get("fast_tier_hit_ratio"),
                r.get("latency_ns.p99"),
                r.get("tiering.promotions"),
                r.get("tiering.demotions"),
                r.get("swap.swap_outs"),
            ]
            for r in rows
        ],
    )
    if failed:
        report.heading("Failed runs")
        report.table(
            ["trace", "platform", "policy", "seed", "error"],
            [[r["trace"], r["platform"], r["policy"], r["seed"], r["error"]] for r in failed],
        )
    report.heading("Latency")
    by_group: dict[str, list[Curve]] = {}
    for r in ok:
        hist = _read_latency_hist(sweep_dir / r["run_dir"]) if r.get("run_dir") else None
        if hist is not None:
            xs, fs = latency_cdf(hist)
        else:
            xs, fs = percentile_cdf({k: r.get(f"latency_ns.{k}") for k, _ in QUANTILES})
        by_group.setdefault(r["group"], []).append((r["bar"], xs, fs))
    shown = list(by_group.items())[:6]
    for group, curves in shown:
        report.figure(latency_cdf_figure(curves, fmt, f"access latency CDF: {group}"), f"latency CDF, {group}")
    if len(by_group) > len(shown):
        report.note(f"latency CDFs of {len(by_group) - len(shown)} more groups are omitted; the table has their p99.")
    if not detail:
        return report
    report.heading("Over time")
    detailed = 0
    for r in ok:
        if detailed >= MAX_DETAIL_RUNS:
            break
        run_dir = sweep_dir / r["run_dir"] if r.get("run_dir") else None
        if run_dir is None or not (run_dir / SUMMARY_FILE).is_file():
            continue
        detailed += 1
        run = load_run(run_dir, f"{r['group']} / {r['bar']}")
        report.heading(run.label, 3)
        _run_detail(report, run, fmt)
    if len(ok) > detailed:
        report.note(
            f"{len(ok) - detailed} more runs have run directories under {sweep_dir / 'runs'}; "
            "`tiersim report DIR/runs/HASH` draws any one of them."
        )
    return report


# ---------------------------------------------------------------------------------------------
# entry point


def is_sweep(path: Path) -> bool:
    return path.suffix == ".parquet" or (
        path.is_dir() and ((path / "parts").is_dir() or (path / "results.parquet").is_file())
    )


def write_report(
    paths: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str] | None = None,
    *,
    fmt: str = "png",
    baseline: str | None = None,
) -> Path:
    """Write report.html for one run directory, several, or a sweep (its directory or its
    results.parquet). Default output: report.html in the run or sweep directory."""
    from tiersim import sweep as sw

    if fmt not in ("png", "svg"):
        raise TiersimError(f"image format must be png or svg, got '{fmt}'")
    ps = [Path(p) for p in paths]
    if not ps:
        raise TiersimError("give a run directory, several, or a sweep")
    if any(is_sweep(p) for p in ps):
        if len(ps) != 1:
            raise TiersimError("a sweep is reported on its own; give only its directory or results.parquet")
        results, sweep_dir = sw.load_results(ps[0])
        report = sweep_report(results, sweep_dir, fmt, baseline)
        default = sweep_dir / REPORT_FILE
    else:
        runs = [load_run(p) for p in ps]
        labels = [r.label for r in runs]
        if len(set(labels)) != len(labels):
            runs = [load_run(p, os.fspath(p)) for p in ps]
        if baseline is not None:
            raise TiersimError("--baseline is for sweeps; with run directories the first one is the baseline")
        report = runs_report(runs, fmt)
        if len(ps) > 1 and out is None:
            raise TiersimError("with several run directories, say where the report goes (-o FILE)")
        default = ps[0] / REPORT_FILE
    return report.write(out if out is not None else default)
