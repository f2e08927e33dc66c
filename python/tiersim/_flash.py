"""CXL-flash device mode: replay a trace against one `cxl_flash` device (`flash_replay`), and
the seed-004 comparisons at small scale (`flash_study`)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import polars as pl

from tiersim import _native
from tiersim._convert import params_to_toml
from tiersim._native import TiersimError
from tiersim._options import MAX_NS_PER_INSTRUCTION, U32_MAX, Number, Size
from tiersim._result import check_out_dir, temp_dir_beside, writing

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
        tmp = temp_dir_beside(out, f".{out.name}.", ".tmp")
        try:
            with writing(out / SUMMARY_FILE):
                (tmp / SUMMARY_FILE).write_text(self.summary_json(), encoding="utf-8")
            with writing(out / PARAMS_FILE):
                (tmp / PARAMS_FILE).write_text(self.params, encoding="utf-8")
            with writing(out / HISTOGRAM_FILE):
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
    progress: Callable[[int, int | None], None] | None = None,
) -> FlashResult:
    """Replay a trace (native, or `src_format` "mqsim"/"csv"/"lackey") or a generator against one
    cxl_flash device: `preset` (cxl_flash_ull/slc/mlc/tlc; default: the device defaults) with
    `params` overrides. Open loop at trace times unless `closed_loop` = N outstanding accesses.
    `llc` bytes of host LLC filter the accesses first (0: none). Hints: a file of `time addr
    [bytes]` lines, or `hint_top` = fraction of the hottest lines hinted with `hint_probability`,
    `hint_lead` accesses ahead. `scatter` = a seed: give each 4 KiB page a pseudo-random frame at
    its first touch (a virtual trace made physical). Writes `out_dir` if given. `progress(done,
    total)` as for `tiersim.run`: accesses read by the replay pass, total from a native trace's
    header (None for text traces and generators)."""
    if (trace is None) == (generator is None):
        raise TiersimError("give exactly one of a trace file and a generator name")
    if closed_loop is not None:
        closed_loop = Number(int, 1, U32_MAX).check("closed_loop", closed_loop)
    ns_per_instruction = Number(float, 0.0, MAX_NS_PER_INSTRUCTION).check("ns_per_instruction", ns_per_instruction)
    limit = Number(int, 0).check("limit", limit)
    llc = Size().check("llc", llc)
    llc_ways = Number(int, 1, U32_MAX).check("llc_ways", llc_ways)
    if hint_top is not None:
        hint_top = Number(float, 0.0, 1.0).check("hint_top", hint_top)
    hint_probability = Number(float, 0.0, 1.0).check("hint_probability", hint_probability)
    hint_lead = Number(int, 0, U32_MAX).check("hint_lead", hint_lead)
    seed = Number(int, 0).check("seed", seed)
    if scatter is not None:
        scatter = Number(int, 0).check("scatter", scatter)
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
            progress=progress,
        )
    )
    bins = raw["bins"]
    histogram = pl.DataFrame([pl.Series(k, bins[k], dtype=t) for k, t in HISTOGRAM_SCHEMA.items()])
    result = FlashResult(summary=raw["summary"], params=raw["params"], histogram=histogram)
    if out_dir is not None:
        result.write(out_dir)
    return result


# ---------------------------------------------------------------------------------------------
# The seed-004 comparisons at small scale. `study_plan` is the one place that defines every run;
# `flash_study` replays each distinct run once and returns one row per (comparison, workload,
# setting, metric). `tiersim reproduce cxl_flash` (studies/cxl_flash.py) turns the rows into claims.

#: The five synthetic workloads of seed 004 §3.2 (generators of the same names) and two stand-ins
#: for §5's real applications (kv for YCSB, graph for Page Rank), scaled down: footprints of tens
#: of MiB instead of GiB, against device caches scaled with them.
STUDY_WORKLOADS: dict[str, dict[str, Any]] = {
    "hashmap": {"footprint": "16MiB", "write_ratio": 0.2},
    "matmul": {"footprint": "16MiB"},
    "minheap": {"footprint": "16MiB"},
    "random": {"footprint": "64MiB", "write_ratio": 0.3},
    "stride": {"footprint": "64MiB", "stride": "256B", "write_ratio": 0.1},
    "kv": {"footprint": "64MiB"},
    "graph": {"footprint": "64MiB"},
}
SYNTHETIC = ("hashmap", "matmul", "minheap", "random", "stride")
APPLICATIONS = ("kv", "graph")


class _StudyHost(TypedDict):
    gap_instructions: int
    ns_per_instruction: float
    llc: int


#: Host side of every study run: accesses 1 us of compute apart (gap_instructions x
#: ns_per_instruction), filtered by a 1 MiB 16-way LLC, replayed open loop as the paper does.
#: The rate keeps the 8x8-die back end below saturation on the random workload, so that the
#: comparisons measure the design rather than an ever-growing queue.
STUDY_HOST: _StudyHost = {"gap_instructions": 2000, "ns_per_instruction": 0.5, "llc": 1 << 20}

#: Trace accesses per run (quick, full).
STUDY_ACCESSES = {True: 300_000, False: 1_500_000}

#: §4's device, where every §4 comparison starts: SLC (cxl_flash_slc), 32 x 32 dies, 1 TiB (as in
#: MQSim_CXL's synthetic configuration), a cache scaled to the traces (a few MiB touched), fully
#: associative FIFO (§4: "fully associative with FIFO"), no prefetcher.
S4_PRESET = "cxl_flash_slc"
S4_BASE: dict[str, Any] = {
    "flash_channels": 32,
    "flash_ways": 32,
    "flash_blocks_per_plane": 32,
    "cache_size": "1MiB",
    "cache_ways": 0,
    "replacement": "fifo",
    "prefetcher": "none",
}
#: §5's device (Table 6, the cxl_flash_ull preset: ULL, 8 x 8 dies, 16-way CFLRU, best-offset),
#: its 64 MiB cache scaled down as §4's is.
S5_PRESET = "cxl_flash_ull"
S5_BASE: dict[str, Any] = {"cache_size": "1MiB"}

#: Die counts of Fig. 10 (channels, ways per channel). Blocks per plane scale inversely so that
#: every point is the same 1 TiB device (lifetime and over-provisioning do not change with it).
PARALLELISM = ((8, 4), (8, 8), (16, 16), (32, 32))
_DIE_BLOCKS = 32 * 32 * 32

#: Cache sizes of the cache-size sweep (Fig. 5, 10a); "0" is no cache. The largest, 128 MiB, holds
#: every footprint with room to spare, as the paper's largest (8 GiB) holds its; 64 MiB is exactly
#: the random and stride footprints, a boundary case for a FIFO cache (see docs/reproduce.md).
CACHE_SIZES = ("0", "256KiB", "1MiB", "4MiB", "16MiB", "64MiB", "128MiB")
#: Cache sizes of the technology / lifetime runs (Fig. 9) and of the parallelism grid (Fig. 10).
TECH_CACHES = ("0", "1MiB", "4MiB", "16MiB", "64MiB", "128MiB")
PARALLELISM_CACHES = ("256KiB", "1MiB", "4MiB", "16MiB", "64MiB", "128MiB")
TECHNOLOGIES = ("ull", "slc", "mlc", "tlc")
POLICIES = ("fifo", "random", "lru", "cflru")
POLICY_WAYS = (2, 4, 16)
#: Next-N-line (degree, offset) of Fig. 8: degrees at offset 0, offsets at degree 1.
NL_DEGREES = (1, 2, 4, 8)
NL_OFFSETS = (4, 16, 64)
#: §5.2's prefetchers: NP, NL, FD, BO, LP.
PREFETCHERS = ("none", "next_n_line", "feedback_directed", "best_offset", "leap")
#: Host hints (Obs. 7, Fig. 18): the hottest `top` fraction of lines, each access to one hinted
#: with probability p, `lead` trace accesses ahead (100 = 100 us at the study's rate, about four
#: SLC reads). Fig. 18a sweeps the top share at p = 10 %, Fig. 18b p for the top 10 %.
HINT_WORKLOADS = ("kv", "hashmap", "graph")
HINT_TOPS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0)
HINT_PROBABILITIES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
HINT_LEADS = (10, 30, 100, 1000)
HINT_DEFAULT = (0.1, 0.1, 100)  # top, probability, lead
SCATTER_SEED = 1

#: What the paper reports for each comparison, quoted or read from its figures (seed 004).
PAPER = {
    "cache_size": "Fig. 5: a cache lowers latency and flash traffic, yet matmul/minheap stay far above DRAM; "
    "Fig. 10: sub-us share rises with cache size",
    "mshr": "Fig. 6: >90% of flash reads are repeated reads (hashmap, matmul, heap); Fig. 7: MSHR shortens the tail",
    "replacement": "Fig. 11: associativity raises the sub-us share, CFLRU best; Fig. 12: CFLRU writes least, "
    "more so with associativity; high-locality workloads insensitive",
    "prefetch_nl": "Fig. 8 (8 GiB cache): NL degree 1 raises matmul sub-us 64% -> 76%, more degree helps then "
    "plateaus; offset 4 -> 16 helps hashmap/matmul/heap, 64 hurts; random insensitive; stride improves with offset",
    "prefetchers": "Obs. 1: prefetchers hurt some workloads, help others; Obs. 2: lifetime >= 3.1 years; "
    "Obs. 4: helpful prefetchers are accurate; Obs. 5: low accuracy pollutes the cache",
    "technology": "Fig. 9a: ULL vs SLC negligible with a cache, ULL clearly better without; MLC/TLC much slower. "
    "Fig. 9b: ULL/SLC > 4 years with a cache, more cache longer; MLC/TLC < 1 year with 1 GiB",
    "parallelism": "Fig. 10: with a small cache parallelism matters, with a large one 8x4 is enough; "
    "random is cache-size sensitive, stride parallelism sensitive",
    "virtual_physical": "Obs. 6, Fig. 17: BO accuracy and coverage drop from virtual to physical traces "
    "(Page Rank 99% -> 42%, BERT coverage 76% -> 26%); Table 3: virtual traces over-estimate sub-us (matmul > 25%)",
    "hints": "Obs. 7, Fig. 18: hints turn hits-under-miss into hits; BERT sub-us 86% -> 91% as the hinted top share "
    "grows (p = 10%), and rising with p then plateauing at 91%",
}


@dataclass(frozen=True)
class StudyRun:
    """One replay of the study: a workload against a preset with parameter overrides (sorted
    pairs, so equal runs compare equal and are replayed once), and the host-side options."""

    workload: str
    preset: str
    params: tuple[tuple[str, Any], ...]
    scatter: int | None = None
    hint_top: float | None = None
    hint_probability: float = 0.1
    hint_lead: int = 1000


@dataclass(frozen=True)
class PlanRow:
    """A run's place in the study: which metrics of it are rows of which comparison."""

    comparison: str
    workload: str
    setting: str
    run: StudyRun
    metrics: tuple[str, ...]


def _run(
    workload: str,
    section: int,
    *,
    preset: str | None = None,
    scatter: int | None = None,
    hints: tuple[float, float, int] | None = None,
    **overrides: Any,
) -> StudyRun:
    base_preset, base = (S4_PRESET, S4_BASE) if section == 4 else (S5_PRESET, S5_BASE)
    params = {**base, **overrides}
    top, prob, lead = hints if hints is not None else (None, 0.1, 1000)
    return StudyRun(workload, preset or base_preset, tuple(sorted(params.items())), scatter, top, prob, lead)


class _Dies(TypedDict):
    flash_channels: int
    flash_ways: int
    flash_blocks_per_plane: int


def dies(channels: int, ways: int) -> _Dies:
    return {"flash_channels": channels, "flash_ways": ways, "flash_blocks_per_plane": _DIE_BLOCKS // (channels * ways)}


def cache_label(size: str) -> str:
    return "no cache" if size == "0" else size


def nl_label(degree: int, offset: int) -> str:
    return f"NL ({degree}, {offset})"


def hint_label(top: float, probability: float, lead: int) -> str:
    return f"top {top:g}, p {probability:g}, lead {lead}"


def _share(key: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda s: s[key] / s["requests"] if s["requests"] else None


def _per_request(s: dict[str, Any]) -> float | None:
    return (s["flash"]["reads"] + s["flash"]["programs"]) / s["requests"] if s["requests"] else None


def _duplicates(s: dict[str, Any]) -> float | None:
    f = s["flash"]
    return f["reads_duplicate"] / f["reads_demand"] if f["reads_demand"] else None


#: Each metric a row can hold, read from a replay's summary (None: undefined, e.g. a prefetch
#: accuracy without prefetches, or a lifetime without flash writes).
METRICS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "under 1 us": lambda s: s["under_1us_fraction"],
    "hit share": _share("hits"),
    "hit-under-miss share": _share("hits_under_miss"),
    "miss share": _share("misses"),
    "mean latency ns": lambda s: s["latency_ns"]["mean_exact"],
    "p99 latency ns": lambda s: s["latency_ns"]["all"]["p99"],
    "hit latency ns": lambda s: (s["latency_ns"]["by_class"]["hit"] or {}).get("mean"),
    "flash reads": lambda s: s["flash"]["reads_demand"],
    "duplicate share of flash reads": _duplicates,
    "flash operations per request": _per_request,
    "write-backs to flash": lambda s: s["cache"]["flushes"],
    "accuracy": lambda s: s["prefetch"]["accuracy"],
    "coverage": lambda s: s["prefetch"]["coverage"],
    "lateness": lambda s: s["prefetch"]["lateness"],
    "pollution": lambda s: s["prefetch"]["pollution"],
    "lifetime years": lambda s: s["lifetime"]["years"],
    "hints sent": lambda s: s["replay"]["hints_sent"],
}

_CLASSES = ("under 1 us", "hit share", "hit-under-miss share", "miss share")
_PREFETCH = ("accuracy", "coverage", "lateness", "pollution")


def study_plan() -> list[PlanRow]:
    """Every run of the study, in report order. A run shared by two comparisons (same workload,
    preset, parameters and host options) is listed in both and replayed once."""
    plan: list[PlanRow] = []

    def add(comparison: str, workload: str, setting: str, run: StudyRun, *metrics: str) -> None:
        plan.append(PlanRow(comparison, workload, setting, run, metrics))

    # §4.1, Fig. 5 and 10a: cache size, 16-way LRU.
    for w in SYNTHETIC:
        for size in CACHE_SIZES:
            run = _run(w, 4, cache_size=size, cache_ways=16, replacement="lru")
            add(
                "cache_size",
                w,
                cache_label(size),
                run,
                "under 1 us",
                "hit share",
                "mean latency ns",
                "hit latency ns",
                "flash operations per request",
            )
    # §4.2, Fig. 6 and 7: MSHRs.
    for w in SYNTHETIC:
        for label, rows in (("no MSHR", 0), ("MSHR 1024x65", 1024)):
            add(
                "mshr",
                w,
                label,
                _run(w, 4, mshr_rows=rows),
                "flash reads",
                "duplicate share of flash reads",
                "p99 latency ns",
                "mean latency ns",
            )
    # §5.1, Fig. 11 and 12: replacement policy x associativity at a fixed cache size.
    for w in SYNTHETIC:
        for ways in POLICY_WAYS:
            for policy in POLICIES:
                add(
                    "replacement",
                    w,
                    f"{policy}, {ways} ways",
                    _run(w, 4, replacement=policy, cache_ways=ways),
                    "under 1 us",
                    "hit share",
                    "write-backs to flash",
                )
    # §4.3, Fig. 8: next-N-line degree and offset with a cache holding the whole footprint (the
    # paper's 8 GiB).
    big = CACHE_SIZES[-1]
    for w in SYNTHETIC:
        add("prefetch_nl", w, "none", _run(w, 4, cache_size=big), "under 1 us", *_PREFETCH)
        for d, o in [(d, 0) for d in NL_DEGREES] + [(1, o) for o in NL_OFFSETS]:
            run = _run(w, 4, cache_size=big, prefetcher="next_n_line", nl_degree=d, nl_offset=o)
            add("prefetch_nl", w, nl_label(d, o), run, "under 1 us", *_PREFETCH)
    # §5.2, Fig. 13 and 15: the five prefetcher settings on §5's device.
    for w in SYNTHETIC + APPLICATIONS:
        for p in PREFETCHERS:
            add(
                "prefetchers",
                w,
                p,
                _run(w, 5, prefetcher=p),
                *_CLASSES,
                *_PREFETCH,
                "lifetime years",
                "write-backs to flash",
            )
    # §4.4, Fig. 9: technology x cache size on stride with the §4.3 next-N-line prefetcher
    # (device defaults: degree 4, offset 16).
    for tech in TECHNOLOGIES:
        for size in TECH_CACHES:
            run = _run("stride", 4, preset=f"cxl_flash_{tech}", cache_size=size, prefetcher="next_n_line")
            add(
                "technology",
                "stride",
                f"{tech}, {cache_label(size)}",
                run,
                "mean latency ns",
                "under 1 us",
                "lifetime years",
            )
    # §4.4, Fig. 10: parallelism x cache size on random and stride (SLC, the same prefetcher).
    for w in ("random", "stride"):
        for size in PARALLELISM_CACHES:
            for c, k in PARALLELISM:
                run = _run(w, 4, cache_size=size, prefetcher="next_n_line", **dies(c, k))
                add("parallelism", w, f"{c}x{k}, {size}", run, "under 1 us", "mean latency ns")
    # Obs. 6, Fig. 17: the same trace virtual and with its pages scattered, best-offset on §5's
    # device; and Table 3's setup (§3.2: 8 x 8 dies, next-N-line, a 512 MiB cache: 1/16 of the random
    # workload's 8 GiB, so 4 MiB against our 64 MiB).
    for w in SYNTHETIC + APPLICATIONS:
        for label, sc in (("virtual", None), ("physical", SCATTER_SEED)):
            add("virtual_physical", w, f"BO, {label}", _run(w, 5, scatter=sc), "accuracy", "coverage", "under 1 us")
    for w in SYNTHETIC:
        for label, sc in (("virtual", None), ("physical", SCATTER_SEED)):
            run = _run(w, 4, scatter=sc, cache_size="4MiB", prefetcher="next_n_line", **dies(8, 8))
            add("virtual_physical", w, f"NL, {label}", run, "under 1 us", "accuracy", "coverage")
    # Obs. 7, Fig. 18: host hints on §5's device without a prefetcher, so that best-offset's
    # learning (which hint timing perturbs) does not mask their effect; best-offset for reference.
    top0, p0, lead0 = HINT_DEFAULT
    for w in HINT_WORKLOADS:
        metrics = (*_CLASSES, "hints sent")
        add("hints", w, "no hints", _run(w, 5, prefetcher="none"), *metrics)
        settings = sorted(
            {(t, p0, lead0) for t in HINT_TOPS}
            | {(top0, p, lead0) for p in HINT_PROBABILITIES}
            | {(top0, p0, lead) for lead in HINT_LEADS}
        )
        for h in settings:
            add("hints", w, hint_label(*h), _run(w, 5, prefetcher="none", hints=h), *metrics)
        add("hints", w, "BO, no hints", _run(w, 5), *metrics)
        add("hints", w, f"BO, {hint_label(*HINT_DEFAULT)}", _run(w, 5, hints=HINT_DEFAULT), *metrics)
    return plan


def _replay(run: StudyRun, accesses: int, compat: str = "none") -> dict[str, Any]:
    gen = dict(STUDY_WORKLOADS[run.workload])
    gen["accesses"] = accesses
    gen["gap_instructions"] = STUDY_HOST["gap_instructions"]
    gen["base_addr"] = 0
    r = flash_replay(
        generator=run.workload,
        generator_params=gen,
        preset=run.preset,
        params=dict(run.params) | ({} if compat == "none" else {"compat": compat}),
        ns_per_instruction=STUDY_HOST["ns_per_instruction"],
        llc=STUDY_HOST["llc"],
        scatter=run.scatter,
        hint_top=run.hint_top,
        hint_probability=run.hint_probability,
        hint_lead=run.hint_lead,
        seed=1,
    )
    return r.summary


STUDY_SCHEMA = {
    "comparison": pl.Utf8,
    "workload": pl.Utf8,
    "setting": pl.Utf8,
    "metric": pl.Utf8,
    "ours": pl.Float64,
    "paper": pl.Utf8,
}


def flash_study(
    quick: bool = True,
    *,
    workers: int | None = None,
    accesses: int | None = None,
    comparisons: Sequence[str] | None = None,
    compat: str = "none",
) -> pl.DataFrame:
    """Seed 004's design-space comparisons at small scale, one row per (comparison, workload,
    setting, metric): `ours` is this simulator's value (null where undefined), `paper` what seed
    004 reports. Each distinct run of `study_plan()` is replayed once, `workers` at a time
    (threads: the replay releases the GIL; default: one per CPU); the result does not depend on
    their number. `accesses` per run defaults to STUDY_ACCESSES[quick]; `comparisons` keeps only
    those (names of PAPER); `compat` = "mqsim_cxl" runs every replay in the device's MQSim_CXL
    compatibility mode."""
    n = accesses if accesses is not None else STUDY_ACCESSES[quick]
    plan = study_plan()
    if comparisons is not None:
        unknown = sorted(set(comparisons) - set(PAPER))
        if unknown:
            raise TiersimError(f"unknown comparison {', '.join(unknown)} (valid: {', '.join(PAPER)})")
        plan = [r for r in plan if r.comparison in comparisons]
    runs = list(dict.fromkeys(r.run for r in plan))
    with ThreadPoolExecutor(max_workers=max(1, workers or os.cpu_count() or 1)) as pool:
        summaries = dict(zip(runs, pool.map(lambda run: _replay(run, n, compat), runs), strict=True))
    rows = []
    for r in plan:
        s = summaries[r.run]
        for m in r.metrics:
            v = METRICS[m](s)
            rows.append(
                {
                    "comparison": r.comparison,
                    "workload": r.workload,
                    "setting": r.setting,
                    "metric": m,
                    "ours": None if v is None else float(v),
                    "paper": PAPER[r.comparison],
                }
            )
    return pl.DataFrame(rows, schema=STUDY_SCHEMA)
