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

    @classmethod
    def from_json(cls, text: str) -> Characterization:
        raw = json.loads(text)
        c = cls(raw["target"], raw["device"], raw["count"], raw["granule"], raw["params"])
        for t in raw["tables"]:
            c.tables[t["name"]] = pl.DataFrame({col["name"]: col["values"] for col in t["columns"]})
            c.titles[t["name"]] = t["title"]
        return c

    def write(self, out_dir: str | os.PathLike[str]) -> list[Path]:
        """NAME.csv, NAME.parquet and NAME.png per table (idle_latency and remote_latency have
        no plot); returns the files written."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name, df in self.tables.items():
            df.write_csv(out / f"{name}.csv")
            df.write_parquet(out / f"{name}.parquet")
            written += [out / f"{name}.csv", out / f"{name}.parquet"]
            if name in _PLOTS:
                written.append(self._plot(name, df, out / f"{name}.png"))
        return written

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
