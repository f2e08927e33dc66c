"""Sweeps: one TOML file expands into traces x platforms x policies x override grids x seeds.

Each expanded run is keyed by a hash of everything its result depends on (see `run_hash`). The
sweep directory is its journal: a run is done when its part file `parts/HASH.parquet` exists
(written atomically, last), so an interrupted sweep resumes where it stopped and a run is never
computed twice. `results.parquet` is the one table of all parts, rewritten atomically at the end.

Runs execute on local worker processes (concurrent.futures, spawn) or on a Dask cluster. A run
that raises is recorded as failed with its error; a worker that dies (segfault, os._exit, OOM
kill) is found by rerunning the runs it may have been holding one at a time, each in its own
process, and the one that kills its process is recorded as failed. Neither stops the sweep.
The file format is documented in docs/sweep.md.

Modules: spec (the file and its expansion), workers (running one task, locally or on Dask),
results (the sweep directory and its tables), driver (run_sweep).
"""

from __future__ import annotations

from tiersim.sweep.driver import SweepReport, run_sweep
from tiersim.sweep.results import (
    CACHE_DIR,
    CONFIG_COLUMNS,
    DIGEST_CACHE,
    LOCK_FILE,
    PARTS_DIR,
    QUARANTINE_DIR,
    RESULTS_FILE,
    RUNS_DIR,
    SPEC_COPY,
    completed,
    consolidate,
    flatten_summary,
    iter_runs,
    load_results,
    read_parts,
    result_row,
    sweep_lock,
)
from tiersim.sweep.spec import TRACE_FORMATS, RunSpec, RunTask, Sweep, TraceRef, file_digest, load_sweep, run_hash
from tiersim.sweep.workers import (
    Outcome,
    Runner,
    connect_dask,
    execute,
    prepare_trace,
    run_dask,
    run_isolated,
    run_local,
    run_task,
)

__all__ = [
    "CACHE_DIR",
    "CONFIG_COLUMNS",
    "DIGEST_CACHE",
    "LOCK_FILE",
    "Outcome",
    "PARTS_DIR",
    "QUARANTINE_DIR",
    "RESULTS_FILE",
    "RUNS_DIR",
    "RunSpec",
    "RunTask",
    "Runner",
    "SPEC_COPY",
    "Sweep",
    "SweepReport",
    "TRACE_FORMATS",
    "TraceRef",
    "completed",
    "connect_dask",
    "consolidate",
    "execute",
    "file_digest",
    "flatten_summary",
    "iter_runs",
    "load_results",
    "load_sweep",
    "prepare_trace",
    "read_parts",
    "result_row",
    "run_dask",
    "run_hash",
    "run_isolated",
    "run_local",
    "run_sweep",
    "run_task",
    "sweep_lock",
]
