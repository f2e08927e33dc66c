//! NUMA hint faults, do_numa_page in mm/memory.c: the PTE is restored, the policy decides, and
//! the page migrates if the target has room (migrate_misplaced_page in mm/migrate.c). From its
//! fault hook the policy may call back into the OS model (`MemOps`, here `Ops`), charged to the
//! faulting CPU. A policy with epochs of known future (oracle_dynamic) gets the same `Ops` at
//! each epoch's start, charged to the CPU about to issue.

use serde_json::{Map, Value};
use tiersim_core::{NodeId, Ns};
use tiersim_policies::{FaultDecision, HintCtx, MemOps, MoveMode, PageView};

use super::alloc::Faulting;
use super::lru::{self, Lru};
use super::migrate::Migrator;
use super::reclaim::{Reclaimer, Vmscan};
use super::scan::{NumaFault, Scanner};
use super::{Memory, Metrics};
use crate::pagetable::{ACTIVE, DROPPED, FILE, NIL, PROT_NONE};

/// Hint faults over the measured part of the run.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FaultStats {
    pub(crate) hint_faults: u64,
    pub(crate) failed_promotions: u64,
    pub(crate) failed_migrations: u64,
    pub(crate) hint_fault_time_ps: u64,
}

pub(crate) struct HintFaults {
    /// `os.hint_fault_latency` (ps): the fault's own handling.
    fault_ps: u64,
    /// Each node's (min, low, high) watermarks, as policies are shown them.
    wmarks: Vec<(u64, u64, u64)>,
    free_scratch: Vec<u64>,
    pub(crate) stats: FaultStats,
}

impl HintFaults {
    pub(crate) fn new(fault_ps: u64, wmarks: Vec<(u64, u64, u64)>) -> HintFaults {
        let n = wmarks.len();
        HintFaults { fault_ps, wmarks, free_scratch: vec![0; n], stats: FaultStats::default() }
    }

    /// A hint fault by `who` on PROT_NONE page `p` at `t`: restore the PTE, ask the policy,
    /// and migrate if it says so and the target has free memory above its high watermark
    /// (migrate_misplaced_page). Returns the time charged to the CPU (ps). `ncpus` bounds the
    /// CPU ids a policy is told of.
    #[allow(clippy::too_many_arguments)] // the fault and each part it touches, named
    pub(crate) fn hint_fault(
        &mut self,
        mem: &mut Memory,
        rc: &Reclaimer,
        vm: &mut Vmscan,
        scanner: &mut Scanner,
        who: &Faulting,
        ncpus: usize,
        p: u32,
        t: Ns,
        write: bool,
    ) -> u64 {
        mem.pt.entries[p as usize].flags &= !PROT_NONE;
        let node = mem.pt.entries[p as usize].node as usize;
        mem.free_pages(&mut self.free_scratch);
        let ext = mem.pt.ext(p);
        // The policy may call back into the OS model (MemOps), which borrows the memory: park
        // the policy and lend it the read-only context it sees.
        let topo = std::mem::take(&mut mem.topo);
        let mut policy = mem.policy.park();
        let ctx = HintCtx {
            topo: &topo,
            cpu: who.cpu as u32,
            cpu_node: who.node,
            page: PageView {
                id: p,
                node: node as NodeId,
                last_cpu: (ext.last_cpu != NIL).then_some(ext.last_cpu),
                scan_time_ns: ext.scan_us as u64 * 1000,
                active: mem.pt.entries[p as usize].flags & ACTIVE != 0,
            },
            now_ns: t,
            write,
            free_pages: &self.free_scratch,
            watermarks: &self.wmarks,
            scan_seq: scanner.seq,
        };
        let mut ops = Ops { mem: &mut *mem, lru: &mut *vm.lru, migrate: &mut *vm.migrate, ncpus, t, cost_ps: 0 };
        let decision = policy.on_hint_fault(&ctx, &mut ops);
        let ops_ps = ops.cost_ps;
        mem.topo = topo;
        mem.policy.unpark(policy);
        let mut numa_fault = NumaFault {
            page_node: node as NodeId,
            mem_node: node as NodeId,
            cpu: who.cpu as u32,
            cpu_node: who.node,
            last_cpu: mem.pt.ext(p).last_cpu,
            failed: false,
        };
        mem.pt.ext_mut(p).last_cpu = who.cpu as u32;
        let mut cost = self.fault_ps + ops_ps;
        let t = t + ops_ps / 1000;
        let node = mem.pt.entries[p as usize].node as usize;
        if let FaultDecision::Migrate(dst) = decision {
            let d = dst as usize;
            if d != node {
                if mem.nodes[d].has_room() {
                    lru::del(&mut mem.pt, &mut mem.nodes[node], p);
                    let done = vm.migrate.move_page(mem, p, node, d, t, true);
                    cost += vm.migrate.charge_move(1, t, done);
                    // do_numa_page passes the page's new node on (mm/memory.c, 6.1): in tiering
                    // mode only a promotion is a recorded fault.
                    numa_fault.mem_node = dst;
                    rc.proactive(mem, vm, d, t);
                } else {
                    numa_fault.failed = true;
                    if mem.nodes[d].spec.tier < mem.nodes[node].spec.tier {
                        self.stats.failed_promotions += 1;
                    } else {
                        self.stats.failed_migrations += 1;
                    }
                    let (wm, cap) = (self.wmarks[d], mem.nodes[d].capacity);
                    if let Some(goal) = mem.policy.policy.on_promotion_failed(dst, wm, cap) {
                        // kswapd on the target until free memory is above the goal
                        // (zone_watermark_ok is a strict test); the promotion has failed all the
                        // same (numamigrate_isolate_page, mm/migrate.c, 6.1).
                        vm.kswapd.wake(mem, d, goal + 1, t);
                    }
                }
            }
        }
        scanner.fault(mem, t, &numa_fault);
        self.stats.hint_faults += 1;
        self.stats.hint_fault_time_ps += cost;
        cost
    }
}

impl Metrics for HintFaults {
    fn reset(&mut self) {
        self.stats = FaultStats::default();
    }

    fn report(&self, section: &str, into: &mut Map<String, Value>) {
        if section == "tiering" {
            let s = &self.stats;
            into.insert("hint_faults".into(), s.hint_faults.into());
            into.insert("failed_promotions".into(), s.failed_promotions.into());
            into.insert("failed_migrations".into(), s.failed_migrations.into());
            into.insert("hint_fault_time_ns".into(), (s.hint_fault_time_ps / 1000).into());
        }
    }
}

/// The OS operations a policy performs from its hooks, in the faulting (or issuing) CPU's
/// context: synchronous moves are charged to that CPU and run one after another from `t`.
pub(crate) struct Ops<'e> {
    pub(crate) mem: &'e mut Memory,
    pub(crate) lru: &'e mut Lru,
    pub(crate) migrate: &'e mut Migrator,
    pub(crate) ncpus: usize,
    pub(crate) t: Ns,
    pub(crate) cost_ps: u64,
}

impl Ops<'_> {
    /// A synchronous move of `pages` unmapped pages, copied by `done`, delays what follows.
    fn charge(&mut self, mode: MoveMode, pages: u64, done: Ns) {
        if mode == MoveMode::Sync {
            let ps = self.migrate.charge_move(pages, self.t, done);
            self.cost_ps += ps;
            self.t += ps / 1000;
        }
    }

    fn present(&self, page: u32) -> Option<usize> {
        let e = self.mem.pt.entries.get(page as usize)?;
        (e.node < DROPPED).then_some(e.node as usize)
    }

    fn relocate(&mut self, page: u32, from: usize, to: usize, mode: MoveMode) {
        let t = self.t;
        lru::del(&mut self.mem.pt, &mut self.mem.nodes[from], page);
        let done = self.migrate.move_page(self.mem, page, from, to, t, mode != MoveMode::Free);
        self.charge(mode, 1, done);
    }
}

impl MemOps for Ops<'_> {
    fn room(&self, node: NodeId) -> bool {
        self.mem.nodes[node as usize].has_room()
    }

    fn room_pages(&self, node: NodeId) -> u64 {
        let n = &self.mem.nodes[node as usize];
        n.free().saturating_sub(n.wmark_high + 1)
    }

    fn page_node(&self, page: u32) -> Option<NodeId> {
        self.present(page).map(|n| n as NodeId)
    }

    fn last_cpu(&self, page: u32) -> Option<u32> {
        let c = self.mem.pt.ext(page).last_cpu;
        (c != NIL && (c as usize) < self.ncpus).then_some(c)
    }

    fn demote(&mut self, page: u32, to: NodeId, mode: MoveMode, reserve: bool) -> bool {
        let Some(from) = self.present(page) else { return false };
        let n = &self.mem.nodes[to as usize];
        if from == to as usize || n.free() <= n.wmark_min {
            return false;
        }
        self.relocate(page, from, to as usize, mode);
        if reserve {
            self.mem.nodes[from].reserved += 1;
        }
        true
    }

    fn migrate(&mut self, page: u32, to: NodeId, mode: MoveMode) -> bool {
        let Some(from) = self.present(page) else { return false };
        if from == to as usize || !self.mem.nodes[to as usize].has_room() {
            return false;
        }
        self.relocate(page, from, to as usize, mode);
        true
    }

    fn migrate_reserved(&mut self, page: u32, to: NodeId) -> bool {
        let Some(from) = self.present(page) else { return false };
        if from == to as usize || self.mem.nodes[to as usize].reserved == 0 {
            return false;
        }
        self.mem.nodes[to as usize].reserved -= 1;
        self.relocate(page, from, to as usize, MoveMode::Sync);
        true
    }

    fn mark_page_accessed(&mut self, page: u32) {
        if let Some(node) = self.present(page) {
            self.lru.mark_page_accessed(&mut self.mem.pt, &mut self.mem.nodes[node], page);
        }
    }

    fn is_file(&self, page: u32) -> bool {
        self.mem.pt.entries.get(page as usize).is_some_and(|e| e.flags & FILE != 0)
    }

    fn demote_file_page(&mut self, from: NodeId, to: NodeId, mode: MoveMode) -> Option<u32> {
        let (from, to) = (from as usize, to as usize);
        let n = &self.mem.nodes[to];
        if from == to || n.free() <= n.wmark_min {
            return None;
        }
        let page = lru::oldest_file_page(&self.mem.pt, &self.mem.nodes[from])?;
        self.relocate(page, from, to, mode);
        Some(page)
    }

    fn exchange(&mut self, a: u32, b: u32) -> bool {
        let (Some(na), Some(nb)) = (self.present(a), self.present(b)) else { return false };
        if na == nb {
            return false;
        }
        let done = self.migrate.exchange_pages(self.mem, a, b, self.t);
        // Two unmaps and TLB shootdowns, one two-way copy (policies.md 2.8).
        self.charge(MoveMode::Sync, 2, done);
        true
    }
}
