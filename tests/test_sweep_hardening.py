"""Issue 15 section 3: a sweep directory loses nothing and never clashes. Corrupt part files are
quarantined and their runs redone, a second sweep of a directory is refused naming the holder,
workers die with their driver, runs failed by the environment are redone, a moved directory
still reports and resumes."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest
import tiersim
from conftest import run_cli, tiersim_cmd
from tiersim import sweep as sw

SMALL = """
[sweep]
platforms = ["epyc_cxl_nps1"]
seeds = [1, 2]
set = {{ scale = 0.0001 }}

[[trace]]
label = "rand"
gen = "random"
params = {{ accesses = {accesses}, footprint = "8MiB", threads = 2 }}

[[policy]]
name = "linux_default"
"""


def spec(tmp_path: Path, accesses: int = 20_000) -> Path:
    p = tmp_path / "small.toml"
    p.write_text(SMALL.format(accesses=accesses))
    return p


def test_a_truncated_part_is_quarantined_and_its_run_redone(tmp_path: Path):
    out = tmp_path / "out"
    first = sw.run_sweep(spec(tmp_path), out, workers=1)
    assert (first.ok, first.failed) == (2, 0)
    parts = sorted((out / sw.PARTS_DIR).glob("*.parquet"))
    victim = parts[0]
    victim.write_bytes(victim.read_bytes()[:100])
    # Before: `sweep report` and every later sweep ended in a Python traceback.
    r = run_cli("report", str(out), "-o", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert f"warning: corrupt sweep part {victim}" in r.stderr and "its run will be redone" in r.stderr
    assert not victim.exists()
    assert len(list((out / sw.QUARANTINE_DIR).iterdir())) == 1
    again = sw.run_sweep(spec(tmp_path), out, workers=1)
    assert (again.skipped, again.ok) == (1, 1)
    assert victim.exists() and again.results.height == 2


def test_a_second_sweep_of_a_directory_is_refused_naming_the_holder(tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    with sw.sweep_lock(out):
        with pytest.raises(tiersim.TiersimError, match=f"is in use by pid {os.getpid()} on "):
            sw.run_sweep(spec(tmp_path), out, workers=1)
    # Released with its holder: the sweep now runs.
    assert sw.run_sweep(spec(tmp_path), out, workers=1).ok == 2


def _children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_workers_die_with_their_driver(tmp_path: Path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*tiersim_cmd(), "sweep", str(spec(tmp_path, accesses=3_000_000)), "-o", str(out), "-j", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        workers: list[int] = []
        while time.monotonic() < deadline and len(workers) < 2:
            # The spawn context's resource tracker is a child too; the workers are the others.
            workers = [
                k for k in _children(proc.pid) if "resource_tracker" not in Path(f"/proc/{k}/cmdline").read_text()
            ]
            time.sleep(0.05)
        assert len(workers) >= 2, workers
        time.sleep(1.0)  # past the workers' start-up, into their runs
        proc.send_signal(signal.SIGKILL)  # the driver only, not its process group
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.05)
        assert not [w for w in workers if _alive(w)], "orphaned workers still run"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# Module level, so the spawned workers import it: seed 2 finds the disk full.
def disk_full_runner(task: sw.RunTask) -> tiersim.RunResult:
    if task.run.seed == 2:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/full/disk/summary.json")
    return sw.run_task(task)


def test_runs_failed_by_the_environment_are_redone_without_retry_failed(tmp_path: Path):
    out = tmp_path / "out"
    first = sw.run_sweep(spec(tmp_path), out, workers=1, runner=disk_full_runner)
    assert (first.ok, first.failed) == (1, 1)
    assert "No space left on device" in first.failures[0][1]
    again = sw.run_sweep(spec(tmp_path), out, workers=1)
    assert (again.skipped, again.ok, again.failed) == (1, 1, 0)


def test_a_moved_sweep_directory_reports_and_resumes(tmp_path: Path):
    out = tmp_path / "out"
    assert sw.run_sweep(spec(tmp_path), out, workers=1).ok == 2
    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.move(out, moved)
    r = run_cli("report", str(moved), "-o", str(tmp_path / "m.html"))
    assert r.returncode == 0, r.stderr
    resumed = sw.run_sweep(spec(tmp_path), moved, workers=1)
    assert (resumed.skipped, resumed.ok) == (2, 0)
    df = pl.read_parquet(moved / sw.RESULTS_FILE)
    for col in df.columns:
        if df[col].dtype == pl.Utf8:
            assert not any(str(tmp_path) in (v or "") for v in df[col].to_list()), col
