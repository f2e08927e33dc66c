"""`tiersim characterize`: MLC-like tests against one device model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich import box
from rich.table import Table
from rich.text import Text

import tiersim
from tiersim.cli._common import _cell, _pairs, _print, _user_errors, app, err, out


@app.command("characterize")
def characterize_cmd(
    device: Annotated[str, typer.Argument(help="Device preset or kind (see `tiersim list presets`).")],
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            metavar="KEY=VALUE",
            help="Device parameter, or count=N / granule=SIZE of an interleave set; repeatable.",
        ),
    ] = None,
    test: Annotated[
        list[str] | None, typer.Option("--test", metavar="NAME", help="Run only this test; repeatable.")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer points and accesses (seconds).")] = False,
    output: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="DIR", help="Write CSV, Parquet and PNG per table here."),
    ] = None,
) -> None:
    """Run MLC-like tests against a device model: latency, bandwidth, EWR, loaded latency, scaling."""
    params = _pairs(param, "--param")
    with _user_errors():
        with err.status(Text(f"characterizing {device} ...")):
            result = tiersim.characterize(device, params, tests=test or (), quick=quick)
        for name, df in result.tables.items():
            table = Table(title=f"{result.titles[name]}  [{name}]", box=box.SIMPLE_HEAD)
            for col in df.columns:
                table.add_column(col, justify="left" if df[col].dtype == pl.String else "right")
            for row in df.iter_rows():
                table.add_row(*(_cell(v) for v in row))
            _print(table)
        if output is not None:
            written = result.write(output)
            out.print(Text(f"wrote {len(written)} files to {output}"), soft_wrap=True)
