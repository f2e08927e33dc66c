"""Python values -> TOML text and override strings: what the native side receives must parse
back to exactly what the user wrote."""

from __future__ import annotations

import math
import tomllib

import pytest
from tiersim import TiersimError
from tiersim._convert import (
    overrides_to_list,
    params_to_toml,
    parse_cli_pairs,
    parse_cli_value,
    toml_string,
)


def test_params_round_trip_through_toml():
    params = {
        "weights": [4, 1],
        "nodes": ["dram0", "cxl0"],
        "threshold": 0.25,
        "tiny": 1e-9,
        "huge": 1e300,
        "enabled": False,
        "count": 2**40,
        "label": 'quote " backslash \\ tab \t newline \n del \x7f nul \x00 emoji \U0001f600',
        "dotted.name": 3,
        "empty": [],
    }
    parsed = tomllib.loads(params_to_toml(params))
    assert parsed == params
    assert isinstance(parsed["enabled"], bool)
    assert isinstance(parsed["count"], int)


def test_special_floats():
    parsed = tomllib.loads(params_to_toml({"a": math.inf, "b": -math.inf, "c": math.nan}))
    assert parsed["a"] == math.inf and parsed["b"] == -math.inf and math.isnan(parsed["c"])


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ({"policy": {"weights": [1]}}, "nested tables"),
        ({"x": None}, "None"),
        ({"x": object()}, "cannot express object"),
        ({"x": [1, {"a": 1}]}, "nested tables"),
        ({"": 1}, "non-empty"),
    ],
)
def test_params_rejects_what_toml_cannot_say(bad, fragment):
    with pytest.raises(TiersimError, match=fragment):
        params_to_toml(bad)


def test_toml_string_escapes_control_characters():
    assert toml_string("a\x01b") == '"a\\u0001b"'
    assert tomllib.loads(f"v = {toml_string(chr(0x7F))}")["v"] == chr(0x7F)


def test_overrides_dict_quotes_strings_and_keeps_numbers():
    assert overrides_to_list(
        {"nodes.cxl0.capacity": "64GiB", "scale": 0.001, "host.mlp": 4, "swap.enabled": False}
    ) == [
        'nodes.cxl0.capacity="64GiB"',
        "scale=0.001",
        "host.mlp=4",
        "swap.enabled=false",
    ]


def test_overrides_list_passes_through_and_rejects_malformed():
    assert overrides_to_list(["scale=0.5", " host.mlp = 4 "]) == ["scale=0.5", "host.mlp=4"]
    for bad in (["scale"], ["=4"], ["scale="], [4]):
        with pytest.raises(TiersimError, match="key=value"):
            overrides_to_list(bad)


@pytest.mark.parametrize(
    "text, value",
    [
        ("4", 4),
        ("0.3", 0.3),
        ("true", True),
        ("[4, 1]", [4, 1]),
        ("[4,1]", [4, 1]),
        ('"dram0"', "dram0"),
        ("dram0", "dram0"),
        ("512MiB", "512MiB"),
        ("[dram0,cxl0]", ["dram0", "cxl0"]),
        ("[dram0, 3]", ["dram0", 3]),
        ("2024-01-01", "2024-01-01"),
        ("[]", []),
    ],
)
def test_cli_values(text, value):
    assert parse_cli_value(text) == value


def test_cli_pairs_reject_malformed_and_repeated():
    assert parse_cli_pairs(["weights=[4,1]", "nodes=[dram0,cxl0]"], "--param") == {
        "weights": [4, 1],
        "nodes": ["dram0", "cxl0"],
    }
    with pytest.raises(
        ValueError, match=r"^--param expects KEY=VALUE \(e.g. --param requests=VALUE\), got 'requests'$"
    ):
        parse_cli_pairs(["requests"], "--param")
    with pytest.raises(ValueError, match=r"\(e.g. --set KEY=VALUE\), got '=4'$"):
        parse_cli_pairs(["=4"], "--set")
    with pytest.raises(ValueError, match="given twice"):
        parse_cli_pairs(["a=1", "a=2"], "--param")
