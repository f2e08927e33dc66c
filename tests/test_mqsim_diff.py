"""tiersim's cxl_flash in `compat = "mqsim_cxl"` against MQSim_CXL's own summaries
(tests/data/mqsim_cxl_reference.json, written by `tools/mqsim_diff.py --mqsim BIN`) on the same
generated traces: every metric within its tolerance, except those the reference data marks with
a reason, which must still disagree."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import mqsim_diff  # noqa: E402

REF = json.loads(mqsim_diff.REFERENCE.read_text())


def _points() -> list:
    # The 1M-request points take about a minute each: slow tests (`pytest -m slow -k long_`).
    return [pytest.param(n, marks=pytest.mark.slow) if n.startswith("long_") else n for n in sorted(REF["points"])]


@pytest.mark.parametrize("name", _points())
def test_the_generator_is_fixed(name: str, tmp_path: Path):
    # The reference data only holds for these exact traces: their first lines are recorded.
    mix, _ = mqsim_diff.point(name)
    path = tmp_path / "t.trace"
    mqsim_diff.make_trace(mix, path)
    lines = path.read_text().splitlines()
    assert len(lines) == mix["requests"]
    assert lines[:3] == REF["points"][name]["trace_head"]


@pytest.mark.parametrize("name", _points())
def test_compat_mode_agrees_with_mqsim(name: str, tmp_path: Path):
    entry = REF["points"][name]
    mix, dev = mqsim_diff.point(name)
    assert (mix, dev) == (entry["mix"], entry["device"]), "matrix changed: regenerate the reference"
    trace = tmp_path / "t.trace"
    mqsim_diff.make_trace(mix, trace)
    ours = mqsim_diff.run_tiersim(dev, trace)
    theirs = entry["mqsim"]
    assert ours["requests"] == theirs["requests"] == mix["requests"]
    marked = entry.get("disagrees", {})
    tolerance = mqsim_diff.tolerances(name)
    for metric in tolerance:
        ok = mqsim_diff.agrees(metric, ours[metric], theirs[metric], tolerance)
        if metric in marked:
            assert not ok, f"{name}.{metric} now agrees ({ours[metric]} vs {theirs[metric]}): drop its mark"
        else:
            assert ok, f"{name}.{metric}: tiersim {ours[metric]}, MQSim_CXL {theirs[metric]}"


def test_the_corrected_model_differs_where_mqsim_is_wrong(tmp_path: Path):
    # The default model charges the flash channel (1.2 GB/s) and the link: on the base point the
    # flash channels saturate and the share under 1 us collapses against MQSim_CXL's.
    mix, dev = mqsim_diff.point("base")
    trace = tmp_path / "t.trace"
    mqsim_diff.make_trace(mix, trace)
    ours = mqsim_diff.run_tiersim(dev, trace, compat="none")
    theirs = REF["points"]["base"]["mqsim"]
    assert ours["flash_reads"] == theirs["flash_reads"]
    assert ours["under_1us"] < theirs["under_1us"] / 2
    assert ours["p50_ns"] > 10 * theirs["p50_ns"]
