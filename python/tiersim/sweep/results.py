"""A sweep directory as a journal: one part file per finished run (written atomically, last),
results.parquet consolidated from them, and the flat metric columns taken from summary.json."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

from tiersim._convert import toml_value
from tiersim._native import TiersimError
from tiersim._result import write_text_atomic, writing
from tiersim.sweep.spec import RunSpec
from tiersim.sweep.workers import Outcome

# The layout of a sweep directory.
PARTS_DIR = "parts"
RUNS_DIR = "runs"
CACHE_DIR = "trace-cache"
RESULTS_FILE = "results.parquet"
SPEC_COPY = "sweep.toml"
DIGEST_CACHE = "trace-digests.json"
QUARANTINE_DIR = "quarantine"
LOCK_FILE = ".lock"

# A failed run whose error says the machine, not the model, failed it: redone by the next run of
# the sweep without --retry-failed (disk full, out of memory, a worker killed by the OOM killer).
ENVIRONMENTAL_ERRORS = (
    "No space left on device",
    "no space left",
    "Disk quota exceeded",
    "Cannot allocate memory",
    "MemoryError",
    "killed by SIGKILL",
)


def environmental(error: str | None) -> bool:
    return bool(error) and any(e in error for e in ENVIRONMENTAL_ERRORS)  # type: ignore[operator]


# Config columns of the results table, in this order, before the grid columns and the metrics.
CONFIG_COLUMNS = (
    "hash",
    "index",
    "trace",
    "trace_source",
    "trace_digest",
    "platform",
    "platform_source",
    "policy",
    "policy_name",
    "policy_params",
    "overrides",
    "seed",
    "status",
    "error",
    "wall_time_s",
    "run_dir",
)


def flatten_summary(summary: Mapping[str, Any]) -> dict[str, int | float]:
    """The numeric fields of summary.json as flat columns: `execution_time_ns`,
    `latency_ns.p99`, `tiering.promotions`, `swap.swap_ins`, `node.dram0.accesses`, ...
    Device internals (`devices`) and non-numeric fields are left to the run directory."""
    out: dict[str, int | float] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, bool):
            return
        if isinstance(value, (int, float)):
            out[prefix] = value
        elif isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)

    for key, value in summary.items():
        if key in ("devices", "nodes", "seed"):
            continue
        # The swap device's own statistics are device internals like `devices`.
        walk(
            key,
            {k: v for k, v in value.items() if k != "device"}
            if key == "swap" and isinstance(value, Mapping)
            else value,
        )
    for node in summary.get("nodes", []):
        name = node.get("name")
        for k, v in node.items():
            if k != "watermarks_pages" and isinstance(v, (int, float)) and not isinstance(v, bool):
                out[f"node.{name}.{k}"] = v
    return out


def _column_value(v: Any) -> Any:
    # Lists (weights = [4, 1]) become their TOML text so every cell of a column has one type.
    return toml_value(v, "grid") if isinstance(v, (list, tuple)) else v


def result_row(run: RunSpec, outcome: Outcome, run_dir: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "hash": run.hash,
        "index": run.index,
        "trace": run.trace.label,
        "trace_source": run.trace.source,
        "trace_digest": run.trace.digest,
        "platform": run.platform_label,
        "platform_source": run.platform_source,
        "policy": run.policy_label,
        "policy_name": run.policy_name,
        "policy_params": json.dumps(dict(run.policy_params), sort_keys=True),
        "overrides": json.dumps(list(run.overrides)),
        "seed": run.seed,
        "status": outcome.status,
        "error": outcome.error,
        "wall_time_s": outcome.wall_time_s,
        "run_dir": run_dir,
    }
    for k, v in run.grid:
        row[k] = _column_value(v)
    for k, v in run.policy_params:
        row[f"param.{k}"] = _column_value(v)
    if outcome.result is not None:
        row.update(flatten_summary(outcome.result.summary))
    return row


def _row_frame(row: dict[str, Any]) -> pl.DataFrame:
    schema = {
        "hash": pl.Utf8,
        "index": pl.Int64,
        "seed": pl.UInt64,
        "status": pl.Utf8,
        "error": pl.Utf8,
        "wall_time_s": pl.Float64,
        "run_dir": pl.Utf8,
    }
    series = []
    for k, v in row.items():
        if k in schema:
            series.append(pl.Series(k, [v], dtype=schema[k]))
        elif isinstance(v, float):
            series.append(pl.Series(k, [v], dtype=pl.Float64))
        elif isinstance(v, int):
            series.append(pl.Series(k, [v], dtype=pl.Int64))
        else:
            series.append(pl.Series(k, [v], dtype=pl.Utf8 if v is None or isinstance(v, str) else None))
    return pl.DataFrame(series)


def _write_atomic_parquet(df: pl.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with writing(path):
            df.write_parquet(tmp, compression="zstd", statistics=False)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read_part(p: Path) -> pl.DataFrame | None:
    """A part file, or None after moving it to quarantine/ (saying so on stderr) when it cannot
    be read: a truncated part made every later report and sweep of the directory fail."""
    try:
        df = pl.read_parquet(p)
        if df.height != 1 or "status" not in df.columns:
            raise ValueError(f"{df.height} rows, columns {df.columns[:3]}")
        return df
    except FileNotFoundError:
        return None
    except Exception as exc:  # noqa: BLE001 - polars raises several kinds for a damaged file
        qdir = p.parent.parent / QUARANTINE_DIR
        qdir.mkdir(exist_ok=True)
        dest = qdir / f"{p.name}.{int(time.time())}"
        os.replace(p, dest)
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"warning: corrupt sweep part {p} ({detail}) moved to {dest}; its run will be redone", file=sys.stderr)
        return None


def read_parts(out_dir: Path) -> pl.DataFrame:
    """Every completed run of a sweep directory, one row each, in spec order."""
    parts = sorted((out_dir / PARTS_DIR).glob("*.parquet"))
    frames = [df for df in map(_read_part, parts) if df is not None]
    if not frames:
        return pl.DataFrame()
    df = pl.concat(frames, how="diagonal_relaxed")
    first = [c for c in CONFIG_COLUMNS if c in df.columns]
    grid = sorted(c for c in df.columns if c.startswith(("set.", "param.")))
    rest = [c for c in df.columns if c not in first and c not in grid]
    return df.select(first + grid + rest).sort(["index", "hash"])


def consolidate(out_dir: Path) -> pl.DataFrame:
    """Rewrite results.parquet from the part files (atomically) and return it."""
    df = read_parts(out_dir)
    if df.height:
        _write_atomic_parquet(df, out_dir / RESULTS_FILE)
    return df


def completed(out_dir: Path) -> dict[str, tuple[str, str | None]]:
    """hash -> (status, error) of every run with a readable part file (others are quarantined)."""
    done = {}
    for p in (out_dir / PARTS_DIR).glob("*.parquet"):
        df = _read_part(p)
        if df is not None:
            done[p.stem] = (df["status"][0], df["error"][0] if "error" in df.columns else None)
    return done


@contextmanager
def sweep_lock(out_dir: Path) -> Iterator[None]:
    """Hold the sweep directory for this process: a second sweep of it is refused, naming the
    holder. flock is released by the kernel when the holder dies, so a lock never goes stale."""
    path = out_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"
            raise TiersimError(f"sweep directory '{out_dir}' is in use by {holder}; wait for it or stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(
            fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0
        )
        yield
    finally:
        os.close(fd)


_write_text_atomic = write_text_atomic


def load_results(path: str | os.PathLike[str]) -> tuple[pl.DataFrame, Path]:
    """The results table of a sweep, from its directory (read from the part files, so an
    interrupted sweep is readable too) or from a results.parquet; and the sweep directory."""
    p = Path(path)
    if p.is_dir():
        df = read_parts(p)
        if df.height == 0 and (p / RESULTS_FILE).is_file():
            df = pl.read_parquet(p / RESULTS_FILE)
        if df.height == 0:
            raise TiersimError(f"'{p}' holds no sweep results (no {PARTS_DIR}/*.parquet or {RESULTS_FILE})")
        return df, p
    try:
        return pl.read_parquet(p), p.parent
    except FileNotFoundError:
        raise TiersimError(f"sweep results '{p}' do not exist") from None
    except Exception as exc:  # noqa: BLE001 - polars raises several kinds for a non-parquet file
        raise TiersimError(f"'{p}' is not a sweep results table (Parquet): {exc}") from None


def iter_runs(results: pl.DataFrame) -> Iterable[dict[str, Any]]:
    return results.iter_rows(named=True)
