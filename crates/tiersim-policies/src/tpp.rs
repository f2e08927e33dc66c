//! tpp: Transparent Page Placement (Al Maruf et al., ASPLOS'23; v1 patch series of Nov 2021 on
//! Linux 5.15, policies.md 5). Top-tier nodes are not scanned. A hint fault on a slow-tier page
//! promotes it only if it is on the active LRU list; otherwise the fault marks it accessed
//! (mark_page_accessed: referenced, then active) and the page stays. kswapd on a top-tier node is
//! woken whenever free memory drops below the demotion watermark,
//! clamp(managed x demote_scale_factor / 10000, 2 x high, managed), and demotes to the next tier
//! until it is back above it. Demoted pages are made PROT_NONE at once, so a hot one faults
//! promptly. Deviations: traces carry no file pages, so page-type-aware allocation (file cache on
//! the CXL node first) does not arise; the referenced/active state is the one hint faults build
//! (LRU aging of slow-tier pages by reclaim is not modelled), and it resets when a page moves.

use tiersim_core::{NodeId, ParamKind, ParamSpec, Params, PluginInfo, Result};

use crate::{is_top_tier, next_tier_node, scan_spec, FaultDecision, HintCtx, MemOps, Policy, PolicyEntry, ScanSpec, Topology, SCAN_PARAMS};

const PARAMS: &[ParamSpec] = &[
    SCAN_PARAMS[0],
    SCAN_PARAMS[1],
    SCAN_PARAMS[2],
    SCAN_PARAMS[3],
    ParamSpec::new("demote_scale_factor", ParamKind::Int, "200", "vm.demote_scale_factor: demotion watermark in 1/10000 of a node (200 = 2 %)")
        .min(1.0)
        .max(10000.0),
];

pub(crate) const ENTRY: PolicyEntry = PolicyEntry {
    info: PluginInfo {
        name: "tpp",
        summary: "TPP: promote only active-LRU pages, kswapd demotes to keep a demotion watermark free, demoted pages PROT_NONE",
        source: "TPP v1 patches (H. Al Maruf, Nov 2021) and arXiv 2206.02878 (policies.md 5)",
        params: PARAMS,
    },
    build,
};

const REFERENCED: u8 = 1;
const ACTIVE: u8 = 2;

struct Tpp {
    scan: ScanSpec,
    demote_scale_factor: u64,
    /// Per page id: REFERENCED / ACTIVE as mark_page_accessed leaves them.
    state: Vec<u8>,
}

fn build(params: &Params, topo: &Topology) -> Result<Box<dyn Policy>> {
    Ok(Box::new(Tpp { scan: scan_spec(params, false, topo), demote_scale_factor: params.uint("demote_scale_factor"), state: Vec::new() }))
}

impl Tpp {
    fn state(&mut self, page: u32) -> &mut u8 {
        let i = page as usize;
        if i >= self.state.len() {
            self.state.resize(i + 1, 0);
        }
        &mut self.state[i]
    }
}

impl Policy for Tpp {
    fn scanner(&self) -> Option<ScanSpec> {
        Some(self.scan)
    }

    fn on_hint_fault(&mut self, ctx: &HintCtx, _os: &mut dyn MemOps) -> FaultDecision {
        if is_top_tier(ctx.page.node, ctx.topo) {
            return FaultDecision::Stay;
        }
        let st = self.state(ctx.page.id);
        if *st & ACTIVE != 0 {
            return FaultDecision::Migrate(ctx.cpu_node);
        }
        // mark_page_accessed: a referenced inactive page is activated, else it gets referenced.
        *st = if *st & REFERENCED != 0 { ACTIVE } else { REFERENCED };
        FaultDecision::Stay
    }

    fn demotion_target(&self, node: NodeId, topo: &Topology) -> Option<NodeId> {
        if is_top_tier(node, topo) {
            next_tier_node(node, topo)
        } else {
            None
        }
    }

    fn reclaim_goal(&self, node: NodeId, (_, _, high): (u64, u64, u64), capacity: u64, topo: &Topology) -> Option<u64> {
        is_top_tier(node, topo).then(|| (capacity * self.demote_scale_factor / 10_000).clamp(2 * high, capacity))
    }

    fn protect_demoted(&self) -> bool {
        true
    }

    fn on_page_moved(&mut self, page: u32, _from: NodeId, _to: NodeId) {
        *self.state(page) = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{hint, two_socket, FakeOs};

    #[test]
    fn promotes_on_the_third_fault_and_keeps_a_demotion_watermark() {
        let topo = two_socket();
        let mut p = crate::build("tpp", None, &topo).unwrap().0;
        let free = [10; 4];
        let ctx = hint(&topo, 0, 2, None, 9, &free);
        // Fault 1: referenced; fault 2: activated; fault 3: promoted.
        assert_eq!(p.on_hint_fault(&ctx, &mut FakeOs::default()), FaultDecision::Stay);
        assert_eq!(p.on_hint_fault(&ctx, &mut FakeOs::default()), FaultDecision::Stay);
        assert_eq!(p.on_hint_fault(&ctx, &mut FakeOs::default()), FaultDecision::Migrate(0));
        // Moving resets it.
        p.on_page_moved(0, 2, 0);
        assert_eq!(p.on_hint_fault(&ctx, &mut FakeOs::default()), FaultDecision::Stay);
        // 1000 pages x 200 / 10000 = 20, at least 2 x high.
        assert_eq!(p.reclaim_goal(0, (4, 5, 6), 1000, &topo), Some(20));
        assert_eq!(p.reclaim_goal(0, (4, 5, 16), 1000, &topo), Some(32));
        assert_eq!(p.reclaim_goal(2, (4, 5, 6), 1000, &topo), None);
        assert_eq!(p.demotion_target(1, &topo), Some(3));
        assert!(p.protect_demoted());
    }
}
