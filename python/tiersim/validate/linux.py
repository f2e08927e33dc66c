"""`tiersim validate linux`: the same program run on a tiered Linux VM under a kernel policy and, from
its captured trace, on tiersim under the matching policy, side by side (docs/validate.md).

A case is a program x a kernel setting; each case boots the VM `runs` times. Per boot the guest
first times a calibration program with balancing off (the guest CPU's speed), then runs the
program under the setting and samples /proc/vmstat and the program's pages per node. The host
captures the calibration program and the program once each, the guest's own static binaries under
tiersim's Valgrind tool (`tiersim capture`), and replays them on a platform built from the VM's
measured shape. A program's daemon time scale is
its own speed in the guest with balancing off: tiersim's time of the program over the guest's in
its `none` case, solved with the replay that depends on it; its other cases take it moved by their
boots' calibration against the `none` boots'. `time_scale="calibration"` (or a program without its
`none` case) takes the calibration's instead: its simulated time over its guest time."""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeGuard

import tiersim
from tiersim import TiersimError
from tiersim._result import temp_dir_beside, writing
from tiersim.validate import WORK_FACTOR_RANGE, kernel_trace, vm

# The kernel's defaults for the knobs every case sets (kernel/sched/fair.c: sysctl_numa_balancing_*;
# mm/memory-tiers.c and kernel/sched/fair.c for the promote rate limit and hot threshold).
KNOBS = {
    "scan_delay_ms": 1000,
    "scan_period_min_ms": 1000,
    "scan_period_max_ms": 60000,
    "scan_size_mb": 256,
    "hot_threshold_ms": 1000,
    "promote_rate_limit_MBps": 65536,
}


@dataclass(frozen=True)
class Program:
    name: str
    summary: str
    args: tuple[int, ...]
    threads: int
    # The argument that sets how long the program runs without changing its footprint (kv's
    # operations, graph's PageRank iterations, stream's passes): what sizing scales.
    work_arg: int = 1


@dataclass(frozen=True)
class Setting:
    name: str
    summary: str
    numa_balancing: int
    demotion: bool
    policy: str


PROGRAMS = {
    "graph": Program("graph", "phased: 128 MiB fill, then 6 PageRank iterations before sizing over a 1M-vertex CSR graph, 2 threads", (128, 1000, 8, 6, 2), 2, 3),
    "kv": Program("kv", "zipfian key-value store: 256 MiB of 256 B items, 12M ops before sizing (10 % updates), 2 threads", (256, 12000, 2), 2),
    "stream": Program("stream", "streaming triad over 3 x 64 MiB arrays, 30 passes before sizing, 2 threads", (64, 30, 2), 2),
}  # fmt: skip
# The programs' work above was chosen on hosts where TCG ran the calibration in about this much
# guest time (1.28-3.86 s, mean 1.82 s, over the 08:13 matrix of 2026-11-29); there each program
# runs for several of the scanner's periods. TCG runs guest code faster on a faster host while the
# kernel's daemons keep wall-clock periods, so on a host where the calibration takes 1.0 s kv ends
# 2.2 s into its run, about when the scanner's first window opens (1 s of delay, then a walk and
# the faults it sets up): no hint fault on either side, every balancing metric agreeing
# trivially. A matrix therefore first boots the VM once to time the calibration and scales each
# program's work by SIZE_CALIB_S over that time (within SIZE_FACTORS), so that its runs last about
# as long in the guest on any host (docs/validate.md, "Sizing").
SIZE_CALIB_S = 2.0
SIZE_FACTORS = (0.5, 4.0)
CALIB = Program("calib", "calibration: 32 MiB swept 4 times, then 4M random reads", (32, 4, 4000), 1)
SETTINGS = {
    "none": Setting("none", "no balancing (numa_balancing=0): first touch only", 0, False, "linux_default"),
    "autonuma": Setting("autonuma", "AutoNUMA (numa_balancing=1, demotion off)", 1, False, "autonuma"),
    "tiering": Setting("tiering", "tiering mode (numa_balancing=2) with demotion", 2, True, "numab_tiering"),
}
QUICK = ("kv", "tiering")
QUICK_ARGS = {"kv": (256, 8000, 2)}
# The quick case's knobs: the scan delay and shortest period at the kernel's own floor for a 256 MB
# window (task_scan_min: 1000 ms x 256 / 2560 = 100 ms), so that the kernel scans and promotes within
# the few seconds the program runs on an idle host's TCG guest (at the defaults its first scan came
# after the program had ended there: 0 PTE updates).
QUICK_KNOBS = KNOBS | {"scan_delay_ms": 100, "scan_period_min_ms": 100}
CALIB_ARGS = CALIB.args
SAMPLE_MS = 250
# The program's CPUs in the guest: node 0's, both.
CPUS = "0-1"
CAPTURE_PARAMS = {"llc": "1MiB", "cpu_map": "0-1", "v2p": "none"}
PRESET = "ddr4_3200"
# The capture's write records are the LLC's dirty evictions, which a core does not wait for:
# posted (`host.writes`), so that a phase of stores (kv's load) costs tiersim's CPU what its
# misses cost and no more (docs/validate.md, "kv's two phases").
WRITES = "posted"

METRICS = ("fast_share", "promotions", "demotions", "hint_faults")
SHARE_POINTS = 10.0
COUNT_TOLERANCE = 0.25


@dataclass
class GuestRun:
    """What one boot measured."""

    machine: dict[str, Any]
    calib_s: float
    program_s: float
    samples: list[dict[str, Any]]
    wall_s: float
    accel: str


@dataclass
class Case:
    program: Program
    setting: Setting
    runs: list[GuestRun] = field(default_factory=list)


def _parse_sample(line: str) -> dict[str, Any]:
    tag, t, _, *items = line.split()
    s: dict[str, Any] = {"tag": tag, "t_s": int(t) / 1e9}
    for item in items:
        if item == "pages" or "=" not in item:
            continue
        k, v = item.split("=", 1)
        s[k] = int(v)
    return s


def parse_guest(
    data: str, console: str, what: str, calib_only: bool = False
) -> tuple[dict[str, Any], float, float, list[dict[str, Any]]]:
    """The machine facts, calibration time, program time and samples of one boot's output, or one
    clear error: a failed setup step, a crashed program, the OOM killer, a guest that died. A boot
    with --kernel-trace has its events and buffer statistics in machine["kernel_trace"]. With
    `calib_only` (the sizing boot, which runs no program) the program's time is 0 and there are no
    samples."""
    machine: dict[str, Any] = {"nodes": {}, "tiers": {}, "zones": {}, "sysctl": {}}
    section = None
    calib_s = program_s = None
    samples: list[dict[str, Any]] = []
    done = False
    oom = 0
    failed = crashed = None
    trace: list[str] = []
    n, line = 0, ""
    try:
        for n, line in enumerate(data.splitlines(), 1):  # noqa: B007 (n names the line an error is on)
            if line.startswith("T "):
                trace.append(line)
            elif line.startswith("! "):
                failed = failed or line[2:]
            elif line.startswith("@ "):
                parts = line[2:].split()
                key, rest = parts[0], parts[1:]
                if key == "node":
                    machine["nodes"][int(rest[0])] = dict(x.split("=", 1) for x in rest[1:])
                elif key == "tier":
                    machine["tiers"][int(rest[0])] = rest[1].split("=", 1)[1]
                elif key == "zone":
                    z: dict[str, Any] = dict(x.split("=", 1) for x in rest[2:])
                    z = {k: [int(p) for p in v.split(",")] if k == "protection" else int(v) for k, v in z.items()}
                    machine["zones"][f"{rest[0]}/{rest[1]}"] = z
                elif key == "lru":
                    machine.setdefault("lru", {})[int(rest[0])] = {
                        k: int(v) for k, v in (x.split("=", 1) for x in rest[1:])
                    }
                elif key == "sysctl":
                    machine["sysctl"][rest[0]] = rest[1]
                elif key in ("calib", "run"):
                    section = key
                elif key == "calib_touch":
                    machine["calib_touch"] = {"ns": int(rest[0]), "pages": int(rest[1])}
                elif key in ("calib_sweep", "calib_random", "calib_mprotect", "calib_migrate"):
                    machine[key] = {"ns": int(rest[0]), "count": int(rest[1])}
                elif key == "oom":
                    oom = int(rest[0])
                elif key == "done":
                    done = True
                elif rest:
                    machine[key] = rest[0]
            elif line.startswith("X "):
                _, t, status = line.split()
                if status != "exit=0":
                    name = "the calibration program" if section == "calib" else "the program"
                    crashed = crashed or f"{name} failed in the guest ({status.replace('=', ' ')})"
                elif section == "calib":
                    calib_s = int(t) / 1e9
                else:
                    program_s = int(t) / 1e9
            elif line[:2] in ("S ", "E ") and section == "run":
                samples.append(_parse_sample(line))
    except (ValueError, IndexError, KeyError) as exc:
        # A guest.out edited or cut short by hand: the line that cannot be read, not a traceback.
        raise TiersimError(f"{what}: guest output line {n}: cannot read {line!r} ({exc})") from None
    if trace:
        try:
            machine["kernel_trace"] = kernel_trace.parse(trace)
        except (ValueError, IndexError, KeyError) as exc:
            raise TiersimError(f"{what}: guest output: cannot read its kernel trace lines (T ...): {exc}") from None
    # The OOM killer's SIGKILL also ends the program: say which it was.
    if oom or "Out of memory" in console:
        raise TiersimError(f"{what}: the guest ran out of memory (the OOM killer ran)")
    if crashed:
        raise TiersimError(f"{what}: {crashed}")
    if failed:
        raise TiersimError(f"{what}: the guest failed: {failed}")
    if "Kernel panic" in console:
        raise TiersimError(f"{what}: the guest kernel panicked: {_panic_line(console)}")
    stopped = f"{what}: the guest stopped before the end of the run"
    if not done or calib_s is None:
        raise TiersimError(stopped)
    if calib_only:
        return machine, calib_s, 0.0, []
    if program_s is None:
        raise TiersimError(stopped)
    if not any(s["tag"] == "E" for s in samples):
        raise TiersimError(f"{what}: the program ended without its final sample")
    return machine, calib_s, program_s, samples


def _panic_line(console: str) -> str:
    return next((ln.strip() for ln in console.splitlines() if "Kernel panic" in ln), "")


def _case_env(program: Program, setting: Setting, args: Sequence[int], k: dict[str, int]) -> dict[str, str]:
    return {
        "NUMA_BALANCING": str(setting.numa_balancing),
        "DEMOTION": "true" if setting.demotion else "false",
        "PROMOTE_RATE_LIMIT_MBPS": str(k["promote_rate_limit_MBps"]),
        "SCAN_DELAY_MS": str(k["scan_delay_ms"]),
        "SCAN_PERIOD_MIN_MS": str(k["scan_period_min_ms"]),
        "SCAN_PERIOD_MAX_MS": str(k["scan_period_max_ms"]),
        "SCAN_SIZE_MB": str(k["scan_size_mb"]),
        "HOT_THRESHOLD_MS": str(k["hot_threshold_ms"]),
        "CALIB_ARGS": " ".join(map(str, CALIB_ARGS)),
        "INTERVAL_MS": str(SAMPLE_MS),
        "PROG_ARGS": " ".join(map(str, args)),
        "CPUS": CPUS,
    }


def _capture(binary: Path, args: Sequence[int], trace: Path) -> dict[str, Any]:
    """The guest's own static binary captured under tiersim's Valgrind tool: Valgrind counts
    every instruction, so a record's time is the instructions its thread ran since its previous
    record and each phase of the program keeps its own pace (kv's fill is 20 instructions a
    record, its operations 89). The instrumented path counts only loads and stores and gave every
    record one measured figure per program, which put kv's fill at 58 % of its first thread's
    time against 32 % (docs/validate.md, "kv's two phases")."""
    res = tiersim.capture([str(binary), *map(str, args)], trace, params=CAPTURE_PARAMS)
    if res.exit_status != 0:
        raise TiersimError(f"{binary.name} exited with status {res.exit_status} under capture")
    return res.report


def instructions_per_access(report: dict[str, Any]) -> dict[str, Any]:
    """A capture's instructions per traced load or store, for the record (validate.json's
    `guest_speed.instructions_per_access`): the trace's time base is the instructions themselves."""
    accesses = report["loads"] + report["stores"] + report["modifies"]
    return {
        "instructions": report["instructions"],
        "traced_accesses": accesses,
        "instructions_per_access": report["instructions"] / accesses if accesses else 0.0,
    }


# Index of ZONE_MOVABLE in a zone's lowmem_reserve (protection) array: user pages are allocated
# with GFP_HIGHUSER_MOVABLE, whose highest zone is ZONE_MOVABLE (include/linux/mmzone.h).
MOVABLE = 3


def fast_node_room(run: GuestRun) -> tuple[int, int]:
    """Pages of node 0 the program could have, and node 0's min watermark. A zone serves a user
    page only while its free pages exceed its watermark plus its lowmem_reserve for ZONE_MOVABLE
    (mm/page_alloc.c __zone_watermark_ok, setup_per_zone_lowmem_reserve): those reserves are not
    the program's, so tiersim's one-zone node 0 gets the free pages less them."""
    first = next(s for s in run.samples if s["tag"] == "S")
    free = first["free0"] // 4
    reserved = wmin = 0
    for key, z in run.machine["zones"].items():
        if not key.startswith("0/") or not z["managed"]:
            continue
        protect = z["protection"][MOVABLE] if len(z["protection"]) > MOVABLE else 0
        reserved += min(z["free"], protect)
        wmin += z["min"]
    return free - reserved, wmin


def _phase(run: GuestRun, key: str) -> dict[str, int] | None:
    """A calibration phase the boot timed (calib_touch: ns and pages; calib_sweep, calib_random,
    calib_mprotect, calib_migrate: ns and count), None for boots made before it was timed."""
    phase: dict[str, int] | None = run.machine.get(key)
    return phase


def _all_timed(phases: list[dict[str, int] | None]) -> TypeGuard[list[dict[str, int]]]:
    """Whether every boot timed the phase (`all`, which mypy does not narrow by)."""
    return all(phases)


def calib_work_s(run: GuestRun) -> float:
    """The calibration's time in the guest without its page-touch, mprotect and migrate phases,
    whose cost is the guest kernel's (a page fault, a page-table walk, a migration), not the
    CPU's."""
    kernel = [_phase(run, k) for k in ("calib_touch", "calib_mprotect", "calib_migrate")]
    return run.calib_s - sum(k["ns"] / 1e9 for k in kernel if k)


def size_factor(calib_s: float) -> float:
    """The factor on every program's work for a guest whose calibration work (calib_work_s) took
    `calib_s`: SIZE_CALIB_S over it, within SIZE_FACTORS."""
    lo, hi = SIZE_FACTORS
    return min(max(SIZE_CALIB_S / calib_s, lo), hi)


def sized(program: Program, factor: float) -> Program:
    """The program with its work argument scaled by `factor` (at least 1)."""
    args = list(program.args)
    args[program.work_arg] = max(1, round(args[program.work_arg] * factor))
    return replace(program, args=tuple(args))


TIME_SCALES = ("program", "calibration")
# The per-case time scale is solved until tiersim's program time on the guest's axis is within
# this of the guest's mean, in at most LENS_STEPS replays.
LENS_TOLERANCE = 0.02
LENS_STEPS = 6


def _phase_ns(cases: dict[str, Case], key: str, count: str = "count") -> list[float]:
    """Each boot's time of a calibration phase per page, line, read or PTE, where it was timed."""
    return [
        run.machine[key]["ns"] / run.machine[key][count]
        for c in cases.values()
        for run in c.runs
        if run.machine.get(key)
    ]


def _replayer(
    work: Path, case: Case, cid: str, knobs: dict[str, int], path: dict[str, Any] | None = None
) -> Callable[[float], tuple[Any, float]]:
    """The case's replay at a given daemon time scale, with its simulated time (s)."""

    def replay(d: float) -> tuple[Any, float]:
        ks, fc = kswapd_cost(case, d), fault_cost(case, d, path)
        sim = _simulate(work, case.program.name, case, cid, case.setting, d, knobs, ks, fc)
        return sim, sim.summary["execution_time_ns"] / 1e9

    return replay


def program_lenses(
    work: Path,
    cases: dict[str, Case],
    calib_sim_s: float,
    knobs: dict[str, int],
    paths: dict[str, dict[str, Any]],
    say: Progress,
) -> dict[str, dict[str, Any]]:
    """Each program's daemon time scale, from its own speed in the guest with balancing off (its
    `none` case, where no daemon acts on the program: solve_time_scale), with that case's replay.
    Why not the calibration's for all: under TCG a read of a page missing from QEMU's software TLB
    costs tens of times the next line of a page just read (the calibration's phases, in
    validate.json), which no CPU model with one cost per miss reproduces, so the guest runs each
    program at a speed of its own (docs/validate.md, "Time"). Not the case's own program time
    either: under a balancing setting it includes the kernel's daemon work, which is what the
    comparison measures. Medians over the boots (a load burst on the host slows one boot's
    calibration or program alone). A program without its `none` case keeps the calibration's
    scale."""
    out: dict[str, dict[str, Any]] = {}
    for cid, case in cases.items():
        if case.setting.name != "none":
            continue
        guest_s = statistics.median(run.program_s for run in case.runs)
        calib_s = statistics.median(calib_work_s(run) for run in case.runs)
        replay = _replayer(work, case, cid, knobs, paths.get(case.program.name))
        sim, d, steps = solve_time_scale(replay, guest_s, calib_sim_s / calib_s)
        say(f"{case.program.name}: {guest_s:.3f} s in the guest with balancing off: daemon time scale {d:.4f}")
        out[case.program.name] = {
            "case": cid,
            "daemon_time_scale": d,
            "calib_guest_s": calib_s,
            "guest_program_s": guest_s,
            "steps": steps,
            "sim": sim,
        }
    return out


def solve_time_scale(
    replay: Callable[[float], tuple[Any, float]], guest_s: float, d0: float
) -> tuple[Any, float, list[dict[str, float]]]:
    """The daemon time scale d at which tiersim's time of the program, T(d) (`replay`), is d times
    the guest's `guest_s`: on the guest's axis the program then runs as long on both sides, and
    the daemons see as much of it per period. T depends on d (the guest's fault and kswapd costs
    enter through it, and so does the daemons' own work), so d is solved by the secant method
    from `d0`, to LENS_TOLERANCE in at most LENS_STEPS more replays; returns the last replay's
    result, its d and every step."""
    d = d0
    res, t = replay(d)
    steps = [{"daemon_time_scale": d, "tiersim_s": t, "guest_axis_s": t / d}]
    prev: tuple[float, float] | None = None
    for _ in range(LENS_STEPS):
        f = t - d * guest_s
        if abs(f) <= LENS_TOLERANCE * d * guest_s:
            break
        nxt = t / guest_s
        if prev is not None and f != prev[1]:
            secant = d - f * (d - prev[0]) / (f - prev[1])
            nxt = secant if secant > 0 else nxt
        prev = (d, f)
        d = min(max(nxt, 1e-6), 1000.0)
        res, t = replay(d)
        steps.append({"daemon_time_scale": d, "tiersim_s": t, "guest_axis_s": t / d})
    return res, d, steps


def kernel_path_costs(cases: dict[str, Case]) -> dict[str, dict[str, Any]]:
    """Per program, the guest kernel's cost of a NUMA hint fault, from the program's system time
    (the sampler's prog_sys_ns): what AutoNUMA adds to the system time of no balancing, per hint
    fault (the difference of the means over each case's boots). That is the fault, its failed
    migration attempt (node 0 has no room, so migrate_misplaced_page gives up at
    migrate_balanced_pgdat) and the scanner's walk, which runs in the same context (counted in: an
    upper bound). Not a promotion's cost: tiering mode's system time beyond its hint faults, per
    page promoted, came out at 0.33 and 1.13 ms for stream and graph and below zero for kv in the
    08:13 matrix, the tick-sampled system time too coarse for it.

    Measured only where it stands above the boots' noise: the least system time of the autonuma
    boots above the greatest of the none boots (`hint_fault_sys_s_runs` keeps both). Otherwise,
    or without the program's none and autonuma cases from boots that recorded the system time, or
    without a hint fault, `hint_fault_not_measured` says why and a hint fault costs what a page
    fault does (fault_cost). In the 16:38 matrix of 2026-11-30 graph's autonuma boots took
    1.00-1.82 s of system time against its none boots' 1.14-1.75 s: the difference of the means
    came out at 0.146 us a hint fault, noise. With boots that timed the calibration's migrate
    phase, every program also gets a page migration's cost (`migration_guest_ns`), the least over
    all of them."""
    # A page's migration, from the calibration's migrate phase: the same work in every boot of the
    # matrix, so the fastest boot's. The others' flushes stall (TCG's cross-CPU TLB flush waits
    # for the host to run the other vCPU's thread): 0.16-2.9 ms a page in a third to two thirds
    # of the boots against 26-35 us in the rest, more of them the busier the host, and the
    # programs' own migrations in those boots do not stall with them (the 02:52 boots: graph
    # under tiering 0.19 s slower than with balancing off after a calibration at 2.6 ms a page,
    # for 2,885 promotions). The median was the estimate before; on a busy host it is a stall.
    moves = _phase_ns(cases, "calib_migrate")
    common: dict[str, Any] = {"migration_guest_ns": min(moves)} if moves else {}
    out: dict[str, dict[str, Any]] = {}
    for prog in dict.fromkeys(c.program.name for c in cases.values()):
        out[prog] = dict(common)
        runs = {
            c.setting.name: [kernel_metrics(c.setting, r.samples) for r in c.runs]
            for c in cases.values()
            if c.program.name == prog
        }
        missing = [f"{prog}-{s}" for s in ("none", "autonuma") if s not in runs]
        if missing:
            out[prog]["hint_fault_not_measured"] = f"the run has no {' or '.join(missing)} case"
            continue
        if any(k["sys_s"] is None for s in ("none", "autonuma") for k in runs[s]):
            out[prog]["hint_fault_not_measured"] = "the boots did not record the program's system time"
            continue
        sys_s = {s: [k["sys_s"] for k in runs[s]] for s in ("none", "autonuma")}
        out[prog]["hint_fault_sys_s_runs"] = sys_s
        faults = sum(k["hint_faults"] for k in runs["autonuma"]) / len(runs["autonuma"])
        if not faults:
            out[prog]["hint_fault_not_measured"] = "no hint fault under AutoNUMA"
        elif min(sys_s["autonuma"]) <= max(sys_s["none"]):
            out[prog]["hint_fault_not_measured"] = (
                f"the program's system time under AutoNUMA, {_range_s(sys_s['autonuma'])}, does not stand above"
                f" its system time with no balancing, {_range_s(sys_s['none'])} (the boots' noise)"
            )
        else:
            mean = {s: sum(v) / len(v) for s, v in sys_s.items()}
            out[prog]["hint_fault_guest_ns"] = (mean["autonuma"] - mean["none"]) / faults * 1e9
    return out


def _range_s(values: Sequence[float]) -> str:
    return f"{min(values):.3f}-{max(values):.3f} s"


def hint_fault_text(prog: str, costs: dict[str, Any]) -> str:
    """One line on the program's hint-fault cost (kernel_path_costs): measured, from what, or why
    not."""
    if "hint_fault_guest_ns" in costs:
        sys_s = costs["hint_fault_sys_s_runs"]
        return (
            f"{prog}: a hint fault costs {costs['hint_fault_guest_ns'] / 1e3:.1f} us of guest time (the program's"
            f" system time under AutoNUMA, {_range_s(sys_s['autonuma'])}, over its system time with no balancing,"
            f" {_range_s(sys_s['none'])}, per hint fault)"
        )
    why = costs.get("hint_fault_not_measured", "a result from before the reason was recorded")
    return f"{prog}: hint-fault cost not measured: {why}; a hint fault costs what a page fault does"


def fault_cost(case: Case, d: float, path: dict[str, Any] | None = None) -> dict[str, Any]:
    """The guest kernel's cost of a page fault, for the case's platform: the calibration's touch
    phase (one write to each page of a fresh region) over its pages, mean of the case's boots, on
    tiersim's time axis (times the daemon time scale). Under TCG a kernel entry costs far more
    relative to user code than on hardware, so the 1 us default would make the fault-heavy
    programs run faster in tiersim than in the guest. A hint fault takes the
    program's measured cost (`path`, kernel_path_costs) where the matrix has it; without, a
    hint fault costs what a page fault does (the same entry and page-table walk, without the
    zeroing). Empty for boots made before the touch phase."""
    touches = [_phase(run, "calib_touch") for run in case.runs]
    if not _all_timed(touches):
        return {}
    per_page = sum(t["ns"] / t["pages"] for t in touches) / len(touches)
    out = {"guest_ns_per_fault": per_page, "fault_ns": per_page * d}
    if path and "hint_fault_guest_ns" in path:
        out["hint_fault_ns"] = path["hint_fault_guest_ns"] * d
    walks = [_phase(run, "calib_mprotect") for run in case.runs]
    if _all_timed(walks):
        # The scanner's walk: change_protection per PTE, as the calibration's mprotect timed it.
        per_pte = statistics.median(w["ns"] / w["count"] for w in walks)
        out |= {"guest_ns_per_pte": per_pte, "pte_scan_ns": per_pte * d}
    if path and "migration_guest_ns" in path:
        # A promotion's migration: the calibration's move_pages per page, its TLB flush by IPI
        # included (kernel_path_costs).
        per_page = path["migration_guest_ns"]
        out |= {"guest_ns_per_migration": per_page, "migrate_ns": per_page * d}
    return out


def kswapd_cost(case: Case, d: float) -> dict[str, Any]:
    """kswapd as the guest ran it, for the case's platform: its CPU time per page it took and per
    page it scanned and left, on tiersim's time axis (times the daemon time scale, as the
    program's own time is); and its CPU share, since kswapd0 runs on node 0's CPUs, which the
    program's threads keep busy (CFS gives each of threads + 1 runnable tasks an equal share of
    the CPUs). None for a case whose kswapd took no page: the platform keeps tiersim's defaults.

    The two costs are the least-squares split of kswapd's CPU time (the guest's schedstat of the
    kswapd threads) over the sampling intervals of the case's runs, by the pages it stole
    (pgsteal_kswapd) and those it scanned and left (pgscan_kswapd - pgsteal_kswapd): kswapd's own
    counters, nothing about promotions. Its CPU per page stolen over a whole run folds in the
    scanning that finds nothing to take once the cold pages are gone (a factor 3-7 in the 16:24
    boots). Where the split is not positive (too few intervals, or one kind of work only), the
    whole run's CPU per page stolen, as before."""
    ns = pages = 0
    sums = [0.0] * 5  # sum(l*l), sum(l*s), sum(s*s), sum(l*t), sum(s*t)
    for run in case.runs:
        first, end = run.samples[0], next(s for s in run.samples if s["tag"] == "E")
        if "kswapd_ns" not in end:
            return {}
        ns += end["kswapd_ns"] - first["kswapd_ns"]
        pages += end.get("pgsteal_kswapd", 0) - first.get("pgsteal_kswapd", 0)
        for a, b in zip(run.samples, run.samples[1:], strict=False):
            stolen = b.get("pgsteal_kswapd", 0) - a.get("pgsteal_kswapd", 0)
            left = b.get("pgscan_kswapd", 0) - a.get("pgscan_kswapd", 0) - stolen
            t = b["kswapd_ns"] - a["kswapd_ns"]
            for i, v in enumerate((left * left, left * stolen, stolen * stolen, left * t, stolen * t)):
                sums[i] += v
    if pages == 0:
        return {}
    cpus = len(range_list(CPUS))
    out = {
        "guest_ns_per_page": ns / pages,
        "page_cost_ns": ns / pages * d,
        "cpu_share": min(1.0, cpus / (case.program.threads + 1)),
    }
    ll, ls, ss, lt, st = sums
    det = ll * ss - ls * ls
    if det > 0:
        scan, steal = (lt * ss - st * ls) / det, (st * ll - lt * ls) / det
        if scan > 0 and steal > 0:
            out |= {
                "guest_ns_per_page_stolen": steal,
                "guest_ns_per_page_left": scan,
                "page_cost_ns": steal * d,
                "scan_cost_ns": scan * d,
            }
    return out


def range_list(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def platform_toml(
    run: GuestRun, daemon_time_scale: float, kswapd: dict[str, Any] | None = None, faults: dict[str, Any] | None = None
) -> str:
    """A tiersim platform describing the VM: two CPUs; node 0 with the pages that were free for the
    program when it started and, as `occupied`, the pages of node 0's inactive lists then (the
    kernel, the rest of the initramfs and the DMA zone's reserve hold the rest), and
    node 1, the kmem node, in tier 1. Both nodes are the same device, because in the VM both are
    the host's DRAM: the comparison is of the kernel's placement, not of memory speed. min_free is
    chosen so that node 0's min watermark is the guest's (tiersim shares min_free among nodes by
    capacity, as mm/page_alloc.c __setup_per_zone_wmarks shares it among zones)."""
    room, wmin = fast_node_room(run)
    # Other software's pages on node 0's inactive lists as the program started (the rootfs, which
    # is tmpfs; boots before 16:24 on 2026-11-29 did not report them): the oldest there, so
    # reclaim demotes them first. The active lists' part (about 400 pages: busybox and the
    # sampler, mapped and in use) stays out of the node as before.
    lru0 = run.machine.get("lru", {}).get(0, {})
    occupied = [lru0.get("inactive_anon", 0) // 4, lru0.get("inactive_file", 0) // 4]
    fast = room + sum(occupied)
    slow = int(run.machine["nodes"][1]["MemTotal"]) // 4
    min_free_pages = wmin * (fast + slow) // fast
    os_lines = ""
    if kswapd:
        os_lines = (
            f'kswapd_page_cost = "{kswapd["page_cost_ns"]:.0f}ns"\nkswapd_cpu_share = {kswapd["cpu_share"]:.4f}\n'
        )
        if "scan_cost_ns" in kswapd:
            os_lines += f'kswapd_scan_cost = "{kswapd["scan_cost_ns"]:.0f}ns"\n'
    if faults:
        hint = faults.get("hint_fault_ns", faults["fault_ns"])
        os_lines += f'fault_latency = "{faults["fault_ns"]:.0f}ns"\nhint_fault_latency = "{hint:.0f}ns"\n'
        if "pte_scan_ns" in faults:
            os_lines += f'pte_scan_cost = "{faults["pte_scan_ns"]:.0f}ns"\n'
        if "migrate_ns" in faults:
            # The measured migration and kswapd's page include their TLB flushes, so none is
            # charged apart; a scan window's one flush goes uncharged (a few windows a run).
            os_lines += f'migrate_overhead = "{faults["migrate_ns"]:.0f}ns"\ntlb_shootdown = "0ns"\n'
    return f"""name = "linux_vm"
summary = "the validation VM: node 0 with 2 CPUs, node 1 CPU-less (dax/kmem, lower tier)"

[host]
cpus = 2
writes = "{WRITES}"

[os]
min_free = "{min_free_pages * 4}KiB"
watermark_scale_factor = {int(run.machine["watermark_scale_factor"])}
daemon_time_scale = {daemon_time_scale!r}
{os_lines}
[[nodes]]
name = "node0"
preset = "{PRESET}"
params = {{ channels = 2 }}
capacity = "{fast * 4}KiB"
occupied = "{occupied[0] * 4}KiB"
occupied_file = "{occupied[1] * 4}KiB"
cpus = "0-1"

[[nodes]]
name = "node1"
preset = "{PRESET}"
params = {{ channels = 2 }}
capacity = "{slow * 4}KiB"
tier = 1
"""


def policy_params(setting: Setting, k: dict[str, int] = KNOBS) -> dict[str, Any]:
    """The guest's sysctls as the tiersim policy's parameters (kernel time; the platform's daemon
    time scale maps them onto simulated time)."""
    if setting.policy == "linux_default":
        return {}
    p: dict[str, Any] = {
        "scan_delay": f"{k['scan_delay_ms']}ms",
        "scan_period_min": f"{k['scan_period_min_ms']}ms",
        "scan_period_max": f"{k['scan_period_max_ms']}ms",
        "scan_size": f"{k['scan_size_mb']}MiB",
    }
    if setting.policy == "numab_tiering":
        p |= {
            "hot_threshold": f"{k['hot_threshold_ms']}ms",
            "promote_rate_limit": f"{k['promote_rate_limit_MBps']}MB/s",
            "demotion": setting.demotion,
        }
    return p


def kernel_metrics(setting: Setting, samples: list[dict[str, Any]]) -> dict[str, float]:
    """The case's figures from the kernel's samples: counters as the difference between the
    program's first sample and its final one (E, taken while it is stopped just before exit)."""
    first, end = samples[0], next(s for s in samples if s["tag"] == "E")

    def delta(*names: str) -> int:
        return sum(end.get(n, 0) - first.get(n, 0) for n in names)

    promoted = delta("numa_pages_migrated") if setting.numa_balancing == 1 else delta("pgpromote_success")
    pages = sum(end.get(f"N{i}", 0) for i in range(8))
    return {
        "fast_share": 100.0 * end.get("N0", 0) / pages if pages else 0.0,
        "promotions": promoted,
        "demotions": delta("pgdemote_kswapd", "pgdemote_direct"),
        "hint_faults": delta("numa_hint_faults"),
        "pages": pages,
        "promote_candidates": delta("pgpromote_candidate"),
        "pte_updates": delta("numa_pte_updates"),
        "migrate_failures": delta("pgmigrate_fail"),
        "kswapd_cpu_s": delta("kswapd_ns") / 1e9,
        "kswapd_reclaimed": delta("pgsteal_kswapd"),
        "kswapd_scanned": delta("pgscan_kswapd"),
        "sys_s": delta("prog_sys_ns") / 1e9 if "prog_sys_ns" in end else None,
        "scan_passes": delta("scan_seq") if end.get("scan_seq", -1) >= 0 else None,
    }


def sim_metrics(summary: dict[str, Any]) -> dict[str, float]:
    nodes = summary["nodes"]
    t = summary["tiering"]
    pages = sum(n["final_pages"] for n in nodes)
    return {
        "fast_share": 100.0 * nodes[0]["final_pages"] / pages if pages else 0.0,
        "promotions": t["promotions"],
        "demotions": t["demotions"],
        "hint_faults": t["hint_faults"],
        "pages": pages,
        "failed_promotions": t["failed_promotions"],
        "scan_passes": t["scan_passes"],
        "kswapd_pages": t.get("kswapd_pages", 0),
        "kswapd_s": t.get("kswapd_time_ns", 0) / 1e9,
        "kswapd_scanned": summary.get("lru", {}).get("pgscan", 0),
        "occupied_demotions": t.get("occupied_demotions", 0),
        "occupied_pages": [n.get("occupied_pages", 0) for n in nodes],
    }


def compare(metric: str, kernel: Sequence[float], sim: float) -> dict[str, Any]:
    """Both sides and the verdict: the fast share within 10 points; a count within 25 % of the
    kernel's mean or within the VM's run-to-run spread (max - min), whichever is wider.
    `by_spread` marks a count that agrees only through the spread: the kernel's own runs differ by
    more than 25 % (a case whose boots split between a walk and none), so the verdict says little."""
    mean = sum(kernel) / len(kernel)
    spread = max(kernel) - min(kernel)
    if metric == "fast_share":
        tol = SHARE_POINTS
        narrow = tol
    else:
        narrow = COUNT_TOLERANCE * mean
        tol = max(narrow, spread)
    rel = (sim - mean) / mean if mean else (0.0 if sim == 0 else math.inf)
    agree = abs(sim - mean) <= tol
    return {
        "difference": sim - mean,
        "kernel": kernel[0] if len(kernel) == 1 else mean,
        "kernel_runs": list(kernel),
        "kernel_spread": spread,
        "tiersim": sim,
        "relative_error": rel if math.isfinite(rel) else None,
        "tolerance": tol,
        "agree": agree,
        "by_spread": agree and abs(sim - mean) > narrow,
    }


def error_text(metric: str, v: dict[str, Any]) -> str:
    """The disagreement as shown: points for the fast share, a relative error for counts."""
    if metric == "fast_share":
        return f"{v['difference']:+.1f} pt"
    return "-" if v["relative_error"] is None else f"{100 * v['relative_error']:+.0f} %"


def verdict_text(v: dict[str, Any]) -> str:
    """A metric's verdict as the CLI's table and report.html show it."""
    if not v["agree"]:
        return "no"
    return "yes, by the spread" if v.get("by_spread") else "yes"


def count_text(metric: str, value: float) -> str:
    """A metric's value as shown: the fast share to a tenth of a point, counts (and means and
    tolerances of counts) whole, with thousands separators."""
    return f"{value:.1f}" if metric == "fast_share" else f"{value:,.0f}"


def agreement_text(doc: dict[str, Any]) -> str:
    """The line that counts the agreeing metrics, and those agreeing only by the spread."""
    verdicts = [v for case in doc["cases"].values() for v in case["metrics"].values()]
    agree = sum(v["agree"] for v in verdicts)
    by_spread = sum(bool(v.get("by_spread")) for v in verdicts)
    return f"{agree} of {len(verdicts)} agree" + (
        f", {by_spread} of them only within the VM's run-to-run spread (its runs differ by more than 25 %)"
        if by_spread
        else ""
    )


def _series(case_id: str, case: Case, sim_ts: Any, d: float) -> list[dict[str, Any]]:
    """Rows of series.parquet: the kernel's samples per run and tiersim's epochs, on the guest's
    time axis (tiersim's simulated time divided by the daemon time scale)."""
    rows = []
    for r, run in enumerate(case.runs):
        s0 = run.samples[0]
        for s in run.samples:
            pages = sum(s.get(f"N{i}", 0) for i in range(8))
            rows.append(
                {
                    "case": case_id,
                    "source": "kernel",
                    "run": r,
                    "t_s": s["t_s"],
                    "fast_pages": s.get("N0", 0),
                    "slow_pages": s.get("N1", 0),
                    "fast_share": 100.0 * s.get("N0", 0) / pages if pages else None,
                    "promotions": s.get(
                        "numa_pages_migrated" if case.setting.numa_balancing == 1 else "pgpromote_success", 0
                    )
                    - s0.get("numa_pages_migrated" if case.setting.numa_balancing == 1 else "pgpromote_success", 0),
                    "demotions": (s.get("pgdemote_kswapd", 0) + s.get("pgdemote_direct", 0))
                    - (s0.get("pgdemote_kswapd", 0) + s0.get("pgdemote_direct", 0)),
                    "hint_faults": s.get("numa_hint_faults", 0) - s0.get("numa_hint_faults", 0),
                }
            )
    import polars as pl

    ts = sim_ts.sort(["epoch", "node"])
    by = ts.group_by("epoch", maintain_order=True).agg(
        pl.col("t_end_ns").first(),
        pl.col("pages").filter(pl.col("node") == "node0").sum().alias("fast"),
        pl.col("pages").filter(pl.col("node") == "node1").sum().alias("slow"),
        pl.col("migrated_in").filter(pl.col("node") == "node0").sum().alias("prom"),
        pl.col("migrated_out").filter(pl.col("node") == "node0").sum().alias("dem"),
    )
    prom = dem = 0
    for e in by.iter_rows(named=True):
        prom += e["prom"]
        dem += e["dem"]
        total = e["fast"] + e["slow"]
        rows.append(
            {
                "case": case_id,
                "source": "tiersim",
                "run": 0,
                "t_s": e["t_end_ns"] / 1e9 / d,
                "fast_pages": e["fast"],
                "slow_pages": e["slow"],
                "fast_share": 100.0 * e["fast"] / total if total else None,
                "promotions": prom,
                "demotions": dem,
                # tiersim's time series has no per-epoch hint-fault count; the total is in validate.json.
                "hint_faults": None,
            }
        )
    return rows


Progress = Callable[[str], None]


def validate_linux(
    out_dir: str | os.PathLike[str],
    *,
    programs: Sequence[str] | None = None,
    settings: Sequence[str] | None = None,
    runs: int | None = None,
    quick: bool = False,
    timeout_s: float = 600.0,
    progress: Progress | None = None,
    replay: str | os.PathLike[str] | None = None,
    time_scale: str = "program",
    trace_kernel: bool = False,
    work_factor: float | None = None,
) -> dict[str, Any]:
    """Runs the cases and writes `out_dir` (validate.json, series.parquet, report.html, the traces
    and each boot's guest output; with `trace_kernel`, the guest kernel's reclaim and scanning
    events too: kernel_trace.parquet and each case's `kernel_trace` in validate.json). Built in a
    temporary directory beside it and renamed at the end, so a failed validation leaves nothing
    that looks like a result. With `replay`, an earlier result directory, no VM boots and nothing
    is captured: its guest runs and traces are taken and only tiersim's side is run again (after a
    change to the model), every boot of its cases (`runs` is the result's; giving it is an error).
    `runs` defaults to 3 (1 with `quick`). `work_factor` scales every program's work (`sized`);
    None sizes it to the guest's speed with a calibration boot first (`size_factor`), except for
    `quick`, whose case keeps its own size."""
    say = progress or (lambda _msg: None)
    if quick and (programs or settings):
        raise TiersimError(f"--quick runs its one case, {QUICK[0]}-{QUICK[1]}: give no --program or --setting with it")
    if quick and runs is not None and replay is None:
        raise TiersimError(f"--quick boots its one case once: give no --runs with it (it would be {runs})")
    # Options that only new boots take, refused before the replayed result is read: the conflict
    # is the user's first error whatever the directory holds.
    if replay is not None:
        if trace_kernel:
            raise TiersimError("--kernel-trace records a new boot: a replay keeps whatever its boots recorded")
        if work_factor is not None:
            raise TiersimError("--work-factor sizes new boots: a replay keeps the programs its boots ran")
        if quick:
            raise TiersimError("--quick boots its one case: a replay takes the cases of the result it replays")
        if runs is not None:
            raise TiersimError("--runs sets how many times a case boots: a replay takes every boot of its result")
    tools = None if replay is not None else vm.find_tools()
    source: tuple[Path, dict[str, Any]] | None = None
    if replay is not None:
        old = _read_result(Path(replay))
        source = (Path(replay), old)
        runs = old["runs"]
        # What is not given is the result's, in the canonical order (PROGRAMS, SETTINGS), as its
        # boots ran them: validate.json stores the cases sorted by name.
        done = old["cases"].values()
        if not programs:
            programs = _canonical([c["program"]["name"] for c in done], PROGRAMS)
        if not settings:
            settings = _canonical([c["setting"]["name"] for c in done], SETTINGS)
    elif quick:
        programs, settings, runs = [QUICK[0]], [QUICK[1]], 1
    runs = 3 if runs is None else runs
    # Each once: `--program kv --program kv` would boot it twice, and a replay copied its boots twice.
    programs = list(dict.fromkeys(programs or PROGRAMS))
    settings = list(dict.fromkeys(settings or SETTINGS))
    for p in programs:
        if p not in PROGRAMS:
            raise TiersimError(f"unknown program '{p}': expected one of {', '.join(PROGRAMS)}")
    for s in settings:
        if s not in SETTINGS:
            raise TiersimError(f"unknown setting '{s}': expected one of {', '.join(SETTINGS)}")
    if runs < 1:
        raise TiersimError("runs must be at least 1")
    if time_scale not in TIME_SCALES:
        raise TiersimError(f"unknown time scale '{time_scale}': expected one of {', '.join(TIME_SCALES)}")
    lo, hi = WORK_FACTOR_RANGE
    if work_factor is not None and not lo <= work_factor <= hi:
        raise TiersimError(f"work factor {work_factor} out of range: expected {lo:g} to {hi:g}")
    if source is not None:
        _check_replay(*source, programs, settings, Path(out_dir))
    out = Path(out_dir)
    if out.exists():
        raise TiersimError(f"{out} exists: give a new directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = temp_dir_beside(out, f".{out.name}.partial-")
    try:
        result = _validate(
            work,
            tools,
            programs,
            settings,
            runs,
            quick,
            timeout_s,
            say,
            source,
            time_scale,
            trace_kernel,
            work_factor,
        )
        work.rename(out)
    except (OSError, TiersimError) as exc:
        shutil.rmtree(work, ignore_errors=True)
        raise _named_for_the_user(exc, work, out, None if replay is None else Path(replay)) from None
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return result


def _named_for_the_user(exc: OSError | TiersimError, work: Path, out: Path, replay: Path | None) -> Exception:
    """`exc` with the hidden work directory's paths as the user knows them: a replay's traces and
    guest output as the earlier result's files it took them from, everything else as the result
    directory it would have become."""

    def name(text: str) -> str:
        if replay is not None:
            for sub in ("traces", "guest"):
                text = text.replace(f"{work / sub}", f"{replay / sub}")
        return text.replace(str(work), str(out))

    if isinstance(exc, OSError):
        filename = None if exc.filename is None else name(os.fspath(exc.filename))
        return OSError(exc.errno, exc.strerror or str(exc), filename)
    return TiersimError(name(str(exc)))


def _validate(
    work: Path,
    tools: vm.Tools | None,
    programs: list[str],
    settings: list[str],
    runs: int,
    quick: bool,
    timeout_s: float,
    say: Progress,
    replay: tuple[Path, dict[str, Any]] | None = None,
    time_scale: str = "program",
    trace_kernel: bool = False,
    factor: float | None = None,
) -> dict[str, Any]:
    """The validation into `work`; `replay` is an earlier result's directory and its validate.json,
    as _read_result and _check_replay accepted them."""
    bins, traces = work / "bin", work / "traces"
    bins.mkdir()
    traces.mkdir()
    if replay is None:
        assert tools is not None
        knobs = QUICK_KNOBS if quick else KNOBS
        _build_guest_programs(bins, programs)
        sizing, run_programs = _size_programs(work, tools, programs, quick, factor, timeout_s, say)
        cases = _boot_cases(work, tools, run_programs, settings, runs, knobs, timeout_s, say, trace_kernel)
        ipas, captures = _capture_programs(work, run_programs, say)
    else:
        rdir, old = replay
        cases = _replayed_cases(rdir, old, work, programs, settings, say)
        knobs, quick = old["knobs"], old["quick"]
        sizing = old.get("sizing") or {"how": "before sizing (the programs' defaults)"}
        ipas = old["guest_speed"]["instructions_per_access"]
        captures = {
            "calib": {
                "records": old["guest_speed"]["calib_records"],
                "instructions": old["guest_speed"]["calib_instructions_est"],
            }
        }

    calib_sim = _simulate(work, "calib", None, None, SETTINGS["none"], 1.0)
    # Both sides without the touch phase when the boots timed it: tiersim's calibration platform
    # charges each page the guest reports touching the default fault latency (1 us).
    touches = [_phase(run, "calib_touch") for c in cases.values() for run in c.runs]
    sim_touch_s = touches[0]["pages"] * 1e-6 if _all_timed(touches) else 0.0
    calib_sim_s = calib_sim.summary["execution_time_ns"] / 1e9 - sim_touch_s

    all_calib = [calib_work_s(run) for c in cases.values() for run in c.runs]
    guest_calib_s = sum(all_calib) / len(all_calib)
    d = calib_sim_s / guest_calib_s
    instructions = captures["calib"].get("instructions") or 0
    speed = {
        "calib_guest_s_runs": all_calib,
        "calib_touch_guest_ns_per_page_runs": _phase_ns(cases, "calib_touch", "pages"),
        "calib_guest_s": guest_calib_s,
        "calib_tiersim_s": calib_sim_s,
        "calib_records": captures["calib"].get("records"),
        "guest_slowdown": guest_calib_s / calib_sim_s,
        "daemon_time_scale": d,
        "time_scale": time_scale,
        "calib_sweep_guest_ns_per_line_runs": _phase_ns(cases, "calib_sweep"),
        "calib_random_guest_ns_per_read_runs": _phase_ns(cases, "calib_random"),
        "calib_migrate_guest_ns_per_page_runs": _phase_ns(cases, "calib_migrate"),
        "calib_instructions_est": instructions,
        "instructions_per_access": ipas,
    }
    say(
        f"guest speed: calibration {guest_calib_s:.3f} s in the guest, {calib_sim_s:.3f} s in tiersim: daemon time scale {d:.4f}"
    )

    paths = kernel_path_costs(cases)
    speed["kernel_path_costs"] = paths
    lenses = program_lenses(work, cases, calib_sim_s, knobs, paths, say) if time_scale == "program" else {}
    speed["program_time_scales"] = {p: {k: v for k, v in lens.items() if k != "sim"} for p, lens in lenses.items()}

    import polars as pl

    results: dict[str, Any] = {}
    series_rows: list[dict[str, Any]] = []
    trace_rows: list[dict[str, Any]] = []
    for cid, case in cases.items():
        say(f"tiersim {cid}")
        # The host's load changes over a matrix (other jobs share its cores), and with it the
        # guest's speed: each case's daemon time scale comes from its own boots (their program
        # times, or with time_scale="calibration" their calibrations).
        case_calib_s = sum(calib_work_s(run) for run in case.runs) / len(case.runs)
        d_calib = calib_sim_s / case_calib_s
        own = lenses.get(case.program.name)
        if own and own["case"] == cid:
            sim, dc = own["sim"], own["daemon_time_scale"]
        else:
            # The program's speed, measured on other boots, moved by this case's boots'
            # calibration against theirs: the host's load changes the guest's speed. Medians, since
            # a burst of load on the host can slow one boot's calibration alone (4.2 s against
            # 2.4 s in the same case).
            median_calib_s = statistics.median(calib_work_s(run) for run in case.runs)
            dc = own["daemon_time_scale"] * own["calib_guest_s"] / median_calib_s if own else d_calib
            sim, _ = _replayer(work, case, cid, knobs, paths.get(case.program.name))(dc)
        ks = kswapd_cost(case, dc)
        fc = fault_cost(case, dc, paths.get(case.program.name))
        km = [kernel_metrics(case.setting, run.samples) for run in case.runs]
        sm = sim_metrics(sim.summary)
        metrics = {m: compare(m, [k[m] for k in km], sm[m]) for m in METRICS}
        results[cid] = {
            "program": asdict(case.program),
            "setting": asdict(case.setting),
            "policy_params": policy_params(case.setting, knobs),
            "metrics": metrics,
            "agree": all(v["agree"] for v in metrics.values()),
            "kernel_program_s": [run.program_s for run in case.runs],
            "tiersim_program_s": sim.summary["execution_time_ns"] / 1e9,
            "tiersim_program_s_on_guest_axis": sim.summary["execution_time_ns"] / 1e9 / dc,
            "calib_guest_s": [run.calib_s for run in case.runs],
            "daemon_time_scale": dc,
            "calibration_time_scale": d_calib,
            "time_scale_from": f"{own['case']} (the program's speed)" if own else "the calibration",
            "kernel_pages": [k["pages"] for k in km],
            "tiersim_pages": sm["pages"],
            "kernel_promote_candidates": [k["promote_candidates"] for k in km],
            "kernel_migrate_failures": [k["migrate_failures"] for k in km],
            "kernel_pte_updates": [k["pte_updates"] for k in km],
            "tiersim_failed_promotions": sm["failed_promotions"],
            "tiersim_scan_passes": sm["scan_passes"],
            "kernel_scan_passes": [k["scan_passes"] for k in km],
            "kernel_kswapd_cpu_s": [k["kswapd_cpu_s"] for k in km],
            "kernel_kswapd_reclaimed": [k["kswapd_reclaimed"] for k in km],
            "kernel_kswapd_scanned": [k["kswapd_scanned"] for k in km],
            "kswapd": ks,
            "faults": fc,
            "tiersim_kswapd_pages": sm["kswapd_pages"],
            "tiersim_kswapd_s": sm["kswapd_s"],
            "tiersim_scanned": sm["kswapd_scanned"],
            "tiersim_occupied_demotions": sm["occupied_demotions"],
            "tiersim_occupied_pages_at_end": sm["occupied_pages"],
            "vm_wall_s": [run.wall_s for run in case.runs],
            "regime": sim.summary.get("regime"),
        }
        series_rows += _series(cid, case, sim.timeseries, dc)
        summaries = []
        for r, run in enumerate(case.runs):
            if "kernel_trace" in run.machine:
                events, stats = run.machine["kernel_trace"]
                summaries.append(kernel_trace.summarize(events, stats))
                trace_rows += [{"case": cid, "run": r} | e for e in events]
        if summaries:
            results[cid]["kernel_trace"] = summaries
    first = next(iter(cases.values())).runs[0]
    doc = {
        "kernel": first.machine.get("kernel"),
        "accel": first.accel,
        "vm": asdict(vm.Shape())
        | {"nodes": first.machine["nodes"], "tiers": first.machine["tiers"], "sysctl": first.machine["sysctl"]},
        "zones": first.machine["zones"],
        "knobs": knobs,
        "capture": CAPTURE_PARAMS,
        "guest_speed": speed,
        "runs": runs,
        "quick": quick,
        "sizing": sizing,
        "cases": results,
    }
    (work / "validate.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    pl.DataFrame(series_rows, infer_schema_length=None).write_parquet(work / "series.parquet")
    if trace_rows:
        pl.DataFrame(trace_rows, infer_schema_length=None).write_parquet(work / "kernel_trace.parquet")
    from tiersim.validate.report import write_report

    write_report(work, doc, pl.read_parquet(work / "series.parquet"))
    shutil.rmtree(bins)
    return doc


def _build_guest_programs(bins: Path, programs: list[str]) -> None:
    vm.compile_static(vm.GUEST / "sampler.c", bins / "sampler")
    for name in ["calib", *programs]:
        vm.compile_static(vm.PROGRAMS / f"{name}.c", bins / f"{name}.static")


def _size_programs(
    work: Path,
    tools: vm.Tools,
    programs: list[str],
    quick: bool,
    factor: float | None,
    timeout_s: float,
    say: Progress,
) -> tuple[dict[str, Any], dict[str, Program]]:
    """How the programs' work was sized (validate.json's `sizing`) and the programs as the matrix
    runs them. Without a given factor a full matrix first boots the VM to time the calibration
    alone (its output kept under guest/sizing); the quick case keeps its own size."""
    base = {p: replace(PROGRAMS[p], args=QUICK_ARGS[p]) if quick and p in QUICK_ARGS else PROGRAMS[p] for p in programs}
    info: dict[str, Any] = {"reference_calib_s": SIZE_CALIB_S, "factor_limits": list(SIZE_FACTORS)}
    if factor is not None:
        info |= {"how": "given", "factor": factor}
    elif quick:
        info |= {"how": "the quick case's own size", "factor": 1.0}
        factor = 1.0
    else:
        say("VM sizing: the calibration alone (guest/sizing)")
        first = base[programs[0]]
        env = _case_env(first, SETTINGS["none"], first.args, KNOBS) | {"CALIB_ONLY": "1"}
        calib_s = calib_work_s(_boot(work, tools, "sizing", first.name, env, timeout_s, "the sizing boot", True))
        factor = size_factor(calib_s)
        info |= {"how": "the sizing boot's calibration", "calib_guest_s": calib_s, "factor": factor}
    run = {p: sized(prog, factor) for p, prog in base.items()}
    say(
        f"work factor {factor:.3f} ({info['how']}): "
        + ", ".join(f"{p} {' '.join(map(str, prog.args))}" for p, prog in run.items())
    )
    return info | {"args": {p: list(prog.args) for p, prog in run.items()}}, run


def _boot(
    work: Path,
    tools: vm.Tools,
    name: str,
    program: str,
    env: dict[str, str],
    timeout_s: float,
    what: str,
    calib_only: bool = False,
) -> GuestRun:
    """One boot of the VM with the sampler, the calibration and `program` (as
    _build_guest_programs built them) and the settings in `env`; its output is kept under
    guest/NAME."""
    bins = work / "bin"
    rdir = work / "guest" / name
    rdir.mkdir(parents=True)
    files = {"/sampler": bins / "sampler", "/calib": bins / "calib.static", "/prog": bins / f"{program}.static"}
    vm.build_initramfs(tools, files, env, rdir / "initrd")
    b = vm.boot(tools, vm.Shape(), rdir / "initrd", timeout_s, rdir)
    (rdir / "initrd").unlink()
    machine, calib_s, program_s, samples = parse_guest(b.data, b.console, what, calib_only)
    return GuestRun(machine, calib_s, program_s, samples, b.wall_s, b.accel)


def _boot_cases(
    work: Path,
    tools: vm.Tools,
    programs: dict[str, Program],
    settings: list[str],
    runs: int,
    knobs: dict[str, int],
    timeout_s: float,
    say: Progress,
    trace_kernel: bool = False,
) -> dict[str, Case]:
    """Every case's boots; each boot's guest output is kept under guest/CASE-RUN."""
    cases: dict[str, Case] = {}
    for p, prog in programs.items():
        args = prog.args
        for s in settings:
            case = Case(prog, SETTINGS[s])
            cid = f"{p}-{s}"
            cases[cid] = case
            for r in range(runs):
                say(f"VM {cid} run {r + 1}/{runs} (guest/{cid}-{r})")
                env = _case_env(case.program, case.setting, args, knobs)
                if trace_kernel:
                    env |= kernel_trace.case_env()
                run = _boot(work, tools, f"{cid}-{r}", p, env, timeout_s, f"{cid} run {r + 1}")
                _check_tiers(run.machine, f"{cid} run {r + 1}")
                case.runs.append(run)
    return cases


def _capture_programs(
    work: Path, programs: dict[str, Program], say: Progress
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The calibration and each program captured on the host, the binaries the guest ran, with
    the arguments they ran with."""
    bins, traces = work / "bin", work / "traces"
    captures: dict[str, dict[str, Any]] = {}
    ipas: dict[str, dict[str, Any]] = {}
    for name in ["calib", *programs]:
        args = CALIB_ARGS if name == "calib" else programs[name].args
        say(f"capturing {name} {' '.join(map(str, args))}")
        # Built by _build_guest_programs for the guest.
        captures[name] = _capture(bins / f"{name}.static", args, traces / f"{name}.trace")
        ipas[name] = instructions_per_access(captures[name])
    return ipas, captures


class _Missing(Exception):
    """A key a replay needs, absent from the earlier result's validate.json (its dotted path)."""


def _get(doc: Any, *keys: str) -> Any:
    for i, key in enumerate(keys):
        if not isinstance(doc, dict) or key not in doc:
            raise _Missing(".".join(keys[: i + 1]))
        doc = doc[key]
    return doc


def _canonical(names: Sequence[str], order: dict[str, Any]) -> list[str]:
    """`names` once each, in `order`'s order (names it lacks last, as they come)."""
    known = list(order)
    return sorted(dict.fromkeys(names), key=lambda n: known.index(n) if n in known else len(known))


def _read_result(replay: Path) -> dict[str, Any]:
    """An earlier result's validate.json, with every key a replay reads; or one error saying what
    is wrong with the directory or the file, before anything is written."""
    if not replay.exists():
        raise TiersimError(f"{replay} does not exist: give the directory of a `tiersim validate linux` result")
    if not replay.is_dir():
        raise TiersimError(f"{replay} is not a directory: give the directory of a `tiersim validate linux` result")
    path = replay / "validate.json"
    if not path.is_file():
        raise TiersimError(f"{replay}: not a `tiersim validate linux` result (it has no validate.json)")
    try:
        # Not an object at the top: _get below refuses it (`runs` missing).
        old: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TiersimError(f"{replay}: not a `tiersim validate linux` result ({path.name}: {e})") from None
    try:
        # An edited or foreign validate.json: said before anything is written, not a traceback.
        runs = _get(old, "runs")
        if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
            raise ValueError(f"runs {runs!r} is not a positive whole number")
        for key in ("knobs", "quick"):
            _get(old, key)
        for key in ("instructions_per_access", "calib_records", "calib_instructions_est"):
            _get(old, "guest_speed", key)
        sizing = old.get("sizing") or {}
        if "factor" in sizing and not (isinstance(sizing["factor"], int | float) and math.isfinite(sizing["factor"])):
            raise ValueError(f"sizing.factor {sizing['factor']!r} is not a finite number")
        cases = _get(old, "cases")
        if not isinstance(cases, dict) or not cases:
            raise ValueError("it holds no case")
        for cid in cases:
            _get(old, "cases", cid, "program", "name")
            _get(old, "cases", cid, "program", "args")
            _get(old, "cases", cid, "setting", "name")
    except _Missing as e:
        raise TiersimError(f"{path}: cannot replay it: it has no `{e}` (a damaged or edited result)") from None
    except (TypeError, ValueError) as e:
        raise TiersimError(f"{path}: cannot replay it: {e}") from None
    return old


def _check_replay(replay: Path, old: dict[str, Any], programs: list[str], settings: list[str], out: Path) -> None:
    """That the earlier result holds every boot of the cases to replay (validate.json's `runs` of
    each, guest/CASE-0 to guest/CASE-(runs-1), each with its guest.out) and the traces (the
    calibration's and each program's), and that the new result is not inside it; else one error,
    before anything is written."""
    if out.resolve().is_relative_to(replay.resolve()):
        raise TiersimError(f"{out} is inside the replayed result {replay}: give a directory outside it")
    held = list(old["cases"])
    runs = old["runs"]
    for p in programs:
        for s in settings:
            cid = f"{p}-{s}"
            if cid not in old["cases"]:
                others = [c for c in held if old["cases"][c]["program"]["name"] == p]
                if others:
                    names = _canonical([old["cases"][c]["setting"]["name"] for c in others], SETTINGS)
                    given = " ".join(f"--setting {n}" for n in names)
                    hint = f"of {p} it holds {', '.join(f'{p}-{n}' for n in names)}: give {given} instead"
                else:
                    hint = f"its cases are {', '.join(held)}: give --program and --setting for those"
                raise TiersimError(f"{replay} holds no VM run of case {cid}; {hint}")
            for r in range(runs):
                rdir = replay / "guest" / f"{cid}-{r}"
                if not rdir.is_dir():
                    raise TiersimError(
                        f"{rdir} is missing: a damaged result, whose validate.json says each case booted"
                        f" {runs} times (runs = {runs}: guest/{cid}-0 to guest/{cid}-{runs - 1})"
                    )
                if not (rdir / "guest.out").is_file():
                    raise TiersimError(f"{rdir / 'guest.out'} is missing: a damaged `tiersim validate linux` result")
    for name in ["calib", *programs]:
        if not (replay / "traces" / f"{name}.trace").exists():
            raise TiersimError(f"{replay}: no trace {name}.trace to replay")


def _replayed_cases(
    replay: Path, old: dict[str, Any], work: Path, programs: list[str], settings: list[str], say: Progress
) -> dict[str, Case]:
    """An earlier result directory's boots and traces (all there: _check_replay), for a replay of
    the tiersim side alone; the sizing boot's output is kept too, as it was."""
    cases: dict[str, Case] = {}
    for p in programs:
        for s in settings:
            cid = f"{p}-{s}"
            done = old["cases"][cid]
            case = Case(replace(PROGRAMS[p], args=tuple(done["program"]["args"])), SETTINGS[s])
            wall = done.get("vm_wall_s", [])
            for r in range(old["runs"]):
                rdir = replay / "guest" / f"{cid}-{r}"
                data = (rdir / "guest.out").read_text(errors="replace")
                console = (rdir / "console.log").read_text(errors="replace") if (rdir / "console.log").exists() else ""
                machine, calib_s, program_s, samples = parse_guest(
                    data, console, f"{rdir / 'guest.out'} ({cid} run {r + 1})"
                )
                case.runs.append(
                    GuestRun(
                        machine, calib_s, program_s, samples, wall[r] if r < len(wall) else 0.0, old.get("accel", "")
                    )
                )
                shutil.copytree(rdir, work / "guest" / f"{cid}-{r}")
            cases[cid] = case
    if (replay / "guest" / "sizing").is_dir():
        shutil.copytree(replay / "guest" / "sizing", work / "guest" / "sizing")
    for name in ["calib", *programs]:
        src = replay / "traces" / f"{name}.trace"
        say(f"taking {src}")
        try:
            os.link(src, work / "traces" / src.name)
        except OSError:
            with writing(work / "traces" / src.name):
                shutil.copy2(src, work / "traces" / src.name)
    return cases


def _check_tiers(machine: dict[str, Any], what: str) -> None:
    """The slow node must be in a lower memory tier than node 0 (a higher tier number in
    /sys/devices/virtual/memory_tiering: mm/memory-tiers.c numbers tiers by abstract distance)."""
    tier_of = {}
    for tier, nodes in machine["tiers"].items():
        for part in nodes.split(","):
            lo, _, hi = part.partition("-")
            for n in range(int(lo), int(hi or lo) + 1):
                tier_of[n] = tier
    if 0 not in tier_of or 1 not in tier_of or tier_of[1] <= tier_of[0]:
        raise TiersimError(f"{what}: node 1 is not in a lower memory tier than node 0 (tiers: {machine['tiers']})")


def _simulate(
    work: Path,
    name: str,
    case: Case | None,
    cid: str | None,
    setting: Setting,
    d: float,
    knobs: dict[str, int] = KNOBS,
    kswapd: dict[str, Any] | None = None,
    faults: dict[str, Any] | None = None,
) -> Any:
    """One tiersim replay; the calibration's (case None) on the platform of no run in particular:
    its time does not depend on capacities as long as it fits, which 32 MiB does."""
    if case is None:
        platform = _calib_platform()
    else:
        platform = platform_toml(case.runs[0], d, kswapd, faults)
    pdir = work / "platforms"
    pdir.mkdir(exist_ok=True)
    ppath = pdir / f"{cid or name}.toml"
    ppath.write_text(platform)
    out = work / "tiersim" / (cid or name)
    return tiersim.run(
        work / "traces" / f"{name}.trace",
        platform=ppath,
        policy=setting.policy,
        params=policy_params(setting, knobs) or None,
        seed=0,
        out_dir=out,
    )


def _calib_platform() -> str:
    return f"""name = "linux_vm_calib"
summary = "the validation VM's CPUs and memory device, for the guest-speed calibration"

[host]
cpus = 2
writes = "{WRITES}"

[[nodes]]
name = "node0"
preset = "{PRESET}"
params = {{ channels = 2 }}
capacity = "256MiB"
cpus = "0-1"
"""
