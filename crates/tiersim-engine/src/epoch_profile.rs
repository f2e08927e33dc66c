//! The future a policy with epochs (oracle_dynamic) is told: at each epoch's start, the pages the
//! epoch will use most. The engine begins an epoch every `per_epoch` accesses in simulated issue
//! order, which is not trace order: the CPUs run at different speeds (those waiting on DCPMM fall
//! behind), so the accesses issued in an epoch are not a span of the trace. Cut in trace order, only
//! 53 % of the accesses of kv at 20 MiB (32 threads, 32 epochs) are issued in the epoch they were
//! profiled for, 21 % in the worst epoch (docs/model.md). The windows are therefore each CPU's
//! own: at an epoch's start every CPU's position in its stream is known, and its window holds its
//! next accesses, as many as it issued in the epoch before (its current speed); the first epoch
//! takes the trace's first `per_epoch` accesses. A second reader streams the trace alongside the
//! run and keeps each CPU's accesses from its position on, so memory holds the CPUs' lag, not the
//! trace.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use serde_json::json;
use tiersim_core::{Access, NodeId, Result};
use tiersim_trace::AccessSource;

/// A buffered record that is not a page access (a mapping record).
const NO_PAGE: u64 = u64::MAX;

/// (page, accesses) by decreasing accesses, ties by lower page.
pub(crate) fn hottest_first(a: &(u64, u64), b: &(u64, u64)) -> std::cmp::Ordering {
    b.1.cmp(&a.1).then(a.0.cmp(&b.0))
}

/// How each epoch's accesses are predicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Windows {
    /// Each CPU's next accesses from its own position, as many as it issued in the epoch before.
    PerCpu,
    /// The next `per_epoch` accesses of the trace (the prediction before per-CPU windows).
    TraceOrder,
}

/// The trace read ahead of the run: each epoch's hottest pages on demand.
pub struct Lookahead {
    source: Box<dyn AccessSource>,
    shift: u32,
    per_epoch: u64,
    top: usize,
    windows: Windows,
    /// What a write counts for in a page's ranking, reads counting 1.
    write_weight: u64,
    /// Buffered accesses past which reading stops even if a window is not full.
    cap: u64,
    /// Per CPU: the pages of its accesses read and not yet passed (page << 1 | is_write), the
    /// first being its access number `first[c]`; `read[c]` of its accesses have been read (accesses numbered below
    /// `first[c]` are skipped as they are read).
    pending: Vec<VecDeque<u64>>,
    first: Vec<u64>,
    read: Vec<u64>,
    buffered: u64,
    eof: bool,
    batch: Vec<Access>,
    /// Accesses read in all, and `read` at every multiple of `per_epoch` of them not yet used:
    /// the trace-order spans, `marks_from` being the first one's index.
    total: u64,
    marks: VecDeque<Vec<u64>>,
    marks_from: u64,
    /// The current epoch's window per CPU (first access, accesses) and where the CPUs stood at
    /// its start.
    window: Vec<(u64, u64)>,
    start: Vec<u64>,
    /// Accesses issued in the epoch whose window held them, of all issued; the worst epoch's share.
    same: u64,
    issued: u64,
    worst: f64,
    epochs: u64,
    /// Per CPU its local memory node; with CPUs on more than one node, `near` holds, for every
    /// page the current windows use, the node whose CPUs make most of its (weighted) accesses.
    cpu_node: Vec<NodeId>,
    near: Vec<(u64, NodeId)>,
}

/// Entry `c` of a per-CPU vector, zero for a CPU it does not reach yet.
fn at<T: Copy + Default>(v: &[T], c: usize) -> T {
    v.get(c).copied().unwrap_or_default()
}

/// Per page, the node with most of its accesses (ties: lower node), by page.
fn near_nodes(node_counts: FxHashMap<(u64, NodeId), u64>) -> Vec<(u64, NodeId)> {
    let mut v: Vec<((u64, NodeId), u64)> = node_counts.into_iter().collect();
    // By page, then the most accesses first, then the lower node: the first of each page wins.
    v.sort_unstable_by(|a, b| a.0 .0.cmp(&b.0 .0).then(b.1.cmp(&a.1)).then(a.0 .1.cmp(&b.0 .1)));
    v.dedup_by_key(|e| e.0 .0);
    v.into_iter().map(|(k, _)| k).collect()
}

impl Lookahead {
    /// Read `source` ahead of a run cut into epochs of `per_epoch` accesses, keeping the `top`
    /// hottest pages per epoch, a write counting `write_weight` reads; reading stops at `cap`
    /// buffered accesses.
    pub fn new(
        source: Box<dyn AccessSource>,
        page_size: u64,
        per_epoch: u64,
        top: usize,
        windows: Windows,
        write_weight: u64,
        cap: u64,
    ) -> Lookahead {
        let per_epoch = per_epoch.max(1);
        Lookahead {
            source,
            shift: page_size.trailing_zeros(),
            per_epoch,
            top,
            windows,
            write_weight,
            cap: cap.max(per_epoch),
            pending: Vec::new(),
            first: Vec::new(),
            read: Vec::new(),
            buffered: 0,
            eof: false,
            batch: Vec::new(),
            total: 0,
            marks: VecDeque::from([Vec::new()]),
            marks_from: 0,
            window: Vec::new(),
            start: Vec::new(),
            same: 0,
            issued: 0,
            worst: 1.0,
            epochs: 0,
            cpu_node: Vec::new(),
            near: Vec::new(),
        }
    }

    /// Also find, per page of each epoch, the node whose CPUs use it most (`near`); `cpu_node[c]`
    /// is CPU c's local node.
    pub fn with_cpu_nodes(mut self, cpu_node: Vec<NodeId>) -> Lookahead {
        self.cpu_node = cpu_node;
        self
    }

    /// The current epoch's pages with the node whose CPUs make most of their (weighted) accesses
    /// (ties: lower node), by page; empty unless the CPUs span more than one node.
    pub fn near(&self) -> &[(u64, NodeId)] {
        &self.near
    }

    /// Read one batch; false at the end of the trace.
    fn read_batch(&mut self) -> Result<bool> {
        if self.eof {
            return Ok(false);
        }
        self.batch.clear();
        if self.source.read_batch(&mut self.batch, 1 << 14)? == 0 {
            self.eof = true;
            return Ok(false);
        }
        for i in 0..self.batch.len() {
            let a = self.batch[i];
            let c = a.cpu as usize;
            self.ensure(c + 1);
            if self.read[c] >= self.first[c] {
                // A mapping record counts as one of its CPU's accesses, as in the engine, but touches no page.
                self.pending[c].push_back(if a.is_map() {
                    NO_PAGE
                } else {
                    (a.addr >> self.shift) << 1 | u64::from(a.op.is_write())
                });
                self.buffered += 1;
            }
            self.read[c] += 1;
            self.total += 1;
            if self.total.is_multiple_of(self.per_epoch) {
                self.marks.push_back(self.read.clone());
            }
        }
        Ok(true)
    }

    /// Room for CPUs below `cpus`.
    fn ensure(&mut self, cpus: usize) {
        if cpus > self.read.len() {
            self.read.resize(cpus, 0);
            self.first.resize(cpus, 0);
            self.pending.resize_with(cpus, VecDeque::new);
        }
    }

    /// The trace-order span of epoch `k` per CPU (first access, accesses).
    fn trace_span(&mut self, k: u64) -> Result<Vec<(u64, u64)>> {
        while !self.eof && self.marks_from + (self.marks.len() as u64) < k + 2 {
            self.read_batch()?;
        }
        while self.marks_from < k && self.marks.len() > 1 {
            self.marks.pop_front();
            self.marks_from += 1;
        }
        let from = self.marks.front().cloned().unwrap_or_default();
        let to = self.marks.get(1).unwrap_or(&self.read).clone();
        Ok((0..to.len()).map(|c| (at(&from, c), at(&to, c) - at(&from, c))).collect())
    }

    /// Score the epoch that ends with the CPUs at `pos`: how many of its accesses its windows held.
    fn close(&mut self, pos: &[u64]) {
        let (mut same, mut issued) = (0u64, 0u64);
        for c in 0..pos.len().max(self.start.len()) {
            let (s0, s1) = (at(&self.start, c), at(pos, c));
            issued += s1.saturating_sub(s0);
            if let Some(&(w0, n)) = self.window.get(c) {
                same += (w0 + n).min(s1).saturating_sub(w0.max(s0));
            }
        }
        if issued > 0 {
            self.worst = self.worst.min(same as f64 / issued as f64);
        }
        self.same += same;
        self.issued += issued;
    }

    /// An epoch begins with CPU c having issued `pos[c]` accesses: its hottest pages, at most
    /// `top`, with their (write-weighted) accesses, hottest first (ties: lower page first).
    pub fn next(&mut self, pos: &[u64]) -> Result<Vec<(u64, u64)>> {
        if self.epochs > 0 {
            self.close(pos);
        }
        self.window = match self.windows {
            Windows::PerCpu if self.epochs > 0 => (0..pos.len().max(self.start.len()))
                .map(|c| (at(pos, c), at(pos, c).saturating_sub(at(&self.start, c))))
                .collect(),
            _ => self.trace_span(self.epochs)?,
        };
        self.start = pos.to_vec();
        self.epochs += 1;
        // Pass what no window needs any more, then read until every window is in.
        self.ensure(self.window.len());
        for (c, &(w0, _)) in self.window.iter().enumerate() {
            if w0 > self.first[c] {
                let drop = ((w0 - self.first[c]) as usize).min(self.pending[c].len());
                self.pending[c].drain(..drop);
                self.buffered -= drop as u64;
                self.first[c] = w0;
            }
        }
        let short = |la: &Lookahead| la.window.iter().enumerate().any(|(c, &(w0, n))| at(&la.read, c) < w0 + n);
        while !self.eof && self.buffered < self.cap && short(self) {
            self.read_batch()?;
        }
        let mut counts: FxHashMap<u64, u64> = Default::default();
        let by_node = self.cpu_node.iter().any(|&n| Some(&n) != self.cpu_node.first());
        let mut node_counts: FxHashMap<(u64, NodeId), u64> = Default::default();
        for (c, &(_, n)) in self.window.iter().enumerate() {
            let node = at(&self.cpu_node, c);
            if let Some(q) = self.pending.get(c) {
                for &e in q.iter().take(n as usize).filter(|&&e| e != NO_PAGE) {
                    let w = if e & 1 == 1 { self.write_weight } else { 1 };
                    *counts.entry(e >> 1).or_default() += w;
                    if by_node {
                        *node_counts.entry((e >> 1, node)).or_default() += w;
                    }
                }
            }
        }
        self.near = near_nodes(node_counts);
        let mut v: Vec<(u64, u64)> = counts.into_iter().collect();
        if v.len() > self.top && self.top > 0 {
            v.select_nth_unstable_by(self.top - 1, hottest_first);
        }
        v.truncate(self.top);
        v.sort_unstable_by(hottest_first);
        Ok(v)
    }

    /// The run ended with the CPUs at `pos`: how well the windows predicted each epoch's accesses.
    pub fn finish(&mut self, pos: &[u64]) -> serde_json::Value {
        if self.epochs > 0 {
            self.close(pos);
        }
        json!({
            "windows": match self.windows { Windows::PerCpu => "per_cpu", Windows::TraceOrder => "trace_order" },
            "accesses_per_epoch": self.per_epoch,
            "epochs": self.epochs,
            "agreement": if self.issued == 0 { 1.0 } else { self.same as f64 / self.issued as f64 },
            "worst_epoch_agreement": self.worst,
        })
    }
}

#[cfg(test)]
mod tests {
    use tiersim_core::Op;
    use tiersim_trace::format::TraceMeta;
    use tiersim_trace::{AddrKind, TimeUnit, TraceHeader};

    use super::*;

    struct Mem(TraceHeader, std::vec::IntoIter<Access>);

    impl AccessSource for Mem {
        fn header(&self) -> &TraceHeader {
            &self.0
        }
        fn read_batch(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize> {
            // Batches of 3: windows end inside batches.
            let before = out.len();
            out.extend(self.1.by_ref().take(max.min(3)));
            Ok(out.len() - before)
        }
    }

    fn source(trace: Vec<Access>) -> Box<dyn AccessSource> {
        let meta = TraceMeta { time_unit: TimeUnit::Instructions, addr_kind: AddrKind::Virtual, page_size: 4096 };
        Box::new(Mem(TraceHeader::new(&meta), trace.into_iter()))
    }

    fn acc(cpu: u32, page: u64, op: Op) -> Access {
        Access { time: 0, addr: page << 12, cpu, size: 64, op, flags: 0 }
    }

    /// Two CPUs, interleaved in the trace, 10 reads each: CPU 0 on pages 0..10, CPU 1 on pages
    /// 100..110 (the i-th access of a CPU on its i-th page).
    fn lookahead(windows: Windows) -> Lookahead {
        let trace: Vec<Access> = (0..10).flat_map(|i| [acc(0, i, Op::Read), acc(1, 100 + i, Op::Read)]).collect();
        Lookahead::new(source(trace), 4096, 4, 8, windows, 1, 100)
    }

    #[test]
    fn a_write_counts_write_weight_reads() {
        // One CPU: page 1 read 3 times, page 2 written once, page 3 read once; one page kept.
        let ops = [(1, Op::Read), (2, Op::Write), (1, Op::Read), (3, Op::Read), (1, Op::Read)];
        let trace: Vec<Access> = ops.iter().map(|&(p, op)| acc(0, p, op)).collect();
        let top = |w| Lookahead::new(source(trace.clone()), 4096, 5, 1, Windows::PerCpu, w, 100).next(&[0]).unwrap();
        assert_eq!(top(1), [(1, 3)]);
        assert_eq!(top(3), [(1, 3)]);
        // Ties go to the lower page; at 4 the write outweighs the three reads.
        assert_eq!(top(4), [(2, 4)]);
    }

    #[test]
    fn near_is_the_node_whose_cpus_use_a_page_most() {
        // CPU 0 (node 0) reads page 5 twice and writes page 6; CPU 1 (node 1) reads page 5 three
        // times and page 6 once, and page 7 once; CPU 2 (node 0) reads page 7 once.
        let ops = [
            (0, 5, Op::Read),
            (1, 5, Op::Read),
            (0, 5, Op::Read),
            (1, 5, Op::Read),
            (0, 6, Op::Write),
            (1, 5, Op::Read),
            (1, 6, Op::Read),
            (1, 7, Op::Read),
            (2, 7, Op::Read),
        ];
        let trace: Vec<Access> = ops.iter().map(|&(c, p, op)| acc(c, p, op)).collect();
        let mut la =
            Lookahead::new(source(trace.clone()), 4096, 9, 1, Windows::PerCpu, 4, 100).with_cpu_nodes(vec![0, 1, 0]);
        // Page 6: 4 (the write) on node 0 against 1; page 7: a tie, to the lower node. Every page
        // used has its node, not only the `top` hottest.
        assert_eq!(la.next(&[0, 0, 0]).unwrap(), [(5, 5)]);
        assert_eq!(la.near(), [(5, 1), (6, 0), (7, 0)]);
        // CPUs on one node: nothing to choose.
        let mut one = Lookahead::new(source(trace), 4096, 9, 1, Windows::PerCpu, 4, 100).with_cpu_nodes(vec![0, 0, 0]);
        one.next(&[0, 0, 0]).unwrap();
        assert!(one.near().is_empty());
    }

    #[test]
    fn a_mapping_record_holds_its_place_but_counts_no_page() {
        // CPU 0: a mapping record of a 16-page file at page 5, then a read of page 9; the window
        // of 2 holds both, and only page 9 is counted.
        let map = Access { time: 0, addr: 5 << 12, cpu: 0, size: 16, op: Op::Read, flags: Access::FILE | Access::MAP };
        let mut la = Lookahead::new(source(vec![map, acc(0, 9, Op::Read)]), 4096, 2, 8, Windows::PerCpu, 1, 100);
        assert_eq!(la.next(&[0]).unwrap(), [(9, 1)]);
        assert_eq!(la.read, [2]);
    }

    fn pages(v: Vec<(u64, u64)>) -> Vec<u64> {
        v.into_iter()
            .map(|(p, n)| {
                assert_eq!(n, 1);
                p
            })
            .collect()
    }

    #[test]
    fn per_cpu_windows_follow_each_cpus_position_and_speed() {
        let mut la = lookahead(Windows::PerCpu);
        // The first epoch: the trace's first 4 accesses.
        assert_eq!(pages(la.next(&[0, 0]).unwrap()), [0, 1, 100, 101]);
        // CPU 0 issued 4, CPU 1 none: CPU 0's next 4, nothing of CPU 1's.
        assert_eq!(pages(la.next(&[4, 0]).unwrap()), [4, 5, 6, 7]);
        // Both issued 2: each one's next 2.
        assert_eq!(pages(la.next(&[6, 2]).unwrap()), [6, 7, 102, 103]);
        // What was issued in each epoch's window: 2 of 4, 2 of 4, then 4 of 12 (CPU 1 sped up).
        let s = la.finish(&[10, 10]);
        assert_eq!(s["agreement"], 8.0 / 20.0);
        assert_eq!(s["worst_epoch_agreement"], 4.0 / 12.0);
        assert_eq!(s["epochs"], 3);
        // The accesses before each CPU's last window are no longer held.
        assert_eq!(la.first, [6, 2]);
        assert_eq!(la.buffered, (la.read[0] - 6) + (la.read[1] - 2));
    }

    #[test]
    fn trace_order_windows_ignore_where_the_cpus_are() {
        let mut la = lookahead(Windows::TraceOrder);
        assert_eq!(pages(la.next(&[0, 0]).unwrap()), [0, 1, 100, 101]);
        assert_eq!(pages(la.next(&[4, 0]).unwrap()), [2, 3, 102, 103]);
        assert_eq!(pages(la.next(&[6, 2]).unwrap()), [4, 5, 104, 105]);
        // Windows [0,2) [0,2), [2,4) [2,4), [4,6) [4,6) against issued [0,4) -, [4,6) [0,2),
        // [6,10) [2,10): 2 of 4, 0 of 4, 2 of 12.
        let s = la.finish(&[10, 10]);
        assert_eq!(s["agreement"], 4.0 / 20.0);
        assert_eq!(s["worst_epoch_agreement"], 0.0);
        // Past the trace's last span an epoch foresees nothing.
        assert!(lookahead(Windows::TraceOrder).trace_span(9).unwrap().iter().all(|&(_, n)| n == 0));
    }
}
