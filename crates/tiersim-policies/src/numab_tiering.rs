//! numab_tiering: the Linux memory-tiering mode of NUMA balancing (numa_balancing = 2, mainline
//! 5.18 to 6.x; policies.md 3, from Linux 6.3 kernel/sched/fair.c and mm/mprotect.c). Only pages
//! below the top tier are scanned. A hint fault promotes the page to the faulting CPU's node if
//! that node has ample free memory (promo watermark + max(1 GiB, 1/16 of the node)); otherwise
//! only if its hint-fault latency (fault time minus scan time) is below a threshold that adapts
//! every scan_period_max to hold the promotion rate near the limit, and the per-node rate limit
//! over 1 s windows is not exceeded. A promotion that fails for lack of memory wakes kswapd on
//! the fast node, which demotes to the next tier until free memory reaches the promo watermark.
//! Deviation: `demotion` defaults to on (the kernel's demotion_enabled defaults to 0, with which
//! tiering mode cannot make room in the fast tier); set it false for the kernel default.

use tiersim_core::{NodeId, ParamKind, ParamSpec, Params, PluginInfo, Result};

use crate::{
    is_top_tier, next_tier_node, scan_spec, CandidateWindow, FaultDecision, HintCtx, MemOps, Policy, PolicyEntry,
    ScanSpec, Topology, SCAN_PARAMS,
};

const PARAMS: &[ParamSpec] = &[
    SCAN_PARAMS[0],
    SCAN_PARAMS[1],
    SCAN_PARAMS[2],
    SCAN_PARAMS[3],
    ParamSpec::new(
        "hot_threshold",
        ParamKind::Duration,
        "1000ms",
        "hint-fault latency below which a page is hot (hot_threshold_ms)",
    )
    .min(1.0),
    ParamSpec::new(
        "promote_rate_limit",
        ParamKind::Bandwidth,
        "65536MB/s",
        "promotion candidates per node per second (promote_rate_limit_MBps)",
    ),
    ParamSpec::new(
        "demotion",
        ParamKind::Bool,
        "true",
        "reclaim demotes to the next tier (demotion_enabled; kernel default false)",
    ),
];

pub(crate) const ENTRY: PolicyEntry = PolicyEntry {
    info: PluginInfo {
        name: "numab_tiering",
        summary: "Linux memory tiering (numa_balancing=2): hint-fault latency threshold, rate limit, kswapd demotion",
        source: "Linux 6.3 kernel/sched/fair.c, mm/mprotect.c, mm/vmscan.c (policies.md 3)",
        params: PARAMS,
    },
    build,
};

const WINDOW_NS: u64 = 1_000_000_000;
const GIB: u64 = 1 << 30;

#[derive(Clone, Default)]
struct NodeRate {
    window: CandidateWindow,
    /// Adaptive threshold (0 = use the default).
    threshold_ns: u64,
    adjust_start: u64,
    adjust_candidates: u64,
}

struct NumabTiering {
    scan: ScanSpec,
    def_threshold_ns: u64,
    rate_pages: f64,
    demotion: bool,
    /// The rate-limit window (1 s) and the 1 GiB of "free space enough", scaled to the platform.
    window_ns: u64,
    ample_pages: u64,
    nodes: Vec<NodeRate>,
}

fn build(params: &Params, topo: &Topology) -> Result<Box<dyn Policy>> {
    Ok(Box::new(NumabTiering {
        scan: scan_spec(params, false, topo),
        def_threshold_ns: topo.scaled_time(params.duration("hot_threshold")),
        rate_pages: topo.rate_pages(params.bandwidth("promote_rate_limit")),
        demotion: params.bool("demotion"),
        window_ns: topo.scaled_time(WINDOW_NS),
        ample_pages: topo.scaled_bytes(GIB) / topo.page_size,
        nodes: vec![NodeRate::default(); topo.nodes.len()],
    }))
}

/// promo = high + (high - low): the kernel's WMARK_PROMO.
fn promo_wmark((_, low, high): (u64, u64, u64)) -> u64 {
    high + (high - low)
}

impl NumabTiering {
    /// adjust_threshold: every scan_period_max, move the threshold by 1/8 of the default toward
    /// a candidate rate of `rate_pages` per second, within [unit, 2 x default].
    fn adjust(&mut self, dst: usize, now: u64) {
        let period = self.scan.period_max_ns;
        let unit = 2 * self.def_threshold_ns / 16;
        let r = &mut self.nodes[dst];
        if now < r.adjust_start + period {
            return;
        }
        let reference = self.rate_pages * period as f64 / self.window_ns as f64;
        let diff = r.adjust_candidates as f64;
        let th = if r.threshold_ns == 0 { self.def_threshold_ns } else { r.threshold_ns };
        r.threshold_ns = if diff > 1.1 * reference {
            th.saturating_sub(unit).max(unit)
        } else if diff < 0.9 * reference {
            (th + unit).min(2 * self.def_threshold_ns)
        } else {
            th
        };
        r.adjust_start = now;
        r.adjust_candidates = 0;
    }
}

impl Policy for NumabTiering {
    fn scanner(&self) -> Option<ScanSpec> {
        Some(self.scan)
    }

    fn on_hint_fault(&mut self, ctx: &HintCtx, _os: &mut dyn MemOps) -> FaultDecision {
        if is_top_tier(ctx.page.node, ctx.topo) {
            return FaultDecision::Stay;
        }
        let dst = ctx.cpu_node;
        let d = dst as usize;
        let ample = promo_wmark(ctx.watermarks[d]) + self.ample_pages.max(ctx.topo.nodes[d].capacity_pages / 16);
        if ctx.free_pages[d] > ample {
            self.nodes[d].threshold_ns = 0;
            return FaultDecision::Migrate(dst);
        }
        self.adjust(d, ctx.now_ns);
        let r = &self.nodes[d];
        let th = if r.threshold_ns == 0 { self.def_threshold_ns } else { r.threshold_ns };
        if ctx.now_ns.saturating_sub(ctx.page.scan_time_ns) >= th {
            return FaultDecision::Stay;
        }
        let r = &mut self.nodes[d];
        r.adjust_candidates += 1;
        if !r.window.admit(ctx.now_ns, self.window_ns, self.rate_pages) {
            return FaultDecision::Stay;
        }
        FaultDecision::Migrate(dst)
    }

    fn demotion_target(&self, node: NodeId, topo: &Topology) -> Option<NodeId> {
        if self.demotion && is_top_tier(node, topo) {
            next_tier_node(node, topo)
        } else {
            None
        }
    }

    fn on_promotion_failed(&mut self, _node: NodeId, watermarks: (u64, u64, u64), _capacity: u64) -> Option<u64> {
        self.demotion.then(|| promo_wmark(watermarks))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{hint, two_socket, FakeOs};

    fn make(text: &str) -> Box<dyn Policy> {
        let t: toml::Table = toml::from_str(text).unwrap();
        crate::build("numab_tiering", Some(&t), &two_socket()).unwrap().0
    }

    #[test]
    fn promotes_by_hint_fault_latency_when_memory_is_tight() {
        let topo = two_socket();
        let mut p = make("");
        // Node 0 nearly full: 10 free pages; watermarks (4, 5, 6) -> promo 7 + max(1 GiB, 1000/16).
        let free = [10, 100, 100, 100];
        let mut ctx = hint(&topo, 0, 2, None, 9, &free);
        ctx.page.scan_time_ns = 0;
        ctx.now_ns = 999_999_999;
        assert_eq!(p.on_hint_fault(&ctx, &mut FakeOs::default()), FaultDecision::Migrate(0), "latency just below 1 s");
        ctx.now_ns = 1_000_000_000;
        assert_eq!(p.on_hint_fault(&ctx, &mut FakeOs::default()), FaultDecision::Stay, "latency of 1 s is not hot");
        // Top-tier pages never move, whatever their latency.
        let mut ctx = hint(&topo, 0, 1, None, 9, &free);
        ctx.now_ns = 1;
        assert_eq!(p.on_hint_fault(&ctx, &mut FakeOs::default()), FaultDecision::Stay);
    }

    #[test]
    fn rate_limit_counts_candidates_per_second() {
        let topo = two_socket();
        // 8 KiB/s = 2 pages of 4 KiB per 1 s window.
        let mut p = make("promote_rate_limit = \"8KiB/s\"");
        let free = [10, 100, 100, 100];
        let mut ctx = hint(&topo, 0, 2, None, 9, &free);
        let mut got = vec![];
        for t in [0u64, 1, 2, 1_000_000_000, 1_000_000_001] {
            ctx.now_ns = t;
            ctx.page.scan_time_ns = t;
            got.push(p.on_hint_fault(&ctx, &mut FakeOs::default()));
        }
        use FaultDecision::*;
        assert_eq!(got, vec![Migrate(0), Migrate(0), Stay, Migrate(0), Migrate(0)]);
    }

    #[test]
    fn ample_free_memory_promotes_anything_and_demotion_goes_down_one_tier() {
        let topo = two_socket();
        let mut p = make("");
        // 1 GiB = 262144 pages: a node with that much free is "free space enough". CPU 4 is
        // on node 1.
        let free = [100, 300_000, 100, 100];
        let mut ctx = hint(&topo, 4, 3, None, 9, &free);
        ctx.now_ns = 100_000_000_000;
        assert_eq!(p.on_hint_fault(&ctx, &mut FakeOs::default()), FaultDecision::Migrate(1));
        assert_eq!(p.demotion_target(0, &topo), Some(2));
        assert_eq!(p.demotion_target(1, &topo), Some(3));
        assert_eq!(p.demotion_target(2, &topo), None);
        assert_eq!(p.on_promotion_failed(0, (4, 5, 6), 1000), Some(7));
        assert!(!p.scanner().unwrap().top_tier);
        let p = make("demotion = false");
        assert_eq!(p.demotion_target(0, &topo), None);
    }
}
