"""`tiersim sweep`: run a sweep file locally or on a Dask cluster, with a progress bar."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from tiersim._options import MAX_WORKERS
from tiersim.cli._common import (
    Number,
    Terminated,
    _int,
    _interrupt_status,
    _kv_table,
    _print,
    _user_errors,
    app,
    err,
)


@app.command("sweep")
def sweep_cmd(
    spec: Annotated[Path, typer.Argument(help="Sweep file (TOML, see docs/sweep.md).")],
    output: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="DIR", help="Sweep directory (default: sweeps/SPEC beside the spec)."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers", "-j", parser=Number(int, 1, MAX_WORKERS), help="Local worker processes (default: one per CPU)."
        ),
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option("--scheduler", metavar="ADDRESS", help="Run on the Dask cluster at ADDRESS (tcp://host:8786)."),
    ] = None,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Rerun runs recorded as failed.")] = False,
) -> None:
    """Run every combination of a sweep file's traces, platforms, policies and overrides."""
    from tiersim import sweep as sw

    if scheduler is not None and workers is not None:
        raise typer.BadParameter("--workers is for local runs; a Dask cluster has its own", param_hint="--workers")
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err,
    )
    state: dict[str, Any] = {}

    def on_progress(rep: sw.SweepReport, run: sw.RunSpec | None) -> None:
        counts = f"ok {rep.ok}  failed {rep.failed}"
        if run is None:
            progress.start()
            where = f"on {scheduler}" if scheduler else f"on {workers or os.cpu_count() or 1} local workers"
            state["task"] = progress.add_task(
                f"sweep {spec.name} {where}", total=rep.total - rep.skipped, counts=counts
            )
            if rep.skipped:
                err.print(Text(f"{rep.skipped} of {rep.total} runs already done in {rep.out_dir}; resuming"))
        else:
            progress.update(state["task"], advance=1, counts=counts)

    interrupted: BaseException | None = None
    with _user_errors():
        try:
            rep = sw.run_sweep(
                spec, output, workers=workers, scheduler=scheduler, retry_failed=retry_failed, progress=on_progress
            )
        except (KeyboardInterrupt, Terminated) as exc:
            interrupted = exc
        finally:
            if "task" in state:
                progress.stop()
    if interrupted is not None:
        err.print(Text("interrupted; finished runs are saved. Run the same command again to resume."))
        raise typer.Exit(_interrupt_status(interrupted))
    table = _kv_table(
        f"sweep {spec.name}",
        [
            ("runs", _int(rep.total)),
            ("already done", _int(rep.skipped)),
            ("ran ok", _int(rep.ok)),
            ("failed", _int(rep.failed)),
            ("results", str(rep.out_dir / sw.RESULTS_FILE)),
        ],
    )
    _print(table)
    for run, error in rep.failures[:10]:
        err.print(
            Text.assemble(
                ("failed: ", "bold red"),
                f"{run.trace.label} / {run.platform_label} / {run.policy_label} seed {run.seed}: {error}",
            ),
            soft_wrap=True,
        )
    if len(rep.failures) > 10:
        err.print(Text(f"... and {len(rep.failures) - 10} more failures (see the error column)"))
