"""Fuzzing the Python layer with hypothesis: argument lists of the CLI built from its commands,
options and edge values (NaN, infinity, huge and negative numbers, missing and odd files, FIFOs),
and parameter text. Every case ends with exit 0, 1 or 2, no traceback and no panic message,
within a time limit and under an address-space limit (RLIMIT_AS, like prlimit). Derandomized
and bounded in CI (TIERSIM_FUZZ_CASES_PY, default 25); `make fuzz` runs more."""

from __future__ import annotations

import os
import resource
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PLATFORM, tiersim_cmd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiersim._convert import parse_cli_pairs

MQSIM = Path(__file__).resolve().parent.parent / "crates" / "tiersim-trace" / "tests" / "data" / "small.mqsim"
CASES = int(os.environ.get("TIERSIM_FUZZ_CASES_PY", "25"))
AS_LIMIT = 8 << 30  # bytes of address space per case
TIME_LIMIT = 120  # seconds per case (a hang guard: the inputs are tiny)

NUMBERS = [
    "nan",
    "-nan",
    "inf",
    "-inf",
    "1e300",
    "-1",
    "0",
    "1",
    "18446744073709551616",
    "0.5",
    '"1ns"',
    '"0B"',
    '"16EiB"',
    "[]",
    "x",
]
KEYS = [
    "host.mlp",
    "host.cpi",
    "os.daemon_time_scale",
    "stats.epoch",
    "stats.max_epochs",
    "scale",
    "os.page_size",
    "host.cpus",
    "nodes.dram0.capacity",
]
GEN_KEYS = ["accesses", "footprint", "threads", "write_ratio", "theta"]


# flash replay's options, each with values in and out of its range (the hint file is a text file:
# its lines are refused with file:line).
FLASH_OPTIONS = {
    "--hint-probability": ["nan", "inf", "-0.5", "0", "0.5", "1", "2"],
    "--hint-top": ["nan", "-inf", "0.01", "1", "1e300"],
    "--hint-lead": ["-1", "0", "1000", "4294967295", "18446744073709551616"],
    "--ns-per-instruction": ["nan", "inf", "0", "0.5", "1e300"],
    "--closed-loop": ["0", "1", "64", "4294967296", "nan"],
    "--limit": ["-1", "0", "10", "18446744073709551615", "1e3"],
    "--llc": ["0", "8MiB", "1XB", "99999999999999999999GiB", "nan"],
}


# (command, exit status) -> cases, printed at the end of the module (docs/reliability.md).
OUTCOMES: Counter[tuple[str, int]] = Counter()


@pytest.fixture(scope="module", autouse=True)
def _tally() -> Iterator[None]:
    yield
    if OUTCOMES:
        print("\nCLI fuzz outcomes (command: exit status x cases):")
        for cmd in sorted({c for c, _ in OUTCOMES}):
            print(f"  {cmd}: " + ", ".join(f"{rc} x {n}" for (c, rc), n in sorted(OUTCOMES.items()) if c == cmd))


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
        "mqsim": str(MQSIM),
        "dir": str(d),
        "out": str(d / "out"),
    }


def argv(draw: st.DrawFn, files: dict[str, str]) -> list[str]:
    f = st.sampled_from(sorted(files.values()))
    kv = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), st.sampled_from(NUMBERS))
    gkv = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(GEN_KEYS), st.sampled_from(NUMBERS + ["1000", '"1MiB"']))
    cmd = draw(st.sampled_from(["run", "gen", "inspect", "verify", "convert", "stats", "sample", "flash"]))
    out = files["out"] + str(draw(st.integers(0, 9)))
    if cmd == "run":
        args = ["run", draw(f), "-p", PLATFORM, "-o", out]
        args += [x for s in draw(st.lists(kv, max_size=2)) for x in ("--set", s)]
    elif cmd == "gen":
        args = [
            "gen",
            draw(st.sampled_from(["random", "stream", "kv", "nope"])),
            "-o",
            draw(st.sampled_from([out + ".trace", files["text"], files["dir"]])),
        ]
        args += [x for s in draw(st.lists(gkv, min_size=1, max_size=3)) for x in ("--param", s)]
        if "accesses=" not in " ".join(args):
            args += ["--param", "accesses=1000"]
    elif cmd == "convert":
        args = [
            "trace",
            "convert",
            draw(f),
            out + ".x",
            "--to",
            draw(st.sampled_from(["csv", "mqsim", "lackey", "native", "pin"])),
        ]
    elif cmd == "sample":
        args = [
            "trace",
            "sample",
            draw(f),
            "-o",
            draw(st.sampled_from([out + ".s", files["good"]])),
            "--every",
            draw(st.sampled_from(["1", "2", "0", "nan", "-1", "18446744073709551616"])),
        ]
    elif cmd == "flash":
        args = ["flash", "replay", draw(st.sampled_from([files["good"], files["mqsim"], files["text"], files["fifo"]]))]
        if args[-1] == files["mqsim"]:
            args += ["--from", "mqsim"]
        for opt in draw(st.lists(st.sampled_from(sorted(FLASH_OPTIONS)), max_size=3, unique=True)):
            args += [opt, draw(st.sampled_from(FLASH_OPTIONS[opt]))]
    else:
        args = ["trace", cmd, draw(f)]
    if draw(st.booleans()):
        args.insert(
            draw(st.integers(0, len(args))), draw(st.sampled_from(["--json", "--bogus", "-p", "", "--", "nan"]))
        )
    return args


@settings(
    max_examples=CASES, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_cli_arguments_never_crash(files: dict[str, str], data: st.DataObject) -> None:
    args = data.draw(st.composite(lambda draw: argv(draw, files))(), label="argv")
    env = dict(os.environ, COLUMNS="200", NO_COLOR="1", RUST_BACKTRACE="1")
    env.pop("TIERSIM_DEBUG", None)
    try:
        proc = subprocess.run(
            [*tiersim_cmd(), *args],
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT,
            env=env,
            stdin=subprocess.DEVNULL,
            preexec_fn=_limits,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung past {TIME_LIMIT} s: {args}")
    text = proc.stdout + proc.stderr
    OUTCOMES[f"{args[0]} {args[1] if args[0] in ('trace', 'flash') else ''}".strip(), proc.returncode] += 1
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


# Every numeric option parsed in Python, with its valid range (docs/cli.md): the values outside
# it must be refused as usage errors naming the option and the range, before anything runs.
_U32, _I64, _U64 = 2**32 - 1, 2**63 - 1, 2**64 - 1
NUMERIC_OPTIONS = [
    (["flash", "replay", "T"], "--hint-probability", float, 0, 1),
    (["flash", "replay", "T"], "--hint-top", float, 0, 1),
    (["flash", "replay", "T"], "--ns-per-instruction", float, 0, 1e6),
    (["flash", "replay", "T"], "--hint-lead", int, 0, _U32),
    (["flash", "replay", "T"], "--closed-loop", int, 1, _U32),
    (["flash", "replay", "T"], "--limit", int, 0, _U64),
    (["flash", "study"], "--workers", int, 1, 1024),
    (["gen", "random", "-o", "X"], "--count", int, 1, _I64),
    (["gen", "random", "-o", "X"], "--write-ratio", float, 0, 1),
    (["gen", "random", "-o", "X"], "--threads", int, 1, _U32),
    (["gen", "random", "-o", "X"], "--seed", int, 0, _U64),
    (["run", "T", "-p", PLATFORM], "--seed", int, 0, _U64),
    (["capture", "-o", "X", "--"], "--llc-ways", int, 1, 64),
    (["capture", "-o", "X", "--"], "--fragmentation", float, 0, 0.99),
    (["capture", "-o", "X", "--"], "--seed", int, 0, _U64),
    (["trace", "convert", "T", "X", "--to", "mqsim"], "--ns-per-instruction", float, 0, 1e6),
    (["trace", "convert", "T", "X", "--to", "csv"], "--page-size", int, 64, _U32),
    (["trace", "sample", "T", "-o", "X"], "--every", int, 1, _U64),
    (["trace", "sample", "T", "-o", "X"], "--start", int, 0, _U64),
    (["trace", "stats", "T"], "--max-points", int, 2, _I64),
    (["characterize", "ddr4_2666"], "--ratio", int, 0, 100),
    (["sweep", "S"], "--workers", int, 1, 1024),
    (["reproduce", "S"], "--workers", int, 1, 1024),
    (["demo"], "--accesses", int, 10_000, _I64),
]


def _bad_values(kind: type, lo: float, hi: float) -> st.SearchStrategy[str]:
    bad = ["nan", "-nan", "inf", "-inf", "NaN", "x", "", str(lo - 1), repr(hi * 2) if kind is float else str(hi + 1)]
    if kind is int:
        bad += ["1.5", "1e3", str(2**64), str(-(2**64))]
    bad = [b for b in bad if b]
    return st.sampled_from(bad) | st.floats(allow_nan=False).filter(lambda x: not lo <= x <= hi).map(repr)


@settings(max_examples=CASES * 8, derandomize=True, deadline=None)
@given(data=st.data())
def test_numeric_options_refuse_nan_infinity_and_out_of_range(data: st.DataObject) -> None:
    from tiersim.cli import app
    from typer.testing import CliRunner

    prefix, option, kind, lo, hi = data.draw(st.sampled_from(NUMERIC_OPTIONS), label="option")
    value = data.draw(_bad_values(kind, lo, hi), label="value")
    args = [*prefix[:-1], f"{option}={value}", prefix[-1]] if prefix[-1] == "--" else [*prefix, f"{option}={value}"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300", "NO_COLOR": "1"})
    text = result.output
    assert result.exit_code == 2, (args, result.exit_code, text, result.exception)
    assert option in text and "expected" in text, (args, text)
    assert ("an integer" if kind is int else "a finite number") in text, (args, text)
