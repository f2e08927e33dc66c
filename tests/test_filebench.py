"""tiersim.filebench: the kernel file I/O path from Python (docs/model.md, Storage)."""

from __future__ import annotations

import json

import pytest
import tiersim
from tiersim import TiersimError


def test_direct_ssd_read_is_the_sum_of_its_layers():
    r = tiersim.filebench(device="optane_ssd", cache="direct", threads=1, ops=200)
    # 100 + 300 + 400 + 1000 + 500 ns of kernel before the device, 10 us + 8 KiB at 2.5 GB/s
    # of device, 3 us of interrupt completion.
    assert r["mean_latency_ns"] == pytest.approx(18_576.8, abs=1)
    assert r["layers_ns"]["completion"] == 3000
    polled = tiersim.filebench(device="optane_ssd", cache="direct", threads=1, ops=200, iopath={"completion": "poll"})
    assert r["mean_latency_ns"] - polled["mean_latency_ns"] == pytest.approx(2700, abs=1)


def test_device_params_reach_the_device():
    slow = tiersim.filebench(
        device="optane_100",
        cache="dax",
        workload="write",
        threads=8,
        ops=2000,
        device_params={"media_write_bandwidth": "0.6GB/s"},
    )
    fast = tiersim.filebench(device="optane_100", cache="dax", workload="write", threads=8, ops=2000)
    assert slow["bandwidth_gbs"] < 0.7 < fast["bandwidth_gbs"]


def test_bad_keys_name_themselves():
    with pytest.raises(TiersimError, match="threds"):
        tiersim.filebench(threds=2)
    with pytest.raises(TiersimError, match="dax needs a pmem device"):
        tiersim.filebench(cache="dax")
    with pytest.raises(TiersimError, match="read_latncy"):
        tiersim.filebench(device_params={"read_latncy": "1us"})


def test_cli_writes_a_directory_and_reruns_it_identically(tmp_path):
    from conftest import run_cli

    out = tmp_path / "fb"
    proc = run_cli(
        "filebench",
        "--device",
        "optane_ssd",
        "--cache",
        "direct",
        "--threads",
        "1",
        "--ops",
        "200",
        "--iopath",
        "completion=poll",
        "-o",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "summary.json"]
    s = json.loads((out / "summary.json").read_text())
    # The direct read of the test above, polled: 18,576.8 - 2,700 ns.
    assert s["mean_latency_ns"] == pytest.approx(15_876.8, abs=1)
    assert "mean latency" in proc.stdout and "15,877" in proc.stdout
    again = tmp_path / "fb2"
    proc = run_cli("filebench", "--config", str(out / "config.toml"), "-o", str(again), "--json")
    assert proc.returncode == 0, proc.stderr
    assert (again / "summary.json").read_bytes() == (out / "summary.json").read_bytes()
    assert json.loads(proc.stdout) == s
    # Options override the config.
    proc = run_cli(
        "filebench", "--config", str(out / "config.toml"), "--iopath", "completion=irq", "-o", str(again), "--json"
    )
    assert json.loads(proc.stdout)["mean_latency_ns"] == pytest.approx(18_576.8, abs=1)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--param", "blok_size=4KiB"], "blok_size"),
        (["--cache", "dx"], "buffered, direct, dax"),
        (["--device-param", "read_latncy=1us"], "read_latncy"),
    ],
)
def test_cli_bad_input_is_one_error_and_no_directory(tmp_path, args, fragment):
    from conftest import run_cli

    out = tmp_path / "fb"
    proc = run_cli("filebench", "--ops", "100", *args, "-o", str(out))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("error: ") and proc.stderr.count("error: ") == 1 and fragment in proc.stderr, (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr and not out.exists()
    proc = run_cli("filebench", "--threads", "2", "--param", "threads=3", "-o", str(out))
    assert proc.returncode == 2 and "--threads" in proc.stderr


def test_cli_refuses_a_foreign_directory(tmp_path):
    from conftest import run_cli

    (tmp_path / "mine.txt").write_text("keep me")
    proc = run_cli("filebench", "--ops", "100", "-o", str(tmp_path))
    assert proc.returncode == 1 and "mine.txt" in proc.stderr
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_run_executes_file_system_calls_through_the_shared_page_cache(tmp_path):
    from conftest import run_cli

    gen = [
        "--gen",
        "fileio",
        "--gen-param",
        "accesses=20000",
        "--gen-param",
        "footprint=4MiB",
        "--gen-param",
        "file_size=8MiB",
        "--gen-param",
        "file_share=0.5",
        "--gen-param",
        "file_write_ratio=0.5",
    ]
    out = tmp_path / "r"
    proc = run_cli(
        "run",
        "-p",
        "cascadelake_dcpmm",
        "--set",
        "scale=0.001",
        "--set",
        'swap.preset="nvme_ssd"',
        *gen,
        "-o",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert "file calls" in proc.stdout and "writeback" in proc.stdout
    pc = json.loads((out / "summary.json").read_text())["page_cache"]
    calls = pc["read_calls"] + pc["write_calls"]
    assert 9_500 < calls < 10_500
    assert pc["bytes_read"] + pc["bytes_written"] == calls * 4096
    # One stream, sequential: one miss, the rest read ahead.
    assert pc["misses"] == 1 and pc["hits"] == calls - 1
    assert pc["dirtied_pages"] == pc["writeback_pages_flusher"] + pc["writeback_pages_reclaim"] + pc["dirty_pages"]
    # Without a block device for the files: one error naming the access, no directory.
    bad = tmp_path / "bad"
    proc = run_cli("run", "-p", "cascadelake_dcpmm", "--set", "scale=0.001", *gen, "-o", str(bad))
    assert proc.returncode == 1 and proc.stderr.count("error: ") == 1 and "[swap]" in proc.stderr, proc.stderr
    assert not bad.exists()
