//! The order in which CPUs issue: the CPU whose next access has the earliest issue time goes
//! next (ties to the lower CPU id). A loser tree over the CPUs: the CPU that just issued has its
//! next time replayed against the log2(cpus) losers on its path to the root, one comparison per
//! level and no sibling lookups, where a binary heap's sift compares both children at every level.
//! A CPU with nothing queued sits out with a key above every time; giving a new time to a CPU
//! other than the first (one whose queue ran dry gets work) rebuilds the tree, which is rare.
//! The tree covers the CPUs seen so far, not the platform's: a 16-thread trace on a 128-CPU
//! host replays 4 levels per access, not 7.
//!
//! Keys are u64 (time << 16 | CPU: host.cpus is at most 65536) while every issue time is below
//! 2^48 ps, 281 s of simulated time, and u128 after: the narrow compare and select cost about
//! half as many instructions per level.

/// A CPU's issue time (ps) and id in one integer, so one comparison orders by time then id.
pub(crate) trait Key: Copy + Ord {
    /// Keys from here up belong to CPUs with nothing queued (still distinct, by their id).
    const IDLE: Self;
    fn new(issue_ps: u64, cpu: usize) -> Self;
    fn idle(cpu: usize) -> Self;
    fn cpu(self) -> usize;
    fn time(self) -> u64;
}

/// Issue times a u64 key holds.
const NARROW_LIMIT: u64 = (1 << 48) - 1;

impl Key for u64 {
    const IDLE: u64 = NARROW_LIMIT << 16;
    #[inline]
    fn new(issue_ps: u64, cpu: usize) -> u64 {
        debug_assert!(issue_ps < NARROW_LIMIT && cpu < 1 << 16);
        (issue_ps << 16) | cpu as u64
    }
    fn idle(cpu: usize) -> u64 {
        Self::IDLE | cpu as u64
    }
    #[inline]
    fn cpu(self) -> usize {
        (self & 0xffff) as usize
    }
    #[inline]
    fn time(self) -> u64 {
        self >> 16
    }
}

impl Key for u128 {
    const IDLE: u128 = u128::MAX << 96;
    #[inline]
    fn new(issue_ps: u64, cpu: usize) -> u128 {
        (u128::from(issue_ps) << 32) | cpu as u128
    }
    fn idle(cpu: usize) -> u128 {
        Self::IDLE | cpu as u128
    }
    #[inline]
    fn cpu(self) -> usize {
        (self & 0xffff_ffff) as usize
    }
    #[inline]
    fn time(self) -> u64 {
        (self >> 32) as u64
    }
}

pub(crate) struct Tree<K> {
    /// Node 0: the winner's key; node i in 1..leaves: the key that lost the match there
    /// (children 2i and 2i + 1, leaves at leaves + cpu).
    nodes: Vec<K>,
    /// Each CPU's key, padded to a power of two with idle keys.
    keys: Vec<K>,
}

impl<K: Key> Tree<K> {
    /// A tree over `keys` (idle keys for CPUs without work).
    fn with_keys(keys: Vec<K>) -> Tree<K> {
        let mut tree = Tree { nodes: Vec::new(), keys };
        tree.grow(tree.keys.len().max(1) - 1);
        tree
    }

    #[inline]
    fn first(&self) -> Option<(u64, usize)> {
        let k = self.nodes[0];
        (k < K::IDLE).then(|| (k.time(), k.cpu()))
    }

    /// Leaves for CPUs up to `cpu`.
    #[cold]
    fn grow(&mut self, cpu: usize) {
        let leaves = (cpu + 1).next_power_of_two();
        let old = self.keys.len();
        self.keys.extend((old..leaves).map(K::idle));
        self.nodes.resize(leaves, K::IDLE);
        self.rebuild();
    }

    #[inline(always)]
    fn change(&mut self, cpu: usize, key: K) {
        if cpu >= self.keys.len() {
            self.grow(cpu);
        }
        self.keys[cpu] = key;
        if cpu != self.nodes[0].cpu() {
            self.rebuild();
            return;
        }
        self.replay(cpu, key);
    }

    /// The first CPU's new key played up its path: one match per level.
    #[inline(always)]
    fn replay(&mut self, cpu: usize, key: K) {
        // A local slice: stores through it cannot move the Vec, so its pointer stays in a
        // register. `grow` keeps nodes.len() == keys.len(), at least 1.
        let nodes = &mut self.nodes[..];
        let leaves = nodes.len();
        let mut won = key;
        let mut i = (leaves + cpu) >> 1;
        while i > 0 {
            // SAFETY: 0 < i < leaves = nodes.len().
            let node = unsafe { nodes.get_unchecked_mut(i) };
            // Selects, not a branch: whether the replayed key wins a match is close to a coin
            // toss on interleaved CPUs (63 % of matches on the engine bench's trace).
            let lost = *node;
            *node = lost.max(won);
            won = lost.min(won);
            i >>= 1;
        }
        // SAFETY: nodes is not empty, as above.
        unsafe { *nodes.get_unchecked_mut(0) = won };
    }

    /// `change` for the CPU that holds the first place, the one that just issued.
    #[inline(always)]
    fn change_first(&mut self, cpu: usize, key: K) {
        debug_assert_eq!(cpu, self.nodes[0].cpu());
        debug_assert!(cpu < self.keys.len());
        // SAFETY: the first CPU holds a leaf, so cpu < keys.len().
        unsafe { *self.keys.get_unchecked_mut(cpu) = key };
        self.replay(cpu, key);
    }

    #[cold]
    fn rebuild(&mut self) {
        self.nodes[0] = self.play(1);
    }

    /// Plays the matches under node `i`; returns the winner's key.
    fn play(&mut self, i: usize) -> K {
        let leaves = self.keys.len();
        if i >= leaves {
            return self.keys[i - leaves];
        }
        let (a, b) = (self.play(2 * i), self.play(2 * i + 1));
        self.nodes[i] = a.max(b);
        a.min(b)
    }
}

pub(crate) enum IssueOrder {
    Narrow(Tree<u64>),
    Wide(Tree<u128>),
}

impl IssueOrder {
    pub(crate) fn new() -> IssueOrder {
        IssueOrder::Narrow(Tree::with_keys(Vec::new()))
    }

    /// The next CPU to issue and its issue time, None if no CPU has an access queued.
    #[inline]
    pub(crate) fn first(&self) -> Option<(u64, usize)> {
        match self {
            IssueOrder::Narrow(t) => t.first(),
            IssueOrder::Wide(t) => t.first(),
        }
    }

    /// CPU `cpu` next issues at `issue_ps`.
    #[inline]
    pub(crate) fn set(&mut self, cpu: usize, issue_ps: u64) {
        match self {
            IssueOrder::Narrow(t) if issue_ps < NARROW_LIMIT => t.change(cpu, u64::new(issue_ps, cpu)),
            _ => self.set_wide(cpu, issue_ps),
        }
    }

    #[cold]
    #[inline(never)]
    fn set_wide(&mut self, cpu: usize, issue_ps: u64) {
        if let IssueOrder::Narrow(t) = self {
            let keys =
                t.keys.iter().map(|&k| if k < u64::IDLE { u128::new(k.time(), k.cpu()) } else { u128::idle(k.cpu()) });
            *self = IssueOrder::Wide(Tree::with_keys(keys.collect()));
        }
        if let IssueOrder::Wide(t) = self {
            t.change(cpu, u128::new(issue_ps, cpu));
        }
    }

    /// `set` for the CPU `first` returned, the one that just issued: no leaf to add and no
    /// rebuild, so the whole re-key is the replay up its path.
    #[inline(always)]
    pub(crate) fn set_first(&mut self, cpu: usize, issue_ps: u64) {
        match self {
            IssueOrder::Narrow(t) if issue_ps < NARROW_LIMIT => t.change_first(cpu, u64::new(issue_ps, cpu)),
            _ => self.set_wide(cpu, issue_ps),
        }
    }

    /// CPU `cpu` has nothing queued.
    #[inline]
    pub(crate) fn idle(&mut self, cpu: usize) {
        match self {
            IssueOrder::Narrow(t) => t.change(cpu, u64::idle(cpu)),
            IssueOrder::Wide(t) => t.change(cpu, u128::idle(cpu)),
        }
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
        same_order_from(0);
    }

    /// The same when the times cross 2^48 ps part way: the keys widen to u128 mid-run.
    #[test]
    fn same_order_across_the_key_widening() {
        same_order_from(NARROW_LIMIT - 60);
    }

    fn same_order_from(base: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for cpus in [1, 2, 3, 5, 16, 33] {
            let mut order = IssueOrder::new();
            let mut heap: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::new();
            let mut idle: Vec<usize> = (0..cpus).collect();
            for _ in 0..5000 {
                if !idle.is_empty() && rng.gen_range(0..4) == 0 {
                    let c = idle.swap_remove(rng.gen_range(0..idle.len()));
                    let t = base + rng.gen_range(0..50u64);
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
                    // The engine re-keys the first CPU with set_first; both must agree.
                    if rng.gen_bool(0.5) {
                        order.set_first(c, t);
                    } else {
                        order.set(c, t);
                    }
                }
            }
            assert_eq!(matches!(order, IssueOrder::Wide(_)), base > 0, "{cpus} cpus");
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
