"""tools/pgo.sh, the profile-guided build (`make pgo`, `make bench-pgo`): what it says when it
cannot run. The build itself takes minutes and the toolchain's LLVM tools, which a fresh machine
lacks; BENCHMARKS.md "Profile-guided builds" records a whole run and its figures."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "pgo.sh"


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def base_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TIERSIM_PGO_DIR": str(tmp_path / "pgo")}


def test_unknown_mode_gives_usage(tmp_path: Path) -> None:
    for args in ([], ["fast"]):
        r = run(args, base_env(tmp_path))
        assert r.returncode == 2
        assert r.stdout == ""
        assert r.stderr.strip().splitlines() == [
            "tools/pgo.sh: usage: tools/pgo.sh profile | python | bench [cargo bench arguments]"
        ]


def test_build_without_a_profile_names_the_missing_file(tmp_path: Path) -> None:
    for mode in ("python", "bench"):
        r = run([mode], base_env(tmp_path))
        assert r.returncode == 2
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1
        assert f"{tmp_path / 'pgo' / 'tiersim.profdata'} not found" in lines[0]
        assert "tools/pgo.sh profile" in lines[0]
    assert not (tmp_path / "pgo").exists()


def test_profile_without_llvm_tools_says_how_to_get_them(tmp_path: Path) -> None:
    # A rustc whose sysroot has no llvm-profdata, as on a toolchain without the llvm-tools component.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    rustc = bindir / "rustc"
    rustc.write_text(
        "#!/bin/sh\n"
        f'case "$1" in -vV) echo "host: x86_64-unknown-linux-gnu";; --print) echo "{tmp_path / "sysroot"}";; esac\n'
    )
    rustc.chmod(rustc.stat().st_mode | stat.S_IEXEC)
    env = {**base_env(tmp_path), "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    r = run(["profile"], env)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "llvm-profdata not found" in lines[0]
    assert "rustup component add llvm-tools" in lines[0]
    assert not (tmp_path / "pgo").exists()


def test_python_training_runs_every_setting(tmp_path: Path) -> None:
    # The training's settings are parameter names and values: one renamed in the device would make
    # `make pgo` fail only at its fourth minute, so run the whole list here, small.
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "pgo_train.py"), str(tmp_path / "work"), "20000"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3 * 12
    defaults = [line for line in lines if " default: " in line]
    assert defaults == [f"{g} default: 20000 requests" for g in ("random", "stride", "hashmap")]
    # Every other setting replays its tenth (the LLC in front of the pinned one filters some out).
    others = [line for line in lines if " default: " not in line]
    assert sum(line.endswith(": 2000 requests") for line in others) >= 3 * 10
