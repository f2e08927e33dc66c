"""cxl_flash: Yang et al., "Overcoming the Memory Wall with CXL-Enabled SSDs" (USENIX ATC'23,
reference seed 004): the CXL-flash design space of §4 (cache size, MSHRs, next-N-line degree and
offset, technology and parallelism, lifetime) and the policies of §5 (replacement, prefetchers,
virtual vs physical traces, host hints), on the paper's five synthetic workloads and two
stand-ins for its applications. The runs are `tiersim.flash_study` (one definition of each in
_flash.study_plan); its rows become claims in
cxl_flash_claims.py; this module runs it and draws its tables and plots.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from tiersim import _flash as fl
from tiersim._flash import flash_study
from tiersim.studies import Claim, Study, StudyResult
from tiersim.studies.cxl_flash_claims import BUILDERS, Rows, claims

COMPARISONS_FILE = "comparisons.parquet"
COMPARISONS_CSV = "comparisons.csv"
COMPAT_CSV = "comparisons_mqsim_cxl.csv"


def tables(df: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """One frame per comparison: a row per (workload, setting), a column per metric."""
    out = []
    for name in BUILDERS:
        sub = df.filter(pl.col("comparison") == name)
        if sub.height == 0:
            continue
        wide = sub.pivot(on="metric", index=["workload", "setting"], values="ours", aggregate_function="first")
        wide = wide.with_columns(pl.col(pl.Float64).round(4))
        out.append((f"{name}: {fl.PAPER[name]}", wide))
    return out


def plots(df: pl.DataFrame, out: Path) -> list[tuple[Path, str]]:
    from tiersim._plot import line_panels_png

    v = Rows(df)
    images: list[tuple[Path, str]] = []
    if {"cache_size", "parallelism"} <= v.comparisons:
        labels = [fl.cache_label(s) for s in fl.CACHE_SIZES]
        panels: list[dict[str, Any]] = [
            {
                "title": "sub-us share vs device cache (16-way LRU, SLC 32x32)",
                "xlabel": "cache",
                "ylabel": "requests under 1 us",
                "xticks": labels,
                "series": [
                    (w, list(range(len(labels))), [v("cache_size", w, s, "under 1 us") for s in labels])
                    for w in fl.SYNTHETIC
                ],
            }
        ]
        for w in ("random", "stride"):
            panels.append(
                {
                    "title": f"{w}: parallelism x cache (Fig. 10, next-N-line)",
                    "xlabel": "cache",
                    "ylabel": "requests under 1 us",
                    "xticks": list(fl.PARALLELISM_CACHES),
                    "series": [
                        (
                            f"{a}x{b}",
                            list(range(len(fl.PARALLELISM_CACHES))),
                            [v("parallelism", w, f"{a}x{b}, {k}", "under 1 us") for k in fl.PARALLELISM_CACHES],
                        )
                        for a, b in fl.PARALLELISM
                    ],
                }
            )
        if "technology" in v.comparisons:
            caches = [fl.cache_label(s) for s in fl.TECH_CACHES]
            panels.append(
                {
                    "title": "stride: lifetime vs cache by technology (Fig. 9b)",
                    "xlabel": "cache",
                    "ylabel": "years (1 TiB)",
                    "xticks": caches,
                    "logy": True,
                    "series": [
                        (
                            t,
                            list(range(len(caches))),
                            [v.opt("technology", "stride", f"{t}, {s}", "lifetime years") for s in caches],
                        )
                        for t in fl.TECHNOLOGIES
                    ],
                }
            )
        path = out / "cache_size.png"
        line_panels_png(panels, path)
        images.append(
            (
                path,
                "Sub-microsecond share vs cache size (all workloads; random and stride by flash parallelism) "
                "and lifetime by technology. A missing point: no flash writes in the run.",
            )
        )
    if "hints" in v.comparisons:
        top0, p0, lead0 = fl.HINT_DEFAULT

        def sweep(
            metric: str, title: str, xlabel: str, xs: tuple[float, ...], label: Callable[[float], str]
        ) -> dict[str, Any]:
            series = [
                (w, [0.0, *xs], [v("hints", w, "no hints", metric)] + [v("hints", w, label(x), metric) for x in xs])
                for w in fl.HINT_WORKLOADS
            ]
            return {"title": f"{metric} vs {title}", "xlabel": xlabel, "ylabel": metric, "series": series}

        panels = [
            panel
            for metric in ("under 1 us", "hit-under-miss share")
            for panel in (
                sweep(
                    metric,
                    f"hinted top share (p {p0:g}, lead {lead0})",
                    "top share of lines hinted (0 = none)",
                    fl.HINT_TOPS,
                    lambda t: fl.hint_label(t, p0, lead0),
                ),
                sweep(
                    metric,
                    f"hint probability (top {top0:g}, lead {lead0})",
                    "probability p (0 = none)",
                    fl.HINT_PROBABILITIES,
                    lambda p: fl.hint_label(top0, p, lead0),
                ),
            )
        ]
        path = out / "hints.png"
        line_panels_png(panels, path)
        images.append(
            (
                path,
                "Host hints (Obs. 7, Fig. 18), no prefetcher: sub-us and hit-under-miss shares vs the hinted "
                "top share and the hint probability.",
            )
        )
    return images


def notes(quick: bool) -> list[str]:
    n = fl.STUDY_ACCESSES[quick]
    return [
        f"Every run replays {n:,} generated accesses through a 1 MiB 16-way host LLC at one access per us "
        "(open loop); the paper replays 20M-access traces captured at the programs' own speed. Footprints are "
        "16-64 MiB instead of GiB, caches scale with them (§4 device: 1 MiB fully associative FIFO, SLC, "
        "32x32 dies; §5 device: cxl_flash_ull with a 1 MiB 16-way CFLRU cache). Directions are comparable, "
        "absolute figures are not: at this rate the back end is rarely saturated, which the paper's Figs. 5-7 "
        "and 10 depend on.",
        "Physical traces are the virtual ones with `scatter` (each page a pseudo-random frame at its first "
        "touch); hints are generated from a first pass over the same trace (the paper's insightful kernel).",
        f"All rows: {COMPARISONS_FILE} / {COMPARISONS_CSV} in this directory; `tiersim flash study` prints the "
        "same table.",
    ]


def compat_table(corrected: list[Claim], compat: list[Claim]) -> pl.DataFrame:
    """Each finding in both device modes: the corrected model (the claims above) and
    `compat = "mqsim_cxl"`, MQSim_CXL's behaviours with its bugs, which produced the paper's numbers."""
    by_finding = {c.finding: c for c in compat}
    return pl.DataFrame(
        [
            {
                "finding": c.finding,
                "paper": c.paper,
                "ours (corrected)": c.ours,
                "agrees": c.agree,
                "ours (mqsim_cxl)": by_finding[c.finding].ours,
                "agrees (mqsim_cxl)": by_finding[c.finding].agree,
            }
            for c in corrected
        ]
    )


def run(out: Path, quick: bool, workers: int | None) -> StudyResult:
    df = flash_study(quick, workers=workers)
    df.write_parquet(out / COMPARISONS_FILE, compression="zstd", statistics=False)
    df.write_csv(out / COMPARISONS_CSV)
    compat = flash_study(quick, workers=workers, compat="mqsim_cxl")
    compat.write_csv(out / COMPAT_CSV)
    both = compat_table(claims(df), claims(compat))
    agree_compat = int(both["agrees (mqsim_cxl)"].sum())
    return StudyResult(
        claims=claims(df),
        tables=[
            *tables(df),
            (f"every finding in both device modes (mqsim_cxl agrees with {agree_compat} of {both.height})", both),
        ],
        notes=[*notes(quick), f'The same rows with `compat = "mqsim_cxl"` on every device: {COMPAT_CSV}.'],
        images=plots(df, out),
    )


STUDY: Study = Study(
    name="cxl_flash",
    title="CXL-flash design space and policies",
    source="Yang et al., 'Overcoming the Memory Wall with CXL-Enabled SSDs', USENIX ATC'23 (seed 004)",
    runtime="--quick 28 s (54 s of CPU, both device modes), full 160 s (272 s of CPU), quiet machine",
    run=run,
)
