#!/usr/bin/env bash
# Capture overhead on tests/capture/hashmap.c (BENCHMARKS.md): wall time of the program run
# natively, under plain Valgrind lackey (output to /dev/null: Valgrind's own cost, which bounds
# any capture), and under `tiersim capture` (default LLC and pagemap, then unfiltered), best of
# three each; then the trace sizes. Run from the repository root after `make env`:
#   bash tests/capture/bench.sh [KEYS]
set -euo pipefail
KEYS=${1:-20000}
T=.venv/bin/tiersim
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
gcc -O0 -o "$W/hashmap" tests/capture/hashmap.c

best() {
    local b=
    for _ in 1 2 3; do
        local s e
        s=$(date +%s.%N)
        "$@" >/dev/null 2>&1
        e=$(date +%s.%N)
        b=$(echo "$s $e ${b:-1e9}" | awk '{d = $2 - $1; print (d < $3 ? d : $3)}')
    done
    echo "$b"
}

native=$(best "$W/hashmap" "$KEYS")
lackey=$(best valgrind --tool=lackey --trace-mem=yes --log-file=/dev/null "$W/hashmap" "$KEYS")
cap=$(best $T capture -o "$W/c.trace" --report "$W/c.json" -- "$W/hashmap" "$KEYS")
raw=$(best $T capture -o "$W/r.trace" --llc 0 --v2p none --report "$W/r.json" -- "$W/hashmap" "$KEYS")
.venv/bin/python - "$W" "$KEYS" "$native" "$lackey" "$cap" "$raw" <<'PY'
import json, os, sys
w, keys = sys.argv[1], sys.argv[2]
native, lackey, cap, raw = map(float, sys.argv[3:])
c = json.load(open(f"{w}/c.json"))
r = json.load(open(f"{w}/r.json"))
print(f"hashmap {keys} keys: {c['instructions']:,} instructions, {c['loads'] + c['stores'] + c['modifies']:,} loads/stores")
print(f"native                      {native:8.3f} s")
print(f"valgrind lackey > /dev/null {lackey:8.3f} s  {lackey / native:7.0f}x native")
print(f"tiersim capture (default)   {cap:8.3f} s  {cap / native:7.0f}x native  {cap / lackey:5.2f}x lackey")
print(f"tiersim capture --llc 0     {raw:8.3f} s  {raw / native:7.0f}x native  {raw / lackey:5.2f}x lackey")
for name, rep, files in [("default", c, ["c.trace", "c.virt.trace"]), ("--llc 0 --v2p none", r, ["r.trace"])]:
    for f in files:
        size = os.path.getsize(f"{w}/{f}")
        print(f"{name:20s} {f:14s} {rep['records']:>10,} records  {size:>10,} bytes  {size / rep['records']:.2f} bytes/record")
PY
