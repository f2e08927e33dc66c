"""Commands stopped by SIGTERM, SIGHUP or SIGINT (issue 15): every temporary they made is
removed, one line says so, and the exit status is 128 + the signal. Before, SIGTERM's default
action ended `tiersim capture` on the spot and left its `.tmpPID` trace files behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PLATFORM, tiersim_cmd

SRC = Path(__file__).resolve().parent / "capture" / "hashmap.c"

needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind missing: `make env` installs it")


@pytest.fixture(scope="module")
def hashmap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("prog") / "hashmap"
    subprocess.run(["gcc", "-O0", "-Wall", "-Werror", "-o", str(exe), str(SRC)], check=True)
    return exe


def _start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, COLUMNS="200", NO_COLOR="1")
    env.pop("TIERSIM_DEBUG", None)
    return subprocess.Popen(
        [*tiersim_cmd(), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(proc: subprocess.Popen[str], sig: int) -> tuple[str, str]:
    """Send `sig` and wait for the command to end (a command that ignored it would run on for
    many minutes and time out here); kill it whatever happens."""
    try:
        proc.send_signal(sig)
        return proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_for(cond, proc: subprocess.Popen[str], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"ended before {what}: {proc.communicate()}"
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"no {what} after {timeout} s: {proc.communicate()}")
        time.sleep(0.05)


@needs_valgrind
@pytest.mark.parametrize(
    ("sig", "message"),
    [
        (signal.SIGTERM, "interrupted: the program was killed and no trace was written"),
        (signal.SIGHUP, "interrupted: the program was killed and no trace was written"),
        (signal.SIGINT, "interrupted: the program was killed and no trace was written"),
    ],
)
def test_capture_stopped_by_a_signal_leaves_no_temporary(hashmap: Path, tmp_path: Path, sig: int, message: str):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    # 2M keys under Valgrind runs for minutes: the signal always lands mid-capture.
    proc = _start("capture", "-o", str(out_dir / "h.trace"), "--", str(hashmap), "2000000", cwd=tmp_path)
    # The writers open their `.tmpPID` files when the filter starts (lackey), tiersim's Valgrind
    # tool its record directory: that is the moment the default action used to strand them.
    _wait_for(
        lambda: any(".tmp" in p.name or p.name.startswith(".tiersim-capture-") for p in out_dir.iterdir()),
        proc,
        "temporary trace file",
    )
    time.sleep(0.5)
    stdout, stderr = _stop(proc, sig)
    assert proc.returncode == 128 + sig, stderr
    assert sorted(p.name for p in out_dir.iterdir()) == []
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines == [f"error: {message}"], stderr
    assert "Traceback" not in stderr


@needs_valgrind
def test_workload_capture_stopped_by_sigint_says_so(tmp_path: Path):
    # Ctrl-C reached click as a KeyboardInterrupt, which ended the command with status 130 and
    # not a word; it now takes the way of SIGTERM and SIGHUP.
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = _start("workload", "capture", "bfs", "-o", str(out_dir / "b.trace"), "--param", "scale=19", cwd=tmp_path)
    _wait_for(lambda: any(out_dir.iterdir()), proc, "the capture's temporary directory")
    time.sleep(1)
    stdout, stderr = _stop(proc, signal.SIGINT)
    assert proc.returncode == 128 + signal.SIGINT, stderr
    assert stderr.strip().splitlines()[-1] == "error: stopped by SIGINT; outputs not finished were removed", stderr
    assert sorted(p.name for p in out_dir.iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_run_stopped_by_a_signal_writes_nothing(tmp_path: Path, sig: int):
    # A billion generated accesses: the run cannot end before the signal. stderr is a pipe, so
    # no bar is drawn; the native side still checks for signals every 2^18 accesses.
    proc = _start(
        "run", "--gen", "random", "--gen-param", "accesses=1000000000", "--gen-param", "footprint=64MiB",
        "-p", PLATFORM, "-o", str(tmp_path / "run"), cwd=tmp_path,
    )  # fmt: skip
    time.sleep(4)
    assert proc.poll() is None, proc.communicate()
    stdout, stderr = _stop(proc, sig)
    assert proc.returncode == 128 + sig, stderr
    assert stderr.strip() == "interrupted: nothing was written", stderr
    assert stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_signal_the_parent_ignores_stays_ignored(tmp_path: Path):
    # nohup ignores SIGHUP, and a script's `cmd &` SIGINT: tiersim must not take them back.
    proc = subprocess.Popen(
        ["nohup", *tiersim_cmd(), "run", "--gen", "random", "--gen-param", "accesses=1000000000",
         "--gen-param", "footprint=64MiB", "-p", PLATFORM, "-o", str(tmp_path / "run")],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(4)
        proc.send_signal(signal.SIGHUP)
        time.sleep(2)
        assert proc.poll() is None, proc.communicate()
    finally:
        stdout, stderr = _stop(proc, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM, stderr


SWEEP = """
[sweep]
platforms = ["epyc_cxl_nps1"]
seeds = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
[[trace]]
label = "rand"
gen = "random"
params = { accesses = 300000, footprint = "16MiB", threads = 2 }
[[policy]]
name = "linux_default"
"""


def test_sweep_stopped_by_sigterm_keeps_finished_runs_and_no_temporary(tmp_path: Path):
    spec = tmp_path / "s.toml"
    spec.write_text(SWEEP)
    out = tmp_path / "sw"
    proc = _start("sweep", str(spec), "-o", str(out), "-j", "2", cwd=tmp_path)
    parts = out / "parts"
    _wait_for(lambda: parts.is_dir() and any(p.suffix == ".parquet" for p in parts.iterdir()), proc, "a finished run")
    stdout, stderr = _stop(proc, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert (
        stderr.strip().splitlines()[-1] == "interrupted; finished runs are saved. Run the same command again to resume."
    )
    assert "Traceback" not in stderr
    left = [p for sub in ("parts", "runs", "trace-cache") for p in (out / sub).glob(".*.tmp*")]
    assert left == [], left
    done = len(list(parts.glob("*.parquet")))
    assert 1 <= done < 20, done
    # The same command resumes and runs only what is missing.
    again = subprocess.run(
        [*tiersim_cmd(), "sweep", str(spec), "-o", str(out), "-j", "2"], capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr
    assert f"{done} of 20 runs already done" in again.stderr, again.stderr
