//! The event loop: CPUs replay their accesses in global issue-time order; each access is
//! translated through the OS model to a node, served by the node's devices, and the CPU's clock
//! advances by its compute gap plus latency / mlp (closed loop) or follows the trace times (open
//! loop). The OS model follows Linux 5.x (policies.md 1.1): first touch along the zonelist above
//! the low watermark; when every node fails, kswapd is woken to reclaim to the high watermark and
//! allocation retries against min; then direct reclaim. Reclaim takes victims from per-node
//! active/inactive LRU lists (`lru.rs`) and demotes them to the policy's target or writes them to
//! swap.

mod lru;
mod policy_epoch;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use hdrhistogram::Histogram;
use rustc_hash::FxHashMap;
use serde_json::json;
use tiersim_core::{Access, Error, NodeId, Ns, Op, Result};
use tiersim_devices::{Device, DeviceRequest};
use tiersim_policies::{FaultDecision, HintCtx, MemOps, MoveMode, NodeInfo, PageView, PlaceCtx, Policy, ScanSpec, ScanVisit, Topology};
use tiersim_trace::{AccessSource, TimeUnit};

use crate::node::{Counters, Node};
use crate::pagetable::{PageEntry, PageTable, ACTIVE, CHUNK, CHUNK_SHIFT, DIRTY, DROPPED, FILE, LOCKED, NIL, PROT_NONE, REFERENCED, SWAPPED, UNTOUCHED};
use lru::LruStats;
use crate::platform::Platform;

/// Accesses read ahead of the slowest CPU at most; past this a CPU whose queue ran dry no longer
/// holds the others back (its next access may then be issued slightly out of time order).
const MAX_BUFFERED: usize = 1 << 20;
const BATCH: usize = 1 << 14;

struct Cpu {
    /// Picoseconds, so sub-ns compute gaps and stalls accumulate exactly.
    clock_ps: u64,
    next_issue_ps: u64,
    node: NodeId,
    socket: u16,
    started: bool,
    prev_trace_time: u64,
    last_vpn: u64,
    last_page: u32,
    queue: VecDeque<Access>,
}

struct Swap {
    dev: Box<dyn Device>,
    capacity: u64,
    used: u64,
    free_slots: Vec<u32>,
    next_slot: u32,
    swap_ins: u64,
    swap_outs: u64,
    epoch_ins: u64,
    epoch_outs: u64,
    /// File pages dropped by reclaim, the dirty ones written back first, and read back later.
    file_drops: u64,
    file_writebacks: u64,
    file_refaults: u64,
}

/// Tiering activity: migrations and the NUMA-balancing work behind them.
#[derive(Debug, Default, Clone, Copy)]
struct TieringStats {
    promotions: u64,
    demotions: u64,
    migrations: u64,
    migrated_bytes: u64,
    hint_faults: u64,
    failed_promotions: u64,
    failed_migrations: u64,
    exchanges: u64,
    exchanged_bytes: u64,
    ping_pong: u64,
    scans: u64,
    scan_time_ps: u64,
    hint_fault_time_ps: u64,
    migration_time_ps: u64,
    /// Host hints sent to devices by the scanner (`os.device_hints`).
    device_hints: u64,
}

/// Options that do not change results.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimOptions {
    /// Verify the OS model's invariants every this many accesses (0 = never); for tests.
    pub check_every: u64,
}

/// Per-epoch time series in long format: one row per (epoch, node), plus a "swap" row.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Timeseries {
    pub epoch: Vec<u64>,
    pub t_start_ns: Vec<u64>,
    pub t_end_ns: Vec<u64>,
    pub node: Vec<String>,
    pub pages: Vec<u64>,
    pub accesses: Vec<u64>,
    pub reads: Vec<u64>,
    pub writes: Vec<u64>,
    pub bytes: Vec<u64>,
    pub bandwidth_gbs: Vec<f64>,
    /// Pages migrated into / out of the node during the epoch.
    pub migrated_in: Vec<u64>,
    pub migrated_out: Vec<u64>,
    /// Pages of the node at each hotness level 0..=8 at the epoch's end (AutoTiering's LAP
    /// levels, seed 002 fig. 11), when the policy keeps an access history; zero for swap rows.
    pub hotness: Option<Vec<[u64; 9]>>,
}

pub struct SimResult {
    pub summary: serde_json::Value,
    pub timeseries: Timeseries,
}

struct Engine {
    topo: Topology,
    nodes: Vec<Node>,
    swap: Option<Swap>,
    policy: Box<dyn Policy>,
    /// The policy is out of `policy` while it runs a hook that calls back into the OS model;
    /// page events for it queue up meanwhile and are delivered when it returns.
    parked: bool,
    page_events: Vec<PageEvent>,
    scan_visits: bool,
    /// `os.device_hints`, and per node whether its devices take the hints.
    device_hints: DeviceHints,
    hint_nodes: Vec<bool>,
    pt: PageTable,
    cpus: Vec<Cpu>,
    page_shift: u32,
    page_size: u64,
    penalty: Vec<Ns>,
    /// mlp x 1000, so the stall latency / mlp is integer arithmetic.
    mlp_milli: u64,
    ps_per_instr: f64,
    open_loop: bool,
    time_unit: TimeUnit,
    fault_ps: u64,
    swap_fault_ps: u64,
    reclaim_batch: u64,
    free_scratch: Vec<u64>,
    // measurement
    measuring: bool,
    measure_start_ns: Ns,
    hist: Histogram<u64>,
    first_touch_faults: u64,
    fault_time_ps: u64,
    max_completion_ns: Ns,
    last_issue_ns: Ns,
    time_went_back: u64,
    epoch_ns: Ns,
    epoch_idx: u64,
    // NUMA balancing
    scan: Option<ScanSpec>,
    scan_next_ns: Ns,
    scan_period_ns: Ns,
    scan_cursor: u64,
    scan_seq: u64,
    pass_faults: u64,
    pass_failed: bool,
    top_tier: Vec<bool>,
    demote_to: Vec<Option<usize>>,
    /// Per node: free pages kswapd keeps proactively (TPP's demotion watermark).
    reclaim_goal: Vec<Option<u64>>,
    protect_demoted: bool,
    wmarks: Vec<(u64, u64, u64)>,
    hint_fault_ps: u64,
    migrate_ps: u64,
    tlb_shootdown_ps: u64,
    pte_scan_ps: u64,
    ping_pong_ns: u64,
    tiering: TieringStats,
    lru_stats: LruStats,
    /// vm.swappiness: the anon share of reclaim scanning when both kinds can go.
    swappiness: u64,
    /// New anonymous pages start on the active list (Linux before 5.9) or the inactive one.
    new_anon_active: bool,
    ts: Timeseries,
    processed: u64,
    /// A policy's epochs of known future (oracle_dynamic): accesses per epoch, the access count
    /// at which the next begins (u64::MAX: none), its index.
    policy_epoch_len: u64,
    policy_epoch_at: u64,
    policy_epoch: usize,
}

/// Which pages the scanner hints to devices that accept hints (`os.device_hints`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeviceHints {
    None,
    /// Every page found accessed.
    Scan,
    /// Pages found accessed at this visit and the previous one.
    ScanHot,
}

#[derive(Debug, Clone, Copy)]
enum PageEvent {
    Moved(u32, NodeId, NodeId),
    Evicted(u32, NodeId),
}

/// Stands in for the policy while it is parked; it holds nothing, so boxing it allocates nothing.
struct Parked;
impl Policy for Parked {}

/// The machine as policies see it.
pub fn topology(p: &Platform) -> Topology {
    Topology {
        nodes: p
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| NodeInfo {
                id: i as NodeId,
                name: n.name.clone(),
                tier: n.tier,
                socket: n.socket,
                has_cpus: !n.cpus.is_empty(),
                capacity_pages: n.capacity_pages,
                usable_pages: n.capacity_pages - p.watermarks[i].2,
            })
            .collect(),
        zonelists: (0..p.nodes.len()).map(|i| p.zonelist(i)).collect(),
        cpu_node: p.cpu_node.clone(),
        page_size: p.page_size,
        capacity_scale: p.scale,
        time_scale: p.os.float("daemon_time_scale"),
    }
}

impl Engine {
    fn new(platform: &Platform, policy: Box<dyn Policy>, time_unit: TimeUnit) -> Result<Self> {
        let topo = topology(platform);
        let epoch_len = policy.epoch_length();
        let nodes = platform
            .nodes
            .iter()
            .zip(&platform.watermarks)
            .map(|(spec, w)| Node::new(spec.clone(), *w))
            .collect::<Result<Vec<_>>>()?;
        let swap = match &platform.swap {
            None => None,
            Some(s) => Some(Swap {
                dev: (tiersim_devices::find(&s.device)?.build)(&s.params)?,
                capacity: s.capacity_pages,
                used: 0,
                free_slots: Vec::new(),
                next_slot: 0,
                swap_ins: 0,
                swap_outs: 0,
                epoch_ins: 0,
                epoch_outs: 0,
                file_drops: 0,
                file_writebacks: 0,
                file_refaults: 0,
            }),
        };
        let n = nodes.len();
        let host = &platform.host;
        let mut penalty = vec![0; n * n];
        for a in 0..n {
            for b in 0..n {
                let (na, nb) = (&platform.nodes[a], &platform.nodes[b]);
                penalty[a * n + b] = if a == b {
                    0
                } else if na.socket != nb.socket {
                    host.duration("remote_socket_latency")
                } else if !nb.cpus.is_empty() {
                    host.duration("remote_node_latency")
                } else {
                    0
                };
            }
        }
        let cpus = platform
            .cpu_node
            .iter()
            .map(|&node| Cpu {
                clock_ps: 0,
                next_issue_ps: 0,
                node,
                socket: platform.nodes[node as usize].socket,
                started: false,
                prev_trace_time: 0,
                last_vpn: u64::MAX,
                last_page: 0,
                queue: VecDeque::new(),
            })
            .collect();
        let os = &platform.os;
        let freq_ghz = host.float("frequency") / 1e9;
        let scan = policy.scanner();
        let scan_visits = policy.wants_scan_visits();
        let top_tier = (0..n).map(|i| tiersim_policies::is_top_tier(i as NodeId, &topo)).collect();
        let demote_to = (0..n).map(|i| policy.demotion_target(i as NodeId, &topo).map(usize::from)).collect();
        let protect_demoted = policy.protect_demoted();
        let device_hints = match os.str("device_hints") {
            "scan" => DeviceHints::Scan,
            "scan_hot" => DeviceHints::ScanHot,
            _ => DeviceHints::None,
        };
        let hint_nodes = nodes.iter().map(|n| device_hints != DeviceHints::None && n.dev.accepts_hints()).collect();
        let reclaim_goal = (0..n)
            .map(|i| policy.reclaim_goal(i as NodeId, platform.watermarks[i], platform.nodes[i].capacity_pages, &topo))
            .collect();
        Ok(Engine {
            topo,
            nodes,
            swap,
            policy,
            parked: false,
            page_events: Vec::new(),
            scan_visits,
            device_hints,
            hint_nodes,
            pt: PageTable::new(scan.is_some()),
            cpus,
            page_shift: platform.page_size.trailing_zeros(),
            page_size: platform.page_size,
            penalty,
            mlp_milli: (host.float("mlp") * 1000.0).round() as u64,
            ps_per_instr: host.float("cpi") * 1000.0 / freq_ghz,
            open_loop: host.str("mode") == "open",
            time_unit,
            fault_ps: os.duration("fault_latency") * 1000,
            swap_fault_ps: os.duration("swap_fault_latency") * 1000,
            reclaim_batch: os.uint("reclaim_batch"),
            free_scratch: vec![0; n],
            measuring: false,
            measure_start_ns: 0,
            // Fixed bounds (1 ns .. 18 min): saturating_record never resizes an auto-sized
            // histogram, which clamped every latency above 2 us.
            hist: Histogram::new_with_bounds(1, 1 << 40, 3).map_err(|e| Error::Sim(format!("histogram: {e}")))?,
            first_touch_faults: 0,
            fault_time_ps: 0,
            max_completion_ns: 0,
            last_issue_ns: 0,
            time_went_back: 0,
            epoch_ns: platform.stats.duration("epoch"),
            epoch_idx: 0,
            scan,
            scan_next_ns: scan.map_or(0, |s| s.delay_ns),
            scan_period_ns: 0,
            scan_cursor: 0,
            scan_seq: 0,
            pass_faults: 0,
            pass_failed: false,
            top_tier,
            demote_to,
            reclaim_goal,
            protect_demoted,
            wmarks: platform.watermarks.clone(),
            hint_fault_ps: os.duration("hint_fault_latency") * 1000,
            migrate_ps: os.duration("migrate_overhead") * 1000,
            tlb_shootdown_ps: os.duration("tlb_shootdown") * 1000,
            pte_scan_ps: os.duration("pte_scan_cost") * 1000,
            ping_pong_ns: platform.stats.duration("ping_pong_window"),
            tiering: TieringStats::default(),
            lru_stats: LruStats::default(),
            swappiness: os.uint("swappiness"),
            new_anon_active: os.str("new_anon_list") == "active",
            ts: Timeseries::default(),
            processed: 0,
            policy_epoch_len: epoch_len.unwrap_or(u64::MAX),
            policy_epoch_at: if epoch_len.is_some() { 0 } else { u64::MAX },
            policy_epoch: 0,
        })
    }

    // ---- reclaim and swap --------------------------------------------------------------

    /// Reclaim up to `want` pages of `node` at `t`. Each LRU victim is demoted to the policy's
    /// demotion target while that node has free memory above its min watermark (the kernel's
    /// demotion allocation does not reclaim on the target), else written to swap.
    fn reclaim(&mut self, node: usize, want: u64, t: Ns) -> Result<u64> {
        let demote_to = self.demote_to[node];
        let mut done = 0;
        while done < want {
            let target = demote_to.filter(|&d| self.nodes[d].free() > self.nodes[d].wmark_min);
            let can_swap = self.swap.as_ref().is_some_and(|s| s.used < s.capacity);
            // File pages are dropped to (and read back from) the block device, `[swap]`'s.
            let can_drop = self.swap.is_some();
            if target.is_none() && !can_swap && !can_drop {
                break;
            }
            let Some(p) = self.pick_victim(node, target.is_some() || can_swap, target.is_some() || can_drop) else { break };
            match target {
                Some(d) => {
                    self.move_page(p, node, d, t, true);
                }
                None if self.pt.entries[p as usize].flags & FILE != 0 => self.drop_file_page(p, node, t),
                None => self.swap_out(p, node, t),
            }
            done += 1;
        }
        Ok(done)
    }

    /// Drop file page `p` (already off its LRU list) from memory at `t`, writing it back to the
    /// block device first if it is dirty; it keeps no swap slot.
    fn drop_file_page(&mut self, p: u32, node: usize, t: Ns) {
        let e = self.pt.entries[p as usize];
        self.nodes[node].release_frame(e.frame);
        let req = self.block_request(p, t, Op::Write);
        let measuring = self.measuring;
        let dev = self.swap.as_mut().expect("callers check for a block device");
        if e.flags & DIRTY != 0 {
            dev.dev.access(&req);
            dev.file_writebacks += measuring as u64;
        }
        dev.file_drops += measuring as u64;
        self.pt.entries[p as usize] = PageEntry { frame: 0, node: DROPPED, flags: FILE };
        self.page_event(PageEvent::Evicted(p, node as NodeId));
    }

    /// A page-sized transfer of file page `p` on the block device: the file offset stands in for
    /// the page id, which is stable for the run.
    fn block_request(&self, p: u32, t: Ns, op: Op) -> DeviceRequest {
        DeviceRequest { now: t, addr: p as u64 * self.page_size, size: self.page_size as u32, op, socket: 0, cpu: 0, remote: false }
    }

    /// Write page `p` (already off its LRU list) to swap at `t`.
    fn swap_out(&mut self, p: u32, node: usize, t: Ns) {
        let frame = self.pt.entries[p as usize].frame;
        self.nodes[node].release_frame(frame);
        let swap = self.swap.as_mut().expect("callers check for swap space");
        let slot = swap.free_slots.pop().unwrap_or_else(|| {
            swap.next_slot += 1;
            swap.next_slot - 1
        });
        swap.used += 1;
        swap.dev.access(&DeviceRequest {
            now: t,
            addr: slot as u64 * self.page_size,
            size: self.page_size as u32,
            op: Op::Write,
            socket: 0,
            cpu: 0,
            remote: false,
        });
        if self.measuring {
            swap.swap_outs += 1;
            swap.epoch_outs += 1;
        }
        self.pt.entries[p as usize] = PageEntry { frame: slot, node: SWAPPED, flags: 0 };
        self.page_event(PageEvent::Evicted(p, node as NodeId));
    }

    fn page_event(&mut self, ev: PageEvent) {
        if self.parked {
            self.page_events.push(ev);
            return;
        }
        match ev {
            PageEvent::Moved(p, from, to) => self.policy.on_page_moved(p, from, to),
            PageEvent::Evicted(p, node) => self.policy.on_page_evicted(p, node),
        }
    }

    /// Migrate page `p` (already off its LRU list, flags unchanged: migration keeps PG_active) from node `from` to node `to`, which has a
    /// free frame. The copy reads the page from the source device and writes it to the target
    /// device, both issued at `t` (a streaming copy overlaps the two), so it takes bandwidth from
    /// both; returns when the copy completes.
    fn move_page(&mut self, p: u32, from: usize, to: usize, t: Ns, copy: bool) -> Ns {
        let old = self.pt.entries[p as usize].frame;
        self.nodes[from].release_frame(old);
        let new = self.nodes[to].take_frame();
        let e = &mut self.pt.entries[p as usize];
        e.frame = new;
        e.node = to as u16;
        self.lru_push_head(to, p);
        let size = self.page_size as u32;
        let req = |addr: u64, op| DeviceRequest { now: t, addr, size, op, socket: 0, cpu: 0, remote: false };
        let (read, write) = if copy {
            (self.nodes[from].dev.access(&req((old as u64) << self.page_shift, Op::Read)), self.nodes[to].dev.access(&req((new as u64) << self.page_shift, Op::Write)))
        } else {
            (t, t)
        };
        self.note_move(p, from, to, t);
        if self.measuring {
            self.tiering.migrations += 1;
            self.tiering.migrated_bytes += self.page_size;
        }
        read.max(write)
    }

    /// What every page move shares, migration or exchange: PROT_NONE for demoted pages if the
    /// policy asks, the policy's notice, ping-pong detection and the per-node move counters.
    fn note_move(&mut self, p: u32, from: usize, to: usize, t: Ns) {
        let t_us = (t / 1000) as u32;
        let demoted = self.nodes[to].spec.tier > self.nodes[from].spec.tier;
        if demoted && self.protect_demoted {
            self.pt.entries[p as usize].flags |= PROT_NONE;
            self.pt.ext[p as usize].scan_us = t_us;
        }
        self.page_event(PageEvent::Moved(p, from as NodeId, to as NodeId));
        let ext = &mut self.pt.ext[p as usize];
        let back = ext.moved_from as usize == to && t_us.wrapping_sub(ext.moved_us) as u64 * 1000 < self.ping_pong_ns;
        ext.moved_from = from as u16;
        ext.moved_us = t_us;
        if self.measuring {
            let st = &mut self.tiering;
            match self.nodes[to].spec.tier.cmp(&self.nodes[from].spec.tier) {
                std::cmp::Ordering::Less => st.promotions += 1,
                std::cmp::Ordering::Greater => st.demotions += 1,
                std::cmp::Ordering::Equal => {}
            }
            st.ping_pong += back as u64;
            let src = &mut self.nodes[from];
            src.total.migrated_out += 1;
            src.epoch.migrated_out += 1;
            let dst = &mut self.nodes[to];
            dst.total.migrated_in += 1;
            dst.epoch.migrated_in += 1;
        }
    }

    /// kswapd: every node below its low watermark is reclaimed up to its high watermark. It runs
    /// on a core of its own, so its time is not charged to the application's CPUs; its swap
    /// writes still occupy the swap device.
    fn kswapd(&mut self, t: Ns) -> Result<()> {
        for n in 0..self.nodes.len() {
            let node = &self.nodes[n];
            if node.free() < node.wmark_low {
                let want = node.wmark_high - node.free();
                self.reclaim(n, want, t)?;
            }
        }
        Ok(())
    }

    fn try_zonelist(&self, zl: &[NodeId], use_min: bool) -> Option<usize> {
        zl.iter().map(|&n| n as usize).find(|&n| {
            let node = &self.nodes[n];
            let mark = if use_min { node.wmark_min } else { node.wmark_low };
            node.free() > mark
        })
    }

    /// Allocate a frame for page `p` first touched (or brought back) by `cpu` at time `t`, with
    /// page flags `flags` (its LRU list and kind); returns the node and the direct-reclaim time
    /// (ps) charged to the CPU.
    fn alloc(&mut self, p: u32, cpu: usize, vpn: u64, t: Ns, flags: u8) -> Result<(usize, u64)> {
        for (i, n) in self.nodes.iter().enumerate() {
            self.free_scratch[i] = n.free();
        }
        let local = self.cpus[cpu].node;
        let preferred = self.policy.place(&PlaceCtx {
            topo: &self.topo,
            cpu: cpu as u32,
            local_node: local,
            vpn,
            free_pages: &self.free_scratch,
            file: flags & FILE != 0,
        }) as usize;
        let zl = std::mem::take(&mut self.topo.zonelists[preferred]);
        let result = self.alloc_along(&zl, t);
        self.topo.zonelists[preferred] = zl;
        let (node, reclaim_ps) = result?;
        let frame = self.nodes[node].take_frame();
        self.pt.entries[p as usize] = PageEntry { frame, node: node as u16, flags: REFERENCED | LOCKED | flags };
        self.lru_push_head(node, p);
        self.policy.on_page_placed(p, node as NodeId);
        self.proactive_reclaim(node, t)?;
        Ok((node, reclaim_ps))
    }

    /// After an allocation on `node`: a policy's kswapd goal (TPP's demotion watermark) wakes
    /// kswapd, on a core of its own, as soon as free memory drops below it.
    fn proactive_reclaim(&mut self, node: usize, t: Ns) -> Result<()> {
        if let Some(goal) = self.reclaim_goal[node] {
            let free = self.nodes[node].free();
            if free < goal {
                self.reclaim(node, goal - free, t)?;
            }
        }
        Ok(())
    }

    fn alloc_along(&mut self, zl: &[NodeId], t: Ns) -> Result<(usize, u64)> {
        if let Some(n) = self.try_zonelist(zl, false) {
            return Ok((n, 0));
        }
        self.kswapd(t)?;
        if let Some(n) = self.try_zonelist(zl, true) {
            return Ok((n, 0));
        }
        // Direct reclaim, charged to the faulting CPU: the swap write of the batch must finish.
        let mut charged = 0;
        for &n in zl {
            let freed = self.reclaim(n as usize, self.reclaim_batch, t)?;
            if freed > 0 {
                if let Some(s) = self.swap.as_ref() {
                    charged += s.dev.idle_latency(Op::Write, self.page_size as u32) * 1000;
                }
                if let Some(n) = self.try_zonelist(zl, true) {
                    return Ok((n, charged));
                }
            }
        }
        // Last resort as the kernel's: take a node with any free frame at all.
        if let Some(&n) = zl.iter().find(|&&n| self.nodes[n as usize].free() > 0) {
            return Ok((n as usize, charged));
        }
        let usable: u64 = self.nodes.iter().map(|n| n.capacity).sum();
        Err(Error::Sim(match &self.swap {
            None => format!(
                "out of memory after {} accesses: the trace has touched {} pages and all {} pages of memory are in use, and swap is disabled; \
                 enable [swap], raise node capacities or `scale`",
                self.processed,
                self.pt.touched,
                usable
            ),
            Some(s) if s.used >= s.capacity => format!(
                "out of memory after {} accesses: memory ({usable} pages) and swap ({} pages) are full; raise swap.capacity or `scale`",
                self.processed, s.capacity
            ),
            Some(_) => format!(
                "out of memory after {} accesses: every page of memory ({usable} pages) that reclaim could take is held by a fault in \
                 flight on another CPU; give the nodes more capacity than the platform has CPUs (raise capacities or `scale`)",
                self.processed
            ),
        }))
    }

    /// Bring page `p` back from swap at time `t`; returns the fault time in ps.
    fn swap_in(&mut self, p: u32, cpu: usize, vpn: u64, t: Ns) -> Result<u64> {
        let slot = self.pt.entries[p as usize].frame;
        let swap = self.swap.as_mut().expect("a swapped page implies swap");
        let done = swap.dev.access(&DeviceRequest {
            now: t,
            addr: slot as u64 * self.page_size,
            size: self.page_size as u32,
            op: Op::Read,
            socket: self.cpus[cpu].socket,
            cpu: cpu as u32,
            remote: false,
        });
        swap.used -= 1;
        swap.free_slots.push(slot);
        if self.measuring {
            swap.swap_ins += 1;
            swap.epoch_ins += 1;
        }
        let io_ps = (done - t) * 1000 + self.swap_fault_ps;
        // A swapped-in page starts inactive (lru_cache_add_inactive_or_unevictable, 5.9+).
        let (_, reclaim_ps) = self.alloc(p, cpu, vpn, t + io_ps / 1000, 0)?;
        Ok(io_ps + reclaim_ps)
    }

    /// Read dropped file page `p` back from the block device at `t` (a major fault); returns the
    /// fault time in ps. It comes back on the inactive file list (add_to_page_cache_lru).
    fn file_refault(&mut self, p: u32, cpu: usize, vpn: u64, t: Ns) -> Result<u64> {
        let req = DeviceRequest { socket: self.cpus[cpu].socket, cpu: cpu as u32, ..self.block_request(p, t, Op::Read) };
        let swap = self.swap.as_mut().expect("a dropped file page implies a block device");
        let done = swap.dev.access(&req);
        if self.measuring {
            swap.file_refaults += 1;
        }
        let io_ps = (done - t) * 1000 + self.swap_fault_ps;
        let (_, reclaim_ps) = self.alloc(p, cpu, vpn, t + io_ps / 1000, FILE)?;
        Ok(io_ps + reclaim_ps)
    }

    // ---- time series -------------------------------------------------------------------

    fn flush_epochs_until(&mut self, t: Ns) {
        if !self.measuring {
            return;
        }
        while t >= self.measure_start_ns + (self.epoch_idx + 1) * self.epoch_ns {
            self.flush_epoch(self.measure_start_ns + (self.epoch_idx + 1) * self.epoch_ns);
        }
    }

    fn flush_epoch(&mut self, end: Ns) {
        let start = self.measure_start_ns + self.epoch_idx * self.epoch_ns;
        let span = (end - start).max(1) as f64;
        let hot = self.policy.hotness().map(|h| h.to_vec());
        for i in 0..self.nodes.len() {
            let c = std::mem::take(&mut self.nodes[i].epoch);
            let used = self.nodes[i].used;
            self.push_row(start, end, self.nodes[i].spec.name.clone(), used, c, span);
            if let Some(h) = &hot {
                self.ts.hotness.get_or_insert_with(Vec::new).push(h.get(i).copied().unwrap_or_default());
            }
        }
        if let Some(s) = self.swap.as_mut() {
            let (ins, outs, used) = (s.epoch_ins, s.epoch_outs, s.used);
            s.epoch_ins = 0;
            s.epoch_outs = 0;
            let c = Counters { accesses: ins, reads: ins, writes: outs, bytes: (ins + outs) * self.page_size, ..Counters::default() };
            self.push_row(start, end, "swap".into(), used, c, span);
            if let Some(h) = self.ts.hotness.as_mut() {
                h.push([0; 9]);
            }
        }
        self.epoch_idx += 1;
    }

    fn push_row(&mut self, start: Ns, end: Ns, node: String, pages: u64, c: Counters, span: f64) {
        let ts = &mut self.ts;
        ts.epoch.push(self.epoch_idx);
        ts.t_start_ns.push(start);
        ts.t_end_ns.push(end);
        ts.node.push(node);
        ts.pages.push(pages);
        ts.accesses.push(c.accesses);
        ts.reads.push(c.reads);
        ts.writes.push(c.writes);
        ts.bytes.push(c.bytes);
        ts.bandwidth_gbs.push(c.bytes as f64 / span);
        ts.migrated_in.push(c.migrated_in);
        ts.migrated_out.push(c.migrated_out);
    }

    // ---- NUMA balancing ----------------------------------------------------------------

    /// One scan window of task_numa_work (policies.md 1.2): walk the touched address space from
    /// the cursor, making present pages PROT_NONE (only pages below the top tier in tiering mode;
    /// pages already PROT_NONE keep their stamp), until a window's worth of present pages or
    /// 8x that much address space; at the end of the address space wrap and adapt the period.
    /// Returns the scan's cost (ps), charged to the CPU that ran it.
    fn run_scan(&mut self, spec: ScanSpec, t: Ns) -> u64 {
        let window = (spec.scan_size / self.page_size).max(1);
        let present: u64 = self.nodes.iter().map(|n| n.used).sum();
        let windows = (present * self.page_size).div_ceil(spec.scan_size).max(1);
        // task_scan_min/max: at most 2560 MB/s of scanning, and a full pass per period bound.
        let scan_min = (spec.scan_size as f64 * 1e9 / spec.max_rate_bytes_per_s) as u64;
        let scan_min = scan_min.max(spec.period_min_ns / windows);
        let scan_max = scan_min.max(spec.period_max_ns / windows);
        if self.scan_period_ns == 0 {
            self.scan_period_ns = scan_min;
        }
        let t_us = (t / 1000) as u32;
        let (mut walked, mut present_walked) = (0u64, 0u64);
        'walk: loop {
            let cursor_chunk = self.scan_cursor >> CHUNK_SHIFT;
            let Some((&chunk, &base)) = self.pt.by_address.range(cursor_chunk..).next() else {
                self.scan_cursor = 0;
                self.scan_seq += 1;
                self.adapt_scan_period(spec, scan_min, scan_max);
                break;
            };
            let start = if chunk == cursor_chunk { (self.scan_cursor & (CHUNK as u64 - 1)) as usize } else { 0 };
            for off in start..CHUNK {
                let id = base as usize + off;
                let e = &mut self.pt.entries[id];
                // The trace tells us nothing of the program's mappings beyond the pages it
                // touched, so those stand for its VMAs: untouched slots cost no walk.
                if e.node == UNTOUCHED {
                    continue;
                }
                walked += 1;
                if e.node < DROPPED {
                    present_walked += 1;
                    if spec.top_tier || !self.top_tier[e.node as usize] {
                        let accessed = e.flags & PROT_NONE == 0;
                        if self.scan_visits {
                            self.policy.on_scan(&ScanVisit { page: id as u32, node: e.node as NodeId, accessed, now_ns: t });
                        }
                        if accessed {
                            e.flags |= PROT_NONE;
                            self.pt.ext[id].scan_us = t_us;
                        }
                        if self.device_hints != DeviceHints::None {
                            let (node, frame) = (e.node as usize, e.frame);
                            self.scan_hint(id, node, frame, accessed, t);
                        }
                    }
                }
                if present_walked >= window || walked >= 8 * window {
                    self.scan_cursor = (chunk << CHUNK_SHIFT) + off as u64 + 1;
                    break 'walk;
                }
            }
            self.scan_cursor = (chunk + 1) << CHUNK_SHIFT;
        }
        let cost = walked * self.pte_scan_ps + self.tlb_shootdown_ps;
        // The scan runs in the task's context (task_work), so the period counts from its end:
        // a period shorter than the scan's own cost must not starve the task of progress.
        self.scan_next_ns = t + cost / 1000 + self.scan_period_ns;
        if self.measuring {
            self.tiering.scans += 1;
            self.tiering.scan_time_ps += cost;
        }
        cost
    }

    /// `os.device_hints`: tell the device holding a visited page that it is in use. Accessed means
    /// the PTE was not PROT_NONE: the page was touched since the scanner last protected it (or
    /// has not been visited since it was placed, which was a touch).
    fn scan_hint(&mut self, id: usize, node: usize, frame: u32, accessed: bool, t: Ns) {
        let ext = &mut self.pt.ext[id];
        let send = match self.device_hints {
            DeviceHints::None => false,
            DeviceHints::Scan => accessed,
            DeviceHints::ScanHot => accessed && ext.scan_accessed,
        };
        ext.scan_accessed = accessed;
        if send && self.hint_nodes[node] {
            self.nodes[node].dev.hint(t, u64::from(frame) << self.page_shift, self.page_size);
            if self.measuring {
                self.tiering.device_hints += 1;
            }
        }
    }

    /// update_task_scan_period after a full pass. Every fault of one process is private, so
    /// with faults the period grows by 3/10 (ps = 10 tenths >= 7); with none, or a failed
    /// migration, it doubles. In tiering mode slow-tier faults are not recorded and the period
    /// stays where it started (policies.md 3).
    fn adapt_scan_period(&mut self, spec: ScanSpec, scan_min: u64, scan_max: u64) {
        if spec.top_tier {
            self.scan_period_ns = if self.pass_faults == 0 || self.pass_failed {
                self.scan_period_ns * 2
            } else {
                self.scan_period_ns + 3 * (self.scan_period_ns / 10).max(1)
            };
        }
        self.scan_period_ns = self.scan_period_ns.clamp(scan_min, scan_max);
        self.pass_faults = 0;
        self.pass_failed = false;
    }

    /// A hint fault by CPU `c` on PROT_NONE page `p` at `t`: restore the PTE, ask the policy,
    /// and migrate if it says so and the target has free memory above its high watermark
    /// (migrate_misplaced_page). Returns the time charged to the CPU (ps).
    fn hint_fault(&mut self, c: usize, p: u32, t: Ns, write: bool) -> u64 {
        self.pt.entries[p as usize].flags &= !PROT_NONE;
        let node = self.pt.entries[p as usize].node as usize;
        for (i, n) in self.nodes.iter().enumerate() {
            self.free_scratch[i] = n.free();
        }
        let ext = self.pt.ext[p as usize];
        // The policy may call back into the OS model (MemOps), which borrows the engine: park
        // the policy and lend it the read-only context it sees.
        let topo = std::mem::take(&mut self.topo);
        let free = std::mem::take(&mut self.free_scratch);
        let wmarks = std::mem::take(&mut self.wmarks);
        let mut policy = std::mem::replace(&mut self.policy, Box::new(Parked));
        self.parked = true;
        let ctx = HintCtx {
            topo: &topo,
            cpu: c as u32,
            cpu_node: self.cpus[c].node,
            page: PageView {
                id: p,
                node: node as NodeId,
                last_cpu: (ext.last_cpu != NIL).then_some(ext.last_cpu),
                scan_time_ns: ext.scan_us as u64 * 1000,
                active: self.pt.entries[p as usize].flags & ACTIVE != 0,
            },
            now_ns: t,
            write,
            free_pages: &free,
            watermarks: &wmarks,
            scan_seq: self.scan_seq,
        };
        let mut ops = Ops { eng: self, t, cost_ps: 0 };
        let decision = policy.on_hint_fault(&ctx, &mut ops);
        let ops_ps = ops.cost_ps;
        self.policy = policy;
        self.parked = false;
        self.topo = topo;
        self.free_scratch = free;
        self.wmarks = wmarks;
        for ev in std::mem::take(&mut self.page_events) {
            self.page_event(ev);
        }
        self.pt.ext[p as usize].last_cpu = c as u32;
        if self.scan.is_some_and(|s| s.top_tier) {
            self.pass_faults += 1;
        }
        let mut cost = self.hint_fault_ps + ops_ps;
        let t = t + ops_ps / 1000;
        let node = self.pt.entries[p as usize].node as usize;
        if let FaultDecision::Migrate(dst) = decision {
            let d = dst as usize;
            if d != node {
                if self.nodes[d].has_room() {
                    self.lru_unlink(node, p);
                    let done = self.move_page(p, node, d, t, true);
                    cost += self.charge_move(1, t, done);
                    let _ = self.proactive_reclaim(d, t);
                } else {
                    self.pass_failed = true;
                    if self.measuring {
                        if self.nodes[d].spec.tier < self.nodes[node].spec.tier {
                            self.tiering.failed_promotions += 1;
                        } else {
                            self.tiering.failed_migrations += 1;
                        }
                    }
                    let (wm, cap) = (self.wmarks[d], self.nodes[d].capacity);
                    if let Some(goal) = self.policy.on_promotion_failed(dst, wm, cap) {
                        // kswapd on the target, on a core of its own, until free memory is above
                        // the goal (zone_watermark_ok is a strict test).
                        let want = (goal + 1).saturating_sub(self.nodes[d].free());
                        let _ = self.reclaim(d, want, t);
                    }
                }
            }
        }
        if self.measuring {
            self.tiering.hint_faults += 1;
            self.tiering.hint_fault_time_ps += cost;
        }
        cost
    }

    /// Time (ps) a synchronous move started at `t` and copied by `done` costs the faulting CPU:
    /// per page unmapped, `migrate_overhead` and a TLB shootdown, plus the copy; counted as
    /// migration time.
    fn charge_move(&mut self, pages: u64, t: Ns, done: Ns) -> u64 {
        let ps = pages * (self.migrate_ps + self.tlb_shootdown_ps) + (done - t) * 1000;
        if self.measuring {
            self.tiering.migration_time_ps += ps;
        }
        ps
    }

    /// Swap the frames of pages `a` and `b` (on different nodes) at `t`: both pages are read and
    /// written, all four transfers issued at once; returns when the last completes.
    fn exchange_pages(&mut self, a: u32, b: u32, t: Ns) -> Ns {
        let (ea, eb) = (self.pt.entries[a as usize], self.pt.entries[b as usize]);
        let (na, nb) = (ea.node as usize, eb.node as usize);
        self.lru_unlink(na, a);
        self.lru_unlink(nb, b);
        self.pt.entries[a as usize].frame = eb.frame;
        self.pt.entries[a as usize].node = nb as u16;
        self.pt.entries[b as usize].frame = ea.frame;
        self.pt.entries[b as usize].node = na as u16;
        self.lru_push_head(nb, a);
        self.lru_push_head(na, b);
        let size = self.page_size as u32;
        let req = |frame: u32, op| DeviceRequest { now: t, addr: (frame as u64) << self.page_shift, size, op, socket: 0, cpu: 0, remote: false };
        let mut done = t;
        done = done.max(self.nodes[na].dev.access(&req(ea.frame, Op::Read)));
        done = done.max(self.nodes[nb].dev.access(&req(eb.frame, Op::Read)));
        done = done.max(self.nodes[nb].dev.access(&req(eb.frame, Op::Write)));
        done = done.max(self.nodes[na].dev.access(&req(ea.frame, Op::Write)));
        self.note_move(a, na, nb, t);
        self.note_move(b, nb, na, t);
        if self.measuring {
            self.tiering.exchanges += 1;
            self.tiering.exchanged_bytes += 2 * self.page_size;
        }
        done
    }

    // ---- the access path ---------------------------------------------------------------

    /// Issue time (ps) of `a`, the next access of CPU `c`. Closed loop: the CPU's clock plus the
    /// compute gap before `a` (instructions x CPI / frequency, or the trace's ns delta). Open loop
    /// with ns traces: the trace time itself, relative to the trace's first access at `t0`. A CPU
    /// that first appears late in the stream starts at the current simulated time.
    fn first_issue_ps(&self, c: usize, a: &Access, t0: u64) -> u64 {
        let cpu = &self.cpus[c];
        let now_ps = self.last_issue_ns * 1000;
        match (self.time_unit, cpu.started) {
            (TimeUnit::Ns, _) if self.open_loop => a.time.saturating_sub(t0) * 1000,
            (TimeUnit::Ns, false) => (a.time.saturating_sub(t0) * 1000).max(now_ps),
            (TimeUnit::Ns, true) => cpu.clock_ps + a.time.saturating_sub(cpu.prev_trace_time) * 1000,
            (TimeUnit::Instructions, started) => {
                let base = if started { cpu.clock_ps } else { now_ps };
                base + (a.time as f64 * self.ps_per_instr) as u64
            }
        }
    }

    fn start_measuring(&mut self, t: Ns) {
        self.measuring = true;
        self.measure_start_ns = t;
        self.max_completion_ns = t;
        for n in &mut self.nodes {
            n.total = Counters::default();
            n.epoch = Counters::default();
        }
    }

    /// Serve CPU `c`'s access `a` at its issue time. If the page must first be faulted in, the
    /// fault is handled now and the access is deferred: `Ok(Some(t))` asks the caller to issue
    /// it again at `t` (ps), after the fault, in its turn among the other CPUs, so that devices
    /// always see requests in time order.
    fn access(&mut self, c: usize, a: Access) -> Result<Option<u64>> {
        let issue_ps = self.cpus[c].next_issue_ps;
        let issue_ns = issue_ps / 1000;
        if issue_ns < self.last_issue_ns {
            self.time_went_back += 1;
        } else {
            self.last_issue_ns = issue_ns;
        }
        self.flush_epochs_until(issue_ns);

        let vpn = a.addr >> self.page_shift;
        let p = if self.cpus[c].last_vpn == vpn {
            self.cpus[c].last_page
        } else {
            let p = self.pt.slot(vpn)?;
            self.cpus[c].last_vpn = vpn;
            self.cpus[c].last_page = p;
            p
        };
        if let Some(spec) = self.scan {
            if issue_ns >= self.scan_next_ns {
                let cost = self.run_scan(spec, issue_ns);
                return Ok(Some(issue_ps + cost));
            }
        }
        if self.processed >= self.policy_epoch_at {
            let cost = self.policy_epoch(issue_ns);
            return Ok(Some(issue_ps + cost));
        }
        let fault_ps = match self.pt.entries[p as usize].node {
            UNTOUCHED => {
                self.pt.touched += 1;
                // New page-cache pages start inactive (add_to_page_cache_lru); anon per new_anon_list.
                let flags = if a.is_file() { FILE } else if self.new_anon_active { ACTIVE } else { 0 };
                let (_, reclaim_ps) = self.alloc(p, c, vpn, issue_ns, flags)?;
                if self.measuring {
                    self.first_touch_faults += 1;
                }
                self.fault_ps + reclaim_ps
            }
            // Also on the cached path: another CPU's reclaim may have swapped the page out.
            SWAPPED => self.swap_in(p, c, vpn, issue_ns)?,
            DROPPED => self.file_refault(p, c, vpn, issue_ns)?,
            _ => 0,
        };
        if fault_ps > 0 {
            if self.measuring {
                self.fault_time_ps += fault_ps;
            }
            return Ok(Some(issue_ps + fault_ps));
        }
        if self.pt.entries[p as usize].flags & PROT_NONE != 0 {
            let cost = self.hint_fault(c, p, issue_ns, a.op.is_write());
            return Ok(Some(issue_ps + cost));
        }
        let entry = &mut self.pt.entries[p as usize];
        entry.flags = (entry.flags & !LOCKED) | REFERENCED | if a.op.is_write() { DIRTY } else { 0 };
        let node = entry.node as usize;
        let addr = ((entry.frame as u64) << self.page_shift) | (a.addr & (self.page_size - 1));

        let t_ps = issue_ps;
        let t = t_ps / 1000;
        let cpu_node = self.cpus[c].node as usize;
        let socket = self.cpus[c].socket;
        let remote = socket != self.nodes[node].spec.socket;
        let done = self.nodes[node].dev.access(&DeviceRequest { now: t, addr, size: a.size as u32, op: a.op, socket, cpu: c as u32, remote });
        let latency = done - t + self.penalty[cpu_node * self.nodes.len() + node];

        if self.measuring {
            let n = &mut self.nodes[node];
            for ctr in [&mut n.total, &mut n.epoch] {
                ctr.accesses += 1;
                ctr.bytes += a.size as u64;
                ctr.latency_sum += latency;
                if a.op.is_write() {
                    ctr.writes += 1;
                } else {
                    ctr.reads += 1;
                }
            }
            self.hist.saturating_record(latency.max(1));
            self.max_completion_ns = self.max_completion_ns.max(t + latency);
        }

        let cpu = &mut self.cpus[c];
        cpu.clock_ps = if self.open_loop { t_ps } else { t_ps + (latency * 1_000_000).div_ceil(self.mlp_milli) };
        cpu.prev_trace_time = a.time;
        cpu.started = true;
        self.processed += 1;
        Ok(None)
    }

    // ---- invariants --------------------------------------------------------------------

    /// Each page on exactly one node or in swap, frames unique per node, no node over capacity,
    /// each page on the one LRU list of its node its flags name, lists well linked and counted.
    fn check(&self) -> Result<()> {
        let fail = |m: String| Err(Error::Sim(format!("invariant violated: {m}")));
        let mut seen: Vec<FxHashMap<u32, u32>> = vec![FxHashMap::default(); self.nodes.len()];
        let mut swapped = 0u64;
        for (p, e) in self.pt.entries.iter().enumerate() {
            if e.node == UNTOUCHED {
                continue;
            }
            if e.node == SWAPPED {
                swapped += 1;
                continue;
            }
            if e.node == DROPPED {
                continue;
            }
            if let Some(q) = seen[e.node as usize].insert(e.frame, p as u32) {
                return fail(format!("pages {q} and {p} share frame {} on node {}", e.frame, e.node));
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.used + n.reserved > n.capacity {
                return fail(format!("node {} holds {} pages and {} reserved frames over its capacity {}", n.spec.name, n.used, n.reserved, n.capacity));
            }
            if seen[i].len() as u64 != n.used {
                return fail(format!("node {} counts {} pages but {} map to it", n.spec.name, n.used, seen[i].len()));
            }
            let mut total = 0;
            for (l, list) in n.lists.iter().enumerate() {
                let (mut len, mut p, mut prev) = (0u64, list.head, NIL);
                while p != NIL {
                    let e = self.pt.entries[p as usize];
                    if e.node as usize != i || lru::list_of(e.flags) != l {
                        return fail(format!("page {p} on node {}'s list {l} lives on node {} in list {}", n.spec.name, e.node, lru::list_of(e.flags)));
                    }
                    if self.pt.lru[p as usize].prev != prev {
                        return fail(format!("page {p} on node {}'s list {l} has a broken back link", n.spec.name));
                    }
                    len += 1;
                    if len > n.used {
                        break;
                    }
                    (prev, p) = (p, self.pt.lru[p as usize].next);
                }
                if len != list.len || (len > 0 && list.tail != prev) {
                    return fail(format!("node {} list {l} holds {len} pages, counts {}", n.spec.name, list.len));
                }
                total += len;
            }
            if total != n.used {
                return fail(format!("node {} lists hold {total} pages, node has {}", n.spec.name, n.used));
            }
        }
        let swap_used = self.swap.as_ref().map_or(0, |s| s.used);
        if swapped != swap_used {
            return fail(format!("{swapped} pages are swapped but swap holds {swap_used}"));
        }
        Ok(())
    }
}

/// The OS operations a policy performs from its hint-fault hook, in the faulting CPU's context:
/// synchronous moves are charged to that CPU and run one after another from the fault time.
struct Ops<'e> {
    eng: &'e mut Engine,
    t: Ns,
    cost_ps: u64,
}

impl Ops<'_> {
    /// A synchronous move of `pages` unmapped pages, copied by `done`, delays what follows.
    fn charge(&mut self, mode: MoveMode, pages: u64, done: Ns) {
        if mode == MoveMode::Sync {
            let ps = self.eng.charge_move(pages, self.t, done);
            self.cost_ps += ps;
            self.t += ps / 1000;
        }
    }

    fn present(&self, page: u32) -> Option<usize> {
        let e = self.eng.pt.entries.get(page as usize)?;
        (e.node < DROPPED).then_some(e.node as usize)
    }

    fn relocate(&mut self, page: u32, from: usize, to: usize, mode: MoveMode) {
        let t = self.t;
        self.eng.lru_unlink(from, page);
        let done = self.eng.move_page(page, from, to, t, mode != MoveMode::Free);
        self.charge(mode, 1, done);
    }
}

impl MemOps for Ops<'_> {
    fn room(&self, node: NodeId) -> bool {
        self.eng.nodes[node as usize].has_room()
    }

    fn room_pages(&self, node: NodeId) -> u64 {
        let n = &self.eng.nodes[node as usize];
        n.free().saturating_sub(n.wmark_high + 1)
    }

    fn page_node(&self, page: u32) -> Option<NodeId> {
        self.present(page).map(|n| n as NodeId)
    }

    fn last_cpu(&self, page: u32) -> Option<u32> {
        let c = self.eng.pt.ext.get(page as usize)?.last_cpu;
        (c != NIL && (c as usize) < self.eng.cpus.len()).then_some(c)
    }

    fn demote(&mut self, page: u32, to: NodeId, mode: MoveMode, reserve: bool) -> bool {
        let Some(from) = self.present(page) else { return false };
        let n = &self.eng.nodes[to as usize];
        if from == to as usize || n.free() <= n.wmark_min {
            return false;
        }
        self.relocate(page, from, to as usize, mode);
        if reserve {
            self.eng.nodes[from].reserved += 1;
        }
        true
    }

    fn migrate(&mut self, page: u32, to: NodeId, mode: MoveMode) -> bool {
        let Some(from) = self.present(page) else { return false };
        if from == to as usize || !self.eng.nodes[to as usize].has_room() {
            return false;
        }
        self.relocate(page, from, to as usize, mode);
        true
    }

    fn migrate_reserved(&mut self, page: u32, to: NodeId) -> bool {
        let Some(from) = self.present(page) else { return false };
        if from == to as usize || self.eng.nodes[to as usize].reserved == 0 {
            return false;
        }
        self.eng.nodes[to as usize].reserved -= 1;
        self.relocate(page, from, to as usize, MoveMode::Sync);
        true
    }

    fn mark_page_accessed(&mut self, page: u32) {
        if let Some(node) = self.present(page) {
            self.eng.mark_page_accessed(page, node);
        }
    }

    fn is_file(&self, page: u32) -> bool {
        self.eng.pt.entries.get(page as usize).is_some_and(|e| e.flags & FILE != 0)
    }

    fn demote_file_page(&mut self, from: NodeId, to: NodeId, mode: MoveMode) -> Option<u32> {
        let (from, to) = (from as usize, to as usize);
        let n = &self.eng.nodes[to];
        if from == to || n.free() <= n.wmark_min {
            return None;
        }
        let page = self.eng.oldest_file_page(from)?;
        self.relocate(page, from, to, mode);
        Some(page)
    }

    fn exchange(&mut self, a: u32, b: u32) -> bool {
        let (Some(na), Some(nb)) = (self.present(a), self.present(b)) else { return false };
        if na == nb {
            return false;
        }
        let done = self.eng.exchange_pages(a, b, self.t);
        // Two unmaps and TLB shootdowns, one two-way copy (policies.md 2.8).
        self.charge(MoveMode::Sync, 2, done);
        true
    }
}

/// Replay `source` on `platform` under `policy`. Errors leave nothing behind: results only exist
/// once the whole trace has run.
pub fn simulate(
    platform: &Platform,
    policy: Box<dyn Policy>,
    source: &mut dyn AccessSource,
    opts: SimOptions,
) -> Result<SimResult> {
    let header = source.header().clone();
    let mut eng = Engine::new(platform, policy, header.time_unit)?;
    let warmup = platform.stats.uint("warmup_accesses");
    let ncpus = eng.cpus.len();
    let mut heap: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::with_capacity(ncpus);
    let mut buf: Vec<Access> = Vec::with_capacity(BATCH);
    let mut buffered = 0usize;
    let mut dry = 0usize;
    let mut eof = false;
    let mut read = 0u64;
    let mut t0_trace: Option<u64> = None;
    if warmup == 0 {
        eng.start_measuring(0);
    }

    loop {
        while !eof && (heap.is_empty() || (dry > 0 && buffered < MAX_BUFFERED)) {
            buf.clear();
            if source.read_batch(&mut buf, BATCH)? == 0 {
                eof = true;
                break;
            }
            for a in buf.drain(..) {
                let c = a.cpu as usize;
                if c >= ncpus {
                    return Err(Error::Sim(format!(
                        "access #{read} is from cpu {c}, but the platform has {ncpus} CPUs (host.cpus); \
                         use a platform with more CPUs or remap the trace"
                    )));
                }
                read += 1;
                let was_empty = eng.cpus[c].queue.is_empty();
                eng.cpus[c].queue.push_back(a);
                buffered += 1;
                if was_empty {
                    if eng.cpus[c].started {
                        dry -= 1;
                    }
                    let t0 = *t0_trace.get_or_insert(a.time);
                    let issue = eng.first_issue_ps(c, &a, t0);
                    eng.cpus[c].next_issue_ps = issue;
                    heap.push(Reverse((issue, c as u32)));
                }
            }
        }
        let Some(&Reverse((_, c))) = heap.peek() else { break };
        let c = c as usize;
        let a = eng.cpus[c].queue.pop_front().expect("CPUs in the heap have work");
        if !eng.measuring && eng.processed == warmup {
            let t = eng.cpus[c].next_issue_ps / 1000;
            eng.start_measuring(t);
        }
        if let Some(retry_ps) = eng.access(c, a)? {
            eng.cpus[c].queue.push_front(a);
            eng.cpus[c].next_issue_ps = retry_ps;
            *heap.peek_mut().expect("peeked above") = Reverse((retry_ps, c as u32));
            continue;
        }
        buffered -= 1;
        if opts.check_every > 0 && eng.processed % opts.check_every == 0 {
            eng.check()?;
        }
        match eng.cpus[c].queue.front().copied() {
            Some(next) => {
                // This CPU's next access comes up about `ncpus` accesses from now: time enough
                // for its page entry to arrive from memory.
                let vpn = next.addr >> eng.page_shift;
                if let Some(p) = eng.pt.prefetch(vpn) {
                    // Page ids never move, so this stands in for the lookup at issue time.
                    eng.cpus[c].last_vpn = vpn;
                    eng.cpus[c].last_page = p;
                }
                let issue = eng.first_issue_ps(c, &next, t0_trace.unwrap_or(0));
                eng.cpus[c].next_issue_ps = issue;
                // Re-key the top in place: one sift instead of a pop and a push.
                *heap.peek_mut().expect("peeked above") = Reverse((issue, c as u32));
            }
            None => {
                heap.pop();
                dry += 1;
            }
        }
    }
    if opts.check_every > 0 {
        eng.check()?;
    }
    if read == 0 {
        return Err(Error::Sim("the trace holds no accesses".into()));
    }
    if !eng.measuring {
        return Err(Error::Sim(format!(
            "stats.warmup_accesses = {warmup} is not smaller than the trace's {read} accesses; nothing was measured"
        )));
    }
    Ok(finish(eng, read, warmup))
}

fn finish(mut eng: Engine, read: u64, warmup: u64) -> SimResult {
    let end_ns = if eng.open_loop {
        eng.max_completion_ns
    } else {
        eng.cpus.iter().filter(|c| c.started).map(|c| c.clock_ps / 1000).max().unwrap_or(0).max(eng.max_completion_ns)
    };
    // A final partial epoch, if any accesses landed in it.
    let start = eng.measure_start_ns + eng.epoch_idx * eng.epoch_ns;
    if end_ns > start || eng.ts.epoch.is_empty() {
        eng.flush_epoch(end_ns.max(start + 1));
    }
    let exec = end_ns - eng.measure_start_ns;
    let total: u64 = eng.nodes.iter().map(|n| n.total.accesses).sum();
    let fast: u64 = eng.nodes.iter().filter(|n| n.spec.tier == 0).map(|n| n.total.accesses).sum();
    let reads: u64 = eng.nodes.iter().map(|n| n.total.reads).sum();
    let h = &eng.hist;
    let pct = |q: f64| if h.is_empty() { 0 } else { h.value_at_quantile(q) };
    let nodes: Vec<_> = eng
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let secs = exec.max(1) as f64 / 1e9;
            json!({
                "name": n.spec.name,
                "device": n.spec.device,
                "preset": n.spec.preset,
                "tier": n.spec.tier,
                "socket": n.spec.socket,
                "has_cpus": !n.spec.cpus.is_empty(),
                "capacity_bytes": n.capacity * eng.page_size,
                "capacity_pages": n.capacity,
                "watermarks_pages": {"min": n.wmark_min, "low": n.wmark_low, "high": n.wmark_high},
                "accesses": n.total.accesses,
                "reads": n.total.reads,
                "writes": n.total.writes,
                "bytes": n.total.bytes,
                "bandwidth_gbs": n.total.bytes as f64 / secs / 1e9,
                "share": if total > 0 { n.total.accesses as f64 / total as f64 } else { 0.0 },
                "final_pages": n.used,
                "lru_pages": eng.lru_sizes(i),
                "migrated_in": n.total.migrated_in,
                "migrated_out": n.total.migrated_out,
                "peak_pages": n.peak_used,
                "mean_latency_ns": if n.total.accesses > 0 { n.total.latency_sum as f64 / n.total.accesses as f64 } else { 0.0 },
                "idle_read_latency_ns": n.dev.idle_latency(Op::Read, 64),
                "peak_bandwidth_gbs": n.dev.peak_bandwidth() / 1e9,
            })
        })
        .collect();
    let devices: serde_json::Map<String, serde_json::Value> =
        eng.nodes.iter().map(|n| (n.spec.name.clone(), n.dev.stats())).collect();
    let swap = match &eng.swap {
        Some(s) => json!({
            "enabled": true,
            "swap_ins": s.swap_ins,
            "swap_outs": s.swap_outs,
            "bytes_in": s.swap_ins * eng.page_size,
            "bytes_out": s.swap_outs * eng.page_size,
            "final_pages": s.used,
            "capacity_pages": s.capacity,
            "file_drops": s.file_drops,
            "file_writebacks": s.file_writebacks,
            "file_refaults": s.file_refaults,
            "device": s.dev.stats(),
        }),
        None => json!({"enabled": false, "swap_ins": 0, "swap_outs": 0, "bytes_in": 0, "bytes_out": 0, "file_drops": 0, "file_writebacks": 0, "file_refaults": 0}),
    };
    let summary = json!({
        "execution_time_ns": exec,
        "accesses": total,
        "reads": reads,
        "writes": total - reads,
        "trace_accesses": read,
        "warmup_accesses": warmup,
        "measured_from_ns": eng.measure_start_ns,
        "cpus": eng.cpus.iter().filter(|c| c.started).count(),
        "pages_touched": eng.pt.touched,
        "page_size": eng.page_size,
        "fast_tier_hit_ratio": if total > 0 { fast as f64 / total as f64 } else { 0.0 },
        "latency_ns": {
            "mean": if h.is_empty() { 0.0 } else { h.mean() },
            "p50": pct(0.5),
            "p90": pct(0.9),
            "p99": pct(0.99),
            "p999": pct(0.999),
            "max": if h.is_empty() { 0 } else { h.max() },
        },
        "faults": {
            "first_touch": eng.first_touch_faults,
            "swap_in": eng.swap.as_ref().map_or(0, |s| s.swap_ins),
            "fault_time_ns": eng.fault_time_ps / 1000,
        },
        "out_of_order_issues": eng.time_went_back,
        "tiering": {
            "promotions": eng.tiering.promotions,
            "demotions": eng.tiering.demotions,
            "migrations": eng.tiering.migrations,
            "migrated_bytes": eng.tiering.migrated_bytes,
            "hint_faults": eng.tiering.hint_faults,
            "failed_promotions": eng.tiering.failed_promotions,
            "failed_migrations": eng.tiering.failed_migrations,
            "exchanges": eng.tiering.exchanges,
            "exchanged_bytes": eng.tiering.exchanged_bytes,
            "ping_pong": eng.tiering.ping_pong,
            "scans": eng.tiering.scans,
            "scan_passes": eng.scan_seq,
            "scan_time_ns": eng.tiering.scan_time_ps / 1000,
            "hint_fault_time_ns": eng.tiering.hint_fault_time_ps / 1000,
            "migration_time_ns": eng.tiering.migration_time_ps / 1000,
            "device_hints": eng.tiering.device_hints,
        },
        "lru": {
            "pgscan": eng.lru_stats.pgscan,
            "pgsteal": eng.lru_stats.pgsteal,
            "pgactivate": eng.lru_stats.pgactivate,
            "pgdeactivate": eng.lru_stats.pgdeactivate,
        },
        "policy_stats": eng.policy.stats(),
        "nodes": nodes,
        "swap": swap,
        "devices": devices,
    });
    SimResult { summary, timeseries: eng.ts }
}
