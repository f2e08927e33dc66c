#!/bin/sh
# The cxl_flash results a speed change must leave byte-identical: the 36 replays of the
# cxl_flash_matrix example and the summary and histogram of the three 10M-request bench traces.
#
#   tools/cxl_flash_identity.sh DIR            # write them to DIR (run on the old and the new code)
#   tools/cxl_flash_identity.sh DIR OLD_DIR    # ... and compare with OLD_DIR's, file by file
#
# CARGO_TARGET_DIR and RUSTFLAGS are honoured, so a profile-guided build can be checked too:
#   CARGO_TARGET_DIR=target/pgo/use RUSTFLAGS=-Cprofile-use=$PWD/target/pgo/tiersim.profdata tools/cxl_flash_identity.sh DIR OLD_DIR
set -eu
[ $# -ge 1 ] || { echo "usage: $0 DIR [OLD_DIR]" >&2; exit 2; }
out=$1
mkdir -p "$out"
cd "$(dirname "$0")/.."
cargo build --release -q -p tiersim-engine --example cxl_flash_matrix --example cxl_flash_replay
bin=${CARGO_TARGET_DIR:-target}/release/examples
"$bin/cxl_flash_matrix" "$out/matrix.jsonl" > "$out/matrix.log"
for t in random stride mixed; do
    "$bin/cxl_flash_replay" "$t" 10000000 "$out/$t.json"
done
if [ $# -ge 2 ]; then
    status=0
    for f in matrix.jsonl random.json stride.json mixed.json; do
        if cmp -s "$2/$f" "$out/$f"; then echo "identical: $f"; else echo "DIFFERENT: $f"; status=1; fi
    done
    exit $status
fi
