//! MQSim_CXL's best-offset prefetcher (spypaul/MQSim_CXL_Linux `cxl/Prefetching_Alg.cpp`,
//! `cxl/Host_Interface_CXL.cpp:153-187`), which is not Michaud's (its B11): each trigger tests one
//! offset d of 1..`mbo_max_offset` in turn and scores it if X - d is among the last
//! `mbo_history` trigger lines; after `mbo_rounds` passes it keeps every offset that scored at
//! least `mbo_bad_score`, the best first, up to `mbo_degree`, and prefetches X + d for each of
//! them at every trigger. Triggers are demand misses and every demand hit on a line a prefetch
//! brought in (until it is evicted), not hits under miss. `compat = "mqsim_cxl"` uses it in place
//! of `best_offset`.

use std::collections::{HashMap, VecDeque};

use serde_json::json;
use tiersim_core::{ParamKind, ParamSpec, Params, PluginInfo, Result};

use super::{Context, Prefetcher};

pub const PARAMS: &[ParamSpec] = &[
    ParamSpec::new(
        "mbo_history",
        ParamKind::Int,
        "1024",
        "best_offset_mqsim: trigger lines remembered (MQSim_CXL: 1024)",
    )
    .min(1.0)
    .max(16777216.0),
    ParamSpec::new(
        "mbo_max_offset",
        ParamKind::Int,
        "127",
        "best_offset_mqsim: offsets 1..=this are tested (MQSim_CXL: 127)",
    )
    .min(1.0)
    .max(65536.0),
    ParamSpec::new(
        "mbo_rounds",
        ParamKind::Int,
        "8",
        "best_offset_mqsim: passes over the offsets per learning phase (MQSim_CXL: 8)",
    )
    .min(1.0)
    .max(1e9),
    ParamSpec::new(
        "mbo_bad_score",
        ParamKind::Int,
        "3",
        "best_offset_mqsim: an offset is kept with at least this score (MQSim_CXL: 3)",
    )
    .min(0.0)
    .max(1e9),
    ParamSpec::new(
        "mbo_degree",
        ParamKind::Int,
        "16",
        "best_offset_mqsim: offsets kept and prefetched per trigger (MQSim_CXL: 16)",
    )
    .min(1.0)
    .max(1024.0),
];

pub const INFO: PluginInfo = PluginInfo {
    name: "best_offset_mqsim",
    summary: "MQSim_CXL's best-offset: one offset scored per trigger, then up to 16 offsets prefetched at once",
    source: "spypaul/MQSim_CXL_Linux 3701f7b, cxl/Prefetching_Alg.cpp and cxl/Host_Interface_CXL.cpp:153-187",
    params: PARAMS,
};

pub fn build(p: &Params) -> Result<Box<dyn Prefetcher>> {
    Ok(Box::new(BestOffsetMqsim::from_params(p)))
}

pub struct BestOffsetMqsim {
    history: VecDeque<u64>,
    /// How many times each line is in `history` (MQSim_CXL scans the list; same answer).
    in_history: HashMap<u64, u32>,
    history_max: usize,
    /// Score of offset d at d - 1, and one entry more: MQSim_CXL's table holds `maxoffset` = 128
    /// scores (cxl/Prefetching_Alg.h:17) and tests offsets 1..127, ending a round when the offset
    /// under test reaches the table size (`endround`, cxl/Prefetching_Alg.cpp:63-65), so its last
    /// entry is never scored.
    scores: Vec<u64>,
    /// Offset tested at the next trigger (1-based).
    under_test: usize,
    round: u64,
    rounds: u64,
    bad_score: u64,
    degree: usize,
    /// Offsets prefetched, increasing (MQSim_CXL keeps them in a std::set).
    offsets: Vec<u64>,
    phases: u64,
}

impl BestOffsetMqsim {
    pub fn from_params(p: &Params) -> BestOffsetMqsim {
        BestOffsetMqsim {
            history: VecDeque::new(),
            in_history: HashMap::new(),
            history_max: p.uint("mbo_history") as usize,
            scores: vec![0; p.uint("mbo_max_offset") as usize + 1],
            under_test: 1,
            round: 0,
            rounds: p.uint("mbo_rounds"),
            bad_score: p.uint("mbo_bad_score"),
            degree: p.uint("mbo_degree") as usize,
            offsets: Vec::new(),
            phases: 0,
        }
    }

    fn remember(&mut self, line: u64) {
        if self.history.len() >= self.history_max {
            if let Some(old) = self.history.pop_front() {
                if let Some(n) = self.in_history.get_mut(&old) {
                    *n -= 1;
                    if *n == 0 {
                        self.in_history.remove(&old);
                    }
                }
            }
        }
        self.history.push_back(line);
        *self.in_history.entry(line).or_default() += 1;
    }

    /// `findoffsets`: repeatedly the highest score not yet taken (ties: the larger offset, its
    /// `>=`), while it is at least the bad score.
    fn choose(&mut self) {
        self.offsets.clear();
        let mut taken = vec![false; self.scores.len()];
        for _ in 0..self.degree {
            let best = (0..self.scores.len()).filter(|&j| !taken[j]).fold(None, |b: Option<usize>, j| match b {
                Some(k) if self.scores[j] < self.scores[k] => Some(k),
                _ => Some(j),
            });
            match best {
                Some(j) if self.scores[j] >= self.bad_score => {
                    taken[j] = true;
                    self.offsets.push(j as u64 + 1);
                }
                _ => break,
            }
        }
        self.offsets.sort_unstable();
    }
}

impl Prefetcher for BestOffsetMqsim {
    fn on_trigger(&mut self, ctx: &Context<'_>, out: &mut Vec<u64>) {
        let x = ctx.line;
        let d = self.under_test as u64;
        if x >= d && self.in_history.contains_key(&(x - d)) {
            self.scores[self.under_test - 1] += 1;
        }
        self.remember(x);
        self.under_test += 1;
        if self.under_test >= self.scores.len() {
            self.under_test = 1;
            self.round += 1;
            if self.round >= self.rounds {
                self.round = 0;
                self.choose();
                self.scores.iter_mut().for_each(|s| *s = 0);
                self.phases += 1;
            }
        }
        for &o in &self.offsets {
            let l = x.saturating_add(o);
            if l < ctx.lines {
                out.push(l);
            }
        }
    }

    fn trigger_on_every_hit(&self) -> bool {
        true
    }

    fn stats(&self) -> serde_json::Value {
        json!({"offsets": self.offsets, "learning_phases": self.phases})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cxl_flash::prefetch::Counters;

    #[test]
    fn a_unit_stride_keeps_every_offset_that_scores() {
        // Offsets 1 and 2, 1 round a phase, keep scores >= 1, up to 2.
        let t = toml::from_str("mbo_max_offset = 2\nmbo_rounds = 1\nmbo_bad_score = 1\nmbo_degree = 2").unwrap();
        let mut bo = BestOffsetMqsim::from_params(&Params::resolve(PARAMS, Some(&t)).unwrap());
        let c = Counters::default();
        let mut out = Vec::new();
        let ctx = |line| Context { line, miss: true, lines: 1 << 20, counters: &c };
        // Trigger 100 tests d = 1 (99 not seen: 0), 101 tests d = 2 (99 not seen: 0): the round
        // and the phase end with no offset kept.
        bo.on_trigger(&ctx(100), &mut out);
        bo.on_trigger(&ctx(101), &mut out);
        assert!(out.is_empty() && bo.offsets.is_empty());
        // 102 tests d = 1 (101 seen: 1), 103 tests d = 2 (101 seen: 1): both kept, and this
        // trigger already prefetches 104 and 105.
        bo.on_trigger(&ctx(102), &mut out);
        bo.on_trigger(&ctx(103), &mut out);
        assert_eq!(bo.offsets, vec![1, 2]);
        assert_eq!(out, vec![104, 105]);
    }

    #[test]
    fn the_first_phase_ends_at_the_1016th_trigger() {
        // MQSim_CXL's defaults: offsets 1..=127 each tested once a round, 8 rounds: 1016 triggers
        // learn before the first prefetch (a table one entry short would make it 1008).
        let mut bo = BestOffsetMqsim::from_params(&Params::defaults(PARAMS).unwrap());
        let c = Counters::default();
        let mut out = Vec::new();
        for i in 0..1015 {
            bo.on_trigger(&Context { line: 1000 + i, miss: true, lines: 1 << 20, counters: &c }, &mut out);
        }
        assert!(out.is_empty());
        bo.on_trigger(&Context { line: 2015, miss: true, lines: 1 << 20, counters: &c }, &mut out);
        // A unit stride scores every offset tested after its first 127 lines: the 16 largest
        // are kept (ties go to the larger offset, as MQSim_CXL's `>=`).
        assert_eq!(bo.offsets, (112..=127).collect::<Vec<u64>>());
        assert_eq!(out, (2127..=2142).collect::<Vec<u64>>());
    }
}
