"""`tiersim workload list|build|capture`: real programs (WiredTiger, Redis, RocksDB, a BFS) as
workloads, each a recipe in tiersim.workloads, captured with their file I/O."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from tiersim.cli._common import (
    _bytes,
    _check_report_path,
    _echo_raw,
    _int,
    _kv_table,
    _pairs,
    _print,
    _user_errors,
    err,
    out,
)

LTO_HELP = (
    "Instrumented path: build with clang and LTO, which inlines the tracing runtime (faster capture; "
    "clang counts fewer loads and stores than gcc: docs/workloads.md). Needs `make clang`."
)

workload_app = typer.Typer(help="Real programs as workloads: list, build, capture.", no_args_is_help=True)


@workload_app.command("list")
def workload_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print the recipes as JSON.")] = False,
) -> None:
    """Every workload recipe with its packages, parameters and the real size it stands for."""
    from tiersim import workloads

    items = workloads.list_workloads()
    if as_json:
        _echo_raw(json.dumps(items, indent=2))
        return
    t = Table(box=box.SIMPLE_HEAD)
    for col in ("workload", "what", "packages", "capture path", "installed"):
        t.add_column(col)
    for w in items:
        t.add_row(
            w["name"],
            w["summary"],
            " ".join(w["packages"]),
            ", ".join(w["paths"]),
            "yes" if w["installed"] else "no (make workloads)",
        )
    _print(t)
    for w in items:
        p = Table(title=f"{w['name']}: {w['stands_for']}", box=box.SIMPLE_HEAD, title_justify="left")
        for col in ("parameter", "default", "meaning"):
            p.add_column(col)
        for k, v in w["params"].items():
            p.add_row(k, str(v["default"]), v["help"])
        _print(p)


@workload_app.command("build")
def workload_build(
    name: Annotated[str, typer.Argument(help="Workload (see `tiersim workload list`).")],
    path: Annotated[
        str | None, typer.Option("--path", help="valgrind or instrumented (default: the recipe's).")
    ] = None,
    lto: Annotated[bool, typer.Option("--lto", help=LTO_HELP)] = False,
) -> None:
    """Check the workload's packages and build its program (our own drivers); print its path."""
    from tiersim import workloads

    with _user_errors():
        exe = workloads.build(name, path, lto)
    _echo_raw(str(exe) if exe is not None else f"{name}: a packaged program, nothing to build")


@workload_app.command("capture")
def workload_capture(
    name: Annotated[str, typer.Argument(help="Workload (see `tiersim workload list`).")],
    output: Annotated[Path, typer.Option("--out", "-o", metavar="FILE", help="Trace to write.")],
    param: Annotated[
        list[str] | None, typer.Option("--param", metavar="KEY=VALUE", help="A recipe parameter; repeatable.")
    ] = None,
    path: Annotated[
        str | None, typer.Option("--path", help="valgrind or instrumented (default: the recipe's).")
    ] = None,
    llc: Annotated[str, typer.Option("--llc", help="LLC size of the capture's cache filter.")] = "16MiB",
    cpu_map: Annotated[str | None, typer.Option("--cpu-map", help="CPUs of the threads, as for capture.")] = None,
    workdir: Annotated[
        Path | None, typer.Option("--dir", help="Directory (file system) the program's files live in.")
    ] = None,
    report: Annotated[Path | None, typer.Option("--report", metavar="FILE", help="Write the report as JSON.")] = None,
    lto: Annotated[bool, typer.Option("--lto", help=LTO_HELP)] = False,
) -> None:
    """Run the workload's program, capture its memory and file I/O into one trace."""
    from tiersim import workloads

    params = _pairs(param, "--param")
    _check_report_path(report)
    with _user_errors():
        with err.status(Text(f"capturing {name} ...")):
            rep = workloads.capture_workload(
                name, output, params=params, path=path, llc=llc, cpu_map=cpu_map, workdir=workdir, lto=lto
            )
        if report is not None:
            workloads.save_report(rep, report)
    _print(_summary(rep))


def _files(fio: dict[str, Any]) -> str:
    """The files the trace holds (one size record each, as `trace inspect --io` counts them), and
    their paths when fewer: a path reused for a new file (a log rotated, a table rewritten)."""
    files, paths = fio["size_records"]["files"], len(fio["files"])
    return _int(files) if files == paths else f"{_int(files)} ({_int(paths)} paths)"


def _client_text(client: dict[str, Any]) -> str:
    """What the load generator measured: its result lines, then the server's figures."""
    parts: list[str] = []
    for key, value in client.items():
        if key == "benchmark_status":
            continue
        if isinstance(value, list):
            parts.extend(str(v) for v in value)
        elif isinstance(value, int) and ("memory" in key or key == "bytes"):
            parts.append(f"{key} {_bytes(value)}")
        elif isinstance(value, int):
            parts.append(f"{key} {_int(value)}")
        else:
            parts.append(f"{key} {value}")
    return "; ".join(parts)


def _summary(rep: dict[str, Any]) -> Table:
    info = rep["inspect"]
    fio = rep["fileio"]
    cap = rep["capture"]
    rows = [
        ("program", " ".join(rep["argv"])),
        ("program reports", " ".join(f"{k}={v}" for k, v in rep["program"].items()) or "-"),
        ("capture path", rep["path"] + (", built with clang and LTO" if rep.get("lto") else "")),
        ("threads", str(len([c for c in info.get("per_cpu") or [] if c]))),
        ("records", _int(info.get("accesses"))),
        ("footprint", f"{_int(info.get('footprint_pages'))} pages, {_bytes(info.get('footprint_bytes'))}"),
        ("file calls in trace", " ".join(f"{k}={v}" for k, v in fio["calls_in_trace"].items())),
        ("file bytes read / written", f"{_bytes(fio['bytes']['read'])} / {_bytes(fio['bytes']['write'])}"),
        ("files", _files(fio)),
        ("program's files on disk", _bytes(rep["disk_bytes"])),
        ("trace", f"{info.get('path')} ({_bytes(info.get('compressed_bytes'))})"),
        ("time", f"{rep['elapsed_s']:.1f} s"),
    ]
    if cap.get("instructions"):
        rows.insert(3, ("instructions", _int(cap["instructions"])))
    if rep.get("client"):
        rows.insert(2, ("client", _client_text(rep["client"])))
    if fio["markers_missing"]:
        out.print(Text(f"note: {fio['markers_missing']} logged calls were not placed in the trace"))
    return _kv_table(f"workload {rep['workload']}", rows)
