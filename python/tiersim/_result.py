"""The result of one simulation run, and how it is written to a run directory."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

SUMMARY_FILE = "summary.json"
TIMESERIES_FILE = "timeseries.parquet"
LATENCY_HIST_FILE = "latency_hist.parquet"
CONFIG_FILE = "config.toml"
RUN_FILES = (SUMMARY_FILE, TIMESERIES_FILE, LATENCY_HIST_FILE, CONFIG_FILE)
# `tiersim report RUN_DIR` adds this; a rerun into the directory replaces it with the rest.
REPORT_FILE = "report.html"

# Fixed dtypes, so that an empty run or a run whose first rows happen to hold small numbers
# still yields the same schema (and the same parquet bytes).
TIMESERIES_SCHEMA: dict[str, pl.DataType] = {
    "epoch": pl.Int64(),
    "t_start_ns": pl.Int64(),
    "t_end_ns": pl.Int64(),
    "node": pl.Utf8(),
    "pages": pl.Int64(),
    "accesses": pl.Int64(),
    "reads": pl.Int64(),
    "writes": pl.Int64(),
    "bytes": pl.Int64(),
    "bandwidth_gbs": pl.Float64(),
    "migrated_in": pl.Int64(),
    "migrated_out": pl.Int64(),
}

# One row per non-empty bin of the measured accesses' latency histogram: node "all" (the whole
# run) first, then each node; a bin holds the accesses with latency in [low_ns, high_ns].
LATENCY_HIST_SCHEMA: dict[str, pl.DataType] = {
    "node": pl.Utf8(),
    "low_ns": pl.Int64(),
    "high_ns": pl.Int64(),
    "count": pl.Int64(),
}

NODE_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.Utf8(),
    "device": pl.Utf8(),
    "socket": pl.Int64(),
    "capacity_bytes": pl.Int64(),
    "accesses": pl.Int64(),
    "reads": pl.Int64(),
    "writes": pl.Int64(),
    "bytes": pl.Int64(),
    "final_pages": pl.Int64(),
    "peak_pages": pl.Int64(),
    "mean_latency_ns": pl.Float64(),
}


def timeseries_frame(columns: dict[str, list[Any]]) -> pl.DataFrame:
    """Documented columns first with fixed dtypes, then any further columns the engine adds."""
    series = [pl.Series(name, columns.get(name, []), dtype=dtype) for name, dtype in TIMESERIES_SCHEMA.items()]
    # hot_0 .. hot_8 (pages per hotness level) come only from policies that keep a history.
    series += [pl.Series(name, values, dtype=pl.Int64()) for name, values in columns.items() if name not in TIMESERIES_SCHEMA]
    return pl.DataFrame(series)


def latency_hist_frame(columns: dict[str, list[Any]] | None = None) -> pl.DataFrame:
    columns = columns or {}
    return pl.DataFrame([pl.Series(name, columns.get(name, []), dtype=dtype) for name, dtype in LATENCY_HIST_SCHEMA.items()])


def nodes_frame(nodes: list[dict[str, Any]]) -> pl.DataFrame:
    if not nodes:
        return pl.DataFrame(schema=NODE_SCHEMA)
    overrides = {name: dtype for name, dtype in NODE_SCHEMA.items() if name in nodes[0]}
    # socket is null for CPU-less nodes; without the override an all-null column has no type.
    return pl.DataFrame(nodes, schema_overrides=overrides, infer_schema_length=None)


def check_out_dir(out_dir: str | os.PathLike[str], files: tuple[str, ...] = RUN_FILES, what: str = "tiersim run") -> Path:
    """Refuse an output directory that `RunResult.write` would have to clobber: a file, or a
    directory holding anything but a previous run's `files`. Callers check before a long run."""
    from tiersim._native import TiersimError

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise TiersimError(f"output '{out}' exists and is not a directory")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in (*files, REPORT_FILE))
        if foreign:
            raise TiersimError(
                f"output directory '{out}' already exists and holds files that are not a "
                f"{what} ({', '.join(foreign[:5])}); choose another directory"
            )
    return out



def write_text_atomic(path: Path, text: str) -> None:
    """`path` gets `text` whole or not at all: written under a temporary name, then renamed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with writing(path):
            tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def files_into(out_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary directory beside `out_dir` to write files into; when the block ends without
    an error (a full disk, a signal) they move into `out_dir`: the whole directory in one rename
    when it does not exist yet, else entry by entry. Otherwise nothing is left."""
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        with writing(out):
            yield tmp
            if not out.exists():
                os.replace(tmp, out)
                return
            for entry in tmp.iterdir():
                dest = out / entry.name
                if entry.is_dir() and dest.is_dir():
                    shutil.rmtree(dest)
                os.replace(entry, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def writing(target: str | os.PathLike[str]) -> Iterator[None]:
    """A failed write, reported as an OSError naming `target` (the file the user asked for, not
    the temporary one written first). polars reports a full disk as its own error types with
    the OS message inside; those become ENOSPC too, so every command can say "no space left
    writing FILE"."""
    try:
        yield
    except Exception as exc:
        text = str(exc)
        # polars raises some OSErrors without an errno, the OS message in their text.
        if getattr(exc, "errno", None) in (None, errno.ENOSPC) and ("No space left on device" in text or "os error 28" in text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(target)) from exc
        if isinstance(exc, OSError):
            raise OSError(exc.errno, exc.strerror or text, os.fspath(target)) from exc
        raise

@dataclass(frozen=True)
class RunResult:
    """What one run produced: the summary, the resolved config, the per-epoch time series and
    the latency histogram.

    `summary` is the parsed summary JSON; `nodes`, `timeseries` and `latency_hist` are DataFrames
    built from it and from the native columns (`latency_hist`: see LATENCY_HIST_SCHEMA).
    """

    summary: dict[str, Any]
    config: str
    timeseries: pl.DataFrame
    latency_hist: pl.DataFrame = field(default_factory=latency_hist_frame)
    nodes: pl.DataFrame = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", nodes_frame(self.summary.get("nodes", [])))

    @property
    def latency(self) -> dict[str, float]:
        """Access latency statistics in ns: mean, p50, p90, p99, p999, max."""
        return dict(self.summary["latency_ns"])

    @property
    def execution_time_ns(self) -> int:
        return int(self.summary["execution_time_ns"])

    def summary_json(self) -> str:
        """The summary as written to summary.json: sorted keys, indent 2, so equal results give
        equal bytes."""
        return json.dumps(self.summary, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"

    def write(self, out_dir: str | os.PathLike[str]) -> Path:
        """Write summary.json, timeseries.parquet, latency_hist.parquet and config.toml into `out_dir`.

        The files are written into a temporary directory beside `out_dir` that is renamed into
        place at the end, so a failure leaves no directory that looks like a finished run. An
        existing `out_dir` is replaced only if it is empty or holds nothing but a previous run's
        files; anything else is refused rather than deleted.
        """
        out = check_out_dir(out_dir)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
        try:
            with writing(out / SUMMARY_FILE):
                (tmp / SUMMARY_FILE).write_text(self.summary_json(), encoding="utf-8")
            # statistics off: min/max blocks add nothing for a table this small, and fewer
            # metadata fields means fewer ways for the bytes to differ between polars builds.
            with writing(out / TIMESERIES_FILE):
                self.timeseries.write_parquet(tmp / TIMESERIES_FILE, compression="zstd", statistics=False)
            with writing(out / LATENCY_HIST_FILE):
                self.latency_hist.write_parquet(tmp / LATENCY_HIST_FILE, compression="zstd", statistics=False)
            with writing(out / CONFIG_FILE):
                (tmp / CONFIG_FILE).write_text(self.config, encoding="utf-8")
            if out.is_dir():
                old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
                os.replace(out, old / "run")
                try:
                    os.replace(tmp, out)
                except BaseException:
                    os.replace(old / "run", out)
                    raise
                finally:
                    shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return out
