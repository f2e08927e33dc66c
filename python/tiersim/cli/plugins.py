"""`tiersim list` and `tiersim platform show`: the plugin registry and resolved platforms."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

import tiersim
from tiersim.cli._common import _echo_raw, _overrides, _print, _user_errors, app, out

platform_app = typer.Typer(help="Platforms: show resolved configurations.", no_args_is_help=True)


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
