//! Swap and the page cache's block device, both the `[swap]` device: anonymous pages written to
//! swap slots and faulted back (mm/swap_state.c, mm/page_io.c, do_swap_page in mm/memory.c);
//! file pages dropped, written back first when dirty, and read back on refault (mm/filemap.c).
//! Swap-out writes of one reclaim pass are batched: slots are handed out in order (the
//! allocator's per-cluster scan, mm/swapfile.c), so a pass's pages go out as contiguous
//! requests of up to SWAP_CLUSTER_MAX pages. A swap-in fault reads ahead by virtual address
//! (swap_vma_readahead, the kernel's default for SSD swap; `os.swap_readahead = "vma"`) or the
//! aligned 2^page_cluster slots around its own (swap_cluster_readahead, `"cluster"`, what the
//! kernel does for rotational swap); the neighbours wait in the swap cache, keeping their slots, until their first access maps them (a minor fault) or reclaim
//! drops them again without a write.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;
use tiersim_core::{NodeId, Ns, Op, Result};
use tiersim_devices::{Device, DeviceRequest};

use super::{page_runs, PageEvent};
use crate::pagetable::{PageEntry, CHUNK, DIRTY, DROPPED, FILE, NIL, SWAPCACHE, SWAPPED};
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
    /// Slots a swap-in reads together (2^vm.page-cluster), the most pages of a VMA window.
    pub(crate) cluster: u64,
    /// Readahead by virtual address (swap_vma_readahead) rather than by slot cluster.
    pub(crate) vma_readahead: bool,
    /// The VMA readahead state: the last fault's page, its window, readahead hits since.
    pub(crate) vma_ra: (u64, u64, u64),
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
        let dirty = self.pt.entries[p as usize].flags & DIRTY != 0;
        let req = self.block_request(p, t, Op::Write);
        let measuring = self.measuring;
        let dev = self.swap.as_mut().expect("callers check for a block device");
        if dirty {
            dev.dev.access(&req);
            dev.file_writebacks += measuring as u64;
            self.files.dirty.remove(&p);
            self.files.stats.wb_reclaim += measuring as u64;
        }
        dev.file_drops += measuring as u64;
        self.evict_file_page(p, node);
    }

    /// Free the frame of clean file page `p` (already off its LRU list): it stays a file page,
    /// which its next access refaults.
    pub(crate) fn evict_file_page(&mut self, p: u32, node: usize) {
        self.files.in_read.remove(&p);
        self.nodes[node].release_frame(self.pt.entries[p as usize].frame);
        self.pt.entries[p as usize] = PageEntry { frame: 0, node: DROPPED, flags: FILE };
        self.page_event(PageEvent::Evicted(p, node as NodeId));
    }

    /// A page-sized transfer of file page `p` on the block device: the file offset stands in for
    /// the page id, which is stable for the run.
    pub(crate) fn block_request(&self, p: u32, t: Ns, op: Op) -> DeviceRequest {
        DeviceRequest {
            now: t,
            addr: p as u64 * self.page_size,
            size: self.page_size as u32,
            op,
            socket: 0,
            cpu: 0,
            remote: false,
        }
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
                let (&q, &s) =
                    swap.cache_slot.iter().next().expect("reclaim swaps out only with a free or cached slot");
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
        for run in page_runs(&slots, u64::from(WRITE_BATCH)) {
            let n = run.len() as u64;
            swap.dev.access(&DeviceRequest {
                now: t,
                addr: slots[run.start] as u64 * page,
                size: (n * page) as u32,
                op: Op::Write,
                socket: 0,
                cpu: 0,
                remote: false,
            });
            swap.write_requests += self.measuring as u64;
        }
        slots.clear();
        swap.pending = slots;
    }

    /// Bring page `p` back from swap at time `t` with its readahead into the swap cache: the
    /// slots of its cluster (`cluster_window`) or the swapped pages around its address
    /// (`vma_window`). The slots are read sorted, contiguous ones as one request (the block
    /// plug merges them); the fault waits for the request holding its own. Returns the fault
    /// time in ps.
    pub(crate) fn swap_in(&mut self, p: u32, cpu: usize, vpn: u64, t: Ns) -> Result<u64> {
        let slot = self.pt.entries[p as usize].frame;
        let mut slots = if self.swap.as_ref().is_some_and(|s| s.vma_readahead) {
            self.vma_window(p, vpn)
        } else {
            self.cluster_window(slot)
        };
        slots.sort_unstable();
        let swap = self.swap.as_mut().expect("a swapped page implies swap");
        let mut done = t;
        for run in page_runs(&slots, u64::MAX) {
            let (i, j) = (run.start, run.end);
            let end = swap.dev.access(&DeviceRequest {
                now: t,
                addr: slots[i] as u64 * self.page_size,
                size: ((j - i) as u64 * self.page_size) as u32,
                op: Op::Read,
                socket: self.cpus[cpu].socket,
                cpu: cpu as u32,
                remote: false,
            });
            if slots[i..j].contains(&slot) {
                done = end;
            }
            swap.read_requests += self.measuring as u64;
        }
        swap.free_slot(slot);
        if self.measuring {
            swap.swap_ins += 1;
            swap.epoch_ins += 1;
        }
        let io_ps = (done - t) * 1000 + self.swap_fault_ps;
        let at = t + io_ps / 1000;
        // A swapped-in page starts inactive (lru_cache_add_inactive_or_unevictable, 5.9+).
        let (_, reclaim_ps) = self.alloc(p, cpu, vpn, at, 0)?;
        let ra_ps = self.swap_readahead(cpu, &slots, slot, at);
        Ok(io_ps + reclaim_ps + ra_ps)
    }

    /// swap_cluster_readahead: the run of occupied, swapped-only slots around `slot` inside its
    /// aligned cluster of 2^page_cluster slots.
    fn cluster_window(&self, slot: u32) -> Vec<u32> {
        let swap = self.swap.as_ref().expect("a swapped page implies swap");
        let base = slot & !(swap.cluster as u32 - 1);
        let end = (base as u64 + swap.cluster).min(swap.owner.len() as u64) as u32;
        let swapped_only = |s: u32| {
            let q = swap.owner[s as usize];
            q != NIL && self.pt.entries[q as usize].node == SWAPPED
        };
        let mut lo = slot;
        while lo > base && swapped_only(lo - 1) {
            lo -= 1;
        }
        let mut hi = slot + 1;
        while hi < end && swapped_only(hi) {
            hi += 1;
        }
        (lo..hi).collect()
    }

    /// swap_vma_readahead (mm/swap_state.c, Linux 5.x; the default for swap on SSDs): the
    /// window's size comes from __swapin_nr_pages (readahead hits since the last fault + 2,
    /// rounded up to a power of two from 4; with no hits, 2 pages only after an adjacent fault,
    /// else 1; at most 2^min(page_cluster, SWAP_RA_ORDER_CEILING = 5); shrinking at most by
    /// half per fault), placed after the fault when the previous fault was the page before,
    /// before it when it was the page after, else around it (swap_ra_info), clamped to the
    /// fault's 2 MiB page-table page. The window's swapped pages are read, wherever their slots
    /// are. Deviation: the kernel keeps the state per VMA; traces carry no mappings, so the
    /// whole address space is one VMA.
    fn vma_window(&mut self, p: u32, vpn: u64) -> Vec<u32> {
        let swap = self.swap.as_mut().expect("a swapped page implies swap");
        let max_win = swap.cluster.min(1 << 5);
        let (prev, prev_win, hits) = swap.vma_ra;
        let win = if max_win == 1 {
            1
        } else {
            let mut pages = hits + 2;
            if pages == 2 {
                if vpn != prev + 1 && vpn + 1 != prev {
                    pages = 1;
                }
            } else {
                pages = pages.max(4).next_power_of_two();
            }
            pages.min(max_win).max(prev_win / 2)
        };
        swap.vma_ra = (vpn, win, 0);
        let (lo, hi) = if vpn == prev + 1 {
            (vpn, vpn + win)
        } else if vpn + 1 == prev {
            ((vpn + 1).saturating_sub(win), vpn + 1)
        } else {
            let left = (win - 1) / 2;
            (vpn.saturating_sub(left), vpn.saturating_sub(left) + win)
        };
        let pmd = vpn & !(CHUNK as u64 - 1);
        let (lo, hi) = (lo.max(pmd), hi.min(pmd + CHUNK as u64));
        // Pages of one 2 MiB region have consecutive ids.
        let base = p - (vpn - pmd) as u32;
        (lo..hi)
            .map(|v| self.pt.entries[(base + (v - pmd) as u32) as usize])
            .filter(|e| e.node == SWAPPED)
            .map(|e| e.frame)
            .collect()
    }

    /// Put the pages of `slots` other than `skip` in the swap cache, allocated along the
    /// faulting CPU's zonelist like any page (waking kswapd, then direct reclaim, whose time is
    /// returned in ps and charged to the fault); they start on the inactive anon list. Readahead
    /// stops at the first allocation that fails.
    fn swap_readahead(&mut self, cpu: usize, slots: &[u32], skip: u32, t: Ns) -> u64 {
        let mut charged = 0;
        let local = self.cpus[cpu].node as usize;
        for &s in slots {
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
            swap.cache_slot.insert(q, s);
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
        // A readahead hit widens the next VMA window (lookup_swap_cache).
        swap.vma_ra.2 += 1;
        self.pt.entries[p as usize].flags &= !SWAPCACHE;
        self.fault_ps
    }

    /// Read dropped file page `p` back from the block device at `t` (a major fault); returns the
    /// fault time in ps. It comes back on the inactive file list (add_to_page_cache_lru).
    pub(crate) fn file_refault(&mut self, p: u32, cpu: usize, vpn: u64, t: Ns) -> Result<u64> {
        let req =
            DeviceRequest { socket: self.cpus[cpu].socket, cpu: cpu as u32, ..self.block_request(p, t, Op::Read) };
        let swap = self.swap.as_mut().expect("a dropped file page implies a block device");
        let done = swap.dev.access(&req);
        if self.measuring {
            swap.file_refaults += 1;
            self.files.stats.pages_read += 1;
        }
        let io_ps = (done - t) * 1000 + self.swap_fault_ps;
        let (_, reclaim_ps) = self.alloc(p, cpu, vpn, t + io_ps / 1000, FILE)?;
        Ok(io_ps + reclaim_ps)
    }
}
