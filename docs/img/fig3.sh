#!/usr/bin/env bash
# Regenerates the fig3-*.png plots of docs/workloads.md (the CXL-flash study's fig. 3: page
# accesses of its five synthetic workloads, virtual and physical) and prints the page-delta
# table. Run from the repository root after `make env`; takes about a minute.
set -euo pipefail
T=.venv/bin/tiersim
IMG=docs/img
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

# The five generators, 2M accesses over their default 64 MiB, one instruction between accesses
# (time does not matter here and it keeps the lackey text small). Each goes through the capture
# pipeline as a lackey log: the 16 MiB LLC keeps misses and writebacks, the buddy model (30 %
# of memory held by others) gives the frames, as the study's tool did with Cachegrind and the
# kernel's page-table updates.
for g in hashmap matmul minheap random stride; do
    $T gen "$g" -o "$W/$g.trace" --count 2000000 --seed 1 --param gap_instructions=1 >/dev/null
    $T trace convert "$W/$g.trace" "$W/$g.lackey" --to lackey >/dev/null
    $T capture --lackey "$W/$g.lackey" -o "$W/$g.phys.trace" --virt-out "$W/$g.virt.trace" --seed 1 2>/dev/null
    rm "$W/$g.lackey"
    $T trace stats "$W/$g.virt.trace" --png "$IMG/fig3-$g-virtual.png" --max-points 20000 >/dev/null
    $T trace stats "$W/$g.phys.trace" --png "$IMG/fig3-$g-physical.png" --max-points 20000 >/dev/null
done

# A real program for the delta table: tests/capture/hashmap.c under Valgrind, frames from
# /proc/PID/pagemap (its page plot is mostly empty space between heap and stack, so not drawn).
gcc -O0 -o "$W/hashmap" tests/capture/hashmap.c
$T capture -o "$W/program.phys.trace" --virt-out "$W/program.virt.trace" -- "$W/hashmap" 100000 >/dev/null 2>&1

# 16-colour palette PNGs: a third of the size, the same picture.
.venv/bin/python -c '
import sys
from PIL import Image
for f in sys.argv[1:]:
    Image.open(f).convert("RGB").quantize(colors=16).save(f, optimize=True)
' "$IMG"/fig3-*.png

# Fig. 3k-3o: distance between consecutive accesses, in pages, virtual vs physical.
.venv/bin/python - "$W" <<'PY'
import sys
from pathlib import Path

import polars as pl
import tiersim

w = Path(sys.argv[1])
print("| workload | records | virtual: median / p90 / share > 1024 pages | physical: median / p90 / share > 1024 pages |")
print("|---|---|---|---|")
for name in ["hashmap", "matmul", "minheap", "random", "stride", "program"]:
    row = []
    for kind in ["virt", "phys"]:
        csv = w / f"{name}.{kind}.csv"
        tiersim.convert(w / f"{name}.{kind}.trace", csv, dst_format="csv")
        page = pl.read_csv(csv, comment_prefix="#")["addr"].map_elements(lambda a: int(a, 16) >> 12, return_dtype=pl.Int64)
        d = page.diff().drop_nulls().abs()
        row.append(f"{d.median():.0f} / {d.quantile(0.9):.0f} / {(d > 1024).mean():.0%}")
    print(f"| {name} | {page.len():,} | {row[0]} | {row[1]} |")
PY
