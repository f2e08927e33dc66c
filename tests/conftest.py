"""Shared fixtures: small traces made with the real generators, and the platform the tests use.

Every test runs the real extension; nothing is mocked.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tiersim

# The EPYC + CXL preset in NPS1 mode: one DRAM node and one CXL node on the socket.
PLATFORM = "epyc_cxl_nps1"
FAST = "dram0"
SLOW = "cxl0"

RANDOM_ACCESSES = 20_000
RANDOM_FOOTPRINT = 8 * 1024 * 1024
RANDOM_THREADS = 2
RANDOM_WRITE_RATIO = 0.3
RANDOM_SEED = 1


def random_params() -> dict:
    return {
        "accesses": RANDOM_ACCESSES,
        "footprint": "8MiB",
        "threads": RANDOM_THREADS,
        "write_ratio": RANDOM_WRITE_RATIO,
    }


@pytest.fixture(scope="session")
def random_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Uniform random accesses over 8 MiB (2048 pages of 4 KiB) from two threads."""
    path = tmp_path_factory.mktemp("traces") / "random.trace"
    tiersim.generate("random", path, seed=RANDOM_SEED, **random_params())
    return path


# The instrumented path's LTO builds (`tiersim capture --build-runtime --lto`, `workload ... --lto`)
# need clang and lld, which `make env` installs.
needs_clang = pytest.mark.skipif(
    shutil.which("clang") is None or shutil.which("ld.lld") is None, reason="clang or lld missing: `make env`"
)


def tiersim_cmd() -> list[str]:
    """The installed console script when there is one (real entry point, real exit codes),
    else the module."""
    script = Path(sys.executable).with_name("tiersim")
    if script.exists():
        return [str(script)]
    found = shutil.which("tiersim")
    return [found] if found else [sys.executable, "-m", "tiersim"]


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200", NO_COLOR="1")
    return subprocess.run(
        [*tiersim_cmd(), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
