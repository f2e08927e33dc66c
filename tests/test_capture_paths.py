"""The capture paths record the same thing (issue 36): the tracing runtime's LLC model gives
exactly the records of the native one (crates/tiersim-trace/src/capture/cache.rs) on the same
access stream; tiersim's Valgrind tool and lackey give the same LLC misses and writebacks within
0.5 %; each path writes the same bytes run to run; and a capture stopped by SIGTERM leaves
nothing beside its output. tests/capture/sweep.c and hashmap.c, built here with gcc."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest
import tiersim
from conftest import needs_clang, tiersim_cmd
from tiersim._capture import default_virt_out

HERE = Path(__file__).resolve().parent / "capture"
needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind missing: `make env` installs it")
# Without address-space randomisation a single-threaded program makes the same accesses at the
# same addresses in every run (util-linux's setarch; the instrumented path runs the program
# itself, Valgrind places the guest the same way every run on its own).
NO_ASLR = ["setarch", os.uname().machine, "-R"]


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("paths")
    runtime = tiersim.runtime_object(d / "cache")
    out = {}
    for name in ("sweep", "hashmap", "quarters", "batches"):
        exe = d / name
        subprocess.run(["gcc", "-O1", "-pthread", "-o", str(exe), str(HERE / f"{name}.c")], check=True)
        obj = d / f"{name}_i.o"
        subprocess.run(["gcc", "-O1", "-fsanitize=thread", "-c", str(HERE / f"{name}.c"), "-o", str(obj)], check=True)
        subprocess.run(["gcc", str(obj), str(runtime), "-o", str(d / f"{name}_i"), "-pthread", "-ldl"], check=True)
        out[name] = exe
        out[f"{name}_i"] = d / f"{name}_i"
    return out


def rows(trace: Path) -> list[tuple]:
    """(addr, size, op, cpu) of every record, in order."""
    csv = trace.with_suffix(".csv")
    tiersim.convert(trace, csv, dst_format="csv")
    return pl.read_csv(csv, comment_prefix="#").select("addr", "size", "op", "cpu").rows()


@pytest.mark.parametrize(
    ("llc", "ways", "line", "args", "misses"),
    [
        (64 << 10, 8, 64, ["1", "2"], 40_000),
        # 96 sets, not a power of two: the set is the line modulo the sets, drain's general loop.
        (48 << 10, 8, 64, ["1", "2"], 40_000),
        # 2,048 sets of 16 ways: the runtime's 32-bit tags and branch-free set (tc_set_access16n).
        # The array at a fixed address: the runtime's 128 KiB of tags, mapped, would move it.
        (2 << 20, 16, 64, ["3", "1", "0x300000000000"], 90_000),
        # 1,024 sets of 16 ways: 64-bit tags, a miss's shift in SSE2 (tc_set_access).
        (1 << 20, 16, 64, ["3", "1", "0x300000000000"], 90_000),
        # 128-byte lines, where the drain's loop takes the line size from the environment (it is a
        # constant for 64): 1,024 sets in 32-bit tags, then 512 in 64-bit ones.
        (2 << 20, 16, 128, ["3", "1", "0x300000000000"], 40_000),
        (1 << 20, 16, 128, ["3", "1", "0x300000000000"], 40_000),
    ],
)
def test_runtime_llc_gives_the_native_models_records(
    progs, tmp_path: Path, monkeypatch, capfd, llc: int, ways: int, line: int, args: list[str], misses: int
):
    # The same run twice (no ASLR; the environment padded to one length, TIERSIM_LLC and
    # TIERSIM_LLC_WAYS being longer in the second, so that the stack is at the same place): every
    # access unfiltered, then through the runtime's LLC. The unfiltered trace, as lackey text
    # through the native filter's LLC, must give the runtime's records exactly: same lines, same
    # order, same fills and writebacks. The runtime's batches (accesses buffered, drained through
    # the same-line table, set lookups pending until a flush) must not show. (hashmap.c does not
    # give the same accesses twice here: its heap moves with the runtime's own allocations, which
    # differ with and without a cache.)
    argv = [*NO_ASLR, str(progs["sweep_i"]), *args]
    params = {"llc": llc, "llc_ways": ways, "line_size": line, "v2p": "none"}
    # TIERSIM_LLC is 0 and TIERSIM_LLC_WAYS 16 in the unfiltered run.
    pad = len(str(llc)) - 1 + len(str(ways)) - 2
    monkeypatch.setenv("TIERSIM_TEST_PAD", "x" * pad)
    tiersim.capture_instrumented(argv, tmp_path / "raw.trace", params={"llc": 0, "line_size": line, "v2p": "none"})
    monkeypatch.setenv("TIERSIM_TEST_PAD", "")
    filtered = tiersim.capture_instrumented(argv, tmp_path / "f.trace", params=params)
    capfd.readouterr()
    tiersim.convert(tmp_path / "raw.trace", tmp_path / "raw.lackey", dst_format="lackey")
    model = tiersim.capture_lackey(tmp_path / "raw.lackey", tmp_path / "m.trace", params=params)
    ours = rows(tmp_path / "f.trace")
    assert filtered.report["llc"]["misses"] > misses
    assert len(ours) == model["records"] == filtered.report["records"]
    assert ours == rows(tmp_path / "m.trace")
    assert filtered.report["llc"]["writebacks"] == model["llc"]["writebacks"] > 0


@pytest.mark.parametrize("flags", [[], ["-U__SSE2__"]], ids=["sse2", "loops"])
def test_runtime_32_bit_tags_give_the_sets_of_64_bit_ones(tmp_path: Path, flags: list[str]):
    exe = tmp_path / "narrow_tags"
    runtime = Path(tiersim.__file__).parent / "runtime"
    cmd = ["gcc", "-O2", "-Wall", "-Werror", *flags, "-I", str(runtime), "-o", str(exe), str(HERE / "narrow_tags.c")]
    subprocess.run(cmd, check=True)
    out = subprocess.run([str(exe), "1", "2000000"], capture_output=True, text=True, check=True).stdout
    assert (
        out.split()
        == (
            "accesses 2000000 misses 1091069 writebacks 515534 hits by way 56968 56181 56826 56543 56349 56949 "
            "56381 57140 57178 56866 56817 57099 56904 56636 57347 56747"
        ).split()
    )
    subprocess.run([str(exe), "7", "3000000"], capture_output=True, check=True)


@needs_valgrind
@pytest.mark.parametrize(("prog", "args"), [("sweep", ["2", "2"]), ("hashmap", ["20000"])])
def test_valgrind_tool_and_lackey_agree(progs, tmp_path: Path, capfd, prog: str, args: list[str]):
    reps = {}
    for tool in ("tiersim", "lackey"):
        r = tiersim.capture(
            [str(progs[prog]), *args], tmp_path / f"{tool}.trace", params={"llc": "256KiB", "v2p": "none"}, tool=tool
        )
        reps[tool] = r.report
    capfd.readouterr()
    t, lk = reps["tiersim"], reps["lackey"]
    assert t["path"] == "valgrind_tool" and lk["path"] == "valgrind"
    assert lk["llc"]["misses"] > 20_000
    for k in ("misses", "writebacks"):
        assert abs(t["llc"][k] - lk["llc"][k]) <= 0.005 * lk["llc"][k], (k, t["llc"], lk["llc"])
    # Both count Valgrind's guest instructions.
    assert abs(t["instructions"] - lk["instructions"]) <= 0.005 * lk["instructions"]


needs_qemu = pytest.mark.skipif(
    shutil.which(f"qemu-{os.uname().machine}") is None, reason="qemu-user missing: apt-get install qemu-user"
)


@needs_valgrind
@needs_qemu
@pytest.mark.parametrize(("prog", "args"), [("sweep", ["2", "2"]), ("hashmap", ["20000"]), ("quarters", ["2"])])
def test_qemu_plugin_and_valgrind_tool_agree(progs, tmp_path: Path, capfd, prog: str, args: list[str]):
    # QEMU user mode with tiersim's plugin sees the guest's loads and stores as Valgrind does:
    # the same LLC misses and writebacks within 0.5 %, the same guest instructions within 0.5 %
    # but for about 24,000 that Valgrind alone runs (its preloaded vgpreload_core.so's start-up),
    # the same threads on the same CPUs.
    reps = {}
    for tool in ("tiersim", "qemu"):
        r = tiersim.capture(
            [str(progs[prog]), *args], tmp_path / f"{tool}.trace", params={"llc": "256KiB", "v2p": "none"}, tool=tool
        )
        assert r.exit_status == 0
        reps[tool] = r.report
    capfd.readouterr()
    v, q = reps["tiersim"], reps["qemu"]
    assert q["path"] == "qemu_plugin"
    assert v["llc"]["misses"] > 20_000
    for k in ("misses", "writebacks"):
        assert abs(q["llc"][k] - v["llc"][k]) <= 0.005 * v["llc"][k], (k, q["llc"], v["llc"])
    assert abs(q["instructions"] - v["instructions"]) <= 0.005 * v["instructions"] + 30_000
    assert [(t["thread"], t["cpu"]) for t in q["threads"]] == [(t["thread"], t["cpu"]) for t in v["threads"]]


@needs_qemu
def test_qemu_takes_the_buddy_model_and_says_why(progs, tmp_path: Path, capfd):
    r = tiersim.capture([str(progs["hashmap"]), "2000"], tmp_path / "h.trace", tool="qemu")
    capfd.readouterr()
    assert r.report["v2p"] == "buddy" and "QEMU's plugin reads no pagemap" in r.report["v2p_note"], r.report


def test_the_program_named_in_an_error_is_past_setarch():
    from tiersim._capture import _program_name

    assert _program_name(["setarch", "x86_64", "-R", "./p", "a"]) == "./p"
    assert _program_name(["setarch", "x86_64", "-R", "-L", "./p"]) == "./p"
    assert _program_name(["setarch", "-R", "./p", "x"]) == "./p"
    assert _program_name(["./p", "-R", "x"]) == "./p"


@needs_qemu
def test_qemu_finds_a_program_on_path(progs, tmp_path: Path, capfd, monkeypatch: pytest.MonkeyPatch):
    # qemu-x86_64 does not search PATH: a bare name gave "ran no instruction" with no message.
    monkeypatch.setenv("PATH", f"{progs['hashmap'].parent}{os.pathsep}{os.environ['PATH']}")
    r = tiersim.capture([progs["hashmap"].name, "2000"], tmp_path / "h.trace", tool="qemu")
    capfd.readouterr()
    assert r.report["instructions"] > 300_000 and tiersim.inspect(r.out)["accesses"] > 1_000


@needs_qemu
def test_qemu_keeps_the_programs_argv0(tmp_path: Path, capfd):
    # The path found on PATH is given to qemu-x86_64 with -0 NAME, so the program sees the name
    # it was called by, as it would natively: `sh -c 'echo $0'` prints argv[0].
    tiersim.capture(["sh", "-c", "echo argv0=$0"], tmp_path / "s.trace", tool="qemu")
    assert "argv0=sh\n" in capfd.readouterr().out


@needs_qemu
def test_qemu_program_that_crashes_is_one_error_and_leaves_nothing(progs, tmp_path: Path, capfd):
    # QEMU 7.2 calls no plugin exit callback when the guest dies of a signal: the error says the
    # program was killed (it ran: not "ran no instruction"), and neither a trace nor the record
    # directory is left.
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(tiersim.TiersimError, match="'.*hashmap' was killed by SIGABRT under qemu-"):
        tiersim.capture([str(progs["hashmap"]), "3000", "abort"], out_dir / "h.trace", tool="qemu")
    capfd.readouterr()
    assert sorted(p.name for p in out_dir.iterdir()) == []


@needs_valgrind
@pytest.mark.parametrize("path", ["valgrind_tool", "instrumented"])
def test_same_program_same_bytes(progs, tmp_path: Path, capfd, path: str):
    params = {"llc": "256KiB", "v2p": "buddy", "fragmentation": 0.3}
    outs = []
    for i in range(2):
        out = tmp_path / f"r{i}.trace"
        if path == "instrumented":
            tiersim.capture_instrumented([*NO_ASLR, str(progs["sweep_i"]), "2", "1"], out, params=params)
        else:
            tiersim.capture([str(progs["sweep"]), "2", "1"], out, params=params)
        outs.append(out)
    capfd.readouterr()
    assert tiersim.inspect(outs[0])["accesses"] > 30_000
    for a, b in [(outs[0], outs[1]), (default_virt_out(outs[0]), default_virt_out(outs[1]))]:
        assert a.read_bytes() == b.read_bytes(), a


def test_zstd_levels_change_the_bytes_not_the_records(progs, tmp_path: Path, capfd):
    # The traces' zstd level and hashLog are compression settings (issue 36): an instrumented
    # capture at level 1 with zstd's own hashLog (the default: the same bytes as naming them) and
    # captures at fast levels read back as the same records, in the same order, with the same
    # header statistics; each setting writes the same bytes run to run.
    params = {"llc": "256KiB", "v2p": "buddy", "fragmentation": 0.3}

    def run(name: str, **zstd: int) -> Path:
        out = tmp_path / f"{name}.trace"
        tiersim.capture_instrumented([*NO_ASLR, str(progs["sweep_i"]), "2", "1"], out, params={**params, **zstd})
        return out

    def stats(trace: Path) -> dict:
        skip = {"path", "compressed_bytes", "bytes_per_access"}
        return {k: v for k, v in tiersim.inspect(trace).items() if k not in skip}

    base = run("base", zstd_level=1, zstd_hash_log=0)
    assert tiersim.inspect(base)["accesses"] > 30_000
    default = run("default")
    assert default.read_bytes() == base.read_bytes()
    assert default_virt_out(default).read_bytes() == default_virt_out(base).read_bytes()
    fast = [("fast", {"zstd_level": -10, "zstd_hash_log": 10}), ("own", {"zstd_level": -3, "zstd_hash_log": 0})]
    for name, zstd in fast:
        out, again = run(name, **zstd), run(f"{name}2", **zstd)
        for a, b in [(base, out), (default_virt_out(base), default_virt_out(out))]:
            assert a.read_bytes() != b.read_bytes(), (name, b)
            assert rows(a) == rows(b), (name, b)
            assert stats(a) == stats(b), (name, b)
        for a, b in [(out, again), (default_virt_out(out), default_virt_out(again))]:
            assert a.read_bytes() == b.read_bytes(), (name, b)
    capfd.readouterr()


def test_zstd_level_is_checked_before_the_program_runs(progs, tmp_path: Path):
    for args, want in [
        (["--zstd-level", "0"], "name the level"),
        (["--zstd-level", "23"], "--zstd-level"),
        (["--param", "zstd_hash_log=5"], "zstd_hash_log"),
        (["--param", "zstd_level=x"], "zstd_level"),
    ]:
        out = tmp_path / "z.trace"
        r = subprocess.run(
            [*tiersim_cmd(), "capture", "--instrumented", *args, "-o", str(out), "--", str(progs["sweep_i"]), "1", "1"],
            capture_output=True,
            text=True,
        )
        assert r.returncode != 0 and want in r.stderr, (args, r.stderr)
        assert "array=" not in r.stdout, args
        assert list(tmp_path.iterdir()) == [], args


@needs_valgrind
@pytest.mark.parametrize(
    ("how", "keys", "mark", "sig"),
    [
        (["--valgrind-tool", "tiersim"], "3000000", ".tiersim-capture-", signal.SIGTERM),
        (["--valgrind-tool", "tiersim"], "3000000", ".tiersim-capture-", signal.SIGINT),
        # The instrumented path merges while the program runs: the traces' temporary files
        # exist from the start, and the signal lands while both run.
        (["--instrumented"], "3000000", ".h.", signal.SIGTERM),
        # Ctrl-C: the terminal sends SIGINT to the whole foreground group, tiersim and the program.
        (["--instrumented"], "3000000", ".h.", signal.SIGINT),
        # Every access recorded (about 30 million).
        (["--instrumented", "--llc", "0"], "1000000", ".h.", signal.SIGTERM),
    ],
)
def test_signal_mid_capture_leaves_nothing(
    progs, tmp_path: Path, how: list[str], keys: str, mark: str, sig: signal.Signals
):
    out_dir, tmp_dir = tmp_path / "out", tmp_path / "tmp"
    out_dir.mkdir()
    tmp_dir.mkdir()
    prog = progs["hashmap_i"] if "--instrumented" in how else progs["hashmap"]
    # 3M keys: minutes under Valgrind, seconds instrumented; the signal lands while it runs.
    proc = subprocess.Popen(
        [*tiersim_cmd(), "capture", *how, "-o", str(out_dir / "h.trace"), "--", str(prog), keys],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp_dir)},
    )
    try:
        deadline = time.monotonic() + 60
        while not any(p.name.startswith(mark) for p in out_dir.iterdir()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.5)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + sig, stderr
    assert "no trace was written" in stderr
    assert sorted(p.name for p in out_dir.iterdir()) == []
    # Nor in the temporary directory: a Valgrind killed there used to leave its gdbserver's
    # FIFOs (vgdb-pipe-*), one set per capture, which `--vgdb=no` never makes.
    assert sorted(p.name for p in tmp_dir.iterdir()) == []


def _capture_until_its_temporary_files(progs, out_dir: Path, *args: str) -> subprocess.Popen[str]:
    """An instrumented capture of hashmap_i into OUT_DIR/h.trace, returned once the traces'
    temporary files exist (the program is running and tiersim merging)."""
    out_dir.mkdir()
    proc = subprocess.Popen(
        [*tiersim_cmd(), "capture", "--instrumented", *args, "-o", str(out_dir / "h.trace"), "--"]
        + [str(progs["hashmap_i"]), "3000000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not any(p.name.startswith(".h.") for p in out_dir.iterdir()):
        if proc.poll() is not None or time.monotonic() >= deadline:
            proc.kill()
            raise AssertionError(proc.communicate())
        time.sleep(0.05)
    return proc


@pytest.mark.parametrize("llc", ["0", "32KiB"])
def test_full_disk_leaves_nothing(progs, tmp_path: Path, llc: str):
    # The disk fills up mid-capture: once the traces' temporary files exist, tiersim's file-size
    # limit drops to 1 MiB, so the trace writer's next write past it fails (EFBIG; Python
    # ignores SIGXFSZ). The capture stops with one error naming the file and kills the program,
    # and leaves neither a trace nor a temporary file.
    import resource

    out_dir = tmp_path / "out"
    proc = _capture_until_its_temporary_files(progs, out_dir, "--llc", llc)
    try:
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "h." in errors[0] and "File too large" in stderr, stderr
    assert sorted(p.name for p in out_dir.iterdir()) == []


@needs_valgrind
def test_valgrind_tool_full_disk_leaves_nothing(progs, tmp_path: Path):
    # The disk is full for the tool too: tiersim and Valgrind (its child) may write 1 MiB a
    # file, and the tool's record files of 200,000 unfiltered keys need more. The tool stops the
    # program and says why; tiersim makes that its one error and leaves nothing.
    import resource

    out_dir = tmp_path / "out"
    out_dir.mkdir()
    r = subprocess.run(
        [
            *tiersim_cmd(),
            "capture",
            "--llc",
            "0",
            "-o",
            str(out_dir / "h.trace"),
            "--",
            str(progs["hashmap"]),
            "200000",
        ],
        capture_output=True,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY)),
        timeout=600,
    )
    assert r.returncode == 1, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Valgrind tool stopped" in errors[0] and "disk full" in errors[0], r.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL])
def test_instrumented_program_killed_mid_capture_leaves_nothing(progs, tmp_path: Path, sig: signal.Signals):
    # The program crashes (or is killed) while tiersim merges its records into the traces,
    # whose temporary files exist: an error, and neither a trace nor a temporary file is left.
    out_dir = tmp_path / "out"
    proc = _capture_until_its_temporary_files(progs, out_dir)
    try:
        time.sleep(0.3)
        # The program is the capture's child (tiersim runs it itself).
        kids = [int(k) for t in Path(f"/proc/{proc.pid}/task").iterdir() for k in (t / "children").read_text().split()]
        prog = [k for k in kids if Path(f"/proc/{k}/comm").read_text().strip() == "hashmap_i"]
        assert len(prog) == 1, kids
        os.kill(prog[0], sig)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "without running the tiersim runtime's exit handler" in errors[0], stderr
    assert sorted(p.name for p in out_dir.iterdir()) == []


def test_instrumented_program_that_crashes_leaves_nothing(progs, tmp_path: Path, capfd):
    # abort() mid-run: the runtime's exit handler never runs, so there is no summary to trust:
    # an error, and neither a trace nor the record directory is left.
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    # The error says which signal ended it (past setarch, which execs the program).
    with pytest.raises(
        tiersim.TiersimError, match="^'.*hashmap_i' was killed by SIGABRT: .*without running the tiersim runtime.s exit"
    ):
        tiersim.capture_instrumented([*NO_ASLR, str(progs["hashmap_i"]), "3000", "abort"], out_dir / "h.trace")
    capfd.readouterr()
    assert sorted(p.name for p in out_dir.iterdir()) == []


@pytest.mark.parametrize("params", [{}, {"llc_scope": "shared"}])
def test_instrumented_buffers_flush_at_thread_end_exit_and_not_in_a_fork(progs, tmp_path: Path, capfd, params):
    # batches.c: 40 threads one after another, each writing one byte in each of 490 to 529 lines
    # of its own and ending (some with their buffer of 512 accesses exactly full, or one access
    # either side), a thread that writes 300 lines and is still blocked when the program exits,
    # a forked child writing 100 lines, and the main thread's 700 lines just before exit. Every
    # written line of a traced thread is one fill on that thread's CPU, and none of the child's.
    r = tiersim.capture_instrumented(
        [str(progs["batches_i"])], tmp_path / "b.trace", params={"llc": "64KiB", "v2p": "none", **params}
    )
    out = capfd.readouterr().out
    assert r.exit_status == 0
    regions = [line.split() for line in out.splitlines() if line.startswith("region ")]
    assert len(regions) == 43
    fills = [(int(addr, 16), cpu) for addr, _, op, cpu in rows(tmp_path / "b.trace") if op == "R"]
    for _, _, _, thread, _, base, _, lines in regions:
        lo, n, cpu = int(base, 16), int(lines), int(thread)
        inside = sorted((a, c) for a, c in fills if lo <= a < lo + 65536)
        if cpu < 0:
            assert inside == []
        else:
            assert inside == [(lo + 64 * k, cpu) for k in range(n)], (thread, len(inside), n)


@pytest.mark.parametrize("params", [{"llc_scope": "shared"}, {"cpu_map": "0"}])
def test_instrumented_threads_sharing_one_cache(progs, tmp_path: Path, capfd, params: dict):
    # quarters.c's four threads in one 256 KiB cache (one shared cache, or one CPU's): the cache
    # turns from lock-free to locked as the second thread joins (membarrier). Each thread writes
    # then reads its own 512 KiB quarter, which no 256 KiB cache holds, so each of its 8192 lines
    # misses on both passes whoever shares the cache: at least 4 x 2 x 8192 misses.
    r = tiersim.capture_instrumented(
        [str(progs["quarters_i"]), "2"], tmp_path / "q.trace", params={"llc": "256KiB", "v2p": "none", **params}
    )
    capfd.readouterr()
    llc = r.report["llc"]
    assert r.exit_status == 0 and llc["caches"] == 1
    assert 4 * 2 * 8192 <= llc["misses"] < 4 * 2 * 8192 * 1.1, llc
    assert r.report["records"] == llc["misses"] + llc["writebacks"]
    assert [t["thread"] for t in r.report["threads"]] == [0, 1, 2, 3]


@pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")
def test_a_capture_build_is_keyed_on_the_headers_its_source_includes(tmp_path: Path) -> None:
    # The runtime, the Valgrind tool and the QEMU plugin include runtime/tiersim_capture.h: a
    # change to it must rebuild them, not reuse the cached build of the old header.
    from tiersim._capture import RUNTIME_SRC, _built

    assert '#include "tiersim_capture.h"' in RUNTIME_SRC.read_text()
    src, header = tmp_path / "prog.c", tmp_path / "prog.h"
    src.write_text('#include "prog.h"\nint f(void) { return N; }\n')
    header.write_text("#define N 1\n")
    first = _built(src, ("-c",), ".o", "a test object", tmp_path / "cache")
    assert _built(src, ("-c",), ".o", "a test object", tmp_path / "cache") == first
    header.write_text("#define N 2\n")
    second = _built(src, ("-c",), ".o", "a test object", tmp_path / "cache")
    assert second != first and second.exists()


@needs_clang
@pytest.mark.parametrize(
    ("prog", "args"),
    # staggered: threads that start and end at different times, each through the inlined path's
    # calls out (its first access, its full buffers) and its end's flush.
    [("sweep", ["2", "1"]), ("hashmap", ["40000"]), ("staggered", ["4", "256"])],
)
def test_lto_runtime_is_inlined_and_records_the_same(tmp_path: Path, capfd, prog: str, args: list[str]):
    # The runtime as bitcode (`tiersim capture --build-runtime --lto`) linked into a program built
    # with clang -flto: the link inlines the per-access path, so the program calls no __tsan_*
    # entry at all, and its capture records what the same program built with clang without LTO,
    # linked with the runtime's ordinary object, records: the same accesses, and the same file byte
    # for byte where the program's data does not move with the link (sweep's array is mmap'd at a
    # fixed address; hashmap's own static data lands elsewhere in the LTO binary, lld's layout, so
    # a few lines fall in other sets: misses within 0.5 %, 75,222 against 75,253 when measured).
    src = str(HERE / f"{prog}.c")
    plain, inlined = tmp_path / f"{prog}_plain", tmp_path / f"{prog}_lto"
    subprocess.run(["clang", "-O2", "-fsanitize=thread", "-c", src, "-o", f"{plain}.o"], check=True)
    runtime = tiersim.runtime_object(tmp_path / "cache")
    subprocess.run(["clang", f"{plain}.o", str(runtime), "-o", str(plain), "-pthread", "-ldl"], check=True)
    bitcode = tiersim.runtime_object(tmp_path / "cache", lto=True)
    assert bitcode.name.endswith(".lto.o") and bitcode.read_bytes()[:4] == b"BC\xc0\xde"
    subprocess.run(["clang", "-O2", "-flto", "-fsanitize=thread", "-c", src, "-o", f"{inlined}.o"], check=True)
    link = ["clang", "-O2", "-flto", "-fuse-ld=lld", f"{inlined}.o", str(bitcode), "-o", str(inlined)]
    subprocess.run([*link, "-pthread", "-ldl"], check=True)
    calls = subprocess.run(["objdump", "-d", str(plain)], capture_output=True, text=True, check=True).stdout
    assert "<__tsan_read" in calls
    code = subprocess.run(["objdump", "-d", str(inlined)], capture_output=True, text=True, check=True).stdout
    assert not [line for line in code.splitlines() if "call" in line and "<__tsan_" in line]
    params = {"llc": "256KiB", "v2p": "buddy", "fragmentation": 0.3}
    runs = []
    for exe in (plain, inlined):
        out = tmp_path / f"{exe.name}.trace"
        runs.append((out, tiersim.capture_instrumented([*NO_ASLR, str(exe), *args], out, params=params).report))
    capfd.readouterr()
    (a, ra), (b, rb) = runs
    assert [t["accesses"] for t in ra["threads"]] == [t["accesses"] for t in rb["threads"]]
    assert ra["instructions"] == rb["instructions"] and ra["llc"]["misses"] > 10_000
    assert abs(ra["llc"]["misses"] - rb["llc"]["misses"]) <= 0.005 * ra["llc"]["misses"]
    if prog == "sweep":
        assert a.read_bytes() == b.read_bytes()


def test_lto_runtime_without_clang_names_the_make_target(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    # No clang: one error saying what installs it, nothing built; and --lto is an option of
    # --build-runtime only.
    import tiersim._capture as cap

    monkeypatch.setattr(cap.shutil, "which", lambda name: None)
    with pytest.raises(tiersim.TiersimError, match=r"no 'clang' to build the tracing runtime for LTO.*`make clang`"):
        tiersim.runtime_object(tmp_path / "cache", lto=True)
    assert not (tmp_path / "cache").exists()
    monkeypatch.undo()
    r = subprocess.run(
        [*tiersim_cmd(), "capture", "--lto", "-o", str(tmp_path / "x.trace"), "--", "true"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "--lto goes with --build-runtime" in r.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("path", ["instrumented", "valgrind_tool"])
def test_the_status_line_counts_what_the_path_has_written(progs, tmp_path: Path, path: str):
    # On a terminal: the instrumented path's records as tiersim merges them while the program
    # runs (not "0 B of records"), the Valgrind tool's record files as it writes them.
    from test_cli_terminal import ANSI, _run_in_terminal

    if path == "valgrind_tool" and shutil.which("valgrind") is None:
        pytest.skip("valgrind missing: `make env` installs it")
    how = ["--instrumented", "--", str(progs["sweep_i"])] if path == "instrumented" else ["--", str(progs["sweep"])]
    raw = _run_in_terminal(["capture", "--llc", "64KiB", "-o", str(tmp_path / "s.trace"), *how, "64", "2"], 100)
    frames = [ANSI.sub("", f) for f in re.split(r"[\r\n]", raw)]
    if path == "instrumented":
        counts = [float(m[1]) for f in frames if (m := re.search(r"capturing \S+: ([0-9.]+) M records, ", f))]
        assert counts and counts[-1] > 0, frames
        assert counts == sorted(counts)
    else:
        assert any(re.search(r"capturing \S+: [0-9.]+ [KMG]iB of record files, ", f) for f in frames), frames
    assert not any("0 B of records" in f for f in frames)
