"""`tiersim validate linux`: the Linux kernel in a VM against tiersim, side by side (docs/validate.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tiersim.cli._common import Number, _user_errors, err, out
from tiersim.validate import WORK_FACTOR_RANGE

validate_app = typer.Typer(help="Hold tiersim against a reference system.", no_args_is_help=True)


@validate_app.command("linux")
def linux_cmd(
    out_dir: Annotated[Path, typer.Option("-o", "--out", help="New directory for the results.")],
    program: Annotated[
        list[str] | None, typer.Option("--program", help="graph, kv or stream; repeatable (default all three).")
    ] = None,
    setting: Annotated[
        list[str] | None,
        typer.Option("--setting", help="none, autonuma or tiering; repeatable (default all three)."),
    ] = None,
    runs: Annotated[
        int | None,
        typer.Option(
            "--runs",
            parser=Number(int, 1, 100),
            metavar="N",
            help="VM runs per case, for the spread (default 3; a replay takes its result's).",
        ),
    ] = None,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="One case (kv under tiering mode), one VM run: about 20 s on an idle two-core host, up to a minute on a busy one.",
        ),
    ] = False,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", parser=Number(float, 10.0, 86400.0), metavar="S", help="Wall seconds one VM boot may take."
        ),
    ] = 600.0,
    replay: Annotated[
        Path | None,
        typer.Option(
            "--replay",
            metavar="DIR",
            help="An earlier result directory: take its VM runs and traces, boot nothing, and run only tiersim's side again.",
        ),
    ] = None,
    time_scale: Annotated[
        str,
        typer.Option(
            "--time-scale",
            metavar="HOW",
            help="Each case's daemon time scale: program = the program's own speed in the guest (its time there against tiersim's); calibration = the calibration program's, for every case.",
        ),
    ] = "program",
    kernel_trace: Annotated[
        bool,
        typer.Option(
            "--kernel-trace",
            help="Record the guest kernel's reclaim and NUMA-scanner events (ftrace) during each run: kernel_trace.parquet and a summary per run in validate.json.",
        ),
    ] = False,
    work_factor: Annotated[
        float | None,
        typer.Option(
            "--work-factor",
            parser=Number(float, *WORK_FACTOR_RANGE),
            metavar="F",
            help="Scale each program's work (kv's operations, graph's iterations, stream's passes) by F. Default: sized to the guest's speed by a calibration boot first, so that the runs last as long in the guest on any host (--quick: its own size).",
        ),
    ] = None,
) -> None:
    """Boot Debian's 6.1 kernel in QEMU (a fast node with the CPUs, a slow CPU-less node in a lower
    memory tier), run each program there under each kernel setting, and replay the program's
    captured trace in tiersim on a platform built from the VM; write validate.json,
    series.parquet and report.html. Needs `make vm`."""
    from tiersim.validate.linux import (
        agreement_text,
        count_text,
        error_text,
        hint_fault_text,
        validate_linux,
        verdict_text,
    )

    # Ctrl-C, like SIGTERM, ends in tiersim.cli.main's line: validate_linux has removed its work
    # directory and stopped its VM on the way out.
    with _user_errors():
        doc = validate_linux(
            out_dir,
            programs=program,
            settings=setting,
            runs=runs,
            quick=quick,
            timeout_s=timeout,
            replay=replay,
            time_scale=time_scale,
            trace_kernel=kernel_trace,
            work_factor=work_factor,
            # Progress lines whole, whatever the width: a terminal narrower than a line wraps it itself.
            progress=lambda msg: err.print(msg, highlight=False, soft_wrap=True),
        )
    sz = doc["sizing"]
    if "args" in sz:
        ran = ", ".join(f"{p} {' '.join(map(str, a))}" for p, a in sz["args"].items())
        out.print(f"work factor {sz['factor']:.3f} ({sz['how']}): {ran}", soft_wrap=True)
    sp = doc["guest_speed"]
    out.print(
        f"guest speed: the calibration takes {sp['calib_guest_s']:.3f} s in the guest, {sp['calib_tiersim_s']:.3f} s "
        f"in tiersim ({sp['guest_slowdown']:.2f}x slower); daemon time scale {sp['daemon_time_scale']:.4f}",
        soft_wrap=True,
    )
    if sp["time_scale"] == "program":
        # Each case says where its scale came from: its program's speed with balancing off, or
        # the calibration's (--quick runs no balancing-off case).
        scales = ", ".join(
            f"{cid} {c['daemon_time_scale']:.3f} (from {c['time_scale_from']})" for cid, c in doc["cases"].items()
        )
        out.print(f"daemon time scale per case: {scales}", soft_wrap=True)
    # Each program's hint-fault cost, or why it was not measured (its boots' system times overlap).
    for prog, costs in sp.get("kernel_path_costs", {}).items():
        out.print(hint_fault_text(prog, costs), soft_wrap=True)
    table = Table("case", "metric", "kernel", "tiersim", "error", "agree")
    for cid, case in doc["cases"].items():
        for m, v in case["metrics"].items():
            runs_text = " / ".join(count_text(m, x) for x in v["kernel_runs"])
            table.add_row(cid, m, runs_text, count_text(m, v["tiersim"]), error_text(m, v), verdict_text(v))
    out.print(table)
    out.print(agreement_text(doc), soft_wrap=True)
    out.print(f"wrote {out_dir}/validate.json, series.parquet, report.html", soft_wrap=True)
