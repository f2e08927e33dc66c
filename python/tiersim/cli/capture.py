"""`tiersim capture`: trace a program under Valgrind, or one built with -fsanitize=thread and
tiersim's tracing runtime (--instrumented), or filter a stored lackey log."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from tiersim._convert import parse_cli_value
from tiersim.cli._common import (
    Number,
    Terminated,
    _bytes,
    _check_report_path,
    _int,
    _interrupt_status,
    _kv_table,
    _merge_shortcuts,
    _pairs,
    _pct,
    _user_errors,
    app,
    err,
)


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
    "model, and the same records with virtual addresses beside them. Each thread's records carry its CPU "
    "(--cpu-map).\n\n"
    "--instrumented runs a program compiled with -fsanitize=thread and linked with tiersim's tracing runtime "
    "(the object --build-runtime prints) instead: much faster, threads run concurrently (docs/capture.md).\n\n"
    "The program keeps its stdin, stdout and stderr; tiersim's own output goes to stderr. "
    "If the program exits with a non-zero status (or is killed by a signal: 128 + its number), the trace "
    "is still written and tiersim capture exits with that status.",
    short_help="Run a program under Valgrind and write its memory trace.",
)
def capture_cmd(
    output: Annotated[
        Path | None,
        typer.Option("--out", "-o", metavar="FILE", help="Trace to write (physical addresses unless --v2p none)."),
    ] = None,
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
        int | None,
        typer.Option("--llc-ways", parser=Number(int, 1, 64), help=_capture_help("llc_ways", "LLC associativity")),
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
            parser=Number(float, 0.0, 0.99),
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
    seed: Annotated[int, typer.Option(parser=Number(int, 0), help="Seed of the buddy model's fragmentation.")] = 0,
    report: Annotated[
        Path | None, typer.Option("--report", metavar="FILE", help="Also write the capture report as JSON.")
    ] = None,
    cpu_map: Annotated[
        str | None,
        typer.Option(
            "--cpu-map",
            metavar="CPUS",
            help=_capture_help("cpu_map", "CPU of each thread in creation order, main thread first, e.g. 0-1,16-17"),
        ),
    ] = None,
    llc_scope: Annotated[
        str | None,
        typer.Option(
            "--llc-scope", metavar="per_cpu|shared", help=_capture_help("llc_scope", "One LLC per CPU, or one for all")
        ),
    ] = None,
    zstd_level: Annotated[
        int | None,
        typer.Option(
            "--zstd-level",
            parser=Number(int, -131072, 22),
            help=_capture_help(
                "zstd_level",
                "zstd level of the traces: negative levels are zstd's fast ones (less CPU a record, larger files); "
                "the records are the same at any level",
            ),
        ),
    ] = None,
    instrumented: Annotated[
        bool,
        typer.Option(
            "--instrumented",
            help="PROG was built with -fsanitize=thread and linked with tiersim's tracing runtime: run it as it is, "
            "not under Valgrind.",
        ),
    ] = False,
    valgrind_tool: Annotated[
        str,
        typer.Option(
            "--valgrind-tool",
            metavar="tiersim|lackey|qemu",
            help="Under Valgrind: tiersim's own tool (fast: filters inside Valgrind, binary records) or lackey "
            "(its text filtered here; the fallback); qemu: under QEMU user mode (qemu-x86_64) with tiersim's "
            "plugin instead of Valgrind (no pagemap: physical addresses from the buddy model).",
        ),
    ] = "tiersim",
    build_runtime: Annotated[
        bool,
        typer.Option(
            "--build-runtime",
            help="Build the tracing runtime (if not built yet) and print the path of its object file, to link "
            "into -fsanitize=thread programs: cc prog.o $(tiersim capture --build-runtime) -pthread -ldl.",
        ),
    ] = False,
    lto: Annotated[
        bool,
        typer.Option(
            "--lto",
            help="With --build-runtime: the runtime as LLVM bitcode (built with clang), for programs compiled "
            "with clang -flto -fsanitize=thread and linked with clang -flto -fuse-ld=lld, whose link inlines its "
            "per-access path (docs/capture.md).",
        ),
    ] = False,
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
    from tiersim._capture import (
        CaptureProgress,
        CaptureResult,
        capture,
        capture_instrumented,
        capture_lackey,
        runtime_object,
    )

    if build_runtime:
        with _user_errors():
            print(runtime_object(lto=lto))
        return
    if lto:
        raise typer.BadParameter("--lto goes with --build-runtime", param_hint="--lto")
    if output is None:
        raise typer.BadParameter("a trace to write is needed", param_hint="--out / -o")
    _check_report_path(report)
    params = _pairs(param, "--param")
    shortcuts = {
        "llc": ("--llc", None if llc is None else parse_cli_value(llc)),
        "llc_ways": ("--llc-ways", llc_ways),
        "v2p": ("--v2p", v2p),
        "phys_mem": ("--phys-mem", None if phys_mem is None else parse_cli_value(phys_mem)),
        "fragmentation": ("--fragmentation", fragmentation),
        "page_size": ("--page-size", None if page_size is None else parse_cli_value(page_size)),
        "cpu_map": ("--cpu-map", cpu_map),
        "llc_scope": ("--llc-scope", llc_scope),
        "zstd_level": ("--zstd-level", zstd_level),
    }
    _merge_shortcuts(params, shortcuts)
    if (lackey is None) == (not command):
        raise typer.BadParameter("give either -- PROG [ARGS]... or --lackey FILE", param_hint="PROG / --lackey")
    if instrumented and lackey is not None:
        raise typer.BadParameter("--instrumented runs a program; --lackey reads a log: give one", param_hint="--lackey")
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
        how = "with the tracing runtime" if instrumented else "under valgrind"
        with err.status(Text(f"starting {prog} {how} ...")) as status:

            def show(p: CaptureProgress) -> None:
                # The instrumented path's records are counted as tiersim merges them, while the
                # program runs; the Valgrind tool and QEMU write record files, merged after it.
                if instrumented or (valgrind_tool in ("tiersim", "qemu") and p.records):
                    status.update(Text(f"capturing {prog}: {p.records / 1e6:,.2f} M records, {p.elapsed_s:,.1f} s"))
                    return
                if valgrind_tool in ("tiersim", "qemu"):
                    status.update(
                        Text(f"capturing {prog}: {_bytes(p.input_bytes)} of record files, {p.elapsed_s:,.1f} s")
                    )
                    return
                rate = p.instructions / p.elapsed_s if p.elapsed_s > 0 else 0.0
                status.update(
                    Text(
                        f"capturing {prog}: {p.instructions / 1e6:,.1f} M instructions, "
                        f"{p.data_accesses / 1e6:,.1f} M loads/stores, {p.records / 1e6:,.2f} M records "
                        f"({rate / 1e6:,.1f} M instructions/s)"
                    )
                )

            try:
                if instrumented:
                    result = capture_instrumented(
                        command, output, virt_out=virt_out, params=params, seed=seed, on_progress=show
                    )
                else:
                    result = capture(
                        command,
                        output,
                        virt_out=virt_out,
                        params=params,
                        seed=seed,
                        on_progress=show,
                        tool=valgrind_tool,
                    )
            except (KeyboardInterrupt, Terminated) as exc:
                err.print(
                    Text.assemble(
                        ("error: ", "bold red"), "interrupted: the program was killed and no trace was written"
                    ),
                    soft_wrap=True,
                )
                raise typer.Exit(_interrupt_status(exc)) from None
        if report is not None:
            report.write_text(json.dumps(_capture_json(result), indent=2) + "\n")
    for t in _capture_tables(result):
        err.print(t)
    if result.exit_status != 0:
        err.print(
            Text.assemble(
                ("warning: ", "bold yellow"),
                f"{prog} {result.how_it_ended()}; the trace covers its run until then, and tiersim capture exits with "
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
        else [
            ("program", " ".join(result.argv)),
            ("path", r["path"]),
            ("exit status", str(result.exit_status)),
        ]
    )
    estimate = r["path"] == "instrumented"
    rows += [
        (
            "instructions",
            _int(r["instructions"])
            + (f" (estimate: {r['params']['instructions_per_access']} per load or store)" if estimate else ""),
        ),
        ("loads / stores / modifies", f"{_int(r['loads'])} / {_int(r['stores'])} / {_int(r['modifies'])}"),
    ]
    llc = r.get("llc")
    if llc:
        accesses = llc["hits"] + llc["misses"]
        rows.append(
            (
                "LLC",
                f"{_bytes(llc['size'])}, {llc['ways']} ways, {llc['line_size']} B lines, "
                f"{'one per CPU' if llc['scope'] == 'per_cpu' else 'shared'}: "
                f"{_int(llc['misses'])} misses ({_pct(llc['misses'], accesses)} of {_int(accesses)} line accesses), "
                f"{_int(llc['writebacks'])} writebacks",
            )
        )
    else:
        rows.append(("LLC", "none: every load and store is recorded"))
    threads = r.get("threads") or []
    if len(threads) > 1:
        total = sum(t["records"] for t in threads)
        rows.append(
            (
                "threads (thread: CPU, records)",
                ", ".join(f"{t['thread']}: {t['cpu']}, {_pct(t['records'], total)}" for t in threads),
            )
        )
        if r.get("thread_numbering") == "start_order":
            # No preload shim announced the threads (a static program): the numbers are a guess.
            rows.append(("thread numbers", "from start order, not announced (a static program?): see docs/capture.md"))
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
