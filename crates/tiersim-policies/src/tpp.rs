//! tpp: Transparent Page Placement (Al Maruf et al., ASPLOS'23; v1 patch series of Nov 2021 on
//! Linux 5.15, policies.md 5). Top-tier nodes are not scanned. A hint fault on a slow-tier page
//! promotes it only if it is on the active LRU list; otherwise the fault marks it accessed
//! (mark_page_accessed: referenced, then active; the OS model's LRU lists hold that state, so
//! reclaim's aging of the slow tier applies to it too) and the page stays. kswapd on a top-tier node is
//! woken whenever free memory drops below the demotion watermark,
//! clamp(managed x demote_scale_factor / 10000, 2 x high, managed), and demotes to the next tier
//! until it is back above it. Demoted pages are made PROT_NONE at once, so a hot one faults
//! promptly. Page-type-aware allocation, from the paper (policies.md 5, not in the v1 patches): page
//! cache goes to the local socket's slow tier first, anonymous pages to the local node
//! (`page_type_aware`, on by default as in the paper's TPP).

use tiersim_core::{NodeId, ParamKind, ParamSpec, Params, PluginInfo, Result};

use crate::{
    is_top_tier, next_tier_node, scan_spec, FaultDecision, HintCtx, MemOps, PlaceCtx, Policy, PolicyEntry, ScanSpec,
    Topology, SCAN_PARAMS,
};

const PARAMS: &[ParamSpec] = &[
    SCAN_PARAMS[0],
    SCAN_PARAMS[1],
    SCAN_PARAMS[2],
    SCAN_PARAMS[3],
    ParamSpec::new(
        "demote_scale_factor",
        ParamKind::Int,
        "200",
        "vm.demote_scale_factor: demotion watermark in 1/10000 of a node (200 = 2 %)",
    )
    .min(1.0)
    .max(10000.0),
    ParamSpec::new(
        "page_type_aware",
        ParamKind::Bool,
        "true",
        "allocate page cache on the local slow tier first, anonymous memory on the local node",
    ),
];

pub(crate) const ENTRY: PolicyEntry = PolicyEntry {
    info: PluginInfo {
        name: "tpp",
        summary: "TPP: page cache on the slow tier first, promote only active-LRU pages, kswapd keeps a demotion watermark free, demoted pages PROT_NONE",
        source: "TPP v1 patches (H. Al Maruf, Nov 2021) and arXiv 2206.02878 (policies.md 5)",
        params: PARAMS,
    },
    build,
};

struct Tpp {
    scan: ScanSpec,
    demote_scale_factor: u64,
    page_type_aware: bool,
}

fn build(params: &Params, topo: &Topology) -> Result<Box<dyn Policy>> {
    Ok(Box::new(Tpp {
        scan: scan_spec(params, false, topo),
        demote_scale_factor: params.uint("demote_scale_factor"),
        page_type_aware: params.bool("page_type_aware"),
    }))
}

impl Policy for Tpp {
    /// The allocation then falls back along the preferred node's zonelist, as any first touch.
    fn place(&mut self, ctx: &PlaceCtx) -> NodeId {
        if self.page_type_aware && ctx.file {
            if let Some(slow) = next_tier_node(ctx.local_node, ctx.topo) {
                return slow;
            }
        }
        ctx.local_node
    }

    fn scanner(&self) -> Option<ScanSpec> {
        Some(self.scan)
    }

    fn on_hint_fault(&mut self, ctx: &HintCtx, os: &mut dyn MemOps) -> FaultDecision {
        if is_top_tier(ctx.page.node, ctx.topo) {
            return FaultDecision::Stay;
        }
        if ctx.page.active {
            return FaultDecision::Migrate(ctx.cpu_node);
        }
        os.mark_page_accessed(ctx.page.id);
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{hint, two_socket, FakeOs};

    #[test]
    fn promotes_active_pages_only_and_keeps_a_demotion_watermark() {
        let topo = two_socket();
        let mut p = crate::build("tpp", None, &topo).unwrap().0;
        let free = [10; 4];
        let mut ctx = hint(&topo, 0, 2, None, 9, &free);
        // An inactive slow-tier page is marked accessed and stays; an active one is promoted.
        let mut os = FakeOs::default();
        assert_eq!(p.on_hint_fault(&ctx, &mut os), FaultDecision::Stay);
        assert_eq!(os.log, ["mark_page_accessed 0"]);
        ctx.page.active = true;
        assert_eq!(p.on_hint_fault(&ctx, &mut os), FaultDecision::Migrate(0));
        // A top-tier page is left alone.
        ctx.page.node = 1;
        assert_eq!(p.on_hint_fault(&ctx, &mut os), FaultDecision::Stay);
        assert_eq!(os.log.len(), 1);
        // 1000 pages x 200 / 10000 = 20, at least 2 x high.
        assert_eq!(p.reclaim_goal(0, (4, 5, 6), 1000, &topo), Some(20));
        assert_eq!(p.reclaim_goal(0, (4, 5, 16), 1000, &topo), Some(32));
        assert_eq!(p.reclaim_goal(2, (4, 5, 6), 1000, &topo), None);
        assert_eq!(p.demotion_target(1, &topo), Some(3));
        assert!(p.protect_demoted());
    }

    #[test]
    fn page_cache_is_allocated_on_the_local_slow_tier_first() {
        let topo = two_socket();
        let free = [10; 4];
        let place = |params: &str, cpu: u32, file: bool| {
            let t: toml::Table = toml::from_str(params).unwrap();
            let mut p = crate::build("tpp", Some(&t), &topo).unwrap().0;
            p.place(&PlaceCtx {
                topo: &topo,
                cpu,
                local_node: topo.cpu_node[cpu as usize],
                vpn: 0,
                free_pages: &free,
                file,
            })
        };
        // CPU 0 is on DRAM node 0 (PMEM 2), CPU 4 on DRAM node 1 (PMEM 3).
        assert_eq!(place("", 0, true), 2);
        assert_eq!(place("", 4, true), 3);
        assert_eq!(place("", 4, false), 1, "anonymous memory stays local");
        assert_eq!(place("page_type_aware = false", 4, true), 1);
    }
}
