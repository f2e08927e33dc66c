"""CXL-flash device mode: `tiersim flash replay` on an MQSim_CXL trace, its files and errors,
the Python API, the dram_cxl_flash platform behind a policy, and the seed-004 study."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import tiersim
from conftest import run_cli
from tiersim import _flash as fl

SMALL = {"cache_size": "256KiB", "flash_blocks_per_plane": 16, "flash_pages_per_block": 16}


def mqsim_trace(path: Path, n: int = 3000) -> Path:
    """A strided walk with every 4th access a write, 100 ns apart, in MQSim_CXL's format."""
    lines = [f"{i * 100} 0 {(i * 4096 * 5 + (i % 3) * 64) % (32 << 20)} 1 {0 if i % 4 == 0 else 1}" for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cli_replays_an_mqsim_trace_and_writes_its_files(tmp_path: Path):
    trace = mqsim_trace(tmp_path / "walk.trace")
    out = tmp_path / "run"
    sets = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
    proc = run_cli("flash", "replay", str(trace), "--from", "mqsim", "--preset", "cxl_flash_slc", *sets, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "under 1 us" in proc.stdout and "flash reads demand" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == 3000
    assert summary["writes"] == 750
    assert summary["hits"] + summary["hits_under_miss"] + summary["misses"] == 3000
    hist = pl.read_parquet(out / "histogram.parquet")
    assert hist.columns == ["class", "low_ns", "high_ns", "count"]
    assert hist["count"].sum() == 3000
    assert set(hist["class"].unique()) <= {"hit", "hit_under_miss", "miss"}
    params = (out / "params.toml").read_text()
    assert "flash_read_latency_us = [25.0]" in params and 'cache_size = "256KiB"' in params
    # Same inputs, same bytes.
    out2 = tmp_path / "run2"
    assert (
        run_cli(
            "flash", "replay", str(trace), "--from", "mqsim", "--preset", "cxl_flash_slc", *sets, "-o", str(out2)
        ).returncode
        == 0
    )
    for name in ("summary.json", "histogram.parquet", "params.toml"):
        assert (out / name).read_bytes() == (out2 / name).read_bytes(), name


def test_cli_errors_name_the_line_or_key_and_leave_no_output(tmp_path: Path):
    bad = tmp_path / "bad.trace"
    bad.write_text("0 0 4096 8 1\n5 0 8192 8 1\n7 0 12288 8\n")
    out = tmp_path / "run"
    proc = run_cli("flash", "replay", str(bad), "--from", "mqsim", "-o", str(out))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "bad.trace:3:" in proc.stderr and "expected 5 fields" in proc.stderr
    assert not out.exists()
    good = mqsim_trace(tmp_path / "ok.trace", 10)
    proc = run_cli("flash", "replay", str(good), "--from", "mqsim", "--set", "cache_waysx=4")
    assert proc.returncode == 1 and "cache_waysx" in proc.stderr and "valid parameters" in proc.stderr
    proc = run_cli("flash", "replay", str(good), "--from", "mqsim", "--preset", "ddr5_4800")
    assert proc.returncode == 1 and "not a cxl_flash one" in proc.stderr
    proc = run_cli("flash", "replay", str(good), "--from", "mqsim", "--llc", "lots")
    assert proc.returncode == 2


def test_api_closed_loop_generator_and_hints(tmp_path: Path):
    gen = {"footprint": "8MiB", "accesses": 20000, "gap_instructions": 2000, "base_addr": 0}
    base = dict(generator="hashmap", generator_params=gen, preset="cxl_flash_ull", params=SMALL, llc=256 << 10)
    openl = tiersim.flash_replay(**base)
    closed = tiersim.flash_replay(**base, closed_loop=4)
    assert openl.summary["replay"]["mode"] == "open" and closed.summary["replay"]["mode"] == "closed(4)"
    assert openl.summary["requests"] == closed.summary["requests"]
    hinted = tiersim.flash_replay(**base, hint_top=0.1, hint_probability=0.5, hint_lead=32)
    assert hinted.summary["replay"]["hints_sent"] > 0
    assert hinted.summary["hints"]["lines"] == hinted.summary["replay"]["hints_sent"]
    with pytest.raises(tiersim.TiersimError, match="exactly one"):
        tiersim.flash_replay()


def test_platform_with_a_cxl_flash_tier_runs_behind_a_policy():
    r = tiersim.run(
        generator="random",
        generator_params={"accesses": 30000, "footprint": "64MiB"},
        platform="dram_cxl_flash",
        overrides=["scale=0.0005"],
        policy="linux_default",
    )
    nodes = {n["name"]: n for n in r.summary["nodes"]}
    assert nodes["flash0"]["device"] == "cxl_flash"
    assert nodes["flash0"]["accesses"] > 0


def test_compat_mode_runs_only_in_an_open_loop_replay(tmp_path: Path):
    # A compat read's completion is fixed only when later requests have arrived (tsu.rs): an
    # engine run and a closed-loop replay need it at issue, so both are refused with the key.
    with pytest.raises(tiersim.TiersimError, match="compat.*open loop"):
        tiersim.run(
            generator="random",
            generator_params={"accesses": 1000, "footprint": "8MiB"},
            platform="dram_cxl_flash",
            overrides=["scale=0.0005", "nodes.flash0.params.compat=mqsim_cxl"],
            policy="linux_default",
        )
    gen = {"footprint": "8MiB", "accesses": 2000, "gap_instructions": 2000, "base_addr": 0}
    trace, out = tmp_path / "r.trace", tmp_path / "out"
    assert run_cli("gen", "random", "-o", str(trace), "--count", "2000", "--param", "footprint=8MiB").returncode == 0
    proc = run_cli(
        "flash",
        "replay",
        str(trace),
        "--preset",
        "cxl_flash_ull",
        "--set",
        "compat=mqsim_cxl",
        "--closed-loop",
        "4",
        "-o",
        str(out),
    )
    assert proc.returncode == 1 and "closed_loop" in proc.stderr and "open loop" in proc.stderr, proc.stderr
    assert not out.exists()
    assert (
        tiersim.flash_replay(
            generator="random", generator_params=gen, preset="cxl_flash_ull", params=SMALL | {"compat": "mqsim_cxl"}
        ).summary["requests"]
        > 0
    )


def test_flash_study_replays_each_run_once_and_the_same_run_gives_the_same_rows():
    plan = fl.study_plan()
    runs = {r.run for r in plan}
    # Shared runs: the 1 MiB 16-way LRU point of the cache-size sweep is the replacement grid's.
    assert len(runs) < len(plan)
    df = tiersim.flash_study(accesses=5000, workers=2, comparisons=["cache_size", "replacement", "mshr"])
    assert df.columns == ["comparison", "workload", "setting", "metric", "ours", "paper"]
    assert df.height == sum(len(r.metrics) for r in plan if r.comparison in ("cache_size", "replacement", "mshr"))

    def one(frame: pl.DataFrame, comparison: str, setting: str, metric: str = "under 1 us") -> float:
        sel = frame.filter(
            (pl.col("comparison") == comparison)
            & (pl.col("workload") == "hashmap")
            & (pl.col("setting") == setting)
            & (pl.col("metric") == metric)
        )
        assert sel.height == 1
        return sel["ours"][0]

    assert one(df, "cache_size", "1MiB") == one(df, "replacement", "lru, 16 ways")
    # Every metric of a replay is a ratio or a count: shares in [0, 1], no cache means no hits.
    shares = df.filter(pl.col("metric").is_in(["under 1 us", "hit share", "duplicate share of flash reads"]))["ours"]
    assert shares.min() >= 0 and shares.max() <= 1
    assert one(df, "cache_size", "no cache", "hit share") == 0
    # One worker or two: the same rows, bit for bit.
    again = tiersim.flash_study(accesses=5000, workers=1, comparisons=["mshr"])
    assert again.equals(df.filter(pl.col("comparison") == "mshr"))
    with pytest.raises(tiersim.TiersimError, match=r"unknown comparison nope \(valid: cache_size, mshr"):
        tiersim.flash_study(comparisons=["nope"])


def test_cli_flash_study_one_comparison(tmp_path: Path):
    proc = run_cli("flash", "study", "-c", "technology", "-j", "2", "-o", str(tmp_path / "t.csv"))
    assert proc.returncode == 0, proc.stderr
    df = pl.read_csv(tmp_path / "t.csv")
    assert set(df["comparison"]) == {"technology"}
    assert df.height == len(fl.TECHNOLOGIES) * len(fl.TECH_CACHES) * 3
    assert "ull, no cache" in proc.stdout
    bad = run_cli("flash", "study", "-c", "nope")
    assert bad.returncode == 1 and "unknown comparison nope (valid: cache_size" in bad.stderr
