//! A memory node as the engine runs it: the node's devices (an interleave set of `count`
//! identical devices, like 4 CXL modules or 6 Optane DIMMs behind one NUMA node), its page
//! frames, watermarks and LRU lists.

use tiersim_core::Result;
use tiersim_devices::InterleaveSet;

use crate::latency::LatencyHist;
use crate::platform::NodeSpec;

/// Counters kept per node: `epoch` counts the current epoch, `total` the epochs flushed, so
/// an access updates one set. An access does not count `reads` (reads = accesses - writes,
/// filled in when an epoch is flushed).
#[derive(Debug, Default, Clone, Copy)]
pub struct Counters {
    pub accesses: u64,
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
    pub latency_sum: u64,
    /// Pages migrated into / out of the node (promotions, demotions, NUMA moves).
    pub migrated_in: u64,
    pub migrated_out: u64,
}

impl Counters {
    fn add(&mut self, c: &Counters) {
        self.accesses += c.accesses;
        self.reads += c.reads;
        self.writes += c.writes;
        self.bytes += c.bytes;
        self.latency_sum += c.latency_sum;
        self.migrated_in += c.migrated_in;
        self.migrated_out += c.migrated_out;
    }
}

pub use crate::pagetable::NIL;

/// One LRU list: head = most recently added, tail = next to age or reclaim.
#[derive(Debug, Clone, Copy)]
pub struct List {
    pub head: u32,
    pub tail: u32,
    pub len: u64,
}

impl List {
    pub const EMPTY: List = List { head: NIL, tail: NIL, len: 0 };
}

pub struct Node {
    pub spec: NodeSpec,
    pub dev: InterleaveSet,
    pub capacity: u64,
    pub used: u64,
    /// Free frames held out of the allocator (AutoTiering's per-CPU promotion pools).
    pub reserved: u64,
    /// Frames of other software's pages on the node, [anonymous, file] (`occupied`): not the
    /// trace's, never accessed, at the tail of the inactive lists (reclaim takes them first).
    pub occupied: [Vec<u32>; 2],
    pub peak_used: u64,
    free_frames: Vec<u32>,
    next_frame: u32,
    pub wmark_min: u64,
    pub wmark_low: u64,
    pub wmark_high: u64,
    /// The four LRU lists (inactive/active x anon/file, indexed by `lru::list_of`).
    pub lists: [List; 4],
    /// Pages reclaim has taken from the anon and the file lists, for get_scan_count's balance.
    pub scanned: [u64; 2],
    /// Pages evicted from and activated on the node (lruvec->nonresident_age, `os/workingset.rs`).
    pub nonresident_age: u64,
    /// Reclaim's recent cost of each kind, [anon, file] (lruvec->anon_cost, file_cost).
    pub reclaim_cost: [u64; 2],
    pub total: Counters,
    pub epoch: Counters,
    /// Latencies of the node's measured accesses (the run's histogram is the nodes' sum).
    pub(crate) hist: LatencyHist,
}

impl Node {
    pub fn new(spec: NodeSpec, wmarks: (u64, u64, u64)) -> Result<Node> {
        let entry = tiersim_devices::find(&spec.device)?;
        let dev = InterleaveSet::build(entry.build, &spec.params, spec.count, spec.interleave)?;
        let mut node = Node {
            capacity: spec.capacity_pages,
            occupied: [Vec::new(), Vec::new()],
            dev,
            used: 0,
            reserved: 0,
            peak_used: 0,
            free_frames: Vec::new(),
            next_frame: 0,
            wmark_min: wmarks.0,
            wmark_low: wmarks.1,
            wmark_high: wmarks.2,
            lists: [List::EMPTY; 4],
            scanned: [0; 2],
            nonresident_age: 0,
            reclaim_cost: [0; 2],
            total: Counters::default(),
            epoch: Counters::default(),
            hist: LatencyHist::new()?,
            spec,
        };
        let [anon, file] = node.spec.occupied_pages;
        node.next_frame = (anon + file) as u32;
        node.occupied = [(0..anon as u32).collect(), (anon as u32..(anon + file) as u32).collect()];
        Ok(node)
    }

    /// Pages of other software on the node (`occupied`).
    #[inline]
    pub fn occupied_pages(&self) -> u64 {
        (self.occupied[0].len() + self.occupied[1].len()) as u64
    }

    /// End the epoch: its counters, with reads filled in, are added to the total and returned.
    pub fn fold_epoch(&mut self) -> Counters {
        let mut c = std::mem::take(&mut self.epoch);
        c.reads = c.accesses - c.writes;
        self.total.add(&c);
        c
    }

    #[inline]
    pub fn free(&self) -> u64 {
        self.capacity - self.used - self.reserved - self.occupied_pages()
    }

    /// Room for a migration: free memory above the high watermark plus the page
    /// (migrate_balanced_pgdat, policies.md 2.2).
    #[inline]
    pub fn has_room(&self) -> bool {
        self.free() > self.wmark_high + 1
    }

    /// Take a frame; the caller has checked there is one.
    pub fn take_frame(&mut self) -> u32 {
        debug_assert!(self.used + self.reserved + self.occupied_pages() < self.capacity);
        self.used += 1;
        self.peak_used = self.peak_used.max(self.used);
        self.free_frames.pop().unwrap_or_else(|| {
            self.next_frame += 1;
            self.next_frame - 1
        })
    }

    /// Give up the frame of one of other software's pages of `file` kind (reclaim took it);
    /// None if the node holds none.
    pub fn release_occupied(&mut self, file: bool) -> Option<u32> {
        let frame = self.occupied[file as usize].pop()?;
        self.free_frames.push(frame);
        Some(frame)
    }

    /// A frame for one of other software's pages demoted here; the caller has checked there is
    /// one.
    pub fn take_occupied(&mut self, file: bool) -> u32 {
        debug_assert!(self.free() > 0);
        let frame = self.free_frames.pop().unwrap_or_else(|| {
            self.next_frame += 1;
            self.next_frame - 1
        });
        self.occupied[file as usize].push(frame);
        frame
    }

    pub fn release_frame(&mut self, frame: u32) {
        debug_assert!(self.used > 0);
        self.used -= 1;
        self.free_frames.push(frame);
    }
}
