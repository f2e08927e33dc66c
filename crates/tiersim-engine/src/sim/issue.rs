//! The order in which CPUs issue: the CPU whose next access has the earliest issue time goes
//! next (ties to the lower CPU id). A loser tree over the CPUs: the CPU that just issued has its
//! next time replayed against the log2(cpus) losers on its path to the root, one comparison per
//! level and no sibling lookups, where a binary heap's sift compares both children at every level.
//! A CPU with nothing queued sits out with a key above every time; giving a new time to a CPU
//! other than the first (one whose queue ran dry gets work) rebuilds the tree, which is rare.
//! The tree covers the CPUs seen so far, not the platform's: a 16-thread trace on a 128-CPU
//! host replays 4 levels per access, not 7.

/// A CPU's issue time (ps) and id in one integer, so one comparison orders by time then id.
#[inline]
fn key(issue_ps: u64, cpu: usize) -> u128 {
    (u128::from(issue_ps) << 32) | cpu as u128
}

/// Keys from here up belong to CPUs with nothing queued (still distinct, by their id).
const IDLE: u128 = u128::MAX << 96;

fn cpu_of(key: u128) -> usize {
    (key & 0xffff_ffff) as usize
}

pub(crate) struct IssueOrder {
    /// Node 0: the winner's key; node i in 1..leaves: the key that lost the match there
    /// (children 2i and 2i + 1, leaves at leaves + cpu).
    nodes: Vec<u128>,
    /// Each CPU's key, padded to a power of two with idle keys.
    keys: Vec<u128>,
}

impl IssueOrder {
    pub(crate) fn new() -> IssueOrder {
        let mut order = IssueOrder { nodes: Vec::new(), keys: Vec::new() };
        order.grow(0);
        order
    }

    /// Leaves for CPUs up to `cpu`.
    #[cold]
    fn grow(&mut self, cpu: usize) {
        let leaves = (cpu + 1).next_power_of_two();
        let old = self.keys.len();
        self.keys.extend((old..leaves).map(|c| IDLE | c as u128));
        self.nodes.resize(leaves, 0);
        self.rebuild();
    }

    /// The next CPU to issue and its issue time, None if no CPU has an access queued.
    #[inline]
    pub(crate) fn first(&self) -> Option<(u64, usize)> {
        let k = self.nodes[0];
        (k < IDLE).then(|| ((k >> 32) as u64, cpu_of(k)))
    }

    /// CPU `cpu` next issues at `issue_ps`.
    #[inline]
    pub(crate) fn set(&mut self, cpu: usize, issue_ps: u64) {
        self.change(cpu, key(issue_ps, cpu));
    }

    /// CPU `cpu` has nothing queued.
    #[inline]
    pub(crate) fn idle(&mut self, cpu: usize) {
        self.change(cpu, IDLE | cpu as u128);
    }

    #[inline(always)]
    fn change(&mut self, cpu: usize, key: u128) {
        if cpu >= self.keys.len() {
            self.grow(cpu);
        }
        self.keys[cpu] = key;
        if cpu != cpu_of(self.nodes[0]) {
            self.rebuild();
            return;
        }
        let mut won = key;
        let mut i = (self.keys.len() + cpu) >> 1;
        while i > 0 {
            // SAFETY: 0 < i < leaves = nodes.len().
            let node = unsafe { self.nodes.get_unchecked_mut(i) };
            // A branch, not a conditional move: the CPU that just issued usually loses every
            // match, so it is well predicted.
            if *node < won {
                std::mem::swap(node, &mut won);
            }
            i >>= 1;
        }
        self.nodes[0] = won;
    }

    #[cold]
    fn rebuild(&mut self) {
        self.nodes[0] = self.play(1);
    }

    /// Plays the matches under node `i`; returns the winner's key.
    fn play(&mut self, i: usize) -> u128 {
        let leaves = self.keys.len();
        if i >= leaves {
            return self.keys[i - leaves];
        }
        let (a, b) = (self.play(2 * i), self.play(2 * i + 1));
        self.nodes[i] = a.max(b);
        a.min(b)
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// Against the binary heap it replaced, over random re-keys, idles and returns, with many
    /// equal times (ties go to the lower CPU) and CPU counts that are not powers of two.
    #[test]
    fn same_order_as_a_heap() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for cpus in [1, 2, 3, 5, 16, 33] {
            let mut order = IssueOrder::new();
            let mut heap: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
            let mut idle: Vec<usize> = (0..cpus).collect();
            for _ in 0..5000 {
                if !idle.is_empty() && rng.gen_range(0..4) == 0 {
                    let c = idle.swap_remove(rng.gen_range(0..idle.len()));
                    let t = rng.gen_range(0..50u64);
                    order.set(c, t);
                    heap.push(Reverse((t, c as u32)));
                }
                let top = heap.peek().map(|&Reverse((t, c))| (t, c as usize));
                assert_eq!(order.first(), top, "{cpus} cpus");
                let Some((t, c)) = top else { continue };
                if rng.gen_range(0..5) == 0 {
                    heap.pop();
                    order.idle(c);
                    idle.push(c);
                } else {
                    let t = t + rng.gen_range(0..20u64);
                    *heap.peek_mut().unwrap() = Reverse((t, c as u32));
                    order.set(c, t);
                }
            }
        }
    }

    #[test]
    fn extreme_times() {
        let mut order = IssueOrder::new();
        assert_eq!(order.first(), None);
        order.set(2, u64::MAX);
        order.set(1, u64::MAX);
        assert_eq!(order.first(), Some((u64::MAX, 1)));
        order.set(0, 0);
        assert_eq!(order.first(), Some((0, 0)));
        order.idle(0);
        order.idle(1);
        assert_eq!(order.first(), Some((u64::MAX, 2)));
    }
}
