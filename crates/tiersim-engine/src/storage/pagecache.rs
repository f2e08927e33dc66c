//! The page cache of one file, in 4 KiB pages (the kernel uses no huge pages for page-cache
//! files on ext4): LRU eviction preferring clean pages, readahead as mm/readahead.c does it
//! (ondemand_readahead: initial window from the request size, doubling on sequential hits of
//! the PG_readahead marker up to read_ahead_kb; mmap faults read around the faulting page, as
//! do_sync_mmap_readahead does), and dirty pages for the writeback of `bench.rs`, written in
//! file order from a cyclic cursor (write_cache_pages).

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;
use tiersim_core::Ns;

pub const PAGE: u64 = 4096;

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// LRU position: larger = more recently used.
    seq: u64,
    /// When the page's read completes; a hit before this waits for it.
    ready_at: Ns,
    frame: u64,
    dirty: bool,
    /// PG_readahead: a hit here starts the next asynchronous readahead window.
    marker: bool,
}

/// Per-stream (open file) readahead state, struct file_ra_state.
#[derive(Debug, Clone, Copy, Default)]
pub struct RaState {
    start: u64,
    size: u64,
    async_size: u64,
    prev_page: Option<u64>,
}

/// Pages to read: `[first, first + count)`; `sync` ones the caller waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    pub first: u64,
    pub count: u64,
    pub sync: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub readahead_pages: u64,
    pub evictions: u64,
    /// Clean -> dirty transitions.
    pub dirtied: u64,
    /// Dirty pages handed to writeback (by the flusher or by eviction).
    pub written_back: u64,
}

pub struct PageCache {
    capacity: u64,
    /// Max readahead window in pages (read_ahead_kb / 4).
    ra_pages: u64,
    file_pages: u64,
    pages: FxHashMap<u64, Entry>,
    lru: BTreeMap<u64, u64>,
    dirty: BTreeSet<u64>,
    free_frames: Vec<u64>,
    next_frame: u64,
    seq: u64,
    wb_cursor: u64,
    /// The page of the window being read that gets PG_readahead when inserted.
    pending_marker: Option<u64>,
    pub stats: CacheStats,
}

/// get_init_ra_size (mm/readahead.c).
pub(crate) fn init_ra_size(req: u64, max: u64) -> u64 {
    let n = req.max(1).next_power_of_two();
    let n = if n <= max / 32 {
        n * 4
    } else if n <= max / 4 {
        n * 2
    } else {
        max
    };
    n.min(max)
}

/// get_next_ra_size (mm/readahead.c).
pub(crate) fn next_ra_size(cur: u64, max: u64) -> u64 {
    if cur < max / 16 {
        4 * cur
    } else if cur <= max / 2 {
        2 * cur
    } else {
        max
    }
}

impl PageCache {
    pub fn new(capacity_pages: u64, ra_pages: u64, file_pages: u64) -> Self {
        PageCache {
            capacity: capacity_pages.max(1),
            ra_pages: ra_pages.max(1),
            file_pages: file_pages.max(1),
            pages: FxHashMap::default(),
            lru: BTreeMap::new(),
            dirty: BTreeSet::new(),
            free_frames: Vec::new(),
            next_frame: 0,
            seq: 0,
            wb_cursor: 0,
            pending_marker: None,
            stats: CacheStats::default(),
        }
    }

    pub fn len(&self) -> u64 {
        self.pages.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn dirty_pages(&self) -> u64 {
        self.dirty.len() as u64
    }

    pub fn contains(&self, page: u64) -> bool {
        self.pages.contains_key(&page)
    }

    fn touch(&mut self, page: u64) {
        self.seq += 1;
        let seq = self.seq;
        if let Some(e) = self.pages.get_mut(&page) {
            self.lru.remove(&e.seq);
            e.seq = seq;
            self.lru.insert(seq, page);
        }
    }

    /// A lookup of `page` for a read or write at `now`: on a hit, the page's frame and when its
    /// data is there (after `now` if a read of it is in flight); whether it carried the readahead
    /// marker, which is cleared.
    pub fn lookup(&mut self, page: u64) -> Option<(u64, Ns, bool)> {
        let e = self.pages.get_mut(&page)?;
        let marker = std::mem::take(&mut e.marker);
        let out = (e.frame, e.ready_at, marker);
        self.stats.hits += 1;
        self.touch(page);
        Some(out)
    }

    /// What a read of `[first, first + count)` must read, given which pages are missing and the
    /// stream's readahead state (`mmap`: read around the fault instead of ondemand readahead;
    /// `random`: POSIX_FADV_RANDOM / MADV_RANDOM, no readahead). Call after the lookups, with
    /// `marker_hit` set when one of them hit a readahead marker.
    // Each argument is one input of the kernel's ondemand_readahead, named at the call sites; a
    // struct built for this one call would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub fn plan_read(
        &mut self,
        ra: &mut RaState,
        first: u64,
        count: u64,
        missing: bool,
        marker_hit: bool,
        mmap: bool,
        random: bool,
    ) -> Vec<Read> {
        let max = self.ra_pages;
        let mut out = Vec::new();
        let sequential = ra.prev_page.is_some_and(|p| p + 1 == first || p == first) || first == 0;
        ra.prev_page = Some(first + count - 1);
        if missing {
            self.stats.misses += 1;
            if random {
                out.push(Read { first, count, sync: true });
            } else if mmap {
                // do_sync_mmap_readahead: ra_pages centred on the fault, a quarter async.
                let start = first.saturating_sub(max / 2);
                let size = max.max(count);
                *ra = RaState { start, size, async_size: size / 4, prev_page: ra.prev_page };
                out.push(Read { first: start, count: size, sync: true });
            } else if sequential {
                let size = if ra.start + ra.size == first && ra.size > 0 {
                    next_ra_size(ra.size, max)
                } else {
                    init_ra_size(count, max)
                };
                let size = size.max(count);
                *ra = RaState { start: first, size, async_size: size - count, prev_page: ra.prev_page };
                out.push(Read { first, count: size, sync: true });
            } else {
                out.push(Read { first, count, sync: true });
            }
        } else if marker_hit && !random {
            let start = ra.start + ra.size;
            let size = next_ra_size(ra.size.max(1), max);
            *ra = RaState { start, size, async_size: size, prev_page: ra.prev_page };
            out.push(Read { first: start, count: size, sync: false });
        }
        for r in &mut out {
            let end = (r.first + r.count).min(self.file_pages);
            r.count = end.saturating_sub(r.first);
        }
        out.retain(|r| r.count > 0);
        // The marker goes on the first page of the window's async part.
        if let Some(r) = out.last() {
            let mark = ra.start + ra.size - ra.async_size;
            if ra.async_size > 0 && mark >= r.first && mark < r.first + r.count {
                self.pending_marker = Some(mark);
            }
        }
        out
    }

    /// Insert `page`, read (or written in full) with data there at `ready_at`; returns its frame
    /// and, when the cache was full, the page evicted for it with whether it was dirty (the
    /// caller writes a dirty victim back).
    pub fn insert(&mut self, page: u64, ready_at: Ns) -> (u64, Option<(u64, u64, bool)>) {
        if let Some(e) = self.pages.get(&page) {
            return (e.frame, None);
        }
        let victim = if self.len() >= self.capacity { self.evict() } else { None };
        let frame = self.free_frames.pop().unwrap_or_else(|| {
            self.next_frame += 1;
            self.next_frame - 1
        });
        self.seq += 1;
        let marker = self.pending_marker == Some(page);
        if marker {
            self.pending_marker = None;
        }
        self.pages.insert(page, Entry { seq: self.seq, ready_at, frame, dirty: false, marker });
        self.lru.insert(self.seq, page);
        (frame, victim)
    }

    /// Evict the least recently used clean page among the 32 oldest (shrink_page_list skips
    /// dirty pages and leaves them to the flusher), else the oldest page; returns (page, frame,
    /// dirty).
    fn evict(&mut self) -> Option<(u64, u64, bool)> {
        let clean = self.lru.iter().take(32).find(|(_, p)| !self.dirty.contains(p)).map(|(s, p)| (*s, *p));
        let (seq, page) = clean.or_else(|| self.lru.iter().next().map(|(s, p)| (*s, *p)))?;
        self.lru.remove(&seq);
        let e = self.pages.remove(&page)?;
        self.free_frames.push(e.frame);
        self.stats.evictions += 1;
        if e.dirty {
            self.dirty.remove(&page);
            self.stats.written_back += 1;
        }
        Some((page, e.frame, e.dirty))
    }

    /// The read of `[first, end)` completes at `at`.
    pub fn set_ready(&mut self, first: u64, end: u64, at: Ns) {
        for p in first..end {
            if let Some(e) = self.pages.get_mut(&p) {
                e.ready_at = at;
            }
        }
    }

    pub fn ready_at(&self, page: u64) -> Option<Ns> {
        self.pages.get(&page).map(|e| e.ready_at)
    }

    pub fn frame(&self, page: u64) -> Option<u64> {
        self.pages.get(&page).map(|e| e.frame)
    }

    pub fn is_dirty(&self, page: u64) -> bool {
        self.dirty.contains(&page)
    }

    /// A write dirtied `page` (resident).
    pub fn mark_dirty(&mut self, page: u64) {
        if let Some(e) = self.pages.get_mut(&page) {
            if !e.dirty {
                e.dirty = true;
                self.dirty.insert(page);
                self.stats.dirtied += 1;
            }
        }
    }

    /// Up to `max` dirty pages in file order from the writeback cursor (wrapping), now clean
    /// and under writeback; returns them with their frames.
    pub fn take_dirty(&mut self, max: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let after: Vec<u64> = self.dirty.range(self.wb_cursor..).take(max as usize).copied().collect();
        let mut pages = after;
        if (pages.len() as u64) < max {
            let rest = max as usize - pages.len();
            pages.extend(self.dirty.range(..self.wb_cursor).take(rest).copied());
        }
        for p in pages {
            self.dirty.remove(&p);
            if let Some(e) = self.pages.get_mut(&p) {
                e.dirty = false;
                out.push((p, e.frame));
            }
            self.stats.written_back += 1;
            self.wb_cursor = p + 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// A read of `count` pages at `first` as the bench does it: lookups, then the plan, then
    /// inserting what it reads.
    fn read(pc: &mut PageCache, ra: &mut RaState, first: u64, count: u64) -> (u64, Vec<Read>) {
        let mut hits = 0;
        let mut marker = false;
        let mut missing = false;
        for p in first..first + count {
            match pc.lookup(p) {
                Some((_, _, m)) => {
                    hits += 1;
                    marker |= m;
                }
                None => missing = true,
            }
        }
        let plan = pc.plan_read(ra, first, count, missing, marker, false, false);
        for r in &plan {
            for p in r.first..r.first + r.count {
                pc.insert(p, 0);
            }
        }
        (hits, plan)
    }

    #[test]
    fn sequential_reads_hit_after_readahead() {
        // read_ahead_kb = 128 -> 32 pages; 8 KiB reads (2 pages).
        let mut pc = PageCache::new(1000, 32, 1 << 20);
        let mut ra = RaState::default();
        // First read misses: init window = roundup(2) = 2 <= 32/4 -> 4 pages, 2 of them async.
        assert_eq!(read(&mut pc, &mut ra, 0, 2), (0, vec![Read { first: 0, count: 4, sync: true }]));
        // Pages 2-3 were read ahead: hits; page 2 carries the marker, which starts the next
        // window, next_ra_size(4) = 8 pages (4 is not below 32/16, and at most 32/2).
        assert_eq!(read(&mut pc, &mut ra, 2, 2), (2, vec![Read { first: 4, count: 8, sync: false }]));
        // That window is all async, so its marker is its first page: 16 more from page 12.
        assert_eq!(read(&mut pc, &mut ra, 4, 2), (2, vec![Read { first: 12, count: 16, sync: false }]));
        assert_eq!(pc.stats.misses, 1);
        assert_eq!(pc.stats.hits, 4);
        // Walking on through the window reaches its marker (page 4) and so on: a sequential
        // reader misses only once.
        for first in (6..200).step_by(2) {
            let (hits, _) = read(&mut pc, &mut ra, first, 2);
            assert_eq!(hits, 2, "page {first} should have been read ahead");
        }
        assert_eq!(pc.stats.misses, 1);
    }

    #[test]
    fn random_reads_read_only_what_they_ask_and_mmap_reads_around() {
        let mut pc = PageCache::new(1000, 32, 1 << 20);
        let mut ra = RaState::default();
        let plan = pc.plan_read(&mut ra, 5000, 2, true, false, false, true);
        assert_eq!(plan, vec![Read { first: 5000, count: 2, sync: true }]);
        let plan = pc.plan_read(&mut ra, 9000, 1, true, false, true, false);
        assert_eq!(plan, vec![Read { first: 9000 - 16, count: 32, sync: true }]);
    }

    #[test]
    fn writeback_conserves_dirty_pages() {
        // Over random writes, flushes and evictions: every page dirtied is written back once or
        // is still dirty.
        for seed in 0..20 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut pc = PageCache::new(rng.gen_range(8..64), 32, 4096);
            let mut flushed = 0;
            let mut evicted_dirty = 0;
            for _ in 0..2000 {
                let p = rng.gen_range(0..256);
                if pc.lookup(p).is_none() {
                    if let (_, Some((_, _, true))) = pc.insert(p, 0) {
                        evicted_dirty += 1;
                    }
                }
                if rng.gen_bool(0.5) {
                    pc.mark_dirty(p);
                }
                if rng.gen_bool(0.05) {
                    flushed += pc.take_dirty(rng.gen_range(1..16)).len() as u64;
                }
            }
            let s = pc.stats;
            assert_eq!(s.dirtied, flushed + evicted_dirty + pc.dirty_pages(), "seed {seed}");
            assert_eq!(s.written_back, flushed + evicted_dirty);
            assert!(pc.len() <= pc.capacity());
        }
    }

    #[test]
    fn eviction_prefers_clean_pages() {
        let mut pc = PageCache::new(2, 32, 100);
        pc.insert(1, 0);
        pc.mark_dirty(1);
        pc.insert(2, 0);
        // Page 1 is older but dirty: the clean page 2 goes.
        let (_, victim) = pc.insert(3, 0);
        assert_eq!(victim.map(|v| (v.0, v.2)), Some((2, false)));
    }
}
