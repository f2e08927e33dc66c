"""scm_vs_ssd_wt: seed 001's findings ("We replaced an SSD with storage class memory", MongoDB
engineering blog, 2020) on the real storage engine: WiredTiger 3.2.1 under our YCSB driver,
captured on the Valgrind path with its file I/O (`tiersim workload capture wiredtiger`, which sees
the engine's own B-tree accesses and every read, write and fdatasync of its files) and replayed by
`tiersim run` with the files on the Optane SSD, on one PM module as a block device through the
page cache (the blog's 0.6 GB/s write rate, as `scm_vs_ssd` uses), on two such modules, and on
fsdax PM; warm and cold page cache, engine cache small and large, log on and off, commits synced
or not, 1 and 8 client threads, and read-only clients on checkpoint cursors, by pread or through
the mapping WiredTiger makes for them with mmap on (finding 1c). Every finding is then judged
again at six SSD device latencies (`_ssd_latency_sweep`), to show which of them hang on it.

By default the study replays the traces committed under python/tiersim/workloads/traces/wiredtiger
(made by `capture_all`, whose commands docs/reproduce.md lists), so it needs neither WiredTiger nor
Valgrind and repeats byte for byte; with TIERSIM_WT_TRACES=DIR it replays the traces in DIR,
capturing the missing ones there first (`make workloads` installs what that needs).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

import tiersim
from tiersim._native import TiersimError
from tiersim.studies import Claim, Study, StudyResult
from tiersim.studies.scm_vs_ssd import BLOG_DIMM
from tiersim.workloads._fileio import files_matching

TRACES_DIR = Path(__file__).resolve().parent.parent / "workloads" / "traces" / "wiredtiger"
ENV = "TIERSIM_WT_TRACES"

#: Finding 6c's captures: five of one recipe (below), judged on their median.
GROUP_COMMIT_RUNS = tuple(f"u_c64_sync_t8{suffix}" for suffix in ("", "_2", "_3", "_4", "_5"))
#: The captures: name -> the recipe's parameters beyond COMMON. All YCSB-A (50 % updates) except
#: the c_ ones (reads only) and the u_ ones (updates only); "c1"/"c64" is the engine's cache_size
#: in MiB (the 10,000-record table takes about 2.5 MiB in the engine's memory: a 1 MiB cache is
#: seed 001's table larger than the cache, 64 MiB holds it); t1 one client thread, else 8 (seed
#: 001: "at least a dozen"); sync: each run-phase operation commits with its log record fdatasynced.
#: checkpoints: one from a thread of its own, begun when the clients are half way (wtperf's
#: checkpoint thread, or MongoDB's checkpoint=(wait=60) server: a wtperf run's checkpoints happen
#: in the background of its run phase; not the 30-120 of a 300-7200 s run, which at 4,000
#: operations would checkpoint every few dozen).
COMMON: dict[str, Any] = {"records": 10000, "log_file_max_mb": 4, "preload": True, "checkpoints": 1}
CAPTURES: dict[str, dict[str, Any]] = {
    "a_c1": {"ops": 4000, "threads": 8, "cache_mb": 1},
    # Findings 4a, 4b and 7 (wtperf's runs of minutes): 10x the operations of the others, so that the
    # clients' first reads of the table are not most of the run (at 4,000 operations they were a third
    # of the SSD's; measured on captures of 10,000-80,000 operations, docs/reproduce.md).
    "a_c64": {"ops": 40000, "threads": 8, "cache_mb": 64},
    "a_c64_sync_t1": {"ops": 1000, "threads": 1, "cache_mb": 64, "sync": True},
    "a_c64_sync_t8": {"ops": 1000, "threads": 8, "cache_mb": 64, "sync": True},
    # Findings 6b and 6c, the commits' own cost: every operation an update whose commit syncs the log
    # (wtperf's update-only threads, as its log.wtperf runs them, with sync=true). In YCSB-A half the
    # operations are reads that commit nothing; the a_c64_sync runs give that mix's figures beside.
    # With 8 threads which commits share a sync follows the capture's schedule (Valgrind runs one
    # thread at a time), and the replays' ratio moves with it: five captures of the one recipe,
    # 6c judged on their median.
    "u_c64_sync_t1": {"ops": 1000, "threads": 1, "cache_mb": 64, "sync": True, "ycsb": "u"},
    **{name: {"ops": 1000, "threads": 8, "cache_mb": 64, "sync": True, "ycsb": "u"} for name in GROUP_COMMIT_RUNS},
    "c_c1": {"ops": 4000, "threads": 8, "cache_mb": 1, "ycsb": "c"},
    "a_c1_nolog": {"ops": 4000, "threads": 8, "cache_mb": 1, "log": False},
    "a_c1_t1": {"ops": 4000, "threads": 1, "cache_mb": 1},
    "a_c1_mmap": {"ops": 4000, "threads": 8, "cache_mb": 1, "mmap": True},
    # Finding 1c: YCSB-C on cursors opened on the last checkpoint, read-only objects, which
    # WiredTiger 3.x maps into memory when mmap is on (docs "tune_read_only"; block_mgr.c
    # __bm_checkpoint_load -> __wt_block_map), and reads by pread when it is off. The sizes of c_c1.
    "c_c1_ckpt": {"ops": 4000, "threads": 8, "cache_mb": 1, "ycsb": "c", "read_checkpoint": True},
    "c_c1_ckpt_mmap": {"ops": 4000, "threads": 8, "cache_mb": 1, "ycsb": "c", "read_checkpoint": True, "mmap": True},
}
#: Captures whose report is all the study reads (a_c1_mmap: that WiredTiger maps nothing for the
#: ordinary cursors that can write); their traces are not kept.
REPORT_ONLY = {"a_c1_mmap"}
CAPTURE_PATH = "valgrind"
LLC = "1MiB"

#: WiredTiger 3.2.1's wiredtiger_open calibrates its tick counter with a busy loop
#: (__global_calibrate_ticks): 1.8 G instructions on the opening thread with no memory traffic
#: past the LLC, so the Valgrind capture makes it one instruction gap. Natively it takes about
#: 0.6 s, more than every replay's I/O together, and says nothing about storage: `cut_calibration`
#: takes it out of the gap that holds it.
CALIBRATION_INSTRUCTIONS = 1_800_000_000

#: Through the page cache, the same files: a write of part of a page not cached reads it from the
#: device first only where the file holds data, below its size when the program opened it (the
#: trace's file size records) or where the trace has written since; a hole ext4 zeroes instead
#: (`storage.cache_new_pages = "size_at_open"`, docs/model.md): WiredTiger's log files are created
#: in the trace and its appends reach their pages first, often in part.
NEW_PAGES = {"storage.cache_new_pages": "size_at_open"}
SSD = {"swap.preset": "optane_ssd", **NEW_PAGES}
PM = {"swap.preset": "optane_100", **{f"swap.params.{k}": v for k, v in BLOG_DIMM.items()}, **NEW_PAGES}
#: Two modules striped into one block device (the blog's device-mapper stripe): reads at twice a
#: module's media rate, writes at the blog's "nearly 1 GB/s" for two.
PM2 = {**PM, "swap.params.media_read_bandwidth": "13.2GB/s", "swap.params.media_write_bandwidth": "1.0GB/s"}
#: fsdax: WiredTiger's files grow in the trace (its log files are created there, its block manager
#: extends the table), and a DAX write into a hole allocates zeroed blocks and a journal commit
#: (`storage.dax_new_blocks`, docs/model.md): a block wholly past its file's size when the program
#: opened it (the trace's file size records) that no write call has written yet; in a trace
#: without sizes, a block past the highest byte the trace has read or written in its file.
DAX = {
    "dax.preset": "optane_100",
    **{f"dax.params.{k}": v for k, v in BLOG_DIMM.items()},
    "storage.dax_new_blocks": "size_at_open",
}
#: WiredTiger's log files: WiredTigerLog.N, and the preallocated WiredTigerTmplog.N / Preplog.N
#: that become them (log.c renames a preallocated file when it switches to it; the trace knows a
#: file by the name it was opened with).
LOG_FILES = "WiredTiger*[Ll]og.*"
#: The log on fsdax PM, the table and every other file on the SSD through the page cache (seed
#: 001's closing point: PM for the log, as the literature it cites uses it): `dax.files` lists the
#: log files, by where the trace puts them (`Replays.run`), docs/model.md "Files on two devices".
LOG_PM = {**SSD, **DAX}
DEVICES = {"ssd": SSD, "pm": PM, "pm2": PM2, "fsdax": DAX, "log_pm": LOG_PM}
WARM = {"os.files_start_cached": True}
#: The SSD's device latency, read and write alike, in the sweep that shows which findings hang on
#: it (`_ssd_latency_sweep`): the preset's 10 us (P4800X-class, the study's) up to the blog's
#: 100-200 us block read.
SSD_LATENCIES = ("10us", "20us", "30us", "50us", "100us", "200us")
#: The raw device read of finding 2b and of the latency sweep: 8 KiB blocks of a 1 GiB file.
RAW_READ: dict[str, Any] = {"file_size": "1GiB", "block_size": "8KiB", "workload": "read"}
#: The findings' short names, in the claims' order, each opening its finding (docs/reproduce.md's table).
LABELS = ("1a", "1b", "1c", "2a", "2b", "2c", "3", "4a", "4b", "4c", "5", "6a", "6b", "6c", "6d", "7", "8")
#: A page cache small enough for a short run's writes to pass vm.dirty_ratio (wtperf's
#: evict-btree-1 runs for minutes): 64 MiB of DRAM, dirty limits of 1 % and 2 %.
SMALL_PC: dict[str, Any] = {"scale": 1 / 4096, "os.dirty_background_ratio": 1, "os.dirty_ratio": 2}
PLATFORM = "dram_only"
#: Each thread starts where the program created it: its first record is issued only once the
#: record before it in the file is done (`host.thread_start`, docs/platform.md), so the clients,
#: created after the first phase marker, start after it in the replay, not beside wiredtiger_open;
#: and measuring starts at the marker record's own issue.
THREADS = {"host.thread_start": "file_order"}


def cut_calibration(src: Path, dst: Path, marker: int | None = None) -> tuple[int, int, int]:
    """Write `src` to `dst` with CALIBRATION_INSTRUCTIONS taken out of the one instruction gap
    that holds them (the first gap of at least that many). Returns how many were cut (0 if no
    gap is that long, e.g. an instrumented-path trace, which counts no instructions there) and
    the numbers of records before the first and the second sync record at address `marker` (the
    driver's phase markers at the clients' start and end; 0 for one not found)."""
    with tempfile.TemporaryDirectory(prefix=".tiersim-wt-", dir=dst.parent) as tmp:
        a, b = Path(tmp) / "a.csv", Path(tmp) / "b.csv"
        tiersim.convert(src, a, dst_format="csv")
        cut = 0
        at = f",{marker:#x},1,11\n" if marker is not None else None
        found: list[int] = []
        with open(a) as fi, open(b, "w") as fo:
            fo.write(fi.readline())
            fo.write(fi.readline())
            for n, line in enumerate(fi):
                if at is not None and len(found) < 2 and line.endswith(at):
                    found.append(n)
                if not cut:
                    t, rest = line.split(",", 1)
                    if int(t) >= CALIBRATION_INSTRUCTIONS:
                        cut = CALIBRATION_INSTRUCTIONS
                        line = f"{int(t) - cut},{rest}"
                fo.write(line)
        tiersim.convert(b, dst, dst_format="native", src_format="csv")
    found += [0] * (2 - len(found))
    return cut, found[0], found[1]


def _marker_address(files: Mapping[str, int]) -> int | None:
    """The address of the phase marker file, as workloads/_fileio.py lays the files out: one
    2 MiB-aligned region each from FILE_BASE, in the order the program first opened them (the
    report's `files`)."""
    from tiersim.workloads._fileio import FILE_BASE, MAP_UNIT, REGION_ALIGN

    at = FILE_BASE
    for path, extent in files.items():
        if Path(path).name == "tiersim_phase":
            return at
        at += -(-max(extent, MAP_UNIT) // REGION_ALIGN) * REGION_ALIGN
    return None


#: Captures committed without the waits between threads (futex records), as they were made before
#: the WiredTiger recipe logged them and are captured again (a_c1 since issue 34's file sizes):
#: with the waits the clients' waits on eviction with the 1 MiB engine cache move several
#: findings far, which have not been examined finding by finding (docs/reproduce.md).
WITHOUT_WAITS = {"a_c1", "a_c1_mmap", "a_c1_nolog", "a_c1_t1", "c_c1", "c_c1_ckpt", "c_c1_ckpt_mmap"}


def capture_all(directory: Path, names: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Capture the study's traces into `directory` (each NAME.trace with the calibration cut and
    NAME.json, the capture's report). Needs `make workloads` and Valgrind; minutes."""
    from tiersim.workloads import capture_workload, save_report

    directory.mkdir(parents=True, exist_ok=True)
    reports = {}
    for name in names or list(CAPTURES):
        raw = directory / f"{name}.raw.trace"
        rep = capture_workload(
            "wiredtiger",
            raw,
            params={**COMMON, **CAPTURES[name]},
            path=CAPTURE_PATH,
            llc=LLC,
            waits=False if name in WITHOUT_WAITS else None,
        )
        marker = _marker_address(rep["fileio"]["files"])
        cut, start, end = cut_calibration(raw, directory / f"{name}.trace", marker)
        rep["calibration_cut"], rep["run_phase_from"], rep["run_phase_to"] = cut, start, end
        if not start or not end:
            # The shim names a file by its first path per inode: when the marker file reuses the
            # inode of a file WiredTiger removed, its syncs are filed under that name. Rare; a
            # replay would then measure the open or the closing checkpoint too, so the capture is
            # refused.
            raise TiersimError(f"{name}: the phase markers' sync records were not found in the trace; capture again")
        raw.unlink()
        if name in REPORT_ONLY:
            (directory / f"{name}.trace").unlink()
        save_report(rep, directory / f"{name}.json")
        reports[name] = rep
    return reports


def traces() -> tuple[Path, str]:
    """Where the traces are, and a sentence saying which they are."""
    env = os.environ.get(ENV)
    if not env:
        return TRACES_DIR, (
            f"Replays the committed traces in {TRACES_DIR.relative_to(TRACES_DIR.parents[3])} (Valgrind-path "
            f"captures made once by scm_vs_ssd_wt.capture_all, the commands in docs/reproduce.md), not "
            f"fresh captures; set {ENV}=DIR to capture and replay your own."
        )
    d = Path(env)
    missing = [n for n in CAPTURES if not (d / f"{n}.{'json' if n in REPORT_ONLY else 'trace'}").is_file()]
    if missing:
        capture_all(d, missing)
    return d, f"Replays the traces in {d} ({ENV}); {len(missing)} of them captured by this run."


class Replays:
    """Each (trace, device, warm, extra overrides) replayed once, its summary kept."""

    def __init__(self, directory: Path, devices: Mapping[str, Mapping[str, Any]] = DEVICES) -> None:
        self.dir = directory
        self.devices = devices
        self.rows: list[dict[str, Any]] = []
        self._done: dict[tuple[Any, ...], dict[str, Any]] = {}

    def run(self, trace: str, dev: str, warm: bool = False, **extra: Any) -> dict[str, Any]:
        key = (trace, dev, warm, tuple(sorted(extra.items())))
        if key in self._done:
            return self._done[key]
        path = self.dir / f"{trace}.trace"
        # Measured from the clients' start to their end (the two phase markers), as wtperf
        # measures its run (operations over run_time, wtperf.c): the records before the first
        # (wiredtiger_open) place pages but count no time, those from the second on (the
        # checkpoint thread's work left at the clients' end and conn->close's checkpoint, on the
        # closing thread, which in a replay would not wait for the clients it joined) are not
        # replayed. With the threads started in file order (THREADS) measuring starts when the
        # replay issues the first marker's record (file position `start`) and counts whatever is
        # issued after it in simulated time (docs/platform.md, stats.warmup_accesses). The end is
        # a place in the file (Valgrind runs one thread at a time, so the file's order is the
        # order the program ran in).
        rep = _report(self.dir, trace) or {}
        start, end = int(rep.get("run_phase_from", 0)), int(rep.get("run_phase_to", 0))
        overrides = {**THREADS, **self.devices[dev], **(WARM if warm else {}), **extra}
        if dev == "log_pm":
            logs = files_matching(path, rep, LOG_FILES)
            if not logs:
                raise TiersimError(f"{path}: no file matches {LOG_FILES!r} in its report; nothing to put on PM")
            overrides["dax.files"] = logs
        if start:
            overrides["stats.warmup_accesses"] = start
        if end:
            overrides["stats.replay_accesses"] = end
        s = tiersim.run(path, platform=PLATFORM, overrides=overrides).summary
        self._done[key] = s
        pc = s.get("page_cache") or {}
        sync = pc.get("sync") or {}
        dax = pc.get("dax") or {}
        self.rows.append(
            {
                "trace": trace,
                "files on": dev,
                "page cache": "-"
                if dev == "fsdax"
                else ("warm" if warm else "cold") + (" (not the log)" if dev == "log_pm" else ""),
                "extra": ", ".join(f"{k}={v}" for k, v in extra.items()),
                "time_ms": round(s["execution_time_ns"] / 1e6, 3),
                "hit_ratio": round(pc.get("hit_ratio", 0.0), 4),
                "calls": pc.get("read_calls", 0) + pc.get("write_calls", 0) + dax.get("calls", 0),
                "mean_call_us": round((pc.get("mean_call_ns") or 0.0) / 1e3, 2),
                "syncs": sync.get("fsync_calls", 0) + sync.get("fdatasync_calls", 0),
                "mean_sync_us": round((sync.get("mean_ns") or 0.0) / 1e3, 2),
                "device_write_mib": round((s.get("swap") or {}).get("device", {}).get("bytes_written", 0) / 2**20, 2),
            }
        )
        return s


def _ms(s: Mapping[str, Any]) -> float:
    return float(s["execution_time_ns"]) / 1e6


def _pc(s: Mapping[str, Any], *path: str) -> float:
    v: Any = s.get("page_cache") or {}
    for k in path:
        v = (v or {}).get(k)
    return float(v or 0.0)


def _futex(s: Mapping[str, Any]) -> dict[str, Any]:
    return dict(s.get("futex") or {})


def run(out: Path, quick: bool, workers: int | None) -> StudyResult:
    directory, source = traces()
    r = Replays(directory)
    claims = _claims(r, quick)
    sweep = _ssd_latency_sweep(directory, quick, claims)
    notes = [
        source,
        "WiredTiger 3.2.1 (Debian) under our YCSB driver (workloads/wt_driver.c): a table of 10,000 records "
        "of 100 B preloaded (not captured), then 4,000 operations (40,000 with the 64 MiB engine cache, a_c64; "
        "1,000 with synced commits) from 8 threads "
        "(or 1), one checkpoint from a thread of its own begun half way, then the closing checkpoint; "
        "captured on the Valgrind path (the engine's own memory accesses "
        f"and its file I/O) with a 1 MiB LLC, the open's {CALIBRATION_INSTRUCTIONS / 1e9:.1f} G-instruction "
        "tick calibration cut. Measured from the clients' start to their end (the driver's two phase "
        "markers: stats.warmup_accesses, stats.replay_accesses), as wtperf measures its run phase; the "
        "closing checkpoint is not replayed. Replayed with "
        f"`tiersim run -p {PLATFORM}` (256 GiB of DRAM: the page cache never runs short), the files on "
        "optane_ssd, on one optane_100 module at the blog's 0.6 GB/s write rate as a block device, on two "
        "(13.2 GB/s read, 1.0 GB/s write) or on fsdax; warm runs start with the files cached "
        "(os.files_start_cached).",
        sweep.note,
    ]
    return StudyResult(
        claims=claims,
        tables=[("Replays of the captured WiredTiger", pl.DataFrame(r.rows)), (sweep.title, sweep.table)],
        notes=notes,
    )


def _claims(r: Replays, quick: bool) -> list[Claim]:
    """The findings, on the replays `r` makes (its devices: DEVICES, or the latency sweep's)."""
    directory = r.dir
    # 1-2. Warm page cache: the device should not matter.
    warm_a = (r.run("a_c1", "ssd", warm=True), r.run("a_c1", "pm", warm=True))
    warm_c = (r.run("c_c1", "ssd", warm=True), r.run("c_c1", "pm", warm=True))
    gap_a, gap_c = (_ms(p) / _ms(s) - 1 for s, p in (warm_a, warm_c))
    # 3. mmap vs read/write calls, warm, 8 threads: YCSB-C on checkpoint cursors (the objects
    # WiredTiger 3.x maps) with mmap on and off, each on the SSD and on PM. Judged on the SSD, the
    # device of scm_vs_ssd's test (mmap/syscall throughput >= 1.3x at 8 threads), with its threshold.
    by_call = (r.run("c_c1_ckpt", "ssd", warm=True), r.run("c_c1_ckpt", "pm", warm=True))
    by_map = (r.run("c_c1_ckpt_mmap", "ssd", warm=True), r.run("c_c1_ckpt_mmap", "pm", warm=True))
    mm_ssd, mm_pm = (_ms(c) / _ms(m) for c, m in zip(by_call, by_map, strict=True))
    mm_rep, call_rep = (_report(directory, n) or {} for n in ("c_c1_ckpt_mmap", "c_c1_ckpt"))
    mm_fio, call_fio = (rep.get("fileio") or {} for rep in (mm_rep, call_rep))
    mmap_calls = int(mm_fio.get("calls_in_trace", {}).get("M", 0))
    mapped = int(mm_fio.get("mapped_accesses", 0))
    mm_reads = int(mm_fio.get("calls_in_trace", {}).get("R", 0))
    table = max((v for k, v in call_fio.get("files", {}).items() if Path(k).name == "ycsb.wt"), default=0)
    reread = call_fio.get("bytes", {}).get("read", 0) / max(table, 1)
    # The engine cache in use at the end: a block read by pread is charged to it, a mapped one is not
    # (bt_page.c __wt_page_inmem charges the disk image only when it allocated it).
    inuse = [int((rep.get("program") or {}).get("cache_bytes_inuse", 0)) / 2**20 for rep in (call_rep, mm_rep)]
    rw_fio = (_report(directory, "a_c1_mmap") or {}).get("fileio") or {}
    rw_mmaps = int(rw_fio.get("calls_in_trace", {}).get("M", 0))
    # 4-5. Cold page cache, read-only mix: PM's read advantage, against the raw devices.
    cold_c = (r.run("c_c1", "ssd"), r.run("c_c1", "pm"))
    cold_ratio = _ms(cold_c[0]) / _ms(cold_c[1])
    raw = _raw_read_ratio(quick, _swap_params(r.devices["ssd"]))
    # 6. Cold cache, the write-heavy mix: buffered writes PM vs SSD.
    cold_a = (r.run("a_c1", "ssd"), r.run("a_c1", "pm"), r.run("a_c1", "pm2"))
    # The cause, measured: the same module with its media writing at the SSD's 2.2 GB/s.
    ssd_write_rate: dict[str, Any] = {"swap.params.media_write_bandwidth": "2.2GB/s"}
    pm_fast_writes = r.run("a_c1", "pm", **ssd_write_rate)
    # 7. fsdax: no page cache.
    dax_a = r.run("a_c1", "fsdax")
    dax_slow = _ms(dax_a) / _ms(cold_a[1])
    # 8-9. The engine's cache holds the table: the devices should not matter (1 or 2 modules).
    big = (r.run("a_c64", "ssd"), r.run("a_c64", "pm"), r.run("a_c64", "pm2"))
    big_gap = max(abs(_ms(big[i]) / _ms(big[0]) - 1) for i in (1, 2))
    # The cause of the cold gap, measured: the same runs warm (the table's pages cached).
    big_warm = (r.run("a_c64", "ssd", warm=True), r.run("a_c64", "pm", warm=True), r.run("a_c64", "pm2", warm=True))
    big_warm_gap = max(abs(_ms(big_warm[i]) / _ms(big_warm[0]) - 1) for i in (1, 2))
    big_ops = _ops(directory, "a_c64")
    big_cold_why = (
        f"cold, the clients' first reads of the table and the log pages their commits first write miss the "
        f"page cache ({int(_pc(big[0], 'misses'))} pages, {int(_pc(big[0], 'pages_read'))} read from the "
        f"device; the read/write calls take {_pc(big[0], 'io_time_ns') / 1e6:.2f} ms of the threads' time on "
        f"the SSD, {_pc(big[1], 'io_time_ns') / 1e6:.2f} on one module) in a run of {_ms(big[0]):.2f} ms; warm, "
        f"the devices are {100 * big_warm_gap:.1f}% apart. A run of {big_ops:,} operations reads the table once "
        "as wtperf's minutes-long runs do, but there that read is a sliver of the run: the workload's size"
    )
    two_vs_one = (_ms(big[1]) / _ms(big[2]), _ms(cold_a[1]) / _ms(cold_a[2]))
    # 10. Write-heavy with a small engine cache (evict-btree-1): faster on the SSD. wtperf's run
    # writes for minutes, past vm.dirty_ratio; this run writes about 2 MiB, so the page cache is
    # made small enough for that to bind (SMALL_PC: 64 MiB of DRAM, dirty limits 1 % and 2 %).
    wb_runs = (r.run("a_c1", "ssd", **SMALL_PC), r.run("a_c1", "pm", **SMALL_PC))
    wb = _ms(wb_runs[0]) / _ms(wb_runs[1])
    # 12. Reading a block, the kernel path included: a read call that misses the page cache on
    # the SSD (the cold run's extra call time over the warm run's, per miss, plus a hit's cost)
    # against a read call on fsdax PM.
    warm_ssd_c = r.run("c_c1", "ssd", warm=True)
    # Both per 4 KiB page: on the SSD a page the cold run had to read (its call time over the
    # warm run's, per page missed); on fsdax the mean call per 4 KiB it moved.
    misses = _pc(cold_c[0], "misses")
    ssd_miss_us = (_pc(cold_c[0], "io_time_ns") - _pc(warm_ssd_c, "io_time_ns")) / max(misses, 1) / 1e3
    dax_c = r.run("c_c1", "fsdax")
    pm_call_us = _pc(dax_c, "io_time_ns") / max(_pc(dax_c, "dax", "bytes") / 4096, 1) / 1e3
    # 13-15. The log where commits wait for it: fdatasync per commit, 1 and 8 threads.
    log1 = (r.run("a_c64_sync_t1", "ssd"), r.run("a_c64_sync_t1", "pm"), r.run("a_c64_sync_t1", "fsdax"))
    commit = _pc(log1[0], "sync", "mean_ns") / max(_pc(log1[2], "sync", "mean_ns"), 1.0)

    # 6b and 6c as the seed means them: PM as the log device, the log's files on fsdax PM and the
    # table on the SSD through the page cache, against everything on the SSD; judged on the
    # update-only runs, whose every operation commits, with YCSB-A's figures beside.
    def log_pm_gain(name: str) -> float:
        return _ms(r.run(name, "ssd")) / _ms(r.run(name, "log_pm"))

    upd1 = (r.run("u_c64_sync_t1", "ssd"), r.run("u_c64_sync_t1", "log_pm"), r.run("u_c64_sync_t1", "fsdax"))
    thr1_pm = log_pm_gain("u_c64_sync_t1")
    group = sorted(((log_pm_gain(n), n) for n in GROUP_COMMIT_RUNS), key=lambda x: x[0])
    thr8_pm, median8 = group[len(group) // 2]
    upd8 = (r.run(median8, "ssd"), r.run(median8, "log_pm"), r.run(median8, "fsdax"))
    a1_pm, a8_pm = log_pm_gain("a_c64_sync_t1"), log_pm_gain("a_c64_sync_t8")
    # The cause left in 6c, measured: the same replays with the module writing at the SSD's rate.
    log_write_rate: dict[str, Any] = {"dax.params.media_write_bandwidth": "2.2GB/s"}
    upd8_fast = r.run(median8, "log_pm", **log_write_rate)
    # 16. The log unsynced (WiredTiger's default): batching hides it on either device.
    nolog = (r.run("a_c1_nolog", "ssd"), r.run("a_c1_nolog", "pm"))
    log_cost = (_ms(cold_a[0]) / _ms(nolog[0]), _ms(cold_a[1]) / _ms(nolog[1]))
    # 17. Caching masks the device: PM/SSD apart less with the table in the engine's cache.
    # One module against the SSD at both cache sizes: the same devices, only the cache differs.
    small_gap = abs(_ms(cold_a[1]) / _ms(cold_a[0]) - 1)
    big_gap_one = abs(_ms(big[1]) / _ms(big[0]) - 1)
    # 18. One client thread vs 8 (cold, SSD and PM).
    t1 = (r.run("a_c1_t1", "ssd"), r.run("a_c1_t1", "pm"))
    gap_t1, gap_t8 = _ms(t1[1]) / _ms(t1[0]), _ms(cold_a[1]) / _ms(cold_a[0])

    ckpt = _pc(warm_a[1], "sync", "mean_ns") / max(_pc(warm_a[0], "sync", "mean_ns"), 1.0)
    claims = [
        Claim(
            "1a. warm page cache: PM and SSD the same (YCSB-A, reads and writes, 8 threads)",
            "about the same",
            f"PM/SSD time {1 + gap_a:.2f}x ({_ms(warm_a[1]):.2f} vs {_ms(warm_a[0]):.2f} ms)",
            "within +-10%",
            abs(gap_a) <= 0.10,
            "every read hits the warm cache; what reaches a device is the background checkpoint's fdatasync of "
            f"the table (mean sync {ckpt:.1f}x longer on PM at 0.6 GB/s), on the checkpoint thread: no client "
            "waits for it, and with no reads to queue behind its writes the devices do not show",
        ),
        Claim(
            "1b. warm page cache: PM and SSD the same (read-only YCSB-C, 8 threads)",
            "about the same",
            f"PM/SSD time {1 + gap_c:.2f}x ({_ms(warm_c[1]):.2f} vs {_ms(warm_c[0]):.2f} ms)",
            "within +-10%",
            abs(gap_c) <= 0.10,
            "reads only: every call is a hit, the device is idle",
        ),
        Claim(
            "1c. warm page cache: mmap much faster than read/write calls from 8 threads",
            "much faster",
            f"read/write / mmap time {mm_ssd:.2f}x on the SSD ({_ms(by_call[0]):.2f} vs {_ms(by_map[0]):.2f} ms), "
            f"{mm_pm:.2f}x on PM (YCSB-C on checkpoint cursors)",
            "ours >= 1.3x on the SSD (scm_vs_ssd's test)",
            mm_ssd >= 1.3,
            "WiredTiger 3.2.1 maps only read-only objects, cursors on a checkpoint (ordinary cursors map nothing: "
            f"{rw_mmaps} mmap calls on YCSB-A with mmap=true). With mmap=true the capture made {mmap_calls} mmap "
            f"call of the table, {mapped} of the engine's loads inside it became file-page accesses (warm: "
            f"{int(_pc(by_map[0], 'mmap', 'minor_faults'))} minor faults in the measured window, each mapping 16 "
            f"pages around it), and {mm_reads} pread calls "
            "remained; with mmap off its "
            f"{int(_pc(by_call[0], 'read_calls'))} preads take {_pc(by_call[0], 'io_time_ns') / 1e6:.2f} ms of the "
            f"8 threads' time and read {reread:.1f}x the table: the blocks read are charged to the 1 MiB engine "
            f"cache, which evicts and reads them again ({inuse[0]:.2f} MiB in use at the end), where mapped blocks "
            f"are not ({inuse[1]:.2f} MiB). The rest of both runs is the engine's own B-tree work",
        ),
        Claim(
            "2a. cold page cache: PM reads ahead of the SSD (read-only YCSB-C, 8 threads)",
            "PM ahead",
            f"SSD/PM time {cold_ratio:.2f}x",
            "ours > 1",
            cold_ratio > 1.0,
            "the misses read 4 KiB pages through the page cache from each device",
        ),
        Claim(
            "2b. cold page cache: PM's advantage smaller than raw",
            "less than raw",
            f"engine {cold_ratio:.2f}x vs raw 8 KiB reads {raw:.1f}x (1 thread; device figure from filebench)",
            "engine ratio < raw ratio",
            cold_ratio < raw,
            "the raw ratio is a device finding (filebench: O_DIRECT on the SSD vs fsdax loads on PM), not the "
            "engine's; on the engine the page cache's copies and the engine's own work are the same on both devices",
        ),
        Claim(
            "2c. cold page cache: buffered writes to PM exceed the SSD (YCSB-A)",
            "PM > SSD",
            f"PM/SSD time {_ms(cold_a[1]) / _ms(cold_a[0]):.2f}x (1 module), "
            f"{_ms(cold_a[2]) / _ms(cold_a[0]):.2f}x (2 modules)",
            "PM faster (ours < 1)",
            _ms(cold_a[1]) < _ms(cold_a[0]),
            "the page cache absorbs the clients' writes (256 GiB of DRAM: no dirty limit binds); the background "
            f"checkpoint's fdatasync writes {_pc(cold_a[1], 'sync', 'writeback_pages') * 4096 / 2**20:.1f} MiB during "
            "the run at the module's 0.6 GB/s (the SSD's 2.2) in 128 KiB bios, and the cold misses' reads from "
            "the other threads wait for the module's posted writes, not the rest of each bio "
            f"({int((cold_a[1].get('swap') or {}).get('device', {}).get('reads_past_write_streams', 0))} reads; "
            "docs/devices.md): the run's read/write calls take "
            f"{_pc(cold_a[1], 'io_time_ns') / 1e6:.1f} ms in all on PM against {_pc(cold_a[0], 'io_time_ns') / 1e6:.1f} "
            f"on the SSD; with the module's media writing at the SSD's 2.2 GB/s the run takes "
            f"{_ms(pm_fast_writes):.2f} ms (PM/SSD {_ms(pm_fast_writes) / _ms(cold_a[0]):.2f}x)",
        ),
        Claim(
            "3. WiredTiger without the page cache (fsdax) up to 30x slower",
            "up to 30x",
            f"fsdax/PM block device {dax_slow:.2f}x (YCSB-A, 1 MiB engine cache)",
            "ours >= 10x",
            dax_slow >= 10,
            "measured: the fsdax path costs each pread/pwrite its copy to or from PM (800 ns + the copy at "
            "PM's 0.6 GB/s write rate, 8 threads sharing one module): the engine's "
            f"{_pc(dax_a, 'dax', 'bytes') / 2**20:.1f} MiB of calls all reach the module, where the page cache "
            f"wrote back {_pc(cold_a[1], 'writeback_bytes') / 2**20:.1f} MiB. Writes past a file's end also zero "
            f"their new blocks and commit the journal at the next sync ({int(_pc(dax_a, 'dax', 'allocating_calls'))} "
            f"calls, {_pc(dax_a, 'dax', 'zeroed_bytes') / 2**20:.2f} MiB zeroed, "
            f"{int(_pc(dax_a, 'dax', 'journal_commits'))} commits, {_pc(dax_a, 'dax', 'journal_time_ns') / 1e6:.2f} ms): "
            "WiredTiger extends its files little in this run. The 30x is not reached",
        ),
        Claim(
            "4a. wtperf: no significant difference PM (1 or 2 modules) vs SSD",
            "no significant difference",
            f"largest PM/SSD gap {100 * big_gap:.1f}% (YCSB-A, 64 MiB engine cache holding the table, cold)",
            "within +-10%",
            big_gap <= 0.10,
            "the engine's cache serves the reads once it holds the table: "
            + big_cold_why
            + "; the background checkpoint's syncs are on the checkpoint thread, which no client waits for",
        ),
        Claim(
            "4b. two PM modules no faster than one",
            "no benefit",
            f"1/2 modules time {two_vs_one[0]:.3f}x (64 MiB cache), {two_vs_one[1]:.3f}x (1 MiB)",
            "within +-10% with the 64 MiB cache",
            abs(two_vs_one[0] - 1) <= 0.10,
            "two modules double the read rate and raise writes to ~1 GB/s; the checkpoint's syncs and the reads "
            "queued behind them see it",
        ),
        Claim(
            "4c. except write-heavy evict-btree-1: faster on the SSD",
            "SSD faster",
            f"PM/SSD throughput {wb:.2f}x (YCSB-A, 1 MiB engine cache)",
            "ours < 1",
            wb < 1.0,
            "evicted dirty pages and checkpoints are written and synced at the device's write rate: 0.6 GB/s "
            "for the blog's module vs 2.2 for the SSD",
        ),
        Claim(
            "5. reading a block: PM about 1 us vs SSD 100-200 us, kernel path included",
            "1 vs 100-200 us",
            f"per 4 KiB: PM {pm_call_us:.2f} us (fsdax calls); SSD {ssd_miss_us:.1f} us (a page the cold run "
            f"read, over the warm run) ({ssd_miss_us / max(pm_call_us, 1e-9):.0f}x)",
            "SSD >= 50x PM",
            ssd_miss_us >= 50 * pm_call_us,
            "WiredTiger's misses come a few at a time, so the SSD serves each in ~10 us of device plus ~5 us of "
            "kernel (less per page where readahead reads several); the blog's 100-200 us is the SSD under "
            "queueing (scm_vs_ssd finds it with 32 concurrent readers)",
        ),
        Claim(
            "6a. logging: PM shines where latency cannot be hidden (commit latency, 1 thread)",
            "PM far ahead",
            f"fdatasync per commit SSD {_pc(log1[0], 'sync', 'mean_ns') / 1e3:.1f} us vs fsdax PM "
            f"{_pc(log1[2], 'sync', 'mean_ns') / 1e3:.1f} us ({commit:.1f}x); PM block device "
            f"{_pc(log1[1], 'sync', 'mean_ns') / 1e3:.1f} us",
            "ours >= 3x",
            commit >= 3,
            "an SSD commit writes its log page through the block layer and waits for it; on fsdax the log "
            "write already went to PM and fdatasync is the call and the flush, plus a journal commit when "
            f"the log grew into new blocks since the last ({int(_pc(log1[2], 'dax', 'journal_commits'))} of "
            f"{int(_pc(log1[2], 'sync', 'fdatasync_calls'))} syncs)",
        ),
        Claim(
            "6b. logging: synced commits run faster on PM (1 thread)",
            "PM far ahead",
            f"SSD / log on fsdax PM (table on the SSD) time {thr1_pm:.2f}x ({_ms(upd1[0]):.2f} vs "
            f"{_ms(upd1[1]):.2f} ms, {_ops(directory, 'u_c64_sync_t1'):,} updates); all on fsdax "
            f"{_ms(upd1[0]) / _ms(upd1[2]):.2f}x; YCSB-A {a1_pm:.2f}x",
            "ours >= 1.5x with the log on fsdax PM (updates only)",
            thr1_pm >= 1.5,
            "PM as the log device, as the seed and the literature it cites use it, and every operation an update "
            "whose commit waits for its sync (wtperf's update threads; in YCSB-A half the operations are reads, "
            "which commit nothing, and the same replays give the figure after the semicolon): with the log on fsdax "
            f"the mean fdatasync (the log's, and the checkpoint's of the table on the SSD) is "
            f"{_pc(upd1[1], 'sync', 'mean_ns') / 1e3:.1f} us against {_pc(upd1[0], 'sync', 'mean_ns') / 1e3:.1f} on "
            f"the SSD ({int(_pc(upd1[0], 'sync', 'fdatasync_calls'))} syncs), whose syncs write the log page back and "
            f"commit the journal when the log grew ({int(_pc(upd1[0], 'journal_commits'))} commits, "
            f"{_pc(upd1[0], 'journal_time_ns') / 1e6:.2f} ms). With the log on fsdax its writes past its end zero "
            f"their new blocks ({_pc(upd1[1], 'dax', 'zeroed_bytes') / 2**20:.2f} MiB) and their syncs commit the "
            f"journal ({int(_pc(upd1[1], 'dax', 'journal_commits'))} commits, "
            f"{_pc(upd1[1], 'dax', 'journal_time_ns') / 1e6:.2f} ms; ext4_iomap_alloc, ext4_sync_file), which a log "
            "file preallocated and written once would not",
        ),
        Claim(
            "6c. logging with 8 threads (group commit): PM still ahead",
            "PM ahead",
            f"SSD / log on fsdax PM (table on the SSD) time {thr8_pm:.2f}x, the median of {len(group)} captures "
            f"({', '.join(f'{x:.2f}' for x, _ in group)}); in the median one {_ms(upd8[0]):.2f} vs "
            f"{_ms(upd8[1]):.2f} ms for {_ops(directory, median8):,} updates, all on fsdax "
            f"{_ms(upd8[0]) / _ms(upd8[2]):.2f}x, {int(_pc(upd8[0], 'sync', 'fdatasync_calls'))} fdatasyncs "
            f"(1 thread: {int(_pc(upd1[0], 'sync', 'fdatasync_calls'))}); YCSB-A {a8_pm:.2f}x",
            "ours >= 1.5x with the log on fsdax PM (updates only; the median capture)",
            thr8_pm >= 1.5,
            "WiredTiger's group-commit followers wait on a condition variable for the leader's fdatasync, which "
            f"the trace carries (futex records: {int(_futex(upd8[0]).get('paired_waits', 0))} waits paired with "
            f"{int(_futex(upd8[0]).get('wake_records', 0))} wakes), so a round of commits costs the leader's sync "
            f"({_pc(upd8[0], 'sync', 'mean_ns') / 1e3:.1f} us on the SSD, {_pc(upd8[1], 'sync', 'mean_ns') / 1e3:.1f} "
            "with the log on fsdax). Which commits share a sync, and which waits there are, is the capture's: "
            "under Valgrind one thread runs at a time and the others run while it is in a system call (the "
            "capturing host's own fdatasync), so the captures of one recipe differ, and with them the ratio "
            f"(above). With the module writing at the SSD's 2.2 GB/s the median capture's log-on-fsdax run takes "
            f"{_ms(upd8_fast):.2f} ms ({_ms(upd8[0]) / _ms(upd8_fast):.2f}x)",
        ),
        Claim(
            "6d. batching hides the log: unsynced, it costs about the same on both devices",
            "hidden by batching",
            f"log on/off time SSD {log_cost[0]:.2f}x, PM {log_cost[1]:.2f}x",
            "the two within +-10% of each other",
            abs(log_cost[1] / log_cost[0] - 1) <= 0.10,
            "with WiredTiger's default (no sync per commit) the log is written through the page cache and "
            "synced only at checkpoints and log file switches",
        ),
        Claim(
            "7. caching masks the devices' difference: less PM/SSD gap with the table in the engine's cache",
            "masked by DRAM caching",
            f"PM/SSD gap, one module, {100 * big_gap_one:.1f}% (64 MiB cache) vs {100 * small_gap:.1f}% (1 MiB)",
            "64 MiB gap < 1 MiB gap",
            big_gap_one < small_gap,
            "with the 1 MiB cache PM is ahead of the SSD by its faster reads of the pages the engine evicts and "
            "reads again; with the 64 MiB cache "
            + big_cold_why
            + ". One module at both sizes (the comparison took the larger of one and two modules' gaps at 64 MiB "
            "until the reads-behind-writes rule showed it compared unlike figures). The two runs differ in length "
            f"too: {big_ops:,} operations at 64 MiB, "
            f"{_ops(directory, 'a_c1'):,} at 1 MiB",
        ),
        Claim(
            "8. dozens of threads turn into concurrent I/O; the device gap does not grow with threads",
            "high concurrency, same conclusion",
            f"PM/SSD time {gap_t1:.2f}x with 1 thread, {gap_t8:.2f}x with 8",
            "the two within +-10% of each other",
            abs(gap_t8 / gap_t1 - 1) <= 0.10,
            "one thread or eight, the same misses (PM faster) and the same background checkpoint (PM slower)",
        ),
    ]
    return claims


@dataclass
class _Sweep:
    title: str
    table: pl.DataFrame
    note: str


def _ssd_latency_sweep(directory: Path, quick: bool, claims: list[Claim]) -> _Sweep:
    """Every finding again with the SSD's device latency at each of SSD_LATENCIES, beside what
    the drive alone does at it: an 8 KiB O_DIRECT read from 1 thread and from 32 (filebench), the
    blog's "100-200 us" block read and its 2.5 GB/s read bandwidth."""
    if [c.finding.split(". ")[0] for c in claims] != list(LABELS):
        raise TiersimError(f"scm_vs_ssd_wt: the findings' labels are not {', '.join(LABELS)}")
    rows: list[dict[str, Any]] = []
    for lat in SSD_LATENCIES:
        params = {"read_latency": lat, "write_latency": lat}
        over = {f"swap.params.{k}": v for k, v in params.items()}
        devices = {**DEVICES, "ssd": {**SSD, **over}, "log_pm": {**LOG_PM, **over}}
        found = _claims(Replays(directory, devices), quick)
        one, many = (
            tiersim.filebench(
                ops=4000, device="optane_ssd", device_params=params, cache="direct", threads=n, **RAW_READ
            )
            for n in (1, 32)
        )
        rows.append(
            {
                "SSD device latency": lat,
                "findings agreeing": sum(c.agree for c in found),
                "disagreeing": ", ".join(lb for lb, c in zip(LABELS, found, strict=True) if not c.agree),
                "8 KiB read, 1 thread (us)": round(float(one["mean_latency_ns"]) / 1e3, 1),
                "8 KiB reads, 32 threads (us)": round(float(many["mean_latency_ns"]) / 1e3, 1),
                "32 threads (GB/s)": round(float(many["bandwidth_gbs"]), 2),
            }
        )
    best = max(rows, key=lambda row: row["findings agreeing"])
    ours = rows[0]
    at = {row["SSD device latency"]: set(row["disagreeing"].split(", ")) - {""} for row in rows}
    # The findings the preset's latency wins and some other latency loses, with where they fail.
    lost = {
        lb: [lat for lat in SSD_LATENCIES if lb in at[lat]]
        for lb in LABELS
        if lb not in at[SSD_LATENCIES[0]] and any(lb in d for d in at.values())
    }
    lost_text = "; ".join(f"{lb} at {', '.join(lats)}" for lb, lats in lost.items()) or "none"
    allagree = any(row["findings agreeing"] == len(claims) for row in rows)
    note = (
        f"Which findings hang on the SSD's latency (the table below): at the preset's {ours['SSD device latency']} "
        f"(P4800X class) {ours['findings agreeing']} of {len(claims)} agree; at {best['SSD device latency']} "
        f"{best['findings agreeing']} (disagreeing: {best['disagreeing'] or 'none'}). Findings that agree at the "
        f"preset's and fail at another of the latencies swept: {lost_text}; "
        + ("one of them makes every finding agree. " if allagree else "none of them makes every finding agree. ")
        + "The study keeps the preset's: with it the drive alone reads 8 KiB in "
        f"{ours['8 KiB read, 1 thread (us)']} us from one thread and in {ours['8 KiB reads, 32 threads (us)']} us "
        f"at {ours['32 threads (GB/s)']} GB/s from 32, the blog's 100-200 us and 2.5 GB/s together: its "
        "block-read figure is the drive's latency at the queue depth that saturates it, which WiredTiger's few "
        f"misses at a time do not make; at {best['SSD device latency']} the drive reads in "
        f"{best['8 KiB read, 1 thread (us)']} us alone and {best['8 KiB reads, 32 threads (us)']} us at "
        f"{best['32 threads (GB/s)']} GB/s from 32."
    )
    return _Sweep("The SSD's device latency against the findings", pl.DataFrame(rows), note)


def _report(directory: Path, name: str) -> dict[str, Any] | None:
    import json

    p = directory / f"{name}.json"
    return json.loads(p.read_text()) if p.is_file() else None


def _ops(directory: Path, name: str) -> int:
    """The YCSB operations trace `name` was captured with (0 without its report)."""
    return int((_report(directory, name) or {}).get("params", {}).get("ops", 0))


def _swap_params(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The device parameters a set of overrides gives the [swap] device (`swap.params.NAME`)."""
    return {k.removeprefix("swap.params."): v for k, v in overrides.items() if k.startswith("swap.params.")}


def _raw_read_ratio(quick: bool, ssd_params: Mapping[str, Any]) -> float:
    """PM/SSD bandwidth of raw 8 KiB random reads from one thread, as scm_vs_ssd measures it
    (filebench: O_DIRECT on the SSD, fsdax mmap on PM): a device figure."""
    ops = 1000 if quick else 4000
    common: dict[str, Any] = {**RAW_READ, "threads": 1}
    ssd = tiersim.filebench(ops=ops, device="optane_ssd", device_params=dict(ssd_params), cache="direct", **common)
    pm = tiersim.filebench(ops=ops, device="optane_100", device_params=BLOG_DIMM, cache="dax", api="mmap", **common)
    return float(pm["bandwidth_gbs"]) / float(ssd["bandwidth_gbs"])


STUDY: Study = Study(
    name="scm_vs_ssd_wt",
    title="Seed 001's findings on captured WiredTiger: PM vs Optane SSD under the real storage engine",
    source="MongoDB engineering blog 'We Replaced an SSD with Storage Class Memory' (2020, seed 001)",
    runtime="--quick and full about 5 s (replays of the committed traces, and again at six SSD latencies)",
    run=run,
)
