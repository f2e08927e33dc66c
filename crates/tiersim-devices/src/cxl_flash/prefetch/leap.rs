//! Leap (Maruf and Chowdhury, "Effectively Prefetching Remote Memory with Leap", USENIX ATC
//! 2020), Algorithm 1, on demand misses: the deltas between consecutive missing lines go into a
//! history of `leap_history` entries; FindTrend looks for a Boyer-Moore majority delta in the
//! newest history/`leap_split` entries, doubling the window up to the whole history. The window
//! size follows prefetch hits: with none since the last prefetch, one line if the miss follows the
//! current trend, else none; with h hits, h + 1 rounded up to a power of two, at most
//! `leap_max_window`, never shrinking by more than half at once. With a trend, Leap reads the
//! window along it; without one, along the last trend found. Deviation: the trend is looked for
//! at every miss (the paper only does when the window is open), since "follows the current
//! trend" needs a current trend. MQSim_CXL's Leap never updates its vote (its bug B5); this one does.

use serde_json::json;
use tiersim_core::{Error, ParamKind, ParamSpec, Params, PluginInfo, Result};

use super::{Context, Prefetcher};

pub const PARAMS: &[ParamSpec] = &[
    ParamSpec::new("leap_history", ParamKind::Int, "32", "leap: deltas kept in the access history (Leap: 32)")
        .min(2.0)
        .max(65536.0),
    ParamSpec::new(
        "leap_split",
        ParamKind::Int,
        "8",
        "leap: the first trend window is history / split (Leap: N_split = 8)",
    )
    .min(1.0)
    .max(65536.0),
    ParamSpec::new(
        "leap_max_window",
        ParamKind::Int,
        "8",
        "leap: largest prefetch window in lines (Leap: 8; MQSim_CXL: 16)",
    )
    .min(1.0)
    .max(4096.0),
];

pub const INFO: PluginInfo = PluginInfo {
    name: "leap",
    summary: "majority delta over a doubling window of the miss history; window grows with prefetch hits",
    source: "Maruf and Chowdhury, Effectively Prefetching Remote Memory with Leap, USENIX ATC 2020 (Algorithm 1)",
    params: PARAMS,
};

pub fn build(p: &Params) -> Result<Box<dyn Prefetcher>> {
    Ok(Box::new(Leap::from_params(p)?))
}

pub struct Leap {
    /// Ring of deltas, newest at `head - 1`.
    history: Vec<i64>,
    head: usize,
    filled: usize,
    split: usize,
    max_window: u64,
    last_line: Option<u64>,
    /// Last trend found (0 none yet).
    trend: i64,
    window: u64,
    /// Prefetched lines used since the last prefetch decision.
    hits: u64,
    trends_found: u64,
}

impl Leap {
    pub fn from_params(p: &Params) -> Result<Leap> {
        let h = p.uint("leap_history") as usize;
        let split = p.uint("leap_split") as usize;
        if split > h {
            return Err(Error::config("leap_split", format!("{split} is larger than leap_history {h}")));
        }
        Ok(Leap {
            history: vec![0; h],
            head: 0,
            filled: 0,
            split,
            max_window: p.uint("leap_max_window"),
            last_line: None,
            trend: 0,
            window: 0,
            hits: 0,
            trends_found: 0,
        })
    }

    /// The newest `w` deltas, newest first.
    fn recent(&self, w: usize) -> impl Iterator<Item = i64> + '_ {
        let n = self.history.len();
        (1..=w).map(move |k| self.history[(self.head + n - k) % n])
    }

    /// Algorithm 1 FindTrend: a majority delta in a window doubling from history / split.
    pub fn find_trend(&self) -> Option<i64> {
        let n = self.history.len();
        let mut w = (n / self.split).max(1);
        loop {
            let w_eff = w.min(self.filled);
            if w_eff > 0 {
                let (mut cand, mut vote) = (0i64, 0i64);
                for d in self.recent(w_eff) {
                    if vote == 0 {
                        cand = d;
                        vote = 1;
                    } else if d == cand {
                        vote += 1;
                    } else {
                        vote -= 1;
                    }
                }
                let count = self.recent(w_eff).filter(|&d| d == cand).count();
                if cand != 0 && count * 2 > w_eff {
                    return Some(cand);
                }
            }
            if w >= n {
                return None;
            }
            w *= 2;
        }
    }

    /// Algorithm 1 GetPrefetchWindowSize.
    fn window_size(&mut self, follows_trend: bool) -> u64 {
        let mut pw = if self.hits == 0 { u64::from(follows_trend) } else { (self.hits + 1).next_power_of_two() };
        pw = pw.min(self.max_window);
        if pw < self.window / 2 {
            pw = self.window / 2;
        }
        self.hits = 0;
        self.window = pw;
        pw
    }
}

impl Prefetcher for Leap {
    fn on_trigger(&mut self, ctx: &Context<'_>, out: &mut Vec<u64>) {
        if !ctx.miss {
            self.hits += 1;
            return;
        }
        let Some(last) = self.last_line.replace(ctx.line) else { return };
        let delta = ctx.line as i64 - last as i64;
        let n = self.history.len();
        self.history[self.head] = delta;
        self.head = (self.head + 1) % n;
        self.filled = (self.filled + 1).min(n);
        if let Some(t) = self.find_trend() {
            self.trend = t;
            self.trends_found += 1;
        }
        let pw = self.window_size(self.trend != 0 && delta == self.trend);
        if pw == 0 || self.trend == 0 {
            return;
        }
        for k in 1..=pw as i64 {
            let l = ctx.line as i64 + k * self.trend;
            if l < 0 || l as u64 >= ctx.lines {
                break;
            }
            out.push(l as u64);
        }
    }

    fn stats(&self) -> serde_json::Value {
        json!({"trend": self.trend, "window": self.window, "trends_found": self.trends_found})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cxl_flash::prefetch::Counters;

    fn leap() -> Leap {
        Leap::from_params(&Params::defaults(PARAMS).unwrap()).unwrap()
    }

    fn miss(l: &mut Leap, line: u64) -> Vec<u64> {
        let c = Counters::default();
        let mut out = Vec::new();
        l.on_trigger(&Context { line, miss: true, lines: 1 << 40, counters: &c }, &mut out);
        out
    }

    #[test]
    fn majority_trend_and_window_growth() {
        let mut l = leap();
        // The first miss has no delta yet.
        assert!(miss(&mut l, 100).is_empty());
        // Delta 3 is the majority of a one-entry window and the miss follows it: window 1.
        assert_eq!(miss(&mut l, 103), vec![106]);
        // Three prefetch hits: window (3 + 1) -> 4 lines. The deltas 3, 6 have no majority, so
        // Leap goes along the last trend found, 3.
        let c = Counters::default();
        for _ in 0..3 {
            l.on_trigger(&Context { line: 106, miss: false, lines: 1 << 40, counters: &c }, &mut Vec::new());
        }
        assert_eq!(miss(&mut l, 109), vec![112, 115, 118, 121]);
        // Off the trend, no hits: the window would drop to 0, but it only shrinks by half, to 2.
        assert_eq!(miss(&mut l, 500), vec![503, 506]);
        assert_eq!(l.find_trend(), None);
    }

    #[test]
    fn no_majority_in_noise() {
        let mut l = leap();
        for (i, line) in [10u64, 50, 20, 90, 15, 300, 7, 1000, 2, 77].iter().enumerate() {
            miss(&mut l, *line + i as u64);
        }
        assert_eq!(l.find_trend(), None);
    }
}
