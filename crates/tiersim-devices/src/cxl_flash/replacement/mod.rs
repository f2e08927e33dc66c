//! Replacement policies of the CXL-flash device cache. A policy keeps its own per-set state and
//! picks the way to evict from a full set; pinned lines (host hints) are never chosen while the
//! set holds an unpinned one. Adding a policy: one file here and one line in `REGISTRY`.

use tiersim_core::{Params, PluginInfo, Result};

pub mod cflru;
pub mod fifo;
pub mod lru;
pub mod random;

/// Line flag: pinned by a host hint.
pub const PINNED: u8 = 2;

/// A full set as the policy sees it when choosing a victim.
pub struct SetView<'a> {
    pub set: usize,
    /// Slot of way 0; the set's slots are `first .. first + ways`.
    pub first: u32,
    pub ways: u32,
    /// Dirty masks and flags of every slot of the cache (index by slot).
    pub dirty: &'a [u64],
    pub flags: &'a [u8],
}

impl SetView<'_> {
    #[inline]
    pub fn pinned(&self, slot: u32) -> bool {
        self.flags[slot as usize] & PINNED != 0
    }
}

pub trait Replacement: Send {
    /// A line now occupies `slot` of `set` (a free way, or the way of the line just evicted).
    fn insert(&mut self, set: usize, slot: u32);
    /// A demand access hit the line in `slot`.
    fn hit(&mut self, set: usize, slot: u32);
    /// The slot to evict from a full set.
    fn victim(&mut self, v: &SetView<'_>) -> u32;
}

/// Sizes a policy is built for.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub sets: usize,
    pub ways: u32,
}

pub struct Entry {
    pub info: PluginInfo,
    pub build: fn(&Params, Shape) -> Result<Box<dyn Replacement>>,
}

/// Every replacement policy, by config name. The only place a policy is named.
pub const REGISTRY: &[Entry] = &[
    Entry { info: fifo::INFO, build: fifo::build },
    Entry { info: random::INFO, build: random::build },
    Entry { info: lru::INFO, build: lru::build },
    Entry { info: cflru::INFO, build: cflru::build },
];

pub fn find(name: &str) -> Result<&'static Entry> {
    tiersim_core::params::lookup("replacement policy", name, REGISTRY, |e| &e.info)
}

registry_lists!(REGISTRY);

/// Doubly linked recency (or insertion) order per set, intrusive over slots: head = newest,
/// tail = oldest. Links are slot + 1 so that 0 means none and zeroed arrays cost no memory until
/// touched.
pub struct Lists {
    prev: Vec<u32>,
    next: Vec<u32>,
    head: Vec<u32>,
    tail: Vec<u32>,
}

impl Lists {
    pub fn new(s: Shape) -> Self {
        let slots = s.sets * s.ways as usize;
        Lists { prev: vec![0; slots], next: vec![0; slots], head: vec![0; s.sets], tail: vec![0; s.sets] }
    }

    #[inline]
    fn linked(&self, set: usize, slot: u32) -> bool {
        self.prev[slot as usize] != 0 || self.next[slot as usize] != 0 || self.head[set] == slot + 1
    }

    #[inline]
    pub fn unlink(&mut self, set: usize, slot: u32) {
        let (p, n) = (self.prev[slot as usize], self.next[slot as usize]);
        if p == 0 {
            self.head[set] = n
        } else {
            self.next[p as usize - 1] = n
        }
        if n == 0 {
            self.tail[set] = p
        } else {
            self.prev[n as usize - 1] = p
        }
        self.prev[slot as usize] = 0;
        self.next[slot as usize] = 0;
    }

    #[inline]
    pub fn push_front(&mut self, set: usize, slot: u32) {
        if self.linked(set, slot) {
            self.unlink(set, slot);
        }
        let h = self.head[set];
        self.next[slot as usize] = h;
        if h != 0 {
            self.prev[h as usize - 1] = slot + 1;
        }
        self.head[set] = slot + 1;
        if self.tail[set] == 0 {
            self.tail[set] = slot + 1;
        }
    }

    /// From the oldest towards the newest, at most `limit` slots.
    pub fn from_tail(&self, set: usize, limit: usize) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.tail[set];
        let mut left = limit;
        std::iter::from_fn(move || {
            if cur == 0 || left == 0 {
                return None;
            }
            left -= 1;
            let s = cur - 1;
            cur = self.prev[s as usize];
            Some(s)
        })
    }

    /// The oldest unpinned line (the oldest line if all are pinned).
    pub fn oldest_unpinned(&self, v: &SetView<'_>) -> u32 {
        self.from_tail(v.set, v.ways as usize)
            .find(|&s| !v.pinned(s))
            .unwrap_or_else(|| self.tail[v.set].saturating_sub(1).max(v.first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fill a 4-way set, touch some lines, and check each policy's victims.
    fn view<'a>(dirty: &'a [u64], flags: &'a [u8]) -> SetView<'a> {
        SetView { set: 0, first: 0, ways: 4, dirty, flags }
    }

    fn policy(name: &str, extra: &str) -> Box<dyn Replacement> {
        let e = find(name).unwrap();
        let t: toml::Table = toml::from_str(extra).unwrap();
        (e.build)(&Params::resolve(crate::cxl_flash::SPECS, Some(&t)).unwrap(), Shape { sets: 1, ways: 4 }).unwrap()
    }

    #[test]
    fn victims() {
        let clean = [0u64; 4];
        let none = [0u8; 4];
        for (name, expect) in [("fifo", 0), ("lru", 1)] {
            let mut p = policy(name, "");
            for s in 0..4 {
                p.insert(0, s);
            }
            p.hit(0, 0);
            assert_eq!(p.victim(&view(&clean, &none)), expect, "{name}");
        }
        // CFLRU: LRU order 1 (oldest), 2, 3, 0; 1 and 2 dirty; window 0.5 x 4 = 2 lines from the
        // tail: both dirty, so the plain LRU victim 1. Window 3: line 3 is the first clean one.
        let dirty = [0u64, 1, 1, 0];
        for (window, expect) in [("0.5", 1), ("0.75", 3)] {
            let mut p = policy("cflru", &format!("cflru_window = {window}"));
            for s in 0..4 {
                p.insert(0, s);
            }
            p.hit(0, 0);
            assert_eq!(p.victim(&view(&dirty, &none)), expect, "window {window}");
        }
        // Pinned lines are skipped.
        let mut p = policy("lru", "");
        for s in 0..4 {
            p.insert(0, s);
        }
        assert_eq!(p.victim(&view(&clean, &[PINNED, PINNED, 0, 0])), 2);
        // Random picks unpinned ways only and is reproducible for a seed.
        let picks = |seed: u64| {
            let mut p = policy("random", &format!("seed = {seed}"));
            (0..32).map(|_| p.victim(&view(&clean, &[0, PINNED, 0, PINNED]))).collect::<Vec<_>>()
        };
        let a = picks(7);
        assert!(a.iter().all(|&s| s == 0 || s == 2) && a.contains(&0) && a.contains(&2));
        assert_eq!(a, picks(7));
    }
}
