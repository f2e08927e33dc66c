"""`tiersim gen` and `tiersim mix`: write synthetic and multi-program traces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

import tiersim
from tiersim._convert import parse_cli_value
from tiersim._options import I64_MAX, U32_MAX
from tiersim.cli._common import (
    Number,
    _inspect_tables,
    _merge_shortcuts,
    _pairs,
    _print,
    _user_errors,
    app,
    err,
)


@app.command("gen")
def gen_cmd(
    name: Annotated[str, typer.Argument(help="Generator (see `tiersim list generators`).")],
    output: Annotated[Path, typer.Option("--out", "-o", metavar="FILE", help="Trace file to write.")],
    size: Annotated[str | None, typer.Option("--size", help="Footprint, e.g. 512MiB (parameter footprint).")] = None,
    count: Annotated[
        int | None,
        typer.Option("--count", parser=Number(int, 1, I64_MAX), help="Number of accesses (parameter accesses)."),
    ] = None,
    write_ratio: Annotated[
        float | None,
        typer.Option(
            "--write-ratio", parser=Number(float, 0.0, 1.0), help="Fraction of writes (parameter write_ratio)."
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option("--threads", parser=Number(int, 1, U32_MAX), help="Threads / CPUs (parameter threads)."),
    ] = None,
    seed: Annotated[int, typer.Option(parser=Number(int, 0), help="Generator seed.")] = 0,
    param: Annotated[
        list[str] | None, typer.Option("--param", metavar="KEY=VALUE", help="Any generator parameter; repeatable.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite an existing -o file that is not a tiersim trace.")
    ] = False,
) -> None:
    """Generate a synthetic trace file, then print its statistics."""
    params = _pairs(param, "--param")
    shortcuts = {
        "footprint": ("--size", None if size is None else parse_cli_value(size)),
        "accesses": ("--count", count),
        "write_ratio": ("--write-ratio", write_ratio),
        "threads": ("--threads", threads),
    }
    _merge_shortcuts(params, shortcuts)
    with _user_errors():
        with err.status(Text(f"generating {name} ...")):
            info = tiersim.generate_with(name, output, params, seed=seed, force=force)
    _print(*_inspect_tables(info))


@app.command("mix")
def mix_cmd(
    traces: Annotated[list[Path], typer.Argument(help="Native traces, one per program.")],
    output: Annotated[Path, typer.Option("--out", "-o", metavar="FILE", help="Trace to write.")],
    first_cpu: Annotated[
        list[int] | None,
        typer.Option(
            "--first-cpu",
            parser=Number(int, 0, U32_MAX),
            help="CPU of each trace's CPU 0, in trace order; repeat once per trace.",
        ),
    ] = None,
) -> None:
    """Combine traces into a multi-program workload, each bound to its own CPUs."""
    if first_cpu and len(first_cpu) != len(traces):
        raise typer.BadParameter(
            f"{len(first_cpu)} --first-cpu values for {len(traces)} traces; give one per trace",
            param_hint="--first-cpu",
        )
    with _user_errors():
        info = tiersim.mix(traces, output, first_cpus=first_cpu or None)
    _print(*_inspect_tables(info))
