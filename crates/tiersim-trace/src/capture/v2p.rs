//! Virtual-to-physical page mapping for `tiersim capture`.
//!
//! - `Pagemap` reads the frame of a virtual page from /proc/PID/pagemap (Linux
//!   Documentation/admin-guide/mm/pagemap.rst: one little-endian u64 per 4 KiB page, bit 63
//!   present, bit 62 swapped, bit 56 exclusively mapped, bits 0-54 the frame number, zero
//!   without CAP_SYS_ADMIN). The CXL-flash study recorded page-table updates in the kernel
//!   instead (sec. 3.1); reading pagemap needs no kernel change, but it only sees a mapping when
//!   it looks, so the capture looks again at pages whose frame may still change (see
//!   `Lookup::Frame::exclusive`).
//! - `Buddy` models the kernel's binary buddy allocator (Knowlton 1965; Linux mm/page_alloc.c):
//!   free blocks of 2^k frames per order, an order-0 request takes a block of the smallest
//!   non-empty order and splits it, keeping the low half and freeing the upper halves
//!   (`expand()`), each pushed at the head of its list. Memory is first fragmented by other
//!   tenants: each frame is held with probability `fragmentation`, the rest coalesces into the
//!   largest aligned free blocks, and each order's list is in the random order the tenants freed
//!   them (a fresh machine, `fragmentation` 0, has its blocks in address order, as boot frees
//!   them). Deviations: no per-CPU page lists, migrate types or zones, and the program never
//!   frees a page.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap;
use tiersim_core::{Error, Result};

/// Bytes per pagemap entry, and the page size its entries describe.
pub const PAGEMAP_ENTRY: u64 = 8;
pub const PAGEMAP_PAGE: u64 = 4096;
const PRESENT: u64 = 1 << 63;
const SWAPPED: u64 = 1 << 62;
const EXCLUSIVE: u64 = 1 << 56;
const PFN_MASK: u64 = (1 << 55) - 1;

/// What pagemap says about one virtual page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// `exclusive`: only this mapping uses the frame (a written private page). Others (the
    /// shared zero page a read of untouched memory maps, shared file pages) may move to a new
    /// frame on a write (copy-on-write).
    Frame { frame: u64, exclusive: bool },
    /// Present, but the frame number reads as 0: the reader lacks CAP_SYS_ADMIN.
    Hidden,
    /// Not in memory (not yet touched, swapped out, or unmapped), or the process is gone.
    Absent,
}

pub struct Pagemap {
    pid: u32,
    path: PathBuf,
    /// Opened at the first look-up: the file follows the address space that exists when it is
    /// opened, and Valgrind's launcher execs the tool (the guest's address space) after it starts.
    file: Option<File>,
    /// Entries the program read from its own pagemap while it ran (the instrumented path's
    /// runtime), by virtual page; the program is gone, so a page missing here stays missing.
    snapshot: Option<FxHashMap<u64, u64>>,
}

impl Pagemap {
    /// Check that the pagemap of `pid` can be read.
    pub fn open(pid: u32) -> std::io::Result<Pagemap> {
        let path = PathBuf::from(format!("/proc/{pid}/pagemap"));
        File::open(&path)?;
        Ok(Pagemap { pid, path, file: None, snapshot: None })
    }

    /// Entries read earlier (`path` names where they came from).
    pub fn snapshot(path: PathBuf, entries: FxHashMap<u64, u64>) -> Pagemap {
        Pagemap { pid: 0, path, file: None, snapshot: Some(entries) }
    }

    pub fn is_snapshot(&self) -> bool {
        self.snapshot.is_some()
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The entry of virtual page `vpn` (4 KiB pages).
    pub fn lookup(&mut self, vpn: u64) -> Lookup {
        if let Some(t) = &self.snapshot {
            return t.get(&vpn).map_or(Lookup::Absent, |&e| decode(e));
        }
        if self.file.is_none() {
            self.file = File::open(&self.path).ok();
        }
        let Some(file) = &self.file else { return Lookup::Absent };
        let mut b = [0u8; PAGEMAP_ENTRY as usize];
        // A process that has exited reads as empty; every failure means "not known now".
        match file.read_exact_at(&mut b, vpn.saturating_mul(PAGEMAP_ENTRY)) {
            Ok(()) => decode(u64::from_le_bytes(b)),
            Err(_) => Lookup::Absent,
        }
    }
}

/// Decode one pagemap entry.
pub fn decode(e: u64) -> Lookup {
    if e & PRESENT == 0 || e & SWAPPED != 0 {
        Lookup::Absent
    } else if e & PFN_MASK == 0 {
        Lookup::Hidden
    } else {
        Lookup::Frame { frame: e & PFN_MASK, exclusive: e & EXCLUSIVE != 0 }
    }
}

/// Geometry and state of the buddy model's memory before the program starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BuddyConfig {
    /// Frames of physical memory.
    pub frames: u64,
    /// Largest block is 2^max_order frames (Linux: 10, 4 MiB of 4 KiB pages).
    pub max_order: u32,
    /// Share of frames held by other tenants, chosen at random, before the program starts.
    pub fragmentation: f64,
    pub seed: u64,
}

pub struct Buddy {
    /// Start frames of the free blocks, per order; the head of each list is its last element.
    free: Vec<Vec<u64>>,
    free_frames: u64,
    held_frames: u64,
}

impl Buddy {
    pub fn new(cfg: &BuddyConfig) -> Result<Buddy> {
        if cfg.frames == 0 {
            return Err(Error::config("phys_mem", "physical memory must hold at least one page"));
        }
        if !(0.0..1.0).contains(&cfg.fragmentation) {
            return Err(Error::config("fragmentation", format!("{} is outside [0, 1)", cfg.fragmentation)));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let words = cfg.frames.div_ceil(64) as usize;
        let mut held = vec![0u64; words];
        let mut held_frames = 0;
        if cfg.fragmentation > 0.0 {
            for f in 0..cfg.frames {
                if rng.gen_bool(cfg.fragmentation) {
                    held[(f / 64) as usize] |= 1 << (f % 64);
                    held_frames += 1;
                }
            }
        }
        let mut b = Buddy { free: vec![Vec::new(); cfg.max_order as usize + 1], free_frames: 0, held_frames };
        // Cover memory with the largest aligned blocks that fit, then split those that hold a
        // tenant's frame: what freeing every other frame and coalescing buddies leaves.
        let mut start = 0;
        while start < cfg.frames {
            let mut order = cfg.max_order.min(start.trailing_zeros());
            while start + (1 << order) > cfg.frames {
                order -= 1;
            }
            b.add_free(&held, start, order);
            start += 1 << order;
        }
        for list in &mut b.free {
            if cfg.fragmentation > 0.0 {
                list.shuffle(&mut rng);
            } else {
                list.reverse();
            }
        }
        Ok(b)
    }

    fn add_free(&mut self, held: &[u64], start: u64, order: u32) {
        let len = 1u64 << order;
        if !any_held(held, start, len) {
            self.free[order as usize].push(start);
            self.free_frames += len;
        } else if order > 0 {
            self.add_free(held, start, order - 1);
            self.add_free(held, start + len / 2, order - 1);
        }
    }

    /// One frame, or `None` when memory is full.
    pub fn alloc(&mut self) -> Option<u64> {
        let k = self.free.iter().position(|s| !s.is_empty())?;
        let start = self.free[k].pop()?;
        for j in (0..k).rev() {
            self.free[j].push(start + (1 << j));
        }
        self.free_frames -= 1;
        Some(start)
    }

    pub fn free_frames(&self) -> u64 {
        self.free_frames
    }

    pub fn held_frames(&self) -> u64 {
        self.held_frames
    }

    /// Free blocks per order (for tests and reports).
    pub fn free_blocks(&self) -> Vec<usize> {
        self.free.iter().map(Vec::len).collect()
    }
}

/// Whether any frame in `start..start + len` is held.
fn any_held(held: &[u64], start: u64, len: u64) -> bool {
    let (mut f, end) = (start, start + len);
    while f < end {
        let (w, bit) = ((f / 64) as usize, f % 64);
        let n = (64 - bit).min(end - f);
        let mask = if n == 64 { u64::MAX } else { ((1u64 << n) - 1) << bit };
        if held[w] & mask != 0 {
            return true;
        }
        f += n;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(frames: u64, max_order: u32, fragmentation: f64, seed: u64) -> BuddyConfig {
        BuddyConfig { frames, max_order, fragmentation, seed }
    }

    #[test]
    fn unfragmented_memory_hands_out_frames_in_order() {
        let mut b = Buddy::new(&cfg(64, 3, 0.0, 1)).unwrap();
        // 64 frames = 8 blocks of order 3.
        assert_eq!(b.free_blocks(), vec![0, 0, 0, 8]);
        let got: Vec<u64> = (0..64).map(|_| b.alloc().unwrap()).collect();
        assert_eq!(got, (0..64).collect::<Vec<_>>());
        assert_eq!(b.alloc(), None);
    }

    #[test]
    fn split_keeps_the_low_half_and_frees_the_upper_halves() {
        let mut b = Buddy::new(&cfg(8, 3, 0.0, 1)).unwrap();
        assert_eq!(b.alloc(), Some(0));
        // 8 = [0] taken, [1] order 0, [2,3] order 1, [4..8) order 2.
        assert_eq!(b.free_blocks(), vec![1, 1, 1, 0]);
        assert_eq!(b.free_frames(), 7);
    }

    #[test]
    fn tail_that_is_not_a_whole_block_is_still_used() {
        // 13 = 8 + 4 + 1 frames.
        let mut b = Buddy::new(&cfg(13, 3, 0.0, 1)).unwrap();
        assert_eq!(b.free_blocks(), vec![1, 0, 1, 1]);
        // Smallest order first: frame 12, then the order-2 block, then the order-3 block.
        let got: Vec<u64> = (0..13).map(|_| b.alloc().unwrap()).collect();
        assert_eq!(got, vec![12, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn fragmented_memory_coalesces_what_is_free_and_never_gives_a_held_frame() {
        for (frag, seed) in [(0.1, 1), (0.5, 2), (0.9, 3)] {
            let c = cfg(1 << 14, 10, frag, seed);
            let mut b = Buddy::new(&c).unwrap();
            assert_eq!(b.free_frames() + b.held_frames(), 1 << 14);
            // About `frag` of the frames are held.
            let share = b.held_frames() as f64 / (1 << 14) as f64;
            assert!((share - frag).abs() < 0.02, "{share} vs {frag}");
            // Free blocks are aligned, disjoint, and each pair of buddies is never both free at
            // the same order (they would have coalesced).
            let mut covered = vec![false; 1 << 14];
            let sets: Vec<std::collections::HashSet<u64>> =
                b.free.iter().map(|l| l.iter().copied().collect()).collect();
            for (k, set) in sets.iter().enumerate() {
                for &s in set {
                    assert_eq!(s % (1 << k), 0);
                    for f in s..s + (1 << k) {
                        assert!(!covered[f as usize]);
                        covered[f as usize] = true;
                    }
                    if k < 10 {
                        assert!(
                            !set.contains(&(s ^ (1 << k))),
                            "buddies {s} and {} both free at order {k}",
                            s ^ (1 << k)
                        );
                    }
                }
            }
            let free = b.free_frames();
            let mut got: Vec<u64> = (0..free).map(|_| b.alloc().unwrap()).collect();
            assert_eq!(b.alloc(), None);
            got.sort_unstable();
            got.dedup();
            assert_eq!(got.len() as u64, free);
            assert!(got.iter().all(|&f| covered[f as usize]));
        }
    }

    #[test]
    fn fragmentation_scatters_consecutive_pages() {
        // Mean distance between consecutively allocated frames: 1 on a fresh machine; on a
        // fragmented one the scattered single free frames go first, in the tenants' random
        // order, about a third of memory apart (the mean gap of two uniform points).
        let gap = |frag| {
            let mut b = Buddy::new(&cfg(1 << 16, 10, frag, 7)).unwrap();
            let v: Vec<u64> = (0..1000).map(|_| b.alloc().unwrap()).collect();
            v.windows(2).map(|w| w[0].abs_diff(w[1])).sum::<u64>() as f64 / 999.0
        };
        assert_eq!(gap(0.0), 1.0);
        for frag in [0.3, 0.6] {
            let g = gap(frag) / (1 << 16) as f64;
            assert!((0.28..0.39).contains(&g), "fragmentation {frag}: mean gap {g} of memory");
        }
    }

    #[test]
    fn same_seed_same_frames() {
        let run = |seed| {
            let mut b = Buddy::new(&cfg(1 << 12, 10, 0.4, seed)).unwrap();
            (0..100).map(|_| b.alloc().unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }

    #[test]
    fn pagemap_entries_decode() {
        assert_eq!(decode(0x8100_0000_001a_9113), Lookup::Frame { frame: 0x1a9113, exclusive: true });
        assert_eq!(decode(0x8000_0000_001a_9113), Lookup::Frame { frame: 0x1a9113, exclusive: false });
        assert_eq!(decode(1 << 63), Lookup::Hidden);
        assert_eq!(decode(0), Lookup::Absent);
        assert_eq!(decode((1 << 63) | (1 << 62) | 5), Lookup::Absent);
    }

    #[test]
    fn pagemap_of_this_process_sees_a_touched_page() {
        let v = vec![1u8; 3 * PAGEMAP_PAGE as usize];
        let vpn = (v.as_ptr() as u64).div_ceil(PAGEMAP_PAGE);
        let mut pm = Pagemap::open(std::process::id()).unwrap();
        // Frame numbers need CAP_SYS_ADMIN; without it the page still reads as present.
        assert!(matches!(pm.lookup(vpn), Lookup::Frame { exclusive: true, .. } | Lookup::Hidden));
        // The top of the address space is never mapped.
        assert_eq!(pm.lookup((1 << 47) / PAGEMAP_PAGE - 1), Lookup::Absent);
        drop(v);
    }
}
