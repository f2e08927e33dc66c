"""Measured data as users have it (issue 35): calibrate on every stored Mess curve file exactly as
published and on the MLC and CSV samples, characterize a calibrated platform's node and a preset
file, bad curve files as one error line naming file and line, and --json output that parses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
import tiersim
from conftest import run_cli

REPO = Path(__file__).resolve().parent.parent
MESS = REPO / "crates" / "tiersim-devices" / "tests" / "data" / "curves"
SAMPLES = REPO / "tests" / "data" / "curves"
NOISE = "clamped to 0 MB/s, idle noise kept as idle latency samples"
CYCLES = "latency in cycles at 2.1 GHz, divided by 2.1"

# (id, curves, device, params, cycles GHz, read percents fitted, notes per curve, worst latency
# error at 10-90 % of each maximum, worst maximum error, both in % rounded to 0.1). Each file as
# stored, its unit as its folder's README gives it.
CASES = [
    ("skylake_98_52", [MESS / "skylake-ddr4"], "dram", {"channels": 6}, None, [52, 98], [[], []], 5.3, 0.1),
    (
        "skylake_100_2",
        [MESS / "skylake-ddr4-7746acbf"],
        "dram",
        {"channels": 6},
        None,
        [2, 100],
        [[f"{NOISE}: line 58 (-0.021395974411309027 MB/s)"], []],
        3.9,
        0.1,
    ),
    (
        "skylake_48_52_cycles",
        [MESS / "skylake-ddr4-2eb5ef69"],
        "dram",
        {"channels": 6},
        2.1,
        [48, 52],
        [[CYCLES], [CYCLES]],
        3.6,
        1.3,
    ),
    ("cxl_cycles", [MESS / "cxl"], "cxl", None, 2.1, [4, 50, 100], [[CYCLES]] * 3, 4.4, 6.5),
    ("mlc", [SAMPLES / "mlc_loaded_latency.txt"], "dram", {"channels": 6}, None, [50, 67, 100], [[]] * 3, 2.5, 0.5),
    ("csv", [SAMPLES / "named_columns.csv"], "dram", {"channels": 6}, None, [50, 100], [[], []], 0.8, 0.1),
]


@pytest.mark.parametrize(
    "curves, device, params, ghz, percents, notes, worst, worst_max", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_calibrate_every_stored_curve_as_published(curves, device, params, ghz, percents, notes, worst, worst_max):
    cal = tiersim.calibrate(curves, device, params=params, cycles_ghz=ghz)
    assert [c["read_percent"] for c in cal.read["curves"]] == percents
    assert [c["notes"] for c in cal.read["curves"]] == notes
    cmp = cal.comparison
    assert sorted(set(cmp["read_percent"].to_list())) == percents
    # Six points and the maximum per curve: the per-point error table.
    assert len(cmp) == 7 * len(percents)
    points = cmp.filter(pl.col("fraction") < 1.0)["error"].abs().max()
    maxima = cmp.filter(pl.col("fraction") == 1.0)["error"].abs().max()
    assert (round(points * 100, 1), round(maxima * 100, 1)) == (worst, worst_max), cmp


def test_calibrate_cli_reports_what_it_read(tmp_path: Path):
    """The fit report names each curve with what the reader did (cycles, noise) and the skipped
    file; the per-point table follows; the platform and the preset file are written."""
    plat, preset = tmp_path / "cxl.toml", tmp_path / "cxl_preset.toml"
    proc = run_cli(
        "calibrate",
        str(MESS / "cxl"),
        "--device",
        "cxl",
        "--cycles-ghz",
        "2.1",
        "--port-to-core-ns",
        "24.3",
        "--ratio",
        "100",
        "--ratio",
        "50",
        "-o",
        str(plat),
        "--preset-out",
        str(preset),
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == (
        f"curve {MESS / 'cxl' / 'bwlat_50.txt'}: 50 % reads, 37 rows; {CYCLES}; "
        "24.3 ns of on-chip path added to every latency"
    )
    assert lines[2] == f"skipped {MESS / 'cxl' / 'bwlat_0.txt'}: bandwidth only, no latency column"
    # Exactly the committed preset cxl_expander.
    assert 'link_latency = "46ns"' in lines and "load_linear_write_ns = 40.591" in lines
    assert "Model vs measured" in proc.stdout
    shipped = tiersim.characterize("cxl_expander", tests=["idle_latency"], quick=True).params
    from_file = tiersim.characterize(str(preset), tests=["idle_latency"], quick=True).params
    assert from_file == shipped


def test_characterize_calibrated_platform_node_and_preset_file(tmp_path: Path):
    """`characterize calibrated.toml --node dram0 --test bwlat --compare DIR` runs and scores the
    fitted device: exactly the errors calibrate printed. So does its preset file by path, and
    `calibrate --compare` with either."""
    curves = MESS / "skylake-ddr4-7746acbf"
    plat, preset = tmp_path / "calibrated.toml", tmp_path / "sky.toml"
    cal = tiersim.calibrate(curves, "dram", params={"channels": 6})
    plat.write_text(cal.platform_toml)
    preset.write_text(cal.preset_toml)
    out = tmp_path / "ch"
    proc = run_cli(
        "characterize", str(plat), "--node", "dram0", "--test", "bwlat", "--compare", str(curves), "-o", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    assert "Model vs measured" in proc.stdout and f"{NOISE}: line 58" in proc.stdout
    scored = pl.read_csv(out / "bwlat_compare.csv")
    assert scored["error"].to_list() == pytest.approx(cal.comparison["error"].to_list(), abs=1e-12)
    by_path = tiersim.characterize(str(preset), tests=["bwlat"], compare=curves)
    assert by_path.comparison["error"].to_list() == pytest.approx(cal.comparison["error"].to_list(), abs=1e-12)
    for args in (["--compare", str(plat), "--node", "dram0"], ["--compare", str(preset)]):
        proc = run_cli("calibrate", str(curves), *args)
        assert proc.returncode == 0, proc.stderr
        assert "Model vs measured" in proc.stdout and "0.03909" in proc.stdout, proc.stdout
    proc = run_cli("characterize", str(plat), "--test", "bwlat")
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"error: invalid argument `node`: {plat} is a platform file: name one of its nodes with --node (dram0)"
    )
    proc = run_cli("characterize", str(plat), "--node", "cxl0")
    assert proc.stderr.strip() == f"error: invalid argument `node`: {plat} has no node `cxl0`; its nodes: dram0"


BAD = {
    "empty": (b"", "1: empty file; expected Mess rows"),
    "one_row": (b"1000\t90\n", "1: 1 row; a curve needs at least 3, from idle up to saturation"),
    "never_rises": (b"5000\t200\n5000\t150\n5000\t90\n", "1: the bandwidth never rises (every row holds 5000 MB/s)"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "1: binary data (byte 0x89 at offset 0), not a text curve"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_curve_file_is_one_line_naming_file_and_line(tmp_path: Path, name: str):
    content, want = BAD[name]
    curve = tmp_path / "bwlat_50.txt"
    curve.write_bytes(content)
    outputs = [tmp_path / "p.toml", tmp_path / "preset.toml", tmp_path / "plot"]
    for target in (curve, tmp_path):
        proc = run_cli(
            "calibrate",
            str(target),
            "--device",
            "dram",
            "-o",
            str(outputs[0]),
            "--preset-out",
            str(outputs[1]),
            "--plot",
            str(outputs[2]),
        )
        assert proc.returncode == 1
        assert proc.stdout == ""
        assert proc.stderr.splitlines() == [proc.stderr.strip()], proc.stderr
        assert proc.stderr.startswith(f"error: {curve}:{want}"), proc.stderr
        assert not any(p.exists() for p in outputs)
    proc = run_cli("characterize", "skylake_ddr4", "--test", "bwlat", "--compare", str(curve), "-o", str(outputs[2]))
    assert proc.returncode == 1 and proc.stderr.startswith(f"error: {curve}:{want}"), proc.stderr
    assert not outputs[2].exists()


def test_directory_without_curves_is_a_directory(tmp_path: Path):
    (tmp_path / "notes.txt").write_text("measured on Tuesday\n")
    proc = run_cli("calibrate", str(tmp_path), "--device", "dram", "-o", str(tmp_path / "p.toml"))
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"error: {tmp_path}: directory holds no curves (Mess bwlat_R.txt, Intel MLC output or curve CSV)"
    )


def test_integer_option_says_an_integer(tmp_path: Path):
    proc = run_cli("gen", "random", "--threads", "100000", "-o", str(tmp_path / "t.trace"))
    assert proc.returncode == 1
    assert "expected an integer in [1, 4096]" in proc.stderr, proc.stderr
    proc = run_cli("gen", "random", "--threads", "2.5", "-o", str(tmp_path / "t.trace"))
    assert proc.returncode == 2 and "an integer" in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def json_runs(tmp_path_factory: pytest.TempPathFactory, random_trace: Path) -> dict[str, list[str]]:
    """Every command that has --json, with arguments that make it succeed."""
    tmp = tmp_path_factory.mktemp("json")
    first, second = tmp / "r1", tmp / "r2"
    for run_dir in (first, second):
        proc = run_cli("run", str(random_trace), "-p", "epyc_cxl_nps1", "-o", str(run_dir))
        assert proc.returncode == 0, proc.stderr
    return {
        "run": ["run", str(random_trace), "-p", "epyc_cxl_nps1", "-o", str(tmp / "r3")],
        "filebench": ["filebench", "--param", "ops=200", "-o", str(tmp / "fb")],
        "flash replay": ["flash", "replay", str(random_trace), "-o", str(tmp / "fl")],
        "compare": ["compare", str(first), str(second)],
        "trace inspect": ["trace", "inspect", str(random_trace)],
        "trace verify": ["trace", "verify", str(random_trace)],
        "trace stats": ["trace", "stats", str(random_trace), "--png", str(tmp / "s.png")],
        "list": ["list", "presets"],
    }


@pytest.mark.parametrize(
    "command", ["run", "filebench", "flash replay", "compare", "trace inspect", "trace verify", "trace stats", "list"]
)
def test_json_output_is_the_json_alone(json_runs: dict[str, list[str]], command: str):
    proc = run_cli(*json_runs[command], "--json")
    assert proc.returncode == 0, proc.stderr
    # json.loads refuses anything beside the one JSON value ("Extra data"): a "wrote DIR" line on
    # standard output fails here.
    assert json.loads(proc.stdout)


def test_mess_directory_as_published_needs_no_editing(tmp_path: Path):
    """The issue's first report: Mess's own skylake folder, noise rows and all, copied as it is."""
    for f in (MESS / "skylake-ddr4-7746acbf").iterdir():
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "README.md").write_text("# skylake-ddr4\n")
    proc = run_cli(
        "calibrate", str(tmp_path), "--device", "dram", "--param", "channels=6", "-o", str(tmp_path / "p.toml")
    )
    assert proc.returncode == 0, proc.stderr
    assert f"{NOISE}: line 58" in proc.stdout and f"skipped {tmp_path / 'README.md'}: not a curve file" in proc.stdout
