//! Page-placement policies. A policy sees pages, nodes and statistics through narrow context
//! structs, never device internals; the engine's OS model carries out what it decides.
//!
//! Adding a policy: one file in this crate and one line in `REGISTRY`. Every hook but `place`
//! is optional.

use tiersim_core::{NodeId, Params, PluginInfo, Result};

mod interleave;
mod linux_default;

/// What a policy may know about one memory node.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: NodeId,
    pub name: String,
    /// 0 = fastest tier.
    pub tier: u8,
    /// Socket the node is attached to.
    pub socket: u16,
    /// Whether CPUs are local to this node (a CXL or PMEM node usually has none).
    pub has_cpus: bool,
    pub capacity_pages: u64,
}

/// The machine as policies see it.
#[derive(Debug, Clone)]
pub struct Topology {
    pub nodes: Vec<NodeInfo>,
    /// Per node: every node ordered by distance from it (the kernel's zonelist).
    pub zonelists: Vec<Vec<NodeId>>,
    /// Per CPU: its local memory node.
    pub cpu_node: Vec<NodeId>,
    pub page_size: u64,
}

impl Topology {
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.nodes.iter().find(|n| n.name == name).map(|n| n.id)
    }
}

/// Context of a page's first allocation (first touch, or swap-in).
#[derive(Debug, Clone, Copy)]
pub struct PlaceCtx<'a> {
    pub topo: &'a Topology,
    pub cpu: u32,
    /// The faulting CPU's local node.
    pub local_node: NodeId,
    /// Virtual page number of the page being allocated.
    pub vpn: u64,
    /// Free pages per node right now.
    pub free_pages: &'a [u64],
}

pub trait Policy: Send {
    /// The node to try first for a new page. The OS model walks that node's zonelist from there,
    /// taking the first node above its low watermark, as the kernel's page allocator does.
    fn place(&mut self, ctx: &PlaceCtx) -> NodeId;
}

pub type BuildFn = fn(&Params, &Topology) -> Result<Box<dyn Policy>>;

pub struct PolicyEntry {
    pub info: PluginInfo,
    pub build: BuildFn,
}

/// Every policy tiersim knows, by config name. The only place a policy is named.
pub static REGISTRY: &[PolicyEntry] = &[linux_default::ENTRY, interleave::ENTRY];

pub fn find(name: &str) -> Result<&'static PolicyEntry> {
    tiersim_core::params::lookup("policy", name, REGISTRY, |e| &e.info)
}

/// Build a policy by name with a raw parameter table; errors name the offending key.
pub fn build(name: &str, table: Option<&toml::Table>, topo: &Topology) -> Result<(Box<dyn Policy>, Params)> {
    let entry = find(name)?;
    let params = Params::resolve(entry.info.params, table).map_err(|e| e.under("policy_params"))?;
    let policy = (entry.build)(&params, topo)?;
    Ok((policy, params))
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;

    /// Two sockets, each with a DRAM node (with CPUs) and a CPU-less slow node; 4 CPUs per socket.
    pub fn two_socket() -> Topology {
        let node = |id: NodeId, name: &str, tier, socket, has_cpus| NodeInfo {
            id,
            name: name.into(),
            tier,
            socket,
            has_cpus,
            capacity_pages: 1000,
        };
        Topology {
            nodes: vec![
                node(0, "dram0", 0, 0, true),
                node(1, "dram1", 0, 1, true),
                node(2, "pmem0", 1, 0, false),
                node(3, "pmem1", 1, 1, false),
            ],
            zonelists: vec![vec![0, 2, 1, 3], vec![1, 3, 0, 2], vec![2, 0, 3, 1], vec![3, 1, 2, 0]],
            cpu_node: vec![0, 0, 0, 0, 1, 1, 1, 1],
            page_size: 4096,
        }
    }
}
