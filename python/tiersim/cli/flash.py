"""`tiersim flash ...`: replay a trace against a CXL-flash device, run seed 004's comparisons."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

import tiersim
from tiersim._options import MAX_NS_PER_INSTRUCTION, MAX_WORKERS, U32_MAX
from tiersim.cli._common import (
    _FROM_HELP,
    Number,
    Size,
    TraceFormat,
    _accesses_progress,
    _cell,
    _echo_raw,
    _fmt,
    _int,
    _kv_table,
    _ms,
    _num,
    _pairs,
    _pct,
    _print,
    _user_errors,
    err,
    out,
)

flash_app = typer.Typer(
    help="CXL-flash device (seed 004): replay a trace against it, run the paper's comparisons.", no_args_is_help=True
)


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
        (
            "hit / hit under miss / miss",
            f"{_pct(s.get('hits', 0), req)} / {_pct(s.get('hits_under_miss', 0), req)} / {_pct(s.get('misses', 0), req)}",
        ),
        ("under 1 us", frac(s.get("under_1us_fraction"))),
        (
            "latency mean / p50 / p99 / max",
            f"{_num(lat.get('mean_exact'))} / {_int(alls.get('p50'))} / {_int(alls.get('p99'))} / {_int(alls.get('max'))} ns",
        ),
        ("simulated time", _ms(s.get("simulated_ns"))),
        (
            "flash reads demand / prefetch / duplicate",
            f"{_int(fl.get('reads_demand'))} / {_int(fl.get('reads_prefetch'))} / {_int(fl.get('reads_duplicate'))}",
        ),
        ("flash programs / erases", f"{_int(fl.get('programs'))} / {_int(fl.get('erases'))}"),
        ("write amplification", _num(fl.get("write_amplification"), 2)),
        (
            "lifetime (years)",
            f"{years(life.get('years'))} (worst block {years(life.get('years_worst_block'))}, MQSim formula {years(life.get('years_mqsim_formula'))})",
        ),
        (
            "prefetcher",
            f"{pf.get('prefetcher')}: {_int(pf.get('issued'))} issued, accuracy {frac(pf.get('accuracy'))}, coverage {frac(pf.get('coverage'))}, lateness {frac(pf.get('lateness'))}, pollution {frac(pf.get('pollution'))}",
        ),
        (
            "stalls (MSHR rows / entries / write buffer)",
            f"{_int(ms.get('stall_rows'))} / {_int(ms.get('stall_entries'))} / {_int(ms.get('stall_write_buffer'))}, {_num(ms.get('stall_behind_ns', 0) / 1e3)} us waited behind them",
        ),
    ]
    if s.get("lines", {}).get("wrapped_addresses"):
        rows.append(("addresses wrapped", f"{_int(s['lines']['wrapped_addresses'])} beyond the device's logical size"))
    return [_kv_table("cxl_flash replay", rows)]


@flash_app.command("replay")
def flash_replay_cmd(
    trace: Annotated[
        Path, typer.Argument(help="Trace: native, or a text format named with --from (mqsim: `time dev addr size rw`).")
    ],
    preset: Annotated[
        str | None, typer.Option("--preset", help="cxl_flash_ull, _slc, _mlc or _tlc (default: the device defaults).")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help="Device parameter (`tiersim list devices`); repeatable."),
    ] = None,
    from_: Annotated[TraceFormat | None, typer.Option("--from", help=_FROM_HELP)] = None,
    closed_loop: Annotated[
        int | None,
        typer.Option(
            "--closed-loop",
            parser=Number(int, 1, U32_MAX),
            metavar="N",
            help="Keep N accesses outstanding instead of issuing at trace times.",
        ),
    ] = None,
    ns_per_instruction: Annotated[
        float,
        typer.Option(
            "--ns-per-instruction",
            parser=Number(float, 0.0, MAX_NS_PER_INSTRUCTION),
            help="Time of one instruction, for instruction-count traces.",
        ),
    ] = 0.5,
    llc: Annotated[
        int | None,
        typer.Option(
            "--llc", parser=Size(), metavar="SIZE", help="Host LLC in front of the device, e.g. 8MiB (default none)."
        ),
    ] = None,
    hints: Annotated[
        Path | None, typer.Option("--hints", metavar="FILE", help="Hint file: `time addr [bytes]` lines.")
    ] = None,
    hint_top: Annotated[
        float | None,
        typer.Option(
            "--hint-top", parser=Number(float, 0.0, 1.0), help="Hint the hottest fraction of lines (from a first pass)."
        ),
    ] = None,
    hint_probability: Annotated[
        float,
        typer.Option(
            "--hint-probability", parser=Number(float, 0.0, 1.0), help="Chance an access to a hot line is hinted."
        ),
    ] = 0.1,
    hint_lead: Annotated[
        int, typer.Option("--hint-lead", parser=Number(int, 0, U32_MAX), help="Accesses between a hint and its use.")
    ] = 1000,
    limit: Annotated[
        int, typer.Option("--limit", parser=Number(int, 0), help="Replay at most this many accesses (0: all).")
    ] = 0,
    output: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="DIR", help="Write summary.json, params.toml, histogram.parquet here."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print summary.json instead of the table.")] = False,
) -> None:
    """Replay a physical-address trace against one CXL-flash device."""
    params = _pairs(set_, "--set")
    with _user_errors():
        if output is not None:
            from tiersim._flash import check_flash_dir

            check_flash_dir(output)
        with _accesses_progress(f"{trace.name} on {preset or 'cxl_flash'}") as progress:
            result = tiersim.flash_replay(
                trace,
                preset=preset,
                params=params,
                src_format=_fmt(from_),
                closed_loop=closed_loop,
                ns_per_instruction=ns_per_instruction,
                llc=llc or 0,
                hints=hints,
                hint_top=hint_top,
                hint_probability=hint_probability,
                hint_lead=hint_lead,
                limit=limit,
                out_dir=output,
                progress=_limited(progress, limit),
            )
    if as_json:
        _echo_raw(result.summary_json())
    else:
        _print(*_flash_tables(result.summary))
    if output is not None:
        err.print(Text(f"wrote {output}"), soft_wrap=True)


def _limited(
    progress: Callable[[int, int | None], None] | None, limit: int
) -> Callable[[int, int | None], None] | None:
    """With --limit, the replay stops there: the bar's total is the smaller of the two."""
    if progress is None or not limit:
        return progress
    return lambda done, total: progress(done, min(total, limit) if total is not None else limit)


@flash_app.command("study")
def flash_study_cmd(
    full: Annotated[bool, typer.Option("--full", help="Larger traces (minutes instead of seconds).")] = False,
    comparison: Annotated[
        list[str] | None,
        typer.Option("--comparison", "-c", metavar="NAME", help="Only this comparison (repeatable); default: all."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers", "-j", parser=Number(int, 1, MAX_WORKERS), help="Replays at once (default: one per CPU)."
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--out", "-o", metavar="FILE", help="Also write the table as CSV.")
    ] = None,
) -> None:
    """Seed 004's comparisons at small scale (cache size, MSHR, replacement, prefetchers, technology,
    parallelism, virtual vs physical traces, host hints); `tiersim reproduce cxl_flash` makes claims of them."""
    with _user_errors():
        with err.status(Text("running the CXL-flash study ...")):
            df = tiersim.flash_study(quick=not full, workers=workers, comparisons=comparison or None)
        if output is not None:
            df.write_csv(output)
    import polars as pl

    table = Table(
        title="CXL-flash study (seed 004 comparisons; ours vs the paper)", box=box.SIMPLE_HEAD, title_justify="left"
    )
    for col in df.columns:
        table.add_column(col, justify="left" if df[col].dtype == pl.String else "right", overflow="fold")
    for row in df.iter_rows():
        table.add_row(*(_cell(v) if v is not None else "-" for v in row))
    out.print(table)
