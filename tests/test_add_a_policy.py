"""docs/architecture.md's "Adding a policy" walk-through, followed as written: in a copy of the
workspace's crates, its file is added and its lines are put into lib.rs, and the engine built
from the copy lists the toy policy and runs a trace under it. The copy builds into the
repository's own cargo target directory, under crate paths of its own, so only the workspace's
crates compile again and the registry crates are reused: about a minute on 2 cores."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import tiersim

REPO = Path(__file__).resolve().parents[1]
# Where the copy keeps the crates (see the test).
COPY = "walkthrough-crates"
DOC = REPO / "docs" / "architecture.md"

# A step of the walk-through: a path in backquotes, a colon, and the code block that follows.
STEP = re.compile(r"`(crates/[^`]+\.rs)`[^\n]*:\n\n```(rust|diff)\n(.*?)```", re.S)


def _steps() -> list[tuple[str, str, str]]:
    text = DOC.read_text()
    section = text[text.index("## Adding a policy: a walk-through") :]
    section = section[: section.index("\n## ", 1)]
    return STEP.findall(section)


def _apply_diff(source: str, diff: str) -> str:
    """Insert the diff's `+` lines where its context lines stand together in `source`."""
    lines = diff.splitlines()
    before = [line[1:] for line in lines[: next(i for i, x in enumerate(lines) if x.startswith("+"))]]
    added = [line[1:] for line in lines if line.startswith("+")]
    after = [line[1:] for line in lines[len(before) + len(added) :]]
    context = "\n".join(before + after) + "\n"
    assert source.count(context) == 1, f"the walk-through's context is not in lib.rs once:\n{context}"
    return source.replace(context, "\n".join(before + added + after) + "\n")


def _cargo_example(root: Path, target: Path, name: str, *args: str) -> str:
    env = dict(os.environ, CARGO_TARGET_DIR=str(target))
    cmd = ["cargo", "run", "--offline", "--quiet", "-p", "tiersim-engine", "--example", name, "--", *args]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_walk_through_adds_a_policy_that_is_listed_and_runs(tmp_path: Path):
    steps = _steps()
    assert [(path, kind) for path, kind, _ in steps] == [
        ("crates/tiersim-policies/src/slow_only.rs", "rust"),
        ("crates/tiersim-policies/src/lib.rs", "diff"),
        ("crates/tiersim-policies/src/lib.rs", "diff"),
    ]
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    # The copy keeps one place, under the target directory, so that cargo's artifacts of its
    # crates are rebuilt in place run after run rather than added beside the last run's; copying
    # keeps the files' times, so only the crates the walk-through changes compile again.
    root = target / "add-a-policy"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    # Cargo names a path crate's artifacts by its path relative to the workspace root: copied to
    # the same relative path, the changed crates would overwrite the repository's own artifacts
    # in the shared target directory (and a later `cargo test` there would link the toy policy).
    # Another folder name keeps them apart while the registry crates' artifacts are shared.
    for name in ("Cargo.lock", "rustfmt.toml"):
        shutil.copy2(REPO / name, root / name)
    (root / "Cargo.toml").write_text((REPO / "Cargo.toml").read_text().replace('"crates/', f'"{COPY}/'))
    shutil.copytree(REPO / "crates", root / COPY, ignore=shutil.ignore_patterns("target"))
    for path, kind, code in steps:
        file = root / COPY / path.removeprefix("crates/")
        file.write_text(code if kind == "rust" else _apply_diff(file.read_text(), code))

    plugins = json.loads(_cargo_example(root, target, "list_plugins"))
    policies = {p["name"]: p for p in plugins["policies"]}
    assert policies["slow_only"]["summary"] == "every page on the first node of the slowest tier (a toy)"
    # The registry's order: the new line is the last.
    assert [p["name"] for p in plugins["policies"]][-1] == "slow_only"

    trace = tmp_path / "r.trace"
    tiersim.generate("random", str(trace), seed=1, footprint="4MiB", accesses=20_000, threads=4)
    summaries = {}
    for policy in ("linux_default", "slow_only"):
        out = tmp_path / f"{policy}.out"
        _cargo_example(
            root, target, "engine_run", "cascadelake_dcpmm", policy, str(trace), "scale=0.001", "--out", str(out)
        )
        summaries[policy] = json.loads(out.read_text().splitlines()[0])
    # First touch on the touching CPU's DRAM node: every access hits the fast tier.
    assert summaries["linux_default"]["fast_tier_hit_ratio"] == 1.0
    # The toy's rule: every page on the slowest tier, so no access hits the fast tier.
    slow = summaries["slow_only"]
    assert slow["fast_tier_hit_ratio"] == 0.0
    assert slow["accesses"] == 20_000
    assert slow["pages_touched"] == summaries["linux_default"]["pages_touched"] == 1024
