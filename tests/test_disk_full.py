"""Issue 15 section 4: with the output on a full filesystem every command ends in one line "no
space left writing FILE" (the user's file, never a temporary name), exit 1, and leaves no partial
output. The filesystem is a 64 KiB tmpfs (needs root to mount); without one the test is skipped
and says why."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PLATFORM, run_cli
from tiersim import _native

SWEEP = """
[sweep]
platforms = ["epyc_cxl_nps1"]
seeds = [1]
set = { scale = 0.0001 }
[[trace]]
label = "rand"
gen = "random"
params = { accesses = 2000, footprint = "1MiB", threads = 1 }
[[policy]]
name = "linux_default"
"""


@pytest.fixture
def full_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "full"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; the disk-full paths are not exercised")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}); the disk-full paths are not exercised")
    try:
        # Fill it: what is left is less than any output's first block.
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 512):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_every_command_says_no_space_left_writing_the_users_file(full_fs: Path, tmp_path: Path, random_trace: Path):
    spec = tmp_path / "sw.toml"
    spec.write_text(SWEEP)
    cases = [
        (["run", str(random_trace), "-p", PLATFORM, "-o", str(full_fs / "run")], full_fs / "run" / "summary.json"),
        (["gen", "random", "-o", str(full_fs / "g.trace"), "--param", "accesses=200000"], full_fs / "g.trace"),
        (["trace", "convert", str(random_trace), str(full_fs / "x.csv"), "--to", "csv"], full_fs / "x.csv"),
        (["flash", "replay", str(random_trace), "-o", str(full_fs / "fl")], full_fs / "fl" / "summary.json"),
        (["sweep", str(spec), "-o", str(full_fs / "sw"), "-j", "1"], None),
        # Its tables and plots used to be written straight into the directory, one by one.
        (["characterize", "ddr4_2666", "--quick", "-o", str(full_fs / "ch")], full_fs / "ch"),
    ]
    for args, named in cases:
        r = run_cli(*args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr
        line = r.stderr.strip()
        assert line.startswith("error: no space left writing ") and "\n" not in line, (args, line)
        if named is not None:
            assert line == f"error: no space left writing {named}", line
        assert ".tmp" not in line, line
    # Nothing that looks like a result: only the filler and the sweep's own directory skeleton.
    left = sorted(p.name for p in full_fs.iterdir())
    assert left in (["filler"], ["filler", "sw"]), left
    assert not list((full_fs).glob("*/summary.json")) and not (full_fs / "g.trace").exists()


def test_the_native_parquet_writer_reports_a_full_disk_with_errno_and_path(full_fs: Path) -> None:
    """The run directory's Parquet files are written by the extension: a full disk is an OSError
    with ENOSPC and the file's path, which `tiersim run` turns into "no space left writing FILE"."""
    path = full_fs / "t.parquet"
    with pytest.raises(OSError) as exc:
        _native.write_parquet(str(path), [("a", "i64", list(range(100_000)))])
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == str(path)
    assert exc.value.strerror == "No space left on device"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_capture_on_a_full_disk_leaves_nothing(full_fs: Path, tmp_path: Path) -> None:
    """`tiersim capture` with its traces on the full filesystem, on the instrumented path and
    (with Valgrind) the tool's: one line naming the user's trace, exit 1, and neither a trace
    nor a temporary file (the temporary trace's name fits on a full disk, its header does not)."""
    import tiersim

    src = Path(__file__).resolve().parent / "capture" / "hashmap.c"
    prog, obj, prog_i = tmp_path / "hashmap", tmp_path / "hashmap_i.o", tmp_path / "hashmap_i"
    subprocess.run(["gcc", "-O1", "-o", str(prog), str(src)], check=True)
    subprocess.run(["gcc", "-O1", "-fsanitize=thread", "-c", str(src), "-o", str(obj)], check=True)
    runtime = tiersim.runtime_object(tmp_path / "cache")
    subprocess.run(["gcc", str(obj), str(runtime), "-o", str(prog_i), "-pthread", "-ldl"], check=True)
    cases = [["--instrumented", "--", str(prog_i), "3000"]]
    if shutil.which("valgrind") is not None:
        cases.append(["--", str(prog), "3000"])
    for args in cases:
        r = run_cli("capture", "-o", str(full_fs / "h.trace"), *args)
        assert r.returncode == 1, (args, r.stderr)
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert errors == [f"error: no space left writing {full_fs / 'h.trace'}"], (args, r.stderr)
        assert sorted(p.name for p in full_fs.iterdir()) == ["filler"], args
