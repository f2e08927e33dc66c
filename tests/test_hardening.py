"""Issue 15 reproductions through the CLI and the Python API: bad numbers end in one line naming
the key, internal errors in one line without a Rust or Python backtrace whatever RUST_BACKTRACE
says (details with TIERSIM_DEBUG=1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tiersim
from conftest import PLATFORM, run_cli
from test_cli import _run_bad, assert_user_error


@pytest.mark.parametrize(
    ("setting", "fragment"),
    [
        (
            "host.mlp=nan",
            "config key `host.mlp`: NaN is not a number that can be simulated; expected a finite number in [1, 1024]",
        ),
        ("host.cpi=inf", "config key `host.cpi`: inf is not a number that can be simulated"),
        ("host.cpi=1e300", "config key `host.cpi`: 1e300 is above the maximum 1000000"),
        ("os.daemon_time_scale=nan", "config key `os.daemon_time_scale`: NaN is not a number"),
    ],
)
def test_nan_infinity_and_absurd_magnitudes_are_one_line_errors(
    tmp_path: Path, random_trace: Path, setting: str, fragment: str
):
    env_proc = _run_bad(tmp_path, random_trace, "--set", setting)
    assert_user_error(env_proc, fragment)


def test_scan_period_min_above_max_is_refused(tmp_path: Path, random_trace: Path):
    proc = _run_bad(tmp_path, random_trace, "--policy", "autonuma", "--param", 'scan_period_min="90s"')
    assert_user_error(proc, "scan_period_min", "expected scan_period_min <= scan_period_max")


_PANIC = "import tiersim._native as n\ntry:\n    n._panic_for_test()\nexcept n.TiersimError as e:\n    print(e)\n"


@pytest.mark.parametrize("debug", [False, True])
def test_a_rust_panic_is_one_line_without_backtrace_unless_tiersim_debug(debug: bool):
    env = dict(os.environ, RUST_BACKTRACE="full")
    env.pop("TIERSIM_DEBUG", None)
    if debug:
        env["TIERSIM_DEBUG"] = "1"
    proc = subprocess.run([sys.executable, "-c", _PANIC], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert line.startswith("internal error: attempt to divide by zero at crates/tiersim-py/src/functions.rs:"), line
    assert "\n" not in line
    if debug:
        assert "the backtrace is above" in line
        assert (
            "stack backtrace" in proc.stderr or "rust_begin_unwind" in proc.stderr or "_panic_for_test" in proc.stderr
        )
    else:
        assert "set TIERSIM_DEBUG=1 for a backtrace" in line
        assert proc.stderr == "", proc.stderr


def test_tiersim_error_is_raised_for_api_numbers(tmp_path: Path, random_trace: Path):
    with pytest.raises(tiersim.TiersimError, match="host.mlp"):
        tiersim.run(random_trace, platform=PLATFORM, overrides=["host.mlp=nan"])


def test_a_run_directory_reproduces_byte_for_byte(tmp_path: Path, random_trace: Path):
    # Issue 15 section 5: `-p runs/x/config.toml` was refused ("unknown key platform").
    first, again, by_dir = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    r = run_cli(
        "run",
        str(random_trace),
        "-p",
        PLATFORM,
        "--policy",
        "autonuma",
        "--param",
        'scan_period_min="10ms"',
        "--set",
        "os.daemon_time_scale=0.01",
        "--seed",
        "3",
        "-o",
        str(first),
    )
    assert r.returncode == 0, r.stderr
    r = run_cli("run", str(random_trace), "-p", str(first / "config.toml"), "-o", str(again))
    assert r.returncode == 0, r.stderr
    r = run_cli("run", str(random_trace), "-p", str(first), "-o", str(by_dir))
    assert r.returncode == 0, r.stderr
    for name in ("summary.json", "timeseries.parquet", "config.toml"):
        assert (first / name).read_bytes() == (again / name).read_bytes() == (by_dir / name).read_bytes(), name
    # Given again on the command line, a setting wins over the saved one.
    other = tmp_path / "d"
    r = run_cli("run", str(random_trace), "-p", str(first), "--seed", "4", "-o", str(other))
    assert r.returncode == 0, r.stderr
    assert "seed = 4" in (other / "config.toml").read_text()


def test_toml_syntax_error_names_file_line_and_column(tmp_path: Path, random_trace: Path):
    bad = tmp_path / "p.toml"
    bad.write_text('name = "x"\n[host]\ncpus = 4\nmlp = = 2\n')
    proc = run_cli("run", str(random_trace), "-p", str(bad), "-o", str(tmp_path / "o"))
    assert_user_error(proc, f"{bad}:4:7:", "(in `mlp = = 2`)")


def test_a_one_ns_epoch_is_coarsened_and_said(tmp_path: Path, random_trace: Path):
    # Issue 15 section 1: the legal stats.epoch=1ns grew a row per simulated ns (2.4 GB in 2 s).
    out = tmp_path / "r"
    r = run_cli(
        "run",
        str(random_trace),
        "-p",
        PLATFORM,
        "--set",
        'stats.epoch="1ns"',
        "--set",
        "stats.max_epochs=256",
        "-o",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    assert "coarsened: epoch 1 ns ->" in r.stdout
    import json

    import polars as pl

    summary = json.loads((out / "summary.json").read_text())
    assert summary["timeseries"]["coarsened"] is True and summary["timeseries"]["requested_epoch_ns"] == 1
    ts = pl.read_parquet(out / "timeseries.parquet")
    assert ts["epoch"].n_unique() <= 256
    assert ts.filter(pl.col("node") != "swap")["accesses"].sum() == summary["accesses"]


def test_small_edges(tmp_path: Path, random_trace: Path):
    # Issue 15 section 6. A FIFO given as a trace hung `trace inspect`.
    fifo = tmp_path / "f.trace"
    os.mkfifo(fifo)
    r = run_cli("trace", "inspect", str(fifo), timeout=60)
    assert_user_error(r, "not a regular file (a FIFO, socket or device)")
    # `gen -o` over a file that is not a trace is refused without --force.
    notes = tmp_path / "notes.txt"
    notes.write_text("precious\n")
    r = run_cli("gen", "random", "-o", str(notes), "--param", "accesses=1000")
    assert_user_error(r, "exists and is not a tiersim trace; refusing to overwrite it")
    assert notes.read_text() == "precious\n"
    r = run_cli("gen", "random", "-o", str(notes), "--param", "accesses=1000", "--force")
    assert r.returncode == 0, r.stderr
    assert tiersim.inspect(notes)["accesses"] == 1000
    # `trace sample -o` with the input's own path destroyed the input.
    before = random_trace.read_bytes()
    r = run_cli("trace", "sample", str(random_trace), "-o", str(random_trace), "--every", "2")
    assert_user_error(r, "is the input")
    assert random_trace.read_bytes() == before
