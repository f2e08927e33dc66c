"""Python values -> the TOML text and "dotted.key=value" strings that `tiersim._native` parses.

The native side owns all validation (names, kinds, bounds); this module only has to produce
syntactically exact TOML so that what the user wrote reaches it unchanged. Errors raised here
are `TiersimError` so callers handle one exception type for every user mistake.

The other way, `json_object` types the JSON reports the native side returns as text.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _error(message: str) -> Exception:
    # Imported lazily: this module must not force the native extension to load first.
    from tiersim._native import TiersimError

    return TiersimError(message)


def toml_string(text: str) -> str:
    """A TOML basic string. json.dumps is not enough: it leaves U+007F raw and splits astral
    characters into surrogate pairs, both of which TOML rejects."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def toml_key(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise _error(f"parameter names must be non-empty strings, got {key!r}")
    return key if _BARE_KEY.match(key) else toml_string(key)


def toml_value(value: Any, key: str) -> str:
    """One TOML value. `key` only serves the error message."""
    # bool first: it is a subclass of int.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        # repr is the shortest text that round-trips, and always valid TOML for finite floats.
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, os.PathLike):
        return toml_string(os.fspath(value))
    if isinstance(value, Mapping):
        raise _error(
            f"parameter '{key}': nested tables are not supported; give each value under its own dotted key instead"
        )
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return "[" + ", ".join(toml_value(v, key) for v in value) + "]"
    raise _error(
        f"parameter '{key}': cannot express {type(value).__name__} value {value!r} in TOML; "
        "use a number, string, bool or list"
    )


def params_to_toml(params: Mapping[str, Any] | str | None) -> str:
    """A flat dict -> TOML table text ("key = value" lines). A str is taken as TOML already."""
    if params is None:
        return ""
    if isinstance(params, str):
        return params
    if not isinstance(params, Mapping):
        raise _error(f"parameters must be a dict or TOML text, got {type(params).__name__}")
    lines = []
    for key, value in params.items():
        if value is None:
            raise _error(f"parameter '{key}' is None; leave it out to get the default")
        lines.append(f"{toml_key(key)} = {toml_value(value, key)}")
    return "\n".join(lines)


def json_object(text: str) -> dict[str, Any]:
    """`json.loads` of a JSON object tiersim wrote (a native function's report, a run's
    summary.json): typed as the dict it is, not checked."""
    obj: dict[str, Any] = json.loads(text)
    return obj


def check_override(item: str) -> str:
    """A "dotted.key=value" string as the native side expects it, or a clear error."""
    if not isinstance(item, str):
        raise _error(f"override must be a 'key=value' string, got {item!r}")
    key, sep, value = item.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise _error(f"override '{item}' is not of the form key=value (e.g. host.mlp=4)")
    return f"{key.strip()}={value.strip()}"


def overrides_to_list(overrides: Mapping[str, Any] | Sequence[str] | None) -> list[str]:
    """{"nodes.cxl0.capacity": "64GiB"} -> ['nodes.cxl0.capacity="64GiB"']; a list of
    "key=value" strings passes through (the native side parses bare words as strings)."""
    if overrides is None:
        return []
    if isinstance(overrides, str):
        return [check_override(overrides)]
    if isinstance(overrides, Mapping):
        out = []
        for key, value in overrides.items():
            if not isinstance(key, str) or not key.strip():
                raise _error(f"override keys must be non-empty strings, got {key!r}")
            if value is None:
                raise _error(f"override '{key}' is None; leave it out to keep the platform value")
            out.append(f"{key.strip()}={toml_value(value, key)}")
        return out
    if isinstance(overrides, Sequence):
        return [check_override(item) for item in overrides]
    raise _error(f"overrides must be a dict or a list of 'key=value' strings, got {type(overrides).__name__}")


def parse_cli_value(text: str) -> Any:
    """The value of a command-line "key=value": TOML if it parses ("4", "0.3", "true", "[4, 1]",
    '"x"'), else the text itself as a string, so `nodes=[dram0,cxl0]` and `footprint=512MiB`
    need no shell quoting."""
    text = text.strip()
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        if text.startswith("[") and text.endswith("]"):
            inner = text[1:-1].strip()
            return [parse_cli_value(part) for part in inner.split(",")] if inner else []
        return text
    # TOML would read 2024-01-01 as a date, which no tiersim parameter is.
    if isinstance(value, (_dt.date, _dt.time, _dt.datetime)):
        return text
    return value


def parse_cli_pairs(items: Sequence[str], option: str) -> dict[str, Any]:
    """["weights=[4,1]", "nodes=[dram0,cxl0]"] -> dict, rejecting malformed items and repeats.
    Raises ValueError with a message meant for a usage error."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            # The example is the user's own key where there is one: a policy's weights=[4,1] read
            # as a non sequitur beside a workload's `--param requests`.
            example = f"{option} {key}=VALUE" if key and not sep else f"{option} KEY=VALUE"
            raise ValueError(f"{option} expects KEY=VALUE (e.g. {example}), got '{item}'")
        if key in out:
            raise ValueError(f"{option} {key} is given twice")
        out[key] = parse_cli_value(value)
    return out
