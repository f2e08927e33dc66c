"""`tiersim characterize` (MLC- and Mess-like tests against one device model) and `tiersim
calibrate` (fit a device model to measured bandwidth-latency curves)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

import tiersim
from tiersim.cli._common import Number, _cell, _pairs, _print, _user_errors, app, err, out

if TYPE_CHECKING:
    import polars as pl

# The units of measured curves, taken by `characterize --compare` and `calibrate` alike.
CyclesGhz = Annotated[
    float | None,
    typer.Option(
        "--cycles-ghz",
        parser=Number(float, 1e-3, 100.0),
        metavar="F",
        help="The curves' latency is in cycles at F GHz (Mess publishes some systems so); converted to ns.",
    ),
]
PortToCoreNs = Annotated[
    float,
    typer.Option(
        "--port-to-core-ns",
        parser=Number(float, 0.0, 10_000.0),
        metavar="NS",
        help="The curves start at a port, not the core (Mess's CXL curves: the CXL host port): add this on-chip path.",
    ),
]


def _print_frame(title: str, df: pl.DataFrame) -> None:
    import polars as pl

    table = Table(title=title, box=box.SIMPLE_HEAD)
    for col in df.columns:
        table.add_column(col, justify="left" if df[col].dtype == pl.String else "right")
    for row in df.iter_rows():
        table.add_row(*(_cell(v) for v in row))
    _print(table)


_ERROR_TITLE = "Model vs measured (error = model / measured - 1; fraction 1 is the maximum, its *_ns columns in GB/s)"


_CURVES_HELP = (
    "Measured curves: files or directories; each file read by its content: Mess rows (bwlat_R.txt, "
    "R = percent reads), Intel MLC --loaded_latency output (mix from -W), or CSV with named columns."
)


def _print_read(read: dict[str, Any]) -> None:
    """What the reader did to the curves as published: one line per curve, then the files a
    directory held that are no curve."""
    for c in read["curves"]:
        notes = "; ".join(c["notes"]) or "as published"
        out.print(Text(f"curve {c['source']}: {c['read_percent']} % reads, {c['rows']} rows; {notes}"), soft_wrap=True)
    for s in read["skipped"]:
        out.print(Text(f"skipped {s}"), soft_wrap=True)


@app.command("characterize")
def characterize_cmd(
    device: Annotated[
        str,
        typer.Argument(
            help="Device preset (name or preset file) or kind (see `tiersim list presets`); with --node, a platform."
        ),
    ],
    node: Annotated[
        str | None,
        typer.Option("--node", metavar="NAME", help="Characterize this node of the platform DEVICE (name or file)."),
    ] = None,
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
        list[Path] | None,
        typer.Option("--compare", metavar="PATH", help=_CURVES_HELP + " Overlaid on and scored against bwlat."),
    ] = None,
    cycles_ghz: CyclesGhz = None,
    port_ns: PortToCoreNs = 0.0,
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
                device,
                params,
                tests=test or (),
                quick=quick,
                ratios=ratio or (),
                compare=compare or None,
                cycles_ghz=cycles_ghz,
                node=node,
                port_ns=port_ns,
            )
        for name, df in result.tables.items():
            _print_frame(f"{result.titles[name]}  [{name}]", df)
        if result.read is not None:
            _print_read(result.read)
        if result.comparison is not None:
            _print_frame(_ERROR_TITLE, result.comparison)
        if output is not None:
            written = result.write(output)
            out.print(Text(f"wrote {len(written)} files to {output}"), soft_wrap=True)


@app.command("calibrate")
def calibrate_cmd(
    curves: Annotated[list[Path], typer.Argument(metavar="CURVES...", help=_CURVES_HELP)],
    device: Annotated[
        str | None, typer.Option("--device", help="Model to fit: dram or cxl (not with --compare).")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--out", "-o", metavar="FILE", help="Platform TOML to write (use with run -p).")
    ] = None,
    preset_out: Annotated[
        Path | None,
        typer.Option(
            "--preset-out",
            metavar="FILE",
            help="Also write the fitted device as a preset file (characterize FILE, a node's preset = FILE).",
        ),
    ] = None,
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
    cycles_ghz: CyclesGhz = None,
    port_ns: PortToCoreNs = 0.0,
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare",
            metavar="DEVICE",
            help="Fit nothing: score this preset (name or file), or with --node this platform's node, against the curves.",
        ),
    ] = None,
    node: Annotated[
        str | None, typer.Option("--node", metavar="NAME", help="With --compare: the platform node to score.")
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option("--plot", metavar="DIR", help="Write the overlay plot, the model's curves and the errors here."),
    ] = None,
) -> None:
    """Fit a device model to measured bandwidth-latency curves; print what was read, the fitted
    parameters and the error per point. With --compare, score an existing device instead."""
    params = _pairs(param, "--param")
    if compare is not None:
        for option, value in (("--device", device), ("--out", output), ("--preset-out", preset_out), ("--base", base)):
            if value is not None:
                raise typer.BadParameter("fits nothing, so it takes no " + option, param_hint="--compare")
        with _user_errors():
            with err.status(Text(f"scoring {compare} against {len(curves)} curve path(s) ...")):
                result = tiersim.characterize(
                    compare,
                    params,
                    tests=["bwlat"],
                    ratios=ratio or (),
                    compare=curves,
                    cycles_ghz=cycles_ghz,
                    node=node,
                    port_ns=port_ns,
                )
            if result.read is not None:
                _print_read(result.read)
            if result.comparison is not None:
                _print_frame(_ERROR_TITLE, result.comparison)
            if plot is not None:
                written = result.write(plot)
                out.print(Text(f"wrote {len(written)} files to {plot}"), soft_wrap=True)
        return
    if node is not None:
        raise typer.BadParameter("names the node of a platform given to --compare", param_hint="--node")
    if device is None:
        raise typer.BadParameter("give the model to fit (dram or cxl), or --compare DEVICE", param_hint="--device")
    if output is None:
        raise typer.BadParameter("give the platform TOML to write", param_hint="--out")
    with _user_errors():
        with err.status(Text(f"fitting {device} to {', '.join(map(str, curves))} ...")):
            cal = tiersim.calibrate(
                curves, device, base=base, params=params, ratios=ratio or (), cycles_ghz=cycles_ghz, port_ns=port_ns
            )
        _print_read(cal.read)
        out.print(Text(cal.fitted.rstrip()), soft_wrap=True)
        _print_frame(_ERROR_TITLE, cal.comparison)
        from tiersim._result import write_text_atomic

        write_text_atomic(output, cal.platform_toml)
        out.print(Text(f"wrote {output}"), soft_wrap=True)
        if preset_out is not None:
            write_text_atomic(preset_out, cal.preset_toml)
            out.print(Text(f"wrote {preset_out}"), soft_wrap=True)
        if plot is not None:
            written = cal.curves.write(plot)
            out.print(Text(f"wrote {len(written)} files to {plot}"), soft_wrap=True)
