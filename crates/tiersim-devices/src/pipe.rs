//! The FCFS resource every device is built from: a channel, a link direction or a transfer pipe
//! that serves one transfer at a time at a fixed rate. Time inside devices is kept in picoseconds:
//! rounding each 64 B transfer up to a whole ns would cut a 27 GB/s link to 21 GB/s.

use tiersim_core::Ns;

/// Picoseconds; device-internal time.
pub type Ps = u64;

const PS_PER_NS: u64 = 1000;
const FS_PER_PS: u64 = 1000;
const FS_PER_S: f64 = 1e15;

/// Whether `[addr, addr + size)` lies within one aligned unit of 2^`shift` bytes (a request of
/// size 0 counts as one byte; the end saturates at the top of the address space).
#[inline(always)]
pub(crate) fn within_unit(addr: u64, size: u32, shift: u32) -> bool {
    (addr ^ addr.saturating_add(u64::from(size.max(1)) - 1)) >> shift == 0
}

/// Issue time in ns to ps; saturates so absurd trace times cannot overflow.
#[inline]
pub fn ps_from_ns(ns: Ns) -> Ps {
    ns.saturating_mul(PS_PER_NS)
}

/// Completion time in ps to ns, rounded up so a completion is never reported early.
#[inline]
pub fn ns_from_ps(ps: Ps) -> Ns {
    // The same value as div_ceil in one multiply-shift, where div_ceil adds a remainder test
    // (once per device request); div_ceil itself only where adding would overflow.
    match ps.checked_add(PS_PER_NS - 1) {
        Some(up) => up / PS_PER_NS,
        None => ps.div_ceil(PS_PER_NS),
    }
}

/// A device's answer for a request issued at `now`: `done` in ns, and never before `now`, which
/// only matters past ~213 simulated days where ps time saturates.
#[inline]
pub fn completion(now: Ns, done: Ps) -> Ns {
    ns_from_ps(done).max(now)
}

pub fn ns_f64(ps: Ps) -> f64 {
    ps as f64 / PS_PER_NS as f64
}

/// Cost of one byte in femtoseconds, rounded up so the configured rate is never exceeded.
pub fn fs_per_byte(bytes_per_s: f64) -> u64 {
    ((FS_PER_S / bytes_per_s).ceil() as u64).max(1)
}

/// One FCFS server. A request issued before `busy_until` (background work issued slightly in the
/// past, or plain contention) waits for it; the server never backfills idle gaps in the past.
#[derive(Debug, Clone)]
pub struct Pipe {
    fs_per_byte: u64,
    busy_until: Ps,
    busy: Ps,
    bytes: u64,
}

impl Pipe {
    pub fn new(bytes_per_s: f64) -> Self {
        Pipe { fs_per_byte: fs_per_byte(bytes_per_s), busy_until: 0, busy: 0, bytes: 0 }
    }

    /// Time `bytes` occupy this pipe, rounded up to whole ps (never zero).
    #[inline]
    pub fn service(&self, bytes: u64) -> Ps {
        bytes.saturating_mul(self.fs_per_byte).div_ceil(FS_PER_PS).max(1)
    }

    /// Serve `bytes` arriving at `at`; returns (start, end) of the transfer.
    #[inline]
    pub fn serve(&mut self, at: Ps, bytes: u64) -> (Ps, Ps) {
        self.serve_for(at, bytes, self.service(bytes))
    }

    /// `serve` with the time the transfer occupies the pipe given: callers keep the service of
    /// their common transfer size, which halves the cost of the per-access path, and may charge
    /// more than `bytes` at the rate (a DRAM write's turnaround).
    #[inline]
    pub fn serve_for(&mut self, at: Ps, bytes: u64, service: Ps) -> (Ps, Ps) {
        let start = at.max(self.busy_until);
        let end = start.saturating_add(service);
        self.busy_until = end;
        // Plain sums, without saturation tests on the per-request path: the transfers occupy
        // disjoint spans of [0, busy_until], so `busy` cannot pass 2^64 ps before the clock
        // itself saturates (213 days of simulated time), and `bytes` would need 2^58 lines.
        self.busy = self.busy.wrapping_add(service);
        self.bytes = self.bytes.wrapping_add(bytes);
        (start, end)
    }

    /// Total time spent transferring.
    pub fn busy(&self) -> Ps {
        self.busy
    }

    /// Total bytes transferred.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn busy_until(&self) -> Ps {
        self.busy_until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_rates_and_rounding() {
        // 32 GB/s: 1e15 / 32e9 = 31250 fs per byte, so 64 B take 2,000,000 fs = 2000 ps.
        let mut p = Pipe::new(32e9);
        assert_eq!(p.service(64), 2000);
        assert_eq!(p.serve(0, 64), (0, 2000));
        // Issued while busy: queues behind the first transfer.
        assert_eq!(p.serve(500, 64), (2000, 4000));
        // Issued "in the past": still queues, no panic.
        assert_eq!(p.serve(0, 64), (4000, 6000));
        assert_eq!((p.busy(), p.bytes()), (6000, 192));
        // 38.4 GB/s * 0.85 = 32.64 GB/s: 30637.25 fs/B rounds up to 30638, 64 B -> 1,960,832 fs -> 1961 ps.
        assert_eq!(Pipe::new(38.4e9 * 0.85).service(64), 1961);
        assert_eq!(ns_from_ps(1961), 2);
        assert_eq!(ns_from_ps(2000), 2);
        assert_eq!(ps_from_ns(u64::MAX), u64::MAX);
    }

    #[test]
    fn ns_from_ps_rounds_up_like_div_ceil() {
        let edges = [
            0,
            1,
            999,
            1000,
            1001,
            1999,
            2000,
            u64::MAX - 1000,
            u64::MAX - 999,
            u64::MAX - 998,
            u64::MAX - 1,
            u64::MAX,
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let random = (0..100_000).map(|i| {
            // xorshift64: values over the whole range, shifted down to cover small ones too.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x >> (i % 64)
        });
        for ps in edges.into_iter().chain(random) {
            assert_eq!(ns_from_ps(ps), ps.div_ceil(1000), "{ps} ps");
        }
    }
}
