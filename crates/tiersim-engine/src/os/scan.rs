//! The NUMA hinting scanner, task_numa_work in kernel/sched/fair.c (policies.md 1.2): windows
//! of the touched address space made PROT_NONE (change_prot_numa) at a period adapted after each
//! pass (update_task_scan_period), each window run by the thread whose own run time says it is
//! due (task_tick_numa); the policy's scan visits and `os.device_hints` ride along.

use serde_json::{Map, Value};
use tiersim_core::{NodeId, Ns};
use tiersim_policies::{ScanSpec, ScanVisit};

use super::{Memory, Metrics};
use crate::pagetable::{CHUNK, CHUNK_SHIFT, DROPPED, NIL, PROT_NONE, UNTOUCHED};

/// task_numa_work's overhead cap: the thread's next window waits 32x the time this one took.
const SCAN_OVERHEAD_HOLD: u64 = 32;

/// One thread's side of task_tick_numa (kernel/sched/fair.c, 6.1): the scanner's work is queued
/// on a thread once its own run time (sum_exec_runtime) passes node_stamp + numa_scan_period, so
/// a thread that has not yet run for a period never scans, however long the program has run.
#[derive(Debug, Clone, Copy)]
struct Task {
    /// When the thread first ran (Ns::MAX: not yet).
    start_ns: Ns,
    /// node_stamp, in the thread's run time.
    stamp_ns: Ns,
    /// The thread's numa_scan_period until it takes the mm's (0 from then on): scan_delay, as
    /// init_numa_balancing sets it.
    own_period_ns: Ns,
}

/// Which pages the scanner hints to devices that accept hints (`os.device_hints`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceHints {
    None,
    /// Every page found accessed.
    Scan,
    /// Pages found accessed at this visit and the previous one.
    ScanHot,
}

/// Scanner activity over the measured part of the run.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ScanStats {
    pub(crate) scans: u64,
    pub(crate) scan_time_ps: u64,
    /// Host hints sent to devices (`os.device_hints`).
    pub(crate) device_hints: u64,
    /// Times a thread was due but the mm's numa_next_scan had not come.
    pub(crate) gated: u64,
}

pub(crate) struct Scanner {
    /// The policy's scanner, if it has one.
    pub(crate) spec: Option<ScanSpec>,
    /// Per thread (trace CPU): the simulated time at which its run time reaches its stamp plus
    /// its period, when `tick` has something to decide (Ns::MAX: never, or no scanner).
    due_ns: Vec<Ns>,
    tasks: Vec<Task>,
    /// mm->numa_next_scan: no window before it, whichever thread is due. None: not set, as in
    /// a new mm (exec gives the program a zeroed one).
    mm_next_ns: Option<Ns>,
    /// The mm's period, adapted after each pass (0 until the first window sets task_scan_start).
    period_ns: Ns,
    /// Two scheduler ticks: a new thread's stagger before its first period (init_numa_balancing).
    stagger_ns: Ns,
    /// The daemon time scale, applied to the TLB shootdown's part of the overhead hold.
    time_scale: f64,
    cursor: u64,
    /// Full passes over the address space so far (mm->numa_scan_seq).
    pub(crate) seq: u64,
    /// The pass at which the period was last adapted (p->numa_scan_seq, for the whole mm).
    placed_seq: u64,
    /// Recorded faults since the period was last adapted: remote, local and failed migrations
    /// (p->numa_faults_locality), then shared and private (the fault types of numa_faults).
    locality: [u64; 3],
    kinds: [u64; 2],
    /// Per node: in the top tier (tiering mode scans only the others).
    top_tier: Vec<bool>,
    /// Per thread (trace CPU): the node it runs on.
    cpu_node: Vec<NodeId>,
    /// The policy wants each visit (`Policy::on_scan`).
    visits: bool,
    device_hints: DeviceHints,
    /// Per node: its devices take the hints.
    hint_nodes: Vec<bool>,
    pte_scan_ps: u64,
    tlb_shootdown_ps: u64,
    pub(crate) stats: ScanStats,
}

/// How the scanner is set up (from the policy and `[os]`).
pub(crate) struct ScannerSetup {
    pub(crate) spec: Option<ScanSpec>,
    pub(crate) top_tier: Vec<bool>,
    pub(crate) cpu_node: Vec<NodeId>,
    pub(crate) visits: bool,
    pub(crate) device_hints: DeviceHints,
    pub(crate) hint_nodes: Vec<bool>,
    pub(crate) pte_scan_ps: u64,
    pub(crate) tlb_shootdown_ps: u64,
    /// The scheduler tick (`os.tick`), scaled like the policy's periods.
    pub(crate) tick_ns: Ns,
    pub(crate) time_scale: f64,
    pub(crate) ncpus: usize,
}

impl Scanner {
    pub(crate) fn new(s: ScannerSetup) -> Scanner {
        let task = Task { start_ns: Ns::MAX, stamp_ns: 0, own_period_ns: 0 };
        Scanner {
            due_ns: vec![Ns::MAX; s.ncpus],
            tasks: vec![task; s.ncpus],
            mm_next_ns: None,
            spec: s.spec,
            period_ns: 0,
            stagger_ns: 2 * s.tick_ns,
            time_scale: s.time_scale,
            cursor: 0,
            seq: 0,
            placed_seq: 0,
            locality: [0; 3],
            kinds: [0; 2],
            top_tier: s.top_tier,
            cpu_node: s.cpu_node,
            visits: s.visits,
            device_hints: s.device_hints,
            hint_nodes: s.hint_nodes,
            pte_scan_ps: s.pte_scan_ps,
            tlb_shootdown_ps: s.tlb_shootdown_ps,
            stats: ScanStats::default(),
        }
    }

    /// One scan window of task_numa_work (policies.md 1.2): walk the touched address space from
    /// the cursor, making present pages PROT_NONE (only pages below the top tier in tiering mode;
    /// pages already PROT_NONE keep their stamp), until a window's worth of present pages or
    /// 8x that much address space; at the end of the address space wrap (the next recorded
    /// fault adapts the period: `fault`). Pages on `local` keep their PTEs (change_pte_range's
    /// single-threaded rule, `tick`).
    /// Returns the scan's cost (ps), charged to the CPU that ran it.
    fn run_scan(&mut self, mem: &mut Memory, spec: ScanSpec, t: Ns, local: Option<NodeId>) -> u64 {
        let page_size = mem.page_size;
        let window = (spec.scan_size / page_size).max(1);
        self.mm_period(mem, spec);
        let t_us = (t / 1000) as u32;
        let (mut walked, mut present_walked) = (0u64, 0u64);
        'walk: loop {
            let cursor_chunk = self.cursor >> CHUNK_SHIFT;
            let Some((&chunk, &base)) = mem.pt.by_address.range(cursor_chunk..).next() else {
                self.cursor = 0;
                self.seq += 1;
                self.threads_take_mm_period();
                break;
            };
            let start = if chunk == cursor_chunk { (self.cursor & (CHUNK as u64 - 1)) as usize } else { 0 };
            for off in start..CHUNK {
                let id = base as usize + off;
                let e = &mut mem.pt.entries[id];
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
                        if self.visits {
                            mem.policy.policy.on_scan(&ScanVisit {
                                page: id as u32,
                                node: e.node as NodeId,
                                accessed,
                                now_ns: t,
                            });
                        }
                        let (node, frame) = (e.node as usize, e.frame);
                        // Never made PROT_NONE, such a page is found accessed at every visit
                        // (AutoTiering's single-threaded local pages never cool: policies.md 8).
                        if accessed && local != Some(node as NodeId) {
                            e.flags |= PROT_NONE;
                            mem.pt.ext_mut(id as u32).scan_us = t_us;
                        }
                        if self.device_hints != DeviceHints::None {
                            self.scan_hint(mem, id, node, frame, accessed, t);
                        }
                    }
                }
                if present_walked >= window || walked >= 8 * window {
                    self.cursor = (chunk << CHUNK_SHIFT) + off as u64 + 1;
                    break 'walk;
                }
            }
            self.cursor = (chunk + 1) << CHUNK_SHIFT;
        }
        let cost = walked * self.pte_scan_ps + self.tlb_shootdown_ps;
        self.stats.scans += 1;
        self.stats.scan_time_ps += cost;
        cost
    }

    /// Thread `c` first runs at `t` (init_numa_balancing, kernel/sched/fair.c, 6.1). The trace's
    /// first thread scans once it has run scan_delay (node_stamp 0, numa_scan_period =
    /// scan_delay). A later one, created by clone(CLONE_VM), starts with node_stamp =
    /// min(task_scan_max, ...) + 2 ticks and the same period; 6.1 takes task_scan_max's
    /// milliseconds for nanoseconds there (a later patch multiplies them by NSEC_PER_MSEC), and so
    /// does this. The second thread is created while the mm has one user, which sets
    /// numa_next_scan to scan_delay from then: a program that starts its threads after a
    /// single-threaded set-up scans no earlier than scan_delay after it. Deviation: a thread is
    /// created when it first runs, and a thread that has ended still counts as a user.
    pub(crate) fn task_starts(&mut self, mem: &Memory, c: usize, t: Ns) {
        let Some(spec) = self.spec else { return };
        if self.tasks[c].start_ns != Ns::MAX {
            return;
        }
        let users = self.users();
        let stamp_ns = if users == 0 {
            0
        } else {
            if users == 1 {
                self.mm_next_ns = Some(t + spec.delay_ns);
            }
            let (_, scan_max) = scan_bounds(mem, spec);
            scan_max / 1_000_000 + self.stagger_ns
        };
        self.tasks[c] = Task { start_ns: t, stamp_ns, own_period_ns: spec.delay_ns };
        self.due_ns[c] = self.due(c);
    }

    /// The mm's users (mm_users): the threads that have started (a thread that ended still
    /// counts, a deviation `task_starts` names).
    fn users(&self) -> usize {
        self.tasks.iter().filter(|k| k.start_ns != Ns::MAX).count()
    }

    /// Thread `c`'s numa_scan_period: its own until it takes the mm's.
    fn period(&self, c: usize) -> Ns {
        let own = self.tasks[c].own_period_ns;
        if own != 0 {
            own
        } else {
            self.period_ns
        }
    }

    /// The mm's period, set to task_scan_start for the present pages if no window has set it.
    fn mm_period(&mut self, mem: &Memory, spec: ScanSpec) -> Ns {
        if self.period_ns == 0 {
            self.period_ns = scan_bounds(mem, spec).0;
        }
        self.period_ns
    }

    /// When thread `c`'s run time reaches its stamp plus its period, in simulated time: the
    /// thread runs whenever it has an access to issue, so its run time is the time since it
    /// started.
    fn due(&self, c: usize) -> Ns {
        let k = &self.tasks[c];
        k.start_ns.saturating_add(k.stamp_ns).saturating_add(self.period(c))
    }

    /// task_tick_numa for thread `c` at `t` (at or past its due time): its stamp moves on by its
    /// period and, if the mm's next scan is due, it runs a window (task_numa_work). Returns the
    /// window's cost (ps), charged to the thread, or None.
    ///
    /// The kernel checks at every tick, so a thread that computes for several periods between
    /// two accesses would scan once a period in between; here the stamp catches up with the
    /// thread's run time, each gate is taken at the time the run time passed the stamp (as the
    /// kernel takes both at the same tick), and one window runs, at the access.
    pub(crate) fn tick(&mut self, mem: &mut Memory, c: usize, t: Ns) -> Option<u64> {
        let spec = self.spec?;
        let k = self.tasks[c];
        if k.own_period_ns == 0 {
            self.mm_period(mem, spec);
        }
        let run = t.saturating_sub(k.start_ns);
        let period = self.period(c);
        if run <= k.stamp_ns + period {
            self.due_ns[c] = self.due(c);
            return None;
        }
        let first = k.stamp_ns + period;
        // The first period of the mm's first thread ends with its period set to task_scan_start
        // (the mm's period from then on).
        if k.stamp_ns == 0 {
            self.tasks[c].own_period_ns = 0;
            self.mm_period(mem, spec);
        }
        let period = self.period(c);
        let mut last = first;
        if run > last + period {
            last += (run - last - 1) / period * period;
        }
        self.tasks[c].stamp_ns = last;
        let mm_next = match self.mm_next_ns {
            Some(next) => next,
            None => {
                // A new mm's first task_numa_work only sets numa_next_scan, scan_delay ahead.
                let next = k.start_ns + first + spec.delay_ns;
                self.mm_next_ns = Some(next);
                if last == first {
                    self.due_ns[c] = self.due(c);
                    return None;
                }
                next
            }
        };
        let mut cost = None;
        if k.start_ns + last < mm_next {
            self.stats.gated += 1;
        } else {
            // "Don't mess with PTEs if page is already on the node a single-threaded process is
            // running on" (change_pte_range, mm/mprotect.c 6.1: target_node while mm_users == 1).
            // Deviation: a thread counts as a user from its first access to the trace's end.
            let local = (self.users() == 1).then(|| self.cpu_node[c]);
            let ps = self.run_scan(mem, spec, t, local);
            // numa_next_scan = now + the period, in jiffies, which a busy thread meets at the
            // same tick as its next stamp, period after period. Not before the window ends,
            // though: through a lens whose period is shorter than a window, other threads would
            // otherwise start windows while this one runs (the kernel's windows are far shorter
            // than its periods).
            self.mm_next_ns = Some((k.start_ns + last).max(t + ps / 1000) + period);
            // "Limit NUMA PTE scanning overhead to 3% max": the thread's stamp moves on by 32x
            // the window's run time (task_numa_work, since 4.5). Through the lens the walk is
            // already scaled (the window's pages are), but the TLB shootdown is the real
            // machine's, so its share of the hold goes through the daemon time scale like the
            // periods the hold adds to. The next period never starts before the window ends,
            // though (the kernel's hold, 32x the window, always is longer than the window), so
            // that a lens whose periods are shorter than a window does not scan back to back.
            let walk_ps = ps - self.tlb_shootdown_ps.min(ps);
            let tlb_ps = (ps - walk_ps) as f64 * self.time_scale;
            let hold_ns = (SCAN_OVERHEAD_HOLD as f64 * (walk_ps as f64 + tlb_ps) / 1000.0) as u64;
            self.tasks[c].stamp_ns = (last + hold_ns).max(run + ps / 1000);
            cost = Some(ps);
        }
        self.due_ns[c] = self.due(c);
        cost
    }

    /// Thread `c`'s due time (`tick` has nothing to do before it).
    #[inline(always)]
    pub(crate) fn due_ns(&self, c: usize) -> Ns {
        debug_assert!(c < self.due_ns.len());
        // SAFETY: due_ns has one entry per CPU of the platform, and the engine's CPU ids index
        // its CPUs (checked when the accesses were read).
        unsafe { *self.due_ns.get_unchecked(c) }
    }

    /// `os.device_hints`: tell the device holding a visited page that it is in use. Accessed means
    /// the PTE was not PROT_NONE: the page was touched since the scanner last protected it (or
    /// has not been visited since it was placed, which was a touch).
    fn scan_hint(&mut self, mem: &mut Memory, id: usize, node: usize, frame: u32, accessed: bool, t: Ns) {
        let ext = mem.pt.ext_mut(id as u32);
        let send = match self.device_hints {
            DeviceHints::None => false,
            DeviceHints::Scan => accessed,
            DeviceHints::ScanHot => accessed && ext.scan_accessed,
        };
        ext.scan_accessed = accessed;
        if send && self.hint_nodes[node] {
            mem.nodes[node].dev.hint(t, u64::from(frame) << mem.page_shift, mem.page_size);
            self.stats.device_hints += 1;
        }
    }

    /// A hint fault by `fault.cpu` at `t` that task_numa_fault records (kernel/sched/fair.c,
    /// 6.1): not one that leaves its page on a slow-tier node in tiering mode, nor, otherwise,
    /// on a page no fault has claimed yet (no cpupid). The first one after a pass has ended
    /// adapts the period from those recorded before it (task_numa_placement ->
    /// update_task_scan_period), then it counts.
    pub(crate) fn fault(&mut self, mem: &Memory, t: Ns, f: &NumaFault) {
        let Some(spec) = self.spec else { return };
        // In tiering mode a slow page's cpupid field holds its scan time, so do_numa_page passes
        // no thread on (-1, a private fault); otherwise a fault is private when the page's last
        // fault was this thread's, shared when another's (threads of one mm join one numa
        // group, task_numa_group, which makes the fault shared).
        let cpupid_valid = f.last_cpu != NIL && (spec.top_tier || self.top_tier[f.page_node as usize]);
        if !self.top_tier[f.mem_node as usize] && (!spec.top_tier || !cpupid_valid) {
            return;
        }
        if self.placed_seq != self.seq {
            self.placed_seq = self.seq;
            self.update_period(mem, spec, t);
        }
        let private = !cpupid_valid || f.last_cpu == f.cpu;
        self.locality[2] += u64::from(f.failed);
        self.locality[usize::from(f.page_node == f.cpu_node)] += 1;
        self.kinds[usize::from(private)] += 1;
    }

    /// update_task_scan_period, for the whole mm (deviation: the kernel keeps a period per
    /// thread, each adapted from its own faults). With no local or shared fault recorded, or a
    /// failed migration, the period doubles and numa_next_scan moves a period ahead; the
    /// counts stay (the kernel returns before clearing them, so a failed migration keeps
    /// doubling it). A tiering-mode process records only promotions, private (the slow page's
    /// cpupid holds its scan time) and remote: its period doubles at every pass that promotes.
    /// Otherwise, in tenths of the period, private or local faults from 7 in 10 up lengthen it and
    /// fewer shorten it.
    fn update_period(&mut self, mem: &Memory, spec: ScanSpec, t: Ns) {
        let (scan_min, scan_max) = scan_bounds(mem, spec);
        let period = self.mm_period(mem, spec);
        let [remote, local, failed] = self.locality;
        let [shared, private] = self.kinds;
        self.kinds = [0; 2];
        if local + shared == 0 || failed > 0 {
            self.period_ns = (period * 2).min(scan_max);
            self.mm_next_ns = Some(t + self.period_ns);
        } else {
            let slot = period.div_ceil(10) as i64;
            let (lr, ps) = ((local * 10 / (local + remote)) as i64, (private * 10 / (private + shared)) as i64);
            let diff = if ps >= 7 {
                (ps - 7).max(1) * slot
            } else if lr >= 7 {
                (lr - 7).max(1) * slot
            } else {
                -(7 - lr.max(ps)) * slot
            };
            self.period_ns = (period as i64 + diff).clamp(scan_min as i64, scan_max as i64) as Ns;
            self.locality = [0; 3];
        }
        self.refresh_due();
    }

    /// At the end of a pass every thread takes the mm's period. Deviation: the kernel's threads
    /// keep their own, each from its own faults (task_numa_placement).
    fn threads_take_mm_period(&mut self) {
        for k in &mut self.tasks {
            k.own_period_ns = 0;
        }
        self.refresh_due();
    }

    /// Each started thread's due time, after its period changed.
    fn refresh_due(&mut self) {
        for c in 0..self.tasks.len() {
            if self.tasks[c].start_ns != Ns::MAX {
                self.due_ns[c] = self.due(c);
            }
        }
    }
}

/// A hint fault, as do_numa_page passes it to task_numa_fault (mm/memory.c, 6.1).
pub(crate) struct NumaFault {
    /// The page's node when it faulted, and after the fault (its new one if it moved).
    pub(crate) page_node: NodeId,
    pub(crate) mem_node: NodeId,
    /// The faulting thread (trace CPU) and its node.
    pub(crate) cpu: u32,
    pub(crate) cpu_node: NodeId,
    /// The thread of the page's previous hint fault (NIL: none).
    pub(crate) last_cpu: u32,
    /// A migration was tried and failed (TNF_MIGRATE_FAIL).
    pub(crate) failed: bool,
}

/// task_scan_min and task_scan_max (ns): at most 2560 MB/s of scanning, and a full pass per
/// period bound, for the present pages.
fn scan_bounds(mem: &Memory, spec: ScanSpec) -> (Ns, Ns) {
    let present: u64 = mem.nodes.iter().map(|n| n.used).sum();
    let windows = (present * mem.page_size).div_ceil(spec.scan_size).max(1);
    let scan_min = (spec.scan_size as f64 * 1e9 / spec.max_rate_bytes_per_s) as u64;
    let scan_min = scan_min.max(spec.period_min_ns / windows).max(1);
    (scan_min, scan_min.max(spec.period_max_ns / windows))
}

impl Metrics for Scanner {
    fn reset(&mut self) {
        self.stats = ScanStats::default();
    }

    fn report(&self, section: &str, into: &mut Map<String, Value>) {
        if section == "tiering" {
            into.insert("scans".into(), self.stats.scans.into());
            into.insert("scan_passes".into(), self.seq.into());
            into.insert("scan_time_ns".into(), (self.stats.scan_time_ps / 1000).into());
            into.insert("device_hints".into(), self.stats.device_hints.into());
            into.insert("scan_gated".into(), self.stats.gated.into());
        }
    }
}
