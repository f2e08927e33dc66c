"""Typed stub of the PyO3 extension built from crates/tiersim-py."""

from collections.abc import Callable
from typing import Any, final

# PyO3 keeps the module's __all__ as it adds each function and class.
__all__ = [
    "CaptureProgress",
    "TiersimError",
    "_panic_for_test",
    "calibrate",
    "capture",
    "capture_instrumented",
    "capture_params",
    "capture_resolve",
    "capture_runtime_env",
    "capture_shm_init",
    "capture_stream",
    "characterize",
    "check_generator",
    "convert",
    "filebench",
    "flash_replay",
    "generate",
    "inspect",
    "list_plugins",
    "mix",
    "resolve_platform",
    "run",
    "sample",
    "trace_stats",
    "verify",
    "version",
    "write_parquet",
]

class TiersimError(Exception):
    """Every user error (message names the file/offset/key and what was expected) and every
    internal error (message starts with "internal error")."""

def run(
    platform: str,
    policy: str,
    trace: str,
    overrides: list[str] = ...,
    policy_params: str = "",
    seed: int = 0,
    generator: str | None = None,
    generator_params: str = "",
    progress: Callable[[int, int | None], None] | None = None,
) -> dict[str, Any]:
    """Returns {"summary": JSON text, "timeseries": dict of equal-length columns,
    "latency_hist": {"node", "low_ns", "high_ns", "count"} columns, "config": resolved TOML text}. `progress(done, total)` is called with the GIL held at the
    start, every 2^18 accesses and at the end; an exception from it stops the run and is raised."""

def inspect(path: str) -> str:
    """JSON text: header and statistics of a trace file."""

def verify(path: str) -> str:
    """JSON text: statistics recomputed by decoding every record, checksums and trailer checked."""

def generate(name: str, out: str, params: str = "", seed: int = 0) -> str:
    """Writes generator `name`'s trace to `out`; returns inspect JSON of the written file."""

def check_generator(name: str, params: str = "", seed: int = 0) -> None:
    """Builds generator `name` from `params` (TOML) and drops it: TiersimError for an unknown
    name, key or bad value, as `generate` would give, without writing anything."""

def convert(
    src: str,
    src_format: str | None,
    dst: str,
    dst_format: str,
    addr_kind: str = "virtual",
    page_size: int = 4096,
    ns_per_instruction: float = 0.5,
    csv_time_unit: str = "instructions",
) -> str:
    """Converts `src` (format named, or None for native by magic) to `dst` in `dst_format`
    (native, mqsim, lackey, csv); returns JSON statistics of what was written."""

def sample(
    src: str,
    dst: str,
    src_format: str | None = None,
    start: int | None = None,
    end: int | None = None,
    cpus: list[int] | None = None,
    every: int = 1,
) -> str:
    """Writes the selected accesses of `src` to the native trace `dst`; returns its inspect JSON."""

def mix(inputs: list[str], dst: str, first_cpus: list[int] | None = None) -> str:
    """Merges native traces into the multi-program trace `dst`; returns its inspect JSON."""

def trace_stats(path: str, src_format: str | None = None, max_points: int = 100000) -> str:
    """JSON: reuse-distance and hotness histograms and page-vs-time scatter points."""

def list_plugins() -> str:
    """JSON text: {"policies", "devices", "generators", "platforms", "device_presets"}."""

def resolve_platform(platform: str, overrides: list[str] = ...) -> str:
    """Resolved platform TOML text."""

def characterize(
    device_or_preset: str,
    params: str = "",
    tests: list[str] = ...,
    quick: bool = False,
    ratios: list[int] = ...,
    compare: list[str] = ...,
    cycles_ghz: float | None = None,
    node: str | None = None,
    port_ns: float = 0.0,
) -> str:
    """JSON text: {"target", "device", "count", "granule", "params", "tables": [{"name", "title",
    "columns": [{"name", "values"}]}]}, plus "measured", "comparison" and "read" (what the curve
    reader did) with `compare` (curve files or directories: Mess, Intel MLC output, CSV).
    `device_or_preset` is a preset (name or file) or kind, or with `node` a platform (name or
    file). `params` is TOML: device parameters plus `count` and `granule` of the interleave set;
    `tests` empty runs all but bwlat; `ratios` are bwlat's read percents; `cycles_ghz` and
    `port_ns`: the compared curves' latency unit and origin."""

def calibrate(
    curves: list[str],
    device: str,
    base: str,
    params: str = "",
    ratios: list[int] = ...,
    cycles_ghz: float | None = None,
    port_ns: float = 0.0,
) -> str:
    """JSON text: {"device", "fitted" (TOML), "platform_toml", "preset_toml", "table", "measured",
    "comparison", "read", "base", "target"}: `device` (dram or cxl) fitted to the curves (files
    or directories) on top of preset `base`."""

def filebench(params: str = "") -> str:
    """JSON text of storage::BenchOut. `params` is TOML: the bench keys plus [device_params] and [iopath]."""

def flash_replay(
    trace: str | None = None,
    src_format: str | None = None,
    preset: str | None = None,
    params: str = "",
    closed_loop: int | None = None,
    ns_per_instruction: float = 0.5,
    limit: int = 0,
    llc_bytes: int = 0,
    llc_ways: int = 16,
    hint_file: str | None = None,
    hint_top: float | None = None,
    hint_probability: float = 0.1,
    hint_lead: int = 1000,
    seed: int = 0,
    generator: str | None = None,
    generator_params: str = "",
    scatter: int | None = None,
    progress: Callable[[int, int | None], None] | None = None,
) -> str:
    """JSON text: {"summary": device summary + "replay", "params": resolved TOML text,
    "bins": {"class", "low_ns", "high_ns", "count"}}. One of `trace` (native by magic, or
    `src_format`) and `generator` (with TOML `generator_params` and `seed`). `progress` as for
    `run`, over the replay pass."""

def write_parquet(path: str, columns: list[tuple[str, str, list[Any]]]) -> None:
    """Writes `columns`, (name, kind, values) with kind "i64", "f64" or "str" and None for a
    null, to `path` as one Parquet file (one row group, zstd, no statistics). A failure to
    create or write the file raises OSError with its errno and `path`."""

def version() -> str: ...
def _panic_for_test() -> None:
    """Panics inside the extension, so that tests see the panic reach Python as one TiersimError."""

@final
class CaptureProgress:
    """Counters of a running capture, read from another thread."""

    def __init__(self) -> None: ...
    def snapshot(self) -> tuple[int, int, int, int]:
        """(input bytes, instructions, data accesses, records) so far."""
    def cancel(self) -> None:
        """Ask the capture to stop at its next read (it then raises "capture interrupted")."""

def capture(
    source: str,
    out: str,
    virt_out: str | None = None,
    params: str = "",
    seed: int = 0,
    pid: int | None = None,
    pipe_capacity: int | None = None,
    progress: CaptureProgress | None = None,
    source_name: str | None = None,
) -> str:
    """Reads lackey `--trace-mem=yes` text from `source` (a file or a pipe of `pipe_capacity`
    bytes) to its end, writing `out` (physical, or virtual with v2p none) and `virt_out`;
    `pid` is the process whose pagemap maps the addresses. Returns the JSON report."""

def capture_instrumented(
    dir: str,
    out: str,
    virt_out: str | None = None,
    params: str = "",
    seed: int = 0,
    progress: CaptureProgress | None = None,
) -> str:
    """Merges the per-thread record files tiersim's Valgrind tool left in `dir` (summary,
    t<N>.bin, pagemap.bin) into `out` and `virt_out`, as `capture` does. Returns the JSON report."""

def capture_shm_init(fd: int) -> None:
    """Sizes the memfd `fd` for an instrumented capture and writes the layout the runtime reads."""

def capture_stream(
    fd: int,
    pid: int,
    out: str,
    virt_out: str | None = None,
    params: str = "",
    seed: int = 0,
    progress: CaptureProgress | None = None,
) -> str:
    """Merges, while the program `pid` runs, the records its tracing runtime publishes into the
    memfd `fd` (prepared by capture_shm_init) into `out` and `virt_out`; returns when the
    program's exit handler has run and every record is written. Returns the JSON report."""

def capture_runtime_env(dir: str, params: str = "") -> str:
    """JSON object: the TIERSIM_* environment the tracing runtime reads for a capture with
    `params` writing its files into `dir`."""

def capture_params() -> str:
    """JSON: the capture's parameters (name, kind, default, bounds, help)."""

def capture_resolve(params: str = "") -> str:
    """JSON: the resolved capture parameters; raises TiersimError for bad ones."""
