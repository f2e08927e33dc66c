//! interleave: (weighted) page interleave over a set of nodes, as `numactl --interleave` and
//! MPOL_WEIGHTED_INTERLEAVE do. Per policies.md 7 ([WI], Linux mm/mempolicy.c): for a VMA policy
//! the node is chosen by page offset, t = ilx mod sum(weights), walking the nodes subtracting
//! weights until t < weight; task policy ("round_robin") stays on a node for `weight` pages.
//! Weights are integers 1..255 as in the kernel's sysfs. Anonymous-page ilx is the virtual page
//! number (vm_pgoff of an anonymous VMA is vm_start >> PAGE_SHIFT). Equal weights over k DRAM
//! nodes + 1 CXL node give the white paper's NPS1/2/4 ratios 50/50, 66/34, 80/20.

use tiersim_core::{Error, NodeId, ParamKind, ParamSpec, Params, PluginInfo, Result};

use crate::{PlaceCtx, Policy, PolicyEntry, Topology};

const PARAMS: &[ParamSpec] = &[
    ParamSpec::new(
        "nodes",
        ParamKind::StrList,
        "[]",
        "nodes to interleave over, by name; empty = every memory node (--interleave=all)",
    ),
    ParamSpec::new(
        "weights",
        ParamKind::FloatList,
        "[]",
        "integer weight 1..255 per node, in `nodes` order; empty = 1 each",
    ),
    ParamSpec::new(
        "mode",
        ParamKind::Str,
        "offset",
        "offset: node by virtual page number (VMA policy); round_robin: per-CPU countdown (task policy)",
    )
    .choices(&["offset", "round_robin"]),
];

pub(crate) const ENTRY: PolicyEntry = PolicyEntry {
    info: PluginInfo {
        name: "interleave",
        summary: "weighted page interleave over chosen nodes (50/50, 66/34, 80/20 are weight settings)",
        source: "Linux mm/mempolicy.c weighted_interleave_nid / interleave_nodes; policies.md 7",
        params: PARAMS,
    },
    build,
};

struct Interleave {
    nodes: Vec<NodeId>,
    weights: Vec<u64>,
    total: u64,
    round_robin: bool,
    /// Per CPU: (index into `nodes`, pages left on it) for round_robin.
    cursor: Vec<(usize, u64)>,
}

fn build(params: &Params, topo: &Topology) -> Result<Box<dyn Policy>> {
    let names = params.strs("nodes");
    let nodes: Vec<NodeId> = if names.is_empty() {
        topo.nodes.iter().map(|n| n.id).collect()
    } else {
        names
            .iter()
            .map(|name| {
                topo.node_by_name(name).ok_or_else(|| {
                    let valid: Vec<_> = topo.nodes.iter().map(|n| n.name.as_str()).collect();
                    Error::config(
                        "policy_params.nodes",
                        format!("no node named {name:?}; nodes are {}", valid.join(", ")),
                    )
                })
            })
            .collect::<Result<_>>()?
    };
    let mut seen = vec![false; topo.nodes.len()];
    for &n in &nodes {
        if std::mem::replace(&mut seen[n as usize], true) {
            return Err(Error::config(
                "policy_params.nodes",
                format!("node {:?} is listed twice", topo.nodes[n as usize].name),
            ));
        }
    }
    let raw = params.floats("weights");
    let weights: Vec<u64> = if raw.is_empty() {
        vec![1; nodes.len()]
    } else {
        if raw.len() != nodes.len() {
            return Err(Error::config(
                "policy_params.weights",
                format!("{} weights given for {} nodes; give one per node", raw.len(), nodes.len()),
            ));
        }
        raw.iter()
            .map(|&w| {
                if w.fract() == 0.0 && (1.0..=255.0).contains(&w) {
                    Ok(w as u64)
                } else {
                    Err(Error::config(
                        "policy_params.weights",
                        format!("weight {w} is not an integer in 1..255 (the kernel's range)"),
                    ))
                }
            })
            .collect::<Result<_>>()?
    };
    let total = weights.iter().sum();
    Ok(Box::new(Interleave {
        round_robin: params.str("mode") == "round_robin",
        cursor: vec![(0, weights[0]); topo.cpu_node.len()],
        nodes,
        weights,
        total,
    }))
}

impl Policy for Interleave {
    fn place(&mut self, ctx: &PlaceCtx) -> NodeId {
        if self.round_robin {
            let (idx, left) = &mut self.cursor[ctx.cpu as usize];
            if *left == 0 {
                *idx = (*idx + 1) % self.nodes.len();
                *left = self.weights[*idx];
            }
            *left -= 1;
            return self.nodes[*idx];
        }
        let mut t = ctx.vpn % self.total;
        for (i, &w) in self.weights.iter().enumerate() {
            if t < w {
                return self.nodes[i];
            }
            t -= w;
        }
        unreachable!("t < total = sum of weights")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::two_socket;

    fn make(toml_text: &str) -> Result<Box<dyn Policy>> {
        let table: toml::Table = toml::from_str(toml_text).unwrap();
        let topo = two_socket();
        crate::build("interleave", Some(&table), &topo).map(|(p, _)| p)
    }

    fn counts(p: &mut Box<dyn Policy>, pages: u64, cpu: u32) -> [u64; 4] {
        let topo = two_socket();
        let free = [100; 4];
        let mut c = [0; 4];
        for vpn in 0..pages {
            let ctx = PlaceCtx { topo: &topo, cpu, local_node: 0, vpn, free_pages: &free, file: false };
            c[p.place(&ctx) as usize] += 1;
        }
        c
    }

    #[test]
    fn weights_give_exact_ratios() {
        let mut p = make("nodes = [\"dram0\", \"pmem0\"]\nweights = [4, 1]").unwrap();
        assert_eq!(counts(&mut p, 1000, 0), [800, 0, 200, 0]);
        // Offset mode is a function of the page: vpn 0..3 on dram0, vpn 4 on pmem0.
        let topo = two_socket();
        let free = [1; 4];
        let at = |p: &mut Box<dyn Policy>, vpn| {
            p.place(&PlaceCtx { topo: &topo, cpu: 5, local_node: 1, vpn, free_pages: &free, file: false })
        };
        assert_eq!((0..6).map(|v| at(&mut p, v)).collect::<Vec<_>>(), vec![0, 0, 0, 0, 2, 0]);
    }

    #[test]
    fn default_is_all_nodes_equally() {
        let mut p = make("").unwrap();
        assert_eq!(counts(&mut p, 1000, 0), [250, 250, 250, 250]);
    }

    #[test]
    fn round_robin_counts_down_per_cpu() {
        let mut p = make("nodes = [\"dram1\", \"pmem1\"]\nweights = [2, 1]\nmode = \"round_robin\"").unwrap();
        let topo = two_socket();
        let free = [1; 4];
        let seq: Vec<_> = (0..7)
            .map(|v| {
                p.place(&PlaceCtx {
                    topo: &topo,
                    cpu: 1,
                    local_node: 0,
                    vpn: 1000 + v * 7,
                    free_pages: &free,
                    file: false,
                })
            })
            .collect();
        assert_eq!(seq, vec![1, 1, 3, 1, 1, 3, 1]);
    }

    #[test]
    fn rejects_bad_params() {
        let e = |t: &str| make(t).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e("nodes = [\"dram9\"]").contains("no node named \"dram9\"; nodes are dram0, dram1, pmem0, pmem1"));
        assert!(e("nodes = [\"dram0\", \"dram0\"]").contains("listed twice"));
        assert!(e("nodes = [\"dram0\"]\nweights = [1, 2]").contains("2 weights given for 1 nodes"));
        assert!(e("weights = [1, 0, 1, 1]").contains("not an integer in 1..255"));
        assert!(e("weights = [1, 1.5, 1, 1]").contains("not an integer in 1..255"));
        assert!(e("mode = \"random\"").contains("policy_params.mode"));
        assert!(e("wieghts = [1]").contains("policy_params.wieghts"));
    }
}
