"""A sweep on a real Dask cluster (distributed.LocalCluster, two worker processes) gives the same
table as the same sweep on local processes."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from conftest import run_cli
from tiersim import sweep as sw

distributed = pytest.importorskip("distributed")

SPEC = """
[sweep]
platforms = ["epyc_cxl_nps1", "epyc_cxl_nps4"]
seeds = [1, 2]
set = { scale = 0.0001 }

[[platform]]
label = "tiny"
name = "dram_only"
set = { scale = 1.0, "nodes.dram0.capacity" = "1MiB", "swap.enabled" = false }

[[trace]]
label = "rand"
gen = "random"
params = { accesses = 30000, footprint = "8MiB", threads = 2 }

[[trace]]
label = "file"
path = "TRACE"

[[policy]]
name = "linux_default"

[[policy]]
name = "interleave"
"""


def test_dask_local_cluster_equals_local_run(tmp_path: Path, random_trace: Path):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.replace("TRACE", str(random_trace)))
    local = sw.run_sweep(spec, tmp_path / "local", workers=2)
    assert local.total == 2 * 3 * 2 * 2
    # The tiny platform fails every run (out of memory without swap) on both back ends.
    assert (local.ok, local.failed) == (16, 8)

    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, protocol="tcp"
    ) as cluster:
        proc = run_cli("sweep", str(spec), "-o", str(tmp_path / "dask"), "--scheduler", cluster.scheduler_address)
        assert proc.returncode == 0, proc.stderr
        assert "ran ok         16" in proc.stdout, proc.stdout
        # A rerun against the cluster finds everything done and submits nothing.
        again = run_cli("sweep", str(spec), "-o", str(tmp_path / "dask"), "--scheduler", cluster.scheduler_address)
        assert again.returncode == 0, again.stderr
        assert "24 of 24 runs already done" in again.stderr

    got = pl.read_parquet(tmp_path / "dask" / sw.RESULTS_FILE).drop("wall_time_s")
    want = local.results.drop("wall_time_s")
    assert got.equals(want)
    # Same run directories, byte for byte, except summary.json's trace path for generator traces
    # (each worker generates into its own cache).
    for row in want.filter(pl.col("status") == "ok").iter_rows(named=True):
        for name in ("timeseries.parquet", "config.toml"):
            a = (tmp_path / "local" / row["run_dir"] / name).read_bytes()
            b = (tmp_path / "dask" / row["run_dir"] / name).read_bytes()
            assert a == b or (name == "config.toml" and row["trace"] == "rand"), (row["hash"], name)


def test_unreachable_scheduler_is_one_clear_error(tmp_path: Path, random_trace: Path):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.replace("TRACE", str(random_trace)))
    proc = run_cli("sweep", str(spec), "-o", str(tmp_path / "out"), "--scheduler", "tcp://127.0.0.1:1", timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: cannot connect to the Dask scheduler at 'tcp://127.0.0.1:1'"), proc.stderr
    assert "Traceback" not in proc.stderr
