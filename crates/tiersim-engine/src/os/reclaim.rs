//! Reclaim after mm/vmscan.c (shrink_node; kswapd's balance_pgdat): victims from the LRU lists
//! (`lru.rs`) are demoted to the policy's demotion target while it has free memory above min
//! (demote_page_list), else swapped out or, for file pages, dropped. kswapd takes every node
//! below its low watermark up to its high one; a policy's own goal (TPP's demotion watermark)
//! wakes it early.

use tiersim_core::{Ns, Op, Result};

use super::filemap::FileIo;
use super::lru::Lru;
use super::migrate::Migrator;
use super::swap::{block_request, Swap};
use super::Memory;
use crate::pagetable::{DIRTY, FILE};

/// The parts reclaim takes pages with: the lists it picks victims from, the copy engine that
/// demotes them, swap for anonymous pages and the page cache whose file pages it drops (the
/// kernel reaches these through scan_control and globals).
pub(crate) struct Vmscan<'a> {
    pub(crate) lru: &'a mut Lru,
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
        let demote_to = self.demote_to[node];
        let mut done = 0;
        while done < want {
            let target = demote_to.filter(|&d| mem.nodes[d].free() > mem.nodes[d].wmark_min);
            // A full swap still takes pages: the swap cache gives up slots (`Swap::swap_out`).
            let can_swap = vm.swap.as_ref().is_some_and(|s| s.used < s.capacity || !s.cache_slot.is_empty());
            // File pages are dropped to (and read back from) the block device, `[swap]`'s.
            let can_drop = vm.swap.is_some();
            if target.is_none() && !can_swap && !can_drop {
                break;
            }
            let Some(p) = vm.lru.pick_victim(mem, node, target.is_some() || can_swap, target.is_some() || can_drop)
            else {
                break;
            };
            match target {
                Some(d) => {
                    vm.migrate.move_page(mem, p, node, d, t, true);
                }
                None if mem.pt.entries[p as usize].flags & FILE != 0 => drop_file_page(mem, vm, p, node, t),
                None => vm.swap.as_deref_mut().expect("checked above").swap_out(mem, p, node),
            }
            done += 1;
        }
        if let Some(swap) = vm.swap.as_deref_mut() {
            swap.flush_writes(mem.page_size, t);
        }
        Ok(done)
    }

    /// kswapd: every node below its low watermark is reclaimed up to its high watermark. It runs
    /// on a core of its own, so its time is not charged to the application's CPUs; its swap
    /// writes still occupy the swap device.
    pub(crate) fn kswapd(&self, mem: &mut Memory, vm: &mut Vmscan, t: Ns) -> Result<()> {
        for n in 0..mem.nodes.len() {
            let node = &mem.nodes[n];
            if node.free() < node.wmark_low {
                let want = node.wmark_high - node.free();
                self.reclaim(mem, vm, n, want, t)?;
            }
        }
        Ok(())
    }

    /// After an allocation on `node`: a policy's kswapd goal (TPP's demotion watermark) wakes
    /// kswapd, on a core of its own, as soon as free memory drops below it.
    pub(crate) fn proactive(&self, mem: &mut Memory, vm: &mut Vmscan, node: usize, t: Ns) -> Result<()> {
        if let Some(goal) = self.goal[node] {
            let free = mem.nodes[node].free();
            if free < goal {
                self.reclaim(mem, vm, node, goal - free, t)?;
            }
        }
        Ok(())
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
        vm.files.stats.wb_reclaim += 1;
    }
    dev.stats.file_drops += 1;
    vm.files.evict(mem, p, node);
}
