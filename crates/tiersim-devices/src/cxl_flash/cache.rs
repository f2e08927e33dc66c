//! The device DRAM cache's tag store: `sets` x `ways` lines of one flash mapping unit each, with a
//! valid and a dirty bit per sub-block (64 B for 4 KiB lines: at most 64 sub-blocks per line),
//! a flag byte per line and a replacement policy from `replacement::REGISTRY`. Sets are indexed by
//! line modulo sets, or by a hash of the line when `cache_index_hash` is on (MQSim_CXL only has
//! the modulo). Arrays are zero-initialised, so the OS backs them only as lines are used.

use rustc_hash::FxHashMap;

use super::replacement::{Replacement, SetView, Shape, PINNED};

/// Line flag: filled by a prefetch and not yet used by a demand access.
pub const PREFETCHED: u8 = 1;

/// Above this associativity a set is found through a hash map instead of a scan of its tags
/// (a fully associative 8 GiB cache has 2M ways).
const SCAN_WAYS: u32 = 64;

/// A line pushed out of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evicted {
    pub line: u64,
    pub dirty: u64,
    pub valid: u64,
    pub flags: u8,
}

pub struct Cache {
    pub sets: usize,
    pub ways: u32,
    hash: bool,
    /// line + 1 per slot; 0 = empty.
    tags: Vec<u64>,
    pub dirty: Vec<u64>,
    pub valid: Vec<u64>,
    pub flags: Vec<u8>,
    /// Ways in use per set (sets fill way by way and never shrink).
    used: Vec<u32>,
    pinned: Vec<u32>,
    map: Option<FxHashMap<u64, u32>>,
    repl: Box<dyn Replacement>,
}

#[inline]
fn mix(x: u64) -> u64 {
    // splitmix64's finalizer: every input bit moves every output bit.
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Cache {
    pub fn new(shape: Shape, hash: bool, repl: Box<dyn Replacement>) -> Cache {
        let slots = shape.sets * shape.ways as usize;
        Cache {
            sets: shape.sets,
            ways: shape.ways,
            hash,
            tags: vec![0; slots],
            dirty: vec![0; slots],
            valid: vec![0; slots],
            flags: vec![0; slots],
            used: vec![0; shape.sets],
            pinned: vec![0; shape.sets],
            map: (shape.ways > SCAN_WAYS).then(FxHashMap::default),
            repl,
        }
    }

    #[inline]
    pub fn set_of(&self, line: u64) -> usize {
        let x = if self.hash { mix(line) } else { line };
        (x % self.sets as u64) as usize
    }

    #[inline]
    pub fn lookup(&self, line: u64) -> Option<u32> {
        if let Some(m) = &self.map {
            return m.get(&line).copied();
        }
        let set = self.set_of(line);
        let first = set * self.ways as usize;
        let n = self.used[set] as usize;
        self.tags[first..first + n].iter().position(|&t| t == line + 1).map(|w| (first + w) as u32)
    }

    #[inline]
    pub fn line_of(&self, slot: u32) -> u64 {
        self.tags[slot as usize] - 1
    }

    #[inline]
    pub fn hit(&mut self, slot: u32) {
        let set = slot as usize / self.ways as usize;
        self.repl.hit(set, slot);
    }

    /// Place `line` (not present) in its set; returns its slot, clean and invalid, and the line
    /// it displaced.
    pub fn allocate(&mut self, line: u64) -> (u32, Option<Evicted>) {
        let set = self.set_of(line);
        let first = (set * self.ways as usize) as u32;
        let (slot, evicted) = if self.used[set] < self.ways {
            self.used[set] += 1;
            (first + self.used[set] - 1, None)
        } else {
            let view = SetView { set, first, ways: self.ways, dirty: &self.dirty, flags: &self.flags };
            let s = self.repl.victim(&view);
            let i = s as usize;
            let e = Evicted { line: self.tags[i] - 1, dirty: self.dirty[i], valid: self.valid[i], flags: self.flags[i] };
            if e.flags & PINNED != 0 {
                self.pinned[set] -= 1;
            }
            if let Some(m) = &mut self.map {
                m.remove(&e.line);
            }
            (s, Some(e))
        };
        let i = slot as usize;
        self.tags[i] = line + 1;
        self.dirty[i] = 0;
        self.valid[i] = 0;
        self.flags[i] = 0;
        if let Some(m) = &mut self.map {
            m.insert(line, slot);
        }
        self.repl.insert(set, slot);
        (slot, evicted)
    }

    /// Pin the line in `slot` unless its set already has `max` pinned lines.
    pub fn pin(&mut self, slot: u32, max: u32) -> bool {
        let i = slot as usize;
        if self.flags[i] & PINNED != 0 {
            return true;
        }
        let set = i / self.ways as usize;
        if self.pinned[set] >= max {
            return false;
        }
        self.pinned[set] += 1;
        self.flags[i] |= PINNED;
        true
    }

    /// Lines currently cached.
    pub fn resident(&self) -> u64 {
        self.used.iter().map(|&u| u64::from(u)).sum()
    }
}
