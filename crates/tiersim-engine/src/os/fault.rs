//! NUMA hint faults, do_numa_page in mm/memory.c: the PTE is restored, the policy decides, and
//! the page migrates if the target has room (migrate_misplaced_page in mm/migrate.c). From its
//! fault hook the policy may call back into the OS model (`MemOps`), charged to the faulting CPU.
//! A policy with epochs of known future (oracle_dynamic) gets the same `MemOps` at each epoch's
//! start, charged to the CPU about to issue.

use tiersim_core::{NodeId, Ns, Result};
use tiersim_policies::{FaultDecision, HintCtx, MemOps, MoveMode, PageView, Policy};

use crate::pagetable::{ACTIVE, DROPPED, FILE, NIL, PROT_NONE};
use crate::sim::Engine;

/// Stands in for the policy while it is parked; it holds nothing, so boxing it allocates nothing.
struct Parked;
impl Policy for Parked {}

impl Engine {
    /// A hint fault by CPU `c` on PROT_NONE page `p` at `t`: restore the PTE, ask the policy,
    /// and migrate if it says so and the target has free memory above its high watermark
    /// (migrate_misplaced_page). Returns the time charged to the CPU (ps).
    pub(crate) fn hint_fault(&mut self, c: usize, p: u32, t: Ns, write: bool) -> u64 {
        self.pt.entries[p as usize].flags &= !PROT_NONE;
        let node = self.pt.entries[p as usize].node as usize;
        for (i, n) in self.nodes.iter().enumerate() {
            self.free_scratch[i] = n.free();
        }
        let ext = self.pt.ext(p);
        // The policy may call back into the OS model (MemOps), which borrows the engine: park
        // the policy and lend it the read-only context it sees.
        let topo = std::mem::take(&mut self.topo);
        let free = std::mem::take(&mut self.free_scratch);
        let wmarks = std::mem::take(&mut self.wmarks);
        let mut policy = std::mem::replace(&mut self.policy, Box::new(Parked));
        self.parked = true;
        let ctx = HintCtx {
            topo: &topo,
            cpu: c as u32,
            cpu_node: self.cpus[c].node,
            page: PageView {
                id: p,
                node: node as NodeId,
                last_cpu: (ext.last_cpu != NIL).then_some(ext.last_cpu),
                scan_time_ns: ext.scan_us as u64 * 1000,
                active: self.pt.entries[p as usize].flags & ACTIVE != 0,
            },
            now_ns: t,
            write,
            free_pages: &free,
            watermarks: &wmarks,
            scan_seq: self.scan_seq,
        };
        let mut ops = Ops { eng: self, t, cost_ps: 0 };
        let decision = policy.on_hint_fault(&ctx, &mut ops);
        let ops_ps = ops.cost_ps;
        self.policy = policy;
        self.parked = false;
        self.topo = topo;
        self.free_scratch = free;
        self.wmarks = wmarks;
        for ev in std::mem::take(&mut self.page_events) {
            self.page_event(ev);
        }
        self.pt.ext_mut(p).last_cpu = c as u32;
        if self.scan.is_some_and(|s| s.top_tier) {
            self.pass_faults += 1;
        }
        let mut cost = self.hint_fault_ps + ops_ps;
        let t = t + ops_ps / 1000;
        let node = self.pt.entries[p as usize].node as usize;
        if let FaultDecision::Migrate(dst) = decision {
            let d = dst as usize;
            if d != node {
                if self.nodes[d].has_room() {
                    self.lru_unlink(node, p);
                    let done = self.move_page(p, node, d, t, true);
                    cost += self.charge_move(1, t, done);
                    let _ = self.proactive_reclaim(d, t);
                } else {
                    self.pass_failed = true;
                    if self.measuring {
                        if self.nodes[d].spec.tier < self.nodes[node].spec.tier {
                            self.tiering.failed_promotions += 1;
                        } else {
                            self.tiering.failed_migrations += 1;
                        }
                    }
                    let (wm, cap) = (self.wmarks[d], self.nodes[d].capacity);
                    if let Some(goal) = self.policy.on_promotion_failed(dst, wm, cap) {
                        // kswapd on the target, on a core of its own, until free memory is above
                        // the goal (zone_watermark_ok is a strict test).
                        let want = (goal + 1).saturating_sub(self.nodes[d].free());
                        let _ = self.reclaim(d, want, t);
                    }
                }
            }
        }
        if self.measuring {
            self.tiering.hint_faults += 1;
            self.tiering.hint_fault_time_ps += cost;
        }
        cost
    }
}

impl Engine {
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
        let topo = std::mem::take(&mut self.topo);
        let mut policy = std::mem::replace(&mut self.policy, Box::new(Parked));
        self.parked = true;
        let mut ops = Ops { eng: self, t, cost_ps: 0 };
        policy.on_epoch(epoch, &hottest, &near, &topo, &mut ops);
        let cost = ops.cost_ps;
        self.policy = policy;
        self.parked = false;
        self.topo = topo;
        for ev in std::mem::take(&mut self.page_events) {
            self.page_event(ev);
        }
        Ok(cost)
    }
}

/// The OS operations a policy performs from its hint-fault hook, in the faulting CPU's context:
/// synchronous moves are charged to that CPU and run one after another from the fault time.
struct Ops<'e> {
    eng: &'e mut Engine,
    t: Ns,
    cost_ps: u64,
}

impl Ops<'_> {
    /// A synchronous move of `pages` unmapped pages, copied by `done`, delays what follows.
    fn charge(&mut self, mode: MoveMode, pages: u64, done: Ns) {
        if mode == MoveMode::Sync {
            let ps = self.eng.charge_move(pages, self.t, done);
            self.cost_ps += ps;
            self.t += ps / 1000;
        }
    }

    fn present(&self, page: u32) -> Option<usize> {
        let e = self.eng.pt.entries.get(page as usize)?;
        (e.node < DROPPED).then_some(e.node as usize)
    }

    fn relocate(&mut self, page: u32, from: usize, to: usize, mode: MoveMode) {
        let t = self.t;
        self.eng.lru_unlink(from, page);
        let done = self.eng.move_page(page, from, to, t, mode != MoveMode::Free);
        self.charge(mode, 1, done);
    }
}

impl MemOps for Ops<'_> {
    fn room(&self, node: NodeId) -> bool {
        self.eng.nodes[node as usize].has_room()
    }

    fn room_pages(&self, node: NodeId) -> u64 {
        let n = &self.eng.nodes[node as usize];
        n.free().saturating_sub(n.wmark_high + 1)
    }

    fn page_node(&self, page: u32) -> Option<NodeId> {
        self.present(page).map(|n| n as NodeId)
    }

    fn last_cpu(&self, page: u32) -> Option<u32> {
        let c = self.eng.pt.ext(page).last_cpu;
        (c != NIL && (c as usize) < self.eng.cpus.len()).then_some(c)
    }

    fn demote(&mut self, page: u32, to: NodeId, mode: MoveMode, reserve: bool) -> bool {
        let Some(from) = self.present(page) else { return false };
        let n = &self.eng.nodes[to as usize];
        if from == to as usize || n.free() <= n.wmark_min {
            return false;
        }
        self.relocate(page, from, to as usize, mode);
        if reserve {
            self.eng.nodes[from].reserved += 1;
        }
        true
    }

    fn migrate(&mut self, page: u32, to: NodeId, mode: MoveMode) -> bool {
        let Some(from) = self.present(page) else { return false };
        if from == to as usize || !self.eng.nodes[to as usize].has_room() {
            return false;
        }
        self.relocate(page, from, to as usize, mode);
        true
    }

    fn migrate_reserved(&mut self, page: u32, to: NodeId) -> bool {
        let Some(from) = self.present(page) else { return false };
        if from == to as usize || self.eng.nodes[to as usize].reserved == 0 {
            return false;
        }
        self.eng.nodes[to as usize].reserved -= 1;
        self.relocate(page, from, to as usize, MoveMode::Sync);
        true
    }

    fn mark_page_accessed(&mut self, page: u32) {
        if let Some(node) = self.present(page) {
            self.eng.mark_page_accessed(page, node);
        }
    }

    fn is_file(&self, page: u32) -> bool {
        self.eng.pt.entries.get(page as usize).is_some_and(|e| e.flags & FILE != 0)
    }

    fn demote_file_page(&mut self, from: NodeId, to: NodeId, mode: MoveMode) -> Option<u32> {
        let (from, to) = (from as usize, to as usize);
        let n = &self.eng.nodes[to];
        if from == to || n.free() <= n.wmark_min {
            return None;
        }
        let page = self.eng.oldest_file_page(from)?;
        self.relocate(page, from, to, mode);
        Some(page)
    }

    fn exchange(&mut self, a: u32, b: u32) -> bool {
        let (Some(na), Some(nb)) = (self.present(a), self.present(b)) else { return false };
        if na == nb {
            return false;
        }
        let done = self.eng.exchange_pages(a, b, self.t);
        // Two unmaps and TLB shootdowns, one two-way copy (policies.md 2.8).
        self.charge(MoveMode::Sync, 2, done);
        true
    }
}
