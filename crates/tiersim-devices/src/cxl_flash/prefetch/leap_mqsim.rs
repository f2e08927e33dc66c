//! MQSim_CXL's Leap (spypaul/MQSim_CXL_Linux `cxl/Prefetching_Alg.cpp:96-169`,
//! `cxl/Host_Interface_CXL.cpp:192-234`), which is not Leap as published: its Boyer-Moore vote
//! never changes (its B5: `vote = (...) ? vote++ : vote--;` assigns the old value back), so the
//! candidate of a window is always the newest delta, taken as the trend when it fills more than
//! half the window (the newest history/`mlp_split` deltas, the window doubling plus one up to the
//! whole history of `mlp_history`). With no trend it prefetches the next lines shifted by the
//! last trend (`lba + i + offset`), with one, `lba + i * offset`, for i = 1..k. k follows the
//! demand hits on prefetched lines since the previous miss: 1 with none, else h + 1 rounded up to
//! a power of two, at most `mlp_max_degree`, never below half the previous k. Triggered by demand
//! misses only. `compat = "mqsim_cxl"` uses it in place of `leap`.

use std::collections::VecDeque;

use serde_json::json;
use tiersim_core::{ParamKind, ParamSpec, Params, PluginInfo, Result};

use super::{Context, Prefetcher};

pub const PARAMS: &[ParamSpec] = &[
    ParamSpec::new("mlp_history", ParamKind::Int, "39", "leap_mqsim: lines (and deltas) remembered (MQSim_CXL: 39)")
        .min(1.0)
        .max(65536.0),
    ParamSpec::new(
        "mlp_split",
        ParamKind::Int,
        "8",
        "leap_mqsim: the first window is the history over this, rounded down (MQSim_CXL: 8)",
    )
    .min(1.0)
    .max(65536.0),
    ParamSpec::new(
        "mlp_max_degree",
        ParamKind::Int,
        "16",
        "leap_mqsim: lines prefetched per miss at most (MQSim_CXL: 16)",
    )
    .min(1.0)
    .max(1024.0),
];

pub const INFO: PluginInfo = PluginInfo {
    name: "leap_mqsim",
    summary: "MQSim_CXL's Leap: the newest delta as the trend when it fills half a window (its vote never updates)",
    source: "spypaul/MQSim_CXL_Linux 3701f7b, cxl/Prefetching_Alg.cpp:96-169 and cxl/Host_Interface_CXL.cpp:192-234",
    params: PARAMS,
};

pub fn build(p: &Params) -> Result<Box<dyn Prefetcher>> {
    Ok(Box::new(LeapMqsim::from_params(p)))
}

pub struct LeapMqsim {
    /// (line, delta from the line before; 0 for the first), oldest first (`hbuffer`).
    history: VecDeque<(u64, i64)>,
    history_max: usize,
    split: usize,
    max_degree: u64,
    last_offset: i64,
    last_degree: u64,
    /// `prefetched_hits` at the previous miss (`lastprefetchhit`).
    last_hits: u64,
}

impl LeapMqsim {
    pub fn from_params(p: &Params) -> LeapMqsim {
        LeapMqsim {
            history: VecDeque::new(),
            history_max: p.uint("mlp_history") as usize,
            split: p.uint("mlp_split") as usize,
            max_degree: p.uint("mlp_max_degree"),
            last_offset: 0,
            last_degree: 0,
            last_hits: 0,
        }
    }

    /// `historyinsert`: the line and its delta; the oldest entry goes when the history is over
    /// its size.
    fn insert(&mut self, line: u64) {
        let delta = self.history.back().map_or(0, |&(prev, _)| line as i64 - prev as i64);
        self.history.push_back((line, delta));
        if self.history.len() > self.history_max {
            self.history.pop_front();
        }
    }

    /// `findoffset`: in the newest `w` deltas, the candidate left by the stuck vote is the newest
    /// delta (0 in an empty window); it is the trend if it appears more than w / 2 times. w starts
    /// at len / split and becomes 2w + 1 until a trend is found or w passes the history.
    fn find_offset(&self) -> i64 {
        let n = self.history.len();
        let mut w = n / self.split;
        loop {
            let window = self.history.range(n.saturating_sub(w)..);
            let candidate = if w == 0 { 0 } else { self.history[n - 1].1 };
            let count = window.filter(|&&(_, d)| d == candidate).count();
            let delta = if count > w / 2 { candidate } else { 0 };
            w = 2 * w + 1;
            if delta != 0 || w > n {
                return delta;
            }
        }
    }

    /// `getk`: the lines to prefetch for `hits` demand hits on prefetched lines so far.
    fn degree(&mut self, hits: u64) -> u64 {
        let since = hits - self.last_hits;
        let mut k = if since == 0 { 1 } else { (since + 1).next_power_of_two() };
        k = k.min(self.max_degree);
        if k < self.last_degree / 2 {
            k = self.last_degree / 2;
        }
        self.last_hits = hits;
        self.last_degree = k;
        k
    }
}

impl Prefetcher for LeapMqsim {
    fn on_trigger(&mut self, ctx: &Context<'_>, out: &mut Vec<u64>) {
        if !ctx.miss {
            return;
        }
        self.insert(ctx.line);
        let mut offset = self.find_offset();
        let k = self.degree(ctx.counters.prefetched_hits);
        let shifted = offset == 0;
        if shifted {
            offset = self.last_offset;
        }
        for i in 1..=k as i64 {
            let l = if shifted { ctx.line as i64 + i + offset } else { ctx.line as i64 + i * offset };
            if l >= 0 && (l as u64) < ctx.lines {
                out.push(l as u64);
            }
        }
        self.last_offset = offset;
    }

    fn stats(&self) -> serde_json::Value {
        json!({"offset": self.last_offset, "degree": self.last_degree})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cxl_flash::prefetch::Counters;

    fn leap() -> LeapMqsim {
        LeapMqsim::from_params(&Params::defaults(PARAMS).unwrap())
    }

    fn miss(l: &mut LeapMqsim, line: u64, hits: u64) -> Vec<u64> {
        let c = Counters { prefetched_hits: hits, ..Counters::default() };
        let mut out = Vec::new();
        l.on_trigger(&Context { line, miss: true, lines: 1 << 40, counters: &c }, &mut out);
        out
    }

    #[test]
    fn the_newest_delta_is_the_trend_once_it_fills_half_a_window() {
        let mut l = leap();
        // One line: window 0, then 1 (the delta 0 of the first entry: no trend); nothing kept,
        // so the next line is prefetched (shifted by the last trend, 0).
        assert_eq!(miss(&mut l, 100, 0), vec![101]);
        // Delta 7, window 0 then 1: 7 fills it, the trend; one line along it.
        assert_eq!(miss(&mut l, 107, 0), vec![114]);
        // Delta -50 is the trend at once (window 1), whatever came before.
        assert_eq!(miss(&mut l, 57, 0), vec![7]);
    }

    #[test]
    fn the_degree_follows_the_hits_on_prefetched_lines() {
        let mut l = leap();
        miss(&mut l, 100, 0);
        // 5 hits since: 6 rounded up, 8 lines along the trend 1.
        assert_eq!(miss(&mut l, 101, 5), (102..=109).collect::<Vec<u64>>());
        // None since: 1, but never below half the last (4).
        assert_eq!(miss(&mut l, 102, 5).len(), 4);
        // 100 since: capped at 16.
        assert_eq!(miss(&mut l, 103, 105).len(), 16);
    }
}
