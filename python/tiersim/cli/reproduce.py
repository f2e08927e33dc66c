"""`tiersim reproduce`: run a reference study and compare its findings with the paper."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from tiersim._options import MAX_WORKERS
from tiersim.cli._common import Number, _user_errors, app, err, out


@app.command("reproduce")
def reproduce_cmd(
    study: Annotated[
        str | None, typer.Argument(help="Study name; omit to list the studies.", show_default=False)
    ] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="The scaled-down variant that runs in seconds to a minute.")
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="DIR", help="Output directory (default: reproduce/STUDY[-quick])."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option("--workers", "-j", parser=Number(int, 1, MAX_WORKERS), help="Local worker processes for sweeps."),
    ] = None,
) -> None:
    """Reproduce a reference study: run it, compare each finding with the paper, write a report."""
    from tiersim import studies

    if study is None:
        table = Table(box=box.SIMPLE_HEAD)
        for col in ("study", "what", "source", "runtime (2 cores)"):
            table.add_column(col, overflow="fold")
        for s in studies.STUDIES:
            table.add_row(s.name, s.title, s.source, s.runtime)
        out.print(table)
        return
    run_dir = output or Path("reproduce") / (f"{study}-quick" if quick else study)
    with _user_errors():
        studies.get(study)
        with err.status(Text(f"reproducing {study}{' (quick)' if quick else ''} ...")):
            result, path, elapsed = studies.reproduce(study, run_dir, quick=quick, workers=workers)
    table = Table(title=f"{study}: claims", box=box.SIMPLE_HEAD, title_justify="left")
    real = any(c.real for c in result.claims)
    for col in ("finding", "paper", "ours", "criterion", "verdict", *(["real program"] if real else [])):
        table.add_column(col, overflow="fold")
    for c in result.claims:
        verdict = Text("agree", style="green") if c.agree else Text("disagree", style="bold red")
        table.add_row(c.finding, c.paper, c.ours, c.criterion, verdict, *([c.real] if real else []))
    out.print(table)
    agree = sum(c.agree for c in result.claims)
    out.print(Text(f"{agree} of {len(result.claims)} findings agree; {elapsed:.0f} s; report: {path}"), soft_wrap=True)
