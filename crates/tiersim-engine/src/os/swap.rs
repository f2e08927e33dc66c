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
use serde_json::{json, Value};
use tiersim_core::{NodeId, Ns, Op, Result};
use tiersim_devices::{Device, DeviceRequest};

use super::alloc::{alloc, alloc_along, Faulting};
use super::reclaim::{Reclaimer, Vmscan};
use super::{lru, page_runs, Memory, Metrics, PageEvent};
use crate::pagetable::{PageEntry, PageTable, CHUNK, DIRTY, FILE, NIL, SWAPCACHE, SWAPPED};

/// SWAP_CLUSTER_MAX: the most pages one swap write request carries.
const WRITE_BATCH: u32 = 32;

/// Swap activity over the measured part of the run.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SwapStats {
    pub(crate) swap_ins: u64,
    pub(crate) swap_outs: u64,
    /// Swap-ins and swap-outs of the current time-series epoch.
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

pub(crate) struct Swap {
    pub(crate) dev: Box<dyn Device>,
    pub(crate) capacity: u64,
    /// Slots in use: pages only in swap and pages in the swap cache.
    pub(crate) used: u64,
    free_slots: BTreeSet<u32>,
    next_slot: u32,
    /// Slots a swap-in reads together (2^vm.page-cluster), the most pages of a VMA window.
    cluster: u64,
    /// Readahead by virtual address (swap_vma_readahead) rather than by slot cluster.
    vma_readahead: bool,
    /// The VMA readahead state: the last fault's page, its window, readahead hits since.
    vma_ra: (u64, u64, u64),
    /// The page in each slot, NIL for a free one.
    pub(crate) owner: Vec<u32>,
    /// The slot of each page in the swap cache.
    pub(crate) cache_slot: FxHashMap<u32, u32>,
    /// Slots holding other software's pages (`occupied`) that reclaim swapped out.
    pub(crate) occupied_slots: u64,
    /// Slots of the current reclaim pass waiting for their write.
    pending: Vec<u32>,
    pub(crate) stats: SwapStats,
}

/// A page-sized transfer of file page `p` on the block device: the file offset stands in for
/// the page id, which is stable for the run.
pub(crate) fn block_request(p: u32, page_size: u64, t: Ns, op: Op) -> DeviceRequest {
    DeviceRequest { now: t, addr: p as u64 * page_size, size: page_size as u32, op, socket: 0, cpu: 0, remote: false }
}

impl Swap {
    pub(crate) fn new(dev: Box<dyn Device>, capacity: u64, cluster: u64, vma_readahead: bool) -> Swap {
        Swap {
            dev,
            capacity,
            used: 0,
            free_slots: BTreeSet::new(),
            next_slot: 0,
            cluster,
            vma_readahead,
            vma_ra: (0, 0, 0),
            owner: Vec::new(),
            cache_slot: FxHashMap::default(),
            occupied_slots: 0,
            pending: Vec::new(),
            stats: SwapStats::default(),
        }
    }

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

    /// Move page `p` (already off its LRU list) to swap: a page still in the swap cache is
    /// clean there and only drops its frame; any other takes a slot and joins the pass's
    /// writes (`flush_writes`).
    pub(crate) fn swap_out(&mut self, mem: &mut Memory, p: u32, node: usize) {
        let e = mem.pt.entries[p as usize];
        mem.nodes[node].release_frame(e.frame);
        let slot = if e.flags & SWAPCACHE != 0 {
            self.stats.cache_drops += 1;
            self.cache_slot.remove(&p).expect("a swap-cache page has a slot")
        } else {
            self.write_out(mem, p)
        };
        mem.pt.entries[p as usize] = PageEntry { frame: slot, node: SWAPPED, flags: 0 };
        mem.policy.page_event(PageEvent::Evicted(p, node as NodeId));
    }

    /// Move one of other software's anonymous pages on `node` (`occupied`) to swap: a slot of
    /// its own, written with the pass; nothing in the trace reads it back.
    pub(crate) fn swap_out_occupied(&mut self, mem: &mut Memory, node: usize) {
        mem.nodes[node].release_occupied(false).expect("reclaim picked an occupied page");
        self.write_out(mem, NIL);
        self.occupied_slots += 1;
    }

    /// A slot for `p` (NIL: not a page of the trace) joining the pass's writes.
    fn write_out(&mut self, mem: &mut Memory, p: u32) -> u32 {
        if self.used >= self.capacity {
            // Swap is full: take the slot of a page waiting in the swap cache, which becomes
            // an ordinary (dirty) anon page (try_to_free_swap under vm_swap_full).
            let (&q, &s) = self.cache_slot.iter().next().expect("reclaim swaps out only with a free or cached slot");
            self.cache_slot.remove(&q);
            self.free_slot(s);
            self.stats.cache_freed += 1;
            let f = &mut mem.pt.entries[q as usize].flags;
            *f = (*f & !SWAPCACHE) | DIRTY;
        }
        let slot = self.take_slot(p);
        self.pending.push(slot);
        self.stats.swap_outs += 1;
        self.stats.epoch_outs += 1;
        slot
    }

    /// Issue the reclaim pass's swap writes at `t`: runs of consecutive slots, up to
    /// SWAP_CLUSTER_MAX pages each, one request per run.
    pub(crate) fn flush_writes(&mut self, page: u64, t: Ns) {
        if self.pending.is_empty() {
            return;
        }
        let mut slots = std::mem::take(&mut self.pending);
        slots.sort_unstable();
        for run in page_runs(&slots, u64::from(WRITE_BATCH)) {
            let n = run.len() as u64;
            self.dev.access(&DeviceRequest {
                now: t,
                addr: slots[run.start] as u64 * page,
                size: (n * page) as u32,
                op: Op::Write,
                socket: 0,
                cpu: 0,
                remote: false,
            });
            self.stats.write_requests += 1;
        }
        slots.clear();
        self.pending = slots;
    }

    /// swap_cluster_readahead: the run of occupied, swapped-only slots around `slot` inside its
    /// aligned cluster of 2^page_cluster slots.
    fn cluster_window(&self, pt: &PageTable, slot: u32) -> Vec<u32> {
        let base = slot & !(self.cluster as u32 - 1);
        let end = (base as u64 + self.cluster).min(self.owner.len() as u64) as u32;
        let swapped_only = |s: u32| {
            let q = self.owner[s as usize];
            q != NIL && pt.entries[q as usize].node == SWAPPED
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
    fn vma_window(&mut self, pt: &PageTable, p: u32, vpn: u64) -> Vec<u32> {
        let max_win = self.cluster.min(1 << 5);
        let (prev, prev_win, hits) = self.vma_ra;
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
        self.vma_ra = (vpn, win, 0);
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
            .map(|v| pt.entries[(base + (v - pmd) as u32) as usize])
            .filter(|e| e.node == SWAPPED)
            .map(|e| e.frame)
            .collect()
    }

    /// Read the slots a swap-in of page `p` (at `vpn`, in `slot`) fetches at `t` for `who`, its
    /// own and its readahead's (`cluster_window` or `vma_window`), sorted, contiguous ones as
    /// one request (the block plug merges them), and free its slot. Returns the slots read and
    /// when the request holding its own completes.
    fn read_for_fault(&mut self, pt: &PageTable, page: u64, who: &Faulting, p: u32, vpn: u64, t: Ns) -> (Vec<u32>, Ns) {
        let slot = pt.entries[p as usize].frame;
        let mut slots = if self.vma_readahead { self.vma_window(pt, p, vpn) } else { self.cluster_window(pt, slot) };
        slots.sort_unstable();
        let mut done = t;
        for run in page_runs(&slots, u64::MAX) {
            let (i, j) = (run.start, run.end);
            let end = self.dev.access(&DeviceRequest {
                now: t,
                addr: slots[i] as u64 * page,
                size: ((j - i) as u64 * page) as u32,
                op: Op::Read,
                socket: who.socket,
                cpu: who.cpu as u32,
                remote: false,
            });
            if slots[i..j].contains(&slot) {
                done = end;
            }
            self.stats.read_requests += 1;
        }
        self.free_slot(slot);
        self.stats.swap_ins += 1;
        self.stats.epoch_ins += 1;
        (slots, done)
    }

    /// First access to swap-cache page `p`: do_swap_page finds it cached and maps it; its slot
    /// is freed.
    pub(crate) fn cache_map(&mut self, pt: &mut PageTable, p: u32) {
        let slot = self.cache_slot.remove(&p).expect("a swap-cache page has a slot");
        self.free_slot(slot);
        self.stats.cache_hits += 1;
        // A readahead hit widens the next VMA window (lookup_swap_cache).
        self.vma_ra.2 += 1;
        pt.entries[p as usize].flags &= !SWAPCACHE;
    }

    /// The swap section of the run's summary.
    pub(crate) fn summary(&self, page_size: u64) -> Value {
        let s = &self.stats;
        json!({
            "enabled": true,
            "swap_ins": s.swap_ins,
            "swap_outs": s.swap_outs,
            "bytes_in": s.swap_ins * page_size,
            "bytes_out": s.swap_outs * page_size,
            // The trace's pages only in swap; swap-cache pages are resident (and counted on
            // their node), other software's (`occupied`) are apart.
            "final_pages": self.used - self.cache_slot.len() as u64 - self.occupied_slots,
            "occupied_pages": self.occupied_slots,
            "slots_used": self.used,
            "readahead_pages": s.readahead_pages,
            "swap_cache_hits": s.cache_hits,
            "swap_cache_drops": s.cache_drops,
            "swap_cache_freed": s.cache_freed,
            "swap_cache_pages": self.cache_slot.len(),
            "write_requests": s.write_requests,
            "read_requests": s.read_requests,
            "capacity_pages": self.capacity,
            "file_drops": s.file_drops,
            "file_writebacks": s.file_writebacks,
            "file_refaults": s.file_refaults,
            "device": self.dev.stats(),
        })
    }
}

impl Metrics for Swap {
    fn reset(&mut self) {
        self.stats = SwapStats::default();
    }

    fn report(&self, section: &str, into: &mut serde_json::Map<String, Value>) {
        if section == "faults" {
            into.insert("swap_in".into(), self.stats.swap_ins.into());
        }
    }
}

/// Bring page `p` back from swap at time `t` for `who`, with its readahead into the swap cache
/// (`Swap::read_for_fault`); the fault waits for the request holding its own slot. Returns the
/// fault time in ps, `swap_fault_ps` of fault handling included.
#[allow(clippy::too_many_arguments)] // the fault's page, where and when, and the parts it may reclaim with
pub(crate) fn swap_in(
    mem: &mut Memory,
    rc: &Reclaimer,
    vm: &mut Vmscan,
    who: &Faulting,
    free: &mut [u64],
    p: u32,
    vpn: u64,
    t: Ns,
    swap_fault_ps: u64,
) -> Result<u64> {
    let swap = vm.swap.as_deref_mut().expect("a swapped page implies swap");
    let (slots, done) = swap.read_for_fault(&mem.pt, mem.page_size, who, p, vpn, t);
    let slot = mem.pt.entries[p as usize].frame;
    let io_ps = (done - t) * 1000 + swap_fault_ps;
    let at = t + io_ps / 1000;
    // A swapped-in page starts inactive (lru_cache_add_inactive_or_unevictable, 5.9+).
    let (_, reclaim_ps) = alloc(mem, rc, vm, who, free, p, vpn, at, 0)?;
    let ra_ps = swap_readahead(mem, rc, vm, who, &slots, slot, at);
    Ok(io_ps + reclaim_ps + ra_ps)
}

/// Put the pages of `slots` other than `skip` in the swap cache, allocated along the
/// faulting CPU's zonelist like any page (waking kswapd, then direct reclaim, whose time is
/// returned in ps and charged to the fault); they start on the inactive anon list. Readahead
/// stops at the first allocation that fails.
fn swap_readahead(
    mem: &mut Memory,
    rc: &Reclaimer,
    vm: &mut Vmscan,
    who: &Faulting,
    slots: &[u32],
    skip: u32,
    t: Ns,
) -> u64 {
    let mut charged = 0;
    let local = who.node as usize;
    for &s in slots {
        if s == skip {
            continue;
        }
        let q = vm.swap.as_ref().expect("swap-in implies swap").owner[s as usize];
        if q == NIL || mem.pt.entries[q as usize].node != SWAPPED {
            continue;
        }
        let zl = std::mem::take(&mut mem.topo.zonelists[local]);
        let got = alloc_along(mem, rc, vm, &zl, t, who.access);
        mem.topo.zonelists[local] = zl;
        let Ok((node, ps)) = got else { break };
        charged += ps;
        // __read_swap_cache_async: a readahead page with a shadow is a refault too.
        let active = super::alloc::refault(mem, vm, q, false, node);
        let frame = mem.nodes[node].take_frame();
        mem.pt.entries[q as usize] = PageEntry { frame, node: node as u16, flags: SWAPCACHE | active };
        lru::add(&mut mem.pt, &mut mem.nodes[node], q);
        mem.policy.policy.on_page_placed(q, node as NodeId);
        let swap = vm.swap.as_deref_mut().expect("swap-in implies swap");
        swap.cache_slot.insert(q, s);
        swap.stats.readahead_pages += 1;
    }
    charged
}

/// Read dropped file page `p` back from the block device at `t` for `who` (a major fault);
/// returns the fault time in ps. It comes back on the inactive file list (add_to_page_cache_lru).
#[allow(clippy::too_many_arguments)] // as swap_in
pub(crate) fn file_refault(
    mem: &mut Memory,
    rc: &Reclaimer,
    vm: &mut Vmscan,
    who: &Faulting,
    free: &mut [u64],
    p: u32,
    vpn: u64,
    t: Ns,
    swap_fault_ps: u64,
) -> Result<u64> {
    let req = DeviceRequest { socket: who.socket, cpu: who.cpu as u32, ..block_request(p, mem.page_size, t, Op::Read) };
    let swap = vm.swap.as_deref_mut().expect("a dropped file page implies a block device");
    let done = swap.dev.access(&req);
    swap.stats.file_refaults += 1;
    vm.files.stats.pages_read += 1;
    let io_ps = (done - t) * 1000 + swap_fault_ps;
    let (_, reclaim_ps) = alloc(mem, rc, vm, who, free, p, vpn, t + io_ps / 1000, FILE)?;
    Ok(io_ps + reclaim_ps)
}
