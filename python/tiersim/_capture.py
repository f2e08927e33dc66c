"""`tiersim capture`: run a program under Valgrind's lackey tool and stream its loads and stores
through the native filter (LLC model, virtual-to-physical mapping, trace writers); or run a
program built with -fsanitize=thread and linked with tiersim's tracing runtime
(runtime/tiersim_trace_rt.c), whose threads filter their own accesses and publish the records
into memory shared with the native side, which merges them into the traces while the program
runs (the instrumented path).

The program keeps its own stdin, stdout and stderr; lackey's output goes to a pipe that only
the native filter reads, so no text trace is ever stored. The guest runs inside the Valgrind
process, so that process's /proc/PID/pagemap maps the guest's virtual pages to frames.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiersim import _native
from tiersim._convert import json_object, params_to_toml
from tiersim._native import TiersimError
from tiersim._result import temp_dir_beside

# --trace-sched=yes: Valgrind says which thread runs (`SCHED[tid]:  acquired lock`), in the same
# stream, so each access goes to its thread.
# --vgdb=no: Valgrind's gdbserver makes FIFOs in $TMPDIR at start-up, which a killed capture left
# behind (one set per capture).
VALGRIND_ARGS = ("--tool=lackey", "--trace-mem=yes", "--trace-sched=yes", "--vgdb=no")
# Valgrind writes one lackey line per write(2); a large pipe lets the filter take them in big
# reads (the native side waits briefly when a read comes back less than half full).
PIPE_SIZE = 1 << 20
PROGRESS_PERIOD_S = 0.2
RUNTIME_SRC = Path(__file__).resolve().parent / "runtime" / "tiersim_trace_rt.c"
RUNTIME_CFLAGS = ("-O2", "-fPIC", "-Wall")
# The runtime as LLVM bitcode, for programs built with clang -flto: the link then inlines the
# per-access path into each instrumented load and store. LLVM inlines a function only into callers
# with the same sanitizer attributes, so the runtime is compiled with -fsanitize=thread too, its
# own accesses, entries, atomics and memory intrinsics left uninstrumented (it would call itself).
RUNTIME_LTO_CFLAGS = (
    "-O2",
    "-flto",
    "-fPIC",
    "-Wall",
    "-fsanitize=thread",
    *(
        arg
        for what in ("memory-accesses", "func-entry-exit", "atomics", "memintrinsics")
        for arg in ("-mllvm", f"-tsan-instrument-{what}=false")
    ),
)
# tiersim's Valgrind tool (the default Valgrind path), lackey (the fallback), and QEMU user mode
# with tiersim's plugin in place of Valgrind (the other candidate of issue 36).
VALGRIND_TOOLS = ("tiersim", "lackey", "qemu")
QEMU_PLUGIN_SRC = RUNTIME_SRC.with_name("tiersim_qemu_plugin.c")
QEMU_PLUGIN_CFLAGS = ("-O2", "-fPIC", "-shared", "-Wall", "-pthread")
VG_TOOL_SRC = RUNTIME_SRC.with_name("tiersim_vg_tool.c")
# Where Debian's valgrind package puts the tool headers, the core and VEX libraries a tool links
# with, and the installed tools with the files Valgrind loads beside them (VALGRIND_LIB).
VG_INCLUDE = Path("/usr/include/valgrind")
VG_ARCHIVES = (Path("/usr/lib/x86_64-linux-gnu/valgrind"), Path("/usr/lib/valgrind"))
VG_LIBEXEC = (Path("/usr/libexec/valgrind"), Path("/usr/lib/valgrind"), Path("/usr/lib/x86_64-linux-gnu/valgrind"))
# Valgrind's own build flags for an amd64 Linux tool: no libc, the core's start-up, loaded at
# the address Valgrind's launcher expects (valgrind_load_address, 0x58000000 on amd64).
VG_TOOL_CFLAGS = (
    "-O2",
    "-fno-strict-aliasing",
    "-fno-builtin",
    "-fno-stack-protector",
    "-fno-pic",
    "-fno-pie",
    "-DVGA_amd64=1",
    "-DVGO_linux=1",
    "-DVGP_amd64_linux=1",
    "-DVGPV_amd64_linux_vanilla=1",
)
VG_TOOL_LDFLAGS = (
    "-static",
    "-nodefaultlibs",
    "-nostartfiles",
    "-u",
    "_start",
    "-no-pie",
    "-Wl,--build-id=none",
    "-Wl,-Ttext-segment=0x58000000",
)
# The Valgrind path's LD_PRELOAD shim: each thread announces its creation-order number.
# valgrind/valgrind.h comes with Valgrind (Debian's valgrind package).
PRELOAD_SRC = RUNTIME_SRC.with_name("tiersim_vg_preload.c")
PRELOAD_CFLAGS = ("-O2", "-fPIC", "-shared", "-Wall")
# Link flags a program needs besides the runtime object: threads and dlsym.
RUNTIME_LIBS = ("-pthread", "-ldl")


@dataclass
class CaptureProgress:
    input_bytes: int
    instructions: int
    data_accesses: int
    records: int
    elapsed_s: float


@dataclass
class CaptureResult:
    """What `capture` did. `exit_status` is the program's: its exit code, or 128 + the signal
    that killed it."""

    argv: list[str]
    exit_status: int
    signal: int | None
    out: Path
    virt_out: Path | None
    elapsed_s: float
    report: dict[str, Any] = field(default_factory=dict)

    def how_it_ended(self) -> str:
        """How the program ended, for a message on one that failed: was killed by SIGSEGV, exited with status 3."""
        if self.signal is not None:
            return f"was killed by {signal_name(self.signal)}"
        return f"exited with status {self.exit_status}"


def default_virt_out(out: str | os.PathLike[str]) -> Path:
    """Where the virtual twin of a physical trace goes: prog.trace -> prog.virt.trace."""
    p = Path(out)
    return p.with_name(f"{p.stem}.virt{p.suffix}") if p.suffix else p.with_name(p.name + ".virt")


def capture_params() -> dict[str, Any]:
    """The capture's parameters with kinds, defaults, bounds and help."""
    return json_object(_native.capture_params())


def _program_name(argv: Sequence[str]) -> str:
    """The program a command line runs: past `setarch ARCH -R` (ASLR off, docs/capture.md), which
    execs it in the same process (setarch's options take no value)."""
    if Path(argv[0]).name == "setarch":
        # setarch [ARCH] [OPTIONS] PROGRAM: the first word after the architecture not an option.
        rest = [a for a in argv[1:] if not a.startswith("-")]
        arch_given = len(argv) > 1 and not argv[1].startswith("-")
        program = rest[1:] if arch_given else rest
        if program:
            return program[0]
    return argv[0]


def _find_program(prog: str) -> str:
    if os.sep in prog:
        p = Path(prog)
        if not p.exists():
            raise TiersimError(f"program '{prog}' not found")
        if not p.is_file() or not os.access(p, os.X_OK):
            raise TiersimError(f"program '{prog}' is not an executable file")
        return prog
    found = shutil.which(prog)
    if found is None:
        raise TiersimError(f"program '{prog}' not found on PATH")
    return found


def _find_valgrind() -> str:
    found = shutil.which("valgrind")
    if found is None:
        raise TiersimError(
            "valgrind is not installed: `make env` installs it (apt-get install valgrind), "
            "or install it with your package manager"
        )
    return found


def _writable(path: Path, what: str) -> None:
    if path.is_dir():
        raise TiersimError(f"{what} '{path}' is a directory; give a file name")
    if not path.parent.is_dir():
        raise TiersimError(f"cannot write {what} '{path}': directory '{path.parent}' does not exist")


def _big_pipe(fd: int) -> int:
    """Grow the pipe towards PIPE_SIZE (the kernel caps it at fs/pipe-max-size); its capacity."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        pass
    return fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)


def _checked(
    params: Mapping[str, Any] | str | None,
    seed: int,
    out: str | os.PathLike[str],
    virt_out: str | os.PathLike[str] | None,
) -> tuple[str, Path, Path | None]:
    """Parameters as TOML (resolved natively, so bad ones fail here), the output paths."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise TiersimError(f"seed must be an integer in [0, 2^64), got {seed!r}")
    params_text = params_to_toml(params)
    resolved = json.loads(_native.capture_resolve(params_text))
    out_path = Path(out)
    _writable(out_path, "output")
    physical = resolved["v2p"] != "none"
    if not physical and virt_out is not None:
        raise TiersimError("v2p none writes only the virtual trace (to the output path): drop the virtual trace path")
    virt_path = Path(virt_out) if virt_out is not None else (default_virt_out(out_path) if physical else None)
    if virt_path is not None:
        _writable(virt_path, "virtual trace")
    return params_text, out_path, virt_path


def capture(
    argv: Sequence[str],
    out: str | os.PathLike[str],
    *,
    virt_out: str | os.PathLike[str] | None = None,
    params: Mapping[str, Any] | str | None = None,
    seed: int = 0,
    on_progress: Callable[[CaptureProgress], None] | None = None,
    tool: str = "tiersim",
) -> CaptureResult:
    """Run `argv` under Valgrind and write its trace to `out`.

    params: capture parameters (`capture_params()`), e.g. {"llc": "16MiB", "v2p": "buddy"}.
    With v2p other than "none", `out` gets physical addresses and `virt_out` (default
    `default_virt_out(out)`) the same records with virtual addresses.
    on_progress is called about every 0.2 s from this thread while the program runs.

    Raises TiersimError when the program or Valgrind cannot be found, a parameter is wrong, or
    the stream cannot be read; the program is then killed and no trace is left. A program that
    exits with a non-zero status still gives a trace; the status is in the result.

    tool: "tiersim" (default) runs the program under tiersim's own Valgrind tool
    (runtime/tiersim_vg_tool.c, built on first use), which filters loads and stores inside
    Valgrind and writes binary records; "lackey" runs Valgrind's lackey and filters its text, the
    fallback when the tool cannot be built (a warning says why); "qemu" runs it under QEMU user
    mode (qemu-x86_64) with tiersim's plugin (runtime/tiersim_qemu_plugin.c), which writes the
    tool's records (no pagemap: v2p auto takes the buddy model).
    """
    _check_argv(argv)
    if not argv:
        raise TiersimError("no program given: tiersim capture -o OUT -- PROG [ARGS]...")
    if tool not in VALGRIND_TOOLS:
        raise TiersimError(f"unknown valgrind tool {tool!r}: one of {', '.join(VALGRIND_TOOLS)}")
    # Bad parameters and outputs are refused before the program runs.
    params_text, out_path, virt_path = _checked(params, seed, out, virt_out)
    if tool == "qemu":
        # qemu-x86_64 does not search PATH: it gets the program's path, and `-0` keeps the
        # argv[0] the user gave.
        program = _find_program(argv[0])
        qemu = _find_qemu()
        return _capture_files(
            [qemu, "-plugin", str(qemu_plugin()), "-0", argv[0], program, *argv[1:]],
            argv,
            params_text,
            seed,
            out_path,
            virt_path,
            on_progress,
            {},
        )
    valgrind = _find_valgrind()
    _find_program(argv[0])
    if tool == "tiersim":
        try:
            lib = vg_tool_dir()
        except TiersimError as exc:
            warnings.warn(f"{exc}; capturing with lackey instead (much slower)", stacklevel=2)
        else:
            return _capture_files(
                [valgrind, "--tool=tiersim", "--fair-sched=yes", "--vgdb=no", "--log-file={dir}/valgrind.log", *argv],
                argv,
                params_text,
                seed,
                out_path,
                virt_path,
                on_progress,
                {"VALGRIND_LIB": str(lib)},
            )

    env = dict(os.environ)
    try:
        # Threads announce their creation-order numbers; a static program ignores LD_PRELOAD
        # and its threads are numbered by when they start (docs/capture.md).
        env["LD_PRELOAD"] = " ".join(filter(None, (str(preload_object()), env.get("LD_PRELOAD"))))
    except TiersimError as exc:
        warnings.warn(f"{exc}; threads are numbered by when they start, not created (docs/capture.md)", stacklevel=2)

    r, w = os.pipe()
    try:
        capacity = _big_pipe(r)
        start = time.monotonic()
        proc = subprocess.Popen([valgrind, *VALGRIND_ARGS, f"--log-fd={w}", *argv], pass_fds=(w,), env=env)
    except OSError as exc:
        os.close(r)
        raise TiersimError(f"cannot start valgrind: {exc}") from None
    finally:
        # Only Valgrind may hold the write end, so the filter sees end of input when it exits.
        os.close(w)

    progress = _native.CaptureProgress()
    outcome: dict[str, Any] = {}

    # The worker's end is told by an Event, not by `worker.join`: in Python 3.11 a join whose
    # wait is interrupted by a signal's exception can mark the still-running thread stopped
    # (threading._wait_for_tstate_lock releases the thread's own lock), so a later join returns at
    # once and the interpreter finalizes under the native call, which then aborts ("FATAL: exception
    # not rethrown") when it takes the GIL back.
    finished = threading.Event()

    def work() -> None:
        try:
            outcome["report"] = _native.capture(
                f"/proc/self/fd/{r}",
                os.fspath(out_path),
                None if virt_path is None else os.fspath(virt_path),
                params=params_text,
                seed=seed,
                pid=proc.pid,
                pipe_capacity=capacity,
                progress=progress,
                source_name=f"<lackey output of {argv[0]}>",
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            outcome["error"] = exc
        finally:
            finished.set()

    worker = threading.Thread(target=work, name="tiersim-capture", daemon=True)
    try:
        worker.start()
        while True:
            done = finished.wait(PROGRESS_PERIOD_S)
            if on_progress is not None:
                on_progress(CaptureProgress(*progress.snapshot(), time.monotonic() - start))
            if done:
                break
    except BaseException:
        progress.cancel()
        _stop(proc)
        if worker.is_alive():
            finished.wait()
        os.close(r)
        if "report" in outcome:
            # The filter finished before it saw the cancel: an interrupted run leaves no trace.
            for p in (out_path, virt_path):
                if p is not None:
                    p.unlink(missing_ok=True)
        raise
    os.close(r)
    if "error" in outcome:
        # The filter stopped reading: Valgrind would block on a full pipe, so end it.
        _stop(proc)
        raise outcome["error"]
    returncode = proc.wait()
    elapsed = time.monotonic() - start
    report = json.loads(outcome["report"])
    if report["instructions"] == 0:
        # Valgrind could not run it (an executable for another machine, say); it said why on
        # stderr. An empty trace would only look like a result.
        for p in (out_path, virt_path):
            if p is not None:
                p.unlink(missing_ok=True)
        raise TiersimError(
            f"valgrind ran no instruction of '{argv[0]}' (valgrind exit status {returncode}); its message is above"
        )
    return _result(argv, returncode, out_path, virt_path, elapsed, report)


def capture_lackey(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    virt_out: str | os.PathLike[str] | None = None,
    params: Mapping[str, Any] | str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """The capture pipeline on a stored lackey log (`valgrind --tool=lackey --trace-mem=yes
    --log-file=F`, or `tiersim trace convert --to lackey`) instead of a running program. There is
    no process to read pagemap of, so v2p auto uses the buddy model. Returns the report."""
    params_text, out_path, virt_path = _checked(params, seed, out, virt_out)
    report = _native.capture(
        os.fspath(src),
        os.fspath(out_path),
        None if virt_path is None else os.fspath(virt_path),
        params=params_text,
        seed=seed,
    )
    return json_object(report)


def runtime_object(cache_dir: str | os.PathLike[str] | None = None, lto: bool = False) -> Path:
    """The tracing runtime compiled for this machine: an object file to link into a program
    compiled with -fsanitize=thread, in place of libtsan (`cc prog.o OBJ -pthread -ldl`).
    Built on first use with $CC (default cc) into `cache_dir` (default
    $XDG_CACHE_HOME/tiersim, else ~/.cache/tiersim), named by a hash of the source and flags.
    With `lto`, LLVM bitcode built with clang ($CC if it is a clang, else `clang`), for a program
    compiled with `clang -flto -fsanitize=thread` and linked with `clang -flto -fuse-ld=lld`: the
    link inlines the runtime's per-access path into the program (docs/capture.md)."""
    if not lto:
        return _built(RUNTIME_SRC, ("-c", *RUNTIME_CFLAGS), ".o", "the tracing runtime", cache_dir)
    return _built(
        RUNTIME_SRC, ("-c", *RUNTIME_LTO_CFLAGS), ".lto.o", "the tracing runtime for LTO", cache_dir, cc=lto_cc()
    )


def lto_cc() -> str:
    """The clang that builds for LTO: $CC if it is a clang, else `clang`; an error naming `make
    clang` when it is missing."""
    cc = os.environ.get("CC") or ""
    if "clang" not in Path(cc).name:
        cc = "clang"
    if shutil.which(cc) is None:
        raise TiersimError(
            f"no '{cc}' to build the tracing runtime for LTO: it needs clang (`make clang` installs clang and lld)"
        )
    return cc


def preload_object(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The Valgrind path's LD_PRELOAD shim (runtime/tiersim_vg_preload.c) as a shared object,
    built on first use as `runtime_object` is."""
    return _built(PRELOAD_SRC, (*PRELOAD_CFLAGS, "-ldl"), ".so", "the Valgrind preload shim", cache_dir)


def _check_argv(argv: Any) -> None:
    """A program and its arguments as a list: a string would run its first character."""
    if isinstance(argv, (str, bytes, os.PathLike)) or not all(isinstance(a, (str, os.PathLike)) for a in argv):
        raise TypeError(f"argv: a list of strings (the program and its arguments), not {argv!r}")


def _find_qemu() -> str:
    import platform

    name = f"qemu-{platform.machine()}"
    found = shutil.which(name)
    if found is None:
        raise TiersimError(f"{name} is not installed: apt-get install qemu-user")
    return found


def qemu_plugin(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """tiersim's QEMU user-mode plugin (runtime/tiersim_qemu_plugin.c) as a shared object, built
    on first use as `runtime_object` is; x86-64 only (it stamps records with the TSC)."""
    import platform

    if platform.machine() not in ("x86_64", "amd64"):
        raise TiersimError(f"tiersim's QEMU plugin is built for x86-64 only, not {platform.machine()}")
    return _built(QEMU_PLUGIN_SRC, QEMU_PLUGIN_CFLAGS, ".so", "tiersim's QEMU plugin", cache_dir)


def vg_tool_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A directory to give Valgrind as VALGRIND_LIB: tiersim's tool (runtime/tiersim_vg_tool.c)
    built on first use with $CC against Debian's valgrind package (its pub_tool_*.h headers and
    libcoregrind/libvex archives), beside links to the installed Valgrind's own files."""
    import platform

    if platform.machine() not in ("x86_64", "amd64") or not sys.platform.startswith("linux"):
        raise TiersimError(f"tiersim's Valgrind tool is built for amd64 Linux only, not {platform.machine()}")
    archives = next((d for d in VG_ARCHIVES if (d / "libcoregrind-amd64-linux.a").exists()), None)
    libexec = next((d for d in VG_LIBEXEC if (d / "vgpreload_core-amd64-linux.so").exists()), None)
    if archives is None or libexec is None or not (VG_INCLUDE / "pub_tool_basics.h").exists():
        raise TiersimError(
            "cannot build tiersim's Valgrind tool: Valgrind's tool headers and libraries are missing "
            "(Debian's valgrind package installs them; `make env`)"
        )
    libs = (
        str(archives / "libcoregrind-amd64-linux.a"),
        str(archives / "libvex-amd64-linux.a"),
        "-lgcc",
        str(archives / "libgcc-sup-amd64-linux.a"),
    )
    flags = (f"-I{VG_INCLUDE}", *VG_TOOL_CFLAGS, *VG_TOOL_LDFLAGS, *libs)
    tool = _built(VG_TOOL_SRC, flags, "", "tiersim's Valgrind tool", cache_dir, extra_key=str(libexec))
    lib = tool.with_name(tool.name + ".lib")
    if not (lib / "tiersim-amd64-linux").exists():
        tmp = Path(tempfile.mkdtemp(prefix=lib.name + ".", dir=lib.parent))
        for f in libexec.iterdir():
            (tmp / f.name).symlink_to(f)
        (tmp / "tiersim-amd64-linux").symlink_to(tool)
        try:
            tmp.rename(lib)
        except OSError:
            # Another capture made it meanwhile.
            shutil.rmtree(tmp, ignore_errors=True)
    return lib


def c_compiler(what: str) -> str:
    """$CC (unset or empty: cc), which must exist; `what` names what it is to build, for the error."""
    cc = os.environ.get("CC") or "cc"
    if shutil.which(cc) is None:
        raise TiersimError(f"no C compiler '{cc}' to build {what}: install gcc or set CC")
    return cc


def _built(
    src: Path,
    flags: tuple[str, ...],
    suffix: str,
    what: str,
    cache_dir: str | os.PathLike[str] | None,
    extra_key: str = "",
    cc: str | None = None,
) -> Path:
    """`src` compiled with `cc` (default: c_compiler) and `flags` into the cache, once per source
    (with the headers it includes from beside it, runtime/tiersim_capture.h), compiler and flags."""
    cc = cc or c_compiler(what)
    source = src.read_bytes()
    for header in re.findall(rb'^#include "([^"]+)"', source, re.M):
        if (src.parent / header.decode()).is_file():
            source += (src.parent / header.decode()).read_bytes()
    key = hashlib.sha256(source + " ".join((cc, *flags, extra_key)).encode()).hexdigest()[:16]
    base = (
        Path(cache_dir)
        if cache_dir is not None
        else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tiersim"
    )
    obj = base / f"{src.stem}-{key}{suffix}"
    if obj.exists():
        return obj
    base.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=suffix, dir=base)
    os.close(fd)
    r = subprocess.run([cc, str(src), "-o", tmp, *flags], capture_output=True, text=True)
    if r.returncode != 0:
        os.unlink(tmp)
        raise TiersimError(f"building {what} with {cc} failed:\n{r.stderr.strip()}")
    # Atomic, so that concurrent builds never see half an object.
    os.replace(tmp, obj)
    return obj


def _dir_bytes(d: Path) -> int:
    try:
        return sum(e.stat().st_size for e in os.scandir(d))
    except OSError:
        return 0


def capture_instrumented(
    argv: Sequence[str],
    out: str | os.PathLike[str],
    *,
    virt_out: str | os.PathLike[str] | None = None,
    params: Mapping[str, Any] | str | None = None,
    seed: int = 0,
    on_progress: Callable[[CaptureProgress], None] | None = None,
) -> CaptureResult:
    """Run `argv`, a program compiled with -fsanitize=thread and linked with `runtime_object()`,
    and merge what its threads record into `out` (and `virt_out`) while it runs, as `capture`
    does.

    The runtime publishes each thread's records into memory shared with this process (a memfd
    the program inherits; nothing is written beside `out` but the traces). Raises TiersimError
    when the program did not load the runtime or ended without its exit handler (killed by a
    signal, or _exit); no trace is left then."""
    _check_argv(argv)
    if not argv:
        raise TiersimError("no program given: tiersim capture --instrumented -o OUT -- PROG [ARGS]...")
    params_text, out_path, virt_path = _checked(params, seed, out, virt_out)
    _find_program(argv[0])
    shm = os.memfd_create("tiersim-capture", os.MFD_CLOEXEC)
    try:
        _native.capture_shm_init(shm)
        env = json.loads(_native.capture_runtime_env("", params_text))
        env = {k: v for k, v in env.items() if k != "TIERSIM_CAPTURE_DIR"}
        env["TIERSIM_SHM_FD"] = str(shm)
        start = time.monotonic()
        cpu_start = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            proc = subprocess.Popen(list(argv), env={**os.environ, **env}, pass_fds=(shm,))
        except OSError as exc:
            raise TiersimError(f"cannot start '{argv[0]}': {exc}") from None
        progress = _native.CaptureProgress()
        ended: list[float] = []

        def tick() -> None:
            if not ended and proc.poll() is not None:
                ended.append(time.monotonic())
            if on_progress is not None:
                on_progress(CaptureProgress(0, 0, 0, progress.snapshot()[3], time.monotonic() - start))

        try:
            report = _merge_in_worker(
                lambda: _native.capture_stream(
                    shm,
                    proc.pid,
                    os.fspath(out_path),
                    None if virt_path is None else os.fspath(virt_path),
                    params=params_text,
                    seed=seed,
                    progress=progress,
                ),
                progress,
                (out_path, virt_path),
                tick,
            )
        except TiersimError as exc:
            killed = proc.poll()
            if killed is None or killed >= 0:
                _stop(proc)
                raise
            # The runtime's exit handler did not run because a signal ended the program: say which.
            raise TiersimError(f"'{_program_name(argv)}' was killed by {signal_name(-killed)}: {exc}") from None
        except BaseException:
            _stop(proc)
            raise
        returncode = proc.wait()
    finally:
        os.close(shm)
    end = time.monotonic()
    cpu_self, cpu_children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    report = json.loads(report)
    # The split of the command's time: the program's run, during which the records are merged
    # (its exit handler waits for the merge to take the last ones), then the traces' last
    # frames; and the CPU time of each side (the program with the runtime; tiersim's merge and
    # compression, with this interpreter).
    program_end = ended[0] if ended else end
    report["run_s"] = round(program_end - start, 3)
    report["merge_s"] = round(end - program_end, 3)
    report["program_cpu_s"] = round(
        cpu_children.ru_utime + cpu_children.ru_stime - cpu_start[1].ru_utime - cpu_start[1].ru_stime, 3
    )
    report["merge_cpu_s"] = round(
        cpu_self.ru_utime + cpu_self.ru_stime - cpu_start[0].ru_utime - cpu_start[0].ru_stime, 3
    )
    return _result(argv, returncode, out_path, virt_path, end - start, report)


def _no_space(d: Path) -> bool:
    """Whether the filesystem of `d` is full (less than 64 KiB left)."""
    try:
        st = os.statvfs(d)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 << 10


def _capture_files(
    cmd: list[str],
    argv: Sequence[str],
    params_text: str,
    seed: int,
    out_path: Path,
    virt_path: Path | None,
    on_progress: Callable[[CaptureProgress], None] | None,
    extra_env: dict[str, str],
) -> CaptureResult:
    """Run `cmd` (the program itself, or Valgrind with tiersim's tool; `{dir}` in it is the
    record directory) with the tracing runtime's environment, then merge the per-thread record
    files it left in a temporary directory beside `out_path` (removed in every case)."""
    tool = cmd[0] != argv[0]
    # Absolute: a program that changes directory (redis-server into its --dir) still finds it.
    trace_dir = temp_dir_beside(out_path, ".tiersim-capture-").resolve()
    try:
        start = time.monotonic()
        env = json.loads(_native.capture_runtime_env(os.fspath(trace_dir), params_text))
        try:
            proc = subprocess.Popen(
                [c.replace("{dir}", str(trace_dir)) for c in cmd], env={**os.environ, **env, **extra_env}
            )
        except OSError as exc:
            raise TiersimError(f"cannot start '{cmd[0]}': {exc}") from None
        try:
            while True:
                try:
                    returncode = proc.wait(PROGRESS_PERIOD_S)
                    break
                except subprocess.TimeoutExpired:
                    if on_progress is not None:
                        on_progress(CaptureProgress(_dir_bytes(trace_dir), 0, 0, 0, time.monotonic() - start))
        except BaseException:
            _stop(proc)
            raise
        log = trace_dir / "valgrind.log"
        messages = log.read_text(errors="replace").splitlines() if log.exists() else []
        if tool and not (trace_dir / "summary").exists():
            runner = Path(cmd[0]).name
            # The tool stopped the program itself (its records could not be written: a full
            # disk), and said why in Valgrind's log.
            stopped = [m.split("tiersim tool: ", 1)[1] for m in messages if "tiersim tool: " in m]
            if stopped:
                raise TiersimError(f"tiersim's Valgrind tool stopped '{argv[0]}': {stopped[-1]}")
            if not messages and _no_space(trace_dir):
                # Not even Valgrind's log could be written.
                raise TiersimError(f"no space left writing {out_path}")
            if runner.startswith("qemu-") and returncode < 0 and any(trace_dir.glob("t*.bin")):
                # QEMU 7.2 re-raises a guest's fatal signal on itself without calling the plugins'
                # exit callbacks (later QEMUs call them from preexit_cleanup), so the plugin's last
                # records and its summary were never written.
                raise TiersimError(
                    f"'{argv[0]}' was killed by {signal_name(-returncode)} under {runner}, which runs no plugin "
                    "exit callback then: its last records were never written, so no trace is left. Capture it "
                    "with tiersim's Valgrind tool (the default), which keeps the trace up to the signal"
                )
            # Valgrind or QEMU could not run it (an executable for another machine, say), or died.
            raise TiersimError(
                f"{runner} ran no instruction of '{argv[0]}' ({runner} exit status {returncode}); its message is "
                + ("\n" + "\n".join(messages[-20:]) if messages else "above")
            )
        if not (trace_dir / "t0.bin").exists():
            raise TiersimError(
                f"'{argv[0]}' did not load the tiersim tracing runtime: compile it with -fsanitize=thread and "
                f"link it with `tiersim capture --build-runtime`'s object instead of -fsanitize=thread "
                "(docs/capture.md)"
            )
        progress = _native.CaptureProgress()
        merge_start = time.monotonic()
        report = _merge_in_worker(
            lambda: _native.capture_instrumented(
                os.fspath(trace_dir),
                os.fspath(out_path),
                None if virt_path is None else os.fspath(virt_path),
                params=params_text,
                seed=seed,
                progress=progress,
            ),
            progress,
            (out_path, virt_path),
            lambda: (
                on_progress(
                    CaptureProgress(_dir_bytes(trace_dir), 0, 0, progress.snapshot()[3], time.monotonic() - start)
                )
                if on_progress is not None
                else None
            ),
        )
    finally:
        shutil.rmtree(trace_dir, ignore_errors=True)
    end = time.monotonic()
    report = json.loads(report)
    # The split of the command's time: the program's run (with the runtime filtering its accesses
    # and writing its records out), then the merge into the traces.
    report["run_s"] = round(merge_start - start, 3)
    report["merge_s"] = round(end - merge_start, 3)
    if tool:
        report["valgrind_messages"] = messages[:100]
    return _result(argv, returncode, out_path, virt_path, end - start, report)


def _merge_in_worker(
    call: Callable[[], str],
    progress: Any,
    outputs: tuple[Path, Path | None],
    tick: Callable[[], None],
) -> str:
    """`call()` (a native merge that polls `progress` for a cancel) on a thread of its own, so
    that Ctrl-C or SIGTERM, raised in this thread, cancel it at once instead of after it ends;
    an interrupted merge leaves no trace. The worker's end is told by an Event, as in `capture`."""
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def work() -> None:
        try:
            outcome["report"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            outcome["error"] = exc
        finally:
            finished.set()

    worker = threading.Thread(target=work, name="tiersim-capture-merge", daemon=True)
    try:
        worker.start()
        while not finished.wait(PROGRESS_PERIOD_S):
            tick()
        # The last call sees the merge's final counts.
        tick()
    except BaseException:
        progress.cancel()
        finished.wait()
        if "report" in outcome:
            for p in outputs:
                if p is not None:
                    p.unlink(missing_ok=True)
        raise
    if "error" in outcome:
        raise outcome["error"]
    report: str = outcome["report"]
    return report


def _result(
    argv: Sequence[str], returncode: int, out: Path, virt_out: Path | None, elapsed: float, report: dict[str, Any]
) -> CaptureResult:
    """The result of a run whose process ended with `returncode` (negative: killed by a signal)."""
    sig = -returncode if returncode < 0 else None
    return CaptureResult(
        argv=list(argv),
        exit_status=128 + sig if sig is not None else returncode,
        signal=sig,
        out=out,
        virt_out=virt_out,
        elapsed_s=elapsed,
        report=report,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
