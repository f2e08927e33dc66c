//! The flash back end: `channels` x `ways` dies (one die per way of a channel), each with
//! `planes` planes of `blocks_per_plane` blocks of `pages_per_block` pages. A die does one
//! operation at a time, in the order they are booked (its queue): a read holds it for the array
//! read and until its data has crossed the channel; a program for the data transfer in and the
//! array program (one multi-plane program writes a page in every plane); an erase for the erase.
//! Read and program latencies may differ by page type (LSB/CSB/MSB, page index modulo the list
//! length), which MQSim_CXL sets equal. A channel moves one transfer at a time at its rate, and a
//! transfer takes the first free gap at or after the time it is ready, so a later-booked
//! transfer can use an idle channel before an earlier-booked one that waits for its die. Transfer
//! time is bytes / rate rounded up to a picosecond and never zero (MQSim's B2 truncated it to
//! 0 ns above 1000 MT/s). Command/address cycles hold the channel only when `Timing` gives them
//! (MQSim_CXL's, in its compatibility mode). Not modelled: program/erase suspension, read retry
//! and ECC decode.

use serde_json::json;

use crate::pipe::{ns_f64, Pipe, Ps};

/// Busy intervals of one channel, sorted and disjoint. Intervals closer than `min_gap` (the
/// shortest transfer, which no hole smaller than it can take) merge, so a saturated channel stays
/// one interval and a booking never scans useless holes.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    busy: Vec<(Ps, Ps)>,
    min_gap: Ps,
}

impl Timeline {
    pub fn new(min_gap: Ps) -> Timeline {
        Timeline { busy: Vec::new(), min_gap }
    }

    /// Book `dur` at the first gap starting at or after `at`; returns (start, end).
    pub fn book(&mut self, at: Ps, dur: Ps) -> (Ps, Ps) {
        // First interval that ends after `at`: everything before it is irrelevant.
        let mut i = self.busy.partition_point(|&(_, e)| e <= at);
        let mut start = at;
        while i < self.busy.len() {
            let (s, e) = self.busy[i];
            if start.saturating_add(dur) <= s {
                break;
            }
            start = start.max(e);
            i += 1;
        }
        let end = start.saturating_add(dur);
        // Insert at i, merging with touching neighbours.
        let merge_prev = i > 0 && start - self.busy[i - 1].1 < self.min_gap.max(1);
        let merge_next = i < self.busy.len() && self.busy[i].0 - end < self.min_gap.max(1);
        match (merge_prev, merge_next) {
            (true, true) => {
                self.busy[i - 1].1 = self.busy[i].1;
                self.busy.remove(i);
            }
            (true, false) => self.busy[i - 1].1 = end,
            (false, true) => self.busy[i].0 = start,
            (false, false) => self.busy.insert(i, (start, end)),
        }
        (start, end)
    }

    /// Forget intervals that end before `t` (no booking will come before it).
    pub fn prune(&mut self, t: Ps) {
        let k = self.busy.partition_point(|&(_, e)| e < t);
        if k > 0 {
            self.busy.drain(..k);
        }
    }

    pub fn len(&self) -> usize {
        self.busy.len()
    }

    pub fn is_empty(&self) -> bool {
        self.busy.is_empty()
    }
}

/// Channel timelines longer than this are pruned (shorter ones cost less to search than to prune).
const PRUNE_LEN: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub channels: u32,
    pub ways: u32,
    pub planes: u32,
    pub blocks_per_plane: u32,
    pub pages_per_block: u32,
    pub page_size: u64,
    /// Mapping unit (the cache line).
    pub unit: u64,
    pub units_per_page: u32,
}

impl Geometry {
    pub fn dies(&self) -> u32 {
        self.channels * self.ways
    }
    pub fn planes_total(&self) -> u64 {
        u64::from(self.dies()) * u64::from(self.planes)
    }
    pub fn units_per_block(&self) -> u64 {
        u64::from(self.pages_per_block) * u64::from(self.units_per_page)
    }
    pub fn physical_units(&self) -> u64 {
        self.planes_total() * u64::from(self.blocks_per_plane) * self.units_per_block()
    }
    pub fn physical_bytes(&self) -> u64 {
        self.physical_units() * self.unit
    }
    /// Channel of a die: consecutive dies sit on consecutive channels (channel-first striping).
    #[inline]
    pub fn channel_of(&self, die: u32) -> u32 {
        // A mask when it is one: a division costs tens of cycles on every flash operation.
        if self.channels.is_power_of_two() {
            die & (self.channels - 1)
        } else {
            die % self.channels
        }
    }
}

#[derive(Debug, Clone)]
pub struct Timing {
    pub read: Vec<Ps>,
    pub program: Vec<Ps>,
    pub erase: Ps,
    /// Channel time of a read's / a program's command and address cycles before the array
    /// operation (0 unless MQSim_CXL's ONFI NVDDR2 cycles are reproduced).
    pub read_command: Ps,
    pub program_command: Ps,
}

#[derive(Debug, Clone, Default)]
struct Die {
    free: Ps,
    busy: Ps,
    wait: Ps,
    wait_max: Ps,
    ops: u64,
}

/// Counts of flash operations.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpCounts {
    pub reads: u64,
    pub programs: u64,
    pub erases: u64,
    pub read_bytes: u64,
    pub program_bytes: u64,
}

pub struct Flash {
    pub geo: Geometry,
    pub timing: Timing,
    dies: Vec<Die>,
    channels: Vec<Timeline>,
    /// At least the number of intervals of the longest channel timeline (exact after `prune`).
    longest: usize,
    /// Channel rate, for transfer times.
    rate: Pipe,
    instant: bool,
    channel_busy: Ps,
    pub ops: OpCounts,
}

impl Flash {
    pub fn new(geo: Geometry, timing: Timing, channel_bandwidth: f64) -> Flash {
        Flash {
            dies: vec![Die::default(); geo.dies() as usize],
            channels: vec![Timeline::new(Pipe::new(channel_bandwidth).service(geo.unit)); geo.channels as usize],
            longest: 0,
            rate: Pipe::new(channel_bandwidth),
            instant: channel_bandwidth.is_infinite(),
            geo,
            timing,
            channel_busy: 0,
            ops: OpCounts::default(),
        }
    }

    /// Channel time of `bytes`; none at an infinite rate (MQSim_CXL's truncated t_RC).
    #[inline]
    pub fn transfer(&self, bytes: u64) -> Ps {
        if self.instant {
            0
        } else {
            self.rate.service(bytes)
        }
    }

    /// The die is taken from `at` (or when it frees); returns the start.
    #[inline]
    fn acquire(&mut self, die: u32, at: Ps) -> Ps {
        let d = &mut self.dies[die as usize];
        let start = at.max(d.free);
        let wait = start - at;
        d.wait = d.wait.saturating_add(wait);
        d.wait_max = d.wait_max.max(wait);
        d.ops += 1;
        start
    }

    #[inline]
    fn release(&mut self, die: u32, start: Ps, end: Ps) {
        let d = &mut self.dies[die as usize];
        d.free = end;
        d.busy = d.busy.saturating_add(end - start);
    }

    fn channel(&mut self, die: u32, at: Ps, bytes: u64) -> Ps {
        let dur = self.transfer(bytes);
        self.channel_for(die, at, dur)
    }

    fn channel_for(&mut self, die: u32, at: Ps, dur: Ps) -> Ps {
        self.book_channel(die, at, dur).1
    }

    /// Book `dur` of the die's channel at its first gap from `at`: (start, end).
    fn book_channel(&mut self, die: u32, at: Ps, dur: Ps) -> (Ps, Ps) {
        if dur == 0 {
            return (at, at);
        }
        self.channel_busy = self.channel_busy.saturating_add(dur);
        let ch = self.geo.channel_of(die) as usize;
        let booked = self.channels[ch].book(at, dur);
        self.longest = self.longest.max(self.channels[ch].len());
        booked
    }

    #[inline]
    fn latency(list: &[Ps], page: u32) -> Ps {
        // One page type (SLC-like ULL flash) needs no remainder.
        if list.len() == 1 {
            list[0]
        } else {
            list[page as usize % list.len()]
        }
    }

    /// Read `bytes` of page `page` on `die` from `at`; returns when the data has crossed the channel.
    pub fn read(&mut self, die: u32, page: u32, bytes: u64, at: Ps) -> Ps {
        let start = self.acquire(die, at);
        let commanded = self.channel_for(die, start, self.timing.read_command);
        let sensed = commanded.saturating_add(Self::latency(&self.timing.read, page));
        let done = self.channel(die, sensed, bytes);
        self.release(die, start, done);
        self.ops.reads += 1;
        self.ops.read_bytes += bytes;
        done
    }

    /// Program `bytes` (one page per plane written) of page `page` on `die`; returns when done.
    pub fn program(&mut self, die: u32, page: u32, bytes: u64, at: Ps) -> Ps {
        self.ops.programs += 1;
        self.ops.program_bytes += bytes;
        self.book_program(die, page, bytes, at)
    }

    /// The die and channel time of a program counted already (`count_program`).
    pub fn book_program(&mut self, die: u32, page: u32, bytes: u64, at: Ps) -> Ps {
        self.book_program_with(die, page, self.timing.program_command, bytes, at)
    }

    /// `book_program` with `command` of command cycles (a multi-plane program's).
    pub fn book_program_with(&mut self, die: u32, page: u32, command: Ps, bytes: u64, at: Ps) -> Ps {
        let start = self.acquire(die, at);
        let commanded = self.channel_for(die, start, command);
        let loaded = self.channel(die, commanded, bytes);
        let done = loaded.saturating_add(Self::latency(&self.timing.program, page));
        self.release(die, start, done);
        done
    }

    pub fn erase(&mut self, die: u32, at: Ps) -> Ps {
        let start = self.acquire(die, at);
        let done = start.saturating_add(self.timing.erase);
        self.release(die, start, done);
        self.ops.erases += 1;
        done
    }

    /// No booking will come before `t`: drop channel history older than it.
    /// Called before every request: returns at once while every timeline is short.
    #[inline]
    pub fn prune(&mut self, t: Ps) {
        if self.longest > PRUNE_LEN {
            self.prune_long(t);
        }
    }

    fn prune_long(&mut self, t: Ps) {
        let mut longest = 0;
        for c in &mut self.channels {
            if c.len() > PRUNE_LEN {
                c.prune(t);
            }
            longest = longest.max(c.len());
        }
        self.longest = longest;
    }

    pub fn stats(&self) -> serde_json::Value {
        die_stats(self.dies.iter().map(|d| (d.ops, d.busy, d.wait, d.wait_max)), self.channel_busy)
    }
}

/// The back end's figures from each die's (operations, busy time, queue wait, longest wait) and
/// the channels' busy time; compat's back end (tsu.rs) reports under the same keys.
pub(super) fn die_stats(dies: impl Iterator<Item = (u64, Ps, Ps, Ps)>, channel_busy: Ps) -> serde_json::Value {
    let (mut n, mut ops, mut busy, mut wait, mut wait_max) = (0usize, 0u64, 0 as Ps, 0 as Ps, 0 as Ps);
    for (o, b, w, m) in dies {
        n += 1;
        ops += o;
        busy = busy.saturating_add(b);
        wait = wait.saturating_add(w);
        wait_max = wait_max.max(m);
    }
    json!({
        "dies": n,
        "die_busy_ns": ns_f64(busy),
        "die_queue_wait_ns_total": ns_f64(wait),
        "die_queue_wait_ns_mean": if ops == 0 { 0.0 } else { ns_f64(wait) / ops as f64 },
        "die_queue_wait_ns_max": ns_f64(wait_max),
        "channel_busy_ns": ns_f64(channel_busy),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_fills_gaps_and_merges() {
        let mut t = Timeline::new(0);
        assert_eq!(t.book(100, 50), (100, 150));
        // Before the first interval, in the gap.
        assert_eq!(t.book(0, 100), (0, 100));
        // Touching both: merges into one interval [0, 150).
        assert_eq!(t.len(), 1);
        // Does not fit before 150: goes after.
        assert_eq!(t.book(20, 10), (150, 160));
        assert_eq!(t.book(300, 10), (300, 310));
        // Fits the gap [160, 300).
        assert_eq!(t.book(155, 100), (160, 260));
        assert_eq!(t.book(155, 100), (310, 410));
        t.prune(305);
        assert_eq!(t.len(), 1);
    }
}

#[cfg(test)]
mod gap_tests {
    use super::*;

    #[test]
    fn holes_smaller_than_the_shortest_transfer_close() {
        let mut t = Timeline::new(10);
        t.book(0, 100);
        // Leaves a 5-long hole [100, 105): too small for anything, so the intervals merge.
        t.book(105, 50);
        assert_eq!(t.len(), 1);
        // A 20-long hole stays usable.
        t.book(175, 10);
        assert_eq!(t.len(), 2);
        assert_eq!(t.book(150, 15), (155, 170));
    }
}
