"""`tiersim characterize` (MLC- and Mess-like tests against one device model) and `tiersim
calibrate` (fit a device model to measured bandwidth-latency curves)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

import tiersim
from tiersim.cli._common import Number, _cell, _pairs, _print, _user_errors, app, err, out

if TYPE_CHECKING:
    import polars as pl


def _print_frame(title: str, df: pl.DataFrame) -> None:
    import polars as pl

    table = Table(title=title, box=box.SIMPLE_HEAD)
    for col in df.columns:
        table.add_column(col, justify="left" if df[col].dtype == pl.String else "right")
    for row in df.iter_rows():
        table.add_row(*(_cell(v) for v in row))
    _print(table)


_ERROR_TITLE = "Model vs measured (error = model / measured - 1; fraction 1 is the maximum, its *_ns columns in GB/s)"


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
    ratio: Annotated[
        list[int] | None,
        typer.Option(
            "--ratio", parser=Number(int, 0, 100), metavar="PERCENT", help="Read percent of the bwlat test; repeatable."
        ),
    ] = None,
    compare: Annotated[
        Path | None,
        typer.Option(
            "--compare", metavar="DIR", help="Measured Mess curves (bwlat_R.txt) to overlay and score bwlat against."
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="DIR", help="Write CSV, Parquet and PNG per table here."),
    ] = None,
) -> None:
    """Run MLC-like tests against a device model: latency, bandwidth, EWR, loaded latency, scaling;
    `--test bwlat` sweeps Mess-style bandwidth-latency curves per read ratio."""
    params = _pairs(param, "--param")
    with _user_errors():
        with err.status(Text(f"characterizing {device} ...")):
            result = tiersim.characterize(
                device, params, tests=test or (), quick=quick, ratios=ratio or (), compare=compare
            )
        for name, df in result.tables.items():
            _print_frame(f"{result.titles[name]}  [{name}]", df)
        if result.comparison is not None:
            _print_frame(_ERROR_TITLE, result.comparison)
        if output is not None:
            written = result.write(output)
            out.print(Text(f"wrote {len(written)} files to {output}"), soft_wrap=True)


@app.command("calibrate")
def calibrate_cmd(
    curves: Annotated[
        Path, typer.Argument(metavar="CURVES_DIR", help="Directory of Mess-format curves, bwlat_R.txt (MB/s, ns).")
    ],
    device: Annotated[str, typer.Option("--device", help="Model to fit: dram or cxl.")],
    output: Annotated[
        Path, typer.Option("--out", "-o", metavar="FILE", help="Platform TOML to write (use with run -p).")
    ],
    base: Annotated[
        str | None, typer.Option("--base", help="Device preset to fit on top of (default ddr4_2666 / cxl_cz120).")
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param", metavar="KEY=VALUE", help="Base device parameter kept fixed, e.g. channels=6; repeatable."
        ),
    ] = None,
    ratio: Annotated[
        list[int] | None,
        typer.Option(
            "--ratio", parser=Number(int, 0, 100), metavar="PERCENT", help="Use only these curves; repeatable."
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", metavar="DIR", help="Write the overlay plot, the model's curves and the errors here."),
    ] = None,
) -> None:
    """Fit a device model to measured bandwidth-latency curves; print the error per read ratio."""
    with _user_errors():
        with err.status(Text(f"fitting {device} to {curves} ...")):
            cal = tiersim.calibrate(curves, device, base=base, params=_pairs(param, "--param"), ratios=ratio or ())
        out.print(Text(cal.fitted.rstrip()), soft_wrap=True)
        _print_frame(_ERROR_TITLE, cal.comparison)
        from tiersim._result import write_text_atomic

        write_text_atomic(output, cal.platform_toml)
        out.print(Text(f"wrote {output}"), soft_wrap=True)
        if plot is not None:
            written = cal.curves.write(plot)
            out.print(Text(f"wrote {len(written)} files to {plot}"), soft_wrap=True)
