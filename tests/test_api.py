"""The Python API against the real extension: result shapes, conservation of accesses,
capacity limits, determinism and interleave ratios."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import polars as pl
import pytest
import tiersim
from conftest import (
    FAST,
    PLATFORM,
    RANDOM_ACCESSES,
    RANDOM_FOOTPRINT,
    RANDOM_THREADS,
    RANDOM_WRITE_RATIO,
    SLOW,
    random_params,
)
from tiersim._result import RUN_FILES

TIMESERIES_COLUMNS = [
    "epoch",
    "t_start_ns",
    "t_end_ns",
    "node",
    "pages",
    "accesses",
    "reads",
    "writes",
    "bytes",
    "bandwidth_gbs",
    "migrated_in",
    "migrated_out",
]
NODE_COLUMNS = {
    "name",
    "device",
    "tier",
    "socket",
    "capacity_bytes",
    "accesses",
    "reads",
    "writes",
    "bytes",
    "final_pages",
    "peak_pages",
    "mean_latency_ns",
}
PAGE = 4096
# 4 MiB of DRAM for an 8 MiB footprint: first touch must spill half the pages to CXL.
SMALL_DRAM = {f"nodes.{FAST}.capacity": "4MiB"}


def _find(doc: object, key: str) -> object:
    """The first value of `key` anywhere in a parsed TOML document (breadth first)."""
    queue = [doc]
    while queue:
        node = queue.pop(0)
        if isinstance(node, dict):
            if key in node:
                return node[key]
            queue.extend(node.values())
    raise KeyError(key)


@pytest.fixture(scope="module")
def default_run(random_trace: Path) -> tiersim.RunResult:
    return tiersim.run(random_trace, platform=PLATFORM, seed=3)


@pytest.fixture(scope="module")
def pressured_run(random_trace: Path) -> tiersim.RunResult:
    return tiersim.run(random_trace, platform=PLATFORM, overrides=SMALL_DRAM, seed=3)


def test_generate_and_inspect_report_what_was_asked(random_trace: Path):
    info = tiersim.inspect(random_trace)
    assert info["accesses"] == RANDOM_ACCESSES
    assert info["reads"] + info["writes"] == RANDOM_ACCESSES
    assert abs(info["writes"] / RANDOM_ACCESSES - RANDOM_WRITE_RATIO) < 0.02
    assert info["page_size"] == PAGE
    # Uniform random over 2048 pages with 20000 draws touches nearly all of them.
    assert 0.95 * RANDOM_FOOTPRINT / PAGE <= info["footprint_pages"] <= RANDOM_FOOTPRINT / PAGE
    assert info["footprint_bytes"] == info["footprint_pages"] * PAGE
    assert len(info["per_cpu"]) == RANDOM_THREADS
    per_cpu = [c["accesses"] if isinstance(c, dict) else c for c in info["per_cpu"]]
    assert sum(per_cpu) == RANDOM_ACCESSES


def test_run_returns_documented_frames(default_run: tiersim.RunResult):
    ts = default_run.timeseries
    assert ts.columns[: len(TIMESERIES_COLUMNS)] == TIMESERIES_COLUMNS
    assert ts.schema["node"] == pl.Utf8
    assert ts.schema["bandwidth_gbs"] == pl.Float64
    assert ts.height > 0
    assert (ts["t_end_ns"] >= ts["t_start_ns"]).all()
    assert NODE_COLUMNS <= set(default_run.nodes.columns)
    assert set(default_run.nodes["name"]) >= {FAST, SLOW}
    assert default_run.execution_time_ns > 0
    lat = default_run.latency
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    assert default_run.summary["accesses"] == RANDOM_ACCESSES
    config = tomllib.loads(default_run.config)
    assert _find(config, "seed") == 3
    assert _find(config, "policy") == "linux_default"
    assert default_run.summary["page_size"] == PAGE


def test_per_node_accesses_sum_to_total(default_run: tiersim.RunResult, pressured_run: tiersim.RunResult):
    for result in (default_run, pressured_run):
        nodes = result.nodes
        assert nodes["accesses"].sum() == result.summary["accesses"] == RANDOM_ACCESSES
        assert nodes["reads"].sum() == result.summary["reads"]
        assert nodes["writes"].sum() == result.summary["writes"]


def test_timeseries_accesses_add_up_to_node_totals(pressured_run: tiersim.RunResult):
    per_node = pressured_run.timeseries.group_by("node").agg(pl.col("accesses").sum())
    sums = dict(zip(per_node["node"], per_node["accesses"], strict=True))
    for row in pressured_run.nodes.iter_rows(named=True):
        assert sums.get(row["name"], 0) == row["accesses"], row["name"]


def test_first_touch_fills_dram_then_spills_without_exceeding_capacity(pressured_run: tiersim.RunResult):
    ts = pressured_run.timeseries
    nodes = {row["name"]: row for row in pressured_run.nodes.iter_rows(named=True)}
    assert nodes[FAST]["capacity_bytes"] == 4 * 1024 * 1024
    for name, node in nodes.items():
        capacity_pages = node["capacity_bytes"] // PAGE
        peak_in_series = ts.filter(pl.col("node") == name)["pages"].max() or 0
        assert peak_in_series <= capacity_pages, name
        assert node["peak_pages"] <= capacity_pages, name
        assert node["final_pages"] <= node["peak_pages"], name
    # The pressure is real: DRAM ends mostly full and CXL holds the rest of the footprint.
    assert nodes[FAST]["final_pages"] >= 0.5 * (4 * 1024 * 1024 // PAGE)
    assert nodes[SLOW]["final_pages"] > 0
    assert 0.0 < pressured_run.summary["fast_tier_hit_ratio"] < 1.0


def test_all_dram_when_everything_fits(default_run: tiersim.RunResult):
    nodes = {row["name"]: row for row in default_run.nodes.iter_rows(named=True)}
    assert nodes[FAST]["accesses"] == RANDOM_ACCESSES
    assert nodes[SLOW]["accesses"] == 0
    assert default_run.summary["fast_tier_hit_ratio"] == 1.0


def test_slow_memory_makes_the_run_slower(default_run: tiersim.RunResult, pressured_run: tiersim.RunResult):
    assert pressured_run.execution_time_ns > default_run.execution_time_ns
    assert pressured_run.latency["mean"] > default_run.latency["mean"]


def test_same_seed_gives_byte_identical_run_dirs(random_trace: Path, tmp_path: Path):
    a = tiersim.run(random_trace, platform=PLATFORM, overrides=SMALL_DRAM, seed=11, out_dir=tmp_path / "a")
    tiersim.run(random_trace, platform=PLATFORM, overrides=SMALL_DRAM, seed=11, out_dir=tmp_path / "b")
    for name in RUN_FILES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert json.loads((tmp_path / "a" / "summary.json").read_text()) == a.summary
    assert pl.read_parquet(tmp_path / "a" / "timeseries.parquet").equals(a.timeseries)
    assert (tmp_path / "a" / "config.toml").read_text() == a.config


def test_interleave_one_to_one_splits_accesses_evenly(random_trace: Path):
    r = tiersim.run(
        random_trace,
        platform=PLATFORM,
        policy="interleave",
        params={"weights": [1, 1], "nodes": [FAST, SLOW]},
    )
    nodes = {row["name"]: row for row in r.nodes.iter_rows(named=True)}
    for name in (FAST, SLOW):
        assert abs(nodes[name]["accesses"] / RANDOM_ACCESSES - 0.5) <= 0.02, name
        assert abs(nodes[name]["final_pages"] / (nodes[FAST]["final_pages"] + nodes[SLOW]["final_pages"]) - 0.5) <= 0.01


def test_generator_in_memory_matches_the_trace_file(tmp_path: Path):
    trace = tmp_path / "random5.trace"
    tiersim.generate("random", trace, seed=5, **random_params())
    from_file = tiersim.run(trace, platform=PLATFORM, overrides=SMALL_DRAM, seed=5)
    in_memory = tiersim.run(
        platform=PLATFORM,
        overrides=SMALL_DRAM,
        seed=5,
        generator="random",
        generator_params=random_params(),
    )
    assert in_memory.summary["accesses"] == RANDOM_ACCESSES
    assert in_memory.execution_time_ns == from_file.execution_time_ns
    assert in_memory.nodes.select("name", "accesses", "final_pages").equals(
        from_file.nodes.select("name", "accesses", "final_pages")
    )


def test_dict_and_list_overrides_resolve_identically():
    as_dict = tiersim.resolve_platform(PLATFORM, {"host.mlp": 4, f"nodes.{SLOW}.capacity": "64GiB"})
    as_list = tiersim.resolve_platform(PLATFORM, ["host.mlp=4", f'nodes.{SLOW}.capacity="64GiB"'])
    assert as_dict == as_list
    assert as_dict != tiersim.resolve_platform(PLATFORM)


def test_unknown_policy_names_the_valid_ones(random_trace: Path):
    with pytest.raises(tiersim.TiersimError) as exc:
        tiersim.run(random_trace, platform=PLATFORM, policy="no_such_policy")
    message = str(exc.value)
    assert "no_such_policy" in message
    assert "linux_default" in message and "interleave" in message


def test_unknown_policy_param_is_rejected(random_trace: Path):
    with pytest.raises(tiersim.TiersimError, match="bogus"):
        tiersim.run(random_trace, platform=PLATFORM, policy="interleave", params={"bogus": 1})


def test_trace_and_generator_are_exclusive(random_trace: Path):
    with pytest.raises(tiersim.TiersimError, match="exactly one"):
        tiersim.run(random_trace, platform=PLATFORM, generator="random")
    with pytest.raises(tiersim.TiersimError, match="exactly one"):
        tiersim.run(platform=PLATFORM)


def test_failed_generate_leaves_nothing(tmp_path: Path):
    out = tmp_path / "never.trace"
    with pytest.raises(tiersim.TiersimError):
        tiersim.generate("no_such_generator", out)
    with pytest.raises(tiersim.TiersimError):
        tiersim.generate("random", out, accesses=0)
    assert os.listdir(tmp_path) == []


def test_write_replaces_a_run_dir_but_never_foreign_files(default_run: tiersim.RunResult, tmp_path: Path):
    run_dir = tmp_path / "run"
    default_run.write(run_dir)
    (run_dir / "summary.json").write_text("stale")
    default_run.write(run_dir)
    assert (run_dir / "summary.json").read_text() == default_run.summary_json()

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(tiersim.TiersimError, match="notes.txt"):
        default_run.write(foreign)
    assert os.listdir(foreign) == ["notes.txt"]
    # No temporary directories are left beside the outputs.
    assert sorted(os.listdir(tmp_path)) == ["mine", "run"]


def test_list_plugins_exposes_params_with_defaults():
    registry = tiersim.list_plugins()
    policies = {p["name"]: p for p in registry["policies"]}
    assert {"linux_default", "interleave"} <= set(policies)
    generators = {g["name"]: g for g in registry["generators"]}
    assert {"random", "stride", "stream"} <= set(generators)
    params = {p["name"]: p for p in generators["stream"]["params"]}
    assert params["arrays"]["default"] == "3"
    assert {"dram", "cxl", "ssd"} <= {d["name"] for d in registry["devices"]}
    assert {"epyc_cxl_nps1", "epyc_cxl_nps2", "epyc_cxl_nps4"} <= {p["name"] for p in registry["platforms"]}


def test_version_is_the_crate_version():
    assert tiersim.__version__ and tiersim.__version__[0].isdigit()


def test_timeseries_migrations_add_up_to_node_totals():
    # tpp on a phased program whose fill phase overflows 8 MiB of DRAM: kswapd demotes to CXL.
    r = tiersim.run(
        generator="phased",
        generator_params={"accesses": 200_000, "footprint": "16MiB", "threads": 2},
        platform=PLATFORM,
        policy="tpp",
        overrides={"scale": 1.0, f"nodes.{FAST}.capacity": "8MiB", f"nodes.{SLOW}.capacity": "64MiB"},
        params={"scan_delay": "0s", "scan_period_min": "100us", "scan_period_max": "1ms"},
        seed=1,
    )
    assert r.summary["tiering"]["demotions"] > 1000
    sums = r.timeseries.group_by("node").agg(pl.col("migrated_in").sum(), pl.col("migrated_out").sum())
    per_node = {row["node"]: row for row in sums.iter_rows(named=True)}
    for n in r.summary["nodes"]:
        assert per_node[n["name"]]["migrated_in"] == n["migrated_in"], n["name"]
        assert per_node[n["name"]]["migrated_out"] == n["migrated_out"], n["name"]
    assert per_node[SLOW]["migrated_in"] == r.summary["tiering"]["demotions"]
