"""What a terminal user sees of a run: the progress callback of the native run, the progress bar
of `tiersim run`, and the memory-node table on an 80-column terminal (figures never cut)."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import signal
import subprocess
from pathlib import Path

import polars as pl
import pytest
import tiersim
from conftest import PLATFORM, tiersim_cmd
from rich.console import Console
from tiersim.cli.run import _summary_tables

EVERY = 1 << 18  # PROGRESS_EVERY of the trace crate
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("long") / "long.trace"
    tiersim.generate("random", path, seed=3, accesses=600_000, footprint="4MiB", threads=2)
    return path


def test_progress_reports_every_interval_with_the_header_total(long_trace: Path) -> None:
    seen: list[tuple[int, int | None]] = []
    r = tiersim.run(long_trace, platform=PLATFORM, progress=lambda done, total: seen.append((done, total)))
    # Start, each 2^18 accesses read, and the end; the total is the trace header's count.
    assert seen == [(0, 600_000), (EVERY, 600_000), (2 * EVERY, 600_000), (600_000, 600_000)]
    assert r.summary["trace_accesses"] == 600_000
    # Reporting does not change the result.
    assert r.summary == tiersim.run(long_trace, platform=PLATFORM).summary


def test_progress_of_a_generator_has_no_total() -> None:
    seen: list[tuple[int, int | None]] = []
    tiersim.run(
        platform=PLATFORM,
        generator="random",
        generator_params={"accesses": 300_000, "footprint": "4MiB"},
        progress=lambda done, total: seen.append((done, total)),
    )
    assert seen == [(0, None), (EVERY, None), (300_000, None)]


def test_an_exception_in_the_progress_callback_stops_the_run_unchanged(long_trace: Path) -> None:
    class Stop(Exception):
        pass

    calls = []

    def stop(done: int, total: int | None) -> None:
        calls.append(done)
        if done >= EVERY:
            raise Stop(f"stopped at {done}")

    with pytest.raises(Stop, match=f"stopped at {EVERY}"):
        tiersim.run(long_trace, platform=PLATFORM, progress=stop)
    assert calls == [0, EVERY]


def test_keyboard_interrupt_and_a_bad_callback_reach_python_as_themselves(long_trace: Path) -> None:
    def interrupt(done: int, total: int | None) -> None:
        if done:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tiersim.run(long_trace, platform=PLATFORM, progress=interrupt)
    with pytest.raises(TypeError, match="not callable"):
        tiersim.run(long_trace, platform=PLATFORM, progress=5)  # type: ignore[arg-type]


def _node_summary(accesses: int) -> dict:
    gib = 1 << 30
    return {
        "platform": PLATFORM,
        "policy": "linux_default",
        "trace": "big.trace",
        "seed": 0,
        "execution_time_ns": 135_000_000,
        "accesses": accesses,
        "reads": accesses - accesses // 3,
        "writes": accesses // 3,
        "page_size": 4096,
        "latency_ns": {"p50": 112.0, "p99": 250.0, "mean": 130.5, "max": 4000.0},
        "nodes": [
            {
                "name": "dram0",
                "device": "dram",
                "tier": 0,
                "accesses": accesses,
                "bytes": accesses * 64,
                "bandwidth_gbs": 14.46,
                "capacity_bytes": 768 * gib,
                "capacity_pages": 201_326_592,
                "final_pages": 7_340_032,
            },
            {
                "name": "cxl0",
                "device": "cxl",
                "tier": 1,
                "accesses": 0,
                "bytes": 0,
                "bandwidth_gbs": 0.0,
                "capacity_bytes": 1024 * gib,
                "capacity_pages": 268_435_456,
                "final_pages": 0,
            },
        ],
    }


def _render(summary: dict, width: int) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False)
    result = tiersim.RunResult(summary=summary, config="", timeseries=pl.DataFrame())
    for table in _summary_tables(result, console):
        console.print(table)
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined]


def test_node_table_fits_80_columns_without_cutting_figures() -> None:
    lines = _render(_node_summary(30_000_000), 80)
    text = "\n".join(lines)
    assert max(len(line) for line in lines) <= 80
    assert "…" not in text
    for figure in ("30,000,000", "100.0%", "1.79 GiB", "14.46", "7,340,032 /", "201,326,592", "268,435,456"):
        assert figure in text, figure
    # The compact form: the unit moves to the header, final pages sit above the capacity.
    assert "GB/s" in text and "14.46 GB/s" not in text
    row = next(line for line in lines if line.lstrip().startswith("dram0"))
    assert row.rstrip().endswith("7,340,032 /")


def test_node_table_keeps_its_wide_form_when_it_fits() -> None:
    lines = _render(_node_summary(30_000_000), 160)
    text = "\n".join(lines)
    assert "final pages / capacity" in text
    assert "14.46 GB/s" in text
    row = next(line for line in lines if line.lstrip().startswith("dram0"))
    assert row.rstrip().endswith("7,340,032 / 201,326,592")


def _run_in_terminal(args: list[str], columns: int, interrupt_at: str | None = None, status: int = 0) -> str:
    """Run the CLI with stdout and stderr on a pseudo-terminal of `columns` columns; with
    `interrupt_at` (a regular expression), send SIGINT once text matching it has appeared."""
    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS=str(columns), LINES="40", TERM="xterm")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([*tiersim_cmd(), *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            proc.kill()
            raise AssertionError("the CLI stopped writing for 120 s")
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
        if interrupt_at is not None and re.search(
            interrupt_at, ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))
        ):
            proc.send_signal(signal.SIGINT)
            interrupt_at = None
    os.close(master)
    assert proc.wait(timeout=60) == status
    return b"".join(chunks).decode("utf-8", "replace")


def test_run_on_an_80_column_terminal(long_trace: Path, tmp_path: Path) -> None:
    raw = _run_in_terminal(["run", str(long_trace), "-p", PLATFORM, "-o", str(tmp_path / "run")], 80)
    frames = [ANSI.sub("", f) for f in re.split(r"[\r\n]", raw)]
    # The progress bar's last frame: every access of the header's total, a rate, no time left.
    last = [f for f in frames if "of 600.0k accesses" in f]
    assert last, "no progress frame with the trace's total"
    assert "600.0k of 600.0k accesses" in last[-1]
    assert re.search(r"[0-9.]+[kMG]?/s 0:00:00", last[-1])
    # The run directory's path is printed whole, so it can be copied: only it may pass 80 columns
    # (pytest's temporary paths do once its counter reaches three digits).
    assert max(len(f) for f in frames if not f.startswith("run directory: ")) <= 80
    # The tables after it: no figure cut (only the bar's description may give way).
    tables = "\n".join(f for f in frames if " accesses " not in f or " of " not in f)
    assert "600,000" in tables and "268,435,456" in tables and "…" not in tables


def test_ctrl_c_stops_a_long_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["run", "--gen", "random", "--gen-param", "accesses=200000000", "-p", PLATFORM, "-o", str(out)]
    raw = _run_in_terminal(args, 80, interrupt_at=r"[0-9.]+[kM] of \? accesses", status=130)
    text = ANSI.sub("", raw)
    assert "interrupted: nothing was written" in text
    assert "Traceback" not in text
    assert not out.exists()


def test_flash_replay_progress_counts_the_replay_pass(long_trace: Path) -> None:
    seen: list[tuple[int, int | None]] = []
    r = tiersim.flash_replay(
        long_trace, preset="cxl_flash_slc", progress=lambda done, total: seen.append((done, total))
    )
    assert seen == [(0, 600_000), (EVERY, 600_000), (2 * EVERY, 600_000), (600_000, 600_000)]
    assert r.summary["replay"]["trace_accesses"] == 600_000
    assert r.summary == tiersim.flash_replay(long_trace, preset="cxl_flash_slc").summary


def test_flash_replay_bar_on_a_terminal_stops_at_the_limit(long_trace: Path) -> None:
    raw = _run_in_terminal(["flash", "replay", str(long_trace), "--preset", "cxl_flash_slc", "--limit", "300000"], 80)
    frames = [ANSI.sub("", f) for f in re.split(r"[\r\n]", raw)]
    bar = [f for f in frames if " of 300.0k accesses" in f]
    assert bar, "no progress frame with the limit as the total"
    assert max(len(f) for f in frames) <= 80
    assert "300,000 trace accesses" in "\n".join(frames)
