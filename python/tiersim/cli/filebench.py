"""`tiersim filebench`: the file benchmark of the kernel I/O path (`tiersim.filebench`) from the
command line, writing a directory like `tiersim run` does."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

import tiersim
from tiersim._convert import params_to_toml
from tiersim.cli._common import (
    _echo_raw,
    _int,
    _kv_table,
    _merge_shortcuts,
    _num,
    _pairs,
    _print,
    _user_errors,
    app,
    err,
)

FILES = ("summary.json", "config.toml")


def _toml(params: dict[str, Any], device_params: dict[str, Any], iopath: dict[str, Any]) -> str:
    text = params_to_toml(params) + "\n"
    for name, sub in (("device_params", device_params), ("iopath", iopath)):
        if sub:
            text += f"\n[{name}]\n" + params_to_toml(sub) + "\n"
    return text


def _load_config(path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A config.toml of an earlier `tiersim filebench`: its parameters and the two sub-tables."""
    from tiersim._native import TiersimError

    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise TiersimError(f"cannot read --config '{path}': {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise TiersimError(f"--config '{path}': {exc}") from exc
    subs = []
    for name in ("device_params", "iopath"):
        sub = doc.pop(name, {})
        if not isinstance(sub, dict):
            raise TiersimError(f"--config '{path}': `{name}` must be a table")
        subs.append(sub)
    return doc, subs[0], subs[1]


def _write(out: Path, summary: dict[str, Any], config: str) -> None:
    """summary.json and config.toml, written beside `out` and renamed into place: a failure
    leaves no directory that looks finished."""
    from tiersim._result import check_out_dir, files_into, writing

    check_out_dir(out, FILES, "tiersim filebench")
    with files_into(out) as tmp:
        with writing(out / FILES[0]):
            (tmp / FILES[0]).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        with writing(out / FILES[1]):
            (tmp / FILES[1]).write_text(config, encoding="utf-8")


def _tables(r: dict[str, Any]) -> list[Any]:
    rows = [
        ("operations", _int(r.get("ops"))),
        ("elapsed", f"{_num(r.get('elapsed_ns', 0) / 1e6, 3)} ms"),
        ("bandwidth", f"{_num(r.get('bandwidth_gbs'), 3)} GB/s"),
        ("operations / s", _int(round(r.get("ops_per_s", 0)))),
        ("mean latency", f"{_num(r.get('mean_latency_ns'))} ns"),
    ]
    layers = [(name, f"{_num(ns)} ns") for name, ns in (r.get("layers_ns") or {}).items() if ns]
    stats = r.get("stats") or {}
    pc = stats.get("page_cache") or {}
    stat_rows = [(f"page cache {k.replace('_', ' ')}", _int(v)) for k, v in pc.items()]
    stat_rows += [
        ("block requests", _int(stats.get("block_requests"))),
        ("writeback pages", _int(stats.get("writeback_pages"))),
    ]
    log = stats.get("log") or {}
    if log.get("commits"):
        stat_rows.append(("log commits / groups", f"{_int(log.get('commits'))} / {_int(log.get('groups'))}"))
    return [
        _kv_table("file benchmark", rows),
        _kv_table("mean time per operation by layer", layers),
        _kv_table("statistics", stat_rows),
    ]


@app.command("filebench")
def filebench_cmd(
    device: Annotated[
        str | None,
        typer.Option(
            "--device", help="The file's device: an ssd or pmem preset or kind (parameter device).", show_default=False
        ),
    ] = None,
    workload: Annotated[
        str | None, typer.Option("--workload", help="read, write or kv (parameter workload).", show_default=False)
    ] = None,
    cache: Annotated[
        str | None, typer.Option("--cache", help="buffered, direct or dax (parameter cache).", show_default=False)
    ] = None,
    api: Annotated[
        str | None, typer.Option("--api", help="syscall or mmap (parameter api).", show_default=False)
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option("--threads", min=1, help="Application threads (parameter threads).", show_default=False),
    ] = None,
    ops: Annotated[
        int | None, typer.Option("--ops", min=1, help="Measured operations (parameter ops).", show_default=False)
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option("--param", metavar="KEY=VALUE", help="Any benchmark parameter, e.g. block_size=8KiB; repeatable."),
    ] = None,
    device_param: Annotated[
        list[str] | None,
        typer.Option(
            "--device-param", metavar="KEY=VALUE", help="Override a parameter of the device preset; repeatable."
        ),
    ] = None,
    iopath: Annotated[
        list[str] | None,
        typer.Option(
            "--iopath",
            metavar="KEY=VALUE",
            help="Override a cost of the kernel I/O path, e.g. completion=poll; repeatable.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help="Start from the config.toml of an earlier run (options given here override it).",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            metavar="DIR",
            help="Directory to write (default: runs/filebench-DEVICE-WORKLOAD-CACHE-API).",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print summary.json instead of tables.")] = False,
) -> None:
    """File I/O through the kernel path onto a storage device: seed 001's block benchmark or the
    storage engine. Parameters and defaults: docs/model.md "Storage" (an unknown one lists them)."""
    base: tuple[dict[str, Any], dict[str, Any], dict[str, Any]] = ({}, {}, {})
    if config is not None:
        with _user_errors():
            base = _load_config(config)
    given = _pairs(param, "--param")
    _merge_shortcuts(
        given,
        {
            "device": ("--device", device),
            "workload": ("--workload", workload),
            "cache": ("--cache", cache),
            "api": ("--api", api),
            "threads": ("--threads", threads),
            "ops": ("--ops", ops),
        },
    )
    params = {**base[0], **given}
    dev_params = {**base[1], **_pairs(device_param, "--device-param")}
    path_params = {**base[2], **_pairs(iopath, "--iopath")}
    name = "-".join(
        str(params.get(k, d))
        for k, d in (("device", "optane_ssd"), ("workload", "read"), ("cache", "buffered"), ("api", "syscall"))
    )
    out = output or Path("runs") / f"filebench-{name}"
    with _user_errors():
        from tiersim._result import check_out_dir

        check_out_dir(out, FILES, "tiersim filebench")
        with err.status(Text("running the file benchmark ...")):
            result = tiersim.filebench(device_params=dev_params, iopath=path_params, **params)
        _write(out, result, _toml(params, dev_params, path_params))
    if as_json:
        _echo_raw(json.dumps(result, indent=2, sort_keys=True))
        err.print(Text(f"wrote {out}"), soft_wrap=True)
    else:
        _print(*_tables(result))
        err.print(Text(f"directory: {out}"), soft_wrap=True)
