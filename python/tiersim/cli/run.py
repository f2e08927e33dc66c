"""`tiersim run`: simulate a trace or a generator and write a run directory."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

import tiersim
from tiersim.cli._common import (
    Number,
    _accesses_progress,
    _bytes,
    _echo_raw,
    _gbs,
    _int,
    _kv_table,
    _ms,
    _num,
    _overrides,
    _pairs,
    _pct,
    _print,
    _user_errors,
    app,
    err,
    out,
)


def _lens(s: dict[str, object]) -> str:
    lens = s.get("lens")
    if not isinstance(lens, dict):
        return "-"
    same = "the lens" if lens.get("consistent") else "DIFFER"
    return f"{lens.get('scale')} / {lens.get('daemon_time_scale')} ({same})"


def _cell(v: object) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _print_warnings(s: dict[str, object]) -> None:
    from tiersim._result import run_warnings

    for w in run_warnings(s):
        err.print(Text.assemble(("warning: ", "bold yellow"), w), soft_wrap=True)


def _nodes_table(s: dict[str, Any], exec_ns: int, total: int, compact: bool) -> Table:
    """compact (an 80-column terminal): bandwidth without its unit in the cells, and final pages
    above capacity in one cell, so that 8 figures of up to 11 digits fit in 80 columns."""
    page_size = s.get("page_size")
    sep = "\n" if compact else " "
    # Compact also drops the padding at the table's edges (2 columns).
    nodes = Table(
        title="memory nodes", box=box.SIMPLE_HEAD, title_justify="left", pad_edge=not compact, show_edge=not compact
    )
    headers = (
        "node",
        "device",
        "tier",
        "accesses",
        "share",
        "bytes",
        "GB/s" if compact else "bandwidth",
        "final pages / capacity",
    )
    for name in headers:
        numeric = name not in ("node", "device")
        # Figures never wrap; in the compact form the header of the last column may.
        wrap = not numeric or name.startswith("final")
        nodes.add_column(name, justify="right" if numeric else "left", no_wrap=not wrap)
    for n in s.get("nodes", []):
        cap = n.get("capacity_bytes")
        cap_pages = n.get("capacity_pages")
        if cap_pages is None and isinstance(page_size, int) and isinstance(cap, int) and page_size > 0:
            cap_pages = cap // page_size
        # The engine's bandwidth covers the measured window (after warm-up); bytes / execution
        # time is the fallback for summaries that lack it.
        bandwidth = n.get("bandwidth_gbs")
        gbs = f"{bandwidth:.2f} GB/s" if isinstance(bandwidth, (int, float)) else _gbs(n.get("bytes", 0), exec_ns)
        capacity = _int(cap_pages) if cap_pages is not None else _bytes(cap)
        nodes.add_row(
            str(n.get("name")),
            str(n.get("device")),
            str(n.get("tier", "-")),
            _int(n.get("accesses")),
            _pct(n.get("accesses", 0), total),
            _bytes(n.get("bytes")),
            gbs.removesuffix(" GB/s") if compact else gbs,
            Text(f"{_int(n.get('final_pages'))} /{sep}{capacity}", no_wrap=True),
        )
    return nodes


def _summary_tables(result: tiersim.RunResult, console: Console) -> list[Table]:
    """The run table and the memory-node table, the latter in its compact form when the wide
    one does not fit `console`: figures are never cut."""
    s = result.summary
    lat = s.get("latency_ns", {})
    exec_ns = s.get("execution_time_ns", 0)
    total = s.get("accesses", 0)
    rows = [
        ("platform", str(s.get("platform", "-"))),
        ("policy", str(s.get("policy", "-"))),
        ("trace", str(s.get("trace", "-"))),
        ("seed", str(s.get("seed", "-"))),
        ("scale / daemon_time_scale", _lens(s)),
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
        if faults.get("major") or faults.get("minor_file"):
            rows.append(
                (
                    "file mapping faults",
                    f"{_int(faults.get('major'))} major (read the device), "
                    f"{_int(faults.get('minor_file'))} minor (page cached)",
                )
            )
    for note in s.get("notes") or []:
        rows.append(("note", str(note)))
    swap = s.get("swap") or {}
    if swap.get("swap_ins") or swap.get("swap_outs"):
        rows.append(("swap ins / outs", f"{_int(swap.get('swap_ins'))} / {_int(swap.get('swap_outs'))}"))
    if swap.get("file_drops"):
        rows.append(
            (
                "page cache",
                f"{_int(swap.get('file_drops'))} dropped ({_int(swap.get('file_writebacks'))} written back), "
                f"{_int(swap.get('file_refaults'))} read back",
            )
        )
    pc = s.get("page_cache") or {}
    if pc.get("read_calls") or pc.get("write_calls"):
        rows.append(
            (
                "file calls",
                f"{_int(pc.get('read_calls'))} reads, {_int(pc.get('write_calls'))} writes, "
                f"mean {_num(pc.get('mean_call_ns'))} ns; page-cache hit ratio {100 * pc.get('hit_ratio', 0):.2f}%",
            )
        )
        rows.append(
            (
                "writeback",
                f"{_int(pc.get('writeback_bytes'))} B ({_int(pc.get('writeback_pages_flusher'))} pages by the flusher, "
                f"{_int(pc.get('writeback_pages_reclaim'))} by reclaim), {_int(pc.get('dirty_pages'))} pages still dirty",
            )
        )
    direct = pc.get("direct") or {}
    if direct.get("read_calls") or direct.get("write_calls"):
        rows.append(
            (
                "O_DIRECT calls",
                f"{_int(direct.get('read_calls'))} reads, {_int(direct.get('write_calls'))} writes in "
                f"{_int(direct.get('requests'))} requests; {_int(direct.get('flushed_pages'))} cached pages written "
                f"back first, {_int(direct.get('invalidated_pages'))} dropped; mean of all calls {_num(pc.get('mean_call_ns'))} ns",
            )
        )
    dax = pc.get("dax") or {}
    if dax:
        rows.append(
            (
                "DAX (" + str(dax.get("mode")) + ")",
                f"{_int(dax.get('calls'))} calls, {_int(dax.get('faults'))} faults, "
                f"{_int(dax.get('accesses'))} loads/stores",
            )
        )
    series = s.get("timeseries") or {}
    if series.get("coarsened"):
        rows.append(
            (
                "time series",
                f"coarsened: epoch {_int(series.get('requested_epoch_ns'))} ns -> {_int(series.get('epoch_ns'))} ns "
                f"(stats.max_epochs = {_int(series.get('max_epochs'))})",
            )
        )

    from tiersim._result import regime_rows
    from tiersim.bound import BOUND, bound_lines

    rows += [(label, _cell(v)) for label, v in regime_rows(s) if v is not None]
    rows += [(BOUND, line.removeprefix(f"{BOUND}: ")) for line in bound_lines(s)]

    nodes = _nodes_table(s, exec_ns, total, compact=False)
    if console.measure(nodes, options=console.options.update(max_width=10_000)).maximum > console.width:
        nodes = _nodes_table(s, exec_ns, total, compact=True)
    return [_kv_table("run", rows), nodes]


def _saved_run(platform: str) -> tuple[str, dict[str, Any]]:
    """A run directory (or its config.toml) given as the platform: the config file to load and
    its [run] table, whose policy, parameters and seed apply unless given again."""
    path = Path(platform)
    if path.is_dir() and (path / "config.toml").is_file():
        path = path / "config.toml"
    if path.suffix != ".toml" or not path.is_file():
        return platform, {}
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return str(path), {}  # the native loader reports it, with file:line:column
    run = doc.get("run")
    if "platform" not in doc or not isinstance(run, dict):
        return str(path), {}
    return str(path), run


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "run"


@app.command()
def run(
    trace: Annotated[Path | None, typer.Argument(help="Trace file (omit with --gen).", show_default=False)] = None,
    platform: Annotated[str, typer.Option("--platform", "-p", help="Platform preset name or TOML file.")] = ...,  # type: ignore[assignment]
    policy: Annotated[
        str | None,
        typer.Option(
            help="Placement policy (see `tiersim list policies`; default linux_default, or the policy of "
            "the run directory given as -p); oracle_bound runs tiersim's bound, the fastest of the "
            "free-migration oracle_dynamic family, and writes its fastest member's run.",
            show_default=False,
        ),
    ] = None,
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
    seed: Annotated[
        int | None,
        typer.Option(
            parser=Number(int, 0),
            help="Seed for every random choice of the run (default 0, or the run directory's).",
            show_default=False,
        ),
    ] = None,
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
    if trace is not None and gen is not None:
        raise typer.BadParameter("give either a TRACE file or --gen NAME, not both", param_hint="TRACE / --gen")
    if trace is None and gen is None:
        # A run directory as the platform re-runs its platform and policy, not its input.
        raise typer.BadParameter(
            "give a TRACE file or --gen NAME (a run directory given to -p supplies the platform, policy, "
            "parameters and seed, not the trace)",
            param_hint="TRACE / --gen",
        )
    if gen_param and gen is None:
        raise typer.BadParameter("--gen-param needs --gen", param_hint="--gen-param")
    params = _pairs(param, "--param")
    # `-p runs/x` (or runs/x/config.toml) re-runs that run: its platform, policy, parameters, seed.
    platform, saved = _saved_run(platform)
    if policy is None:
        policy = str(saved.get("policy", "linux_default"))
    if saved.get("policy") == policy:
        params = {**dict(saved.get("policy_params") or {}), **params}
    if seed is None:
        seed = int(saved.get("seed", 0))
    gen_params = _pairs(gen_param, "--gen-param")
    overrides = _overrides(set_)
    source = gen if gen is not None else trace.stem  # type: ignore[union-attr]
    run_dir = output or Path("runs") / _slug(f"{Path(platform).stem}-{policy}-{source}-s{seed}")
    with _user_errors():
        from tiersim._result import check_out_dir

        check_out_dir(run_dir)
        with _accesses_progress(f"{source} on {Path(platform).stem}, {policy}") as progress:
            result = tiersim.run(
                trace,
                platform=platform,
                policy=policy,
                params=params,
                overrides=overrides,
                seed=seed,
                generator=gen,
                generator_params=gen_params if gen is not None else None,
                progress=progress,
            )
        result.write(run_dir)
    if as_json:
        _echo_raw(result.summary_json())
        err.print(Text(f"wrote {run_dir}"), soft_wrap=True)
    else:
        _print(*_summary_tables(result, out))
        out.print(Text(f"run directory: {run_dir}"), soft_wrap=True)
    _print_warnings(result.summary)
