//! Page allocation on first touch, swap-in and refault, after mm/page_alloc.c
//! (get_page_from_freelist, __alloc_pages_slowpath): the policy names the preferred node and the
//! allocation walks its zonelist above the low watermark; when every node fails, kswapd is woken
//! (it reclaims in the background, `kswapd.rs`) and allocation retries against min; then direct reclaim, charged to the faulting CPU; then
//! out of memory.

use tiersim_core::{Error, NodeId, Ns, Op, Result};
use tiersim_policies::PlaceCtx;

use super::lru;
use super::reclaim::{Reclaimer, Vmscan};
use super::workingset;
use super::Memory;
use crate::pagetable::{PageEntry, FILE, LOCKED, REFERENCED};

/// The CPU a fault runs on, and the access it serves (its index in the trace, for errors).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Faulting {
    pub(crate) cpu: usize,
    pub(crate) node: NodeId,
    pub(crate) socket: u16,
    pub(crate) access: u64,
}

fn try_zonelist(mem: &Memory, zl: &[NodeId], use_min: bool) -> Option<usize> {
    zl.iter().map(|&n| n as usize).find(|&n| {
        let node = &mem.nodes[n];
        let mark = if use_min { node.wmark_min } else { node.wmark_low };
        node.free() > mark
    })
}

/// Allocate a frame for page `p` first touched (or brought back) by `who` at time `t`, with
/// page flags `flags` (its LRU list and kind); returns the node and the direct-reclaim time
/// (ps) charged to the CPU. `free` is scratch of one slot per node.
#[allow(clippy::too_many_arguments)] // the fault's page, where and when, and the parts it may reclaim with
pub(crate) fn alloc(
    mem: &mut Memory,
    rc: &Reclaimer,
    vm: &mut Vmscan,
    who: &Faulting,
    free: &mut [u64],
    p: u32,
    vpn: u64,
    t: Ns,
    flags: u8,
) -> Result<(usize, u64)> {
    mem.free_pages(free);
    let preferred = mem.policy.policy.place(&PlaceCtx {
        topo: &mem.topo,
        cpu: who.cpu as u32,
        local_node: who.node,
        vpn,
        free_pages: free,
        file: flags & FILE != 0,
    }) as usize;
    let zl = std::mem::take(&mut mem.topo.zonelists[preferred]);
    let result = alloc_along(mem, rc, vm, &zl, t, who.access);
    mem.topo.zonelists[preferred] = zl;
    let (node, reclaim_ps) = result?;
    // A page read back after its eviction (a file refault or a swap-in) may come back active.
    let flags = flags | refault(mem, vm, p, flags & FILE != 0, node);
    let frame = mem.nodes[node].take_frame();
    mem.pt.entries[p as usize] = PageEntry { frame, node: node as u16, flags: REFERENCED | LOCKED | flags };
    lru::add(&mut mem.pt, &mut mem.nodes[node], p);
    mem.policy.policy.on_page_placed(p, node as NodeId);
    rc.proactive(mem, vm, node, t);
    Ok((node, reclaim_ps))
}

/// workingset_refault for page `p` (of `file` kind) coming back onto `node`: ACTIVE or 0.
pub(crate) fn refault(mem: &mut Memory, vm: &mut Vmscan, p: u32, file: bool, node: usize) -> u8 {
    let swap_room = vm.swap.as_ref().is_some_and(|s| s.used < s.capacity);
    workingset::refault(mem, vm.lru, p, file, node, swap_room)
}

/// A node of zonelist `zl` with a free frame, reclaiming as the allocator's slow path does.
pub(crate) fn alloc_along(
    mem: &mut Memory,
    rc: &Reclaimer,
    vm: &mut Vmscan,
    zl: &[NodeId],
    t: Ns,
    access: u64,
) -> Result<(usize, u64)> {
    if let Some(n) = try_zonelist(mem, zl, false) {
        return Ok((n, 0));
    }
    rc.wake_kswapd(mem, vm, t);
    if let Some(n) = try_zonelist(mem, zl, true) {
        return Ok((n, 0));
    }
    // Direct reclaim, charged to the faulting CPU: the swap write of the batch must finish.
    let mut charged = 0;
    for &n in zl {
        let freed = rc.reclaim(mem, vm, n as usize, rc.batch, t)?;
        if freed > 0 {
            if let Some(s) = vm.swap.as_ref() {
                charged += s.dev.idle_latency(Op::Write, mem.page_size as u32) * 1000;
            }
            if let Some(n) = try_zonelist(mem, zl, true) {
                return Ok((n, charged));
            }
        }
    }
    // Last resort as the kernel's: take a node with any free frame at all.
    if let Some(&n) = zl.iter().find(|&&n| mem.nodes[n as usize].free() > 0) {
        return Ok((n as usize, charged));
    }
    let usable: u64 = mem.nodes.iter().map(|n| n.capacity).sum();
    Err(Error::Sim(match vm.swap.as_ref() {
        None => format!(
            "out of memory after {access} accesses: the trace has touched {} pages and all {usable} pages of memory are in use, \
             and swap is disabled; enable [swap], raise node capacities or `scale`",
            mem.pt.touched
        ),
        Some(s) if s.used >= s.capacity => format!(
            "out of memory after {access} accesses: memory ({usable} pages) and swap ({} pages) are full; raise swap.capacity or `scale`",
            s.capacity
        ),
        Some(_) => format!(
            "out of memory after {access} accesses: every page of memory ({usable} pages) that reclaim could take is held by a fault in \
             flight on another CPU; give the nodes more capacity than the platform has CPUs (raise capacities or `scale`)"
        ),
    }))
}
