//! A CPU's accesses read from the trace and not yet issued: a ring buffer of power-of-two
//! capacity. `VecDeque` does the same with more work per call (its index wrap compares against
//! the capacity); the engine appends each CPU's part of a trace batch whole.

use tiersim_core::Access;

/// Ring positions ahead of the front that `pop_front` prefetches: 16 accesses of 24 bytes, six
/// lines, about 16 x ncpus accesses of the run before they are read.
const AHEAD: usize = 16;

const EMPTY: Access = Access { time: 0, addr: 0, cpu: 0, size: 0, op: tiersim_core::Op::Read, flags: 0 };

#[derive(Default)]
pub(crate) struct CpuQueue {
    /// Capacity a power of two (or zero), so a position wraps with `mask`.
    buf: Vec<Access>,
    head: usize,
    len: usize,
}

impl CpuQueue {
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Accesses queued.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn front(&self) -> Option<&Access> {
        if self.len == 0 {
            return None;
        }
        debug_assert!(self.head < self.buf.len());
        // SAFETY: head is masked by the capacity - 1 (or 0 after a growth), and a queue that
        // holds anything has a capacity, so head < buf.len().
        Some(unsafe { self.buf.get_unchecked(self.head) })
    }

    /// The access `k` places after the front one, if queued.
    #[inline]
    pub(crate) fn get(&self, k: usize) -> Option<&Access> {
        if self.len <= k {
            return None;
        }
        // SAFETY: as in `front`; the position is masked by the capacity - 1.
        Some(unsafe { self.buf.get_unchecked((self.head + k) & (self.buf.len() - 1)) })
    }

    /// Drop the front access, and hint the CPU to fetch the ring's line `AHEAD` accesses on.
    /// The engine reads 16 rings in turn, each a few accesses per hundred, filled a trace batch
    /// or more before: by the time an access comes up its line has left the cache, and the
    /// hardware's stream prefetchers do not follow 16 streams that slow.
    #[inline]
    pub(crate) fn pop_front(&mut self) {
        debug_assert!(self.len > 0);
        let mask = self.buf.len().wrapping_sub(1);
        self.head = (self.head + 1) & mask;
        self.len -= 1;
        tiersim_core::prefetch(&self.buf, (self.head + AHEAD) & mask);
    }

    /// Append `accesses`, in order.
    pub(crate) fn extend_from_slice(&mut self, accesses: &[Access]) {
        while self.buf.len() - self.len < accesses.len() {
            self.grow();
        }
        let cap = self.buf.len();
        let tail = (self.head + self.len) & (cap - 1);
        // Up to the end of the buffer, then from its start.
        let first = accesses.len().min(cap - tail);
        self.buf[tail..tail + first].copy_from_slice(&accesses[..first]);
        self.buf[..accesses.len() - first].copy_from_slice(&accesses[first..]);
        self.len += accesses.len();
    }

    #[cold]
    fn grow(&mut self) {
        let cap = (self.buf.len() * 2).max(64);
        let mut buf = Vec::with_capacity(cap);
        let mask = self.buf.len().wrapping_sub(1);
        buf.extend((0..self.len).map(|k| self.buf[(self.head + k) & mask]));
        buf.resize(cap, EMPTY);
        self.buf = buf;
        self.head = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// Against `VecDeque` over random pushes, runs of pushes and pops, through several growths
    /// and wraps.
    #[test]
    fn same_as_vecdeque() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (mut q, mut d) = (CpuQueue::default(), VecDeque::new());
        let mut emptied = 0;
        for i in 0..40_000u64 {
            // Pushes outnumber pops early on (growth), then pops catch up (wraps, emptying).
            if rng.gen_bool(if i < 10_000 { 0.75 } else { 0.3 }) {
                let a = Access { time: i, addr: rng.gen(), ..EMPTY };
                q.extend_from_slice(&[a]);
                d.push_back(a);
            } else if rng.gen_bool(0.005) {
                // A run at once, across the wrap and past the capacity at times.
                let run: Vec<Access> =
                    (0..rng.gen_range(0..100u64)).map(|k| Access { time: i, addr: k, ..EMPTY }).collect();
                q.extend_from_slice(&run);
                d.extend(run);
            } else if !d.is_empty() {
                q.pop_front();
                d.pop_front();
                emptied += usize::from(d.is_empty());
            }
            assert_eq!(q.is_empty(), d.is_empty());
            assert_eq!(q.front().map(|a| (a.time, a.addr)), d.front().map(|a| (a.time, a.addr)));
            for k in [1, 2] {
                assert_eq!(q.get(k).map(|a| (a.time, a.addr)), d.get(k).map(|a| (a.time, a.addr)));
            }
        }
        assert!(emptied > 10, "the walk should drain the queue repeatedly, drained {emptied} times");
    }
}
