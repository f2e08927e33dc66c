//! A CPU's accesses read from the trace and not yet issued: the parts of trace batches the
//! decoding thread split off for this CPU, kept as they came (no copy), the first one read by
//! position.

use std::collections::VecDeque;

use tiersim_core::Access;

#[derive(Default)]
pub(crate) struct CpuQueue {
    /// The part being issued from, `pos` its next access. Once it is used up, the next part
    /// takes its place at once, so the queue is empty exactly when `pos == cur.len()`.
    cur: Vec<Access>,
    pos: usize,
    /// Parts after `cur`, none of them empty.
    rest: VecDeque<Vec<Access>>,
}

impl CpuQueue {
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.pos == self.cur.len()
    }

    #[inline]
    pub(crate) fn front(&self) -> Option<&Access> {
        self.cur.get(self.pos)
    }

    #[inline]
    pub(crate) fn pop_front(&mut self) {
        debug_assert!(self.pos < self.cur.len());
        self.pos += 1;
        if self.pos == self.cur.len() {
            self.next_part();
        }
    }

    #[cold]
    fn next_part(&mut self) {
        if let Some(part) = self.rest.pop_front() {
            self.cur = part;
            self.pos = 0;
        }
    }

    /// Append `part`'s accesses, in order.
    pub(crate) fn append(&mut self, part: Vec<Access>) {
        if part.is_empty() {
            return;
        }
        if self.is_empty() {
            self.cur = part;
            self.pos = 0;
        } else {
            self.rest.push_back(part);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    const EMPTY: Access = Access { time: 0, addr: 0, cpu: 0, size: 0, op: tiersim_core::Op::Read, flags: 0 };

    /// Against `VecDeque` over random pushes, runs of pushes (empty ones too) and pops, through
    /// many parts.
    #[test]
    fn same_as_vecdeque() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (mut q, mut d) = (CpuQueue::default(), VecDeque::new());
        let mut emptied = 0;
        for i in 0..40_000u64 {
            // Pushes outnumber pops early on, then pops catch up (emptying).
            if rng.gen_bool(if i < 10_000 { 0.75 } else { 0.3 }) {
                let a = Access { time: i, addr: rng.gen(), ..EMPTY };
                q.append(vec![a]);
                d.push_back(a);
            } else if rng.gen_bool(0.005) {
                // A run at once.
                let run: Vec<Access> = (0..rng.gen_range(0..100u64)).map(|k| Access { time: i, addr: k, ..EMPTY }).collect();
                d.extend(run.iter().copied());
                q.append(run);
            } else if !d.is_empty() {
                q.pop_front();
                d.pop_front();
                emptied += usize::from(d.is_empty());
            }
            assert_eq!(q.is_empty(), d.is_empty());
            assert_eq!(q.front().map(|a| (a.time, a.addr)), d.front().map(|a| (a.time, a.addr)));
        }
        assert!(emptied > 10, "the walk should drain the queue repeatedly, drained {emptied} times");
    }
}
