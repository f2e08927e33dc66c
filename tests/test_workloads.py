"""`tiersim workload`: tiny captures of the real programs (tiersim.workloads), their file records
checked against the file I/O shim's own log, their threads and footprints against what the
programs report; and the bad inputs (an unknown workload, a missing package, a failing program).
The Valgrind-path capture of redis-server takes about 20 s; db_bench's takes minutes and is
marked slow."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import tiersim
from conftest import run_cli
from tiersim import TiersimError, workloads

needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind missing: `make env`")
needs_wt = pytest.mark.skipif(
    not Path("/usr/include/wiredtiger.h").exists(), reason="libwiredtiger-dev missing: `make workloads`"
)


def busy_cpus(info: dict) -> int:
    return sum(1 for c in info["per_cpu"] if (c["accesses"] if isinstance(c, dict) else c))


def test_unknown_workload_lists_the_valid_ones(tmp_path: Path) -> None:
    r = run_cli("workload", "capture", "mongodb", "-o", str(tmp_path / "x.trace"))
    assert r.returncode == 1
    assert "unknown workload 'mongodb'; valid: bfs, redis, rocksdb, wiredtiger" in r.stderr
    assert not (tmp_path / "x.trace").exists()


def test_missing_package_names_the_make_target(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    r = workloads.RECIPES["rocksdb"]
    monkeypatch.setattr(r, "needs", (("/nonexistent/db_bench", "rocksdb-tools"),))
    with pytest.raises(TiersimError, match=r"Debian package rocksdb-tools\); `make workloads` installs it"):
        workloads.capture_workload("rocksdb", tmp_path / "r.trace")
    assert not (tmp_path / "r.trace").exists()


def test_unknown_parameter_lists_the_valid_ones() -> None:
    with pytest.raises(TiersimError, match="no parameter 'keys'; valid: scale, edgefactor, roots, threads, seed"):
        workloads.resolve(workloads.get("bfs"), {"keys": 3})


@needs_wt
def test_failing_program_gives_status_and_stderr_and_no_trace(tmp_path: Path) -> None:
    out = tmp_path / "wt.trace"
    with pytest.raises(TiersimError) as exc:
        workloads.capture_workload("wiredtiger", out, path="instrumented", params={"ycsb": "z"})
    msg = str(exc.value)
    assert "wt_driver" in msg and "exited with status 2" in msg and "usage: wt_driver DIR RECORDS" in msg
    assert not out.exists()
    assert not list(tmp_path.iterdir())


@needs_wt
def test_wiredtiger_tiny_capture_has_threads_files_and_footprint(tmp_path: Path) -> None:
    out = tmp_path / "wt.trace"
    rep = workloads.capture_workload(
        "wiredtiger",
        out,
        path="instrumented",
        llc="1MiB",
        params={"records": 2000, "ops": 2000, "threads": 4, "log_file_max_mb": 1},
    )
    prog = rep["program"]
    assert prog["reads"] != "0" and int(prog["reads"]) + int(prog["updates"]) >= 2000
    info = tiersim.inspect(out)
    # The main thread, the four clients and WiredTiger's own threads (eviction, log, sweep).
    assert busy_cpus(info) >= 6
    fio = rep["fileio"]
    assert fio["markers_missing"] == 0
    names = {Path(p).name for p in fio["files"]}
    # A log file is created as WiredTigerTmplog or WiredTigerPreplog and renamed; files are
    # told apart by inode and named by their first path.
    assert {"ycsb.wt", "WiredTiger.wt"} <= names
    assert any(n.startswith(("WiredTigerTmplog", "WiredTigerPreplog", "WiredTigerLog")) for n in names), names
    # Every byte the shim saw move is in the trace's call records, and nothing else is.
    kinds = tiersim.trace_stats(out, max_points=2)["by_kind"]
    assert kinds["syscall"]["read_bytes"] == fio["bytes"]["read"] > 0
    assert kinds["syscall"]["write_bytes"] == fio["bytes"]["write"] > 0
    assert kinds["direct"]["reads"] == kinds["direct"]["writes"] == 0
    # The engine's cache holds what it reported in use; the trace touches at least that, and
    # not more than its 1 MiB cache plus a few MiB of log buffers, the driver and libc.
    inuse = int(prog["cache_bytes_inuse"])
    assert inuse <= info["footprint_bytes"] <= int(prog["cache_bytes_max"]) + 8 * 2**20


def test_bfs_capture_threads_footprint_and_repeatability(tmp_path: Path) -> None:
    rep = workloads.capture_workload("bfs", tmp_path / "b.trace", params={"scale": 12, "threads": 2})
    info = tiersim.inspect(tmp_path / "b.trace")
    assert busy_cpus(info) == 2
    data = int(rep["program"]["data_bytes"])
    assert rep["program"]["edges"] == str(16 * 4096)
    # The arrays the program allocated, in pages, plus a little stack and libc.
    assert 0.9 * data <= info["footprint_bytes"] <= 1.1 * data
    assert rep["fileio"]["calls_in_trace"]["R"] == 0
    one = [tmp_path / f"one{i}.trace" for i in range(2)]
    for t in one:
        workloads.capture_workload("bfs", t, params={"scale": 10, "threads": 1})
    assert one[0].read_bytes() == one[1].read_bytes()


@needs_valgrind
@pytest.mark.parametrize("name", [pytest.param("rocksdb", marks=pytest.mark.slow), "redis"])
def test_packaged_program_tiny_capture(name: str, tmp_path: Path) -> None:
    params = (
        {"num": 500, "reads": 500, "write_buffer_size": 16384}
        if name == "rocksdb"
        else {"requests": 200, "keyspace": 1000, "tests": "set,get"}
    )
    out = tmp_path / f"{name}.trace"
    rep = workloads.capture_workload(name, out, llc="1MiB", params=params)
    info = tiersim.inspect(out)
    kinds = tiersim.trace_stats(out, max_points=2)["by_kind"]
    assert kinds["syscall"]["write_bytes"] == rep["fileio"]["bytes"]["write"] > 0
    assert busy_cpus(info) >= 2
    if name == "redis":
        used = rep["client"]["used_memory"]
        assert used <= info["footprint_bytes"] <= 4 * rep["client"]["used_memory_rss"]
