"""Differential harness: tiersim's cxl_flash device against MQSim_CXL (reference seed 004's
simulator, github.com/spypaul/MQSim_CXL_Linux) on one matrix of mixes and device settings.

Each matrix point is a trace from `make_trace` (fixed seed, MQSim_CXL's text format) and a device
setting. `--mqsim BIN` runs MQSim_CXL on every point and writes its summaries to
`tests/data/mqsim_cxl_reference.json` (the traces are not kept: they come from the generator).
`tests/test_mqsim_diff.py` replays the same traces in tiersim with `compat = "mqsim_cxl"` and
checks each summary against the reference within the tolerances in `TOLERANCE`.

    python tools/mqsim_diff.py --mqsim /tmp/mqsim/linux/MQSim      # regenerate the reference
    python tools/mqsim_diff.py                                     # print tiersim against it
    python tools/mqsim_diff.py --markdown                          # the table of docs/cxl_flash.md
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "tests" / "data" / "mqsim_cxl_reference.json"

#: What "agree" means, per metric: relative (`rel`) or absolute in share points (`abs`).
TOLERANCE = {
    "hits_total": ("rel", 0.03),  # hits + hits under miss
    "flash_reads": ("rel", 0.03),  # demand flash reads
    "under_1us": ("abs", 0.05),
    "p50_ns": ("rel", 0.20),
    "end_ns": ("rel", 0.10),
}

MIB = 1 << 20
GIB = 1 << 30

#: The mix of seed 004 / issue 17 (100 ns apart, 70 % reads, half sequential, 1 GiB).
BASE_MIX = {"requests": 20000, "read_share": 0.7, "seq_share": 0.5, "footprint": GIB, "gap_ns": 100.0, "seed": 4}
#: MQSim_CXL's "real world workloads" example, at 32 blocks per plane, no prefetcher.
BASE_DEVICE = {"cache": True, "mshr": True, "policy": "CFLRU", "prefetcher": "No"}

#: Matrix points: name -> (mix overrides, device overrides). One axis moved at a time from the base.
MATRIX: dict[str, tuple[dict, dict]] = {
    "base": ({}, {}),
    "reads_only": ({"read_share": 1.0}, {}),
    "writes_heavy": ({"read_share": 0.3}, {}),
    "sequential": ({"seq_share": 0.95}, {}),
    "random": ({"seq_share": 0.0}, {}),
    "footprint_32mib": ({"footprint": 32 * MIB}, {}),
    "slow_arrivals": ({"gap_ns": 3000.0}, {}),
    "saturated": ({"gap_ns": 10.0, "seq_share": 0.0}, {}),
    "saturated_writes": ({"gap_ns": 10.0, "seq_share": 0.0, "read_share": 0.3}, {}),
    "lru": ({}, {"policy": "LRU"}),
    "fifo": ({}, {"policy": "FIFO"}),
    "no_mshr": ({}, {"mshr": False}),
    "no_cache": ({}, {"cache": False}),
    "best_offset": ({"seq_share": 0.95}, {"prefetcher": "Best-offset"}),
    "tagged": ({"seq_share": 0.95}, {"prefetcher": "Tagged"}),
}

#: Sustained load (issue 35): the base mix for 1M requests (100 ms of arrivals; once the 64 MiB
#: cache is full, its dirty victims keep the flash back end's queue full of programs), with
#: every prefetcher. Checked on the prefetch figures, within `LONG_TOLERANCE`.
LONG_REQUESTS = 1_000_000
LONG_PREFETCHERS = {
    "none": "No",
    "next_n_line": "Tagged",
    "best_offset": "Best-offset",
    "feedback_directed": "Feedback_direct",
    "leap": "Leap",
}
for _name, _mq in LONG_PREFETCHERS.items():
    MATRIX[f"long_{_name}"] = ({"requests": LONG_REQUESTS}, {"prefetcher": _mq})
#: Best-offset on the harness's best_offset mix (95 % sequential) for 1M requests: its offsets
#: are on from the first learning phase to the end, where on the base mix their turn-on is a
#: rare event (below, and docs/cxl_flash.md).
MATRIX["long_best_offset_seq"] = ({"requests": LONG_REQUESTS, "seq_share": 0.95}, {"prefetcher": "Best-offset"})
#: The same at 100,000 requests, where the back end is already full: a sustained-load case that
#: runs in seconds (the default test suite's).
MATRIX["sustained_best_offset"] = ({"requests": 100_000}, {"prefetcher": "Best-offset"})

#: Points checked on the prefetch figures (`LONG_TOLERANCE`) instead of `TOLERANCE`.
LONG_POINTS = [n for n in MATRIX if n.startswith(("long_", "sustained_"))]
LONG_TOLERANCE = {
    "hits": ("rel", 0.10),
    "hits_under_miss": ("rel", 0.10),
    "flash_reads": ("rel", 0.10),
    "prefetch_reads": ("rel", 0.10),
}

#: tiersim parameters for MQSim_CXL's device settings.
POLICY = {"CFLRU": "cflru", "LRU": "lru", "FIFO": "fifo"}
PREFETCHER = {mq: ours for ours, mq in LONG_PREFETCHERS.items()}


def point(name: str) -> tuple[dict, dict]:
    mix, dev = MATRIX[name]
    return {**BASE_MIX, **mix}, {**BASE_DEVICE, **dev}


def make_trace(mix: dict, path: Path) -> None:
    """`requests` lines: a `seq_share` of them continue a sequential 64 B stream that restarts at
    a random 4 KiB-aligned address every 256 KiB, the rest are uniform 64 B blocks; all within
    `footprint`; `read_share` reads; exponential gaps of mean `gap_ns`, times floored to ns."""
    rng = random.Random(mix["seed"])
    footprint = mix["footprint"]
    t = 0.0
    stream, left = 0, 0
    lines = []
    for _ in range(mix["requests"]):
        t += rng.expovariate(1.0 / mix["gap_ns"])
        if rng.random() < mix["seq_share"]:
            if left == 0:
                stream, left = rng.randrange(footprint // 4096) * 4096, 256 * 1024 // 64
            addr = stream % footprint
            stream += 64
            left -= 1
        else:
            addr = rng.randrange(footprint // 64) * 64
        op = 1 if rng.random() < mix["read_share"] else 0
        lines.append(f"{int(t)} 0 {addr} 8 {op}\n")
    path.write_text("".join(lines))


def tiersim_params(dev: dict, compat: str = "mqsim_cxl") -> dict:
    """The `tiersim flash replay` settings for a device point (preset cxl_flash_ull)."""
    return {
        "compat": compat,
        "flash_blocks_per_plane": 32,
        "cache_size": "64MiB" if dev["cache"] else 0,
        "mshr_rows": 1024 if dev["mshr"] else 0,
        "replacement": POLICY[dev["policy"]],
        "prefetcher": PREFETCHER[dev["prefetcher"]],
    }


def summarise_latencies(lat: list[int], end_ns: float, hits: int, hum: int, flash_reads: int) -> dict:
    lat = sorted(lat)
    n = len(lat)
    return {
        "requests": n,
        "hits": hits,
        "hits_under_miss": hum,
        "hits_total": hits + hum,
        "flash_reads": flash_reads,
        "under_1us": round(bisect.bisect_left(lat, 1000) / n, 5) if n else 0.0,
        "p50_ns": lat[(n - 1) // 2] if n else 0,
        "p99_ns": lat[min(n - 1, math.ceil(0.99 * n) - 1)] if n else 0,
        "end_ns": round(end_ns),
    }


# --- MQSim_CXL ---------------------------------------------------------------------------------


def _ssdconfig(mqsim_dir: Path) -> str:
    text = (mqsim_dir / "examples" / "real world workloads" / "ssdconfig.xml").read_text()
    return text.replace("<Block_No_Per_Plane>512</Block_No_Per_Plane>", "<Block_No_Per_Plane>32</Block_No_Per_Plane>")


def _workload(trace: Path) -> str:
    return f"""<?xml version="1.0" encoding="us-ascii"?>
<MQSim_IO_Scenarios><IO_Scenario><IO_Flow_Parameter_Set_Trace_Based>
<Priority_Class>HIGH</Priority_Class><Device_Level_Data_Caching_Mode>TURNED_OFF</Device_Level_Data_Caching_Mode>
<Channel_IDs>0,1,2,3,4,5,6,7</Channel_IDs><Chip_IDs>0,1,2,3,4,5,6,7</Chip_IDs><Die_IDs>0</Die_IDs>
<Plane_IDs>0,1,2,3</Plane_IDs><Initial_Occupancy_Percentage>30</Initial_Occupancy_Percentage>
<File_Path>{trace}</File_Path><Percentage_To_Be_Executed>100</Percentage_To_Be_Executed>
<Relay_Count>1</Relay_Count><Time_Unit>NANOSECOND</Time_Unit>
</IO_Flow_Parameter_Set_Trace_Based></IO_Scenario></MQSim_IO_Scenarios>
"""


def run_mqsim(binary: Path, mix: dict, dev: dict, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    (work / "Results").mkdir(exist_ok=True)
    trace = work / "t.trace"
    make_trace(mix, trace)
    (work / "config.txt").write_text(
        "DRAM_mode 0\n"
        f"Has_cache {int(dev['cache'])}\nDRAM_size 67108864\nMix_mode 1\nCache_portion_percentage 100\n"
        f"Has_mshr {int(dev['mshr'])}\nCache_placement 16\nCache_policy {dev['policy']}\n"
        f"Prefetcher {dev['prefetcher']}\nTotal_number_of_requests {mix['requests']}\n"
    )
    (work / "ssdconfig.xml").write_text(_ssdconfig(binary.parent))
    (work / "workload.xml").write_text(_workload(trace))
    proc = subprocess.run(
        [str(binary), "-i", "ssdconfig.xml", "-w", "workload.xml"],
        cwd=work,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"MQSim_CXL failed ({proc.returncode}): {proc.stderr[-500:]}")
    if dev["cache"]:
        lat = [int(x) for x in (work / "Results" / "latency_result.txt").read_text().split()]
        o = _overall(work / "Results" / "overall.txt")
        return summarise_latencies(
            lat,
            o["Request ends at timestamp"] * 1e9,
            int(o["Cache Hit Count"]),
            int(o["Hit under miss count"]),
            int(o["Flash Read Count"]),
        ) | {"flushes": int(o.get("Flush count", 0)), "prefetch_reads": int(o.get("Prefetch Flash Read Count", 0))}
    lat = [int(x) for x in (work / "Results" / "latency_results_no_cache.txt").read_text().split()]
    out = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in proc.stdout.splitlines()) if _}
    end = float(out["Request ends at timestamp"].split()[0]) * 1e9
    return summarise_latencies(lat, end, 0, 0, int(out["Flash read count"])) | {
        "flushes": int(out["Flash write count"])
    }


def _overall(path: Path) -> dict:
    vals = {}
    for line in path.read_text().splitlines():
        key, _, v = line.partition(":")
        v = v.strip().split()
        if v:
            try:
                vals[key.strip()] = float(v[0].rstrip("%"))
            except ValueError:
                pass
    if "Cache Hit Count" not in vals:
        raise RuntimeError(f"{path}: no summary (MQSim_CXL writes it only when the request count matches)")
    return vals


# --- tiersim ------------------------------------------------------------------------------------


def run_tiersim(dev: dict, trace: Path, compat: str = "mqsim_cxl") -> dict:
    """tiersim's figures for a matrix point, with MQSim_CXL's names and its time origin (the end
    is the last completion on the trace's clock, as MQSim_CXL's `Request ends at timestamp`)."""
    import tiersim

    s = tiersim.flash_replay(
        trace, src_format="mqsim", preset="cxl_flash_ull", params=tiersim_params(dev, compat)
    ).summary
    with trace.open() as f:
        first = int(f.readline().split()[0])
    lat = s["latency_ns"]["all"]
    return {
        "requests": s["requests"],
        "hits": s["hits"],
        "hits_under_miss": s["hits_under_miss"],
        "hits_total": s["hits"] + s["hits_under_miss"],
        "flash_reads": s["flash"]["reads_demand"],
        "under_1us": round(s["under_1us_fraction"], 5),
        "p50_ns": lat["p50"],
        "p99_ns": lat["p99"],
        "end_ns": first + s["simulated_ns"],
        "flushes": s["cache"]["flushes"],
        "prefetch_reads": s["flash"]["reads_prefetch"],
    }


def tolerances(name: str) -> dict:
    """The metrics a point is checked on, with their tolerances."""
    return LONG_TOLERANCE if name in LONG_POINTS else TOLERANCE


def agrees(metric: str, ours: float, ref: float, tolerance: dict = TOLERANCE) -> bool:
    kind, tol = tolerance[metric]
    if kind == "abs":
        return abs(ours - ref) <= tol
    return abs(ours - ref) <= tol * abs(ref) if ref else ours == 0


def _cell(metric: str, ours: float, theirs: float) -> str:
    if metric == "under_1us":
        return f"{ours:.1%} / {theirs:.1%}"
    if metric == "end_ns":
        return f"{ours / 1000:.0f} / {theirs / 1000:.0f}"
    return f"{ours} / {theirs}"


def markdown(ref: dict, names: list[str]) -> str:
    """The tables of docs/cxl_flash.md: tiersim (compat) / MQSim_CXL per point and metric,
    **x** on a metric that does not agree (a marked one names its cause in the reference data),
    and the count. Long points get their own table, with the share under 1 us and the p50
    shown but not checked."""
    short = [n for n in names if n not in LONG_POINTS]
    long = [n for n in names if n in LONG_POINTS]
    out = []
    for group, head, shown in (
        (short, "| point | hits + HUM | flash reads | under 1 us | p50 (ns) | end (us) |", list(TOLERANCE)),
        (
            long,
            "| point | hits | hits under miss | demand flash reads | prefetch flash reads | under 1 us | p50 (ns) |",
            [*LONG_TOLERANCE, "under_1us", "p50_ns"],
        ),
    ):
        if not group:
            continue
        rows, total, bad = [], 0, 0
        for name, (ours, theirs) in _results(ref, group):
            cells = []
            for m in shown:
                checked = m in tolerances(name)
                ok = not checked or agrees(m, ours[m], theirs[m], tolerances(name))
                total += checked
                bad += not ok
                mark = " **x** (marked)" if m in ref["points"][name].get("disagrees", {}) else " **x**"
                cells.append(_cell(m, ours[m], theirs[m]) + ("" if ok else mark))
            rows.append(f"| {name} | " + " | ".join(cells) + " |")
        out.append(
            head
            + "\n"
            + "|---" * (len(shown) + 1)
            + "|\n"
            + "\n".join(rows)
            + f"\n\n{total - bad} of {total} point-metrics agree within the tolerances, {bad} do not.\n"
        )
    return "\n".join(out)


def _results(ref: dict, names: list[str]):
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            if name not in ref["points"]:
                continue
            mix, dev = point(name)
            trace = Path(tmp) / f"{name}.trace"
            make_trace(mix, trace)
            yield name, (run_tiersim(dev, trace), ref["points"][name]["mqsim"])


def compare(ref: dict, names: list[str]) -> list[tuple[str, list[str]]]:
    """Per point, `metric ours/MQSim` cells; `X` marks a disagreement, `(marked)` one the
    reference data explains."""
    out = []
    for name, (ours, theirs) in _results(ref, names):
        marked = ref["points"][name].get("disagrees", {})
        cells = []
        tol = tolerances(name)
        for m in tol:
            flag = "" if agrees(m, ours[m], theirs[m], tol) else (" X(marked)" if m in marked else " X")
            cells.append(f"{m} {ours[m]}/{theirs[m]}{flag}")
        out.append((name, cells))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mqsim", type=Path, help="MQSim_CXL binary: regenerate the reference data")
    ap.add_argument("--only", nargs="*", help="matrix points (default: all but the long_ ones)")
    ap.add_argument("--long", action="store_true", help="the long_ points too (1M requests each)")
    ap.add_argument("--markdown", action="store_true", help="print the table of docs/cxl_flash.md")
    args = ap.parse_args()
    names = args.only or [n for n in MATRIX if args.long or not n.startswith("long_")]
    ref = json.loads(REFERENCE.read_text()) if REFERENCE.exists() else {"points": {}}
    if args.mqsim:
        with tempfile.TemporaryDirectory() as tmp:
            for name in names:
                mix, dev = point(name)
                got = run_mqsim(args.mqsim.resolve(), mix, dev, Path(tmp) / name)
                old = ref["points"].get(name, {})
                head = (Path(tmp) / name / "t.trace").read_text().splitlines()[:3]
                ref["points"][name] = {"mix": mix, "device": dev, "mqsim": got, "trace_head": head} | (
                    {"disagrees": old["disagrees"]} if "disagrees" in old else {}
                )
                print(name, json.dumps(got), flush=True)
        ref["source"] = "spypaul/MQSim_CXL_Linux 3701f7b, examples/real world workloads, Block_No_Per_Plane 32"
        ref["tolerance"] = {k: list(v) for k, v in TOLERANCE.items()}
        ref["long_tolerance"] = {k: list(v) for k, v in LONG_TOLERANCE.items()}
        REFERENCE.write_text(json.dumps(ref, indent=1, sort_keys=True) + "\n")
    if args.markdown:
        print(markdown(ref, names), end="")
        return 0
    for name, row in compare(ref, names):
        print(f"{name:16} " + "  ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
