"""`tiersim workload`: real programs as workloads. Each recipe names the Debian packages it needs,
builds our own driver where there is one (a WiredTiger YCSB driver, a graph500-style BFS), runs the
program at a size a 2-core machine captures in minutes, and captures it with its file I/O
(runtime/tiersim_fileio_rt.c, merged by _fileio.py) into one native trace. docs/workloads.md,
"Real programs", lists the recipes, their parameters and the real sizes they stand for.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tiersim
from tiersim._capture import (
    PRELOAD_CFLAGS,
    _built,
    c_compiler,
    capture,
    capture_instrumented,
    lto_cc,
    runtime_object,
)
from tiersim._native import TiersimError
from tiersim._result import temp_dir_beside

# files_matching is public: a captured trace's files by name, as `dax.files` addresses
# (docs/platform.md).
from tiersim.workloads._fileio import files_matching as files_matching
from tiersim.workloads._fileio import merge

HERE = Path(__file__).resolve().parent
FILEIO_SRC = HERE.parent / "runtime" / "tiersim_fileio_rt.c"
MAKE_HINT = "`make workloads` installs it (apt-get install {pkgs})"
STDERR_TAIL = 20


@dataclass
class Param:
    default: Any
    help: str


@dataclass
class Recipe:
    name: str
    summary: str
    packages: tuple[str, ...]
    # Files whose absence means a package is missing: (path, package).
    needs: tuple[tuple[str, str], ...]
    params: dict[str, Param]
    stands_for: str
    default_path: str
    paths: tuple[str, ...]
    # (params, workdir, exe or None) -> argv of the program to capture
    argv: Callable[[Mapping[str, Any], Path, Path | None], list[str]]
    source: str | None = None
    libs: tuple[str, ...] = ()
    # (params, workdir, exe) -> argv of a step run natively before the capture, in the same
    # directory, not captured (e.g. loading a database); [] for none.
    prepare: Callable[[Mapping[str, Any], Path, Path | None], list[str]] | None = None
    # Runs beside the captured program (a client); returns what it measured.
    # (params, workdir, set when the captured program has ended) -> what the client measured
    client: Callable[[Mapping[str, Any], Path, threading.Event], dict[str, Any]] | None = None
    # (resolved params) -> None, raising TiersimError for a combination the program cannot run.
    check: Callable[[Mapping[str, Any]], None] | None = None
    notes: list[str] = field(default_factory=list)
    # The file I/O shim also logs the waits between threads that reach the kernel (condition
    # variables, contended mutexes), which become the trace's futex records.
    waits: bool = False


def _wt_argv(p: Mapping[str, Any], work: Path, exe: Path | None) -> list[str]:
    assert exe is not None
    return [
        str(exe),
        str(work / "db"),
        str(p["records"]),
        str(p["ops"]),
        str(p["threads"]),
        str(p["ycsb"]),
        str(p["value_size"]),
        str(p["cache_mb"]),
        "1" if p["log"] else "0",
        str(p["checkpoint_every"]),
        "1" if p["mmap"] else "0",
        str(p["theta"]),
        str(p["seed"]),
        str(p["log_file_max_mb"]),
        "1" if p["sync"] else "0",
        "run" if p["preload"] else "all",
        str(p["checkpoints"]),
        "1" if p["read_checkpoint"] else "0",
    ]


def _wt_prepare(p: Mapping[str, Any], work: Path, exe: Path | None) -> list[str]:
    """With preload, the load alone, run before the capture on the same directory."""
    if not p["preload"]:
        return []
    argv = _wt_argv(p, work, exe)
    return [*argv[:-3], "load", *argv[-2:]]


#: The driver's operation mixes (wt_driver.c): YCSB A, B, C, F and wtperf's update-only threads.
WT_MIXES = ("a", "b", "c", "f", "u")


def _wt_check(p: Mapping[str, Any]) -> None:
    """The mix is one the driver runs; a checkpoint cursor is read-only (WiredTiger returns ENOTSUP
    to its updates), so only the read-only YCSB-C mix runs on one."""
    if p["ycsb"] not in WT_MIXES:
        raise TiersimError(f"workload wiredtiger: ycsb = {p['ycsb']!r} is not one of {', '.join(WT_MIXES)}")
    if p["read_checkpoint"] and p["ycsb"] != "c":
        raise TiersimError(
            f"workload wiredtiger: read_checkpoint = true needs ycsb = c (checkpoint cursors are read-only), "
            f"not ycsb = {p['ycsb']!r}"
        )


def _bfs_argv(p: Mapping[str, Any], work: Path, exe: Path | None) -> list[str]:
    assert exe is not None
    return [str(exe), str(p["scale"]), str(p["edgefactor"]), str(p["roots"]), str(p["threads"]), str(p["seed"])]


def _rocksdb_argv(p: Mapping[str, Any], work: Path, exe: Path | None) -> list[str]:
    return [
        "db_bench",
        f"--benchmarks={p['benchmarks']}",
        f"--num={p['num']}",
        f"--reads={p['reads']}",
        f"--value_size={p['value_size']}",
        f"--cache_size={p['cache_bytes']}",
        f"--threads={p['threads']}",
        f"--write_buffer_size={p['write_buffer_size']}",
        f"--seed={p['seed']}",
        f"--db={work / 'db'}",
        f"--wal_dir={work / 'db'}",
        "--compression_type=none",
        "--use_existing_db=0",
        "--statistics=0",
        f"--use_direct_reads={'true' if p['direct_reads'] else 'false'}",
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redis_argv(p: Mapping[str, Any], work: Path, exe: Path | None) -> list[str]:
    return [
        "redis-server",
        "--port",
        str(p["port"]),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(work),
        "--save",
        "",
        "--appendonly",
        "yes" if p["aof"] else "no",
        "--appendfsync",
        "everysec",
        "--logfile",
        str(work / "redis.log"),
        "--daemonize",
        "no",
    ]


def _client_run(args: list[str]) -> subprocess.CompletedProcess[str]:
    """A client process, without the capture's shims: it runs while os.environ holds them for the
    captured program, and its own calls would otherwise land in that program's file I/O log."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "TIERSIM_FILEIO_LOG")}
    return subprocess.run(args, capture_output=True, text=True, env=env)


def _wait_for_port(port: int, what: str, gone: threading.Event) -> str | None:
    """None once `port` accepts connections, or the error after 300 s (a server under Valgrind
    takes seconds to start) or once the server has ended (`gone`: it failed to start, and the
    capture reports its status and stderr)."""
    deadline = time.monotonic() + 300
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return None
        except OSError:
            if gone.is_set():
                return f"{what} ended before it accepted a connection"
            if time.monotonic() > deadline:
                return f"{what} did not accept connections within 300 s"
            time.sleep(0.2)


def _redis_client(p: Mapping[str, Any], work: Path, gone: threading.Event) -> dict[str, Any]:
    """Waits for the server, runs redis-benchmark, reads INFO memory, shuts the server down."""
    port = str(p["port"])
    error = _wait_for_port(int(port), "redis-server", gone)
    if error:
        return {"error": error}
    bench = _client_run(
        [
            "redis-benchmark",
            "-p",
            port,
            "-n",
            str(p["requests"]),
            "-r",
            str(p["keyspace"]),
            "-d",
            str(p["value_size"]),
            "-c",
            str(p["clients"]),
            "-t",
            p["tests"],
            "-q",
        ]
    )
    if bench.returncode != 0:
        _client_run(["redis-cli", "-p", port, "shutdown", "nosave"])
        tail = (bench.stderr or bench.stdout).strip().splitlines()[-5:]
        return {"error": f"redis-benchmark exited with status {bench.returncode}: {' / '.join(tail)}"}
    info = _client_run(["redis-cli", "-p", port, "info", "memory"]).stdout
    mem = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    _client_run(["redis-cli", "-p", port, "shutdown", "nosave"])
    # -q prints each test's result on a line of its own, after progress lines it overwrites
    # with carriage returns.
    results = [line.strip() for line in bench.stdout.replace("\r", "\n").splitlines() if "requests per second" in line]
    # redis-benchmark skips a test name it does not know and exits 0. Each result line opens with
    # its test's name in capitals (GET:, LRANGE_100 (first 100 elements):, MSET (10 keys):).
    asked = [t.strip() for t in str(p["tests"]).split(",") if t.strip()]
    unrun = [t for t in asked if not any(line.upper().startswith(t.upper()) for line in results)]
    if unrun or not results:
        return {
            "error": f"redis-benchmark ran no test named {', '.join(unrun or asked)} "
            "(tests takes its -t names, such as get,set,lpush)"
        }
    return {
        "benchmark": results,
        "benchmark_status": bench.returncode,
        "used_memory": int(mem.get("used_memory", "0").strip() or 0),
        "used_memory_rss": int(mem.get("used_memory_rss", "0").strip() or 0),
    }


# Valgrind keeps this many descriptors for itself, below the soft limit it raises (its m_main.c).
VALGRIND_RESERVED_FDS = 12


def _memcached_argv(p: Mapping[str, Any], work: Path, exe: Path | None) -> list[str]:
    # -A: the client ends the server with `shutdown` (exit status 0); -u root: memcached refuses
    # to run as root without a user, and the capture runs as whoever runs tiersim.
    argv = ["memcached", "-p", str(p["port"]), "-l", "127.0.0.1", "-U", "0", "-m", str(p["memory_mb"])]
    # memcached sets both open-file limits to its maxconns (-c) and exits with status 71 if that
    # fails; under Valgrind setrlimit succeeds only when the hard limit stays Valgrind's own,
    # min(soft + 12, hard) - 12, so -c is that (19,988 for limits of 20,000: a table of pointers).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = hard if hard != resource.RLIM_INFINITY else soft + VALGRIND_RESERVED_FDS
    maxconns = min(soft + VALGRIND_RESERVED_FDS, cap) - VALGRIND_RESERVED_FDS
    argv += ["-t", str(p["threads"]), "-c", str(maxconns), "-A"]
    return argv + (["-u", "root"] if os.geteuid() == 0 else [])


def _memcached_client(p: Mapping[str, Any], work: Path, gone: threading.Event) -> dict[str, Any]:
    """Waits for the server, runs memcslap (sets `requests` keys, then each of `clients` threads
    gets them all), reads the server's stats, shuts it down."""
    port = int(p["port"])
    error = _wait_for_port(port, "memcached", gone)
    if error:
        return {"error": error}
    server = f"--servers=127.0.0.1:{port}"
    bench = _client_run(
        ["memcslap", server, "--test=get", f"--concurrency={p['clients']}", f"--execute-number={p['requests']}"]
    )
    stats = _client_run(["memcstat", server]).stdout
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"shutdown\r\n")
    if bench.returncode != 0 or "Fatal error" in bench.stdout + bench.stderr:
        tail = (bench.stderr or bench.stdout).strip().splitlines()[-5:]
        return {"error": f"memcslap exited with status {bench.returncode}: {' / '.join(tail)}"}
    st = dict(line.strip().split(": ", 1) for line in stats.splitlines() if ": " in line)
    return {
        "benchmark": [line for line in bench.stdout.strip().splitlines() if line.startswith("Time")],
        "bytes": int(st.get("bytes", "0")),
        "curr_items": int(st.get("curr_items", "0")),
        "cmd_get": int(st.get("cmd_get", "0")),
        "get_hits": int(st.get("get_hits", "0")),
        "threads": int(st.get("threads", "0")),
    }


RECIPES: dict[str, Recipe] = {
    "wiredtiger": Recipe(
        name="wiredtiger",
        summary="our YCSB driver (A/B/C/F, scrambled zipfian) on a WiredTiger 3.2.1 table",
        packages=("libwiredtiger-dev", "wiredtiger"),
        needs=(("/usr/include/wiredtiger.h", "libwiredtiger-dev"),),
        params={
            "ycsb": Param(
                "a",
                "YCSB mix: a (50 % updates), b (5 %), c (reads), f (50 % read-modify-write); u: updates only "
                "(wtperf's update threads, as its log.wtperf)",
            ),
            "records": Param(20000, "records loaded"),
            "ops": Param(20000, "operations of the run phase, over all threads"),
            "threads": Param(4, "client threads"),
            "value_size": Param(100, "bytes per value"),
            "cache_mb": Param(1, "WiredTiger cache_size in MiB"),
            "log": Param(True, "write-ahead log on"),
            "log_file_max_mb": Param(100, "log file size in MiB (WiredTiger's file_max; files are preallocated)"),
            "sync": Param(
                False, "each run-phase operation a transaction begun with sync=true: its commit fsyncs the log"
            ),
            "preload": Param(
                False,
                "load the table in a run of its own before the capture (not captured): the trace is the run phase",
            ),
            "checkpoint_every": Param(0, "thread 0 checkpoints every N of its operations (0: only after load)"),
            "checkpoints": Param(
                0,
                "checkpoints from a thread of their own while the clients run (wtperf's checkpoint thread), "
                "the k-th after k/(N+1) of the operations",
            ),
            "mmap": Param(
                False,
                "WiredTiger's mmap=true: read-only objects (checkpoint cursors, read_checkpoint) are mapped "
                "instead of read by pread",
            ),
            "read_checkpoint": Param(
                False,
                "the clients read the last checkpoint (cursors opened with checkpoint=WiredTigerCheckpoint: "
                "read-only, mapped when mmap is on); needs ycsb=c",
            ),
            "theta": Param(0.99, "zipfian constant"),
            "seed": Param(1, "key chooser seed"),
        },
        stands_for=(
            "seed 001's runs: a table of about 2x the engine's cache (here 20,000 x 100 B = 2.3 MiB "
            "on disk against a 1 MiB cache; seed 001 ran tens of GiB against a cache of a few GiB) "
            "and a dozen client threads (here 4)"
        ),
        default_path="valgrind",
        paths=("valgrind", "instrumented"),
        argv=_wt_argv,
        prepare=_wt_prepare,
        check=_wt_check,
        source="wt_driver.c",
        libs=("-lwiredtiger", "-lm"),
        # Group commit: the log's followers wait on a condition variable for the leader's sync.
        waits=True,
    ),
    "redis": Recipe(
        name="redis",
        summary="redis-server 7 under redis-benchmark's load (GET/SET/INCR/LPUSH), the server captured",
        packages=("redis-server", "redis-tools"),
        needs=(("/usr/bin/redis-server", "redis-server"), ("/usr/bin/redis-benchmark", "redis-tools")),
        params={
            "tests": Param("get,set,incr,lpush", "redis-benchmark -t"),
            "requests": Param(2000, "requests per test (redis-benchmark -n)"),
            "keyspace": Param(10000, "random keys (redis-benchmark -r)"),
            "value_size": Param(256, "value bytes (redis-benchmark -d)"),
            "clients": Param(8, "parallel connections (redis-benchmark -c)"),
            "aof": Param(True, "append-only file on (appendfsync everysec)"),
            "port": Param(0, "TCP port (0: a free one)"),
        },
        stands_for=(
            "AutoTiering's key-value rows: a server whose data set exceeds DRAM; here 10,000 keys of "
            "256 B (a few MiB) and 8,000 requests"
        ),
        default_path="valgrind",
        paths=("valgrind",),
        argv=_redis_argv,
        client=_redis_client,
    ),
    "memcached": Recipe(
        name="memcached",
        summary="memcached 1.6 under memcslap's load (sets, then every client gets every key), the server captured",
        packages=("memcached", "libmemcached-tools"),
        needs=(("/usr/bin/memcached", "memcached"), ("/usr/bin/memcslap", "libmemcached-tools")),
        params={
            "requests": Param(2000, "keys set, then got by each client (memcslap --execute-number)"),
            "clients": Param(4, "client threads (memcslap --concurrency)"),
            "threads": Param(4, "memcached worker threads (-t)"),
            "memory_mb": Param(64, "memcached's item memory in MiB (-m)"),
            "port": Param(0, "TCP port (0: a free one)"),
        },
        stands_for=(
            "a cache server whose items exceed DRAM; here 2,000 items of about 2.6 KB (memcslap's random "
            "values, about 5 MB) got 4 times each"
        ),
        default_path="valgrind",
        paths=("valgrind",),
        argv=_memcached_argv,
        client=_memcached_client,
    ),
    "rocksdb": Recipe(
        name="rocksdb",
        summary="RocksDB 7.8's db_bench (fillrandom, readrandom, readwhilewriting) with a given block cache",
        packages=("rocksdb-tools",),
        needs=(("/usr/bin/db_bench", "rocksdb-tools"),),
        params={
            "benchmarks": Param("fillrandom,readrandom", "db_bench --benchmarks"),
            "num": Param(5000, "keys (db_bench --num)"),
            "reads": Param(5000, "reads (db_bench --reads)"),
            "value_size": Param(100, "value bytes"),
            "cache_bytes": Param(1 << 20, "block cache bytes (db_bench --cache_size)"),
            "threads": Param(1, "db_bench --threads"),
            "write_buffer_size": Param(131072, "memtable bytes before a flush to an SST file"),
            "direct_reads": Param(False, "db_bench --use_direct_reads (O_DIRECT)"),
            "seed": Param(1, "db_bench --seed"),
        },
        stands_for="a key-value store larger than its block cache; here 5,000 keys of 100 B against 1 MiB",
        default_path="valgrind",
        paths=("valgrind",),
        argv=_rocksdb_argv,
    ),
    "bfs": Recipe(
        name="bfs",
        summary="graph500's kernels in our own code: Kronecker edge list, CSR, BFS from random roots",
        packages=(),
        needs=(),
        params={
            "scale": Param(14, "log2 of the vertices (graph500 SCALE)"),
            "edgefactor": Param(16, "edges per vertex (graph500 edgefactor)"),
            "roots": Param(4, "BFS roots (graph500 runs 64)"),
            "threads": Param(2, "threads expanding each level's frontier"),
            "seed": Param(1, "generator seed"),
        },
        stands_for=(
            "AutoTiering's graph500 (SCALE 27-28, tens of GiB); SCALE 14 is 16,384 vertices, 262,144 "
            "edges and 9 MiB of data, SCALE 20 about 600 MiB"
        ),
        # Valgrind by default: its gaps are the instructions the program ran, where the instrumented
        # path's 2 per load or store makes a fifth of them here (6-8 per load or store, more with
        # SCALE: docs/workloads.md); the instrumented path is 3x faster at SCALE 20.
        default_path="valgrind",
        paths=("valgrind", "instrumented"),
        argv=_bfs_argv,
        source="bfs.c",
    ),
}


# Small captures of the real programs, committed so that tests and studies replay real programs
# without capturing at run time (docs/workloads.md, "Committed traces"). Each is the command's
# output on the 2-core development machine; a recapture differs (timing, background threads).
TRACES_DIR = HERE / "traces"


@dataclass(frozen=True)
class CommittedTrace:
    name: str
    command: str  # the command that made it, from the repository's root
    what: str  # what it holds, in the program's terms

    @property
    def path(self) -> Path:
        return TRACES_DIR / f"{self.name}.trace"


TRACES: dict[str, CommittedTrace] = {
    t.name: t
    for t in (
        CommittedTrace(
            "redis",
            "tiersim workload capture redis -o python/tiersim/workloads/traces/redis.trace --cpu-map 0-15 "
            "--llc 1MiB --param requests=10000 --param keyspace=10000 --param tests=set,get",
            "redis-server with its AOF, 10,000 SETs then 10,000 GETs of 256 B values over 10,000 random keys "
            "from 8 clients",
        ),
        CommittedTrace(
            "rocksdb",
            "tiersim workload capture rocksdb -o python/tiersim/workloads/traces/rocksdb.trace --cpu-map 0-15 "
            "--llc 1MiB --param num=5000 --param reads=5000 --param write_buffer_size=65536",
            "db_bench fillrandom then readrandom, 5,000 keys of 100 B, 64 KiB memtables flushed to SST files, "
            "a 1 MiB block cache",
        ),
        CommittedTrace(
            "bfs",
            "tiersim workload capture bfs -o python/tiersim/workloads/traces/bfs.trace --cpu-map 0-15 "
            "--llc 1MiB --param scale=14 --param roots=4 --path valgrind",
            "graph500's Kronecker graph at SCALE 14 (16,384 vertices, 262,144 edges), its CSR, BFS from 4 roots "
            "on 2 threads; on the Valgrind path, whose gaps are the instructions the program ran (the "
            "instrumented path's 2 per load or store made a fifth of them)",
        ),
    )
}


def memory_footprint(trace: str | os.PathLike[str]) -> int:
    """A captured trace's memory footprint in bytes: the pages it touches less its files' address
    ranges (a file record lives at an address of its own, capture.md), so a program's data and
    code, not the bytes its files held. Studies size the DRAM of their real-program runs by it."""
    return int(tiersim.inspect(trace)["footprint_bytes"]) - int(
        tiersim.trace_stats(trace, max_points=2)["mapped_bytes"]
    )


def committed_trace(name: str) -> Path:
    """The committed trace of workload `name` (TRACES)."""
    if name not in TRACES:
        raise TiersimError(f"no committed trace of '{name}'; there are: {', '.join(TRACES)}")
    return TRACES[name].path


def _check_packages(r: Recipe) -> None:
    for path, pkg in r.needs:
        if not Path(path).exists():
            raise TiersimError(
                f"workload {r.name}: {path} is missing (Debian package {pkg}); "
                + MAKE_HINT.format(pkgs=" ".join(r.packages))
            )


def get(name: str) -> Recipe:
    if name not in RECIPES:
        raise TiersimError(f"unknown workload '{name}'; valid: {', '.join(sorted(RECIPES))}")
    return RECIPES[name]


def list_workloads() -> list[dict[str, Any]]:
    """Every recipe: name, summary, packages, parameters with defaults, the size it stands for,
    and whether its packages are installed."""
    out = []
    for r in RECIPES.values():
        out.append(
            {
                "name": r.name,
                "summary": r.summary,
                "packages": list(r.packages),
                "installed": all(Path(p).exists() for p, _ in r.needs),
                "paths": list(r.paths),
                "params": {k: {"default": v.default, "help": v.help} for k, v in r.params.items()},
                "stands_for": r.stands_for,
            }
        )
    return out


def resolve(r: Recipe, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults with `params` over them; an unknown key names the valid ones, a value takes the
    default's type."""
    out = {k: v.default for k, v in r.params.items()}
    for k, v in (params or {}).items():
        if k not in out:
            raise TiersimError(f"workload {r.name} has no parameter '{k}'; valid: {', '.join(out)}")
        d = out[k]
        try:
            if isinstance(d, bool):
                if isinstance(v, str):
                    if v.lower() not in ("true", "false", "1", "0", "on", "off"):
                        raise ValueError(v)
                    v = v.lower() in ("true", "1", "on")
                out[k] = bool(v)
            elif isinstance(d, int):
                out[k] = int(v)
            elif isinstance(d, float):
                out[k] = float(v)
            else:
                out[k] = str(v)
        except ValueError:
            kind = {bool: "true or false", int: "an integer", float: "a number"}.get(type(d), "a string")
            raise TiersimError(f"workload {r.name}: {k} = {v!r} is not {kind}") from None
    return out


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tiersim"


def _compile(args: list[str], what: str) -> None:
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise TiersimError(f"building {what} failed:\n{r.stderr.strip()}")


def _default_path(r: Recipe, lto: bool) -> str:
    """The recipe's path when none is given: the instrumented one if `lto` asks to build for it."""
    return "instrumented" if lto and "instrumented" in r.paths else r.default_path


def build(name: str, path: str | None = None, lto: bool = False) -> Path | None:
    """Build the recipe's own program (None for packaged binaries), for the Valgrind path or
    instrumented (-fsanitize=thread, linked with the tracing runtime); cached by source hash.
    With `lto` (instrumented only), clang compiles and lld links with LTO against the runtime's
    bitcode, which inlines the runtime into the program's loads and stores: `workload capture
    bfs --path instrumented` at SCALE 20 in 13.4-14.0 s against 16.7-18.4 s with gcc (BENCHMARKS.md,
    "Our own recipes built with LTO"). clang instruments fewer accesses than gcc (it leaves more values in registers),
    so the trace's time base, loads and stores times instructions_per_access, is shorter:
    docs/workloads.md."""
    r = get(name)
    path = path or _default_path(r, lto)
    if path not in r.paths:
        raise TiersimError(f"workload {name} captures on {', '.join(r.paths)}, not '{path}'")
    if lto and "instrumented" not in r.paths:
        raise TiersimError(
            f"workload {name}: lto builds our own programs for the instrumented path; {name} is a packaged "
            f"program, captured on {', '.join(r.paths)}"
        )
    if lto and path != "instrumented":
        raise TiersimError(f"workload {name}: lto builds the instrumented path, not '{path}'")
    _check_packages(r)
    if r.source is None:
        return None
    src = HERE / r.source
    cflags = ["-O2", "-g", "-pthread"]
    extra: list[str] = []
    if lto:
        cc = lto_cc()
        bitcode = runtime_object(lto=True)
        if shutil.which("ld.lld") is None:
            raise TiersimError("building with lto needs lld (ld.lld): `make clang` installs clang and lld")
        cflags += ["-fsanitize=thread", "-flto"]
        # The link optimizes, or LLVM leaves the runtime's calls in place (docs/capture.md).
        extra = ["-O2", "-flto", "-fuse-ld=lld", str(bitcode), "-rdynamic", "-ldl"]
    else:
        cc = c_compiler(f"{name} ({src.name})")
        if path == "instrumented":
            cflags.append("-fsanitize=thread")
            extra = [str(runtime_object()), "-rdynamic", "-ldl"]
    # The runtime object's name carries its own hash: a changed runtime rebuilds the program.
    key = hashlib.sha256(src.read_bytes() + " ".join([cc, path, *cflags, *r.libs, *extra]).encode()).hexdigest()[:16]
    exe = _cache_dir() / f"{src.stem}-{path}-{key}"
    if exe.exists():
        return exe
    exe.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=exe.parent) as tmp:
        obj = Path(tmp) / "prog.o"
        _compile([cc, *cflags, "-c", str(src), "-o", str(obj)], f"{name} ({src.name})")
        _compile([cc, str(obj), *extra, "-o", str(Path(tmp) / "prog"), "-pthread", *r.libs], f"{name} (link)")
        os.replace(Path(tmp) / "prog", exe)
    return exe


def fileio_shim(waits: bool = False) -> Path:
    """runtime/tiersim_fileio_rt.c as a shared object, built once per source and compiler (as the
    Valgrind preload shim is); with `waits`, the build that also logs condition variables and
    contended mutexes."""
    flags = (*PRELOAD_CFLAGS, *(["-DTIERSIM_WAITS"] if waits else []), "-ldl")
    return _built(FILEIO_SRC, flags, ".so", "the file I/O shim", None)


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """Set environment variables for the program `capture` starts (it copies os.environ)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _redirected(stdout: Path, stderr: Path) -> Iterator[None]:
    """The program's stdout and stderr (inherited descriptors 1 and 2) into files, so that its
    report can be read and its stderr's tail shown when it fails."""
    saved = os.dup(1), os.dup(2)
    with open(stdout, "wb") as o, open(stderr, "wb") as e:
        os.dup2(o.fileno(), 1)
        os.dup2(e.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _program_report(text: str) -> dict[str, str]:
    """The program's own figures from its stdout: `key=value` words (our drivers), and lines
    `key: number` (db_bench's memstats: `rocksdb.size-all-mem-tables: 76048`)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([\w.\-]+): (\d+)", line.strip())
        if m:
            out[m[1]] = m[2]
            continue
        for word in line.split():
            if "=" in word:
                k, v = word.split("=", 1)
                out[k] = v
    return out


def capture_workload(
    name: str,
    out: str | os.PathLike[str],
    *,
    params: Mapping[str, Any] | None = None,
    path: str | None = None,
    llc: str = "16MiB",
    cpu_map: str | None = None,
    workdir: str | os.PathLike[str] | None = None,
    on_progress: Callable[[Any], None] | None = None,
    waits: bool | None = None,
    lto: bool = False,
) -> dict[str, Any]:
    """Run workload `name` and write its trace (virtual addresses, memory and file records) to
    `out`. `workdir` is the directory (and so the file system) the program's files live in
    (default: a temporary directory beside `out`, removed after). `waits` overrides the recipe's
    choice of logging the waits between threads (None: the recipe's), so that a trace committed
    before a recipe logged them can be captured again as it was; `lto` builds the program with
    clang and LTO (see `build`). Returns a report: the program's
    own figures, the capture's, the file I/O merged, elapsed seconds.

    A program that exits non-zero raises TiersimError with its status and stderr's tail, and
    leaves no trace."""
    r = get(name)
    p = resolve(r, params)
    if r.check is not None:
        r.check(p)
    path = path or _default_path(r, lto)
    exe = build(name, path, lto)
    out_path = Path(out)
    if out_path.is_dir() or not out_path.parent.is_dir():
        raise TiersimError(f"cannot write trace '{out_path}': give a file in an existing directory")
    if "port" in p and p["port"] == 0:
        p["port"] = _free_port()
    shim = fileio_shim(r.waits if waits is None else waits)
    # Absolute: redis-server changes into --dir before it opens --logfile.
    work = temp_dir_beside(out_path, f".tiersim-{name}-", parent=None if workdir is None else Path(workdir)).resolve()
    mem = out_path.with_name(out_path.name + ".mem.tmp")
    cap_params: dict[str, Any] = {"v2p": "none", "llc": llc}
    if cpu_map is not None:
        cap_params["cpu_map"] = cpu_map
    start = time.monotonic()
    try:
        (work / "db").mkdir()
        pre = r.prepare(p, work, build(name, "valgrind") if exe is not None else None) if r.prepare else []
        if pre:
            # The uninstrumented build, natively: nothing of this step is traced.
            done = subprocess.run(pre, capture_output=True, text=True)
            if done.returncode != 0:
                tail = "\n".join(done.stderr.strip().splitlines()[-STDERR_TAIL:])
                raise TiersimError(
                    f"workload {name}: the step before the capture ({Path(pre[0]).name}) exited with status "
                    f"{done.returncode}; no trace written. Its stderr ends:\n{tail}"
                )
        argv = r.argv(p, work, exe)
        if path == "instrumented" and shutil.which("setarch") is not None:
            # No address-space randomisation, so that a virtual trace repeats from run to run (the
            # runtime is in the program, so the wrapper is not traced; Valgrind lays out its guest
            # without randomisation itself).
            argv = ["setarch", os.uname().machine, "-R", *argv]
        log = work / "fileio.calls"
        client_out: dict[str, Any] = {}
        client_thread = None
        gone = threading.Event()
        if r.client is not None:
            client_fn = r.client

            def run_client() -> None:
                client_out.update(client_fn(p, work, gone))

            client_thread = threading.Thread(target=run_client, name=f"tiersim-{name}-client", daemon=True)
            client_thread.start()
        preload = " ".join(filter(None, (str(shim), os.environ.get("LD_PRELOAD"))))
        with _environ(LD_PRELOAD=preload, TIERSIM_FILEIO_LOG=str(log)):
            with _redirected(work / "stdout", work / "stderr"):
                try:
                    if path == "instrumented":
                        res = capture_instrumented(argv, mem, params=cap_params, on_progress=on_progress)
                    else:
                        res = capture(argv, mem, params=cap_params, on_progress=on_progress)
                except TiersimError as exc:
                    raise TiersimError(f"workload {name}: {exc}") from None
                finally:
                    gone.set()
        if client_thread is not None:
            client_thread.join(timeout=60)
        stdout = (work / "stdout").read_text(errors="replace")
        if res.exit_status != 0:
            # The program's own log file (redis-server writes there, not to stderr) counts as stderr.
            text = "".join(f.read_text(errors="replace") for f in (work / "stderr", *sorted(work.glob("*.log"))))
            tail = "\n".join(text.splitlines()[-STDERR_TAIL:])
            raise TiersimError(
                f"workload {name}: {Path(r.argv(p, work, exe)[0]).name} {res.how_it_ended()}; no trace written. "
                + (f"Its stderr ends:\n{tail}" if tail.strip() else "It wrote nothing to stderr.")
            )
        if "error" in client_out:
            raise TiersimError(f"workload {name}: {client_out['error']}; no trace written")
        merged = merge(mem, log, out_path)
        # The program's data files (redis keeps its AOF in appendonlydir), not the capture's own.
        ours = {"stdout", "stderr", "fileio.calls"}
        disk = sum(
            f.stat().st_size
            for f in work.rglob("*")
            if f.is_file() and (f.parent != work or (f.name not in ours and f.suffix != ".log"))
        )
        return {
            "workload": name,
            "path": path,
            "lto": lto,
            "argv": argv,
            "params": p,
            "program": _program_report(stdout),
            "client": client_out,
            "capture": res.report,
            "fileio": merged,
            "disk_bytes": disk,
            "elapsed_s": round(time.monotonic() - start, 2),
            "inspect": tiersim.inspect(out_path),
        }
    except BaseException:
        out_path.unlink(missing_ok=True)
        raise
    finally:
        mem.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)


def save_report(report: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    Path(path).write_text(json.dumps(report, indent=2, default=str) + "\n")
