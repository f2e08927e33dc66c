//! oracle_static: static placement with knowledge of the future. Before the run the engine counts every
//! page's accesses over the whole trace; the oracle gives the fast tier to the hottest pages
//! that fit in it (its capacity above the high watermarks) and sends every other page to the
//! next tier at first touch. Each fast node takes at most its usable pages of the hot set: a hot
//! page goes to the faulting CPU's node while that node has quota left, else to the nearest fast
//! node that has (the kernel's fallback would put it on the local slow node first). Pages never
//! move, so it is the upper bound of any static placement (and costs nothing in faults or
//! copies); a workload whose hot set changes over time can beat it with migration, and so can a
//! policy that places better at first touch: oracle_dynamic is the bound for those.

use std::collections::HashSet;

use tiersim_core::{NodeId, ParamSpec, Params, PluginInfo, Result};

use crate::{is_top_tier, next_tier_node, PlaceCtx, Policy, PolicyEntry, Topology};

const PARAMS: &[ParamSpec] = &[];

pub(crate) const ENTRY: PolicyEntry = PolicyEntry {
    info: PluginInfo {
        name: "oracle_static",
        summary: "places the trace's hottest pages (by future access count) in the fast tier at first touch and never moves them: the bound of static placements, not of migrating policies",
        source: "tiersim (upper bound for comparison, as the 'ideal' placements of the tiering papers)",
        params: PARAMS,
    },
    build,
};

struct Oracle {
    /// Pages the fast tier can hold (filled in by `set_profile`).
    fast_pages: u64,
    hot: HashSet<u64>,
    /// Per node: hot pages it may still take (usable pages for fast nodes, 0 for the others).
    quota: Vec<u64>,
}

fn build(_: &Params, topo: &Topology) -> Result<Box<dyn Policy>> {
    let fast_pages = topo.nodes.iter().filter(|n| is_top_tier(n.id, topo)).map(|n| n.usable_pages).sum();
    let quota = topo.nodes.iter().map(|n| if is_top_tier(n.id, topo) { n.usable_pages } else { 0 }).collect();
    Ok(Box::new(Oracle { fast_pages, hot: HashSet::new(), quota }))
}

impl Policy for Oracle {
    fn place(&mut self, ctx: &PlaceCtx) -> NodeId {
        let local = ctx.local_node;
        if !is_top_tier(local, ctx.topo) {
            return local;
        }
        if self.hot.contains(&ctx.vpn) {
            let zonelist = &ctx.topo.zonelists[local as usize];
            if let Some(&n) = zonelist.iter().find(|&&n| self.quota[n as usize] > 0) {
                self.quota[n as usize] -= 1;
                return n;
            }
            return local;
        }
        next_tier_node(local, ctx.topo).unwrap_or(local)
    }

    fn wants_profile(&self) -> bool {
        true
    }

    fn set_profile(&mut self, hottest_first: &[(u64, u64)]) {
        self.hot = hottest_first.iter().take(self.fast_pages as usize).map(|&(vpn, _)| vpn).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::two_socket;

    #[test]
    fn hottest_pages_get_the_fast_tier() {
        let mut topo = two_socket();
        for n in &mut topo.nodes {
            n.usable_pages = 1;
        }
        let mut p = build(&Params::defaults(PARAMS).unwrap(), &topo).unwrap();
        assert!(p.wants_profile());
        // Two fast nodes of one usable page each: the two hottest pages, 7 and 3, are hot.
        p.set_profile(&[(7, 50), (3, 40), (9, 40), (1, 2)]);
        let free = [10; 4];
        let at = |p: &mut Box<dyn Policy>, cpu: u32, vpn| {
            p.place(&PlaceCtx {
                topo: &topo,
                cpu,
                local_node: topo.cpu_node[cpu as usize],
                vpn,
                free_pages: &free,
                file: false,
            })
        };
        assert_eq!(at(&mut p, 0, 7), 0);
        // Node 0's quota is used up: the next hot page from CPU 0 takes remote DRAM, not the
        // local slow node the zonelist would offer first.
        assert_eq!(at(&mut p, 0, 3), 1);
        // Cold pages go to the local socket's slow node.
        assert_eq!(at(&mut p, 0, 9), 2);
        assert_eq!(at(&mut p, 5, 1), 3);
    }
}
