//! autotiering_{cpm,cpmx,opm,opmx,opm_bd}: AutoTiering (Kim, Choe, Ahn, USENIX ATC'21, seed 002)
//! as its kernel patch implements it (csl-ajou/AutoTiering on Linux 5.3; policies.md 2). CPM
//! promotes or migrates a hinted page to the best node with room (local DRAM -> remote DRAM ->
//! local PMEM); OPM keeps an 8-bit access history per page, refreshed at every scan, files pages
//! of the upper tier on least-accessed-page (LAP) lists by level (popcount) and, when the target
//! is full, demotes one strictly colder page to make room; X variants exchange pages instead;
//! OPM-BD demotes in the background (kdemoted) into per-CPU reserved pools.
//! Page-cache pages are never on LAP lists (mapped file pages have page_count > 1); when the
//! target is full a file page is demoted first, from the target's file LRU lists.
//! Deviations: THP special cases (base pages untracked when THP is on) do not arise, one page size per run;
//! kdemoted and its refill run at once on a core of their own, like kswapd in tiersim; a CPM
//! fallback that lands on the page's own node (policies.md 2.5's quirk) is a no-op.

use std::collections::VecDeque;

use serde_json::json;
use tiersim_core::{NodeId, ParamKind, ParamSpec, Params, PluginInfo, Result};

use crate::autonuma::two_stage_filter;
use crate::{
    is_top_tier, next_tier_node, scan_spec, FaultDecision, HintCtx, MemOps, MoveMode, Policy, PolicyEntry, ScanSpec,
    ScanVisit, Topology,
};

/// numa_balancing_extended bits and the background_demotion sysfs knob (policies.md 2.1).
#[derive(Debug, Clone, Copy)]
struct Variant {
    opm: bool,
    exchange: bool,
    background: bool,
}

macro_rules! autotiering_params {
    ($period_max:literal, $scan_size:literal) => {
        &[
            // The authors' scan settings per variant ([ATU] run-bench.sh, policies.md 2.1).
            ParamSpec::new(
                "scan_size",
                ParamKind::Bytes,
                $scan_size,
                "present memory made PROT_NONE per scan window (scan_size_mb)",
            )
            .min(4096.0),
            ParamSpec::new(
                "scan_period_min",
                ParamKind::Duration,
                "1000ms",
                "shortest scan period (scan_period_min_ms)",
            )
            .min(1.0)
            .not_above("scan_period_max"),
            ParamSpec::new(
                "scan_period_max",
                ParamKind::Duration,
                $period_max,
                "longest scan period (scan_period_max_ms)",
            )
            .min(1.0),
            ParamSpec::new("scan_delay", ParamKind::Duration, "1000ms", "time before the first scan (scan_delay_ms)"),
            ParamSpec::new(
                "skip_lower_tier",
                ParamKind::Bool,
                "true",
                "bottom-tier pages are not put on LAP lists (page_balancing/skip_lower_tier)",
            ),
            ParamSpec::new(
                "batch_demotion",
                ParamKind::Bool,
                "true",
                "kdemoted refills the pool in batches ([ATU] sets 1 for 4 KiB pages)",
            ),
            ParamSpec::new(
                "pool_max",
                ParamKind::Int,
                "16",
                "per-CPU reserved frames kdemoted fills to (MAX_NR_FREE_PAGES; 4 for 2 MiB pages)",
            )
            .min(1.0),
            ParamSpec::new(
                "pool_min",
                ParamKind::Int,
                "4",
                "promote from the pool only while it holds more (MIN_NR_FREE_PAGES; 3 for 2 MiB)",
            )
            .min(0.0)
            .not_above("pool_max"),
            ParamSpec::new(
                "exchange_scan",
                ParamKind::Int,
                "16",
                "deferred-list entries scanned for an exchange partner (nr_to_scan)",
            )
            .min(0.0),
        ]
    };
}

const OPM_OFF: &[ParamSpec] = autotiering_params!("60000ms", "256MiB");
const OPM_ON: &[ParamSpec] = autotiering_params!("1000ms", "2GiB");

const SOURCE: &str = "Kim et al., AutoTiering, USENIX ATC'21; kernel patch csl-ajou/AutoTiering (policies.md 2)";

macro_rules! entry {
    ($name:literal, $summary:literal, $params:expr, $build:ident) => {
        PolicyEntry {
            info: PluginInfo { name: $name, summary: $summary, source: SOURCE, params: $params },
            build: $build,
        }
    };
}

pub(crate) const CPM: PolicyEntry = entry!(
    "autotiering_cpm",
    "AutoTiering CPM: promote/migrate to the best node with room (local DRAM, remote DRAM, local PMEM)",
    OPM_OFF,
    build_cpm
);
pub(crate) const CPMX: PolicyEntry = entry!(
    "autotiering_cpmx",
    "AutoTiering CPMX: CPM + same-tier page exchange via deferred lists",
    OPM_OFF,
    build_cpmx
);
pub(crate) const OPM: PolicyEntry = entry!(
    "autotiering_opm",
    "AutoTiering OPM: 8-bit access history, LAP lists, on-demand demotion of a colder page",
    OPM_ON,
    build_opm
);
pub(crate) const OPMX: PolicyEntry = entry!(
    "autotiering_opmx",
    "AutoTiering OPMX: OPM with exchange instead of demotion + promotion",
    OPM_ON,
    build_opmx
);
pub(crate) const OPM_BD: PolicyEntry = entry!(
    "autotiering_opm_bd",
    "AutoTiering OPM-BD: background demotion by kdemoted into per-CPU reserved pools",
    OPM_ON,
    build_opm_bd
);

fn build_cpm(p: &Params, t: &Topology) -> Result<Box<dyn Policy>> {
    AutoTiering::build(p, t, Variant { opm: false, exchange: false, background: false })
}
fn build_cpmx(p: &Params, t: &Topology) -> Result<Box<dyn Policy>> {
    AutoTiering::build(p, t, Variant { opm: false, exchange: true, background: false })
}
fn build_opm(p: &Params, t: &Topology) -> Result<Box<dyn Policy>> {
    AutoTiering::build(p, t, Variant { opm: true, exchange: false, background: false })
}
fn build_opmx(p: &Params, t: &Topology) -> Result<Box<dyn Policy>> {
    AutoTiering::build(p, t, Variant { opm: true, exchange: true, background: false })
}
fn build_opm_bd(p: &Params, t: &Topology) -> Result<Box<dyn Policy>> {
    AutoTiering::build(p, t, Variant { opm: true, exchange: false, background: true })
}

const NONE16: u16 = u16::MAX;
const NONE32: u32 = u32::MAX;
const UNLISTED: u8 = u8::MAX;
const LEVELS: usize = 9;

/// The kernel's page_info (list links, access bitmap) plus the node the policy last saw the page
/// on; 16 bytes against the kernel's 32 (no pfn or list_head pointers).
#[derive(Clone, Copy)]
struct PageInfo {
    prev: u32,
    next: u32,
    node: u16,
    /// LAP level list the page is on, UNLISTED if none.
    lap: u8,
    bitmap: u8,
    deferred: bool,
}

const EMPTY: PageInfo =
    PageInfo { prev: NONE32, next: NONE32, node: NONE16, lap: UNLISTED, bitmap: 0, deferred: false };

#[derive(Clone, Copy, Default)]
struct List {
    head: u32,
    tail: u32,
    len: u64,
}

#[derive(Default)]
struct Counters {
    low_freq_fail: u64,
    ondemand_demotions: u64,
    kdemoted_demotions: u64,
    /// Page-cache pages demoted, on demand or by kdemoted.
    file_demotions: u64,
    kdemoted_wakeups: u64,
    pool_promotions: u64,
    exchanges_same_tier: u64,
    exchanges_cross_tier: u64,
    deferred: u64,
    cpm_fallbacks: u64,
}

struct AutoTiering {
    v: Variant,
    scan: ScanSpec,
    skip_lower_tier: bool,
    batch: bool,
    pool_max: u64,
    pool_min: u64,
    exchange_scan: usize,
    /// Per node: top tier, bottom tier (no demotion path), socket, tier.
    top: Vec<bool>,
    bottom: Vec<bool>,
    cpu_node: Vec<NodeId>,
    promotion_path: Vec<Option<NodeId>>,
    demotion_path: Vec<Option<NodeId>>,
    /// Per tier: its nodes ordered by socket (the migration_path ring).
    rings: Vec<Vec<NodeId>>,
    tier: Vec<u8>,
    pages: Vec<PageInfo>,
    /// Per node: 9 LAP lists.
    laps: Vec<[List; LEVELS]>,
    /// Per node: pages on the node by level, for the time series (fig. 11).
    hist: Vec<[u64; LEVELS]>,
    deferred: Vec<VecDeque<u32>>,
    /// Per CPU: reserved frames in its promotion pool (on the CPU's node).
    pool: Vec<u64>,
    c: Counters,
}

impl AutoTiering {
    fn build(p: &Params, topo: &Topology, v: Variant) -> Result<Box<dyn Policy>> {
        let n = topo.nodes.len();
        let top: Vec<bool> = (0..n).map(|i| is_top_tier(i as NodeId, topo)).collect();
        let tier: Vec<u8> = topo.nodes.iter().map(|x| x.tier).collect();
        let max_tier = tier.iter().copied().max().unwrap_or(0);
        let mut rings = vec![Vec::new(); max_tier as usize + 1];
        let mut by_socket: Vec<&crate::NodeInfo> = topo.nodes.iter().collect();
        by_socket.sort_by_key(|x| (x.socket, x.id));
        for x in by_socket {
            rings[x.tier as usize].push(x.id);
        }
        // AutoTiering's paths (policies.md 2.2): the same socket's node one tier up / down.
        let up = |i: usize| -> Option<NodeId> {
            let t = tier[i];
            (t > 0 && !top[i]).then(|| (0..t).rev().find_map(|u| topo.node_on(topo.nodes[i].socket, u))).flatten()
        };
        let down = |i: usize| -> Option<NodeId> {
            let s = topo.nodes[i].socket;
            (tier[i] < max_tier)
                .then(|| {
                    ((tier[i] + 1)..=max_tier)
                        .find_map(|d| topo.node_on(s, d))
                        .or_else(|| next_tier_node(i as NodeId, topo))
                })
                .flatten()
        };
        let page_huge = topo.page_size >= 2 << 20;
        let (pool_max, pool_min) = if page_huge && p.uint("pool_max") == 16 && p.uint("pool_min") == 4 {
            (4, 3)
        } else {
            (p.uint("pool_max"), p.uint("pool_min"))
        };
        let bottom = (0..n).map(|i| down(i).is_none()).collect();
        let promotion_path = (0..n).map(up).collect();
        let demotion_path = (0..n).map(down).collect();
        Ok(Box::new(AutoTiering {
            v,
            scan: scan_spec(p, true, topo),
            skip_lower_tier: p.bool("skip_lower_tier"),
            batch: p.bool("batch_demotion"),
            pool_max,
            pool_min,
            exchange_scan: p.uint("exchange_scan") as usize,
            bottom,
            top,
            cpu_node: topo.cpu_node.clone(),
            promotion_path,
            demotion_path,
            rings,
            tier,
            pages: Vec::new(),
            laps: vec![[List { head: NONE32, tail: NONE32, len: 0 }; LEVELS]; n],
            hist: vec![[0; LEVELS]; n],
            deferred: vec![VecDeque::new(); n],
            pool: vec![0; topo.cpu_node.len()],
            c: Counters::default(),
        }))
    }

    fn info(&mut self, page: u32) -> &mut PageInfo {
        let i = page as usize;
        if i >= self.pages.len() {
            self.pages.resize(i + 1, EMPTY);
        }
        &mut self.pages[i]
    }

    fn level(&self, page: u32) -> usize {
        self.pages.get(page as usize).map_or(8, |p| if p.node == NONE16 { 8 } else { p.bitmap.count_ones() as usize })
    }

    fn unlink(&mut self, page: u32) {
        let PageInfo { prev, next, node, lap, .. } = *self.info(page);
        if lap == UNLISTED {
            return;
        }
        let list = &mut self.laps[node as usize][lap as usize];
        list.len -= 1;
        if prev != NONE32 {
            self.pages[prev as usize].next = next;
        } else {
            list.head = next;
        }
        if next != NONE32 {
            self.pages[next as usize].prev = prev;
        } else {
            list.tail = prev;
        }
        let p = &mut self.pages[page as usize];
        p.lap = UNLISTED;
        p.prev = NONE32;
        p.next = NONE32;
    }

    /// Put a page on its node's list of `level`: at the tail if touched in the last interval,
    /// at the head (first victim) if not (policies.md 2.4).
    fn link(&mut self, page: u32, level: usize, at_tail: bool) {
        let node = self.info(page).node as usize;
        let list = self.laps[node][level];
        let (prev, next) = if at_tail { (list.tail, NONE32) } else { (NONE32, list.head) };
        {
            let p = &mut self.pages[page as usize];
            p.lap = level as u8;
            p.prev = prev;
            p.next = next;
        }
        if prev != NONE32 {
            self.pages[prev as usize].next = page;
        }
        if next != NONE32 {
            self.pages[next as usize].prev = page;
        }
        let list = &mut self.laps[node][level];
        if at_tail {
            list.tail = page;
            if list.head == NONE32 {
                list.head = page;
            }
        } else {
            list.head = page;
            if list.tail == NONE32 {
                list.tail = page;
            }
        }
        list.len += 1;
    }

    /// The policy's own record of a page leaving `from` for `to` (or memory, with None).
    fn relocate(&mut self, page: u32, to: Option<NodeId>) {
        let lv = self.level(page);
        self.unlink(page);
        let p = self.info(page);
        let from = p.node;
        p.deferred = false;
        p.node = to.unwrap_or(NONE16);
        if from != NONE16 {
            self.hist[from as usize][lv] -= 1;
        }
        if let Some(t) = to {
            self.hist[t as usize][lv] += 1;
        }
    }

    /// Lowest non-empty LAP level on `node`, LEVELS if all are empty.
    fn lowest_level(&self, node: NodeId) -> usize {
        self.laps[node as usize].iter().position(|l| l.len > 0).unwrap_or(LEVELS)
    }

    /// The first usable page from the head of `node`'s lists at levels `levels`: on the node,
    /// not deferred. Stale entries are unlinked on the way, as the kernel skips pages that left
    /// the LRU.
    fn take_victim(&mut self, node: NodeId, levels: std::ops::Range<usize>, os: &dyn MemOps) -> Option<u32> {
        for lv in levels {
            let mut q = self.laps[node as usize][lv].head;
            while q != NONE32 {
                let next = self.pages[q as usize].next;
                if os.page_node(q) == Some(node) && !self.pages[q as usize].deferred && !os.is_file(q) {
                    return Some(q);
                }
                self.unlink(q);
                q = next;
            }
        }
        None
    }

    /// `ring` (one tier's nodes by socket) walked from `start`, inclusive.
    fn ring_from(&self, tier: u8, start: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        let ring = &self.rings[tier as usize];
        let at = ring.iter().position(|&n| n == start).unwrap_or(0);
        ring[at..].iter().chain(&ring[..at]).copied()
    }

    /// find_best_migration_node (policies.md 2.5): the target's tier from the target, then for
    /// a remote promotion the page's own tier from the node after the page's.
    fn best_migration_node(&self, page_node: NodeId, target: NodeId, os: &dyn MemOps) -> Option<NodeId> {
        if let Some(n) = self.ring_from(self.tier[target as usize], target).find(|&n| os.room(n)) {
            return Some(n);
        }
        let pt = self.tier[page_node as usize];
        if pt > self.tier[target as usize] && self.promotion_path[page_node as usize] != Some(target) {
            let ring = &self.rings[pt as usize];
            let at = ring.iter().position(|&n| n == page_node).unwrap_or(0);
            let start = ring[(at + 1) % ring.len()];
            return self.ring_from(pt, start).find(|&n| os.room(n));
        }
        None
    }

    /// find_best_demotion_node (policies.md 2.6): from the demotion path of the node of the
    /// victim's last faulting CPU, around that lower tier to the first node with room.
    fn best_demotion_node(&self, victim_node: NodeId, last_cpu: Option<u32>, os: &dyn MemOps) -> Option<NodeId> {
        let from = last_cpu.map_or(victim_node, |c| self.cpu_node[c as usize]);
        if !self.top[victim_node as usize] || !self.top[from as usize] {
            return None;
        }
        let start = self.demotion_path[from as usize]?;
        self.ring_from(self.tier[start as usize], start).find(|&n| os.room(n))
    }

    /// try_demote_from_busy_node: one anonymous LAP victim strictly colder than the faulting
    /// page, demoted (OPM) or exchanged with it (OPMX).
    fn demote_for(&mut self, page: u32, page_node: NodeId, target: NodeId, os: &mut dyn MemOps) -> bool {
        // Page cache first; the kernel then reports failure, so this fault goes to the CPM
        // fallback and the page is promoted on a later fault, once there is room (2.6).
        if self.demote_file(target, MoveMode::Sync, os) {
            return false;
        }
        let fault_lv = self.level(page);
        let bottom = self.lowest_level(target);
        if fault_lv <= bottom {
            self.c.low_freq_fail += 1;
            return false;
        }
        let Some(victim) = self.take_victim(target, bottom..fault_lv, os) else { return false };
        if self.v.exchange {
            if !os.exchange(page, victim) {
                return false;
            }
            self.relocate(page, Some(target));
            self.relocate(victim, Some(page_node));
            self.c.exchanges_cross_tier += 1;
            return true;
        }
        let Some(dest) = self.best_demotion_node(target, os.last_cpu(victim), os) else { return false };
        if !os.demote(victim, dest, MoveMode::Sync, false) {
            return false;
        }
        self.relocate(victim, Some(dest));
        self.c.ondemand_demotions += 1;
        true
    }

    /// wakeup_kdemoted (policies.md 2.7): true if the faulting page may take a pool frame now.
    /// Otherwise kdemoted (run at once, off the faulting CPU) refills the pool for later faults.
    fn wakeup_kdemoted(&mut self, cpu: u32, page: u32, os: &mut dyn MemOps) -> bool {
        let node = self.cpu_node[cpu as usize];
        if self.level(page) <= self.lowest_level(node) {
            self.c.low_freq_fail += 1;
            return false;
        }
        if self.pool[cpu as usize] > self.pool_min {
            return true;
        }
        self.c.kdemoted_wakeups += 1;
        while self.pool[cpu as usize] < self.pool_max {
            let want = if self.batch { self.pool_max - self.pool[cpu as usize] } else { 1 };
            if self.demotion_path[node as usize].is_none() || self.kdemoted_round(node, cpu, want, os) == 0 {
                break;
            }
        }
        false
    }

    /// try_demote_page_cache: one file page of `node` to its demotion target (a file page has
    /// no last CPU: the path starts at its own node).
    fn demote_file(&mut self, node: NodeId, mode: MoveMode, os: &mut dyn MemOps) -> bool {
        let Some(dest) = self.best_demotion_node(node, None, os) else { return false };
        let Some(moved) = os.demote_file_page(node, dest, mode) else { return false };
        self.relocate(moved, Some(dest));
        self.c.file_demotions += 1;
        true
    }

    /// __kdemoted: one page-cache page if there is one (its frame goes back to the allocator,
    /// not to the pool, so kdemoted loops until the page cache is gone, policies.md 2.7), else
    /// up to `want` anonymous pages of levels 0..7 (never level 8) demoted, each freed frame
    /// kept for the CPU's pool. Returns how many moved.
    fn kdemoted_round(&mut self, node: NodeId, cpu: u32, want: u64, os: &mut dyn MemOps) -> u64 {
        if self.demote_file(node, MoveMode::Background, os) {
            return 1;
        }
        let mut moved = 0;
        while moved < want {
            let Some(victim) = self.take_victim(node, 0..LEVELS - 1, os) else { break };
            let Some(dest) = self.best_demotion_node(node, os.last_cpu(victim), os) else { break };
            if !os.demote(victim, dest, MoveMode::Background, true) {
                break;
            }
            self.relocate(victim, Some(dest));
            self.pool[cpu as usize] += 1;
            self.c.kdemoted_demotions += 1;
            moved += 1;
        }
        moved
    }

    /// try_exchange_page (policies.md 2.8): a page on `target`'s deferred list that wants to
    /// move to `page_node`, among the first exchange_scan + 1 entries.
    fn exchange_deferred(&mut self, page: u32, page_node: NodeId, target: NodeId, os: &mut dyn MemOps) -> bool {
        for _ in 0..=self.exchange_scan {
            let Some(q) = self.deferred[target as usize].pop_front() else { return false };
            let info = self.pages[q as usize];
            if !info.deferred || info.node != target || os.page_node(q) != Some(target) {
                continue;
            }
            if os.last_cpu(q).map(|c| self.cpu_node[c as usize]) == Some(page_node) {
                if !os.exchange(page, q) {
                    self.deferred[target as usize].push_back(q);
                    return false;
                }
                self.relocate(page, Some(target));
                self.relocate(q, Some(page_node));
                self.c.exchanges_same_tier += 1;
                return true;
            }
            self.deferred[target as usize].push_back(q);
        }
        false
    }
}

impl Policy for AutoTiering {
    fn scanner(&self) -> Option<ScanSpec> {
        Some(self.scan)
    }

    fn wants_scan_visits(&self) -> bool {
        true
    }

    /// The history shifts at every scan for every variant (CPM and CPMX do not use it, but the
    /// fig. 11 histogram compares them); only OPM variants file pages on LAP lists.
    fn on_scan(&mut self, v: &ScanVisit) {
        let page = v.page;
        if self.info(page).node != v.node {
            self.relocate(page, Some(v.node));
        }
        let prev = self.level(page);
        let p = &mut self.pages[page as usize];
        p.bitmap = (p.bitmap << 1) | v.accessed as u8;
        let lv = p.bitmap.count_ones() as usize;
        let node = v.node as usize;
        self.hist[node][prev] -= 1;
        self.hist[node][lv] += 1;
        if !self.v.opm || p.deferred || (self.skip_lower_tier && self.bottom[node]) {
            return;
        }
        if p.lap == UNLISTED || p.lap as usize != lv {
            self.unlink(page);
            self.link(page, lv, v.accessed);
        }
    }

    fn on_hint_fault(&mut self, ctx: &HintCtx, os: &mut dyn MemOps) -> FaultDecision {
        let page = ctx.page.id;
        let page_node = ctx.page.node;
        let target = ctx.cpu_node;
        if self.info(page).node != page_node {
            self.relocate(page, Some(page_node));
        }
        if page_node == target {
            self.pages[page as usize].deferred = false;
            return FaultDecision::Stay;
        }
        if !two_stage_filter(ctx, target) {
            return FaultDecision::Stay;
        }
        if os.room(target) {
            return FaultDecision::Migrate(target);
        }
        let same_tier = self.tier[page_node as usize] == self.tier[target as usize];
        if self.v.exchange && same_tier {
            if !self.exchange_deferred(page, page_node, target, os) && !self.pages[page as usize].deferred {
                self.unlink(page);
                self.pages[page as usize].deferred = true;
                self.deferred[page_node as usize].push_back(page);
                self.c.deferred += 1;
            }
            return FaultDecision::Stay;
        }
        if self.v.opm {
            if self.v.background {
                if self.wakeup_kdemoted(ctx.cpu, page, os) && os.migrate_reserved(page, target) {
                    self.pool[ctx.cpu as usize] -= 1;
                    self.relocate(page, Some(target));
                    self.c.pool_promotions += 1;
                    return FaultDecision::Stay;
                }
            } else if self.demote_for(page, page_node, target, os) {
                if self.v.exchange {
                    return FaultDecision::Stay;
                }
                if os.room(target) {
                    return FaultDecision::Migrate(target);
                }
            }
        }
        match self.best_migration_node(page_node, target, os) {
            Some(alt) if alt == page_node => FaultDecision::Stay,
            Some(alt) if alt != target => {
                self.c.cpm_fallbacks += 1;
                FaultDecision::Migrate(alt)
            }
            // Nothing has room: the engine's attempt fails and counts it.
            _ => FaultDecision::Migrate(target),
        }
    }

    fn on_page_placed(&mut self, page: u32, node: NodeId) {
        // access_bitmap starts at 0xFF, level 8, on every allocation (policies.md 2.3).
        self.relocate(page, None);
        self.pages[page as usize].bitmap = 0xFF;
        self.relocate(page, Some(node));
    }

    fn on_page_evicted(&mut self, page: u32, _node: NodeId) {
        self.relocate(page, None);
    }

    fn on_page_moved(&mut self, page: u32, _from: NodeId, to: NodeId) {
        let p = self.info(page);
        if p.node != to || p.lap != UNLISTED {
            self.relocate(page, Some(to));
        }
    }

    fn hotness(&self) -> Option<&[[u64; 9]]> {
        Some(&self.hist)
    }

    fn stats(&self) -> serde_json::Value {
        let c = &self.c;
        json!({
            "low_frequency_refusals": c.low_freq_fail,
            "ondemand_demotions": c.ondemand_demotions,
            "kdemoted_demotions": c.kdemoted_demotions,
            "file_demotions": c.file_demotions,
            "kdemoted_wakeups": c.kdemoted_wakeups,
            "pool_promotions": c.pool_promotions,
            "exchanges_same_tier": c.exchanges_same_tier,
            "exchanges_cross_tier": c.exchanges_cross_tier,
            "deferred": c.deferred,
            "cpm_fallbacks": c.cpm_fallbacks,
            "metadata_bytes_per_page": std::mem::size_of::<PageInfo>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{hint, two_socket, FakeOs};
    use FaultDecision::*;

    fn make(name: &str, params: &str) -> Box<dyn Policy> {
        let t: toml::Table = toml::from_str(params).unwrap();
        crate::build(name, Some(&t), &two_socket()).unwrap().0
    }

    /// Pages placed on nodes in `os` and in the policy; `cold` pages scanned eight times
    /// untouched (level 0, LAP[0] of their node).
    fn setup(p: &mut Box<dyn Policy>, os: &mut FakeOs, pages: &[(u32, NodeId)], cold: &[u32]) {
        for &(page, node) in pages {
            os.node.insert(page, node);
            p.on_page_placed(page, node);
        }
        for _ in 0..8 {
            for &page in cold {
                p.on_scan(&ScanVisit { page, node: os.node[&page], accessed: false, now_ns: 0 });
            }
        }
    }

    fn fault(p: &mut Box<dyn Policy>, os: &mut FakeOs, cpu: u32, page: u32) -> FaultDecision {
        let topo = two_socket();
        let free = os.free.clone();
        let mut ctx = hint(&topo, cpu, os.node[&page], None, 9, &free);
        ctx.page.id = page;
        let d = p.on_hint_fault(&ctx, os);
        os.last_cpu.insert(page, cpu);
        d
    }

    #[test]
    fn cpm_falls_back_local_dram_then_remote_dram_then_local_pmem() {
        let mut p = make("autotiering_cpm", "");
        // Room means free > 7. CPU 0 is on node 0; page 1 on remote PMEM (3), page 2 on local PMEM (2).
        let mut os = FakeOs::new(&[5, 100, 100, 100]);
        setup(&mut p, &mut os, &[(1, 3), (2, 2)], &[]);
        assert_eq!(fault(&mut p, &mut os, 0, 1), Migrate(1), "local DRAM full: remote DRAM");
        os.free[1] = 7;
        assert_eq!(fault(&mut p, &mut os, 0, 1), Migrate(2), "both DRAM full: the faulting CPU's PMEM");
        // A local-PMEM page has no PMEM fallback: the engine's attempt on node 0 fails.
        assert_eq!(fault(&mut p, &mut os, 0, 2), Migrate(0));
        os.free[0] = 8;
        assert_eq!(fault(&mut p, &mut os, 0, 2), Migrate(0), "room: plain promotion");
        assert!(os.log.is_empty(), "CPM moves nothing itself: {:?}", os.log);
    }

    #[test]
    fn opm_demotes_the_lap0_victim_only_when_it_is_colder_than_the_faulting_page() {
        let mut p = make("autotiering_opm", "");
        let mut os = FakeOs::new(&[7, 7, 100, 100]);
        // Page 10 on DRAM 0 went untouched for eight scans (level 0); page 20 on PMEM 0 is new
        // (level 8). CPU 0 faults on page 20: DRAM 0 has no room (7 free, not > 7).
        setup(&mut p, &mut os, &[(10, 0), (20, 2), (30, 2)], &[10, 30]);
        assert_eq!(p.hotness().unwrap()[0][0], 1);
        assert_eq!(p.hotness().unwrap()[2], [1, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(fault(&mut p, &mut os, 0, 20), Migrate(0));
        assert_eq!(os.log, vec!["demote 10 -> 2 Sync"]);
        assert_eq!(os.free[0], 8, "the demotion made room for the promotion");
        // Page 30 is as cold as anything on DRAM 0 (nothing is listed now): no victim, and
        // with both DRAM nodes full the CPM fallback has nowhere to go either.
        os.free[0] = 7;
        assert_eq!(fault(&mut p, &mut os, 0, 30), Migrate(0));
        assert_eq!(os.log.len(), 1);
        assert_eq!(p.stats()["low_frequency_refusals"], 1);
        // A victim must be strictly colder: a level-0 page does not displace a level-0 page.
        let mut p = make("autotiering_opm", "");
        let mut os = FakeOs::new(&[7, 7, 100, 100]);
        setup(&mut p, &mut os, &[(10, 0), (30, 2)], &[10, 30]);
        assert_eq!(fault(&mut p, &mut os, 0, 30), Migrate(0));
        assert!(os.log.is_empty());
    }

    #[test]
    fn page_cache_goes_first_and_never_as_an_anon_victim() {
        // Page 40 on DRAM 0 is a page-cache page, cold like anon page 10. OPM demotes it first
        // and reports failure; CPM's fallback then finds room on local DRAM, which the file
        // demotion made.
        let mut p = make("autotiering_opm", "");
        let mut os = FakeOs::new(&[7, 7, 100, 100]);
        os.files.push(40);
        setup(&mut p, &mut os, &[(10, 0), (40, 0), (20, 2)], &[10, 40]);
        assert_eq!(fault(&mut p, &mut os, 0, 20), Migrate(0));
        assert_eq!(p.stats()["cpm_fallbacks"], 0, "the fallback's first choice is the target itself");
        assert_eq!(os.log, vec!["demote file 40 -> 2 Sync"]);
        // With no page cache left, the anon LAP victim: page 10, never page 40 (now on PMEM).
        os.free[0] = 7;
        assert_eq!(fault(&mut p, &mut os, 0, 20), Migrate(0));
        assert_eq!(os.log[1], "demote 10 -> 2 Sync");
        assert_eq!(p.stats()["file_demotions"], 1);
        // kdemoted demotes every page-cache page before touching anon pages, and those do not
        // refill the pool: 2 file pages, then anon pages from the head of LAP[0] (11, the last to
        // reach level 0, then 10) for the pool.
        let mut p = make("autotiering_opm_bd", "pool_max = 2\npool_min = 0");
        let mut os = FakeOs::new(&[7, 7, 100, 100]);
        os.files.extend([40, 41]);
        setup(&mut p, &mut os, &[(10, 0), (11, 0), (40, 0), (41, 0), (20, 2)], &[10, 11, 40, 41]);
        fault(&mut p, &mut os, 0, 20);
        assert_eq!(
            os.log[..3],
            ["demote file 40 -> 2 Background", "demote file 41 -> 2 Background", "demote 11 -> 2 Background reserve"]
        );
        assert_eq!(p.stats()["file_demotions"], 2);
    }

    #[test]
    fn opmx_exchanges_the_victim_with_the_faulting_page() {
        let mut p = make("autotiering_opmx", "");
        let mut os = FakeOs::new(&[7, 7, 100, 100]);
        setup(&mut p, &mut os, &[(10, 0), (20, 2)], &[10]);
        assert_eq!(fault(&mut p, &mut os, 0, 20), Stay);
        assert_eq!(os.log, vec!["exchange 20 <-> 10"]);
        assert_eq!((os.node[&20], os.node[&10]), (0, 2));
        // Level 0 now counts on PMEM 0, level 8 on DRAM 0.
        assert_eq!(p.hotness().unwrap()[0], [0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(p.hotness().unwrap()[2], [1, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn opm_bd_refills_the_pool_in_the_background_and_promotes_from_it() {
        let mut p = make("autotiering_opm_bd", "pool_max = 3\npool_min = 1");
        let mut os = FakeOs::new(&[7, 7, 100, 100]);
        let cold: Vec<u32> = (10..15).collect();
        let mut pages: Vec<(u32, NodeId)> = cold.iter().map(|&c| (c, 0)).collect();
        pages.push((20, 2));
        setup(&mut p, &mut os, &pages, &cold);
        // First fault: the pool is empty, kdemoted refills it to 3 in the background, taking
        // LAP[0] from its head, where untouched pages are inserted (the last scanned first),
        // and this fault falls back to CPM.
        assert_eq!(fault(&mut p, &mut os, 0, 20), Migrate(0));
        assert_eq!(
            os.log,
            vec![
                "demote 14 -> 2 Background reserve",
                "demote 13 -> 2 Background reserve",
                "demote 12 -> 2 Background reserve"
            ]
        );
        assert_eq!(os.reserved[0], 3);
        // Second fault: the pool holds 3 > pool_min: the page takes a reserved frame.
        assert_eq!(fault(&mut p, &mut os, 0, 20), Stay);
        assert_eq!(os.log[3], "pool 20 -> 0");
        assert_eq!(p.stats()["pool_promotions"], 1);
        assert_eq!(p.stats()["kdemoted_demotions"], 3);
    }

    #[test]
    fn cpmx_exchanges_two_pages_that_want_each_others_dram() {
        let mut p = make("autotiering_cpmx", "");
        let mut os = FakeOs::new(&[7, 7, 100, 100]);
        setup(&mut p, &mut os, &[(30, 1), (40, 0)], &[]);
        // CPU 0 wants page 30 (on DRAM 1) but DRAM 0 is full: page 30 is deferred.
        assert_eq!(fault(&mut p, &mut os, 0, 30), Stay);
        assert!(os.log.is_empty());
        // CPU 4 (node 1) wants page 40 from DRAM 0: page 30, last faulted from node 0, pairs.
        assert_eq!(fault(&mut p, &mut os, 4, 40), Stay);
        assert_eq!(os.log, vec!["exchange 40 <-> 30"]);
        assert_eq!((os.node[&30], os.node[&40]), (0, 1));
        assert_eq!(p.stats()["exchanges_same_tier"], 1);
    }

    #[test]
    fn variants_use_the_authors_scan_settings() {
        let topo = two_socket();
        let cpm = make("autotiering_cpm", "").scanner().unwrap();
        let opm = make("autotiering_opm_bd", "").scanner().unwrap();
        assert_eq!((cpm.scan_size, cpm.period_max_ns), (256 << 20, 60_000_000_000));
        assert_eq!((opm.scan_size, opm.period_max_ns), (2 << 30, 1_000_000_000));
        assert!(opm.top_tier, "AutoTiering scans every tier");
        let _ = topo;
    }
}
