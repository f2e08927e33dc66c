//! The measurement window and the time series: measuring starts after the warm-up; every
//! `stats.epoch` of simulated time each node's counters (and swap's) are flushed as one row of
//! the long-format time series. At `stats.max_epochs` epochs the series is coarsened: pairs of
//! epochs merge and the epoch doubles, so its memory is bounded whatever the simulated time.

use tiersim_core::Ns;

use super::Engine;
use crate::node::Counters;

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

impl Engine {
    pub(crate) fn start_measuring(&mut self, t: Ns) {
        self.measuring = true;
        self.measure_start_ns = t;
        self.max_completion_ns = t;
        for n in &mut self.mem.nodes {
            n.total = Counters::default();
            n.epoch = Counters::default();
        }
        for part in self.metrics_mut() {
            part.reset();
        }
        self.epoch_end_ns = self.epoch_end();
    }

    /// End of the current epoch (Ns::MAX: never).
    fn epoch_end(&self) -> Ns {
        self.measure_start_ns.saturating_add((self.epoch_idx + 1).saturating_mul(self.epoch_ns))
    }

    /// Flush the epochs that end at or before `t`; one comparison per access against the
    /// current epoch's end, kept in `epoch_end_ns` (Ns::MAX until measuring starts).
    #[inline]
    pub(crate) fn flush_epochs_until(&mut self, t: Ns) {
        if t >= self.epoch_end_ns {
            self.flush_epochs_to(t);
        }
    }

    #[cold]
    fn flush_epochs_to(&mut self, t: Ns) {
        if !self.measuring {
            return;
        }
        loop {
            let end = self.epoch_end();
            if t < end || end == Ns::MAX {
                break;
            }
            self.flush_epoch(end);
        }
        self.epoch_end_ns = self.epoch_end();
    }

    pub(crate) fn flush_epoch(&mut self, end: Ns) {
        let start = self.measure_start_ns + self.epoch_idx * self.epoch_ns;
        let span = (end - start).max(1) as f64;
        let hot = self.mem.policy.policy.hotness().map(|h| h.to_vec());
        for i in 0..self.mem.nodes.len() {
            let c = self.mem.nodes[i].fold_epoch();
            let used = self.mem.nodes[i].used;
            self.push_row(start, end, self.mem.nodes[i].spec.name.clone(), used, c, span);
            if let Some(h) = &hot {
                self.ts.hotness.get_or_insert_with(Vec::new).push(h.get(i).copied().unwrap_or_default());
            }
        }
        if let Some(s) = self.swap.as_mut() {
            let (ins, outs, used) = (s.stats.epoch_ins, s.stats.epoch_outs, s.used);
            s.stats.epoch_ins = 0;
            s.stats.epoch_outs = 0;
            let c = Counters {
                accesses: ins,
                reads: ins,
                writes: outs,
                bytes: (ins + outs) * self.mem.page_size,
                ..Counters::default()
            };
            self.push_row(start, end, "swap".into(), used, c, span);
            if let Some(h) = self.ts.hotness.as_mut() {
                h.push([0; 9]);
            }
        }
        self.epoch_idx += 1;
        if self.epoch_idx >= self.max_epochs {
            self.coarsen();
        }
    }

    /// Merge epochs 2k and 2k+1 into epoch k, row by row (node by node), and double the epoch:
    /// sums of counts, the later epoch's occupancy and hotness, bandwidth over the joint span.
    fn coarsen(&mut self) {
        let epochs = self.epoch_idx as usize;
        let rows = self.ts.epoch.len();
        if epochs < 2 || !rows.is_multiple_of(epochs) {
            return;
        }
        let per = rows / epochs;
        let ts = &mut self.ts;
        let pairs = epochs / 2;
        for k in 0..pairs {
            for r in 0..per {
                let (a, b, to) = ((2 * k) * per + r, (2 * k + 1) * per + r, k * per + r);
                ts.epoch[to] = k as u64;
                ts.t_start_ns[to] = ts.t_start_ns[a];
                ts.t_end_ns[to] = ts.t_end_ns[b];
                ts.node.swap(to, b);
                ts.pages[to] = ts.pages[b];
                for v in [
                    &mut ts.accesses,
                    &mut ts.reads,
                    &mut ts.writes,
                    &mut ts.bytes,
                    &mut ts.migrated_in,
                    &mut ts.migrated_out,
                ] {
                    v[to] = v[a] + v[b];
                }
                let span = (ts.t_end_ns[to] - ts.t_start_ns[to]).max(1) as f64;
                ts.bandwidth_gbs[to] = ts.bytes[to] as f64 / span;
                if let Some(h) = ts.hotness.as_mut().filter(|h| h.len() == rows) {
                    h[to] = h[b];
                }
            }
        }
        let keep = pairs * per;
        ts.epoch.truncate(keep);
        ts.t_start_ns.truncate(keep);
        ts.t_end_ns.truncate(keep);
        ts.node.truncate(keep);
        ts.pages.truncate(keep);
        for v in
            [&mut ts.accesses, &mut ts.reads, &mut ts.writes, &mut ts.bytes, &mut ts.migrated_in, &mut ts.migrated_out]
        {
            v.truncate(keep);
        }
        ts.bandwidth_gbs.truncate(keep);
        if let Some(h) = ts.hotness.as_mut() {
            h.truncate(keep);
        }
        self.epoch_idx = pairs as u64;
        self.epoch_ns = self.epoch_ns.saturating_mul(2);
    }

    pub(crate) fn push_row(&mut self, start: Ns, end: Ns, node: String, pages: u64, c: Counters, span: f64) {
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
}
