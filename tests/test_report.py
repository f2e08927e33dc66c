"""report.html for a run, several runs and a sweep; tiersim compare; the page opened in headless
Chromium loads every image with no console error."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
import tiersim
from browser import check_page, chromium_path
from conftest import PLATFORM, run_cli
from tiersim import report as rp
from tiersim import sweep as sw

PHASED = {"accesses": 100_000, "footprint": "16MiB", "threads": 2}
PRESSURE = {"scale": 1.0, "nodes.dram0.capacity": "8MiB", "nodes.cxl0.capacity": "64MiB"}
TPP = {"scan_delay": "0s", "scan_period_min": "100us", "scan_period_max": "1ms"}

SWEEP = """
[sweep]
seeds = [1]
baseline = "linux_default"

[sweep.grid]
"host.mlp" = [4, 10]

[[platform]]
name = "epyc_cxl_nps1"
set = { scale = 1.0, "nodes.dram0.capacity" = "8MiB", "nodes.cxl0.capacity" = "64MiB" }

[[platform]]
label = "tiny"
name = "dram_only"
set = { scale = 1.0, "nodes.dram0.capacity" = "1MiB", "swap.enabled" = false }

[[trace]]
label = "phased"
gen = "phased"
params = { accesses = 60000, footprint = "16MiB", threads = 2 }

[[policy]]
name = "linux_default"

[[policy]]
name = "tpp"
params = { scan_delay = "0s", scan_period_min = "100us", scan_period_max = "1ms" }
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("runs")
    common = {"generator": "phased", "generator_params": PHASED, "platform": PLATFORM, "overrides": PRESSURE, "seed": 1}
    tiersim.run(**common, out_dir=d / "first_touch")
    tiersim.run(**common, policy="tpp", params=TPP, out_dir=d / "tpp")
    return d / "first_touch", d / "tpp"


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("sweep")
    (d / "spec.toml").write_text(SWEEP)
    rep = sw.run_sweep(d / "spec.toml", d / "out", workers=2)
    assert (rep.ok, rep.failed) == (4, 4)
    return d / "out"


@pytest.fixture(scope="module")
def sweep_page(tiny_sweep: Path) -> Path:
    return rp.write_report([tiny_sweep / "results.parquet"])


@pytest.fixture(scope="module")
def svg_page(runs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("svg") / "both.html"
    proc = run_cli("report", *(str(r) for r in runs), "-o", str(out), "--format", "svg")
    assert proc.returncode == 0, proc.stderr
    return out


def images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/(?:png|svg\+xml);base64,([^"]+)"', page)]


def test_run_report_is_self_contained_with_the_run_figures(runs: tuple[Path, Path]):
    _, tpp = runs
    proc = run_cli("report", str(tpp))
    assert proc.returncode == 0, proc.stderr
    page = (tpp / "report.html").read_text()
    imgs = images(page)
    # occupancy heatmap, migration timeline, latency CDF; all real PNGs
    assert len(imgs) == 3
    assert all(i.startswith(b"\x89PNG\r\n\x1a\n") for i in imgs)
    # nothing is fetched: no external src/href, no scripts
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert "<script" not in page
    summary = json.loads((tpp / "summary.json").read_text())
    assert f"{summary['execution_time_ns'] / 1e6:.4g}" in page
    assert "hot_0..hot_8" in page  # says why the hotness figure is missing
    # report.html does not stop a rerun into the same directory
    tiersim.run(
        generator="phased",
        generator_params=PHASED,
        platform=PLATFORM,
        overrides=PRESSURE,
        seed=1,
        policy="tpp",
        params=TPP,
        out_dir=tpp,
    )
    assert not (tpp / "report.html").exists()


def test_hotness_columns_are_drawn_when_present(runs: tuple[Path, Path], tmp_path: Path):
    _, tpp = runs
    run = tmp_path / "hot"
    shutil.copytree(tpp, run)
    ts = pl.read_parquet(run / "timeseries.parquet")
    # Each node row's pages split over levels 0..8, as the engine writes them.
    cols = [(pl.col("pages") * ((level + 1) / 45)).cast(pl.Int64).alias(f"hot_{level}") for level in range(9)]
    ts.with_columns(cols).write_parquet(run / "timeseries.parquet")
    loaded = rp.load_run(run)
    assert set(rp.hot_columns(loaded.timeseries)) == {"dram0", "cxl0"}
    m = rp._hot_matrix(loaded.timeseries, rp.hot_columns(loaded.timeseries)["dram0"], "dram0")
    last = loaded.timeseries.filter(pl.col("node") == "dram0").sort("epoch")["pages"][-1]
    assert m.shape[0] == 9 and m[:, -1].sum() <= last and m[8, -1] == int(last * 9 / 45)
    out = rp.write_report([run])
    page = out.read_text()
    assert len(images(page)) == 4
    assert "hot_0..hot_8" not in page
    assert "seed 002 fig. 11" in page or "hotness level" in page


def test_compare_prints_runs_side_by_side(runs: tuple[Path, Path]):
    first, tpp = runs
    proc = run_cli("compare", str(first), str(tpp), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["runs"] == ["first_touch", "tpp"]
    a, b = (json.loads((d / "summary.json").read_text()) for d in runs)
    m = data["metrics"]
    assert m["execution time (ms)"] == [a["execution_time_ns"] / 1e6, b["execution_time_ns"] / 1e6]
    assert m["time / first"] == [1.0, b["execution_time_ns"] / a["execution_time_ns"]]
    assert m["demotions"] == [0, b["tiering"]["demotions"]] and b["tiering"]["demotions"] > 0
    table = run_cli("compare", str(first), str(tpp))
    assert table.returncode == 0
    assert "first_touch" in table.stdout and "tpp" in table.stdout and "time / first" in table.stdout
    bad = run_cli("compare", str(first), str(first.parent / "nope"))
    assert bad.returncode == 1 and "is not a run directory" in bad.stderr


def test_runs_on_platforms_with_other_nodes_are_reported_side_by_side(runs: tuple[Path, Path], tmp_path: Path):
    # dram_only has one node, the first run's platform two: every node's rows are listed, blank
    # where a run has no such node (the report used to index the first run's rows: IndexError).
    first, _ = runs
    dram = tmp_path / "dram"
    tiersim.run(generator="phased", generator_params=PHASED, platform="dram_only", seed=1, out_dir=dram)
    a, b = (json.loads((d / "summary.json").read_text()) for d in (first, dram))
    assert len(a["nodes"]) != len(b["nodes"])
    data = json.loads(run_cli("compare", str(first), str(dram), "--json").stdout)["metrics"]
    for n in a["nodes"]:
        assert data[f"{n['name']} share of accesses"][0] == n["share"]
        if n["name"] not in {m["name"] for m in b["nodes"]}:
            assert data[f"{n['name']} share of accesses"][1] is None
    assert data["time / first"] == [1.0, b["execution_time_ns"] / a["execution_time_ns"]]
    out = tmp_path / "two.html"
    proc = run_cli("report", str(first), str(dram), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    assert all(f"{n['name']} share of accesses" in page for n in a["nodes"] + b["nodes"])


def test_sweep_report_normalises_to_the_baseline_and_lists_failures(tiny_sweep: Path, sweep_page: Path):
    assert sweep_page == tiny_sweep / "report.html"
    page = sweep_page.read_text()
    df = pl.read_parquet(tiny_sweep / "results.parquet")
    ok = df.filter((pl.col("status") == "ok") & (pl.col("set.host.mlp") == 4))
    base = ok.filter(pl.col("policy") == "linux_default")["execution_time_ns"][0]
    tpp = ok.filter(pl.col("policy") == "tpp")["execution_time_ns"][0]
    assert f'<td class="num">{tpp / base:.4g}</td>' in page
    assert "Failed runs" in page
    assert page.count("out of memory") == 4  # every run on the tiny platform, one row each
    # bars + one latency CDF per group (2 ok groups) + occupancy and migrations of the 4 ok runs
    assert len(images(page)) == 1 + 2 + 4 * 2
    rows = rp.sweep_rows(df, "linux_default")
    assert sum(r["normalized"] == 1.0 for r in rows) == 2


def test_report_errors(tmp_path: Path, tiny_sweep: Path, runs: tuple[Path, Path], svg_page: Path):
    proc = run_cli("report", str(tmp_path))
    assert proc.returncode == 1 and "is not a run directory" in proc.stderr
    proc = run_cli("report", str(tiny_sweep), "--baseline", "nope")
    assert proc.returncode == 1 and "baseline 'nope' is not a policy" in proc.stderr
    proc = run_cli("report", *(str(r) for r in runs))
    assert proc.returncode == 1 and "-o FILE" in proc.stderr
    svgs = images(svg_page.read_text())
    assert len(svgs) == 1 + 1 + 2 * 2  # bars, CDF, occupancy and migrations of both runs
    assert all(i.lstrip().startswith(b"<?xml") for i in svgs)


needs_chromium = pytest.mark.skipif(chromium_path() is None, reason="Chromium missing: run `make browser`")


@needs_chromium
def test_reports_load_in_a_real_browser(sweep_page: Path, svg_page: Path):
    for page in (sweep_page, svg_page):
        check = check_page(page)
        assert check.title.startswith("tiersim")
        assert len(check.images) == len(images(page.read_text())) > 0
        assert check.broken_images == [], check.broken_images
        assert check.console_errors == [], check.console_errors


@needs_chromium
def test_the_browser_check_catches_a_broken_page(tmp_path: Path):
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><head><title>broken</title></head><body>"
        '<img src="data:image/png;base64,AAAA"><img src="missing.png">'
        "<script>console.error('boom')</script></body></html>"
    )
    check = check_page(page)
    assert len(check.broken_images) == 2
    assert any("boom" in e for e in check.console_errors)
