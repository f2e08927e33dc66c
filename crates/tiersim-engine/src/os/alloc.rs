//! Page allocation on first touch, swap-in and refault, after mm/page_alloc.c
//! (get_page_from_freelist, __alloc_pages_slowpath): the policy names the preferred node and the
//! allocation walks its zonelist above the low watermark; when every node fails, kswapd is woken
//! and allocation retries against min; then direct reclaim, charged to the faulting CPU; then
//! out of memory.

use tiersim_core::{Error, NodeId, Ns, Op, Result};
use tiersim_policies::PlaceCtx;

use crate::pagetable::{PageEntry, FILE, LOCKED, REFERENCED};
use crate::sim::Engine;

impl Engine {
    pub(crate) fn try_zonelist(&self, zl: &[NodeId], use_min: bool) -> Option<usize> {
        zl.iter().map(|&n| n as usize).find(|&n| {
            let node = &self.nodes[n];
            let mark = if use_min { node.wmark_min } else { node.wmark_low };
            node.free() > mark
        })
    }

    /// Allocate a frame for page `p` first touched (or brought back) by `cpu` at time `t`, with
    /// page flags `flags` (its LRU list and kind); returns the node and the direct-reclaim time
    /// (ps) charged to the CPU.
    pub(crate) fn alloc(&mut self, p: u32, cpu: usize, vpn: u64, t: Ns, flags: u8) -> Result<(usize, u64)> {
        for (i, n) in self.nodes.iter().enumerate() {
            self.free_scratch[i] = n.free();
        }
        let local = self.cpus[cpu].node;
        let preferred = self.policy.place(&PlaceCtx {
            topo: &self.topo,
            cpu: cpu as u32,
            local_node: local,
            vpn,
            free_pages: &self.free_scratch,
            file: flags & FILE != 0,
        }) as usize;
        let zl = std::mem::take(&mut self.topo.zonelists[preferred]);
        let result = self.alloc_along(&zl, t);
        self.topo.zonelists[preferred] = zl;
        let (node, reclaim_ps) = result?;
        let frame = self.nodes[node].take_frame();
        self.pt.entries[p as usize] = PageEntry { frame, node: node as u16, flags: REFERENCED | LOCKED | flags };
        self.lru_push_head(node, p);
        self.policy.on_page_placed(p, node as NodeId);
        self.proactive_reclaim(node, t)?;
        Ok((node, reclaim_ps))
    }

    pub(crate) fn alloc_along(&mut self, zl: &[NodeId], t: Ns) -> Result<(usize, u64)> {
        if let Some(n) = self.try_zonelist(zl, false) {
            return Ok((n, 0));
        }
        self.kswapd(t)?;
        if let Some(n) = self.try_zonelist(zl, true) {
            return Ok((n, 0));
        }
        // Direct reclaim, charged to the faulting CPU: the swap write of the batch must finish.
        let mut charged = 0;
        for &n in zl {
            let freed = self.reclaim(n as usize, self.reclaim_batch, t)?;
            if freed > 0 {
                if let Some(s) = self.swap.as_ref() {
                    charged += s.dev.idle_latency(Op::Write, self.page_size as u32) * 1000;
                }
                if let Some(n) = self.try_zonelist(zl, true) {
                    return Ok((n, charged));
                }
            }
        }
        // Last resort as the kernel's: take a node with any free frame at all.
        if let Some(&n) = zl.iter().find(|&&n| self.nodes[n as usize].free() > 0) {
            return Ok((n as usize, charged));
        }
        let usable: u64 = self.nodes.iter().map(|n| n.capacity).sum();
        Err(Error::Sim(match &self.swap {
            None => format!(
                "out of memory after {} accesses: the trace has touched {} pages and all {} pages of memory are in use, and swap is disabled; \
                 enable [swap], raise node capacities or `scale`",
                self.processed,
                self.pt.touched,
                usable
            ),
            Some(s) if s.used >= s.capacity => format!(
                "out of memory after {} accesses: memory ({usable} pages) and swap ({} pages) are full; raise swap.capacity or `scale`",
                self.processed, s.capacity
            ),
            Some(_) => format!(
                "out of memory after {} accesses: every page of memory ({usable} pages) that reclaim could take is held by a fault in \
                 flight on another CPU; give the nodes more capacity than the platform has CPUs (raise capacities or `scale`)",
                self.processed
            ),
        }))
    }
}
