//! Page-placement policies. A policy sees pages, nodes and statistics through narrow context
//! structs, never device internals; the engine's OS model carries out what it decides.
//!
//! Adding a policy: one file in this crate and one line in `REGISTRY`. Every hook is optional;
//! the default of each is what the kernel does without the policy.

use tiersim_core::{NodeId, ParamKind, ParamSpec, Params, PluginInfo, Result};

mod autonuma;
mod autotiering;
mod interleave;
mod linux_default;
mod numab_tiering;
mod oracle_dynamic;
mod oracle_static;
mod tiering06;
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
#[derive(Debug, Clone, Default)]
pub struct Topology {
    pub nodes: Vec<NodeInfo>,
    /// Per node: every node ordered by distance from it (the kernel's zonelist).
    pub zonelists: Vec<Vec<NodeId>>,
    /// Per CPU: its local memory node.
    pub cpu_node: Vec<NodeId>,
    pub page_size: u64,
    /// The platform's `scale`: capacities are this fraction of the modelled machine's, so
    /// byte-sized policy knobs (scan windows, rate limits) shrink by it too.
    pub capacity_scale: f64,
    /// `os.daemon_time_scale`: daemon periods, delays and time thresholds are multiplied by it,
    /// so a short trace sees as many scan rounds as a long run on the real machine.
    pub time_scale: f64,
}

impl Topology {
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.nodes.iter().find(|n| n.name == name).map(|n| n.id)
    }

    /// A daemon time (period, delay, threshold, window) of the real machine in simulated time.
    pub fn scaled_time(&self, ns: u64) -> u64 {
        ((ns as f64 * self.time_scale).round() as u64).max(1)
    }

    /// A byte amount of the real machine (scan window, rate-limit budget) on the scaled one.
    pub fn scaled_bytes(&self, bytes: u64) -> u64 {
        (bytes as f64 * self.capacity_scale).round() as u64
    }

    /// Pages a rate of `bytes_per_s` allows per (scaled) second of daemon time. Fractional: 30 MB/s
    /// at scale 1/2048 is 3.58 pages, and flooring it (as before) cut the rate by 16 % at that
    /// scale but 2 % at 1/512, so a rate-limited policy's result moved with the size it was
    /// simulated at. `CandidateWindow` spreads the fraction over its windows.
    pub fn rate_pages(&self, bytes_per_s: f64) -> f64 {
        bytes_per_s * self.capacity_scale / self.page_size as f64
    }

    /// The node of tier `tier` on `socket` with the lowest id, if any.
    pub fn node_on(&self, socket: u16, tier: u8) -> Option<NodeId> {
        self.nodes.iter().find(|n| n.socket == socket && n.tier == tier).map(|n| n.id)
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
    /// A page-cache (file-backed) page rather than an anonymous one.
    pub file: bool,
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
    /// The kernel's cap on scanning speed (task_scan_min: 2560 MB/s), scaled like the rest.
    pub max_rate_bytes_per_s: f64,
}

/// One present page the scanner visits (only pages it may make PROT_NONE: every page, or in
/// tiering modes those below the top tier).
#[derive(Debug, Clone, Copy)]
pub struct ScanVisit {
    pub page: u32,
    pub node: NodeId,
    /// The page was touched since the previous scan made it PROT_NONE (its PTE is no longer
    /// PROT_NONE), or it was never scanned before (AutoTiering's quirk (a), policies.md 2.4).
    pub accessed: bool,
    pub now_ns: u64,
}

/// How a policy-driven move is carried out and charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveMode {
    /// In the fault path: its time is charged to the faulting CPU.
    Sync,
    /// By a kernel thread on a core of its own (kdemoted): only the devices see it.
    Background,
    /// Costs nothing at all, neither CPU time nor device traffic: the free-migration oracle's
    /// idealised move, which makes it a bound no real policy can beat.
    Free,
}

/// The OS operations a policy may perform during a hint fault, beyond returning a decision.
/// Room and allocation follow the kernel: a migration needs free memory above the target's high
/// watermark (`migrate_balanced_pgdat`, policies.md 2.2), a demotion allocates without reclaim.
pub trait MemOps {
    /// Free pages above the high watermark plus one page: `free > high + 1` (room for a migration).
    fn room(&self, node: NodeId) -> bool;
    /// Migrations `node` can take before `room` turns false: free pages above high + 1.
    fn room_pages(&self, node: NodeId) -> u64;
    /// The node page `page` lives on, None if it is swapped out or was never touched.
    fn page_node(&self, page: u32) -> Option<NodeId>;
    /// The CPU of the page's last hint fault (last_cpupid).
    fn last_cpu(&self, page: u32) -> Option<u32>;
    /// Demote a page to `to` if `to` has a free frame above its min watermark. With `reserve`, the
    /// frame it leaves is kept out of the allocator as a reserved frame of its node (AutoTiering's
    /// per-CPU promotion pool, policies.md 2.7); returns whether it moved.
    fn demote(&mut self, page: u32, to: NodeId, mode: MoveMode, reserve: bool) -> bool;
    /// Move a page to `to` if `to` has room above its high watermark (as `room`); returns
    /// whether it moved.
    fn migrate(&mut self, page: u32, to: NodeId, mode: MoveMode) -> bool;
    /// Move a page into one of `to`'s reserved frames; false if `to` has none.
    fn migrate_reserved(&mut self, page: u32, to: NodeId) -> bool;
    /// Swap the frames of two pages on different nodes in one operation (exchange_pages,
    /// policies.md 2.8); returns whether it happened.
    fn exchange(&mut self, a: u32, b: u32) -> bool;
    /// mark_page_accessed: set PG_referenced, or activate a page already referenced on the
    /// inactive list (TPP's hint fault on an inactive page, policies.md 5).
    fn mark_page_accessed(&mut self, page: u32);
    /// The page is a page-cache (file-backed) page.
    fn is_file(&self, page: u32) -> bool;
    /// Demote one page-cache page of `from`, the oldest of its inactive file list, else of its
    /// active file list, to `to` if `to` has a free frame above its min watermark; returns the
    /// page moved (AutoTiering's try_demote_page_cache, policies.md 2.6).
    fn demote_file_page(&mut self, from: NodeId, to: NodeId, mode: MoveMode) -> Option<u32>;
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
    /// PG_active: the page is on its node's active LRU list.
    pub active: bool,
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

    /// A hint fault on a PROT_NONE page. `os` carries out moves beyond the returned decision
    /// (demotions, exchanges, pool promotions) at once, charging them as their mode says.
    fn on_hint_fault(&mut self, _ctx: &HintCtx, _os: &mut dyn MemOps) -> FaultDecision {
        FaultDecision::Stay
    }

    /// Whether the policy wants `on_scan` for every page the scanner visits.
    fn wants_scan_visits(&self) -> bool {
        false
    }

    /// The scanner visits a page (before making it PROT_NONE again).
    fn on_scan(&mut self, _visit: &ScanVisit) {}

    /// A page was given a frame on `node`: first touch or swap-in.
    fn on_page_placed(&mut self, _page: u32, _node: NodeId) {}

    /// A page left memory (written to swap).
    fn on_page_evicted(&mut self, _page: u32, _node: NodeId) {}

    /// Pages per node per hotness level 0..=8 (AutoTiering's LAP levels), for the time series;
    /// None if the policy keeps no access history.
    fn hotness(&self) -> Option<&[[u64; 9]]> {
        None
    }

    /// Policy counters for summary.json (exchanges, low-frequency refusals, ...).
    fn stats(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Where reclaim on `node` demotes its victims instead of swapping them, if anywhere.
    fn demotion_target(&self, _node: NodeId, _topo: &Topology) -> Option<NodeId> {
        None
    }

    /// Free pages kswapd keeps on `node` proactively, checked after every allocation there
    /// (TPP's demotion watermark); None = only the kernel's usual low/high watermarks.
    fn reclaim_goal(
        &self,
        _node: NodeId,
        _watermarks: (u64, u64, u64),
        _capacity: u64,
        _topo: &Topology,
    ) -> Option<u64> {
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

    /// Per-epoch knowledge of the future (oracle_dynamic): the run is cut into `epochs` equal
    /// counts of accesses, and at each epoch's start the policy is told the `top` pages the
    /// epoch will use most.
    fn epoch_profile(&self) -> Option<EpochProfile> {
        None
    }

    /// Accesses per epoch, set once before the run if `epoch_profile` asks for epochs.
    fn set_epoch_length(&mut self, _accesses_per_epoch: u64) {}

    /// Accesses per epoch once `set_epoch_length` has run: the engine calls `on_epoch` every
    /// this many accesses.
    fn epoch_length(&self) -> Option<u64> {
        None
    }

    /// Epoch `epoch` begins (before its first access, in simulated issue order); `hottest` are
    /// the pages it will use most as (virtual page number, accesses in the epoch), hottest first
    /// (ties: lower page first), at most `top`; `os` carries out the moves, charged as their mode
    /// says to the CPU about to issue. `near` holds, by virtual page number, every page the epoch
    /// uses with the node whose CPUs make most of its accesses (empty if the CPUs share one node).
    fn on_epoch(
        &mut self,
        _epoch: usize,
        _hottest: &[(u64, u64)],
        _near: &[(u64, NodeId)],
        _topo: &Topology,
        _os: &mut dyn MemOps,
    ) {
    }

    /// A promotion into `node` failed for lack of free memory; return the free-page goal kswapd
    /// should reclaim (demote) the node to, if the policy wakes it (NUMAB-2's promo watermark).
    fn on_promotion_failed(&mut self, _node: NodeId, _watermarks: (u64, u64, u64), _capacity: u64) -> Option<u64> {
        None
    }
}

/// What a policy asks to know of each epoch's future.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochProfile {
    /// Equal counts of accesses (simulated issue order) the run is cut into.
    pub epochs: u64,
    /// Pages told per epoch, hottest first.
    pub top: usize,
    /// Predict an epoch's accesses per CPU from its position and speed (true), or as the next
    /// span of the trace (false).
    pub per_cpu: bool,
    /// What a write counts for when pages are ranked, a read counting 1.
    pub write_weight: u64,
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
    ParamSpec::new(
        "scan_size",
        ParamKind::Bytes,
        "256MiB",
        "present memory made PROT_NONE per scan window (scan_size_mb)",
    )
    .min(4096.0),
    ParamSpec::new("scan_period_min", ParamKind::Duration, "1000ms", "shortest scan period (scan_period_min_ms)")
        .min(1.0)
        .not_above("scan_period_max"),
    ParamSpec::new("scan_period_max", ParamKind::Duration, "60000ms", "longest scan period (scan_period_max_ms)")
        .min(1.0),
    ParamSpec::new("scan_delay", ParamKind::Duration, "1000ms", "time before the first scan (scan_delay_ms)"),
];

/// The scanner settings from SCAN_PARAMS, scaled to the platform (`Topology::scaled_*`).
pub fn scan_spec(p: &Params, top_tier: bool, topo: &Topology) -> ScanSpec {
    let min = topo.scaled_time(p.duration("scan_period_min"));
    ScanSpec {
        top_tier,
        scan_size: topo.scaled_bytes(p.bytes("scan_size")).max(topo.page_size),
        period_min_ns: min,
        period_max_ns: topo.scaled_time(p.duration("scan_period_max")).max(min),
        delay_ns: topo.scaled_time(p.duration("scan_delay")),
        max_rate_bytes_per_s: (2560u64 << 20) as f64 * topo.capacity_scale / topo.time_scale,
    }
}

/// A promotion rate limit's bookkeeping for one node: candidates counted in the current window
/// (the kernel's per-node promotion candidates per 1 s, policies.md 3 and 4).
#[derive(Debug, Clone, Copy, Default)]
pub struct CandidateWindow {
    start_ns: u64,
    count: u64,
    /// Windows started so far: window k allows floor((k + 1) r) - floor(k r) candidates, so a
    /// fractional rate r (a scaled machine's) holds on average. On the real machine r is
    /// thousands of pages and this is the kernel's integer limit.
    index: u64,
}

impl CandidateWindow {
    /// Count one candidate at `now_ns`, starting a new window if the current one is over;
    /// whether it is within `rate` candidates per `window_ns`.
    pub fn admit(&mut self, now_ns: u64, window_ns: u64, rate: f64) -> bool {
        if now_ns >= self.start_ns + window_ns {
            self.start_ns = now_ns;
            self.count = 0;
            self.index += 1;
        }
        self.count += 1;
        let k = self.index as f64;
        self.count as f64 <= ((k + 1.0) * rate).floor() - (k * rate).floor()
    }
}

pub type BuildFn = fn(&Params, &Topology) -> Result<Box<dyn Policy>>;

pub struct PolicyEntry {
    pub info: PluginInfo,
    pub build: BuildFn,
}

/// Every policy tiersim knows, by config name. The only place a policy is named.
pub static REGISTRY: &[PolicyEntry] = &[
    linux_default::ENTRY,
    interleave::ENTRY,
    autonuma::ENTRY,
    numab_tiering::ENTRY,
    tiering06::ENTRY,
    tpp::ENTRY,
    autotiering::CPM,
    autotiering::CPMX,
    autotiering::OPM,
    autotiering::OPMX,
    autotiering::OPM_BD,
    oracle_static::ENTRY,
    oracle_dynamic::ENTRY,
];

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
            capacity_scale: 1.0,
            time_scale: 1.0,
        }
    }

    /// A MemOps over a page -> node map with per-node free pages and reserved frames, recording
    /// what the policy did; room is `free > 6 + 1` (high watermark of WMARKS).
    #[derive(Default, Debug)]
    pub struct FakeOs {
        pub node: std::collections::BTreeMap<u32, NodeId>,
        pub last_cpu: std::collections::BTreeMap<u32, u32>,
        pub free: Vec<u64>,
        pub reserved: Vec<u64>,
        /// Page-cache pages, oldest first.
        pub files: Vec<u32>,
        pub log: Vec<String>,
    }

    impl FakeOs {
        pub fn new(free: &[u64]) -> FakeOs {
            FakeOs { free: free.to_vec(), reserved: vec![0; free.len()], ..FakeOs::default() }
        }

        fn relocate(&mut self, page: u32, to: NodeId) {
            let from = self.node[&page];
            self.free[from as usize] += 1;
            self.free[to as usize] -= 1;
            self.node.insert(page, to);
        }
    }

    impl MemOps for FakeOs {
        fn room(&self, node: NodeId) -> bool {
            self.room_pages(node) > 0
        }
        fn room_pages(&self, node: NodeId) -> u64 {
            self.free[node as usize].saturating_sub(WMARKS[node as usize].2 + 1)
        }
        fn page_node(&self, page: u32) -> Option<NodeId> {
            self.node.get(&page).copied()
        }
        fn last_cpu(&self, page: u32) -> Option<u32> {
            self.last_cpu.get(&page).copied()
        }
        fn demote(&mut self, page: u32, to: NodeId, mode: MoveMode, reserve: bool) -> bool {
            if self.free[to as usize] <= WMARKS[to as usize].0 {
                return false;
            }
            let from = self.node[&page];
            self.relocate(page, to);
            if reserve {
                self.free[from as usize] -= 1;
                self.reserved[from as usize] += 1;
            }
            self.log.push(format!("demote {page} -> {to} {mode:?}{}", if reserve { " reserve" } else { "" }));
            true
        }
        fn migrate(&mut self, page: u32, to: NodeId, mode: MoveMode) -> bool {
            if !self.room(to) || self.node.get(&page).is_none_or(|&n| n == to) {
                return false;
            }
            self.relocate(page, to);
            self.log.push(format!("migrate {page} -> {to} {mode:?}"));
            true
        }
        fn migrate_reserved(&mut self, page: u32, to: NodeId) -> bool {
            if self.reserved[to as usize] == 0 {
                return false;
            }
            self.reserved[to as usize] -= 1;
            self.free[to as usize] += 1;
            self.relocate(page, to);
            self.log.push(format!("pool {page} -> {to}"));
            true
        }
        fn mark_page_accessed(&mut self, page: u32) {
            self.log.push(format!("mark_page_accessed {page}"));
        }
        fn is_file(&self, page: u32) -> bool {
            self.files.contains(&page)
        }
        fn demote_file_page(&mut self, from: NodeId, to: NodeId, mode: MoveMode) -> Option<u32> {
            let page = *self.files.iter().find(|p| self.node.get(p) == Some(&from))?;
            if self.free[to as usize] <= WMARKS[to as usize].0 {
                return None;
            }
            self.relocate(page, to);
            self.log.push(format!("demote file {page} -> {to} {mode:?}"));
            Some(page)
        }
        fn exchange(&mut self, a: u32, b: u32) -> bool {
            let (na, nb) = (self.node[&a], self.node[&b]);
            self.node.insert(a, nb);
            self.node.insert(b, na);
            self.log.push(format!("exchange {a} <-> {b}"));
            true
        }
    }

    pub const WMARKS: [(u64, u64, u64); 4] = [(4, 5, 6); 4];

    /// A hint fault by `cpu` on a page that lives on `node`.
    pub fn hint<'a>(
        topo: &'a Topology,
        cpu: u32,
        node: NodeId,
        last_cpu: Option<u32>,
        scan_seq: u64,
        free: &'a [u64],
    ) -> HintCtx<'a> {
        HintCtx {
            topo,
            cpu,
            cpu_node: topo.cpu_node[cpu as usize],
            page: PageView { id: 0, node, last_cpu, scan_time_ns: 0, active: false },
            now_ns: 0,
            write: false,
            free_pages: free,
            watermarks: &WMARKS,
            scan_seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CandidateWindow;

    #[test]
    fn a_fractional_rate_holds_on_average_over_windows() {
        // 30 MB/s at scale 1/2048 is 3.576 pages per window: windows admit 3 or 4, and 1000
        // windows admit floor(1000 x 3.576) = 3576 candidates, not the 3000 a floored limit gave.
        let rate = 30e6 / 2048.0 / 4096.0;
        let mut w = CandidateWindow::default();
        let mut per_window = vec![];
        for k in 0..1000u64 {
            per_window.push((0..10).filter(|&i| w.admit(k * 1000 + i, 1000, rate)).count());
        }
        assert_eq!(per_window.iter().sum::<usize>(), 3576);
        assert!(per_window.iter().all(|&n| n == 3 || n == 4), "{per_window:?}");
        assert_eq!(&per_window[..4], &[3, 4, 3, 4]);
    }
}
