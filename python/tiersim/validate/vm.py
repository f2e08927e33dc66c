"""The virtual machine of `tiersim validate linux`: Debian's 6.1 kernel under QEMU with a fast node
that has the CPUs, a slow CPU-less node onlined by dax/kmem (a lower memory tier), and a busybox
initramfs that runs one case (docs/validate.md). Everything comes from Debian packages that
`make vm` installs; nothing is downloaded here."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tiersim import TiersimError
from tiersim._capture import c_compiler

GUEST = Path(__file__).parent / "guest"
PROGRAMS = Path(__file__).parent / "programs"

# drivers/nvdimm and drivers/dax, in the order their symbols need each other.
MODULES = ["libnvdimm", "nd_e820", "nd_btt", "nd_pmem", "dax_pmem", "device_dax", "kmem"]


def vm_dir() -> Path:
    """Where `make vm` unpacks the kernel (its VM_DIR)."""
    env = os.environ.get("TIERSIM_VM_DIR")
    return Path(env) if env else Path.home() / ".cache" / "tiersim" / "vm"


@dataclass(frozen=True)
class Shape:
    """The VM's memory: node 0 with the CPUs, node 1 the slow node (all of it legacy pmem by
    memmap=, later dax/kmem), node 2 a small CPU-less node above it that keeps node 1 off the top of
    RAM, whose last pages the firmware keeps (a region ending there comes out misaligned). Node 2's
    memory is reserved with memmap=$ as well, so that no page of the program can land there."""

    fast_mib: int = 256
    slow_mib: int = 640
    pad_mib: int = 64
    cpus: int = 2

    @property
    def total_mib(self) -> int:
        return self.fast_mib + self.slow_mib + self.pad_mib

    def cmdline(self) -> str:
        f, s, p = self.fast_mib, self.slow_mib, self.pad_mib
        return f"memmap={s}M!{f}M memmap={p - 8}M${f + s}M"


@dataclass(frozen=True)
class Tools:
    qemu: str
    kernel: Path
    modules: Path
    busybox: str
    ndctl: str
    daxctl: str


def find_tools() -> Tools:
    """The host programs and the unpacked kernel, or one line naming the make target."""
    missing = []
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        missing.append("qemu-system-x86_64")
    busybox = "/bin/busybox" if os.access("/bin/busybox", os.X_OK) else None
    if busybox is None:
        missing.append("busybox (busybox-static)")
    ndctl, daxctl = shutil.which("ndctl"), shutil.which("daxctl")
    if ndctl is None or daxctl is None:
        missing.append("ndctl/daxctl")
    root = vm_dir() / "linux"
    kernels = sorted((root / "boot").glob("vmlinuz-6.1.*"))
    if not kernels:
        missing.append(f"the Debian 6.1 kernel image in {root}")
    if missing:
        raise TiersimError(f"{', '.join(missing)} not installed: run `make vm` in the tiersim checkout")
    # The host side captures the guest's programs under tiersim's Valgrind tool: found before a
    # boot, not after the matrix.
    if shutil.which("valgrind") is None:
        raise TiersimError("valgrind not installed: run `make valgrind` in the tiersim checkout")
    kernel = kernels[-1]
    version = kernel.name.removeprefix("vmlinuz-")
    assert qemu and busybox and ndctl and daxctl
    return Tools(qemu, kernel, root / "lib" / "modules" / version / "kernel" / "drivers", busybox, ndctl, daxctl)


def kvm_usable() -> bool:
    """KVM when /dev/kvm opens and the CPU has virtualisation extensions; TCG otherwise."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    if " vmx" not in flags and " svm" not in flags:
        return False
    try:
        fd = os.open("/dev/kvm", os.O_RDWR)
    except OSError:
        return False
    os.close(fd)
    return True


def _newc(entries: list[tuple[str, int, bytes]]) -> bytes:
    """An uncompressed cpio archive in the "newc" format the kernel unpacks as its initramfs
    (init/initramfs.c): one header per entry, name and data each padded to 4 bytes."""
    out = bytearray()
    for ino, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], start=1):
        nb = name.encode() + b"\0"
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(nb), 0]
        out += b"070701" + b"".join(f"{v:08X}".encode() for v in fields) + nb
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


def _libraries(binary: str) -> list[str]:
    """The shared libraries and loader that `ldd` lists for a binary."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/"):
            libs.append(path)
    return libs


def build_initramfs(tools: Tools, files: dict[str, Path], case_env: dict[str, str], out: Path) -> None:
    """The guest's root file system: busybox, ndctl/daxctl with their libraries, the dax modules,
    the init script, the case's settings and `files` (guest path -> host file: the static sampler,
    calibration program and program)."""
    dirs = ["bin", "sbin", "dev", "proc", "sys", "tmp", "modules", "lib", "lib64", "usr", "usr/bin", "etc"]
    entries: list[tuple[str, int, bytes]] = [(d, stat.S_IFDIR | 0o755, b"") for d in dirs]
    seen = set(dirs)

    def add(path: str, data: bytes, mode: int = 0o755) -> None:
        parts = path.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in seen:
                seen.add(d)
                entries.append((d, stat.S_IFDIR | 0o755, b""))
        entries.append((path, stat.S_IFREG | mode, data))

    add("bin/busybox", Path(tools.busybox).read_bytes())
    add("init", (GUEST / "init.sh").read_bytes())
    for tool in (tools.ndctl, tools.daxctl):
        add(f"bin/{Path(tool).name}", Path(tool).read_bytes())
        for lib in _libraries(tool):
            real = os.path.realpath(lib)
            name = lib.lstrip("/")
            if name not in seen:
                seen.add(name)
                add(name, Path(real).read_bytes())
    for m in MODULES:
        sub = "nvdimm" if m.startswith(("libnvdimm", "nd_")) else "dax"
        add(f"modules/{m}.ko", (tools.modules / sub / f"{m}.ko").read_bytes(), 0o644)
    for guest_path, host in files.items():
        add(guest_path.lstrip("/"), host.read_bytes())
    add("case.env", "".join(f"{k}='{v}'\n" for k, v in case_env.items()).encode(), 0o644)
    out.write_bytes(_newc(entries))


@dataclass
class Boot:
    data: str
    console: str
    wall_s: float
    accel: str


# A guest kernel that reports a soft lockup or an RCU stall before the calibration begins has
# hung in its boot: under TCG a vCPU's timer now and then stops firing there (seen once in a
# quick case: "rcu_preempt kthread timer wakeup didn't happen", init stuck on CPU 0 for 400 s
# until the timeout). Such a boot is killed and made again, this many times, instead of waiting
# out the timeout.
BOOT_RETRIES = 2
STALL_MARKS = ("watchdog: BUG: soft lockup", "rcu: INFO: rcu_preempt self-detected stall")
BOOT_POLL_S = 2.0


def boot(tools: Tools, shape: Shape, initramfs: Path, timeout_s: float, workdir: Path) -> Boot:
    """Boots the VM; returns what the guest printed on its data port and its console. A VM still
    running after `timeout_s` of wall time is killed and reported as hung; one whose kernel stalls
    before the calibration begins (STALL_MARKS) is booted again, up to BOOT_RETRIES times."""
    for attempt in range(BOOT_RETRIES + 1):
        b = _boot_once(tools, shape, initramfs, timeout_s, workdir, retry=attempt < BOOT_RETRIES)
        if b is not None:
            return b
    raise AssertionError("unreachable: the last attempt raises or returns")


def _has(path: Path, marks: Sequence[str]) -> bool:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    return any(m in text for m in marks)


def _boot_once(
    tools: Tools, shape: Shape, initramfs: Path, timeout_s: float, workdir: Path, retry: bool
) -> Boot | None:
    """One boot; None when it stalled in the kernel's boot and `retry` allows another."""
    accel = "kvm" if kvm_usable() else "tcg,thread=multi"
    f, s, p = shape.fast_mib, shape.slow_mib, shape.pad_mib
    data, console = workdir / "guest.out", workdir / "console.log"
    cmd = [
        tools.qemu,
        "-machine", "q35",
        "-accel", accel,
        "-cpu", "host" if accel == "kvm" else "max",
        "-smp", str(shape.cpus),
        "-m", f"{shape.total_mib}M",
        "-object", f"memory-backend-ram,id=m0,size={f}M",
        "-object", f"memory-backend-ram,id=m1,size={s}M",
        "-object", f"memory-backend-ram,id=m2,size={p}M",
        "-numa", f"node,nodeid=0,cpus=0-{shape.cpus - 1},memdev=m0",
        "-numa", "node,nodeid=1,memdev=m1",
        "-numa", "node,nodeid=2,memdev=m2",
        "-kernel", str(tools.kernel),
        "-initrd", str(initramfs),
        "-append", f"console=ttyS0 panic=-1 quiet loglevel=4 mitigations=off {shape.cmdline()}",
        "-display", "none",
        "-monitor", "none",
        "-no-reboot",
        "-serial", f"file:{console}",
        "-serial", f"file:{data}",
    ]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # Watched for a stall until the calibration begins, then not read again until the end.
    watch = retry
    while True:
        left = timeout_s - (time.monotonic() - start)
        try:
            out, _ = proc.communicate(timeout=max(min(BOOT_POLL_S, left), 0.01))
            break
        except subprocess.TimeoutExpired:
            watch = watch and not _has(data, ("@ calib begin",))
            stalled = watch and _has(console, STALL_MARKS)
            if not stalled and time.monotonic() - start < timeout_s:
                continue
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
            if stalled:
                return None
            tail = _tail(console)
            raise TiersimError(
                f"the VM did not finish within {timeout_s:.0f} s (hung boot or run); console: {tail}"
            ) from None
        except BaseException:
            # SIGTERM, SIGHUP or Ctrl-C raised here: QEMU is a child of ours and must not outlive
            # the command, writing into a result directory already removed.
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
            raise
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise TiersimError(f"QEMU failed (exit {proc.returncode}): {out.decode(errors='replace').strip()[-300:]}")
    return Boot(data.read_text(errors="replace"), console.read_text(errors="replace"), wall, accel.split(",")[0])


def _tail(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(none)"
    return " | ".join(lines[-3:]) or "(empty)"


def compile_static(source: Path, out: Path) -> None:
    """A static build of a guest program (the guest has no C library)."""
    cc = c_compiler(f"{source.name} for the guest")
    r = subprocess.run(
        [cc, "-O2", "-static", "-pthread", "-o", str(out), str(source), "-lm"], capture_output=True, text=True
    )
    if r.returncode != 0:
        raise TiersimError(f"cannot build {source.name} for the guest: {r.stderr.strip()[-400:]}")
