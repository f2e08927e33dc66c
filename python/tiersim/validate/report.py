"""report.html of `tiersim validate linux`: per case the kernel's runs and tiersim's replay overlaid
(fast-node share of the program's pages, promotions, demotions, hint faults) on the guest's time
axis, and the agreement table. Self-contained, like the run reports (tiersim.report)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import polars as pl

from tiersim.report import _encode, _plt
from tiersim.validate.linux import agreement_text, count_text, error_text, verdict_text

PANELS = (
    ("fast_share", "fast-node share of pages (%)"),
    ("promotions", "promotions"),
    ("demotions", "demotions"),
    ("hint_faults", "hint faults"),
)


def _figure(cid: str, case: dict[str, Any], series: pl.DataFrame) -> str:
    plt = _plt()
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.2))
    rows = series.filter(pl.col("case") == cid)
    for ax, (col, label) in zip(axes, PANELS, strict=True):
        for (run,), part in rows.filter(pl.col("source") == "kernel").group_by(["run"], maintain_order=True):
            ax.plot(part["t_s"], part[col], color="tab:blue", alpha=0.7, label="kernel" if run == 0 else None)
        sim = rows.filter(pl.col("source") == "tiersim")
        if col == "hint_faults":
            end = case["metrics"]["hint_faults"]["tiersim"]
            ax.plot([sim["t_s"].max()], [end], "o", color="tab:orange", label="tiersim (total)")
        else:
            ax.plot(sim["t_s"], sim[col], color="tab:orange", label="tiersim")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("guest time (s)", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return _encode(fig, "svg")


def _kib(value: Any) -> str:
    return f"{int(value):,} KiB"


def _machine_text(vm: dict[str, Any]) -> str:
    """The VM's nodes (memory, free memory as the guest reported it, CPUs) and memory tiers, in
    words: "node 0: 211,064 KiB (158,868 KiB free), CPUs 0-1; ...; memory tiers: memory_tier4 nodes
    0,2, memory_tier22 node 1" (validate.json keys them by number, as text once read back)."""
    nodes = []
    for n, v in sorted(vm["nodes"].items(), key=lambda item: int(item[0])):
        cpus = f"CPUs {v['cpus']}" if v.get("cpus") else "no CPUs"
        nodes.append(f"node {n}: {_kib(v['MemTotal'])} ({_kib(v['MemFree'])} free), {cpus}")
    tiers = [
        f"memory_tier{t} {'nodes' if any(c in ns for c in ',-') else 'node'} {ns}"
        for t, ns in sorted(vm["tiers"].items(), key=lambda item: int(item[0]))
    ]
    return "; ".join(nodes) + "; memory tiers: " + ", ".join(tiers)


def write_report(out: Path, doc: dict[str, Any], series: pl.DataFrame) -> None:
    sp = doc["guest_speed"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>tiersim validate linux</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}.no{background:#fdd}.ok{background:#dfd}</style>",
        "</head><body><h1>tiersim against the Linux kernel</h1>",
        f"<p>Kernel {html.escape(str(doc['kernel']))} under QEMU ({html.escape(str(doc['accel']))}); "
        + html.escape(_machine_text(doc["vm"]))
        + ".</p>",
        f"<p>Guest speed: the calibration program takes {sp['calib_guest_s']:.3f} s in the guest and "
        f"{sp['calib_tiersim_s']:.4f} s in tiersim: the guest runs {sp['guest_slowdown']:.1f}x slower than "
        f"the modelled CPU, so the calibration's daemon time scale is {sp['daemon_time_scale']:.4f}"
        + (
            "; each case takes the program's own speed in the guest instead (its time there against tiersim's). "
            if sp.get("time_scale", "calibration") == "program"
            else " (each case takes its own from its boots' calibrations). "
        )
        + f"{doc['runs']} VM run(s) per case.</p>",
        "<table><tr><th>case</th><th>metric</th><th>kernel</th><th>kernel runs</th><th>tiersim</th>"
        "<th>error</th><th>tolerance</th><th>agree</th></tr>",
    ]
    for cid, case in doc["cases"].items():
        for m, v in case["metrics"].items():
            cells = [
                cid,
                m,
                count_text(m, v["kernel"]),
                " / ".join(count_text(m, x) for x in v["kernel_runs"]),
                count_text(m, v["tiersim"]),
                error_text(m, v),
                count_text(m, v["tolerance"]),
                verdict_text(v),
            ]
            row = "".join(f"<td>{html.escape(c, quote=False)}</td>" for c in cells)
            parts.append(f"<tr class='{'ok' if v['agree'] else 'no'}'>{row}</tr>")
    parts.append(f"</table><p>{html.escape(agreement_text(doc), quote=False)}.</p>")
    for cid, case in doc["cases"].items():
        parts.append(f"<h2>{html.escape(cid)}</h2><p>{html.escape(case['program']['summary'])}; ")
        parts.append(
            f"{html.escape(case['setting']['summary'])}; daemon time scale {case['daemon_time_scale']:.4f}.</p>"
        )
        parts.append(f"<img alt='{html.escape(cid)}' src='{_figure(cid, case, series)}'>")
    parts.append("</body></html>\n")
    (out / "report.html").write_text("".join(parts))
