//! The run's access latencies, kept per node: exact below a few microseconds, an hdrhistogram
//! above.

use hdrhistogram::Histogram;
use tiersim_core::{Error, Result};

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
