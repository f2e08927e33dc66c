"""Trace tools through the Python API and the CLI: convert, sample, mix, stats, the new
generators. Small traces only: the whole file runs in seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiersim
from conftest import run_cli

DATA = Path(__file__).resolve().parent.parent / "crates" / "tiersim-trace" / "tests" / "data"


@pytest.mark.parametrize("name", ["hashmap", "matmul", "minheap", "kv", "graph", "stencil", "phased"])
def test_new_generators_write_deterministic_traces(tmp_path: Path, name: str):
    params = {"footprint": "512KiB", "accesses": 20_000, "threads": 2}
    a = tiersim.generate_with(name, tmp_path / "a.trace", params, seed=3)
    b = tiersim.generate_with(name, tmp_path / "b.trace", params, seed=3)
    assert (tmp_path / "a.trace").read_bytes() == (tmp_path / "b.trace").read_bytes()
    expected = 20_000 if name != "phased" else a["accesses"]
    assert a["accesses"] == b["accesses"] == expected
    assert len(a["per_cpu"]) == 2
    # Pages touched stay within the footprint plus alignment slack.
    assert 0 < a["footprint_pages"] <= 128 + 8


def test_matmul_counts_follow_the_formula(tmp_path: Path):
    # n = 32: one multiply is 2 n^3 reads and n^2 writes.
    info = tiersim.generate("matmul", tmp_path / "m.trace", footprint=24576, accesses=2 * 32**3 + 32**2)
    assert (info["reads"], info["writes"]) == (2 * 32**3, 32**2)


def test_committed_formats_read_to_the_same_stream(tmp_path: Path):
    out = {}
    for name, fmt in [("small.lackey", "lackey"), ("small.csv", "csv"), ("small.trace", None)]:
        dst = tmp_path / f"{name}.csv"
        tiersim.convert(DATA / name, dst, dst_format="csv", src_format=fmt)
        out[name] = dst.read_text()
    assert out["small.lackey"] == out["small.csv"] == out["small.trace"] == (DATA / "small.csv").read_text()


def test_convert_round_trip_native_csv_native(tmp_path: Path, random_trace: Path):
    csv = tmp_path / "r.csv"
    back = tmp_path / "back.trace"
    stats = tiersim.convert(random_trace, csv, dst_format="csv")
    assert stats["accesses"] == 20_000
    tiersim.convert(csv, back, dst_format="native", src_format="csv")
    a, b = tiersim.inspect(random_trace), tiersim.inspect(back)
    for key in ("accesses", "reads", "writes", "bytes", "footprint_pages", "time_last", "per_cpu"):
        assert a[key] == b[key], key


def test_sample_and_mix(tmp_path: Path, random_trace: Path):
    s = tiersim.sample(random_trace, tmp_path / "s.trace", cpus=[1], every=4)
    assert s["per_cpu"] == [0, 2500]
    m = tiersim.mix([random_trace, tmp_path / "s.trace"], tmp_path / "m.trace")
    assert m["per_cpu"] == [10_000, 10_000, 0, 2500]
    with pytest.raises(tiersim.TiersimError, match="overlap"):
        tiersim.mix([random_trace, random_trace], tmp_path / "x.trace", first_cpus=[0, 1])


def test_stats_histograms(tmp_path: Path):
    tiersim.generate("stride", tmp_path / "s.trace", footprint="1MiB", accesses=32768)
    st = tiersim.trace_stats(tmp_path / "s.trace", max_points=1000)
    assert st["pages"] == 256
    assert st["reuse_distance"]["cold"] == 256
    assert st["hotness"]["buckets"] == [{"lo": 128, "hi": 256, "count": 256}]


def test_cli_convert_sample_stats_mix(tmp_path: Path, random_trace: Path):
    r = run_cli(
        "trace", "convert", str(DATA / "small.lackey"), str(tmp_path / "l.trace"), "--from", "lackey", "--to", "native"
    )
    assert r.returncode == 0, r.stderr
    assert tiersim.inspect(tmp_path / "l.trace")["accesses"] == 27
    r = run_cli("trace", "sample", str(random_trace), "-o", str(tmp_path / "s.trace"), "--cpus", "0", "--every", "10")
    assert r.returncode == 0, r.stderr
    assert tiersim.inspect(tmp_path / "s.trace")["per_cpu"] == [1000]
    png = tmp_path / "s.png"
    r = run_cli("trace", "stats", str(tmp_path / "s.trace"), "--png", str(png), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["accesses"] == 1000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = run_cli("mix", str(random_trace), str(tmp_path / "s.trace"), "-o", str(tmp_path / "m.trace"))
    assert r.returncode == 0, r.stderr
    assert tiersim.inspect(tmp_path / "m.trace")["per_cpu"] == [10_000, 10_000, 1000]


def test_cli_malformed_line_names_file_and_line(tmp_path: Path):
    bad = tmp_path / "bad.mqsim"
    bad.write_text("0 0 4096 8 1\n5 0 4096 8 R\n")
    r = run_cli("trace", "convert", str(bad), str(tmp_path / "o.trace"), "--from", "mqsim", "--to", "native")
    assert r.returncode == 1
    assert f"{bad}:2: type" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "o.trace").exists()
    # A text file is not taken for native.
    r = run_cli("trace", "stats", str(bad))
    assert r.returncode == 1 and "name its format" in r.stderr


def test_cli_verify_rejects_swapped_frames_that_inspect_passes(tmp_path: Path, random_trace: Path):
    # Issue 15 section 2: inspect shows the header's figures, marked unverified; verify decodes.
    r = run_cli("trace", "inspect", str(random_trace))
    assert r.returncode == 0, r.stderr
    assert "header, unverified" in r.stdout
    r = run_cli("trace", "verify", str(random_trace), "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["verified"] is True and info["frames_checked"] >= 1
    assert info["accesses"] == tiersim.inspect(random_trace)["accesses"]
    # Flip the header's time-unit byte (14) to the other valid value: the header checksum fails.
    bad = tmp_path / "bad.trace"
    b = bytearray(random_trace.read_bytes())
    b[14] ^= 1
    bad.write_bytes(bytes(b))
    for cmd in ("inspect", "verify"):
        r = run_cli("trace", cmd, str(bad))
        assert r.returncode == 1
        assert f"{bad}: at byte offset 96: header checksum mismatch" in r.stderr
        assert "Traceback" not in r.stderr


def test_cli_stats_counts_mapping_records_apart(tmp_path: Path):
    # A 300 MiB mapped file takes two mapping records (256 MiB each at most); they are no accesses.
    t = tmp_path / "f.trace"
    tiersim.generate("fileio", t, accesses=2000, file_access="mmap", file_size="300MiB")
    st = tiersim.trace_stats(t)
    assert st["mapping_records"] == 2
    assert st["mapped_bytes"] == 300 << 20
    assert tiersim.inspect(t)["accesses"] == st["accesses"] + 2
    r = run_cli("trace", "stats", str(t))
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "file mapping records" in ln)
    assert "2 (300.00 MiB of files)" in line, line


def test_the_api_names_a_bad_argument(tmp_path: Path, random_trace: Path):
    # Negative counts reached the native call as OverflowError ("can't convert negative int to
    # unsigned"), and a path given where a list goes was split into characters.
    out = tmp_path / "o.trace"
    with pytest.raises(tiersim.TiersimError, match=r"every: -1 is out of range; expected an integer in \[1, 2\^64-1\]"):
        tiersim.sample(random_trace, out, every=-1)
    with pytest.raises(tiersim.TiersimError, match=r"page_size: -1 is out of range"):
        tiersim.convert(random_trace, tmp_path / "o.csv", dst_format="csv", page_size=-1)
    with pytest.raises(tiersim.TiersimError, match=r"max_points: -1 is out of range"):
        tiersim.trace_stats(random_trace, max_points=-1)
    with pytest.raises(TypeError, match="inputs: a list of trace paths, not one path"):
        tiersim.mix(str(random_trace), out)
    with pytest.raises(TypeError, match="argv: a list of strings"):
        tiersim.capture("/bin/true", out)
    with pytest.raises(TypeError, match="argv: a list of strings"):
        tiersim.capture_instrumented("/bin/true", out)
    assert not out.exists() and not (tmp_path / "o.csv").exists()
