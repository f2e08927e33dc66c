//! The engine composes the OS model's parts (`crate::os`): each entry point here lends the
//! parts an operation touches to the mechanism that performs it, with the faulting CPU named.

use tiersim_core::{Ns, Result};

use super::Engine;
use crate::os::alloc::{self, Faulting};
use crate::os::fault::Ops;
use crate::os::reclaim::Vmscan;
use crate::os::{kswapd, lru, swap, Metrics};

/// The parts reclaim works with (`Vmscan`), borrowed from the engine beside its other fields.
macro_rules! vmscan {
    ($eng:expr) => {
        Vmscan {
            lru: &mut $eng.lru,
            kswapd: &mut $eng.kswapd,
            migrate: &mut $eng.migrate,
            swap: $eng.swap.as_mut(),
            files: &mut $eng.files,
        }
    };
}

impl Engine {
    /// Every part that keeps counters over the measured run, in the order they report.
    pub(crate) fn metrics(&self) -> Vec<&dyn Metrics> {
        let mut parts: Vec<&dyn Metrics> =
            vec![&self.faults, &self.lru, &self.migrate, &self.kswapd, &self.scanner, &self.numa, &self.files];
        if let Some(swap) = &self.swap {
            parts.push(swap);
        }
        parts
    }

    pub(crate) fn metrics_mut(&mut self) -> Vec<&mut dyn Metrics> {
        let mut parts: Vec<&mut dyn Metrics> = vec![
            &mut self.faults,
            &mut self.lru,
            &mut self.migrate,
            &mut self.kswapd,
            &mut self.scanner,
            &mut self.numa,
            &mut self.files,
        ];
        if let Some(swap) = &mut self.swap {
            parts.push(swap);
        }
        if let Some(tlb) = &mut self.tlb {
            parts.push(tlb);
        }
        parts
    }

    /// CPU `c` faulting during the current access.
    #[inline]
    pub(crate) fn faulting(&self, c: usize) -> Faulting {
        let cpu = &self.cpus[c];
        Faulting { cpu: c, node: cpu.node, socket: cpu.socket, access: self.processed }
    }

    /// kswapd's batches done by `t` (the access path calls this once time reaches its next one).
    #[cold]
    #[inline(never)]
    pub(crate) fn kswapd_catch_up(&mut self, t: Ns) -> Result<()> {
        let mut vm = vmscan!(self);
        kswapd::run_until(&mut self.mem, &self.reclaim, &mut vm, t)
    }

    /// Allocate page `p` for CPU `c` at `t` with `flags`: its node and the direct-reclaim time (ps).
    pub(crate) fn alloc(&mut self, p: u32, c: usize, vpn: u64, t: Ns, flags: u8) -> Result<(usize, u64)> {
        let who = self.faulting(c);
        let mut vm = vmscan!(self);
        alloc::alloc(&mut self.mem, &self.reclaim, &mut vm, &who, &mut self.free_scratch, p, vpn, t, flags)
    }

    pub(crate) fn swap_in(&mut self, p: u32, c: usize, vpn: u64, t: Ns) -> Result<u64> {
        let (who, swap_fault_ps) = (self.faulting(c), self.swap_fault_ps);
        let mut vm = vmscan!(self);
        swap::swap_in(&mut self.mem, &self.reclaim, &mut vm, &who, &mut self.free_scratch, p, vpn, t, swap_fault_ps)
    }

    pub(crate) fn file_refault(&mut self, p: u32, c: usize, vpn: u64, t: Ns) -> Result<u64> {
        let (who, swap_fault_ps) = (self.faulting(c), self.swap_fault_ps);
        let mut vm = vmscan!(self);
        swap::file_refault(
            &mut self.mem,
            &self.reclaim,
            &mut vm,
            &who,
            &mut self.free_scratch,
            p,
            vpn,
            t,
            swap_fault_ps,
        )
    }

    /// First access to swap-cache page `p`: a minor fault; returns its time in ps.
    pub(crate) fn swap_cache_map(&mut self, p: u32) -> u64 {
        self.swap.as_mut().expect("a swap-cache page implies swap").cache_map(&mut self.mem.pt, p);
        self.fault_ps
    }

    pub(crate) fn hint_fault(&mut self, c: usize, p: u32, t: Ns, write: bool) -> u64 {
        let (who, ncpus) = (self.faulting(c), self.cpus.len());
        let mut vm = vmscan!(self);
        self.numa.hint_fault(&mut self.mem, &self.reclaim, &mut vm, &mut self.scanner, &who, ncpus, p, t, write)
    }

    /// mark_page_accessed on present page `p` of `node`.
    pub(crate) fn mark_page_accessed(&mut self, p: u32, node: usize) {
        self.lru.mark_page_accessed(&mut self.mem.pt, &mut self.mem.nodes[node], p);
    }

    /// Take page `p` off its LRU list on `node`.
    pub(crate) fn lru_del(&mut self, node: usize, p: u32) {
        lru::del(&mut self.mem.pt, &mut self.mem.nodes[node], p);
    }

    /// Start the next policy epoch at `t`; returns the time (ps) charged to the issuing CPU.
    pub(crate) fn policy_epoch(&mut self, t: Ns) -> Result<u64> {
        let epoch = self.policy_epoch;
        self.policy_epoch += 1;
        let (hottest, near) = match self.future.as_mut() {
            Some(future) => {
                (future.next(&self.cpus.iter().map(|c| c.done).collect::<Vec<_>>())?, future.near().to_vec())
            }
            None => (Vec::new(), Vec::new()),
        };
        self.policy_epoch_at = self.policy_epoch_at.saturating_add(self.policy_epoch_len);
        let topo = std::mem::take(&mut self.mem.topo);
        let mut policy = self.mem.policy.park();
        let ncpus = self.cpus.len();
        let mut ops = Ops { mem: &mut self.mem, lru: &mut self.lru, migrate: &mut self.migrate, ncpus, t, cost_ps: 0 };
        policy.on_epoch(epoch, &hottest, &near, &topo, &mut ops);
        let cost = ops.cost_ps;
        self.mem.topo = topo;
        self.mem.policy.unpark(policy);
        Ok(cost)
    }
}
