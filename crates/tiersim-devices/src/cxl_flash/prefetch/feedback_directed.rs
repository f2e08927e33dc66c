//! Feedback-directed prefetching (Srinath, Mutlu, Kim and Patt, HPCA 2007): a next-N-line
//! prefetcher whose aggressiveness level (degree, offset) moves up or down at the end of each
//! interval from three measured signals, each smoothed as (previous + this interval) / 2:
//! accuracy (useful / issued), lateness (late / useful) and pollution (demand misses to lines a
//! prefetch evicted / demand misses). The decision table is the paper's Table 2; levels and
//! thresholds default to MQSim_CXL's (levels (1,4) (1,8) (2,16) (4,32) (4,64), start at level 4,
//! accuracy 0.75 / 0.40, lateness 0.01, pollution 0.25). An interval ends every
//! `fdp_interval` cache evictions (the paper: half the cache's blocks; 8192 for its 1 MiB L2).

use serde_json::json;
use tiersim_core::{Error, ParamKind, ParamSpec, Params, PluginInfo, Result};

use super::next_n_line::NextNLine;
use super::{Context, Counters, Prefetcher};

pub const PARAMS: &[ParamSpec] = &[
    ParamSpec::new(
        "fdp_degrees",
        ParamKind::FloatList,
        "[1, 1, 2, 4, 4]",
        "feedback_directed: degree of each aggressiveness level, least aggressive first (MQSim_CXL)",
    ),
    ParamSpec::new(
        "fdp_offsets",
        ParamKind::FloatList,
        "[4, 8, 16, 32, 64]",
        "feedback_directed: offset (distance) of each level, as next_n_line's nl_offset (MQSim_CXL)",
    ),
    ParamSpec::new("fdp_start_level", ParamKind::Int, "4", "feedback_directed: initial level, 1-based (MQSim_CXL: 4)")
        .min(1.0)
        .max(64.0),
    ParamSpec::new("fdp_accuracy_high", ParamKind::Float, "0.75", "feedback_directed: accuracy at or above is high")
        .min(0.0)
        .max(1.0),
    ParamSpec::new("fdp_accuracy_low", ParamKind::Float, "0.40", "feedback_directed: accuracy below is low")
        .min(0.0)
        .max(1.0),
    ParamSpec::new("fdp_lateness", ParamKind::Float, "0.01", "feedback_directed: lateness above is late")
        .min(0.0)
        .max(1.0),
    ParamSpec::new(
        "fdp_pollution",
        ParamKind::Float,
        "0.25",
        "feedback_directed: pollution above is polluting (the paper uses 0.005; MQSim_CXL 0.25)",
    )
    .min(0.0)
    .max(1.0),
    ParamSpec::new("fdp_interval", ParamKind::Int, "8192", "feedback_directed: cache evictions per sampling interval")
        .min(1.0),
];

pub const INFO: PluginInfo = PluginInfo {
    name: "feedback_directed",
    summary: "next-N-line whose degree/offset level follows accuracy, lateness and pollution feedback",
    source: "Srinath et al., Feedback Directed Prefetching, HPCA 2007 (Table 2); levels and thresholds of MQSim_CXL",
    params: PARAMS,
};

pub fn build(p: &Params) -> Result<Box<dyn Prefetcher>> {
    Ok(Box::new(FeedbackDirected::from_params(p)?))
}

impl FeedbackDirected {
    pub fn from_params(p: &Params) -> Result<FeedbackDirected> {
        let degrees = p.floats("fdp_degrees");
        let offsets = p.floats("fdp_offsets");
        if degrees.is_empty() || degrees.len() != offsets.len() {
            return Err(Error::config(
                "fdp_offsets",
                format!("{} offsets for {} degrees; give one per level", offsets.len(), degrees.len()),
            ));
        }
        let whole = |v: f64, key: &str, min: f64| {
            if v.fract() != 0.0 || v < min || v > 1e6 {
                Err(Error::config(key, format!("{v} is not a whole number in [{min}, 1e6]")))
            } else {
                Ok(v as u64)
            }
        };
        let levels = degrees
            .iter()
            .zip(offsets)
            .map(|(&d, &o)| Ok((whole(d, "fdp_degrees", 1.0)?, whole(o, "fdp_offsets", 0.0)?)))
            .collect::<Result<Vec<_>>>()?;
        let start = p.uint("fdp_start_level") as usize;
        if start == 0 || start > levels.len() {
            return Err(Error::config("fdp_start_level", format!("{start} is not a level in 1..={}", levels.len())));
        }
        let (hi, lo) = (p.float("fdp_accuracy_high"), p.float("fdp_accuracy_low"));
        if lo > hi {
            return Err(Error::config("fdp_accuracy_low", format!("{lo} is above fdp_accuracy_high {hi}")));
        }
        Ok(FeedbackDirected {
            levels,
            level: start - 1,
            accuracy_high: hi,
            accuracy_low: lo,
            lateness_threshold: p.float("fdp_lateness"),
            pollution_threshold: p.float("fdp_pollution"),
            interval: p.uint("fdp_interval").max(1),
            last: Counters::default(),
            accuracy: 0.0,
            lateness: 0.0,
            pollution: 0.0,
            intervals: 0,
            ups: 0,
            downs: 0,
        })
    }
}

pub struct FeedbackDirected {
    levels: Vec<(u64, u64)>,
    level: usize,
    accuracy_high: f64,
    accuracy_low: f64,
    lateness_threshold: f64,
    pollution_threshold: f64,
    interval: u64,
    /// Counters at the start of the current interval.
    last: Counters,
    accuracy: f64,
    lateness: f64,
    pollution: f64,
    intervals: u64,
    ups: u64,
    downs: u64,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// Srinath et al. Table 2: +1 increment, -1 decrement, 0 no change.
pub fn decision(accuracy: Accuracy, late: bool, polluting: bool) -> i32 {
    match (accuracy, late, polluting) {
        (Accuracy::High, true, _) => 1,
        (Accuracy::High, false, false) => 0,
        (Accuracy::High, false, true) => -1,
        (Accuracy::Medium, true, false) => 1,
        (Accuracy::Medium, true, true) => -1,
        (Accuracy::Medium, false, false) => 0,
        (Accuracy::Medium, false, true) => -1,
        (Accuracy::Low, true, _) => -1,
        (Accuracy::Low, false, false) => 0,
        (Accuracy::Low, false, true) => -1,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accuracy {
    High,
    Medium,
    Low,
}

impl FeedbackDirected {
    fn end_interval(&mut self, c: &Counters) {
        let d = |now: u64, then: u64| now.saturating_sub(then);
        let issued = d(c.issued, self.last.issued);
        let useful = d(c.useful, self.last.useful);
        let late = d(c.late, self.last.late);
        let pollution = d(c.pollution_misses, self.last.pollution_misses);
        let misses = d(c.demand_misses, self.last.demand_misses);
        self.accuracy = (self.accuracy + ratio(useful, issued)) / 2.0;
        self.lateness = (self.lateness + ratio(late, useful)) / 2.0;
        self.pollution = (self.pollution + ratio(pollution, misses)) / 2.0;
        self.last = *c;
        self.intervals += 1;
        let acc = if self.accuracy >= self.accuracy_high {
            Accuracy::High
        } else if self.accuracy < self.accuracy_low {
            Accuracy::Low
        } else {
            Accuracy::Medium
        };
        match decision(acc, self.lateness > self.lateness_threshold, self.pollution > self.pollution_threshold) {
            1 if self.level + 1 < self.levels.len() => {
                self.level += 1;
                self.ups += 1;
            }
            -1 if self.level > 0 => {
                self.level -= 1;
                self.downs += 1;
            }
            _ => {}
        }
    }
}

impl Prefetcher for FeedbackDirected {
    fn on_trigger(&mut self, ctx: &Context<'_>, out: &mut Vec<u64>) {
        if ctx.counters.evictions.saturating_sub(self.last.evictions) >= self.interval {
            self.end_interval(ctx.counters);
        }
        let (degree, offset) = self.levels[self.level];
        NextNLine::propose(ctx.line, degree, offset, ctx.lines, out);
    }

    fn stats(&self) -> serde_json::Value {
        json!({
            "level": self.level + 1,
            "degree": self.levels[self.level].0,
            "offset": self.levels[self.level].1,
            "intervals": self.intervals,
            "level_ups": self.ups,
            "level_downs": self.downs,
            "accuracy": self.accuracy,
            "lateness": self.lateness,
            "pollution": self.pollution,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fdp(interval: u64) -> FeedbackDirected {
        let t = toml::from_str(&format!("fdp_interval = {interval}")).unwrap();
        FeedbackDirected::from_params(&Params::resolve(PARAMS, Some(&t)).unwrap()).unwrap()
    }

    #[test]
    fn table_2() {
        assert_eq!(decision(Accuracy::High, true, true), 1);
        assert_eq!(decision(Accuracy::High, false, true), -1);
        assert_eq!(decision(Accuracy::Medium, true, false), 1);
        assert_eq!(decision(Accuracy::Medium, true, true), -1);
        assert_eq!(decision(Accuracy::Low, false, false), 0);
        assert_eq!(decision(Accuracy::Low, true, false), -1);
    }

    #[test]
    fn accurate_late_prefetching_climbs_inaccurate_polluting_descends() {
        let mut f = fdp(10);
        let mut out = Vec::new();
        // Level 4 = (4, 32): lines L+33 ..= L+36.
        let c = Counters::default();
        f.on_trigger(&Context { line: 0, miss: true, lines: 1 << 30, counters: &c }, &mut out);
        assert_eq!(out, vec![33, 34, 35, 36]);
        // Interval 1: 100 issued, 100 useful, 50 late: accuracy (0 + 1) / 2 = 0.5 (medium), lateness
        // 0.25 (late), pollution 0 -> increment to level 5.
        let c = Counters {
            issued: 100,
            useful: 100,
            late: 50,
            pollution_misses: 0,
            demand_misses: 10,
            evictions: 10,
            prefetched_hits: 0,
        };
        out.clear();
        f.on_trigger(&Context { line: 0, miss: true, lines: 1 << 30, counters: &c }, &mut out);
        assert_eq!(f.level, 4);
        assert_eq!(out, vec![65, 66, 67, 68]);
        // Interval 2: nothing useful, every demand miss polluted: accuracy 0.25 (low) -> decrement.
        let c2 = Counters {
            issued: 200,
            useful: 100,
            late: 50,
            pollution_misses: 10,
            demand_misses: 20,
            evictions: 20,
            prefetched_hits: 0,
        };
        f.on_trigger(&Context { line: 0, miss: true, lines: 1 << 30, counters: &c2 }, &mut out);
        assert_eq!(f.level, 3);
        assert!((f.accuracy - 0.25).abs() < 1e-12 && (f.pollution - 0.5).abs() < 1e-12);
    }
}
