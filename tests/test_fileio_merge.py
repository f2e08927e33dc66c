"""workloads/_fileio.merge on a hand-written shim log and memory trace: loads and stores inside an
mmap of a file become file-page accesses (flag 1) at the file's address, from the mmap's marker to
the munmap's, and nothing outside the mapping or outside that span moves (docs/capture.md, "File
I/O in a captured trace"). No Valgrind or WiredTiger needed."""

from __future__ import annotations

from pathlib import Path

import pytest
import tiersim
from tiersim import TiersimError
from tiersim.workloads._fileio import FILE_BASE, merge

MARKERS = 0x7F00_0000_0000
MAP = 0x7E00_0000_0000


def _records(path: Path) -> list[str]:
    csv = path.with_suffix(".csv")
    tiersim.convert(path, csv, dst_format="csv")
    return csv.read_text().splitlines()[2:]


def _merge_waits(tmp_path: Path, log: Path, mem: Path) -> tuple[dict, list[str], Path]:
    """Merge a hand-written shim log into a hand-written instruction trace: the merge's count of
    the waits, the merged records, and the merged trace."""
    src, out = tmp_path / "mem.trace", tmp_path / "out.trace"
    tiersim.convert(mem, src, dst_format="native", src_format="csv")
    info = merge(src, log, out)
    assert info["markers_missing"] == 0
    return info["waits"], _records(out), out


def test_accesses_inside_a_file_mapping_become_file_pages(tmp_path: Path) -> None:
    # The shim's log: call 0 opens the file (5,000 B long then), call 1 maps 8 KiB of it from
    # offset 4 KiB (as WiredTiger maps a checkpoint's file, block_map.c), call 2 unmaps it; call
    # 3 opens another file (1 MiB then), call 4 opens the first again, truncating it (size 0:
    # not followed, the first open's size is the one kept).
    log = tmp_path / "calls"
    log.write_text(
        f"B {MARKERS:#x} 1073741824 42\n42 0 O 3 0 1:2 5000 /db/ycsb.wt\n42 1 M 3 {MAP:#x} 8192 4096\n"
        f"42 2 U {MAP:#x} 8192\n42 3 O 4 0 1:3 1048576 /db/a b.wt\n42 4 O 5 0 1:2 0 /db/ycsb.wt\n"
    )
    mem = tmp_path / "mem.csv"
    mem.write_text(
        "# tiersim time_unit=instructions addr_kind=virtual page_size=4096\n"
        "time,cpu,op,addr,size,file\n"
        f"100,1,R,{MAP + 0x40:#x},64,0\n"  # before the mmap: stays anonymous
        f"10,0,R,{MARKERS:#x},1,0\n"  # marker of call 0 (open)
        f"10,0,R,{MARKERS + 64:#x},1,0\n"  # marker of call 1 (mmap)
        f"5,1,R,{MAP + 0x1040:#x},64,0\n"  # inside: the file's byte 4096 + 0x1040
        f"6,1,W,{MAP + 0x40:#x},64,0\n"  # inside, a store: the file's byte 4096 + 0x40
        f"7,1,R,{MAP + 0x2000:#x},64,0\n"  # just past the mapping's end: anonymous
        f"10,0,R,{MARKERS + 128:#x},1,0\n"  # marker of call 2 (munmap)
        f"8,1,R,{MAP + 0x1040:#x},64,0\n"  # after the munmap: anonymous again
        f"10,0,R,{MARKERS + 192:#x},1,0\n"  # marker of call 3 (open)
        f"10,0,R,{MARKERS + 256:#x},1,0\n"  # marker of call 4 (open)
    )
    src, out = tmp_path / "mem.trace", tmp_path / "out.trace"
    tiersim.convert(mem, src, dst_format="native", src_format="csv")
    info = merge(src, log, out)
    assert info["calls_in_trace"] == {"O": 3, "R": 0, "W": 0, "S": 0, "C": 0, "M": 1, "U": 1}
    assert info["mapped_accesses"] == 2 and info["markers_missing"] == 0
    # The file's region reaches the mapping's end (offset 4 KiB + 8 KiB: 3 pages).
    assert info["files"] == {"/db/ycsb.wt": 12288, "/db/a b.wt": 0}
    assert info["held_at_open"] == {"/db/ycsb.wt": 5000, "/db/a b.wt": 1048576}
    second = FILE_BASE + (2 << 20)
    assert _records(out) == [
        f"0,0,R,{FILE_BASE:#x},3,9",  # the file's mapping record
        f"0,0,R,{FILE_BASE + 5000:#x},1,13",  # its size record: its data ended 5,000 B in
        f"0,0,R,{second:#x},1,9",  # the second file: one 4 KiB unit (the trace touches none)
        f"0,0,W,{second + 4096:#x},1,13",  # it held all of it and more: at its mapping's end
        f"100,1,R,{MAP + 0x40:#x},64,0",
        f"5,1,R,{FILE_BASE + 4096 + 0x1040:#x},64,1",
        f"6,1,W,{FILE_BASE + 4096 + 0x40:#x},64,1",
        f"7,1,R,{MAP + 0x2000:#x},64,0",
        f"8,1,R,{MAP + 0x1040:#x},64,0",
    ]
    st = tiersim.trace_stats(out, max_points=2)
    assert st["by_kind"]["file_mapping"] == {"read_bytes": 64, "reads": 1, "write_bytes": 64, "writes": 1}


def test_waits_between_threads_become_futex_records(tmp_path: Path) -> None:
    # The shim built for waits (TIERSIM_WAITS): CPU 1 waits on word C twice, CPU 0 wakes it once
    # between the first wait's start and return; the second wait returns with no wake since its
    # start (a timeout): no record, its instructions carried to CPU 1's next record, as the
    # first wait's start's are.
    C = 0x55_0000
    log = tmp_path / "calls"
    log.write_text(
        f"B {MARKERS:#x} 1073741824 42\n42 0 Q {C:#x}\n42 1 K {C:#x}\n42 2 q {C:#x}\n42 3 Q {C:#x}\n42 4 q {C:#x}\n"
    )
    mem = tmp_path / "mem.csv"
    mem.write_text(
        "# tiersim time_unit=instructions addr_kind=virtual page_size=4096\n"
        "time,cpu,op,addr,size,file\n"
        f"7,1,R,{MARKERS:#x},1,0\n"  # call 0: CPU 1 starts waiting after 7 instructions
        f"20,0,R,{MARKERS + 64:#x},1,0\n"  # call 1: CPU 0 wakes C
        f"3,1,R,{MARKERS + 128:#x},1,0\n"  # call 2: CPU 1's wait returns: a wait record, 7 + 3
        f"4,1,R,{MARKERS + 192:#x},1,0\n"  # call 3: waits again
        f"5,1,R,{MARKERS + 256:#x},1,0\n"  # call 4: returns, no wake since: dropped
        "6,1,R,0x1000,64,0\n"  # CPU 1's next access carries 4 + 5
    )
    waits, records, out = _merge_waits(tmp_path, log, mem)
    assert waits == {"begun": 2, "returned": 2, "wakes": 1, "recorded": 1, "recorded_mutex": 0, "markers_missing": 0}
    assert records == [f"20,0,W,{C:#x},1,8", f"10,1,R,{C:#x},1,8", "15,1,R,0x1000,64,0"]
    assert tiersim.trace_stats(out, max_points=2)["futex_records"] == {"wait": 1, "wake": 1}


def test_a_sleeping_locker_pairs_with_the_unlock_that_woke_it(tmp_path: Path) -> None:
    # Under Valgrind one thread runs at a time: CPU 0 holds mutex L and unlocks it three times while
    # CPUs 1 and 2 sleep in its lock (CPU 1 first), and both return only after the third unlock.
    # Each unlock wakes one locker, the first to have begun: CPU 1's wait record goes right after
    # the first unlock and CPU 2's after the second, each carrying its lock call's instructions,
    # so the replay pairs them with those wakes (the latest earlier in the file), not with the
    # third, which the latest-wake rule would give both.
    L = 0x66_0000
    calls = [(1, "Q"), (2, "Q"), (0, "K"), (0, "K"), (0, "K"), (1, "q"), (2, "q")]
    log = tmp_path / "calls"
    log.write_text(
        f"B {MARKERS:#x} 1073741824 42\n" + "".join(f"42 {i} {k} {L:#x} m\n" for i, (_, k) in enumerate(calls))
    )
    mem = tmp_path / "mem.csv"
    mem.write_text(
        "# tiersim time_unit=instructions addr_kind=virtual page_size=4096\n"
        "time,cpu,op,addr,size,file\n"
        + "".join(f"{10 + i},{cpu},R,{MARKERS + 64 * i:#x},1,0\n" for i, (cpu, _) in enumerate(calls))
        + "3,1,R,0x1000,64,0\n4,2,R,0x2000,64,0\n"
    )
    waits, records, _ = _merge_waits(tmp_path, log, mem)
    assert waits == {"begun": 2, "returned": 2, "wakes": 3, "recorded": 2, "recorded_mutex": 2, "markers_missing": 0}
    assert records == [
        f"12,0,W,{L:#x},1,8",
        f"10,1,R,{L:#x},1,8",  # CPU 1's lock call (10 instructions) after the first unlock
        f"13,0,W,{L:#x},1,8",
        f"11,2,R,{L:#x},1,8",
        f"14,0,W,{L:#x},1,8",
        "18,1,R,0x1000,64,0",  # its return's 15 instructions carried, + 3
        "20,2,R,0x2000,64,0",  # 16 + 4
    ]


def test_nothing_logged_copies_the_trace_as_the_line_by_line_merge_would(tmp_path: Path) -> None:
    # A program that opened no file (bfs): merge copies the memory trace natively, skipping its
    # pass over every record as text; the same bytes and figures as that pass gives (the records
    # through CSV and back: nothing to insert, nothing mapped), for an empty and a missing log.
    mem = tmp_path / "mem.csv"
    mem.write_text(
        "# tiersim time_unit=instructions addr_kind=virtual page_size=4096\n"
        "time,cpu,op,addr,size,file\n"
        + "".join(f"{3 + i % 7},{i % 2},{'RW'[i % 3 == 0]},{MAP + 64 * i:#x},64,0\n" for i in range(5000))
    )
    src, through_csv = tmp_path / "mem.trace", tmp_path / "csv.trace"
    tiersim.convert(mem, src, dst_format="native", src_format="csv")
    tiersim.convert(src, tmp_path / "again.csv", dst_format="csv")
    tiersim.convert(tmp_path / "again.csv", through_csv, dst_format="native", src_format="csv")
    (tmp_path / "empty").write_text("")
    for log in (tmp_path / "empty", tmp_path / "missing"):
        out = tmp_path / f"{log.name}.trace"
        info = merge(src, log, out)
        assert out.read_bytes() == through_csv.read_bytes()
        assert info["stats"]["accesses"] == 5000 and info["stats"]["writes"] == 1667
        assert info["calls_logged"] == {} and info["files"] == {} and info["markers_missing"] == 0
    # A physical trace is refused before anything is written, logged calls or none.
    phys = tmp_path / "phys.csv"
    phys.write_text(mem.read_text().replace("addr_kind=virtual", "addr_kind=physical"))
    tiersim.convert(phys, tmp_path / "phys.trace", dst_format="native", src_format="csv")
    with pytest.raises(TiersimError, match="file I/O merge needs a virtual trace"):
        merge(tmp_path / "phys.trace", tmp_path / "empty", tmp_path / "p.trace")
    assert not (tmp_path / "p.trace").exists()
