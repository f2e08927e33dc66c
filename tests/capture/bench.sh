#!/usr/bin/env bash
# Capture overhead (BENCHMARKS.md). 1. tests/capture/hashmap.c: wall time of the program run
# natively, under plain Valgrind lackey (output to /dev/null: Valgrind's own cost, which bounds
# any Valgrind capture), and under `tiersim capture` (default LLC and pagemap, then unfiltered),
# best of three each; then the trace sizes. 2. tests/capture/sweep.c, memory-bound: native, the
# Valgrind path and the instrumented path (-fsanitize=thread + tiersim's runtime), wall and CPU
# time (user + sys of the children), best of three. Run from the repository root after `make env`:
#   bash tests/capture/bench.sh [KEYS] [SWEEP_MIB]
set -euo pipefail
KEYS=${1:-20000}
SWEEP_MIB=${2:-16}
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

# 2. The memory-bound program on both paths.
RT=$($T capture --build-runtime)
gcc -O2 -o "$W/sweep" tests/capture/sweep.c
gcc -O2 -fsanitize=thread -c tests/capture/sweep.c -o "$W/sweep.o"
gcc "$W/sweep.o" "$RT" -o "$W/sweep_i" -pthread -ldl
.venv/bin/python - "$W" "$SWEEP_MIB" "$T" <<'PY'
import json, os, subprocess, sys, time
w, mib, t = sys.argv[1], sys.argv[2], sys.argv[3]

def best(argv, env=None):
    wall = cpu = 1e9
    for _ in range(3):
        before = os.times()
        s = time.monotonic()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        e = time.monotonic() - s
        after = os.times()
        c = (after.children_user - before.children_user) + (after.children_system - before.children_system)
        wall, cpu = min(wall, e), min(cpu, c)
    return wall, cpu

runs = [
    ("native", [f"{w}/sweep", mib, "2"]),
    ("native, instrumented binary, not tracing", [f"{w}/sweep_i", mib, "2"]),
    ("tiersim capture (Valgrind path)", [t, "capture", "-o", f"{w}/v.trace", "--report", f"{w}/v.json", "--", f"{w}/sweep", mib, "2"]),
    ("tiersim capture --instrumented", [t, "capture", "--instrumented", "-o", f"{w}/i.trace", "--report", f"{w}/i.json", "--", f"{w}/sweep_i", mib, "2"]),
]
res = {name: best(argv) for name, argv in runs}
# The instrumented program alone, writing its per-thread files (no Python start-up, no merge).
os.makedirs(f"{w}/rt", exist_ok=True)
env = {**os.environ, "TIERSIM_CAPTURE_DIR": f"{w}/rt", "TIERSIM_LLC": str(16 << 20), "TIERSIM_PAGEMAP": "1"}
res["instrumented binary, runtime only"] = best([f"{w}/sweep_i", mib, "2"], env)
nw, nc = res["native"]
v, i = json.load(open(f"{w}/v.json")), json.load(open(f"{w}/i.json"))
print(f"\nsweep {mib} MiB x 2 passes + random reads: {v['instructions']:,} instructions (Valgrind), "
      f"{i['loads'] + i['stores']:,} traced loads/stores (instrumented)")
print(f"LLC misses: Valgrind {v['llc']['misses']:,}, instrumented {i['llc']['misses']:,}")
for name, (wall, cpu) in res.items():
    # CPU times count in 10 ms ticks: a native run shorter than that has no ratio.
    ratio = f"{cpu / nc:7.1f}x" if nc > 0 else "      -"
    print(f"{name:42s} wall {wall:8.3f} s {wall / nw:7.1f}x   cpu {cpu:8.3f} s {ratio}")
PY
