//! autonuma: vanilla Linux 5.x NUMA balancing (numa_balancing = 1). The scanner makes every
//! present page PROT_NONE in turn; a hint fault migrates the page to the faulting CPU's node if
//! the two-stage filter of should_numa_migrate_memory passes (policies.md 1.3, Linux 5.3
//! kernel/sched/fair.c). Promotion into a node without free memory above its high watermark
//! simply fails: vanilla AutoNUMA never demotes. The trace is one process, so every fault is
//! private (numa groups and shared-fault rules do not arise).

use tiersim_core::{NodeId, ParamSpec, Params, PluginInfo, Result};

use crate::{scan_spec, FaultDecision, HintCtx, MemOps, Policy, PolicyEntry, ScanSpec, Topology, SCAN_PARAMS};

const PARAMS: &[ParamSpec] = &SCAN_PARAMS;

pub(crate) const ENTRY: PolicyEntry = PolicyEntry {
    info: PluginInfo {
        name: "autonuma",
        summary: "Linux NUMA balancing: scan, hint faults, two-stage filter, promote only into free memory",
        source: "Linux 5.3 kernel/sched/fair.c should_numa_migrate_memory, mm/migrate.c (policies.md 1.2-1.3)",
        params: PARAMS,
    },
    build,
};

/// numa_scan_seq up to which a task counts as young and migrates on its first faults.
const YOUNG_SCAN_SEQ: u64 = 4;

struct AutoNuma {
    scan: ScanSpec,
}

fn build(params: &Params, topo: &Topology) -> Result<Box<dyn Policy>> {
    Ok(Box::new(AutoNuma { scan: scan_spec(params, true, topo) }))
}

/// The kernel's two-stage filter for one process: early in the task's life any first fault
/// migrates; later a page moves only after two consecutive faults from the same node.
pub(crate) fn two_stage_filter(ctx: &HintCtx, dst: NodeId) -> bool {
    match ctx.page.last_cpu {
        None => true,
        Some(_) if ctx.scan_seq <= YOUNG_SCAN_SEQ => true,
        Some(last) => ctx.topo.cpu_node[last as usize] == dst,
    }
}

impl Policy for AutoNuma {
    fn scanner(&self) -> Option<ScanSpec> {
        Some(self.scan)
    }

    fn on_hint_fault(&mut self, ctx: &HintCtx, _os: &mut dyn MemOps) -> FaultDecision {
        let dst = ctx.cpu_node;
        if ctx.page.node == dst || !two_stage_filter(ctx, dst) {
            return FaultDecision::Stay;
        }
        FaultDecision::Migrate(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{hint, two_socket, FakeOs};

    #[test]
    fn two_consecutive_faults_from_one_node_after_youth() {
        let topo = two_socket();
        let mut p = build(&Params::defaults(PARAMS).unwrap(), &topo).unwrap();
        let free = [100; 4];
        // Page on remote DRAM (node 1), CPU 0 (node 0) faults. Old task (scan_seq 5):
        // the last fault came from CPU 5 on node 1 -> stay; from CPU 2 on node 0 -> migrate.
        let ctx = hint(&topo, 0, 1, Some(5), 5, &free);
        assert_eq!(p.on_hint_fault(&ctx, &mut FakeOs::default()), FaultDecision::Stay);
        let ctx = hint(&topo, 0, 1, Some(2), 5, &free);
        assert_eq!(p.on_hint_fault(&ctx, &mut FakeOs::default()), FaultDecision::Migrate(0));
        // Young task: the first fault migrates whatever the last CPU.
        let ctx = hint(&topo, 0, 1, Some(5), 4, &free);
        assert_eq!(p.on_hint_fault(&ctx, &mut FakeOs::default()), FaultDecision::Migrate(0));
        // A page already on the faulting CPU's node stays.
        let ctx = hint(&topo, 0, 0, None, 9, &free);
        assert_eq!(p.on_hint_fault(&ctx, &mut FakeOs::default()), FaultDecision::Stay);
        // A local-PMEM page (node 2) faulted from node 0 is promoted to node 0.
        let ctx = hint(&topo, 1, 2, Some(3), 9, &free);
        assert_eq!(p.on_hint_fault(&ctx, &mut FakeOs::default()), FaultDecision::Migrate(0));
        assert!(p.scanner().unwrap().top_tier);
        assert_eq!(p.demotion_target(0, &topo), None);
    }
}
