//! The NUMA hinting scanner, task_numa_work in kernel/sched/fair.c (policies.md 1.2): windows
//! of the touched address space made PROT_NONE (change_prot_numa) at a period adapted after each
//! pass (update_task_scan_period); the policy's scan visits and `os.device_hints` ride along.

use serde_json::{Map, Value};
use tiersim_core::{NodeId, Ns};
use tiersim_policies::{ScanSpec, ScanVisit};

use super::{Memory, Metrics};
use crate::pagetable::{CHUNK, CHUNK_SHIFT, DROPPED, PROT_NONE, UNTOUCHED};

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
}

pub(crate) struct Scanner {
    /// The policy's scanner, if it has one.
    pub(crate) spec: Option<ScanSpec>,
    /// When the next scan window is due.
    pub(crate) next_ns: Ns,
    period_ns: Ns,
    cursor: u64,
    /// Full passes over the address space so far.
    pub(crate) seq: u64,
    /// Hint faults and failed migrations since the pass began (update_task_scan_period's input).
    pub(crate) pass_faults: u64,
    pub(crate) pass_failed: bool,
    /// Per node: in the top tier (tiering mode scans only the others).
    top_tier: Vec<bool>,
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
    pub(crate) visits: bool,
    pub(crate) device_hints: DeviceHints,
    pub(crate) hint_nodes: Vec<bool>,
    pub(crate) pte_scan_ps: u64,
    pub(crate) tlb_shootdown_ps: u64,
}

impl Scanner {
    pub(crate) fn new(s: ScannerSetup) -> Scanner {
        Scanner {
            next_ns: s.spec.map_or(0, |s| s.delay_ns),
            spec: s.spec,
            period_ns: 0,
            cursor: 0,
            seq: 0,
            pass_faults: 0,
            pass_failed: false,
            top_tier: s.top_tier,
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
    /// 8x that much address space; at the end of the address space wrap and adapt the period.
    /// Returns the scan's cost (ps), charged to the CPU that ran it.
    pub(crate) fn run_scan(&mut self, mem: &mut Memory, spec: ScanSpec, t: Ns) -> u64 {
        let page_size = mem.page_size;
        let window = (spec.scan_size / page_size).max(1);
        let present: u64 = mem.nodes.iter().map(|n| n.used).sum();
        let windows = (present * page_size).div_ceil(spec.scan_size).max(1);
        // task_scan_min/max: at most 2560 MB/s of scanning, and a full pass per period bound.
        let scan_min = (spec.scan_size as f64 * 1e9 / spec.max_rate_bytes_per_s) as u64;
        let scan_min = scan_min.max(spec.period_min_ns / windows);
        let scan_max = scan_min.max(spec.period_max_ns / windows);
        if self.period_ns == 0 {
            self.period_ns = scan_min;
        }
        let t_us = (t / 1000) as u32;
        let (mut walked, mut present_walked) = (0u64, 0u64);
        'walk: loop {
            let cursor_chunk = self.cursor >> CHUNK_SHIFT;
            let Some((&chunk, &base)) = mem.pt.by_address.range(cursor_chunk..).next() else {
                self.cursor = 0;
                self.seq += 1;
                self.adapt_period(spec, scan_min, scan_max);
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
                        if accessed {
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
        // The scan runs in the task's context (task_work), so the period counts from its end:
        // a period shorter than the scan's own cost must not starve the task of progress.
        self.next_ns = t + cost / 1000 + self.period_ns;
        self.stats.scans += 1;
        self.stats.scan_time_ps += cost;
        cost
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

    /// update_task_scan_period after a full pass. Every fault of one process is private, so
    /// with faults the period grows by 3/10 (ps = 10 tenths >= 7); with none, or a failed
    /// migration, it doubles. In tiering mode slow-tier faults are not recorded (policies.md 3)
    /// but promotions are, as faults on their new top-tier node (do_numa_page, mm/memory.c, 6.1;
    /// seen in `tiersim validate linux`: the kernel's scans came 2-5 s apart, not 1 s): the
    /// update runs from task_numa_placement, which only a recorded fault calls, so a pass without
    /// promotions leaves the period where it is and one with them grows it by 3/10. Deviation:
    /// the kernel adapts at the first recorded fault after the pass, we at the pass's end.
    fn adapt_period(&mut self, spec: ScanSpec, scan_min: u64, scan_max: u64) {
        if spec.top_tier {
            self.period_ns = if self.pass_faults == 0 || self.pass_failed {
                self.period_ns * 2
            } else {
                self.period_ns + 3 * (self.period_ns / 10).max(1)
            };
        } else if self.pass_faults > 0 {
            self.period_ns += 3 * (self.period_ns / 10).max(1);
        }
        self.period_ns = self.period_ns.clamp(scan_min, scan_max);
        self.pass_faults = 0;
        self.pass_failed = false;
    }
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
        }
    }
}
