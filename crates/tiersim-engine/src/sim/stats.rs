//! The run's summary: execution time, latency percentiles, per-node traffic and LRU sizes,
//! faults, swap, tiering activity (migrations and NUMA-balancing work, after /proc/vmstat's
//! numa_* and pgmigrate_* counters) and the devices' own statistics.

use hdrhistogram::Histogram;
use serde_json::json;
use tiersim_core::Op;

use super::{Engine, SimResult};
use crate::latency::LatencyHist;
use crate::os::lru;

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
    for n in &mut eng.mem.nodes {
        n.fold_epoch();
    }
    let exec = end_ns - eng.measure_start_ns;
    let total: u64 = eng.mem.nodes.iter().map(|n| n.total.accesses).sum();
    let fast: u64 = eng.mem.nodes.iter().filter(|n| n.spec.tier == 0).map(|n| n.total.accesses).sum();
    let reads: u64 = eng.mem.nodes.iter().map(|n| n.total.reads).sum();
    let mut all = LatencyHist::new().expect("constant bounds are valid");
    let mut latency_bins = LatencyBins::default();
    for n in &mut eng.mem.nodes {
        all.add(&mut n.hist);
    }
    latency_bins.push("all", all.histogram());
    for n in &mut eng.mem.nodes {
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
        .mem
        .nodes
        .iter()
        .map(|n| {
            let secs = exec.max(1) as f64 / 1e9;
            json!({
                "name": n.spec.name,
                "device": n.spec.device,
                "preset": n.spec.preset,
                "tier": n.spec.tier,
                "socket": n.spec.socket,
                "has_cpus": !n.spec.cpus.is_empty(),
                "capacity_bytes": n.capacity * eng.mem.page_size,
                "capacity_pages": n.capacity,
                "watermarks_pages": {"min": n.wmark_min, "low": n.wmark_low, "high": n.wmark_high},
                "accesses": n.total.accesses,
                "reads": n.total.reads,
                "writes": n.total.writes,
                "bytes": n.total.bytes,
                "bandwidth_gbs": n.total.bytes as f64 / secs / 1e9,
                "share": if total > 0 { n.total.accesses as f64 / total as f64 } else { 0.0 },
                "final_pages": n.used,
                "occupied_pages": n.occupied_pages(),
                "lru_pages": lru::sizes(n),
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
        eng.mem.nodes.iter().map(|n| (n.spec.name.clone(), n.dev.stats())).collect();
    let swap = match &eng.swap {
        Some(s) => s.summary(eng.mem.page_size),
        None => {
            json!({"enabled": false, "swap_ins": 0, "swap_outs": 0, "bytes_in": 0, "bytes_out": 0, "file_drops": 0, "file_writebacks": 0, "file_refaults": 0})
        }
    };
    // The counters' sections, each filled by the parts that keep them.
    let mut sections: [(&str, serde_json::Map<String, serde_json::Value>); 3] =
        [("faults", Default::default()), ("tiering", Default::default()), ("lru", Default::default())];
    for (name, section) in &mut sections {
        for part in eng.metrics() {
            part.report(name, section);
        }
    }
    let [(_, faults), (_, tiering), (_, lru)] = sections;
    let mut summary = json!({
        "execution_time_ns": exec,
        "accesses": total,
        "reads": reads,
        "writes": total - reads,
        "trace_accesses": read,
        "warmup_accesses": warmup,
        "measured_from_ns": eng.measure_start_ns,
        "cpus": eng.cpus.iter().filter(|c| c.started).count(),
        "pages_touched": eng.mem.pt.touched,
        "page_size": eng.mem.page_size,
        "fast_tier_hit_ratio": if total > 0 { fast as f64 / total as f64 } else { 0.0 },
        "latency_ns": latency,
        "faults": faults,
        "out_of_order_issues": eng.time_went_back,
        "tiering": tiering,
        "lru": lru,
        "timeseries": {
            "epoch_ns": eng.epoch_ns,
            "requested_epoch_ns": eng.requested_epoch_ns,
            "max_epochs": eng.max_epochs,
            "coarsened": eng.epoch_ns != eng.requested_epoch_ns,
        },
        "policy_stats": eng.mem.policy.policy.stats(),
        "nodes": nodes,
        "swap": swap,
        "devices": devices,
    });
    if let Some(tlb) = &eng.tlb {
        summary["tlb"] = tlb.summary();
    }
    if eng.files.active() {
        summary["page_cache"] = eng.files.summary(eng.mem.page_size);
    }
    if eng.futex.wait_records + eng.futex.wake_records > 0 {
        let mut f = eng.futex.summary();
        // Where each thread ended, from the measurement's start: with waits in the trace a thread
        // woken late may end the run after the others.
        f["end_ns_per_cpu"] = eng
            .cpus
            .iter()
            .enumerate()
            .filter(|(_, c)| c.started)
            .map(|(i, c)| (i.to_string(), json!((c.clock_ps / 1000).saturating_sub(eng.measure_start_ns))))
            .collect::<serde_json::Map<_, _>>()
            .into();
        summary["futex"] = f;
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
