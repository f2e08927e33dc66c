"""PNG plots of trace statistics (matplotlib, imported only when a plot is asked for)."""

from __future__ import annotations

import os
from typing import Any


def page_scatter_png(stats: dict[str, Any], out: str | os.PathLike[str], title: str) -> None:
    """Page number against access order, one dot per sampled access (the CXL-flash study's fig. 3
    style), with the reuse-distance and hotness histograms beside it."""
    import matplotlib

    # Agg: no display is needed (CI, ssh), and the output does not depend on one.
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax_reuse, ax_hot) = plt.subplots(
        1, 3, figsize=(15, 4.5), gridspec_kw={"width_ratios": [2.2, 1, 1]}, constrained_layout=True
    )
    sc = stats["scatter"]
    # Pages relative to the lowest one: absolute virtual page numbers are 10-digit numbers.
    low = min(sc["page"], default=0)
    ax.scatter(sc["index"], [p - low for p in sc["page"]], s=0.5, marker=".", linewidths=0, color="tab:blue")
    ax.set_xlabel("access" + (f" (every {sc['stride']}th shown)" if sc["stride"] > 1 else ""))
    ax.set_ylabel(f"page number - {low:#x} ({stats['page_size']} B pages)")
    ax.set_title(title)

    def bars(axis: Any, hist: dict[str, Any], xlabel: str, extra: list[tuple[str, int]]) -> None:
        labels = [name for name, _ in extra] + [f"{b['lo']}" for b in hist["buckets"]]
        counts = [count for _, count in extra] + [b["count"] for b in hist["buckets"]]
        axis.bar(range(len(counts)), counts, color="tab:gray")
        axis.set_xticks(range(len(counts)), labels, rotation=60, fontsize=7)
        axis.set_yscale("log")
        axis.set_xlabel(xlabel)

    bars(
        ax_reuse,
        stats["reuse_distance"],
        "reuse distance (distinct pages, log2 bins)",
        [("cold", stats["reuse_distance"]["cold"])],
    )
    ax_reuse.set_ylabel("accesses")
    bars(ax_hot, stats["hotness"], "accesses per page (log2 bins)", [])
    ax_hot.set_ylabel("pages")
    fig.savefig(out, dpi=110)
    plt.close(fig)


def line_panels_png(panels: list[dict[str, Any]], out: str | os.PathLike[str], ncols: int = 2) -> None:
    """A grid of line plots. Each panel: `title`, `xlabel`, `ylabel`, `series` (a list of
    (label, xs, ys) where a y may be None: a gap), and optionally `xticks` (labels of x = 0, 1,
    ...: a categorical axis), `logx`, `logy`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.2 * ncols, 4.0 * nrows), squeeze=False, constrained_layout=True)
    for ax, panel in zip(axes.flat, panels, strict=False):
        for label, xs, ys in panel["series"]:
            pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3.5, linewidth=1.4, label=label)
        if panel.get("xticks"):
            ax.set_xticks(range(len(panel["xticks"])), panel["xticks"], rotation=30, fontsize=8)
        if panel.get("logx"):
            ax.set_xscale("log")
        if panel.get("logy"):
            ax.set_yscale("log")
        ax.set_title(panel["title"], fontsize=10)
        ax.set_xlabel(panel["xlabel"])
        ax.set_ylabel(panel["ylabel"])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.savefig(out, dpi=100)
    plt.close(fig)
