"""`tiersim characterize`: quick runs on every device preset, the files it writes, and the
seed 000 shape numbers on the Optane preset."""

from __future__ import annotations

import json
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
    for name in [
        "idle_latency",
        "bandwidth_threads",
        "bandwidth_size",
        "ewr_size",
        "ewr_threads",
        "ewr_working_set",
        "loaded_latency",
        "scaling",
        "remote_latency",
        "remote_bandwidth",
    ]:
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


REPO = Path(__file__).resolve().parent.parent
MY_CURVES = REPO / "examples" / "curves" / "my_ddr5"
SKYLAKE = REPO / "crates" / "tiersim-devices" / "tests" / "data" / "curves" / "skylake-ddr4"


def test_bwlat_writes_mess_files_and_compares(tmp_path: Path):
    out = tmp_path / "bw"
    proc = run_cli(
        "characterize", "skylake_ddr4", "--test", "bwlat", "--quick", "--compare", str(SKYLAKE), "-o", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    assert "Model vs measured" in proc.stdout
    # One Mess file per compared read ratio, MB/s then ns, saturated end first.
    for r in (52, 98):
        rows = [tuple(map(float, line.split())) for line in (out / "bwlat" / f"bwlat_{r}.txt").read_text().splitlines()]
        assert len(rows) == 6 and rows[0][0] > rows[-1][0] and rows[0][1] > rows[-1][1] > 60
    assert (out / "bwlat.png").read_bytes()[:4] == b"\x89PNG"
    cmp = pl.read_csv(out / "bwlat_compare.csv")
    # Even the quick sweep of the fitted preset lands within 5 % of the measured maxima.
    maxima = cmp.filter(pl.col("fraction") == 1.0)
    assert (maxima["error"].abs() < 0.05).all(), maxima


def test_calibrate_own_curves_end_to_end(tmp_path: Path):
    """A user's own Mess-format files -> calibrate -> run -p with the platform it writes."""
    plat = tmp_path / "mine.toml"
    proc = run_cli(
        "calibrate",
        str(MY_CURVES),
        "--device",
        "dram",
        "--param",
        "channels=4",
        "--param",
        "channel_bandwidth=38.4GB/s",
        "-o",
        str(plat),
        "--plot",
        str(tmp_path / "plot"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Model vs measured" in proc.stdout and "load_linear_ns" in proc.stdout
    assert (tmp_path / "plot" / "bwlat.png").read_bytes()[:4] == b"\x89PNG"
    cal = tiersim.calibrate(MY_CURVES, "dram", params={"channels": 4, "channel_bandwidth": "38.4GB/s"})
    maxima = cal.comparison.filter(pl.col("fraction") == 1.0)
    assert sorted(maxima["read_percent"].to_list()) == [60, 100]
    assert (maxima["error"].abs() < 0.05).all(), maxima
    points = cal.comparison.filter(pl.col("fraction") < 1.0)
    assert (points["error"].abs() < 0.10).all(), points
    run_dir = tmp_path / "run"
    proc = run_cli(
        "run",
        "-p",
        str(plat),
        "--gen",
        "stream",
        "--gen-param",
        "footprint=8MiB",
        "--gen-param",
        "accesses=20000",
        "--gen-param",
        "threads=4",
        "-o",
        str(run_dir),
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["accesses"] == 20000
    # The run uses the fitted device, not the base preset: 4 x 38.4 GB/s x the fitted efficiency is
    # the curves' 128 GB/s read maximum (the base ddr4_2666, one channel, would give 21.33 x 0.85 = 18.1).
    (node,) = summary["nodes"]
    assert node["peak_bandwidth_gbs"] == pytest.approx(128.0, rel=1e-3), node


def test_calibrate_bad_input_is_one_error_line(tmp_path: Path):
    (tmp_path / "bwlat_70.txt").write_text("100 80\n200 eighty\n300 82\n")
    proc = run_cli("calibrate", str(tmp_path), "--device", "dram", "-o", str(tmp_path / "p.toml"))
    assert proc.returncode == 1
    assert "bwlat_70.txt:2: expected two numbers (bandwidth MB/s, latency ns), got `200 eighty`" in proc.stderr, (
        proc.stderr
    )
    proc = run_cli("calibrate", str(MY_CURVES), "--device", "ssd", "-o", str(tmp_path / "p.toml"))
    assert proc.returncode == 1 and "`ssd` cannot be calibrated; valid: dram, cxl" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "dram", "--base", "ddr4_266"], "invalid argument `base`: `ddr4_266` is neither a preset"),
        (["--device", "ddr4_2666"], "invalid argument `device`: `ddr4_2666` cannot be calibrated; valid: dram, cxl"),
        (
            ["--device", "cxl", "--base", "ddr4_2666"],
            "invalid argument `base`: `ddr4_2666` is a dram preset, not a cxl one",
        ),
    ],
)
def test_calibrate_names_the_option_that_is_wrong(tmp_path: Path, args: list[str], message: str):
    proc = run_cli("calibrate", str(MY_CURVES), *args, "-o", str(tmp_path / "p.toml"))
    assert proc.returncode == 1 and proc.stderr.count("error:") == 1, proc.stderr
    assert message in proc.stderr, proc.stderr
    assert not (tmp_path / "p.toml").exists()
