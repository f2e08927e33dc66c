//! Prefetchers of the CXL-flash device: each proposes lines (flash mapping units) to fetch ahead
//! of demand when it is triggered by a demand miss or by the first demand use of a prefetched
//! line. The device filters the proposals (already cached, already in flight, no MSHR row to
//! spare) and accounts for accuracy, coverage, lateness and pollution in lines.
//!
//! Adding a prefetcher: one file here and one line in `REGISTRY`. Its parameters carry a short
//! prefix (`bo_`, `leap_`, ...) and join the device's flat parameter list.

use tiersim_core::{Params, PluginInfo, Result};

pub mod best_offset;
pub mod best_offset_mqsim;
pub mod feedback_directed;
pub mod leap;
pub mod leap_mqsim;
pub mod next_n_line;

/// Cumulative prefetch and cache counters of the device, all in lines (mapping units).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Prefetch flash reads issued.
    pub issued: u64,
    /// Prefetched lines that a demand access used before they were evicted.
    pub useful: u64,
    /// Useful prefetches whose first demand access came while the read was still in flight.
    pub late: u64,
    /// Demand misses to a line that a prefetch fill had evicted.
    pub pollution_misses: u64,
    /// Demand misses (lines fetched from flash on demand).
    pub demand_misses: u64,
    /// Lines evicted from the cache.
    pub evictions: u64,
    /// Demand hits on lines a prefetch was issued for, every one until the line is evicted
    /// (compat mode only: MQSim_CXL's `prefetch_hit_count`, cxl/Host_Interface_CXL.cpp:317).
    pub prefetched_hits: u64,
}

/// What a prefetcher sees when it is triggered.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The demand line (address / line size).
    pub line: u64,
    /// A demand miss (else the first demand use of a prefetched line, timely or late).
    pub miss: bool,
    /// Lines the device holds: proposals at or beyond it are dropped.
    pub lines: u64,
    pub counters: &'a Counters,
}

pub trait Prefetcher: Send {
    /// Append the lines to prefetch for this trigger to `out`.
    fn on_trigger(&mut self, ctx: &Context<'_>, out: &mut Vec<u64>);
    /// A line was filled into the cache (`prefetched`: by a prefetch).
    fn on_fill(&mut self, _line: u64, _prefetched: bool) {}
    /// Triggered by every demand hit on a line a prefetch brought in, until it is evicted, and
    /// not by hits under miss (MQSim_CXL's `prefetched_lba`; in compat mode only). Otherwise
    /// by its first use.
    fn trigger_on_every_hit(&self) -> bool {
        false
    }
    /// Internal state for the summary (current degree, learned offset, ...).
    fn stats(&self) -> serde_json::Value {
        serde_json::json!({})
    }
}

pub struct Entry {
    pub info: PluginInfo,
    pub build: fn(&Params) -> Result<Box<dyn Prefetcher>>,
}

/// Never prefetches.
struct NoPrefetch;

impl Prefetcher for NoPrefetch {
    fn on_trigger(&mut self, _ctx: &Context<'_>, _out: &mut Vec<u64>) {}
}

fn build_none(_: &Params) -> Result<Box<dyn Prefetcher>> {
    Ok(Box::new(NoPrefetch))
}

/// Every prefetcher, by config name. The only place a prefetcher is named.
pub const REGISTRY: &[Entry] = &[
    Entry { info: PluginInfo { name: "none", summary: "no prefetching", source: "", params: &[] }, build: build_none },
    Entry { info: next_n_line::INFO, build: next_n_line::build },
    Entry { info: feedback_directed::INFO, build: feedback_directed::build },
    Entry { info: best_offset::INFO, build: best_offset::build },
    Entry { info: best_offset_mqsim::INFO, build: best_offset_mqsim::build },
    Entry { info: leap::INFO, build: leap::build },
    Entry { info: leap_mqsim::INFO, build: leap_mqsim::build },
];

pub fn find(name: &str) -> Result<&'static Entry> {
    tiersim_core::params::lookup("prefetcher", name, REGISTRY, |e| &e.info)
}

registry_lists!(REGISTRY);
