//! Page-placement policies. A policy sees pages, nodes and statistics through narrow context
//! structs, never device internals; the engine's OS model carries out what it decides.
//!
//! Adding a policy: one file in this crate and one line in `REGISTRY`. Every hook is optional;
//! the default of each is what the kernel does without the policy.

use tiersim_core::{NodeId, ParamKind, ParamSpec, Params, PluginInfo, Result};

mod autonuma;
mod interleave;
mod linux_default;
mod numab_tiering;
mod oracle;
mod tpp;

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
    /// Pages usable before the allocator stops at the node's high watermark.
    pub usable_pages: u64,
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

/// What the NUMA-hinting scanner should mark PROT_NONE (policies.md 1.2): every present page,
/// or (tiering modes) only pages on nodes below the top tier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScanSpec {
    pub top_tier: bool,
    /// Scan window: present bytes marked per scan (`scan_size_mb`).
    pub scan_size: u64,
    pub period_min_ns: u64,
    pub period_max_ns: u64,
    /// Time before the first scan (`scan_delay_ms`).
    pub delay_ns: u64,
}

/// A page as a policy sees it at a hint fault.
#[derive(Debug, Clone, Copy)]
pub struct PageView {
    /// Dense page id: policies may keep per-page state of their own indexed by it.
    pub id: u32,
    pub node: NodeId,
    /// CPU of the previous hint fault on this page (the kernel's last_cpupid), if any.
    pub last_cpu: Option<u32>,
    /// When the scanner last made this page PROT_NONE (ns).
    pub scan_time_ns: u64,
}

/// Context of a NUMA hint fault: CPU `cpu` touched a PROT_NONE page.
#[derive(Debug, Clone, Copy)]
pub struct HintCtx<'a> {
    pub topo: &'a Topology,
    pub cpu: u32,
    pub cpu_node: NodeId,
    pub page: PageView,
    pub now_ns: u64,
    pub write: bool,
    /// Free pages per node right now.
    pub free_pages: &'a [u64],
    /// Per node (min, low, high) watermarks in pages.
    pub watermarks: &'a [(u64, u64, u64)],
    /// Completed full passes of the scanner over the address space (numa_scan_seq).
    pub scan_seq: u64,
}

/// What a policy decides at a hint fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultDecision {
    Stay,
    /// Migrate to this node; the OS model fails the migration (and counts it) if the node lacks
    /// free memory above its high watermark, as migrate_misplaced_page does.
    Migrate(NodeId),
}

pub trait Policy: Send {
    /// The node to try first for a new page. The OS model walks that node's zonelist from there,
    /// taking the first node above its low watermark, as the kernel's page allocator does.
    /// Default: the faulting CPU's node (the kernel's first-touch "local" policy).
    fn place(&mut self, ctx: &PlaceCtx) -> NodeId {
        ctx.local_node
    }

    /// The hinting scanner's settings, or None if the policy does not scan.
    fn scanner(&self) -> Option<ScanSpec> {
        None
    }

    /// A hint fault on a PROT_NONE page.
    fn on_hint_fault(&mut self, _ctx: &HintCtx) -> FaultDecision {
        FaultDecision::Stay
    }

    /// Where reclaim on `node` demotes its victims instead of swapping them, if anywhere.
    fn demotion_target(&self, _node: NodeId, _topo: &Topology) -> Option<NodeId> {
        None
    }

    /// Free pages kswapd keeps on `node` proactively, checked after every allocation there
    /// (TPP's demotion watermark); None = only the kernel's usual low/high watermarks.
    fn reclaim_goal(&self, _node: NodeId, _watermarks: (u64, u64, u64), _capacity: u64, _topo: &Topology) -> Option<u64> {
        None
    }

    /// Whether demoted pages are made PROT_NONE at once, so a hot one faults promptly (TPP).
    fn protect_demoted(&self) -> bool {
        false
    }

    /// Page `page` (dense id) moved from `from` to `to` (promotion, demotion or NUMA move).
    fn on_page_moved(&mut self, _page: u32, _from: NodeId, _to: NodeId) {}

    /// Whether the policy needs the whole trace's page profile before the run (the oracle).
    fn wants_profile(&self) -> bool {
        false
    }

    /// Every page's access count over the whole trace: (virtual page number, accesses), hottest
    /// first, ties by lower page number. Called once before the run if `wants_profile`.
    fn set_profile(&mut self, _hottest_first: &[(u64, u64)]) {}

    /// A promotion into `node` failed for lack of free memory; return the free-page goal kswapd
    /// should reclaim (demote) the node to, if the policy wakes it (NUMAB-2's promo watermark).
    fn on_promotion_failed(&mut self, _node: NodeId, _watermarks: (u64, u64, u64), _capacity: u64) -> Option<u64> {
        None
    }
}

/// The nearest node of the next lower tier (the kernel's next_demotion_node): smallest distance
/// from `node`, ties to the lower id.
pub fn next_tier_node(node: NodeId, topo: &Topology) -> Option<NodeId> {
    let tier = topo.nodes[node as usize].tier;
    let next = topo.nodes.iter().filter(|n| n.tier > tier).map(|n| n.tier).min()?;
    topo.zonelists[node as usize].iter().copied().find(|&n| topo.nodes[n as usize].tier == next)
}

/// Whether `node` is in the top tier (the fastest tier that has a node with CPUs).
pub fn is_top_tier(node: NodeId, topo: &Topology) -> bool {
    let top = topo.nodes.iter().filter(|n| n.has_cpus).map(|n| n.tier).min().unwrap_or(0);
    topo.nodes[node as usize].tier <= top
}

/// Scanner parameters shared by every policy that uses NUMA balancing, with the kernel's
/// defaults (policies.md 1.2: `kernel.numa_balancing_*`).
pub const SCAN_PARAMS: [ParamSpec; 4] = [
    ParamSpec::new("scan_size", ParamKind::Bytes, "256MiB", "present memory made PROT_NONE per scan window (scan_size_mb)").min(4096.0),
    ParamSpec::new("scan_period_min", ParamKind::Duration, "1000ms", "shortest scan period (scan_period_min_ms)").min(1.0),
    ParamSpec::new("scan_period_max", ParamKind::Duration, "60000ms", "longest scan period (scan_period_max_ms)").min(1.0),
    ParamSpec::new("scan_delay", ParamKind::Duration, "1000ms", "time before the first scan (scan_delay_ms)"),
];

pub fn scan_spec(p: &Params, top_tier: bool) -> ScanSpec {
    ScanSpec {
        top_tier,
        scan_size: p.bytes("scan_size"),
        period_min_ns: p.duration("scan_period_min"),
        period_max_ns: p.duration("scan_period_max").max(p.duration("scan_period_min")),
        delay_ns: p.duration("scan_delay"),
    }
}

pub type BuildFn = fn(&Params, &Topology) -> Result<Box<dyn Policy>>;

pub struct PolicyEntry {
    pub info: PluginInfo,
    pub build: BuildFn,
}

/// Every policy tiersim knows, by config name. The only place a policy is named.
pub static REGISTRY: &[PolicyEntry] = &[linux_default::ENTRY, interleave::ENTRY, autonuma::ENTRY, numab_tiering::ENTRY, oracle::ENTRY, tpp::ENTRY];

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
            usable_pages: 994,
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

    pub const WMARKS: [(u64, u64, u64); 4] = [(4, 5, 6); 4];

    /// A hint fault by `cpu` on a page that lives on `node`.
    pub fn hint<'a>(topo: &'a Topology, cpu: u32, node: NodeId, last_cpu: Option<u32>, scan_seq: u64, free: &'a [u64]) -> HintCtx<'a> {
        HintCtx {
            topo,
            cpu,
            cpu_node: topo.cpu_node[cpu as usize],
            page: PageView { id: 0, node, last_cpu, scan_time_ns: 0 },
            now_ns: 0,
            write: false,
            free_pages: free,
            watermarks: &WMARKS,
            scan_seq,
        }
    }
}
