"""`tiersim capture` of a real program: tests/capture/hashmap.c, built here with gcc, counts its
own table loads, stores, pages and lines; the captured traces must show exactly those in the
table's address range, under tiersim's Valgrind tool (the default) and under lackey. Each capture
runs the program under Valgrind (about a second)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest
import tiersim
from conftest import run_cli, tiersim_cmd

SRC = Path(__file__).resolve().parent / "capture" / "hashmap.c"
KEYS = 3000

needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind missing: `make env` installs it")
DATA = Path(__file__).resolve().parent.parent / "crates" / "tiersim-trace" / "tests" / "data"


@pytest.fixture(scope="session")
def hashmap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("capture") / "hashmap"
    # -O0: the machine code does exactly the table accesses the source counts (see hashmap.c).
    subprocess.run(["gcc", "-O0", "-Wall", "-Werror", "-o", str(exe), str(SRC)], check=True)
    return exe


def counters(stdout: str) -> dict[str, int]:
    """The program's own report: table=0x.. bytes=.. loads=.. stores=.. pages=.. lines=.."""
    m = re.search(r"^table=(\S+) (.*)$", stdout, re.M)
    assert m, stdout
    c = {k: int(v) for k, v in (kv.split("=") for kv in m.group(2).split())}
    c["table"] = int(m.group(1), 16)
    return c


def records(trace: Path, tmp: Path) -> pl.DataFrame:
    csv = tmp / (trace.name + ".csv")
    tiersim.convert(trace, csv, dst_format="csv")
    df = pl.read_csv(csv, comment_prefix="#")
    return df.with_columns(pl.col("addr").map_elements(lambda a: int(a, 16), return_dtype=pl.UInt64))


def in_table(df: pl.DataFrame, c: dict[str, int]) -> pl.DataFrame:
    return df.filter((pl.col("addr") >= c["table"]) & (pl.col("addr") < c["table"] + c["bytes"]))


TOOLS = ["tiersim", "lackey"]


def capture_api(
    exe: Path, tmp: Path, params: dict, *args: str, capfd: pytest.CaptureFixture[str], tool: str = "tiersim"
) -> tuple:
    seen = []
    result = tiersim.capture(
        [str(exe), str(KEYS), *args], tmp / "p.trace", params=params, on_progress=seen.append, tool=tool
    )
    stdout = capfd.readouterr().out
    return result, counters(stdout), seen


@needs_valgrind
@pytest.mark.parametrize("tool", TOOLS)
def test_unfiltered_capture_matches_the_programs_counters(hashmap: Path, tmp_path: Path, capfd, tool: str):
    result, c, seen = capture_api(hashmap, tmp_path, {"llc": 0, "v2p": "none"}, capfd=capfd, tool=tool)
    r = result.report
    assert result.exit_status == 0 and result.virt_out is None
    df = records(tmp_path / "p.trace", tmp_path)
    table = in_table(df, c)
    # Every table access is one 8-byte load or store, and nothing else touches the table.
    assert table.filter(pl.col("op") == "R").height == c["loads"]
    assert table.filter(pl.col("op") == "W").height == c["stores"]
    assert table["size"].unique().to_list() == [8]
    assert (table["addr"] // 4096).n_unique() == c["pages"]
    assert (table["addr"] // 64).n_unique() == c["lines"]
    # The rest is the program's other data, its stack and libc: there, but not in the table.
    assert df.height == r["records"] > table.height
    # The instruction clock is Valgrind's count of guest instructions (lackey also prints its
    # own); the gaps add up to it, but for the instructions after the last access.
    assert r["path"] == ("valgrind_tool" if tool == "tiersim" else "valgrind")
    if tool == "lackey":
        assert r["instructions"] == r["guest_instrs_reported"]
        assert seen[-1].instructions == r["instructions"]
    assert r["instructions"] - 1000 < df["time"].sum() <= r["instructions"]
    assert seen and seen[-1].records == r["records"]
    assert tiersim.inspect(tmp_path / "p.trace")["addr_kind"] == "virtual"


@needs_valgrind
@pytest.mark.parametrize("tool", TOOLS)
def test_llc_that_holds_the_table_fills_each_line_once_and_twins_agree(hashmap: Path, tmp_path: Path, capfd, tool):
    # 16 MiB, 16 ways: the 128 KiB table takes one way of some sets, nothing evicts it.
    result, c, _ = capture_api(hashmap, tmp_path, {"llc": "16MiB", "llc_ways": 16}, capfd=capfd, tool=tool)
    r = result.report
    virt = records(result.virt_out, tmp_path)
    phys = records(tmp_path / "p.trace", tmp_path)
    table = in_table(virt, c)
    assert table.filter(pl.col("op") == "R").height == c["lines"]
    assert table.filter(pl.col("op") == "W").height == 0
    assert table["size"].unique().to_list() == [64]
    assert r["llc"]["misses"] == virt.filter(pl.col("op") == "R").height
    # The physical trace is the same records with translated addresses.
    assert phys.height == virt.height == r["records"]
    for col in ("time", "cpu", "op", "size"):
        assert phys[col].equals(virt[col]), col
    assert (phys["addr"] % 4096).equals(virt["addr"] % 4096)
    pages = pl.DataFrame({"v": virt["addr"] // 4096, "p": phys["addr"] // 4096})
    # auto reads pagemap when it may (root here); the header says which.
    info = tiersim.inspect(tmp_path / "p.trace")
    assert info["addr_kind"] == "physical" and info["v2p"] == r["v2p"] in ("pagemap", "buddy")
    if r["v2p"] == "pagemap":
        # The table's pages end in frames of their own. Before that, a page that was only read
        # so far is the shared zero page: pages may share a frame and change it once written.
        lo, hi = c["table"] // 4096, (c["table"] + c["bytes"]) // 4096
        table_pages = pages.filter((pl.col("v") >= lo) & (pl.col("v") < hi))
        last = table_pages.group_by("v", maintain_order=True).last()
        assert last.height == last["p"].n_unique() == c["pages"]
        # Not asserted: `remaps` > 0. Whether the translator still sees a page's zero-page frame
        # before the program writes it depends on how far it lags the live program (0 under load).
        # A page touched only between lackey's last flush and the exit can be missed.
        assert r["pages_unresolved"] <= 2
    else:
        pairs = pages.unique()
        assert pairs["v"].n_unique() == pairs["p"].n_unique() == pairs.height, "one frame per page, none shared"
    assert tiersim.inspect(result.virt_out)["v2p"] == "unrecorded"


@needs_valgrind
@pytest.mark.parametrize("tool", TOOLS)
def test_small_llc_misses_and_writes_back(hashmap: Path, tmp_path: Path, capfd, tool: str):
    # 32 KiB cannot hold the 128 KiB table: more fills than lines, and dirty lines come back.
    result, c, _ = capture_api(
        hashmap, tmp_path, {"llc": "32KiB", "llc_ways": 8, "v2p": "buddy", "phys_mem": "1GiB"}, capfd=capfd, tool=tool
    )
    table = in_table(records(result.virt_out, tmp_path), c)
    fills = table.filter(pl.col("op") == "R").height
    writebacks = table.filter(pl.col("op") == "W").height
    assert c["lines"] < fills <= c["loads"] + c["stores"]
    assert 0 < writebacks < fills
    llc = result.report["llc"]
    assert llc["writebacks"] == result.report["writes"]
    assert result.report["v2p"] == "buddy" and tiersim.inspect(result.out)["v2p"] == "buddy"


@needs_valgrind
def test_cli_keeps_the_programs_output_and_status_and_the_trace_runs(hashmap: Path, tmp_path: Path):
    out = tmp_path / "h.trace"
    report = tmp_path / "report.json"
    r = run_cli("capture", "-o", str(out), "--llc", "1MiB", "--report", str(report), "--", str(hashmap), str(KEYS), "3")
    assert r.returncode == 3, r.stderr
    # The program's stdout is untouched; tiersim speaks on stderr.
    c = counters(r.stdout)
    assert r.stdout.count("\n") == 1
    assert "exited with status 3" in r.stderr and "tiersim capture exits with status 3" in r.stderr
    rep = json.loads(report.read_text())
    assert rep["exit_status"] == 3 and rep["argv"][1:] == [str(KEYS), "3"]
    assert out.exists() and (tmp_path / "h.virt.trace").exists()
    assert c["loads"] > 0
    run = run_cli("run", str(out), "-p", "epyc_cxl_nps1", "--json", "-o", str(tmp_path / "run"))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["accesses"] == rep["records"]


@needs_valgrind
def test_the_summary_in_a_log_is_not_cut_at_80_columns(hashmap: Path, tmp_path: Path):
    # Piped with no COLUMNS, as in a script's log: capture's summary on stderr is as wide as the
    # tables other commands print on stdout; it was cut at 80 columns, the LLC row over three lines.
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    cmd = [*tiersim_cmd(), "capture", "-o", str(tmp_path / "h.trace"), "--llc", "1MiB"]
    r = subprocess.run([*cmd, "--", str(hashmap), "1000"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert re.search(r"LLC +1\.00 MiB, .* misses \(.*\), [\d,]+ writebacks", r.stderr), r.stderr


@needs_valgrind
def test_program_killed_by_a_signal(hashmap: Path, tmp_path: Path):
    r = run_cli("capture", "-o", str(tmp_path / "a.trace"), "--v2p", "none", "--", str(hashmap), "100", "abort")
    assert r.returncode == 128 + 6, r.stderr
    assert "killed by SIGABRT" in r.stderr
    assert tiersim.inspect(tmp_path / "a.trace")["accesses"] > 0


@needs_valgrind
def test_missing_program_or_bad_parameters_fail_before_running(hashmap: Path, tmp_path: Path):
    out = tmp_path / "x.trace"
    for args, msg in [
        (["--", str(tmp_path / "nope")], "program '" + str(tmp_path / "nope") + "' not found"),
        (["--", "no-such-program-xyz"], "program 'no-such-program-xyz' not found on PATH"),
        (["--", str(SRC)], "is not an executable file"),
        (["--llc", "1000", "--", str(hashmap), "10"], "`llc`: 1000 bytes is not a positive multiple"),
        (["--param", "lcc=0", "--", str(hashmap), "10"], "`lcc`: unknown parameter"),
        (["--v2p", "none", "--virt-out", str(tmp_path / "v"), "--", str(hashmap), "10"], "v2p none writes only"),
    ]:
        r = run_cli("capture", "-o", str(out), *args)
        assert r.returncode == 1, (args, r.stderr)
        assert msg in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        # The program never ran: it would have printed its counters.
        assert "table=" not in r.stdout
    assert list(tmp_path.iterdir()) == []
    r = run_cli("capture", "-o", str(out))
    assert r.returncode == 2
    # An executable Valgrind cannot run (a 32-bit ELF header): an error, not an empty trace.
    elf32 = tmp_path / "elf32"
    elf32.write_bytes(b"\x7fELF\x01\x01\x01" + bytes(9) + b"\x02\x00\x03\x00" + bytes(200))
    elf32.chmod(0o755)
    r = run_cli("capture", "-o", str(out), "--valgrind-tool", "lackey", "--", str(elf32))
    assert r.returncode == 1, r.stderr
    assert "wrong ELF executable class" in r.stderr and f"valgrind ran no instruction of '{elf32}'" in r.stderr
    # tiersim's tool is built for amd64 only: Valgrind says it has none for x86.
    r = run_cli("capture", "-o", str(out), "--", str(elf32))
    assert r.returncode == 1, r.stderr
    assert "failed to start tool 'tiersim' for platform 'x86-linux'" in r.stderr
    assert f"valgrind ran no instruction of '{elf32}'" in r.stderr and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elf32"]


def test_stored_lackey_log_through_the_filter(tmp_path: Path):
    # The committed small lackey log: 24 data lines, 35 instructions, no process (so buddy).
    out = tmp_path / "s.trace"
    report = tmp_path / "r.json"
    r = run_cli(
        "capture",
        "--lackey",
        str(DATA / "small.lackey"),
        "-o",
        str(out),
        "--phys-mem",
        "64MiB",
        "--report",
        str(report),
    )
    assert r.returncode == 0, r.stderr
    rep = json.loads(report.read_text())
    assert (rep["instructions"], rep["loads"], rep["stores"], rep["modifies"]) == (35, 13, 8, 3)
    assert rep["v2p"] == "buddy" and "no process id" in rep["v2p_note"]
    # A 16 MiB LLC keeps only the cold misses; the twins have the same records.
    virt = tiersim.inspect(tmp_path / "s.virt.trace")
    phys = tiersim.inspect(out)
    assert virt["accesses"] == phys["accesses"] == rep["llc"]["misses"] == rep["records"]
    assert (phys["addr_kind"], phys["v2p"], virt["addr_kind"]) == ("physical", "buddy", "virtual")
    rep = tiersim.capture_lackey(DATA / "small.lackey", tmp_path / "n.trace", params={"v2p": "none", "llc": 0})
    assert rep["records"] == 27
    bad = tmp_path / "bad.lackey"
    bad.write_text("I  0040,2\n Q 10,8\n")
    r = run_cli("capture", "--lackey", str(bad), "-o", str(tmp_path / "b.trace"))
    assert r.returncode == 1 and f"{bad}:2: unknown access kind 'Q'" in r.stderr, r.stderr
    assert not (tmp_path / "b.trace").exists()
    r = run_cli("capture", "--lackey", str(bad), "-o", str(tmp_path / "b.trace"), "--", "true")
    assert r.returncode == 2 and "give either" in r.stderr


@pytest.mark.parametrize("command", [["capture"], ["workload", "capture", "bfs"]])
def test_a_report_that_cannot_be_written_is_refused_before_the_capture(tmp_path: Path, command: list[str]):
    # It was checked when written, after the whole capture, which left the trace without it.
    tail = ["--", "true"] if command == ["capture"] else ["--param", "scale=10"]
    for report, why in [
        (tmp_path / "missing" / "r.json", "directory '{}' does not exist".format(tmp_path / "missing")),
        (tmp_path, "is a directory; give a file name"),
    ]:
        r = run_cli(*command, "-o", str(tmp_path / "x.trace"), "--report", str(report), *tail)
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert r.returncode == 1 and len(errors) == 1 and str(report) in errors[0] and why in errors[0], r.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == [], r.stderr


@needs_valgrind
@pytest.mark.parametrize("tool", ["tiersim", "lackey"])
def test_an_output_where_nothing_can_be_written_is_one_error_naming_it(hashmap: Path, tool: str):
    # /proc takes no new entry: the capture's record directory (the Valgrind tool's), or the
    # trace itself, cannot be made there. The error names the trace asked for, not a temporary
    # name, and the program does not run.
    r = run_cli("capture", "--valgrind-tool", tool, "-o", "/proc/h.trace", "--", str(hashmap), "100")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "/proc/h.trace" in errors[0] and ".tiersim-" not in errors[0], r.stderr
    assert r.stdout == ""  # hashmap prints its counters when it runs
