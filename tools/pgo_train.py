"""The extension's CXL-flash training workload for tools/pgo.sh: replays of generated traces, most of
them on the default device (cxl_flash_ull: CFLRU, best-offset, MSHRs), the rest under the other
settings of the cxl_flash_matrix example (benches/common/cxl_flash_trace.rs `settings()`, which the
Rust-side training replays too), so that none of their code is profiled as never run. Branch
weights are sums over the whole training, so the default gets ten times the requests of each
other setting: training on the cxl_flash reproduction instead, a sweep over many settings, left a
default replay 5 % slower than this does (`git show 4676da8:BENCHMARKS.md`, "Profile-guided builds").

    .venv/bin/python tools/pgo_train.py WORK_DIR [ACCESSES]   (default 4M; the others a tenth)
"""

from __future__ import annotations

import sys
from pathlib import Path

import tiersim

DEFAULT_ACCESSES = 4_000_000

# (generator, parameters): none of them is a bench trace.
TRACES = [
    ("random", {"footprint": "2GiB", "write_ratio": 0.3}),
    ("stride", {"footprint": "1GiB", "stride": "64B", "write_ratio": 0.2}),
    ("hashmap", {"footprint": "2GiB"}),
]

# (device parameters, replay options): the cxl_flash_matrix example's settings but its default.
OTHER_SETTINGS: list[tuple[dict[str, object], dict[str, object]]] = [
    ({"replacement": "lru", "prefetcher": "next_n_line"}, {}),
    ({"replacement": "fifo", "prefetcher": "feedback_directed"}, {}),
    ({"replacement": "random", "prefetcher": "leap", "cache_index_hash": True, "seed": 5}, {}),
    ({"mshr_rows": 0, "no_mshr_max_inflight": 4096, "prefetcher": "none"}, {}),
    ({"cache_size": 0}, {}),
    ({"write_validate": True, "write_ack": "fill"}, {}),
    ({"write_allocate": False, "prefetcher": "none"}, {"closed_loop": 16}),
    ({"compat": "mqsim_cxl", "flash_blocks_per_plane": 32, "prefetcher": "none"}, {}),
    ({"compat": "mqsim_cxl", "flash_blocks_per_plane": 32, "cache_size": 0, "mshr_rows": 0}, {}),
    (
        {"hint_mode": "pin", "hint_pin_full": "replace_oldest", "cache_size": "4MiB"},
        {"llc": 1 << 20, "hint_top": 0.05, "hint_probability": 0.5, "hint_lead": 64},
    ),
    (
        {
            "cache_size": "3MiB",
            "write_buffer": "256KiB",
            "mshr_rows": 64,
            "mshr_entries": 4,
            "flash_channels": 2,
            "flash_ways": 2,
            "flash_planes": 2,
            "flash_blocks_per_plane": 16,
            "flash_pages_per_block": 64,
        },
        {},
    ),
]


def main(work: Path, accesses: int = DEFAULT_ACCESSES) -> None:
    work.mkdir(parents=True, exist_ok=True)
    for generator, params in TRACES:
        trace = work / f"{generator}.trace"
        tiersim.generate(generator, trace, seed=7, accesses=accesses, gap_instructions=200, base_addr=0, **params)
        r = tiersim.flash_replay(trace, preset="cxl_flash_ull")
        print(f"{generator} default: {r.summary['requests']} requests", flush=True)
        for device, options in OTHER_SETTINGS:
            r = tiersim.flash_replay(trace, preset="cxl_flash_ull", params=device, limit=accesses // 10, **options)
            print(f"{generator} {device} {options}: {r.summary['requests']} requests", flush=True)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and not sys.argv[2].isdigit()):
        sys.exit("usage: tools/pgo_train.py WORK_DIR [ACCESSES]")
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) == 3 else DEFAULT_ACCESSES)
