"""Multi-threaded capture on both paths: tests/capture/quarters.c (four threads, each sweeping
its own quarter of one array) built with gcc here, under Valgrind and built with
-fsanitize=thread against tiersim's tracing runtime; and tests/capture/sweep.c (single-threaded)
for the two paths' LLC misses."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest
import tiersim
from conftest import run_cli
from tiersim import TiersimError

HERE = Path(__file__).resolve().parent / "capture"
MIB = 2
needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind missing: `make env` installs it")


def build(src: Path, exe: Path, instrumented: bool, runtime: Path) -> Path:
    if instrumented:
        obj = exe.with_suffix(".o")
        subprocess.run(["gcc", "-O1", "-fsanitize=thread", "-c", str(src), "-o", str(obj)], check=True)
        subprocess.run(["gcc", str(obj), str(runtime), "-o", str(exe), "-pthread", "-ldl"], check=True)
    else:
        subprocess.run(["gcc", "-O1", "-pthread", "-o", str(exe), str(src)], check=True)
    return exe


@pytest.fixture(scope="session")
def progs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("threads")
    runtime = tiersim.runtime_object(d / "cache")
    return {
        f"{name}_{path}": build(HERE / f"{name}.c", d / f"{name}_{path}", path == "instrumented", runtime)
        for name in ("quarters", "sweep")
        for path in ("valgrind", "instrumented")
    }


def capture(path: str, argv: list[str], out: Path, params: dict) -> tiersim.CaptureResult:
    f = tiersim.capture_instrumented if path == "instrumented" else tiersim.capture
    return f(argv, out, params=params)


def array_of(stdout: str) -> tuple[int, int]:
    m = re.search(r"array=(0x[0-9a-f]+) bytes=(\d+)", stdout)
    assert m, stdout
    return int(m.group(1), 16), int(m.group(2))


def records(trace: Path, tmp: Path) -> pl.DataFrame:
    csv = tmp / (trace.name + ".csv")
    tiersim.convert(trace, csv, dst_format="csv")
    df = pl.read_csv(csv, comment_prefix="#")
    return df.with_columns(pl.col("addr").map_elements(lambda a: int(a, 16), return_dtype=pl.UInt64))


PATHS = [pytest.param("valgrind", marks=needs_valgrind), "instrumented"]


@pytest.mark.parametrize("path", PATHS)
def test_four_threads_four_cpus_each_first_touching_its_quarter(path: str, progs, tmp_path: Path, capfd):
    out = tmp_path / "q.trace"
    r = capture(path, [str(progs[f"quarters_{path}"]), str(MIB)], out, {"llc": "256KiB", "cpu_map": "0-1,16-17"})
    base, size = array_of(capfd.readouterr().out)
    rep = r.report
    # Under Valgrind the default is tiersim's tool, which numbers threads as Valgrind creates them.
    assert r.exit_status == 0 and rep["path"] == ("valgrind_tool" if path == "valgrind" else path)
    assert rep["thread_numbering"] == "created"
    assert [(t["thread"], t["cpu"]) for t in rep["threads"]] == [(0, 0), (1, 1), (2, 16), (3, 17)]
    info = tiersim.inspect(out)
    per_cpu = {c: n for c, n in enumerate(info["per_cpu"]) if n}
    assert sorted(per_cpu) == [0, 1, 16, 17]
    # Each thread fills its quarter's 8192 lines twice (a 256 KiB private LLC holds none of a
    # 512 KiB quarter across the passes) and writes back what the first pass dirtied.
    for cpu, n in per_cpu.items():
        assert 0.23 < n / info["accesses"] < 0.28, (cpu, per_cpu)
    df = records(r.virt_out, tmp_path)
    arr = df.filter((pl.col("addr") >= base) & (pl.col("addr") < base + size))
    quarter = (pl.col("addr") - base) * 4 // size
    owner = pl.Series([0, 1, 16, 17])
    firsts = arr.with_columns(page=pl.col("addr") // 4096, q=quarter).group_by("page", maintain_order=True).first()
    assert firsts.height == size // 4096
    # Every array page is first touched by the thread whose quarter it is.
    assert (firsts["cpu"] == owner.gather(firsts["q"])).all(), firsts.group_by(["q", "cpu"]).len().sort("q")
    # And no thread touches another's quarter at all.
    assert (arr.with_columns(q=quarter)["cpu"] == owner.gather(arr.with_columns(q=quarter)["q"])).all()


@needs_valgrind
@pytest.mark.parametrize("tool", ["tiersim", "lackey"])
def test_threads_that_end_between_creations_keep_their_creation_numbers(tmp_path: Path, capfd, tool: str):
    # tests/capture/staggered.c: thread t (1..5) sweeps slice t of an array; odd threads end
    # before the next one is created (Valgrind reuses their ids), even ones overlap the next
    # creations. Numbering threads by when they start swapped two of them in 3 of 4 runs here;
    # with the preload shim each thread names its creation number (lackey), and tiersim's tool
    # numbers each thread as Valgrind creates it. Three runs, every one exact.
    exe = build(HERE / "staggered.c", tmp_path / "staggered", False, Path())
    threads = 6
    for i in range(3):
        r = tiersim.capture(
            [str(exe), str(threads), "256"],
            tmp_path / f"s{i}.trace",
            params={"llc": "64KiB", "v2p": "none"},
            tool=tool,
        )
        base, size = array_of(capfd.readouterr().out)
        rep = r.report
        assert r.exit_status == 0 and rep["thread_numbering"] == ("created" if tool == "tiersim" else "announced")
        assert [(t["thread"], t["cpu"]) for t in rep["threads"]] == [(t, t) for t in range(threads)]
        df = records(r.out, tmp_path)
        arr = df.filter((pl.col("addr") >= base) & (pl.col("addr") < base + size))
        per = arr.with_columns(slice=(pl.col("addr") - base) * threads // size).group_by(["slice", "cpu"]).len()
        # Each slice only on its own thread's CPU: 4096 lines filled twice through a 64 KiB
        # LLC plus the 4096 writebacks of the first pass.
        assert sorted(per.rows()) == [(t, t, 3 * 4096) for t in range(threads)], (i, sorted(per.rows()))


@needs_valgrind
@pytest.mark.parametrize("tool", ["tiersim", "lackey"])
def test_static_program_falls_back_to_start_order(tmp_path: Path, capfd, tool: str):
    # LD_PRELOAD does not reach a static program: under lackey no announcements, threads
    # numbered by when they start, which quarters.c's barrier keeps right. tiersim's tool needs
    # no shim: it numbers threads as they are created.
    exe = tmp_path / "quarters_static"
    subprocess.run(["gcc", "-O1", "-static", "-pthread", "-o", str(exe), str(HERE / "quarters.c")], check=True)
    r = tiersim.capture([str(exe), "1"], tmp_path / "q.trace", params={"llc": "256KiB", "v2p": "none"}, tool=tool)
    base, size = array_of(capfd.readouterr().out)
    assert r.report["thread_numbering"] == ("created" if tool == "tiersim" else "start_order")
    df = records(r.out, tmp_path)
    arr = df.filter((pl.col("addr") >= base) & (pl.col("addr") < base + size))
    assert (arr["cpu"] == ((arr["addr"] - base) * 4 // size).cast(pl.Int64)).all()


@pytest.mark.parametrize("path", PATHS)
def test_first_touch_puts_each_half_on_its_sockets_dram(path: str, progs, tmp_path: Path, capfd):
    out = tmp_path / "q.trace"
    capture(path, [str(progs[f"quarters_{path}"]), str(MIB)], out, {"llc": "256KiB", "cpu_map": "0-1,16-17"})
    _, size = array_of(capfd.readouterr().out)
    half = size // 2 // 4096
    run = tiersim.run(out, platform="cascadelake_dcpmm", policy="linux_default")
    pages = dict(run.nodes.select(["name", "final_pages"]).rows())
    # Threads 2 and 3 (CPUs 16, 17: socket 1) touch only their half of the array, their own
    # stacks and pages all threads share (the barrier's, libc's), which go to whichever CPU's
    # simulated clock reaches them first; the main thread's startup pages go to socket 0.
    assert half <= pages["dram1"] <= half + 32, pages
    assert half <= pages["dram0"] <= half + 150, pages
    assert pages["pmem0"] == pages["pmem1"] == 0


@needs_valgrind
def test_single_thread_llc_misses_agree_between_paths(progs, tmp_path: Path, capfd):
    # 2 MiB swept three times and read at random through a 256 KiB LLC: the array's misses
    # dominate; what only Valgrind sees (the loader, libc's startup) is about 1 %.
    reps = {}
    for path in ("valgrind", "instrumented"):
        r = capture(path, [str(progs[f"sweep_{path}"]), str(MIB), "2"], tmp_path / f"{path}.trace", {"llc": "256KiB"})
        reps[path] = r.report
        capfd.readouterr()
    v, i = reps["valgrind"]["llc"], reps["instrumented"]["llc"]
    assert i["misses"] > 3 * (MIB << 20) // 64
    assert abs(v["misses"] - i["misses"]) / v["misses"] < 0.05, (v, i)
    assert abs(v["writebacks"] - i["writebacks"]) / v["writebacks"] < 0.05, (v, i)
    # The instrumented clock is loads and stores x instructions_per_access (2).
    rep = reps["instrumented"]
    assert rep["instructions"] == 2 * (rep["loads"] + rep["stores"])


def test_program_without_the_runtime_is_refused(progs, tmp_path: Path, capfd):
    with pytest.raises(TiersimError, match="did not load the tiersim tracing runtime"):
        tiersim.capture_instrumented([str(progs["quarters_valgrind"]), "1"], tmp_path / "x.trace")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # Run on its own, an instrumented program says it traces nothing and runs normally.
    r = subprocess.run([str(progs["quarters_instrumented"]), "1"], capture_output=True, text=True)
    assert r.returncode == 0 and "TIERSIM_SHM_FD is not set" in r.stderr and "threads=4" in r.stdout


def test_cli_instrumented_capture_and_inspect_shares(progs, tmp_path: Path):
    r = run_cli("capture", "--build-runtime")
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).is_file() and r.stdout.strip().endswith(".o")
    out = tmp_path / "q.trace"
    r = run_cli(
        "capture",
        "--instrumented",
        "-o",
        str(out),
        "--llc",
        "256KiB",
        "--cpu-map",
        "0,2,4,6",
        "--",
        str(progs["quarters_instrumented"]),
        str(MIB),
    )
    assert r.returncode == 0, r.stderr
    assert "threads=4" in r.stdout and "instrumented" in r.stderr
    r = run_cli("trace", "inspect", str(out))
    assert r.returncode == 0, r.stderr
    rows = re.findall(r"^\s*(\d+)\s+([\d,]+)\s+([\d.]+)\s*%", r.stdout, re.M)
    assert [int(c) for c, _, _ in rows] == [0, 2, 4, 6], r.stdout
    assert all(24.0 < float(s) < 27.0 for _, _, s in rows), r.stdout
