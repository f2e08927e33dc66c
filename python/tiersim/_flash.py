"""CXL-flash device mode: replay a trace against one `cxl_flash` device (`flash_replay`), and
the seed-004 comparisons at small scale (`flash_study`)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from tiersim import _native
from tiersim._convert import params_to_toml
from tiersim._native import TiersimError
from tiersim._result import check_out_dir

SUMMARY_FILE = "summary.json"
HISTOGRAM_FILE = "histogram.parquet"
PARAMS_FILE = "params.toml"
FLASH_FILES = (SUMMARY_FILE, HISTOGRAM_FILE, PARAMS_FILE)

HISTOGRAM_SCHEMA: dict[str, pl.DataType] = {
    "class": pl.Utf8(),
    "low_ns": pl.Int64(),
    "high_ns": pl.Int64(),
    "count": pl.Int64(),
}


def check_flash_dir(out_dir: str | os.PathLike[str]) -> Path:
    """Refuse an output directory holding anything but a previous replay's files."""
    return check_out_dir(out_dir, FLASH_FILES, "tiersim flash replay")


@dataclass(frozen=True)
class FlashResult:
    """One replay: the device summary (a dict, as summary.json), the resolved device parameters
    (TOML text) and the latency histogram (class, low_ns, high_ns, count)."""

    summary: dict[str, Any]
    params: str
    histogram: pl.DataFrame

    @property
    def under_1us(self) -> float:
        return float(self.summary.get("under_1us_fraction") or 0.0)

    def summary_json(self) -> str:
        return json.dumps(self.summary, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"

    def write(self, out_dir: str | os.PathLike[str]) -> Path:
        """summary.json, params.toml and histogram.parquet, written into a temporary directory
        renamed into place, so a failure leaves nothing that looks like a result."""
        out = check_flash_dir(out_dir)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
        try:
            (tmp / SUMMARY_FILE).write_text(self.summary_json(), encoding="utf-8")
            (tmp / PARAMS_FILE).write_text(self.params, encoding="utf-8")
            self.histogram.write_parquet(tmp / HISTOGRAM_FILE, compression="zstd", statistics=False)
            if out.is_dir():
                shutil.rmtree(out)
            os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return out


def flash_replay(
    trace: str | os.PathLike[str] | None = None,
    *,
    preset: str | None = None,
    params: Mapping[str, Any] | str | None = None,
    src_format: str | None = None,
    closed_loop: int | None = None,
    ns_per_instruction: float = 0.5,
    limit: int = 0,
    llc: int = 0,
    llc_ways: int = 16,
    hints: str | os.PathLike[str] | None = None,
    hint_top: float | None = None,
    hint_probability: float = 0.1,
    hint_lead: int = 1000,
    seed: int = 0,
    generator: str | None = None,
    generator_params: Mapping[str, Any] | str | None = None,
    scatter: int | None = None,
    out_dir: str | os.PathLike[str] | None = None,
) -> FlashResult:
    """Replay a trace (native, or `src_format` "mqsim"/"csv"/"lackey") or a generator against one
    cxl_flash device: `preset` (cxl_flash_ull/slc/mlc/tlc; default: the device defaults) with
    `params` overrides. Open loop at trace times unless `closed_loop` = N outstanding accesses.
    `llc` bytes of host LLC filter the accesses first (0: none). Hints: a file of `time addr
    [bytes]` lines, or `hint_top` = fraction of the hottest lines hinted with `hint_probability`,
    `hint_lead` accesses ahead. `scatter` = a seed: give each 4 KiB page a pseudo-random frame at
    its first touch (a virtual trace made physical). Writes `out_dir` if given."""
    if (trace is None) == (generator is None):
        raise TiersimError("give exactly one of a trace file and a generator name")
    if out_dir is not None:
        check_flash_dir(out_dir)
    raw = json.loads(
        _native.flash_replay(
            None if trace is None else os.fspath(trace),
            src_format=src_format,
            preset=preset,
            params=params_to_toml(params),
            closed_loop=closed_loop,
            ns_per_instruction=ns_per_instruction,
            limit=limit,
            llc_bytes=llc,
            llc_ways=llc_ways,
            hint_file=None if hints is None else os.fspath(hints),
            hint_top=hint_top,
            hint_probability=hint_probability,
            hint_lead=hint_lead,
            seed=seed,
            generator=generator,
            generator_params=params_to_toml(generator_params),
            scatter=scatter,
        )
    )
    bins = raw["bins"]
    histogram = pl.DataFrame([pl.Series(k, bins[k], dtype=t) for k, t in HISTOGRAM_SCHEMA.items()])
    result = FlashResult(summary=raw["summary"], params=raw["params"], histogram=histogram)
    if out_dir is not None:
        result.write(out_dir)
    return result


# ---------------------------------------------------------------------------------------------
# the seed-004 comparisons at small scale

#: The five synthetic workloads of seed 004 §3.2 (generators of the same names), scaled down:
#: footprints of tens of MiB instead of GiB, against a device cache scaled with them.
STUDY_WORKLOADS: dict[str, dict[str, Any]] = {
    "hashmap": {"footprint": "16MiB", "write_ratio": 0.2},
    "matmul": {"footprint": "16MiB"},
    "minheap": {"footprint": "16MiB"},
    "random": {"footprint": "64MiB", "write_ratio": 0.3},
    "stride": {"footprint": "64MiB", "stride": "256B", "write_ratio": 0.1},
}

#: Host side of every study run: accesses 1 us of compute apart (gap_instructions x
#: ns_per_instruction), filtered by a 1 MiB 16-way LLC, replayed open loop as the paper does.
#: The rate keeps the 8x8-die back end below saturation on the random workload, so that the
#: comparisons measure the design rather than an ever-growing queue.
STUDY_HOST = {"gap_instructions": 2000, "ns_per_instruction": 0.5, "llc": 1 << 20}

#: The device every comparison starts from: seed 004 §4's SLC back end (32 x 32 dies, 1 TiB as in
#: MQSim_CXL's synthetic configuration) with a cache scaled to the traces (a few MiB touched),
#: fully associative FIFO (§4: "fully associative with FIFO").
STUDY_BASE: dict[str, Any] = {
    "flash_channels": 32,
    "flash_ways": 32,
    "flash_blocks_per_plane": 32,
    "cache_size": "1MiB",
    "cache_ways": 0,
    "replacement": "fifo",
    "prefetcher": "none",
}

#: What the paper reports for each comparison, quoted or read from its figures (seed 004).
PAPER = {
    "mshr": "Fig. 6: >90% of flash reads are repeated reads (hashmap, matmul, heap); Fig. 7: MSHR shortens the tail",
    "replacement": "Fig. 12: CFLRU writes least, more so with associativity (real workloads, 64 MiB 16-way)",
    "cache_size": "Fig. 5: a cache lowers latency and flash traffic; Fig. 10: sub-us share rises with cache size",
    "ways": "Fig. 11: higher associativity raises the sub-us share",
    "prefetch": "Fig. 8: NL degree 1 raises matmul sub-us 64% -> 76%; Obs. 5: low accuracy pollutes and hurts",
    "technology": "Fig. 9a: ULL vs SLC negligible with a cache, ULL clearly better without",
    "lifetime": "Fig. 9b: ULL/SLC > 4 years with a cache; MLC/TLC < 1 year with 1 GiB cache",
}


def _study_run(
    workload: str, accesses: int, params: Mapping[str, Any], preset: str = "cxl_flash_slc", scatter: int | None = None
) -> dict[str, Any]:
    gen = dict(STUDY_WORKLOADS[workload])
    gen["accesses"] = accesses
    gen["gap_instructions"] = STUDY_HOST["gap_instructions"]
    gen["base_addr"] = 0
    merged = dict(STUDY_BASE)
    merged.update(params)
    r = flash_replay(
        generator=workload,
        generator_params=gen,
        preset=preset,
        params=merged,
        ns_per_instruction=STUDY_HOST["ns_per_instruction"],
        llc=STUDY_HOST["llc"],
        scatter=scatter,
        seed=1,
    )
    return r.summary


def flash_study(quick: bool = True) -> pl.DataFrame:
    """Seed 004's design-space comparisons at small scale, one row per (comparison, workload,
    setting, metric): `ours` is this simulator's value, `paper` what seed 004 reports. Quick mode
    replays 150k generator accesses per run (about a minute in all); full mode 1.5M."""
    n = 150_000 if quick else 1_500_000
    rows: list[dict[str, Any]] = []

    def add(claim: str, workload: str, setting: str, metric: str, value: Any) -> None:
        rows.append(
            {
                "comparison": claim,
                "workload": workload,
                "setting": setting,
                "metric": metric,
                "ours": None if value is None else float(value),
                "paper": PAPER[claim],
            }
        )

    for w in STUDY_WORKLOADS:
        for label, rows_ in (("no MSHR", 0), ("MSHR 1024x65", 1024)):
            s = _study_run(w, n, {"mshr_rows": rows_})
            f = s["flash"]
            add("mshr", w, label, "flash reads", f["reads_demand"])
            add("mshr", w, label, "duplicate share of flash reads", f["reads_duplicate"] / max(f["reads_demand"], 1))
            add("mshr", w, label, "p99 latency ns", s["latency_ns"]["all"]["p99"])
    for w in ("hashmap", "stride", "random"):
        for policy in ("fifo", "random", "lru", "cflru"):
            s = _study_run(w, n, {"replacement": policy, "cache_ways": 16, "cache_size": "1MiB"})
            add("replacement", w, policy, "flash programs (write-backs)", s["cache"]["flushes"])
    for w in ("hashmap", "minheap", "random"):
        for size in ("256KiB", "1MiB", "4MiB"):
            s = _study_run(w, n, {"cache_size": size, "cache_ways": 16, "replacement": "lru"})
            add("cache_size", w, size, "under 1 us", s["under_1us_fraction"])
    for w in ("hashmap", "minheap", "matmul"):
        for ways in (1, 4, 16):
            s = _study_run(w, n, {"cache_size": "256KiB", "cache_ways": ways, "replacement": "lru"})
            add("ways", w, f"{ways} ways", "under 1 us", s["under_1us_fraction"])
    for w in ("stride", "matmul", "random"):
        for label, p in (
            ("none", {"prefetcher": "none"}),
            ("next_n_line (1, 0)", {"prefetcher": "next_n_line", "nl_degree": 1, "nl_offset": 0}),
            ("next_n_line (4, 16)", {"prefetcher": "next_n_line", "nl_degree": 4, "nl_offset": 16}),
            ("best_offset", {"prefetcher": "best_offset"}),
        ):
            s = _study_run(w, n, p)
            pf = s["prefetch"]
            add("prefetch", w, label, "under 1 us", s["under_1us_fraction"])
            add("prefetch", w, label, "accuracy", pf["accuracy"])
            add("prefetch", w, label, "pollution", pf["pollution"])
    # Observation 6: the same stride trace with its pages scattered as a physical trace's are.
    s = _study_run("stride", n, {"prefetcher": "best_offset"}, scatter=1)
    add("prefetch", "stride", "best_offset, pages scattered", "under 1 us", s["under_1us_fraction"])
    add("prefetch", "stride", "best_offset, pages scattered", "accuracy", s["prefetch"]["accuracy"])
    for cache in ("1MiB", "0"):
        for tech in ("ull", "slc"):
            # §4.4 runs stride with the next-N-line prefetcher of §4.3 (which needs the cache).
            p = {"cache_size": 0 if cache == "0" else cache, "prefetcher": "next_n_line"}
            s = _study_run("stride", n, p, preset=f"cxl_flash_{tech}")
            label = f"{tech}, {'no cache' if cache == '0' else cache + ' cache'}"
            add("technology", "stride", label, "mean latency ns", s["latency_ns"]["mean_exact"])
            add("technology", "stride", label, "under 1 us", s["under_1us_fraction"])
    for tech in ("ull", "slc", "mlc", "tlc"):
        s = _study_run("random", n, {"cache_size": "1MiB"}, preset=f"cxl_flash_{tech}")
        add("lifetime", "random", tech, "lifetime years", s["lifetime"]["years"])
        add("lifetime", "random", tech, "mean latency ns", s["latency_ns"]["mean_exact"])
    return pl.DataFrame(
        rows,
        schema={"comparison": pl.Utf8, "workload": pl.Utf8, "setting": pl.Utf8, "metric": pl.Utf8, "ours": pl.Float64, "paper": pl.Utf8},
    )
