#!/usr/bin/env bash
# Capture speed on programs of real size (BENCHMARKS.md "Capture", issue 36). Each line: wall time and
# CPU time (user + sys of the command and its children) from /usr/bin/time, then the capture
# report's records and its split between the program's run and the merge.
#   bash tests/capture/bench_big.sh pagerank [VERTICES] [DEGREE] [ITERS]   # native, instrumented 32/1 MiB, QEMU plugin and tool 32 MiB
#   bash tests/capture/bench_big.sh instrumented [VERTICES] [DEGREE] [ITERS]  # the same without the tool
#   (both: with clang and lld installed, `make clang`, also clang's builds without and with LTO)
#   bash tests/capture/bench_big.sh sizes                                   # clang with LTO, 32/1 MiB, on four graph sizes (issue 36's table)
#   bash tests/capture/bench_big.sh sqlite                                  # Debian's sqlite3: native, tool, QEMU plugin, lackey (NO_LACKEY=1: not lackey)
#   bash tests/capture/bench_big.sh small [VERTICES]                       # tool vs lackey records on a small pagerank
# Run from the repository root after `make env`.
set -euo pipefail
WHAT=${1:-pagerank}
T=$PWD/.venv/bin/tiersim
W=$(mktemp -d "${TMPDIR:-/tmp}/tiersim-bench.XXXXXX")
trap 'rm -rf "$W"' EXIT

timed() { # label command...
    local label=$1
    shift
    /usr/bin/time -f "%e %U %S" -o "$W/time" "$@" >/dev/null 2>"$W/err" || { cat "$W/err" >&2; return 1; }
    read -r wall user sys <"$W/time"
    local extra=""
    if [ -f "$W/r.json" ]; then
        extra=$(.venv/bin/python - "$W/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
llc = r.get("llc") or {}
print(f"records={r['records']} misses={llc.get('misses')} writebacks={llc.get('writebacks')} "
      f"instructions={r['instructions']} run_s={r.get('run_s')} merge_s={r.get('merge_s')} "
      f"program_cpu_s={r.get('program_cpu_s')} merge_cpu_s={r.get('merge_cpu_s')}")
PY
)
        rm -f "$W/r.json"
    fi
    echo "$label wall=${wall}s cpu=$(echo "$user $sys" | awk '{print $1 + $2}')s $extra"
}

case $WHAT in
pagerank | instrumented)
    V=${2:-2000000} D=${3:-48} I=${4:-4}
    gcc -O2 -o "$W/pr" tests/capture/pagerank.c
    gcc -O2 -fsanitize=thread -c tests/capture/pagerank.c -o "$W/pr.o"
    gcc "$W/pr.o" "$($T capture --build-runtime)" -o "$W/pr_i" -pthread -ldl
    timed native "$W/pr" "$V" "$D" "$I"
    timed native "$W/pr" "$V" "$D" "$I"
    for llc in 32MiB 1MiB; do
        timed "instrumented llc=$llc" $T capture --instrumented --llc "$llc" -o "$W/o.trace" --report "$W/r.json" -- "$W/pr_i" "$V" "$D" "$I"
    done
    # With clang (`make clang`): built without LTO, and with LTO, which inlines the runtime.
    if command -v clang >/dev/null && command -v ld.lld >/dev/null; then
        clang -O2 -o "$W/pr_clang" tests/capture/pagerank.c
        clang -O2 -fsanitize=thread -c tests/capture/pagerank.c -o "$W/prc.o"
        clang "$W/prc.o" "$($T capture --build-runtime)" -o "$W/prc_i" -pthread -ldl
        clang -O2 -flto -fsanitize=thread -c tests/capture/pagerank.c -o "$W/prl.o"
        clang -O2 -flto -fuse-ld=lld "$W/prl.o" "$($T capture --build-runtime --lto)" -o "$W/prl_i" -pthread -ldl
        timed "native clang" "$W/pr_clang" "$V" "$D" "$I"
        timed "native clang" "$W/pr_clang" "$V" "$D" "$I"
        for llc in 32MiB 1MiB; do
            timed "instrumented clang llc=$llc" $T capture --instrumented --llc "$llc" -o "$W/o.trace" --report "$W/r.json" -- "$W/prc_i" "$V" "$D" "$I"
            timed "instrumented clang LTO llc=$llc" $T capture --instrumented --llc "$llc" -o "$W/o.trace" --report "$W/r.json" -- "$W/prl_i" "$V" "$D" "$I"
        done
    fi
    [ "$WHAT" = instrumented ] || timed "qemu plugin llc=32MiB" $T capture --valgrind-tool qemu --llc 32MiB -o "$W/o.trace" --report "$W/r.json" -- "$W/pr" "$V" "$D" "$I"
    [ "$WHAT" = instrumented ] || timed "valgrind tool llc=32MiB" $T capture --llc 32MiB -o "$W/o.trace" --report "$W/r.json" -- "$W/pr" "$V" "$D" "$I"
    ;;
sizes)
    # The same 96-128M edges an iteration over rank arrays of 16, 32, 64 and 128 MB: the first sits
    # in a 32 MiB host L3, the last two do not, and the capture's cost over native follows.
    command -v clang >/dev/null && command -v ld.lld >/dev/null || { echo "sizes needs clang and lld: make clang" >&2; exit 2; }
    clang -O2 -o "$W/pr_clang" tests/capture/pagerank.c
    clang -O2 -flto -fsanitize=thread -c tests/capture/pagerank.c -o "$W/prl.o"
    clang -O2 -flto -fuse-ld=lld "$W/prl.o" "$($T capture --build-runtime --lto)" -o "$W/prl_i" -pthread -ldl
    for size in "2000000 48 14" "4000000 24 6" "8000000 16 4" "16000000 8 4"; do
        # shellcheck disable=SC2086 # the size is three words on purpose
        timed "native clang $size" "$W/pr_clang" $size
        for llc in 32MiB 1MiB; do
            # shellcheck disable=SC2086
            timed "instrumented clang LTO llc=$llc $size" $T capture --instrumented --llc "$llc" -o "$W/o.trace" --report "$W/r.json" -- "$W/prl_i" $size
        done
        # shellcheck disable=SC2086
        timed "native clang $size" "$W/pr_clang" $size
        rm -f "$W/o.trace"
    done
    ;;
sqlite)
    # 20,000 rows inserted in one transaction into an in-memory database, then scanned.
    cat >"$W/q.sql" <<'SQL'
CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)
INSERT INTO t SELECT x, printf('%064d', (x * 2654435761) % 1000000007) FROM c;
COMMIT;
SELECT count(*), sum(length(b)), max(b) FROM t WHERE b LIKE '%123%';
SQL
    S=$(command -v sqlite3)
    for _ in 1 2 3; do timed native "$S" -init "$W/q.sql" :memory: </dev/null; done
    timed "valgrind tool llc=16MiB" $T capture -o "$W/o.trace" --report "$W/r.json" -- "$S" -init "$W/q.sql" :memory:
    timed "qemu plugin llc=16MiB" $T capture --valgrind-tool qemu -o "$W/o.trace" --report "$W/r.json" -- "$S" -init "$W/q.sql" :memory:
    [ -n "${NO_LACKEY:-}" ] ||
    timed "lackey llc=16MiB" $T capture --valgrind-tool lackey -o "$W/o.trace" --report "$W/r.json" -- "$S" -init "$W/q.sql" :memory:
    ;;
small)
    V=${2:-20000}
    gcc -O2 -o "$W/pr" tests/capture/pagerank.c
    for tool in tiersim qemu lackey; do
        timed "$tool llc=1MiB" $T capture --valgrind-tool "$tool" --llc 1MiB --v2p none -o "$W/o.trace" --report "$W/r.json" -- "$W/pr" "$V" 48 2
    done
    ;;
*)
    echo "usage: $0 pagerank|instrumented|sizes|sqlite|small [ARGS]" >&2
    exit 2
    ;;
esac
