//! Best-Offset prefetching as published (Michaud, "Best-Offset Hardware Prefetching", HPCA 2016):
//! the offset list is every 2^i 3^j 5^k up to `bo_max_offset` (52 offsets for 256); a
//! direct-mapped recent-requests (RR) table receives Y - D when a line Y prefetched with offset D
//! is filled (Y itself on demand fills while prefetching is off). Each trigger (a demand miss or
//! the first use of a prefetched line) X tests the next offset d of the list and scores it if
//! X - d is in RR; a learning phase ends when a score reaches `bo_score_max` or after
//! `bo_round_max` passes over the list, and the best offset becomes D; prefetching stays off while
//! the best score is at most `bo_bad_score`. One prefetch per trigger: X + D (`bo_degree` > 1
//! adds X + 2D, ...). Deviations: RR stores whole line numbers (no partial-tag aliasing); lines
//! are 4 KiB device units, not 64 B cache lines, and may cross any boundary. MQSim_CXL's variant
//! (1024-entry linear history, 16 offsets per trigger, positive offsets to 127) is not this.

use serde_json::json;
use tiersim_core::{Error, ParamKind, ParamSpec, Params, PluginInfo, Result};

use super::{Context, Prefetcher};
use crate::cxl_flash::fib_slot;

pub const PARAMS: &[ParamSpec] = &[
    ParamSpec::new(
        "bo_max_offset",
        ParamKind::Int,
        "256",
        "best_offset: largest offset; the list is all 2^i 3^j 5^k up to it (Michaud: 256)",
    )
    .min(1.0)
    .max(1048576.0),
    ParamSpec::new(
        "bo_score_max",
        ParamKind::Int,
        "31",
        "best_offset: a score reaching this ends the learning phase (Michaud: 31)",
    )
    .min(1.0)
    .max(1e9),
    ParamSpec::new(
        "bo_round_max",
        ParamKind::Int,
        "100",
        "best_offset: passes over the offset list per learning phase (Michaud: 100)",
    )
    .min(1.0)
    .max(1e9),
    ParamSpec::new(
        "bo_bad_score",
        ParamKind::Int,
        "1",
        "best_offset: prefetching is off while the best score is at most this (Michaud: 1)",
    )
    .min(0.0)
    .max(1e9),
    ParamSpec::new("bo_rr_entries", ParamKind::Int, "256", "best_offset: recent-requests table entries (Michaud: 256)")
        .min(1.0)
        .max(16777216.0),
    ParamSpec::new(
        "bo_degree",
        ParamKind::Int,
        "1",
        "best_offset: lines per trigger, X+D ..= X+degree*D (published: 1)",
    )
    .min(1.0)
    .max(64.0),
];

pub const INFO: PluginInfo = PluginInfo {
    name: "best_offset",
    summary: "learns the offset D whose X-D appears in recent fills; prefetches X+D, off when no offset scores",
    source: "Michaud, Best-Offset Hardware Prefetching, HPCA 2016 (as published, not MQSim_CXL's 16-offset variant)",
    params: PARAMS,
};

pub fn build(p: &Params) -> Result<Box<dyn Prefetcher>> {
    Ok(Box::new(BestOffset::from_params(p)?))
}

/// 2^i 3^j 5^k in 1..=max, increasing.
pub fn offset_list(max: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut p2 = 1u64;
    while p2 <= max {
        let mut p3 = p2;
        while p3 <= max {
            let mut p5 = p3;
            while p5 <= max {
                v.push(p5);
                p5 *= 5;
            }
            p3 *= 3;
        }
        p2 *= 2;
    }
    v.sort_unstable();
    v
}

pub struct BestOffset {
    offsets: Vec<u64>,
    scores: Vec<u32>,
    /// Index of the offset tested at the next trigger.
    next: usize,
    round: u64,
    score_max: u32,
    round_max: u64,
    bad_score: u32,
    /// line + 1; 0 empty.
    rr: Vec<u64>,
    degree: u64,
    /// Current prefetch offset (0 while off).
    pub offset: u64,
    phases: u64,
}

impl BestOffset {
    pub fn from_params(p: &Params) -> Result<BestOffset> {
        let offsets = offset_list(p.uint("bo_max_offset"));
        let rr = p.uint("bo_rr_entries") as usize;
        if rr == 0 {
            return Err(Error::config("bo_rr_entries", "must be at least 1"));
        }
        Ok(BestOffset {
            scores: vec![0; offsets.len()],
            offsets,
            next: 0,
            round: 0,
            score_max: p.uint("bo_score_max").min(u64::from(u32::MAX)) as u32,
            round_max: p.uint("bo_round_max"),
            bad_score: p.uint("bo_bad_score").min(u64::from(u32::MAX)) as u32,
            rr: vec![0; rr],
            degree: p.uint("bo_degree").max(1),
            // Michaud starts with prefetching on at offset 1 (next line) until the first phase ends.
            offset: 1,
            phases: 0,
        })
    }

    #[inline]
    fn rr_slot(&self, line: u64) -> usize {
        fib_slot(line, 20, self.rr.len())
    }

    fn rr_insert(&mut self, line: u64) {
        let s = self.rr_slot(line);
        self.rr[s] = line + 1;
    }

    fn rr_hit(&self, line: u64) -> bool {
        self.rr[self.rr_slot(line)] == line + 1
    }

    fn learn(&mut self, x: u64) {
        let d = self.offsets[self.next];
        if x >= d && self.rr_hit(x - d) {
            self.scores[self.next] += 1;
        }
        let reached = self.scores[self.next] >= self.score_max;
        self.next += 1;
        if self.next == self.offsets.len() {
            self.next = 0;
            self.round += 1;
        }
        if reached || self.round >= self.round_max {
            let (best, score) =
                self.scores.iter().enumerate().fold((0, 0), |b, (i, &s)| if s > b.1 { (i, s) } else { b });
            self.offset = if score > self.bad_score { self.offsets[best] } else { 0 };
            self.scores.iter_mut().for_each(|s| *s = 0);
            self.next = 0;
            self.round = 0;
            self.phases += 1;
        }
    }
}

impl Prefetcher for BestOffset {
    fn on_trigger(&mut self, ctx: &Context<'_>, out: &mut Vec<u64>) {
        self.learn(ctx.line);
        if self.offset == 0 {
            return;
        }
        for k in 1..=self.degree {
            let l = ctx.line.saturating_add(self.offset.saturating_mul(k));
            if l >= ctx.lines {
                break;
            }
            out.push(l);
        }
    }

    fn on_fill(&mut self, line: u64, prefetched: bool) {
        if prefetched {
            if self.offset > 0 && line >= self.offset {
                self.rr_insert(line - self.offset);
            }
        } else if self.offset == 0 {
            self.rr_insert(line);
        }
    }

    fn stats(&self) -> serde_json::Value {
        json!({"offset": self.offset, "learning_phases": self.phases, "offsets_tested": self.offsets.len()})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cxl_flash::prefetch::Counters;

    #[test]
    fn michaud_offset_list() {
        let l = offset_list(256);
        assert_eq!(l.len(), 52);
        assert_eq!(&l[..12], &[1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 15, 16]);
        assert_eq!(*l.last().unwrap(), 256);
        assert!(!l.contains(&7) && !l.contains(&14));
    }

    #[test]
    fn learns_a_stride_and_turns_off_on_noise() {
        let t = toml::from_str("bo_round_max = 4\nbo_score_max = 1000").unwrap();
        let mut bo = BestOffset::from_params(&Params::resolve(PARAMS, Some(&t)).unwrap()).unwrap();
        let c = Counters::default();
        let mut out = Vec::new();
        // A stream with stride 6 lines whose fills are demand fills while BO learns: with D = 1
        // at the start, fills of prefetched lines Y insert Y - 1; simulate plain demand fills.
        let mut x = 1000;
        for _ in 0..4 * 52 {
            out.clear();
            bo.on_trigger(&Context { line: x, miss: true, lines: 1 << 40, counters: &c }, &mut out);
            bo.on_fill(x, false);
            x += 6;
        }
        // While the initial offset 1 is on, demand fills are not inserted, so nothing scores and
        // BO turns itself off after the first phase...
        assert_eq!(bo.phases, 1);
        assert_eq!(bo.offset, 0);
        // ...then, off, every demand fill enters RR and the stride (and its multiples) score:
        // the smallest best is 6.
        for _ in 0..4 * 52 {
            out.clear();
            bo.on_trigger(&Context { line: x, miss: true, lines: 1 << 40, counters: &c }, &mut out);
            bo.on_fill(x, false);
            x += 6;
        }
        assert_eq!(bo.phases, 2);
        assert_eq!(bo.offset, 6);
        out.clear();
        bo.on_trigger(&Context { line: 5000, miss: true, lines: 1 << 40, counters: &c }, &mut out);
        assert_eq!(out, vec![5006]);
    }
}
