#!/bin/busybox sh
# PID 1 of the validation guest (docs/validate.md). Everything it prints goes to the second serial
# port, which the host parses: "@ key value" lines describe the machine, the sampler's lines carry
# the run, "! message" is a failure and "@ done" the end. The case's settings are in /case.env.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t debugfs debugfs /sys/kernel/debug
exec >/dev/ttyS1 2>&1
. /case.env
fail() { echo "! $*"; poweroff -f; }
echo "@ kernel $(uname -r)"

# The slow node: the legacy pmem region that memmap= made of node 1 becomes a devdax namespace and
# is onlined as system RAM by dax/kmem, which puts it in a lower memory tier
# (drivers/dax/kmem.c registers it with memory tier MEMTIER_ADISTANCE_PMEM, mm/memory-tiers.c).
for m in libnvdimm nd_e820 nd_btt nd_pmem dax_pmem device_dax kmem; do
    insmod /modules/$m.ko || fail "insmod $m failed"
done
ndctl create-namespace -f -e namespace0.0 -m devdax >/dev/null || fail "ndctl create-namespace failed"
daxctl reconfigure-device dax0.0 --mode=system-ram >/dev/null || fail "daxctl reconfigure-device failed"

# With --kernel-trace: ftrace's buffer is sized (on node 0) before the free memory is reported, and
# records only the program's run (tracing_on below).
T=/sys/kernel/debug/tracing
if [ -n "$KERNEL_TRACE_EVENTS" ]; then
    echo 0 > $T/tracing_on
    echo 0 > $T/options/overwrite
    echo mono > $T/trace_clock
    echo "$KERNEL_TRACE_KIB" > $T/buffer_size_kb || fail "cannot size the trace buffer"
    for e in $KERNEL_TRACE_EVENTS; do echo 1 > $T/events/$e/enable || fail "no tracepoint $e"; done
    echo "$KERNEL_TRACE_FUNCTIONS" > $T/set_ftrace_filter || fail "cannot trace $KERNEL_TRACE_FUNCTIONS"
    echo function > $T/current_tracer || fail "no function tracer"
fi

for n in /sys/devices/system/node/node[0-9]*; do
    echo "@ node ${n##*node} cpus=$(cat $n/cpulist) $(awk '/MemTotal|MemFree/ {sub(":", "", $3); printf "%s=%s ", $3, $4}' $n/meminfo)"
done
for t in /sys/devices/virtual/memory_tiering/memory_tier*; do
    echo "@ tier ${t##*memory_tier} nodes=$(cat $t/nodelist)"
done
# ZONE_DMA (16 MiB) keeps from user pages a reserve of 1/256 of the node's higher zones
# (lowmem_reserve_ratio, mm/page_alloc.c setup_per_zone_lowmem_reserve): on a machine with
# gigabytes that is more than the zone holds, so it never serves them nor balances kswapd
# (pgdat_balanced takes any balanced zone); on this 200 MiB node it is 191 pages, and the zone
# does both. A ratio of 1 gives it the big machine's behaviour.
read -r _ rest < /proc/sys/vm/lowmem_reserve_ratio
echo "1 $rest" > /proc/sys/vm/lowmem_reserve_ratio || fail "cannot set lowmem_reserve_ratio"
echo "@ sysctl lowmem_reserve_ratio $(cat /proc/sys/vm/lowmem_reserve_ratio | tr ' \t' ',,' | tr -s ',')"
# A movable allocation that has to steal a pageblock of another migratetype boosts the zone's
# watermarks, and kswapd reclaims the boost (mm/page_alloc.c boost_watermark, 5.0+): on this node
# a program's fill triggers several, each reclaiming about 1.5x the high watermark. tiersim has
# no pageblocks; the reference runs without boosting.
echo 0 > /proc/sys/vm/watermark_boost_factor || fail "cannot set watermark_boost_factor"
echo "@ sysctl watermark_boost_factor $(cat /proc/sys/vm/watermark_boost_factor)"
echo "@ min_free_kbytes $(cat /proc/sys/vm/min_free_kbytes)"
echo "@ watermark_scale_factor $(cat /proc/sys/vm/watermark_scale_factor)"
# Per zone: free pages, watermarks, managed pages and lowmem_reserve ("protection", indexed by the
# allocation's highest zone; user pages are ZONE_MOVABLE allocations, mm/page_alloc.c).
awk '/^Node/ {node=$2; zone=$4; sub(",", "", node)} /^ +pages free/ {free=$3} /^ +min / {mn=$2} /^ +low / {lo=$2}
     /^ +high / {hi=$2} /^ +managed/ {mg=$2}
     /^ +protection:/ {p=$0; sub(/.*\(/, "", p); sub(/\).*/, "", p); gsub(/ /, "", p);
                      printf "@ zone %s %s free=%d min=%d low=%d high=%d managed=%d protection=%s\n", node, zone, free, mn, lo, hi, mg, p}' /proc/zoneinfo

# The case's kernel policy (kernel/sched/fair.c and mm/ knobs; debugfs holds the scan periods).
echo "$NUMA_BALANCING" > /proc/sys/kernel/numa_balancing || fail "cannot set numa_balancing"
echo "$DEMOTION" > /sys/kernel/mm/numa/demotion_enabled || fail "cannot set demotion_enabled"
echo "$PROMOTE_RATE_LIMIT_MBPS" > /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps || fail "cannot set the promote rate limit"
D=/sys/kernel/debug/sched/numa_balancing
echo "$SCAN_DELAY_MS" > $D/scan_delay_ms
echo "$SCAN_PERIOD_MIN_MS" > $D/scan_period_min_ms
echo "$SCAN_PERIOD_MAX_MS" > $D/scan_period_max_ms
echo "$SCAN_SIZE_MB" > $D/scan_size_mb
echo "$HOT_THRESHOLD_MS" > $D/hot_threshold_ms
for k in scan_delay_ms scan_period_min_ms scan_period_max_ms scan_size_mb hot_threshold_ms; do
    echo "@ sysctl $k $(cat $D/$k)"
done
echo "@ sysctl numa_balancing $(cat /proc/sys/kernel/numa_balancing)"
echo "@ sysctl demotion_enabled $(cat /sys/kernel/mm/numa/demotion_enabled)"
echo "@ sysctl promote_rate_limit_MBps $(cat /proc/sys/kernel/numa_balancing_promote_rate_limit_MBps)"

# The guest CPU's speed: the calibration program, timed by the guest's clock with balancing off so
# that no daemon takes its time.
echo 0 > /proc/sys/kernel/numa_balancing
echo "@ calib begin"
/sampler 100000 -- /calib $CALIB_ARGS || fail "calibration failed"
# The sizing boot times the calibration alone (the programs' work is scaled to it).
[ -n "$CALIB_ONLY" ] && { echo "@ done"; poweroff -f; }
echo "$NUMA_BALANCING" > /proc/sys/kernel/numa_balancing
sync; echo 3 > /proc/sys/vm/drop_caches

# What other software holds on each node's LRU lists as the program starts (the rootfs, which is
# tmpfs, and the page cache): KiB per list from the node's meminfo. tiersim's platform puts it on
# its nodes as `occupied` memory that reclaim reaches before the program's pages.
for n in /sys/devices/system/node/node[0-9]*; do
    echo "@ lru ${n##*node} $(awk '/Active\(anon\)|Inactive\(anon\)|Active\(file\)|Inactive\(file\)|Unevictable|Shmem:/ {
        k = tolower($3); sub(":", "", k); gsub(/[()]/, "_", k); sub(/_$/, "", k); printf "%s=%s ", k, $4}' $n/meminfo)"
done
[ -n "$KERNEL_TRACE_EVENTS" ] && { echo > $T/trace; echo 1 > $T/tracing_on; }
echo "@ run begin"
taskset -c "$CPUS" /sampler $INTERVAL_MS -- /prog $PROG_ARGS || fail "sampler failed"
if [ -n "$KERNEL_TRACE_EVENTS" ]; then
    echo 0 > $T/tracing_on
    cat $T/per_cpu/cpu*/stats | sed 's/^/T /'
    sed 's/^/T /' $T/trace
fi
echo "@ oom $(dmesg | grep -c "Out of memory")"
echo "@ done"
poweroff -f
