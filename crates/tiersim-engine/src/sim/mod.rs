//! The event loop: CPUs replay their accesses in global issue-time order; each access is
//! translated through the OS model (`crate::os`) to a node, served by the node's devices, and the
//! CPU's clock advances by its compute gap plus latency / mlp (closed loop) or follows the trace
//! times (open loop). The engine owns the OS model's parts and composes them (`mm.rs`; the file
//! access paths in `filepath.rs`); its state and construction live here, the epochs and time
//! series in `epoch.rs`, the run's summary in `stats.rs`, the invariant checks in `check.rs`.

mod check;
mod epoch;
mod filepath;
mod futex;
mod issue;
mod mm;
mod queue;
mod stats;
mod tlb;

use tiersim_core::{Access, Error, NodeId, Ns, Result};
use tiersim_devices::DeviceRequest;
use tiersim_policies::{NodeInfo, Policy, Topology};
use tiersim_trace::{AccessSource, SplitBatch, TimeUnit};

use crate::epoch_profile::Lookahead;
use crate::node::Node;
use crate::os::fault::HintFaults;
use crate::os::filemap::FileIo;
use crate::os::kswapd::{Kswapd, KswapdCosts};
use crate::os::lru::Lru;
use crate::os::migrate::Migrator;
use crate::os::reclaim::Reclaimer;
use crate::os::scan::{DeviceHints, Scanner, ScannerSetup};
use crate::os::swap::Swap;
use crate::os::workingset;
use crate::os::{Memory, Metrics, PolicyPort};
use crate::pagetable::{
    PageTable, DIRTY, DROPPED, FILE, LOCKED, PROT_NONE, REFERENCED, SWAPCACHE, SWAPPED, UNMAPPED, UNTOUCHED,
};
use crate::platform::Platform;
pub use epoch::Timeseries;
use issue::IssueOrder;
use queue::CpuQueue;
use stats::finish;
pub use stats::LatencyBins;

const BATCH: usize = 1 << 14;

pub(crate) struct Cpu {
    /// Picoseconds, so sub-ns compute gaps and stalls accumulate exactly.
    pub(crate) clock_ps: u64,
    pub(crate) next_issue_ps: u64,
    pub(crate) node: NodeId,
    pub(crate) socket: u16,
    pub(crate) started: bool,
    pub(crate) prev_trace_time: u64,
    pub(crate) last_vpn: u64,
    pub(crate) last_page: u32,
    /// (page, id) of the accesses two and three ahead, looked up when they were three ahead,
    /// by the parity of their position in the CPU's accesses.
    pub(crate) ahead: [(u64, u32); 2],
    /// Accesses of this CPU served so far: its position when a policy epoch begins.
    pub(crate) done: u64,
    pub(crate) queue: CpuQueue,
}

/// Options that do not change results.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimOptions {
    /// Verify the OS model's invariants every this many accesses (0 = never); for tests.
    pub check_every: u64,
}

pub struct SimResult {
    pub summary: serde_json::Value,
    pub timeseries: Timeseries,
    pub latency_hist: LatencyBins,
}

pub(crate) struct Engine {
    /// The nodes, the page table, the topology and the policy: what every OS mechanism works on.
    pub(crate) mem: Memory,
    pub(crate) lru: Lru,
    pub(crate) migrate: Migrator,
    pub(crate) reclaim: Reclaimer,
    pub(crate) kswapd: Kswapd,
    pub(crate) swap: Option<Swap>,
    /// The page cache of file system calls, dirty file pages and their writeback, DAX.
    pub(crate) files: FileIo,
    pub(crate) scanner: Scanner,
    pub(crate) numa: HintFaults,
    /// `host.tlb_entries`: None without a TLB model.
    pub(crate) tlb: Option<tlb::Tlbs>,
    pub(crate) cpus: Vec<Cpu>,
    pub(crate) penalty: Vec<Ns>,
    /// mlp x 1000, so the stall latency / mlp is integer arithmetic.
    pub(crate) mlp_milli: u64,
    /// The stall per ns of latency in ps when mlp divides 1000 ps evenly (the presets' 4 and
    /// 10): a multiply instead of a 64-bit division per access, with the same result.
    pub(crate) stall_ps_per_ns: Option<u64>,
    pub(crate) ps_per_instr: f64,
    pub(crate) open_loop: bool,
    /// `host.writes = "posted"`: a write record costs its CPU nothing.
    pub(crate) posted_writes: bool,
    pub(crate) time_unit: TimeUnit,
    pub(crate) fault_ps: u64,
    pub(crate) swap_fault_ps: u64,
    pub(crate) free_scratch: Vec<u64>,
    // measurement
    pub(crate) measuring: bool,
    pub(crate) measure_start_ns: Ns,
    pub(crate) faults: Faults,
    pub(crate) max_completion_ns: Ns,
    pub(crate) last_issue_ns: Ns,
    pub(crate) time_went_back: u64,
    pub(crate) epoch_ns: Ns,
    pub(crate) epoch_idx: u64,
    /// `measure_start_ns + (epoch_idx + 1) * epoch_ns` once measuring (see `flush_epochs_until`).
    pub(crate) epoch_end_ns: Ns,
    /// `stats.epoch` as given; `epoch_ns` doubles each time the series reaches `max_epochs`.
    pub(crate) requested_epoch_ns: Ns,
    pub(crate) max_epochs: u64,
    pub(crate) ts: Timeseries,
    pub(crate) processed: u64,
    /// A policy's epochs of known future (oracle_dynamic): accesses per epoch, the access count
    /// at which the next begins (u64::MAX: none), its index.
    pub(crate) policy_epoch_len: u64,
    pub(crate) policy_epoch_at: u64,
    pub(crate) policy_epoch: usize,
    /// The trace read ahead for such a policy: each epoch's most-used pages.
    pub(crate) future: Option<Lookahead>,
    /// The futex records' counts, for the summary (the feed keeps them during the run).
    pub(crate) futex: futex::FutexStats,
}

/// Page faults over the measured part of the run, as the access path counts them.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    pub(crate) first_touch: u64,
    /// Time CPUs spent in faults of every kind (ps).
    pub(crate) time_ps: u64,
}

impl Metrics for Faults {
    fn reset(&mut self) {
        *self = Faults::default();
    }

    fn report(&self, section: &str, into: &mut serde_json::Map<String, serde_json::Value>) {
        if section == "faults" {
            into.insert("first_touch".into(), self.first_touch.into());
            into.insert("fault_time_ns".into(), (self.time_ps / 1000).into());
            // Swap reports its own when there is swap.
            into.insert("swap_in".into(), 0.into());
        }
    }
}

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
            Some(s) => Some(Swap::new(
                (tiersim_devices::find(&s.device)?.build)(&s.params)?,
                s.capacity_pages,
                1u64 << platform.os.uint("page_cluster"),
                platform.os.str("swap_readahead") == "vma",
            )),
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
        let cpus: Vec<Cpu> = platform
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
                ahead: [(u64::MAX, 0); 2],
                done: 0,
                queue: CpuQueue::default(),
            })
            .collect();
        let os = &platform.os;
        let mlp_milli = (host.float("mlp") * 1000.0).round() as u64;
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
        let scanner = Scanner::new(ScannerSetup {
            spec: scan,
            top_tier,
            cpu_node: platform.cpu_node.clone(),
            visits: scan_visits,
            device_hints,
            hint_nodes,
            pte_scan_ps: os.duration("pte_scan_cost") * 1000,
            tlb_shootdown_ps: os.duration("tlb_shootdown") * 1000,
            tick_ns: topo.scaled_time(os.duration("tick")),
            time_scale: topo.time_scale,
            ncpus: cpus.len(),
        });
        let migrate = Migrator::new(
            os.duration("migrate_overhead") * 1000,
            os.duration("tlb_shootdown") * 1000,
            platform.stats.duration("ping_pong_window"),
            protect_demoted,
        );
        let pt = PageTable::new(scan.is_some());
        let total_pages: u64 = nodes.iter().map(|n| n.capacity).sum();
        Ok(Engine {
            mem: Memory {
                nodes,
                pt,
                topo,
                policy: PolicyPort::new(policy),
                page_size: platform.page_size,
                page_shift: platform.page_size.trailing_zeros(),
            },
            lru: Lru::new(
                os.uint("swappiness"),
                os.str("new_anon_list") == "active",
                workingset::Mode::parse(os.str("workingset")),
                total_pages,
            ),
            migrate,
            reclaim: Reclaimer::new(demote_to, reclaim_goal, os.uint("reclaim_batch")),
            kswapd: Kswapd::new(
                n,
                os.uint("reclaim_batch"),
                KswapdCosts {
                    page_ps: os.duration("kswapd_page_cost") * 1000,
                    scan_ps: os.duration("kswapd_scan_cost") * 1000,
                    tlb_ps: os.duration("tlb_shootdown") * 1000,
                    cpu_share: os.float("kswapd_cpu_share"),
                },
            ),
            swap,
            files: FileIo::new(platform)?,
            scanner,
            numa: HintFaults::new(os.duration("hint_fault_latency") * 1000, platform.watermarks.clone()),
            tlb: tlb::Tlbs::new(
                host.uint("tlb_entries"),
                host.uint("tlb_ways"),
                host.duration("tlb_miss_latency") * 1000,
                host.str("tlb_lookups") == "reads",
                cpus.len(),
            )?,
            cpus,
            penalty,
            mlp_milli,
            stall_ps_per_ns: (1_000_000 % mlp_milli == 0).then(|| 1_000_000 / mlp_milli),
            ps_per_instr: host.float("cpi") * 1000.0 / freq_ghz,
            open_loop: host.str("mode") == "open",
            posted_writes: host.str("writes") == "posted",
            time_unit,
            fault_ps: os.duration("fault_latency") * 1000,
            swap_fault_ps: os.duration("swap_fault_latency") * 1000,
            free_scratch: vec![0; n],
            measuring: false,
            measure_start_ns: 0,
            faults: Faults::default(),
            max_completion_ns: 0,
            last_issue_ns: 0,
            time_went_back: 0,
            epoch_ns: platform.stats.duration("epoch"),
            epoch_idx: 0,
            epoch_end_ns: Ns::MAX,
            requested_epoch_ns: platform.stats.duration("epoch"),
            // Even, so that coarsening merges whole pairs.
            max_epochs: platform.stats.uint("max_epochs") & !1,
            ts: Timeseries::default(),
            processed: 0,
            policy_epoch_len: epoch_len.unwrap_or(u64::MAX),
            policy_epoch_at: if epoch_len.is_some() { 0 } else { u64::MAX },
            policy_epoch: 0,
            future: None,
            futex: Default::default(),
        })
    }

    /// Issue time (ps) of `a`, the next access of CPU `cpu`. Closed loop: the CPU's clock plus the
    /// compute gap before `a` (instructions x CPI / frequency, or the trace's ns delta). Open loop
    /// with ns traces: the trace time itself, relative to the trace's first access at `t0`. A CPU
    /// that first appears late in the stream starts at the current simulated time.
    fn first_issue_ps(&self, cpu: &Cpu, a: &Access, t0: u64) -> u64 {
        self.start_issue_ps(cpu, a, t0, self.last_issue_ns * 1000)
    }

    /// An open loop on a ns trace issues at the trace's own times, which already order it.
    fn at_trace_times(&self) -> bool {
        self.open_loop && self.time_unit == TimeUnit::Ns
    }

    /// `first_issue_ps` with the current simulated time `now_ps` given: for a CPU held back
    /// until the records before its first one (`host.thread_start = "file_order"`) were done,
    /// the last at `now_ps`.
    fn start_issue_ps(&self, cpu: &Cpu, a: &Access, t0: u64, now_ps: u64) -> u64 {
        let clock = IssueClock::of(self);
        if cpu.started || self.at_trace_times() {
            return clock.next_issue_ps(cpu, a, t0);
        }
        match self.time_unit {
            TimeUnit::Ns => (a.time.saturating_sub(t0) * 1000).max(now_ps),
            TimeUnit::Instructions => now_ps + instr_ps(a.time, self.ps_per_instr),
        }
    }

    /// CPU `c`, one the issue order handed out. Every CPU the order holds passed the check
    /// `c < ncpus` (the batch split's limit) when its accesses were read, and `cpus` never
    /// changes length, so the index needs no bounds check on the access path.
    #[inline(always)]
    fn cpu(&self, c: usize) -> &Cpu {
        debug_assert!(c < self.cpus.len());
        // SAFETY: c < cpus.len(), as above.
        unsafe { self.cpus.get_unchecked(c) }
    }

    #[inline(always)]
    fn cpu_mut(&mut self, c: usize) -> &mut Cpu {
        debug_assert!(c < self.cpus.len());
        // SAFETY: as in `cpu`.
        unsafe { self.cpus.get_unchecked_mut(c) }
    }

    /// Serve CPU `c`'s access `a` at its issue time. If the page must first be faulted in, the
    /// fault is handled now and the access is deferred: `Ok(Some(t))` asks the caller to issue
    /// it again at `t` (ps), after the fault, in its turn among the other CPUs, so that devices
    /// always see requests in time order.
    fn access(&mut self, c: usize, a: Access) -> Result<Option<u64>> {
        // The CPU's fields read up front, once.
        let cpu = self.cpu(c);
        let (issue_ps, cached_vpn, cached_page) = (cpu.next_issue_ps, cpu.last_vpn, cpu.last_page);
        let (cpu_node, socket) = (cpu.node as usize, cpu.socket);
        let issue_ns = issue_ps / 1000;
        if issue_ns < self.last_issue_ns {
            self.time_went_back += 1;
        } else {
            self.last_issue_ns = issue_ns;
        }
        self.flush_epochs_until(issue_ns);

        let vpn = a.addr >> self.mem.page_shift;
        let p = if cached_vpn == vpn {
            cached_page
        } else {
            let p = self.mem.pt.slot(vpn)?;
            let cpu = self.cpu_mut(c);
            cpu.last_vpn = vpn;
            cpu.last_page = p;
            p
        };
        if issue_ns >= self.kswapd.next_ns {
            self.kswapd_catch_up(issue_ns)?;
        }
        if issue_ns >= self.scanner.due_ns(c) {
            if let Some(cost) = self.scanner.tick(&mut self.mem, c, issue_ns) {
                if let Some(tlb) = &mut self.tlb {
                    tlb.flush_all(self.measuring);
                }
                return Ok(Some(issue_ps + cost));
            }
        }
        if self.processed >= self.policy_epoch_at {
            let cost = self.policy_epoch(issue_ns)?;
            return Ok(Some(issue_ps + cost));
        }
        if a.flags & (Access::SYSCALL | Access::DIRECT | Access::MAP) != 0 || (a.is_file() && self.files.on_dax(vpn)) {
            return self.file_access(c, a, issue_ps);
        }
        let entry = *self.mem.pt.entry(p);
        // Not resident, mapped from the swap cache or PROT_NONE: the OS model first.
        if entry.node >= DROPPED || entry.flags & (SWAPCACHE | PROT_NONE) != 0 {
            if let Some(retry_ps) = self.fault(c, p, vpn, issue_ps, &a)? {
                return Ok(Some(retry_ps));
            }
        }
        if self.tlb.is_some() {
            if let Some(walk_ps) = self.tlb_lookup(c, vpn, p, &a) {
                return Ok(Some(issue_ps + walk_ps));
            }
        }
        let w = usize::from(a.op.is_write());
        let entry = self.mem.pt.entry_mut(p);
        let dirtied_file = w == 1 && entry.flags & (FILE | DIRTY) == FILE;
        entry.flags = (entry.flags & !LOCKED) | REFERENCED | [0, DIRTY][w];
        let node = entry.node as usize;
        let addr = ((entry.frame as u64) << self.mem.page_shift) | (a.addr & (self.mem.page_size - 1));

        let t_ps = issue_ps;
        let t = t_ps / 1000;
        // Resident pages hold a node id below nodes.len() (allocation and migration set no
        // other), and a CPU's node indexed the platform's nodes when the engine was built: both
        // indexes are in bounds.
        debug_assert!(node < self.mem.nodes.len() && cpu_node < self.mem.nodes.len());
        // SAFETY: penalty has nodes.len()^2 entries; see above.
        let penalty = unsafe { *self.penalty.get_unchecked(cpu_node * self.mem.nodes.len() + node) };
        // SAFETY: as above.
        let n = unsafe { self.mem.nodes.get_unchecked_mut(node) };
        let remote = socket != n.spec.socket;
        let done = n.dev.access_local(&mut DeviceRequest {
            now: t,
            addr,
            size: a.size as u32,
            op: a.op,
            socket,
            cpu: c as u32,
            remote,
        });
        let latency = done - t + penalty;

        if self.measuring {
            let ctr = &mut n.epoch;
            ctr.accesses += 1;
            ctr.bytes += a.size as u64;
            ctr.latency_sum += latency;
            ctr.writes += w as u64;
            n.hist.record(latency.max(1));
            self.max_completion_ns = self.max_completion_ns.max(t + latency);
        }

        if dirtied_file {
            // A store to a mapped file page dirties it for the flusher; the writer is not
            // throttled here (the kernel's page_mkwrite path may be).
            self.file_dirtied(c, p, t);
        }
        let stall_ps = if w == 1 && self.posted_writes {
            0
        } else {
            match self.stall_ps_per_ns {
                Some(k) => latency * k,
                None => (latency * 1_000_000).div_ceil(self.mlp_milli),
            }
        };
        let open_loop = self.open_loop;
        let cpu = self.cpu_mut(c);
        cpu.clock_ps = if open_loop { t_ps } else { t_ps + stall_ps };
        cpu.prev_trace_time = a.time;
        cpu.started = true;
        cpu.done += 1;
        self.processed += 1;
        Ok(None)
    }

    /// CPU `c`'s TLB lookup of page `p` (`vpn`) for `a`: the walk's time (ps) on a miss, after
    /// which the access issues again; None on a hit or an access the TLB does not translate.
    /// Apart from `access` so that a platform without a TLB pays one test.
    #[inline(never)]
    fn tlb_lookup(&mut self, c: usize, vpn: u64, p: u32, a: &Access) -> Option<u64> {
        let tlb = self.tlb.as_mut()?;
        if tlb.reads_only && a.op.is_write() {
            return None;
        }
        let e = self.mem.pt.entry(p);
        (!tlb.hit(c, vpn, e.frame, e.node, self.measuring)).then_some(tlb.miss_ps)
    }

    /// The access path's OS work for a page that is not plainly resident: a first touch, a
    /// swap-in, a file refault, a swap-cache mapping or a NUMA hint fault. `Some(t)`: issue the
    /// access again at `t` (ps); None: it proceeds now.
    #[cold]
    #[inline(never)]
    fn fault(&mut self, c: usize, p: u32, vpn: u64, issue_ps: u64, a: &Access) -> Result<Option<u64>> {
        let issue_ns = issue_ps / 1000;
        let e = self.mem.pt.entries[p as usize];
        let fault_ps = match e.node {
            // A page of a file a mapping record names: filemap_fault, with read-around.
            UNTOUCHED | DROPPED
                if (a.is_file() || e.node == DROPPED) && self.swap.is_some() && self.files.mapped(vpn) =>
            {
                self.filemap_fault(c, p, vpn, issue_ns, a.op.is_write())?
            }
            UNTOUCHED => {
                self.mem.pt.touched += 1;
                if a.is_file() {
                    self.files.stats.unread_first_touches += 1;
                } else if self.files.mapped(vpn) {
                    return Err(tiersim_core::Error::Sim(format!(
                        "access #{}: an anonymous access to page {vpn:#x}, inside a file a mapping record maps; \
                         accesses to a mapped file carry flag bit 0",
                        self.processed
                    )));
                }
                // New page-cache pages start inactive (add_to_page_cache_lru); anon per new_anon_list.
                let flags = if a.is_file() { FILE } else { self.lru.new_anon_flags() };
                let (_, reclaim_ps) = self.alloc(p, c, vpn, issue_ns, flags)?;
                self.faults.first_touch += 1;
                self.fault_ps + reclaim_ps
            }
            // Also on the cached path: another CPU's reclaim may have swapped the page out.
            SWAPPED => self.swap_in(p, c, vpn, issue_ns)?,
            DROPPED => self.file_refault(p, c, vpn, issue_ns)?,
            // A page-cache page no PTE maps yet: a minor fault, with fault-around.
            _ if e.flags & (FILE | UNMAPPED) == FILE | UNMAPPED => {
                self.filemap_fault(c, p, vpn, issue_ns, a.op.is_write())?
            }
            _ if e.flags & SWAPCACHE != 0 => self.swap_cache_map(p),
            _ => 0,
        };
        if fault_ps > 0 {
            self.faults.time_ps += fault_ps;
            return Ok(Some(issue_ps + fault_ps));
        }
        if self.mem.pt.entries[p as usize].flags & PROT_NONE != 0 {
            let cost = self.hint_fault(c, p, issue_ns, a.op.is_write());
            return Ok(Some(issue_ps + cost));
        }
        Ok(None)
    }
}

/// What sets issue times, copied out of the engine so the event loop can use it while it
/// holds a CPU mutably.
#[derive(Clone, Copy)]
struct IssueClock {
    time_unit: TimeUnit,
    open_loop: bool,
    ps_per_instr: f64,
}

impl IssueClock {
    fn of(eng: &Engine) -> IssueClock {
        IssueClock { time_unit: eng.time_unit, open_loop: eng.open_loop, ps_per_instr: eng.ps_per_instr }
    }

    /// `Engine::first_issue_ps` for a CPU that has issued before (or any CPU of an open loop
    /// on a ns trace), the case of every access but a CPU's first.
    #[inline(always)]
    fn next_issue_ps(self, cpu: &Cpu, a: &Access, t0: u64) -> u64 {
        match self.time_unit {
            TimeUnit::Instructions => cpu.clock_ps + instr_ps(a.time, self.ps_per_instr),
            TimeUnit::Ns if self.open_loop => a.time.saturating_sub(t0) * 1000,
            TimeUnit::Ns => cpu.clock_ps + a.time.saturating_sub(cpu.prev_trace_time) * 1000,
        }
    }
}

/// `instructions * ps_per_instr` in whole ps, as `(instructions as f64 * ps_per_instr) as u64`.
/// For gaps below 2^52 (all but absurd ones) the integer goes to f64 by placing it in the
/// mantissa of 2^52 and subtracting 2^52, exact, in two instructions; LLVM lowers the plain
/// conversion of a non-negative u64 as the unsigned one, a dozen on x86-64 before AVX-512.
#[inline]
fn instr_ps(instructions: u64, ps_per_instr: f64) -> u64 {
    const TWO_52: f64 = 4_503_599_627_370_496.0;
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if instructions < 1 << 52 {
        let n = f64::from_bits(TWO_52.to_bits() | instructions) - TWO_52;
        let ps = n * ps_per_instr;
        if (0.0..LIMIT).contains(&ps) {
            // SAFETY: ps is in [0, 2^63), so truncated it fits an i64: the same value `as`
            // gives, without its saturation and NaN tests.
            return unsafe { ps.to_int_unchecked::<i64>() } as u64;
        }
    }
    (instructions as f64 * ps_per_instr) as u64
}

/// The trace's side of the event loop: its batches, the accesses queued and not yet issued, the
/// CPUs whose queues ran dry.
struct Feed {
    batch: SplitBatch,
    eof: bool,
    read: u64,
    buffered: usize,
    /// CPUs the issue order holds with nothing queued.
    dry: usize,
    /// The trace's first access time.
    t0: Option<u64>,
    /// Accesses read ahead of the slowest CPU at most; past this a CPU whose queue ran dry no
    /// longer holds the others back (its next access may then be issued out of time order).
    max_buffered: usize,
    /// Records to read at most (stats.replay_accesses; 0: all).
    limit: u64,
    /// The first measured file position (stats.warmup_accesses; 0: the run is measured from
    /// its start), and whether the batch holding it has been read (`measure_from` set).
    warmup: u64,
    marked: bool,
    /// Per CPU, the position (as `Cpu::done`) of its first access at file position `warmup` or
    /// later, once the batch holding that position is read (u64::MAX before): measuring starts
    /// when the issuing CPU has reached it. Here, not in `Cpu`: a test that runs only in the
    /// warm-up need not widen the struct the event loop reads at every access.
    measure_from: Vec<u64>,
    /// The batch holding position `warmup` (every batch with `file_order`), as read, to count
    /// each CPU's records before a position.
    raw: Vec<Access>,
    /// `host.thread_start = "file_order"`: a CPU's first access waits until every record before
    /// it in the file has been served.
    file_order: bool,
    /// Per CPU held back that way (None for the others): the CPUs whose records before its
    /// first it still waits for, each with the count of served accesses (`Cpu::done`) that
    /// covers them, and the latest clock of those already reached.
    waits: Vec<Option<Wait>>,
    /// Per CPU, the smallest such count a held-back CPU waits for (u64::MAX: none).
    release_at: Vec<u64>,
    /// CPUs held back.
    gated: usize,
    /// The futex records read and the waits they impose (`futex.rs`).
    futex: futex::Futexes,
    /// Per CPU, the records issued when its queue last ran dry. `fill` reads on while a queue is
    /// dry, up to `max_buffered`: if more were issued by the time its next records are read, the
    /// others went on without it, and it starts no earlier than the simulated time then reached.
    dry_at: Vec<u64>,
}

/// A CPU held back until the records before its first one are done.
struct Wait {
    pending: Vec<(usize, u64)>,
    start_ps: u64,
}

impl Feed {
    /// Records issued so far: read from the trace and no longer waiting in a CPU's queue.
    fn issued(&self) -> u64 {
        self.read - self.buffered as u64
    }

    /// Read batches while no CPU has work, or while a CPU's queue ran dry and fewer than
    /// `max_buffered` accesses wait. Out of line: the event loop calls it about once a batch.
    #[inline(never)]
    fn fill(&mut self, source: &mut dyn AccessSource, eng: &mut Engine, order: &mut IssueOrder) -> Result<()> {
        let ncpus = eng.cpus.len();
        while !self.eof && (order.first().is_none() || (self.dry > 0 && self.buffered < self.max_buffered)) {
            // Split by CPU on the decoding thread when the source has one: each CPU's part
            // joins its queue whole.
            let max = if self.limit == 0 { BATCH } else { BATCH.min((self.limit - self.read) as usize) };
            if max == 0 {
                self.eof = true;
                break;
            }
            // The batch that may hold position `warmup` is read whole and split here, to count
            // each CPU's records before it; the same records as `read_split` would read (the
            // same `max`), so the replay does not change.
            // So is every batch when threads start in file order, to count the records before
            // each new thread's first.
            let at_warmup =
                !self.marked && self.warmup > 0 && self.warmup.checked_sub(self.read).is_some_and(|i| i < max as u64);
            let n = if at_warmup || self.file_order {
                self.raw.clear();
                let n = source.read_batch(&mut self.raw, max)?;
                self.batch.split(&self.raw, ncpus);
                if at_warmup && n > 0 && self.batch.beyond.is_none() {
                    self.mark(eng);
                }
                n
            } else {
                source.read_split(&mut self.batch, max, ncpus)?
            };
            if n == 0 {
                self.eof = true;
                break;
            }
            if let Some((i, c)) = self.batch.beyond {
                return Err(Error::Sim(format!(
                    "access #{} is from cpu {c}, but the platform has {ncpus} CPUs (host.cpus); \
                     use a platform with more CPUs or remap the trace",
                    self.read + i as u64
                )));
            }
            self.futex.read(&self.batch, eng, self.read)?;
            self.read += n as u64;
            self.buffered += n;
            let t0 = *self.t0.get_or_insert(self.batch.first_time.unwrap_or(0));
            if self.file_order {
                self.gate_new_cpus(eng);
            }
            for &c in &self.batch.cpus {
                let (c, part) = (c as usize, &self.batch.per_cpu[c as usize]);
                let was_empty = eng.cpus[c].queue.is_empty();
                eng.cpus[c].queue.extend_from_slice(part);
                if was_empty {
                    if eng.cpus[c].started {
                        self.dry -= 1;
                    }
                    if self.waits[c].is_some() {
                        // Held back: `release` starts it.
                        continue;
                    }
                    let mut issue = eng.first_issue_ps(&eng.cpus[c], &part[0], t0);
                    let passed = self.issued() > self.dry_at[c];
                    if eng.cpus[c].started && passed && !eng.at_trace_times() {
                        // More than `max_buffered` records of the others came before its next
                        // one: in the program it did not run then (a thread blocked on a lock or
                        // condition variable, or asleep), so it resumes now, as a thread that
                        // first appears late starts now; its own clock would put it seconds in
                        // the past, behind requests the devices have already served.
                        issue = issue.max(eng.last_issue_ns * 1000);
                    }
                    if !eng.cpus[c].started {
                        eng.scanner.task_starts(&eng.mem, c, issue / 1000);
                    }
                    eng.cpus[c].next_issue_ps = issue;
                    order.set(c, issue);
                }
            }
        }
        Ok(())
    }

    /// `host.thread_start = "file_order"`, for the batch just read (in `raw`) and not yet
    /// queued: each CPU whose first record it holds waits for every record before that one, its
    /// own thread created only after them (Valgrind runs one thread at a time, so the file's
    /// order is the order they ran in). The records before the batch are each CPU's served and
    /// queued ones; those in the batch are counted up to the new CPU's first. A CPU with none
    /// left unserved starts as with `read`, now.
    #[cold]
    fn gate_new_cpus(&mut self, eng: &Engine) {
        let fresh = |c: usize| !eng.cpus[c].started && eng.cpus[c].queue.is_empty();
        if !self.batch.cpus.iter().any(|&c| fresh(c as usize) && self.waits[c as usize].is_none()) {
            return;
        }
        let mut counts: Vec<u64> = eng.cpus.iter().map(|cpu| cpu.done + cpu.queue.len() as u64).collect();
        let mut seen = vec![false; eng.cpus.len()];
        for a in &self.raw {
            let c = a.cpu as usize;
            if !seen[c] {
                seen[c] = true;
                if fresh(c) && self.waits[c].is_none() {
                    let pending: Vec<(usize, u64)> =
                        (0..counts.len()).filter(|&o| counts[o] > eng.cpus[o].done).map(|o| (o, counts[o])).collect();
                    if !pending.is_empty() {
                        for &(o, target) in &pending {
                            self.release_at[o] = self.release_at[o].min(target);
                        }
                        self.waits[c] = Some(Wait { pending, start_ps: 0 });
                        self.gated += 1;
                    }
                }
            }
            counts[c] += 1;
        }
    }

    /// CPU `c` has just served an access, reaching its count `release_at[c]`: each CPU waiting
    /// for it notes its clock (the access's issue time plus its stall, or a system call's
    /// return: the capture writes a call's records when it returns), and one that waits for
    /// nothing more starts, its first access issued after the latest of them
    /// (`Engine::start_issue_ps` with that as now).
    #[cold]
    #[inline(never)]
    fn release(&mut self, c: usize, eng: &mut Engine, order: &mut IssueOrder) {
        let (done, now_ps) = (eng.cpus[c].done, eng.cpus[c].clock_ps);
        let t0 = self.t0.unwrap_or(0);
        let mut next = u64::MAX;
        for w in 0..self.waits.len() {
            let Some(wait) = self.waits[w].as_mut() else { continue };
            wait.pending.retain(|&(on, target)| {
                if on != c {
                    return true;
                }
                if target > done {
                    next = next.min(target);
                    return true;
                }
                wait.start_ps = wait.start_ps.max(now_ps);
                false
            });
            if !wait.pending.is_empty() {
                continue;
            }
            let start_ps = wait.start_ps;
            self.waits[w] = None;
            self.gated -= 1;
            let a = *eng.cpus[w].queue.front().expect("a CPU held back has its first access queued");
            let issue = eng.start_issue_ps(&eng.cpus[w], &a, t0, start_ps);
            eng.scanner.task_starts(&eng.mem, w, issue / 1000);
            eng.cpus[w].next_issue_ps = issue;
            order.set(w, issue);
        }
        self.release_at[c] = next;
    }

    /// If the batch just read (in `raw`, not yet queued) holds file position `warmup`, give
    /// each CPU the position of its first access from there on: its accesses served and
    /// queued, plus its records of the batch before that position. Every record read later is
    /// past it. With `host.thread_start = "file_order"` only the CPU of the record at `warmup`
    /// gets one: measuring starts at that record's own issue. No thread that starts after it in
    /// the file can be issued before it, and a thread already running whose later records are
    /// issued before it has run ahead of the program (the waits that held it back, a condition
    /// variable or a timed sleep, are not in the trace, unless it has futex records).
    #[cold]
    fn mark(&mut self, eng: &Engine) {
        let Some(i) = self.warmup.checked_sub(self.read).map(|i| i as usize).filter(|&i| i < self.raw.len()) else {
            return;
        };
        let mut before = vec![0u64; eng.cpus.len()];
        for a in &self.raw[..i] {
            before[a.cpu as usize] += 1;
        }
        let at = self.raw[i].cpu as usize;
        for (c, ((from, cpu), before)) in self.measure_from.iter_mut().zip(&eng.cpus).zip(before).enumerate() {
            if !self.file_order || c == at {
                *from = cpu.done + cpu.queue.len() as u64 + before;
            }
        }
        self.marked = true;
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
    simulate_with_future(platform, policy, source, None, opts)
}

/// `simulate`, telling a policy with epochs (`Policy::epoch_profile`) each epoch's most-used
/// pages from `future`, which reads the same trace ahead of the run.
pub fn simulate_with_future(
    platform: &Platform,
    policy: Box<dyn Policy>,
    source: &mut dyn AccessSource,
    future: Option<Lookahead>,
    opts: SimOptions,
) -> Result<SimResult> {
    let header = source.header().clone();
    let mut eng = Engine::new(platform, policy, header.time_unit)?;
    if let Some(stats) = header.stats.as_ref().filter(|_| u64::from(header.page_size) == platform.page_size) {
        eng.mem.pt.reserve(stats.footprint_pages);
    }
    eng.future = future;
    let warmup = platform.stats.uint("warmup_accesses");
    let replay = platform.stats.uint("replay_accesses");
    if replay > 0 && warmup >= replay {
        return Err(Error::Sim(format!(
            "stats.warmup_accesses = {warmup} is not smaller than stats.replay_accesses = {replay}; nothing would be measured"
        )));
    }
    let mut feed = Feed {
        batch: SplitBatch::default(),
        eof: false,
        read: 0,
        buffered: 0,
        dry: 0,
        t0: None,
        max_buffered: platform.host.uint("read_ahead") as usize,
        limit: replay,
        warmup,
        marked: false,
        measure_from: vec![u64::MAX; eng.cpus.len()],
        raw: Vec::new(),
        file_order: platform.host.str("thread_start") == "file_order" && !eng.at_trace_times(),
        waits: (0..eng.cpus.len()).map(|_| None).collect(),
        release_at: vec![u64::MAX; eng.cpus.len()],
        gated: 0,
        futex: Default::default(),
        dry_at: vec![0; eng.cpus.len()],
    };
    let mut order = IssueOrder::new();
    let clock = IssueClock::of(&eng);
    if warmup == 0 {
        eng.start_measuring(0);
    }

    loop {
        // Once the first batch is in, every CPU the order holds without work counts in `dry`,
        // so `fill`'s condition can only hold when `dry > 0`.
        if feed.dry > 0 || feed.read == 0 {
            feed.fill(source, &mut eng, &mut order)?;
        }
        let Some((_, c)) = order.first() else {
            if feed.futex.blocked > 0 {
                eng.release_blocked(&mut feed.futex, &mut order);
                continue;
            }
            break;
        };
        let a = *eng.cpu(c).queue.front().expect("a CPU in the issue order has work");
        // Measuring starts when the first record at file position `warmup` or later is issued:
        // the CPUs' accesses interleave in simulated time, not in the file's order
        // (docs/platform.md, stats.warmup_accesses). Once measuring, only the first test runs.
        if !eng.measuring && eng.cpu(c).done >= feed.measure_from[c] {
            let t = eng.cpu(c).next_issue_ps / 1000;
            eng.start_measuring(t);
        }
        let mut woken = false;
        if a.flags == Access::FUTEX {
            if let futex::Served::Blocked = eng.futex(&mut feed.futex, c, a, &mut order) {
                continue;
            }
            woken = !feed.futex.woken.is_empty();
        } else if let Some(retry_ps) = eng.access(c, a)? {
            eng.cpu_mut(c).next_issue_ps = retry_ps;
            order.set_first(c, retry_ps);
            continue;
        }
        feed.buffered -= 1;
        if opts.check_every > 0 && eng.processed % opts.check_every == 0 {
            eng.check()?;
        }
        let page_shift = eng.mem.page_shift;
        // SAFETY: as in `Engine::cpu`; a field borrow, so the page table stays usable beside it.
        let cpu = unsafe { eng.cpus.get_unchecked_mut(c) };
        cpu.queue.pop_front();
        match cpu.queue.front().copied() {
            Some(next) => {
                // The page entry of this CPU's access three ahead is fetched now, about
                // 3 x ncpus accesses before it is used: on a random trace over 1M pages one
                // round (ncpus accesses, about 1 us) left a quarter of the loop's time on the
                // entry's load (perf, BENCHMARKS.md). Page ids never move, so the id looked up
                // for the prefetch stands in for the lookup at issue time, two rounds later:
                // `done` is the next access's position, and the one three ahead has its parity.
                let vpn = next.addr >> page_shift;
                let slot = cpu.done as usize & 1;
                if cpu.ahead[slot].0 == vpn {
                    cpu.last_vpn = vpn;
                    cpu.last_page = cpu.ahead[slot].1;
                    // Its entry has had two rounds to arrive; a first touch's LRU link store
                    // missed the cache in `alloc` (BENCHMARKS.md, eighth pass).
                    eng.mem.pt.prefetch_link_if_new(cpu.last_page);
                } else if let Some(p) = eng.mem.pt.prefetch(vpn) {
                    cpu.last_vpn = vpn;
                    cpu.last_page = p;
                }
                if let Some(later) = cpu.queue.get(2) {
                    let vpn = later.addr >> page_shift;
                    if let Some(p) = eng.mem.pt.prefetch(vpn) {
                        cpu.ahead[slot] = (vpn, p);
                    }
                }
                let issue = clock.next_issue_ps(cpu, &next, feed.t0.unwrap_or(0));
                cpu.next_issue_ps = issue;
                order.set_first(c, issue);
            }
            None => {
                order.idle(c);
                feed.dry += 1;
                feed.dry_at[c] = feed.issued();
            }
        }
        if woken {
            eng.wake_up(&mut feed.futex, &mut order);
        }
        if feed.gated > 0 && eng.cpu(c).done >= feed.release_at[c] {
            feed.release(c, &mut eng, &mut order);
        }
    }
    if feed.gated > 0 {
        return Err(Error::Sim(format!(
            "{} CPUs never started: the records before their first were not issued",
            feed.gated
        )));
    }
    if opts.check_every > 0 {
        eng.check()?;
    }
    let read = feed.read;
    if read == 0 {
        return Err(Error::Sim("the trace holds no accesses".into()));
    }
    if replay > read {
        return Err(Error::Sim(format!("stats.replay_accesses = {replay} is more than the trace's {read} accesses")));
    }
    if !eng.measuring {
        return Err(Error::Sim(format!(
            "stats.warmup_accesses = {warmup} is not smaller than the trace's {read} accesses; nothing was measured"
        )));
    }
    if let Some(addr) = eng.files.dax_file_never_mapped() {
        return Err(Error::config(
            "dax.files",
            format!(
                "lists {addr:#x}, where no mapping record of the trace starts a file (a file is given by the byte address of its first mapping record)"
            ),
        ));
    }
    eng.futex = std::mem::take(&mut feed.futex.stats);
    Ok(finish(eng, read, warmup))
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::instr_ps;

    /// The same product as the plain unsigned conversions, at the edges and over random inputs.
    #[test]
    fn instr_ps_matches_unsigned_conversions() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let plain = |n: u64, k: f64| (n as f64 * k) as u64;
        let edges = [
            0,
            1,
            3,
            u32::MAX as u64,
            1 << 32,
            (1 << 52) - 1,
            1 << 52,
            (1 << 53) + 1,
            i64::MAX as u64,
            1 << 63,
            u64::MAX,
        ];
        for k in [0.0, 0.001, 0.4444444444444444, 1.0, 2.5, 1e6, 1e9, 3e9, f64::INFINITY, f64::NAN] {
            for n in edges {
                assert_eq!(instr_ps(n, k), plain(n, k), "{n} x {k}");
            }
            for _ in 0..10_000 {
                let n = rng.gen::<u64>() >> rng.gen_range(0..64);
                assert_eq!(instr_ps(n, k), plain(n, k), "{n} x {k}");
            }
        }
    }
}
