//! Refault distance, after mm/workingset.c (Linux 6.1): each node counts the pages it evicts and
//! activates (`nonresident_age`); an evicted page keeps that count as its shadow entry, and when
//! it is read back the count since is how much larger the inactive list would have had to be to
//! keep it. A page whose distance fits in the evicting node's workingset (its active file pages,
//! plus anon pages while swap has room) comes back on the active list, so a working set larger
//! than the inactive list but smaller than memory stops being evicted and read again at every
//! turn. File pages since Linux 3.15, anonymous ones since 5.9 (`os.workingset`, off by default:
//! the kernel also charges refaults to their kind's reclaim cost, lru_note_cost_refault, which
//! moves get_scan_count's anon/file balance, and without that feedback activated file pages push
//! anon pages out to swap far more than the kernel would). Deviations: no memcg, no
//! PG_workingset (it only feeds PSI's thrashing counters), and at most 64 nodes in a shadow (a
//! page evicted from a node beyond has none).

use super::lru::Lru;
use super::Memory;
use crate::node::Node;
use crate::pagetable::ACTIVE;

/// What refaults are tested, by kernel version: `All` (5.9+), `File` (3.15-5.8), `Off`.
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

/// A shadow: a valid bit, the node (6 bits) and the node's age at eviction, in buckets of
/// 2^bucket_order evictions (25 bits), as pack_shadow packs memcg id, node and timestamp.
const VALID: u32 = 1 << 31;
const NODE_SHIFT: u32 = 25;
const MAX_NODES: usize = 64;
const AGE_MASK: u64 = (1 << NODE_SHIFT) - 1;

/// The shadows' bucket order for `total_pages` of memory (workingset_init: the timestamp bits
/// hold every page of memory, coarsened when they cannot).
pub(crate) fn bucket_order(total_pages: u64) -> u32 {
    let max_order = u64::BITS - total_pages.saturating_sub(1).leading_zeros();
    max_order.saturating_sub(NODE_SHIFT)
}

/// workingset_age_nonresident: a page activated on `node`.
#[inline]
pub(crate) fn age(node: &mut Node) {
    node.nonresident_age += 1;
}

/// workingset_eviction: page `p` leaves `node` for swap or the block device. Off, it keeps no
/// shadow (nor the per-page array that holds them, where nothing else needs it).
pub(crate) fn evict(mem: &mut Memory, lru: &Lru, p: u32, node: usize) {
    let age = mem.nodes[node].nonresident_age;
    mem.nodes[node].nonresident_age += 1;
    if lru.workingset != Mode::Off && node < MAX_NODES {
        let stamp = ((age >> lru.ws_order) & AGE_MASK) as u32;
        mem.pt.ext_mut(p).shadow = VALID | (node as u32) << NODE_SHIFT | stamp;
    }
}

/// One of other software's pages (no page of the trace, so no shadow) leaves `node`.
pub(crate) fn evict_untracked(node: &mut Node) {
    node.nonresident_age += 1;
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
    let from = ((shadow & !VALID) >> NODE_SHIFT) as usize;
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
    ACTIVE
}
