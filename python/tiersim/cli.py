"""The `tiersim` command line.

Every command maps onto one or a few calls of the Python API (and so of `tiersim._native`).
User errors (TiersimError, unwritable outputs) print one "error: ..." line on stderr and exit 1;
malformed arguments are usage errors (exit 2). Neither prints a traceback.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import polars as pl
import typer
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

import tiersim
from tiersim._convert import parse_cli_pairs, parse_cli_value
from tiersim._flash import check_flash_dir
from tiersim._result import check_out_dir

app = typer.Typer(
    name="tiersim",
    help="Trace-driven simulator and policy lab for tiered memory (DRAM, CXL memory, PMEM, swap).",
    no_args_is_help=True,
    add_completion=False,
    # A user error never reaches typer (it is caught below); anything that does is a bug, and a
    # plain traceback is the most useful thing to report for it.
    pretty_exceptions_enable=False,
)
trace_app = typer.Typer(help="Trace files: inspect, convert, sample, statistics.", no_args_is_help=True)
platform_app = typer.Typer(help="Platforms: show resolved configurations.", no_args_is_help=True)
flash_app = typer.Typer(help="CXL-flash device (seed 004): replay a trace against it, run the paper's comparisons.", no_args_is_help=True)
app.add_typer(trace_app, name="trace")
app.add_typer(platform_app, name="platform")
app.add_typer(flash_app, name="flash")

# Piped or captured output gets a wide console so that tables land in logs unwrapped; a
# terminal gets its own width.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False)


# ---------------------------------------------------------------------------------------------
# errors and argument parsing


def _fail(message: str) -> NoReturn:
    err.print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)
    raise typer.Exit(1)


@contextmanager
def _user_errors() -> Iterator[None]:
    try:
        yield
    except tiersim.TiersimError as exc:
        _fail(str(exc))
    except OSError as exc:
        # Output paths the user chose: permission denied, disk full, read-only file system.
        where = f" '{exc.filename}'" if exc.filename else ""
        _fail(f"{exc.strerror or exc}{where}")


def _pairs(items: Sequence[str] | None, option: str) -> dict[str, Any]:
    try:
        return parse_cli_pairs(items or [], option)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def _overrides(items: Sequence[str] | None) -> list[str]:
    """--set values go to the native side as typed ("key=value", bare words allowed), after a
    syntax check here so a typo is a usage error rather than a simulation error."""
    result = []
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise typer.BadParameter(f"expected KEY=VALUE (e.g. --set host.mlp=4), got '{item}'", param_hint="--set")
        result.append(f"{key.strip()}={value.strip()}")
    return result


def _merge_shortcuts(params: dict[str, Any], shortcuts: dict[str, tuple[str, Any]]) -> None:
    """Put the values of shortcut options (`--size` for `footprint`, ...) into `params`; a key set
    both ways is a usage error."""
    for key, (option, value) in shortcuts.items():
        if value is None:
            continue
        if key in params:
            raise typer.BadParameter(f"{option} and --param {key}=... both set {key}; give one", param_hint=option)
        params[key] = value


# ---------------------------------------------------------------------------------------------
# formatting


def _int(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else "-"


def _bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def _ms(ns: Any) -> str:
    return f"{ns / 1e6:,.3f} ms" if isinstance(ns, (int, float)) else "-"


def _num(x: Any, digits: int = 1) -> str:
    return f"{x:,.{digits}f}" if isinstance(x, (int, float)) else "-"


def _gbs(nbytes: float, ns: float) -> str:
    # bytes per ns is GB/s (decimal), the unit device datasheets use.
    return f"{nbytes / ns:.2f} GB/s" if ns else "-"


def _kv_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, show_header=False, title_justify="left")
    table.add_column("what", style="bold", no_wrap=True)
    table.add_column("value")
    for key, value in rows:
        table.add_row(key, value)
    return table


def _summary_tables(result: tiersim.RunResult) -> list[Table]:
    s = result.summary
    lat = s.get("latency_ns", {})
    exec_ns = s.get("execution_time_ns", 0)
    total = s.get("accesses", 0)
    rows = [
        ("platform", str(s.get("platform", "-"))),
        ("policy", str(s.get("policy", "-"))),
        ("trace", str(s.get("trace", "-"))),
        ("seed", str(s.get("seed", "-"))),
        ("execution time", _ms(exec_ns)),
        ("accesses", f"{_int(total)} ({_int(s.get('reads'))} reads, {_int(s.get('writes'))} writes)"),
        ("pages touched", _int(s.get("pages_touched"))),
        (
            "fast-tier hit ratio",
            f"{100 * s['fast_tier_hit_ratio']:.2f}%" if isinstance(s.get("fast_tier_hit_ratio"), (int, float)) else "-",
        ),
        ("latency p50 / p99", f"{_num(lat.get('p50'))} / {_num(lat.get('p99'))} ns"),
        ("latency mean / max", f"{_num(lat.get('mean'))} / {_num(lat.get('max'))} ns"),
    ]
    if s.get("warmup_accesses"):
        rows.append(("warm-up (not measured)", f"{_int(s['warmup_accesses'])} accesses"))
    faults = s.get("faults") or {}
    if faults:
        touch, swap_in = _int(faults.get("first_touch")), _int(faults.get("swap_in"))
        rows.append(("page faults", f"{touch} first touch, {swap_in} swap-in"))
    swap = s.get("swap") or {}
    if swap.get("swap_ins") or swap.get("swap_outs"):
        rows.append(("swap ins / outs", f"{_int(swap.get('swap_ins'))} / {_int(swap.get('swap_outs'))}"))
    if swap.get("file_drops"):
        rows.append(("page cache", f"{_int(swap.get('file_drops'))} dropped ({_int(swap.get('file_writebacks'))} written back), "
                                   f"{_int(swap.get('file_refaults'))} read back"))

    page_size = s.get("page_size")
    nodes = Table(title="memory nodes", box=box.SIMPLE_HEAD, title_justify="left")
    for name in ("node", "device", "tier", "accesses", "share", "bytes", "bandwidth", "final pages / capacity"):
        nodes.add_column(name, justify="left" if name in ("node", "device") else "right")
    for n in s.get("nodes", []):
        cap = n.get("capacity_bytes")
        cap_pages = n.get("capacity_pages")
        if cap_pages is None and isinstance(page_size, int) and isinstance(cap, int) and page_size > 0:
            cap_pages = cap // page_size
        # The engine's bandwidth covers the measured window (after warm-up); bytes / execution
        # time is the fallback for summaries that lack it.
        bandwidth = n.get("bandwidth_gbs")
        nodes.add_row(
            str(n.get("name")),
            str(n.get("device")),
            str(n.get("tier", "-")),
            _int(n.get("accesses")),
            _pct(n.get("accesses", 0), total),
            _bytes(n.get("bytes")),
            f"{bandwidth:.2f} GB/s" if isinstance(bandwidth, (int, float)) else _gbs(n.get("bytes", 0), exec_ns),
            f"{_int(n.get('final_pages'))} / {_int(cap_pages) if cap_pages is not None else _bytes(cap)}",
        )
    return [_kv_table("run", rows), nodes]


def _inspect_tables(info: dict[str, Any]) -> list[Table]:
    accesses = info.get("accesses", 0)
    unit = "ns" if str(info.get("time_unit", "")).lower() in ("ns", "nanoseconds") else str(info.get("time_unit", ""))
    rows = [
        ("path", str(info.get("path", "-"))),
        ("format version", str(info.get("version", "-"))),
        ("record layout", str(info.get("record_layout", "-"))),
        ("time unit", str(info.get("time_unit", "-"))),
        ("addresses", str(info.get("addr_kind", "-"))
         + (f" (v2p {info['v2p']})" if info.get("v2p") not in (None, "unrecorded") else "")),
        ("page size", _bytes(info.get("page_size"))),
        ("accesses", _int(accesses)),
        (
            "reads / writes",
            f"{_int(info.get('reads'))} / {_int(info.get('writes'))} ({_pct(info.get('writes', 0), accesses)} writes)",
        ),
        ("bytes accessed", f"{_int(info.get('bytes'))} ({_bytes(info.get('bytes'))})"),
        ("footprint", f"{_int(info.get('footprint_pages'))} pages, {_bytes(info.get('footprint_bytes'))}"),
        ("time first / last", f"{_int(info.get('time_first'))} / {_int(info.get('time_last'))} {unit}"),
        ("time span", f"{_int(info.get('time_span'))} {unit}"),
        ("compressed size", _bytes(info.get("compressed_bytes"))),
        ("bytes per access", _num(info.get("bytes_per_access"), 2)),
        ("statistics from", str(info.get("stats_source", "-"))),
    ]
    tables = [_kv_table("trace", rows)]
    per_cpu = info.get("per_cpu") or []
    if per_cpu:
        cpus = Table(title="per CPU", box=box.SIMPLE_HEAD, title_justify="left")
        cpus.add_column("cpu", justify="right")
        if all(isinstance(c, dict) for c in per_cpu):
            keys = [k for k in per_cpu[0] if k != "cpu"]
            for k in keys:
                cpus.add_column(k, justify="right")
            cpus.add_column("share", justify="right")
            for i, c in enumerate(per_cpu):
                cpus.add_row(
                    str(c.get("cpu", i)),
                    *(_int(c.get(k)) if isinstance(c.get(k), int) else str(c.get(k)) for k in keys),
                    _pct(c.get("accesses", 0), accesses),
                )
        else:
            cpus.add_column("accesses", justify="right")
            cpus.add_column("share", justify="right")
            for i, c in enumerate(per_cpu):
                cpus.add_row(str(i), _int(c), _pct(c if isinstance(c, int) else 0, accesses))
        tables.append(cpus)
    return tables


def _print(*renderables: Any) -> None:
    for r in renderables:
        out.print(r)


def _echo_raw(text: str) -> None:
    # TOML and JSON go out untouched: rich would read "[nodes.dram0]" as markup.
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "run"


# ---------------------------------------------------------------------------------------------
# commands


@app.command()
def run(
    trace: Annotated[Path | None, typer.Argument(help="Trace file (omit with --gen).", show_default=False)] = None,
    platform: Annotated[str, typer.Option("--platform", "-p", help="Platform preset name or TOML file.")] = ...,  # type: ignore[assignment]
    policy: Annotated[str, typer.Option(help="Placement policy (see `tiersim list policies`).")] = "linux_default",
    param: Annotated[
        list[str] | None,
        typer.Option("--param", metavar="KEY=VALUE", help="Policy parameter, e.g. weights=[4,1]; repeatable."),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", metavar="KEY=VALUE", help='Platform override, e.g. nodes.cxl0.capacity="64GiB"; repeatable.'
        ),
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed for every random choice of the run.")] = 0,
    gen: Annotated[
        str | None, typer.Option("--gen", metavar="NAME", help="Run generator NAME in memory instead of a trace file.")
    ] = None,
    gen_param: Annotated[
        list[str] | None, typer.Option("--gen-param", metavar="KEY=VALUE", help="Generator parameter; repeatable.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            metavar="DIR",
            help="Run directory to write (default: runs/PLATFORM-POLICY-TRACE-sSEED).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print summary.json instead of tables.")] = False,
) -> None:
    """Simulate a trace (or a generator) on a platform under a placement policy."""
    if (trace is None) == (gen is None):
        raise typer.BadParameter("give either a TRACE file or --gen NAME (not both)", param_hint="TRACE / --gen")
    if gen_param and gen is None:
        raise typer.BadParameter("--gen-param needs --gen", param_hint="--gen-param")
    params = _pairs(param, "--param")
    gen_params = _pairs(gen_param, "--gen-param")
    overrides = _overrides(set_)
    source = gen if gen is not None else trace.stem  # type: ignore[union-attr]
    run_dir = output or Path("runs") / _slug(f"{Path(platform).stem}-{policy}-{source}-s{seed}")
    with _user_errors():
        check_out_dir(run_dir)
        with err.status(Text(f"simulating {source} on {platform} under {policy} ...")):
            result = tiersim.run(
                trace,
                platform=platform,
                policy=policy,
                params=params,
                overrides=overrides,
                seed=seed,
                generator=gen,
                generator_params=gen_params if gen is not None else None,
            )
        result.write(run_dir)
    if as_json:
        _echo_raw(result.summary_json())
        err.print(Text(f"wrote {run_dir}"), soft_wrap=True)
    else:
        _print(*_summary_tables(result))
        out.print(Text(f"run directory: {run_dir}"), soft_wrap=True)


def _cell(v: Any) -> str:
    if isinstance(v, str):
        return v
    if v is not None and v == v and float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v)}"
    return f"{v:.4g}"


@app.command("characterize")
def characterize_cmd(
    device: Annotated[str, typer.Argument(help="Device preset or kind (see `tiersim list presets`).")],
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            metavar="KEY=VALUE",
            help="Device parameter, or count=N / granule=SIZE of an interleave set; repeatable.",
        ),
    ] = None,
    test: Annotated[
        list[str] | None, typer.Option("--test", metavar="NAME", help="Run only this test; repeatable.")
    ] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Fewer points and accesses (seconds).")] = False,
    output: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="DIR", help="Write CSV, Parquet and PNG per table here."),
    ] = None,
) -> None:
    """Run MLC-like tests against a device model: latency, bandwidth, EWR, loaded latency, scaling."""
    params = _pairs(param, "--param")
    with _user_errors():
        with err.status(Text(f"characterizing {device} ...")):
            result = tiersim.characterize(device, params, tests=test or (), quick=quick)
        for name, df in result.tables.items():
            table = Table(title=f"{result.titles[name]}  [{name}]", box=box.SIMPLE_HEAD)
            for col in df.columns:
                table.add_column(col, justify="left" if df[col].dtype == pl.String else "right")
            for row in df.iter_rows():
                table.add_row(*(_cell(v) for v in row))
            _print(table)
        if output is not None:
            written = result.write(output)
            out.print(Text(f"wrote {len(written)} files to {output}"), soft_wrap=True)


@app.command("gen")
def gen_cmd(
    name: Annotated[str, typer.Argument(help="Generator (see `tiersim list generators`).")],
    output: Annotated[Path, typer.Option("--out", "-o", metavar="FILE", help="Trace file to write.")],
    size: Annotated[str | None, typer.Option("--size", help="Footprint, e.g. 512MiB (parameter footprint).")] = None,
    count: Annotated[
        int | None, typer.Option("--count", min=1, help="Number of accesses (parameter accesses).")
    ] = None,
    write_ratio: Annotated[
        float | None,
        typer.Option("--write-ratio", min=0.0, max=1.0, help="Fraction of writes (parameter write_ratio)."),
    ] = None,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="Threads / CPUs (parameter threads).")] = None,
    seed: Annotated[int, typer.Option(min=0, help="Generator seed.")] = 0,
    param: Annotated[
        list[str] | None, typer.Option("--param", metavar="KEY=VALUE", help="Any generator parameter; repeatable.")
    ] = None,
) -> None:
    """Generate a synthetic trace file, then print its statistics."""
    params = _pairs(param, "--param")
    shortcuts = {
        "footprint": ("--size", None if size is None else parse_cli_value(size)),
        "accesses": ("--count", count),
        "write_ratio": ("--write-ratio", write_ratio),
        "threads": ("--threads", threads),
    }
    _merge_shortcuts(params, shortcuts)
    with _user_errors():
        with err.status(Text(f"generating {name} ...")):
            info = tiersim.generate_with(name, output, params, seed=seed)
    _print(*_inspect_tables(info))


@trace_app.command("inspect")
def trace_inspect(
    file: Annotated[Path, typer.Argument(help="Trace file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the statistics as JSON.")] = False,
) -> None:
    """Print a trace's header and statistics."""
    with _user_errors():
        info = tiersim.inspect(file)
    if as_json:
        _echo_raw(json.dumps(info, sort_keys=True, indent=2))
    else:
        _print(*_inspect_tables(info))


class TraceFormat(StrEnum):
    native = "native"
    mqsim = "mqsim"
    lackey = "lackey"
    csv = "csv"


class AddrKindOpt(StrEnum):
    virtual = "virtual"
    physical = "physical"


_FROM_HELP = "Input format (default: native, recognised by its magic; text formats are never guessed)."


def _fmt(f: TraceFormat | None) -> str | None:
    return None if f is None or f is TraceFormat.native else f.value


def _stats_rows(stats: dict[str, Any], path: Path) -> list[tuple[str, str]]:
    per_cpu = stats.get("per_cpu") or []
    return [
        ("wrote", str(path)),
        ("accesses", f"{_int(stats.get('accesses'))} ({_int(stats.get('writes'))} writes)"),
        ("footprint", f"{_int(stats.get('footprint_pages'))} pages"),
        ("CPUs", str(sum(1 for c in per_cpu if c))),
    ]


@trace_app.command("convert")
def trace_convert(
    src: Annotated[Path, typer.Argument(help="Input trace.")],
    dst: Annotated[Path, typer.Argument(help="Output file.")],
    to: Annotated[TraceFormat, typer.Option("--to", help="Output format.")],
    from_: Annotated[TraceFormat | None, typer.Option("--from", help=_FROM_HELP)] = None,
    addr_kind: Annotated[
        AddrKindOpt, typer.Option("--addr-kind", help="Address kind of text input (it does not say).")
    ] = AddrKindOpt.virtual,
    page_size: Annotated[int, typer.Option("--page-size", min=64, help="Page size recorded for text input.")] = 4096,
    ns_per_instruction: Annotated[
        float, typer.Option("--ns-per-instruction", min=0.0, help="Instruction trace to MQSim: ns per instruction.")
    ] = 0.5,
) -> None:
    """Convert a trace between native, MQSim_CXL text, Valgrind lackey output and CSV."""
    with _user_errors():
        stats = tiersim.convert(
            src,
            dst,
            dst_format=to.value,
            src_format=_fmt(from_),
            addr_kind=addr_kind.value,
            page_size=page_size,
            ns_per_instruction=ns_per_instruction,
        )
    _print(_kv_table("convert", _stats_rows(stats, dst)))


def _cpu_list(text: str | None) -> list[int] | None:
    if text is None:
        return None
    cpus: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            cpus.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    except ValueError:
        raise typer.BadParameter(f"expected CPU numbers like 0,2,4-7, got '{text}'", param_hint="--cpus") from None
    if any(c < 0 for c in cpus):
        raise typer.BadParameter("CPU numbers are not negative", param_hint="--cpus")
    return cpus


@trace_app.command("sample")
def trace_sample(
    src: Annotated[Path, typer.Argument(help="Input trace.")],
    output: Annotated[Path, typer.Option("--out", "-o", metavar="FILE", help="Native trace to write.")],
    start: Annotated[
        int | None, typer.Option(min=0, help="Window start: ns, or the CPU's instruction count for instruction traces.")
    ] = None,
    end: Annotated[int | None, typer.Option(min=0, help="Window end (exclusive), same unit.")] = None,
    cpus: Annotated[str | None, typer.Option(help="Only these CPUs, e.g. 0,2,4-7.")] = None,
    every: Annotated[int, typer.Option(min=1, help="Keep every Nth of the selected accesses.")] = 1,
    from_: Annotated[TraceFormat | None, typer.Option("--from", help=_FROM_HELP)] = None,
) -> None:
    """Make a small trace: a time window, a CPU subset, every Nth access."""
    cpu_list = _cpu_list(cpus)
    with _user_errors():
        info = tiersim.sample(src, output, src_format=_fmt(from_), start=start, end=end, cpus=cpu_list, every=every)
    _print(*_inspect_tables(info))


@trace_app.command("stats")
def trace_stats_cmd(
    file: Annotated[Path, typer.Argument(help="Trace file.")],
    from_: Annotated[TraceFormat | None, typer.Option("--from", help=_FROM_HELP)] = None,
    png: Annotated[
        Path | None, typer.Option("--png", metavar="FILE", help="Write a plot of page accesses over time.")
    ] = None,
    max_points: Annotated[int, typer.Option("--max-points", min=2, help="Scatter points kept at most.")] = 100_000,
    as_json: Annotated[bool, typer.Option("--json", help="Print everything as JSON.")] = False,
) -> None:
    """Reuse-distance and page-hotness histograms, and a page-vs-time plot (CXL-flash fig. 3 style)."""
    with _user_errors():
        stats = tiersim.trace_stats(file, src_format=_fmt(from_), max_points=max_points)
        if png is not None:
            from tiersim._plot import page_scatter_png

            page_scatter_png(stats, png, file.name)
    if as_json:
        _echo_raw(json.dumps(stats, indent=2))
        return
    rows = [
        ("accesses", _int(stats["accesses"])),
        ("pages", f"{_int(stats['pages'])} of {_bytes(stats['page_size'])}"),
        ("hottest 1% / 10% of pages", f"{100 * stats['hotness']['top_1pct_share']:.1f}% / "
         f"{100 * stats['hotness']['top_10pct_share']:.1f}% of accesses"),
        ("first touches", _int(stats["reuse_distance"]["cold"])),
    ]
    tables: list[Any] = [_kv_table("trace statistics", rows)]
    for key, title, unit in (
        ("reuse_distance", "reuse distance", "distinct pages"),
        ("hotness", "page hotness", "accesses per page"),
    ):
        t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
        t.add_column(unit, justify="right")
        t.add_column("pages" if key == "hotness" else "accesses", justify="right")
        for b in stats[key]["buckets"]:
            t.add_row(f"{b['lo']}..{b['hi'] - 1}", _int(b["count"]))
        tables.append(t)
    _print(*tables)
    if png is not None:
        out.print(Text(f"plot: {png}"), soft_wrap=True)


@app.command("mix")
def mix_cmd(
    traces: Annotated[list[Path], typer.Argument(help="Native traces, one per program.")],
    output: Annotated[Path, typer.Option("--out", "-o", metavar="FILE", help="Trace to write.")],
    first_cpu: Annotated[
        list[int] | None,
        typer.Option("--first-cpu", min=0, help="CPU of each trace's CPU 0, in trace order; repeat once per trace."),
    ] = None,
) -> None:
    """Combine traces into a multi-program workload, each bound to its own CPUs."""
    if first_cpu and len(first_cpu) != len(traces):
        raise typer.BadParameter(
            f"{len(first_cpu)} --first-cpu values for {len(traces)} traces; give one per trace", param_hint="--first-cpu"
        )
    with _user_errors():
        info = tiersim.mix(traces, output, first_cpus=first_cpu or None)
    _print(*_inspect_tables(info))


def _capture_help(name: str, text: str) -> str:
    """Help of a capture option, with the default from the native parameter table."""
    from tiersim._capture import capture_params

    default = next((p["default"] for p in capture_params()["params"] if p["name"] == name), None)
    return f"{text} (parameter {name}; default {default})."


@app.command(
    "capture",
    context_settings={"allow_interspersed_args": False},
    help="Run a program under Valgrind and write its memory trace: loads and stores through an LLC model "
    "(misses and dirty writebacks only), physical addresses from /proc/PID/pagemap or a buddy-allocator "
    "model, and the same records with virtual addresses beside them.\n\n"
    "The program keeps its stdin, stdout and stderr; tiersim's own output goes to stderr. "
    "If the program exits with a non-zero status (or is killed by a signal: 128 + its number), the trace "
    "is still written and tiersim capture exits with that status.",
    short_help="Run a program under Valgrind and write its memory trace.",
)
def capture_cmd(
    output: Annotated[
        Path, typer.Option("--out", "-o", metavar="FILE", help="Trace to write (physical addresses unless --v2p none).")
    ],
    command: Annotated[
        list[str] | None,
        typer.Argument(metavar="-- PROG [ARGS]...", help="The program and its arguments.", show_default=False),
    ] = None,
    virt_out: Annotated[
        Path | None,
        typer.Option(
            "--virt-out",
            metavar="FILE",
            help="The same records with virtual addresses (default: OUT with .virt before its suffix).",
            show_default=False,
        ),
    ] = None,
    llc: Annotated[
        str | None, typer.Option("--llc", metavar="SIZE", help=_capture_help("llc", "LLC capacity, 0 for no filter"))
    ] = None,
    llc_ways: Annotated[
        int | None, typer.Option("--llc-ways", min=1, help=_capture_help("llc_ways", "LLC associativity"))
    ] = None,
    v2p: Annotated[
        str | None,
        typer.Option(
            "--v2p",
            metavar="auto|pagemap|buddy|none",
            help=_capture_help("v2p", "Where physical frames come from; auto reads pagemap when it can"),
        ),
    ] = None,
    phys_mem: Annotated[
        str | None,
        typer.Option("--phys-mem", metavar="SIZE", help=_capture_help("phys_mem", "Buddy model: physical memory")),
    ] = None,
    fragmentation: Annotated[
        float | None,
        typer.Option(
            "--fragmentation",
            min=0.0,
            max=0.99,
            help=_capture_help("fragmentation", "Buddy model: share of frames other tenants hold"),
        ),
    ] = None,
    page_size: Annotated[
        str | None, typer.Option("--page-size", metavar="SIZE", help=_capture_help("page_size", "Page size"))
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option("--param", metavar="KEY=VALUE", help="Any capture parameter (line_size, max_order, ...)."),
    ] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the buddy model's fragmentation.")] = 0,
    report: Annotated[
        Path | None, typer.Option("--report", metavar="FILE", help="Also write the capture report as JSON.")
    ] = None,
    lackey: Annotated[
        Path | None,
        typer.Option(
            "--lackey",
            metavar="FILE",
            help="Filter a stored lackey log (valgrind --tool=lackey --trace-mem=yes, or `tiersim trace convert "
            "--to lackey`) instead of running a program; v2p auto then uses the buddy model.",
        ),
    ] = None,
) -> None:
    from tiersim._capture import CaptureProgress, CaptureResult, capture, capture_lackey, signal_name

    params = _pairs(param, "--param")
    shortcuts = {
        "llc": ("--llc", None if llc is None else parse_cli_value(llc)),
        "llc_ways": ("--llc-ways", llc_ways),
        "v2p": ("--v2p", v2p),
        "phys_mem": ("--phys-mem", None if phys_mem is None else parse_cli_value(phys_mem)),
        "fragmentation": ("--fragmentation", fragmentation),
        "page_size": ("--page-size", None if page_size is None else parse_cli_value(page_size)),
    }
    _merge_shortcuts(params, shortcuts)
    if (lackey is None) == (not command):
        raise typer.BadParameter("give either -- PROG [ARGS]... or --lackey FILE", param_hint="PROG / --lackey")
    if lackey is not None:
        with _user_errors():
            start = time.monotonic()
            with err.status(Text(f"filtering {lackey} ...")):
                rep_ = capture_lackey(lackey, output, virt_out=virt_out, params=params, seed=seed)
            result = CaptureResult(
                argv=[],
                exit_status=0,
                signal=None,
                out=output,
                virt_out=Path(rep_["virt_out"]) if rep_["virt_out"] else None,
                elapsed_s=time.monotonic() - start,
                report=rep_,
            )
            if report is not None:
                report.write_text(json.dumps(_capture_json(result), indent=2) + "\n")
        for t in _capture_tables(result, source=f"lackey log {lackey}"):
            err.print(t)
        return
    assert command is not None
    prog = command[0]
    with _user_errors():
        with err.status(Text(f"starting {prog} under valgrind ...")) as status:

            def show(p: CaptureProgress) -> None:
                rate = p.instructions / p.elapsed_s if p.elapsed_s > 0 else 0.0
                status.update(
                    Text(
                        f"capturing {prog}: {p.instructions / 1e6:,.1f} M instructions, "
                        f"{p.data_accesses / 1e6:,.1f} M loads/stores, {p.records / 1e6:,.2f} M records "
                        f"({rate / 1e6:,.1f} M instructions/s)"
                    )
                )

            try:
                result = capture(command, output, virt_out=virt_out, params=params, seed=seed, on_progress=show)
            except KeyboardInterrupt:
                _fail("interrupted: the program was killed and no trace was written")
        if report is not None:
            report.write_text(json.dumps(_capture_json(result), indent=2) + "\n")
    for t in _capture_tables(result):
        err.print(t)
    if result.exit_status != 0:
        how = (
            f"was killed by {signal_name(result.signal)}"
            if result.signal is not None
            else f"exited with status {result.exit_status}"
        )
        err.print(
            Text.assemble(
                ("warning: ", "bold yellow"),
                f"{prog} {how}; the trace covers its run until then, and tiersim capture exits with "
                f"status {result.exit_status}",
            ),
            soft_wrap=True,
        )
        raise typer.Exit(result.exit_status)


def _capture_json(result: Any) -> dict[str, Any]:
    return {
        "argv": result.argv,
        "exit_status": result.exit_status,
        "signal": result.signal,
        "elapsed_s": result.elapsed_s,
        **result.report,
    }


def _capture_tables(result: Any, source: str | None = None) -> list[Table]:
    r = result.report
    secs = result.elapsed_s
    data = r["loads"] + r["stores"] + r["modifies"]
    rows = (
        [("input", source)]
        if source is not None
        else [("program", " ".join(result.argv)), ("exit status", str(result.exit_status))]
    )
    rows += [
        ("instructions", _int(r["instructions"])),
        ("loads / stores / modifies", f"{_int(r['loads'])} / {_int(r['stores'])} / {_int(r['modifies'])}"),
    ]
    llc = r.get("llc")
    if llc:
        accesses = llc["hits"] + llc["misses"]
        rows.append(
            (
                "LLC",
                f"{_bytes(llc['size'])}, {llc['ways']} ways, {llc['line_size']} B lines: "
                f"{_int(llc['misses'])} misses ({_pct(llc['misses'], accesses)} of {_int(accesses)} line accesses), "
                f"{_int(llc['writebacks'])} writebacks",
            )
        )
    else:
        rows.append(("LLC", "none: every load and store is recorded"))
    rows += [
        ("records", f"{_int(r['records'])} ({_int(r['reads'])} reads, {_int(r['writes'])} writes)"),
        ("footprint", f"{_int(r['footprint_pages'])} pages of {_bytes(r['page_size'])}"),
        ("addresses", f"{r['v2p']} ({r['v2p_note']})"),
    ]
    if r.get("remaps"):
        rows.append(("frames changed by copy-on-write", _int(r["remaps"])))
    if r.get("pages_unresolved"):
        rows.append(("pages pagemap never showed", f"{_int(r['pages_unresolved'])} (synthetic frames from 2^52)"))
    for label, path in (("trace", result.out), ("virtual trace", result.virt_out)):
        if path is None:
            continue
        size = path.stat().st_size
        per = f", {size / r['records']:.2f} bytes per record" if r["records"] else ""
        rows.append((label, f"{path} ({_bytes(size)}{per})"))
    rows.append(
        (
            "time",
            f"{secs:,.2f} s: {r['instructions'] / secs / 1e6:,.2f} M instructions/s, "
            f"{data / secs / 1e6:,.2f} M loads+stores/s"
            if secs > 0
            else "-",
        )
    )
    return [_kv_table("capture", rows)]


class Kind(StrEnum):
    policies = "policies"
    devices = "devices"
    generators = "generators"
    platforms = "platforms"
    presets = "presets"


def _plugin_block(info: dict[str, Any]) -> list[Any]:
    header = Text.assemble((str(info.get("name")), "bold cyan"), "  ", str(info.get("summary", "")))
    if info.get("source"):
        header.append(f"  ({info['source']})", style="dim")
    params = info.get("params") or []
    if not params:
        return [header, Text("    no parameters", style="dim")]
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=True)
    table.add_column("parameter", no_wrap=True, style="bold")
    table.add_column("kind", no_wrap=True)
    table.add_column("default", overflow="fold")
    table.add_column("range", overflow="fold")
    table.add_column("help", ratio=1)
    for p in params:
        default = p.get("default")
        bounds = ""
        if p.get("choices"):
            bounds = " | ".join(str(c) for c in p["choices"])
        elif p.get("min") is not None or p.get("max") is not None:
            lo = "" if p.get("min") is None else f"{p['min']:g}"
            hi = "" if p.get("max") is None else f"{p['max']:g}"
            bounds = f"{lo}..{hi}"
        table.add_row(
            str(p.get("name")),
            str(p.get("kind", "")),
            "(required)" if default is None else str(default),
            bounds,
            str(p.get("help", "")),
        )
    return [header, table]


# Which parts of the native registry each `tiersim list` kind shows.
_REGISTRY_KEYS = {
    Kind.policies: ["policies"],
    Kind.devices: ["devices"],
    Kind.generators: ["generators"],
    Kind.platforms: ["platforms", "platform_sections"],
    Kind.presets: ["device_presets"],
}


def _without(d: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != key}


@app.command("list")
def list_cmd(
    kind: Annotated[Kind | None, typer.Argument(help="Only this kind of plugin.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the registry as JSON.")] = False,
) -> None:
    """List every registered plugin with its parameters, kinds, defaults and help."""
    with _user_errors():
        registry = tiersim.list_plugins()
    kinds = [kind] if kind is not None else list(Kind)
    if as_json:
        selected = {name: registry.get(name, []) for k in kinds for name in _REGISTRY_KEYS[k]}
        _echo_raw(json.dumps(selected, indent=2))
        return
    for k in kinds:
        entries = registry.get(_REGISTRY_KEYS[k][0], [])
        out.rule(Text(f"{k.value} ({len(entries)})", style="bold"))
        if k in (Kind.policies, Kind.devices, Kind.generators):
            for info in entries:
                _print(*_plugin_block(info))
        elif k is Kind.platforms:
            table = Table(box=box.SIMPLE_HEAD)
            table.add_column("platform", no_wrap=True, style="bold cyan")
            table.add_column("summary")
            for p in entries:
                table.add_row(str(p.get("name")), str(p.get("summary", "")))
            out.print(table)
            # The keys a platform file may set, section by section, from the engine's own specs.
            for section in registry.get("platform_sections", []):
                name = f"[{section.get('name')}]"
                _print(*_plugin_block({"name": name, "summary": "platform file section", **_without(section, "name")}))
        else:
            table = Table(box=box.SIMPLE_HEAD)
            table.add_column("preset", no_wrap=True, style="bold cyan")
            table.add_column("device", no_wrap=True)
            table.add_column("summary")
            table.add_column("source")
            for p in entries:
                table.add_row(
                    str(p.get("name")), str(p.get("device", "")), str(p.get("summary", "")), str(p.get("source", ""))
                )
            out.print(table)


@platform_app.command("show")
def platform_show(
    platform: Annotated[str, typer.Argument(help="Platform preset name or TOML file.")],
    set_: Annotated[list[str] | None, typer.Option("--set", metavar="KEY=VALUE", help="Override; repeatable.")] = None,
) -> None:
    """Print a platform's fully resolved TOML."""
    overrides = _overrides(set_)
    with _user_errors():
        text = tiersim.resolve_platform(platform, overrides)
    _echo_raw(text)


@app.command("sweep")
def sweep_cmd(
    spec: Annotated[Path, typer.Argument(help="Sweep file (TOML, see docs/sweep.md).")],
    output: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="DIR", help="Sweep directory (default: sweeps/SPEC beside the spec)."),
    ] = None,
    workers: Annotated[
        int | None, typer.Option("--workers", "-j", min=1, help="Local worker processes (default: one per CPU).")
    ] = None,
    scheduler: Annotated[
        str | None,
        typer.Option("--scheduler", metavar="ADDRESS", help="Run on the Dask cluster at ADDRESS (tcp://host:8786)."),
    ] = None,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="Rerun runs recorded as failed.")] = False,
) -> None:
    """Run every combination of a sweep file's traces, platforms, policies and overrides."""
    from tiersim import sweep as sw

    if scheduler is not None and workers is not None:
        raise typer.BadParameter("--workers is for local runs; a Dask cluster has its own", param_hint="--workers")
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err,
    )
    state: dict[str, Any] = {}

    def on_progress(rep: sw.SweepReport, run: sw.RunSpec | None) -> None:
        counts = f"ok {rep.ok}  failed {rep.failed}"
        if run is None:
            progress.start()
            where = f"on {scheduler}" if scheduler else f"on {workers or os.cpu_count() or 1} local workers"
            state["task"] = progress.add_task(
                f"sweep {spec.name} {where}", total=rep.total - rep.skipped, counts=counts
            )
            if rep.skipped:
                err.print(Text(f"{rep.skipped} of {rep.total} runs already done in {rep.out_dir}; resuming"))
        else:
            progress.update(state["task"], advance=1, counts=counts)

    interrupted = False
    with _user_errors():
        try:
            rep = sw.run_sweep(
                spec, output, workers=workers, scheduler=scheduler, retry_failed=retry_failed, progress=on_progress
            )
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if "task" in state:
                progress.stop()
    if interrupted:
        err.print(Text("interrupted; finished runs are saved. Run the same command again to resume."))
        raise typer.Exit(130)
    table = _kv_table(
        f"sweep {spec.name}",
        [
            ("runs", _int(rep.total)),
            ("already done", _int(rep.skipped)),
            ("ran ok", _int(rep.ok)),
            ("failed", _int(rep.failed)),
            ("results", str(rep.out_dir / sw.RESULTS_FILE)),
        ],
    )
    _print(table)
    for run, error in rep.failures[:10]:
        err.print(
            Text.assemble(
                ("failed: ", "bold red"),
                f"{run.trace.label} / {run.platform_label} / {run.policy_label} seed {run.seed}: {error}",
            ),
            soft_wrap=True,
        )
    if len(rep.failures) > 10:
        err.print(Text(f"... and {len(rep.failures) - 10} more failures (see the error column)"))


class ImageFormat(StrEnum):
    png = "png"
    svg = "svg"


@app.command("report")
def report_cmd(
    paths: Annotated[
        list[Path], typer.Argument(help="A run directory, several, or a sweep (directory or results.parquet).")
    ],
    output: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="FILE", help="HTML file (default: report.html in the run or sweep directory)."),
    ] = None,
    image_format: Annotated[ImageFormat, typer.Option("--format", help="Image format embedded in the page.")] = ImageFormat.png,
    baseline: Annotated[
        str | None, typer.Option("--baseline", metavar="POLICY", help="Sweep: policy label to normalise to.")
    ] = None,
) -> None:
    """Write a self-contained report.html with plots and a metrics table."""
    from tiersim import report as rp

    with _user_errors():
        with err.status(Text("drawing the report ...")):
            path = rp.write_report(paths, output, fmt=image_format.value, baseline=baseline)
    out.print(Text(f"report: {path}"), soft_wrap=True)


@app.command("compare")
def compare_cmd(
    runs: Annotated[list[Path], typer.Argument(help="Run directories; the first is the baseline.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the table as JSON.")] = False,
) -> None:
    """Print the key metrics of several runs side by side."""
    from tiersim import report as rp

    if len(runs) < 2:
        raise typer.BadParameter("give at least two run directories", param_hint="RUNS")
    with _user_errors():
        loaded = [rp.load_run(p) for p in runs]
    labels = [r.label for r in loaded]
    if len(set(labels)) != len(labels):
        labels = [str(p) for p in runs]
    metrics = [rp.run_metrics(r.summary) for r in loaded]
    base = loaded[0].summary.get("execution_time_ns") or 0
    ratio = ("time / first", [r.summary.get("execution_time_ns", 0) / base if base else None for r in loaded])
    names = list(dict.fromkeys(label for m in metrics for label, _ in m))
    values = {label: [dict(m).get(label) for m in metrics] for label in names}
    order = names[:5] + [ratio[0]] + names[5:]
    values[ratio[0]] = ratio[1]
    if as_json:
        _echo_raw(json.dumps({"runs": labels, "metrics": {k: values[k] for k in order}}, indent=2))
        return
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("metric", style="bold", no_wrap=True)
    for label in labels:
        table.add_column(label, justify="right")
    for key in order:
        table.add_row(key, *(rp._fmt(v) for v in values[key]))
    out.print(table)


@app.command("reproduce")
def reproduce_cmd(
    study: Annotated[str | None, typer.Argument(help="Study name; omit to list the studies.", show_default=False)] = None,
    quick: Annotated[bool, typer.Option("--quick", help="The scaled-down variant that runs in seconds to a minute.")] = False,
    output: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="DIR", help="Output directory (default: reproduce/STUDY[-quick])."),
    ] = None,
    workers: Annotated[int | None, typer.Option("--workers", "-j", min=1, help="Local worker processes for sweeps.")] = None,
) -> None:
    """Reproduce a reference study: run it, compare each finding with the paper, write a report."""
    from tiersim import studies

    if study is None:
        table = Table(box=box.SIMPLE_HEAD)
        for col in ("study", "what", "source", "runtime (2 cores)"):
            table.add_column(col, overflow="fold")
        for s in studies.STUDIES:
            table.add_row(s.name, s.title, s.source, s.runtime)
        out.print(table)
        return
    run_dir = output or Path("reproduce") / (f"{study}-quick" if quick else study)
    with _user_errors():
        studies.get(study)
        with err.status(Text(f"reproducing {study}{' (quick)' if quick else ''} ...")):
            result, path, elapsed = studies.reproduce(study, run_dir, quick=quick, workers=workers)
    table = Table(title=f"{study}: claims", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("finding", "paper", "ours", "criterion", "verdict"):
        table.add_column(col, overflow="fold")
    for c in result.claims:
        verdict = Text("agree", style="green") if c.agree else Text("disagree", style="bold red")
        table.add_row(c.finding, c.paper, c.ours, c.criterion, verdict)
    out.print(table)
    agree = sum(c.agree for c in result.claims)
    out.print(Text(f"{agree} of {len(result.claims)} findings agree; {elapsed:.0f} s; report: {path}"), soft_wrap=True)


# The white paper's CloverLeaf experiment (Micron/AMD, EPYC + 4 CXL modules): interleave over all
# of a socket's nodes with equal weights gives 50:50 in NPS1, 66:34 in NPS2 and 80:20 in NPS4.
DEMO_RUNS = [
    ("DRAM only (NPS1, linux_default)", "dram_only_nps1", "epyc_cxl_nps1", "linux_default"),
    ("interleave 50:50 (NPS1)", "interleave_50_50_nps1", "epyc_cxl_nps1", "interleave"),
    ("interleave 66:34 (NPS2)", "interleave_66_34_nps2", "epyc_cxl_nps2", "interleave"),
    ("interleave 80:20 (NPS4)", "interleave_80_20_nps4", "epyc_cxl_nps4", "interleave"),
]
# The stream kernel: one thread per core of the EPYC 9754, 3 arrays of 64-byte elements. The
# paper measures steady state, so one full pass over the arrays (which takes every first-touch
# fault) is warm-up and not measured.
DEMO_THREADS = 128
DEMO_ARRAYS = 3
DEMO_ACCESS = 64
DEMO_FOOTPRINT = 128 << 20


def _demo_sizes(accesses: int) -> tuple[int, int]:
    """(footprint bytes, warm-up accesses). A short demo shrinks the footprint so that warm-up
    stays a quarter of the run instead of swallowing it."""
    element_bytes = DEMO_ARRAYS * DEMO_ACCESS
    elements = DEMO_FOOTPRINT // element_bytes
    if 4 * elements * DEMO_ARRAYS > accesses:
        elements = max(accesses // 4 // DEMO_ARRAYS, DEMO_THREADS)
    return elements * element_bytes, elements * DEMO_ARRAYS


def _is_cxl(node: dict[str, Any]) -> bool:
    return str(node.get("device", "")).lower().startswith("cxl")


def _is_dram(node: dict[str, Any]) -> bool:
    return str(node.get("device", "")).lower() == "dram"


def _bandwidth(nodes: list[dict[str, Any]], exec_ns: int) -> str:
    """Summed bandwidth of some nodes: the engine's measured-window figure when it reports one."""
    if nodes and all(isinstance(n.get("bandwidth_gbs"), (int, float)) for n in nodes):
        return f"{sum(n['bandwidth_gbs'] for n in nodes):.2f} GB/s"
    return _gbs(sum(n.get("bytes", 0) for n in nodes), exec_ns)


def _change(speedup: float) -> str:
    pct = (speedup - 1.0) * 100.0
    return f"{pct:+.1f}%"


# help= rather than a docstring: typer keeps a docstring's line breaks.
@app.command(
    help="Which DRAM:CXL interleave ratio runs a bandwidth-bound stencil fastest?\n\n"
    "Generates a CloverLeaf-like stream trace and runs it DRAM-only and interleaved 50:50, 66:34 and 80:20 "
    "on the EPYC + CXL platform, as in the Micron/AMD white paper.",
    short_help="Which DRAM:CXL interleave ratio runs a bandwidth-bound stencil fastest?",
)
def demo(
    accesses: Annotated[
        int, typer.Option("--accesses", min=10_000, help="Accesses in the stream trace (a quarter or less is warm-up).")
    ] = 8_000_000,
    output: Annotated[
        Path, typer.Option("--out", "-o", metavar="DIR", help="Directory for the trace and the run directories.")
    ] = Path("runs/demo"),
) -> None:
    trace = output / "stream.trace"
    footprint, warmup = _demo_sizes(accesses)
    overrides = [f"stats.warmup_accesses={warmup}"]
    results: list[tuple[str, dict[str, Any]]] = []
    with _user_errors():
        if output.exists() and not output.is_dir():
            raise tiersim.TiersimError(f"output '{output}' exists and is not a directory")
        for _, slug, _, _ in DEMO_RUNS:
            check_out_dir(output / slug)
        output.mkdir(parents=True, exist_ok=True)
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        ) as progress:
            task = progress.add_task(f"generating stream trace ({accesses:,} accesses)", total=1 + len(DEMO_RUNS))
            tiersim.generate_with(
                "stream",
                trace,
                {
                    "threads": DEMO_THREADS,
                    "arrays": DEMO_ARRAYS,
                    "access_size": DEMO_ACCESS,
                    "footprint": footprint,
                    "accesses": accesses,
                },
                seed=1,
            )
            progress.advance(task)
            for label, slug, platform, policy in DEMO_RUNS:
                progress.update(task, description=f"running {label}")
                r = tiersim.run(
                    trace, platform=platform, policy=policy, overrides=overrides, seed=1, out_dir=output / slug
                )
                results.append((label, r.summary))
                progress.advance(task)

    base_ns = results[0][1]["execution_time_ns"]
    table = Table(
        title=f"stream: {DEMO_ARRAYS} arrays, {_bytes(footprint)}, {DEMO_THREADS} threads, "
        f"{accesses:,} accesses of which {warmup:,} warm-up",
        box=box.SIMPLE_HEAD,
        title_justify="left",
    )
    for name in (
        "config",
        "execution time",
        "speedup vs DRAM-only",
        "CXL share",
        "DRAM bandwidth",
        "CXL bandwidth",
        "p99 latency",
    ):
        table.add_column(name, justify="left" if name == "config" else "right", no_wrap=name != "config")
    speedups = {}
    for label, s in results:
        t = s["execution_time_ns"]
        nodes = s.get("nodes", [])
        cxl_acc = sum(n.get("accesses", 0) for n in nodes if _is_cxl(n))
        speedups[label] = base_ns / t if t else float("nan")
        table.add_row(
            label,
            _ms(t),
            f"{speedups[label]:.3f}x ({_change(speedups[label])})",
            _pct(cxl_acc, s.get("accesses", 0)),
            _bandwidth([n for n in nodes if _is_dram(n)], t),
            _bandwidth([n for n in nodes if _is_cxl(n)], t),
            f"{_num(s.get('latency_ns', {}).get('p99'))} ns",
        )
    out.print(table)

    s50, s66, s80 = (speedups[label] for label, *_ in DEMO_RUNS[1:])
    agrees = s80 > 1.0 and s50 < 1.0 and s66 < 1.0
    out.print(
        Text(
            "White paper (Micron/AMD, CloverLeaf on EPYC + CXL): 80:20 ran 17% faster than DRAM-only, "
            "50:50 and 66:34 ran slower. "
            f"Here: 50:50 {_change(s50)}, 66:34 {_change(s66)}, 80:20 {_change(s80)} vs DRAM-only"
            + (", the same pattern." if agrees else ", which is not the paper's pattern.")
        ),
        soft_wrap=True,
    )
    out.print(Text(f"trace and run directories: {output}"), soft_wrap=True)



def _flash_tables(s: dict[str, Any]) -> list[Table]:
    lat = s.get("latency_ns", {})
    alls = lat.get("all") or {}
    req = s.get("requests", 0)
    rp = s.get("replay", {})
    fl = s.get("flash", {})
    pf = s.get("prefetch", {})
    ms = s.get("mshr", {})
    life = s.get("lifetime", {})

    def frac(x: Any) -> str:
        return f"{100 * x:.1f}%" if isinstance(x, (int, float)) else "-"

    def years(x: Any) -> str:
        return f"{x:,.2f}" if isinstance(x, (int, float)) else "-"

    rows = [
        ("mode", f"{rp.get('mode', '-')}, {_int(rp.get('trace_accesses'))} trace accesses"),
        ("requests", f"{_int(req)} ({_int(s.get('reads'))} reads, {_int(s.get('writes'))} writes)"),
        ("hit / hit under miss / miss", f"{_pct(s.get('hits', 0), req)} / {_pct(s.get('hits_under_miss', 0), req)} / {_pct(s.get('misses', 0), req)}"),
        ("under 1 us", frac(s.get("under_1us_fraction"))),
        ("latency mean / p50 / p99 / max", f"{_num(lat.get('mean_exact'))} / {_int(alls.get('p50'))} / {_int(alls.get('p99'))} / {_int(alls.get('max'))} ns"),
        ("simulated time", _ms(s.get("simulated_ns"))),
        ("flash reads demand / prefetch / duplicate", f"{_int(fl.get('reads_demand'))} / {_int(fl.get('reads_prefetch'))} / {_int(fl.get('reads_duplicate'))}"),
        ("flash programs / erases", f"{_int(fl.get('programs'))} / {_int(fl.get('erases'))}"),
        ("write amplification", _num(fl.get("write_amplification"), 2)),
        ("lifetime (years)", f"{years(life.get('years'))} (worst block {years(life.get('years_worst_block'))}, MQSim formula {years(life.get('years_mqsim_formula'))})"),
        ("prefetcher", f"{pf.get('prefetcher')}: {_int(pf.get('issued'))} issued, accuracy {frac(pf.get('accuracy'))}, coverage {frac(pf.get('coverage'))}, lateness {frac(pf.get('lateness'))}, pollution {frac(pf.get('pollution'))}"),
        ("stalls (MSHR rows / entries / write buffer)", f"{_int(ms.get('stall_rows'))} / {_int(ms.get('stall_entries'))} / {_int(ms.get('stall_write_buffer'))}, {_num(ms.get('stall_behind_ns', 0) / 1e3)} us waited behind them"),
    ]
    if s.get("lines", {}).get("wrapped_addresses"):
        rows.append(("addresses wrapped", f"{_int(s['lines']['wrapped_addresses'])} beyond the device's logical size"))
    return [_kv_table("cxl_flash replay", rows)]


@flash_app.command("replay")
def flash_replay_cmd(
    trace: Annotated[Path, typer.Argument(help="Trace: native, or a text format named with --from (mqsim: `time dev addr size rw`).")],
    preset: Annotated[str | None, typer.Option("--preset", help="cxl_flash_ull, _slc, _mlc or _tlc (default: the device defaults).")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", metavar="KEY=VALUE", help="Device parameter (`tiersim list devices`); repeatable.")] = None,
    from_: Annotated[TraceFormat | None, typer.Option("--from", help=_FROM_HELP)] = None,
    closed_loop: Annotated[int | None, typer.Option("--closed-loop", min=1, metavar="N", help="Keep N accesses outstanding instead of issuing at trace times.")] = None,
    ns_per_instruction: Annotated[float, typer.Option("--ns-per-instruction", min=0.0, help="Time of one instruction, for instruction-count traces.")] = 0.5,
    llc: Annotated[str | None, typer.Option("--llc", metavar="SIZE", help="Host LLC in front of the device, e.g. 8MiB (default none).")] = None,
    hints: Annotated[Path | None, typer.Option("--hints", metavar="FILE", help="Hint file: `time addr [bytes]` lines.")] = None,
    hint_top: Annotated[float | None, typer.Option("--hint-top", min=0.0, max=1.0, help="Hint the hottest fraction of lines (from a first pass).")] = None,
    hint_probability: Annotated[float, typer.Option("--hint-probability", min=0.0, max=1.0, help="Chance an access to a hot line is hinted.")] = 0.1,
    hint_lead: Annotated[int, typer.Option("--hint-lead", min=0, help="Accesses between a hint and its use.")] = 1000,
    limit: Annotated[int, typer.Option("--limit", min=0, help="Replay at most this many accesses (0: all).")] = 0,
    output: Annotated[Path | None, typer.Option("--out", "-o", metavar="DIR", help="Write summary.json, params.toml, histogram.parquet here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print summary.json instead of the table.")] = False,
) -> None:
    """Replay a physical-address trace against one CXL-flash device."""
    params = _pairs(set_, "--set")
    llc_bytes = 0
    if llc is not None:
        try:
            llc_bytes = _size(llc)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--llc") from None
    with _user_errors():
        if output is not None:
            check_flash_dir(output)
        with err.status(Text(f"replaying {trace.name} ...")):
            result = tiersim.flash_replay(
                trace,
                preset=preset,
                params=params,
                src_format=_fmt(from_),
                closed_loop=closed_loop,
                ns_per_instruction=ns_per_instruction,
                llc=llc_bytes,
                hints=hints,
                hint_top=hint_top,
                hint_probability=hint_probability,
                hint_lead=hint_lead,
                limit=limit,
                out_dir=output,
            )
    if as_json:
        _echo_raw(result.summary_json())
    else:
        _print(*_flash_tables(result.summary))
    if output is not None:
        err.print(Text(f"wrote {output}"), soft_wrap=True)


_SIZE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "kB": 1000, "MB": 10**6, "GB": 10**9}


def _size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or (m.group(2) or "B") not in _SIZE_UNITS:
        raise ValueError(f"expected a size like 8MiB, got '{text}'")
    return int(m.group(1)) * _SIZE_UNITS[m.group(2) or "B"]


@flash_app.command("study")
def flash_study_cmd(
    full: Annotated[bool, typer.Option("--full", help="Larger traces (minutes instead of seconds).")] = False,
    comparison: Annotated[
        list[str] | None,
        typer.Option("--comparison", "-c", metavar="NAME", help="Only this comparison (repeatable); default: all."),
    ] = None,
    workers: Annotated[int | None, typer.Option("--workers", "-j", min=1, help="Replays at once (default: one per CPU).")] = None,
    output: Annotated[Path | None, typer.Option("--out", "-o", metavar="FILE", help="Also write the table as CSV.")] = None,
) -> None:
    """Seed 004's comparisons at small scale (cache size, MSHR, replacement, prefetchers, technology,
    parallelism, virtual vs physical traces, host hints); `tiersim reproduce cxl_flash` makes claims of them."""
    with _user_errors():
        with err.status(Text("running the CXL-flash study ...")):
            df = tiersim.flash_study(quick=not full, workers=workers, comparisons=comparison or None)
        if output is not None:
            df.write_csv(output)
    table = Table(title="CXL-flash study (seed 004 comparisons; ours vs the paper)", box=box.SIMPLE_HEAD, title_justify="left")
    for col in df.columns:
        table.add_column(col, justify="left" if df[col].dtype == pl.String else "right", overflow="fold")
    for row in df.iter_rows():
        table.add_row(*(_cell(v) if v is not None else "-" for v in row))
    out.print(table)


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.", is_eager=True)] = False,
) -> None:
    if version:
        _echo_raw(f"tiersim {tiersim.__version__}")
        raise typer.Exit(0)


def main() -> None:
    app(prog_name="tiersim")


if __name__ == "__main__":
    main()
