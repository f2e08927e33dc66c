"""`tiersim validate linux` (docs/validate.md): the guest's output parsed into the kernel's figures,
the failures a guest can have, and the real VM: the quick case end to end (default suite: 39 s in
`make test` on two shared cores), a hung VM (5 s), a program crashing in the guest after the sizing
boot (16 s; 12 s with the sizing boot on an idle host of 2026-11-30) and one running it out of
memory (21 s), SIGTERM or SIGINT mid-boot (3 s each); the full matrix is a slow test (6-11 min)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import tiersim
from tiersim.validate import kernel_trace, linux, vm

DATA = Path(__file__).parent / "data" / "validate"
# A real guest's output: kv (256 MiB, 8M ops) under tiering mode, recorded by the quick case.
GUEST_OUT = (DATA / "kv-tiering.guest.out").read_text()
# The same case from a later matrix, whose sampler also records kswapd's and the program's CPU time.
GUEST_OUT_KSWAPD = (DATA / "kv-tiering-kswapd.guest.out").read_text()

needs_vm = pytest.mark.skipif(
    shutil.which("qemu-system-x86_64") is None or not list((vm.vm_dir() / "linux" / "boot").glob("vmlinuz-6.1.*")),
    reason="QEMU or the Debian kernel is missing: `make vm` installs them",
)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiersim", *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )


def test_guest_output_gives_the_kernels_figures() -> None:
    machine, calib_s, program_s, samples = linux.parse_guest(GUEST_OUT, "", "kv-tiering")
    assert machine["kernel"] == "6.1.0-56-amd64"
    assert machine["tiers"] == {22: "1", 4: "0,2"}
    assert machine["nodes"][0]["cpus"] == "0-1" and machine["nodes"][1]["cpus"] == ""
    assert machine["zones"]["0/DMA"]["protection"] == [0, 191, 191, 191, 191]
    assert calib_s == 3.40817546 and program_s == 9.57793286
    # The counters of the E line less those of the program's first sample, read off the file.
    m = linux.kernel_metrics(linux.SETTINGS["tiering"], samples)
    assert (m["promotions"], m["demotions"], m["hint_faults"], m["promote_candidates"]) == (2668, 3133, 40576, 23713)
    assert m["pages"] == 41793 + 23838
    assert m["fast_share"] == pytest.approx(100 * 41793 / (41793 + 23838))
    # Under AutoNUMA promotions are numa_pages_migrated (here equal: every migration was a promotion).
    assert linux.kernel_metrics(linux.SETTINGS["autonuma"], samples)["promotions"] == 2668


def test_platform_describes_the_vm(tmp_path: Path) -> None:
    machine, calib_s, program_s, samples = linux.parse_guest(GUEST_OUT, "", "kv-tiering")
    run = linux.GuestRun(machine, calib_s, program_s, samples, 30.0, "tcg")
    room, wmin = linux.fast_node_room(run)
    # free0 158,732 KiB at the first sample = 39,683 pages, less the DMA zone's 191 reserved.
    assert (room, wmin) == (39733 - 191, 9 + 122)
    p = tomllib.loads(linux.platform_toml(run, 0.25))
    assert p["nodes"][0]["capacity"] == f"{room * 4}KiB" and p["nodes"][0]["cpus"] == "0-1"
    assert p["nodes"][1]["capacity"] == "524288KiB" and p["nodes"][1]["tier"] == 1
    assert p["os"]["daemon_time_scale"] == 0.25
    # The capture's writes are the LLC's dirty evictions, which the guest's CPU does not wait for.
    assert p["host"]["writes"] == "posted"
    (tmp_path / "vm.toml").write_text(linux.platform_toml(run, 0.25))
    assert tomllib.loads(tiersim.resolve_platform(tmp_path / "vm.toml"))["host"]["writes"] == "posted"


def test_kswapd_cost_comes_from_the_guests_kswapd() -> None:
    machine, calib_s, program_s, samples = linux.parse_guest(GUEST_OUT_KSWAPD, "", "kv-tiering")
    run = linux.GuestRun(machine, calib_s, program_s, samples, 30.0, "tcg")
    m = linux.kernel_metrics(linux.SETTINGS["tiering"], samples)
    # Read off the file: kswapd0 ran 3,947,184,948 ns and reclaimed 3,921 pages over the program.
    assert m["kswapd_cpu_s"] == pytest.approx(3.947184948) and m["kswapd_reclaimed"] == 3921
    case = linux.Case(linux.PROGRAMS["kv"], linux.SETTINGS["tiering"], [run, run])
    ks = linux.kswapd_cost(case, 0.25)
    assert ks["guest_ns_per_page"] == pytest.approx(3947184948 / 3921)
    # Split over the intervals between pages stolen and pages scanned and left: both positive
    # here, and each below the whole run's figure per page stolen, which folds the scanning in.
    steal, left = ks["guest_ns_per_page_stolen"], ks["guest_ns_per_page_left"]
    assert 0 < left < steal < ks["guest_ns_per_page"]
    assert ks["page_cost_ns"] == pytest.approx(steal * 0.25) and ks["scan_cost_ns"] == pytest.approx(left * 0.25)
    # Two CPUs, the program's two threads and kswapd: a third of each CPU's time is kswapd's.
    assert ks["cpu_share"] == pytest.approx(2 / 3)
    p = tomllib.loads(linux.platform_toml(run, 0.25, ks))
    assert p["os"]["kswapd_page_cost"] == f"{steal * 0.25:.0f}ns"
    assert p["os"]["kswapd_scan_cost"] == f"{left * 0.25:.0f}ns"
    assert p["os"]["kswapd_cpu_share"] == pytest.approx(0.6667)
    # An older guest output has no kswapd times: the platform keeps tiersim's defaults.
    old = linux.parse_guest(GUEST_OUT, "", "kv-tiering")
    old_case = linux.Case(linux.PROGRAMS["kv"], linux.SETTINGS["tiering"], [linux.GuestRun(*old, 30.0, "tcg")])
    assert linux.kswapd_cost(old_case, 0.25) == {}


def _ksw_run(intervals: list[tuple[int, int, int]]) -> linux.GuestRun:
    """A run whose samples advance kswapd by (pages scanned and left, pages stolen, ns) each."""
    samples, scan, steal, ns = [], 0, 0, 0
    for left, stolen, t in [(0, 0, 0), *intervals]:
        scan, steal, ns = scan + left + stolen, steal + stolen, ns + t
        samples.append({"tag": "S", "pgscan_kswapd": scan, "pgsteal_kswapd": steal, "kswapd_ns": ns})
    samples[-1]["tag"] = "E"
    return linux.GuestRun({}, 1.0, 1.0, samples, 10.0, "tcg")


def test_kswapd_cost_splits_scanning_from_taking() -> None:
    # Hand-built intervals at exactly 2 us per page left and 50 us per page stolen, over two runs.
    a = _ksw_run([(1000, 0, 2_000_000), (0, 100, 5_000_000)])
    b = _ksw_run([(500, 50, 3_500_000), (0, 0, 0)])
    ks = linux.kswapd_cost(linux.Case(linux.PROGRAMS["kv"], linux.SETTINGS["tiering"], [a, b]), 0.5)
    assert ks["guest_ns_per_page_left"] == pytest.approx(2000) and ks["guest_ns_per_page_stolen"] == pytest.approx(
        50000
    )
    assert ks["scan_cost_ns"] == pytest.approx(1000) and ks["page_cost_ns"] == pytest.approx(25000)
    # The whole run's CPU per page stolen: 10.5 ms over 150 pages.
    assert ks["guest_ns_per_page"] == pytest.approx(10_500_000 / 150)
    # Only stealing, never scanning past a page: no split, the whole run's figure.
    only = _ksw_run([(0, 100, 5_000_000), (0, 20, 1_000_000)])
    ks = linux.kswapd_cost(linux.Case(linux.PROGRAMS["kv"], linux.SETTINGS["tiering"], [only]), 0.5)
    assert "scan_cost_ns" not in ks and ks["page_cost_ns"] == pytest.approx(6_000_000 / 120 * 0.5)


def test_node_0s_other_memory_is_occupied_on_the_platform() -> None:
    # The guest's @ lru line for node 0 as the program starts: 12,188 KiB inactive anon (the
    # tmpfs root), 8 KiB inactive file; node 0 grows by them and holds them as occupied.
    out = GUEST_OUT.replace(
        "@ run begin",
        "@ lru 0 active_anon=1592 inactive_anon=12188 active_file=0 inactive_file=8 unevictable=0 shmem=13676 \n"
        "@ lru 1 active_anon=0 inactive_anon=0 active_file=0 inactive_file=0 unevictable=0 shmem=0 \n@ run begin",
    )
    machine, calib_s, program_s, samples = linux.parse_guest(out, "", "kv-tiering")
    assert machine["lru"][0]["inactive_anon"] == 12188 and machine["lru"][0]["shmem"] == 13676
    run = linux.GuestRun(machine, calib_s, program_s, samples, 30.0, "tcg")
    room, wmin = linux.fast_node_room(run)
    p = tomllib.loads(linux.platform_toml(run, 0.25))
    node0 = p["nodes"][0]
    assert node0["capacity"] == f"{(room + 3047 + 2) * 4}KiB"
    assert (node0["occupied"], node0["occupied_file"]) == ("12188KiB", "8KiB")
    # min_free still gives node 0 the guest's min watermark over the larger node.
    fast, slow = room + 3049, 524288 // 4
    assert p["os"]["min_free"] == f"{wmin * (fast + slow) // fast * 4}KiB"
    # Boots from before the lru lines: no occupied memory, as before.
    old = tomllib.loads(linux.platform_toml(linux.GuestRun(*linux.parse_guest(GUEST_OUT, "", "kv"), 30.0, "tcg"), 0.25))
    assert old["nodes"][0]["occupied"] == "0KiB" and old["nodes"][0]["capacity"] == f"{room * 4}KiB"


def test_fault_cost_comes_from_the_calibrations_touch_phase() -> None:
    # calib.c prints its touch phase's time in the guest: here 4,096 pages in 81.92 ms, 20 us each.
    out = GUEST_OUT_KSWAPD.replace("@ calib begin", "@ calib begin\n@ calib_touch 81920000 4096")
    machine, calib_s, program_s, samples = linux.parse_guest(out, "", "kv-tiering")
    assert machine["calib_touch"] == {"ns": 81920000, "pages": 4096}
    run = linux.GuestRun(machine, calib_s, program_s, samples, 30.0, "tcg")
    # The guest's calibration time without the touch phase, the part the CPU's speed sets.
    assert linux.calib_work_s(run) == pytest.approx(calib_s - 0.08192)
    case = linux.Case(linux.PROGRAMS["kv"], linux.SETTINGS["tiering"], [run])
    fc = linux.fault_cost(case, 0.25)
    assert fc == {"guest_ns_per_fault": 20000.0, "fault_ns": 5000.0}
    p = tomllib.loads(linux.platform_toml(run, 0.25, None, fc))
    assert p["os"]["fault_latency"] == "5000ns" and p["os"]["hint_fault_latency"] == "5000ns"
    # Boots from before the touch phase keep the calibration whole and tiersim's default latencies.
    old = linux.parse_guest(GUEST_OUT_KSWAPD, "", "kv-tiering")
    old_run = linux.GuestRun(*old, 30.0, "tcg")
    assert linux.calib_work_s(old_run) == old_run.calib_s
    assert linux.fault_cost(linux.Case(linux.PROGRAMS["kv"], linux.SETTINGS["tiering"], [old_run]), 0.25) == {}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("X 9577932860 exit=0", "X 9577932860 signal=11"), "the program failed in the guest (signal 11)"),
        (("X 3408175460 exit=0", "X 3408175460 exit=3"), "the calibration program failed in the guest (exit 3)"),
        (("@ oom 0", "@ oom 1"), "the guest ran out of memory"),
        (("@ kernel 6.1.0-56-amd64", "@ kernel 6.1.0-56-amd64\n! ndctl create-namespace failed"), "ndctl create-namespace failed"),
        (("@ done", ""), "the guest stopped before the end of the run"),
    ],
)  # fmt: skip
def test_a_failed_guest_is_one_clear_error(edit: tuple[str, str], message: str) -> None:
    assert edit[0] in GUEST_OUT
    with pytest.raises(tiersim.TiersimError, match="^kv-tiering: .*" + message.replace("(", r"\(").replace(")", r"\)")):
        linux.parse_guest(GUEST_OUT.replace(*edit), "", "kv-tiering")


def test_oom_killed_program_is_reported_as_oom_not_as_a_crash() -> None:
    text = GUEST_OUT.replace("X 9577932860 exit=0", "X 9577932860 signal=9")
    console = "[   9.1] Out of memory: Killed process 130 (prog)"
    with pytest.raises(tiersim.TiersimError, match="ran out of memory"):
        linux.parse_guest(text, console, "kv-tiering")


def test_agreement_rule() -> None:
    # Within 25 % of the kernel's mean, or within its run-to-run spread when that is wider.
    assert linux.compare("promotions", [100, 100, 100], 125)["agree"]
    assert not linux.compare("promotions", [100, 100, 100], 126)["agree"]
    wide = linux.compare("promotions", [50, 100, 150], 190)
    assert wide["tolerance"] == 100 and wide["agree"]
    # ... which is marked: the kernel's own runs split, so the verdict says little. Within 25 %
    # it is not, however wide the spread.
    assert wide["by_spread"] and not linux.compare("promotions", [50, 100, 150], 125)["by_spread"]
    assert not linux.compare("promotions", [100, 100, 100], 125)["by_spread"]
    assert linux.compare("hint_faults", [17_105, 0, 0], 13_576)["by_spread"]
    assert not linux.compare("fast_share", [82.6, 76.7, 76.7], 83.3)["by_spread"]
    assert linux.compare("fast_share", [60.0], 69.9)["agree"]
    assert not linux.compare("fast_share", [60.0], 70.1)["agree"]
    zero = linux.compare("hint_faults", [0], 0)
    assert zero["agree"] and zero["relative_error"] == 0.0


def test_time_scale_is_solved_for_the_programs_own_speed() -> None:
    # A replay whose time grows with the scale (the guest's fault and kswapd costs enter through
    # it): T(d) = 2 + 3 d + 0.5 d^2 s. The guest ran the program in 10 s, so T(d) = 10 d at
    # d = 7 - sqrt(45) = 0.29180.
    calls = []

    def replay(d: float) -> tuple[str, float]:
        calls.append(d)
        return f"run at {d}", 2 + 3 * d + 0.5 * d * d

    res, d, steps = linux.solve_time_scale(replay, 10.0, 0.8)
    # Solved to the tolerance on the time (2 %), which is 2.5 % here on the scale itself.
    assert abs(2 + 3 * d + 0.5 * d * d - 10 * d) <= linux.LENS_TOLERANCE * 10 * d
    assert d == pytest.approx(0.29180, rel=0.03)
    # The result is the replay at the scale returned, and every replay is a step.
    assert res == f"run at {d}" and [s["daemon_time_scale"] for s in steps] == calls
    assert 2 <= len(calls) <= 1 + linux.LENS_STEPS
    assert steps[-1]["guest_axis_s"] == pytest.approx(10.0, rel=linux.LENS_TOLERANCE)
    # Already there: the calibration's scale is kept, with one replay.
    res, d, steps = linux.solve_time_scale(lambda d: ("r", 10 * d), 10.0, 0.5)
    assert d == 0.5 and len(steps) == 1


def _run(sys_s: float, hint_faults: int = 0, promoted: int = 0) -> linux.GuestRun:
    first = {"tag": "S", "prog_sys_ns": 0, "numa_hint_faults": 0, "pgpromote_success": 0, "numa_pages_migrated": 0}
    end = {"tag": "E", "prog_sys_ns": int(sys_s * 1e9), "numa_hint_faults": hint_faults}
    end |= {"pgpromote_success": promoted, "numa_pages_migrated": 0, "N0": 1}
    return linux.GuestRun({}, 3.0, 5.0, [first, end], 30.0, "tcg")


def test_hint_fault_cost_comes_from_the_programs_system_time() -> None:
    kv, s = linux.PROGRAMS["kv"], linux.SETTINGS
    cases = {
        "kv-none": linux.Case(kv, s["none"], [_run(0.30), _run(0.34)]),
        # AutoNUMA adds 0.40 s of system time for 10,000 hint faults: 40 us each.
        "kv-autonuma": linux.Case(kv, s["autonuma"], [_run(0.70, 9_000), _run(0.74, 11_000)]),
        "kv-tiering": linux.Case(kv, s["tiering"], [_run(0.82, 5_000, 1_000)]),
    }
    costs = linux.kernel_path_costs(cases)
    assert costs["kv"]["hint_fault_guest_ns"] == pytest.approx(40_000)
    assert costs["kv"]["hint_fault_sys_s_runs"] == {"none": [0.30, 0.34], "autonuma": [0.70, 0.74]}
    # On a case's platform, times its daemon time scale; the page fault keeps the touch phase's.
    run = _run(0.1)
    run.machine["calib_touch"] = {"ns": 81_920_000, "pages": 4096}
    fc = linux.fault_cost(linux.Case(kv, s["tiering"], [run]), 0.5, costs["kv"])
    assert fc == pytest.approx({"guest_ns_per_fault": 20_000, "fault_ns": 10_000, "hint_fault_ns": 20_000})
    # The calibration's mprotect of 16,384 PTEs in 8.192 ms: 500 ns a PTE in the guest, the
    # scanner's walk on the case's platform at its scale.
    run.machine["calib_mprotect"] = {"ns": 8_192_000, "count": 16_384}
    fc = linux.fault_cost(linux.Case(kv, s["tiering"], [run]), 0.5, costs["kv"])
    assert fc["guest_ns_per_pte"] == 500 and fc["pte_scan_ns"] == 250
    machine, calib_s, program_s, samples = linux.parse_guest(GUEST_OUT, "", "kv-tiering")
    toml_text = linux.platform_toml(linux.GuestRun(machine, calib_s, program_s, samples, 30.0, "tcg"), 0.5, None, fc)
    assert 'fault_latency = "10000ns"' in toml_text and 'hint_fault_latency = "20000ns"' in toml_text
    assert 'pte_scan_cost = "250ns"' in toml_text
    # Without the none case, or from boots that did not record the system time: no cost, and
    # why not.
    no_none = linux.kernel_path_costs({k: v for k, v in cases.items() if k != "kv-none"})
    assert no_none == {"kv": {"hint_fault_not_measured": "the run has no kv-none case"}}
    old = _run(0.7, 10_000)
    del old.samples[1]["prog_sys_ns"]
    cases["kv-autonuma"].runs.append(old)
    assert linux.kernel_path_costs(cases) == {
        "kv": {"hint_fault_not_measured": "the boots did not record the program's system time"}
    }


def test_hint_fault_cost_is_measured_only_above_the_runs_noise() -> None:
    # graph's boots of the 16:38 matrix of 2026-11-30: AutoNUMA's system time (1.00-1.82 s) does
    # not stand above no balancing's (1.14-1.75 s); the difference of the means per hint fault came
    # out at 0.146 us, noise, and became a 56 ns hint fault. Not measured: a hint fault costs what
    # a page fault does, and the result says why.
    g, s = linux.PROGRAMS["graph"], linux.SETTINGS
    cases = {
        "graph-none": linux.Case(g, s["none"], [_run(1.75), _run(1.59), _run(1.14)]),
        "graph-autonuma": linux.Case(g, s["autonuma"], [_run(1.67, 27_349), _run(1.82, 27_350), _run(1.00, 13_676)]),
    }
    costs = linux.kernel_path_costs(cases)["graph"]
    assert "hint_fault_guest_ns" not in costs
    assert costs["hint_fault_not_measured"] == (
        "the program's system time under AutoNUMA, 1.000-1.820 s, does not stand above its system time "
        "with no balancing, 1.140-1.750 s (the boots' noise)"
    )
    assert costs["hint_fault_sys_s_runs"] == {"none": [1.75, 1.59, 1.14], "autonuma": [1.67, 1.82, 1.0]}
    run = _run(0.1)
    run.machine["calib_touch"] = {"ns": 81_920_000, "pages": 4096}
    fc = linux.fault_cost(linux.Case(g, s["autonuma"], [run]), 0.5, costs)
    assert "hint_fault_ns" not in fc
    assert linux.hint_fault_text("graph", costs) == "graph: hint-fault cost not measured: " + (
        costs["hint_fault_not_measured"] + "; a hint fault costs what a page fault does"
    )
    # No hint fault at all under AutoNUMA: nothing to divide by.
    cases["graph-autonuma"] = linux.Case(g, s["autonuma"], [_run(2.0), _run(2.1), _run(2.2)])
    assert linux.kernel_path_costs(cases)["graph"]["hint_fault_not_measured"] == "no hint fault under AutoNUMA"
    # The least of AutoNUMA's above the greatest of no balancing's: measured, the difference of
    # the means per hint fault as before (0.60 s over 20,000 faults: 30 us).
    cases["graph-autonuma"] = linux.Case(g, s["autonuma"], [_run(2.0, 20_000), _run(2.1, 20_000), _run(2.2, 20_000)])
    cases["graph-none"] = linux.Case(g, s["none"], [_run(1.4), _run(1.5), _run(1.6)])
    costs = linux.kernel_path_costs(cases)["graph"]
    assert costs["hint_fault_guest_ns"] == pytest.approx(30_000) and "hint_fault_not_measured" not in costs
    assert linux.hint_fault_text("graph", costs) == (
        "graph: a hint fault costs 30.0 us of guest time (the program's system time under AutoNUMA, "
        "2.000-2.200 s, over its system time with no balancing, 1.400-1.600 s, per hint fault)"
    )


def test_kernel_scan_passes_come_from_numa_scan_seq() -> None:
    first = {"tag": "S", "scan_seq": 2}
    end = {"tag": "E", "scan_seq": 5, "N0": 1}
    assert linux.kernel_metrics(linux.SETTINGS["tiering"], [first, end])["scan_passes"] == 3
    # A kernel without CONFIG_SCHED_DEBUG (no /proc/PID/sched): the sampler prints -1.
    end["scan_seq"] = -1
    assert linux.kernel_metrics(linux.SETTINGS["tiering"], [first, end])["scan_passes"] is None


def test_kernel_trace_is_counted_as_the_guest_recorded_it() -> None:
    # Real lines of a kv run under tiering mode (16:24-style boot with --kernel-trace), cut down.
    events, stats = kernel_trace.parse((DATA / "kv-tiering-kernel-trace.txt").read_text().splitlines())
    s = kernel_trace.summarize(events, stats)
    assert s["buffer"] == {"entries": 1734 + 3964, "overrun": 0, "commit_overrun": 0, "dropped_events": 0}
    # The fill's kswapd pass reclaims for ZONE_DMA (reclaim zone 0, a watermark boost's wake-up
    # with no gfp flags): it skips the DMA32 pages above it, and pgscan counts them.
    assert s["isolate_by_reclaim_zone"] == {
        "0": {"inactive_anon": {"scanned": 37214, "skipped": 37213, "taken": 1}},
        "3": {"inactive_anon": {"scanned": 3 + 6, "skipped": 0, "taken": 9}},
    }
    assert s["shrink_inactive"] == {"scanned": 37214 + 24, "reclaimed": 0, "kept": 1, "activated": 24}
    assert s["kswapd_wakeups"] == {"prog gfp=none": 1, "sampler gfp=none": 1}
    assert s["migrate"] == {
        "compaction": {"succeeded": 0, "failed": 2},
        "demotion": {"succeeded": 17, "failed": 0},
        "numa_misplaced": {"succeeded": 1, "failed": 0},
    }
    # Times from the program's exec (6.511635 s): its second thread at 7.998194 s; the main
    # thread's window at 7.511874 s returned early, the new thread's walked three VMAs. The
    # sampler's own window is not the program's.
    # Two balance_pgdat runs: the fill's, which took 1 page of 37,214 looked at and kept it (at
    # priority 11), and a promotion failure's, which activated 24 it had kept before.
    assert s["kswapd_runs"] == [
        {"t_s": 0.70679, "scanned": 37214, "reclaimed": 0, "kept": 1, "activated": 0, "priority": 11},
        {"t_s": 2.617966, "scanned": 24, "reclaimed": 0, "kept": 0, "activated": 24, "priority": 9},
    ]
    assert s["threads_created_s"] == [1.486559]
    assert s["scan_windows"] == [
        {"t_s": 1.000239, "pid": 133, "walked": False},
        {"t_s": 2.598864, "pid": 134, "walked": True},
    ]
    # Hex flags and names stay text, counts are numbers, and the event's own pid does not hide
    # the tracing task's.
    exec_row = next(e for e in events if e["event"] == "task_newtask" and e["task"] == "prog")
    assert exec_row["pid"] == 133 and exec_row["arg_pid"] == "134" and exec_row["clone_flags"] == "3d0f00"
    env = kernel_trace.case_env()
    assert "vmscan/mm_vmscan_lru_isolate" in env["KERNEL_TRACE_EVENTS"].split()
    assert env["KERNEL_TRACE_FUNCTIONS"] == "task_numa_work change_prot_numa"


def test_programs_are_sized_to_the_guests_speed() -> None:
    # A guest that runs the calibration's work in 1 s is twice as fast as the hosts the programs'
    # work was chosen on (2 s): twice the operations, iterations and passes, the footprint the same.
    assert linux.size_factor(1.0) == 2.0
    assert linux.sized(linux.PROGRAMS["kv"], 2.0).args == (256, 24000, 2)
    assert linux.sized(linux.PROGRAMS["graph"], 2.0).args == (128, 1000, 8, 12, 2)
    assert linux.sized(linux.PROGRAMS["stream"], 2.0).args == (64, 60, 2)
    assert linux.sized(linux.PROGRAMS["kv"], 1.0) == linux.PROGRAMS["kv"]
    # Within the limits: a very fast or very slow guest, and never below one unit of work.
    assert linux.size_factor(0.1) == linux.SIZE_FACTORS[1] == 4.0
    assert linux.size_factor(10.0) == linux.SIZE_FACTORS[0] == 0.5
    assert linux.sized(linux.PROGRAMS["graph"], 0.5).args == (128, 1000, 8, 3, 2)
    assert linux.sized(linux.Program("p", "p", (1,), 1, work_arg=0), 0.1).args == (1,)


def test_the_sizing_boot_gives_the_calibration_alone() -> None:
    # The sizing boot's output ends after the calibration: its time, no program and no samples.
    head = GUEST_OUT[: GUEST_OUT.index("@ run begin")]
    machine, calib_s, program_s, samples = linux.parse_guest(head + "@ done\n", "", "sizing", calib_only=True)
    full = linux.parse_guest(GUEST_OUT, "", "kv-tiering")
    assert (calib_s, program_s, samples) == (full[1], 0.0, [])
    assert machine["nodes"] == full[0]["nodes"]
    # Read as a case's boot it is cut short, and a sizing boot that stops early is one too.
    with pytest.raises(tiersim.TiersimError, match="^kv: the guest stopped before the end of the run"):
        linux.parse_guest(head + "@ done\n", "", "kv")
    with pytest.raises(tiersim.TiersimError, match="^sizing: the guest stopped before the end of the run"):
        linux.parse_guest(head, "", "sizing", calib_only=True)


def test_calibration_phases_are_parsed() -> None:
    out = GUEST_OUT_KSWAPD.replace(
        "@ calib begin", "@ calib begin\n@ calib_sweep 12170950 2097152\n@ calib_random 1451952590 4000000"
    )
    machine, *_ = linux.parse_guest(out, "", "kv-tiering")
    assert machine["calib_sweep"] == {"ns": 12170950, "count": 2097152}
    assert machine["calib_random"] == {"ns": 1451952590, "count": 4000000}


def test_migration_cost_comes_from_the_calibrations_move_pages() -> None:
    # calib.c's migrate phase: 2 x 2,048 pages moved by move_pages(2) in 614.4 ms, 150 us a page.
    out = GUEST_OUT_KSWAPD.replace(
        "@ calib begin",
        "@ calib begin\n@ calib_touch 81920000 4096\n@ calib_mprotect 4096000 16384\n@ calib_migrate 614400000 4096",
    )
    machine, calib_s, program_s, samples = linux.parse_guest(out, "", "kv-tiering")
    assert machine["calib_migrate"] == {"ns": 614400000, "count": 4096}
    run = linux.GuestRun(machine, calib_s, program_s, samples, 30.0, "tcg")
    # The phase is the guest kernel's work: not in the calibration's CPU time.
    assert linux.calib_work_s(run) == pytest.approx(calib_s - 0.08192 - 0.004096 - 0.6144)
    # The least over every boot of the matrix: boots whose flushes stalled (4 ms a page), here two
    # of three, do not set it.
    slow = linux.GuestRun(
        *linux.parse_guest(out.replace("@ calib_migrate 614400000", "@ calib_migrate 16384000000"), "", "kv"),
        30.0,
        "tcg",
    )
    case = linux.Case(linux.PROGRAMS["kv"], linux.SETTINGS["tiering"], [slow, run, slow])
    paths = linux.kernel_path_costs({"kv-tiering": case})
    assert paths == {
        "kv": {"migration_guest_ns": 150000.0, "hint_fault_not_measured": "the run has no kv-none or kv-autonuma case"}
    }
    fc = linux.fault_cost(case, 0.25, paths["kv"])
    assert fc["guest_ns_per_migration"] == 150000.0 and fc["migrate_ns"] == 37500.0
    # No hint-fault cost measured (no autonuma case): a hint fault costs a page fault.
    assert "hint_fault_ns" not in fc
    p = tomllib.loads(linux.platform_toml(run, 0.25, None, fc))
    # Each measured cost holds its own TLB flush, so none is charged apart.
    assert p["os"]["migrate_overhead"] == "37500ns" and p["os"]["tlb_shootdown"] == "0ns"


def test_missing_vm_names_the_make_target(tmp_path: Path) -> None:
    r = _cli("validate", "linux", "--quick", "-o", str(tmp_path / "out"), env={"TIERSIM_VM_DIR": str(tmp_path)})
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "run `make vm`" in lines[0] and "Debian 6.1 kernel image" in lines[0]
    assert not (tmp_path / "out").exists()


def test_missing_compiler_for_a_guest_program_is_one_clear_error(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(tiersim.TiersimError, match=r"^no C compiler 'no-such-cc' to build sampler.c for the guest"):
        vm.compile_static(vm.GUEST / "sampler.c", tmp_path / "sampler")
    assert list(tmp_path.iterdir()) == []


@needs_vm
def test_missing_valgrind_names_its_make_target_before_a_boot(monkeypatch) -> None:
    # The programs are captured under tiersim's Valgrind tool after the boots: checked first.
    which = shutil.which
    monkeypatch.setattr(vm.shutil, "which", lambda name: None if name == "valgrind" else which(name))
    with pytest.raises(tiersim.TiersimError, match=r"^valgrind not installed: run `make valgrind`"):
        vm.find_tools()


@needs_vm
def test_hung_vm_is_stopped_and_leaves_no_result(tmp_path: Path) -> None:
    with pytest.raises(tiersim.TiersimError, match=r"the VM did not finish within 3 s \(hung boot or run\)"):
        linux.validate_linux(tmp_path / "out", quick=True, timeout_s=3)
    assert list(tmp_path.iterdir()) == []


def _qemus_under(path: Path) -> list[int]:
    """Processes running qemu-system on files under `path`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and b"qemu-system" in cmd[0] and any(str(path).encode() in c for c in cmd):
            found.append(int(proc.name))
    return found


@needs_vm
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_mid_boot_stops_the_vm_too(tmp_path: Path, sig: signal.Signals) -> None:
    # SIGTERM raised while the VM runs: tiersim stops with one line, and its QEMU with it (it
    # used to outlive tiersim, writing into the removed work directory until the guest ended).
    # Ctrl-C (SIGINT) the same, with the same line (it used to exit 130 saying nothing).
    proc = subprocess.Popen(
        [sys.executable, "-m", "tiersim", "validate", "linux", "--quick", "-o", str(tmp_path / "q")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not _qemus_under(tmp_path) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert _qemus_under(tmp_path), "the VM never started"
        time.sleep(1)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, stderr
    assert stderr.splitlines()[-1] == f"error: stopped by {sig.name}; outputs not finished were removed", stderr
    time.sleep(0.5)
    assert _qemus_under(tmp_path) == []
    assert list(tmp_path.iterdir()) == []


@needs_vm
def test_quick_case_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "q"
    r = _cli("validate", "linux", "--quick", "--kernel-trace", "-o", str(out))
    assert r.returncode == 0, r.stderr
    # --quick runs no balancing-off case: its scale is the calibration's, and the line says so.
    assert "daemon time scale per case: kv-tiering" in r.stdout and "(from the calibration)" in r.stdout, r.stdout
    assert "daemon time scale" in r.stdout and "kv-tiering" in r.stdout
    doc = json.loads((out / "validate.json").read_text())
    # The VM's shape: node 1 (dax/kmem) in a lower memory tier than node 0.
    assert doc["vm"]["tiers"] == {"22": "1", "4": "0,2"}
    assert doc["vm"]["nodes"]["1"]["MemTotal"] == "524288"
    # The two VM-wide settings that make node 0 act as one zone without fragmentation boosts.
    assert doc["vm"]["sysctl"]["watermark_boost_factor"] == "0"
    assert doc["vm"]["sysctl"]["lowmem_reserve_ratio"].startswith("1,")
    assert doc["zones"]["0/DMA"]["protection"][3] == doc["zones"]["0/DMA32"]["managed"]
    sp = doc["guest_speed"]
    assert sp["daemon_time_scale"] == sp["calib_tiersim_s"] / sp["calib_guest_s"]
    # TCG's speed against the modelled CPU is the host's: the scale was 0.15-0.9 on the hosts
    # before 2026-11-30 and 1.13 (the guest faster than tiersim's CPU) on that day's.
    assert 0.05 < sp["daemon_time_scale"] < 20
    case = doc["cases"]["kv-tiering"]
    m = case["metrics"]
    # The kernel's tiering acted: hint faults, promotions and kswapd demotions.
    assert m["hint_faults"]["kernel"] > 10_000
    assert m["promotions"]["kernel"] > 500 and m["demotions"]["kernel"] > 500
    # Both sides hold the program's 256 MiB table (65,536 pages) plus a few pages of stack and
    # code: the trace is the program the guest ran.
    for pages in (case["kernel_pages"][0], case["tiersim_pages"]):
        assert 65_536 <= pages <= 66_000
    # Measured agreement (docs/validate.md): the fast node's share at the end within 10 points.
    assert m["fast_share"]["agree"], m["fast_share"]
    # The tiersim side is a function of the trace and the platform: the same replay again gives
    # the same summary.
    again = tiersim.run(
        out / "traces" / "kv.trace",
        platform=out / "platforms" / "kv-tiering.toml",
        policy="numab_tiering",
        params=case["policy_params"],
        seed=0,
    )
    assert (
        again.summary["tiering"] == json.loads((out / "tiersim" / "kv-tiering" / "summary.json").read_text())["tiering"]
    )
    series = pl.read_parquet(out / "series.parquet")
    assert set(series["source"]) == {"kernel", "tiersim"}
    html = (out / "report.html").read_text()
    assert html.count("<img") == 1 and "kv-tiering" in html and "daemon time scale" in html
    # kswapd demoted pages in the guest, so the platform carries its measured cost.
    assert case["kswapd"]["page_cost_ns"] > 0 and case["kernel_kswapd_reclaimed"][0] > 0
    assert "kswapd_page_cost" in (out / "platforms" / "kv-tiering.toml").read_text()
    # --kernel-trace: the guest's own events agree with its counters. Every demotion the sampler
    # saw is a migration the trace recorded (kswapd may go on a little after the program ends,
    # before recording stops), and the program's first scan window came at the quick case's
    # scan delay (100 ms of the task's run time, counted from its fork, a little before its
    # exec), found numa_next_scan unset and did not walk.
    kt = case["kernel_trace"][0]
    assert kt["buffer"]["dropped_events"] == 0
    demoted = kt["migrate"]["demotion"]["succeeded"]
    assert m["demotions"]["kernel"] <= demoted <= 1.1 * m["demotions"]["kernel"] + 50
    assert kt["migrate"]["numa_misplaced"]["succeeded"] >= m["promotions"]["kernel"]
    taken = sum(z.get("inactive_anon", {}).get("taken", 0) for z in kt["isolate_by_reclaim_zone"].values())
    assert taken >= demoted
    first = kt["scan_windows"][0]
    assert 0.09 <= first["t_s"] < 0.2 and not first["walked"]
    assert any(w["walked"] for w in kt["scan_windows"])
    trace = pl.read_parquet(out / "kernel_trace.parquet")
    assert set(trace["case"]) == {"kv-tiering"} and "mm_vmscan_lru_isolate" in set(trace["event"])
    # --replay: no boot, no capture; the same guest runs and traces give the same comparison.
    again_dir = tmp_path / "replayed"
    r = _cli("validate", "linux", "--replay", str(out), "-o", str(again_dir))
    assert r.returncode == 0, r.stderr
    replayed = json.loads((again_dir / "validate.json").read_text())
    assert replayed["cases"]["kv-tiering"]["metrics"] == m
    assert replayed["cases"]["kv-tiering"]["kernel_trace"] == case["kernel_trace"]
    no = _cli("validate", "linux", "--replay", str(out), "--kernel-trace", "-o", str(tmp_path / "r3"))
    assert no.returncode != 0 and "a replay keeps whatever its boots recorded" in no.stderr
    assert replayed["guest_speed"] == doc["guest_speed"]
    bad = _cli("validate", "linux", "--replay", str(tmp_path / "nothing"), "-o", str(tmp_path / "r2"))
    assert bad.returncode != 0 and f"{tmp_path / 'nothing'} does not exist" in bad.stderr
    assert not (tmp_path / "r2").exists()
    # An edited earlier result: one error naming its validate.json, before anything is written.
    edited = tmp_path / "edited"
    shutil.copytree(out, edited)
    doc_e = json.loads((edited / "validate.json").read_text())
    doc_e["sizing"]["factor"] = "nan"
    (edited / "validate.json").write_text(json.dumps(doc_e))
    bad = _cli("validate", "linux", "--replay", str(edited), "-o", str(tmp_path / "r4"))
    assert bad.returncode == 1 and f"{edited / 'validate.json'}: cannot replay it" in bad.stderr, bad.stderr
    assert not (tmp_path / "r4").exists()
    # A trace of the earlier result cut short: the error names that file, not the hidden copy.
    cut = tmp_path / "cut"
    shutil.copytree(out, cut)
    kv = cut / "traces" / "kv.trace"
    kv.write_bytes(kv.read_bytes()[:100_000])
    bad = _cli("validate", "linux", "--replay", str(cut), "-o", str(tmp_path / "r5"))
    assert bad.returncode == 1 and f"{kv}: " in bad.stderr and ".partial-" not in bad.stderr, bad.stderr
    assert not (tmp_path / "r5").exists()


def test_errors_name_the_result_and_the_replayed_files_not_the_work_directory(tmp_path: Path) -> None:
    work, out, replay = tmp_path / ".v.partial-x1", tmp_path / "v", tmp_path / "earlier"
    e = linux._named_for_the_user(
        tiersim.TiersimError(f"{work}/traces/kv.trace: at byte offset 24: records_end is beyond end of file"),
        work,
        out,
        replay,
    )
    assert str(e) == f"{replay}/traces/kv.trace: at byte offset 24: records_end is beyond end of file"
    e = linux._named_for_the_user(
        OSError(28, "No space left on device", f"{work}/tiersim/kv/t.parquet"), work, out, None
    )
    assert isinstance(e, OSError) and e.errno == 28 and e.filename == f"{out}/tiersim/kv/t.parquet"


def _with_program(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, source: str) -> None:
    src = tmp_path / "programs"
    shutil.copytree(vm.PROGRAMS, src)
    (src / f"{name}.c").write_text(source)
    monkeypatch.setattr(vm, "PROGRAMS", src)
    monkeypatch.setitem(linux.PROGRAMS, name, linux.Program(name, name, (100,), 1, work_arg=0))


@needs_vm
def test_program_crashing_in_the_guest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _with_program(monkeypatch, tmp_path, "crash", "int main(void) { volatile int *p = 0; return *p; }\n")
    said: list[str] = []
    with pytest.raises(tiersim.TiersimError, match=r"crash-none run 1: the program failed in the guest \(signal 11\)"):
        linux.validate_linux(tmp_path / "out", programs=["crash"], settings=["none"], runs=1, progress=said.append)
    assert not (tmp_path / "out").exists()
    # Without a work factor the matrix first boots to time the calibration alone and sizes the
    # program's work by it (the crash comes in the next boot).
    assert said[:3] == [
        "VM sizing: the calibration alone (guest/sizing)",
        said[1],
        "VM crash-none run 1/1 (guest/crash-none-0)",
    ]
    factor = float(said[1].split()[2])
    assert linux.SIZE_FACTORS[0] <= factor <= linux.SIZE_FACTORS[1]
    # The printed factor is rounded to 3 decimals; the program's argument comes from the exact
    # one (work_arg 0: 100 x factor, rounded), so they may differ by one (1.965 printed, 197 run).
    head, arg = said[1].rsplit(" ", 1)
    assert head.endswith("(the sizing boot's calibration): crash") and abs(int(arg) - 100 * factor) <= 0.6


@needs_vm
def test_guest_out_of_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hog = "#include <stdlib.h>\n#include <string.h>\nint main(void) { for (;;) memset(malloc(1 << 20), 1, 1 << 20); }\n"
    _with_program(monkeypatch, tmp_path, "hog", hog)
    with pytest.raises(tiersim.TiersimError, match="hog-none run 1: the guest ran out of memory"):
        linux.validate_linux(tmp_path / "out", programs=["hog"], settings=["none"], runs=1, work_factor=1.0)
    assert not (tmp_path / "out").exists()


def _check_matrix(doc: dict[str, Any], out: Path | None = None) -> None:
    """What a full matrix's validate.json (and, given `out`, its platforms) must hold, whatever the
    guest's speed: test_full_matrix's checks, also run on a stored matrix."""
    assert len(doc["cases"]) == 9
    # Sized to the guest's speed by a calibration boot: every case ran its program's sized work.
    sizing = doc["sizing"]
    assert sizing["factor"] == linux.size_factor(sizing["calib_guest_s"])
    for case in doc["cases"].values():
        name = case["program"]["name"]
        assert (
            case["program"]["args"]
            == sizing["args"][name]
            == list(linux.sized(linux.PROGRAMS[name], sizing["factor"]).args)
        )
    for cid, case in doc["cases"].items():
        assert len(case["kernel_program_s"]) == doc["runs"] == 3, cid
        if cid.endswith("-none"):
            # No balancing: nothing moves on either side, and first touch places the same pages.
            for metric in ("promotions", "demotions", "hint_faults"):
                assert case["metrics"][metric]["kernel_runs"] == [0, 0, 0], (cid, metric)
                assert case["metrics"][metric]["tiersim"] == 0, (cid, metric)
            assert case["metrics"]["fast_share"]["agree"], cid
    sp = doc["guest_speed"]
    for prog in ("graph", "kv", "stream"):
        # Each program's time scale is its own speed with balancing off: there tiersim's program
        # takes as long on the guest's axis as the guest's did, the median of the none boots (one
        # boot slowed by the host's load moves the mean, not the median).
        none = doc["cases"][f"{prog}-none"]
        guest = statistics.median(none["kernel_program_s"])
        lens = sp["program_time_scales"][prog]
        assert lens["case"] == f"{prog}-none" and lens["guest_program_s"] == guest, prog
        assert none["tiersim_program_s_on_guest_axis"] == pytest.approx(guest, rel=linux.LENS_TOLERANCE), prog
        # The guest kernel's hint-fault cost, from AutoNUMA's system time over no balancing's: where
        # the autonuma boots' least stands above the none boots' greatest, every case of the
        # program takes it at its scale; else the result says why and a hint fault costs what a
        # page fault does.
        costs = sp["kernel_path_costs"][prog]
        sys_s = costs["hint_fault_sys_s_runs"]
        faults = sum(doc["cases"][f"{prog}-autonuma"]["metrics"]["hint_faults"]["kernel_runs"])
        measured = bool(faults) and min(sys_s["autonuma"]) > max(sys_s["none"])
        why = "does not stand above" if faults else "no hint fault under AutoNUMA"
        assert ("hint_fault_guest_ns" in costs) == measured != ("hint_fault_not_measured" in costs), (prog, costs)
        for cid in (f"{prog}-{s}" for s in linux.SETTINGS):
            case = doc["cases"][cid]
            if measured:
                assert costs["hint_fault_guest_ns"] > 0, prog
                assert case["faults"]["hint_fault_ns"] == pytest.approx(
                    costs["hint_fault_guest_ns"] * case["daemon_time_scale"]
                ), cid
            else:
                assert why in costs["hint_fault_not_measured"], (prog, costs)
                assert "hint_fault_ns" not in case["faults"], cid
            if out is not None:
                os_ = tomllib.loads((out / "platforms" / f"{cid}.toml").read_text())["os"]
                assert (os_["hint_fault_latency"] == os_["fault_latency"]) != measured, (cid, os_)


# validate.json of the matrix of 2026-11-30 16:38 (the walkthrough's `tiersim validate linux -o
# full`, 27 boots), replayed with --replay after the hint-fault cost's noise rule, cut down to
# what _check_matrix reads. Its none boots of graph ran 9.3, 12.8 and 10.1 s: the mean, 10.75 s,
# is not what the solver matched (the median, 10.13 s); no program's hint-fault cost was measured.
MATRIX = DATA / "matrix-2026-11-30.validate.json"


def test_a_stored_matrix_holds_what_the_full_matrix_test_checks() -> None:
    doc = json.loads(MATRIX.read_text())
    _check_matrix(doc)
    graph = doc["cases"]["graph-none"]["kernel_program_s"]
    assert abs(doc["cases"]["graph-none"]["tiersim_program_s_on_guest_axis"] - sum(graph) / 3) > 0.5


@pytest.mark.slow
@needs_vm
def test_full_matrix(tmp_path: Path) -> None:
    """Nine cases x three VM runs, docs/validate.md's table: on two shared cores on 2026-11-30,
    11 minutes at load 3.8-5.4 and 6 minutes at load 1.3-1.9."""
    out = tmp_path / "m"
    r = _cli("validate", "linux", "-o", str(out), "--runs", "3")
    assert r.returncode == 0, r.stderr
    _check_matrix(json.loads((out / "validate.json").read_text()), out)
    # One line per program on its hint-fault cost, measured or not.
    assert sum(line.startswith(("graph: ", "kv: ", "stream: ")) for line in r.stdout.splitlines()) == 3, r.stdout


FAKE_QEMU = """#!/usr/bin/env python3
import sys, time
from pathlib import Path
files = [a[5:] for a in sys.argv if a.startswith("file:")]
console, data = Path(files[0]), Path(files[1])
count = Path(sys.argv[0]).with_suffix(".count")
n = int(count.read_text()) if count.exists() else 0
count.write_text(str(n + 1))
if n < STALLS:
    data.write_text("@ kernel 6.1\\n")
    console.write_text("[ 48.695432] watchdog: BUG: soft lockup - CPU#0 stuck for 45s! [init:1]\\n")
    time.sleep(60)
data.write_text("@ kernel 6.1\\n@ calib begin\\n@ done\\n")
"""


@pytest.mark.parametrize(("stalls", "boots"), [(1, 2), (3, 3)])
def test_a_boot_that_stalls_in_the_kernel_is_made_again(tmp_path: Path, stalls: int, boots: int) -> None:
    # A fake QEMU whose first `stalls` boots print a soft lockup on the console before the
    # calibration and hang; the boot is killed at the mark and made again, up to BOOT_RETRIES times.
    qemu = tmp_path / "qemu"
    qemu.write_text(FAKE_QEMU.replace("STALLS", str(stalls)))
    qemu.chmod(0o755)
    tools = vm.Tools(str(qemu), tmp_path, tmp_path, "", "", "")
    run = tmp_path / "run"
    run.mkdir()
    if stalls <= vm.BOOT_RETRIES:
        b = vm.boot(tools, vm.Shape(), tmp_path / "initrd", 30.0, run)
        assert "@ calib begin" in b.data and b.wall_s < 10
    else:
        # Every boot stalls: the last one runs to the timeout and is reported as hung.
        with pytest.raises(tiersim.TiersimError, match=r"did not finish within 8 s \(hung boot or run\).*soft lockup"):
            vm.boot(tools, vm.Shape(), tmp_path / "initrd", 8.0, run)
    assert int((tmp_path / "qemu.count").read_text()) == boots


@pytest.mark.parametrize(
    ("old", "new"),
    [("@ calib_touch ", "@ calib_touch abc "), ("pgpromote_success=", "pgpromote_success=x")],
)
def test_a_guest_output_edited_by_hand_is_one_error_naming_its_line(old: str, new: str) -> None:
    good = GUEST_OUT.replace("@ calib begin", "@ calib begin\n@ calib_touch 81920000 4096")
    linux.parse_guest(good, "", "kv-tiering")
    # The last occurrence: the run's final sample, or the calibration's one line.
    head, _, tail = good.rpartition(old)
    bad = head + new + tail
    assert bad != good
    n = max(i for i, line in enumerate(bad.splitlines(), 1) if new in line)
    with pytest.raises(tiersim.TiersimError, match=rf"^kv-tiering: guest output line {n}: cannot read '"):
        linux.parse_guest(bad, "", "kv-tiering")


def test_quick_takes_no_program_or_setting(tmp_path: Path) -> None:
    # --quick runs its one case; a --program or --setting beside it was silently dropped.
    r = _cli("validate", "linux", "--quick", "--program", "graph", "-o", str(tmp_path / "q"))
    assert r.returncode == 1 and "--quick runs its one case, kv-tiering" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []
    # Nor --runs, which it set to 1 without a word.
    with pytest.raises(tiersim.TiersimError, match=r"^--quick boots its one case once: give no --runs with it"):
        linux.validate_linux(tmp_path / "q", quick=True, runs=3)
    assert list(tmp_path.iterdir()) == []


def _fake_doc() -> dict[str, Any]:
    """A validate.json as validate_linux returns it, cut down to what the CLI and report.html read:
    two cases, one count agreeing only through the spread, zero counts in the other."""
    metrics = {
        "kv-none": {m: linux.compare(m, [0, 0, 0], 0) for m in linux.METRICS[1:]},
        "kv-autonuma": {m: linux.compare(m, [0, 0, 0], 0) for m in linux.METRICS[1:]},
    }
    metrics["kv-none"] = {"fast_share": linux.compare("fast_share", [54.3, 54.3, 54.4], 54.4)} | metrics["kv-none"]
    metrics["kv-autonuma"] = {"fast_share": linux.compare("fast_share", [54.3, 54.3, 54.3], 54.3)} | metrics[
        "kv-autonuma"
    ]
    metrics["kv-autonuma"]["hint_faults"] = linux.compare("hint_faults", [65_531, 1_000, 63_595], 29_878)
    costs = {
        "kv": {
            "migration_guest_ns": 19737.1,
            "hint_fault_sys_s_runs": {"none": [3.12, 1.44, 0.96], "autonuma": [1.81, 1.18, 1.18]},
        }
    }
    costs["kv"]["hint_fault_not_measured"] = (
        "the program's system time under AutoNUMA, 1.180-1.810 s, does not stand above its system time with no"
        " balancing, 0.960-3.120 s (the boots' noise)"
    )
    cases = {
        cid: {
            "program": {"name": "kv", "summary": "kv", "args": [256, 18313, 2]},
            "setting": {"name": cid[3:], "summary": cid[3:]},
            "metrics": m,
            "agree": all(v["agree"] for v in m.values()),
            "daemon_time_scale": 0.389,
            "time_scale_from": "kv-none (the program's speed)",
        }
        for cid, m in metrics.items()
    }
    return {
        "kernel": "6.1.0-57-amd64",
        "accel": "tcg",
        "vm": {
            "nodes": {
                0: {"MemFree": "158868", "MemTotal": "211064", "cpus": "0-1"},
                1: {"MemFree": "524288", "MemTotal": "524288", "cpus": ""},
                2: {"MemFree": "3524", "MemTotal": "3600", "cpus": ""},
            },
            "tiers": {22: "1", 4: "0,2"},
        },
        "runs": 3,
        "sizing": {"how": "the sizing boot's calibration", "factor": 1.526, "args": {"kv": [256, 18313, 2]}},
        "guest_speed": {
            "calib_guest_s": 1.247,
            "calib_tiersim_s": 0.672,
            "guest_slowdown": 1.855,
            "daemon_time_scale": 0.5391,
            "time_scale": "program",
            "kernel_path_costs": costs,
        },
        "cases": cases,
    }


def _cli_with(
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    doc: dict[str, Any] | None = None,
    said: Sequence[str] = (),
    stop: BaseException | None = None,
) -> Any:
    """`tiersim validate linux ARGS` in this process, with validate_linux replaced by one that says
    `said` through its progress callback, then raises `stop` or returns `doc`."""
    from tiersim.cli import app
    from typer.testing import CliRunner

    def fake(out_dir: Any, *, progress: Any, **_kw: Any) -> dict[str, Any]:
        for msg in said:
            progress(msg)
        if stop is not None:
            raise stop
        return doc or _fake_doc()

    monkeypatch.setattr(linux, "validate_linux", fake)
    return CliRunner().invoke(app, ["validate", "linux", *args], env={"NO_COLOR": "1"})


def test_the_cli_says_each_programs_hint_fault_cost_or_why_not(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    r = _cli_with(monkeypatch, ["-o", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    why = _fake_doc()["guest_speed"]["kernel_path_costs"]["kv"]["hint_fault_not_measured"]
    line = f"kv: hint-fault cost not measured: {why}; a hint fault costs what a page fault does"
    assert line in r.stdout.splitlines(), r.stdout


def _fake_result(path: Path, cases: Sequence[str] = ("kv-none", "kv-autonuma", "kv-tiering"), runs: int = 3) -> Path:
    """A `tiersim validate linux` result as far as a replay reads it before replaying: validate.json
    (sorted, as written), each boot's guest output and the traces (empty)."""
    doc = {
        "runs": runs,
        "knobs": linux.KNOBS,
        "quick": False,
        "accel": "tcg",
        "sizing": {"how": "given", "factor": 1.0},
        "guest_speed": {"instructions_per_access": {}, "calib_records": 1, "calib_instructions_est": 1},
        "cases": {
            cid: {
                "program": {"name": cid.split("-")[0], "args": [256, 8000, 2]},
                "setting": {"name": cid.split("-")[1]},
            }
            for cid in cases
        },
    }
    path.mkdir()
    (path / "validate.json").write_text(json.dumps(doc, indent=2, sort_keys=True))
    for cid in cases:
        for r in range(runs):
            (path / "guest" / f"{cid}-{r}").mkdir(parents=True)
            (path / "guest" / f"{cid}-{r}" / "guest.out").write_text(GUEST_OUT)
    (path / "traces").mkdir()
    for name in {"calib", *(cid.split("-")[0] for cid in cases)}:
        (path / "traces" / f"{name}.trace").write_bytes(b"")
    return path


def test_a_replay_takes_the_results_cases_in_their_canonical_order(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # validate.json stores the cases sorted by name; the replay runs (and its table, its scale
    # line and report.html list) them as the boots ran: PROGRAMS' order, then SETTINGS'.
    cases = [f"{p}-{s}" for p in ("stream", "kv", "graph") for s in ("tiering", "none", "autonuma")]
    src = _fake_result(tmp_path / "r", cases, runs=2)
    seen: dict[str, Any] = {}

    def fake(work: Path, tools: Any, programs: list[str], settings: list[str], runs: int, *rest: Any) -> Any:
        seen.update(programs=programs, settings=settings, runs=runs)
        raise tiersim.TiersimError("stop")

    monkeypatch.setattr(linux, "_validate", fake)
    with pytest.raises(tiersim.TiersimError, match="^stop$"):
        linux.validate_linux(tmp_path / "o", replay=src)
    assert seen == {"programs": ["graph", "kv", "stream"], "settings": ["none", "autonuma", "tiering"], "runs": 2}
    # Only --setting given: the programs are the result's (they were all three, and a kv-only
    # result failed on graph-none); a program given twice is taken once (its boots were copied
    # twice: "File exists").
    kv = _fake_result(tmp_path / "kv", ["kv-none", "kv-tiering"], runs=1)
    with pytest.raises(tiersim.TiersimError, match="^stop$"):
        linux.validate_linux(tmp_path / "o", replay=kv, settings=["tiering", "none", "tiering"])
    assert seen == {"programs": ["kv"], "settings": ["tiering", "none"], "runs": 1}
    with pytest.raises(tiersim.TiersimError, match="^stop$"):
        linux.validate_linux(tmp_path / "o", replay=kv, programs=["kv", "kv"])
    assert seen == {"programs": ["kv"], "settings": ["none", "tiering"], "runs": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kv", "r"]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        # A boot's directory gone: the replay took the boots before the gap and dropped the rest.
        (
            lambda r: shutil.rmtree(r / "guest" / "kv-tiering-1"),
            r"^{r}/guest/kv-tiering-1 is missing: a damaged result, whose validate.json says each case booted 3 times "
            r"\(runs = 3: guest/kv-tiering-0 to guest/kv-tiering-2\)$",
        ),
        (
            lambda r: (r / "guest" / "kv-none-2" / "guest.out").unlink(),
            r"^{r}/guest/kv-none-2/guest.out is missing: a damaged `tiersim validate linux` result$",
        ),
        (lambda r: shutil.rmtree(r), r"^{r} does not exist: give the directory of a `tiersim validate linux` result$"),
        # Found after the boots had been copied.
        (lambda r: (r / "traces" / "kv.trace").unlink(), r"^{r}: no trace kv.trace to replay$"),
        (
            lambda r: (r / "validate.json").unlink(),
            r"^{r}: not a `tiersim validate linux` result \(it has no validate.json\)$",
        ),
        (
            lambda r: _edit_json(r, lambda d: d.pop("knobs")),
            r"^{r}/validate.json: cannot replay it: it has no `knobs` \(a damaged or edited result\)$",
        ),
        (
            lambda r: _edit_json(r, lambda d: d["guest_speed"].pop("calib_records")),
            r"^{r}/validate.json: cannot replay it: it has no `guest_speed.calib_records` \(a damaged or edited result\)$",
        ),
        (
            lambda r: _edit_json(r, lambda d: d.pop("runs")),
            r"^{r}/validate.json: cannot replay it: it has no `runs` \(a damaged or edited result\)$",
        ),
        # It reached the replay's Case as a KeyError, an internal error.
        (
            lambda r: _edit_json(r, lambda d: d["cases"]["kv-none"]["program"].pop("args")),
            r"^{r}/validate.json: cannot replay it: it has no `cases.kv-none.program.args` "
            r"\(a damaged or edited result\)$",
        ),
    ],
)
def test_a_damaged_result_to_replay_is_one_clear_error(tmp_path: Path, damage: Any, message: str) -> None:
    src = _fake_result(tmp_path / "r")
    damage(src)
    with pytest.raises(tiersim.TiersimError, match=message.replace("{r}", str(src))):
        linux.validate_linux(tmp_path / "o", replay=src)
    assert not (tmp_path / "o").exists() and [p.name for p in tmp_path.iterdir()] in ([], ["r"])


def _edit_json(result: Path, edit: Any) -> None:
    doc = json.loads((result / "validate.json").read_text())
    edit(doc)
    (result / "validate.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"trace_kernel": True}, "--kernel-trace records a new boot: a replay keeps whatever its boots recorded"),
        ({"work_factor": 2.0}, "--work-factor sizes new boots: a replay keeps the programs its boots ran"),
        ({"quick": True}, "--quick boots its one case: a replay takes the cases of the result it replays"),
        ({"runs": 2}, "--runs sets how many times a case boots: a replay takes every boot of its result"),
    ],
)
def test_an_option_a_replay_cannot_take_is_said_before_the_directory_is_read(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    # The conflict first, even where the directory does not exist.
    with pytest.raises(tiersim.TiersimError, match=f"^{message}$"):
        linux.validate_linux(tmp_path / "o", replay=tmp_path / "nosuchdir", **options)
    assert list(tmp_path.iterdir()) == []


def test_a_replay_refuses_an_output_inside_the_result(tmp_path: Path) -> None:
    src = _fake_result(tmp_path / "r")
    with pytest.raises(
        tiersim.TiersimError, match=rf"^{src}/sub is inside the replayed result {src}: give a directory outside it$"
    ):
        linux.validate_linux(src / "sub", replay=src)
    assert sorted(p.name for p in src.iterdir()) == ["guest", "traces", "validate.json"]


def test_a_replay_of_a_case_the_result_lacks_suggests_the_setting(tmp_path: Path) -> None:
    src = _fake_result(tmp_path / "r", ["kv-tiering"], runs=1)
    with pytest.raises(
        tiersim.TiersimError,
        match=rf"^{src} holds no VM run of case kv-none; of kv it holds kv-tiering: give --setting tiering instead$",
    ):
        linux.validate_linux(tmp_path / "o", replay=src, programs=["kv"], settings=["none"])
    # Two settings held, in the matrix's order (none before autonuma), and the one asked for is not
    # among them: the hint replaces it.
    two = _fake_result(tmp_path / "r2", ["kv-none", "kv-autonuma"], runs=1)
    with pytest.raises(
        tiersim.TiersimError,
        match=rf"^{two} holds no VM run of case kv-tiering; of kv it holds kv-none, kv-autonuma: "
        "give --setting none --setting autonuma instead$",
    ):
        linux.validate_linux(tmp_path / "o", replay=two, programs=["kv"], settings=["tiering"])
    with pytest.raises(
        tiersim.TiersimError,
        match=rf"^{src} holds no VM run of case graph-tiering; its cases are kv-tiering: give --program and --setting for those$",
    ):
        linux.validate_linux(tmp_path / "o", replay=src, programs=["graph"], settings=["tiering"])


def test_progress_and_result_lines_are_not_wrapped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Piped stderr is 80 columns to rich; a progress line wrapped there split the work factor's
    # argument list over two lines ("... kv 256" / "18313 2, ...").
    said = "work factor 1.526 (the sizing boot's calibration): graph 128 1000 8 9 2, kv 256 18313 2, stream 64 46 2"
    doc = _fake_doc()
    doc["cases"] |= {
        f"kv-x{i}": doc["cases"]["kv-none"] | {"time_scale_from": "kv-none (the program's speed)"} for i in range(4)
    }
    r = _cli_with(monkeypatch, ["-o", str(tmp_path / "o")], doc, said=[said])
    assert r.exit_code == 0, r.output
    assert said in r.stderr.splitlines(), r.stderr
    scales = [line for line in r.stdout.splitlines() if line.startswith("daemon time scale per case: ")]
    assert len(scales) == 1 and scales[0].endswith("kv-x3 0.389 (from kv-none (the program's speed))"), r.stdout


def _fake_series(doc: dict[str, Any]) -> pl.DataFrame:
    rows = []
    for cid in doc["cases"]:
        for source, hint in (("kernel", 0), ("tiersim", None)):
            for t in (0.0, 1.0):
                rows.append(
                    {"case": cid, "source": source, "run": 0, "t_s": t, "fast_pages": 10, "slow_pages": 5}
                    | {"fast_share": 66.7, "promotions": 0, "demotions": 0, "hint_faults": hint}
                )
    return pl.DataFrame(rows, infer_schema_length=None)


def test_report_html_reads_as_the_cli_table_does(tmp_path: Path) -> None:
    from tiersim.validate.report import write_report

    doc = _fake_doc()
    write_report(tmp_path, doc, _fake_series(doc))
    text = (tmp_path / "report.html").read_text()
    head = text[text.index("<p>Kernel") : text.index("</p>", text.index("<p>Kernel"))]
    # The VM's nodes and tiers in words, not Python's dict reprs.
    assert "{" not in head and "&#x27;" not in head, head
    assert (
        "node 0: 211,064 KiB (158,868 KiB free), CPUs 0-1; node 1: 524,288 KiB (524,288 KiB free), no CPUs; "
        "node 2: 3,600 KiB (3,524 KiB free), no CPUs; memory tiers: memory_tier4 nodes 0,2, memory_tier22 node 1"
    ) in head, head
    # The CLI's count of agreeing metrics, and its verdicts.
    assert "<p>8 of 8 agree, 1 of them only within the VM's run-to-run spread" in text
    rows = text[text.index("<table>") : text.index("</table>")].split("<tr")[2:]
    assert len(rows) == 8
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in rows]
    assert [c[-1] for c in cells].count("yes, by the spread") == 1 and {c[-1] for c in cells} == {
        "yes",
        "yes, by the spread",
    }
    # Counts as whole numbers with thousands separators (0, not 0.000), the share to a tenth.
    hint = next(c for c in cells if c[:2] == ["kv-autonuma", "hint_faults"])
    assert hint[2:5] == ["43,375", "65,531 / 1,000 / 63,595", "29,878"] and hint[6] == "64,531", hint
    zero = next(c for c in cells if c[:2] == ["kv-none", "promotions"])
    assert zero[2:5] == ["0", "0 / 0 / 0", "0"] and zero[6] == "0", zero
    share = next(c for c in cells if c[:2] == ["kv-none", "fast_share"])
    assert share[2:5] == ["54.3", "54.3 / 54.3 / 54.4", "54.4"] and share[6] == "10.0", share


def test_progress_names_each_boots_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Progress counts boots from 1 ("run 1/2"), their directories from 0 (guest/kv-none-0): the
    # line names the directory, so the two do not read as different boots.
    booted: list[str] = []

    def boot(work: Path, tools: Any, name: str, *rest: Any) -> linux.GuestRun:
        booted.append(name)
        return linux.GuestRun(*linux.parse_guest(GUEST_OUT, "", name), 1.0, "tcg")

    monkeypatch.setattr(linux, "_boot", boot)
    said: list[str] = []
    cases = linux._boot_cases(
        tmp_path,
        None,
        {"kv": linux.PROGRAMS["kv"]},
        ["none"],
        2,
        linux.KNOBS,
        60.0,
        said.append,  # type: ignore[arg-type]
    )
    assert len(cases["kv-none"].runs) == 2 and booted == ["kv-none-0", "kv-none-1"]
    assert said == ["VM kv-none run 1/2 (guest/kv-none-0)", "VM kv-none run 2/2 (guest/kv-none-1)"]


def test_help_gives_the_quick_cases_time_as_measured() -> None:
    from tiersim.cli import app
    from typer.testing import CliRunner

    text = " ".join(CliRunner().invoke(app, ["validate", "linux", "--help"], env={"COLUMNS": "400"}).output.split())
    # 18.6 s on 2026-11-30 at load 1.4 (docs/validate.md: 17 s idle, 40-60 s busy); it said "a few minutes".
    assert "one VM run: about 20 s on an idle two-core host, up to a minute on a busy one." in text, text
