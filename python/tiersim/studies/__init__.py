"""Reproductions of the reference studies: `tiersim reproduce STUDY [--quick]`.

A study runs a scaled-down version of a paper's experiments, compares each finding with our
number in a claims table (the paper's figure, ours, the criterion, agree or not) and writes a
report. Each study is one module here; STUDIES below is the one list naming them.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tiersim import sweep as sw
from tiersim._convert import toml_value
from tiersim._native import TiersimError


@dataclass(frozen=True)
class Claim:
    """One finding of the paper next to ours. `criterion` says in words what `agree` tested."""

    finding: str
    paper: str
    ours: str
    criterion: str
    agree: bool
    note: str = ""
    # The same finding on a real program's committed trace (tiersim.workloads.TRACES), beside the
    # generator's: "bfs 1.02x (disagrees)"; empty where the study has no real program for it.
    real: str = ""


@dataclass
class SweepPart:
    """A sweep a study ran, drawn in its report like `tiersim report` draws a sweep."""

    title: str
    results: pl.DataFrame
    sweep_dir: Path
    baseline: str
    detail: bool = False  # occupancy and migration figures of its first runs
    compare: str = "policy"  # the config column set side by side (policy or platform)


@dataclass
class StudyResult:
    claims: list[Claim]
    tables: list[tuple[str, pl.DataFrame]] = field(default_factory=list)
    sweeps: list[SweepPart] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    images: list[tuple[Path, str]] = field(default_factory=list)  # PNG files to embed, caption


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    source: str  # the reference (seed) it reproduces
    runtime: str  # measured on the project's 2-core machine, quick and full
    run: Callable[[Path, bool, int | None], StudyResult]  # (out_dir, quick, workers)


def within(ours: float, paper: float, rel: float) -> bool:
    return abs(ours - paper) <= rel * abs(paper)


def pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def inline_table(d: dict[str, Any]) -> str:
    """`d` as a TOML inline table, for the sweep specs studies write."""
    return "{ " + ", ".join(f'"{k}" = {toml_value(v, k)}' for k, v in d.items()) + " }"


def study_sweep(out: Path, name: str, text: str, workers: int | None) -> pl.DataFrame:
    """Write sweep spec `text` as out/NAME.toml, run it into out/NAME (resuming what is there)
    and return its results; a failed run fails the study, naming the first error."""
    spec = out / f"{name}.toml"
    spec.write_text(text, encoding="utf-8")
    results = sw.run_sweep(spec, out / name, workers=workers).results
    failed = results.filter(pl.col("status") != "ok")
    if failed.height:
        raise TiersimError(f"study sweep {name}: {failed.height} runs failed, first: {failed['error'][0]}")
    return results


from tiersim.studies import (  # noqa: E402 - the registry needs Study
    autotiering,
    cxl_expansion,
    cxl_flash,
    optane,
    scaling,
    scm_vs_ssd,
    scm_vs_ssd_wt,
)

# The registry: the only place a study is named.
STUDIES: list[Study] = [
    autotiering.STUDY,
    cxl_expansion.STUDY,
    cxl_flash.STUDY,
    optane.STUDY,
    scm_vs_ssd.STUDY,
    scm_vs_ssd_wt.STUDY,
    scaling.STUDY,
]


def get(name: str) -> Study:
    for s in STUDIES:
        if s.name == name:
            return s
    raise TiersimError(f"unknown study '{name}' (valid: {', '.join(s.name for s in STUDIES)})")


CLAIMS_FILE = "claims.json"


def reproduce(
    name: str, out_dir: str | os.PathLike[str], *, quick: bool = False, workers: int | None = None
) -> tuple[StudyResult, Path, float]:
    """Run study `name` into out_dir and write report.html and claims.json there. Returns the
    result, the report path and the wall time in seconds."""
    from tiersim import report as rp
    from tiersim._result import REPORT_FILE

    study = get(name)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise TiersimError(f"output '{out}' exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = study.run(out, quick, workers)

    report = rp.Report(f"tiersim reproduce {study.name}{' --quick' if quick else ''}: {study.title}")
    report.paragraph(f"Source: {study.source}. Runtime on the project's 2-core machine: {study.runtime}.")
    agree = sum(c.agree for c in result.claims)
    report.heading("Claims")
    report.paragraph(f"{agree} of {len(result.claims)} findings agree.")
    real = any(c.real for c in result.claims)
    report.table(
        ["finding", "paper", "ours", "verdict", "criterion", *(["real program"] if real else []), "note"],
        [
            [
                c.finding,
                c.paper,
                c.ours,
                "agree" if c.agree else "disagree",
                c.criterion,
                *([c.real] if real else []),
                c.note,
            ]
            for c in result.claims
        ],
        cls="claims",
    )
    for note in result.notes:
        report.note(note)
    for title, df in result.tables:
        report.heading(title)
        report.table(df.columns, df.rows())
    for png, caption in result.images:
        report.figure("data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii"), caption)
    for part in result.sweeps:
        report.heading(part.title)
        sub = rp.sweep_report(
            part.results, part.sweep_dir, baseline=part.baseline, detail=part.detail, compare=part.compare
        )
        # One level down: the study's heading is this sweep's title.
        report.parts.extend(
            p.replace("<h3>", "<h4>").replace("</h3>", "</h4>").replace("<h2>", "<h3>").replace("</h2>", "</h3>")
            for p in sub.parts
        )
    path = report.write(out / REPORT_FILE)
    elapsed = time.perf_counter() - start
    claims = {"study": study.name, "quick": quick, "claims": [asdict(c) for c in result.claims]}
    (out / CLAIMS_FILE).write_text(json.dumps(claims, indent=2) + "\n", encoding="utf-8")
    return result, path, elapsed


def claims_frame(result: StudyResult) -> pl.DataFrame:
    rows: list[dict[str, Any]] = [asdict(c) for c in result.claims]
    return pl.DataFrame(rows)
