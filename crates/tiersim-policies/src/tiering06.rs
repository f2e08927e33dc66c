//! tiering06: Intel's Tiering-0.x trees (the baseline AutoTiering compares against), as the
//! "autonuma, memory tiering" RFC series describes them (policies.md 4, from Huang Ying's RFC of
//! Nov 2019 and RFC-V2 of Feb 2020). Only slow-tier pages are scanned. A page is hot if it was
//! accessed in two consecutive scan periods (its PTE was young when the scan re-protected it and
//! it faults again); a hot page is promoted to the faulting CPU's node within a per-node rate
//! limit. If that node has free memory above high + 2 x the rate limit, any faulting page is
//! promoted. A promotion that finds the node below its high watermark wakes kswapd there, whose
//! goal becomes high + the rate limit, and reclaim demotes to the next tier (RECLAIM_MIGRATE).
//! Deviations: the later hint-fault-latency threshold of the series is not modelled (which of
//! the two 0.6 carried is unverified); traces have no file pages.

use tiersim_core::{NodeId, ParamKind, ParamSpec, Params, PluginInfo, Result};

use crate::{
    is_top_tier, next_tier_node, scan_spec, CandidateWindow, FaultDecision, HintCtx, MemOps, Policy, PolicyEntry,
    ScanSpec, ScanVisit, Topology, SCAN_PARAMS,
};

const PARAMS: &[ParamSpec] = &[
    SCAN_PARAMS[0],
    SCAN_PARAMS[1],
    SCAN_PARAMS[2],
    SCAN_PARAMS[3],
    // The AutoTiering scripts ([ATU] run-bench.sh) set numa_balancing_rate_limit_mbps = 30.
    ParamSpec::new(
        "rate_limit",
        ParamKind::Bandwidth,
        "30MB/s",
        "promotion candidates per node per second (numa_balancing_rate_limit_mbps)",
    ),
];

pub(crate) const ENTRY: PolicyEntry = PolicyEntry {
    info: PluginInfo {
        name: "tiering06",
        summary:
            "Intel Tiering-0.x: promote pages young in two consecutive scans, rate limit, kswapd demotes to high + rate",
        source: "Huang Ying, 'autonuma, memory tiering' RFC (Nov 2019) and RFC-V2 (Feb 2020) (policies.md 4)",
        params: PARAMS,
    },
    build,
};

const WINDOW_NS: u64 = 1_000_000_000;

struct Tiering06 {
    scan: ScanSpec,
    /// Promotion candidates per window (fractional on a scaled machine).
    rate_pages: f64,
    /// The rate limit as the page counts kswapd's goal and the "ample free memory" test add
    /// to the high watermark.
    rate_goal_pages: u64,
    window_ns: u64,
    window: Vec<CandidateWindow>,
    /// Per page id: the PTE was young when the last scan re-protected it.
    young: Vec<bool>,
}

fn build(params: &Params, topo: &Topology) -> Result<Box<dyn Policy>> {
    let rate_pages = topo.rate_pages(params.bandwidth("rate_limit"));
    Ok(Box::new(Tiering06 {
        scan: scan_spec(params, false, topo),
        rate_pages,
        rate_goal_pages: (rate_pages.round() as u64).max(1),
        window_ns: topo.scaled_time(WINDOW_NS),
        window: vec![CandidateWindow::default(); topo.nodes.len()],
        young: Vec::new(),
    }))
}

impl Policy for Tiering06 {
    fn scanner(&self) -> Option<ScanSpec> {
        Some(self.scan)
    }

    fn wants_scan_visits(&self) -> bool {
        true
    }

    /// A PTE still PROT_NONE at scan time was not touched in the period: its young bit is
    /// cleared. One that was touched keeps the young bit its access set.
    fn on_scan(&mut self, v: &ScanVisit) {
        let i = v.page as usize;
        if i >= self.young.len() {
            self.young.resize(i + 1, false);
        }
        self.young[i] = v.accessed;
    }

    fn on_hint_fault(&mut self, ctx: &HintCtx, _os: &mut dyn MemOps) -> FaultDecision {
        if is_top_tier(ctx.page.node, ctx.topo) {
            return FaultDecision::Stay;
        }
        let dst = ctx.cpu_node;
        let d = dst as usize;
        let high = ctx.watermarks[d].2;
        if ctx.free_pages[d] > high + 2 * self.rate_goal_pages {
            return FaultDecision::Migrate(dst);
        }
        if !self.young.get(ctx.page.id as usize).copied().unwrap_or(false) {
            return FaultDecision::Stay;
        }
        if !self.window[d].admit(ctx.now_ns, self.window_ns, self.rate_pages) {
            return FaultDecision::Stay;
        }
        FaultDecision::Migrate(dst)
    }

    fn demotion_target(&self, node: NodeId, topo: &Topology) -> Option<NodeId> {
        is_top_tier(node, topo).then(|| next_tier_node(node, topo)).flatten()
    }

    fn on_promotion_failed(&mut self, _node: NodeId, (_, _, high): (u64, u64, u64), _capacity: u64) -> Option<u64> {
        Some(high + self.rate_goal_pages)
    }

    fn on_page_moved(&mut self, page: u32, _from: NodeId, _to: NodeId) {
        if let Some(y) = self.young.get_mut(page as usize) {
            *y = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{hint, two_socket, FakeOs};

    fn make(text: &str) -> Box<dyn Policy> {
        let t: toml::Table = toml::from_str(text).unwrap();
        crate::build("tiering06", Some(&t), &two_socket()).unwrap().0
    }

    #[test]
    fn promotes_pages_young_in_two_consecutive_scans_within_the_rate_limit() {
        let topo = two_socket();
        // 8 KiB/s = 2 pages per window; node 0 holds 10 free pages, not above 6 + 2 x 2.
        let mut p = make("rate_limit = \"8KiB/s\"");
        let free = [10, 100, 100, 100];
        let mut os = FakeOs::default();
        let mut ctx = hint(&topo, 0, 2, None, 9, &free);
        // Never scanned: not young.
        assert_eq!(p.on_hint_fault(&ctx, &mut os), FaultDecision::Stay);
        // The last scan found it still PROT_NONE (untouched for a period): not young.
        p.on_scan(&ScanVisit { page: 0, node: 2, accessed: false, now_ns: 0 });
        assert_eq!(p.on_hint_fault(&ctx, &mut os), FaultDecision::Stay);
        // Touched in the previous period, faulting again now: hot, within the limit twice.
        p.on_scan(&ScanVisit { page: 0, node: 2, accessed: true, now_ns: 0 });
        let mut got = vec![];
        for t in [0, 1, 2, 1_000_000_000] {
            ctx.now_ns = t;
            got.push(p.on_hint_fault(&ctx, &mut os));
        }
        use FaultDecision::*;
        assert_eq!(got, vec![Migrate(0), Migrate(0), Stay, Migrate(0)]);
        // Free memory above high + 2 x rate (6 + 4): any page goes, young or not.
        let free = [11, 100, 100, 100];
        let ctx = hint(&topo, 0, 3, None, 9, &free);
        p.on_page_moved(0, 2, 3);
        assert_eq!(p.on_hint_fault(&ctx, &mut os), Migrate(0));
        // kswapd's goal is high + rate; demotion goes one tier down; DRAM is not scanned.
        assert_eq!(p.on_promotion_failed(0, (4, 5, 6), 1000), Some(8));
        assert_eq!(p.demotion_target(0, &topo), Some(2));
        assert_eq!(p.demotion_target(2, &topo), None);
        assert!(!p.scanner().unwrap().top_tier);
    }
}
