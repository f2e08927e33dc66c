//! Swap and the page cache's block device, both the `[swap]` device: anonymous pages written to
//! swap slots and faulted back (mm/swap_state.c, mm/page_io.c, do_swap_page in mm/memory.c);
//! file pages dropped, written back first when dirty, and read back on refault (mm/filemap.c).

use tiersim_core::{NodeId, Ns, Op, Result};
use tiersim_devices::{Device, DeviceRequest};

use super::PageEvent;
use crate::pagetable::{PageEntry, DIRTY, DROPPED, FILE, SWAPPED};
use crate::sim::Engine;

pub(crate) struct Swap {
    pub(crate) dev: Box<dyn Device>,
    pub(crate) capacity: u64,
    pub(crate) used: u64,
    pub(crate) free_slots: Vec<u32>,
    pub(crate) next_slot: u32,
    pub(crate) swap_ins: u64,
    pub(crate) swap_outs: u64,
    pub(crate) epoch_ins: u64,
    pub(crate) epoch_outs: u64,
    /// File pages dropped by reclaim, the dirty ones written back first, and read back later.
    pub(crate) file_drops: u64,
    pub(crate) file_writebacks: u64,
    pub(crate) file_refaults: u64,
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

    /// Write page `p` (already off its LRU list) to swap at `t`.
    pub(crate) fn swap_out(&mut self, p: u32, node: usize, t: Ns) {
        let frame = self.pt.entries[p as usize].frame;
        self.nodes[node].release_frame(frame);
        let swap = self.swap.as_mut().expect("callers check for swap space");
        let slot = swap.free_slots.pop().unwrap_or_else(|| {
            swap.next_slot += 1;
            swap.next_slot - 1
        });
        swap.used += 1;
        swap.dev.access(&DeviceRequest {
            now: t,
            addr: slot as u64 * self.page_size,
            size: self.page_size as u32,
            op: Op::Write,
            socket: 0,
            cpu: 0,
            remote: false,
        });
        if self.measuring {
            swap.swap_outs += 1;
            swap.epoch_outs += 1;
        }
        self.pt.entries[p as usize] = PageEntry { frame: slot, node: SWAPPED, flags: 0 };
        self.page_event(PageEvent::Evicted(p, node as NodeId));
    }

    /// Bring page `p` back from swap at time `t`; returns the fault time in ps.
    pub(crate) fn swap_in(&mut self, p: u32, cpu: usize, vpn: u64, t: Ns) -> Result<u64> {
        let slot = self.pt.entries[p as usize].frame;
        let swap = self.swap.as_mut().expect("a swapped page implies swap");
        let done = swap.dev.access(&DeviceRequest {
            now: t,
            addr: slot as u64 * self.page_size,
            size: self.page_size as u32,
            op: Op::Read,
            socket: self.cpus[cpu].socket,
            cpu: cpu as u32,
            remote: false,
        });
        swap.used -= 1;
        swap.free_slots.push(slot);
        if self.measuring {
            swap.swap_ins += 1;
            swap.epoch_ins += 1;
        }
        let io_ps = (done - t) * 1000 + self.swap_fault_ps;
        // A swapped-in page starts inactive (lru_cache_add_inactive_or_unevictable, 5.9+).
        let (_, reclaim_ps) = self.alloc(p, cpu, vpn, t + io_ps / 1000, 0)?;
        Ok(io_ps + reclaim_ps)
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
