//! The OS model's invariants, verified every `SimOptions::check_every` accesses (for tests):
//! each page in one place, frames unique per node, capacities respected, LRU lists well linked
//! and counted, no anonymous page inside a mapped file.

use rustc_hash::FxHashMap;
use tiersim_core::{Error, Result};

use super::Engine;
use crate::os::lru;
use crate::pagetable::{CHUNK, CHUNK_SHIFT, DIRTY, DROPPED, FILE, NIL, SWAPCACHE, SWAPPED, UNTOUCHED};

impl Engine {
    /// Each page on exactly one node or in swap, frames unique per node, no node over capacity,
    /// each page on the one LRU list of its node its flags name, lists well linked and counted.
    pub(crate) fn check(&self) -> Result<()> {
        let fail = |m: String| Err(Error::Sim(format!("invariant violated: {m}")));
        let mut seen: Vec<FxHashMap<u32, u32>> = vec![FxHashMap::default(); self.mem.nodes.len()];
        let mut swapped = 0u64;
        for (p, e) in self.mem.pt.entries.iter().enumerate() {
            if e.node == UNTOUCHED {
                continue;
            }
            if e.node == SWAPPED {
                swapped += 1;
                continue;
            }
            if e.node == DROPPED {
                continue;
            }
            if let Some(q) = seen[e.node as usize].insert(e.frame, p as u32) {
                return fail(format!("pages {q} and {p} share frame {} on node {}", e.frame, e.node));
            }
        }
        for (i, n) in self.mem.nodes.iter().enumerate() {
            if n.used + n.reserved + n.occupied_pages() > n.capacity {
                return fail(format!(
                    "node {} holds {} pages, {} reserved frames and {} occupied over its capacity {}",
                    n.spec.name,
                    n.used,
                    n.reserved,
                    n.occupied_pages(),
                    n.capacity
                ));
            }
            for &f in n.occupied.iter().flatten() {
                if let Some(p) = seen[i].get(&f) {
                    return fail(format!("page {p} and an occupied page share frame {f} on node {}", n.spec.name));
                }
            }
            if seen[i].len() as u64 != n.used {
                return fail(format!("node {} counts {} pages but {} map to it", n.spec.name, n.used, seen[i].len()));
            }
            let mut total = 0;
            for (l, list) in n.lists.iter().enumerate() {
                let (mut len, mut p, mut prev) = (0u64, list.head, NIL);
                while p != NIL {
                    let e = self.mem.pt.entries[p as usize];
                    if e.node as usize != i || lru::list_of(e.flags) != l {
                        return fail(format!(
                            "page {p} on node {}'s list {l} lives on node {} in list {}",
                            n.spec.name,
                            e.node,
                            lru::list_of(e.flags)
                        ));
                    }
                    if self.mem.pt.lru[p as usize].prev != prev {
                        return fail(format!("page {p} on node {}'s list {l} has a broken back link", n.spec.name));
                    }
                    len += 1;
                    if len > n.used {
                        break;
                    }
                    (prev, p) = (p, self.mem.pt.lru[p as usize].next);
                }
                if len != list.len || (len > 0 && list.tail != prev) {
                    return fail(format!("node {} list {l} holds {len} pages, counts {}", n.spec.name, list.len));
                }
                total += len;
            }
            if total != n.used {
                return fail(format!("node {} lists hold {total} pages, node has {}", n.spec.name, n.used));
            }
        }
        let swap_used = self.swap.as_ref().map_or(0, |s| s.used - s.occupied_slots);
        let cached = self.swap.as_ref().map_or(0, |s| s.cache_slot.len() as u64);
        if swapped + cached != swap_used {
            return fail(format!(
                "{swapped} pages are swapped and {cached} in the swap cache but swap holds {swap_used} slots"
            ));
        }
        for (&q, &slot) in self.swap.iter().flat_map(|s| s.cache_slot.iter()) {
            let e = self.mem.pt.entries[q as usize];
            if e.node >= DROPPED
                || e.flags & SWAPCACHE == 0
                || self.swap.as_ref().map(|s| s.owner[slot as usize]) != Some(q)
            {
                return fail(format!(
                    "swap-cache page {q} (slot {slot}) is not a resident SWAPCACHE page owning its slot"
                ));
            }
        }
        // Read-around never takes a page of anonymous memory: inside a mapped file every page
        // in memory, swapped or dropped is a file page.
        for (lo, hi) in self.files.mapped_ranges() {
            for v in lo..hi {
                let Some(&base) = self.mem.pt.by_address.get(&(v >> CHUNK_SHIFT)) else { continue };
                let e = self.mem.pt.entries[base as usize + (v as usize & (CHUNK - 1))];
                if e.node != UNTOUCHED && (e.node == SWAPPED || e.flags & FILE == 0) {
                    return fail(format!("page {v:#x} of a mapped file is anonymous memory"));
                }
            }
        }
        let dirty_file =
            self.mem.pt.entries.iter().filter(|e| e.node < DROPPED && e.flags & (FILE | DIRTY) == FILE | DIRTY).count();
        if dirty_file != self.files.dirty.len() {
            return fail(format!(
                "{dirty_file} resident file pages are dirty but the flusher knows of {}",
                self.files.dirty.len()
            ));
        }
        Ok(())
    }
}
