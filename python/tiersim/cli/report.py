"""`tiersim report` and `tiersim compare`: HTML reports and side-by-side metrics of runs."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from tiersim.cli._common import _echo_raw, _user_errors, app, err, out


class ImageFormat(StrEnum):
    png = "png"
    svg = "svg"


@app.command("report")
def report_cmd(
    paths: Annotated[
        list[Path], typer.Argument(help="A run directory, several, or a sweep (directory or results.parquet).")
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", metavar="FILE", help="HTML file (default: report.html in the run or sweep directory)."
        ),
    ] = None,
    image_format: Annotated[
        ImageFormat, typer.Option("--format", help="Image format embedded in the page.")
    ] = ImageFormat.png,
    baseline: Annotated[
        str | None, typer.Option("--baseline", metavar="POLICY", help="Sweep: policy label to normalise to.")
    ] = None,
) -> None:
    """Write a self-contained report.html with plots and a metrics table."""
    from tiersim import report as rp

    with _user_errors():
        with err.status(Text("drawing the report ...")):
            path = rp.write_report(paths, output, fmt=image_format.value, baseline=baseline)
    out.print(Text(f"report: {path}"), soft_wrap=True)


@app.command("compare")
def compare_cmd(
    runs: Annotated[list[Path], typer.Argument(help="Run directories; the first is the baseline.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the table as JSON.")] = False,
) -> None:
    """Print the key metrics of several runs side by side."""
    from tiersim import report as rp

    if len(runs) < 2:
        raise typer.BadParameter("give at least two run directories", param_hint="RUNS")
    with _user_errors():
        loaded = [rp.load_run(p) for p in runs]
    labels = [r.label for r in loaded]
    if len(set(labels)) != len(labels):
        labels = [str(p) for p in runs]
    rows = rp.compared_metrics([r.summary for r in loaded])
    if as_json:
        _echo_raw(json.dumps({"runs": labels, "metrics": dict(rows)}, indent=2))
        return
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("metric", style="bold", no_wrap=True)
    for label in labels:
        table.add_column(label, justify="right")
    for key, values in rows:
        table.add_row(key, *(rp._fmt(v) for v in values))
    out.print(table)
