"""Merge the file I/O shim's log (runtime/tiersim_fileio_rt.c) into a captured memory trace.

Each logged call was marked in the memory trace by a load of its own line in the shim's marker
region, on the calling thread at the time of the call; that record is replaced by the call's file
records (trace flag bits 0-2, docs/trace-format.md), an fsync or fdatasync by a file sync record
(flags 11) naming the file. Every file gets a region of its own at FILE_BASE, announced by mapping
records (flag 9) at the start, each followed by a file size record (flags 13) saying what the file held
when the program first opened it in the trace (the shim's fstat after the open: 0 for a file the open
created or truncated); loads and stores inside an mmap of a file move to that file's region
as file-page accesses (flag 1). With the shim built for waits between threads (TIERSIM_WAITS), a
wake of a futex word (a condition variable's signal or broadcast, the unlock of a contended mutex)
becomes a futex wake record (flags 8, op W) and a wait becomes a futex wait record (flags 8, op R)
at its return, if a wake of its word came between its start and its return in the trace (else it
timed out or found its condition already true: no record); a mutex's wait record goes instead right
after the first unlock of its mutex once it began (each unlock releasing one locker, the earliest),
the unlock that woke it, which under Valgrind may come long before its return. The instructions
before a wait's start are carried to its thread's next record.
"""

from __future__ import annotations

import tempfile
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Any

import tiersim
from tiersim._native import TiersimError

# Above any heap or mmap address a 47-bit user space hands out below the stack, 2 MiB-aligned.
FILE_BASE = 0x6000_0000_0000
REGION_ALIGN = 2 << 20
# A record's size is a u16: a call is cut into pieces of at most this many bytes (a multiple of
# 4 KiB, and of 512 B as O_DIRECT needs).
CHUNK = 32768
MAP_UNIT = 4096
MAP_UNITS_MAX = 65535


@dataclass
class Call:
    kind: str
    fd: int
    file: str | None = None
    offset: int = 0
    size: int = 0
    direct: bool = False
    addr: int = 0
    datasync: bool = False
    # A futex word (waits between threads: "Q" a wait begins, "q" it returned, "K" a wake;
    # `direct` then marks a mutex's, else a condition variable's).
    word: int = 0


@dataclass
class FileLog:
    marker_base: int = 0
    marker_bytes: int = 0
    calls: dict[int, Call] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    extent: dict[str, int] = field(default_factory=dict)
    # Bytes each file held when the program first opened it (after O_CREAT / O_TRUNC), by key.
    held: dict[str, int] = field(default_factory=dict)


def read_log(path: Path) -> FileLog:
    """The shim's log: which file each descriptor named when each call was made, in call order."""
    log = FileLog()
    if not path.exists():
        return log
    entries: list[tuple[int, list[str]]] = []
    pid = ""
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("B "):
            # A process started (the program, or a wrapper such as setarch that then execs it, in
            # the same pid): its calls are numbered from 0 again. The last one is the program.
            _, base, marker_bytes, pid = line.split(" ")
            log.marker_base, log.marker_bytes = int(base, 16), int(marker_bytes)
            entries = []
            continue
        # An open's line is the longest: "pid i O fd direct dev:ino size path" (a path may hold spaces).
        parts = line.split(" ", 7)
        if parts[0] == pid:
            entries.append((int(parts[1]), parts[2:]))
    entries.sort(key=lambda e: e[0])
    open_files: dict[int, tuple[str, bool]] = {}
    for i, p in entries:
        kind = p[0]
        if kind == "O":
            fd, direct, key = int(p[1]), p[2] == "1", p[3]
            open_files[fd] = (key, direct)
            log.paths.setdefault(key, p[5] if len(p) > 5 else "?")
            # The first open's size only: a later open (O_TRUNC) or ftruncate is not followed.
            log.held.setdefault(key, int(p[4]))
            log.extent.setdefault(key, 0)
            log.calls[i] = Call("O", fd, key, direct=direct)
        elif kind in ("R", "W"):
            fd = int(p[1])
            if fd not in open_files:
                continue
            key, direct = open_files[fd]
            off, size = int(p[2]), int(p[3])
            log.extent[key] = max(log.extent[key], off + size)
            log.calls[i] = Call(kind, fd, key, off, size, direct)
        elif kind == "S" and int(p[1]) in open_files:
            # "S fd 0" fsync, "S fd 1" fdatasync (a log without the flag is fsync).
            datasync = len(p) > 2 and p[2] == "1"
            log.calls[i] = Call("S", int(p[1]), open_files[int(p[1])][0], datasync=datasync)
        elif kind == "C":
            open_files.pop(int(p[1]), None)
            log.calls[i] = Call("C", int(p[1]))
        elif kind == "M" and int(p[1]) in open_files:
            key = open_files[int(p[1])][0]
            addr, size, off = int(p[2], 16), int(p[3]), int(p[4])
            log.extent[key] = max(log.extent[key], off + size)
            log.calls[i] = Call("M", int(p[1]), key, off, size, addr=addr)
        elif kind == "U":
            log.calls[i] = Call("U", -1, None, 0, int(p[2]), addr=int(p[1], 16))
        elif kind in ("Q", "q", "K"):
            # "m" after the word: a mutex's (else a condition variable's).
            log.calls[i] = Call(kind, -1, word=int(p[1], 16), direct=len(p) > 2 and p[2] == "m")
    return log


def _layout(extents: Iterable[int]) -> list[tuple[int, int]]:
    """Where `merge` puts files of these extents, in order: (first byte, 4 KiB units mapped),
    from FILE_BASE, each in whole REGION_ALIGN regions (an empty file maps one unit)."""
    out, at = [], FILE_BASE
    for extent in extents:
        size = max(extent, MAP_UNIT)
        out.append((at, (size + MAP_UNIT - 1) // MAP_UNIT))
        at += (size + REGION_ALIGN - 1) // REGION_ALIGN * REGION_ALIGN
    return out


def merge(mem_trace: Path, log_path: Path, out: Path) -> dict[str, Any]:
    """Write `out`: `mem_trace` (a virtual trace) with the logged calls in place of their markers.
    Returns what was merged (calls and bytes per kind, files, markers not found)."""
    log = read_log(log_path)
    if tiersim.inspect(mem_trace)["addr_kind"] != "virtual":
        raise TiersimError("file I/O merge needs a virtual trace (capture with v2p none)")
    if not log.calls and not log.extent:
        # Nothing to merge (a program that opened no file and, with waits logged, never waited):
        # the same records, copied natively rather than line by line through CSV below, which
        # took 45 s of bfs's 62 s capture at SCALE 20 (80M records).
        return _report(log, Counter(), Counter(), set(), tiersim.convert(mem_trace, out, dst_format="native"))
    layout = dict(zip(log.extent, _layout(log.extent.values()), strict=True))
    regions = {key: base for key, (base, _) in layout.items()}
    counts: Counter[str] = Counter()
    nbytes: Counter[str] = Counter()
    seen: set[int] = set()
    maps: list[tuple[int, int, int]] = []
    # Futex words: wakes seen so far per word, and per (cpu, word) that count and the time at a
    # wait's start (a ns trace's wait record keeps the time).
    wakes: Counter[int] = Counter()
    waiting: dict[tuple[str, int], tuple[int, str]] = {}
    # A mutex's sleeping lockers per word in the order they began: each unlock's wake releases the
    # first, so a locker still waiting but no longer queued has had its wait record written.
    lockers: dict[int, deque[str]] = defaultdict(deque)
    # Per cpu, instructions of dropped wait markers, carried to its next record (instruction
    # traces only: a ns trace's times are absolute).
    carry: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix=".tiersim-fileio-", dir=out.parent) as tmp:
        src_csv, dst_csv = Path(tmp) / "mem.csv", Path(tmp) / "merged.csv"
        tiersim.convert(mem_trace, src_csv, dst_format="csv")
        with open(src_csv) as src, open(dst_csv, "w") as dst:
            header = src.readline()
            dst.write(header)
            dst.write(src.readline())
            gaps = "time_unit=instructions" in header
            for key, (base, units) in layout.items():
                first, mapped = base, units * MAP_UNIT
                op = "R"
                while units > 0:
                    n = min(units, MAP_UNITS_MAX)
                    dst.write(f"0,0,{op},{base:#x},{n},9\n")
                    base += n * MAP_UNIT
                    units -= n
                    op = "W"
                # The file size record: where the file's data ended when it was first opened, op
                # R inside the mapping, op W at its end (it held every mapped byte; more is
                # written as the mapping's end, past which the trace touches nothing).
                held = log.held.get(key)
                if held is not None:
                    op = "R" if held < mapped else "W"
                    dst.write(f"0,0,{op},{first + min(held, mapped):#x},1,13\n")
            lo, hi = log.marker_base, log.marker_base + log.marker_bytes
            for line in src:
                time, cpu, op, addr_s, size, flags = line.rstrip("\n").split(",")
                if carry and carry[cpu]:
                    time = str(int(time) + carry.pop(cpu))
                    line = ",".join((time, cpu, op, addr_s, size, flags)) + "\n"
                addr = int(addr_s, 0)
                if lo <= addr < hi and log.marker_base:
                    i = (addr - lo) // 64
                    call = log.calls.get(i)
                    if i in seen or call is None:
                        # A second fill of a marker line (evicted and reloaded) or an unlogged line.
                        counts["marker_repeats"] += i in seen
                        continue
                    seen.add(i)
                    counts[call.kind] += 1
                    if call.kind in ("R", "W") and call.file is not None:
                        nbytes[call.kind] += call.size
                        counts["direct_" + call.kind] += call.direct
                        flag = 7 if call.direct else 3
                        start = regions[call.file] + call.offset
                        gap = time
                        for piece in range(0, call.size, CHUNK):
                            n = min(CHUNK, call.size - piece)
                            dst.write(f"{gap},{cpu},{call.kind},{start + piece:#x},{n},{flag}\n")
                            gap = "0"
                    elif call.kind == "S" and call.file is not None:
                        # A sync record at the file's first byte: op R fsync, W fdatasync; size 1.
                        counts["fdatasync" if call.datasync else "fsync"] += 1
                        op_s = "W" if call.datasync else "R"
                        dst.write(f"{time},{cpu},{op_s},{regions[call.file]:#x},1,11\n")
                    elif call.kind == "M" and call.file is not None:
                        maps.append((call.addr, call.addr + call.size, regions[call.file] + call.offset))
                    elif call.kind == "U":
                        maps = [m for m in maps if m[1] <= call.addr or m[0] >= call.addr + call.size]
                    elif call.kind == "K":
                        wakes[call.word] += 1
                        dst.write(f"{time},{cpu},W,{call.word:#x},1,8\n")
                        # A mutex's unlock wakes one sleeping locker, the first to have begun: its
                        # wait record goes here, so that the replay pairs it with this wake (the
                        # latest earlier in the file), not with the holder's later unlocks, which
                        # Valgrind, running one thread at a time, let come before its return.
                        queue = lockers.get(call.word)
                        if queue and queue[0] != cpu:
                            who = queue.popleft()
                            at = str(carry.pop(who, 0)) if gaps else waiting[(who, call.word)][1]
                            dst.write(f"{at},{who},R,{call.word:#x},1,8\n")
                    elif call.kind == "Q":
                        waiting[(cpu, call.word)] = (wakes[call.word], time)
                        if call.direct:
                            # A locker whose last return marker was lost is queued once, not twice.
                            if cpu in lockers[call.word]:
                                lockers[call.word].remove(cpu)
                            lockers[call.word].append(cpu)
                        if gaps:
                            carry[cpu] += int(time)
                    elif call.kind == "q":
                        began = waiting.pop((cpu, call.word), None)
                        queued = cpu in lockers.get(call.word, ())
                        if queued:
                            lockers[call.word].remove(cpu)
                        if call.direct and began is not None and not queued:
                            counts["waits_paired"] += 1
                            counts["mutex_waits_paired"] += 1
                            if gaps:
                                carry[cpu] += int(time)
                        elif began is not None and wakes[call.word] > began[0]:
                            counts["waits_paired"] += 1
                            counts["mutex_waits_paired"] += call.direct
                            dst.write(f"{time},{cpu},R,{call.word:#x},1,8\n")
                        elif gaps:
                            carry[cpu] += int(time)
                    continue
                if maps and flags == "0":
                    for a, b, base in maps:
                        if a <= addr < b:
                            counts["mapped_accesses"] += 1
                            dst.write(f"{time},{cpu},{op},{base + addr - a:#x},{size},1\n")
                            break
                    else:
                        dst.write(line)
                    continue
                dst.write(line)
        info = tiersim.convert(dst_csv, out, dst_format="native", src_format="csv")
    return _report(log, counts, nbytes, seen, info)


def _report(
    log: FileLog, counts: Counter[str], nbytes: Counter[str], seen: set[int], info: dict[str, Any]
) -> dict[str, Any]:
    """What `merge` merged: calls and bytes per kind, files, markers not found, the trace's stats."""
    logged = Counter(c.kind for c in log.calls.values())
    seen_kinds = Counter(log.calls[i].kind for i in seen)
    wait_kinds = ("Q", "q", "K")
    # A file call whose marker line is not in the trace would lose its I/O: none may be. Some
    # waits' and wakes' marker lines do not reach the trace (11-17 of about 1,750 in the tests'
    # tiny WiredTiger capture; why is not found): each loses only its pairing, counted apart.
    missing = {k: logged[k] - seen_kinds[k] for k in logged}
    return {
        "files": {log.paths[k]: log.extent[k] for k in log.extent},
        # What each file held when the program first opened it (0: created or truncated there),
        # by path (two files of one path, a name reused for a new inode, show as one), and the
        # trace's file size records: one per file, and those of files empty at open.
        "held_at_open": {log.paths[k]: log.held[k] for k in log.extent if k in log.held},
        "size_records": {"files": len(log.held), "empty_at_open": sum(n == 0 for n in log.held.values())},
        "calls_logged": dict(logged),
        "calls_in_trace": {k: counts[k] for k in ("O", "R", "W", "S", "C", "M", "U")},
        # Waits between threads (a shim built for them): waits begun and returned, wakes, and the
        # waits written as futex records (a wake of their word came while they waited).
        "waits": {
            "begun": counts["Q"],
            "returned": counts["q"],
            "wakes": counts["K"],
            "recorded": counts["waits_paired"],
            "recorded_mutex": counts["mutex_waits_paired"],
            "markers_missing": sum(missing[k] for k in wait_kinds if k in missing),
        },
        "bytes": {"read": nbytes["R"], "write": nbytes["W"]},
        "direct_calls": counts["direct_R"] + counts["direct_W"],
        "sync_calls": {"fsync": counts["fsync"], "fdatasync": counts["fdatasync"]},
        "mapped_accesses": counts["mapped_accesses"],
        "markers_missing": sum(n for k, n in missing.items() if k not in wait_kinds),
        "marker_repeats": counts["marker_repeats"],
        "stats": info,
    }


def _mapped_regions(trace: Path) -> list[tuple[int, int]]:
    """The files a merged trace maps, in order: (first byte, 4 KiB units), from its mapping
    records (flags 9: op R starts a file, op W continues the one before), which `merge` writes
    before every other record."""
    regions: list[tuple[int, int]] = []
    with tempfile.TemporaryDirectory(prefix=".tiersim-regions-") as tmp:
        # Only the head as text: `sample` keeps every mapping record whatever its window, and the
        # window [0, 1) keeps next to none of the rest.
        head, csv = Path(tmp) / "head.trace", Path(tmp) / "t.csv"
        tiersim.sample(trace, head, start=0, end=1)
        tiersim.convert(head, csv, dst_format="csv")
        with open(csv) as f:
            f.readline()
            f.readline()
            for line in f:
                _, _, op, addr, size, flags = line.rstrip("\n").split(",")
                if flags == "13":
                    continue
                if flags != "9":
                    break
                if op == "R":
                    regions.append((int(addr, 0), int(size)))
                elif regions:
                    regions[-1] = (regions[-1][0], regions[-1][1] + int(size))
    return regions


def files_matching(trace: Path, report: Mapping[str, Any], pattern: str) -> list[int]:
    """The start addresses of the files of a captured `trace` whose name (the last part of the
    path the program opened it by) matches the shell pattern `pattern` (fnmatch, case-sensitive),
    for `dax.files`: the trace names no files, so the capture report's `fileio.files` (path ->
    extent, in the order `merge` laid them out from FILE_BASE, each in whole REGION_ALIGN
    regions) says where each is, checked against the trace's mapping records up to the last file
    that matches. A report that disagrees with its trace there (two files of one path show as one
    in the report, so the later ones move) is an error rather than a guess."""
    files = dict((report.get("fileio") or {}).get("files") or {})
    names = list(files)
    hits = [i for i, p in enumerate(names) if fnmatchcase(PurePosixPath(p).name, pattern)]
    if not hits:
        return []
    mapped = _mapped_regions(trace)
    kept = names[: hits[-1] + 1]
    out = []
    for i, (path, (at, units)) in enumerate(zip(kept, _layout(int(files[p]) for p in kept), strict=True)):
        if i >= len(mapped) or mapped[i] != (at, units):
            got = f"{mapped[i][0]:#x} ({mapped[i][1]} units)" if i < len(mapped) else "no mapping record"
            raise TiersimError(
                f"{trace}: the report's file {i} ({path}) would be at {at:#x} ({units} units of 4 KiB), but the trace "
                f"has {got} there; the report does not describe this trace's files"
            )
        if i in hits:
            out.append(at)
    return out
