"""The result of one simulation run, and how it is written to a run directory.

polars is imported only when a DataFrame is asked for: `tiersim run` writes the Parquet files
natively (`_native.write_parquet`) and never builds one, which saves it 0.13 s of start-up."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, SupportsFloat, cast

if TYPE_CHECKING:
    import polars as pl

SUMMARY_FILE = "summary.json"
TIMESERIES_FILE = "timeseries.parquet"
LATENCY_HIST_FILE = "latency_hist.parquet"
CONFIG_FILE = "config.toml"
RUN_FILES = (SUMMARY_FILE, TIMESERIES_FILE, LATENCY_HIST_FILE, CONFIG_FILE)
# `tiersim report RUN_DIR` adds this; a rerun into the directory replaces it with the rest.
REPORT_FILE = "report.html"

# Column name -> kind ("i64", "f64", "str": Int64, Float64 and String in polars). Fixed, so
# that an empty run or a run whose first rows happen to hold small numbers still yields the
# same schema (and the same parquet bytes).
TIMESERIES_SCHEMA: dict[str, str] = {
    "epoch": "i64",
    "t_start_ns": "i64",
    "t_end_ns": "i64",
    "node": "str",
    "pages": "i64",
    "accesses": "i64",
    "reads": "i64",
    "writes": "i64",
    "bytes": "i64",
    "bandwidth_gbs": "f64",
    "migrated_in": "i64",
    "migrated_out": "i64",
}

# One row per non-empty bin of the measured accesses' latency histogram: node "all" (the whole
# run) first, then each node; a bin holds the accesses with latency in [low_ns, high_ns].
LATENCY_HIST_SCHEMA: dict[str, str] = {
    "node": "str",
    "low_ns": "i64",
    "high_ns": "i64",
    "count": "i64",
}

NODE_SCHEMA: dict[str, str] = {
    "name": "str",
    "device": "str",
    "socket": "i64",
    "capacity_bytes": "i64",
    "accesses": "i64",
    "reads": "i64",
    "writes": "i64",
    "bytes": "i64",
    "final_pages": "i64",
    "peak_pages": "i64",
    "mean_latency_ns": "f64",
}

Columns = dict[str, list[Any]]


def _dtype(kind: str) -> pl.DataType:
    import polars as pl

    return {"i64": pl.Int64(), "f64": pl.Float64(), "str": pl.Utf8()}[kind]


def timeseries_columns(columns: Columns) -> list[tuple[str, str, list[Any]]]:
    """(name, kind, values): the documented columns first with fixed kinds, then any further
    columns the engine adds (hot_0 .. hot_8, pages per hotness level, come only from policies
    that keep a history; all Int64)."""
    fixed = [(name, kind, columns.get(name, [])) for name, kind in TIMESERIES_SCHEMA.items()]
    return fixed + [(name, "i64", values) for name, values in columns.items() if name not in TIMESERIES_SCHEMA]


def latency_hist_columns(columns: Columns | None = None) -> list[tuple[str, str, list[Any]]]:
    columns = columns or {}
    return [(name, kind, columns.get(name, [])) for name, kind in LATENCY_HIST_SCHEMA.items()]


def _frame(columns: list[tuple[str, str, list[Any]]]) -> pl.DataFrame:
    import polars as pl

    return pl.DataFrame([pl.Series(name, values, dtype=_dtype(kind)) for name, kind, values in columns])


def timeseries_frame(columns: Columns) -> pl.DataFrame:
    """The time series as a DataFrame (columns as `timeseries_columns` orders and types them)."""
    return _frame(timeseries_columns(columns))


def latency_hist_frame(columns: Columns | None = None) -> pl.DataFrame:
    return _frame(latency_hist_columns(columns))


def nodes_frame(nodes: list[dict[str, Any]]) -> pl.DataFrame:
    import polars as pl

    schema = {name: _dtype(kind) for name, kind in NODE_SCHEMA.items()}
    if not nodes:
        return pl.DataFrame(schema=schema)
    overrides = {name: dtype for name, dtype in schema.items() if name in nodes[0]}
    # socket is null for CPU-less nodes; without the override an all-null column has no type.
    return pl.DataFrame(nodes, schema_overrides=overrides, infer_schema_length=None)


def aggregate_float(value: object) -> float:
    """An aggregate of a numeric polars column (`Series.max()`, `.min()`) as a float. polars
    types it as any Python value or None; of the non-empty numeric columns aggregated here it is
    an int or a float, and float() converts it as before."""
    return float(cast(SupportsFloat, value))


# What the summary says about how far a run's figures can be trusted; here, not in report.py,
# so that `tiersim run` prints them without importing polars.
def run_warnings(summary: dict[str, Any]) -> list[str]:
    """What the run says about how far its figures can be trusted (summary.json `warnings`)."""
    return [str(w) for w in summary.get("warnings") or []]


def regime_rows(summary: dict[str, Any]) -> list[tuple[str, Any]]:
    """The run's regime (summary.json `regime`, docs/model.md "When a result can be trusted")."""
    r = summary.get("regime") or {}
    scan = r.get("scanner") or {}

    def share(k: str) -> str | None:
        return f"{100 * r[k]:.1f}%" if isinstance(r.get(k), (int, float)) else None

    return [
        ("scan passes (full sweeps of memory)", scan.get("scan_passes")),
        ("run length / scan_period_min", scan.get("scan_periods_min_covered")),
        ("accesses per page per scan pass", scan.get("accesses_per_page_per_pass")),
        ("CPU time in hint faults", share("hint_fault_share")),
        ("CPU time in migration", share("migration_share")),
        ("CPU time in scanning", share("scan_share")),
        ("CPU time in daemons", share("daemon_share")),
    ]


def check_out_dir(
    out_dir: str | os.PathLike[str], files: tuple[str, ...] = RUN_FILES, what: str = "tiersim run"
) -> Path:
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
    tmp = temp_dir_beside(out, f".{out.name}.", ".tmp")
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
        if getattr(exc, "errno", None) in (None, errno.ENOSPC) and (
            "No space left on device" in text or "os error 28" in text
        ):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(target)) from exc
        if isinstance(exc, OSError):
            raise OSError(exc.errno, exc.strerror or text, os.fspath(target)) from exc
        raise


def temp_dir_beside(out: str | os.PathLike[str], prefix: str, suffix: str = "", parent: Path | None = None) -> Path:
    """A new directory in `out`'s parent (or in `parent`), for files that become `out` or for
    scratch: made with the mode mkdir(2) gives under the umask (mkdtemp's 0700 would stay on a
    run directory renamed into place), and a failure (a read-only or missing directory) is an
    OSError naming `out` (or `parent`), not the temporary name."""
    where = Path(out).parent if parent is None else parent
    with writing(out if parent is None else parent):
        tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=where))
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    return tmp


class RunResult:
    """What one run produced: the summary, the resolved config, the per-epoch time series and
    the latency histogram.

    `summary` is the parsed summary JSON; `nodes`, `timeseries` and `latency_hist` are DataFrames
    built from it and from the native columns on first use (`latency_hist`: see
    LATENCY_HIST_SCHEMA). `timeseries` and `latency_hist` are given as DataFrames or as the
    native columns (name -> values).
    """

    def __init__(
        self,
        summary: dict[str, Any],
        config: str,
        timeseries: pl.DataFrame | Columns,
        latency_hist: pl.DataFrame | Columns | None = None,
    ) -> None:
        self.summary = summary
        self.config = config
        self._timeseries = timeseries
        self._latency_hist = {} if latency_hist is None else latency_hist
        self._nodes: pl.DataFrame | None = None

    @property
    def timeseries(self) -> pl.DataFrame:
        if isinstance(self._timeseries, dict):
            self._timeseries = timeseries_frame(self._timeseries)
        return self._timeseries

    @property
    def latency_hist(self) -> pl.DataFrame:
        if isinstance(self._latency_hist, dict):
            self._latency_hist = latency_hist_frame(self._latency_hist)
        return self._latency_hist

    @property
    def nodes(self) -> pl.DataFrame:
        if self._nodes is None:
            self._nodes = nodes_frame(self.summary.get("nodes", []))
        return self._nodes

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
        tmp = temp_dir_beside(out, f".{out.name}.", ".tmp")
        try:
            with writing(out / SUMMARY_FILE):
                (tmp / SUMMARY_FILE).write_text(self.summary_json(), encoding="utf-8")
            with writing(out / TIMESERIES_FILE):
                _write_parquet(tmp / TIMESERIES_FILE, timeseries_columns(_columns(self._timeseries)))
            with writing(out / LATENCY_HIST_FILE):
                _write_parquet(tmp / LATENCY_HIST_FILE, latency_hist_columns(_columns(self._latency_hist)))
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


def _columns(data: pl.DataFrame | Columns) -> Columns:
    return data if isinstance(data, dict) else data.to_dict(as_series=False)


def _write_parquet(path: Path, columns: list[tuple[str, str, list[Any]]]) -> None:
    from tiersim._native import write_parquet

    write_parquet(os.fspath(path), columns)
