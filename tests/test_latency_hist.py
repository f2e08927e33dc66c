"""The run's latency histogram (latency_hist.parquet): counts against the measured accesses, the
summary's percentiles read back from it, the per-node split, and the report's CDFs drawn from it."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
import tiersim
from conftest import PLATFORM, RANDOM_ACCESSES
from tiersim import report as rp

WARMUP = 5_000


@pytest.fixture(scope="module")
def tiered(random_trace: Path, tmp_path_factory: pytest.TempPathFactory) -> tiersim.RunResult:
    """Interleaved over DRAM and CXL, so both nodes serve accesses, with a warm-up to leave out."""
    out = tmp_path_factory.mktemp("hist") / "run"
    return tiersim.run(
        random_trace,
        platform=PLATFORM,
        policy="interleave",
        overrides=[f"stats.warmup_accesses={WARMUP}"],
        seed=2,
        out_dir=out,
    )


def _quantile(hist: pl.DataFrame, q: float) -> int:
    """hdrhistogram's value_at_quantile: the upper bound of the first bin whose cumulative count
    reaches ceil(q * total) (at least one access)."""
    rows = hist.sort("high_ns")
    want = max(1, math.ceil(q * rows["count"].sum()))
    seen = 0
    for high, count in zip(rows["high_ns"], rows["count"], strict=True):
        seen += count
        if seen >= want:
            return high
    raise AssertionError("unreachable")


def test_counts_sum_to_the_measured_accesses(tiered: tiersim.RunResult) -> None:
    h, s = tiered.latency_hist, tiered.summary
    assert h.columns == ["node", "low_ns", "high_ns", "count"]
    # Measured from the issue of the first record at position WARMUP or later: the trace's CPUs
    # interleave in simulated time, so 107 records before it are issued after that and counted.
    assert s["accesses"] == RANDOM_ACCESSES - WARMUP + 107
    assert h.filter(pl.col("node") == "all")["count"].sum() == s["accesses"]
    served = [n for n in s["nodes"] if n["accesses"] > 0]
    assert len(served) == 2, "interleave serves from both nodes"
    for n in s["nodes"]:
        assert h.filter(pl.col("node") == n["name"])["count"].sum() == n["accesses"]
    assert h["node"].unique(maintain_order=True).to_list() == ["all"] + [n["name"] for n in served]


def test_bins_are_ordered_and_the_run_is_the_sum_of_its_nodes(tiered: tiersim.RunResult) -> None:
    h = tiered.latency_hist
    for _, part in h.group_by("node", maintain_order=True):
        low, high = part["low_ns"].to_list(), part["high_ns"].to_list()
        assert all(lo <= hi for lo, hi in zip(low, high, strict=True))
        assert all(hi < nxt for hi, nxt in zip(high, low[1:], strict=False)), "bins overlap or are out of order"
        assert (part["count"] > 0).all()
    nodes = h.filter(pl.col("node") != "all").group_by("low_ns", "high_ns").agg(pl.col("count").sum()).sort("high_ns")
    overall = h.filter(pl.col("node") == "all").select("low_ns", "high_ns", "count").sort("high_ns")
    assert nodes.equals(overall)


def test_summary_percentiles_read_back_from_the_histogram(tiered: tiersim.RunResult) -> None:
    h = tiered.latency_hist.filter(pl.col("node") == "all")
    lat = tiered.summary["latency_ns"]
    for key, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999)):
        assert _quantile(h, q) == lat[key], key
    assert h["high_ns"].max() == lat["max"]
    # Bins are 0.1% wide, so their midpoints give the mean to that precision.
    mid = ((h["low_ns"] + h["high_ns"]) / 2 * h["count"]).sum() / h["count"].sum()
    assert mid == pytest.approx(lat["mean"], rel=1e-3)
    # Each node's mean latency, from the engine's exact sums, within its bins' width as well.
    for n in tiered.summary["nodes"]:
        part = tiered.latency_hist.filter(pl.col("node") == n["name"])
        node_mid = ((part["low_ns"] + part["high_ns"]) / 2 * part["count"]).sum() / part["count"].sum()
        assert node_mid == pytest.approx(n["mean_latency_ns"], rel=1e-3)


def test_run_directory_holds_the_histogram_byte_identically(
    tiered: tiersim.RunResult, random_trace: Path, tmp_path: Path
) -> None:
    again = tiersim.run(
        random_trace,
        platform=PLATFORM,
        policy="interleave",
        overrides=[f"stats.warmup_accesses={WARMUP}"],
        seed=2,
        out_dir=tmp_path / "again",
    )
    first = tmp_path / "first"
    tiered.write(first)
    assert pl.read_parquet(first / "latency_hist.parquet").equals(tiered.latency_hist)
    assert (first / "latency_hist.parquet").read_bytes() == (tmp_path / "again" / "latency_hist.parquet").read_bytes()
    assert again.latency_hist.equals(tiered.latency_hist)


def test_cdf_endpoints(tiered: tiersim.RunResult) -> None:
    xs, fs = rp.latency_cdf(tiered.latency_hist)
    h = tiered.latency_hist.filter(pl.col("node") == "all")
    assert xs[0] == h["high_ns"].min() and fs[0] == h.sort("high_ns")["count"][0] / h["count"].sum()
    assert xs[-1] == tiered.summary["latency_ns"]["max"] and fs[-1] == 1.0
    assert xs == sorted(xs) and fs == sorted(fs)
    # The CDF passes 0.5 at the summary's p50: no bin before it holds half of the accesses.
    at_p50 = max(f for x, f in zip(xs, fs, strict=True) if x <= tiered.summary["latency_ns"]["p50"])
    below = [f for x, f in zip(xs, fs, strict=True) if x < tiered.summary["latency_ns"]["p50"]]
    assert at_p50 >= 0.5 and (not below or below[-1] < 0.5)
    for n in tiered.summary["nodes"]:
        nx, nf = rp.latency_cdf(tiered.latency_hist, n["name"])
        assert nf[-1] == 1.0 and len(nx) == tiered.latency_hist.filter(pl.col("node") == n["name"]).height
    assert rp.latency_cdf(tiered.latency_hist, "no_such_node") == ([], [])


def test_report_draws_the_cdfs_from_the_histogram_and_falls_back_without_it(
    tiered: tiersim.RunResult, tmp_path: Path
) -> None:
    run_dir = tiered.write(tmp_path / "run")
    page = rp.write_report([run_dir], tmp_path / "r.html").read_text()
    assert "access latency CDF (from the latency histogram)" in page
    run = rp.load_run(run_dir)
    assert run.latency_hist is not None and run.latency_hist.equals(tiered.latency_hist)
    # A run directory from before the histogram: the summary's five points.
    (run_dir / "latency_hist.parquet").unlink()
    old = rp.load_run(run_dir)
    assert old.latency_hist is None
    xs, fs, exact = rp.run_cdf(old)
    lat = tiered.summary["latency_ns"]
    assert not exact and xs == [lat["p50"], lat["p90"], lat["p99"], lat["p999"], lat["max"]]
    assert fs == [0.5, 0.9, 0.99, 0.999, 1.0]
    page = rp.write_report([run_dir], tmp_path / "old.html").read_text()
    assert "else the summary&#x27;s percentiles" in page


def test_a_damaged_histogram_is_one_clear_error(tiered: tiersim.RunResult, tmp_path: Path) -> None:
    run_dir = tiered.write(tmp_path / "run")
    (run_dir / "latency_hist.parquet").write_bytes(b"not parquet")
    with pytest.raises(tiersim.TiersimError, match="latency_hist.parquet: cannot read"):
        rp.load_run(run_dir)
