//! Latency accounting of the CXL-flash device: one histogram per class (hit, hit under miss,
//! miss), merged into the histogram over every request when reported, an exact count of requests
//! under 1 us, and the histogram bins for export. Recording is O(1), one counter increment per
//! request at the histogram bucket it computes itself (hdrhistogram's record, with its range
//! checks and min/max tracking, cost about 60 instructions a request); the hdrhistogram
//! histograms are built from those counts when reported, with the same counts per bucket, so
//! every figure is the same. Memory does not grow with the trace.

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
    /// Requests per class and histogram index (`class * INDEXES + bucket_index(ns)`).
    buckets: Vec<u64>,
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

/// hdrhistogram's layout for `histogram()`: three significant digits need 2 * 10^3 values at
/// unit resolution, so 2^11 sub-buckets; bucket b >= 1 holds [2^(b+10), 2^(b+11)) in steps of
/// 2^b and shares its lower half with bucket b - 1. 31 buckets cover 2^40 (up to 2^41 - 1).
const SUB_BUCKET_MAGNITUDE: u32 = 11;
const HALF: u64 = 1 << (SUB_BUCKET_MAGNITUDE - 1);
/// Entries of its counts array: (31 + 1) half-buckets of 2^10.
const INDEXES: usize = 32 << (SUB_BUCKET_MAGNITUDE - 1);

/// hdrhistogram's counts index of `ns` (at least 1) for `histogram()`, values past the array
/// clamped to `MAX_TRACKED_NS` as its `saturating_record` does.
#[inline]
fn bucket_index(ns: u64) -> usize {
    let b = (64 - SUB_BUCKET_MAGNITUDE) - (ns | ((1 << SUB_BUCKET_MAGNITUDE) - 1)).leading_zeros();
    let i = (u64::from(b) * HALF + (ns >> b)) as usize;
    if i < INDEXES {
        i
    } else {
        bucket_index(MAX_TRACKED_NS)
    }
}

/// The lowest value of bucket index `i`.
fn bucket_value(i: usize) -> u64 {
    let i = i as u64;
    if i < 2 * HALF {
        i
    } else {
        let b = (i >> (SUB_BUCKET_MAGNITUDE - 1)) - 1;
        ((i & (HALF - 1)) + HALF) << b
    }
}

impl Latency {
    pub fn new() -> Latency {
        Latency { buckets: vec![0; 3 * INDEXES], count: [0; 3], max: [0; 3], under_1us: 0, sum: 0 }
    }

    #[inline]
    pub fn record(&mut self, ns: Ns, class: Class) {
        let c = class as usize;
        self.buckets[c * INDEXES + bucket_index(ns.max(1))] += 1;
        self.count[c] += 1;
        self.max[c] = self.max[c].max(ns);
        self.under_1us += u64::from(ns < SUB_US);
        self.sum += u128::from(ns);
    }

    /// The histogram of one class, from its bucket counts.
    fn class_histogram(&self, class: usize) -> Histogram<u64> {
        let mut h = histogram();
        for (i, &n) in self.buckets[class * INDEXES..(class + 1) * INDEXES].iter().enumerate() {
            if n > 0 {
                h.record_n(bucket_value(i), n).expect("a bucket's value is in range");
            }
        }
        h
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
    fn all(by_class: &[Histogram<u64>]) -> Histogram<u64> {
        let mut all = histogram();
        for h in by_class {
            all.add(h).expect("class histograms share the bounds");
        }
        all
    }

    pub fn to_json(&self) -> serde_json::Value {
        let n = self.total();
        let by_class: Vec<Histogram<u64>> = (0..3).map(|c| self.class_histogram(c)).collect();
        let mut by = serde_json::Map::new();
        for (i, name) in CLASS_NAMES.iter().enumerate() {
            by.insert((*name).to_owned(), Self::summary(&by_class[i], self.max[i]));
        }
        json!({
            "all": Self::summary(&Self::all(&by_class), self.max.iter().copied().max().unwrap_or(0)),
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
        for (i, name) in CLASS_NAMES.iter().enumerate() {
            let h = self.class_histogram(i);
            for v in h.iter_recorded() {
                let hi = v.value_iterated_to();
                let lo = h.lowest_equivalent(hi);
                out.push((*name, lo, hi, v.count_at_value()));
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

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// The bucket counts give the histogram hdrhistogram's own `saturating_record` gives, for
    /// latencies over the whole range: bucket edges, random ones, and ones past the clamp.
    #[test]
    fn buckets_are_hdrhistograms() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut values: Vec<u64> =
            vec![1, 2, 1023, 1024, 2047, 2048, 2049, 4095, 4096, 1 << 39, MAX_TRACKED_NS - 1, MAX_TRACKED_NS];
        values.extend([MAX_TRACKED_NS + 1, (1 << 41) - 1, 1 << 41, (1 << 41) + 1, u64::MAX / 2, u64::MAX]);
        for k in 0..64 {
            values.push(1u64 << k);
            values.push((1u64 << k).saturating_sub(1).max(1));
        }
        for _ in 0..20_000 {
            let bits = rng.gen_range(0..64);
            values.push(rng.gen_range(1..=u64::MAX >> bits));
        }
        let mut lat = Latency::new();
        let mut want = histogram();
        for &v in &values {
            lat.record(v, Class::Miss);
            want.saturating_record(v);
            let i = bucket_index(v);
            assert!(i < INDEXES, "{v}");
            assert_eq!(bucket_value(i), want.lowest_equivalent(bucket_value(i)), "{v}");
            if v <= MAX_TRACKED_NS {
                assert_eq!(bucket_value(i), want.lowest_equivalent(v), "{v}");
            }
        }
        let got = lat.class_histogram(Class::Miss as usize);
        assert_eq!(got.len(), values.len() as u64);
        let pairs = |h: &Histogram<u64>| {
            h.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect::<Vec<_>>()
        };
        assert_eq!(pairs(&got), pairs(&want));
        assert_eq!((got.min(), got.max(), got.mean()), (want.min(), want.max(), want.mean()));
        for q in [0.5, 0.9, 0.99, 0.999] {
            assert_eq!(got.value_at_quantile(q), want.value_at_quantile(q));
        }
        assert_eq!(lat.class_histogram(Class::Hit as usize).len(), 0);
    }
}
