//! Per-node active/inactive LRU lists for anonymous and file pages, aged and scanned as Linux
//! 5.x's mm/vmscan.c does (policies.md 1.1; the demotion in reclaim is 3 and 4):
//! - reclaim takes victims from the inactive tail; `page_check_references` tests and clears the
//!   PTE young bit and PG_referenced: a young anon page is activated, a young file page is
//!   activated on its second reference and otherwise kept with PG_referenced set; a page that
//!   was not referenced is reclaimed;
//! - when the inactive list is low (inactive x sqrt(10 x list GB) < active, `inactive_list_is_low`)
//!   `shrink_active_list` moves SWAP_CLUSTER_MAX pages from the active tail to the inactive head,
//!   clearing their young bits (no VM_EXEC exception: traces carry no mappings);
//! - anon vs file (`get_scan_count`): file only while anon cannot be reclaimed (no swap space, no
//!   demotion target) or the inactive file list is not low; otherwise in proportion to
//!   swappiness x anon pages : (200 - swappiness) x file pages. Deviation: the kernel also
//!   weighs each side by its recent rotated/scanned ratio; that feedback is left out.
//! - `mark_page_accessed`: referenced, then active (TPP's promotion test reads PG_active).

use crate::node::List;
use crate::pagetable::{Link, ACTIVE, FILE, LOCKED, NIL, PG_REFERENCED, REFERENCED};

use crate::sim::Engine;

/// Pages moved per `shrink_active_list` round (SWAP_CLUSTER_MAX).
const DEACTIVATE_BATCH: u64 = 32;

/// The list a page with `flags` belongs on: inactive anon 0, active anon 1, inactive file 2,
/// active file 3 (the kernel's enum lru_list order).
#[inline]
pub(crate) fn list_of(flags: u8) -> usize {
    (((flags & FILE) != 0) as usize) * 2 + ((flags & ACTIVE) != 0) as usize
}

/// LRU activity over a run, as /proc/vmstat counts it.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct LruStats {
    /// Inactive pages examined by reclaim.
    pub pgscan: u64,
    /// Pages reclaimed (demoted, swapped or dropped).
    pub pgsteal: u64,
    pub pgactivate: u64,
    pub pgdeactivate: u64,
}

impl Engine {
    pub(crate) fn lru_push_head(&mut self, node: usize, p: u32) {
        let l = list_of(self.pt.entries[p as usize].flags);
        let list = &mut self.nodes[node].lists[l];
        self.pt.lru[p as usize] = Link { prev: NIL, next: list.head };
        if list.head != NIL {
            self.pt.lru[list.head as usize].prev = p;
        } else {
            list.tail = p;
        }
        list.head = p;
        list.len += 1;
    }

    /// Take `p` off its list; its flags must still name that list.
    pub(crate) fn lru_unlink(&mut self, node: usize, p: u32) {
        let l = list_of(self.pt.entries[p as usize].flags);
        let Link { prev, next } = self.pt.lru[p as usize];
        let list = &mut self.nodes[node].lists[l];
        if prev != NIL {
            self.pt.lru[prev as usize].next = next;
        } else {
            list.head = next;
        }
        if next != NIL {
            self.pt.lru[next as usize].prev = prev;
        } else {
            list.tail = prev;
        }
        list.len -= 1;
    }

    /// Move `p` (on `node`) to the head of the list its flags name after `set`/`clear`.
    fn lru_relink(&mut self, node: usize, p: u32, set: u8, clear: u8) {
        self.lru_unlink(node, p);
        let f = &mut self.pt.entries[p as usize].flags;
        *f = (*f & !clear) | set;
        self.lru_push_head(node, p);
    }

    /// inactive_list_is_low: the ratio grows with the list's size in GB of the real machine
    /// (a scaled-down platform keeps the full-size proportions).
    fn inactive_is_low(&self, node: usize, file: bool) -> bool {
        let lists = &self.nodes[node].lists;
        let (inactive, active) = (lists[2 * file as usize].len, lists[2 * file as usize + 1].len);
        let bytes = ((inactive + active) * self.page_size) as f64 / self.topo.capacity_scale;
        let gb = (bytes / (1u64 << 30) as f64) as u64;
        let ratio = if gb == 0 { 1 } else { (10 * gb).isqrt() };
        inactive * ratio < active
    }

    /// shrink_active_list: up to `n` pages from the active tail to the inactive head, their
    /// young bits cleared (page_referenced), so only a new reference reactivates them.
    fn shrink_active(&mut self, node: usize, file: bool, n: u64) {
        for _ in 0..n {
            let p = self.nodes[node].lists[2 * file as usize + 1].tail;
            if p == NIL {
                break;
            }
            self.lru_relink(node, p, 0, ACTIVE | REFERENCED);
            if self.measuring {
                self.lru_stats.pgdeactivate += 1;
            }
        }
    }

    /// Which kind of page reclaim takes next from `node` (get_scan_count), None if neither may.
    fn scan_kind(&mut self, node: usize, anon_ok: bool, file_ok: bool) -> Option<bool> {
        let lists = &self.nodes[node].lists;
        let anon = lists[0].len + lists[1].len;
        let file = if file_ok { lists[2].len + lists[3].len } else { 0 };
        let kind = if file == 0 {
            false
        } else if !anon_ok || anon == 0 || (!self.inactive_is_low(node, true) && lists[2].len > 0) {
            true
        } else {
            let w_anon = self.swappiness as u128 * anon as u128;
            let w_file = (200 - self.swappiness) as u128 * file as u128;
            let [sa, sf] = self.nodes[node].scanned;
            // Take the side that is behind its share: anon while sa / sf < w_anon / w_file.
            (sa as u128 * w_file) > (sf as u128 * w_anon)
        };
        if !kind && (!anon_ok || anon == 0) {
            return None;
        }
        self.nodes[node].scanned[kind as usize] += 1;
        Some(kind)
    }

    /// The next page reclaim takes from `node` (shrink_inactive_list + page_check_references),
    /// already off its list; None if no page can go. `anon_ok`, `file_ok`: that kind of page
    /// has somewhere to go.
    pub(crate) fn pick_victim(&mut self, node: usize, anon_ok: bool, file_ok: bool) -> Option<u32> {
        let file = self.scan_kind(node, anon_ok, file_ok)?;
        // The kind get_scan_count picked may hold only pages in flight: then the other kind.
        self.victim_of_kind(node, file).or_else(|| match file {
            true if anon_ok => self.victim_of_kind(node, false),
            false if file_ok => self.victim_of_kind(node, true),
            _ => None,
        })
    }

    fn victim_of_kind(&mut self, node: usize, file: bool) -> Option<u32> {
        let (inactive, active) = (2 * file as usize, 2 * file as usize + 1);
        // Each page is activated at most once and deactivated at most once per call (no access
        // happens meanwhile), so this bound is never the reason to stop while a page could go;
        // it also ends the walk when every page is locked.
        let lists = &self.nodes[node].lists;
        let bound = 2 * (lists[inactive].len + lists[active].len) + DEACTIVATE_BATCH;
        // Pages in flight passed over since the inactive list last grew: once they are all it
        // holds, it must be refilled from the active list even if it is not low by the ratio
        // (with a large scaled memory the ratio lets ~1 % of the pages stay inactive, and up to
        // one page per CPU is in flight).
        let mut locked_run = 0;
        for _ in 0..=bound {
            let inactive_len = self.nodes[node].lists[inactive].len;
            if self.inactive_is_low(node, file) || inactive_len == 0 || locked_run >= inactive_len {
                self.shrink_active(node, file, DEACTIVATE_BATCH);
                locked_run = 0;
            }
            let p = self.nodes[node].lists[inactive].tail;
            if p == NIL {
                return None;
            }
            if self.measuring {
                self.lru_stats.pgscan += 1;
            }
            let flags = self.pt.entries[p as usize].flags;
            if flags & LOCKED != 0 {
                self.lru_relink(node, p, 0, 0);
                locked_run += 1;
                continue;
            }
            if flags & REFERENCED != 0 {
                if !file || flags & PG_REFERENCED != 0 {
                    self.lru_relink(node, p, ACTIVE, REFERENCED | PG_REFERENCED);
                    if self.measuring {
                        self.lru_stats.pgactivate += 1;
                    }
                } else {
                    self.lru_relink(node, p, PG_REFERENCED, REFERENCED);
                }
                continue;
            }
            self.lru_unlink(node, p);
            self.pt.entries[p as usize].flags &= !PG_REFERENCED;
            if self.measuring {
                self.lru_stats.pgsteal += 1;
            }
            return Some(p);
        }
        None
    }

    /// The page at the tail of `node`'s inactive file list, else of its active file list,
    /// passing over pages in flight.
    pub(crate) fn oldest_file_page(&self, node: usize) -> Option<u32> {
        for l in [2, 3] {
            let mut p = self.nodes[node].lists[l].tail;
            while p != NIL {
                if self.pt.entries[p as usize].flags & LOCKED == 0 {
                    return Some(p);
                }
                p = self.pt.lru[p as usize].prev;
            }
        }
        None
    }

    /// mark_page_accessed on a present page: PG_referenced on the first call, activation (and
    /// PG_referenced cleared) on the next while inactive.
    pub(crate) fn mark_page_accessed(&mut self, p: u32, node: usize) {
        let flags = self.pt.entries[p as usize].flags;
        if flags & PG_REFERENCED == 0 {
            self.pt.entries[p as usize].flags |= PG_REFERENCED;
        } else if flags & ACTIVE == 0 {
            self.lru_relink(node, p, ACTIVE, PG_REFERENCED);
            if self.measuring {
                self.lru_stats.pgactivate += 1;
            }
        }
    }

    /// The four list lengths of `node`, named as /proc/meminfo does.
    pub(crate) fn lru_sizes(&self, node: usize) -> serde_json::Value {
        let l: &[List; 4] = &self.nodes[node].lists;
        serde_json::json!({
            "inactive_anon": l[0].len,
            "active_anon": l[1].len,
            "inactive_file": l[2].len,
            "active_file": l[3].len,
        })
    }
}
