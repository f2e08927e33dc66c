//! Swap and the page cache's block device, both the `[swap]` device: anonymous pages written to
//! swap slots and faulted back (mm/swap_state.c, mm/page_io.c, do_swap_page in mm/memory.c);
//! file pages dropped, written back first when dirty, and read back on refault (mm/filemap.c).
//! Swap-out writes of one reclaim pass are batched: slots are handed out in order (the
//! allocator's per-cluster scan, mm/swapfile.c), so a pass's pages go out as contiguous
//! requests of up to SWAP_CLUSTER_MAX pages. A swap-in fault reads the aligned 2^page_cluster
//! slots around its own (swap_cluster_readahead) in one request; the neighbours wait in the swap
//! cache, keeping their slots, until their first access maps them (a minor fault) or reclaim
//! drops them again without a write.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;
use tiersim_core::{NodeId, Ns, Op, Result};
use tiersim_devices::{Device, DeviceRequest};

use super::PageEvent;
use crate::pagetable::{PageEntry, DIRTY, DROPPED, FILE, NIL, SWAPCACHE, SWAPPED};
use crate::sim::Engine;

/// SWAP_CLUSTER_MAX: the most pages one swap write request carries.
const WRITE_BATCH: u32 = 32;

pub(crate) struct Swap {
    pub(crate) dev: Box<dyn Device>,
    pub(crate) capacity: u64,
    /// Slots in use: pages only in swap and pages in the swap cache.
    pub(crate) used: u64,
    pub(crate) free_slots: BTreeSet<u32>,
    pub(crate) next_slot: u32,
    /// Slots a swap-in reads together (2^vm.page-cluster).
    pub(crate) cluster: u64,
    /// The page in each slot, NIL for a free one.
    pub(crate) owner: Vec<u32>,
    /// The slot of each page in the swap cache.
    pub(crate) cache_slot: FxHashMap<u32, u32>,
    /// Slots of the current reclaim pass waiting for their write.
    pub(crate) pending: Vec<u32>,
    pub(crate) swap_ins: u64,
    pub(crate) swap_outs: u64,
    pub(crate) epoch_ins: u64,
    pub(crate) epoch_outs: u64,
    /// Pages read into the swap cache by readahead, later mapped, and dropped unused.
    pub(crate) readahead_pages: u64,
    pub(crate) cache_hits: u64,
    pub(crate) cache_drops: u64,
    /// Swap-cache pages whose slot went to a swap-out while swap was full.
    pub(crate) cache_freed: u64,
    pub(crate) write_requests: u64,
    pub(crate) read_requests: u64,
    /// File pages dropped by reclaim, the dirty ones written back first, and read back later.
    pub(crate) file_drops: u64,
    pub(crate) file_writebacks: u64,
    pub(crate) file_refaults: u64,
}

impl Swap {
    fn take_slot(&mut self, p: u32) -> u32 {
        // Lowest free slot first, like the allocator's scan, so a pass's slots are contiguous.
        let slot = match self.free_slots.pop_first() {
            Some(s) => s,
            None => {
                self.next_slot += 1;
                self.next_slot - 1
            }
        };
        if self.owner.len() <= slot as usize {
            self.owner.resize(slot as usize + 1, NIL);
        }
        self.owner[slot as usize] = p;
        self.used += 1;
        slot
    }

    fn free_slot(&mut self, slot: u32) {
        self.owner[slot as usize] = NIL;
        self.used -= 1;
        self.free_slots.insert(slot);
    }
}

impl Engine {
    /// Drop file page `p` (already off its LRU list) from memory at `t`, writing it back to the
    /// block device first if it is dirty; it keeps no swap slot.
    pub(crate) fn drop_file_page(&mut self, p: u32, node: usize, t: Ns) {
        let e = self.pt.entries[p as usize];
        self.nodes[node].release_frame(e.frame);
        let req = self.block_request(p, t, Op::Write);
        let measuring = self.measuring;
        let dev = self.swap.as_mut().expect("callers check for a block device");
        if e.flags & DIRTY != 0 {
            dev.dev.access(&req);
            dev.file_writebacks += measuring as u64;
            self.files.dirty.remove(&p);
            self.files.stats.wb_reclaim += measuring as u64;
        }
        dev.file_drops += measuring as u64;
        self.pt.entries[p as usize] = PageEntry { frame: 0, node: DROPPED, flags: FILE };
        self.page_event(PageEvent::Evicted(p, node as NodeId));
    }

    /// A page-sized transfer of file page `p` on the block device: the file offset stands in for
    /// the page id, which is stable for the run.
    pub(crate) fn block_request(&self, p: u32, t: Ns, op: Op) -> DeviceRequest {
        DeviceRequest { now: t, addr: p as u64 * self.page_size, size: self.page_size as u32, op, socket: 0, cpu: 0, remote: false }
    }

    /// Move page `p` (already off its LRU list) to swap at `t`: a page still in the swap cache
    /// is clean there and only drops its frame; any other takes a slot and joins the pass's
    /// writes (`flush_swap_writes`).
    pub(crate) fn swap_out(&mut self, p: u32, node: usize) {
        let e = self.pt.entries[p as usize];
        self.nodes[node].release_frame(e.frame);
        let measuring = self.measuring;
        let swap = self.swap.as_mut().expect("callers check for swap space");
        let slot = if e.flags & SWAPCACHE != 0 {
            swap.cache_drops += measuring as u64;
            swap.cache_slot.remove(&p).expect("a swap-cache page has a slot")
        } else {
            if swap.used >= swap.capacity {
                // Swap is full: take the slot of a page waiting in the swap cache, which becomes
                // an ordinary (dirty) anon page (try_to_free_swap under vm_swap_full).
                let (&q, &s) = swap.cache_slot.iter().next().expect("reclaim swaps out only with a free or cached slot");
                swap.cache_slot.remove(&q);
                swap.free_slot(s);
                swap.cache_freed += measuring as u64;
                let f = &mut self.pt.entries[q as usize].flags;
                *f = (*f & !SWAPCACHE) | DIRTY;
            }
            let swap = self.swap.as_mut().expect("callers check for swap space");
            let slot = swap.take_slot(p);
            swap.pending.push(slot);
            if measuring {
                swap.swap_outs += 1;
                swap.epoch_outs += 1;
            }
            slot
        };
        self.pt.entries[p as usize] = PageEntry { frame: slot, node: SWAPPED, flags: 0 };
        self.page_event(PageEvent::Evicted(p, node as NodeId));
    }

    /// Issue the reclaim pass's swap writes at `t`: runs of consecutive slots, up to
    /// SWAP_CLUSTER_MAX pages each, one request per run.
    pub(crate) fn flush_swap_writes(&mut self, t: Ns) {
        let page = self.page_size;
        let Some(swap) = self.swap.as_mut() else { return };
        if swap.pending.is_empty() {
            return;
        }
        let mut slots = std::mem::take(&mut swap.pending);
        slots.sort_unstable();
        let mut i = 0;
        while i < slots.len() {
            let mut j = i + 1;
            while j < slots.len() && slots[j] == slots[j - 1] + 1 && (j - i) < WRITE_BATCH as usize {
                j += 1;
            }
            let n = (j - i) as u64;
            swap.dev.access(&DeviceRequest { now: t, addr: slots[i] as u64 * page, size: (n * page) as u32, op: Op::Write, socket: 0, cpu: 0, remote: false });
            swap.write_requests += self.measuring as u64;
            i = j;
        }
        slots.clear();
        swap.pending = slots;
    }

    /// Bring page `p` back from swap at time `t`, reading the slots of its cluster that hold
    /// swapped pages into the swap cache with it; returns the fault time in ps.
    pub(crate) fn swap_in(&mut self, p: u32, cpu: usize, vpn: u64, t: Ns) -> Result<u64> {
        let slot = self.pt.entries[p as usize].frame;
        let swap = self.swap.as_mut().expect("a swapped page implies swap");
        // The run of occupied, swapped-only slots around `slot` inside its aligned cluster: one
        // request (the kernel's per-slot reads merge in the block plug).
        let base = slot as u64 & !(swap.cluster - 1);
        let end = (base + swap.cluster).min(swap.owner.len() as u64);
        let swapped_only = |s: u64, sw: &Swap, pt: &crate::pagetable::PageTable| {
            let q = sw.owner[s as usize];
            q != NIL && pt.entries[q as usize].node == SWAPPED
        };
        let mut lo = slot as u64;
        while lo > base && swapped_only(lo - 1, swap, &self.pt) {
            lo -= 1;
        }
        let mut hi = slot as u64 + 1;
        while hi < end && swapped_only(hi, swap, &self.pt) {
            hi += 1;
        }
        let done = swap.dev.access(&DeviceRequest {
            now: t,
            addr: lo * self.page_size,
            size: ((hi - lo) * self.page_size) as u32,
            op: Op::Read,
            socket: self.cpus[cpu].socket,
            cpu: cpu as u32,
            remote: false,
        });
        swap.free_slot(slot);
        if self.measuring {
            swap.swap_ins += 1;
            swap.epoch_ins += 1;
            swap.read_requests += 1;
        }
        let io_ps = (done - t) * 1000 + self.swap_fault_ps;
        let at = t + io_ps / 1000;
        // A swapped-in page starts inactive (lru_cache_add_inactive_or_unevictable, 5.9+).
        let (_, reclaim_ps) = self.alloc(p, cpu, vpn, at, 0)?;
        let ra_ps = self.swap_readahead(cpu, lo, hi, slot as u64, at);
        Ok(io_ps + reclaim_ps + ra_ps)
    }

    /// Put the pages of slots `[lo, hi)` other than `skip` in the swap cache, allocated along the
    /// faulting CPU's zonelist like any page (waking kswapd, then direct reclaim, whose time is
    /// returned in ps and charged to the fault); they start on the inactive anon list. Readahead
    /// stops at the first allocation that fails.
    fn swap_readahead(&mut self, cpu: usize, lo: u64, hi: u64, skip: u64, t: Ns) -> u64 {
        let mut charged = 0;
        let local = self.cpus[cpu].node as usize;
        for s in lo..hi {
            if s == skip {
                continue;
            }
            let swap = self.swap.as_ref().expect("swap-in implies swap");
            let q = swap.owner[s as usize];
            if q == NIL || self.pt.entries[q as usize].node != SWAPPED {
                continue;
            }
            let zl = std::mem::take(&mut self.topo.zonelists[local]);
            let got = self.alloc_along(&zl, t);
            self.topo.zonelists[local] = zl;
            let Ok((node, ps)) = got else { break };
            charged += ps;
            let frame = self.nodes[node].take_frame();
            self.pt.entries[q as usize] = PageEntry { frame, node: node as u16, flags: SWAPCACHE };
            self.lru_push_head(node, q);
            self.policy.on_page_placed(q, node as NodeId);
            let measuring = self.measuring;
            let swap = self.swap.as_mut().expect("swap-in implies swap");
            swap.cache_slot.insert(q, s as u32);
            swap.readahead_pages += measuring as u64;
        }
        charged
    }

    /// First access to swap-cache page `p`: do_swap_page finds it cached and maps it; its slot
    /// is freed. Returns the minor fault's time in ps.
    pub(crate) fn swap_cache_map(&mut self, p: u32) -> u64 {
        let measuring = self.measuring;
        let swap = self.swap.as_mut().expect("a swap-cache page implies swap");
        let slot = swap.cache_slot.remove(&p).expect("a swap-cache page has a slot");
        swap.free_slot(slot);
        swap.cache_hits += measuring as u64;
        self.pt.entries[p as usize].flags &= !SWAPCACHE;
        self.fault_ps
    }

    /// Read dropped file page `p` back from the block device at `t` (a major fault); returns the
    /// fault time in ps. It comes back on the inactive file list (add_to_page_cache_lru).
    pub(crate) fn file_refault(&mut self, p: u32, cpu: usize, vpn: u64, t: Ns) -> Result<u64> {
        let req = DeviceRequest { socket: self.cpus[cpu].socket, cpu: cpu as u32, ..self.block_request(p, t, Op::Read) };
        let swap = self.swap.as_mut().expect("a dropped file page implies a block device");
        let done = swap.dev.access(&req);
        if self.measuring {
            swap.file_refaults += 1;
        }
        let io_ps = (done - t) * 1000 + self.swap_fault_ps;
        let (_, reclaim_ps) = self.alloc(p, cpu, vpn, t + io_ps / 1000, FILE)?;
        Ok(io_ps + reclaim_ps)
    }
}
