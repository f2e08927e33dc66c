//! Epochs of known future: a policy that profiled the trace per span of accesses
//! (oracle_dynamic) rearranges memory before each span; its moves go through the same MemOps as
//! a hint fault's and are charged as their mode says to the CPU about to issue.

use tiersim_core::Ns;

use super::{Engine, Ops, Parked};

impl Engine {
    /// Start the next policy epoch at `t`; returns the time (ps) charged to the issuing CPU.
    pub(super) fn policy_epoch(&mut self, t: Ns) -> u64 {
        let epoch = self.policy_epoch;
        self.policy_epoch += 1;
        self.policy_epoch_at = self.policy_epoch_at.saturating_add(self.policy_epoch_len);
        let topo = std::mem::take(&mut self.topo);
        let mut policy = std::mem::replace(&mut self.policy, Box::new(Parked));
        self.parked = true;
        let mut ops = Ops { eng: self, t, cost_ps: 0 };
        policy.on_epoch(epoch, &topo, &mut ops);
        let cost = ops.cost_ps;
        self.policy = policy;
        self.parked = false;
        self.topo = topo;
        for ev in std::mem::take(&mut self.page_events) {
            self.page_event(ev);
        }
        cost
    }
}
