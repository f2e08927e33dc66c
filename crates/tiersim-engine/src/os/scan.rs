//! The NUMA hinting scanner, task_numa_work in kernel/sched/fair.c (policies.md 1.2): windows
//! of the touched address space made PROT_NONE (change_prot_numa) at a period adapted after each
//! pass (update_task_scan_period); the policy's scan visits and `os.device_hints` ride along.

use tiersim_core::{NodeId, Ns};
use tiersim_policies::{ScanSpec, ScanVisit};

use crate::pagetable::{CHUNK, CHUNK_SHIFT, DROPPED, PROT_NONE, UNTOUCHED};
use crate::sim::Engine;

/// Which pages the scanner hints to devices that accept hints (`os.device_hints`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceHints {
    None,
    /// Every page found accessed.
    Scan,
    /// Pages found accessed at this visit and the previous one.
    ScanHot,
}

impl Engine {
    /// One scan window of task_numa_work (policies.md 1.2): walk the touched address space from
    /// the cursor, making present pages PROT_NONE (only pages below the top tier in tiering mode;
    /// pages already PROT_NONE keep their stamp), until a window's worth of present pages or
    /// 8x that much address space; at the end of the address space wrap and adapt the period.
    /// Returns the scan's cost (ps), charged to the CPU that ran it.
    pub(crate) fn run_scan(&mut self, spec: ScanSpec, t: Ns) -> u64 {
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
                            self.policy.on_scan(&ScanVisit {
                                page: id as u32,
                                node: e.node as NodeId,
                                accessed,
                                now_ns: t,
                            });
                        }
                        let (node, frame) = (e.node as usize, e.frame);
                        if accessed {
                            e.flags |= PROT_NONE;
                            self.pt.ext_mut(id as u32).scan_us = t_us;
                        }
                        if self.device_hints != DeviceHints::None {
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
    pub(crate) fn scan_hint(&mut self, id: usize, node: usize, frame: u32, accessed: bool, t: Ns) {
        let ext = self.pt.ext_mut(id as u32);
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
    pub(crate) fn adapt_scan_period(&mut self, spec: ScanSpec, scan_min: u64, scan_max: u64) {
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
}
