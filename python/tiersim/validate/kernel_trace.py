"""The guest kernel's own account of reclaim and NUMA scanning (`tiersim validate linux
--kernel-trace`): ftrace tracepoints of mm/vmscan.c and mm/migrate.c and function entries of the
NUMA scanner (kernel/sched/fair.c task_numa_work, mm/mempolicy.c change_prot_numa), recorded in
the guest while the program runs and parsed here. The counters the sampler reads say how much
kswapd scanned; these say which pages it skipped, kept, activated or took, for which zone, and
when each scan window ran."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

# Tracepoints (their format files are under /sys/kernel/tracing/events in the guest).
EVENTS = (
    "vmscan/mm_vmscan_wakeup_kswapd",
    "vmscan/mm_vmscan_kswapd_wake",
    "vmscan/mm_vmscan_lru_isolate",
    "vmscan/mm_vmscan_lru_shrink_inactive",
    "vmscan/mm_vmscan_lru_shrink_active",
    "migrate/mm_migrate_pages",
    "sched/sched_process_exec",
    "task/task_newtask",
)
# Function entries (the function tracer with a filter): a scan window that walks calls
# change_prot_numa once per VMA; one that returns early (numa_next_scan not reached) does not.
FUNCTIONS = ("task_numa_work", "change_prot_numa")
# Per CPU, taken from node 0's memory before the guest reports its free pages, so the platform
# sees it gone. Recording stops when it is full (overwrite off): the run's start is kept.
BUFFER_KIB = 2048

_LINE = re.compile(r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d+)\]\s+\S+\s+(?P<ts>\d+\.\d+):\s+(?P<rest>.*)$")
_EVENT = re.compile(r"^(?P<event>\w+):\s*(?P<fields>.*)$")
_FUNCTION = re.compile(r"^(?P<func>\w+)\s+<-(?P<caller>\S+)")
_STAT = re.compile(r"^(entries|overrun|commit overrun|dropped events):\s+(\d+)$")


def case_env() -> dict[str, str]:
    """What the guest's init.sh reads to record the trace."""
    return {
        "KERNEL_TRACE_EVENTS": " ".join(EVENTS),
        "KERNEL_TRACE_FUNCTIONS": " ".join(FUNCTIONS),
        "KERNEL_TRACE_KIB": str(BUFFER_KIB),
    }


# Fields read as numbers; the rest (flags in hex, names) stay text, so a column keeps one type.
_NUMERIC = re.compile(r"^(nr_\w+|nid|order|classzone|highest_zoneidx|priority|isolate_mode|zid)$")


def _fields(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in text.split():
        if "=" not in part:
            continue
        k, v = part.split("=", 1)
        if k in ("task", "pid", "cpu", "ts", "event", "t_s"):
            k = f"arg_{k}"
        out[k] = int(v) if _NUMERIC.match(k) and v.lstrip("-").isdigit() else v
    return out


def parse(lines: list[str]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The "T " lines of one boot's guest output: its events (times in seconds from the program's
    exec, or from the trace's start if the exec was not recorded) and the ring buffer's per-CPU
    statistics summed (entries, overrun, dropped events)."""
    events: list[dict[str, Any]] = []
    stats: Counter[str] = Counter()
    for raw in lines:
        line = raw[2:] if raw.startswith("T ") else raw
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if m := _STAT.match(line.strip()):
            stats[m.group(1).replace(" ", "_")] += int(m.group(2))
            continue
        m = _LINE.match(line)
        if not m:
            continue
        row: dict[str, Any] = {"ts": float(m["ts"]), "task": m["task"], "pid": int(m["pid"]), "cpu": int(m["cpu"])}
        if e := _EVENT.match(m["rest"]):
            row["event"] = e["event"]
            row |= _fields(e["fields"])
        elif f := _FUNCTION.match(m["rest"]):
            row["event"] = f["func"]
        else:
            continue
        events.append(row)
    exec_ts = next(
        (r["ts"] for r in events if r["event"] == "sched_process_exec" and str(r.get("filename")) == "/prog"),
        events[0]["ts"] if events else 0.0,
    )
    for r in events:
        r["t_s"] = round(r.pop("ts") - exec_ts, 6)
    return events, dict(stats)


def summarize(events: list[dict[str, Any]], stats: dict[str, int]) -> dict[str, Any]:
    """One boot's reclaim and scanning, as counts: kswapd's wake-ups by waker, its isolations per
    reclaim zone index and list (skipped pages lie above it and count in pgscan; the active
    lists' isolations are shrink_active_list's), what shrink_inactive_list
    did with the pages it took, migrations by reason, the program's thread creations, each
    scan window (walked: it called change_prot_numa) and each of kswapd's balance_pgdat runs
    (from one kswapd_wake to the next: what its shrink_inactive_list calls scanned, reclaimed,
    kept and activated, and the lowest priority it reached)."""
    wakeups: Counter[str] = Counter()
    isolate: dict[str, dict[str, Counter[str]]] = {}
    inactive: Counter[str] = Counter()
    active: Counter[str] = Counter()
    migrate: dict[str, Counter[str]] = {}
    threads: list[float] = []
    windows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for r in events:
        ev = r["event"]
        if ev == "mm_vmscan_kswapd_wake":
            runs.append({"t_s": r["t_s"], "scanned": 0, "reclaimed": 0, "kept": 0, "activated": 0, "priority": None})
        elif ev == "mm_vmscan_wakeup_kswapd":
            wakeups[f"{r['task']} gfp={r.get('gfp_flags')}"] += 1
        elif ev == "mm_vmscan_lru_isolate":
            zone = str(r.get("classzone", r.get("highest_zoneidx")))
            c = isolate.setdefault(zone, {}).setdefault(str(r.get("lru")), Counter())
            for k in ("nr_scanned", "nr_skipped", "nr_taken"):
                c[k[3:]] += int(r.get(k, 0))
        elif ev == "mm_vmscan_lru_shrink_inactive":
            inactive["scanned"] += int(r.get("nr_scanned", 0))
            inactive["reclaimed"] += int(r.get("nr_reclaimed", 0))
            inactive["kept"] += int(r.get("nr_ref_keep", 0))
            inactive["activated"] += int(r.get("nr_activate_anon", 0)) + int(r.get("nr_activate_file", 0))
            if runs and r["task"].startswith("kswapd"):
                run = runs[-1]
                run["scanned"] += int(r.get("nr_scanned", 0))
                run["reclaimed"] += int(r.get("nr_reclaimed", 0))
                run["kept"] += int(r.get("nr_ref_keep", 0))
                run["activated"] += int(r.get("nr_activate_anon", 0)) + int(r.get("nr_activate_file", 0))
                p = r.get("priority")
                if isinstance(p, int):
                    run["priority"] = p if run["priority"] is None else min(run["priority"], p)
        elif ev == "mm_vmscan_lru_shrink_active":
            active["taken"] += int(r.get("nr_taken", 0))
            active["deactivated"] += int(r.get("nr_deactivated", 0))
            active["referenced"] += int(r.get("nr_referenced", 0))
        elif ev == "mm_migrate_pages":
            c = migrate.setdefault(str(r.get("reason")), Counter())
            c["succeeded"] += int(r.get("nr_succeeded", 0))
            c["failed"] += int(r.get("nr_failed", 0))
        elif ev == "task_newtask" and r["task"] == "prog":
            threads.append(r["t_s"])
        elif ev == "task_numa_work" and r["task"] == "prog":
            windows.append({"t_s": r["t_s"], "pid": r["pid"], "walked": False})
        elif ev == "change_prot_numa" and r["task"] == "prog" and windows and windows[-1]["pid"] == r["pid"]:
            windows[-1]["walked"] = True
    return {
        "buffer": stats,
        "kswapd_wakeups": dict(wakeups),
        "isolate_by_reclaim_zone": {
            z: {lru: dict(c) for lru, c in sorted(v.items())} for z, v in sorted(isolate.items())
        },
        "shrink_inactive": dict(inactive),
        "shrink_active": dict(active),
        "migrate": {k: dict(v) for k, v in sorted(migrate.items())},
        "threads_created_s": threads,
        "scan_windows": windows,
        "kswapd_runs": runs,
    }
