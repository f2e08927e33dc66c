//! Miss status holding registers: one row per line being read from flash, holding the requests
//! that merged into it (hit under miss). `rows` and `entries` per row bound them; the device
//! makes a request wait when it needs a row or an entry and none is free (MQSim_CXL: 1024 rows of
//! 65 entries, and a full MSHR stops the host feed). Without MSHRs (`mshr_rows = 0`) every miss
//! reads flash, also for a line already in flight (the duplicate reads of seed 004 fig. 6); rows
//! still carry those reads to their fills, at most `no_mshr_max_inflight` of them, so that a trace
//! whose arrivals outrun the device cannot grow the table with its length (docs/reliability.md).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::cache::matches8;
use crate::pipe::Ps;

/// The `ready` of a row whose read has not completed and whose completion is not known yet
/// (compat mode: MQSim_CXL fixes it only when the die gets the channel); `Mshr::resolve` sets it.
pub const PENDING: Ps = Ps::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Fill the cache with the line when the read completes.
    Fill,
    /// Write without allocating: merge the written data into the read line and program it back.
    Rmw,
}

#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub line: u64,
    /// When the line's data reaches the controller.
    pub ready: Ps,
    pub kind: Kind,
    /// Requests merged into the row (the first demand miss counts).
    pub merged: u32,
    pub prefetch: bool,
    /// A demand request used the row (a prefetch turned late).
    pub demanded: bool,
    /// Sub-blocks written by merged writes.
    pub dirty: u64,
    /// Responses waiting for the row's data: `resp_count` of `resp_bytes` each, sent on the
    /// link when it retires.
    pub resp_bytes: u64,
    pub resp_count: u32,
    /// Pin the line when it is filled (a host hint).
    pub pin: bool,
    /// The flash die the data comes from (None: the write buffer).
    pub die: Option<u32>,
}

/// Line -> its newest row, in buckets of one cache line: 7 (line + 1, row) pairs (key 0 =
/// empty) compared at once (SSE2, as the cache's set scan), and a count of the keys stored past
/// the bucket. A key lives in its home bucket or, when that was full, in the first later bucket
/// with room; a lookup stops at the first bucket none passed. At most half full, so a key is
/// nearly always at home: a lookup, insert or removal is one bucket with no data-dependent loop
/// (the linear-probing table before had runs of random length, a mispredicted branch or two per
/// operation and a second cache line for the rows).
struct LineTable {
    buckets: Vec<Bucket>,
    len: usize,
    shift: u32,
}

const SLOTS: usize = 7;

#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Bucket {
    /// line + 1 per slot, 0 = empty; the eighth is always 0 (its room is `passed`'s).
    keys: [u32; 8],
    rows: [u32; SLOTS],
    /// Keys whose home is this bucket or an earlier one, stored after it.
    passed: u32,
}

impl LineTable {
    fn new(expected: u32) -> LineTable {
        let n = (u64::from(expected) * 2).div_ceil(SLOTS as u64).next_power_of_two().max(2) as usize;
        LineTable { buckets: vec![Bucket::default(); n], len: 0, shift: 64 - n.trailing_zeros() }
    }

    /// Lines fit 32 bits: the device has fewer than 2^32 - 1 units (`CxlFlash::from_params`).
    #[inline]
    fn key(line: u64) -> u32 {
        debug_assert!(line < u64::from(u32::MAX));
        line as u32 + 1
    }

    #[inline]
    fn home(&self, key: u32) -> usize {
        // Fibonacci hashing: the product's top bits, so consecutive lines spread.
        (u64::from(key).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// (bucket, slot) of `key`.
    #[inline]
    fn position(&self, key: u32) -> Option<(usize, usize)> {
        let mask = self.buckets.len() - 1;
        let mut b = self.home(key);
        loop {
            let bucket = &self.buckets[b];
            let hits = matches8(&bucket.keys, key);
            if hits != 0 {
                return Some((b, hits.trailing_zeros() as usize));
            }
            if bucket.passed == 0 {
                return None;
            }
            b = (b + 1) & mask;
        }
    }

    #[inline]
    fn get(&self, line: u64) -> Option<u32> {
        self.position(Self::key(line)).map(|(b, s)| self.buckets[b].rows[s])
    }

    fn insert(&mut self, line: u64, row: u32) {
        let key = Self::key(line);
        if let Some((b, s)) = self.position(key) {
            self.buckets[b].rows[s] = row;
            return;
        }
        if (self.len + 1) * 2 > self.buckets.len() * SLOTS {
            self.grow();
        }
        self.place(key, row);
        self.len += 1;
    }

    /// Store `key` (absent) in the first bucket from its home with room.
    fn place(&mut self, key: u32, row: u32) {
        let mask = self.buckets.len() - 1;
        let mut b = self.home(key);
        loop {
            let bucket = &mut self.buckets[b];
            let free = matches8(&bucket.keys, 0) & ((1 << SLOTS) - 1);
            if free != 0 {
                let s = free.trailing_zeros() as usize;
                bucket.keys[s] = key;
                bucket.rows[s] = row;
                return;
            }
            bucket.passed += 1;
            b = (b + 1) & mask;
        }
    }

    fn grow(&mut self) {
        let old = std::mem::replace(self, LineTable::new((self.buckets.len() * SLOTS) as u32));
        for bucket in &old.buckets {
            for s in 0..SLOTS {
                if bucket.keys[s] != 0 {
                    self.place(bucket.keys[s], bucket.rows[s]);
                }
            }
        }
        self.len = old.len;
    }

    /// Remove `line` if its newest row is `row`.
    fn remove(&mut self, line: u64, row: u32) {
        let key = Self::key(line);
        let Some((b, s)) = self.position(key) else { return };
        if self.buckets[b].rows[s] != row {
            return;
        }
        self.buckets[b].keys[s] = 0;
        self.len -= 1;
        let mask = self.buckets.len() - 1;
        let mut p = self.home(key);
        while p != b {
            self.buckets[p].passed -= 1;
            p = (p + 1) & mask;
        }
    }
}

/// In-flight rows by completion, popped in (ready, row) order as one heap of every row would pop
/// them. A flash die serves its operations one at a time in booking order, so the rows read from
/// one die complete in the order they were allocated: each die's rows wait in a FIFO, and only
/// the FIFOs' heads (and rows that fit no FIFO: write-buffer reads, or an out-of-order completion
/// should the flash model ever produce one) are in a heap, a few dozen entries instead of a
/// thousand, and an allocation behind a busy die costs no heap operation.
struct ReadyQueue {
    fifos: Vec<VecDeque<(Ps, u32)>>,
    /// (ready, row, FIFO or `OTHER`) packed in one integer (`head`), which orders as the
    /// tuple would: one wide comparison per level of the heap's sift instead of up to three
    /// dependent ones.
    heads: BinaryHeap<Reverse<u128>>,
}

const OTHER: u32 = u32::MAX;

#[inline(always)]
fn head(ready: Ps, row: u32, fifo: u32) -> u128 {
    u128::from(ready) << 64 | u128::from(row) << 32 | u128::from(fifo)
}

impl ReadyQueue {
    fn new(dies: u32) -> ReadyQueue {
        ReadyQueue { fifos: vec![VecDeque::new(); dies as usize], heads: BinaryHeap::new() }
    }

    // Always inlined, pop too: with compat mode's `Mshr::resolve` as a second caller the
    // compiler stops inlining them into the default path (about 60 instructions a request).
    #[inline(always)]
    fn push(&mut self, ready: Ps, row: u32, die: Option<u32>) {
        if let Some(d) = die.filter(|&d| (d as usize) < self.fifos.len()) {
            let f = &mut self.fifos[d as usize];
            match f.back() {
                None => {
                    f.push_back((ready, row));
                    self.heads.push(Reverse(head(ready, row, d)));
                    return;
                }
                Some(&last) if last < (ready, row) => {
                    f.push_back((ready, row));
                    return;
                }
                Some(_) => {}
            }
        }
        self.heads.push(Reverse(head(ready, row, OTHER)));
    }

    #[inline]
    fn peek(&self) -> Option<(Ps, u32)> {
        self.heads.peek().map(|&Reverse(h)| ((h >> 64) as Ps, (h >> 32) as u32))
    }

    /// Remove the earliest row (`peek`'s).
    #[inline(always)]
    fn pop(&mut self) {
        let Some(mut top) = self.heads.peek_mut() else { return };
        let q = top.0 as u32;
        if q != OTHER {
            let f = &mut self.fifos[q as usize];
            f.pop_front();
            if let Some(&(t, r)) = f.front() {
                *top = Reverse(head(t, r, q));
                return;
            }
        }
        std::collections::binary_heap::PeekMut::pop(top);
    }
}

pub struct Mshr {
    rows: Vec<Row>,
    free: Vec<u32>,
    /// Line -> its newest row.
    map: LineTable,
    ready: ReadyQueue,
    /// Row limit; `None` without MSHRs (no merging).
    limit: Option<u32>,
    /// Rows in flight at most without MSHRs: a bound on memory, not a model figure.
    cap: u32,
    pub entries: u32,
    in_use: u32,
    prefetch_in_use: u32,
    pub peak: u32,
}

impl Mshr {
    /// `dies`: flash dies, whose reads complete in booking order.
    pub fn new(rows: u32, entries: u32, cap_without_mshr: u32, dies: u32) -> Mshr {
        Mshr {
            rows: Vec::new(),
            free: Vec::new(),
            map: LineTable::new(rows.max(8)),
            ready: ReadyQueue::new(dies),
            limit: (rows > 0).then_some(rows),
            cap: cap_without_mshr.max(1),
            entries: entries.max(1),
            in_use: 0,
            prefetch_in_use: 0,
            peak: 0,
        }
    }

    pub fn merging(&self) -> bool {
        self.limit.is_some()
    }

    /// The in-flight row of `line`, if any.
    #[inline]
    pub fn find(&self, line: u64) -> Option<u32> {
        if self.in_use == 0 {
            return None;
        }
        self.map.get(line)
    }

    pub fn row(&self, i: u32) -> &Row {
        &self.rows[i as usize]
    }

    pub fn row_mut(&mut self, i: u32) -> &mut Row {
        &mut self.rows[i as usize]
    }

    pub fn full(&self) -> bool {
        self.in_use >= self.limit.unwrap_or(self.cap)
    }

    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    pub fn prefetch_in_use(&self) -> u32 {
        self.prefetch_in_use
    }

    pub fn limit(&self) -> Option<u32> {
        self.limit
    }

    /// Rows in flight at most without MSHRs; None with them (their limit is `limit`).
    pub fn cap_without_mshr(&self) -> Option<u32> {
        self.limit.is_none().then_some(self.cap)
    }

    pub fn alloc(&mut self, row: Row) -> u32 {
        let i = take_slot(&mut self.rows, &mut self.free, row);
        self.map.insert(row.line, i);
        if row.ready != PENDING {
            self.ready.push(row.ready, i, row.die);
        }
        self.in_use += 1;
        self.prefetch_in_use += u32::from(row.prefetch);
        self.peak = self.peak.max(self.in_use);
        i
    }

    /// Row `i`, allocated `PENDING`, completes at `ready`.
    pub fn resolve(&mut self, i: u32, ready: Ps) {
        let row = &mut self.rows[i as usize];
        row.ready = ready;
        self.ready.push(ready, i, row.die);
    }

    /// Earliest completion of an in-flight row whose completion is known.
    #[inline]
    pub fn next_ready(&self) -> Option<Ps> {
        self.ready.peek().map(|(t, _)| t)
    }

    /// Remove and return the earliest row if it is ready by `t`.
    #[inline(always)]
    pub fn pop_ready(&mut self, t: Ps) -> Option<Row> {
        let (ready, i) = self.ready.peek()?;
        if ready > t {
            return None;
        }
        self.ready.pop();
        let row = self.rows[i as usize];
        self.map.remove(row.line, i);
        self.free.push(i);
        self.in_use -= 1;
        self.prefetch_in_use -= u32::from(row.prefetch);
        Some(row)
    }
}

/// Store `value` in a freed slot of `slots` if `free` holds one, else in a new one; returns its
/// index. Slots are reused so that indexes held elsewhere stay small and the vector stops growing
/// at the peak number in use (MSHR rows here, compat's open responses in compat.rs).
#[inline(always)]
pub(super) fn take_slot<T>(slots: &mut Vec<T>, free: &mut Vec<u32>, value: T) -> u32 {
    match free.pop() {
        Some(i) => {
            slots[i as usize] = value;
            i
        }
        None => {
            slots.push(value);
            slots.len() as u32 - 1
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use rustc_hash::FxHashMap;

    use super::*;

    /// Random allocations (per-die completions mostly in order, some not, some off flash, many
    /// equal times, lines repeated without merging) and retirements: rows come out in the
    /// (ready, row) order of one heap of all rows, and `find` agrees with a hash map of each
    /// line's newest row while the line table grows and removes.
    #[test]
    fn pops_in_heap_order_and_finds_the_newest_row() {
        // 64 dies is the default device's; 5 is not a power of two. (A winner tree over the
        // FIFOs' heads with a bug, tried in session 12, passed at 4 dies and failed at 64.)
        for dies in [4u32, 64, 5] {
            pops_in_heap_order(dies);
        }
    }

    fn pops_in_heap_order(dies: u32) {
        let mut rng = ChaCha8Rng::seed_from_u64(11 + u64::from(dies));
        let mut m = Mshr::new(0, 1, 1 << 20, dies);
        let mut heap: BinaryHeap<Reverse<(Ps, u32)>> = BinaryHeap::new();
        let mut newest: FxHashMap<u64, u32> = FxHashMap::default();
        let mut die_free = vec![0u64; dies as usize];
        let mut line_of: Vec<u64> = Vec::new();
        let mut now = 0u64;
        for step in 0..200_000 {
            if rng.gen_bool(0.52) {
                let line = rng.gen_range(0..300u64);
                let die = rng.gen_range(0..=dies);
                let ready = if die < dies && rng.gen_bool(0.95) {
                    die_free[die as usize] = die_free[die as usize].max(now) + rng.gen_range(0..3);
                    die_free[die as usize]
                } else {
                    now + rng.gen_range(0..40)
                };
                let die = (die < dies).then_some(die);
                let row = Row {
                    line,
                    ready,
                    kind: Kind::Fill,
                    merged: 1,
                    prefetch: false,
                    demanded: true,
                    dirty: 0,
                    resp_bytes: 0,
                    resp_count: 0,
                    pin: false,
                    die,
                };
                let i = m.alloc(row);
                heap.push(Reverse((ready, i)));
                newest.insert(line, i);
                line_of.resize(line_of.len().max(i as usize + 1), 0);
                line_of[i as usize] = line;
            } else {
                now += rng.gen_range(0..4);
                loop {
                    let expect = heap.peek().filter(|r| r.0 .0 <= now).map(|r| r.0);
                    let got = m.pop_ready(now).map(|r| (r.ready, r.line));
                    assert_eq!(got, expect.map(|(t, i)| (t, line_of[i as usize])), "{dies} dies, step {step}");
                    let Some((_, i)) = expect else { break };
                    heap.pop();
                    let line = line_of[i as usize];
                    if newest.get(&line) == Some(&i) {
                        newest.remove(&line);
                    }
                }
            }
            assert_eq!(m.next_ready(), heap.peek().map(|r| r.0 .0));
            let probe = rng.gen_range(0..300u64);
            assert_eq!(m.find(probe), newest.get(&probe).copied(), "step {step}, line {probe}");
        }
        assert!(m.peak > 16, "the line table grew: peak {}", m.peak);
    }

    /// The line table against a hash map with few buckets, where keys often overflow their home
    /// bucket (and the last bucket's into the first): inserts (new lines and new rows of present
    /// ones), removals of the newest row and of a stale one, lookups of present and absent lines,
    /// and growth; every bucket's `passed` equals the keys stored past it.
    #[test]
    fn line_table_agrees_with_a_map_when_buckets_overflow() {
        let mut overflowed = 0;
        for seed in 0..40 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut t = LineTable::new(4);
            let mut model: FxHashMap<u64, u32> = FxHashMap::default();
            let span = rng.gen_range(8..200u64);
            for step in 0..3000u32 {
                let line = rng.gen_range(0..span);
                match rng.gen_range(0..3) {
                    0 | 1 if model.len() < 14 => {
                        t.insert(line, step);
                        model.insert(line, step);
                    }
                    _ => {
                        let row = match model.get(&line) {
                            Some(&r) if rng.gen_bool(0.8) => r,
                            _ => step,
                        };
                        t.remove(line, row);
                        if model.get(&line) == Some(&row) {
                            model.remove(&line);
                        }
                    }
                }
                assert_eq!(t.len, model.len(), "seed {seed} step {step}");
                let probe = rng.gen_range(0..span + 10);
                assert_eq!(t.get(probe), model.get(&probe).copied(), "seed {seed} step {step} line {probe}");
                let n = t.buckets.len();
                let mut passed = vec![0u32; n];
                for (b, bucket) in t.buckets.iter().enumerate() {
                    assert_eq!(bucket.keys[SLOTS], 0);
                    for &k in bucket.keys.iter().filter(|&&k| k != 0) {
                        let mut p = t.home(k);
                        while p != b {
                            passed[p] += 1;
                            p = (p + 1) % n;
                        }
                    }
                }
                assert_eq!(t.buckets.iter().map(|b| b.passed).collect::<Vec<_>>(), passed, "seed {seed} step {step}");
                overflowed += usize::from(passed.iter().any(|&p| p > 0));
            }
            for (&line, &row) in &model {
                assert_eq!(t.get(line), Some(row));
            }
        }
        assert!(overflowed > 5000, "keys overflowed their home bucket in {overflowed} states");
    }
}
