"""tiersim: a trace-driven simulator and policy lab for tiered memory.

The simulation runs in Rust (`tiersim._native`); this package turns Python values into the
native call arguments, returns results as polars DataFrames and writes run directories.

    >>> import tiersim
    >>> r = tiersim.run("stream.trace", platform="epyc_cxl_nps4", policy="interleave")
    >>> r.nodes.select("name", "accesses")
    >>> r.write("runs/nps4")
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

try:
    from tiersim import _native
except ImportError as exc:  # pragma: no cover - only without a built extension
    raise ImportError(
        "tiersim's native extension is not built; run `make test` or "
        "`maturin develop --release` in the repository first"
    ) from exc

from tiersim import _options
from tiersim._convert import json_object, overrides_to_list, params_to_toml
from tiersim._native import TiersimError
from tiersim.bound import BOUND

if TYPE_CHECKING:
    import polars as pl

    from tiersim._capture import CaptureResult, capture, capture_instrumented, capture_lackey, runtime_object
    from tiersim._characterize import Characterization
    from tiersim._flash import FlashResult, flash_replay, flash_study
    from tiersim._result import RunResult

# Names whose modules import polars (about 0.15 s of CPU) or only serve captures, loaded on
# first use, so that `import tiersim` and the commands that need neither (`tiersim run`,
# `tiersim --help`) start fast.
_LAZY = {
    "CaptureResult": "tiersim._capture",
    "capture": "tiersim._capture",
    "capture_instrumented": "tiersim._capture",
    "capture_lackey": "tiersim._capture",
    "runtime_object": "tiersim._capture",
    "Characterization": "tiersim._characterize",
    "FlashResult": "tiersim._flash",
    "flash_replay": "tiersim._flash",
    "flash_study": "tiersim._flash",
    "RunResult": "tiersim._result",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tiersim' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "CaptureResult",
    "Calibration",
    "Characterization",
    "FlashResult",
    "Overrides",
    "PathLike",
    "RunResult",
    "TRACE_FORMATS",
    "TiersimError",
    "__version__",
    "capture",
    "capture_lackey",
    "capture_instrumented",
    "runtime_object",
    "convert",
    "calibrate",
    "characterize",
    "filebench",
    "flash_replay",
    "flash_study",
    "generate",
    "generate_with",
    "inspect",
    "verify",
    "list_plugins",
    "mix",
    "resolve_platform",
    "run",
    "sample",
    "trace_stats",
]

__version__: str = _native.version()

PathLike = str | os.PathLike[str]
Overrides = Mapping[str, Any] | Sequence[str] | None


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise TiersimError(f"seed must be an integer in [0, 2^64), got {seed!r}")
    return seed


def run(
    trace: PathLike | None = None,
    *,
    platform: PathLike,
    policy: str = "linux_default",
    params: Mapping[str, Any] | str | None = None,
    overrides: Overrides = None,
    seed: int = 0,
    generator: str | None = None,
    generator_params: Mapping[str, Any] | str | None = None,
    out_dir: PathLike | None = None,
    progress: Callable[[int, int | None], None] | None = None,
) -> RunResult:
    """Simulate `trace` (a trace file) or `generator` (a built-in workload run in memory) on
    `platform` (preset name or TOML file) under `policy`.

    params: the policy's parameters, e.g. {"weights": [4, 1], "nodes": ["dram0", "cxl0"]}.
    overrides: platform overrides as {"nodes.cxl0.capacity": "64GiB"} or ["scale=0.001"].
    generator_params: the generator's parameters, e.g. {"accesses": 100000}.
    out_dir: if given, the run directory is written there (see RunResult.write).
    progress: called as progress(done, total) with the accesses read so far and the trace's
        total (None when unknown, e.g. for a generator): once at the start, every 262,144
        accesses and once at the end. An exception it raises (or Ctrl-C) stops the run and
        propagates unchanged.

    policy "oracle_bound" is tiersim's bound (tiersim.bound): every member of the free-migration
    oracle family runs in turn (progress restarts with each) and the fastest member's run is
    returned, its summary's `bound` naming the member and every member's time.

    Raises TiersimError for every invalid input, with a message naming what was wrong.
    """
    if (trace is None) == (generator is None):
        raise TiersimError("give exactly one of a trace file and a generator name")
    if generator_params is not None and generator is None:
        raise TiersimError("generator_params given without a generator")
    from tiersim._result import RunResult

    if policy == BOUND:
        from tiersim.bound import run_bound

        result = run_bound(
            trace,
            platform=platform,
            params=params,
            overrides=overrides,
            seed=seed,
            generator=generator,
            generator_params=generator_params,
            progress=None if progress is None else (lambda _member, done, total: progress(done, total)),
        )
        if out_dir is not None:
            result.write(out_dir)
        return result

    raw = _native.run(
        os.fspath(platform),
        policy,
        "" if trace is None else os.fspath(trace),
        overrides=overrides_to_list(overrides),
        policy_params=params_to_toml(params),
        seed=_check_seed(seed),
        generator=generator,
        generator_params=params_to_toml(generator_params),
        progress=progress,
    )
    result = RunResult(
        summary=json.loads(raw["summary"]),
        config=raw["config"],
        timeseries=raw["timeseries"],
        latency_hist=raw["latency_hist"],
    )
    if out_dir is not None:
        result.write(out_dir)
    return result


def generate(name: str, out: PathLike, /, *, seed: int = 0, **params: Any) -> dict[str, Any]:
    """Write the trace of generator `name` to `out`; returns its `inspect` statistics.

    params are the generator's parameters, e.g. accesses=100_000, footprint="64MiB".
    The file is written under a temporary name beside `out` and renamed at the end, so a failed
    generation leaves no partial trace behind.
    """
    return generate_with(name, out, params, seed=seed)


def generate_with(
    name: str, out: PathLike, params: Mapping[str, Any] | str | None, *, seed: int = 0, force: bool = False
) -> dict[str, Any]:
    """`generate` with the parameters as one dict (or TOML text), so that a generator parameter
    may be called `seed`, `name` or `out`. An existing `out` that is not a tiersim trace is
    refused unless `force`: a mistyped -o must not destroy someone's file."""
    out_path = Path(out)
    if out_path.is_dir():
        raise TiersimError(f"output '{out_path}' is a directory; give a file name")
    if out_path.is_file() and not force:
        with open(out_path, "rb") as f:
            if f.read(8) != b"TIERSIM\0":
                raise TiersimError(
                    f"'{out_path}' exists and is not a tiersim trace; refusing to overwrite it (--force does)"
                )
    parent = out_path.parent
    if not parent.is_dir():
        raise TiersimError(f"cannot write '{out_path}': directory '{parent}' does not exist")
    params_text = params_to_toml(params)
    seed = _check_seed(seed)
    from tiersim._result import temp_dir_beside

    tmp_dir = temp_dir_beside(out_path, f".{out_path.name}.", ".tmp")
    try:
        # Same file name inside the temp dir: the native writer may go by the extension.
        tmp = tmp_dir / out_path.name
        try:
            info = json_object(_native.generate(name, os.fspath(tmp), params=params_text, seed=seed))
        except TiersimError as exc:
            # Name the user's file, not the temporary one ("no space left writing OUT").
            raise TiersimError(str(exc).replace(os.fspath(tmp), os.fspath(out_path))) from None
        os.replace(tmp, out_path)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    info["path"] = os.fspath(out_path)
    return info


def inspect(path: PathLike) -> dict[str, Any]:
    """Header and statistics of a trace file (accesses, footprint, per-CPU counts, ...).

    When the header carries statistics they are its own, unverified (``"verified": False``).
    """
    return json_object(_native.inspect(os.fspath(path)))


def verify(path: PathLike) -> dict[str, Any]:
    """As `inspect`, after decoding and checking every frame and recomputing the statistics
    from the records; raises TiersimError naming the offset and what disagrees."""
    return json_object(_native.verify(os.fspath(path)))


def list_plugins() -> dict[str, Any]:
    """Every registered policy, device, generator, platform and device preset with its params."""
    return json_object(_native.list_plugins())


def resolve_platform(platform: PathLike, overrides: Overrides = None) -> str:
    """The fully resolved platform TOML for a preset name or file plus overrides."""
    return _native.resolve_platform(os.fspath(platform), overrides_to_list(overrides))


TRACE_FORMATS = ("native", "mqsim", "lackey", "csv")


def _writable(out: PathLike, *inputs: PathLike) -> str:
    path = Path(out)
    if path.is_dir():
        raise TiersimError(f"output '{path}' is a directory; give a file name")
    if not path.parent.is_dir():
        raise TiersimError(f"cannot write '{path}': directory '{path.parent}' does not exist")
    # The output replaces its target only when complete, so writing over an input would destroy
    # it with its own sample.
    for src in inputs:
        if path.exists() and Path(src).exists() and os.path.samefile(path, src):
            raise TiersimError(f"output '{path}' is the input '{src}'; give another file name")
    return os.fspath(path)


def convert(
    src: PathLike,
    dst: PathLike,
    *,
    dst_format: str,
    src_format: str | None = None,
    addr_kind: str = "virtual",
    page_size: int = 4096,
    ns_per_instruction: float = 0.5,
    csv_time_unit: str = "instructions",
) -> dict[str, Any]:
    """Convert a trace between native, mqsim, lackey and csv. `src_format` None reads a native
    trace (recognised by its magic; text formats are never guessed). addr_kind, page_size and
    csv_time_unit describe text input that does not say; ns_per_instruction turns an
    instruction trace into MQSim's ns. Returns the statistics of the written accesses."""
    return json_object(
        _native.convert(
            os.fspath(src),
            src_format,
            _writable(dst, src),
            dst_format,
            addr_kind=addr_kind,
            page_size=_options.Number(int, 64, _options.U32_MAX).check("page_size", page_size),
            ns_per_instruction=_options.Number(float, 0.0, _options.MAX_NS_PER_INSTRUCTION).check(
                "ns_per_instruction", ns_per_instruction
            ),
            csv_time_unit=csv_time_unit,
        )
    )


def sample(
    src: PathLike,
    dst: PathLike,
    *,
    src_format: str | None = None,
    start: int | None = None,
    end: int | None = None,
    cpus: Sequence[int] | None = None,
    every: int = 1,
) -> dict[str, Any]:
    """A smaller native trace: accesses in the time window [start, end) (ns, or each CPU's
    instruction count), of the given CPUs, then every Nth of those of each CPU. Returns its statistics."""
    return json_object(
        _native.sample(
            os.fspath(src),
            _writable(dst, src),
            src_format=src_format,
            start=None if start is None else _options.Number(int, 0).check("start", start),
            end=None if end is None else _options.Number(int, 0).check("end", end),
            cpus=None if cpus is None else [_options.Number(int, 0, _options.U32_MAX).check("cpus", c) for c in cpus],
            every=_options.Number(int, 1).check("every", every),
        )
    )


def mix(inputs: Sequence[PathLike], dst: PathLike, *, first_cpus: Sequence[int] | None = None) -> dict[str, Any]:
    """One multi-program trace from several native traces: each gets its own CPUs (after the
    previous input's, or from `first_cpus`) and, for virtual addresses, its own address space;
    accesses merge in time order. Returns the statistics of the result."""
    if isinstance(inputs, (str, bytes, os.PathLike)):
        raise TypeError(f"inputs: a list of trace paths, not one path ({inputs!r})")
    return json_object(
        _native.mix(
            [os.fspath(p) for p in inputs], _writable(dst, *inputs), None if first_cpus is None else list(first_cpus)
        )
    )


def trace_stats(path: PathLike, *, src_format: str | None = None, max_points: int = 100_000) -> dict[str, Any]:
    """Page reuse-distance and hotness histograms and page-vs-access scatter points."""
    max_points = _options.Number(int, 2, _options.I64_MAX).check("max_points", max_points)
    return json_object(_native.trace_stats(os.fspath(path), src_format, max_points))


def _curve_paths(curves: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    if isinstance(curves, (str, os.PathLike)):
        return [os.fspath(curves)]
    return [os.fspath(c) for c in curves]


def characterize(
    device: str,
    params: Mapping[str, Any] | str | None = None,
    *,
    tests: Sequence[str] = (),
    quick: bool = False,
    ratios: Sequence[int] = (),
    compare: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    cycles_ghz: float | None = None,
    node: str | None = None,
    port_ns: float = 0.0,
) -> Characterization:
    """MLC-like tests against a device preset (name or preset file) or kind (`tiersim list
    presets`), or with `node` against that node of a platform (name or file): idle latency,
    bandwidth vs threads and size, loaded latency, interleave scaling, for pmem the EWR, and on
    request (`tests=["bwlat"]`) Mess-style bandwidth-latency curves at the read percentages
    `ratios`. params: device parameters plus `count` (devices interleaved) and `granule` (bytes).
    compare: measured curves (files or directories: Mess, Intel MLC output or CSV, see
    `calibrate`) to score the bwlat curves against; cycles_ghz and port_ns: as for `calibrate`."""
    from tiersim._characterize import Characterization

    cycles_ghz = None if cycles_ghz is None else _options.Number(float, 0.0).check("cycles_ghz", cycles_ghz)
    text = _native.characterize(
        device,
        params_to_toml(params),
        list(tests),
        quick,
        list(ratios),
        [] if compare is None else _curve_paths(compare),
        cycles_ghz,
        node,
        _options.Number(float, 0.0, 10_000.0).check("port_ns", port_ns),
    )
    return Characterization.from_json(text)


@dataclass
class Calibration:
    """What `calibrate` fitted: the device parameters, a platform file holding the device, the
    same device as a preset file (`characterize PATH`, a platform node's `preset = "PATH"`),
    the fitted model's bwlat curves and their errors against the measured ones, and what the
    reader did to the curves as published (`read`: per curve its source, mix, rows and notes;
    the files it skipped)."""

    device: str
    fitted: str
    platform_toml: str
    preset_toml: str
    curves: Characterization
    comparison: pl.DataFrame
    read: dict[str, Any]


def calibrate(
    curves: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    device: str,
    *,
    base: str | None = None,
    params: Mapping[str, Any] | str | None = None,
    ratios: Sequence[int] = (),
    cycles_ghz: float | None = None,
    port_ns: float = 0.0,
) -> Calibration:
    """Fit the `dram` or `cxl` model to measured bandwidth-latency curves, on top of preset
    `base` (default ddr4_2666 / cxl_cz120) with `params` overrides. curves: files or
    directories, each file read by its content: Mess rows (`bwlat_R.txt`, R = percent reads),
    Intel MLC --loaded_latency output (the mix from its -W traffic type), or CSV with named
    columns. cycles_ghz: Mess latency in cycles at this clock (converted to ns). port_ns: the
    curves start at a port rather than the core (Mess's CXL curves: the CXL host port); this
    much on-chip path is added to every latency."""
    import polars as pl

    from tiersim._characterize import Characterization, measured_frames

    paths = _curve_paths(curves)
    cycles_ghz = None if cycles_ghz is None else _options.Number(float, 0.0).check("cycles_ghz", cycles_ghz)
    base = base or {"dram": "ddr4_2666", "cxl": "cxl_cz120"}.get(device, device)
    raw = json.loads(
        _native.calibrate(
            paths,
            device,
            base,
            params_to_toml(params),
            list(ratios),
            cycles_ghz,
            _options.Number(float, 0.0, 10_000.0).check("port_ns", port_ns),
        )
    )
    measured, comparison = measured_frames(raw["measured"], raw["comparison"])
    # Named for what the plot shows: the fit, not the base preset it started from.
    label = f"{device} fitted to {', '.join(Path(p).name for p in paths)} (base {raw['target']})"
    fitted_curves = Characterization(label, device, 1, 4096, {})
    fitted_curves.tables["bwlat"] = pl.DataFrame({c["name"]: c["values"] for c in raw["table"]["columns"]})
    fitted_curves.titles["bwlat"] = raw["table"]["title"]
    fitted_curves.measured, fitted_curves.comparison = measured, comparison
    return Calibration(
        raw["device"], raw["fitted"], raw["platform_toml"], raw["preset_toml"], fitted_curves, comparison, raw["read"]
    )


def filebench(
    *, device_params: Mapping[str, Any] | None = None, iopath: Mapping[str, Any] | None = None, **params: Any
) -> dict[str, Any]:
    """File I/O through the kernel path onto a storage device (docs/model.md "Storage"): the
    block micro-benchmark of seed 001 (workload read/write, pattern, api syscall/mmap, cache
    buffered/direct/dax, warm, threads, block_size, ...) or the storage engine (workload kv).
    Sub-tables `device_params` and `iopath` override the device preset and the path's costs.
    Returns ops, bandwidth_gbs, ops_per_s, mean_latency_ns, layers_ns (mean per operation) and
    stats (page cache, writeback, log, device)."""
    text = params_to_toml(params)
    for name, sub in (("device_params", device_params), ("iopath", iopath)):
        if sub:
            text += f"\n[{name}]\n" + params_to_toml(sub)
    return json_object(_native.filebench(text))
