"""`tiersim trace ...`: inspect, convert, sample and analyse trace files."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

import tiersim
from tiersim._options import I64_MAX, MAX_NS_PER_INSTRUCTION, U32_MAX
from tiersim.cli._common import (
    _FROM_HELP,
    Number,
    TraceFormat,
    _bytes,
    _echo_raw,
    _fmt,
    _inspect_tables,
    _int,
    _kv_table,
    _print,
    _user_errors,
    out,
)

trace_app = typer.Typer(help="Trace files: inspect, verify, convert, sample, statistics.", no_args_is_help=True)


@trace_app.command("inspect")
def trace_inspect(
    file: Annotated[Path, typer.Argument(help="Trace file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the statistics as JSON.")] = False,
    io: Annotated[
        bool,
        typer.Option("--io", help="Also read every record: records and bytes by kind (memory, file mapping, calls)."),
    ] = False,
) -> None:
    """Print a trace's header and statistics."""
    with _user_errors():
        info = tiersim.inspect(file)
        if io:
            st = tiersim.trace_stats(file, max_points=2)
            info["by_kind"], info["sync_records"] = st["by_kind"], st["sync_records"]
            info["futex_records"] = st.get("futex_records")
            info["size_records"] = st.get("size_records")
    if as_json:
        _echo_raw(json.dumps(info, sort_keys=True, indent=2))
    else:
        tables = (
            [_io_table(info["by_kind"], info["sync_records"], info["futex_records"], info["size_records"])]
            if io
            else []
        )
        _print(*_inspect_tables(info), *tables)


_KIND_NAMES = {
    "anonymous": "anonymous memory",
    "file_mapping": "file mapping (loads/stores)",
    "syscall": "read/write calls (page cache)",
    "direct": "O_DIRECT calls",
}


def _io_table(
    by_kind: dict[str, dict[str, int]],
    syncs: dict[str, int] | None = None,
    futex: dict[str, int] | None = None,
    sizes: dict[str, int] | None = None,
) -> Table:
    """Records and bytes per kind of record and direction, with each kind's share of the bytes;
    then the file sync records (fsync, fdatasync), the futex records (waits, wakes between
    threads) and the file size records (files whose size at open the trace says, and of those
    the files empty then), which move no bytes, when there are any."""
    total = sum(k["read_bytes"] + k["write_bytes"] for k in by_kind.values()) or 1
    t = Table(title="records by kind", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("kind", "reads", "read bytes", "writes", "write bytes", "share of bytes"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    for key in sorted(by_kind, key=lambda k: list(_KIND_NAMES).index(k) if k in _KIND_NAMES else 99):
        k = by_kind[key]
        t.add_row(
            _KIND_NAMES.get(key, key),
            _int(k["reads"]),
            _bytes(k["read_bytes"]),
            _int(k["writes"]),
            _bytes(k["write_bytes"]),
            f"{100 * (k['read_bytes'] + k['write_bytes']) / total:.1f}%",
        )
    for name, n in (syncs or {}).items():
        if n:
            t.add_row(f"{name} calls (sync records)", "", "", _int(n), "", "")
    if futex and (futex.get("wait") or futex.get("wake")):
        t.add_row("futex waits / wakes (between threads)", _int(futex["wait"]), "", _int(futex["wake"]), "", "")
    if sizes and sizes.get("files"):
        # Not calls: how many files the trace says the size of at open, and how many of them were
        # empty then (created or truncated by that open), in the reads and writes columns.
        t.add_row("files sized at open / empty then", _int(sizes["files"]), "", _int(sizes["empty_at_open"]), "", "")
    return t


@trace_app.command("verify")
def trace_verify(
    file: Annotated[Path, typer.Argument(help="Trace file.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the statistics as JSON.")] = False,
) -> None:
    """Decode every frame, check every record and checksum, and recompute the statistics; exit 1
    naming the offset of the first thing that is wrong."""
    with _user_errors():
        info = tiersim.verify(file)
    if as_json:
        _echo_raw(json.dumps(info, sort_keys=True, indent=2))
    else:
        _print(*_inspect_tables(info))


class AddrKindOpt(StrEnum):
    virtual = "virtual"
    physical = "physical"


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
    page_size: Annotated[
        int, typer.Option("--page-size", parser=Number(int, 64, U32_MAX), help="Page size recorded for text input.")
    ] = 4096,
    ns_per_instruction: Annotated[
        float,
        typer.Option(
            "--ns-per-instruction",
            parser=Number(float, 0.0, MAX_NS_PER_INSTRUCTION),
            help="Instruction trace to MQSim: ns per instruction.",
        ),
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
        int | None,
        typer.Option(
            parser=Number(int, 0), help="Window start: ns, or the CPU's instruction count for instruction traces."
        ),
    ] = None,
    end: Annotated[int | None, typer.Option(parser=Number(int, 0), help="Window end (exclusive), same unit.")] = None,
    cpus: Annotated[str | None, typer.Option(help="Only these CPUs, e.g. 0,2,4-7.")] = None,
    every: Annotated[
        int, typer.Option(parser=Number(int, 1), help="Keep every Nth of the selected accesses of each CPU.")
    ] = 1,
    from_: Annotated[TraceFormat | None, typer.Option("--from", help=_FROM_HELP)] = None,
) -> None:
    """Make a small trace: a time window, a CPU subset, every Nth access of each CPU."""
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
    max_points: Annotated[
        int, typer.Option("--max-points", parser=Number(int, 2, I64_MAX), help="Scatter points kept at most.")
    ] = 100_000,
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
        (
            "hottest 1% / 10% of pages",
            f"{100 * stats['hotness']['top_1pct_share']:.1f}% / "
            f"{100 * stats['hotness']['top_10pct_share']:.1f}% of accesses",
        ),
        ("first touches", _int(stats["reuse_distance"]["cold"])),
    ]
    if stats.get("mapping_records"):
        # Not accesses: the file bounds of mapped files, which the counts above leave out.
        rows.append(
            ("file mapping records", f"{_int(stats['mapping_records'])} ({_bytes(stats['mapped_bytes'])} of files)")
        )
    tables: list[Any] = [
        _kv_table("trace statistics", rows),
        _io_table(stats["by_kind"], stats.get("sync_records"), stats.get("futex_records"), stats.get("size_records")),
    ]
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
