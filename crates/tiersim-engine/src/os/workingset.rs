//! Refault distance, after mm/workingset.c (Linux 6.1): each node counts the pages it evicts and
//! activates (`nonresident_age`); an evicted page keeps that count as its shadow entry, and when
//! it is read back the count since is how much larger the inactive list would have had to be to
//! keep it. A page whose distance fits in the evicting node's workingset (its active file pages,
//! plus anon pages while swap has room) comes back on the active list, so a working set larger
//! than the inactive list but smaller than memory stops being evicted and read again at every
//! turn. File pages since Linux 3.15; anonymous ones since 5.9, with 5.8's reclaim cost per kind
//! (`note_cost`, `scan_fractions`: get_scan_count weighs anon against file by their recent
//! write-outs and workingset refaults). `os.workingset`, off by default until checked against the
//! kernel. Deviations: no memcg, no rotation cost (6.5+) nor refault-driven deactivation of the
//! active file list, and at most 64 nodes in a shadow (a page evicted from a node beyond has
//! none).

use super::lru::Lru;
use super::Memory;
use crate::node::Node;
use crate::pagetable::ACTIVE;

/// What refaults are tested, by kernel version: `All` (5.9+), `File` (3.15-5.7), `Off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Off,
    File,
    All,
}

impl Mode {
    pub(crate) fn parse(s: &str) -> Mode {
        match s {
            "off" => Mode::Off,
            "file" => Mode::File,
            _ => Mode::All,
        }
    }
}

/// A shadow: a valid bit, PG_workingset at eviction, the node (6 bits) and the node's age at
/// eviction, in buckets of 2^bucket_order evictions (24 bits), as pack_shadow packs memcg id,
/// node, timestamp and the workingset bit.
const VALID: u32 = 1 << 31;
const WORKINGSET: u32 = 1 << 30;
const NODE_SHIFT: u32 = 24;
const NODE_MASK: u32 = 63;
const MAX_NODES: usize = 64;
const AGE_MASK: u64 = (1 << NODE_SHIFT) - 1;

/// The shadows' bucket order for `total_pages` of memory (workingset_init: the timestamp bits
/// hold every page of memory, coarsened when they cannot).
pub(crate) fn bucket_order(total_pages: u64) -> u32 {
    let max_order = u64::BITS - total_pages.saturating_sub(1).leading_zeros();
    max_order.saturating_sub(NODE_SHIFT)
}

/// workingset_age_nonresident: a page activated on or evicted from `node` (other software's
/// pages too, which have no shadow).
#[inline]
pub(crate) fn age(node: &mut Node) {
    node.nonresident_age += 1;
}

/// workingset_eviction: page `p` leaves `node` for swap or the block device. Off, it keeps no
/// shadow (nor the per-page array that holds them, where nothing else needs it).
pub(crate) fn evict(mem: &mut Memory, lru: &Lru, p: u32, node: usize) {
    let stamp = mem.nodes[node].nonresident_age;
    age(&mut mem.nodes[node]);
    if lru.workingset != Mode::Off && node < MAX_NODES {
        let stamp = ((stamp >> lru.ws_order) & AGE_MASK) as u32;
        let ext = mem.pt.ext_mut(p);
        ext.shadow = VALID | [0, WORKINGSET][ext.workingset as usize] | (node as u32) << NODE_SHIFT | stamp;
        ext.workingset = false;
    }
}

/// Page `p` comes back for a write call (filemap_add_folio with __GFP_WRITE): no refault test,
/// "evicting other data from the working set, only to cache data that will get overwritten with
/// something else, is a waste of memory"; its shadow is dropped.
pub(crate) fn forget(mem: &mut Memory, lru: &Lru, p: u32) {
    if lru.workingset != Mode::Off && mem.pt.ext(p).shadow != 0 {
        mem.pt.ext_mut(p).shadow = 0;
    }
}

/// workingset_refault: page `p`, of `file` kind, is being read back onto node `to` (`lru` holds
/// the mode, the bucket order and the counters). Returns
/// ACTIVE if it should join the active list, else 0; its shadow is consumed. `swap_room`: swap
/// has free slots (mem_cgroup_get_nr_swap_pages > 0), so anon pages compete for the workingset.
pub(crate) fn refault(mem: &mut Memory, lru: &mut Lru, p: u32, file: bool, to: usize, swap_room: bool) -> u8 {
    let (mode, order, stats) = (lru.workingset, lru.ws_order, &mut lru.stats);
    if mode == Mode::Off {
        return 0;
    }
    let shadow = mem.pt.ext(p).shadow;
    if shadow & VALID == 0 {
        return 0;
    }
    mem.pt.ext_mut(p).shadow = 0;
    if mode == Mode::File && !file {
        return 0;
    }
    let from = ((shadow >> NODE_SHIFT) & NODE_MASK) as usize;
    let Some(n) = mem.nodes.get(from) else { return 0 };
    let eviction = u64::from(shadow) & AGE_MASK;
    let distance = (((n.nonresident_age >> order) & AGE_MASK).wrapping_sub(eviction) & AGE_MASK) << order;
    // [inactive anon, active anon, inactive file, active file]
    let len = |l: usize| n.lists[l].len;
    let mut workingset = len(3);
    if !file {
        workingset += len(2);
    }
    if swap_room {
        workingset += len(1);
        if file {
            workingset += len(0);
        }
    }
    stats.workingset_refault[file as usize] += 1;
    if distance > workingset {
        return 0;
    }
    age(&mut mem.nodes[to]);
    stats.workingset_activate[file as usize] += 1;
    // Active before its eviction: a workingset page thrashing, which costs its kind
    // (lru_note_cost_refault, 5.9+).
    if shadow & WORKINGSET != 0 {
        mem.pt.ext_mut(p).workingset = true;
        note_cost(mode, &mut mem.nodes[to], file, 1);
    }
    ACTIVE
}

/// lru_note_cost (mm/swap.c, 5.8-6.4): `pages` of reclaim's cost (pages written out, or a
/// workingset page refaulting) charged to `file`'s kind on `node`, both kinds halved once they
/// pass a quarter of the node's LRU pages, so the balance follows recent events. Only with
/// `Mode::All` (the balance is 5.8's).
pub(crate) fn note_cost(mode: Mode, node: &mut Node, file: bool, pages: u64) {
    if mode != Mode::All {
        return;
    }
    let lru_pages: u64 = node.lists.iter().map(|l| l.len).sum();
    add_cost(&mut node.reclaim_cost, file, pages, lru_pages);
}

fn add_cost(cost: &mut [u64; 2], file: bool, pages: u64, lru_pages: u64) {
    cost[file as usize] += pages;
    if cost[0] + cost[1] > lru_pages / 4 {
        cost[0] /= 2;
        cost[1] /= 2;
    }
}

/// get_scan_count's SCAN_FRACT weights (anon, file) for `swappiness` on `node`: the kind whose
/// reclaim has cost more gets less of the pressure, each at least a third of what swappiness
/// alone gives it (5.8+). With no cost recorded, swappiness : 200 - swappiness.
pub(crate) fn scan_fractions(node: &Node, swappiness: u64) -> (u128, u128) {
    fractions(node.reclaim_cost, swappiness)
}

fn fractions(cost: [u64; 2], swappiness: u64) -> (u128, u128) {
    let [a, f] = cost.map(u128::from);
    let total = a + f;
    let (anon_cost, file_cost) = (total + a, total + f);
    let total = anon_cost + file_cost;
    let ap = swappiness as u128 * (total + 1) / (anon_cost + 1);
    let fp = (200 - swappiness) as u128 * (total + 1) / (file_cost + 1);
    (ap, fp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_move_the_balance_and_decay() {
        // No cost recorded: swappiness alone, 60 : 140.
        assert_eq!(fractions([0, 0], 60), (60, 140));
        // Anon has cost 30, file 10 (total 40): anon_cost 70, file_cost 50, total 120;
        // ap = 60 x 121 / 71 = 102, fp = 140 x 121 / 51 = 332.
        assert_eq!(fractions([30, 10], 60), (102, 332));
        // However lopsided, no kind is left out: with all the cost on anon, anon_cost = 2t and
        // file_cost = t of 3t, so anon gets 60 x 3/2 (89 by integer division) to file's 140 x 3
        // (419), "at least a third of the pressure is applied, before swappiness".
        assert_eq!(fractions([1_000_000, 0], 60), (89, 419));
        // Decay: both halve once they pass a quarter of the LRU pages (100 pages: 25).
        let mut c = [20, 5];
        add_cost(&mut c, true, 0, 100);
        assert_eq!(c, [20, 5]);
        add_cost(&mut c, false, 1, 100);
        assert_eq!(c, [10, 2]);
    }

    #[test]
    fn bucket_order_keeps_every_page_of_memory_in_the_stamp() {
        assert_eq!(bucket_order(1 << 20), 0);
        assert_eq!(bucket_order(1 << 24), 0);
        assert_eq!(bucket_order((1 << 24) + 1), 1);
        assert_eq!(bucket_order(1 << 30), 6);
    }
}
