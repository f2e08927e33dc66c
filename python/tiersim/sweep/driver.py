"""`run_sweep`: load a sweep, skip the runs its directory already holds, run the rest and record
each as it finishes."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tiersim._native import TiersimError
from tiersim._options import MAX_WORKERS, Number
from tiersim.sweep.results import (
    CACHE_DIR,
    DIGEST_CACHE,
    PARTS_DIR,
    RUNS_DIR,
    SPEC_COPY,
    _row_frame,
    _write_atomic_parquet,
    _write_text_atomic,
    completed,
    consolidate,
    environmental,
    result_row,
    sweep_lock,
)
from tiersim.sweep.spec import RunSpec, RunTask, load_sweep
from tiersim.sweep.workers import Outcome, Runner, connect_dask, run_dask, run_local, run_task


@dataclass
class SweepReport:
    out_dir: Path
    total: int
    skipped: int = 0
    ok: int = 0
    failed: int = 0
    failures: list[tuple[RunSpec, str]] = field(default_factory=list)
    results: pl.DataFrame = field(default_factory=pl.DataFrame)


def run_sweep(
    spec: str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None = None,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    retry_failed: bool = False,
    runner: Runner = run_task,
    progress: Callable[[SweepReport, RunSpec | None], None] | None = None,
) -> SweepReport:
    """Run (or resume) a sweep. out_dir defaults to `sweeps/STEM` beside the spec file (STEM: its file name without .toml).

    runner: the function a worker calls per run (default `run_task`); it must be importable by
    the workers (a module-level function). progress(report, run) is called in the driver at the
    start (run None) and after every finished run."""
    if workers is not None:
        workers = Number(int, 1, MAX_WORKERS).check("workers", workers)
    spec_path = Path(spec)
    out = Path(out_dir) if out_dir is not None else spec_path.parent / "sweeps" / spec_path.stem
    if out.exists() and not out.is_dir():
        raise TiersimError(f"sweep output '{out}' exists and is not a directory")
    digests_path = out / DIGEST_CACHE
    digests: dict[str, Any] = {}
    if digests_path.is_file():
        try:
            digests = json.loads(digests_path.read_text())
        except ValueError:
            digests = {}
    sweep = load_sweep(spec_path, digests)
    (out / PARTS_DIR).mkdir(parents=True, exist_ok=True)
    with sweep_lock(out):
        return _run_locked(sweep, out, digests, workers, scheduler, retry_failed, runner, progress)


def _remove_temporaries(out: Path) -> None:
    """Half-written parts, run directories and cached traces of runs that did not finish: their
    workers died (killed, or stopped with the driver) before renaming them into place."""
    for sub in (PARTS_DIR, RUNS_DIR, CACHE_DIR):
        for stale in (out / sub).glob(".*.tmp*"):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


def _run_locked(
    sweep: Any,
    out: Path,
    digests: dict[str, Any],
    workers: int | None,
    scheduler: str | None,
    retry_failed: bool,
    runner: Runner,
    progress: Callable[[SweepReport, RunSpec | None], None] | None,
) -> SweepReport:
    (out / RUNS_DIR).mkdir(exist_ok=True)
    _write_text_atomic(out / DIGEST_CACHE, json.dumps(digests, indent=1, sort_keys=True) + "\n")
    _write_text_atomic(out / SPEC_COPY, sweep.text)
    _remove_temporaries(out)

    done = completed(out)
    todo, seen = [], set()
    for run in sweep.runs:
        if run.hash in seen:
            continue
        seen.add(run.hash)
        status, error = done.get(run.hash, (None, None))
        if status == "ok" or (status is not None and not retry_failed and not environmental(error)):
            continue
        todo.append(run)
    report = SweepReport(out_dir=out, total=len(seen), skipped=len(seen) - len(todo))
    cache_dir = None if scheduler else os.fspath((out / CACHE_DIR).resolve())
    tasks = [RunTask(run, cache_dir) for run in todo]

    def on_done(task: RunTask, outcome: Outcome) -> None:
        run = task.run
        run_dir = None
        if outcome.status == "ok" and outcome.result is not None:
            rel = f"{RUNS_DIR}/{run.hash}"
            outcome.result.write(out / rel)
            run_dir = rel
            report.ok += 1
        else:
            report.failed += 1
            report.failures.append((run, outcome.error or "unknown error"))
        # The part file is written last: its presence is what marks the run done.
        _write_atomic_parquet(_row_frame(result_row(run, outcome, run_dir)), out / PARTS_DIR / f"{run.hash}.parquet")
        if progress:
            progress(report, run)

    client = connect_dask(scheduler) if scheduler and tasks else None
    if progress:
        progress(report, None)
    try:
        if client is not None:
            run_dask(tasks, client, runner, on_done)
        elif tasks:
            run_local(tasks, max(1, workers or os.cpu_count() or 1), runner, on_done)
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM): run_local has stopped the workers, which leave the
        # temporaries of the step they were in.
        _remove_temporaries(out)
        raise
    finally:
        if client is not None:
            client.close()
        report.results = consolidate(out)
    return report
