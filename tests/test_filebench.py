"""tiersim.filebench: the kernel file I/O path from Python (docs/model.md, Storage)."""

from __future__ import annotations

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
    slow = tiersim.filebench(device="optane_100", cache="dax", workload="write", threads=8, ops=2000,
                             device_params={"media_write_bandwidth": "0.6GB/s"})
    fast = tiersim.filebench(device="optane_100", cache="dax", workload="write", threads=8, ops=2000)
    assert slow["bandwidth_gbs"] < 0.7 < fast["bandwidth_gbs"]


def test_bad_keys_name_themselves():
    with pytest.raises(TiersimError, match="threds"):
        tiersim.filebench(threds=2)
    with pytest.raises(TiersimError, match="dax needs a pmem device"):
        tiersim.filebench(cache="dax")
    with pytest.raises(TiersimError, match="read_latncy"):
        tiersim.filebench(device_params={"read_latncy": "1us"})
