"""`tiersim run --policy oracle_bound`: tiersim's bound on a user's own trace, the fastest of the
free-migration oracle family (tiersim/bound.py), written as its fastest member's run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiersim
from conftest import run_cli
from tiersim.bound import BOUND, BOUND_MEMBERS, MEMBER_POLICY

PLATFORM = "cascadelake_dcpmm"
SCALE = "scale=0.0001220703125"


@pytest.fixture(scope="module")
def stencil_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stencil sweep over 8 MiB from 8 threads: DRAM (512 pages per socket at this scale)
    holds a third of it, and its members' times differ."""
    path = tmp_path_factory.mktemp("bound") / "stencil.trace"
    tiersim.generate("stencil", path, seed=1, footprint="8MiB", threads=8, accesses=200_000)
    return path


def test_the_bound_writes_its_fastest_members_run_and_names_every_member(stencil_trace: Path, tmp_path: Path):
    out = tmp_path / "bound"
    proc = run_cli(
        "run", str(stencil_trace), "-p", PLATFORM, "--set", SCALE, "--policy", BOUND, "--seed", "3", "-o", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    bound = summary.pop("bound")
    times = {m["label"]: m["execution_time_ns"] for m in bound["members"]}
    assert list(times) == list(BOUND_MEMBERS)
    assert [m["params"] for m in bound["members"]] == list(BOUND_MEMBERS.values())
    # The members place differently, so the choice is not a tie.
    assert len(set(times.values())) > 1, times
    assert bound["member"] == min(times, key=times.__getitem__)
    assert summary["execution_time_ns"] == times[bound["member"]]
    # The run directory is the chosen member's run: its summary, byte for byte but the bound's
    # block, and a config that re-runs it.
    alone = tiersim.run(
        stencil_trace,
        platform=PLATFORM,
        policy=MEMBER_POLICY,
        params=BOUND_MEMBERS[bound["member"]],
        overrides=[SCALE],
        seed=3,
    )
    assert summary == alone.summary
    assert (out / "config.toml").read_text() == alone.config
    # The terminal summary and the report name the member and every member's time.
    words = " ".join(proc.stdout.split())
    assert f"the fastest of {len(BOUND_MEMBERS)} free-migration {MEMBER_POLICY} runs is {bound['member']};" in words
    for label, t in times.items():
        assert f"{label} {t / 1e6:,.3f} ms" in words, label
    assert run_cli("report", str(out)).returncode == 0
    page = (out / "report.html").read_text()
    assert f"the fastest of {len(BOUND_MEMBERS)} free-migration {MEMBER_POLICY} runs is {bound['member']}" in page
    for label, t in times.items():
        assert f"{label} {t / 1e6:,.3f} ms" in page


def test_the_bound_refuses_parameters_and_bad_input_without_output(stencil_trace: Path, tmp_path: Path):
    out = tmp_path / "b"
    proc = run_cli("run", str(stencil_trace), "-p", PLATFORM, "--policy", BOUND, "--param", "epochs=64", "-o", str(out))
    assert proc.returncode == 1
    assert f"error: policy {BOUND} takes no parameters" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
    # A bad platform override fails the first member: one error naming the key, no run directory.
    proc = run_cli(
        "run",
        str(stencil_trace),
        "-p",
        PLATFORM,
        "--policy",
        BOUND,
        "--set",
        "nodes.dram9.capacity=1GiB",
        "-o",
        str(out),
    )
    assert proc.returncode == 1, proc.stderr
    assert "dram9" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
    with pytest.raises(tiersim.TiersimError, match="takes no parameters"):
        tiersim.run(stencil_trace, platform=PLATFORM, policy=BOUND, params={"fast_share": 0.5})
