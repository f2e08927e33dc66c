"""`tiersim characterize`: the MLC-like tables of the native driver as polars DataFrames, and
their CSV, Parquet and PNG files."""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tiersim._result import files_into

#: (table, x column, y column, series columns, log x) of each plot.
_PLOTS: dict[str, tuple[str, str, list[str], bool]] = {
    "bandwidth_threads": ("threads", "bandwidth_gbs", ["op"], False),
    "bandwidth_size": ("size", "bandwidth_gbs", ["pattern", "op"], True),
    "ewr_size": ("size", "ewr", [], True),
    "ewr_threads": ("threads", "ewr", [], False),
    "ewr_working_set": ("working_set", "ewr", [], True),
    "loaded_latency": ("bandwidth_gbs", "latency_ns", [], False),
    "scaling": ("devices", "read_gbs", [], False),
    "remote_bandwidth": ("threads", "ratio", ["op"], False),
}

#: Plot titles wrap at this many characters (the table titles run to about 90).
_TITLE_WIDTH = 60


@dataclass
class Characterization:
    """What `characterize` measured: the target and one DataFrame per test."""

    target: str
    device: str
    count: int
    granule: int
    params: dict[str, Any]
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)
    #: Measured curves of `--compare` (read_percent, bandwidth_mbs, latency_ns), if any.
    measured: pl.DataFrame | None = None
    #: Error per compared point (read_percent, fraction, bandwidth_gbs, measured_ns, model_ns,
    #: error) and per read ratio's maximum (fraction = 1, the *_ns columns hold GB/s).
    comparison: pl.DataFrame | None = None
    #: What the curve reader did with the `--compare` curves: per curve its source, mix, rows and
    #: notes (units converted, noise clamped); the files it skipped.
    read: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, text: str) -> Characterization:
        raw = json.loads(text)
        c = cls(raw["target"], raw["device"], raw["count"], raw["granule"], raw["params"])
        for t in raw["tables"]:
            c.tables[t["name"]] = pl.DataFrame({col["name"]: col["values"] for col in t["columns"]})
            c.titles[t["name"]] = t["title"]
        if "measured" in raw:
            c.measured, c.comparison = measured_frames(raw["measured"], raw["comparison"])
            c.read = raw["read"]
        return c

    def write(self, out_dir: str | os.PathLike[str]) -> list[Path]:
        """NAME.csv, NAME.parquet and NAME.png per table (idle_latency and remote_latency have
        no plot); returns the files written."""
        out = Path(out_dir)
        written = []
        # All or nothing: a full disk or a signal half way leaves no partial set of tables.
        with files_into(out) as tmp:
            for name, df in self.tables.items():
                df.write_csv(tmp / f"{name}.csv")
                df.write_parquet(tmp / f"{name}.parquet")
                written += [tmp / f"{name}.csv", tmp / f"{name}.parquet"]
                if name in _PLOTS:
                    written.append(self._plot(name, df, tmp / f"{name}.png"))
            if "bwlat" in self.tables:
                written += write_mess(self.tables["bwlat"], tmp / "bwlat")
                written.append(plot_bwlat(self.tables["bwlat"], self.measured, tmp / "bwlat.png", self.target))
            if self.comparison is not None:
                self.comparison.write_csv(tmp / "bwlat_compare.csv")
                written.append(tmp / "bwlat_compare.csv")
        return [out / p.relative_to(tmp) for p in written]

    def _plot(self, name: str, df: pl.DataFrame, path: Path) -> Path:
        import matplotlib

        # No display on servers and CI: render to files only.
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        x, y, series, logx = _PLOTS[name]
        fig, ax = plt.subplots(figsize=(6, 4))
        if name == "scaling":
            groups = {("read",): df, ("write",): df.rename({"write_gbs": "_w", "read_gbs": "_r"}).rename({"_w": y})}
        elif series:
            groups = df.partition_by(series, maintain_order=True, as_dict=True)
        else:
            groups = {("",): df}
        for key, g in groups.items():
            label = " ".join(str(k) for k in key)
            ax.plot(g[x].to_list(), g[y].to_list(), marker="o", label=label or None)
        if len(groups) > 1:
            ax.legend(fontsize="small")
        if logx:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(textwrap.fill(f"{self.target}: {self.titles[name]}", _TITLE_WIDTH), fontsize="small")
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path


def measured_frames(
    measured: list[dict[str, Any]], comparison: list[dict[str, Any]]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The native answer's measured curves and per-point errors as DataFrames."""
    curves = pl.concat(
        [
            pl.DataFrame(
                {
                    "read_percent": [m["read_percent"]] * len(m["latency_ns"]),
                    "bandwidth_mbs": m["bandwidth_mbs"],
                    "latency_ns": m["latency_ns"],
                }
            )
            for m in measured
        ]
    )
    rows = []
    for c in comparison:
        for p in c["points"]:
            rows.append(
                {
                    "read_percent": c["read_percent"],
                    **{k: p[k] for k in ("fraction", "bandwidth_gbs", "measured_ns", "model_ns", "error")},
                }
            )
        rows.append(
            {
                "read_percent": c["read_percent"],
                "fraction": 1.0,
                "bandwidth_gbs": c["measured_max_gbs"],
                "measured_ns": c["measured_max_gbs"],
                "model_ns": c["model_max_gbs"],
                "error": c["max_error"],
            }
        )
    return curves, pl.DataFrame(rows)


def write_mess(bwlat: pl.DataFrame, out: Path) -> list[Path]:
    """One Mess-format file per read ratio, `bwlat_R.txt`: MB/s and ns, tab separated, from the
    saturated end down to idle as the Mess benchmark writes them."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for (ratio,), g in bwlat.partition_by("read_ratio", maintain_order=True, as_dict=True).items():
        path = out / f"bwlat_{int(ratio)}.txt"
        rows = reversed(list(zip(g["bandwidth_mbs"].to_list(), g["latency_ns"].to_list(), strict=False)))
        path.write_text("".join(f"{bw:.4f}\t{lat:.4f}\n" for bw, lat in rows))
        written.append(path)
    return written


def plot_bwlat(bwlat: pl.DataFrame, measured: pl.DataFrame | None, path: Path, title: str) -> Path:
    """Latency vs bandwidth per read ratio; measured curves, if given, dashed in the same colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ratios = sorted(
        set(bwlat["read_ratio"].to_list()) | set(measured["read_percent"].to_list() if measured is not None else [])
    )
    colours = plt.get_cmap("viridis")
    for i, r in enumerate(ratios):
        colour = colours(i / max(1, len(ratios) - 1))
        g = bwlat.filter(pl.col("read_ratio") == r)
        if len(g):
            ax.plot(
                (g["bandwidth_mbs"] / 1e3).to_list(),
                g["latency_ns"].to_list(),
                marker="o",
                ms=3,
                color=colour,
                label=f"model {int(r)} % reads",
            )
        if measured is not None:
            m = measured.filter(pl.col("read_percent") == r)
            if len(m):
                ax.plot(
                    (m["bandwidth_mbs"] / 1e3).to_list(),
                    m["latency_ns"].to_list(),
                    ls="--",
                    color=colour,
                    label=f"measured {int(r)} % reads",
                )
    ax.set_xlabel("bandwidth (GB/s)")
    ax.set_ylabel("pointer-chase latency (ns)")
    ax.set_title(textwrap.fill(f"{title}: bandwidth-latency curves", _TITLE_WIDTH), fontsize="small")
    ax.legend(fontsize="x-small")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
