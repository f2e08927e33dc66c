//! Reclaim after mm/vmscan.c (shrink_node; kswapd's balance_pgdat): victims from the LRU lists
//! (`lru.rs`) are demoted to the policy's demotion target while it has free memory above min
//! (demote_page_list), else swapped out or, for file pages, dropped. kswapd takes every node
//! below its low watermark up to its high one; a policy's own goal (TPP's demotion watermark)
//! wakes it early.

use tiersim_core::{Ns, Result};

use crate::pagetable::FILE;
use crate::sim::Engine;

impl Engine {
    /// Reclaim up to `want` pages of `node` at `t`. Each LRU victim is demoted to the policy's
    /// demotion target while that node has free memory above its min watermark (the kernel's
    /// demotion allocation does not reclaim on the target), else written to swap.
    pub(crate) fn reclaim(&mut self, node: usize, want: u64, t: Ns) -> Result<u64> {
        let demote_to = self.demote_to[node];
        let mut done = 0;
        while done < want {
            let target = demote_to.filter(|&d| self.nodes[d].free() > self.nodes[d].wmark_min);
            // A full swap still takes pages: the swap cache gives up slots (`swap_out`).
            let can_swap = self.swap.as_ref().is_some_and(|s| s.used < s.capacity || !s.cache_slot.is_empty());
            // File pages are dropped to (and read back from) the block device, `[swap]`'s.
            let can_drop = self.swap.is_some();
            if target.is_none() && !can_swap && !can_drop {
                break;
            }
            let Some(p) = self.pick_victim(node, target.is_some() || can_swap, target.is_some() || can_drop) else {
                break;
            };
            match target {
                Some(d) => {
                    self.move_page(p, node, d, t, true);
                }
                None if self.pt.entries[p as usize].flags & FILE != 0 => self.drop_file_page(p, node, t),
                None => self.swap_out(p, node),
            }
            done += 1;
        }
        self.flush_swap_writes(t);
        Ok(done)
    }

    /// kswapd: every node below its low watermark is reclaimed up to its high watermark. It runs
    /// on a core of its own, so its time is not charged to the application's CPUs; its swap
    /// writes still occupy the swap device.
    pub(crate) fn kswapd(&mut self, t: Ns) -> Result<()> {
        for n in 0..self.nodes.len() {
            let node = &self.nodes[n];
            if node.free() < node.wmark_low {
                let want = node.wmark_high - node.free();
                self.reclaim(n, want, t)?;
            }
        }
        Ok(())
    }

    /// After an allocation on `node`: a policy's kswapd goal (TPP's demotion watermark) wakes
    /// kswapd, on a core of its own, as soon as free memory drops below it.
    pub(crate) fn proactive_reclaim(&mut self, node: usize, t: Ns) -> Result<()> {
        if let Some(goal) = self.reclaim_goal[node] {
            let free = self.nodes[node].free();
            if free < goal {
                self.reclaim(node, goal - free, t)?;
            }
        }
        Ok(())
    }
}
