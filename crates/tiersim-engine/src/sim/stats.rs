//! The run's summary: execution time, latency percentiles, per-node traffic and LRU sizes,
//! faults, swap, tiering activity (migrations and NUMA-balancing work, after /proc/vmstat's
//! numa_* and pgmigrate_* counters) and the devices' own statistics.

use hdrhistogram::Histogram;
use serde_json::json;
use tiersim_core::{Error, Op, Result};

use super::{Engine, SimResult};

/// Latencies below this many ns, nearly all of them, are counted in a plain array.
const DIRECT_NS: usize = 4096;

/// The run's access latencies: an hdrhistogram (3 significant digits), fed from a plain array of
/// counts for latencies below `DIRECT_NS` when it is read, which gives the same counts at a
/// fraction of the work per access.
pub(crate) struct LatencyHist {
    direct: Vec<u64>,
    hdr: Histogram<u64>,
}

impl LatencyHist {
    pub(crate) fn new() -> Result<LatencyHist> {
        // Fixed bounds (1 ns .. 18 min): saturating_record never resizes an auto-sized
        // histogram, which clamped every latency above 2 us.
        let hdr = Histogram::new_with_bounds(1, 1 << 40, 3).map_err(|e| Error::Sim(format!("histogram: {e}")))?;
        Ok(LatencyHist { direct: vec![0; DIRECT_NS], hdr })
    }

    #[inline]
    pub(crate) fn record(&mut self, ns: u64) {
        match self.direct.get_mut(ns as usize) {
            Some(n) => *n += 1,
            None => self.hdr.saturating_record(ns),
        }
    }

    /// All the latencies recorded, as one histogram.
    pub(crate) fn histogram(&mut self) -> &Histogram<u64> {
        for (ns, n) in self.direct.iter_mut().enumerate() {
            if *n > 0 {
                self.hdr.saturating_record_n(ns as u64, std::mem::take(n));
            }
        }
        &self.hdr
    }

    /// Add `other`'s latencies to these (the run's histogram is the sum of the nodes').
    pub(crate) fn add(&mut self, other: &mut LatencyHist) {
        self.hdr.add(other.histogram()).expect("latency histograms share their bounds");
    }
}

/// Tiering activity: migrations and the NUMA-balancing work behind them.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct TieringStats {
    pub(crate) promotions: u64,
    pub(crate) demotions: u64,
    pub(crate) migrations: u64,
    pub(crate) migrated_bytes: u64,
    pub(crate) hint_faults: u64,
    pub(crate) failed_promotions: u64,
    pub(crate) failed_migrations: u64,
    pub(crate) exchanges: u64,
    pub(crate) exchanged_bytes: u64,
    pub(crate) ping_pong: u64,
    pub(crate) scans: u64,
    pub(crate) scan_time_ps: u64,
    pub(crate) hint_fault_time_ps: u64,
    pub(crate) migration_time_ps: u64,
    /// Host hints sent to devices by the scanner (`os.device_hints`).
    pub(crate) device_hints: u64,
}

/// The measured accesses' latency histogram in long form: for the whole run (`node = "all"`)
/// and then for each node, one row per non-empty bin, lowest bin first. A bin holds the
/// accesses whose latency lies in [low_ns, high_ns]; per node the counts sum to the node's
/// measured accesses.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LatencyBins {
    pub node: Vec<String>,
    pub low_ns: Vec<u64>,
    pub high_ns: Vec<u64>,
    pub count: Vec<u64>,
}

impl LatencyBins {
    fn push(&mut self, node: &str, h: &Histogram<u64>) {
        for v in h.iter_recorded() {
            let high = v.value_iterated_to();
            self.node.push(node.to_owned());
            self.low_ns.push(h.lowest_equivalent(high));
            self.high_ns.push(high);
            self.count.push(v.count_at_value());
        }
    }
}

pub(super) fn finish(mut eng: Engine, read: u64, warmup: u64) -> SimResult {
    let end_ns = if eng.open_loop {
        eng.max_completion_ns
    } else {
        eng.cpus.iter().filter(|c| c.started).map(|c| c.clock_ps / 1000).max().unwrap_or(0).max(eng.max_completion_ns)
    };
    // A final partial epoch, if any accesses landed in it.
    let start = eng.measure_start_ns.saturating_add(eng.epoch_idx.saturating_mul(eng.epoch_ns));
    if end_ns > start || eng.ts.epoch.is_empty() {
        eng.flush_epoch(end_ns.max(start + 1));
    }
    // Counts of an epoch not flushed (nothing of it reached the series) still belong to the run.
    for n in &mut eng.nodes {
        n.fold_epoch();
    }
    let exec = end_ns - eng.measure_start_ns;
    let total: u64 = eng.nodes.iter().map(|n| n.total.accesses).sum();
    let fast: u64 = eng.nodes.iter().filter(|n| n.spec.tier == 0).map(|n| n.total.accesses).sum();
    let reads: u64 = eng.nodes.iter().map(|n| n.total.reads).sum();
    let mut all = LatencyHist::new().expect("constant bounds are valid");
    let mut latency_bins = LatencyBins::default();
    for n in &mut eng.nodes {
        all.add(&mut n.hist);
    }
    latency_bins.push("all", all.histogram());
    for n in &mut eng.nodes {
        latency_bins.push(&n.spec.name, n.hist.histogram());
    }
    let h = all.histogram();
    let pct = |q: f64| if h.is_empty() { 0 } else { h.value_at_quantile(q) };
    let latency = json!({
        "mean": if h.is_empty() { 0.0 } else { h.mean() },
        "p50": pct(0.5),
        "p90": pct(0.9),
        "p99": pct(0.99),
        "p999": pct(0.999),
        "max": if h.is_empty() { 0 } else { h.max() },
    });
    let nodes: Vec<_> = eng
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let secs = exec.max(1) as f64 / 1e9;
            json!({
                "name": n.spec.name,
                "device": n.spec.device,
                "preset": n.spec.preset,
                "tier": n.spec.tier,
                "socket": n.spec.socket,
                "has_cpus": !n.spec.cpus.is_empty(),
                "capacity_bytes": n.capacity * eng.page_size,
                "capacity_pages": n.capacity,
                "watermarks_pages": {"min": n.wmark_min, "low": n.wmark_low, "high": n.wmark_high},
                "accesses": n.total.accesses,
                "reads": n.total.reads,
                "writes": n.total.writes,
                "bytes": n.total.bytes,
                "bandwidth_gbs": n.total.bytes as f64 / secs / 1e9,
                "share": if total > 0 { n.total.accesses as f64 / total as f64 } else { 0.0 },
                "final_pages": n.used,
                "lru_pages": eng.lru_sizes(i),
                "migrated_in": n.total.migrated_in,
                "migrated_out": n.total.migrated_out,
                "peak_pages": n.peak_used,
                "mean_latency_ns": if n.total.accesses > 0 { n.total.latency_sum as f64 / n.total.accesses as f64 } else { 0.0 },
                "idle_read_latency_ns": n.dev.idle_latency(Op::Read, 64),
                "peak_bandwidth_gbs": n.dev.peak_bandwidth() / 1e9,
            })
        })
        .collect();
    let devices: serde_json::Map<String, serde_json::Value> =
        eng.nodes.iter().map(|n| (n.spec.name.clone(), n.dev.stats())).collect();
    let swap = match &eng.swap {
        Some(s) => json!({
            "enabled": true,
            "swap_ins": s.swap_ins,
            "swap_outs": s.swap_outs,
            "bytes_in": s.swap_ins * eng.page_size,
            "bytes_out": s.swap_outs * eng.page_size,
            // Pages only in swap; swap-cache pages are resident (and counted on their node).
            "final_pages": s.used - s.cache_slot.len() as u64,
            "slots_used": s.used,
            "readahead_pages": s.readahead_pages,
            "swap_cache_hits": s.cache_hits,
            "swap_cache_drops": s.cache_drops,
            "swap_cache_freed": s.cache_freed,
            "swap_cache_pages": s.cache_slot.len(),
            "write_requests": s.write_requests,
            "read_requests": s.read_requests,
            "capacity_pages": s.capacity,
            "file_drops": s.file_drops,
            "file_writebacks": s.file_writebacks,
            "file_refaults": s.file_refaults,
            "device": s.dev.stats(),
        }),
        None => {
            json!({"enabled": false, "swap_ins": 0, "swap_outs": 0, "bytes_in": 0, "bytes_out": 0, "file_drops": 0, "file_writebacks": 0, "file_refaults": 0})
        }
    };
    let mut summary = json!({
        "execution_time_ns": exec,
        "accesses": total,
        "reads": reads,
        "writes": total - reads,
        "trace_accesses": read,
        "warmup_accesses": warmup,
        "measured_from_ns": eng.measure_start_ns,
        "cpus": eng.cpus.iter().filter(|c| c.started).count(),
        "pages_touched": eng.pt.touched,
        "page_size": eng.page_size,
        "fast_tier_hit_ratio": if total > 0 { fast as f64 / total as f64 } else { 0.0 },
        "latency_ns": latency,
        "faults": {
            "first_touch": eng.first_touch_faults,
            "swap_in": eng.swap.as_ref().map_or(0, |s| s.swap_ins),
            "major": eng.files.stats.major_faults,
            "minor_file": eng.files.stats.minor_faults,
            "file_unread": eng.files.stats.unread_first_touches,
            "fault_time_ns": eng.fault_time_ps / 1000,
        },
        "out_of_order_issues": eng.time_went_back,
        "tiering": {
            "promotions": eng.tiering.promotions,
            "demotions": eng.tiering.demotions,
            "migrations": eng.tiering.migrations,
            "migrated_bytes": eng.tiering.migrated_bytes,
            "hint_faults": eng.tiering.hint_faults,
            "failed_promotions": eng.tiering.failed_promotions,
            "failed_migrations": eng.tiering.failed_migrations,
            "exchanges": eng.tiering.exchanges,
            "exchanged_bytes": eng.tiering.exchanged_bytes,
            "ping_pong": eng.tiering.ping_pong,
            "scans": eng.tiering.scans,
            "scan_passes": eng.scan_seq,
            "scan_time_ns": eng.tiering.scan_time_ps / 1000,
            "hint_fault_time_ns": eng.tiering.hint_fault_time_ps / 1000,
            "migration_time_ns": eng.tiering.migration_time_ps / 1000,
            "device_hints": eng.tiering.device_hints,
        },
        "lru": {
            "pgscan": eng.lru_stats.pgscan,
            "pgsteal": eng.lru_stats.pgsteal,
            "pgactivate": eng.lru_stats.pgactivate,
            "pgdeactivate": eng.lru_stats.pgdeactivate,
        },
        "timeseries": {
            "epoch_ns": eng.epoch_ns,
            "requested_epoch_ns": eng.requested_epoch_ns,
            "max_epochs": eng.max_epochs,
            "coarsened": eng.epoch_ns != eng.requested_epoch_ns,
        },
        "policy_stats": eng.policy.stats(),
        "nodes": nodes,
        "swap": swap,
        "devices": devices,
    });
    if eng.files.active() {
        summary["page_cache"] = eng.files.summary(eng.page_size);
    }
    let unread = eng.files.stats.unread_first_touches;
    if unread > 0 {
        summary["notes"] = json!([format!(
            "{unread} first touches of file pages through a mapping read nothing from the device (zeroed pages, minor \
             faults): the trace has no mapping record for their file{}, so mmap reads of cold files are overstated",
            if eng.swap.is_none() { ", or the platform no block device for files ([swap])" } else { "" }
        )]);
    }
    if let Some(future) = eng.future.as_mut() {
        let pos: Vec<u64> = eng.cpus.iter().map(|c| c.done).collect();
        summary["epoch_profile"] = future.finish(&pos);
    }
    SimResult { summary, timeseries: eng.ts, latency_hist: latency_bins }
}
