"""Fuzzing the Python layer with hypothesis: argument lists of the CLI built from its commands,
options and edge values (NaN, infinity, huge and negative numbers, missing and odd files, FIFOs),
and parameter text. Every case ends with exit 0, 1 or 2, no traceback and no panic message,
within a time limit and under an address-space limit (RLIMIT_AS, like prlimit). Derandomized
and bounded in CI (TIERSIM_FUZZ_CASES_PY, default 25); `make fuzz` runs more."""

from __future__ import annotations

import os
import resource
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import PLATFORM, tiersim_cmd
from tiersim._convert import parse_cli_pairs

CASES = int(os.environ.get("TIERSIM_FUZZ_CASES_PY", "25"))
AS_LIMIT = 8 << 30  # bytes of address space per case
TIME_LIMIT = 120  # seconds per case (a hang guard: the inputs are tiny)

NUMBERS = ["nan", "-nan", "inf", "-inf", "1e300", "-1", "0", "1", "18446744073709551616", "0.5", '"1ns"', '"0B"', '"16EiB"', "[]", "x"]
KEYS = ["host.mlp", "host.cpi", "os.daemon_time_scale", "stats.epoch", "stats.max_epochs", "scale", "os.page_size", "host.cpus", "nodes.dram0.capacity"]
GEN_KEYS = ["accesses", "footprint", "threads", "write_ratio", "theta"]


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, random_trace: Path) -> dict[str, str]:
    d = tmp_path_factory.mktemp("fuzz")
    (d / "text.trace").write_text("not a trace\n")
    (d / "empty.trace").write_bytes(b"")
    head = random_trace.read_bytes()
    (d / "cut.trace").write_bytes(head[: len(head) // 2])
    os.mkfifo(d / "fifo.trace")
    return {
        "good": str(random_trace),
        "text": str(d / "text.trace"),
        "empty": str(d / "empty.trace"),
        "cut": str(d / "cut.trace"),
        "fifo": str(d / "fifo.trace"),
        "missing": str(d / "missing.trace"),
        "dir": str(d),
        "out": str(d / "out"),
    }


def argv(draw: st.DrawFn, files: dict[str, str]) -> list[str]:
    f = st.sampled_from(sorted(files.values()))
    kv = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), st.sampled_from(NUMBERS))
    gkv = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(GEN_KEYS), st.sampled_from(NUMBERS + ["1000", '"1MiB"']))
    cmd = draw(st.sampled_from(["run", "gen", "inspect", "verify", "convert", "stats", "sample"]))
    out = files["out"] + str(draw(st.integers(0, 9)))
    if cmd == "run":
        args = ["run", draw(f), "-p", PLATFORM, "-o", out]
        args += [x for s in draw(st.lists(kv, max_size=2)) for x in ("--set", s)]
    elif cmd == "gen":
        args = ["gen", draw(st.sampled_from(["random", "stream", "kv", "nope"])), "-o", draw(st.sampled_from([out + ".trace", files["text"], files["dir"]]))]
        args += [x for s in draw(st.lists(gkv, min_size=1, max_size=3)) for x in ("--param", s)]
        if "accesses=" not in " ".join(args):
            args += ["--param", "accesses=1000"]
    elif cmd == "convert":
        args = ["trace", "convert", draw(f), out + ".x", "--to", draw(st.sampled_from(["csv", "mqsim", "lackey", "native", "pin"]))]
    elif cmd == "sample":
        args = ["trace", "sample", draw(f), "-o", draw(st.sampled_from([out + ".s", files["good"]])), "--rate", draw(st.sampled_from(["0.5", "nan", "0", "2"]))]
    else:
        args = ["trace", cmd, draw(f)]
    if draw(st.booleans()):
        args.insert(draw(st.integers(0, len(args))), draw(st.sampled_from(["--json", "--bogus", "-p", "", "--", "nan"])))
    return args


@settings(max_examples=CASES, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_cli_arguments_never_crash(files: dict[str, str], data: st.DataObject) -> None:
    args = data.draw(st.composite(lambda draw: argv(draw, files))(), label="argv")
    env = dict(os.environ, COLUMNS="200", NO_COLOR="1", RUST_BACKTRACE="1")
    env.pop("TIERSIM_DEBUG", None)
    try:
        proc = subprocess.run(
            [*tiersim_cmd(), *args], capture_output=True, text=True, timeout=TIME_LIMIT, env=env,
            stdin=subprocess.DEVNULL, preexec_fn=_limits,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung past {TIME_LIMIT} s: {args}")
    text = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1, 2), (args, proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in text and "panicked" not in text and "stack backtrace" not in text, (args, text[-2000:])
    assert "internal error" not in text, (args, text[-2000:])


@settings(max_examples=CASES * 20, derandomize=True, deadline=None)
@given(items=st.lists(st.text(max_size=30), max_size=4))
def test_parameter_text_is_parsed_or_refused_with_value_error(items: list[str]) -> None:
    try:
        parse_cli_pairs(items, "--param")
    except ValueError:
        pass
