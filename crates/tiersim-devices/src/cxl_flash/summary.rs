//! The device's figures as JSON: requests by class, latency histograms, cache, MSHR and flash
//! counters, prefetch accuracy/coverage/lateness/pollution, lifetime (ours, the worst block's and
//! MQSim_CXL's README formula), hints, link and DRAM use.

use serde_json::json;
use tiersim_core::Ns;

use super::cache::Cache;
use super::metrics::Class;
use super::CxlFlash;
use crate::pipe::ns_f64;

const YEAR_S: f64 = 365.25 * 24.0 * 3600.0;
/// MQSim_CXL's README turns its lifetime into years of 2080 working hours.
const MQSIM_YEAR_S: f64 = 2080.0 * 3600.0;

impl CxlFlash {
    fn ratio(a: u64, b: u64) -> Option<f64> {
        (b > 0).then(|| a as f64 / b as f64)
    }

    /// Simulated span: first issue to last completion.
    pub fn span_ns(&self) -> Ns {
        self.last_completion.saturating_sub(self.first_issue.unwrap_or(0))
    }

    /// The device's figures as JSON (what `stats()` returns).
    pub fn summary(&self) -> serde_json::Value {
        let c = &self.c;
        let pf = &self.pf;
        let requests = self.lat.total();
        let geo = self.flash.geo;
        let ops = self.mq.as_ref().map_or(self.flash.ops, |mq| mq.ops(geo.unit));
        let span_s = self.span_ns() as f64 / 1e9;
        let host_unit_bytes = self.ftl.host_units_programmed() << self.line_shift;
        let physical = geo.physical_bytes();
        let (_, _, max_erases) = self.ftl.wear();
        let years = |rate: f64| (rate > 0.0 && span_s > 0.0).then_some(rate);
        let program_rate = ops.program_bytes as f64 / span_s;
        let lifetime = years(program_rate).map(|r| self.endurance as f64 * physical as f64 / r / YEAR_S);
        let worst =
            (max_erases > 0 && span_s > 0.0).then(|| self.endurance as f64 / (f64::from(max_erases) / span_s) / YEAR_S);
        let flush_rate = ((c.evictions_dirty << self.line_shift) as f64) / span_s;
        let mqsim = years(flush_rate).map(|r| self.endurance as f64 * self.logical_bytes() as f64 / r / MQSIM_YEAR_S);
        let flash_reads = c.flash_reads_demand + c.flash_reads_prefetch + c.flash_reads_rmw;
        let cache = self.cache.as_ref();
        let mut v = json!({
            "device": "cxl_flash",
            "requests": requests,
            "reads": c.by_op[0],
            "writes": c.by_op[1],
            "bytes_read": c.bytes_by_op[0],
            "bytes_written": c.bytes_by_op[1],
            "hits": self.lat.count(Class::Hit),
            "hits_under_miss": self.lat.count(Class::HitUnderMiss),
            "misses": self.lat.count(Class::Miss),
            "hit_ratio": Self::ratio(self.lat.count(Class::Hit), requests),
            "under_1us_fraction": Self::ratio(self.lat.under_1us(), requests),
            "latency_ns": self.lat.to_json(),
            "simulated_ns": self.span_ns(),
            "lines": {
                "hits": c.line_hits,
                "hits_under_miss": c.line_hits_under_miss,
                "misses": c.line_misses,
                "write_validate_allocs": c.write_validate_allocs,
                "wrapped_addresses": c.wrapped,
            },
            "flash": {
                "reads": flash_reads,
                "reads_demand": c.flash_reads_demand,
                "reads_prefetch": c.flash_reads_prefetch,
                "reads_duplicate": c.flash_reads_duplicate,
                "reads_rmw": c.flash_reads_rmw,
                "reads_gc_pages": ops.reads.saturating_sub(flash_reads),
                "programs": ops.programs,
                "program_bytes": ops.program_bytes,
                "erases": ops.erases,
                "write_amplification": Self::ratio(ops.program_bytes, host_unit_bytes),
                "write_amplification_host": Self::ratio(ops.program_bytes, c.bytes_by_op[1]),
                "geometry": {
                    "channels": geo.channels, "ways": geo.ways, "planes": geo.planes,
                    "blocks_per_plane": geo.blocks_per_plane, "pages_per_block": geo.pages_per_block,
                    "page_size": geo.page_size, "physical_bytes": physical, "logical_bytes": self.logical_bytes(),
                },
                "backend": self.mq.as_ref().map_or_else(|| self.flash.stats(), |mq| mq.tsu.stats()),
            },
            "ftl": self.ftl.stats(),
            "cache": {
                "lines": cache.map_or(0, |c| c.sets as u64 * u64::from(c.ways)),
                "ways": cache.map_or(0, |c| c.ways),
                "sets": cache.map_or(0, |c| c.sets),
                "resident": cache.map_or(0, Cache::resident),
                "evictions_clean": c.evictions_clean,
                "evictions_dirty": c.evictions_dirty,
                "flushes": c.evictions_dirty,
                "dirty_fraction_of_evicted_lines": Self::ratio(c.dirty_subblocks_evicted,
                    c.evictions_dirty * u64::from(self.full_mask.count_ones())),
                "write_buffer_hits": c.write_buffer_hits,
            },
            "mshr": {
                "rows": self.mshr.limit(),
                "in_flight_cap": self.mshr.cap_without_mshr(),
                "entries": self.mshr.entries,
                "peak_rows": self.mshr.peak,
                "stall_rows": c.stall_mshr_rows,
                "stall_rows_ns": ns_f64(c.stall_mshr_rows_ps),
                "stall_entries": c.stall_mshr_entries,
                "stall_entries_ns": ns_f64(c.stall_mshr_entries_ps),
                "stall_write_buffer": c.stall_write_buffer,
                "stall_write_buffer_ns": ns_f64(c.stall_write_buffer_ps),
                "stall_behind": c.stall_behind,
                "stall_behind_ns": ns_f64(c.stall_behind_ps),
            },
            "prefetch": {
                "prefetcher": self.prefetcher_name,
                "issued": pf.issued,
                "useful": pf.useful,
                "late": pf.late,
                "dropped": c.prefetch_dropped,
                "redundant": c.prefetch_redundant,
                "unused_evicted": c.prefetch_unused_evicted,
                "pollution_misses": pf.pollution_misses,
                "demand_misses": pf.demand_misses,
                "accuracy": Self::ratio(pf.useful, pf.issued),
                "coverage": Self::ratio(pf.useful, pf.useful + pf.demand_misses),
                "lateness": Self::ratio(pf.late, pf.useful),
                "pollution": Self::ratio(pf.pollution_misses, pf.demand_misses),
                "state": self.prefetcher.stats(),
            },
            "lifetime": {
                "endurance": self.endurance,
                "years": lifetime,
                "years_worst_block": worst,
                "years_mqsim_formula": mqsim,
            },
            "hints": {
                "lines": c.hints,
                "prefetches": c.hint_prefetches,
                "pins": c.hint_pins,
                "pins_refused": c.hint_pins_refused,
                "pins_replaced": c.hint_pins_replaced,
            },
            "link": {
                "h2d_bytes": self.h2d.bytes(),
                "h2d_busy_ns": ns_f64(self.h2d.busy()),
                "d2h_bytes": self.d2h.bytes(),
                "d2h_busy_ns": ns_f64(self.d2h.busy()),
            },
            "dram": self.dram.stats(),
        });
        if let Some(mq) = self.mq.as_ref() {
            // MQSim_CXL's prefetch throttle (compat.rs `compat_prefetch_room`): triggers it
            // refused, and proposals past its room.
            v["prefetch"]["throttled_triggers"] = json!(mq.throttled);
            v["prefetch"]["truncated"] = json!(mq.truncated);
        }
        v
    }
}
