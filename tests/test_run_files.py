"""The run directory's Parquet files, written natively (`_native.write_parquet`) rather than by
polars, read back as the frames of the run; and `tiersim run` builds neither a DataFrame nor
the commands it does not run (BENCHMARKS.md "`tiersim run` end to end")."""

from __future__ import annotations

import errno
import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl
import pytest
import tiersim
from conftest import PLATFORM, run_cli
from tiersim import _native
from tiersim._result import LATENCY_HIST_SCHEMA, TIMESERIES_SCHEMA, RunResult
from tiersim.cli import _common


@pytest.fixture(scope="module")
def hot_run(random_trace: Path) -> tiersim.RunResult:
    """AutoTiering keeps a hotness history, so the time series has its hot_0 .. hot_8 columns."""
    return tiersim.run(random_trace, platform=PLATFORM, policy="autotiering_opm_bd", overrides=["scale=0.001"], seed=3)


def test_files_read_back_as_the_run_frames(hot_run: tiersim.RunResult, tmp_path: Path) -> None:
    out = hot_run.write(tmp_path / "run")
    ts = pl.read_parquet(out / "timeseries.parquet")
    assert ts.columns == [*TIMESERIES_SCHEMA, *(f"hot_{i}" for i in range(9))]
    assert ts.height == hot_run.timeseries.height > 0
    assert ts.equals(hot_run.timeseries)
    assert ts.schema == hot_run.timeseries.schema
    assert (
        ts.schema["node"] == pl.String and ts.schema["bandwidth_gbs"] == pl.Float64 and ts.schema["hot_8"] == pl.Int64
    )
    hist = pl.read_parquet(out / "latency_hist.parquet")
    assert hist.columns == list(LATENCY_HIST_SCHEMA) and hist.height > 0
    assert hist.equals(hot_run.latency_hist) and hist.schema == hot_run.latency_hist.schema
    # What polars wrote before: the same frames.
    hot_run.timeseries.write_parquet(tmp_path / "polars.parquet", compression="zstd", statistics=False)
    assert pl.read_parquet(tmp_path / "polars.parquet").equals(ts)


def test_the_same_result_gives_the_same_bytes(hot_run: tiersim.RunResult, tmp_path: Path) -> None:
    a, b = hot_run.write(tmp_path / "a"), hot_run.write(tmp_path / "b")
    for name in ("timeseries.parquet", "latency_hist.parquet"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_a_result_built_from_frames_writes_the_same_files(hot_run: tiersim.RunResult, tmp_path: Path) -> None:
    """RunResult takes DataFrames as well as the native columns; the files do not depend on which."""
    framed = RunResult(hot_run.summary, hot_run.config, hot_run.timeseries, hot_run.latency_hist)
    a, b = hot_run.write(tmp_path / "columns"), framed.write(tmp_path / "frames")
    for name in ("timeseries.parquet", "latency_hist.parquet"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_a_run_directory_has_mkdirs_mode_and_a_failed_one_names_the_output(
    hot_run: tiersim.RunResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files go into a temporary directory renamed into place: it must not keep mkdtemp's
    0700 (a run directory others cannot read), and a parent that cannot take it (read-only,
    gone) is an error naming the directory asked for, not the temporary one."""
    umask = os.umask(0o027)
    try:
        out = hot_run.write(tmp_path / "run")
    finally:
        os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o750

    def read_only(**_kw: object) -> str:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / ".run2.xyz.tmp"))

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    with pytest.raises(OSError) as exc:
        hot_run.write(tmp_path / "run2")
    assert exc.value.errno == errno.EROFS and exc.value.filename == str(tmp_path / "run2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_an_empty_run_keeps_the_schema(tmp_path: Path) -> None:
    out = RunResult(summary={}, config="", timeseries={}).write(tmp_path / "empty")
    ts = pl.read_parquet(out / "timeseries.parquet")
    assert ts.height == 0 and ts.columns == list(TIMESERIES_SCHEMA)
    assert (
        ts.schema["epoch"] == pl.Int64 and ts.schema["node"] == pl.String and ts.schema["bandwidth_gbs"] == pl.Float64
    )
    hist = pl.read_parquet(out / "latency_hist.parquet")
    assert hist.height == 0 and hist.schema == pl.Schema(
        {"node": pl.String, "low_ns": pl.Int64, "high_ns": pl.Int64, "count": pl.Int64}
    )


def test_nulls_and_every_kind(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    _native.write_parquet(
        str(path),
        [("i", "i64", [1, None, -(2**63)]), ("f", "f64", [0.5, 2, None]), ("s", "str", ["a", None, "ü"])],
    )
    assert pl.read_parquet(path).to_dict(as_series=False) == {
        "i": [1, None, -(2**63)],
        "f": [0.5, 2.0, None],
        "s": ["a", None, "ü"],
    }


def test_bad_input_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    with pytest.raises(tiersim.TiersimError, match="column 'b' has 1 values, the first column 2"):
        _native.write_parquet(str(path), [("a", "i64", [1, 2]), ("b", "i64", [1])])
    with pytest.raises(tiersim.TiersimError, match="kind 'u8' is not one of i64, f64, str"):
        _native.write_parquet(str(path), [("a", "u8", [1])])
    with pytest.raises(TypeError):
        _native.write_parquet(str(path), [("a", "i64", ["x"])])
    missing = tmp_path / "no" / "t.parquet"
    with pytest.raises(FileNotFoundError) as exc:
        _native.write_parquet(str(missing), [("a", "i64", [1])])
    assert exc.value.errno == errno.ENOENT and exc.value.filename == str(missing)


def test_run_imports_neither_polars_nor_the_other_commands(random_trace: Path, tmp_path: Path) -> None:
    """`tiersim run` as the console script runs it, in a fresh interpreter: the files it writes
    read back as the API's frames, and polars, matplotlib and the other command modules stay
    unloaded."""
    out = tmp_path / "run"
    code = (
        "import sys; from tiersim.cli import main\n"
        f"sys.argv = ['tiersim', 'run', {str(random_trace)!r}, '-p', {PLATFORM!r}, '-o', {str(out)!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('polars', 'matplotlib', 'dask') "
        "or m.startswith('tiersim.cli.'))), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert done.stderr.split() == ["tiersim.cli._common", "tiersim.cli.run"]
    api = tiersim.run(random_trace, platform=PLATFORM)
    assert pl.read_parquet(out / "timeseries.parquet").equals(api.timeseries)
    assert pl.read_parquet(out / "latency_hist.parquet").equals(api.latency_hist)


def test_the_command_table_names_every_command() -> None:
    """COMMANDS (the root group's lazy table) against what the command modules register: every
    command and group, in the module that defines it, none missing, none extra."""
    modules = {module for module, _ in _common.COMMANDS.values()}
    for module in sorted(modules):
        importlib.import_module(module)
    registered = {_common.command_name(c): c.callback.__module__ for c in _common.app.registered_commands}
    commands = {name: module for name, (module, sub_app) in _common.COMMANDS.items() if sub_app is None}
    assert registered == commands
    for name, (module, sub_app) in _common.COMMANDS.items():
        if sub_app is not None:
            assert isinstance(getattr(sys.modules[module], sub_app), type(_common.app)), name


def test_help_lists_the_commands_in_table_order() -> None:
    done = run_cli("--help")
    assert done.returncode == 0
    # A command row starts "│ NAME"; its wrapped help continues on lines that start "│   ".
    listed = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("│ ") and line[2:3].strip()]
    names = [n for n in listed if n in _common.COMMANDS]
    assert names == list(_common.COMMANDS)
    typo = run_cli("rnu")
    assert typo.returncode == 2 and "No such command 'rnu'. Did you mean 'run'?" in typo.stderr
