"""`tiersim characterize`: quick runs on every device preset, the files it writes, and the
seed 000 shape numbers on the Optane preset."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import tiersim
from conftest import run_cli

PRESETS = [p["name"] for p in tiersim.list_plugins()["device_presets"]]


def test_every_preset_is_listed():
    assert {"ddr4_2666", "ddr5_4800", "cxl_cz120", "optane_100", "nvme_ssd", "optane_ssd"} <= set(PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
def test_quick_smoke_on_every_preset(preset: str):
    c = tiersim.characterize(preset, quick=True, tests=["idle_latency", "bandwidth_threads", "scaling"])
    assert list(c.tables) == ["idle_latency", "bandwidth_threads", "scaling"]
    lat = c.tables["idle_latency"]["latency_ns"]
    assert (lat > 0).all()
    scale = c.tables["scaling"]
    assert scale["read_gbs"][5] > scale["read_gbs"][0]


def test_cli_writes_tables_and_plots(tmp_path: Path):
    out = tmp_path / "char"
    proc = run_cli("characterize", "optane_100", "--quick", "--param", "count=6", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "EWR vs working set" in proc.stdout
    for name in ["idle_latency", "bandwidth_threads", "bandwidth_size", "ewr_size", "ewr_threads", "ewr_working_set",
                 "loaded_latency", "scaling", "remote_latency", "remote_bandwidth"]:
        assert (out / f"{name}.csv").stat().st_size > 0
        assert pl.read_parquet(out / f"{name}.parquet").shape == pl.read_csv(out / f"{name}.csv").shape
        if name not in ("idle_latency", "remote_latency"):
            assert (out / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    size = pl.read_parquet(out / "bandwidth_size.parquet")
    rnd_w = size.filter((pl.col("pattern") == "random") & (pl.col("op") == "write"))
    bw = dict(zip(rnd_w["size"].to_list(), rnd_w["bandwidth_gbs"].to_list(), strict=True))
    # The 4 KiB-interleave dip: random 4 KiB writes sit on one DIMM each, 24 KiB on all six.
    assert bw[4096] < 0.7 * bw[24576]


def test_optane_shape_numbers():
    c = tiersim.characterize("optane_100", quick=True, tests=["ewr_size", "ewr_working_set", "scaling"])
    ewr = dict(zip(c.tables["ewr_size"]["size"].to_list(), c.tables["ewr_size"]["ewr"].to_list(), strict=True))
    assert 0.25 <= ewr[64] < 0.27
    assert ewr[256] == 1.0
    ws = dict(zip(*(c.tables["ewr_working_set"][k].to_list() for k in ("working_set", "ewr")), strict=True))
    assert ws[16384] == 1.0 and ws[18432] < 0.6
    read = c.tables["scaling"]["read_gbs"]
    assert 5.6 < read[5] / read[0] < 6.1


def test_bad_input_is_one_error_line():
    proc = run_cli("characterize", "optane_100", "--quick", "--param", "xpline=100B")
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: config key `xpline`: 100B is not a power of two"), proc.stderr
    proc = run_cli("characterize", "hbm", "--quick")
    assert proc.returncode == 1 and "neither a preset" in proc.stderr
    with pytest.raises(tiersim.TiersimError, match="unknown test `bw`"):
        tiersim.characterize("ddr4_2666", tests=["bw"], quick=True)
