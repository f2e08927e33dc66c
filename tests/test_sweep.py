"""Sweeps: expansion and hashing, results equal to single runs, resume after a kill, failure
isolation (failed runs and dead workers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest
import tiersim
from conftest import run_cli, tiersim_cmd
from tiersim import sweep as sw

SPEC = """
[sweep]
platforms = ["epyc_cxl_nps1"]
seeds = [1, 2]
set = {{ scale = 0.0001 }}

[sweep.grid]
"host.mlp" = [4, 10]

[[trace]]
label = "rand"
gen = "random"
params = {{ accesses = {accesses}, footprint = "8MiB", threads = 2 }}

[[trace]]
label = "file"
path = "{trace}"

[[policy]]
name = "linux_default"

[[policy]]
name = "interleave"
[policy.grid]
weights = [[1, 1], [4, 1]]
"""


def write_spec(tmp_path: Path, trace: Path, accesses: int = 20_000, text: str = SPEC) -> Path:
    spec = tmp_path / "spec.toml"
    spec.write_text(text.format(accesses=accesses, trace=trace))
    return spec


def metrics(df: pl.DataFrame) -> pl.DataFrame:
    """Everything but the wall time, which is the one column that is not a simulation result."""
    return df.drop("wall_time_s").sort("hash")


def test_expansion_is_the_full_product_with_stable_hashes(tmp_path: Path, random_trace: Path):
    spec = write_spec(tmp_path, random_trace)
    s = sw.load_sweep(spec)
    # 2 traces x 1 platform x (1 + 2) policies x 2 mlp values x 2 seeds
    assert len(s.runs) == 2 * 3 * 2 * 2
    assert len({r.hash for r in s.runs}) == len(s.runs)
    labels = {r.policy_label for r in s.runs}
    assert labels == {"linux_default", "interleave_weights=1-1", "interleave_weights=4-1"}
    run = next(r for r in s.runs if r.policy_label == "interleave_weights=4-1")
    assert dict(run.policy_params) == {"weights": [4, 1]}
    assert run.overrides == ("scale=0.0001", "host.mlp=4")
    assert "mlp = 4.0" in run.resolved_platform
    # Same file, same hashes; a touched trace (same bytes, new mtime) keeps them too.
    again = sw.load_sweep(spec)
    assert [r.hash for r in again.runs] == [r.hash for r in s.runs]
    os.utime(random_trace, ns=(1, 1))
    assert [r.hash for r in sw.load_sweep(spec).runs] == [r.hash for r in s.runs]


def test_hash_changes_with_every_input(tmp_path: Path, random_trace: Path):
    base = {r.hash for r in sw.load_sweep(write_spec(tmp_path, random_trace)).runs}
    variants = {
        "seed": SPEC.replace("seeds = [1, 2]", "seeds = [1, 3]"),
        "override": SPEC.replace("scale = 0.0001", "scale = 0.0002"),
        "grid": SPEC.replace('"host.mlp" = [4, 10]', '"host.mlp" = [4, 11]'),
        "param": SPEC.replace("[1, 1], [4, 1]", "[1, 1], [3, 1]"),
        "generator": SPEC.replace("threads = 2", "threads = 4"),
    }
    for what, text in variants.items():
        hashes = {r.hash for r in sw.load_sweep(write_spec(tmp_path, random_trace, text=text)).runs}
        assert len(hashes - base) > 0, what
        # The runs a change does not touch keep their key; the base override touches them all.
        kept = hashes & base
        assert (not kept) if what == "override" else kept, what
    # Different trace content under the same path: every run of that trace gets a new key.
    other = tmp_path / "other.trace"
    tiersim.generate("random", other, seed=9, accesses=1000, footprint="1MiB")
    changed = {r.hash for r in sw.load_sweep(write_spec(tmp_path, other)).runs}
    assert len(changed - base) == 12


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("[sweep]\nplatfroms = []\n", ["[sweep]", "unknown key 'platfroms'", "platforms"]),
        ('[sweep]\nplatforms = ["epyc_cxl_nps1"]\n[[trace]]\ngen = "random"\n', ["policy"]),
        (
            '[sweep]\nplatforms = ["epyc_cxl_nps1"]\npolicies = ["nope"]\n[[trace]]\ngen = "random"\n',
            ["unknown policy 'nope'", "linux_default"],
        ),
        (
            '[sweep]\nplatforms = ["epyc_cxl_nps1"]\n[[trace]]\ngen = "random"\n[[policy]]\nname = "interleave"\n'
            "params = { wieghts = [1, 1] }\n",
            ["no parameter 'wieghts'", "weights"],
        ),
        (
            '[sweep]\nplatforms = ["epyc_cxl_nps1"]\npolicies = ["linux_default"]\nset = { "host.mpl" = 2 }\n'
            '[[trace]]\ngen = "random"\n',
            ["epyc_cxl_nps1", "mpl"],
        ),
        (
            '[sweep]\nplatforms = ["epyc_cxl_nps1"]\npolicies = ["linux_default"]\n[[trace]]\ngen = "random"\n'
            "params = { arays = 3 }\n",
            ["[[trace]] 1", "`arays`", "footprint"],
        ),
        (
            '[sweep]\nplatforms = ["epyc_cxl_nps1"]\npolicies = ["linux_default"]\n[[trace]]\ngen = "random"\n'
            'params = { footprint = "12XB" }\n',
            ["[[trace]] 1", "`footprint`", "12XB"],
        ),
        (
            '[sweep]\nplatforms = ["epyc_cxl_nps1"]\npolicies = ["linux_default"]\n[[trace]]\ngen = "randomm"\n',
            ["[[trace]] 1", "randomm", "stride"],
        ),
        ('[[trace]]\npath = "missing.trace"\n', ["[[trace]] 1.path", "does not exist"]),
        ("[sweep\n", ["invalid TOML"]),
    ],
)
def test_bad_spec_is_one_clear_error_before_any_run(tmp_path: Path, text: str, fragments: list[str]):
    spec = tmp_path / "bad.toml"
    spec.write_text(text)
    proc = run_cli("sweep", str(spec), "-o", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    for f in fragments:
        assert f in proc.stderr, (f, proc.stderr)
    assert not (tmp_path / "out" / "parts").exists() or not any((tmp_path / "out" / "parts").iterdir())


def test_sweep_results_equal_single_runs(tmp_path: Path, random_trace: Path):
    spec = write_spec(tmp_path, random_trace)
    rep = sw.run_sweep(spec, tmp_path / "out", workers=2)
    assert (rep.total, rep.ok, rep.failed, rep.skipped) == (24, 24, 0, 0)
    df = pl.read_parquet(tmp_path / "out" / sw.RESULTS_FILE)
    assert df.height == 24 and df["hash"].n_unique() == 24
    assert df["index"].to_list() == list(range(24))
    row = df.filter(
        (pl.col("trace") == "file")
        & (pl.col("policy") == "interleave_weights=4-1")
        & (pl.col("seed") == 2)
        & (pl.col("set.host.mlp") == 10)
    ).row(0, named=True)
    direct = tiersim.run(
        random_trace,
        platform="epyc_cxl_nps1",
        policy="interleave",
        params={"weights": [4, 1]},
        overrides=["scale=0.0001", "host.mlp=10"],
        seed=2,
    )
    assert row["execution_time_ns"] == direct.execution_time_ns
    assert row["latency_ns.p99"] == direct.latency["p99"]
    for n in direct.summary["nodes"]:
        assert row[f"node.{n['name']}.accesses"] == n["accesses"]
    assert row["param.weights"] == "[4, 1]"
    # The run directory holds the same summary the direct run produced (trace path aside).
    summary = json.loads((tmp_path / "out" / row["run_dir"] / "summary.json").read_text())
    assert {k: v for k, v in summary.items() if k != "trace"} == {
        k: v for k, v in direct.summary.items() if k != "trace"
    }
    # The generator trace was made once, in the sweep's cache.
    assert len(list((tmp_path / "out" / sw.CACHE_DIR).glob("*.trace"))) == 1


def _kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def test_killed_sweep_resumes_without_recomputing_or_losing_runs(tmp_path: Path, random_trace: Path):
    spec = write_spec(tmp_path, random_trace, accesses=400_000)
    out = tmp_path / "out"
    env = dict(os.environ, NO_COLOR="1")
    proc = subprocess.Popen(
        [*tiersim_cmd(), "sweep", str(spec), "-o", str(out), "-j", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    parts = out / sw.PARTS_DIR
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if parts.is_dir() and len(list(parts.glob("*.parquet"))) >= 3:
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            _kill_group(proc)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in parts.glob("*.parquet")}
    assert 3 <= len(before) < 24, f"the sweep was not interrupted midway ({len(before)} parts)"

    resumed = run_cli("sweep", str(spec), "-o", str(out), "-j", "2")
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(before)} of 24 runs already done" in resumed.stderr
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in parts.glob("*.parquet")}
    assert len(after) == 24
    for name, (data, mtime) in before.items():
        assert after[name] == (data, mtime), f"{name} was recomputed"
    assert not list(parts.glob(".*"))  # no temporary part left behind by the kill

    clean = sw.run_sweep(spec, tmp_path / "clean", workers=2)
    assert clean.ok == 24
    got = metrics(pl.read_parquet(out / sw.RESULTS_FILE)).drop("run_dir")
    want = metrics(clean.results).drop("run_dir")
    assert got.equals(want)


# A runner that kills its worker for one run: module level, so the spawned workers import it.
def crashing_runner(task: sw.RunTask) -> tiersim.RunResult:
    r = task.run
    if r.platform_label == "epyc_cxl_nps1" and r.policy_label == "interleave_weights=1-1" and r.seed == 2:
        if dict(r.grid)["set.host.mlp"] == 4:
            os.kill(os.getpid(), signal.SIGSEGV)
        os._exit(3)
    return sw.run_task(task)


def test_failed_runs_and_dead_workers_are_recorded_and_the_sweep_goes_on(tmp_path: Path, random_trace: Path):
    # A platform whose 1 MiB of DRAM cannot hold the 8 MiB footprint, without swap.
    text = SPEC.replace(
        '[[trace]]\nlabel = "rand"',
        (
            '[[platform]]\nlabel = "tiny"\nname = "dram_only"\n'
            'set = {{ scale = 1.0, "nodes.dram0.capacity" = "1MiB", "swap.enabled" = false }}\n\n[[trace]]\nlabel = "rand"'
        ),
        1,
    )
    spec = write_spec(tmp_path, random_trace, text=text)
    rep = sw.run_sweep(spec, tmp_path / "out", workers=2, runner=crashing_runner)
    # 2 traces x 2 platforms x 3 policies x 2 mlp x 2 seeds
    assert rep.total == 48
    df = rep.results
    assert df.height == 48
    failed = df.filter(pl.col("status") == "failed")
    tiny = failed.filter(pl.col("platform") == "tiny")
    assert tiny.height == 24
    for row in tiny.iter_rows(named=True):
        # linux_default runs out of memory; interleave's two weights do not fit its one node.
        expected = "out of memory" if row["policy"] == "linux_default" else "2 weights given for 1 nodes"
        assert expected in row["error"], row
    dead = failed.filter(pl.col("platform") == "epyc_cxl_nps1")
    # One crash per trace and mlp value: SIGSEGV at mlp 4, exit status 3 at mlp 10.
    assert sorted(dead["error"].to_list()) == sorted(
        ["worker process died: killed by SIGSEGV"] * 2
        + ["worker process died: exited with status 3 without a result"] * 2
    )
    ok = df.filter(pl.col("status") == "ok")
    assert ok.height == 20
    assert ok["execution_time_ns"].is_not_null().all()
    assert failed["execution_time_ns"].is_null().all()

    # Resume skips failed runs unless asked; --retry-failed reruns exactly them.
    again = sw.run_sweep(spec, tmp_path / "out", workers=2, runner=crashing_runner)
    assert (again.skipped, again.ok, again.failed) == (48, 0, 0)
    retry = sw.run_sweep(spec, tmp_path / "out", workers=2, retry_failed=True)
    assert (retry.skipped, retry.ok, retry.failed) == (20, 4, 24)
    assert retry.results.filter(pl.col("status") == "ok").height == 24


def test_text_trace_is_converted_once_and_runs_like_the_native_one(tmp_path: Path, random_trace: Path):
    csv = tmp_path / "random.csv"
    tiersim.convert(random_trace, csv, dst_format="csv")
    spec = tmp_path / "csv.toml"
    spec.write_text(
        '[sweep]\nplatforms = ["epyc_cxl_nps1"]\nseeds = [1, 2]\nset = { scale = 0.0001 }\npolicies = ["interleave"]\n'
        f'[[trace]]\nlabel = "csv"\npath = "{csv.name}"\nformat = "csv"\n'
        f'[[trace]]\nlabel = "native"\npath = "{random_trace}"\n'
    )
    rep = sw.run_sweep(spec, tmp_path / "out", workers=2)
    assert (rep.ok, rep.failed) == (4, 0)
    df = rep.results
    for seed in (1, 2):
        t = {r["trace"]: r for r in df.filter(pl.col("seed") == seed).iter_rows(named=True)}
        assert t["csv"]["execution_time_ns"] == t["native"]["execution_time_ns"]
        assert t["csv"]["latency_ns.p99"] == t["native"]["latency_ns.p99"]
    assert len(list((tmp_path / "out" / sw.CACHE_DIR).glob("*.trace"))) == 1
