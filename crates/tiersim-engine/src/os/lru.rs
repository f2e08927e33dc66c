//! Per-node active/inactive LRU lists for anonymous and file pages, aged and scanned as Linux
//! 5.x's mm/vmscan.c does (policies.md 1.1; the demotion in reclaim is 3 and 4):
//! - reclaim takes victims from the inactive tail; `page_check_references` tests and clears the
//!   PTE young bit and PG_referenced: a young page is activated on its second reference and
//!   otherwise kept (rotated) with PG_referenced set, anon and file alike (the used-once logic:
//!   "all mapped pages start out with page table references from the instantiating fault, so we
//!   need to look twice", covering swap-backed pages since Linux 3.5, commit e48982734ea0, and
//!   still folio_check_references in 6.1); a page that was not referenced is reclaimed;
//! - when the inactive list is low (inactive x sqrt(10 x list GB) < active, `inactive_list_is_low`)
//!   `shrink_active_list` moves SWAP_CLUSTER_MAX pages from the active tail to the inactive head,
//!   clearing their young bits (no VM_EXEC exception: traces carry no mappings);
//! - anon vs file (`get_scan_count`): file only while anon cannot be reclaimed (no swap space, no
//!   demotion target) or the inactive file list is not low; otherwise in proportion to
//!   swappiness x anon pages : (200 - swappiness) x file pages. Deviation: the kernel also
//!   weighs each side by its recent rotated/scanned ratio; that feedback is left out.
//! - `mark_page_accessed`: referenced, then active (TPP's promotion test reads PG_active).

use serde_json::{json, Map, Value};

use super::workingset::{self, Mode};
use super::{Memory, Metrics};
use crate::node::{List, Node};
use crate::pagetable::{Link, PageTable, ACTIVE, FILE, LOCKED, NIL, PG_REFERENCED, REFERENCED};

/// Pages moved per `shrink_active_list` round (SWAP_CLUSTER_MAX).
const DEACTIVATE_BATCH: u64 = 32;

/// The list a page with `flags` belongs on: inactive anon 0, active anon 1, inactive file 2,
/// active file 3 (the kernel's enum lru_list order).
#[inline]
pub(crate) fn list_of(flags: u8) -> usize {
    (((flags & FILE) != 0) as usize) * 2 + ((flags & ACTIVE) != 0) as usize
}

/// What reclaim takes next: a page of the trace, already off its list, or one of other
/// software's pages on the node (`occupied`, which have no page of the trace's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Victim {
    Page(u32),
    Occupied { file: bool },
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
    /// Pages read back with a shadow entry, and those of them activated for it, [anon, file]
    /// (workingset_refault_*, workingset_activate_*).
    pub workingset_refault: [u64; 2],
    pub workingset_activate: [u64; 2],
}

/// Put `p` at the head of the list of `node` its flags name (add_page_to_lru_list).
pub(crate) fn add(pt: &mut PageTable, node: &mut Node, p: u32) {
    let l = list_of(pt.entries[p as usize].flags);
    let list = &mut node.lists[l];
    pt.lru[p as usize] = Link { prev: NIL, next: list.head };
    if list.head != NIL {
        pt.lru[list.head as usize].prev = p;
    } else {
        list.tail = p;
    }
    list.head = p;
    list.len += 1;
}

/// Take `p` off its list of `node`; its flags must still name that list (del_page_from_lru_list).
pub(crate) fn del(pt: &mut PageTable, node: &mut Node, p: u32) {
    let l = list_of(pt.entries[p as usize].flags);
    let Link { prev, next } = pt.lru[p as usize];
    let list = &mut node.lists[l];
    if prev != NIL {
        pt.lru[prev as usize].next = next;
    } else {
        list.head = next;
    }
    if next != NIL {
        pt.lru[next as usize].prev = prev;
    } else {
        list.tail = prev;
    }
    list.len -= 1;
}

/// Move `p` (on `node`) to the head of the list its flags name after `set`/`clear`.
fn relink(pt: &mut PageTable, node: &mut Node, p: u32, set: u8, clear: u8) {
    del(pt, node, p);
    let f = &mut pt.entries[p as usize].flags;
    *f = (*f & !clear) | set;
    add(pt, node, p);
}

/// The page at the tail of `node`'s inactive file list, else of its active file list,
/// passing over pages in flight.
pub(crate) fn oldest_file_page(pt: &PageTable, node: &Node) -> Option<u32> {
    for l in [2, 3] {
        let mut p = node.lists[l].tail;
        while p != NIL {
            if pt.entries[p as usize].flags & LOCKED == 0 {
                return Some(p);
            }
            p = pt.lru[p as usize].prev;
        }
    }
    None
}

/// The four list lengths of `node`, named as /proc/meminfo does.
pub(crate) fn sizes(node: &Node) -> Value {
    let l: &[List; 4] = &node.lists;
    json!({
        "inactive_anon": l[0].len,
        "active_anon": l[1].len,
        "inactive_file": l[2].len,
        "active_file": l[3].len,
    })
}

/// The aging and reclaim choices over every node's lists, and their counters.
pub(crate) struct Lru {
    /// vm.swappiness: the anon share of reclaim scanning when both kinds can go.
    swappiness: u64,
    /// New anonymous pages start on the active list (Linux before 5.9) or the inactive one.
    new_anon_active: bool,
    /// Which refaults the shadow entries test, and their bucket order (`workingset.rs`).
    pub(crate) workingset: Mode,
    pub(crate) ws_order: u32,
    pub(crate) stats: LruStats,
}

impl Lru {
    pub(crate) fn new(swappiness: u64, new_anon_active: bool, workingset: Mode, total_pages: u64) -> Lru {
        let ws_order = workingset::bucket_order(total_pages);
        Lru { swappiness, new_anon_active, workingset, ws_order, stats: LruStats::default() }
    }

    /// The list flags of a new anonymous page (lru_cache_add: active before 5.9).
    pub(crate) fn new_anon_flags(&self) -> u8 {
        if self.new_anon_active {
            ACTIVE
        } else {
            0
        }
    }

    /// inactive_list_is_low: the ratio grows with the list's size in GB of the real machine
    /// (a scaled-down platform keeps the full-size proportions).
    fn inactive_is_low(mem: &Memory, node: usize, file: bool) -> bool {
        let (lists, others) = (&mem.nodes[node].lists, mem.nodes[node].occupied[file as usize].len() as u64);
        let (inactive, active) = (lists[2 * file as usize].len + others, lists[2 * file as usize + 1].len);
        let bytes = ((inactive + active) * mem.page_size) as f64 / mem.topo.capacity_scale;
        let gb = (bytes / (1u64 << 30) as f64) as u64;
        let ratio = if gb == 0 { 1 } else { (10 * gb).isqrt() };
        inactive * ratio < active
    }

    /// shrink_active_list: up to `n` pages from the active tail to the inactive head, their
    /// young bits cleared (page_referenced), so only a new reference reactivates them.
    fn shrink_active(&mut self, mem: &mut Memory, node: usize, file: bool, n: u64) {
        let (pt, node) = (&mut mem.pt, &mut mem.nodes[node]);
        for _ in 0..n {
            let p = node.lists[2 * file as usize + 1].tail;
            if p == NIL {
                break;
            }
            relink(pt, node, p, 0, ACTIVE | REFERENCED);
            // shrink_active_list: "we are de-activating", folio_set_workingset.
            if self.workingset != Mode::Off {
                pt.ext_mut(p).workingset = true;
            }
            self.stats.pgdeactivate += 1;
        }
    }

    /// Which kind of page reclaim takes next from `node` (get_scan_count), None if neither may.
    fn scan_kind(&mut self, mem: &mut Memory, node: usize, anon_ok: bool, file_ok: bool) -> Option<bool> {
        let (lists, others) = (&mem.nodes[node].lists, &mem.nodes[node].occupied);
        let anon = lists[0].len + lists[1].len + others[0].len() as u64;
        let inactive_file = lists[2].len + others[1].len() as u64;
        let file = if file_ok { inactive_file + lists[3].len } else { 0 };
        let kind = if file == 0 {
            false
        } else if !anon_ok || anon == 0 || (!Self::inactive_is_low(mem, node, true) && inactive_file > 0) {
            true
        } else {
            // 5.8+ weighs each kind by its recent reclaim cost (with `os.workingset = "all"`).
            let (ap, fp) = if self.workingset == Mode::All {
                workingset::scan_fractions(&mem.nodes[node], self.swappiness)
            } else {
                (self.swappiness as u128, (200 - self.swappiness) as u128)
            };
            let (w_anon, w_file) = (ap * anon as u128, fp * file as u128);
            let [sa, sf] = mem.nodes[node].scanned;
            // Take the side that is behind its share: anon while sa / sf < w_anon / w_file.
            (sa as u128 * w_file) > (sf as u128 * w_anon)
        };
        if !kind && (!anon_ok || anon == 0) {
            return None;
        }
        mem.nodes[node].scanned[kind as usize] += 1;
        Some(kind)
    }

    /// The next page reclaim takes from `node` (shrink_inactive_list + page_check_references),
    /// already off its list; None if no page can go. `anon_ok`, `file_ok`: that kind of page
    /// has somewhere to go.
    pub(crate) fn pick_victim(
        &mut self,
        mem: &mut Memory,
        node: usize,
        anon_ok: bool,
        file_ok: bool,
    ) -> Option<Victim> {
        let file = self.scan_kind(mem, node, anon_ok, file_ok)?;
        // The kind get_scan_count picked may hold only pages in flight: then the other kind.
        self.victim_of_kind(mem, node, file).or_else(|| match file {
            true if anon_ok => self.victim_of_kind(mem, node, false),
            false if file_ok => self.victim_of_kind(mem, node, true),
            _ => None,
        })
    }

    fn victim_of_kind(&mut self, mem: &mut Memory, node: usize, file: bool) -> Option<Victim> {
        // Other software's pages were on the list before the trace's first page and are never
        // referenced: the inactive tail is theirs until they are gone.
        if !mem.nodes[node].occupied[file as usize].is_empty() {
            self.stats.pgscan += 1;
            self.stats.pgsteal += 1;
            return Some(Victim::Occupied { file });
        }
        let (inactive, active) = (2 * file as usize, 2 * file as usize + 1);
        // Each page is activated at most once and deactivated at most once per call (no access
        // happens meanwhile), so this bound is never the reason to stop while a page could go;
        // it also ends the walk when every page is locked.
        let lists = &mem.nodes[node].lists;
        let bound = 2 * (lists[inactive].len + lists[active].len) + DEACTIVATE_BATCH;
        // Pages in flight passed over since the inactive list last grew: once they are all it
        // holds, it must be refilled from the active list even if it is not low by the ratio
        // (with a large scaled memory the ratio lets ~1 % of the pages stay inactive, and up to
        // one page per CPU is in flight).
        let mut locked_run = 0;
        for _ in 0..=bound {
            let inactive_len = mem.nodes[node].lists[inactive].len;
            if Self::inactive_is_low(mem, node, file) || inactive_len == 0 || locked_run >= inactive_len {
                self.shrink_active(mem, node, file, DEACTIVATE_BATCH);
                locked_run = 0;
            }
            let (pt, n) = (&mut mem.pt, &mut mem.nodes[node]);
            let p = n.lists[inactive].tail;
            if p == NIL {
                return None;
            }
            self.stats.pgscan += 1;
            let flags = pt.entries[p as usize].flags;
            if flags & LOCKED != 0 {
                relink(pt, n, p, 0, 0);
                locked_run += 1;
                continue;
            }
            if flags & REFERENCED != 0 {
                if flags & PG_REFERENCED != 0 {
                    relink(pt, n, p, ACTIVE, REFERENCED | PG_REFERENCED);
                    // move_folios_to_lru ages the node for each page it puts back active.
                    workingset::age(n);
                    self.stats.pgactivate += 1;
                } else {
                    relink(pt, n, p, PG_REFERENCED, REFERENCED);
                }
                continue;
            }
            del(pt, n, p);
            pt.entries[p as usize].flags &= !PG_REFERENCED;
            self.stats.pgsteal += 1;
            return Some(Victim::Page(p));
        }
        None
    }

    /// mark_page_accessed on a present page: PG_referenced on the first call, activation (and
    /// PG_referenced cleared) on the next while inactive.
    pub(crate) fn mark_page_accessed(&mut self, pt: &mut PageTable, node: &mut Node, p: u32) {
        let flags = pt.entries[p as usize].flags;
        if flags & PG_REFERENCED == 0 {
            pt.entries[p as usize].flags |= PG_REFERENCED;
        } else if flags & ACTIVE == 0 {
            relink(pt, node, p, ACTIVE, PG_REFERENCED);
            // folio_mark_accessed -> workingset_activation
            workingset::age(node);
            self.stats.pgactivate += 1;
        }
    }
}

impl Metrics for Lru {
    fn reset(&mut self) {
        self.stats = LruStats::default();
    }

    fn report(&self, section: &str, into: &mut Map<String, Value>) {
        if section == "lru" {
            let s = &self.stats;
            into.insert("pgscan".into(), s.pgscan.into());
            into.insert("pgsteal".into(), s.pgsteal.into());
            into.insert("pgactivate".into(), s.pgactivate.into());
            into.insert("pgdeactivate".into(), s.pgdeactivate.into());
            // Only with refault detection on, so that a run without it reads as before.
            if self.workingset != Mode::Off {
                for (kind, k) in [("anon", 0), ("file", 1)] {
                    into.insert(format!("workingset_refault_{kind}"), s.workingset_refault[k].into());
                    into.insert(format!("workingset_activate_{kind}"), s.workingset_activate[k].into());
                }
            }
        }
    }
}
