"""The committed WiredTiger traces (python/tiersim/workloads/traces/wiredtiger, made by
tiersim.studies.scm_vs_ssd_wt.capture_all on the Valgrind path): their file records against the
capture's own report, replayed with the files on fsdax PM and on the Optane SSD, with the costs
docs/model.md gives; and the scm_vs_ssd_wt study on them. No WiredTiger or Valgrind needed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import tiersim
from conftest import run_cli
from tiersim.studies import scm_vs_ssd_wt as wt

TRACE = wt.TRACES_DIR / "a_c1.trace"
REPORT = json.loads((wt.TRACES_DIR / "a_c1.json").read_text())
SYNCED = wt.TRACES_DIR / "a_c64_sync_t1.trace"


def test_every_capture_is_committed_with_its_report() -> None:
    for name, params in wt.CAPTURES.items():
        rep = json.loads((wt.TRACES_DIR / f"{name}.json").read_text())
        assert (wt.TRACES_DIR / f"{name}.trace").is_file() == (name not in wt.REPORT_ONLY)
        assert rep["path"] == wt.CAPTURE_PATH and rep["params"] | {**wt.COMMON, **params} == rep["params"]
        # The calibration loop was cut from every Valgrind trace, once, and the clients' phase
        # marker found after wiredtiger_open's records.
        assert rep["calibration_cut"] == wt.CALIBRATION_INSTRUCTIONS
        assert rep["run_phase_from"] > 10_000
        assert rep["fileio"]["sync_calls"]["fdatasync"] >= 1
    total = sum(p.stat().st_size for p in wt.TRACES_DIR.glob("*.trace"))
    assert total < 6 * 2**20


def test_the_trace_holds_the_calls_and_syncs_the_shim_saw() -> None:
    st = tiersim.trace_stats(TRACE, max_points=2)
    fio = REPORT["fileio"]
    assert st["by_kind"]["syscall"]["read_bytes"] == fio["bytes"]["read"] > 0
    assert st["by_kind"]["syscall"]["write_bytes"] == fio["bytes"]["write"] > 0
    assert st["sync_records"] == fio["sync_calls"]
    assert fio["sync_calls"]["fdatasync"] > 0 and fio["markers_missing"] == 0
    # One mapping record (or more for a long file) per file the program opened.
    assert st["mapping_records"] >= len(fio["files"])
    # trace inspect --io shows the calls' share and the syncs.
    r = run_cli("trace", "inspect", "--io", str(TRACE))
    assert r.returncode == 0, r.stderr
    assert "read/write calls (page cache)" in r.stdout and "fdatasync calls (sync records)" in r.stdout
    assert f"{fio['sync_calls']['fdatasync']:,}" in r.stdout


def _run(trace: Path, **overrides: object) -> dict:
    return tiersim.run(trace, platform="dram_only", overrides=overrides).summary


def test_replayed_on_fsdax_pm() -> None:
    st = tiersim.trace_stats(TRACE, max_points=2)
    calls = sum(st["by_kind"]["syscall"][k] for k in ("reads", "writes"))
    s = _run(TRACE, **wt.DAX)
    pc = s["page_cache"]
    # Every call goes to PMEM, none through the page cache, nothing to the block device.
    assert pc["dax"]["calls"] == calls and pc["read_calls"] == pc["write_calls"] == 0
    assert pc["dax"]["bytes"] >= st["by_kind"]["syscall"]["read_bytes"] + st["by_kind"]["syscall"]["write_bytes"]
    assert pc["hits"] == pc["misses"] == pc["dirtied_pages"] == 0
    # A call is at least the system call, VFS and extent lookup (800 ns) before its copy.
    assert pc["mean_call_ns"] > 800
    # An fdatasync on fsdax has nothing to write: the system call and storage.fsync, 2,100 ns
    # (less the part of a ns the call was issued into).
    n = st["sync_records"]["fsync"] + st["sync_records"]["fdatasync"]
    sync = pc["sync"]
    assert sync["fdatasync_calls"] + sync["fsync_calls"] == n
    assert sync["writeback_pages"] == 0 and 2099 * n <= sync["time_ns"] <= 2100 * n


def test_replayed_on_the_optane_ssd() -> None:
    st = tiersim.trace_stats(TRACE, max_points=2)
    s = _run(TRACE, **wt.SSD)
    pc = s["page_cache"]
    kinds = st["by_kind"]["syscall"]
    assert (pc["read_calls"], pc["write_calls"]) == (kinds["reads"], kinds["writes"])
    assert (pc["bytes_read"], pc["bytes_written"]) == (kinds["read_bytes"], kinds["write_bytes"])
    # What reached the SSD is what the page cache wrote back (by fsync and the flusher).
    assert s["swap"]["device"]["bytes_written"] == pc["writeback_bytes"] > 0
    assert pc["sync"]["writeback_pages"] * 4096 <= pc["writeback_bytes"]
    assert pc["sync"]["fdatasync_calls"] == st["sync_records"]["fdatasync"]
    # A sync that writes pages waits for at least the block path of one request (fs_map 400 +
    # block layer 1000 + driver 500 + interrupt 3000 + storage.fsync 2000 + the call 100 ns).
    assert pc["sync"]["requests"] > 0 and pc["sync"]["time_ns"] >= 7000
    # The same inputs give the same bytes.
    assert json.dumps(_run(TRACE, **wt.SSD), sort_keys=True) == json.dumps(s, sort_keys=True)


def test_a_commit_costs_more_on_the_ssd_than_on_fsdax() -> None:
    ssd, dax = _run(SYNCED, **wt.SSD), _run(SYNCED, **wt.DAX)
    per = [x["page_cache"]["sync"]["time_ns"] / x["page_cache"]["sync"]["fdatasync_calls"] for x in (ssd, dax)]
    # The SSD: a log page through the block layer, the device's write and the flush (> 10 us);
    # fsdax: the call and the flush.
    assert per[0] > 10_000 and 2099 <= per[1] <= 2100
    # One client: its commits wait one after another, so most of the syncs' difference is run
    # time (measured 8.0 of 10.0 ms; the closing checkpoint writes more slowly to fsdax PM).
    sync_gap = ssd["page_cache"]["sync"]["time_ns"] - dax["page_cache"]["sync"]["time_ns"]
    assert ssd["execution_time_ns"] - dax["execution_time_ns"] > 0.5 * sync_gap > 0


def test_the_study_runs_on_the_committed_traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(wt.ENV, raising=False)
    r = run_cli("reproduce", "scm_vs_ssd_wt", "--quick", "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    claims = json.loads((tmp_path / "out" / "claims.json").read_text())["claims"]
    assert len(claims) >= 15
    assert "committed traces" in (tmp_path / "out" / "report.html").read_text()


def test_a_missing_trace_directory_without_the_packages_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("valgrind") and Path("/usr/include/wiredtiger.h").exists():
        pytest.skip("the packages are installed: the study would capture")
    monkeypatch.setenv(wt.ENV, str(tmp_path / "mine"))
    r = run_cli("reproduce", "scm_vs_ssd_wt", "--quick", "-o", str(tmp_path / "out"))
    assert r.returncode == 1 and "make workloads" in r.stderr


@pytest.mark.skipif(
    not Path("/usr/include/wiredtiger.h").exists(), reason="libwiredtiger-dev missing: `make workloads`"
)
def test_a_tiny_capture_records_each_sync_and_preload_leaves_out_the_load(tmp_path: Path) -> None:
    from tiersim import workloads

    params = {"records": 2000, "ops": 400, "threads": 2, "log_file_max_mb": 1, "sync": True}
    full = workloads.capture_workload(
        "wiredtiger", tmp_path / "f.trace", path="instrumented", llc="1MiB", params=params
    )
    run = workloads.capture_workload(
        "wiredtiger", tmp_path / "r.trace", path="instrumented", llc="1MiB", params={**params, "preload": True}
    )
    for rep, trace in ((full, tmp_path / "f.trace"), (run, tmp_path / "r.trace")):
        st = tiersim.trace_stats(trace, max_points=2)
        # Every fsync and fdatasync the shim saw is a sync record; the synced commits (about half
        # the operations are updates, each a transaction with sync=true) are among them.
        assert st["sync_records"] == rep["fileio"]["sync_calls"]
        assert st["sync_records"]["fdatasync"] >= int(rep["program"]["updates"]) // 2
    # With preload the 2,000 inserts and their checkpoint happen before the capture: the trace
    # writes at least the table's 2,000 x 100 B of values less.
    assert run["fileio"]["bytes"]["write"] < full["fileio"]["bytes"]["write"] - 2000 * 100
