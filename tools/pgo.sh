#!/bin/sh
# A profile-guided (PGO) build, the way pydantic-core builds its release wheels
# (.github/actions/build-pgo-wheel/action.yml): build instrumented, run a training workload, merge
# the counts with the toolchain's own llvm-profdata (another LLVM's cannot read rustc's format),
# rebuild with them. Results are the same bytes as a plain build's; only speed changes.
#
#   tools/pgo.sh profile          instrumented builds + training -> target/pgo/tiersim.profdata
#   tools/pgo.sh python           the extension built with that profile, into .venv (`make pgo`)
#   tools/pgo.sh bench [ARGS...]  `cargo bench ARGS` built with that profile (`make bench-pgo`)
#
# Training: the Rust example pgo_train (engine runs and cxl_flash replays) for the benches; for the
# extension, whose crates carry other symbol hashes than the benches', its own counts: the demo,
# the quick reproductions of the engine's seed studies, and tools/pgo_train.py's flash replays.
# Builds go to target/pgo/, so the plain build in target/ is not rebuilt; TIERSIM_PGO_DIR moves
# them and the profile elsewhere.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
pgo=${TIERSIM_PGO_DIR:-$root/target/pgo}
profile=$pgo/tiersim.profdata
venv=$root/.venv

die() { echo "tools/pgo.sh: $*" >&2; exit 2; }

need_profdata() {
    host=$(rustc -vV | sed -n 's/^host: //p')
    profdata=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
    [ -x "$profdata" ] || die "$profdata not found: a PGO build needs the Rust toolchain's LLVM tools (rustup component add llvm-tools)"
}
need_profile() {
    [ -f "$profile" ] || die "$profile not found: run 'tools/pgo.sh profile' first"
}
need_venv() {
    [ -x "$venv/bin/maturin" ] || die "$venv/bin/maturin not found: run 'make env' first"
}
maturin_develop() {
    VIRTUAL_ENV=$venv "$venv/bin/maturin" develop --release
}

case "${1:-}" in
profile)
    need_profdata
    need_venv
    raw=$pgo/raw
    rm -rf "$raw" "$profile"
    mkdir -p "$raw"
    export CARGO_TARGET_DIR=$pgo/generate
    export RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$raw"
    cargo run --release -q -p tiersim-engine --example pgo_train > "$pgo/train-rust.log"
    # The instrumented extension is slow and writes counts on every run: drop the Makefile's
    # build stamp first, so that the next make target replaces it with a plain build.
    rm -f "$venv/.build-stamp"
    maturin_develop
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    ts=$venv/bin/tiersim
    train() {
        echo "training: tiersim $*"
        "$ts" "$@" >> "$pgo/train-python.log"
    }
    : > "$pgo/train-python.log"
    train demo --out "$work/demo"
    for study in optane scm_vs_ssd cxl_expansion autotiering; do
        train reproduce "$study" --quick --out "$work/$study"
    done
    echo "training: tools/pgo_train.py (CXL-flash replays)"
    "$venv/bin/python" tools/pgo_train.py "$work/flash" >> "$pgo/train-python.log"
    "$profdata" merge -o "$profile" "$raw"
    echo "wrote $profile"
    ;;
python)
    need_profile
    need_venv
    CARGO_TARGET_DIR=$pgo/use RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$profile" maturin_develop
    ;;
bench)
    need_profile
    shift
    CARGO_TARGET_DIR=$pgo/use RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$profile" cargo bench "$@"
    ;;
*)
    die "usage: tools/pgo.sh profile | python | bench [cargo bench arguments]"
    ;;
esac
