//! Reclaim after mm/vmscan.c (shrink_node; kswapd's balance_pgdat): victims from the LRU lists
//! (`lru.rs`) are demoted to the policy's demotion target while it has free memory above min
//! (demote_page_list), else swapped out or, for file pages, dropped. An allocation that finds
//! every node below its low watermark wakes kswapd (`kswapd.rs`) to take them up to their high
//! one; a policy's own goal (TPP's demotion watermark) wakes it early.

use tiersim_core::{Ns, Op, Result};

use super::filemap::FileIo;
use super::kswapd::Kswapd;
use super::lru::{Lru, Victim};
use super::migrate::Migrator;
use super::swap::{block_request, Swap};
use super::workingset;
use super::Memory;
use crate::pagetable::{DIRTY, FILE, SWAPCACHE};

/// The parts reclaim takes pages with: the lists it picks victims from, the copy engine that
/// demotes them, swap for anonymous pages and the page cache whose file pages it drops (the
/// kernel reaches these through scan_control and globals), and the kswapd threads that reclaim
/// in the background.
pub(crate) struct Vmscan<'a> {
    pub(crate) lru: &'a mut Lru,
    pub(crate) kswapd: &'a mut Kswapd,
    pub(crate) migrate: &'a mut Migrator,
    pub(crate) swap: Option<&'a mut Swap>,
    pub(crate) files: &'a mut FileIo,
}

/// Where and how much reclaim takes, per node.
pub(crate) struct Reclaimer {
    /// The policy's demotion target of each node (next_demotion_node), if any.
    demote_to: Vec<Option<usize>>,
    /// Per node: free pages kswapd keeps proactively (TPP's demotion watermark).
    goal: Vec<Option<u64>>,
    /// Pages direct reclaim takes per node and try (`os.reclaim_batch`).
    pub(crate) batch: u64,
}

impl Reclaimer {
    pub(crate) fn new(demote_to: Vec<Option<usize>>, goal: Vec<Option<u64>>, batch: u64) -> Reclaimer {
        Reclaimer { demote_to, goal, batch }
    }

    /// Reclaim up to `want` pages of `node` at `t`. Each LRU victim is demoted to the policy's
    /// demotion target while that node has free memory above its min watermark (the kernel's
    /// demotion allocation does not reclaim on the target), else written to swap.
    pub(crate) fn reclaim(&self, mem: &mut Memory, vm: &mut Vmscan, node: usize, want: u64, t: Ns) -> Result<u64> {
        Ok(self.reclaim_timed(mem, vm, node, want, t)?.0)
    }

    /// `reclaim`, also returning when the last demotion's copy completes (`t` without one).
    pub(crate) fn reclaim_timed(
        &self,
        mem: &mut Memory,
        vm: &mut Vmscan,
        node: usize,
        want: u64,
        t: Ns,
    ) -> Result<(u64, Ns)> {
        let demote_to = self.demote_to[node];
        let mut done = 0;
        let mut copied = t;
        while done < want {
            // The demotion allocation wakes kswapd on its target when that is low
            // (alloc_demote_page, GFP_NOWAIT = __GFP_KSWAPD_RECLAIM, mm/vmscan.c 6.1), so the
            // target is reclaimed in turn (demoted further, swapped or dropped) rather than
            // filling up and leaving this node only swap.
            if let Some(d) = demote_to {
                if mem.nodes[d].free() < mem.nodes[d].wmark_low {
                    vm.kswapd.wake(mem, d, mem.nodes[d].wmark_high, t);
                }
            }
            let target = demote_to.filter(|&d| mem.nodes[d].free() > mem.nodes[d].wmark_min);
            // A full swap still takes pages: the swap cache gives up slots (`Swap::swap_out`).
            let can_swap = vm.swap.as_ref().is_some_and(|s| s.used < s.capacity || !s.cache_slot.is_empty());
            // File pages are dropped to (and read back from) the block device, `[swap]`'s.
            let can_drop = vm.swap.is_some();
            if target.is_none() && !can_swap && !can_drop {
                break;
            }
            let Some(victim) =
                vm.lru.pick_victim(mem, node, target.is_some() || can_swap, target.is_some() || can_drop)
            else {
                break;
            };
            match (victim, target) {
                (Victim::Page(p), Some(d)) => copied = copied.max(vm.migrate.move_page(mem, p, node, d, t, true)),
                (Victim::Page(p), None) if mem.pt.entries[p as usize].flags & FILE != 0 => {
                    workingset::evict(mem, vm.lru, p, node);
                    // A dirty page is written out first: pageout's cost (stat.nr_pageout).
                    if mem.pt.entries[p as usize].flags & DIRTY != 0 {
                        workingset::note_cost(vm.lru.workingset, &mut mem.nodes[node], true, 1);
                    }
                    drop_file_page(mem, vm, p, node, t)
                }
                (Victim::Page(p), None) => {
                    workingset::evict(mem, vm.lru, p, node);
                    // A page still in the swap cache is clean there; any other is written.
                    if mem.pt.entries[p as usize].flags & SWAPCACHE == 0 {
                        workingset::note_cost(vm.lru.workingset, &mut mem.nodes[node], false, 1);
                    }
                    vm.swap.as_deref_mut().expect("checked above").swap_out(mem, p, node)
                }
                (Victim::Occupied { file }, Some(d)) => {
                    copied = copied.max(vm.migrate.move_occupied(mem, node, d, file, t))
                }
                // Other software's page cache is clean: dropped without a write.
                (Victim::Occupied { file: true }, None) => {
                    workingset::age(&mut mem.nodes[node]);
                    mem.nodes[node].release_occupied(true);
                }
                (Victim::Occupied { file: false }, None) => {
                    workingset::age(&mut mem.nodes[node]);
                    vm.swap.as_deref_mut().expect("checked above").swap_out_occupied(mem, node)
                }
            }
            done += 1;
        }
        if let Some(swap) = vm.swap.as_deref_mut() {
            swap.flush_writes(mem.page_size, t);
        }
        Ok((done, copied))
    }

    /// The allocator's wakeup_kswapd: every node below its low watermark gets kswapd, to take it
    /// up to its high watermark. kswapd's time is its own, not the application's CPUs'; its swap
    /// writes and copies still occupy the devices.
    pub(crate) fn wake_kswapd(&self, mem: &Memory, vm: &mut Vmscan, t: Ns) {
        for n in 0..mem.nodes.len() {
            let node = &mem.nodes[n];
            if node.free() < node.wmark_low {
                vm.kswapd.wake(mem, n, node.wmark_high, t);
            }
        }
    }

    /// After an allocation on `node`: a policy's kswapd goal (TPP's demotion watermark) wakes
    /// kswapd as soon as free memory drops below it.
    pub(crate) fn proactive(&self, mem: &Memory, vm: &mut Vmscan, node: usize, t: Ns) {
        if let Some(goal) = self.goal[node] {
            vm.kswapd.wake(mem, node, goal, t);
        }
    }
}

/// Drop file page `p` (already off its LRU list) from memory at `t`, writing it back to the
/// block device first if it is dirty; it keeps no swap slot.
fn drop_file_page(mem: &mut Memory, vm: &mut Vmscan, p: u32, node: usize, t: Ns) {
    let dirty = mem.pt.entries[p as usize].flags & DIRTY != 0;
    let dev = vm.swap.as_deref_mut().expect("callers check for a block device");
    if dirty {
        dev.dev.access(&block_request(p, mem.page_size, t, Op::Write));
        dev.stats.file_writebacks += 1;
        vm.files.dirty.remove(&p);
        vm.files.allocated(p);
        vm.files.stats.wb_reclaim += 1;
    }
    dev.stats.file_drops += 1;
    vm.files.evict(mem, p, node);
}
