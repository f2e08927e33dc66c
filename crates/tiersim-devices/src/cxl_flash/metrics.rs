//! Latency accounting of the CXL-flash device: one histogram per class (hit, hit under miss,
//! miss), merged into the histogram over every request when reported, an exact count of requests
//! under 1 us, and the histogram bins for export. Recording is O(1), one histogram record per
//! request, and memory does not grow with the trace.

use hdrhistogram::Histogram;
use serde_json::json;
use tiersim_core::Ns;

/// How a request was served, worst line first (a request spanning lines takes its slowest class).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Hit = 0,
    HitUnderMiss = 1,
    Miss = 2,
}

pub const CLASS_NAMES: [&str; 3] = ["hit", "hit_under_miss", "miss"];

/// The "sub-microsecond" bound of seed 004: latency strictly below 1 us.
pub const SUB_US: Ns = 1000;

pub struct Latency {
    by_class: [Histogram<u64>; 3],
    count: [u64; 3],
    /// Exact maxima per class (the histograms round to 0.1%).
    max: [Ns; 3],
    under_1us: u64,
    sum: u128,
}

/// Largest latency tracked (about 18 simulated minutes); longer ones are clamped to it.
/// `saturating_record` never resizes a histogram, so the bound must be set up front.
const MAX_TRACKED_NS: u64 = 1 << 40;

fn histogram() -> Histogram<u64> {
    // Three significant digits: 0.1% resolution at any latency.
    Histogram::new_with_bounds(1, MAX_TRACKED_NS, 3).expect("valid histogram bounds")
}

impl Latency {
    pub fn new() -> Latency {
        Latency { by_class: [histogram(), histogram(), histogram()], count: [0; 3], max: [0; 3], under_1us: 0, sum: 0 }
    }

    #[inline]
    pub fn record(&mut self, ns: Ns, class: Class) {
        let v = ns.max(1);
        self.by_class[class as usize].saturating_record(v);
        self.count[class as usize] += 1;
        self.max[class as usize] = self.max[class as usize].max(ns);
        self.under_1us += u64::from(ns < SUB_US);
        self.sum += u128::from(ns);
    }

    pub fn count(&self, class: Class) -> u64 {
        self.count[class as usize]
    }

    pub fn total(&self) -> u64 {
        self.count.iter().sum()
    }

    pub fn under_1us(&self) -> u64 {
        self.under_1us
    }

    fn summary(h: &Histogram<u64>, max: Ns) -> serde_json::Value {
        if h.is_empty() {
            return json!(null);
        }
        json!({
            "count": h.len(),
            "mean": h.mean(),
            "p50": h.value_at_quantile(0.50),
            "p90": h.value_at_quantile(0.90),
            "p99": h.value_at_quantile(0.99),
            "p999": h.value_at_quantile(0.999),
            "max": max,
            "min": h.min(),
        })
    }

    /// The histogram over every request: the sum of the class histograms (the same counts per
    /// bin as recording each request twice).
    fn all(&self) -> Histogram<u64> {
        let mut all = histogram();
        for h in &self.by_class {
            all.add(h).expect("class histograms share the bounds");
        }
        all
    }

    pub fn to_json(&self) -> serde_json::Value {
        let n = self.total();
        let mut by = serde_json::Map::new();
        for (i, name) in CLASS_NAMES.iter().enumerate() {
            by.insert((*name).to_owned(), Self::summary(&self.by_class[i], self.max[i]));
        }
        json!({
            "all": Self::summary(&self.all(), self.max.iter().copied().max().unwrap_or(0)),
            "mean_exact": if n == 0 { 0.0 } else { self.sum as f64 / n as f64 },
            "under_1us": self.under_1us,
            "under_1us_fraction": if n == 0 { 0.0 } else { self.under_1us as f64 / n as f64 },
            "by_class": by,
        })
    }

    /// Histogram bins (class, low ns, high ns inclusive, count), by class then latency, from the
    /// recorded values (equal values at 0.1% resolution share a bin).
    pub fn bins(&self) -> Vec<(&'static str, u64, u64, u64)> {
        let mut out = Vec::new();
        for (i, h) in self.by_class.iter().enumerate() {
            for v in h.iter_recorded() {
                let hi = v.value_iterated_to();
                let lo = h.lowest_equivalent(hi);
                out.push((CLASS_NAMES[i], lo, hi, v.count_at_value()));
            }
        }
        out
    }
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}
